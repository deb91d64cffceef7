# A rust environment image: the rust gate image (BASE, a local tag) plus the crates of a
# repository's Cargo.lock, vendored on the build host by images/gate/crates.py (each .crate
# checked against the lock's SHA-256, unpacked with cargo's checksum file). Built by
# images/build.sh --gate rust --cargo-lock FILE with `docker build --network none`: nothing is
# fetched here. Cargo reads /.cargo/config.toml from any working directory below / (so from
# /workspace), after a repository's own .cargo/config.toml.
ARG BASE
FROM ${BASE}
COPY env/vendor/ /usr/local/share/cargo-vendor/
COPY env/Cargo.lock /usr/local/share/patch-candidate-env/Cargo.lock
COPY env/config.toml /.cargo/config.toml
