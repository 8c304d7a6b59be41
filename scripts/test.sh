#!/usr/bin/env bash
# Quick start (b): install everything, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
results="$(mktemp -t homesfs-vitest-XXXXXX.json)"
status=0
npm test -- --reporter=default --reporter=json --outputFile="$results" || status=$?
# One plain closing line for whoever reads the log: counts straight from vitest's JSON report.
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const skipped = r.numPendingTests + r.numTodoTests;
console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
' "$results" || echo "tests: no report was written (the build or the runner failed)"
rm -f "$results"
exit "$status"
