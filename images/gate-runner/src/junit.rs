//! Strict JUnit XML reading: the file's size is checked (fstat) before a byte is read, a DOCTYPE
//! is refused outright (so no entity can be declared), only the five predefined entities and
//! character references are accepted, nesting and the case count are capped, and ids are bounded.
//! Nothing from the file is ever quoted in an error: the result is a stable code.

use std::io::{BufReader, Read};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use quick_xml::events::{BytesStart, Event};

use crate::{CaseId, CaseOutcome, JunitCase, JunitReport, JunitSpec, StableCode};

/// Why a JUnit file was refused: the stable codes a report's `{"state":"invalid"}` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JunitRefusal {
    /// Not a regular file (a directory, FIFO, socket, …); links are not followed.
    NotAFile,
    /// Larger than `max_bytes`.
    TooLarge,
    /// A `<!DOCTYPE …>`.
    Doctype,
    /// An entity reference other than the five predefined ones or a character reference.
    Entity,
    /// Nesting deeper than `max_depth`.
    TooDeep,
    /// Malformed XML, not UTF-8, or a root other than `testsuites`/`testsuite`.
    Syntax,
    /// A test case without a name, or with an id that is too long or holds control characters.
    CaseId,
    /// The file could not be read.
    Io,
}

impl JunitRefusal {
    /// Every refusal, in declaration order.
    #[cfg(test)]
    pub(crate) const ALL: [Self; 8] = [
        Self::NotAFile,
        Self::TooLarge,
        Self::Doctype,
        Self::Entity,
        Self::TooDeep,
        Self::Syntax,
        Self::CaseId,
        Self::Io,
    ];

    /// The stable code.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::NotAFile => "GATE_JUNIT_NOT_A_FILE",
            Self::TooLarge => "GATE_JUNIT_TOO_LARGE",
            Self::Doctype => "GATE_JUNIT_DOCTYPE",
            Self::Entity => "GATE_JUNIT_ENTITY",
            Self::TooDeep => "GATE_JUNIT_TOO_DEEP",
            Self::Syntax => "GATE_JUNIT_SYNTAX",
            Self::CaseId => "GATE_JUNIT_CASE_ID",
            Self::Io => "GATE_JUNIT_IO",
        }
    }

    fn report(self) -> JunitReport {
        match StableCode::try_from(self.code().to_owned()) {
            Ok(code) => JunitReport::Invalid { code },
            // Every code above is a valid stable code (tested); `Missing` is never reached.
            Err(_) => JunitReport::Missing,
        }
    }
}

/// Reads the JUnit file named by `spec` inside `root`, strictly.
#[must_use]
pub fn read_junit(root: &Dir, spec: &JunitSpec) -> JunitReport {
    match read(root, spec) {
        Ok(Some(report)) => report,
        Ok(None) => JunitReport::Missing,
        Err(refusal) => refusal.report(),
    }
}

fn read(root: &Dir, spec: &JunitSpec) -> Result<Option<JunitReport>, JunitRefusal> {
    let mut opts = OpenOptions::new();
    // Non-blocking so a FIFO planted at the path cannot stall the runner; no link followed.
    opts.read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    let file = match root.open_with(spec.path().as_str(), &opts) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(JunitRefusal::NotAFile);
        }
        Err(_) => return Err(JunitRefusal::Io),
    };
    let meta = file.metadata().map_err(|_| JunitRefusal::Io)?;
    if !meta.is_file() {
        return Err(JunitRefusal::NotAFile);
    }
    if meta.len() > spec.max_bytes() {
        return Err(JunitRefusal::TooLarge);
    }
    // The take bounds the read even if the file grows after the fstat.
    let reader = BufReader::new(file.take(spec.max_bytes()));
    parse(reader, spec.max_cases(), spec.max_depth()).map(Some)
}

/// Parses JUnit XML from `reader` with the caps.
///
/// # Errors
/// The `JunitRefusal` of the first rule broken.
pub fn parse(
    reader: impl std::io::BufRead,
    max_cases: u64,
    max_depth: u64,
) -> Result<JunitReport, JunitRefusal> {
    let mut xml = quick_xml::Reader::from_reader(reader);
    xml.config_mut().check_end_names = true;
    xml.config_mut().check_comments = true;
    let mut buf = Vec::new();
    let mut depth: u64 = 0;
    let mut saw_root = false;
    let mut cases = Vec::new();
    let mut truncated = false;
    // The case being read: its id and worst outcome so far, and the depth it opened at.
    let mut open: Option<(CaseId, CaseOutcome, u64)> = None;
    loop {
        buf.clear();
        let event = xml
            .read_event_into(&mut buf)
            .map_err(|_| JunitRefusal::Syntax)?;
        match event {
            Event::DocType(_) => return Err(JunitRefusal::Doctype),
            Event::GeneralRef(r) => {
                let ok = if r.is_char_ref() {
                    matches!(r.resolve_char_ref(), Ok(Some(_)))
                } else {
                    matches!(&*r, b"lt" | b"gt" | b"amp" | b"apos" | b"quot")
                };
                if !ok {
                    return Err(JunitRefusal::Entity);
                }
            }
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                depth += 1;
                if depth > max_depth {
                    return Err(JunitRefusal::TooDeep);
                }
                let name = e.local_name();
                let name = name.as_ref();
                if depth == 1 {
                    if saw_root || !matches!(name, b"testsuites" | b"testsuite") {
                        return Err(JunitRefusal::Syntax);
                    }
                    saw_root = true;
                }
                check_attributes(e)?;
                match (name, &mut open) {
                    (b"testcase", Some(_)) => return Err(JunitRefusal::Syntax),
                    (b"testcase", None) => {
                        let id = case_id(e)?;
                        if empty {
                            push(
                                &mut cases,
                                &mut truncated,
                                max_cases,
                                id,
                                CaseOutcome::Passed,
                            );
                        } else {
                            open = Some((id, CaseOutcome::Passed, depth));
                        }
                    }
                    (b"failure" | b"error" | b"skipped", Some((_, outcome, at)))
                        if depth == *at + 1 =>
                    {
                        let this = match name {
                            b"error" => CaseOutcome::Error,
                            b"failure" => CaseOutcome::Failed,
                            _ => CaseOutcome::Skipped,
                        };
                        *outcome = worse(*outcome, this);
                    }
                    _ => {}
                }
                if empty {
                    depth -= 1;
                }
            }
            Event::End(_) => {
                if let Some((_, _, at)) = &open
                    && *at == depth
                    && let Some((id, outcome, _)) = open.take()
                {
                    push(&mut cases, &mut truncated, max_cases, id, outcome);
                }
                depth = depth.checked_sub(1).ok_or(JunitRefusal::Syntax)?;
            }
            Event::Text(t) => {
                if depth == 0 && !t.iter().all(u8::is_ascii_whitespace) {
                    return Err(JunitRefusal::Syntax);
                }
            }
            Event::CData(_) | Event::Comment(_) | Event::PI(_) | Event::Decl(_) => {}
            Event::Eof => break,
        }
    }
    if !saw_root || depth != 0 {
        return Err(JunitRefusal::Syntax);
    }
    Ok(JunitReport::Ok { cases, truncated })
}

fn push(
    cases: &mut Vec<JunitCase>,
    truncated: &mut bool,
    max: u64,
    id: CaseId,
    outcome: CaseOutcome,
) {
    if (cases.len() as u64) < max {
        cases.push(JunitCase { id, outcome });
    } else {
        *truncated = true;
    }
}

/// error > failed > skipped > passed.
fn worse(a: CaseOutcome, b: CaseOutcome) -> CaseOutcome {
    let rank = |o| match o {
        CaseOutcome::Passed => 0,
        CaseOutcome::Skipped => 1,
        CaseOutcome::Failed => 2,
        CaseOutcome::Error => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Every attribute must be well-formed and its value must unescape with the predefined
/// entities only.
fn check_attributes(e: &BytesStart<'_>) -> Result<(), JunitRefusal> {
    for attr in e.attributes().with_checks(true) {
        let attr = attr.map_err(|_| JunitRefusal::Syntax)?;
        attr.unescape_value().map_err(|_| JunitRefusal::Entity)?;
    }
    Ok(())
}

fn attribute(e: &BytesStart<'_>, key: &[u8]) -> Result<Option<String>, JunitRefusal> {
    for attr in e.attributes().with_checks(true) {
        let attr = attr.map_err(|_| JunitRefusal::Syntax)?;
        if attr.key.as_ref() == key {
            let value = attr.unescape_value().map_err(|_| JunitRefusal::Entity)?;
            return Ok(Some(value.into_owned()));
        }
    }
    Ok(None)
}

fn case_id(e: &BytesStart<'_>) -> Result<CaseId, JunitRefusal> {
    let name = attribute(e, b"name")?
        .filter(|n| !n.is_empty())
        .ok_or(JunitRefusal::CaseId)?;
    let id = match attribute(e, b"classname")?.filter(|c| !c.is_empty()) {
        Some(class) => format!("{class}::{name}"),
        None => name,
    };
    CaseId::try_from(id).map_err(|_| JunitRefusal::CaseId)
}

#[cfg(test)]
#[path = "junit_tests.rs"]
mod tests;
