#!/usr/bin/env python3
"""Independent oracle for the finalizer's unified diffs (reference section 9.3).

Reads a JSON list of {"path", "before", "after"} (before/after may be null) on stdin and writes a
JSON list of diff strings on stdout, computed with CPython's difflib exactly as the reference
`_unified_diff` does. The one documented departure is mirrored here: when either side contains a
line separator that Git does not know (lone CR, VT, FF, FS, GS, RS, NEL, U+2028, U+2029) both
sides are split on "\\n" only, so the diff stays applicable with `git apply`.
"""
import difflib
import json
import re
import sys

GIT_UNKNOWN_SEPARATOR = re.compile("\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def split_lf(text):
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified(path, before, after):
    a_text = before or ""
    b_text = after or ""
    git_lines = bool(GIT_UNKNOWN_SEPARATOR.search(a_text) or GIT_UNKNOWN_SEPARATOR.search(b_text))
    if git_lines:
        a, b = split_lf(a_text), split_lf(b_text)
    else:
        a, b = a_text.splitlines(keepends=True), b_text.splitlines(keepends=True)
    fromfile = "a/" + path if before is not None else "/dev/null"
    tofile = "b/" + path if after is not None else "/dev/null"
    out = []
    for line in difflib.unified_diff(a, b, fromfile, tofile, lineterm="\n"):
        if not line.endswith("\n"):
            line = line + "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


def main():
    cases = json.load(sys.stdin)
    json.dump([unified(c["path"], c["before"], c["after"]) for c in cases], sys.stdout,
              ensure_ascii=False)


if __name__ == "__main__":
    main()
