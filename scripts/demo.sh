#!/usr/bin/env bash
# Quick start (a): install what running needs (install.sh --run), then run the daemon in the foreground on
# the built-in demo configuration (see README). Ctrl-C unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh --run
exec node dist/cli/homesfs.js serve --demo "$@"
