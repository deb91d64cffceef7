#!/usr/bin/env python3
"""Generates the content policy's pinned rule file from gitleaks' configuration, and the test
corpora and the documentation table derived from it.

    python3 worker/policy/rules/generate.py           # regenerate every output
    python3 worker/policy/rules/generate.py --check   # fail if any committed output differs
    python3 worker/policy/rules/generate.py import GIT_DIR COMMIT
        # refresh upstream/ from a gitleaks git directory at COMMIT (then bump
        # UPSTREAM_* below and `version` in local.toml, and regenerate)

Inputs (committed): `upstream/gitleaks.toml` (gitleaks' `config/gitleaks.toml`, verbatim),
`upstream/cases.json` (the single-line true/false-positive strings of gitleaks' rule tests,
extracted by `import`), `local.toml` (the policy's own rules, overrides and path lists).
Outputs: `policy.toml`, `../tests/corpus/secrets.jsonl`, `../tests/corpus/benign.txt`, and the
rule table of `docs/REVIEW.md` (between its `rules:begin` / `rules:end` markers).

gitleaks (https://github.com/gitleaks/gitleaks) is Copyright (c) 2019 Zachary Rice, MIT licence
(text in worker/policy/README.md). Only Python 3.11's standard library is used. Every random
choice comes from one fixed seed, so a run reproduces the committed files byte for byte.

Regexes: gitleaks writes Go RE2 syntax. The Rust `regex` crate accepts it unchanged except for a
`{` that RE2 reads as a literal (not a valid repetition), which is escaped here; anything the
`regex` crate cannot express the way RE2 means it (look-around, back-references, `\\C`, `\\Q`)
stops the generator. The crate's tests compile every regex.
"""

from __future__ import annotations

import hashlib
import math
import json
import random
import re
import string
import re._parser as sre_parse  # the standard library's regex parser (sample generation)
import re._constants as sre_c
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
CRATE = HERE.parent
ROOT = CRATE.parent.parent
UPSTREAM = HERE / "upstream" / "gitleaks.toml"
CASES = HERE / "upstream" / "cases.json"
LOCAL = HERE / "local.toml"
OUT_RULES = HERE / "policy.toml"
OUT_SECRETS = CRATE / "tests" / "corpus" / "secrets.jsonl"
OUT_BENIGN = CRATE / "tests" / "corpus" / "benign.txt"
REVIEW = ROOT / "docs" / "REVIEW.md"

UPSTREAM_REPO = "https://github.com/gitleaks/gitleaks"
UPSTREAM_COMMIT = "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b"
UPSTREAM_DESCRIBE = "v8.30.0-27-gb58d3f10"
UPSTREAM_SHA256 = "e163e53b9e7e8a8511e77271e2b323ed057759542a6d988258afe3a1fa329caf"

SEED = 20261204
# The samples come from `re._parser`'s trees and `random`: reproducible byte for byte with the
# Python minor version that generated the committed corpus.
GENERATED_WITH = (3, 11)
DEFAULT_PATH = "src/app/settings.py"
# A sample of a path-restricted rule lives in a file its path regex accepts.
PATH_FOR = {
    r"(?i)\.php$": "src/app/settings.php",
    r"(?i)\.(?:tf|hcl)$": "infra/main.tf",
    r"(?i)\.ya?ml$": "deploy/app.yaml",
    r"(?i)nuget\.config$": "src/NuGet.Config",
}
# Neutral lines a value is placed in, tried in order (the first one gitleaks' logic accepts).
TEMPLATES = ['client = Client("{}")', "client = Client('{}')", "{}"]


def fail(message: str) -> None:
    print(f"generate.py: {message}", file=sys.stderr)
    sys.exit(1)


# ---- regex conversion --------------------------------------------------------------------------

REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


def scan_regex(text: str):
    """Yields (kind, token) over a Go regex: kind is 'class', 'escape', 'group-open', '|', ')',
    'flags' (a `(?flags)` directive) or 'char'."""
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                fail("a regex ends in a backslash")
            j = i + 2
            if text[i + 1] in "pP" and j < n and text[j] == "{":
                j = text.index("}", j) + 1
            elif text[i + 1] == "x" and j < n and text[j] == "{":
                j = text.index("}", j) + 1
            elif text[i + 1] == "x":
                j = i + 4
            yield "escape", text[i:j]
            i = j
        elif c == "[":
            j = i + 1
            if j < n and text[j] == "^":
                j += 1
            if j < n and text[j] == "]":
                j += 1
            while j < n and text[j] != "]":
                if text[j] == "\\":
                    j += 2
                elif text.startswith("[:", j):
                    j = text.index(":]", j) + 2
                else:
                    j += 1
            if j >= n:
                fail("a regex has an unclosed class")
            yield "class", text[i : j + 1]
            i = j + 1
        elif c == "(":
            m = re.match(r"\(\?([a-zA-Z-]*)\)", text[i:])
            if m:
                yield "flags", m.group(0)
                i += len(m.group(0))
                continue
            m = re.match(r"\((?:\?P<\w+>|\?<\w+>|\?[a-zA-Z-]*:|)", text[i:])
            if text.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
                fail("a regex uses look-around, which neither RE2 nor the regex crate has")
            yield "group-open", m.group(0)
            i += len(m.group(0))
        elif c in "|)":
            yield c, c
            i += 1
        else:
            yield "char", c
            i += 1


def to_rust(regex: str) -> str:
    """RE2 → Rust `regex`: escape a `{` RE2 reads as a literal; refuse what differs."""
    out = []
    pos = 0
    for kind, tok in scan_regex(regex):
        if kind == "escape":
            if re.fullmatch(r"\\[1-9]", tok) or tok in ("\\C", "\\Q", "\\E"):
                fail(f"unconvertible escape {tok!r}")
        if kind == "char" and tok == "{" and not REPEAT.match(regex, pos):
            out.append("\\{")
        elif kind == "char" and tok == "}" and not _closes_repeat(regex, pos):
            out.append("\\}")
        else:
            out.append(tok)
        pos += len(tok)
    return "".join(out)


def _closes_repeat(regex: str, pos: int) -> bool:
    start = regex.rfind("{", 0, pos)
    return start >= 0 and REPEAT.fullmatch(regex, start, pos + 1) is not None


POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
    "space": r" \t\n\r\f\v",
    "word": r"\w",
    "punct": r"!-/:-@\[-`{-~",
}


def to_python(regex: str) -> str:
    """RE2 → Python `re` (the reference model and the sample generator): mid-pattern flag
    directives become scoped groups (closed at the next `|` or `)` of their level and reopened
    after a `|`), POSIX classes are spelled out, `\\z` becomes `\\Z`."""
    out: list[str] = []
    # Per open group: the flags directives active at this level (to close and reopen).
    stack: list[list[str]] = [[]]
    for kind, tok in scan_regex(to_rust(regex)):
        if kind == "flags":
            flags = tok[2:-1]
            if not out and len(stack) == 1 and "-" not in flags:
                out.append(tok)  # a leading global directive is fine in Python
                continue
            out.append(f"(?{flags}:")
            stack[-1].append(flags)
        elif kind == "group-open":
            out.append(tok)
            stack.append([])
        elif kind == "|":
            active = stack[-1]
            out.append(")" * len(active) + "|" + "".join(f"(?{f}:" for f in active))
        elif kind == ")":
            out.append(")" * len(stack.pop()) + ")")
        elif kind == "class":
            for name, spelled in POSIX.items():
                tok = tok.replace(f"[:{name}:]", spelled)
            if "[:" in tok:
                fail(f"unknown POSIX class in {tok!r}")
            out.append(tok)
        elif kind == "escape" and tok == "\\z":
            out.append("\\Z")
        else:
            out.append(tok)
    out.append(")" * len(stack.pop()))
    return "".join(out)


def py_compile(regex: str) -> re.Pattern:
    return re.compile(to_python(regex), re.ASCII)


# ---- gitleaks' matching logic (the reference model) --------------------------------------------


def entropy(data: str) -> float:
    """gitleaks' shannonEntropy: counts per character, frequencies over the length in bytes."""
    if not data:
        return 0.0

    counts: dict[str, int] = {}
    for ch in data:
        counts[ch] = counts.get(ch, 0) + 1
    inv = 1.0 / len(data.encode())
    return -sum(c * inv * math.log2(c * inv) for c in counts.values())


class Allow:
    def __init__(self, raw: dict):
        self.target = raw.get("regexTarget", "secret")
        self.regexes = [py_compile(r) for r in raw.get("regexes", [])]
        self.stopwords = [s.lower() for s in raw.get("stopwords", [])]
        self.paths = raw.get("paths", [])
        self.condition = raw.get("condition", "OR")

    def allowed(self, secret: str, match: str, line: str, path: str) -> bool:
        target = {"secret": secret, "match": match, "line": line}[self.target]
        by_regex = bool(target) and any(r.search(target) for r in self.regexes)
        low = secret.lower()
        by_stop = bool(secret) and any(s in low for s in self.stopwords)
        if self.condition == "AND":
            checks = []
            if self.paths:
                checks.append(any(py_compile(p).search(path) for p in self.paths))
            if self.regexes:
                checks.append(by_regex)
            if self.stopwords:
                checks.append(by_stop)
            return all(checks)
        return by_regex or by_stop


class Rule:
    def __init__(self, raw: dict, ported: bool = False):
        self.id = raw["id"]
        self.raw = raw
        self.regex = py_compile(raw["regex"])
        self.keywords = [k.lower() for k in raw.get("keywords", [])]
        self.entropy = float(raw.get("entropy", 0.0))
        self.group = int(raw.get("secretGroup", 0))
        self.path = py_compile(raw["path"]) if "path" in raw else None
        kept = ported_allowlists(raw)[0] if ported else raw.get("allowlists", [])
        self.allow = [Allow(a) for a in kept]


def gitleaks_finds(rule: Rule, glob: Allow, text: str, path: str) -> list[str]:
    """The secrets gitleaks reports for `rule` on the single line `text` in file `path`."""
    low = text.lower()
    if rule.keywords and not any(k in low for k in rule.keywords):
        return []
    if rule.path is not None and not rule.path.search(path):
        return []
    found = []
    for m in rule.regex.finditer(text):
        match = m.group(0).strip("\n")
        sub = rule.regex.search(match)
        secret = match
        if sub is not None and rule.regex.groups >= 1:
            if rule.group > 0:
                secret = sub.group(rule.group) or ""
            else:
                secret = next((g for g in sub.groups() if g), match)
        if rule.entropy and entropy(secret) <= rule.entropy:
            continue
        if glob.allowed(secret, match, text, path):
            continue
        if any(a.allowed(secret, match, text, path) for a in rule.allow):
            continue
        found.append(secret)
    return found


# ---- the rule file -----------------------------------------------------------------------------


def lit(regex: str) -> str:
    if "'''" in regex or "\n" in regex:
        fail("a regex cannot be written as a TOML literal string")
    return f"'''{regex}'''"


def basic(s: str) -> str:
    return json.dumps(s, ensure_ascii=True)


def toml_list(items: list[str], indent: str = "  ", width: int = 96) -> str:
    if not items:
        return "[]"
    lines, cur = [], indent
    for item in items:
        piece = basic(item) + ", "
        if len(cur) + len(piece) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += piece
    lines.append(cur.rstrip())
    return "[\n" + "\n".join(lines) + "\n]"


def ported_allowlists(rule: dict) -> tuple[list[dict], list[str]]:
    """The per-rule allow-lists the policy keeps (value and match targets without a path
    condition), and a note per dropped one."""
    kept, dropped = [], []
    for a in rule.get("allowlists", []):
        target = a.get("regexTarget", "secret")
        if a.get("paths") or a.get("commits"):
            dropped.append("a path allow-list (the agent chooses paths)")
        elif target == "line":
            dropped.append("a line allow-list (the agent writes the rest of the line)")
        else:
            kept.append(a)
    return kept, dropped


def apply_allowlist_overrides(up: dict, local: dict) -> None:
    """Replaces the global allow-list regexes `local.toml` changes (each must exist upstream)."""
    regexes = list(up["allowlist"].get("regexes", []))
    for o in local.get("allowlist_override", []):
        if o["upstream"] not in regexes:
            fail(f"local.toml changes a global allow-list regex gitleaks does not have: {o['upstream']!r}")
        regexes[regexes.index(o["upstream"])] = o["regex"]
    up["allowlist"]["regexes"] = regexes


def build_rules(up: dict, local: dict) -> tuple[str, list[dict]]:
    overrides = {o["id"]: o for o in local.get("override", [])}
    names = set(local["names"])
    ids = {r["id"] for r in up["rules"]}
    for i in list(overrides) + list(names):
        if i not in ids:
            fail(f"local.toml names an unknown gitleaks rule {i!r}")
    g = up["allowlist"]
    out = [
        "# The content policy's pinned rule file. GENERATED by generate.py from upstream/gitleaks.toml",
        "# and local.toml: do not edit by hand; change local.toml (or refresh upstream/) and regenerate.",
        "# Every policy report records `version` and the SHA-256 of this file's exact bytes.",
        "#",
        f"# Rules with origin \"gitleaks\" are ported from gitleaks' default configuration",
        f"# ({UPSTREAM_REPO}, config/gitleaks.toml at {UPSTREAM_COMMIT}, {UPSTREAM_DESCRIBE}),",
        "# Copyright (c) 2019 Zachary Rice, MIT licence (text in worker/policy/README.md): rule id,",
        "# description, regex (RE2 syntax; a literal `{` escaped for the Rust regex crate), keywords,",
        "# entropy, secretGroup, and the per-rule allow-lists on the secret or the match. Not ported:",
        "# allow-lists on paths, commits or the whole line (the agent writes those), and the global",
        "# path allow-list. Rules with origin \"local\" are the project's own.",
        "#",
        "# [allowlist]: gitleaks' global value allow-list: a secret matching one of `regexes` or",
        "# containing one of `stopwords` (lowercased) is not a finding, for every rule.",
        *[f"# Global allow-list regex changed: {o['regex']} for {o['upstream']}: {o['why']}." for o in local.get("allowlist_override", [])],
        "# [[secret]]: id; origin; description; regex (over one added line, or a new file's path with",
        "# `names = true`); keywords (lowercase; the regex runs only on a line holding one, ASCII",
        "# case-insensitive); secret_group (absent: the first non-empty capture group, else the",
        "# match); entropy (the secret's Shannon entropy must exceed it); path (the rule applies only",
        "# to files whose path matches); [[secret.allowlist]] target (`secret` or `match`), regexes,",
        "# stopwords: a match allowed by one is not a finding.",
        "# [[secret_path]]: a created file whose path matches is a finding by its name alone.",
        "# [executable] / [binary] / [ci]: gitignore-style globs over repository-relative paths.",
        "",
        f"version = {basic(local['version'])}",
        "",
        "[allowlist]",
        f"description = {basic('gitleaks global allow-list: ' + g.get('description', ''))}",
        "regexes = [",
    ]
    for r in g.get("regexes", []):
        out.append(f"  {lit(to_rust(r))},")
    out.append("]")
    out.append(f"stopwords = {toml_list(g.get('stopwords', []))}")
    table = []
    paths = []
    for rule in up["rules"]:
        if "regex" not in rule:
            if "path" not in rule:
                fail(f"{rule['id']}: neither regex nor path")
            paths.append(rule)
            continue
        origin = "gitleaks"
        regex = to_rust(rule["regex"])
        if rule["id"] in overrides:
            regex = overrides[rule["id"]]["regex"]
            origin = "gitleaks, changed: " + overrides[rule["id"]]["why"]
        kept, dropped = ported_allowlists(rule)
        if dropped:
            origin += "; not ported: " + ", ".join(sorted(set(dropped)))
        keywords = [k.lower() for k in rule.get("keywords", [])]
        if not keywords:
            fail(f"{rule['id']}: no keywords")
        out += ["", "[[secret]]", f"id = {basic(rule['id'])}", f"origin = {basic(origin)}"]
        out.append(f"description = {basic(rule['description'])}")
        out.append(f"regex = {lit(regex)}")
        out.append(f"keywords = {basic_list(keywords)}")
        if "secretGroup" in rule:
            out.append(f"secret_group = {int(rule['secretGroup'])}")
        if "entropy" in rule:
            out.append(f"entropy = {float(rule['entropy'])}")
        if "path" in rule:
            out.append(f"path = {lit(to_rust(rule['path']))}")
        if rule["id"] in names:
            out.append("names = true")
        for a in kept:
            out.append("[[secret.allowlist]]")
            out.append(f"target = {basic(a.get('regexTarget', 'secret'))}")
            out.append("regexes = [" + ", ".join(lit(to_rust(r)) for r in a.get("regexes", [])) + "]")
            out.append(f"stopwords = {toml_list(a.get('stopwords', []))}")
        table.append(
            {
                "id": rule["id"],
                "description": rule["description"],
                "entropy": rule.get("entropy"),
                "names": rule["id"] in names,
                "origin": "gitleaks" if origin == "gitleaks" else "gitleaks*",
            }
        )
    for rule in local.get("secret", []):
        out += ["", "[[secret]]", f"id = {basic(rule['id'])}", 'origin = "local"']
        out.append(f"description = {basic(rule['description'])}")
        out.append(f"regex = {lit(rule['regex'])}")
        out.append(f"keywords = {basic_list(rule['keywords'])}")
        if "secret_group" in rule:
            out.append(f"secret_group = {rule['secret_group']}")
        if "entropy" in rule:
            out.append(f"entropy = {float(rule['entropy'])}")
        for a in rule.get("allowlist", []):
            out.append("[[secret.allowlist]]")
            out.append(f"target = {basic(a['target'])}")
            out.append("regexes = [" + ", ".join(lit(r) for r in a.get("regexes", [])) + "]")
            out.append(f"stopwords = {toml_list(a.get('stopwords', []))}")
        table.append(
            {
                "id": rule["id"],
                "description": rule["description"],
                "entropy": rule.get("entropy"),
                "names": False,
                "origin": "local",
            }
        )
    for rule in paths:
        out += ["", "[[secret_path]]", f"id = {basic(rule['id'])}", 'origin = "gitleaks"']
        out.append(f"description = {basic(rule['description'])}")
        out.append(f"regex = {lit(to_rust(rule['path']))}")
    for rule in local.get("secret_path", []):
        out += ["", "[[secret_path]]", f"id = {basic(rule['id'])}", 'origin = "local"']
        out.append(f"description = {basic(rule['description'])}")
        out.append(f"regex = {lit(rule['regex'])}")
    for section in ("executable", "binary", "ci"):
        out += ["", f"[{section}]", f"description = {basic(local[section]['description'])}"]
        out.append(f"globs = {toml_list(local[section]['globs'])}")
    return "\n".join(out) + "\n", table


def basic_list(items: list[str]) -> str:
    return "[" + ", ".join(basic(i) for i in items) + "]"


# ---- sample generation -------------------------------------------------------------------------

PRINTABLE = [chr(c) for c in range(0x20, 0x7F)]
AWKWARD = set("\"'`\\ ;\t")


def class_chars(items) -> list[str]:
    negate = False
    chars: set[str] = set()
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars.add(chr(av))
        elif op is sre_c.RANGE:
            lo, hi = av
            chars.update(chr(c) for c in range(lo, min(hi, 0x7E) + 1) if c >= 0x20 or c in (9, 10, 13))
        elif op is sre_c.CATEGORY:
            chars.update(category_chars(av))
        else:
            fail(f"unsupported class item {op}")
    if negate:
        chars = set(PRINTABLE) - chars
    kept = sorted(chars - {"\n", "\r"})
    return kept or sorted(chars) or ["\n"]


def category_chars(cat) -> set[str]:
    table = {
        sre_c.CATEGORY_DIGIT: set(string.digits),
        sre_c.CATEGORY_WORD: set(string.ascii_letters + string.digits + "_"),
        sre_c.CATEGORY_SPACE: {" ", "\t"},
        sre_c.CATEGORY_NOT_DIGIT: set(PRINTABLE) - set(string.digits),
        sre_c.CATEGORY_NOT_WORD: set(PRINTABLE) - set(string.ascii_letters + string.digits + "_"),
        sre_c.CATEGORY_NOT_SPACE: set(PRINTABLE) - {" ", "\t"},
    }
    if cat not in table:
        fail(f"unsupported category {cat}")
    return table[cat]


def pick(chars: list[str], rng) -> str:
    nice = [c for c in chars if c not in AWKWARD]
    return rng.choice(nice or chars)


def gen(tree, rng, out: list[str]) -> None:
    for op, av in tree:
        if op is sre_c.LITERAL:
            out.append(chr(av))
        elif op is sre_c.NOT_LITERAL:
            out.append(pick([c for c in PRINTABLE if c != chr(av)], rng))
        elif op is sre_c.ANY:
            # Mostly a literal dot: gitleaks' regexes often leave the dots of host names bare.
            out.append("." if rng.random() < 0.7 else pick(PRINTABLE, rng))
        elif op is sre_c.IN:
            out.append(pick(class_chars(av), rng))
        elif op is sre_c.BRANCH:
            gen(rng.choice(av[1]), rng, out)
        elif op is sre_c.SUBPATTERN:
            gen(av[3], rng, out)
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            if hi == sre_c.MAXREPEAT:
                hi = lo + 24
            if lo == 0:
                count = 0 if rng.random() < 0.8 else rng.randint(0, min(hi, 3))
            else:
                count = rng.randint(lo, max(lo, min(hi, lo + 24)))
            for _ in range(count):
                gen(sub, rng, out)
        elif op is sre_c.AT:
            pass
        elif op is sre_c.CATEGORY:
            out.append(pick(sorted(category_chars(av)), rng))
        else:
            fail(f"unsupported regex node {op}")


def sample(rule: Rule, glob: Allow, rng) -> tuple[str, str] | None:
    tree = sre_parse.parse(rule.regex.pattern, re.ASCII)
    path = DEFAULT_PATH
    if rule.path is not None:
        if rule.raw["path"] not in PATH_FOR:
            fail(f"{rule.id}: no sample path for its path regex")
        path = PATH_FOR[rule.raw["path"]]
    for _ in range(400):
        parts: list[str] = []
        gen(tree, rng, parts)
        value = "".join(parts).strip()
        if "\n" in value or not value:
            continue
        for template in TEMPLATES:
            line = template.format(value)
            if gitleaks_finds(rule, glob, line, path):
                return path, line
    return None


# ---- gitleaks' own test strings ----------------------------------------------------------------

GO_STRING = re.compile(r'`[^`]*`|"(?:[^"\\\n]|\\.)*"')


def go_elements(block: str) -> list[str]:
    """The elements of a Go `[]string{…}` / `append(x, …)` body that are one string literal."""
    items, depth, cur, i = [], 0, [], 0
    while i < len(block):
        c = block[i]
        if block.startswith("//", i):
            j = block.find("\n", i)
            i = len(block) if j < 0 else j
            continue
        m = GO_STRING.match(block, i)
        if m:
            cur.append(("s", m.group(0)))
            i = m.end()
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth < 0:
                break
        if c == "," and depth == 0:
            items.append(cur)
            cur = []
        elif not c.isspace():
            cur.append(("x", c))
        i += 1
    items.append(cur)
    out = []
    for item in items:
        if len(item) == 1 and item[0][0] == "s":
            tok = item[0][1]
            out.append(tok[1:-1] if tok.startswith("`") else json.loads(tok))
    return out


def extract_cases(sources: dict[str, str]) -> list[dict]:
    cases = []
    for name, text in sorted(sources.items()):
        for func in re.split(r"\nfunc ", text):
            m = re.search(r'RuleID:\s*"([^"]+)"', func)
            if not m:
                continue
            rid = m.group(1)
            for kind, pat in (("tp", r"\btps\s*:?=\s*(?:\[\]string\{|append\(tps,)"), ("fp", r"\bfps\s*:?=\s*(?:\[\]string\{|append\(fps,)")):
                for hit in re.finditer(pat, func):
                    for s in go_elements(func[hit.end():]):
                        if "\n" not in s and s.strip():
                            cases.append({"rule": rid, "kind": kind, "text": s, "source": name})
    return cases


def do_import(git_dir: str, commit: str) -> None:
    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
            check=True, capture_output=True, text=True,
        ).stdout

    UPSTREAM.write_text(show("config/gitleaks.toml"))
    names = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "--name-only", commit, "cmd/generate/config/rules/"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    sources = {Path(n).name: show(n) for n in names if n.endswith(".go") and not n.endswith("_test.go")}
    CASES.write_text(json.dumps(extract_cases(sources), indent=1, ensure_ascii=True) + "\n")
    print(f"imported {commit}; set UPSTREAM_* in generate.py (sha256 "
          f"{hashlib.sha256(UPSTREAM.read_bytes()).hexdigest()}) and bump local.toml's version")


# ---- corpora -----------------------------------------------------------------------------------

BENIGN_FIXED = [
    'api_key = os.environ["API_KEY"]',
    "const token = process.env.GITHUB_TOKEN;",
    "secret: ${{ secrets.DEPLOY_KEY }}",
    "password = ${DB_PASSWORD}",
    "auth_token = $AUTH_TOKEN",
    "api_key = settings.api.key_name",
    "token = request.headers.authorization.bearer",
    "key = config.services.payment.public_key",
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    'password = "changeme"',
    'api_key = "xxxxxxxxxxxxxxxxxxxxxxxx"',
    'token = "<your-token-here>"',
    'secret = "YOUR_SECRET_HERE"',
    "password: true",
    "api_key: null",
    'secret_key = "{{ secret_key }}"',
    "access_token = %ACCESS_TOKEN%",
    'resolved "https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#679591c564c3bffaae8454cf0b3df370c3d6911c"',
    '  integrity sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+LFTGHVxVjcXPs17LhbZVGedAJv8XZ1tvj5FvSg==',
    '"checksum": "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",',
    'checksum = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"',
    'version = "1.0.197"',
    "import { authToken } from './auth';",
    "from app.auth import token_required",
    "def get_api_key(self) -> str:",
    "    return self.credentials.token",
    "# rotate the access key every 90 days",
    "user = User(name='alice', email='alice@example.com')",
    'url = "https://example.com/api/v1/items?page=2"',
]


def benign_lines(rng) -> list[str]:
    lines = list(BENIGN_FIXED)
    hexd = "0123456789abcdef"
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def s(alpha: str, n: int) -> str:
        return "".join(rng.choice(alpha) for _ in range(n))

    def uuid() -> str:
        return f"{s(hexd, 8)}-{s(hexd, 4)}-4{s(hexd, 3)}-a{s(hexd, 3)}-{s(hexd, 12)}"

    for i in range(40):
        lines.append(f"key_id = {uuid()}")
        lines.append(f'request_id = "{uuid()}"')
        lines.append(f"commit = {s(hexd, 40)}")
        lines.append(f'digest = "sha256:{s(hexd, 64)}"')
        lines.append(f'  "version": "{i}.{i % 7}.{i % 3}",')
        lines.append(f'fixture = "{s(b64, 60)}"')
        lines.append(f"    {s('abcdefghijklmnopqrstuvwxyz', 8)}_{i} = compute(args[{i}], limit=4096)")
        lines.append(f"package-{i}@^{i}.{i % 5}.0:")
        lines.append(f'  resolved "https://registry.npmjs.org/pkg-{i}/-/pkg-{i}-1.0.{i}.tgz"')
        lines.append(f"self.config.auth.provider_{i}.token_url")
    return lines


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["import"]:
        if len(args) != 3:
            fail("usage: generate.py import GIT_DIR COMMIT")
        do_import(args[1], args[2])
        return
    check = args == ["--check"]
    if args and not check:
        fail("usage: generate.py [--check] | import GIT_DIR COMMIT")
    raw = UPSTREAM.read_bytes()
    if hashlib.sha256(raw).hexdigest() != UPSTREAM_SHA256:
        fail("upstream/gitleaks.toml is not the pinned copy (see UPSTREAM_* and `import`)")
    up = tomllib.loads(raw.decode())
    local = tomllib.loads(LOCAL.read_text())
    apply_allowlist_overrides(up, local)
    rules_text, table = build_rules(up, local)

    rng = random.Random(SEED)
    glob = Allow(up["allowlist"])
    overrides = {o["id"] for o in local.get("override", [])}
    corpus = []
    unfired = []
    for raw_rule in up["rules"]:
        if "regex" not in raw_rule:
            continue
        rule = Rule(raw_rule)
        got = sample(rule, glob, rng)
        if got is None:
            unfired.append(rule.id)
            continue
        path, line = got
        corpus.append({"rule": rule.id, "kind": "generated", "path": path, "line": line})
    for case in json.loads(CASES.read_text()):
        raw_rule = next((r for r in up["rules"] if r["id"] == case["rule"] and "regex" in r), None)
        if raw_rule is None or case["rule"] in overrides:
            continue
        rule = Rule(raw_rule)
        path = DEFAULT_PATH if rule.path is None else PATH_FOR[raw_rule["path"]]
        flagged = bool(gitleaks_finds(rule, glob, case["text"], path))
        ported = bool(gitleaks_finds(Rule(raw_rule, ported=True), glob, case["text"], path))
        # Keep the cases where gitleaks' logic on one line agrees with the test's expectation,
        # and so does the ported rule (a false positive only a line or path allow-list removes
        # is one the policy deliberately reports).
        if flagged == ported == (case["kind"] == "tp"):
            corpus.append({"rule": rule.id, "kind": f"gitleaks-{case['kind']}", "path": path, "line": case["text"]})
    secrets = "".join(json.dumps(c, ensure_ascii=True, sort_keys=True) + "\n" for c in corpus)
    benign = "".join(line + "\n" for line in benign_lines(random.Random(SEED + 1)))
    review = REVIEW.read_text()
    begin, end = "<!-- rules:begin (generated by worker/policy/rules/generate.py) -->", "<!-- rules:end -->"
    if begin not in review or end not in review:
        fail("docs/REVIEW.md has no rule table markers")
    head, rest = review.split(begin, 1)
    _, tail = rest.split(end, 1)
    rows = ["| rule | what | entropy above | names | origin |", "|---|---|---|---|---|"]
    for t in table:
        ent = "—" if t["entropy"] is None else f"{float(t['entropy'])}"
        desc = t["description"].replace("|", "\\|")
        rows.append(f"| `{t['id']}` | {desc} | {ent} | {'yes' if t['names'] else 'no'} | {t['origin']} |")
    review = head + begin + "\n" + "\n".join(rows) + "\n" + end + tail
    outputs = {OUT_RULES: rules_text, OUT_SECRETS: secrets, OUT_BENIGN: benign, REVIEW: review}
    if check and sys.version_info[:2] != GENERATED_WITH:
        # The rule file and the table do not depend on the version; the corpus may.
        print(f"generate.py: Python {sys.version_info[0]}.{sys.version_info[1]} is not "
              f"{GENERATED_WITH[0]}.{GENERATED_WITH[1]}: the corpora are not compared")
        outputs = {OUT_RULES: rules_text, OUT_BENIGN: benign, REVIEW: review}
    stale = [str(p.relative_to(ROOT)) for p, t in outputs.items() if not p.exists() or p.read_text() != t]
    if check:
        if stale:
            fail("out of date, rerun generate.py: " + ", ".join(stale))
        return
    for p, t in outputs.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(t)
    n_rules = sum(1 for r in up["rules"] if "regex" in r)
    print(f"{len(table)} secret rules ({n_rules} ported), corpus {len(corpus)} lines, "
          f"no sample for: {', '.join(unfired) or 'none'}")


if __name__ == "__main__":
    main()
