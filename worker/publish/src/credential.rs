//! Handing the remote's credential to git without putting it in any argv or environment.
//!
//! A [`CredentialSource::File`] is read once (a regular file, 0600 or stricter, at most 4 KiB,
//! one line), checked, and written in git's credential format to a 0600 file in the private
//! mirror directory. git is told (`-c credential.helper=` to clear every other helper, then
//! `-c credential.helper=<our helper>`) to ask a short shell helper of ours, also in the private
//! directory, that prints that file with the shell's own `read` and `printf` builtins: no
//! program is ever started with the credential in its arguments, and no environment variable
//! holds it. The only argv that mentions the credential is the helper's path.

use std::ffi::OsString;
use std::io::Write as _;

use cap_std::fs::{OpenOptions, OpenOptionsExt as _};

use crate::error::PublishError;
use crate::mirror::Mirror;
use crate::types::CredentialSource;

/// The user sent with a token-only credential (GitHub, Gitea and Forgejo accept any name).
const TOKEN_USER: &str = "x-access-token";

/// The helper: drains git's request, answers `get` with the file beside it, ignores `store` and
/// `erase`. Builtins only (`read`, `printf`, `[`), so the credential never reaches an argv.
const HELPER_SCRIPT: &str = "#!/bin/sh\n\
while IFS= read -r line && [ -n \"$line\" ]; do :; done\n\
[ \"$1\" = get ] || exit 0\n\
while IFS= read -r line; do printf '%s\\n' \"$line\"; done < \"${0%/*}/credential\"\n";

fn credential_error(detail: &'static str) -> PublishError {
    PublishError::Credential { detail }
}

/// The `-c` options every transport command of one publication gets.
pub(crate) fn transport_options(
    source: &CredentialSource,
    mirror: &Mirror,
) -> Result<Vec<OsString>, PublishError> {
    let mut options: Vec<OsString> = vec![
        "-c".into(),
        "http.followRedirects=false".into(),
        "-c".into(),
        "credential.interactive=false".into(),
        "-c".into(),
        "credential.helper=".into(),
    ];
    match source {
        CredentialSource::None => {}
        CredentialSource::Helper(name) => {
            options.push("-c".into());
            options.push(format!("credential.helper={name}").into());
        }
        CredentialSource::File(path) => {
            let (user, secret) = read_credential_file(path)?;
            install_helper(mirror, &user, &secret)?;
            let helper = mirror.root().join("credential-helper");
            let mut value = OsString::from("credential.helper=");
            value.push(helper);
            options.push("-c".into());
            options.push(value);
        }
    }
    Ok(options)
}

/// Reads and checks a forge token file: the credential file's rules, one token, no `:`.
pub(crate) fn read_token_file(path: &std::path::Path) -> Result<String, PublishError> {
    let line = read_secret_line(path)?;
    if line.contains(':') {
        return Err(credential_error("the token file must hold the token alone"));
    }
    Ok(line)
}

/// Reads and checks the operator's credential file: `user:password` or a token.
fn read_credential_file(path: &std::path::Path) -> Result<(String, String), PublishError> {
    let line = read_secret_line(path)?;
    match line.split_once(':') {
        Some((user, secret)) if !user.is_empty() && !secret.is_empty() => {
            Ok((user.to_owned(), secret.to_owned()))
        }
        Some(_) => Err(credential_error(
            "the credential file's user and password must both be non-empty",
        )),
        None => Ok((TOKEN_USER.to_owned(), line)),
    }
}

/// The one line of a secret file, by the house's one reader (`forge::read_secret_file`): a
/// regular file (no link followed), 0600 or stricter, at most 4 KiB, UTF-8 without control
/// characters.
fn read_secret_line(path: &std::path::Path) -> Result<String, PublishError> {
    ::forge::read_secret_file(path).map_err(|e| match e {
        ::forge::ForgeError::Secret { detail } => credential_error(detail),
        _ => credential_error("the credential file cannot be read"),
    })
}

/// Writes the credential (0600) and the helper (0700) into the private directory.
fn install_helper(mirror: &Mirror, user: &str, secret: &str) -> Result<(), PublishError> {
    let dir = mirror.dir()?;
    let write = |name: &str, mode: u32, bytes: &[u8]| -> Result<(), PublishError> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(mode);
        let mut file = dir
            .open_with(name, &options)
            .map_err(|_| credential_error("cannot write the private credential copy"))?;
        file.write_all(bytes)
            .map_err(|_| credential_error("cannot write the private credential copy"))
    };
    let answer = format!("username={user}\npassword={secret}\n");
    write("credential", 0o600, answer.as_bytes())?;
    write("credential-helper", 0o700, HELPER_SCRIPT.as_bytes())
}
