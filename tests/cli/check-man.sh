#!/bin/sh
# Every long option that `commdebug --help` lists must be documented in
# man/commdebug.1, and every command too.
# usage: check-man.sh COMMDEBUG
set -u
man=$(dirname "$0")/../../man/commdebug.1
text=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "$man")
pass=0
fail=0
for opt in $( ("$1" --help; "$1" check --help; "$1" report --help; "$1" buckets --help; "$1" export --help) |
		grep -o -- '--[a-z][a-z-]*' | sort -u) \
	analyze counts sharding check report buckets export; do
	if printf '%s\n' "$text" | grep -q -- "$opt"; then
		pass=$((pass + 1))
	else
		echo "FAIL $opt is not in man/commdebug.1"
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
