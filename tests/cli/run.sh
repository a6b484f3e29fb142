#!/bin/sh
# Golden CLI tests.  Each tests/cli/cases/NAME/ holds:
#   cmd       one shell command line, run in a scratch directory where
#             data/ is the repository's testdata/ and $CD is the commdebug binary
#   stdout, stderr, exit   what it must print and return
# usage: run.sh COMMDEBUG [--update] [NAME...]
# --update rewrites the expected files from what the command does now: review
# the diff before committing it.
set -u
cd "$(dirname "$0")" || exit 2
here=$(pwd)
CD=$1
shift
case $CD in /*) ;; *) CD=$(cd "$OLDPWD" && cd "$(dirname "$CD")" && pwd)/$(basename "$CD") ;; esac
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
names=$*
[ -n "$names" ] || names=$(ls cases)
pass=0
fail=0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for name in $names; do
	dir=$here/cases/$name
	rm -rf "$scratch/w"
	mkdir "$scratch/w"
	ln -s "$here/../../testdata" "$scratch/w/data"
	(cd "$scratch/w" && CD=$CD NO_COLOR= sh -c "$(cat "$dir/cmd")" >../out 2>../err </dev/null
	 echo $? >../rc)
	if [ $update = 1 ]; then
		cp "$scratch/out" "$dir/stdout"
		cp "$scratch/err" "$dir/stderr"
		cp "$scratch/rc" "$dir/exit"
		echo "updated $name"
		continue
	fi
	ok=1
	for f in stdout:out stderr:err exit:rc; do
		want=$dir/${f%%:*}
		got=$scratch/${f#*:}
		if ! cmp -s "$want" "$got"; then
			ok=0
			echo "  $name: ${f%%:*} differs:"
			diff -u "$want" "$got" | head -20 | sed 's/^/    /'
		fi
	done
	if [ $ok = 1 ]; then
		echo "ok   $name"
		pass=$((pass + 1))
	else
		echo "FAIL $name"
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
