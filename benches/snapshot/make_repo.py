#!/usr/bin/env python3
"""Builds a benchmark repository with `git fast-import` (deterministic content).

usage: make_repo.py DIR FILES MEAN_BYTES
FILES text files spread over 100-file directories, sizes uniform in [MEAN/2, 3*MEAN/2].
"""
import os
import random
import subprocess
import sys


def main():
    target, files, mean = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
    subprocess.run(["git", "init", "-q", "-b", "main", target], check=True, env=env)
    rng = random.Random(20000)
    words = [f"word{i}" for i in range(512)]
    chunks = []
    commit_lines = []
    for i in range(files):
        size = rng.randint(mean // 2, mean * 3 // 2)
        text = []
        length = 0
        while length < size:
            line = " ".join(rng.choice(words) for _ in range(8)) + "\n"
            text.append(line)
            length += len(line)
        data = "".join(text).encode()[:size]
        chunks.append(b"blob\nmark :%d\ndata %d\n%s\n" % (i + 1, len(data), data))
        path = f"src/d{i // 100:04d}/file{i:05d}.txt"
        commit_lines.append(f"M 100644 :{i + 1} {path}\n".encode())
    stream = b"".join(chunks)
    stream += b"commit refs/heads/main\n"
    stream += b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
    stream += b"data 6\nbench\n"
    stream += b"".join(commit_lines) + b"\n"
    subprocess.run(["git", "-C", target, "fast-import", "--quiet"], input=stream, check=True, env=env)
    subprocess.run(["git", "-C", target, "repack", "-a", "-d", "-q"], check=True, env=env)


if __name__ == "__main__":
    main()
