#!/usr/bin/env bash
# Unused dependencies fail CI: cargo-machete for each crate's own list, and
# a check that every [workspace.dependencies] entry is used by some member.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-machete >/dev/null 2>&1; then
  echo "check-deps: installing cargo-machete" >&2
  cargo install cargo-machete --locked --quiet
fi
cargo machete
status=0
manifests=$(for m in $(sed -n 's/^members = \[\(.*\)\]/\1/p' Cargo.toml | tr -d '"' | tr ',' ' '); do echo "$m/Cargo.toml"; done)
deps=$(awk '/^\[workspace.dependencies\]/ {on = 1; next} /^\[/ {on = 0} on && /^[a-z0-9_-]+ *=/ {print $1}' Cargo.toml)
for dep in $deps; do
  # shellcheck disable=SC2086
  if ! grep -qE "^$dep(\.workspace *= *true| *= *\{[^}]*workspace *= *true)" $manifests; then
    echo "check-deps: $dep is in [workspace.dependencies] but no member uses it; remove it" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "check-deps: every workspace dependency is used"
exit "$status"
