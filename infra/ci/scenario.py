#!/usr/bin/env python3
"""Runs the scenario suite (tests/scenario, one test binary) as several processes at once.

Within one process the Docker cases take a process-wide lock and run one after another. Every
case counts only its own turn containers (those of its process and its children), so two
processes can share the daemon: the suite is split by module, and up to `--jobs` module processes
run at once (longest first, by the weights below). The modules in EXCLUSIVE assert facts about
every container on the daemon (a janitor's whole sweep, every job-labelled container): they run
first, alone.

With more than one job, each module process runs in its own PID namespace (`unshare --pid
--fork --mount-proc`, as root): the container crate labels every turn with its owner's PID
namespace, so a module counts only the turns of its own namespace, never those a killed `serve` of
a module beside it left behind (owner dead, not yet swept). Per-process names on the daemon (image
tags, container names) carry the namespace too (tests/scenario/support/docker.rs, `process_tag`).
Two at a time by default (`--jobs`, PATCH_CANDIDATE_SCENARIO_JOBS; 1 runs every module in this
PID namespace, one after another).

Usage: infra/ci/scenario.py [--jobs N] [--binary PATH] [MODULE ...]
Without --binary, the test binary is built (release, locked, workspace-wide as the rest of the
test run builds, so nothing compiles again) and found through cargo's JSON messages. The environment passes through (PATCH_CANDIDATE_REQUIRE_DOCKER, the Docker tally, ...).
Each module's output goes to a log that is printed when the module fails; exit status 1 when any
module failed, 2 on a usage or build error.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS_DIR = os.path.join(ROOT, "tests")

# Modules that assert over the whole daemon: run alone, before the others.
EXCLUSIVE = ("lifecycle", "service_janitor")

# Serial wall seconds of the heaviest modules (measured on the 2-core CI machine kind; see
# BENCHMARKS.md, "CI wall time"). Only the order matters: the longest start first so the last
# to finish is a short one. Modules not listed weigh 1.
WEIGHTS = {
    "live_commands": 250, "live_claude": 86, "live_gemini": 83, "gates": 77,
    "service_database": 62, "runtimes": 61, "real_turn": 29, "live_worker": 29,
    "gate_environments": 28, "service": 25, "live_container": 22, "proof_image": 21,
    "hostile": 21, "service_hostile_clients": 20, "service_gates": 15, "service_live": 10,
}


def build_binary():
    cmd = [
        # --workspace, not -p scenario-tests: the features of the whole workspace's test build
        # (images/build.sh, the unit tests), so no crate compiles a second time.
        "cargo", "test", "--release", "--locked", "--workspace",
        "--test", "scenario", "--no-run", "--message-format", "json",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        sys.exit(f"scenario: cargo test --no-run failed with status {proc.returncode}")
    found = None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        target = msg.get("target") or {}
        if msg.get("reason") == "compiler-artifact" and target.get("name") == "scenario" \
                and "test" in target.get("kind", []) and msg.get("executable"):
            found = msg["executable"]
    if not found:
        sys.exit("scenario: cargo named no scenario test binary")
    return found


def list_tests(binary):
    out = subprocess.run([binary, "--list", "--format", "terse"], cwd=TESTS_DIR,
                         stdout=subprocess.PIPE, check=True, text=True).stdout
    modules = {}
    for line in out.splitlines():
        if not line.endswith(": test"):
            continue
        name = line[: -len(": test")]
        modules.setdefault(name.split("::", 1)[0], []).append(name)
    return modules


# PID 1 of a module's namespace is a shell that runs the test binary as its child and reaps the
# processes orphaned to it; --kill-child ends the namespace when `unshare` itself is killed.
NAMESPACED = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
              "sh", "-c", '"$@"; exit $?', "sh"]


class Run:
    def __init__(self, binary, module, names, logdir, namespaced):
        self.module = module
        self.count = len(names)
        self.log_path = os.path.join(logdir, f"{module}.log")
        self.log = open(self.log_path, "wb")
        self.started = time.monotonic()
        # --exact with every full name: a module filter as a substring could match another's.
        cmd = [binary, "--exact", *names]
        self.proc = subprocess.Popen(NAMESPACED + cmd if namespaced else cmd, cwd=TESTS_DIR,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def finish(self):
        self.log.close()
        self.seconds = time.monotonic() - self.started
        return self.proc.returncode

    def summary(self):
        """libtest's own count line ("N passed; M failed; K ignored; ...")."""
        with open(self.log_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        for line in reversed(lines):
            if line.startswith("test result:"):
                return line.split(". ", 1)[-1].split("; finished")[0]
        return f"{self.count} tests, no result line"

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int,
                        default=int(os.environ.get("PATCH_CANDIDATE_SCENARIO_JOBS", "2")))
    parser.add_argument("--binary")
    parser.add_argument("modules", nargs="*")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    namespaced = args.jobs > 1
    if namespaced and os.geteuid() != 0:
        parser.error("--jobs above 1 needs root (a PID namespace per module); use --jobs 1")
    binary = os.path.abspath(args.binary) if args.binary else build_binary()
    modules = list_tests(binary)
    if args.modules:
        unknown = [m for m in args.modules if m not in modules]
        if unknown:
            parser.error(f"no such module: {', '.join(unknown)}")
        modules = {m: modules[m] for m in args.modules}
    exclusive = [m for m in EXCLUSIVE if m in modules]
    shared = sorted((m for m in modules if m not in EXCLUSIVE),
                    key=lambda m: (-WEIGHTS.get(m, 1), m))
    # Each entry: (module, slots it needs): an exclusive module waits for every slot.
    queue = [(m, args.jobs) for m in exclusive] + [(m, 1) for m in shared]

    logdir = tempfile.mkdtemp(prefix="scenario-logs-")
    running, failed, done = [], [], []
    started = time.monotonic()

    def stop(signum, _frame):
        for r in running:
            r.kill()
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while queue or running:
        busy = sum(need for _, need in ((r.module, r.need) for r in running))
        if queue and busy + queue[0][1] <= args.jobs:
            module, need = queue.pop(0)
            r = Run(binary, module, modules[module], logdir, namespaced)
            r.need = need
            running.append(r)
            continue
        time.sleep(0.2)
        for r in [r for r in running if r.proc.poll() is not None]:
            running.remove(r)
            status = r.finish()
            done.append(r)
            verdict = "ok" if status == 0 else f"FAILED (status {status})"
            print(f"scenario: {r.module}: {verdict} in {r.seconds:.0f} s; {r.summary()}",
                  flush=True)
            if status != 0:
                failed.append(r)
                with open(r.log_path, "rb") as f:
                    sys.stdout.flush()
                    sys.stdout.buffer.write(f.read())
                    sys.stdout.flush()
    total = time.monotonic() - started
    serial = sum(r.seconds for r in done)
    print(f"scenario: {len(done)} modules in {total:.0f} s with {args.jobs} jobs "
          f"({serial:.0f} s of module time); logs in {logdir}")
    if failed:
        print("scenario: failed: " + ", ".join(r.module for r in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
