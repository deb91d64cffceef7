# A python environment image: the python gate image (BASE, a local tag) plus the third-party
# packages of a hash-pinned requirements file, installed offline from wheels downloaded and
# checked on the build host (images/gate/wheels.py). Built by images/build.sh --gate python
# --requirements FILE with `docker build --network none`: nothing is fetched here.
ARG BASE
FROM ${BASE} AS install
USER 0:0
COPY env/ /env/
# pip runs from its pinned wheel and is not left in the image. --require-hashes checks every wheel
# against the requirements' pins again, and fails when a dependency is not pinned; Debian's
# python installs into /usr/local/lib/python3.11/dist-packages, on the interpreter's path.
RUN ["/usr/bin/python3", "/env/pip/pip.whl/pip", "install", "--quiet", "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--find-links", "/env/wheels", "--require-hashes", "--only-binary=:all:", "--break-system-packages", "--root-user-action=ignore", "--requirement", "/env/requirements.txt"]
RUN ["/usr/bin/python3", "/env/pip/pip.whl/pip", "check", "--disable-pip-version-check"]

FROM ${BASE}
COPY --from=install /usr/local/ /usr/local/
COPY env/requirements.txt /usr/local/share/patch-candidate-env/requirements.txt
# Every requirement whose marker holds here is installed at its pinned version.
RUN ["/usr/bin/python3", "-c", "import importlib.metadata as m, sys\nfrom packaging.requirements import Requirement\nbad = []\nfor line in open('/usr/local/share/patch-candidate-env/requirements.txt', encoding='utf-8'):\n    r = Requirement(line.split(' --hash=')[0])\n    if r.marker is not None and not r.marker.evaluate():\n        continue\n    want = next(iter(r.specifier)).version\n    try:\n        got = m.version(r.name)\n    except m.PackageNotFoundError:\n        got = None\n    if got != want:\n        bad.append(r.name)\nsys.exit('not installed at the pinned version: ' + ', '.join(bad) if bad else 0)"]
