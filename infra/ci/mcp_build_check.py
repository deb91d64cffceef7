"""Checks the build of the shipped MCP server from cargo's own record of it.

Reads the `--message-format=json` output of `cargo build -p mcp --bin patch-candidate-mcp` and
fails unless the server binary was linked from a graph without side effects: no Docker client,
job store or worker crate, the lower crates (snapshot, archive, finalizer) without their
`effects` feature, and tokio without `process` and `fs`. These are the features cargo actually
compiled with, so a build that unified features with the rest of the workspace fails here.

Usage: mcp_build_check.py BUILD_JSONL EXPECTED_BINARY
"""

import json
import os
import sys

BANNED_CRATES = {"container", "turn", "service", "patch-candidate", "turn-runner", "gate-runner",
                 "scenario-tests", "bollard", "hyper", "reqwest", "rusqlite", "libsqlite3-sys",
                 "agent-client-protocol", "tempfile"}
LOWER_CRATES = {"snapshot", "archive", "finalizer"}
BANNED_TOKIO_FEATURES = {"process", "fs"}


def package_name(package_id):
    # "registry+https://...#tokio@1.54.1", or "path+file:///.../snapshot#0.1.0" when the name is
    # the directory's.
    url, _, fragment = package_id.partition("#")
    if "@" in fragment:
        return fragment.split("@", 1)[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def main():
    build, expected = sys.argv[1], os.path.realpath(sys.argv[2])
    features = {}
    executables = []
    for line in open(build, encoding="utf-8"):
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        name = package_name(message["package_id"])
        features.setdefault(name, set()).update(message["features"])
        if message.get("executable"):
            executables.append(os.path.realpath(message["executable"]))
    failures = []
    if executables != [expected]:
        failures.append(f"built executables {executables}, expected only {expected}")
    for needed in LOWER_CRATES | {"mcp", "rmcp", "tokio"}:
        if needed not in features:
            failures.append(f"{needed} is not in the build")
    for banned in sorted(BANNED_CRATES & features.keys()):
        failures.append(f"{banned} is in the build")
    for lower in sorted(LOWER_CRATES & features.keys()):
        if "effects" in features[lower]:
            failures.append(f"{lower} was built with effects")
    for feature in sorted(BANNED_TOKIO_FEATURES & features.get("tokio", set())):
        failures.append(f"tokio was built with {feature}")
    for failure in failures:
        print(f"mcp-build: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"mcp-build: {len(features)} packages, none writes files or spawns processes "
          f"(tokio: {','.join(sorted(features['tokio']))})", file=sys.stderr)


if __name__ == "__main__":
    main()
