#!/usr/bin/env python3
"""A raw ACP agent written against the wire format only (newline-delimited JSON-RPC 2.0), with no
ACP library: an independent peer for the runner. It records every response it gets and reports
them as its reply text.

usage: raw_agent.py SCENARIO    (garbage | init-error | silent)
"""
import json
import sys
import time

SCENARIO = sys.argv[1]
SESSION = "raw-session"


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def send_raw(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def call(req_id, method, params, responses):
    send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
    while True:
        msg = read()
        if msg.get("id") == req_id and "method" not in msg:
            entry = {"method": method, "ok": "result" in msg, "error": (msg.get("error") or {}).get("message")}
            if method == "session/request_permission":
                entry["outcome"] = (msg.get("result") or {}).get("outcome")
            responses.append(entry)
            return msg


def main():
    cwd = None
    while True:
        msg = read()
        method, req_id = msg.get("method"), msg.get("id")
        if method == "initialize":
            if SCENARIO == "init-error":
                send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32603, "message": "refusing"}})
                continue
            caps = msg["params"].get("clientCapabilities", {})
            send({"jsonrpc": "2.0", "id": req_id, "result": {"protocolVersion": 1, "agentCapabilities": {}, "_seen": caps}})
        elif method == "session/new":
            cwd = msg["params"]["cwd"]
            send({"jsonrpc": "2.0", "id": req_id, "result": {"sessionId": SESSION}})
        elif method == "session/prompt":
            if SCENARIO == "silent":
                time.sleep(3600)
            responses = []
            send_raw("this is not json")
            send_raw("[1, 2, 3]")
            send({"jsonrpc": "2.0", "id": 424242, "result": {"unsolicited": True}})
            call(101, "x/unknown_method", {"sessionId": SESSION}, responses)
            call(102, "terminal/create", {"sessionId": SESSION, "command": "/bin/sh"}, responses)
            call(103, "fs/write_text_file", {"sessionId": SESSION, "path": "/etc/raw-escape.txt", "content": "x"}, responses)
            call(104, "fs/write_text_file", {"sessionId": SESSION, "path": cwd + "/../raw-escape.txt", "content": "x"}, responses)
            call(105, "fs/read_text_file", {"sessionId": SESSION, "path": cwd + "/app/app.json"}, responses)
            call(106, "fs/write_text_file", {"sessionId": SESSION, "path": cwd + "/app/app.json", "content": "{\"raw\": true}\n"}, responses)
            call(107, "session/request_permission", {
                "sessionId": SESSION,
                "toolCall": {"toolCallId": "t1"},
                "options": [
                    {"optionId": "yes", "name": "Yes", "kind": "allow_always"},
                    {"optionId": "no", "name": "No", "kind": "reject_always"},
                ],
            }, responses)
            send({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": SESSION,
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": json.dumps(responses)}},
            }})
            send({"jsonrpc": "2.0", "id": req_id, "result": {"stopReason": "end_turn"}})
        elif req_id is not None and method is not None:
            send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": "method not found"}})


main()
