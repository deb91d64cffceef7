#!/usr/bin/env python3
"""Queue overhead per job, side by side in one run: the same proof turn by `patch-candidate run`
and by `jobs submit` -> `serve` (SQLite, --poll-interval 20ms, --max-turns 1). Prints medians.

Usage: benches/service/overhead.py BIN_DIR [N]   (needs the proof images recorded in the state dir)
"""
import json, os, statistics, subprocess, sys, tempfile, time, shutil

bin_dir, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
pc = os.path.join(bin_dir, "patch-candidate")
src_state = os.environ["PATCH_CANDIDATE_STATE_DIR"]

def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout.strip()

work = tempfile.mkdtemp()
repo = os.path.join(work, "repo"); os.makedirs(os.path.join(repo, "app"))
open(os.path.join(repo, "app", "a.py"), "w").write("x = 1\n")
git(repo, "init", "-q"); git(repo, "add", "-A")
git(repo, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "b")
state = os.path.join(work, "state"); os.makedirs(state)
shutil.copy(os.path.join(src_state, "images.json"), state)
env = dict(os.environ, PATCH_CANDIDATE_STATE_DIR=state)

def approval(task):
    path = os.path.join(work, f"approval-{abs(hash(task))}.json")
    subprocess.run([pc, "approve", "--repo", repo, "--allow", "app/", "--task", task, "--out", path],
                   check=True, capture_output=True, env=env)
    return path

runs = []
for i in range(n):
    a = approval(f"Run {i}.")
    t = time.monotonic()
    subprocess.run([pc, "--json", "run", "--repo", repo, "--approval", a, "--no-ledger"],
                   check=True, capture_output=True, env=env)
    runs.append((time.monotonic() - t) * 1000)

serve = subprocess.Popen([pc, "serve", "--listen", "127.0.0.1:0", "--poll-interval", "20ms",
                          "--max-turns", "1"], env=env, stderr=subprocess.DEVNULL)
time.sleep(2)
queued = []
try:
    for i in range(n):
        a = approval(f"Queue {i}.")
        t = time.monotonic()
        out = subprocess.run([pc, "--json", "jobs", "submit", "--repo", repo, "--approval", a],
                             check=True, capture_output=True, env=env).stdout
        jid = json.loads(out)["job"]["id"]
        while True:
            job = json.loads(subprocess.run([pc, "--json", "jobs", "show", jid], check=True,
                                            capture_output=True, env=env).stdout)["job"]
            if job["state"] in ("completed", "failed"):
                break
            time.sleep(0.005)
        assert job["state"] == "completed", job
        queued.append((time.monotonic() - t) * 1000)
finally:
    serve.terminate(); serve.wait()
m_run, m_q = statistics.median(runs), statistics.median(queued)
print(f"run median {m_run:.0f} ms; submit->completed median {m_q:.0f} ms; added {m_q - m_run:.0f} ms "
      f"(includes the submit command's own verification, 20 ms poll and the `jobs show` polling) n={n}")
shutil.rmtree(work, ignore_errors=True)
