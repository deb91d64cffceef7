#!/usr/bin/env python3
"""The Python comparison path: open the archive with zipfile, read every entry (CRC checked) and
SHA-256 it, and SHA-256 the whole archive (what a manifest needs)."""

import hashlib
import sys
import zipfile

path = sys.argv[1]
with open(path, "rb") as f:
    whole = f.read()
hashlib.sha256(whole).hexdigest()
with zipfile.ZipFile(path) as z:
    for info in z.infolist():
        hashlib.sha256(z.read(info)).hexdigest()
