//! The one git launcher of the workspace: every git process a library crate starts (snapshot
//! loads, the finalizer's `git apply`, the gate's tree stream, publication, the service's bare
//! mirrors) is built and run by [`Git`].
//!
//! A launch has
//! - an environment: [`Git::isolated`] (the default: nothing of the host's environment but
//!   `PATH`, no system or global config, no replace refs, no prompts, no lazy fetches, every
//!   transport off), [`Git::transfer`] (isolated, plus exactly one transport for a clone or fetch
//!   of a locator a client named, credential helpers cleared, hooks off), or the explicit
//!   [`Git::host_network`] (see [`HOST_NETWORK_VARIABLES`]) for a network transfer that needs
//!   the host's own git configuration;
//! - a deadline ([`GIT_DEADLINE`] unless shortened): the process leads its own process group and
//!   the group is killed when the deadline passes (see the process module's security notes);
//! - stdin: none, or bytes fed from a thread (a child that stops reading cannot block the caller);
//! - bounded output: stdout and stderr are discarded unless captured, and a capture keeps at most
//!   its cap (more kills the process and fails with [`GitLaunchError::OutputTooLarge`]).
//!
//! Failures are a [`GitLaunchError`]; each crate maps it to its own coded error, so the wire
//! codes of the callers do not depend on the launcher.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write as _};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::process::{Deadline, GIT_DEADLINE, GitChild, GitLaunchError, Shared};

/// The variables of the host's environment that [`Git::host_network`] passes on (besides
/// `PATH`): `HOME` and `XDG_CONFIG_HOME` (the operator's global git config: `http.proxy`,
/// `http.sslCAInfo`, `url.<base>.insteadOf`, credential helpers), the proxy variables curl reads,
/// and the CA bundle variables. Nothing else of the host's environment reaches git.
pub const HOST_NETWORK_VARIABLES: &[&str] = &[
    "HOME",
    "XDG_CONFIG_HOME",
    "http_proxy",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Where a stream of the process goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    Discard,
    Capture(usize),
}

impl Sink {
    fn stdio(self) -> Stdio {
        match self {
            Sink::Discard => Stdio::null(),
            Sink::Capture(_) => Stdio::piped(),
        }
    }
}

/// What a finished git process left: its exit status and the captured streams (empty when
/// discarded).
#[derive(Debug)]
pub struct GitOutput {
    /// The exit status.
    pub status: ExitStatus,
    /// Captured stdout (at most its cap).
    pub stdout: Vec<u8>,
    /// Captured stderr (at most its cap).
    pub stderr: Vec<u8>,
}

impl GitOutput {
    /// Exit status 0.
    #[must_use]
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

#[derive(Debug, Default)]
struct CancelState {
    cancelled: bool,
    running: Vec<Arc<Shared>>,
}

/// Cancels the launches it was given to ([`Git::cancel_with`]): their process groups are killed
/// and they fail with [`GitLaunchError::Cancelled`]. For an async caller that runs the launch on
/// a blocking thread and must not leave git running when its future is dropped.
#[derive(Debug, Clone, Default)]
pub struct GitCancel(Arc<Mutex<CancelState>>);

impl GitCancel {
    /// A handle that has cancelled nothing yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Kills every launch given this handle, now and later.
    pub fn cancel(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.cancelled = true;
        for shared in &state.running {
            shared.cancel();
        }
    }

    fn register(&self, deadline: &Deadline) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.running.retain(|s| Arc::strong_count(s) > 1);
        if state.cancelled {
            deadline.shared().cancel();
        }
        state.running.push(Arc::clone(deadline.shared()));
    }
}

/// One git process to launch (see the module docs).
#[derive(Debug)]
pub struct Git {
    cmd: Command,
    deadline: Duration,
    stdout: Sink,
    stderr: Sink,
    cancel: Option<GitCancel>,
}

impl Git {
    /// An isolated git: only `PATH` of the host's environment, no system or user config, no
    /// replace refs, no prompts, no lazy fetches, every transport off, no fsmonitor; run in
    /// `git_dir` when given.
    #[must_use]
    pub fn isolated(git_dir: Option<&Path>) -> Self {
        Self::isolated_with_path(std::env::var_os("PATH").as_deref(), git_dir)
    }

    /// [`Self::isolated`] with an explicit `PATH` (the only variable of the environment kept).
    #[must_use]
    pub fn isolated_with_path(path_var: Option<&OsStr>, git_dir: Option<&Path>) -> Self {
        Self::from_command(isolated_command(path_var, git_dir))
    }

    /// [`Self::isolated`] for a transfer from a repository a client named (a clone or fetch):
    /// exactly the one transport `protocol` allowed (`GIT_ALLOW_PROTOCOL`, e.g. `https` or
    /// `file`), every credential helper cleared and hooks off. Nothing of the host's environment
    /// but `PATH`: no `HOME` (so no global config, `insteadOf` rewrite or credential helper of the
    /// operator's applies to a client's locator) and no `SSH_AUTH_SOCK`.
    #[must_use]
    pub fn transfer(git_dir: Option<&Path>, protocol: &str) -> Self {
        let mut git = Self::isolated(git_dir);
        git.allow_protocol(protocol).args([
            "-c",
            "credential.helper=",
            "-c",
            "core.hooksPath=/dev/null",
        ]);
        git
    }

    /// The explicit host-environment mode, for a network transfer that needs the host's own git
    /// setup (a proxy, a private CA bundle, the operator's credential helper): like
    /// [`Self::isolated`], but the variables in `HOST_NETWORK_VARIABLES` pass from the host's
    /// environment and the global git config (`$HOME/.gitconfig`, `$XDG_CONFIG_HOME/git/config`)
    /// is read. Still: no system config, exactly the one transport `protocol`, no prompts, hooks
    /// off. Never for a locator a client chose: the operator's config would apply to it.
    #[must_use]
    pub fn host_network(git_dir: Option<&Path>, protocol: &str) -> Self {
        Self::host_network_from(std::env::vars_os(), git_dir, protocol)
    }

    fn host_network_from(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        git_dir: Option<&Path>,
        protocol: &str,
    ) -> Self {
        let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
        let path = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let mut git = Self::isolated_with_path(path, git_dir);
        git.cmd.env_remove("GIT_CONFIG_GLOBAL");
        for (key, value) in &vars {
            if HOST_NETWORK_VARIABLES.iter().any(|k| key == k) {
                git.cmd.env(key, value);
            }
        }
        git.allow_protocol(protocol)
            .args(["-c", "core.hooksPath=/dev/null"]);
        git
    }

    fn from_command(cmd: Command) -> Self {
        Self {
            cmd,
            deadline: GIT_DEADLINE,
            stdout: Sink::Discard,
            stderr: Sink::Discard,
            cancel: None,
        }
    }

    /// Allows exactly the transports in `protocols` (`GIT_ALLOW_PROTOCOL`, colon-separated; empty
    /// for none).
    pub fn allow_protocol(&mut self, protocols: &str) -> &mut Self {
        self.cmd.env("GIT_ALLOW_PROTOCOL", protocols);
        self
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Sets one git variable of the process's environment (e.g. `GIT_LITERAL_PATHSPECS`).
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.cmd.env(key, value);
        self
    }

    /// Sets several git variables of the process's environment.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.cmd.envs(vars);
        self
    }

    /// Shortens (or sets) the deadline; `GIT_DEADLINE` by default.
    pub fn deadline(&mut self, limit: Duration) -> &mut Self {
        self.deadline = limit;
        self
    }

    /// Keeps at most `cap` bytes of stdout (discarded by default).
    pub fn capture_stdout(&mut self, cap: usize) -> &mut Self {
        self.stdout = Sink::Capture(cap);
        self
    }

    /// Keeps at most `cap` bytes of stderr (discarded by default).
    pub fn capture_stderr(&mut self, cap: usize) -> &mut Self {
        self.stderr = Sink::Capture(cap);
        self
    }

    /// Lets `cancel` kill this launch.
    pub fn cancel_with(&mut self, cancel: &GitCancel) -> &mut Self {
        self.cancel = Some(cancel.clone());
        self
    }

    /// The command as it will be spawned (for inspection; the launcher alone spawns it).
    #[must_use]
    pub fn as_command(&self) -> &Command {
        &self.cmd
    }

    /// Runs git to its end, feeding it `stdin` (none: stdin is `/dev/null`).
    ///
    /// # Errors
    /// [`GitLaunchError`] when git cannot be started, runs past its deadline, is cancelled,
    /// prints more than a capture's cap, or its output cannot be read. A non-zero exit is not an
    /// error: see `GitOutput::status`.
    pub fn run(&mut self, stdin: Option<&[u8]>) -> Result<GitOutput, GitLaunchError> {
        let deadline = Deadline::start(self.deadline)?;
        if let Some(cancel) = &self.cancel {
            cancel.register(&deadline);
        }
        run_under(&deadline, &mut self.cmd, stdin, self.stdout, self.stderr)
    }

    /// Starts git with piped stdout (and piped stdin when `stdin`) for a caller that streams;
    /// a stream's stderr is discarded. The deadline runs until [`GitStream::wait`]; dropping the
    /// stream kills the process.
    ///
    /// # Errors
    /// As [`Self::run`], for the start.
    pub fn stream(&mut self, stdin: bool) -> Result<GitStream, GitLaunchError> {
        let deadline = Deadline::start(self.deadline)?;
        if let Some(cancel) = &self.cancel {
            cancel.register(&deadline);
        }
        self.cmd
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let child = deadline.spawn(&mut self.cmd)?;
        Ok(GitStream { child, deadline })
    }
}

/// A streaming git process (see [`Git::stream`]). Dropped before [`Self::wait`], it is killed
/// with its process group and reaped.
#[derive(Debug)]
pub struct GitStream {
    // Dropped first: the child is killed and reaped before the watchdog stops.
    child: GitChild,
    deadline: Deadline,
}

impl GitStream {
    /// The stdin pipe (once).
    ///
    /// # Errors
    /// [`GitLaunchError::MissingPipe`] when it was taken or not asked for.
    pub fn take_stdin(&mut self) -> Result<ChildStdin, GitLaunchError> {
        self.child.take_stdin()
    }

    /// The stdout pipe (once).
    ///
    /// # Errors
    /// [`GitLaunchError::MissingPipe`] when it was taken.
    pub fn take_stdout(&mut self) -> Result<ChildStdout, GitLaunchError> {
        self.child.take_stdout()
    }

    /// Waits for the exit.
    ///
    /// # Errors
    /// The deadline or cancel error when the process was killed for it.
    pub fn wait(self) -> Result<ExitStatus, GitLaunchError> {
        let status = self.child.wait();
        drop(self.deadline);
        status
    }
}

/// The isolated base command (see [`Git::isolated`]) with an explicit `PATH`.
pub(crate) fn isolated_command(path_var: Option<&OsStr>, git_dir: Option<&Path>) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    if let Some(path) = path_var {
        cmd.env("PATH", path);
    }
    cmd.envs([
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_NO_REPLACE_OBJECTS", "1"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_NO_LAZY_FETCH", "1"),
        ("GIT_OPTIONAL_LOCKS", "0"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        ("GIT_PROTOCOL_FROM_USER", "0"),
        ("GIT_ALLOW_PROTOCOL", ""),
        ("LC_ALL", "C"),
    ]);
    cmd.args([
        "--no-replace-objects",
        "-c",
        "protocol.allow=never",
        "-c",
        "core.fsmonitor=false",
    ]);
    if let Some(dir) = git_dir {
        cmd.arg("--git-dir").arg(dir);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Reads at most `cap` bytes; `None` when the stream holds more.
fn read_capped(reader: impl Read, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    reader
        .take(u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut out)?;
    Ok((out.len() <= cap).then_some(out))
}

/// Reads a captured stream to its end (nothing for a discarded one); kills the process group
/// as soon as the stream fails or passes its cap, so no pipe can keep the caller waiting.
fn drain(
    stream: Option<impl Read>,
    sink: Sink,
    child: &GitChild,
) -> Result<Vec<u8>, GitLaunchError> {
    let (Some(stream), Sink::Capture(cap)) = (stream, sink) else {
        return Ok(Vec::new());
    };
    let read = match read_capped(stream, cap) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(GitLaunchError::OutputTooLarge),
        Err(_) => Err(GitLaunchError::Read),
    };
    if read.is_err() {
        child.kill();
    }
    read
}

/// Runs `cmd` to its end under `deadline` (shared with other processes of one operation).
fn run_under(
    deadline: &Deadline,
    cmd: &mut Command,
    stdin: Option<&[u8]>,
    stdout: Sink,
    stderr: Sink,
) -> Result<GitOutput, GitLaunchError> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(stdout.stdio())
    .stderr(stderr.stdio());
    let mut child = deadline.spawn(cmd)?;
    let input = match stdin {
        Some(_) => Some(child.take_stdin()?),
        None => None,
    };
    let out = match stdout {
        Sink::Capture(_) => Some(child.take_stdout()?),
        Sink::Discard => None,
    };
    let err = match stderr {
        Sink::Capture(_) => Some(child.take_stderr()?),
        Sink::Discard => None,
    };
    let (out, err) = std::thread::scope(|scope| {
        if let (Some(mut pipe), Some(bytes)) = (input, stdin) {
            // A child that exits early (or is killed) closes the pipe; its status decides.
            scope.spawn(move || {
                let _ = pipe.write_all(bytes);
            });
        }
        let child = &child;
        let err = scope.spawn(move || drain(err, stderr, child));
        let out = drain(out, stdout, child);
        (out, err.join().unwrap_or(Err(GitLaunchError::Read)))
    });
    let status = child.wait()?;
    Ok(GitOutput {
        status,
        stdout: out?,
        stderr: err?,
    })
}

/// Runs `cmd` under `deadline`, collecting at most `cap` bytes of stdout and of stderr (more is
/// an error and kills the process).
pub(crate) fn capture(
    deadline: &Deadline,
    cmd: &mut Command,
    cap: usize,
) -> Result<GitOutput, GitLaunchError> {
    run_under(deadline, cmd, None, Sink::Capture(cap), Sink::Capture(cap))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::tests::{assert_reaped, fake_git, fake_git_recording_pid};
    use super::*;

    fn system_path() -> OsString {
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into())
    }

    /// A fake home whose global config names a user.
    fn fake_home(dir: &Path) -> std::path::PathBuf {
        let home = dir.join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join(".gitconfig"), "[user]\n\tname = Host Operator\n").unwrap();
        home
    }

    #[test]
    fn a_git_past_its_deadline_is_killed_with_its_group() {
        let bin = tempfile::tempdir().unwrap();
        // A grandchild holds the pipes open; the whole group dies.
        let (path, pid_file) = fake_git_recording_pid(bin.path(), "sleep 30 & sleep 30");
        let started = Instant::now();
        let mut git = Git::isolated_with_path(Some(&path), None);
        git.deadline(Duration::from_millis(300))
            .capture_stdout(1024)
            .capture_stderr(1024);
        let err = git.run(Some(&vec![b'x'; 4 * 1024 * 1024])).unwrap_err();
        assert_eq!(err, GitLaunchError::Deadline(Duration::from_millis(300)));
        assert_eq!(err.to_string(), "git exceeded its deadline of 300ms");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_reaped(&pid_file);
    }

    #[test]
    fn output_beyond_its_cap_kills_git_and_is_refused() {
        let bin = tempfile::tempdir().unwrap();
        let path = fake_git(bin.path(), "cat; sleep 30");
        let started = Instant::now();
        let mut git = Git::isolated_with_path(Some(&path), None);
        git.capture_stdout(5);
        let err = git.run(Some(b"hello!")).unwrap_err();
        assert_eq!(err, GitLaunchError::OutputTooLarge);
        assert!(started.elapsed() < Duration::from_secs(10));
        let path = fake_git(bin.path(), "cat");
        let mut git = Git::isolated_with_path(Some(&path), None);
        let out = git.capture_stdout(5).run(Some(b"hello")).unwrap();
        assert!(out.success());
        assert_eq!(out.stdout, b"hello");
        assert!(out.stderr.is_empty());
    }

    #[test]
    fn a_missing_git_is_not_found() {
        let mut git = Git::isolated_with_path(Some(OsStr::new("/nonexistent-bin")), None);
        assert_eq!(
            git.arg("version").run(None).unwrap_err(),
            GitLaunchError::NotFound
        );
    }

    #[test]
    fn a_cancelled_launch_is_killed() {
        let bin = tempfile::tempdir().unwrap();
        let path = fake_git(bin.path(), "sleep 30");
        let cancel = GitCancel::new();
        let trigger = cancel.clone();
        let started = Instant::now();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            trigger.cancel();
        });
        let mut git = Git::isolated_with_path(Some(&path), None);
        let err = git.cancel_with(&cancel).run(None).unwrap_err();
        killer.join().unwrap();
        assert_eq!(err, GitLaunchError::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(10));
        // A handle already cancelled refuses the next launch.
        let mut git = Git::isolated_with_path(Some(&path), None);
        let err = git.cancel_with(&cancel).run(None).unwrap_err();
        assert_eq!(err, GitLaunchError::Cancelled);
    }

    /// The isolated modes never read the host's global config, even with a `HOME` that has
    /// one; the explicit host mode does.
    #[test]
    fn only_the_explicit_host_mode_sees_the_hosts_global_config() {
        let tmp = tempfile::tempdir().unwrap();
        let home = fake_home(tmp.path());
        let user_name = |git: &mut Git| {
            let out = git
                .args(["config", "--get", "user.name"])
                .capture_stdout(1024)
                .run(None)
                .unwrap();
            out.success()
                .then(|| String::from_utf8(out.stdout).unwrap())
        };
        let mut isolated = Git::isolated_with_path(Some(&system_path()), None);
        isolated.env("HOME", &home).env("XDG_CONFIG_HOME", &home);
        assert_eq!(user_name(&mut isolated), None);
        let mut transfer = Git::transfer(None, "https");
        transfer.env("HOME", &home);
        assert_eq!(user_name(&mut transfer), None);
        let vars = [
            (OsString::from("PATH"), system_path()),
            (OsString::from("HOME"), home.clone().into_os_string()),
            (
                OsString::from("SSH_AUTH_SOCK"),
                OsString::from("/tmp/agent"),
            ),
        ];
        let mut host = Git::host_network_from(vars, None, "https");
        assert_eq!(user_name(&mut host).as_deref(), Some("Host Operator\n"));
        let envs: Vec<_> = host.as_command().get_envs().collect();
        assert!(envs.iter().any(|(k, v)| *k == "HOME" && v.is_some()));
        assert!(!envs.iter().any(|(k, _)| *k == "SSH_AUTH_SOCK"));
        assert!(
            envs.iter()
                .any(|(k, v)| { *k == "GIT_ALLOW_PROTOCOL" && *v == Some(OsStr::new("https")) })
        );
    }

    #[test]
    fn a_stream_is_killed_when_dropped_and_waited_when_done() {
        let bin = tempfile::tempdir().unwrap();
        let (path, pid_file) = fake_git_recording_pid(bin.path(), "cat");
        let mut git = Git::isolated_with_path(Some(&path), None);
        let mut stream = git.stream(true).unwrap();
        let mut input = stream.take_stdin().unwrap();
        let mut output = stream.take_stdout().unwrap();
        input.write_all(b"abc").unwrap();
        drop(input);
        let mut read = Vec::new();
        output.read_to_end(&mut read).unwrap();
        assert_eq!(read, b"abc");
        assert!(stream.wait().unwrap().success());
        let mut git = Git::isolated_with_path(Some(&path), None);
        let stream = git.stream(true).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(stream);
        assert_reaped(&pid_file);
    }
}
