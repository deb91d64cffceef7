//! Independent cross-check of the Python syntax verdicts: CPython's own `compile(…, "exec")` (what
//! the upstream fallback check runs) judges the same corpus that `validate_app_bundle` judges, and
//! the verdicts must agree.

use std::fs;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{connect_root, fixture_copy};

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
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cpython: Value = serde_json::from_slice(&output.stdout).unwrap();

    let client = connect_root(&copy.root, false).await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    client.close().await;
    let python = r["fallback_checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "python_syntax")
        .unwrap();
    let rejected: Vec<String> = python["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["path"]
                .as_str()
                .unwrap()
                .rsplit('/')
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
