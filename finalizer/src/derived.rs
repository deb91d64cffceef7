//! The fields of a candidate that the finalizer derives rather than copies: the summary (from the
//! number of changed files), the rationale (a fixed host text), the order of `changed_files`
//! (sorted by path, each path once) and the spelling of the baseline commit (40 lowercase hex
//! digits, as the approval requires). The digest does not see file order, so a candidate whose
//! files were reordered digests the same; these checks catch it, and any hand edit of the derived
//! text that was then re-digested.

use crate::error::FinalizeError;
use crate::model::{CANDIDATE_RATIONALE, RepositoryPatchCandidate};

/// The summary the finalizer writes for `count` changed files.
pub(crate) fn derived_summary(count: usize) -> String {
    format!("Approved repository file operations: {count}.")
}

/// Checks every derived field of `candidate` against its own files (see the module docs).
///
/// # Errors
/// `REPOSITORY_PATCH_VERIFY_DERIVED` naming the first field that differs: `summary`,
/// `rationale`, `changed_files order`, `baseline_commit_sha`.
pub fn check_derived_fields(candidate: &RepositoryPatchCandidate) -> Result<(), FinalizeError> {
    let derived = |field| FinalizeError::VerifyDerived { field };
    let files = candidate.changed_files();
    if candidate.summary() != derived_summary(files.len()) {
        return Err(derived("summary"));
    }
    if candidate.rationale() != CANDIDATE_RATIONALE {
        return Err(derived("rationale"));
    }
    if !files
        .windows(2)
        .all(|w| matches!(w, [a, b] if a.path() < b.path()))
    {
        return Err(derived("changed_files order"));
    }
    let commit = candidate.baseline_commit_sha();
    if commit.len() != 40
        || !commit
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(derived("baseline_commit_sha"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CandidateFields;
    use crate::testkit::{candidate, create, fields, sample, update};

    fn code_of(c: &RepositoryPatchCandidate) -> Option<String> {
        check_derived_fields(c).err().map(|e| e.to_string())
    }

    #[test]
    fn a_finalizer_shaped_candidate_passes() {
        check_derived_fields(&candidate(vec![
            create("app/new.py", "x = 1\n"),
            update("app/service.py", "a\n", "b\n"),
        ]))
        .unwrap();
        // The shared sample lists its files out of order.
        assert!(code_of(&sample()).unwrap().contains("changed_files order"));
    }

    #[test]
    fn each_derived_field_is_checked() {
        let files = || {
            vec![
                create("app/new.py", "x = 1\n"),
                update("app/service.py", "a\n", "b\n"),
            ]
        };
        let with = |edit: fn(&mut CandidateFields)| {
            let mut f = fields();
            edit(&mut f);
            RepositoryPatchCandidate::new(f, files()).unwrap()
        };
        type Edit = fn(&mut CandidateFields);
        let cases: [(Edit, &str); 4] = [
            (
                |f| f.summary = "Approved repository file operations: 3.".into(),
                "summary",
            ),
            (|f| f.rationale = "trust me".into(), "rationale"),
            (
                |f| f.baseline_commit_sha = "A".repeat(40),
                "baseline_commit_sha",
            ),
            (
                |f| f.baseline_commit_sha = "a".repeat(39),
                "baseline_commit_sha",
            ),
        ];
        for (edit, field) in cases {
            assert_eq!(
                code_of(&with(edit)),
                Some(format!(
                    "REPOSITORY_PATCH_VERIFY_DERIVED: {field} is not what the finalizer derives"
                ))
            );
        }
        // Sorted by path: the reversed order is refused, a duplicate path too.
        let mut reversed = files();
        reversed.reverse();
        let c = RepositoryPatchCandidate::new(fields(), reversed).unwrap();
        assert!(code_of(&c).unwrap().contains("changed_files order"));
        let dup = candidate(vec![
            create("app/new.py", "x = 1\n"),
            create("app/new.py", "x = 1\n"),
        ]);
        assert!(code_of(&dup).unwrap().contains("changed_files order"));
    }
}
