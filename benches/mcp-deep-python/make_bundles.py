"""Writes the hostile bundles of benches/mcp-deep-python/run.sh into OUT: copies of the fixture
workspace with deep or dense Python added under app/modules/deep/.

Usage: make_bundles.py FIXTURE OUT
"""

import pathlib
import shutil
import sys

MIB = 1 << 20


def chain(unit, head="", tail="\n", size=MIB):
    n = (size - len(head) - len(tail)) // len(unit)
    return head + unit * n + tail


DEEP = {
    # One expression each, about 1 MiB: the shapes of issue 27.
    "unary.py": chain("-", tail="1\n"),
    "attribute.py": chain(".b", head="a"),
    "call.py": chain("()", head="f"),
    "binary.py": chain("+1", head="1"),
    "subscript.py": chain("[0]", head="a"),
    "power.py": chain("**a", head="a"),
    "not.py": chain("not ", head="x = ", tail="a\n"),
    "conditional.py": chain("a if b else ", head="x = ", tail="a\n"),
}

# Within CPython's limits but expensive per byte: statements of two bytes (the parser's worst
# case, over 200 bytes of tree per byte; 2 MiB of them need more than the whole work budget),
# calls whose estimated tree just fits the work budget, and 2,900-deep chains repeated.
DENSE = {
    "statements_2m.py": "a;" * (MIB - 1) + "a\n",
    "statements_256k.py": "a\n" * (128 * 1024),
    "calls_825k.py": "f(a)\n" * 165_000,
    "unary_lines.py": ("x = " + "-" * 2900 + "1\n") * 300,
    "attribute_lines.py": ("a" + ".b" * 2900 + "\n") * 150,
}


def bundle(fixture, out, name, files):
    root = out / name
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(fixture, root)
    deep = root / "app" / "modules" / "deep"
    deep.mkdir(parents=True)
    for file, text in files.items():
        (deep / file).write_text(text, encoding="utf-8")
    return root


def main():
    fixture, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    bundle(fixture, out, "deep", DEEP)
    bundle(fixture, out, "dense", DENSE)


if __name__ == "__main__":
    main()
