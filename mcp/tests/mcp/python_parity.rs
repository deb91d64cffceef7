//! Independent cross-check of the Python syntax verdicts: CPython's own `compile(…, "exec")` (what
//! the upstream fallback check runs) judges the same corpus that `validate_app_bundle` judges, and
//! the verdicts must agree.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{connect_root, failed_paths, fallback_check, fixture_copy, stdout_of};

/// What a Python driver script printed (one JSON value) when run on `dir`.
fn cpython_verdicts(script: &str, dir: &Path) -> Value {
    let stdout = stdout_of(Command::new("python3").arg("-c").arg(script).arg(dir));
    serde_json::from_slice(&stdout).unwrap()
}

/// `validate_app_bundle` over the workspace at `root`, through a fresh client.
async fn validated(root: &Path) -> Value {
    let client = connect_root(root, false).await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    client.close().await;
    r
}

const CORPUS: &[(&str, &str)] = &[
    (
        "ok_match",
        "match p:\n    case {\"k\": [1, *rest]}:\n        pass\n    case _:\n        pass\n",
    ),
    ("ok_walrus", "if (n := len(a)) > 10:\n    print(n)\n"),
    (
        "ok_async",
        "async def f():\n    async with a as b:\n        return [x async for x in b]\n",
    ),
    (
        "ok_decorators",
        "@dataclass(frozen=True)\nclass A:\n    x: int = 0\n    def f(self, /, y, *, z): ...\n",
    ),
    ("ok_fstring", "x = f\"{a!r:>{w}} {b['k']}\"\n"),
    (
        "ok_star_except",
        "try:\n    pass\nexcept* ValueError:\n    pass\n",
    ),
    ("bad_return_module", "return 1\n"),
    ("bad_break_outside", "x = 1\nbreak\n"),
    ("bad_continue_in_def", "def f():\n    continue\n"),
    (
        "ok_break_in_loop",
        "for i in x:\n    if i:\n        break\n    continue\n",
    ),
    ("bad_yield_module", "yield 1\n"),
    ("bad_await_module", "await f()\n"),
    ("bad_nonlocal_module", "nonlocal x\n"),
    ("bad_import_star_in_def", "def f():\n    from os import *\n"),
    ("bad_duplicate_arg", "def f(a, b, a):\n    pass\n"),
    (
        "bad_async_for_sync",
        "def f():\n    async for x in y:\n        pass\n",
    ),
    (
        "bad_bare_except_first",
        "try:\n    pass\nexcept:\n    pass\nexcept ValueError:\n    pass\n",
    ),
    (
        "ok_return_in_method",
        "class A:\n    def f(self):\n        return 1\n",
    ),
    ("bad_return_in_class", "class A:\n    return 1\n"),
    ("ok_lambda_default", "f = lambda x=1, *a, **k: (x, a, k)\n"),
    ("ok_global", "def f():\n    global g\n    g = 1\n"),
    ("bad_paren", "x = (1, 2\n"),
    ("bad_def", "def f(:\n    pass\n"),
    ("bad_indent", "def f():\nreturn 1\n"),
    ("bad_dedent", "if x:\n        a = 1\n    b = 2\n"),
    ("bad_assign_literal", "1 = x\n"),
    ("bad_keyword", "class = 3\n"),
    ("bad_string", "x = 'abc\n"),
    ("bad_fstring_quote_reuse", "x = f\"{d[\"k\"]}\"\n"),
    ("bad_print_statement", "print 'hello'\n"),
    ("bad_else", "else:\n    pass\n"),
    ("bad_lambda", "f = lambda: yield\n"),
    ("ok_star_target", "a, *b = c\n"),
    (
        "ok_nested_targets",
        "for (a, [b, c]) in x:\n    del a, b[0], c.d\n",
    ),
    (
        "ok_with_targets",
        "with a as (b, c.d), e as f[0]:\n    pass\n",
    ),
    ("bad_augassign_call", "f() += 1\n"),
    ("bad_del_call", "del f()\n"),
    ("bad_for_literal", "for 1 in x:\n    pass\n"),
    ("bad_with_call", "with a as f():\n    pass\n"),
    (
        "bad_nested_in_def",
        "def f():\n    if x:\n        (a, 1) = y\n",
    ),
    ("bad_in_except", "try:\n    pass\nexcept E:\n    None = 1\n"),
    ("bad_annassign_tuple", "a, b: int = 1, 2\n"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_syntax_verdicts_match_cpython_compile() {
    let copy = fixture_copy();
    let dir = copy.root.join("app/modules/parity");
    fs::create_dir(&dir).unwrap();
    for (name, source) in CORPUS {
        fs::write(dir.join(format!("{name}.py")), source).unwrap();
    }
    let script = r#"
import json, pathlib, sys
out = {}
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    try:
        compile(p.read_text(encoding="utf-8"), str(p), "exec")
        out[p.stem] = True
    except SyntaxError:
        out[p.stem] = False
print(json.dumps(out))
"#;
    let cpython = cpython_verdicts(script, &dir);
    let r = validated(&copy.root).await;
    let rejected: Vec<String> = failed_paths(&r, "python_syntax")
        .iter()
        .map(|path| {
            path.rsplit('/')
                .next()
                .unwrap()
                .trim_end_matches(".py")
                .to_owned()
        })
        .collect();
    for (name, _) in CORPUS {
        let ours = !rejected.iter().any(|r| r == name);
        assert_eq!(
            Some(ours),
            cpython[name].as_bool(),
            "{name}: ours {ours}, CPython {}",
            cpython[name]
        );
        assert_eq!(ours, name.starts_with("ok_"), "{name}: corpus label");
    }
}

/// CPython's own verdicts on deep chains, each shape at the first depth CPython refuses and the
/// one before it (found by bisection, each probe in a fresh interpreter: a failed `compile()` can
/// shift the next one's limit by a frame), and at hostile depths.
const DEEP_DRIVER: &str = r#"
import json, pathlib, subprocess, sys
out_dir = pathlib.Path(sys.argv[1])
A = lambda n: "a" + ".b" * n
P = lambda n: "a" + "**a" * n
def blocks(k, body):
    return "".join(" " * i + "if a:\n" for i in range(k)) + " " * k + body + "\n"
shapes = {
    "unary": lambda n: "-" * n + "1\n",
    "attribute": lambda n: A(n) + "\n",
    "call": lambda n: "f" + "()" * n + "\n",
    "subscript": lambda n: "a" + "[0]" * n + "\n",
    "binary": lambda n: "1" + "+1" * n + "\n",
    "power": lambda n: P(n) + "\n",
    "lambda": lambda n: "f = " + "lambda: " * n + "a\n",
    "not": lambda n: "x = " + "not " * n + "a\n",
    "conditional": lambda n: "x = " + "a if b else " * n + "a\n",
    "postfix_mix": lambda n: "a" + "".join([".b", "(c)", "[d]"][i % 3] for i in range(n)) + "\n",
    "elif_chain": lambda n: "if a:\n pass\n" + "elif a:\n pass\n" * n,
    "indentation": lambda n: blocks(n, "pass"),
    "in_function": lambda n: "def f():\n    return " + A(n) + "\n",
    "in_blocks": lambda n: blocks(10, "x = " + A(n)),
    "in_list": lambda n: "x = [" + A(n) + "]\n",
    "in_fstring": lambda n: "x = f'{" + A(n) + "}'\n",
    "power_in_groups": lambda n: "(" * 50 + P(n) + ")" * 50 + "\n",
    "power_in_lists": lambda n: "[" * 50 + P(n) + "]" * 50 + "\n",
    "power_in_calls": lambda n: "f(" * 50 + P(n) + ")" * 50 + "\n",
    "unary_in_groups": lambda n: "(" * 199 + "-" * n + "a" + ")" * 199 + "\n",
}
probe = "import sys\ntry:\n compile(sys.stdin.read(), 'f.py', 'exec')\nexcept (SyntaxError, RecursionError, MemoryError):\n sys.exit(1)\n"
def compiles(src):
    return subprocess.run([sys.executable, "-c", probe], input=src, text=True).returncode == 0
verdicts = {}
for name, make in shapes.items():
    lo, hi = 1, 4000
    assert not compiles(make(hi)), name
    while lo < hi:
        mid = (lo + hi) // 2
        if compiles(make(mid)):
            lo = mid + 1
        else:
            hi = mid
    depths = [lo - 1, lo]
    if name in ("unary", "attribute", "call", "binary"):
        depths += [3100, 10000, 100000]
    if name == "unary":
        depths.append(1000000)
    for n in depths:
        src = make(n)
        stem = f"{name}_{n}"
        (out_dir / f"{stem}.py").write_text(src, encoding="utf-8")
        verdicts[stem] = compiles(src)
    verdicts[f"{name}_boundary"] = lo
print(json.dumps(verdicts))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_chain_verdicts_match_cpython_compile() {
    let copy = fixture_copy();
    let dir = copy.root.join("app/modules/deep");
    fs::create_dir(&dir).unwrap();
    let cpython = cpython_verdicts(DEEP_DRIVER, &dir);
    let cpython = cpython.as_object().unwrap();
    let r = validated(&copy.root).await;
    let python = fallback_check(&r, "python_syntax");
    assert_eq!(python["not_checked"], json!([]), "{python}");
    let failures = python["failures"].as_array().unwrap();
    let mut files = 0;
    for (stem, compiles) in cpython {
        if stem.ends_with("_boundary") {
            continue;
        }
        files += 1;
        let path = format!("app/modules/deep/{stem}.py");
        let failure = failures.iter().find(|f| f["path"] == json!(path));
        assert_eq!(
            failure.is_none(),
            compiles.as_bool().unwrap(),
            "{stem}: ours {failure:?}, CPython compiles: {compiles}"
        );
        if let Some(failure) = failure {
            // Refused before parsing, with a reason naming the limit (never the source).
            let message = failure["message"].as_str().unwrap();
            assert!(
                message.contains("deeper than CPython")
                    || message.contains("indentation than CPython")
                    || message.contains("brackets deeper"),
                "{stem}: {message}"
            );
        }
    }
    // Both sides of every boundary were judged, and the boundaries are where CPython 3.11 has
    // them (about 3,000 nodes; 100 blocks; half as many `**` or `lambda`).
    assert!(files > 40, "{files}");
    let boundary = |name: &str| cpython[&format!("{name}_boundary")].as_u64().unwrap();
    assert!((2_900..3_000).contains(&boundary("attribute")));
    assert!((2_900..3_000).contains(&boundary("unary")));
    assert_eq!(boundary("indentation"), 100);
}
