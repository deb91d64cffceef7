//! The wire codes of the whole workspace, read from its sources (no build, no Docker): every crate
//! that has a `fn code(` or an error enum that derives `vocab::Coded` keeps its code table (a
//! `const …CODES: &[&str]`, `ERROR_CODES` by convention, or the derived enum's own table: the
//! codes of its `#[error("CODE: …")]` messages), every code is defined by exactly one crate's
//! tables, and every code is named in the documentation (README.md or docs/*.md).
//!
//! The scan is textual and deliberately simple: `#[cfg(test)] mod … { … }` blocks and test-only
//! files (`tests.rs`, `*_tests.rs`, `tests_*.rs`, `test_*.rs`) are left out; string literals,
//! comments and char literals are skipped when braces are matched. Each crate's own unit test
//! checks that its table is exactly what its error values return (`vocab::check_code_table`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's sources, with test modules removed.
struct Crate {
    dir: String,
    files: Vec<(PathBuf, String)>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The member directories of the workspace (the quoted entries of `members = [ … ]`), without
/// this test crate.
fn member_dirs(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").unwrap();
    let end = start + manifest[start..].find(']').unwrap();
    manifest[start..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| *m != "tests")
        .map(str::to_owned)
        .collect()
}

fn is_test_file(path: &Path) -> bool {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests"
        || stem.starts_with("tests_")
        || stem.starts_with("test_")
        || stem.ends_with("_tests")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            out.push(path);
        }
    }
}

/// The end (exclusive) of the token that starts at `i`, when it is a string literal, a char
/// literal or a comment; `None` for any other byte.
fn skip_token(s: &[u8], i: usize) -> Option<usize> {
    let at = |k: usize| s.get(k).copied().unwrap_or(0);
    match at(i) {
        b'/' if at(i + 1) == b'/' => Some(
            s[i..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(s.len(), |p| i + p),
        ),
        b'/' if at(i + 1) == b'*' => {
            let rest = &s[i + 2..];
            Some(
                rest.windows(2)
                    .position(|w| w == b"*/")
                    .map_or(s.len(), |p| i + 2 + p + 2),
            )
        }
        b'r' if (at(i + 1) == b'"' || at(i + 1) == b'#')
            && !at(i.wrapping_sub(1)).is_ascii_alphanumeric()
            && at(i.wrapping_sub(1)) != b'_' =>
        {
            let hashes = s[i + 1..].iter().take_while(|b| **b == b'#').count();
            if at(i + 1 + hashes) != b'"' {
                return None;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            Some(
                s.get(body..)?
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(s.len(), |p| body + p + close.len()),
            )
        }
        b'"' => {
            let mut k = i + 1;
            while k < s.len() && s[k] != b'"' {
                k += if s[k] == b'\\' { 2 } else { 1 };
            }
            Some((k + 1).min(s.len()))
        }
        b'\'' => {
            // A char literal ('x', '\n', '\'', '\u{..}'), not a lifetime ('a).
            if at(i + 1) == b'\\' {
                let close = s.get(i + 3..)?.iter().position(|b| *b == b'\'')?;
                Some(i + 3 + close + 1)
            } else {
                let len = match at(i + 1) {
                    b if b < 0x80 => 1,
                    b if b >= 0xf0 => 4,
                    b if b >= 0xe0 => 3,
                    _ => 2,
                };
                (at(i + 1 + len) == b'\'').then_some(i + 1 + len + 1)
            }
        }
        _ => None,
    }
}

/// The index just past the bracket that closes the one at `open` (`{`/`}` or `[`/`]`).
fn matching(s: &str, open: usize) -> usize {
    let bytes = s.as_bytes();
    let (up, down) = match bytes[open] {
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        b'(' => (b'(', b')'),
        other => panic!("no bracket at {open}: {}", other as char),
    };
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        if let Some(end) = skip_token(bytes, i) {
            i = end;
            continue;
        }
        if bytes[i] == up {
            depth += 1;
        } else if bytes[i] == down {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    bytes.len()
}

/// `src` without its `#[cfg(test)] mod name { … }` blocks.
fn without_test_modules(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let mut item = after.trim_start();
        while item.starts_with("#[") {
            item = item[matching(item, 1)..].trim_start();
        }
        let item = item.strip_prefix("pub(crate) ").unwrap_or(item);
        match item.strip_prefix("mod ") {
            Some(module) if module.find('{').is_some_and(|b| !module[..b].contains(';')) => {
                let open = module.find('{').unwrap();
                rest = &module[matching(module, open)..];
            }
            _ => {
                out.push_str("#[cfg(test)]");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every string literal in `s` (without its quotes; raw strings and escapes are kept as written).
fn string_literals(s: &str) -> Vec<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_token(bytes, i) {
            if bytes[i] == b'"' {
                out.push(s[i + 1..end - 1].to_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Walks `bytes` past literals and comments, calling `visit` at each position of code; `visit`
/// returns how many bytes it read there (at least one).
fn walk_code(bytes: &[u8], mut visit: impl FnMut(usize) -> usize) {
    let mut i = 0;
    while i < bytes.len() {
        i = match skip_token(bytes, i) {
            Some(end) => end,
            None => i + visit(i),
        };
    }
}

/// Identifiers in `s` outside literals and comments.
fn identifiers(s: &str) -> Vec<&str> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    walk_code(bytes, |start| {
        if !(bytes[start].is_ascii_alphabetic() || bytes[start] == b'_') {
            return 1;
        }
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        out.push(&s[start..end]);
        end - start
    });
    out
}

/// One `const NAME: TYPE = VALUE;` item.
struct Const<'a> {
    name: &'a str,
    ty: &'a str,
    /// The value as written, trimmed (`"CODE"`, `&[ … ]`, `other::NAME`).
    value: &'a str,
    /// Byte range of the item from `const` to the end of its value.
    span: std::ops::Range<usize>,
}

impl<'a> Const<'a> {
    /// The string a `&str` constant holds, when its value is a literal.
    fn literal(&self) -> Option<&'a str> {
        (is_str_type(self.ty) && self.value.starts_with('"')).then(|| self.value.trim_matches('"'))
    }

    /// The literals and identifiers between the brackets of a code table; for a table joined
    /// from others (`Enum::CODES`, `vocab::code_table!(Enum::CODES, &["X_Y", Z_CODE])`), those
    /// of the whole value (a derived enum's table is read from the enum).
    fn table_entries(&self) -> Option<(Vec<String>, Vec<&'a str>)> {
        if !(self.name.ends_with("CODES") && is_table_type(self.ty)) {
            return None;
        }
        let list = self.value.trim_start_matches('&').trim();
        let inner = if list.starts_with('[') {
            &list[1..list.len() - 1]
        } else {
            self.value
        };
        Some((string_literals(inner), identifiers(inner)))
    }
}

fn consts(src: &str) -> Vec<Const<'_>> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    for at in code_matches(src, "const ") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let head = at + "const ".len();
        let Some(colon) = src[head..].find(':').map(|c| head + c) else {
            continue;
        };
        let name = src[head..colon].trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        let Some(eq) = src[colon..].find('=').map(|e| colon + e) else {
            continue;
        };
        let ty = src[colon + 1..eq].trim();
        let value_at = eq + 1 + (src[eq + 1..].len() - src[eq + 1..].trim_start().len());
        let end = match bytes.get(value_at) {
            Some(b'&') if src[value_at + 1..].trim_start().starts_with('[') => {
                matching(src, value_at + 1 + src[value_at + 1..].find('[').unwrap())
            }
            Some(b'"') => skip_token(bytes, value_at).unwrap(),
            _ => value_at + src[value_at..].find(';').unwrap_or(src.len() - value_at),
        };
        out.push(Const {
            name,
            ty,
            value: src[value_at..end].trim(),
            span: at..end,
        });
    }
    out
}

/// Where `pattern` starts in `src` outside literals and comments.
fn code_matches(src: &str, pattern: &str) -> Vec<usize> {
    let mut out = Vec::new();
    walk_code(src.as_bytes(), |i| {
        if src[i..].starts_with(pattern) {
            out.push(i);
        }
        1
    });
    out
}

/// The code tables of the enums in `src` that derive `Coded`, as the derive builds them: per
/// variant, the code its `#[error("CODE: …")]` message starts with, each once, unless the
/// variant wraps an error (`#[error(transparent)]`, `#[coded(delegate)]`) or returns another
/// crate's code or a field (`#[coded(foreign = …)]`, `#[coded(field = …)]`).
fn derived_tables(src: &str) -> Vec<Vec<String>> {
    let mut tables = Vec::new();
    for at in code_matches(src, "#[derive(") {
        let end = matching(src, at + 1);
        if !identifiers(&src[at..end]).contains(&"Coded") {
            continue;
        }
        let Some(item) = code_matches(&src[end..], "enum ").first().map(|e| end + e) else {
            continue;
        };
        let open = item + src[item..].find('{').unwrap();
        let body = &src[open + 1..matching(src, open) - 1];
        let mut table: Vec<String> = Vec::new();
        for attrs in variant_attributes(body) {
            let find = |name: &str| {
                attrs
                    .iter()
                    .filter(|a| identifiers(a).first() == Some(&name))
                    .flat_map(|a| identifiers(a))
                    .collect::<Vec<_>>()
            };
            let coded = find("coded");
            if find("error").contains(&"transparent")
                || ["foreign", "field", "delegate"]
                    .iter()
                    .any(|k| coded.contains(k))
            {
                continue;
            }
            let message = attrs
                .iter()
                .find(|a| identifiers(a).first() == Some(&"error"))
                .and_then(|a| string_literals(a).into_iter().next())
                .unwrap_or_default();
            let code = message.split(':').next().unwrap_or_default().to_owned();
            if !table.contains(&code) {
                table.push(code);
            }
        }
        tables.push(table);
    }
    tables
}

/// The attributes (`#[…]`, doc comments left out) of each variant of an enum body.
fn variant_attributes(body: &str) -> Vec<Vec<&str>> {
    let bytes = body.as_bytes();
    let mut variants = Vec::new();
    let mut attrs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_token(bytes, i) {
            i = end;
        } else if bytes[i] == b'#' && bytes.get(i + 1) == Some(&b'[') {
            let end = matching(body, i + 1);
            attrs.push(&body[i..end]);
            i = end;
        } else if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let fields = i + (body[i..].len() - body[i..].trim_start().len());
            if matches!(bytes.get(fields), Some(b'{' | b'(')) {
                i = matching(body, fields);
            }
            variants.push(std::mem::take(&mut attrs));
        } else {
            i += 1;
        }
    }
    variants
}

fn is_str_type(ty: &str) -> bool {
    matches!(ty, "&str" | "&'static str")
}

fn is_table_type(ty: &str) -> bool {
    matches!(
        ty,
        "&[&str]" | "&[&'static str]" | "&'static [&'static str]"
    )
}

fn is_code_shaped(value: &str) -> bool {
    let mut parts = value.split('_');
    value.contains('_')
        && parts
            .next()
            .is_some_and(|p| p.starts_with(|c: char| c.is_ascii_uppercase()))
        && value.split('_').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        })
}

/// What the scan found in one crate.
#[derive(Default)]
struct Found {
    /// Code → how often the crate's tables list it.
    tables: BTreeMap<String, usize>,
    /// Codes returned by literal or by a crate constant in the crate's `fn code(` bodies.
    code_fns: BTreeSet<String>,
    has_code_fn: bool,
    /// Code-shaped `&str` constants in a file that holds a table.
    consts_beside_tables: BTreeSet<String>,
    /// Codes passed by literal to `ApiError::new`.
    api_literals: BTreeSet<String>,
    /// Code → the literals (`"CODE"`, `"CODE: …"`) and constant names that name it outside the
    /// tables and the constants' own definitions.
    uses: BTreeMap<String, usize>,
}

fn load(root: &Path) -> Vec<Crate> {
    member_dirs(root)
        .into_iter()
        .map(|dir| {
            let mut paths = Vec::new();
            rust_files(&root.join(&dir).join("src"), &mut paths);
            let files = paths
                .into_iter()
                .map(|p| {
                    let src = std::fs::read_to_string(&p).unwrap();
                    (p, without_test_modules(&src))
                })
                .collect();
            Crate { dir, files }
        })
        .collect()
}

/// The first argument after the first top-level comma of `args`, trimmed.
fn second_argument(args: &str) -> Option<&str> {
    let mut depth = 0i32;
    let bytes = args.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_token(bytes, i) {
            i = end;
            continue;
        }
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => return Some(args[i + 1..].trim_start()),
            _ => {}
        }
        i += 1;
    }
    None
}

fn scan(krate: &Crate) -> Found {
    let mut found = Found::default();
    // Every `&str` constant of the crate with a literal value: name → code.
    let mut str_consts: BTreeMap<&str, &str> = BTreeMap::new();
    for (_, src) in &krate.files {
        for c in consts(src) {
            if let Some(code) = c.literal() {
                str_consts.insert(c.name, code);
            }
        }
    }
    for (_, src) in &krate.files {
        let items = consts(src);
        let mut has_table = false;
        for (literals, idents) in items.iter().filter_map(Const::table_entries) {
            has_table = true;
            let resolved = idents.iter().filter_map(|i| str_consts.get(i).copied());
            for code in literals.iter().map(String::as_str).chain(resolved) {
                *found.tables.entry(code.to_owned()).or_default() += 1;
            }
        }
        for table in derived_tables(src) {
            has_table = true;
            found.has_code_fn = true;
            for code in table {
                *found.tables.entry(code).or_default() += 1;
            }
        }
        if has_table {
            for code in items.iter().filter_map(Const::literal) {
                if is_code_shaped(code) {
                    found.consts_beside_tables.insert(code.to_owned());
                }
            }
        }
        for (at, _) in src.match_indices("fn code(") {
            found.has_code_fn = true;
            let open = at + src[at..].find('{').unwrap();
            let body = &src[open..matching(src, open)];
            found.code_fns.extend(string_literals(body));
            for ident in identifiers(body) {
                if let Some(code) = str_consts.get(ident) {
                    found.code_fns.insert((*code).to_owned());
                }
            }
        }
        for (at, _) in src.match_indices("ApiError::new(") {
            let open = at + "ApiError::new".len();
            let args = &src[open + 1..matching(src, open) - 1];
            if let Some(second) = second_argument(args).filter(|a| a.starts_with('"')) {
                found
                    .api_literals
                    .extend(string_literals(second).into_iter().take(1));
            }
        }
        // Uses: the file without its tables and its `&str` constant definitions.
        let mut outside = String::new();
        let mut from = 0;
        for c in items
            .iter()
            .filter(|c| c.table_entries().is_some() || c.literal().is_some())
        {
            outside.push_str(&src[from..c.span.start]);
            from = c.span.end;
        }
        outside.push_str(&src[from..]);
        for literal in string_literals(&outside) {
            let code = literal.split(':').next().unwrap_or_default();
            *found.uses.entry(code.to_owned()).or_default() += 1;
        }
        for ident in identifiers(&outside) {
            if let Some(code) = str_consts.get(ident) {
                *found.uses.entry((*code).to_owned()).or_default() += 1;
            }
        }
    }
    found
}

fn documented(root: &Path) -> String {
    let mut text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for doc in docs {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(doc).unwrap());
    }
    text
}

/// `code` as a whole word of `text` (not a prefix or part of a longer code).
fn names(text: &str, code: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(code).any(|(at, _)| {
        !word(text[..at].chars().next_back()) && !word(text[at + code.len()..].chars().next())
    })
}

#[test]
fn every_code_has_one_table_and_a_line_in_the_docs() {
    let root = workspace_root();
    let crates = load(&root);
    let docs = documented(&root);
    let mut problems = Vec::new();
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut all_tables = BTreeSet::new();
    let mut api_literals = BTreeSet::new();
    for krate in &crates {
        let found = scan(krate);
        if found.has_code_fn && found.tables.is_empty() {
            problems.push(format!("{}: a `fn code(` without a code table", krate.dir));
        }
        for (code, count) in &found.tables {
            owners
                .entry(code.clone())
                .or_default()
                .push(krate.dir.clone());
            all_tables.insert(code.clone());
            if *count > 1 {
                problems.push(format!("{}: {code} is listed {count} times", krate.dir));
            }
            if found.uses.get(code).is_none_or(|n| *n == 0) {
                problems.push(format!(
                    "{}: {code} is listed but nothing returns it",
                    krate.dir
                ));
            }
        }
        for code in found.code_fns.iter().chain(&found.consts_beside_tables) {
            if !found.tables.contains_key(code) {
                problems.push(format!(
                    "{}: {code} is returned but not in the table",
                    krate.dir
                ));
            }
        }
        api_literals.extend(found.api_literals);
    }
    for (code, crates) in &owners {
        if crates.len() > 1 {
            problems.push(format!("{code} is defined by {}", crates.join(" and ")));
        }
    }
    for code in &api_literals {
        if !all_tables.contains(code) {
            problems.push(format!("{code} answers an API request but is in no table"));
        }
    }
    let undocumented: Vec<&String> = all_tables.iter().filter(|c| !names(&docs, c)).collect();
    for code in &undocumented {
        problems.push(format!("{code} is named nowhere in README.md or docs/*.md"));
    }
    eprintln!(
        "{} codes in {} crate tables; {} defined twice; {} undocumented",
        all_tables.len(),
        crates.iter().filter(|c| !scan(c).tables.is_empty()).count(),
        owners.values().filter(|c| c.len() > 1).count(),
        undocumented.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The scan itself: it sees the tables it must see.
    assert!(all_tables.contains("REPOSITORY_PATCH_SELECTION"));
    assert!(all_tables.contains("workspace_not_found"));
    assert!(all_tables.contains("PATCH_CANDIDATE_PATH_MISSING"));
    assert!(all_tables.contains("PATCH_CANDIDATE_SERVICE_ROUTE"));
}

/// Whether `literal` is shaped like one of the project's prefixed codes (`PATCH_CANDIDATE_…`,
/// `PROOF_WORKER_…`, `REPOSITORY_PATCH_…`, `GATE_…`): the prefix, then upper-case letters,
/// digits and underscores, ending in a letter or digit.
fn is_prefixed_code(literal: &str) -> bool {
    [
        "PATCH_CANDIDATE_",
        "PROOF_WORKER_",
        "REPOSITORY_PATCH_",
        "GATE_",
    ]
    .iter()
    .any(|p| literal.len() > p.len() && literal.starts_with(p))
        && literal
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !literal.ends_with('_')
}

/// Every prefixed code the product's sources spell out (log lines' `code` fields, job events,
/// result statuses, environment names, as well as error codes) is named in the documentation,
/// not only the codes of the error tables.
#[test]
fn every_code_the_sources_spell_is_named_in_the_docs() {
    let root = workspace_root();
    let docs = documented(&root);
    let mut seen = BTreeSet::new();
    let mut missing = BTreeSet::new();
    for krate in load(&root) {
        for (path, src) in &krate.files {
            for literal in string_literals(src) {
                if is_prefixed_code(&literal) {
                    seen.insert(literal.clone());
                    if !names(&docs, &literal) {
                        missing.insert(format!("{literal} ({})", path.display()));
                    }
                }
            }
        }
    }
    eprintln!("{} prefixed codes spelled in sources", seen.len());
    assert!(
        missing.is_empty(),
        "named nowhere in README.md or docs/*.md:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
    // The scan sees log codes and job events, not only error tables.
    for code in [
        "PATCH_CANDIDATE_JOB_CLAIMED",
        "PATCH_CANDIDATE_SERVICE_STOPPED",
    ] {
        assert!(seen.contains(code), "{code}");
    }
    assert!(is_prefixed_code("GATE_RUNNER_IO") && !is_prefixed_code("GATE_WIRE_"));
    assert!(!is_prefixed_code("PATCH_CANDIDATE_x") && !is_prefixed_code("GATE_"));
}

/// mcp's parse-diagnostic codes (`PARSE_CODES`, not exported): the findings' codes, not errors.
const MCP_PARSE_CODES: &[&str] = &["invalid_json", "invalid_python", "invalid_yaml", "not_utf8"];

/// Each crate's compiled `ERROR_CODES` is the table the scan read in its sources, so the scan
/// above checks the tables the crates really use.
#[test]
fn the_scanned_tables_are_the_compiled_tables() {
    let compiled: &[(&str, &[&str])] = &[
        ("vocab", vocab::ERROR_CODES),
        ("snapshot", snapshot::ERROR_CODES),
        ("tunnel", tunnel::ERROR_CODES),
        ("archive", archive::ERROR_CODES),
        ("finalizer", finalizer::ERROR_CODES),
        ("worker/state", state::ERROR_CODES),
        ("worker/container", container::ERROR_CODES),
        ("worker/turn", turn::ERROR_CODES),
        ("worker/gateway", gateway::ERROR_CODES),
        ("worker/jobs", jobs::ERROR_CODES),
        ("worker/gate", gate::ERROR_CODES),
        ("worker/publish", publish::ERROR_CODES),
        ("worker/forge", forge::ERROR_CODES),
        ("worker/policy", policy::ERROR_CODES),
        ("worker/review", review::ERROR_CODES),
        ("worker/ui", ui::ERROR_CODES),
        ("worker/service", service::ERROR_CODES),
        ("mcp", mcp::ERROR_CODES),
        ("images/turn-runner", turn_runner::ERROR_CODES),
        ("images/gate-runner", gate_runner::ERROR_CODES),
    ];
    let crates = load(&workspace_root());
    for (dir, table) in compiled {
        let krate = crates
            .iter()
            .find(|c| c.dir == *dir)
            .unwrap_or_else(|| panic!("{dir} is not a workspace member"));
        let scanned: BTreeSet<String> = scan(krate).tables.into_keys().collect();
        let mut compiled: BTreeSet<String> = table.iter().map(|c| (*c).to_owned()).collect();
        if *dir == "mcp" {
            // mcp's second table, the parse diagnostics that findings carry (crate-private).
            compiled.extend(MCP_PARSE_CODES.iter().map(|c| (*c).to_owned()));
        }
        assert_eq!(scanned, compiled, "{dir}");
    }
    let with_tables: Vec<&str> = crates
        .iter()
        .filter(|c| !scan(c).tables.is_empty())
        .map(|c| c.dir.as_str())
        .collect();
    let listed: Vec<&str> = compiled.iter().map(|(dir, _)| *dir).collect();
    for dir in with_tables {
        // The CLI is a binary, not a library to link: its own unit test checks its table.
        if dir == "worker/cli" {
            continue;
        }
        assert!(
            listed.contains(&dir),
            "{dir} keeps a table this test does not compare"
        );
    }
}

/// The parts of the scan on small inputs.
#[test]
fn the_scan_reads_literals_consts_and_test_modules() {
    let src = r##"
const A_CODE: &str = "A_ONE";
pub const ERROR_CODES: &[&str] = &[A_CODE, "B_TWO" /* ] */, "C_{THREE}"];
fn code(&self) -> &'static str { match self { X => "D_FOUR", Y => '}'.len() } }
#[cfg(test)]
mod tests { fn f() { let _ = "E_FIVE"; let _ = '{'; } }
fn g<'a>(x: &'a str) -> &'a str { r#"F_"SIX"#; x }
"##;
    let stripped = without_test_modules(src);
    assert!(!stripped.contains("E_FIVE"));
    assert!(stripped.contains("F_"));
    let c = consts(&stripped);
    assert_eq!((c[0].name, c[0].literal()), ("A_CODE", Some("A_ONE")));
    assert_eq!(c[1].name, "ERROR_CODES");
    let (literals, idents) = c[1].table_entries().unwrap();
    assert_eq!(literals, ["B_TWO", "C_{THREE}"]);
    assert_eq!(idents, ["A_CODE"]);
    let krate = Crate {
        dir: "x".to_owned(),
        files: vec![(PathBuf::from("x.rs"), stripped)],
    };
    let found = scan(&krate);
    assert_eq!(
        found.tables.keys().collect::<Vec<_>>(),
        ["A_ONE", "B_TWO", "C_{THREE}"]
    );
    assert!(found.code_fns.contains("D_FOUR"));
    // "A_ONE" is listed, and no code returns it (its constant is used nowhere).
    assert_eq!(found.uses.get("A_ONE"), None);
    assert!(names("see `A_ONE`.", "A_ONE"));
    assert!(!names("A_ONE_MORE", "A_ONE"));
    assert!(is_code_shaped("PATCH_CANDIDATE_IO") && !is_code_shaped("io_error"));
}

/// A derived enum's table, as the derive builds it.
#[test]
fn the_scan_reads_derived_tables() {
    let src = r##"
/// `#[derive(Coded)]` in a comment is no enum.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum E {
    /// A doc with a brace { and "quotes".
    #[error("A_ONE: {detail}")]
    One { detail: String },
    #[error("A_ONE: again")]
    Again,
    #[error("B_TWO: {0}")]
    #[coded(code = B_CODE, environment)]
    Two(u32),
    #[error(transparent)]
    Wrapped(#[from] Other),
    #[error("C_THREE: elsewhere")]
    #[coded(foreign = other::C_CODE)]
    Foreign,
    #[error("{code}: x")]
    #[coded(field = code)]
    Field { code: &'static str },
    #[error("{0}")]
    #[coded(delegate)]
    Delegated(Other),
    #[error("D_FOUR: x")]
    Last,
}
#[derive(Debug)]
enum NotCoded { #[error("E_FIVE: x")] X }
"##;
    assert_eq!(derived_tables(src), [["A_ONE", "B_TWO", "D_FOUR"]]);
    let krate = Crate {
        dir: "x".to_owned(),
        files: vec![(PathBuf::from("x.rs"), src.to_owned())],
    };
    let found = scan(&krate);
    assert!(found.has_code_fn);
    assert_eq!(
        found.tables.into_iter().collect::<Vec<_>>(),
        [
            ("A_ONE".to_owned(), 1),
            ("B_TWO".to_owned(), 1),
            ("D_FOUR".to_owned(), 1)
        ]
    );
    let joined = r#"pub const ERROR_CODES: &[&str] = vocab::code_table!(E::CODES, &["F_SIX", G_CODE]);
const G_CODE: &str = "G_SEVEN";"#;
    let c = consts(joined);
    let (literals, idents) = c[0].table_entries().unwrap();
    assert_eq!(literals, ["F_SIX"]);
    assert!(idents.contains(&"G_CODE"));
}
