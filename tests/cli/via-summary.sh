#!/usr/bin/env bash
# A stand-in for the commdebug binary that takes every `ranks` and `colls`
# through a summary file: `commdebug summarize -o S INPUTS...`, then the
# command on S alone.  tests/cli/summary-sweep.sh runs the golden CLI cases
# with it: the merge of summaries must print what the traces give.
#
#   CD_REAL=build/commdebug via-summary.sh ranks [OPTIONS] TRACE...|DIR
#
# Other commands, and a ranks whose inputs summarize refuses (a usage
# error, a directory without traces), run as they are.  Standard error is
# summarize's (directory notes and warnings about its traces) followed by
# what the merge adds: a line it repeats from summarize is said once.
set -u
real=${CD_REAL:?CD_REAL names the commdebug binary}
cmd=${1:-}
case $cmd in
ranks | colls) shift ;;
*) exec "$real" "$@" ;;
esac

opts=()   # for the command
sopts=()  # for summarize: the reading options
ins=()
while [ $# -gt 0 ]; do
	a=$1
	shift
	case $a in
	--late | --jobs | --parser | --max-mem | -o | --output | --color | --colour)
		opts+=("$a" "${1:-}")
		case $a in --jobs | --parser | --max-mem) sopts+=("$a" "${1:-}") ;; esac
		[ $# -gt 0 ] && shift ;;
	--jobs=* | --parser=* | --max-mem=*)
		opts+=("$a")
		sopts+=("$a") ;;
	-?*) opts+=("$a") ;;
	*) ins+=("$a") ;;
	esac
done

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
"$real" summarize "${sopts[@]}" -o "$tmp/s.cdsum" "${ins[@]}" 2>"$tmp/sum.err"
src=$?
if [ ! -s "$tmp/s.cdsum" ] || [ "$src" = 2 ]; then
	# summarize refused: the command as it is
	exec "$real" "$cmd" "${opts[@]}" "${ins[@]}"
fi
"$real" "$cmd" "${opts[@]}" "$tmp/s.cdsum" 2>"$tmp/cmd.err"
rc=$?
# summarize words a cut trace's warning for itself: the merge says it again
sed -i 's/the trace is cut; summarized what it holds$/the trace is cut; compared what it holds/' \
	"$tmp/sum.err"
cat "$tmp/sum.err" >&2
# what the merge says again (the traces' warnings) once
awk 'FILENAME == ARGV[1] { seen[$0]++; next } !($0 in seen) || seen[$0]-- <= 0' \
	"$tmp/sum.err" "$tmp/cmd.err" >&2
exit $rc
