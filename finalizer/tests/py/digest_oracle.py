#!/usr/bin/env python3
"""Independent oracle for `repository_patch_digest` (reference section 9.4).

Reads a JSON list of candidate documents on stdin and writes a JSON list on stdout: for each
candidate {"digest": "sha256:<hex>", "canonical": "<the canonical text>"} computed with the
reference canonicalisation: changed files sorted by path, the three gate lists de-duplicated and
sorted, then json.dumps(..., ensure_ascii=False, sort_keys=True, separators=(",", ":")).
"""
import hashlib
import json
import sys

GATES = ("required_validation_gates", "required_security_gates", "required_ci_checks")


def digest(candidate):
    canonical = dict(candidate)
    for name in GATES:
        canonical[name] = sorted(set(candidate[name]))
    canonical["changed_files"] = sorted(candidate["changed_files"], key=lambda f: f["path"])
    for change in canonical["changed_files"]:
        content = change.get("content")
        if content is not None:
            expected = "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()
            assert change["new_sha256"] == expected, "content differs from file hash"
    text = json.dumps(
        {"digest_schema": "mozaiks.refinement.repository_patch_digest.v1", "candidate": canonical},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )
    return {"digest": "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest(), "canonical": text}


def main():
    json.dump([digest(c) for c in json.load(sys.stdin)], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
