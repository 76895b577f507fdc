#!/usr/bin/env bash
# failures.sh LOG: repeat what failed in a `go test -v` log at its end: failed
# tests and packages, panics with the tests that were running, and the
# harness watchdog's report of a stuck test.
set -u
log=$1
echo
echo "=== what failed (from $log)"
grep -E -- '^\s*--- FAIL|^FAIL|^panic: |^\s*running tests:|^\s+Test[A-Za-z0-9_/]+ \([0-9.hms]+\)$' "$log"
sed -n '/^=== STUCK /,/^=== END STUCK /p' "$log"
# The lines a failing test logged just before it failed.
grep -B3 -E -- '^\s*--- FAIL' "$log" | grep -E -- '_test\.go:[0-9]+:' | tail -40
exit 0
