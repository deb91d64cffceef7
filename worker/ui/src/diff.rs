//! The diff renderer: a candidate file's unified diff (as the finalizer wrote it) parsed into
//! rows with old and new line numbers, for a unified or a split (side-by-side) view, optionally
//! ignoring whitespace-only changes. Every line goes through [`Shown`]: hidden characters become
//! visible escapes, long lines are cut with a marker. A diff over the per-file budget, or holding
//! a NUL byte, is not rendered at all: the page says "too big to show" (or binary) with its size.

use crate::text::Shown;

/// Characters of one diff line shown before the cut marker.
pub const MAX_LINE_CHARS: usize = 2_000;
/// Diff bytes of one file rendered at most; larger files are "too big to show".
pub const MAX_FILE_DIFF_BYTES: usize = 512 * 1024;

/// The view a reviewer asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiffOptions {
    pub split: bool,
    pub ignore_whitespace: bool,
}

/// The kind of one unified row (also its CSS class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    Hunk,
    Context,
    Added,
    Removed,
    /// `\ No newline at end of file` and the like.
    Note,
}

impl RowKind {
    /// The CSS class.
    #[must_use]
    pub fn class(self) -> &'static str {
        match self {
            Self::Hunk => "hunk",
            Self::Context => "ctx",
            Self::Added => "add",
            Self::Removed => "del",
            Self::Note => "note",
        }
    }

    /// The sign column, readable without colour.
    #[must_use]
    pub fn sign(self) -> &'static str {
        match self {
            Self::Added => "+",
            Self::Removed => "-",
            Self::Hunk | Self::Context | Self::Note => "",
        }
    }
}

/// One row of the unified view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub kind: RowKind,
    pub old: Option<u64>,
    pub new: Option<u64>,
    pub text: Shown,
}

/// One side of a split row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    pub kind: RowKind,
    pub number: Option<u64>,
    pub text: Shown,
}

/// One row of the split view: a hunk header across both sides, or a left and a right cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitRow {
    pub hunk: Option<Shown>,
    pub left: Option<Side>,
    pub right: Option<Side>,
}

/// A rendered file body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Unified(Vec<Row>),
    Split(Vec<SplitRow>),
    /// Not rendered: the diff has this many bytes.
    TooBig(u64),
    /// Not rendered: the diff holds binary bytes (NUL).
    Binary(u64),
    /// No textual change (an empty create or delete, or only whitespace when ignored).
    Empty,
}

/// A rendered diff and what a banner needs to know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub body: Body,
    pub added: u64,
    pub removed: u64,
    /// Hidden characters made visible in this file's lines.
    pub hidden: usize,
    /// Lines cut at `MAX_LINE_CHARS`.
    pub cut_lines: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Raw<'a> {
    Hunk(&'a str, u64, u64),
    Context(&'a str),
    Added(&'a str),
    Removed(&'a str),
    Note(&'a str),
}

/// `@@ -a[,b] +c[,d] @@…`: the two start lines (0 when malformed: the header is still shown).
fn hunk_starts(line: &str) -> (u64, u64) {
    let mut parts = line.split(' ');
    let mut start = |sign: char| {
        parts
            .find(|p| p.starts_with(sign))
            .and_then(|p| p.get(1..))
            .and_then(|p| p.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let old = start('-');
    let new = start('+');
    (old, new)
}

fn parse(diff: &str) -> Vec<Raw<'_>> {
    let mut out = Vec::new();
    let mut in_hunk = false;
    for line in diff.split_inclusive('\n') {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if line.starts_with("@@") {
            in_hunk = true;
            let (o, n) = hunk_starts(line);
            out.push(Raw::Hunk(line, o, n));
            continue;
        }
        if !in_hunk {
            // The `--- a/…` / `+++ b/…` header: the file header on the page says the same.
            continue;
        }
        let (first, rest) = line.split_at_checked(1).unwrap_or(("", line));
        out.push(match first {
            "+" => Raw::Added(rest),
            "-" => Raw::Removed(rest),
            " " => Raw::Context(rest),
            "\\" => Raw::Note(line),
            _ => Raw::Context(line),
        });
    }
    out
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The texts of the lines from `from` on that `text_of` takes, up to the first it does not.
fn run_from<'a>(
    raw: &[Raw<'a>],
    from: usize,
    text_of: fn(Raw<'a>) -> Option<&'a str>,
) -> Vec<&'a str> {
    raw.get(from..)
        .unwrap_or_default()
        .iter()
        .map_while(|r| text_of(*r))
        .collect()
}

/// With `ignore_whitespace`, a run of removed lines followed by a run of added lines whose
/// pairs differ only in whitespace becomes context (the new side's text), pair by pair.
fn fold_whitespace(raw: Vec<Raw<'_>>) -> Vec<Raw<'_>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(item) = raw.get(i) {
        if !matches!(item, Raw::Removed(_)) {
            out.push(*item);
            i += 1;
            continue;
        }
        let dels = run_from(&raw, i, |r| match r {
            Raw::Removed(t) => Some(t),
            _ => None,
        });
        let j = i + dels.len();
        let adds = run_from(&raw, j, |r| match r {
            Raw::Added(t) => Some(t),
            _ => None,
        });
        let paired = dels.len().min(adds.len());
        let mut kept_dels = Vec::new();
        let mut kept_adds = Vec::new();
        let mut same = Vec::new();
        for (k, (d, a)) in dels.iter().zip(adds.iter()).enumerate() {
            if squash(d) == squash(a) {
                same.push(k);
            }
        }
        if same.len() == paired && paired > 0 {
            for a in adds.iter().take(paired) {
                out.push(Raw::Context(a));
            }
            kept_dels.extend(dels.iter().skip(paired));
            kept_adds.extend(adds.iter().skip(paired));
        } else {
            kept_dels.extend(dels.iter());
            kept_adds.extend(adds.iter());
        }
        out.extend(kept_dels.into_iter().map(Raw::Removed));
        out.extend(kept_adds.into_iter().map(Raw::Added));
        i = j + adds.len();
    }
    out
}

/// Renders one file's diff.
#[must_use]
pub fn render(diff: &str, opts: DiffOptions) -> Rendered {
    let mut rendered = Rendered {
        body: Body::Empty,
        added: 0,
        removed: 0,
        hidden: 0,
        cut_lines: 0,
    };
    let size = diff.len() as u64;
    if diff.contains('\0') {
        rendered.body = Body::Binary(size);
        return rendered;
    }
    if diff.len() > MAX_FILE_DIFF_BYTES {
        rendered.body = Body::TooBig(size);
        return rendered;
    }
    let mut raw = parse(diff);
    for r in &raw {
        match r {
            Raw::Added(_) => rendered.added += 1,
            Raw::Removed(_) => rendered.removed += 1,
            _ => {}
        }
    }
    if opts.ignore_whitespace {
        raw = fold_whitespace(raw);
    }
    let changes = raw
        .iter()
        .any(|r| matches!(r, Raw::Added(_) | Raw::Removed(_)));
    if raw.is_empty() || (opts.ignore_whitespace && !changes) {
        // Nothing textual, or nothing but whitespace while whitespace is ignored.
        return rendered;
    }
    let mut rows = Vec::with_capacity(raw.len());
    let (mut old, mut new) = (0_u64, 0_u64);
    let shown = |t: &str, r: &mut Rendered| {
        let s = Shown::new(t, MAX_LINE_CHARS);
        r.hidden += s.hidden;
        if s.cut_bytes > 0 {
            r.cut_lines += 1;
        }
        s
    };
    for r in raw {
        let row = match r {
            Raw::Hunk(t, o, n) => {
                old = o;
                new = n;
                Row {
                    kind: RowKind::Hunk,
                    old: None,
                    new: None,
                    text: shown(t, &mut rendered),
                }
            }
            Raw::Context(t) => {
                let row = Row {
                    kind: RowKind::Context,
                    old: Some(old),
                    new: Some(new),
                    text: shown(t, &mut rendered),
                };
                old += 1;
                new += 1;
                row
            }
            Raw::Removed(t) => {
                let row = Row {
                    kind: RowKind::Removed,
                    old: Some(old),
                    new: None,
                    text: shown(t, &mut rendered),
                };
                old += 1;
                row
            }
            Raw::Added(t) => {
                let row = Row {
                    kind: RowKind::Added,
                    old: None,
                    new: Some(new),
                    text: shown(t, &mut rendered),
                };
                new += 1;
                row
            }
            Raw::Note(t) => Row {
                kind: RowKind::Note,
                old: None,
                new: None,
                text: shown(t, &mut rendered),
            },
        };
        rows.push(row);
    }
    rendered.body = if opts.split {
        Body::Split(split(rows))
    } else {
        Body::Unified(rows)
    };
    rendered
}

/// Pairs each run of removed rows with the following run of added rows, side by side.
fn split(rows: Vec<Row>) -> Vec<SplitRow> {
    let mut out = Vec::with_capacity(rows.len());
    let mut dels: Vec<Side> = Vec::new();
    let mut adds: Vec<Side> = Vec::new();
    fn flush(out: &mut Vec<SplitRow>, dels: &mut Vec<Side>, adds: &mut Vec<Side>) {
        let n = dels.len().max(adds.len());
        let mut d = std::mem::take(dels).into_iter();
        let mut a = std::mem::take(adds).into_iter();
        for _ in 0..n {
            out.push(SplitRow {
                hunk: None,
                left: d.next(),
                right: a.next(),
            });
        }
    }
    for row in rows {
        match row.kind {
            RowKind::Removed => {
                if !adds.is_empty() {
                    flush(&mut out, &mut dels, &mut adds);
                }
                dels.push(Side {
                    kind: row.kind,
                    number: row.old,
                    text: row.text,
                });
            }
            RowKind::Added => adds.push(Side {
                kind: row.kind,
                number: row.new,
                text: row.text,
            }),
            RowKind::Hunk => {
                flush(&mut out, &mut dels, &mut adds);
                out.push(SplitRow {
                    hunk: Some(row.text),
                    left: None,
                    right: None,
                });
            }
            RowKind::Context | RowKind::Note => {
                flush(&mut out, &mut dels, &mut adds);
                out.push(SplitRow {
                    hunk: None,
                    left: Some(Side {
                        kind: row.kind,
                        number: row.old,
                        text: row.text.clone(),
                    }),
                    right: Some(Side {
                        kind: row.kind,
                        number: row.new,
                        text: row.text,
                    }),
                });
            }
        }
    }
    flush(&mut out, &mut dels, &mut adds);
    out
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
