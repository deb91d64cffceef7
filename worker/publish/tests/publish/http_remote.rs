//! Publication to a Git HTTP remote (`git http-backend` behind the test's loopback server, basic
//! auth checked against a file), with the credential looked for in every process while the push
//! is held in flight.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pretty_assertions::assert_eq;
use publish::{CredentialSource, Remote, prepare, publish};

use crate::server::GitHttpServer;
use crate::support::{Fixture, Request, git, hash_tree, secret};

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// What one pass over `/proc` found: processes whose argv or environment holds `needle`, and
/// processes that are part of a push over HTTP.
#[derive(Debug, Default)]
struct Scan {
    leaks: Vec<String>,
    push_processes: usize,
}

fn scan_proc(needle: &[u8]) -> Scan {
    let mut scan = Scan::default();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        for file in ["cmdline", "environ"] {
            // A process that exited meanwhile, or one we may not read, has nothing to show.
            let Ok(bytes) = std::fs::read(entry.path().join(file)) else {
                continue;
            };
            if bytes.windows(needle.len()).any(|w| w == needle) {
                scan.leaks.push(format!("/proc/{pid}/{file}"));
            }
            if file == "cmdline" {
                let text = String::from_utf8_lossy(&bytes);
                if text.contains("remote-http") || (text.contains("git") && text.contains("push")) {
                    scan.push_processes += 1;
                }
            }
        }
    }
    scan
}

/// A request to publish the fixture's candidate to `branch` of the server's `remote.git`.
fn served_request(server: &GitHttpServer, branch: &str) -> Request {
    Request::new(Remote::parse(&server.url("remote.git")).unwrap(), branch)
}

/// [`served_request`] with the credential file `name` (private, in the fixture's directory)
/// holding `content`.
fn with_credential_file(
    fx: &Fixture,
    server: &GitHttpServer,
    branch: &str,
    name: &str,
    content: &str,
) -> Request {
    let file = fx.tmp.path().join(name);
    write_private(&file, content);
    let mut request = served_request(server, branch);
    request.credential = CredentialSource::file(&file);
    request
}

/// Asserts that the remote's `branch` is at `commit`.
fn assert_branch_at(fx: &Fixture, branch: &str, commit: &str) {
    assert_eq!(
        fx.remote_refs().get(&format!("refs/heads/{branch}")),
        Some(&commit.to_owned())
    );
}

fn served_fixture(server_credentials: &str) -> (Fixture, GitHttpServer) {
    let fx = Fixture::new();
    let creds = fx.tmp.path().join("server-credentials");
    write_private(&creds, server_credentials);
    let server = GitHttpServer::start(fx.tmp.path(), &creds);
    (fx, server)
}

#[test]
fn publishes_over_http_with_a_credential_file_never_visible_in_any_process() {
    let password = secret("http-password");
    let (fx, server) = served_fixture(&format!("publisher:{password}\n"));
    let before = hash_tree(&fx.user);
    let request = with_credential_file(
        &fx,
        &server,
        "candidate/http",
        "client-credentials",
        &format!("publisher:{password}\n"),
    );

    server.hold_next_push();
    let done = AtomicBool::new(false);
    let scans = AtomicUsize::new(0);
    let (record, background, held) = std::thread::scope(|s| {
        let scanner = s.spawn(|| {
            let mut all = Scan::default();
            while !done.load(Ordering::SeqCst) {
                let one = scan_proc(password.as_bytes());
                all.leaks.extend(one.leaks);
                all.push_processes += one.push_processes;
                scans.fetch_add(1, Ordering::SeqCst);
            }
            all
        });
        let publisher = s.spawn(|| {
            let prepared = prepare(&request.build(&fx, None)).unwrap();
            let recorded = prepared.commit_id().to_owned();
            (recorded, prepared.push())
        });
        assert!(
            server.wait_held(Duration::from_secs(60)),
            "the push never reached the server"
        );
        // The push is blocked in flight: look at every process several times.
        let mut held = Scan::default();
        for _ in 0..20 {
            let one = scan_proc(password.as_bytes());
            held.leaks.extend(one.leaks);
            held.push_processes += one.push_processes;
            std::thread::sleep(Duration::from_millis(10));
        }
        server.release();
        let (recorded, pushed) = publisher.join().unwrap();
        done.store(true, Ordering::SeqCst);
        let background = scanner.join().unwrap();
        let record = pushed.unwrap();
        assert_eq!(record.commit_id, recorded);
        (record, background, held)
    });
    assert_eq!(held.leaks, Vec::<String>::new());
    assert_eq!(background.leaks, Vec::<String>::new());
    assert!(
        held.push_processes > 0,
        "no push process was seen while the push was held"
    );
    assert!(scans.load(Ordering::SeqCst) > 0);
    // The credential was needed (401 first) and accepted.
    assert!(server.unauthorized.load(Ordering::SeqCst) > 0);
    assert!(server.authorized.load(Ordering::SeqCst) > 0);

    assert!(record.created);
    assert_eq!(record.remote, server.url("remote.git"));
    assert!(!record.remote.contains(&password));
    assert_branch_at(&fx, "candidate/http", &record.commit_id);
    assert_eq!(
        git(
            &fx.remote_dir,
            &["rev-parse", &format!("{}^{{tree}}", record.commit_id)]
        ),
        fx.expected_tree()
    );
    assert_eq!(hash_tree(&fx.user), before, "the user's repository changed");

    // The same candidate again over HTTP: the same publication, nothing pushed.
    let again = publish(&request.build(&fx, None)).unwrap();
    assert!(!again.created);
    assert_eq!(again.commit_id, record.commit_id);
}

#[test]
fn a_token_alone_is_sent_as_the_password_of_the_token_user() {
    let token = secret("http-token");
    let (fx, server) = served_fixture(&format!("x-access-token:{token}\n"));
    let request = with_credential_file(
        &fx,
        &server,
        "candidate/token",
        "token",
        &format!("{token}\n"),
    );
    let mut req = request.build(&fx, None);
    // The baseline comes from the HTTP remote too.
    req.source = None;
    let record = publish(&req).unwrap();
    assert_branch_at(&fx, "candidate/token", &record.commit_id);
}

#[test]
fn a_wrong_or_missing_credential_is_an_auth_refusal_that_quotes_nothing() {
    let password = secret("right");
    let (fx, server) = served_fixture(&format!("publisher:{password}\n"));
    let wrong = secret("wrong");
    let client_creds = fx.tmp.path().join("wrong");
    write_private(&client_creds, &format!("publisher:{wrong}\n"));
    for credential in [
        CredentialSource::file(&client_creds),
        CredentialSource::None,
    ] {
        let mut request = served_request(&server, "candidate/denied");
        request.credential = credential;
        let err = publish(&request.build(&fx, None)).unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_AUTH");
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(&wrong) && !shown.contains(&password),
            "{shown}"
        );
    }
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/denied"));
}

#[test]
fn an_operator_named_credential_helper_is_used() {
    let password = secret("helper");
    let (fx, server) = served_fixture(&format!("publisher:{password}\n"));
    let store = fx.tmp.path().join("git-credentials");
    write_private(
        &store,
        &format!("http://publisher:{password}@127.0.0.1:{}\n", server.port),
    );
    let mut request = served_request(&server, "candidate/helper");
    request.credential =
        CredentialSource::helper(&format!("store --file={}", store.display())).unwrap();
    let record = publish(&request.build(&fx, None)).unwrap();
    assert_branch_at(&fx, "candidate/helper", &record.commit_id);
}

#[test]
fn a_moved_base_over_http_is_refused() {
    let password = secret("moved");
    let (fx, server) = served_fixture(&format!("publisher:{password}\n"));
    fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let request = with_credential_file(
        &fx,
        &server,
        "candidate/m",
        "c",
        &format!("publisher:{password}\n"),
    );
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_BASE_MOVED"
    );
}
