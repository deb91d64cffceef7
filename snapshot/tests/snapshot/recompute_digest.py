#!/usr/bin/env python3
"""Independent recomputation of the patch-candidate snapshot digest (docs/SNAPSHOT.md).

usage: recompute_digest.py REPO COMMIT REPOSITORY_FULL_NAME
Prints the digest on the first line and the canonical document on the second. Uses only git and
the Python standard library; shares no code with the Rust implementation.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata

SCHEMA = "patch_candidate.repository_snapshot.v1"
RESERVED = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9¹²³]|LPT[1-9¹²³])(\.|$)", re.IGNORECASE)
DRIVE = re.compile(r"^[A-Za-z]:")


def git(repo, *args, data=None):
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_NO_REPLACE_OBJECTS": "1", "PATH": os.environ.get("PATH", "")}
    return subprocess.run(["git", "-C", repo, *args], input=data, env=env,
                          check=True, capture_output=True).stdout


def portable(raw):
    """mozaiks.portable_path.v1 plus the canonical rule (NFC, no surrounding whitespace)."""
    if not raw or len(raw) > 4096 or "\0" in raw or "\\" in raw:
        return False
    if raw.startswith("/") or raw.startswith("~") or DRIVE.match(raw):
        return False
    if unicodedata.normalize("NFC", raw) != raw or raw.strip() != raw:
        return False
    for seg in raw.split("/"):
        if not seg or seg in (".", "..") or len(seg) > 255:
            return False
        if any(ord(c) < 0x20 or ord(c) == 0x7F or c in '<>:"|?*[' for c in seg):
            return False
        if seg.endswith((".", " ")) or seg.startswith(" ") or RESERVED.match(seg):
            return False
    return True


def main():
    repo, commit, full_name = sys.argv[1:4]
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    raw_entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, typ, oid = meta.decode("ascii").split(" ")
        raw_entries.append((path, mode, typ, oid))
    raw_entries.sort(key=lambda e: e[0])

    blobs = {}
    wanted = sorted({oid for _, _, typ, oid in raw_entries if typ == "blob"})
    out = git(repo, "cat-file", "--batch", data="".join(o + "\n" for o in wanted).encode())
    pos = 0
    for oid in wanted:
        nl = out.index(b"\n", pos)
        got, typ, size = out[pos:nl].decode("ascii").split(" ")
        assert got == oid and typ == "blob"
        data = out[nl + 1:nl + 1 + int(size)]
        pos = nl + 1 + int(size) + 1
        try:
            data.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        blobs[oid] = (len(data), "sha256:" + hashlib.sha256(data).hexdigest(), utf8)

    keys = [unicodedata.normalize("NFC", p.decode("utf-8", "replace")).casefold()
            for p, _, _, _ in raw_entries]
    counts = {}
    dirs = set()
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
        parts = key.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))

    def collides(key):
        parts = key.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts))]
        return counts[key] > 1 or key in dirs or any(p in counts for p in prefixes)

    entries = []
    for (path, mode, typ, oid), key in zip(raw_entries, keys):
        blob = blobs.get(oid) if typ == "blob" else None
        try:
            text = path.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:
            kind = "non_utf8_path"
        elif not portable(text):
            kind = "non_portable_path"
        elif (mode, typ) == ("160000", "commit"):
            kind = "submodule"
        elif (mode, typ) == ("120000", "blob"):
            kind = "symlink"
        elif (mode, typ) == ("100755", "blob"):
            kind = "executable"
        elif (mode, typ) != ("100644", "blob"):
            kind = "unsupported_mode"
        elif collides(key):
            kind = "case_fold_collision"
        elif not blob[2]:
            kind = "non_utf8_content"
        else:
            kind = "file"
        entries.append({
            "path": text,
            "path_hex": path.hex(),
            "mode": mode,
            "object_id": oid,
            "kind": kind,
            "size": blob[0] if blob else None,
            "content_sha256": blob[1] if blob else None,
        })

    doc = {"schema": SCHEMA, "repository_full_name": full_name, "commit": commit,
           "entries": entries}
    raw = json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
    sys.stdout.write("sha256:" + hashlib.sha256(raw).hexdigest() + "\n")
    sys.stdout.write(raw.decode("utf-8") + "\n")


if __name__ == "__main__":
    main()
