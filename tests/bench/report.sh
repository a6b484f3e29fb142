#!/usr/bin/env bash
# Benchmark of `commdebug report` (the HTML page) against `zstd -dc`.
#
# usage: tests/bench/report.sh [BUILD_DIR]        (BUILD_DIR defaults to "build")
#
# Traces: the real GPT-2 trace at $COMMDEBUG_GPT2_TRACE (default
# /work/shared/traces/gpt2-400steps.zst: 1.28M events, 400 steps) and the
# generated 2M-event trace of run.sh (tests/bench/out/trace-2000000.jsonl.zst),
# each when present (run.sh makes the second).  For each: `zstd -dc` (the
# baseline), `commdebug analyze --noise 0`, `commdebug report` with its default
# op cap and with --max-ops 0 (every op), 3 runs each: median wall time, its
# ratio to zstd -dc, peak RSS, and the page's size.  Timings never fail the run:
# exit 0 unless a command fails, 77 (skipped) when neither trace is there.
set -u

orig=$PWD
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in
/*) ;;
*) if [ -d "$orig/$build" ]; then build=$orig/$build; else build=$root/$build; fi ;;
esac
cd "$root" || exit 1

bin=$build/commdebug
runs=3
name=report.sh
tmp=$(mktemp -d) || exit 1
. "$root/tests/bench/lib.sh"
trap 'rm -rf "$tmp"' EXIT

command -v zstd >/dev/null || { echo "report.sh: zstd not found" >&2; exit 1; }
[ -x "$bin" ] || { echo "report.sh: $bin not built" >&2; exit 1; }

traces=()
gpt2=${COMMDEBUG_GPT2_TRACE:-/work/shared/traces/gpt2-400steps.zst}
[ -s "$gpt2" ] && traces+=("$gpt2")
gen=tests/bench/out/trace-2000000.jsonl.zst
[ -s "$gen" ] && traces+=("$gen")
if [ ${#traces[@]} = 0 ]; then
	echo "report.sh: skipped: no trace ($gpt2 missing; run tests/bench/run.sh for $gen)"
	exit 77
fi

echo "commdebug report benchmark (median of $runs runs)"
row() { printf '  %-30s %9s %11s %13s %12s\n' "$@"; }
for t in "${traces[@]}"; do
	read -r n_events n_bytes < <(zstd -dcq "$t" | wc -lc)
	printf '\n  %s: %d events, %.1f MiB JSONL\n' "$t" "$n_events" \
		"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')"
	row "" "median s" "x zstd -dc" "peak RSS MiB" "page KiB"
	measure 0 zstd -dcq "$t"
	base=$med_s
	row "zstd -dc (baseline)" "$med_s" "1.00" "$(mib "$med_kib")" ""
	measure "0 3" "$bin" analyze --noise 0 --color=never "$t"
	row "analyze --noise 0" "$med_s" "$(ratio "$med_s" "$base")" "$(mib "$med_kib")" ""
	for cap in default 0; do
		args=(-o "$tmp/page.html")
		label="report (default --max-ops)"
		[ $cap = default ] || { args+=(--max-ops "$cap"); label="report --max-ops $cap (every op)"; }
		measure "0 3" "$bin" report "${args[@]}" "$t"
		size=$(wc -c <"$tmp/page.html")
		row "$label" "$med_s" "$(ratio "$med_s" "$base")" \
			"$(mib "$med_kib")" "$(awk -v b="$size" 'BEGIN { printf "%.0f", b / 1024 }')"
	done
done
exit 0
