//! The tree stream the host sends after the request: a POSIX tar of directories and regular files
//! whose totals equal the request's declaration exactly.

/// Which rule of the tree stream an entry broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeRule {
    #[error("not a ustar header")]
    Header,
    #[error("symbolic link")]
    Symlink,
    #[error("hard link")]
    HardLink,
    #[error("device, FIFO or other special entry")]
    Special,
    #[error("PAX extended header with a key other than path")]
    PaxKey,
    #[error("GNU extension")]
    Gnu,
    #[error("unsafe path")]
    Path,
    #[error("duplicate entry")]
    Duplicate,
    #[error("parent directory not declared before the entry")]
    Parent,
    #[error("mode is neither 0644 nor 0755")]
    Mode,
    #[error("more entries than declared")]
    TooManyEntries,
    #[error("more file bytes than declared")]
    TooManyBytes,
    #[error("fewer entries or bytes than declared")]
    Short,
    #[error("stream does not end with two zero blocks then EOF")]
    End,
    #[error("stream ended inside an entry")]
    Truncated,
}
