#!/usr/bin/env bash
# Benchmark of `commdebug analyze` against `zstd -dc` and a Python replay.
#
# usage: tests/bench/run.sh [BUILD_DIR]      (BUILD_DIR defaults to "build")
#
# Generates tests/bench/out/trace-N.jsonl.zst (N = $BENCH_EVENTS, default 2000000)
# and a half-length trace when missing or older than gen_trace.py.  Then, on
# that trace: `zstd -dc` (the baseline), `analyze --noise 0` and `analyze
# --noise 3 --json`; on the real GPT-2 trace ($CD_BENCH_GPT2, default
# /work/shared/traces/gpt2-400steps.zst, skipped when missing): `zstd -dc` and
# `analyze --noise 0`.  Each group runs in alternation, $BENCH_RUNS rounds
# (default 5; lib.sh's alt_run), and the report gives each command's median
# wall time, the median of its per-round ratios to `zstd -dc` with their range
# (how noisy the machine was), its CPU time ratio and peak RSS, and the
# issue's goals (<= 1.5x, <= 1.5x, <= 2x, RSS flat in the trace's length).
# Timings never fail the run: the exit status is 0 unless a command fails (or
# the analyzer is not built: 1, after the measurements that do not need it).
# Works from any directory, e.g. as a meson benchmark with the build dir as argument.
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
events=${BENCH_EVENTS:-2000000}
half_events=$((events / 2))
outdir=tests/bench/out
full=$outdir/trace-$events.jsonl.zst
half=$outdir/trace-$half_events.jsonl.zst
runs=${BENCH_RUNS:-5}
name=run.sh
gpt2=${CD_BENCH_GPT2:-/work/shared/traces/gpt2-400steps.zst}

tmp=$(mktemp -d) || exit 1
. "$root/tests/bench/lib.sh"
trap 'rm -rf "$tmp"' EXIT

die() {
	echo "run.sh: $*" >&2
	exit 1
}

for tool in python3 zstd; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

# gen EVENTS FILE: (re)generate a trace when missing or older than the generator
gen() {
	if [ -s "$2" ] && [ "$2" -nt tests/bench/gen_trace.py ]; then
		return 0
	fi
	echo "run.sh: generating $2" >&2
	mkdir -p "$outdir" || exit 1
	{ python3 tests/bench/gen_trace.py --events "$1" "$2.tmp" && mv "$2.tmp" "$2"; } ||
		die "cannot generate $2"
}

gen "$events" "$full"
gen "$half_events" "$half"

read -r n_events n_bytes < <(zstd -dcq "$full" | wc -lc) || die "cannot read $full"
z_bytes=$(wc -c <"$full")

echo "commdebug benchmark"
printf '  trace  %s: %d events, %.1f MiB JSONL, %.1f MiB zstd\n' "$full" "$n_events" \
	"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')" \
	"$(awk -v b="$z_bytes" 'BEGIN { print b / 1048576 }')"
[ -f "$gpt2" ] && printf '  trace  %s: %d events\n' "$gpt2" "$(zstd -dcq "$gpt2" | wc -l)"
printf '  build  %s\n' "$bin"
printf '  %d alternating rounds, medians; machine: %s; peak RSS from %s\n\n' "$runs" \
	"$(machine_load)" \
	"$([ -x /usr/bin/time ] && echo /usr/bin/time ||
		echo "python3 getrusage (no /usr/bin/time; includes ~10 MiB of python3 itself)")"
row() { printf '  %-28s %8s %10s %-13s %8s %9s  %-7s %s\n' "$@"; }
# crow NAME LABEL TARGET: a command's row against the group's baseline "zstd"
crow() {
	alt_get "$1"
	alt_ratio "$1" zstd
	local res=""
	[ -n "$3" ] && res=$(verdict "$ratio" "$3")
	row "$2" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" "$(mib "$med_kib")" \
		"${3:+<= ${3}x}" "$res"
	[ -n "$3" ] && goals+=("$(printf '%-34s %5sx  (range %s-%s, %d rounds)  goal <= %sx: %s' \
		"$2" "$ratio" "$ratio_lo" "$ratio_hi" "$runs" "$3" "$res")")
}
goals=()

status=0
row "" "median s" "x zstd -dc" "(range)" "CPU x" "RSS MiB" "goal" "result"
alt_reset
alt_add zstd 0 zstd -dcq "$full"
if [ -x "$bin" ]; then
	alt_add n0 0 "$bin" analyze --noise 0 --color=never "$full"
	alt_add n3 0 "$bin" analyze --noise 3 --json "$full"
fi
alt_run
alt_get zstd
base_s=$med_s
row "zstd -dc (baseline)" "$med_s" "1.00" "(spread $(alt_spread zstd)%)" "1.00" "$(mib "$med_kib")" "" ""
if [ -x "$bin" ]; then
	crow n0 "analyze --noise 0" 1.5
	full_kib=$med_kib
	crow n3 "analyze --noise 3 --json" 2
fi

if [ -f "$gpt2" ] && [ -x "$bin" ]; then
	printf '\n  real trace %s\n' "$gpt2"
	alt_reset
	alt_add zstd 0 zstd -dcq "$gpt2"
	alt_add g0 0 "$bin" analyze --noise 0 --color=never "$gpt2"
	alt_run
	alt_get zstd
	row "zstd -dc (baseline)" "$med_s" "1.00" "(spread $(alt_spread zstd)%)" "1.00" \
		"$(mib "$med_kib")" "" ""
	crow g0 "analyze --noise 0 (GPT-2)" 1.5
fi

printf '\n'
measure 0 python3 tests/bench/replay.py "$full"
printf '  %-28s %8s s  %s x the median zstd -dc above\n' "python3 replay.py" "$med_s" \
	"$(ratio "$med_s" "$base_s")"

if [ -x "$bin" ]; then
	measure 0 "$bin" analyze --noise 0 --color=never "$half"
	half_kib=$med_kib
	# streaming: the full trace may not need more than the half one (+20%, +1 MiB)
	limit=$(awk -v h="$half_kib" 'BEGIN { print h * 1.2 + 1024 }')
	rss=$(verdict "$full_kib" "$limit")
	printf '\n  %-28s %s MiB (%d events) / %s MiB (%d events)  goal about equal: %s\n' \
		"noise 0 RSS half / full" "$(mib "$half_kib")" "$half_events" \
		"$(mib "$full_kib")" "$events" "$rss"
	goals+=("$(printf '%-34s %s MiB for %d events, %s MiB for %d  goal flat: %s' "peak RSS, noise 0" \
		"$(mib "$half_kib")" "$half_events" "$(mib "$full_kib")" "$events" "$rss")")

	timed "$bin" analyze --noise 3 --json --stats "$full"
	[ "$(cut -d' ' -f3 "$tmp/time")" = 0 ] || {
		echo "run.sh: command failed: $bin analyze --noise 3 --json --stats $full" >&2
		cat "$tmp/err" >&2
		exit 1
	}
	stats=$(grep 'stats:.*ops_retained=' "$tmp/err" | tail -n 1)
	m=$(printf '%s\n' "$stats" | sed -n 's/.*ops_retained=\([0-9]*\).*/\1/p')
	b=$(printf '%s\n' "$stats" | sed -n 's/.*op_bytes=\([0-9]*\).*/\1/p')
	if [ -n "$m" ] && [ -n "$b" ] && [ "$m" -gt 0 ]; then
		per=$(awk -v b="$b" -v m="$m" 'BEGIN { printf "%.1f", b / m }')
		printf '  %-28s %s B / %s ops = %s B/op  target <= 48: %s\n' \
			"bytes per retained op" "$b" "$m" "$per" "$(verdict "$per" 48)"
	else
		printf '  %-28s no "stats: ... ops_retained=M op_bytes=B" line on stderr (%s)\n' \
			"bytes per retained op" "${stats:-none}"
	fi
	printf '\n  goals (issue 25), machine at the end: %s\n' "$(machine_load)"
	for g in "${goals[@]}"; do
		printf '    %s\n' "$g"
	done
else
	printf '\n  analyzer not built: %s missing; analyze measurements skipped\n' "$bin"
	status=1
fi
exit $status
