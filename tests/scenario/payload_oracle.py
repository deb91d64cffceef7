"""Independent reference serialisation of the container stdin payload (reference section 10.3).

usage: payload_oracle.py REPO APPROVAL_JSON EDITABLE,... READ_ONLY,...
Prints the sha256 hex and the byte length of json.dumps(payload, ensure_ascii=False,
separators=(",", ":")) with the keys in the reference order, reading files from the committed tree.
"""
import hashlib
import json
import subprocess
import sys

repo, approval_path, editable, read_only = sys.argv[1:5]
approval = json.load(open(approval_path, encoding="utf-8"))


def show(path):
    out = subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True)
    return out.stdout.decode("utf-8")


payload = {
    "app_id": approval["app_id"],
    "build_family": "app_bundle",
    "build_record_id": approval["build_registry_id"],
    "change_class": "patch",
    "raw_user_request": approval["raw_request"],
    "files": {p: show(p) for p in sorted(filter(None, editable.split(",")))},
    "read_only_files": {p: show(p) for p in sorted(filter(None, read_only.split(",")))},
}
if approval.get("create_paths") or approval.get("delete_paths"):
    payload["create_paths"] = sorted(approval.get("create_paths", []))
    payload["delete_paths"] = sorted(approval.get("delete_paths", []))
data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
print(hashlib.sha256(data).hexdigest(), len(data))
