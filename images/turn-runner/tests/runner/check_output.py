#!/usr/bin/env python3
"""Independent check of one turn-runner output document (reference §10.6), using only the Python
standard library: exactly the two top-level keys in order, standard padded base64, a ZIP that
Python's zipfile reads with every CRC correct, entry names equal to the expected set, and changed
file contents equal to the archived bytes.

usage: check_output.py EXPECTED_ENTRY[,...] < output.json    (prints "ok" or exits 1)
"""
import base64
import binascii
import io
import json
import sys
import zipfile


def fail(msg):
    print(msg)
    sys.exit(1)


def main():
    raw = sys.stdin.buffer.read()
    if raw.count(b"\n") != 1 or not raw.endswith(b"\n"):
        fail("stdout is not exactly one line")
    pairs = json.loads(raw, object_pairs_hook=lambda p: p)
    keys = [k for k, _ in pairs]
    if keys != ["proposal", "workspace_archive_base64"]:
        fail(f"top-level keys {keys}")
    doc = dict(pairs)
    proposal = dict(doc["proposal"])
    if proposal["status"] != "completed":
        fail(f"status {proposal['status']}")
    try:
        data = base64.b64decode(doc["workspace_archive_base64"], validate=True)
    except binascii.Error:
        fail("archive is not standard base64")
    if base64.b64encode(data).decode() != doc["workspace_archive_base64"]:
        fail("base64 is not canonical")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        if zf.testzip() is not None:
            fail("CRC mismatch")
        names = sorted(zf.namelist())
        expected = sorted(sys.argv[1].split(","))
        if names != expected:
            fail(f"entries {names} != {expected}")
        for change in proposal["changed_files"]:
            change = dict(change)
            if change["op"] == "delete":
                if change["path"] in names:
                    fail(f"deleted {change['path']} still archived")
                continue
            if zf.read(change["path"]).decode("utf-8") != change["content"]:
                fail(f"{change['path']} content differs from the archive")
    print("ok")


main()
