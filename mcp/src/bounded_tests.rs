use super::*;

fn load(text: &str) -> Result<Vec<YamlNode>, ParseError> {
    load_yaml(text, &YamlLimits::default())
}

fn code(text: &str) -> &'static str {
    match load(text) {
        Ok(_) => "ok",
        Err(e) => e.code(Format::Yaml),
    }
}

#[test]
fn scalars_resolve_like_saphyr() {
    let docs = load("a: x\nb: 1\nc: 1.5\nd: true\ne: ~\nf: '1'\ng:\n").unwrap();
    let doc = docs.first().unwrap();
    assert_eq!(
        doc.as_mapping_get("a").and_then(YamlNode::as_str),
        Some("x")
    );
    assert_eq!(
        doc.as_mapping_get("b"),
        Some(&YamlNode::Scalar(YamlScalar::Int(1)))
    );
    assert_eq!(
        doc.as_mapping_get("c"),
        Some(&YamlNode::Scalar(YamlScalar::Float(1.5)))
    );
    assert_eq!(
        doc.as_mapping_get("d"),
        Some(&YamlNode::Scalar(YamlScalar::Bool(true)))
    );
    assert_eq!(
        doc.as_mapping_get("e"),
        Some(&YamlNode::Scalar(YamlScalar::Null))
    );
    assert_eq!(
        doc.as_mapping_get("f").and_then(YamlNode::as_str),
        Some("1")
    );
    assert_eq!(
        doc.as_mapping_get("g"),
        Some(&YamlNode::Scalar(YamlScalar::Null))
    );
    assert_eq!(code("a: !!int abc\n"), "ok");
}

#[test]
fn structure_and_aliases() {
    let docs = load("base: &b [1, 2]\ncopy: *b\n").unwrap();
    let doc = docs.first().unwrap();
    assert_eq!(doc.as_mapping_get("base"), doc.as_mapping_get("copy"));
    assert_eq!(load("a: 1\n---\nb: 2\n").unwrap().len(), 2);
    assert_eq!(code("a: 1\na: 2\n"), "invalid_yaml");
    assert_eq!(code("? [1, 2]\n: a\n? [1, 2]\n: b\n"), "invalid_yaml");
    assert_eq!(code("? [1, 2]\n: a\n? [1, 3]\n: b\n"), "ok");
    assert_eq!(code("a: [1, 2\n"), "invalid_yaml");
    assert_eq!(code("a: *nowhere\n"), "invalid_yaml");
}

#[test]
fn depth_is_bounded_in_block_flow_and_alias_positions() {
    assert_eq!(code(&"- ".repeat(64).to_string()), "ok");
    assert_eq!(code(&format!("{}x\n", "- ".repeat(65))), "too_deep");
    let deep_block = format!("{}x\n", "- ".repeat(200_000));
    assert_eq!(code(&deep_block), "too_deep");
    let flow = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(code(&flow), "too_deep");
    // The scanner itself refuses very deep flow nesting before the builder sees it.
    let deep_flow = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    assert!(matches!(code(&deep_flow), "too_deep" | "invalid_yaml"));
    // 40 levels anchored, then used 40 levels down: 80 together.
    let anchored = format!("a: &a {}x{}\n", "[".repeat(40), "]".repeat(40));
    let used = format!("b: {}*a{}\n", "[".repeat(40), "]".repeat(40));
    assert_eq!(code(&format!("{anchored}{used}")), "too_deep");
    let deep_keys = format!("{{{}x{}: 1}}\n", "[".repeat(100), "]".repeat(100));
    assert_eq!(code(&deep_keys), "too_deep");
}

/// `first`, then the lines `line(i, i - 1)` for `i` in `1..levels`.
fn alias_chain(first: &str, levels: usize, line: impl Fn(usize, usize) -> String) -> String {
    let mut text = String::from(first);
    for i in 1..levels {
        text.push_str(&line(i, i - 1));
    }
    text
}

#[test]
fn alias_bombs_are_charged_as_expanded() {
    // Billion laughs in values.
    let bomb = alias_chain("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n", 10, |i, prev| {
        format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        )
    });
    assert_eq!(code(&bomb), "too_many_nodes");
    // The same through mapping keys.
    let keys = alias_chain("k0: &k0 {a: 1, b: 2, c: 3, d: 4}\n", 8, |i, prev| {
        format!(
            "k{i}: &k{i} {{? *k{prev} : 1, ? [*k{prev}] : 2, ? [[*k{prev}]] : 3, ? [[[*k{prev}]]] : 4}}\n"
        )
    });
    assert_eq!(code(&keys), "too_many_nodes");
    // One big string referenced many times: bytes, not nodes, are the bound.
    let big = "y".repeat(200_000);
    let refs = vec!["*s"; 100].join(", ");
    assert_eq!(
        code(&format!("s: &s {big}\nl: [{refs}]\n")),
        "expansion_too_large"
    );
}

#[test]
fn single_document_rule() {
    let limits = YamlLimits::default();
    assert!(load_yaml_single(b"a: 1\n", &limits).is_ok());
    assert_eq!(
        load_yaml_single(b"a: 1\n---\nb: 2\n", &limits),
        Err(SingleDocError::Count)
    );
    assert_eq!(load_yaml_single(b"", &limits), Err(SingleDocError::Count));
    assert_eq!(
        load_yaml_single(b"\xff", &limits),
        Err(SingleDocError::Parse(ParseError::NotUtf8))
    );
}

#[test]
fn json_bounds() {
    assert!(check_json(br#"{"a": [1, "x\"]", {"b": null}]}"#).is_ok());
    let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
    assert_eq!(
        check_json(deep.as_bytes()).map_err(|e| e.code(Format::Json)),
        Err("too_deep")
    );
    let wide = format!("[{}0]", "0,".repeat(MAX_JSON_NODES));
    assert_eq!(
        check_json(wide.as_bytes()).map_err(|e| e.code(Format::Json)),
        Err("too_many_nodes")
    );
    let ok = format!("[{}0]", "0,".repeat(1000));
    assert!(parse_json::<serde_json::Value>(ok.as_bytes(), 1 << 20).is_ok());
    assert_eq!(
        parse_json::<serde_json::Value>(br#"{"a":1,"a":2}"#, 1 << 20)
            .map_err(|e| e.code(Format::Json)),
        Err("invalid_json")
    );
}

#[test]
fn python_nesting_bound() {
    assert!(
        check_python_nesting(&format!("x = {}1{}\n", "(".repeat(200), ")".repeat(200))).is_ok()
    );
    let deep = format!("x = {}1{}\n", "(".repeat(201), ")".repeat(201));
    assert_eq!(
        check_python_nesting(&deep).map_err(|e| e.code(Format::Python)),
        Err("too_deep")
    );
    let in_string = format!(
        "x = '{}'\ny = \"\"\"{}\"\"\"  # {}\n",
        "(".repeat(300),
        "[".repeat(300),
        "{".repeat(300)
    );
    assert!(check_python_nesting(&in_string).is_ok());
}

/// Every code of every refusal is in one of the crate's tables: the limit codes in
/// `ERROR_CODES`, the others in `PARSE_CODES`.
#[test]
fn every_parse_code_is_in_a_table() {
    let all = [
        ParseError::NotUtf8,
        ParseError::Syntax { line: 1, column: 1 },
        ParseError::DuplicateKey { line: 1, column: 1 },
        ParseError::UnknownAlias { line: 1, column: 1 },
        ParseError::TooDeep { limit: 1 },
        ParseError::TooManyNodes { limit: 1 },
        ParseError::ExpansionTooLarge { limit: 1 },
        ParseError::Json {
            reason: "x".to_owned(),
        },
    ];
    let mut own = std::collections::BTreeSet::new();
    for e in &all {
        for format in [Format::Yaml, Format::Json, Format::Python] {
            let code = e.code(format);
            if e.is_limit() {
                assert!(crate::ERROR_CODES.contains(&code), "{code}");
            } else {
                own.insert(code);
            }
        }
    }
    vocab::check_code_table(PARSE_CODES, own).unwrap();
}
