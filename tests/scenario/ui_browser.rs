//! The review web UI of `patch-candidate serve` in a real headless Chromium driven through
//! chromedriver (WebDriver, fantoccini): sign in, filter jobs, open a candidate, switch unified
//! and split, accept one with its gates passed, reject one with a reason, retry one; an XSS
//! corpus planted by a hostile agent in file names, diff lines, the summary, test names and the
//! log tail runs nothing (a marker global stays unset, the CSP report endpoint counts none) and
//! stays inside its container; CSRF and sign-in refusals over plain HTTP (the `__Host-` cookies
//! are `Secure`, which Chromium accepts from `http://127.0.0.1`, a potentially trustworthy origin); the 50-file,
//! 10,000-changed-line candidate page is measured (server time, bytes, first contentful paint).
//! Screenshots of each page go to `$CARGO_TARGET_DIR/ui-screenshots/`.
//!
//! Completed jobs are planted in the store (real candidates and gate evidence, no turn run), as
//! in `service_review`. Without Chromium/chromedriver the test fails under
//! `PATCH_CANDIDATE_REQUIRE_BROWSER=1` (or `…_DOCKER=1`), else says SKIPPED.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use vocab::Sha256;

use crate::support::*;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/lib/chromium/chromium";

/// The XSS corpus: each payload would set `window.__pwned` (or load something CSP reports).
const PAYLOADS: &[&str] = &[
    "<script>window.__pwned=1</script>",
    "</textarea><script>window.__pwned=2</script>",
    "\"><img src=x onerror=\"window.__pwned=3\">",
    "'><svg onload=window.__pwned=4>",
    "<a href=\"javascript:window.__pwned=5\">click</a>",
    "<svg><script>window.__pwned=6</script></svg>",
    "<style>body{display:none}</style><div style=\"position:fixed;inset:0;background:red\">",
    "&lt;script&gt;window.__pwned=7&lt;/script&gt; &amp; &#x3C;b&#x3E;",
    "<iframe src=\"data:text/html,<script>parent.__pwned=8</script>\"></iframe>",
    "<img src=\"http://127.0.0.1:1/beacon.png\">",
    "bidi \u{202E}gnp.exe\u{202C} and \u{2066}isolate\u{2069} and zero\u{200B}width\u{200D}joiner\u{FEFF}",
    "<base href=\"http://127.0.0.1:1/\"><link rel=stylesheet href=\"http://127.0.0.1:1/x.css\">",
];

/// File names a hostile agent could pick (the portable-path rules refuse `<>:"|?*`, so these
/// lean on quotes, entities and parentheses).
const HOSTILE_NAMES: &[&str] = &[
    "src/'onmouseover='window.__pwned=9'.py",
    "src/&lt;img src=x onerror=alert(1)&gt;.py",
    "src/a\u{202E}txt.exe.py",
    "src/zero\u{200B}width.py",
    "src/);window.__pwned=(10.py",
];

/// Whether a missing browser fails the test (the browser or Docker is required).
fn browser_required() -> bool {
    docker_required() || std::env::var("PATCH_CANDIDATE_REQUIRE_BROWSER").is_ok_and(|x| x == "1")
}

fn sha(text: &str) -> Sha256 {
    Sha256::of(text.as_bytes())
}

fn candidate(
    files: Vec<RepositoryPatchFile>,
    gates: &[&str],
    summary: &str,
) -> (Vec<u8>, String, RepositoryPatchCandidate) {
    candidate_at(files, gates, summary, &"c".repeat(40))
}

fn candidate_at(
    files: Vec<RepositoryPatchFile>,
    gates: &[&str],
    summary: &str,
    baseline: &str,
) -> (Vec<u8>, String, RepositoryPatchCandidate) {
    let made = make_candidate(
        CandidateFields {
            repository_full_name: "o/n".into(),
            baseline_commit_sha: baseline.to_owned(),
            handoff_id: "handoff-ui".into(),
            approved_plan_digest: "0".repeat(64),
            required_validation_gates: gates.iter().map(|g| (*g).to_owned()).collect(),
            summary: summary.to_owned(),
            ..CandidateFields::default()
        },
        files,
    );
    (made.bytes, made.digest, made.candidate)
}

/// A gate evidence document for `digest`: passed, or failed with `new_failures` and `log`.
fn evidence(
    digest: &str,
    baseline: &str,
    passed: bool,
    new_failures: &[&str],
    log: &str,
) -> jobs::EvidenceDocument {
    let ids = |v: &[&str]| {
        let set: std::collections::BTreeSet<String> = v.iter().map(|s| (*s).to_owned()).collect();
        gate::IdList::from_set(&set)
    };
    let ev = gate::GateEvidence {
        schema: gate::EVIDENCE_SCHEMA.to_owned(),
        subject: gate::EvidenceSubject::Candidate,
        candidate_digest: Some(digest.parse().unwrap()),
        baseline_commit_sha: baseline.to_owned(),
        gate: "pytest".to_owned(),
        definition_digest: sha("definition"),
        image_id: format!("sha256:{}", "a".repeat(64)),
        runtime: "default".to_owned(),
        outcome: if passed {
            vocab::GateVerdict::Passed
        } else {
            vocab::GateVerdict::Failed
        },
        code: None,
        exit: Some(gate_runner::ExitStatus::Code(if passed { 0 } else { 1 })),
        wall_ms: 1234,
        tree: None,
        tests: Some(gate::TestCounts {
            total: 12,
            passed: if passed {
                12
            } else {
                12 - new_failures.len() as u64
            },
            failed: if passed { 0 } else { new_failures.len() as u64 },
            error: 0,
            skipped: 0,
            truncated: false,
        }),
        failing: ids(new_failures),
        passing: None,
        comparison: Some(gate::Comparison {
            by: gate::ComparisonBasis::TestId,
            new_failures: ids(new_failures),
            fixed: ids(&[]),
            still_failing: ids(&[]),
            vanished: ids(&[]),
            too_few_ran: None,
            regression: !passed,
        }),
        pinned_changed: Vec::new(),
        log: gate::LogTail::new(log.len() as u64, log.as_bytes()),
        baseline_evidence_digest: Some(sha("baseline")),
    };
    let (bytes, _) = ev.to_file_bytes().unwrap();
    let verdict = if passed {
        vocab::GateVerdict::Passed
    } else {
        vocab::GateVerdict::Failed
    };
    jobs::EvidenceDocument::new(
        "pytest",
        verdict,
        &ev.digest().unwrap().to_string(),
        1234,
        bytes,
    )
    .unwrap()
}

/// Plants completed jobs (candidate bytes, digest, evidence) in the store; returns their ids.
/// A job to plant: nonce, candidate bytes and digest, gate evidence, and the job's spec (`None`:
/// a no-op job of the nonce).
type Planted = (
    String,
    Vec<u8>,
    String,
    Vec<jobs::EvidenceDocument>,
    Option<jobs::JobSpec>,
);

/// The spec of a real turn job over `f` (approval, proof image and selections as `jobs submit`
/// stores them, submitted into a scratch state): a retry of it queues a follow-up that runs.
fn turn_spec(f: &crate::support::Fixture, task: &str) -> jobs::JobSpec {
    let scratch = crate::support::state_with_images();
    let answer = crate::support::submit(scratch.path(), None, f, task);
    let id = vocab::JobId::parse(answer["job"]["id"].as_str().unwrap()).unwrap();
    with_store(scratch.path(), None, async move |store| {
        store.get(&id).await.unwrap().unwrap().spec
    })
}

/// A real turn job over `f`: [`turn_spec`] and the candidate `run` makes under the same
/// approval, image and selection (its bytes and digest), so that a retry's follow-up can
/// continue it.
fn turn_job(f: &crate::support::Fixture, task: &str) -> (jobs::JobSpec, Vec<u8>, String) {
    let spec = turn_spec(f, task);
    let scratch = crate::support::state_with_images();
    let out = run_ok(
        bin()
            .env("PATCH_CANDIDATE_STATE_DIR", scratch.path())
            .args(["--json", "run", "--repo"])
            .arg(f.repo.path())
            .arg("--approval")
            .arg(f.approval(task))
            .arg("--store")
            .arg(scratch.path().join("run-candidates")),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bytes = serde_json::to_vec_pretty(&json["candidate"]).unwrap();
    (spec, bytes, json["digest"].as_str().unwrap().to_owned())
}

fn plant(state: &Path, jobs_in: Vec<Planted>) -> Vec<String> {
    let ids = jobs_in
        .into_iter()
        .map(|(nonce, bytes, digest, ev, spec)| {
            let spec = spec.unwrap_or_else(|| jobs::JobSpec::noop(&nonce, 1));
            plant_completed(state, None, spec, bytes, &digest, ev)
        })
        .collect();
    // One queued job, for the state filter.
    with_store(state, None, async |store| {
        store
            .submit(jobs::JobSpec::noop("still-queued", 1))
            .await
            .unwrap();
    });
    ids
}

/// A raw HTTP/1.1 exchange with an optional cookie and form body: status, head, body.
fn ui_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
) -> (u16, String, Vec<u8>) {
    ui_http_with(addr, method, path, cookie, form, "")
}

/// [`ui_http`] with extra header lines (each ending in CRLF); the body as sent (not decoded).
fn ui_http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
    extra: &str,
) -> (u16, String, Vec<u8>) {
    let mut headers = extra.to_owned();
    if let Some(c) = cookie {
        headers.push_str(&format!("Cookie: __Host-pc_session={c}\r\n"));
    }
    let raw = exchange(
        addr,
        method,
        path,
        &headers,
        form.map(|b| ("application/x-www-form-urlencoded", b.as_bytes())),
        Duration::from_secs(60),
    );
    parse_answer(&raw)
}

/// The `Set-Cookie` value of cookie `name`.
fn set_cookie<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim().eq_ignore_ascii_case("set-cookie") && v.trim().starts_with(&format!("{name}=")))
            .then(|| v.trim())
    })
}

/// Posts the sign-in form as a browser does (the page first, for its pre-session cookie and
/// CSRF token): status and head.
fn http_sign_in_answer(addr: SocketAddr, token: &str) -> (u16, String) {
    let (status, head, page) = ui_http(addr, "GET", "/ui/sign-in", None, None);
    assert_eq!(status, 200, "{head}");
    let pre = set_cookie(&head, "__Host-pc_sign_in")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let csrf = csrf_of(&String::from_utf8_lossy(&page));
    let (status, head, _) = ui_http_with(
        addr,
        "POST",
        "/ui/sign-in",
        None,
        Some(&format!("csrf={csrf}&token={token}")),
        &format!("Cookie: {pre}\r\n"),
    );
    (status, head)
}

/// Signs in over plain HTTP; the session cookie's value.
fn http_sign_in(addr: SocketAddr, token: &str) -> String {
    let (status, head) = http_sign_in_answer(addr, token);
    assert_eq!(status, 303, "{head}");
    let cookie = set_cookie(&head, "__Host-pc_session").unwrap();
    assert_contains_all(
        cookie,
        &[
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=",
            "Secure",
        ],
    );
    assert!(!cookie.contains("Domain"), "host-only: {cookie}");
    cookie
        .split(';')
        .next()
        .unwrap()
        .strip_prefix("__Host-pc_session=")
        .unwrap()
        .to_owned()
}

/// The `csrf` hidden field of a page's own form (the last one: the sign-out form in the
/// navigation comes first and carries the session's sign-out token).
fn csrf_of(html: &str) -> String {
    let at = html.rfind("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    html[at..].split('"').next().unwrap().to_owned()
}

struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver on loopback; `None` (or a panic when required) without the browser.
fn start_driver() -> Option<Driver> {
    if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
        assert!(
            !browser_required(),
            "Chromium and chromedriver are required (infra/ci/pre.d/05-browser.sh installs them)"
        );
        eprintln!("SKIPPED (no Chromium/chromedriver; PATCH_CANDIDATE_REQUIRE_BROWSER unset)");
        return None;
    }
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "chromedriver did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(Driver {
        child,
        port,
        _profile: tempfile::tempdir().unwrap(),
    })
}

async fn browser(driver: &Driver) -> Client {
    let profile = driver._profile.path().display().to_string();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                format!("--user-data-dir={profile}"),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap()
}

fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("ui-screenshots");
    // The build's own target directory: ambient by design (a CI artifact).
    let _ = std::fs::DirBuilder::new().recursive(true).create(&dir);
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
}

/// Nothing of the corpus ran, and the page is not wider than the window.
async fn assert_inert(c: &Client, addr: SocketAddr, cookie: &str, page: &str) {
    let pwned = c
        .execute(
            "return typeof window.__pwned === 'undefined' ? null : window.__pwned;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(pwned, serde_json::Value::Null, "{page}: a payload ran");
    let scripts = c
        .execute("return document.scripts.length + document.querySelectorAll('img,svg,iframe,base,link[href^=\"http\"],[onerror],[onload],[onmouseover]').length;", vec![])
        .await
        .unwrap();
    assert_eq!(
        scripts,
        serde_json::json!(0),
        "{page}: injected elements exist"
    );
    let overflow = c
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        overflow,
        serde_json::json!(true),
        "{page}: the layout overflows the window"
    );
    let (_, _, body) = ui_http(addr, "GET", "/ui/csp-reports", Some(cookie), None);
    assert_eq!(
        String::from_utf8_lossy(&body),
        "0",
        "{page}: CSP violations were reported"
    );
}

/// Clicks what navigates, and waits until the next document has loaded.
async fn click(c: &Client, what: Locator<'_>) {
    c.execute("document.documentElement.dataset.stale = '1';", vec![])
        .await
        .unwrap();
    c.find(what).await.unwrap().click().await.unwrap();
    let started = Instant::now();
    loop {
        let fresh = c
            .execute(
                "return document.readyState === 'complete' && !document.documentElement.dataset.stale;",
                vec![],
            )
            .await
            .unwrap_or(serde_json::Value::Bool(false));
        if fresh == serde_json::Value::Bool(true) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no navigation after a click"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn big_candidate() -> (Vec<u8>, String, RepositoryPatchCandidate) {
    let files = module_updates(
        50,
        100,
        |f, i| format!("value_{f}_{i} = compute({i})\n"),
        |f, i| format!("value_{f}_{i} = compute_faster({i}, cache=True)\n"),
    );
    candidate(
        files,
        &[],
        "Speed up every module (50 files, 10,000 changed lines)",
    )
}

/// What the browser session reviews: four planted completed jobs (a clean candidate with passing
/// gates over a real repository, a hostile one, one to retry, a big one) and one queued job, in
/// the store of a running `serve` whose publish remote is a bare clone of the clean one's
/// repository.
struct Review {
    service: Service,
    addr: SocketAddr,
    /// `http://<addr>`.
    base: String,
    token: String,
    state: tempfile::TempDir,
    /// The planted jobs, in the order clean, hostile, retry, big.
    ids: Vec<String>,
    clean_job: String,
    hostile_job: String,
    retry_job: String,
    big_job: String,
    retry_digest: String,
    big_digest: String,
    clean_digest: String,
    /// The clean candidate's baseline commit and its new `src/app.py`.
    commit: String,
    after: &'static str,
    remote: PathBuf,
    _repo: tempfile::TempDir,
    _remote_dir: tempfile::TempDir,
    _retry_fixture: Fixture,
}

impl Review {
    /// Plants the candidates (real candidates and gate evidence, no turn run) and starts `serve`.
    fn plant_and_serve() -> Self {
        // The candidates: a clean one with passing gates, a hostile one, one to retry, a big one.
        let before = "def add(a, b):\n    return a+b\n\nprint(add(1, 2))\n";
        let after = "def add(a, b):\n    \"\"\"Adds.\"\"\"\n    return a + b\n\nprint(add(1, 2))\n";
        // The clean candidate's baseline is a real repository, and the operator's remote a bare
        // clone of it: publishing from the page lands a branch there.
        let (repo, commit) = main_repo(&[("src/app.py", before)]);
        let remote_dir = tempfile::tempdir().unwrap();
        let remote = remote_dir.path().join("remote.git");
        bare_clone(repo.path(), &remote);
        let clean = candidate_at(
            vec![update_file("src/app.py", before, after).unwrap()],
            &["pytest"],
            "Document add() and format its body",
            &commit,
        );
        let hostile_text: String = PAYLOADS.iter().map(|p| format!("{p}\n")).collect();
        let mut hostile_files = vec![
            update_file(
                "src/payloads.py",
                "x = 1\n",
                &format!("x = 1\n{hostile_text}"),
            )
            .unwrap(),
            // A 100 kB line (cut with a marker) and a 1 MB line (its file too big to show).
            update_file(
                "src/long.py",
                "a\n",
                &format!(
                    "a\n{}\n",
                    "<script>window.__pwned=11</script>".repeat(3_000)
                ),
            )
            .unwrap(),
            update_file(
                "src/huge.py",
                "a\n",
                &format!(
                    "a\n{}\n",
                    "<script>window.__pwned=12</script>".repeat(30_000)
                ),
            )
            .unwrap(),
        ];
        let named: Vec<RepositoryPatchFile> = HOSTILE_NAMES
            .iter()
            .filter_map(|n| update_file(n, "y = 0\n", "y = 1 # \u{202E}evil\n"))
            .collect();
        assert!(
            named.len() >= 3,
            "the hostile names should mostly be valid paths"
        );
        hostile_files.extend(named);
        let hostile = candidate(hostile_files, &["pytest"], &PAYLOADS.join(" "));
        let big = big_candidate();
        let hostile_evidence = evidence(
            &hostile.1,
            &"c".repeat(40),
            false,
            &PAYLOADS[..4],
            &hostile_text,
        );
        let clean_evidence = evidence(&clean.1, &commit, true, &[], "12 passed in 0.1s\n");
        let clean_digest = clean.1.clone();
        let state = tempfile::tempdir().unwrap();
        let mut clean_spec = jobs::JobSpec::noop("clean", 1);
        clean_spec.repository = repo.path().display().to_string();
        clean_spec.commit = commit.clone();
        let retry_fixture = Fixture::new();
        let (retry_spec, retry_bytes, retry_digest) =
            turn_job(&retry_fixture, "Update the dashboard.");
        let ids = plant(
            state.path(),
            vec![
                (
                    "clean".into(),
                    clean.0,
                    clean.1.clone(),
                    vec![clean_evidence],
                    Some(clean_spec),
                ),
                (
                    "hostile".into(),
                    hostile.0,
                    hostile.1.clone(),
                    vec![hostile_evidence],
                    None,
                ),
                (
                    "retry".into(),
                    retry_bytes,
                    retry_digest.clone(),
                    vec![],
                    Some(retry_spec),
                ),
                ("big".into(), big.0, big.1.clone(), vec![], None),
            ],
        );
        let [clean_job, hostile_job, retry_job, big_job] = ids.as_slice() else {
            panic!("four jobs")
        };
        let (clean_job, hostile_job, retry_job, big_job) = (
            clean_job.clone(),
            hostile_job.clone(),
            retry_job.clone(),
            big_job.clone(),
        );
        let remote_arg = remote.display().to_string();
        let service = Service::start(
            state.path(),
            &ServeOpts {
                extra: vec!["--publish-remote", &remote_arg],
                ..ServeOpts::default()
            },
        );
        let addr = service.addr;
        let token = service.token();
        Self {
            base: format!("http://{addr}"),
            addr,
            token,
            service,
            state,
            ids,
            clean_job,
            hostile_job,
            retry_job,
            big_job,
            retry_digest,
            big_digest: big.1,
            clean_digest,
            commit,
            after,
            remote,
            _repo: repo,
            _remote_dir: remote_dir,
            _retry_fixture: retry_fixture,
        }
    }

    /// The page at `path` (below the service's origin) in the browser.
    async fn goto(&self, c: &Client, path: &str) {
        c.goto(&format!("{}{path}", self.base)).await.unwrap();
    }
}

/// The text of the element `what` on the current page.
async fn text_of(c: &Client, what: Locator<'_>) -> String {
    c.find(what).await.unwrap().text().await.unwrap()
}

/// Types `text` into the element `what`.
async fn type_into(c: &Client, what: Locator<'_>, text: &str) {
    c.find(what).await.unwrap().send_keys(text).await.unwrap();
}

/// Whether the current URL's path ends with `suffix`.
async fn path_ends_with(c: &Client, suffix: &str) -> bool {
    c.current_url().await.unwrap().path().ends_with(suffix)
}

/// Signed out: pages redirect to the sign-in page, POSTs are refused.
fn signed_out_pages_redirect_and_posts_are_refused(r: &Review) {
    let (status, head, _) = ui_http(r.addr, "GET", "/ui/jobs", None, None);
    assert_eq!(
        (status, header(&head, "location")),
        (303, Some("/ui/sign-in"))
    );
    let (status, _, _) = ui_http(
        r.addr,
        "POST",
        &format!("/ui/jobs/{}/decide", r.clean_job),
        None,
        Some("decision=accept"),
    );
    assert_eq!(status, 401);
}

/// Every UI response carries the security headers.
fn every_answer_carries_the_security_headers(r: &Review) {
    let (_, head, _) = ui_http(r.addr, "GET", "/ui/sign-in", None, None);
    for (name, want) in [
        (
            "content-security-policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        assert!(
            header(&head, name).unwrap_or_default().starts_with(want),
            "{name}: {head}"
        );
    }
}

/// A wrong token does not sign in; the operator token does, in no URL, with a `Secure`,
/// `HttpOnly` session cookie, and the jobs list shows every planted job. Returns the session.
async fn only_the_operator_token_signs_in(r: &Review, c: &Client) -> String {
    r.goto(c, "/ui/").await;
    assert!(path_ends_with(c, "/ui/sign-in").await);
    type_into(c, Locator::Id("token"), &"0".repeat(64)).await;
    click(c, Locator::Css("form.sign-in button")).await;
    let alert = text_of(c, Locator::Css("[role=alert]")).await;
    assert!(alert.contains("does not sign in"), "{alert}");
    shot(c, "01-sign-in-refused").await;
    // The operator token signs in; the token is in no URL.
    type_into(c, Locator::Id("token"), &r.token).await;
    click(c, Locator::Css("form.sign-in button")).await;
    let url = c.current_url().await.unwrap();
    assert_eq!(url.path(), "/ui/jobs");
    assert!(!url.as_str().contains(&r.token));
    let cookie = c
        .get_all_cookies()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.name() == "__Host-pc_session")
        .unwrap();
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(cookie.secure(), Some(true));
    assert_eq!(cookie.path(), Some("/"));
    let session = cookie.value().to_owned();
    let page = c.source().await.unwrap();
    for id in &r.ids {
        assert!(page.contains(id.as_str()), "jobs list lacks {id}");
    }
    shot(c, "02-jobs").await;
    session
}

/// The state filter shows the jobs in that state only.
async fn the_state_filter_shows_only_its_jobs(r: &Review, c: &Client) {
    click(c, Locator::Css("a[href='/ui/jobs?state=queued']")).await;
    let page = c.source().await.unwrap();
    assert!(!page.contains(r.clean_job.as_str()));
    assert!(page.contains("aria-current=\"page\">queued"));
    click(c, Locator::Css("a[href='/ui/jobs?state=completed']")).await;
    let page = c.source().await.unwrap();
    assert!(page.contains(r.clean_job.as_str()));
    for other in ["queued", "running", "failed", "cancelled"] {
        assert!(
            !page.contains(&format!("<tr class=\"state-{other}")),
            "{other} under completed"
        );
    }
    shot(c, "03-jobs-completed").await;
}

/// The hostile candidate: nothing runs, hidden characters are shown, the payloads are text, the
/// long line is cut and the huge file not rendered, in the job page and both diff views.
async fn the_hostile_candidate_runs_nothing_in_either_view(r: &Review, c: &Client, session: &str) {
    let hostile_job = &r.hostile_job;
    r.goto(c, &format!("/ui/jobs/{hostile_job}")).await;
    assert_inert(c, r.addr, session, "hostile job").await;
    shot(c, "04-job-hostile").await;
    for view in ["unified", "split"] {
        r.goto(c, &format!("/ui/jobs/{hostile_job}/candidate?view={view}"))
            .await;
        assert_inert(c, r.addr, session, view).await;
        let hidden = text_of(c, Locator::Id("hidden")).await;
        assert!(hidden.contains("hidden character"), "{hidden}");
        let esc = text_of(c, Locator::Css("span.esc")).await;
        assert!(esc.starts_with("<U+"), "{esc}");
        let text = text_of(c, Locator::Css("main")).await;
        assert!(
            text.contains("<script>window.__pwned=1</script>"),
            "payload shown as text"
        );
        assert!(
            text.contains("more bytes not shown"),
            "the long line is cut with a marker"
        );
        assert!(
            text.contains("Too big to show"),
            "the 1 MB line's file is not rendered"
        );
        shot(c, &format!("05-candidate-hostile-{view}")).await;
    }
}

/// The raw view of a file is sandboxed plain text.
fn the_raw_view_is_sandboxed_text(r: &Review, session: &str) {
    let (status, head, body) = ui_http(
        r.addr,
        "GET",
        &format!("/ui/jobs/{}/raw/0", r.hostile_job),
        Some(session),
        None,
    );
    assert_eq!(status, 200);
    assert!(
        header(&head, "content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    assert!(
        header(&head, "content-security-policy")
            .unwrap()
            .contains("sandbox")
    );
    assert!(String::from_utf8_lossy(&body).contains("<script>window.__pwned=1</script>"));
}

/// Rejecting the hostile candidate with a reason, in the browser, is recorded.
async fn the_hostile_candidate_is_rejected_with_a_reason(r: &Review, c: &Client, session: &str) {
    r.goto(c, &format!("/ui/jobs/{}/candidate", r.hostile_job))
        .await;
    type_into(c, Locator::Id("reason"), "hostile markup everywhere").await;
    click(c, Locator::Id("reject")).await;
    let notice = text_of(c, Locator::Id("notice")).await;
    assert_eq!(notice, "Recorded: reject.");
    assert_eq!(text_of(c, Locator::Id("review-state")).await, "rejected");
    assert_inert(c, r.addr, session, "after reject").await;
}

/// The clean candidate: its gates passed, the split view and the whitespace toggle work, and
/// it is accepted.
async fn the_clean_candidate_is_accepted(r: &Review, c: &Client) {
    r.goto(c, &format!("/ui/jobs/{}/candidate", r.clean_job))
        .await;
    let gates = text_of(c, Locator::Css("table.gates")).await;
    assert!(gates.contains("passed"), "{gates}");
    shot(c, "06-candidate-clean").await;
    click(c, Locator::Id("view-split")).await;
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("view=split")
    );
    assert!(c.find(Locator::Css("table.diff.split")).await.is_ok());
    shot(c, "07-candidate-clean-split").await;
    click(c, Locator::Id("ws-toggle")).await;
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("ws=ignore")
    );
    click(c, Locator::Id("accept")).await;
    assert_eq!(text_of(c, Locator::Id("notice")).await, "Recorded: accept.");
    assert_eq!(text_of(c, Locator::Id("review-state")).await, "accepted");
    shot(c, "08-candidate-accepted").await;
}

/// The usage page is the spend ledger's report: a live attempt's gateway counts recorded for the
/// clean job appear under its repository and in the totals for the operator (`admin`: every
/// principal), reached from the navigation; a `submit`-only principal sees only its own spend,
/// none; a malformed range is a coded refusal. Ends signed in as that principal (the next step
/// signs in again).
async fn the_usage_page_is_the_ledger(r: &Review, c: &Client) {
    let job = r.clean_job.clone();
    with_store(r.state.path(), None, async move |store| {
        let id = vocab::JobId::parse(&job).unwrap();
        let usage = serde_json::json!({"outcome": "completed", "live": {"requests": 7,
            "input_tokens": 4000, "output_tokens": 242, "total_tokens": 4242}});
        let attempt = jobs::random_attempt_id().unwrap();
        store.record_usage(&id, &attempt, &usage).await.unwrap();
    });
    r.goto(c, "/ui/jobs").await;
    click(c, Locator::LinkText("Usage")).await;
    assert!(path_ends_with(c, "/ui/usage").await);
    let table = text_of(c, Locator::Css("table.usage")).await;
    for cell in ["7", "4000", "242", "4242", "unknown"] {
        assert!(
            table.split_whitespace().any(|w| w == cell),
            "{cell}: {table}"
        );
    }
    let total = text_of(c, Locator::Css("table.usage tfoot")).await;
    assert!(total.contains("4242"), "{total}");
    assert!(
        text_of(c, Locator::Css("main p.hint"))
            .await
            .starts_with("Every principal"),
    );
    shot(c, "08b1-usage-admin").await;

    let uma = token_with_roles(r, "uma", &["submit"]);
    sign_in_as(r, c, &uma).await;
    r.goto(c, "/ui/usage").await;
    let page = text_of(c, Locator::Css("main")).await;
    assert!(page.contains("Your spend"), "{page}");
    assert!(page.contains("No usage from"), "{page}");
    assert!(c.find(Locator::Css("table.usage")).await.is_err());
    shot(c, "08b2-usage-own").await;
    r.goto(c, "/ui/usage?from=2026-02-30").await;
    let page = text_of(c, Locator::Css("main")).await;
    assert!(
        page.contains("PATCH_CANDIDATE_SERVICE_USAGE_RANGE"),
        "{page}"
    );
}

/// Signs the browser in with `token` (after dropping its cookies: a fresh session).
async fn sign_in_as(r: &Review, c: &Client, token: &str) {
    c.delete_all_cookies().await.unwrap();
    r.goto(c, "/ui/sign-in").await;
    type_into(c, Locator::Id("token"), token).await;
    click(c, Locator::Css("form.sign-in button")).await;
    assert!(path_ends_with(c, "/ui/jobs").await);
}

/// A named token created with `roles` (`tokens create NAME --role R…`); the token.
fn token_with_roles(r: &Review, name: &str, roles: &[&str]) -> String {
    let mut cmd = bin();
    cmd.env("PATCH_CANDIDATE_STATE_DIR", r.state.path())
        .args(["tokens", "create", name]);
    for role in roles {
        cmd.args(["--role", role]);
    }
    let out = run_ok(&mut cmd);
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The page shows what the signed-in principal's roles allow, and the server refuses the rest:
/// on the accepted clean candidate a `review`-only principal gets the decision form but no
/// Publish button, and its publish POST (with a valid CSRF token) is refused 403
/// `PATCH_CANDIDATE_SERVICE_FORBIDDEN`; a `submit`-only principal gets no Accept (no decision
/// form at all) on an open candidate. The job page lists the accept in its audit trail. Ends
/// signed in as the operator again, on the clean candidate's page; returns that session.
async fn role_limited_principals_see_only_their_buttons(r: &Review, c: &Client) -> String {
    let rita = token_with_roles(r, "rita", &["review"]);
    let sam = token_with_roles(r, "sam", &["submit"]);
    let clean = format!("/ui/jobs/{}/candidate", r.clean_job);

    sign_in_as(r, c, &rita).await;
    r.goto(c, &clean).await;
    assert_eq!(text_of(c, Locator::Id("review-state")).await, "accepted");
    assert!(c.find(Locator::Id("decision-form")).await.is_ok());
    assert!(
        c.find(Locator::Id("publish")).await.is_err(),
        "review-only sees Publish"
    );
    assert!(
        c.find(Locator::Id("force")).await.is_err(),
        "review-only sees the override"
    );
    shot(c, "08a1-candidate-review-only").await;
    // The server is the check: the publish form's POST, with rita's own CSRF token, is refused.
    let rita_session = http_sign_in(r.addr, &rita);
    let (_, _, page) = ui_http(r.addr, "GET", &clean, Some(&rita_session), None);
    let csrf = csrf_of(&String::from_utf8_lossy(&page));
    let digest = r.clean_digest.replace(':', "%3A");
    let (status, _, body) = ui_http(
        r.addr,
        "POST",
        &format!("/ui/jobs/{}/publish", r.clean_job),
        Some(&rita_session),
        Some(&format!(
            "csrf={csrf}&candidate_digest={digest}&branch=rita-was-here"
        )),
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("PATCH_CANDIDATE_SERVICE_FORBIDDEN"), "{body}");
    assert!(body.contains("publish"), "{body}");

    sign_in_as(r, c, &sam).await;
    r.goto(c, &format!("/ui/jobs/{}/candidate", r.big_job))
        .await;
    assert!(
        c.find(Locator::Id("accept")).await.is_err(),
        "submit-only sees Accept"
    );
    assert!(c.find(Locator::Id("decision-form")).await.is_err());
    let why = text_of(c, Locator::Id("no-decision")).await;
    assert!(why.contains("roles do not include review"), "{why}");
    shot(c, "08a2-candidate-submit-only").await;

    // The job page's audit trail names the operator's accept.
    r.goto(c, &format!("/ui/jobs/{}", r.clean_job)).await;
    let audit = text_of(c, Locator::Id("audit")).await;
    assert!(audit.contains("review_accept"), "{audit}");
    assert!(audit.contains("operator"), "{audit}");

    // The operator signs in again: the later steps use (and end) this session.
    sign_in_as(r, c, &r.token).await;
    r.goto(c, &clean).await;
    assert!(c.find(Locator::Id("publish")).await.is_ok());
    c.get_all_cookies()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.name() == "__Host-pc_session")
        .unwrap()
        .value()
        .to_owned()
}

/// Publishing the accepted candidate from its page lands a branch on the operator's remote: a
/// commit on the baseline with the candidate's file.
async fn publishing_lands_a_branch_on_the_remote(r: &Review, c: &Client) {
    type_into(c, Locator::Id("branch"), "review/add-docstring").await;
    click(c, Locator::Id("publish")).await;
    assert_eq!(text_of(c, Locator::Id("notice")).await, "Published.");
    let published = git_out(
        &r.remote,
        &["rev-parse", "refs/heads/review/add-docstring^"],
    );
    assert_eq!(
        published, r.commit,
        "the published commit's parent is the baseline"
    );
    let shown = git_out(
        &r.remote,
        &["show", "refs/heads/review/add-docstring:src/app.py"],
    );
    assert_eq!(format!("{shown}\n"), r.after);
    assert!(c.find(Locator::Id("publication")).await.is_ok());
    shot(c, "08b-candidate-published").await;
}

/// A retry with a reason queues a follow-up: linked from the candidate, run in the sandbox, its
/// agent saw the reviewer's note, and its own page links back.
async fn a_retry_queues_a_follow_up_that_sees_the_note(r: &Review, c: &Client) {
    let retry_job = &r.retry_job;
    r.goto(c, &format!("/ui/jobs/{retry_job}/candidate")).await;
    type_into(c, Locator::Id("reason"), "try a smaller change").await;
    click(c, Locator::Id("retry")).await;
    assert_eq!(
        text_of(c, Locator::Id("notice")).await,
        "Recorded: retry. A follow-up job is queued under the same approval."
    );
    // The follow-up is linked from the candidate, runs in the sandbox, and its agent saw the
    // reviewer's note; its own page links back.
    let follow_up = text_of(c, Locator::Css("#follow-ups a")).await;
    let follow_job =
        crate::support::wait_finished(r.state.path(), None, &follow_up, Duration::from_secs(180));
    assert_eq!(follow_job["state"], "completed", "{follow_job}");
    assert_eq!(
        follow_job["spec"]["follow_up"]["supersedes_job"],
        retry_job.as_str()
    );
    assert_eq!(
        follow_job["spec"]["follow_up"]["note"],
        "try a smaller change"
    );
    let follow_bytes = {
        let id = vocab::JobId::parse(&follow_up).unwrap();
        with_store(r.state.path(), None, async move |store| {
            store.candidate(&id).await.unwrap()
        })
        .unwrap()
    };
    assert!(
        String::from_utf8_lossy(&follow_bytes)
            .contains("after review (continued; gates: ; note: try a smaller change)"),
        "the follow-up's agent did not see the note"
    );
    r.goto(c, &format!("/ui/jobs/{follow_up}/candidate")).await;
    assert_eq!(
        text_of(c, Locator::Css("#supersedes code")).await,
        retry_job.as_str()
    );
    // What changed since the attempt it continues: the one file, under its own anchor.
    let between = text_of(c, Locator::Id("attempt-h")).await;
    assert_eq!(between, "Changes since the previous attempt (1)");
    assert!(c.find(Locator::Id("a0")).await.is_ok());
    shot(c, "09b-follow-up").await;
    // The retried candidate is superseded: it names its later attempt and offers no accept.
    r.goto(c, &format!("/ui/jobs/{retry_job}/candidate")).await;
    assert_eq!(
        text_of(c, Locator::Css("#superseded-by code")).await,
        follow_up
    );
    assert!(c.find(Locator::Id("accept")).await.is_err());
    assert!(c.find(Locator::Id("reject")).await.is_ok());
    // The follow-up's job page lists the chain: the retried attempt, then itself.
    r.goto(c, &format!("/ui/jobs/{follow_up}")).await;
    let rows = c.find_all(Locator::Css("#chain tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].text().await.unwrap().contains(retry_job.as_str()));
    assert_eq!(
        rows[1].attr("aria-current").await.unwrap().as_deref(),
        Some("true")
    );
}

/// CSRF: a decision without a token, with another session's token, or against a stale digest
/// is refused; the right token works over plain HTTP too (the session is the only credential).
fn decisions_need_the_sessions_token_and_the_current_digest(r: &Review, session: &str) {
    let (addr, big_job) = (r.addr, &r.big_job);
    let (_, _, page) = ui_http(
        addr,
        "GET",
        &format!("/ui/jobs/{big_job}/candidate"),
        Some(session),
        None,
    );
    let mine = csrf_of(&String::from_utf8_lossy(&page));
    let other = http_sign_in(addr, &r.token);
    let (_, _, page) = ui_http(
        addr,
        "GET",
        &format!("/ui/jobs/{big_job}/candidate"),
        Some(&other),
        None,
    );
    let theirs = csrf_of(&String::from_utf8_lossy(&page));
    assert_ne!(mine, theirs);
    let decide = |cookie: &str, form: String| {
        ui_http(
            addr,
            "POST",
            &format!("/ui/jobs/{big_job}/decide"),
            Some(cookie),
            Some(&form),
        )
    };
    let digest = r.big_digest.replace(':', "%3A");
    let (status, _, body) = decide(
        session,
        format!("candidate_digest={digest}&decision=reject&reason=x"),
    );
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("PATCH_CANDIDATE_UI_CSRF"));
    let (status, _, _) = decide(
        session,
        format!("csrf={theirs}&candidate_digest={digest}&decision=reject&reason=x"),
    );
    assert_eq!(status, 403);
    // A page of another candidate (a stale digest for this job) carries a valid token for
    // that digest: the decision itself refuses it.
    let (_, _, page) = ui_http(
        addr,
        "GET",
        &format!("/ui/jobs/{}/candidate", r.retry_job),
        Some(session),
        None,
    );
    let stale = csrf_of(&String::from_utf8_lossy(&page));
    let stale_digest = r.retry_digest.replace(':', "%3A");
    let (status, _, body) = decide(
        session,
        format!("csrf={stale}&candidate_digest={stale_digest}&decision=reject&reason=x"),
    );
    assert_eq!(status, 409);
    assert!(String::from_utf8_lossy(&body).contains("PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH"));
    // The right token works over plain HTTP too (the session is the only credential).
    let (status, head, _) = decide(
        &other,
        format!("csrf={theirs}&candidate_digest={digest}&decision=reject&reason=too+big"),
    );
    assert_eq!(
        (
            status,
            header(&head, "location").map(|l| l.contains("done=reject"))
        ),
        (303, Some(true))
    );
}

/// The big candidate page: served (9 timed fetches), at most 1 MiB gzipped, every changed line
/// rendered; prints server time, bytes and first contentful paint (`UI_BENCH`).
async fn the_big_candidate_page_is_measured(r: &Review, c: &Client, session: &str) {
    let (addr, big_job) = (r.addr, &r.big_job);
    let mut server_ms = Vec::new();
    let mut bytes = 0;
    let mut gzipped = 0;
    for _ in 0..9 {
        let t = Instant::now();
        let (status, _, body) = ui_http(
            addr,
            "GET",
            &format!("/ui/jobs/{big_job}/candidate"),
            Some(session),
            None,
        );
        server_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(status, 200);
        bytes = body.len();
    }
    let (status, head, body) = ui_http_with(
        addr,
        "GET",
        &format!("/ui/jobs/{big_job}/candidate"),
        Some(session),
        None,
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(
        (status, header(&head, "content-encoding")),
        (200, Some("gzip"))
    );
    gzipped += body.len();
    assert!(
        gzipped <= 1024 * 1024,
        "the big page is {gzipped} bytes gzipped"
    );
    server_ms.sort_by(f64::total_cmp);
    r.goto(c, &format!("/ui/jobs/{big_job}/candidate")).await;
    let fcp = c
        .execute(
            "const e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : null;",
            vec![],
        )
        .await
        .unwrap();
    let rows = c
        .execute(
            "return document.querySelectorAll('table.diff tr').length;",
            vec![],
        )
        .await
        .unwrap();
    assert!(rows.as_u64().unwrap() >= 10_000, "{rows}");
    shot(c, "09-candidate-big").await;
    eprintln!(
        "UI_BENCH big candidate page (50 files, 10,000 changed lines): {bytes} bytes, {gzipped} gzipped; fetch p50 {:.1} ms (9 runs, min {:.1}, max {:.1}); first contentful paint {fcp} ms",
        server_ms[4], server_ms[0], server_ms[8]
    );
}

/// Signing out ends the session (its cookie no longer opens a page); closes the browser.
async fn signing_out_ends_the_session(r: &Review, c: Client, session: &str) {
    r.goto(&c, "/ui/jobs").await;
    click(&c, Locator::Css("form.inline button")).await;
    assert!(path_ends_with(&c, "/ui/sign-in").await);
    let (status, _, _) = ui_http(r.addr, "GET", "/ui/jobs", Some(session), None);
    assert_eq!(status, 303);
    c.close().await.unwrap();
}

/// Failed sign-ins are bounded: past the limit wrong tokens get 429, yet the right token still
/// signs in; the service logged the sign-ins and no CSP report.
fn failed_sign_ins_are_bounded(r: &Review) {
    let mut last = 0;
    for _ in 0..12 {
        last = http_sign_in_answer(r.addr, &"1".repeat(64)).0;
    }
    assert_eq!(last, 429);
    let (status, _) = http_sign_in_answer(r.addr, &r.token);
    assert_eq!(status, 303);
    assert!(r.service.logged("PATCH_CANDIDATE_UI_SIGN_IN"));
    assert!(!r.service.logged("PATCH_CANDIDATE_UI_CSP_REPORT"));
}

/// One browser session over the planted jobs, step by step (each step needs the state the
/// previous ones left: the session, the recorded decisions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_ui_review_in_a_real_browser() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    let Some(driver) = start_driver() else {
        return;
    };
    let r = Review::plant_and_serve();
    tally("docker_ui_review_in_a_real_browser");

    signed_out_pages_redirect_and_posts_are_refused(&r);
    every_answer_carries_the_security_headers(&r);
    let c = browser(&driver).await;
    let session = only_the_operator_token_signs_in(&r, &c).await;
    the_state_filter_shows_only_its_jobs(&r, &c).await;
    the_hostile_candidate_runs_nothing_in_either_view(&r, &c, &session).await;
    the_raw_view_is_sandboxed_text(&r, &session);
    the_hostile_candidate_is_rejected_with_a_reason(&r, &c, &session).await;
    the_clean_candidate_is_accepted(&r, &c).await;
    the_usage_page_is_the_ledger(&r, &c).await;
    let session = role_limited_principals_see_only_their_buttons(&r, &c).await;
    publishing_lands_a_branch_on_the_remote(&r, &c).await;
    a_retry_queues_a_follow_up_that_sees_the_note(&r, &c).await;
    decisions_need_the_sessions_token_and_the_current_digest(&r, &session);
    the_big_candidate_page_is_measured(&r, &c, &session).await;
    signing_out_ends_the_session(&r, c, &session).await;
    failed_sign_ins_are_bounded(&r);
}
