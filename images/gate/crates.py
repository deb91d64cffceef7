#!/usr/bin/env python3
"""The vendored crates of a rust environment image, prepared on the build host (images/build.sh
--gate rust --cargo-lock FILE; not run on its own).

    crates.py prepare CARGO_LOCK CACHE_DIR OUT_DIR
    crates.py check CARGO_LOCK

1. Reads CARGO_LOCK strictly (TOML, lockfile formats 1 to 4, at most 4 MiB and 5,000 packages):
   every package from crates.io must carry its SHA-256 (inline `checksum`, or format 1's
   `[metadata]` table); a package without `source` is the repository's own (a workspace member or
   a path dependency) and is skipped; any other source (a git repository, another registry) is
   refused, because nothing but crates.io's checksummed archives can be vendored offline.
2. Downloads, once, the `.crate` archives that are not cached yet from crates.io's static
   download host (the address cargo itself uses; the host's proxy settings apply), at most 64 MiB
   each, and files each as CACHE_DIR/<sha256>.crate after checking its SHA-256 against the lock.
   The checksum, not the host, decides what is accepted.
3. Writes OUT_DIR/vendor/<name>-<version>/ for each crate, unpacked with `cargo vendor`'s
   result: the archive's files (regular files and directories only, all under the archive's one
   `<name>-<version>/` folder) and a `.cargo-checksum.json` naming every file's SHA-256 and the
   package's, which cargo checks before it builds from the directory; OUT_DIR/Cargo.lock (the lock
   as given), and prints one JSON line: packages, crates, downloaded.

Exit status 3 with one line on stderr on any refusal; the line names the package's name and
version (both checked to be a crate name and a version first), never other text from the lock.
"""

import hashlib
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import tomllib
import urllib.request

MAX_BYTES = 4 << 20
MAX_PACKAGES = 5000
MAX_CRATE_BYTES = 64 << 20
MAX_UNPACKED_BYTES = 256 << 20
MAX_FILES = 20_000
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
DOWNLOAD = "https://static.crates.io/crates/{name}/{name}-{version}.crate"
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]{1,64})?")
SHA256 = re.compile(r"[0-9a-f]{64}")


def fail(message):
    print(f"crates.py: {message}", file=sys.stderr)
    sys.exit(3)


def parse(path):
    """The lock's crates.io packages as sorted (name, version, sha256) tuples, and how many
    packages the lock names in all."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        fail("the lockfile exceeds 4 MiB")
    try:
        lock = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        fail("the lockfile is not a TOML file")
    version = lock.get("version", 1)
    if not isinstance(version, int) or not 1 <= version <= 4:
        fail("the lockfile's format is not one of 1 to 4")
    packages = lock.get("package")
    if not isinstance(packages, list) or not packages:
        fail("the lockfile names no package")
    if len(packages) > MAX_PACKAGES:
        fail("the lockfile names more than 5000 packages")
    metadata = lock.get("metadata", {})
    if not isinstance(metadata, dict):
        fail("the lockfile's metadata is not a table")
    crates, seen = [], set()
    for package in packages:
        if not isinstance(package, dict):
            fail("a package entry is not a table")
        name, ver = package.get("name"), package.get("version")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            fail("a package without a crate name")
        if not isinstance(ver, str) or not VERSION.fullmatch(ver):
            fail(f"package {name}: not a version")
        source = package.get("source")
        if source is None:
            continue
        if source != CRATES_IO:
            fail(f"package {name} {ver}: its source is not crates.io (git and other registries "
                 "cannot be vendored from a lockfile)")
        checksum = package.get("checksum")
        if checksum is None:
            checksum = metadata.get(f"checksum {name} {ver} ({CRATES_IO})")
        if not isinstance(checksum, str) or not SHA256.fullmatch(checksum):
            fail(f"package {name} {ver}: no SHA-256 checksum in the lockfile")
        if (name, ver) in seen:
            fail(f"package {name} {ver}: named twice")
        seen.add((name, ver))
        crates.append((name, ver, checksum))
    return sorted(crates), len(packages)


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def cached(cache, crate):
    """CACHE/<sha256>.crate when it holds the checksummed bytes (checked on every use)."""
    path = os.path.join(cache, f"{crate[2]}.crate")
    if not os.path.isfile(path):
        return None
    if sha256_of(path) != crate[2]:
        fail(f"cached crate {crate[0]} {crate[1]} does not have its SHA-256 (delete "
             f"{crate[2]}.crate from the cache to download it again)")
    return path


def download(cache, crate):
    name, ver, checksum = crate
    url = DOWNLOAD.format(name=name, version=ver)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=cache, prefix=".dl.", delete=False) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                size = 0
                while chunk := response.read(1 << 20):
                    size += len(chunk)
                    if size > MAX_CRATE_BYTES:
                        fail(f"crate {name} {ver}: the download exceeds 64 MiB")
                    digest.update(chunk)
                    tmp.write(chunk)
        except OSError:
            os.unlink(tmp.name)
            fail(f"crate {name} {ver}: the download from crates.io failed")
    if digest.hexdigest() != checksum:
        os.unlink(tmp.name)
        fail(f"crate {name} {ver}: the download does not have the lockfile's SHA-256")
    os.replace(tmp.name, os.path.join(cache, f"{checksum}.crate"))


def unpack(path, crate, vendor):
    """Unpacks the archive at PATH into VENDOR/<name>-<version>/ with its checksum file."""
    name, ver, checksum = crate
    top = f"{name}-{ver}"
    dest = os.path.join(vendor, top)
    os.makedirs(dest)
    files, total = {}, 0
    try:
        with tarfile.open(path, mode="r:gz") as archive:
            for member in archive:
                parts = member.name.split("/")
                if parts[0] != top or any(p in ("", ".", "..") for p in parts[1:]) or \
                        len(parts) < 2 or "\\" in member.name:
                    fail(f"crate {name} {ver}: an archive entry outside {top}/")
                rel = "/".join(parts[1:])
                target = os.path.join(dest, *parts[1:])
                if member.isdir():
                    os.makedirs(target, exist_ok=True)
                    continue
                if not member.isfile():
                    # cargo vendor keeps only files; links and devices never reach the image.
                    continue
                total += member.size
                if total > MAX_UNPACKED_BYTES or len(files) >= MAX_FILES:
                    fail(f"crate {name} {ver}: unpacks to more than 256 MiB or 20000 files")
                if rel in files:
                    fail(f"crate {name} {ver}: a file named twice in its archive")
                source = archive.extractfile(member)
                if source is None:
                    fail(f"crate {name} {ver}: an unreadable archive entry")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                digest = hashlib.sha256()
                with source, open(target, "xb") as out:
                    while chunk := source.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
                os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
                files[rel] = digest.hexdigest()
    except (tarfile.TarError, EOFError, OSError, io.UnsupportedOperation):
        fail(f"crate {name} {ver}: not a readable .crate archive")
    if "Cargo.toml" not in files:
        fail(f"crate {name} {ver}: no Cargo.toml in its archive")
    with open(os.path.join(dest, ".cargo-checksum.json"), "w", encoding="utf-8") as f:
        json.dump({"files": files, "package": checksum}, f, sort_keys=True)


def prepare(lockfile, cache, out):
    os.makedirs(cache, exist_ok=True)
    crates, packages = parse(lockfile)
    missing = [c for c in crates if cached(cache, c) is None]
    if missing:
        print(f"crates.py: downloading {len(missing)} crates from crates.io", file=sys.stderr)
    for crate in missing:
        download(cache, crate)
    vendor = os.path.join(out, "vendor")
    os.makedirs(vendor)
    for crate in crates:
        path = cached(cache, crate)
        if path is None:
            fail(f"crate {crate[0]} {crate[1]}: missing from the cache after its download")
        unpack(path, crate, vendor)
    with open(lockfile, "rb") as src, open(os.path.join(out, "Cargo.lock"), "xb") as dst:
        dst.write(src.read(MAX_BYTES))
    print(json.dumps({"packages": packages, "crates": len(crates), "downloaded": len(missing)}))


def main(argv):
    if len(argv) == 5 and argv[1] == "prepare":
        prepare(*argv[2:])
    elif len(argv) == 3 and argv[1] == "check":
        crates, packages = parse(argv[2])
        print(json.dumps({"packages": packages, "crates": len(crates)}))
    else:
        fail("usage: crates.py prepare CARGO_LOCK CACHE_DIR OUT_DIR | check CARGO_LOCK")


if __name__ == "__main__":
    main(sys.argv)
