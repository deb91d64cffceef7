#!/usr/bin/env python3
"""One host's throughput, side by side in one run: J proof turns by K parallel `patch-candidate run`
processes against the same J turns queued (`jobs submit`) and run by `serve --max-turns K`
(SQLite), for K = 1, 2, 4. Prints turns per minute and the wall time of each.

The run side is timed from the first process start to the last exit. The serve side: every job is
submitted first (not timed: the same verification a `run` does is then paid twice), then the
clock runs from the `serve` start to the first `jobs list` that reports all J completed (so it
includes the service's start-up and a <= 100 ms poll).

Usage: benches/service/throughput.py BIN_DIR [J] [ROUNDS]  (needs the proof images recorded in
the state dir named by PATCH_CANDIDATE_STATE_DIR)
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor

bin_dir = sys.argv[1]
jobs_n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
pc = os.path.join(bin_dir, "patch-candidate")
src_state = os.environ["PATCH_CANDIDATE_STATE_DIR"]
work = tempfile.mkdtemp()


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


repo = os.path.join(work, "repo")
os.makedirs(os.path.join(repo, "app"))
with open(os.path.join(repo, "app", "a.py"), "w") as f:
    f.write("x = 1\n")
git(repo, "init", "-q")
git(repo, "add", "-A")
git(repo, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "b")


def fresh_state(name):
    state = os.path.join(work, name)
    os.makedirs(state)
    shutil.copy(os.path.join(src_state, "images.json"), state)
    return dict(os.environ, PATCH_CANDIDATE_STATE_DIR=state)


def approval(env, task):
    path = os.path.join(work, f"approval-{len(os.listdir(work))}-{time.monotonic_ns()}.json")
    subprocess.run([pc, "approve", "--repo", repo, "--allow", "app/", "--task", task, "--out",
                    path], check=True, capture_output=True, env=env)
    return path


def by_run(k, r):
    env = fresh_state(f"run-{k}-{r}")
    approvals = [approval(env, f"Run {k}.{r}.{i}.") for i in range(jobs_n)]

    def one(a):
        subprocess.run([pc, "--json", "run", "--repo", repo, "--approval", a, "--no-ledger"],
                       check=True, capture_output=True, env=env)

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=k) as pool:
        list(pool.map(one, approvals))
    return time.monotonic() - t


def by_serve(k, r):
    env = fresh_state(f"serve-{k}-{r}")
    for i in range(jobs_n):
        a = approval(env, f"Queue {k}.{r}.{i}.")
        subprocess.run([pc, "--json", "jobs", "submit", "--repo", repo, "--approval", a],
                       check=True, capture_output=True, env=env)
    t = time.monotonic()
    serve = subprocess.Popen([pc, "serve", "--listen", "127.0.0.1:0", "--poll-interval", "20ms",
                              "--max-turns", str(k)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            out = subprocess.run([pc, "--json", "jobs", "list"], check=True, capture_output=True,
                                 env=env).stdout
            states = [j["state"] for j in json.loads(out)["jobs"]]
            if len(states) == jobs_n and all(s in ("completed", "failed") for s in states):
                break
            time.sleep(0.1)
        elapsed = time.monotonic() - t
        assert all(s == "completed" for s in states), states
        return elapsed
    finally:
        serve.terminate()
        serve.wait()


print(f"J={jobs_n} turns per measurement, median of {rounds} rounds, "
      f"{os.cpu_count()} cores")
print("| K | K parallel `run` | turns/min | `serve --max-turns K` | turns/min | serve vs run |")
print("|---|---|---|---|---|---|")
for k in (1, 2, 4):
    runs, serves = [], []
    for r in range(rounds):
        runs.append(by_run(k, r))
        serves.append(by_serve(k, r))
    m_run, m_serve = statistics.median(runs), statistics.median(serves)
    print(f"| {k} | {m_run:.2f} s | {60 * jobs_n / m_run:.0f} | {m_serve:.2f} s | "
          f"{60 * jobs_n / m_serve:.0f} | {100 * (m_run / m_serve - 1):+.0f} % |", flush=True)
shutil.rmtree(work, ignore_errors=True)
