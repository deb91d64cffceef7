# The rust gate image: Debian's gcc, binutils and libc6-dev as the linker (images/gate/rust.pin)
# in a root file system built from the pinned .debs and imported with `docker import` (BASE, a
# local tag), rustc and cargo copied from the build host's pinned rustup toolchain
# (images/gate/rust.toolchain) under /opt/rust, and the static gate runner. Nothing is pulled.
# Built by images/build.sh --gate rust. Gates run cargo offline: `--offline --frozen` with the
# repository's vendored dependencies.
ARG BASE
FROM ${BASE}
RUN ["/usr/local/bin/rustc", "-V"]
RUN ["/usr/local/bin/cargo", "-V"]
COPY gate-runner /gate-runner
COPY layout/ /
# No CARGO_HOME: cargo uses $HOME/.cargo, and a live image on this image passes the turn's
# closed list of image environment names (gates set CARGO_HOME in their definitions).
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp
USER 10001:10001
WORKDIR /workspace
ENTRYPOINT ["/gate-runner"]
