#!/bin/sh
# `commdebug check --write` then `commdebug check` on every trace in testdata/
# (each golden case's ranks together too): the written file always holds; the
# same file with its first count made one larger fails (exit 5) and names that
# line.
# usage: check-roundtrip.sh COMMDEBUG
set -u
CD=$1
data=$(cd "$(dirname "$0")/../../testdata" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
one() { # one set of traces
	if ! "$CD" check --write "$tmp/e.yaml" "$@" 2>"$tmp/err"; then
		echo "FAIL write: $*"; cat "$tmp/err"; fail=$((fail + 1)); return
	fi
	if ! "$CD" check "$tmp/e.yaml" "$@" >"$tmp/out" 2>&1; then
		echo "FAIL written file does not hold: $*"; cat "$tmp/out"; fail=$((fail + 1)); return
	fi
	# the first "total: N" line, N + 1
	line=$(grep -n '^ *total: [0-9]*$' "$tmp/e.yaml" | head -n 1 | cut -d: -f1)
	awk -v l="$line" 'NR == l { sub(/[0-9]+$/, $2 + 1) } { print }' "$tmp/e.yaml" >"$tmp/off.yaml"
	"$CD" check "$tmp/off.yaml" "$@" >"$tmp/out" 2>&1
	rc=$?
	if [ $rc != 5 ] || ! grep -q "^$tmp/off.yaml:$line:" "$tmp/out"; then
		echo "FAIL off by one at line $line not reported (exit $rc): $*"; head -5 "$tmp/out"
		fail=$((fail + 1)); return
	fi
	pass=$((pass + 1))
}
for t in "$data"/*.zst "$data"/*.jsonl; do
	case $t in *.nccl.*) continue ;; esac
	one "$t"
done
for d in "$data"/golden/*/; do
	one "$d"rank*.zst
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
