#!/usr/bin/env python3
"""A raw ACP agent for live turns that floods the runner's loopback listener: on the prompt it
opens N connections to the base URL of the `gw` provider in its `CODEX_CONFIG`, writes a
request head on each, waits, counts the connections the runner closed, reports
`{"connected": C, "closed": K}` as its reply text and ends the turn.

usage: flood_agent.py N [adapter arguments]...
"""
import json
import os
import re
import socket
import sys
import time

COUNT = int(sys.argv[1])
BASE_URL = json.loads(os.environ["CODEX_CONFIG"])["model_providers"]["gw"]["base_url"]
PORT = int(re.fullmatch(r"http://127\.0\.0\.1:(\d+)/v1", BASE_URL).group(1))


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def flood():
    socks, connected = [], 0
    for _ in range(COUNT):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
        connected += 1
        try:
            s.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        except OSError:
            pass
        socks.append(s)
    time.sleep(1.0)
    closed = 0
    for s in socks:
        s.settimeout(0.2)
        try:
            if s.recv(1) == b"":
                closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
    return {"connected": connected, "closed": closed}


for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "flood"}})
    elif method == "session/prompt":
        report = flood()
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "flood",
              "update": {"sessionUpdate": "agent_message_chunk",
                         "content": {"type": "text", "text": json.dumps(report)}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
