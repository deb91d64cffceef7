//! Test helpers for this crate's tests and the scenario tests (feature `testkit`, never in a
//! binary): a fresh PostgreSQL database per test on the shared throwaway cluster that
//! `infra/ci/postgres.sh` starts, and a private cluster a test may stop and start.
//!
//! Environment:
//! * `PATCH_CANDIDATE_TEST_POSTGRES`: a connection URL of the shared cluster (any database;
//!   the helpers create their own).
//! * `PATCH_CANDIDATE_REQUIRE_POSTGRES=1`: a PostgreSQL test fails instead of skipping when that
//!   URL is unset or unreachable, or when a private cluster cannot start.
//! * `PATCH_CANDIDATE_POSTGRES_SCRIPT`: the cluster script (default: `infra/ci/postgres.sh` of
//!   this source tree).

use std::path::PathBuf;
use std::process::Command;

use tokio_postgres::NoTls;

/// The shared cluster's URL.
pub const POSTGRES_URL_ENV: &str = "PATCH_CANDIDATE_TEST_POSTGRES";
/// Set to `1` to turn a missing PostgreSQL into a failure.
pub const REQUIRE_POSTGRES_ENV: &str = "PATCH_CANDIDATE_REQUIRE_POSTGRES";
/// Overrides the path of the cluster script.
pub const POSTGRES_SCRIPT_ENV: &str = "PATCH_CANDIDATE_POSTGRES_SCRIPT";

/// True when PostgreSQL tests must not skip.
#[must_use]
pub fn postgres_required() -> bool {
    std::env::var(REQUIRE_POSTGRES_ENV).is_ok_and(|v| v == "1")
}

/// Why a PostgreSQL helper could not provide a database.
#[derive(Debug)]
pub enum Unavailable {
    /// Not configured and not required: the caller skips (and says so on stderr).
    Skip(String),
    /// Required, or configured but broken: the caller fails.
    Fail(String),
}

impl Unavailable {
    fn fail_or_skip(reason: String) -> Self {
        if postgres_required() {
            Self::Fail(reason)
        } else {
            Self::Skip(reason)
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Skip(r) => write!(
                f,
                "SKIPPED (PostgreSQL unavailable, {REQUIRE_POSTGRES_ENV} unset): {r}"
            ),
            Self::Fail(r) => write!(
                f,
                "PostgreSQL required ({REQUIRE_POSTGRES_ENV}=1) but unusable: {r}"
            ),
        }
    }
}

/// `url` with its database name replaced by `database` (URL or key=value form).
#[must_use]
pub fn with_database(url: &str, database: &str) -> String {
    let Some(rest) = url
        .strip_prefix("postgres://")
        .map(|r| ("postgres://", r))
        .or_else(|| {
            url.strip_prefix("postgresql://")
                .map(|r| ("postgresql://", r))
        })
    else {
        return format!("{url} dbname={database}");
    };
    let (scheme, rest) = rest;
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = base.split_once('/').map_or(base, |(a, _)| a);
    match query {
        Some(q) => format!("{scheme}{authority}/{database}?{q}"),
        None => format!("{scheme}{authority}/{database}"),
    }
}

fn random_name() -> String {
    let mut bytes = [0_u8; 8];
    // A failing random source only weakens uniqueness; the CREATE then fails loudly.
    let _ = getrandom::fill(&mut bytes);
    format!("pc_test_{}", hex::encode(bytes))
}

/// Creates a fresh, empty database on the cluster at `admin_url` and returns its URL.
///
/// # Errors
/// The connection or `CREATE DATABASE` failure, as text.
pub async fn create_database(admin_url: &str) -> Result<String, String> {
    let (client, connection) = tokio_postgres::connect(admin_url, NoTls)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let task = tokio::spawn(connection);
    let name = random_name();
    let created = client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| format!("create database: {e}"));
    drop(client);
    let _ = task.await;
    created?;
    Ok(with_database(admin_url, &name))
}

/// Builds, in the empty PostgreSQL database at `url`, the schema an older build left: this
/// crate's own statements for the migrations up to `version`, each recorded as applied, then
/// `seed` (rows that build would have written). Opening a [`crate::JobStore`] on it runs the
/// upgrades after `version`.
///
/// # Errors
/// The connection or statement failure, as text.
pub async fn postgres_schema_at_version(url: &str, version: i64, seed: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let task = tokio::spawn(connection);
    let built = async {
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (
                     version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL
                 )",
            )
            .await?;
        for m in crate::schema::MIGRATIONS
            .iter()
            .filter(|m| m.version <= version)
        {
            client.batch_execute(m.postgres).await?;
            client
                .execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, 0)",
                    &[&m.version, &m.name],
                )
                .await?;
        }
        client.batch_execute(seed).await
    }
    .await
    .map_err(|e| format!("schema version {version}: {e}"));
    drop(client);
    let _ = task.await;
    built
}

/// [`postgres_schema_at_version`] for a SQLite file at `path` (created, mode 0600): the job
/// store file of a state directory as an older build left it.
///
/// # Errors
/// The file or statement failure, as text.
pub fn sqlite_schema_at_version(
    path: &std::path::Path,
    version: i64,
    seed: &str,
) -> Result<(), String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| format!("open: {e}"))?;
    let built = (|| {
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                 version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
             )",
        )?;
        for m in crate::schema::MIGRATIONS
            .iter()
            .filter(|m| m.version <= version)
        {
            conn.execute_batch(m.sqlite)?;
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, 0)",
                rusqlite::params![m.version, m.name],
            )?;
        }
        conn.execute_batch(seed)
    })()
    .map_err(|e| format!("schema version {version}: {e}"));
    drop(conn);
    built?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("mode: {e}"))
}

/// A fresh database on the shared cluster: `Err(Skip)` when unconfigured and not required.
///
/// # Errors
/// [`Unavailable`]: skip, or fail when required or when the configured cluster is broken.
pub async fn fresh_postgres_url() -> Result<String, Unavailable> {
    let Ok(admin) = std::env::var(POSTGRES_URL_ENV) else {
        return Err(Unavailable::fail_or_skip(format!(
            "{POSTGRES_URL_ENV} is unset"
        )));
    };
    create_database(&admin).await.map_err(Unavailable::Fail)
}

/// The cluster script.
#[must_use]
pub fn script_path() -> PathBuf {
    std::env::var_os(POSTGRES_SCRIPT_ENV).map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../infra/ci/postgres.sh"
            ))
        },
        PathBuf::from,
    )
}

fn script(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(script_path())
        .args(args)
        .output()
        .map_err(|e| format!("run postgres.sh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "postgres.sh {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A throwaway PostgreSQL cluster of one test, on a unix socket in its own temporary
/// directory: a test can stop it and start it again (the "database goes away" cases) without
/// disturbing tests that share the main cluster. Stopped and removed when dropped.
#[derive(Debug)]
pub struct PrivateCluster {
    dir: tempfile::TempDir,
    url: String,
}

impl PrivateCluster {
    /// Creates and starts the cluster (`initdb` as the `postgres` user when run as root).
    ///
    /// # Errors
    /// [`Unavailable`]: skip when PostgreSQL is not required and the cluster cannot start.
    pub fn start() -> Result<Self, Unavailable> {
        let dir = tempfile::Builder::new()
            .prefix("pc-pg-")
            .tempdir()
            .map_err(|e| Unavailable::fail_or_skip(format!("temp dir: {e}")))?;
        let path = dir.path().to_string_lossy().into_owned();
        let url = script(&["start", &path]).map_err(Unavailable::fail_or_skip)?;
        Ok(Self { dir, url })
    }

    /// The `postgres` database's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server (fast shutdown: sessions are disconnected).
    ///
    /// # Errors
    /// The script's failure.
    pub fn stop(&self) -> Result<(), String> {
        script(&["stop", &self.dir.path().to_string_lossy()]).map(drop)
    }

    /// Starts the stopped server again on the same socket and data.
    ///
    /// # Errors
    /// The script's failure.
    pub fn restart(&self) -> Result<(), String> {
        script(&["start", &self.dir.path().to_string_lossy()]).map(drop)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = script(&["stop", &self.dir.path().to_string_lossy()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_in_both_forms() {
        assert_eq!(
            with_database("postgres://postgres@%2Ftmp%2Fx/postgres", "t1"),
            "postgres://postgres@%2Ftmp%2Fx/t1"
        );
        assert_eq!(
            with_database("postgresql://u@h:5/db?sslmode=disable", "t1"),
            "postgresql://u@h:5/t1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h", "t1"), "postgres://u@h/t1");
        assert_eq!(
            with_database("host=/tmp/x user=postgres", "t1"),
            "host=/tmp/x user=postgres dbname=t1"
        );
    }
}
