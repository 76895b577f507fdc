#!/usr/bin/env bash
# failures.sh LOG: repeat what failed in a `go test -v` log at its end: failed
# tests and packages, panics with the tests that were running, the harness
# watchdog's report of a stuck test, and what each failed test logged last
# from its own files (the messages of t.Errorf and t.Fatalf among them).
set -u
log=$1
echo
echo "=== what failed (from $log)"
grep -E -- '^\s*--- FAIL|^FAIL|^panic: |^\s*running tests:|^\s+Test[A-Za-z0-9_/]+ \([0-9.hms]+\)$' "$log"
sed -n '/^=== STUCK /,/^=== END STUCK /p' "$log"
# The last lines each failed test logged from a _test.go file, found by the
# test the -v log names before them (=== RUN, NAME or CONT), each line cut to
# 600 characters.
awk '
	/^=== (RUN|NAME|CONT) / { cur = $3; next }
	/^[ \t]+[A-Za-z0-9_]+_test\.go:[0-9]+: / && cur != "" {
		n[cur]++; lines[cur, n[cur] % 8] = substr($0, 1, 600)
		next
	}
	/^[ \t]*--- FAIL: / { failed[$3] = 1 }
	END {
		for (t in failed) {
			if (!(t in n)) continue
			print "--- what " t " logged last:"
			first = n[t] > 8 ? n[t] - 7 : 1
			for (i = first; i <= n[t]; i++) print lines[t, i % 8]
		}
	}' "$log"
exit 0
