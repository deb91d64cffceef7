# Sourced by the live-turn benches (from the repository root, with `bin` set to the release
# directory): a temporary work directory removed on exit (stopping the scripted upstream `up` if
# one runs), a private state directory, a one-file Git repository and its approval.
# Sets: work, PATCH_CANDIDATE_STATE_DIR.
work="$(mktemp -d)"
trap 'rm -rf "$work"; [ -n "${up:-}" ] && kill "$up" 2>/dev/null || true' EXIT
export PATCH_CANDIDATE_STATE_DIR="$work/state"
mkdir -m 700 "$work/state"
git init -q "$work/repo"
mkdir "$work/repo/src"
printf 'def answer():\n    return 1\n' > "$work/repo/src/app.py"
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=b -c user.email=b@example.invalid commit -qm init
"$bin/patch-candidate" approve --repo "$work/repo" --allow src --task "Make answer return 2." \
  --out "$work/approval.json" >&2
