# The python gate image: Debian's python3 and pytest (images/gate/python.pin) in a root file
# system built from the pinned .debs and imported with `docker import` (BASE, a local tag), plus
# the static gate runner. Nothing is pulled. Built by images/build.sh --gate python.
ARG BASE
FROM ${BASE}
# Bytecode for the standard library and pytest, once, at build time (the root is read-only when
# the gate runs; maintainer scripts, which would do this, never run in an extracted root).
RUN ["/usr/bin/python3", "-c", "import compileall, sys, sysconfig; sys.exit(0 if all(compileall.compile_dir(d, quiet=1, workers=1) for d in (sysconfig.get_path('stdlib'), '/usr/lib/python3/dist-packages')) else 1)"]
RUN ["/usr/bin/python3", "-m", "pytest", "--version"]
COPY gate-runner /gate-runner
COPY layout/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp
USER 10001:10001
WORKDIR /workspace
ENTRYPOINT ["/gate-runner"]
