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
pub(crate) fn check_samples<E: Coded>(
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

/// What `#[derive(Coded)]` records about an error enum, for [`check_coded_samples`]. Implemented
/// by the derive only.
pub trait CodedEnum: Coded + Sized {
    /// The codes of the enum's own variants, each once (the enum's inherent `CODES`).
    const CODES: &'static [&'static str];
    /// How many variants the enum has.
    const VARIANTS: usize;
    /// The variant's position in the declaration, `0..VARIANTS`.
    fn variant_index(&self) -> usize;
    /// True when the code is one of [`CodedEnum::CODES`]: false for a wrapped error, another
    /// crate's code and a code held in a field.
    fn owns_code(&self) -> bool;
}

/// The all-variants test of an enum that derives [`Coded`](derive@crate::Coded), in one call:
/// every variant has a sample and every sample follows the message convention
/// ([`check_message_convention`]), and the enum's `CODES` are exactly the codes its own samples
/// return ([`check_code_table`]).
///
/// # Errors
/// A description of the first missing variant, violation or table mismatch.
pub fn check_coded_samples<E: CodedEnum>(samples: &[E]) -> Result<(), String> {
    check_samples(samples, E::VARIANTS, E::variant_index)?;
    check_code_table(
        E::CODES,
        samples.iter().filter(|e| e.owns_code()).map(Coded::code),
    )
}

/// One code table made of others, joined in order at compile time, for a crate whose
/// `ERROR_CODES` holds more than one enum's `CODES` (or codes of types that do not derive
/// [`Coded`](derive@crate::Coded)):
/// `ERROR_CODES` = `vocab::code_table!(GatewayError::CODES, &["PATCH_CANDIDATE_GATEWAY_PROVIDER"])`.
#[macro_export]
macro_rules! code_table {
    ($($part:expr),+ $(,)?) => {{
        const PARTS: &[&[&str]] = &[$($part),+];
        const TABLE: [&str; $crate::__private::total_len(PARTS)] =
            $crate::__private::concat(PARTS);
        &TABLE
    }};
}

/// Compile-time helpers of the derive and of [`code_table!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    /// `a == b`, in a constant.
    #[must_use]
    pub const fn str_eq(a: &str, b: &str) -> bool {
        let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        while let (Some((x, a_rest)), Some((y, b_rest))) = (a.split_first(), b.split_first()) {
            if *x != *y {
                return false;
            }
            (a, b) = (a_rest, b_rest);
        }
        true
    }

    /// The number of codes in `parts` together.
    #[must_use]
    pub const fn total_len(parts: &[&[&str]]) -> usize {
        let mut total = 0;
        let mut rest = parts;
        while let Some((part, tail)) = rest.split_first() {
            total += part.len();
            rest = tail;
        }
        total
    }

    /// `parts` joined in order; `N` must be [`total_len`] of them.
    #[must_use]
    pub const fn concat<const N: usize>(parts: &[&[&'static str]]) -> [&'static str; N] {
        assert!(
            total_len(parts) == N,
            "the table length is not the parts' total"
        );
        let mut table = [""; N];
        let mut free: &mut [&'static str] = &mut table;
        let mut rest = parts;
        while let Some((part, tail)) = rest.split_first() {
            let mut codes = *part;
            while let Some((code, more)) = codes.split_first() {
                #[expect(clippy::mem_replace_with_default, reason = "`mem::take` is not const")]
                let taken = core::mem::replace(&mut free, &mut []);
                if let Some((slot, others)) = taken.split_first_mut() {
                    *slot = *code;
                    free = others;
                }
                codes = more;
            }
            rest = tail;
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::{Coded, CodedEnum, FailureClass, check_coded_samples};
    use crate::VocabError;

    const NAMED_CODE: &str = "TEST_NAMED";

    /// An inner error whose class is usage, to see what a wrapper makes of it.
    #[derive(Debug, thiserror::Error, crate::Coded)]
    enum Inner {
        #[error("TEST_INNER_USAGE: bad flag")]
        #[coded(usage)]
        Usage,
        #[error("TEST_INNER_IO: i/o")]
        #[coded(environment)]
        Io,
    }

    #[derive(Debug, thiserror::Error, crate::Coded)]
    enum Sample {
        #[error("TEST_PLAIN: {detail}")]
        Plain { detail: &'static str },
        #[error("TEST_PLAIN: the same code again")]
        Again,
        #[error("TEST_NAMED: {0}")]
        #[coded(code = NAMED_CODE, environment)]
        Named(u32),
        #[error("REPOSITORY_PATCH_MANIFEST_HASH: elsewhere")]
        #[coded(foreign = crate::MANIFEST_HASH_CODE, usage)]
        Foreign,
        #[error("{code}: chosen at run time")]
        #[coded(field = code)]
        Field { code: &'static str },
        #[error(transparent)]
        Wrapped(#[from] Inner),
        #[error("{0}")]
        #[coded(delegate)]
        Delegated(VocabError),
        #[error(transparent)]
        #[coded(usage_as_rejected)]
        Squashed { inner: Inner },
    }

    fn samples() -> Vec<Sample> {
        vec![
            Sample::Plain { detail: "x" },
            Sample::Again,
            Sample::Named(1),
            Sample::Foreign,
            Sample::Field { code: "OTHER_CODE" },
            Sample::Wrapped(Inner::Usage),
            Sample::Delegated(VocabError::DigestFormat),
            Sample::Squashed {
                inner: Inner::Usage,
            },
            Sample::Squashed { inner: Inner::Io },
        ]
    }

    #[test]
    fn the_derive_reads_codes_from_messages_and_attributes() {
        assert_eq!(Sample::CODES, ["TEST_PLAIN", "TEST_NAMED"]);
        assert_eq!(<Sample as CodedEnum>::CODES, Sample::CODES);
        assert_eq!(<Sample as CodedEnum>::VARIANTS, 8);
        let got: Vec<(&str, FailureClass, usize, bool)> = samples()
            .iter()
            .map(|e| (e.code(), e.class(), e.variant_index(), e.owns_code()))
            .collect();
        use FailureClass::{Environment, Rejected, Usage};
        assert_eq!(
            got,
            [
                ("TEST_PLAIN", Rejected, 0, true),
                ("TEST_PLAIN", Rejected, 1, true),
                ("TEST_NAMED", Environment, 2, true),
                ("REPOSITORY_PATCH_MANIFEST_HASH", Usage, 3, false),
                ("OTHER_CODE", Rejected, 4, false),
                ("TEST_INNER_USAGE", Usage, 5, false),
                ("REPOSITORY_PATCH_MANIFEST_HASH", Rejected, 6, false),
                ("TEST_INNER_USAGE", Rejected, 7, false),
                ("TEST_INNER_IO", Environment, 7, false),
            ]
        );
        // The inherent `code()` and the trait agree.
        for e in samples() {
            assert_eq!(Sample::code(&e), Coded::code(&e));
        }
        assert_eq!(Inner::CODES, ["TEST_INNER_USAGE", "TEST_INNER_IO"]);
    }

    #[test]
    fn check_coded_samples_wants_every_variant_and_the_exact_table() {
        let mut all = samples();
        check_coded_samples(&all).unwrap();
        all.retain(|e| !matches!(e, Sample::Field { .. }));
        let missing = check_coded_samples(&all).unwrap_err();
        assert!(missing.contains("variant 4"), "{missing}");
        check_coded_samples(&[Inner::Usage, Inner::Io]).unwrap();
        assert!(check_coded_samples(&[Inner::Usage]).is_err());
        // A message that repeats its code fails the convention.
        let repeated = Sample::Plain {
            detail: "TEST_PLAIN",
        };
        assert!(super::check_message_convention(&repeated).is_err());
    }

    #[test]
    fn code_tables_join_in_order_at_compile_time() {
        const JOINED: &[&str] = crate::code_table!(Inner::CODES, &["TEST_EXTRA"], Sample::CODES);
        assert_eq!(
            JOINED,
            [
                "TEST_INNER_USAGE",
                "TEST_INNER_IO",
                "TEST_EXTRA",
                "TEST_PLAIN",
                "TEST_NAMED"
            ]
        );
        const EMPTY: &[&str] = crate::code_table!(&[]);
        assert!(EMPTY.is_empty());
        assert!(super::__private::str_eq("A_B", "A_B"));
        assert!(!super::__private::str_eq("A_B", "A_C"));
        assert!(!super::__private::str_eq("A_B", "A_BC"));
        assert!(super::__private::str_eq("", ""));
    }
}
