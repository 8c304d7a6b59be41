#!/usr/bin/env bash
# Quick start (b): install everything, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
exec npm test
