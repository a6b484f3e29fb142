#!/bin/sh
# Every golden CLI case that runs `ranks` or `colls`, run again with each of
# those commands taken through a summary file (via-summary.sh): the same
# standard output, standard error and exit status as on the traces.
# usage: summary-sweep.sh COMMDEBUG
set -u
here=$(cd "$(dirname "$0")" && pwd)
CD=$1
case $CD in /*) ;; *) CD=$(pwd)/$CD ;; esac
# cases whose command runs ranks or colls; not those that print times
# (--stats), that test -o against the inputs (the input is then the
# summary) or that make summaries themselves
names=$(cd "$here/cases" && grep -lE '\$CD (ranks|colls)\b' */cmd | grep -v -- '-stats' |
	xargs grep -L -- '--stats' | grep -v -e '^output-is-input' -e '^summar' | sed 's,/cmd$,,' | sort)
[ -n "$names" ] || { echo "summary-sweep: no case runs ranks or colls"; exit 1; }
echo "summary-sweep: $(echo "$names" | wc -l) cases through summary files"
CD_REAL=$CD exec "$here/run.sh" "$here/via-summary.sh" $names
