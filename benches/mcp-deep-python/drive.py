"""Drives a built patch-candidate-mcp over stdio: C concurrent validate_app_bundle calls on one
workspace, then reports the server's peak resident memory (VmHWM), its CPU time and the wall time.

Usage: drive.py BINARY WORKSPACE [CONCURRENT_CALLS]
Prints one JSON object. Linux only (reads /proc/PID/status and /proc/PID/stat).
"""

import json
import os
import subprocess
import sys
import time


def main():
    binary, workspace = sys.argv[1], sys.argv[2]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    proc = subprocess.Popen(
        [binary, "--workspace-root", workspace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    def read():
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("server closed stdout")
        return json.loads(line)

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}})
    read()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    started = time.monotonic()
    for i in range(calls):
        send({"jsonrpc": "2.0", "id": 1 + i, "method": "tools/call",
              "params": {"name": "validate_app_bundle", "arguments": {}}})
    verdicts = {}
    while len(verdicts) < calls:
        answer = read()
        if "id" not in answer or answer["id"] == 0:
            continue
        result = answer["result"]["structuredContent"]["result"]
        python = next(c for c in result["fallback_checks"] if c["name"] == "python_syntax")
        verdicts[answer["id"]] = {
            "status": python["status"],
            "failures": len(python["failures"]),
            "not_checked": len(python["not_checked"]),
        }
    wall = time.monotonic() - started
    with open(f"/proc/{proc.pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    proc.stdin.close()
    proc.wait(timeout=60)
    print(json.dumps({
        "calls": calls,
        "peak_rss_mib": round(int(status["VmHWM"].split()[0]) / 1024, 1),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_call": round(cpu / calls, 2),
        "wall_s": round(wall, 2),
        "python_syntax": sorted({json.dumps(v, sort_keys=True) for v in verdicts.values()}),
    }))


if __name__ == "__main__":
    main()
