#!/usr/bin/env bash
# Benchmark of `commdebug export --perfetto` against `zstd -dc` of the same files.
#
# usage: tests/bench/export.sh [BUILD_DIR] [RANKS] [EVENTS]
#        (defaults: build, 64 ranks, 20000 events per rank)
#
# Three inputs:
#  - a real trace, $CD_BENCH_GPT2 (default /work/shared/traces/gpt2-400steps.zst,
#    1.28M events; skipped with a note when missing);
#  - a generated trace of $BENCH_EVENTS events (default 2000000), the one
#    run.sh uses (tests/bench/out/trace-N.jsonl.zst, made when missing);
#  - a generated job of RANKS traces of EVENTS events (gen_trace.py --rank R
#    --world RANKS --seed R, as ranks.sh makes them) in
#    tests/bench/out/export-RANKS-EVENTS/, made once and reused while
#    gen_trace.py is not newer.
# For each: `zstd -dc` of the files (the baseline, one process) and
# `commdebug export --perfetto -o FILE` (one read of each trace: its summary and
# timeline, on threads when there are several traces; then each rank written
# from its timeline) with its default threads and with --jobs=1, and, when
# $BENCH_BEFORE names another commdebug binary (an earlier build), that one's
# export with its default threads, all in alternation, $BENCH_RUNS rounds
# (default 5; lib.sh's alt_run): median wall time, the median of the per-round
# ratios to the baseline with their range, the CPU time ratio, peak RSS, and
# the issue's goal (export <= 2x).  Timings never fail the run: the exit
# status is 0 unless a command fails or the analyzer is not built.
set -u

orig=$PWD
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
ranks=${2:-64}
events=${3:-20000}
case $build in
/*) ;;
*) if [ -d "$orig/$build" ]; then build=$orig/$build; else build=$root/$build; fi ;;
esac
cd "$root" || exit 1

die() {
	echo "export.sh: $*" >&2
	exit 1
}
case $ranks$events in
*[!0-9]*) die "RANKS and EVENTS must be numbers (usage: export.sh [BUILD_DIR] [RANKS] [EVENTS])" ;;
esac
[ "$ranks" -ge 1 ] || die "RANKS must be >= 1"

bin=$build/commdebug
gpt2=${CD_BENCH_GPT2:-/work/shared/traces/gpt2-400steps.zst}
dir=tests/bench/out/export-$ranks-$events
runs=${BENCH_RUNS:-5}
name=export.sh
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)

for tool in python3 zstd; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[ -x "$bin" ] || die "analyzer not built: $bin missing"
before=${BENCH_BEFORE:-}
[ -z "$before" ] || [ -x "$before" ] || die "BENCH_BEFORE=$before is not an executable"

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$root/tests/bench/lib.sh"

# ------------------------------------------------------------------ the traces
big_events=${BENCH_EVENTS:-2000000}
big=tests/bench/out/trace-$big_events.jsonl.zst
if ! { [ -s "$big" ] && [ "$big" -nt tests/bench/gen_trace.py ]; }; then
	echo "export.sh: generating $big" >&2
	mkdir -p tests/bench/out || exit 1
	{ python3 tests/bench/gen_trace.py --events "$big_events" "$big.tmp" && mv "$big.tmp" "$big"; } ||
		die "cannot generate $big"
fi
if [ ! -f "$dir/.done" ] || [ tests/bench/gen_trace.py -nt "$dir/.done" ]; then
	echo "export.sh: generating $ranks traces of $events events in $dir" >&2
	rm -rf "$dir"
	mkdir -p "$dir" || exit 1
	seq 0 $((ranks - 1)) | xargs -P "$cores" -I{} sh -c \
		'python3 tests/bench/gen_trace.py --events "$1" --rank "$2" --world "$3" --seed "$2" \
			"$4/rank$2.jsonl.zst.tmp" 2>/dev/null && mv "$4/rank$2.jsonl.zst.tmp" "$4/rank$2.jsonl.zst"' \
		_ "$events" {} "$ranks" "$dir" || die "cannot generate the traces"
	for ((r = 0; r < ranks; r++)); do
		[ -s "$dir/rank$r.jsonl.zst" ] || die "cannot generate $dir/rank$r.jsonl.zst"
	done
	: >"$dir/.done"
fi

row() { printf '  %-36s %8s %10s %-13s %6s %9s  %s\n' "$@"; }
goals=()

# bench LABEL FILE...: the baseline and the export of FILE...
bench() {
	local label=$1 n_events n_bytes
	shift
	read -r n_events n_bytes < <(zstd -dcq "$@" | wc -lc) || die "cannot read $*"
	printf '\n  %s: %d file(s), %d events, %.1f MiB JSONL\n' "$label" "$#" "$n_events" \
		"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')"
	row "" "median s" "x zstd -dc" "(range)" "CPU x" "RSS MiB" "exit"
	alt_reset
	alt_add zstd 0 zstd -dcq "$@"
	alt_add par "0 3 4" "$bin" export --perfetto -o "$tmp/out.json" "$@"
	alt_add one "0 3 4" "$bin" export --perfetto --jobs=1 -o "$tmp/out.json" "$@"
	[ -z "$before" ] || alt_add old "0 3 4" "$before" export --perfetto -o "$tmp/old.json" "$@"
	alt_run
	alt_get zstd
	row "zstd -dc (baseline)" "$med_s" "1.00" "(spread $(alt_spread zstd)%)" "1.00" \
		"$(mib "$med_kib")" ""
	alt_get par
	alt_ratio par zstd
	row "commdebug export --perfetto" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" \
		"$(mib "$med_kib")" "$last_rc"
	goals+=("$(printf '%-44s %5sx  (range %s-%s, %d rounds)  goal <= 2x: %s' \
		"export, $label" "$ratio" "$ratio_lo" "$ratio_hi" "$runs" "$(verdict "$ratio" 2)")")
	local par_s=$med_s
	alt_get one
	alt_ratio one zstd
	row "commdebug export --jobs=1" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" \
		"$(mib "$med_kib")" "$last_rc"
	printf '  %-36s %.1f MiB, %s trace events; --jobs=1 / default: %s x\n' "output" \
		"$(awk -v b="$(wc -c <"$tmp/out.json")" 'BEGIN { print b / 1048576 }')" \
		"$(sed -n 's/.*"trace_events_written":\([0-9]*\).*/\1/p' "$tmp/out.json")" \
		"$(ratio "$med_s" "$par_s")"
	if [ -n "$before" ]; then
		alt_get old
		alt_ratio old zstd
		row "BENCH_BEFORE's export" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" \
			"$(mib "$med_kib")" "$last_rc"
		goals+=("$(printf '%-44s %5sx  (range %s-%s, %d rounds)  (before)' \
			"export before, $label" "$ratio" "$ratio_lo" "$ratio_hi" "$runs")")
		cmp -s "$tmp/out.json" "$tmp/old.json" || printf '  %s\n' "the output differs from BENCH_BEFORE's"
	fi
	rm -f "$tmp/out.json" "$tmp/old.json"
}

echo "commdebug export --perfetto benchmark"
printf '  build %s; %d alternating rounds, medians; machine: %s; peak RSS from %s\n' "$bin" \
	"$runs" "$(machine_load)" "$([ -x /usr/bin/time ] && echo /usr/bin/time || echo "python3 getrusage")"
if [ -f "$gpt2" ]; then
	bench "real trace $gpt2" "$gpt2"
else
	printf '\n  %s missing (set CD_BENCH_GPT2): real-trace measurement skipped\n' "$gpt2"
fi
bench "generated trace $big" "$big"
files=()
for ((r = 0; r < ranks; r++)); do
	files+=("$dir/rank$r.jsonl.zst")
done
bench "generated job $dir" "${files[@]}"
printf '\n  goals (issue 25), machine at the end: %s\n' "$(machine_load)"
for g in "${goals[@]}"; do
	printf '    %s\n' "$g"
done
exit 0
