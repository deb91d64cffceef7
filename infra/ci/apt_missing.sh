# Sourced by the CI steps that need Debian packages.

# `install_missing STEP PACKAGE...`: installs the packages (non-interactively, quietly, progress on
# stderr under the step's name); nothing when none are named.
install_missing() {
  local step="$1"
  shift
  if [ "$#" -gt 0 ]; then
    echo "$step: installing $*" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "$@" >&2
  fi
}
