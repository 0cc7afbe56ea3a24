#!/usr/bin/env bash
# The test command: fetches the test-only trace processor, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-deps.sh
cargo test --workspace --all-targets
