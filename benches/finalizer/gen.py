#!/usr/bin/env python3
"""Generates the finalizer benchmark inputs (deterministic).

worst_turn/before, worst_turn/after, worst_turn/manifest.json: 50 source-like files of ~300 KB each; every file gets ~40
scattered edits (changed, inserted and deleted lines), the shape of a large refactoring turn.
adversarial/unrelated_{a,b}.txt: two unrelated ~300 KB files whose lines each repeat just under
the autojunk threshold (the matcher's worst case).
adversarial/identical_{a,b}.txt: 30,000 identical lines, one line inserted in the middle.
"""
import hashlib
import json
import os
import random
import sys

out = sys.argv[1]
rng = random.Random(20261129)
WORDS = "alpha beta gamma delta value result index count buffer handle config error state".split()


def line(i):
    indent = "    " * rng.randint(0, 3)
    return f"{indent}let {rng.choice(WORDS)}_{i % 997} = {rng.choice(WORDS)}({rng.randint(0, 99999)});\n"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


manifest = {}
for n in range(50):
    lines = []
    size = 0
    while size < 300_000:
        l = line(len(lines))
        lines.append(l)
        size += len(l)
    after = list(lines)
    for _ in range(40):
        pos = rng.randrange(len(after))
        kind = rng.random()
        if kind < 0.5:
            after[pos] = line(pos + 7)
        elif kind < 0.75:
            after.insert(pos, line(pos + 11))
        else:
            del after[pos]
    rel = f"src/module_{n:02d}/file_{n:02d}.rs"
    write(os.path.join(out, "worst_turn/before", rel), "".join(lines))
    write(os.path.join(out, "worst_turn/after", rel), "".join(after))
    manifest[rel] = "sha256:" + hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
# The snapshot evidence's manifest, as a host receives it (the driver does not re-hash the tree).
with open(os.path.join(out, "worst_turn/manifest.json"), "w") as f:
    json.dump(manifest, f)

ua = "".join(f"alpha {i % 121:03d}\n" for i in range(30_000))
ub = "".join(f"alpha {(i * 7 + 3) % 121:03d}\n" for i in range(30_000))
write(os.path.join(out, "adversarial/unrelated_a.txt"), ua)
write(os.path.join(out, "adversarial/unrelated_b.txt"), ub)
same = "x\n" * 30_000
write(os.path.join(out, "adversarial/identical_a.txt"), same)
write(os.path.join(out, "adversarial/identical_b.txt"), "x\n" * 15_000 + "y\n" + "x\n" * 15_000)
