use super::*;

fn deep(text: &str) -> Option<Deep> {
    scan(text).err()
}

/// `make(ok)` passes the scan and `make(refused)` is refused as `why`.
#[track_caller]
fn assert_boundary(make: impl Fn(usize) -> String, ok: usize, refused: usize, why: Deep) {
    assert_eq!(deep(&make(ok)), None);
    assert_eq!(deep(&make(refused)), Some(why));
}

#[test]
fn chains_stop_at_cpythons_depth() {
    // Module-level expression statement: the statement and `n + 1` expression nodes.
    let attr = |n: usize| format!("a{}\n", ".b".repeat(n));
    let unary = |n: usize| format!("{}1\n", "-".repeat(n));
    let binop = |n: usize| format!("1{}\n", "+1".repeat(n));
    let call = |n: usize| format!("f{}\n", "()".repeat(n));
    let chains: [&dyn Fn(usize) -> String; 4] = [&attr, &unary, &binop, &call];
    for chain in chains {
        assert_boundary(chain, 2_992, 2_993, Deep::Depth);
    }
}

#[test]
fn flat_nodes_do_not_deepen() {
    let compare = format!("a{}\n", "<a".repeat(20_000));
    assert_eq!(deep(&compare), None);
    let and = format!("a{}\n", " and a".repeat(20_000));
    assert_eq!(deep(&and), None);
    let list = format!("x = [{}]\n", "a, ".repeat(20_000));
    assert_eq!(deep(&list), None);
    let strings = format!("x = {}\n", "'a' ".repeat(20_000));
    assert_eq!(deep(&strings), None);
}

#[test]
fn right_nested_rules_exhaust_the_parser_stack() {
    let power = |n: usize| format!("a{}\n", "**a".repeat(n));
    assert_boundary(power, 2_984, 2_985, Deep::ParserStack);
    // A million unary minuses stop at the first limit, with a few counters held.
    assert_eq!(deep(&"-".repeat(1_000_000)), Some(Deep::Depth));
}

#[test]
fn blocks_and_elifs_count() {
    let ifs = |n: usize| {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&" ".repeat(i));
            s.push_str("if a:\n");
        }
        s.push_str(&" ".repeat(n));
        s.push_str("pass\n");
        s
    };
    assert_boundary(ifs, 99, 100, Deep::Indentation);
    let elifs = |n: usize| format!("if a:\n pass\n{}", "elif a:\n pass\n".repeat(n));
    assert_boundary(elifs, 2_989, 2_993, Deep::Depth);
}

#[test]
fn fstring_expressions_are_scanned() {
    let inner = format!("x = f'{{{}1}}'\n", "-".repeat(5_000));
    assert_eq!(deep(&inner), Some(Deep::Depth));
    assert_eq!(deep("x = f'{a!r:>{w}} {b[\"k\"]} {{literal}}'\n"), None);
    assert_eq!(
        fstring_expressions("{a!r:>{w}} {b} {{x}} {c=}"),
        vec![("a", 0), ("w", 2), ("b", 0), ("c", 0)]
    );
}

#[test]
fn parse_estimate_grows_with_statements_and_tokens() {
    let small = scan("a\n").unwrap().parse_bytes;
    let big = scan(&"a\n".repeat(1_000)).unwrap().parse_bytes;
    assert!(big >= 1_000 * (PARSE_BYTES_PER_STATEMENT + PARSE_BYTES_PER_TOKEN));
    assert!(small < big);
}

#[test]
fn invalid_input_never_panics() {
    for text in [
        ")))]]]}}}",
        "else: elif: case: except:",
        "a a a a a",
        "lambda lambda lambda",
        "x = (lambda",
        "if if if else else",
        "f'{'",
        "f'{a!'",
        "x = 'unterminated",
        "def f(*, /, **): pass",
        ":::===",
    ] {
        let _ = scan(text);
    }
}
