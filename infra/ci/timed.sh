# Sourced by .ci/run and test-all.sh: `timed CMD…` runs CMD, says on stderr how long it took
# (prefixed by $TIMED_LABEL), and returns CMD's status, so a slow CI run shows where its time went.
timed() {
  local t0 rc=0
  t0=$(date +%s)
  "$@" || rc=$?
  echo "${TIMED_LABEL:-ci}: '$*' took $(( $(date +%s) - t0 )) s" >&2
  return "$rc"
}
