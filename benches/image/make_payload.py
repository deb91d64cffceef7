#!/usr/bin/env python3
"""Writes a turn payload (reference §10.3 key order) with N files to stdout.

usage: make_payload.py FILES BYTES_PER_FILE MODE
FILES counts editable (FILES - 5) plus 5 read-only inspection files; MODE is the agent mode marker
(`noop`, `edit-all`, ...).
"""
import json
import sys

files, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
line = "const value = 42; // padding line for the benchmark payload\n"
body = (line * (size // len(line) + 1))[:size]
editable = {f"app/src/module_{i:02d}.js": body for i in range(files - 5)}
read_only = {f"tests/test_{i:02d}.py": body for i in range(5)}
payload = {
    "app_id": "bench",
    "build_family": "app_bundle",
    "build_record_id": "bench-1",
    "change_class": "patch",
    "raw_user_request": f"Benchmark turn.\nmode: {mode}",
    "files": editable,
    "read_only_files": read_only,
}
sys.stdout.write(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
