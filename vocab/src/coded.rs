//! [`Coded`]: the one trait every library error of the project implements, so that the command
//! line, the service and the MCP server map any error to its wire code and exit status the same way.

/// How a failure is reported to the caller. The command line maps it to its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureClass {
    /// The input was refused by a check (exit status 1).
    Rejected,
    /// The command as given cannot run: a path the user named does not exist, conflicting flags
    /// (exit status 2, as for argument errors).
    Usage,
    /// The environment failed: Docker or git unavailable, I/O errors (exit status 3).
    Environment,
}

impl FailureClass {
    /// The command line's exit status for this class.
    #[must_use]
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Rejected => 1,
            Self::Usage => 2,
            Self::Environment => 3,
        }
    }
}

/// An error with a stable wire code. Its `Display` starts with `CODE: ` exactly once; callers
/// print the message as it is and never prepend the code again.
pub trait Coded: std::error::Error {
    /// The stable wire code, e.g. `REPOSITORY_PATCH_ARCHIVE_SET`.
    fn code(&self) -> &'static str;
    /// How the failure is reported.
    fn class(&self) -> FailureClass {
        FailureClass::Rejected
    }
}

/// Checks the message convention for one error value: the message starts with `code()` followed by
/// `": "`, and the code appears nowhere else in it. For each crate's all-variants test.
///
/// # Errors
/// A description of the violation.
pub fn check_message_convention(e: &dyn Coded) -> Result<(), String> {
    let message = e.to_string();
    let code = e.code();
    let Some(rest) = message.strip_prefix(code) else {
        return Err(format!("message of {code} does not start with it"));
    };
    if !rest.starts_with(": ") {
        return Err(format!("message of {code} does not continue with \": \""));
    }
    if rest.contains(code) {
        return Err(format!("message of {code} repeats its code"));
    }
    Ok(())
}

/// Checks one crate's code table (its `ERROR_CODES`) against the codes its errors produce: no code
/// is listed twice, every produced code is listed, and every listed code is produced. `produced`
/// holds the codes of one sample of every variant the crate owns (a variant that wraps another
/// crate's error keeps that crate's code and is left out). For each crate's table test.
///
/// # Errors
/// A description of the first mismatch.
pub fn check_code_table<'a>(
    table: &[&str],
    produced: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    let mut listed = std::collections::BTreeSet::new();
    for code in table {
        if !listed.insert(*code) {
            return Err(format!("{code} is listed twice"));
        }
    }
    let produced: std::collections::BTreeSet<&str> = produced.into_iter().collect();
    if let Some(code) = produced.difference(&listed).next() {
        return Err(format!("{code} is produced but not listed"));
    }
    if let Some(code) = listed.difference(&produced).next() {
        return Err(format!("{code} is listed but no sample produces it"));
    }
    Ok(())
}

/// Checks one crate's error samples: every variant, as `variant_index` numbers them
/// (`0..variants`), has a sample, and every sample follows the message convention
/// ([`check_message_convention`]). For each crate's all-variants test.
///
/// # Errors
/// A description of the first missing variant or violation.
pub fn check_samples<E: Coded>(
    samples: &[E],
    variants: usize,
    variant_index: impl Fn(&E) -> usize,
) -> Result<(), String> {
    let covered: std::collections::BTreeSet<usize> = samples.iter().map(variant_index).collect();
    if let Some(missing) = (0..variants).find(|i| !covered.contains(i)) {
        return Err(format!("a variant has no sample (variant {missing})"));
    }
    if let Some(extra) = covered.iter().find(|i| **i >= variants) {
        return Err(format!("variant {extra} is outside 0..{variants}"));
    }
    for e in samples {
        check_message_convention(e)?;
    }
    Ok(())
}
