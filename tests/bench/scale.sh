#!/usr/bin/env bash
# Benchmark of the post-mortem at cluster scale: `commdebug ranks` on every
# trace of a job against `commdebug summarize` per node plus the merge of
# the summaries, and the merge of a 100,000-rank job's summaries.
#
# usage: tests/bench/scale.sh [BUILD_DIR] [RANKS] [BIG]
#        (defaults: build, 8192, 100000)
#
# Generates, once (reused while the generators are not newer):
#   tests/bench/out/job-RANKS/node*/rank*.zst   gen_job.py: a dp x tp8 job of
#       RANKS ranks, 64 a node, 12 steps of 8 blocks, two faults (rank 1234
#       skips a dp all-reduce in step 7, rank 5000 is 7 s late in step 9)
#   tests/bench/out/sums-BIG/*.cdsum            gen_summaries.py: the same
#       job shape with BIG ranks, as 1,000 summary files, two faults
# Then measures, $RUNS times each (default 3; medians of wall time and peak
# RSS): `ranks` on the job's directory; `summarize --shard K/N` for each of
# RANKS/64 shards (one per node), $(nproc) at a time as a scheduler would run
# them, once; the merge, `ranks` on the summaries (its output must equal the
# direct one byte for byte); the merge of BIG ranks.  Prints the summaries'
# size as a share of the traces' and the goals.  Timings never fail the run.
set -u

orig=$PWD
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
ranks=${2:-8192}
big=${3:-100000}
case $build in
/*) ;;
*) if [ -d "$orig/$build" ]; then build=$orig/$build; else build=$root/$build; fi ;;
esac
cd "$root" || exit 1
bin=$build/commdebug
runs=${RUNS:-3}
name=scale.sh
out=tests/bench/out
job=$out/job-$ranks
bigdir=$out/sums-$big
tmp=$(mktemp -d) || exit 1
. "$root/tests/bench/lib.sh"
trap 'rm -rf "$tmp"' EXIT

die() {
	echo "scale.sh: $*" >&2
	exit 1
}
[ -x "$bin" ] || die "no analyzer at $bin (build it first)"
command -v zstd >/dev/null || die "zstd not found"
cores=$(nproc 2>/dev/null || echo 1)

# fresh DIR GENERATOR: is DIR there and newer than its generator?
fresh() { [ -f "$1/.done" ] && [ "$1/.done" -nt "$2" ]; }

if ! fresh "$job" tests/bench/gen_job.py; then
	echo "scale.sh: generating $job (a few minutes)" >&2
	rm -rf "$job"
	python3 tests/bench/gen_job.py --ranks "$ranks" --tp 8 --per-node 64 --out "$job" \
		--fault skip:1234:7:3 --fault sleep:5000:9:2:7 || die "cannot generate $job"
	touch "$job/.done"
fi
if ! fresh "$bigdir" tests/bench/gen_summaries.py; then
	echo "scale.sh: generating $bigdir (a minute or two)" >&2
	rm -rf "$bigdir"
	python3 tests/bench/gen_summaries.py --ranks "$big" --files 1000 --out "$bigdir" \
		--fault skip:12345:7:3 --fault sleep:77777:9:2:7 || die "cannot generate $bigdir"
	touch "$bigdir/.done"
fi
trace_bytes=$(find "$job/" -name '*.zst' -printf '%s\n' | awk '{ s += $1 } END { print s }')

# stats LINE KEY: the value of KEY=... in a --stats line
stat_of() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }

measure "4" "$bin" ranks --stats "$job"
direct_s=$med_s direct_kib=$med_kib
"$bin" ranks "$job" >"$tmp/direct.txt" 2>/dev/null

shards=$((ranks / 64))
mkdir -p "$tmp/sums"
t0=${EPOCHREALTIME/,/.}
seq 0 $((shards - 1)) | xargs -P "$cores" -I{} "$bin" summarize --shard "{}/$shards" \
	-o "$tmp/sums/s{}.cdsum" "$job" 2>/dev/null || die "summarize failed"
t1=${EPOCHREALTIME/,/.}
sum_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
sum_bytes=$(find "$tmp/sums" -name '*.cdsum' -printf '%s\n' | awk '{ s += $1 } END { print s }')

measure "4" "$bin" ranks --stats "$tmp/sums"
merge_s=$med_s merge_kib=$med_kib
merge_only=$(stat_of "$tmp/err" merge_s)
"$bin" ranks "$tmp/sums" >"$tmp/merged.txt" 2>/dev/null
if cmp -s "$tmp/direct.txt" "$tmp/merged.txt"; then same="identical"; else same="DIFFERENT"; fi

measure "4" "$bin" ranks --stats "$bigdir"
big_s=$med_s big_kib=$med_kib
big_bytes=$(find "$bigdir/" -name '*.cdsum' -printf '%s\n' | awk '{ s += $1 } END { print s }')
"$bin" ranks "$bigdir" 2>/dev/null | grep -c '^[0-9]*\. ' >"$tmp/nf" || true

echo "scale.sh: $cores cores, medians of $runs runs"
echo "  job: $ranks ranks in $((ranks / 64)) node directories, $(mib $((trace_bytes / 1024))) MiB of traces"
printf '  ranks on the traces:            %8.2f s  %8s MiB\n' "$direct_s" "$(mib "$direct_kib")"
printf '  summarize, %d shards, %d at once: %6.2f s  (%.2f s a shard of %d ranks)\n' \
	"$shards" "$cores" "$sum_s" "$(awk -v s="$sum_s" -v n="$shards" -v c="$cores" 'BEGIN { print s * c / n }')" 64
printf '  merge of the summaries:         %8.2f s  %8s MiB   (merge_s %s; output %s to the direct one)\n' \
	"$merge_s" "$(mib "$merge_kib")" "$merge_only" "$same"
printf '  summaries:                      %8s MiB = %s%% of the traces\n' \
	"$(mib $((sum_bytes / 1024)))" "$(awk -v a="$sum_bytes" -v b="$trace_bytes" 'BEGIN { printf "%.2f", 100 * a / b }')"
printf '  merge of %d ranks (%s MiB of summaries): %.2f s  %s MiB  (%s findings)\n' \
	"$big" "$(mib $((big_bytes / 1024)))" "$big_s" "$(mib "$big_kib")" "$(cat "$tmp/nf")"
echo "  goals: the merge of $ranks ranks <= 1 s and <= 512 MiB; $big ranks <= 10 s;"
echo "         summaries <= 5% of the traces"
