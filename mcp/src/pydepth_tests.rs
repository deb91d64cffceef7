use super::*;

fn deep(text: &str) -> Option<Deep> {
    scan(text).err()
}

#[test]
fn chains_stop_at_cpythons_depth() {
    // Module-level expression statement: the statement and `n + 1` expression nodes.
    let attr = |n: usize| format!("a{}\n", ".b".repeat(n));
    assert_eq!(deep(&attr(2_992)), None);
    assert_eq!(deep(&attr(2_993)), Some(Deep::Depth));
    let unary = |n: usize| format!("{}1\n", "-".repeat(n));
    assert_eq!(deep(&unary(2_992)), None);
    assert_eq!(deep(&unary(2_993)), Some(Deep::Depth));
    let binop = |n: usize| format!("1{}\n", "+1".repeat(n));
    assert_eq!(deep(&binop(2_992)), None);
    assert_eq!(deep(&binop(2_993)), Some(Deep::Depth));
    let call = |n: usize| format!("f{}\n", "()".repeat(n));
    assert_eq!(deep(&call(2_992)), None);
    assert_eq!(deep(&call(2_993)), Some(Deep::Depth));
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
    assert_eq!(deep(&power(2_984)), None);
    assert_eq!(deep(&power(2_985)), Some(Deep::ParserStack));
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
    assert_eq!(deep(&ifs(99)), None);
    assert_eq!(deep(&ifs(100)), Some(Deep::Indentation));
    let elifs = |n: usize| format!("if a:\n pass\n{}", "elif a:\n pass\n".repeat(n));
    assert_eq!(deep(&elifs(2_989)), None);
    assert_eq!(deep(&elifs(2_993)), Some(Deep::Depth));
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
