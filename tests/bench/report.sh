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
# op cap and with --max-ops 0 (every op), and, when $BENCH_BEFORE names another
# commdebug binary (an earlier build), its report, in alternation, $BENCH_RUNS rounds
# (default 5; lib.sh's alt_run): median wall time, the median of the
# per-round ratios to zstd -dc with their range, the CPU time ratio, peak RSS,
# the page's size, and the issue's goal (report <= 2x).  Timings never fail
# the run: exit 0 unless a command fails, 77 (skipped) when neither trace is there.
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
runs=${BENCH_RUNS:-5}
name=report.sh
tmp=$(mktemp -d) || exit 1
. "$root/tests/bench/lib.sh"
trap 'rm -rf "$tmp"' EXIT

command -v zstd >/dev/null || { echo "report.sh: zstd not found" >&2; exit 1; }
[ -x "$bin" ] || { echo "report.sh: $bin not built" >&2; exit 1; }
before=${BENCH_BEFORE:-}
[ -z "$before" ] || [ -x "$before" ] || { echo "report.sh: BENCH_BEFORE=$before is not an executable" >&2; exit 1; }

traces=()
gpt2=${COMMDEBUG_GPT2_TRACE:-/work/shared/traces/gpt2-400steps.zst}
[ -s "$gpt2" ] && traces+=("$gpt2")
gen=tests/bench/out/trace-2000000.jsonl.zst
[ -s "$gen" ] && traces+=("$gen")
if [ ${#traces[@]} = 0 ]; then
	echo "report.sh: skipped: no trace ($gpt2 missing; run tests/bench/run.sh for $gen)"
	exit 77
fi

echo "commdebug report benchmark ($runs alternating rounds, medians; machine: $(machine_load))"
row() { printf '  %-30s %8s %10s %-13s %6s %9s %9s\n' "$@"; }
goals=()
for t in "${traces[@]}"; do
	read -r n_events n_bytes < <(zstd -dcq "$t" | wc -lc)
	printf '\n  %s: %d events, %.1f MiB JSONL\n' "$t" "$n_events" \
		"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')"
	row "" "median s" "x zstd -dc" "(range)" "CPU x" "RSS MiB" "page KiB"
	alt_reset
	alt_add zstd 0 zstd -dcq "$t"
	alt_add n0 "0 3" "$bin" analyze --noise 0 --color=never "$t"
	alt_add rep "0 3" "$bin" report -o "$tmp/page.html" "$t"
	alt_add all "0 3" "$bin" report -o "$tmp/page-all.html" --max-ops 0 "$t"
	[ -z "$before" ] || alt_add old "0 3" "$before" report -o "$tmp/page-old.html" "$t"
	alt_run
	alt_get zstd
	row "zstd -dc (baseline)" "$med_s" "1.00" "(spread $(alt_spread zstd)%)" "1.00" \
		"$(mib "$med_kib")" ""
	for c in n0 rep all ${before:+old}; do
		case $c in
		n0) label="analyze --noise 0" page="" ;;
		rep) label="report (default --max-ops)" page=$tmp/page.html ;;
		all) label="report --max-ops 0 (every op)" page=$tmp/page-all.html ;;
		old) label="BENCH_BEFORE's report" page=$tmp/page-old.html ;;
		esac
		alt_get $c
		alt_ratio $c zstd
		row "$label" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" "$(mib "$med_kib")" \
			"${page:+$(awk -v b="$(wc -c <"$page")" 'BEGIN { printf "%.0f", b / 1024 }')}"
		[ $c = rep ] && goals+=("$(printf '%-50s %5sx  (range %s-%s, %d rounds)  goal <= 2x: %s' \
			"report, $t" "$ratio" "$ratio_lo" "$ratio_hi" "$runs" "$(verdict "$ratio" 2)")")
		[ $c = old ] && goals+=("$(printf '%-50s %5sx  (range %s-%s, %d rounds)  (before)' \
			"report before, $t" "$ratio" "$ratio_lo" "$ratio_hi" "$runs")")
	done
done
printf '\n  goals (issue 25), machine at the end: %s\n' "$(machine_load)"
for g in "${goals[@]}"; do
	printf '    %s\n' "$g"
done
exit 0
