#!/usr/bin/env python3
"""Forge webhook handling against a real `serve`: signed GitHub `issues` deliveries (an issue
labelled by a mapped user: verify, parse, judge, dedupe and enqueue in one insert) sent open-loop
at RATE per second for SECONDS, each with a new delivery id and issue number, from 8 keep-alive
connections. `GET /healthz` on the same listener, interleaved at 20 per second, is the HTTP
floor of the same run. Prints one JSON line per database: p50, p90, p99 and max of each, the
delivery answers by status, and the deliveries the job store recorded.

The project's template names a repository no `[[repository]]` rule admits, so the intake that
works the queue off in the background refuses each delivery after fetching its base (one git
fetch and one snapshot per delivery, one at a time): no job runs, no Docker turn competes.

Usage: benches/forge/webhook.py BIN [RATE] [SECONDS] [DATABASE_URL]   (Docker must be up: serve
checks it at start)
"""
import hashlib, hmac, http.client, json, os, queue, re, subprocess, sys, tempfile, threading, time

pc = sys.argv[1]
rate = int(sys.argv[2]) if len(sys.argv) > 2 else 200
seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
database = sys.argv[4] if len(sys.argv) > 4 else None
secret = b"bench-secret-0123456789abcdef"
work = tempfile.mkdtemp()
state = os.path.join(work, "state")
os.makedirs(state, mode=0o700)
env = dict(os.environ, PATCH_CANDIDATE_STATE_DIR=state)


def git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)


repo = os.path.join(work, "repo")
os.makedirs(os.path.join(repo, "src"))
with open(os.path.join(repo, "src", "a.py"), "w") as f:
    f.write("x = 1\n")
git(repo, "init", "-q", "-b", "main")
git(repo, "add", "-A")
git(repo, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "b")

secret_file = os.path.join(work, "github.secret")
fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, secret)
os.close(fd)
policy = os.path.join(work, "policy.toml")
with open(policy, "w") as f:
    f.write(f"""version = 1

[[forge]]
name = "github"
kind = "github"
secret_file = "{secret_file}"
label = "agent"
users = {{ octocat = "bencher" }}

[[forge.project]]
path = "acme/app"
repository = "{repo}"
base = "main"
allowed_paths = ["src/"]
""")

db_args = ["--database", database] if database else []
subprocess.run([pc, "tokens", "create", "bencher", "--role", "submit", *db_args], check=True,
               capture_output=True, env=env)
serve = subprocess.Popen([pc, "serve", "--listen", "127.0.0.1:0", "--repository-policy", policy,
                          *db_args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
port = None
for line in serve.stderr:
    m = re.search(r'"listen":"127\.0\.0\.1:(\d+)"', line)
    if m:
        port = int(m.group(1))
    if "PATCH_CANDIDATE_SERVICE_STARTED" in line:
        break
threading.Thread(target=lambda: [None for _ in serve.stderr], daemon=True).start()
assert port, "serve did not report its address"


def body(n):
    return json.dumps({
        "action": "labeled",
        "issue": {"number": n, "title": f"Bench issue {n}", "body": "Make x two.\n" * 20},
        "label": {"name": "agent"},
        "repository": {"full_name": "acme/app", "clone_url": "https://git.example/acme/app.git"},
        "sender": {"login": "octocat"},
    }).encode()


def delivery(n):
    b = body(n)
    sig = hmac.new(secret, b, hashlib.sha256).hexdigest()
    return ("POST", "/v1/forge/github", b, {
        "Content-Type": "application/json", "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": f"bench-{n:08d}", "X-Hub-Signature-256": f"sha256={sig}"})


work_q = queue.Queue()
results = []
lock = threading.Lock()


def sender():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while True:
        item = work_q.get()
        if item is None:
            return
        kind, due, (method, path, payload, headers) = item
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t = time.monotonic()
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except (http.client.HTTPException, OSError):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            status = 0
        # Latency from the scheduled time: waiting behind a slow answer counts (open loop).
        with lock:
            results.append((kind, time.monotonic() - min(t, due), status))


threads = [threading.Thread(target=sender) for _ in range(8)]
for th in threads:
    th.start()
start = time.monotonic() + 0.5
total = rate * seconds
for i in range(total):
    work_q.put(("webhook", start + i / rate, delivery(i + 1)))
    if i % max(1, rate // 20) == 0:
        work_q.put(("healthz", start + i / rate, ("GET", "/healthz", None, {})))
for _ in threads:
    work_q.put(None)
for th in threads:
    th.join()
wall = time.monotonic() - start


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000, 2)


out = {"database": "postgres" if database else "sqlite", "rate": rate, "seconds": seconds,
       "wall_s": round(wall, 2)}
for kind in ("webhook", "healthz"):
    lat = [r[1] for r in results if r[0] == kind]
    statuses = {}
    for r in results:
        if r[0] == kind:
            statuses[r[2]] = statuses.get(r[2], 0) + 1
    out[kind] = {"n": len(lat), "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90),
                 "p99_ms": pct(lat, 99), "max_ms": pct(lat, 100), "status": statuses}
serve.terminate()
serve.wait(timeout=120)
print(json.dumps(out))
