#!/usr/bin/env python3
"""Writes the archive benchmark inputs into DIR (deterministic):

  full.zip          the full budget: 50 entries bench/f00.txt..f49.txt of printable ASCII, the
                    archive exactly 16,777,216 bytes (canonical layout, written with zipfile)
  forged-zip64.zip  a ZIP64 end record declaring 1,000,000 entries over a real central directory
                    of 1,000,000 headers (classic end record holds the 0xFFFF sentinels)
  forged-count.zip  the same 1,000,000-header directory under a classic end record whose count
                    is forged to 2 (the reference test's shape, at scale)
"""

import io
import os
import random
import struct
import sys
import zipfile
import zlib

BUDGET = 16_777_216


def full(path):
    names = [f"bench/f{i:02d}.txt" for i in range(50)]
    overhead = 22 + sum(30 + 46 + 2 * len(n) for n in names)
    per = (BUDGET - overhead) // 50
    extra = BUDGET - overhead - per * 50
    rng = random.Random(20261129)
    alphabet = bytes(range(0x20, 0x7F)) + b"\n"
    table = bytes(alphabet[i % len(alphabet)] for i in range(256))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for i, name in enumerate(names):
            size = per + (extra if i == 49 else 0)
            data = rng.randbytes(size).translate(table)
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = 0x81A40000
            z.writestr(info, data)
    data = buf.getvalue()
    assert len(data) == BUDGET, len(data)
    with open(path, "wb") as f:
        f.write(data)


def forged(path_zip64, path_count, n=1_000_000):
    body = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, zlib.crc32(b"x"), 1, 1, 5, 0) + b"a.txt" + b"x"
    headers = []
    for i in range(n):
        name = f"f{i:07d}".encode()
        headers.append(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 0x0314, 20, 0, 0, 0, 0x21,
                                   zlib.crc32(b"x"), 1, 1, len(name), 0, 0, 0, 0, 0x81A40000, 0) + name)
    cd = b"".join(headers)
    z64_end = struct.pack("<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, len(cd), len(body))
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, len(body) + len(cd), 1)
    classic = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path_zip64, "wb") as f:
        f.write(body + cd + z64_end + locator + classic)
    count2 = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 2, 2, len(cd), len(body), 0)
    with open(path_count, "wb") as f:
        f.write(body + cd + count2)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    full(os.path.join(out, "full.zip"))
    forged(os.path.join(out, "forged-zip64.zip"), os.path.join(out, "forged-count.zip"))


if __name__ == "__main__":
    main()
