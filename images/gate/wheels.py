#!/usr/bin/env python3
"""The wheels of a python environment image, prepared on the build host (images/build.sh --gate
python --requirements FILE; not run on its own).

    wheels.py prepare REQUIREMENTS PIP_PIN CACHE_DIR OUT_DIR

1. Reads REQUIREMENTS strictly, with `pip --require-hashes` semantics and less: every line a
   requirement pinned with `==` to one version and carrying at least one `--hash=sha256:<hex>`
   (pip-compile's `--generate-hashes` output is accepted as it stands: continuation lines,
   comments, extras, environment markers); any option (`-r`, `-e`, `--index-url`, `-f`, ...), a
   URL or a local path is refused with its line number. At most 1 MiB and 2,000 requirements.
2. Downloads, once, the wheels that are not cached yet: `pip download --require-hashes
   --only-binary=:all: --no-deps` for CPython 3.11 on manylinux x86_64 (the image's
   interpreter), so an sdist is refused (building one would run its code on this host), and
   files each wheel in CACHE_DIR/<sha256>/<file name> after checking its SHA-256 is one of its
   requirement's pins. The host's pip configuration (index mirror, CA bundle) applies: the hashes,
   not the index, decide what is accepted.
3. Writes OUT_DIR/wheels/ (one checked copy of each cached wheel), OUT_DIR/requirements.txt (the
   requirements as read: name, extras, version, marker, hashes; nothing else reaches the image's
   pip), and OUT_DIR/pip/ (the pinned pip wheel of PIP_PIN, which installs them offline inside the
   image build), and prints one JSON line: requirements, wheels, downloaded.

Exit status 3 with one line on stderr on any refusal; the line names the line number, never the
line's text.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MAX_BYTES = 1 << 20
MAX_REQUIREMENTS = 2000
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
EXTRAS = re.compile(r"\[\s*[A-Za-z0-9][A-Za-z0-9._-]*(?:\s*,\s*[A-Za-z0-9][A-Za-z0-9._-]*)*\s*\]")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
# A marker's text: what PEP 508 markers use, and nothing that would start an option or a URL.
MARKER = re.compile(r"[A-Za-z0-9_ .'\"<>=!~()]{1,400}")
# What `pip download` is told the image's interpreter is (Debian bookworm: CPython 3.11, glibc
# 2.36, x86_64); pip accepts every older manylinux tag and pure-python wheels with it.
TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
          "--platform", "manylinux_2_36_x86_64"]


def fail(message):
    print(f"wheels.py: {message}", file=sys.stderr)
    sys.exit(3)


def parse(path):
    """The requirements of PATH as (line, name, extras, version, marker, hashes) tuples."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        fail("the requirements file exceeds 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        fail("the requirements file is not UTF-8")
    logical, start, pending = [], 0, ""
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not pending:
            start = number
        # A comment starts at '#' at the line's start or after whitespace (pip's rule).
        line = re.sub(r"(^|\s)#.*$", "", line)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            logical.append((start, whole))
    if pending.strip():
        logical.append((start, pending.strip()))
    requirements, seen = [], set()
    for number, whole in logical:
        hashes = HASH.findall(whole)
        head = HASH.sub("", whole).strip()
        if not hashes:
            fail(f"line {number}: a requirement without --hash=sha256:... (every one must be hash-pinned)")
        if head.startswith("-"):
            fail(f"line {number}: options are not accepted, only pinned requirements with hashes")
        if "--" in head:
            fail(f"line {number}: options are not accepted, only pinned requirements with hashes")
        spec, _, marker = head.partition(";")
        spec, marker = spec.strip(), marker.strip()
        m = NAME.match(spec)
        if not m:
            fail(f"line {number}: not a requirement name")
        name, rest = m.group(0), spec[m.end():].strip()
        extras = ""
        e = EXTRAS.match(rest)
        if e:
            extras, rest = e.group(0).replace(" ", ""), rest[e.end():].strip()
        if not rest.startswith("==") or rest.startswith("==="):
            fail(f"line {number}: a requirement must be pinned with == to one version")
        version = rest[2:].strip()
        if not VERSION.fullmatch(version) or "*" in version:
            fail(f"line {number}: not one exact version")
        if marker and not MARKER.fullmatch(marker):
            fail(f"line {number}: an environment marker with characters markers never use")
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            fail(f"line {number}: a requirement named twice")
        seen.add(key)
        requirements.append((number, name, extras, version, marker, sorted(set(hashes))))
        if len(requirements) > MAX_REQUIREMENTS:
            fail("more than 2000 requirements")
    if not requirements:
        fail("the requirements file names no requirement")
    return requirements


def line_of(req):
    _, name, extras, version, marker, hashes = req
    text = f"{name}{extras}=={version}"
    if marker:
        text += f" ; {marker}"
    return text + "".join(f" --hash=sha256:{h}" for h in hashes)


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def cached(cache, req):
    """The cached wheel of REQ (checked against its pins on every use), or None."""
    for h in req[5]:
        folder = os.path.join(cache, h)
        if not os.path.isdir(folder):
            continue
        files = [f for f in os.listdir(folder) if f.endswith(".whl") and not f.startswith(".")]
        if len(files) != 1:
            fail(f"cache folder {h} does not hold exactly one wheel (delete it to download again)")
        path = os.path.join(folder, files[0])
        if sha256_of(path) != h:
            fail(f"cached wheel {h} does not have its SHA-256 (delete it to download again)")
        return path
    return None


def download(cache, reqs):
    """Downloads REQS' wheels with pip and files each under its SHA-256; returns the count."""
    if not reqs:
        return 0
    with tempfile.TemporaryDirectory(dir=cache, prefix=".dl.") as tmp:
        listing = os.path.join(tmp, "requirements.txt")
        with open(listing, "w", encoding="utf-8") as f:
            f.write("".join(line_of(r) + "\n" for r in reqs))
        dest = os.path.join(tmp, "wheels")
        print(f"wheels.py: pip download of {len(reqs)} pinned wheels", file=sys.stderr)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-input", "--require-hashes", "--only-binary=:all:", "--no-deps", *TARGET,
             "--dest", dest, "--requirement", listing],
            stdout=sys.stderr, check=False)
        if done.returncode != 0:
            fail("pip download failed: a requirement has no wheel for CPython 3.11 on manylinux "
                 "x86_64 with a pinned hash (sdists are refused), or the index is unreachable")
        allowed = {h for r in reqs for h in r[5]}
        count = 0
        for name in sorted(os.listdir(dest)):
            path = os.path.join(dest, name)
            if not name.endswith(".whl") or os.path.islink(path) or not os.path.isfile(path):
                fail("pip download left something that is not a wheel")
            h = sha256_of(path)
            if h not in allowed:
                fail(f"a downloaded wheel has a SHA-256 no requirement pins ({h})")
            folder = os.path.join(cache, h)
            if not os.path.isdir(folder):
                os.makedirs(folder + ".partial", exist_ok=True)
                shutil.move(path, os.path.join(folder + ".partial", name))
                os.replace(folder + ".partial", folder)
            count += 1
        return count


def prepare(requirements, pin, cache, out):
    os.makedirs(cache, exist_ok=True)
    reqs = parse(requirements)
    pip_reqs = parse(pin)
    downloaded = download(cache, [r for r in reqs + pip_reqs if cached(cache, r) is None])
    wheels = os.path.join(out, "wheels")
    os.makedirs(wheels)
    os.makedirs(os.path.join(out, "pip"))
    count = 0
    for req in reqs:
        path = cached(cache, req)
        if path is None:
            if req[4]:
                # A marker that is false for CPython 3.11 on Linux: pip downloaded nothing, and
                # pip in the image skips it too (it fails the build if it does not).
                continue
            fail(f"line {req[0]}: no wheel was downloaded for this requirement")
        shutil.copyfile(path, os.path.join(wheels, os.path.basename(path)))
        count += 1
    pip_wheel = cached(cache, pip_reqs[0])
    if pip_wheel is None or len(pip_reqs) != 1:
        fail("the pip pin names one requirement whose wheel must be downloadable")
    shutil.copyfile(pip_wheel, os.path.join(out, "pip", "pip.whl"))
    with open(os.path.join(out, "requirements.txt"), "w", encoding="utf-8") as f:
        f.write("".join(line_of(r) + "\n" for r in reqs))
    print(json.dumps({"requirements": len(reqs), "wheels": count, "downloaded": downloaded}))


def main(argv):
    if len(argv) == 6 and argv[1] == "prepare":
        prepare(*argv[2:])
    elif len(argv) == 3 and argv[1] == "check":
        print(json.dumps({"requirements": len(parse(argv[2]))}))
    else:
        fail("usage: wheels.py prepare REQUIREMENTS PIP_PIN CACHE_DIR OUT_DIR | check REQUIREMENTS")


if __name__ == "__main__":
    main(sys.argv)
