#!/usr/bin/env bash
# Benchmark of `commdebug analyze` against `zstd -dc` and a Python replay.
#
# usage: tests/bench/run.sh [BUILD_DIR]      (BUILD_DIR defaults to "build")
#
# Generates tests/bench/out/trace-N.jsonl.zst (N = $BENCH_EVENTS, default 2000000)
# and a half-length trace when missing or older than gen_trace.py, then measures
# each command 3 times (median wall time, peak RSS) and prints a report with the
# targets.  Timings never fail the run: the exit status is 0 unless a command fails
# (or the analyzer is not built: 1, after the measurements that do not need it).
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
runs=3
name=run.sh

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

# verdict VALUE LIMIT: "met" when VALUE <= LIMIT
verdict() { awk -v v="$1" -v l="$2" 'BEGIN { print (v <= l) ? "met" : "NOT MET" }'; }

echo "commdebug benchmark"
printf '  trace  %s: %d events, %.1f MiB JSONL, %.1f MiB zstd\n' "$full" "$n_events" \
	"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')" \
	"$(awk -v b="$z_bytes" 'BEGIN { print b / 1048576 }')"
printf '  build  %s\n' "$bin"
printf '  median of %d runs; peak RSS from %s\n\n' "$runs" \
	"$([ -x /usr/bin/time ] && echo /usr/bin/time ||
		echo "python3 getrusage (no /usr/bin/time; includes ~10 MiB of python3 itself)")"
row() { printf '  %-26s %10s %11s %13s  %-9s %s\n' "$@"; }
row "" "median s" "x zstd -dc" "peak RSS MiB" "target" "result"

measure 0 zstd -dcq "$full"
base_s=$med_s
row "zstd -dc (baseline)" "$med_s" "1.00" "$(mib "$med_kib")" "" ""

status=0
if [ -x "$bin" ]; then
	measure 0 "$bin" analyze --noise 0 --color=never "$full"
	r=$(ratio "$med_s" "$base_s")
	full_kib=$med_kib
	row "analyze --noise 0" "$med_s" "$r" "$(mib "$med_kib")" "<= 2.5x" "$(verdict "$r" 2.5)"

	measure 0 "$bin" analyze --noise 3 --json "$full"
	r=$(ratio "$med_s" "$base_s")
	row "analyze --noise 3 --json" "$med_s" "$r" "$(mib "$med_kib")" "<= 4x" "$(verdict "$r" 4)"
fi

measure 0 python3 tests/bench/replay.py "$full"
row "python3 replay.py" "$med_s" "$(ratio "$med_s" "$base_s")" "$(mib "$med_kib")" "" ""

if [ -x "$bin" ]; then
	measure 0 "$bin" analyze --noise 0 --color=never "$half"
	half_kib=$med_kib
	# streaming: the full trace may not need more than the half one (+20%, +1 MiB)
	limit=$(awk -v h="$half_kib" 'BEGIN { print h * 1.2 + 1024 }')
	printf '\n  %-26s %s MiB (%d events) / %s MiB (%d events)  %s\n' \
		"noise 0 RSS half / full" "$(mib "$half_kib")" "$half_events" \
		"$(mib "$full_kib")" "$events" \
		"target about equal: $(verdict "$full_kib" "$limit")"

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
		printf '  %-26s %s B / %s ops = %s B/op  target <= 48: %s\n' \
			"bytes per retained op" "$b" "$m" "$per" "$(verdict "$per" 48)"
	else
		printf '  %-26s no "stats: ... ops_retained=M op_bytes=B" line on stderr (%s)\n' \
			"bytes per retained op" "${stats:-none}"
	fi
else
	printf '\n  analyzer not built: %s missing; analyze measurements skipped\n' "$bin"
	status=1
fi
exit $status
