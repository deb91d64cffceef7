#!/usr/bin/env python3
"""Independent oracle over Python's zipfile.

  write: stdin is JSON [[[name, content_hex], ...], ...]; writes each set with zipfile using the
         canonical settings (STORED, DOS epoch, create_system 3, mode 0644, sorted by UTF-8 name)
         and prints a JSON list of hex archives.
  read:  stdin is JSON [archive_hex, ...]; opens each with zipfile, verifies every CRC, and prints
         [[[name, size, sha256_hex], ...], ...].
"""

import hashlib
import io
import json
import sys
import zipfile


def write(sets):
    out = []
    for entries in sets:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
            for name, content_hex in sorted(entries, key=lambda e: e[0].encode("utf-8")):
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.create_system = 3
                info.external_attr = 0x81A40000
                info.compress_type = zipfile.ZIP_STORED
                z.writestr(info, bytes.fromhex(content_hex))
        out.append(buf.getvalue().hex())
    return out


def read(archives):
    out = []
    for archive_hex in archives:
        with zipfile.ZipFile(io.BytesIO(bytes.fromhex(archive_hex))) as z:
            assert z.testzip() is None
            rows = []
            for info in z.infolist():
                data = z.read(info)
                rows.append([info.filename, len(data), hashlib.sha256(data).hexdigest()])
            out.append(rows)
    return out


def main():
    mode = sys.argv[1]
    doc = json.load(sys.stdin)
    result = write(doc) if mode == "write" else read(doc)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
