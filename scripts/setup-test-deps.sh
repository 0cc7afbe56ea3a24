#!/usr/bin/env bash
# Test-only dependencies (in progress).
set -euo pipefail
