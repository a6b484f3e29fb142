#!/usr/bin/env bash
# Benchmark of `commdebug ranks` (multi-rank post-mortem) against `zstd -dc`.
#
# usage: tests/bench/ranks.sh [BUILD_DIR] [RANKS] [EVENTS] [BIG]
#        (defaults: build, 64 ranks, 200000 events per rank, 1024)
#
# Generates RANKS traces of at least EVENTS events each with gen_trace.py
# (--rank R --world RANKS --seed R: the same run on every rank, only the
# timestamps differ, so the ranks agree and every collective is compared) into
# tests/bench/out/ranks-RANKS/, once: they are reused while EVENTS is the same
# and gen_trace.py is not newer.  Then runs in alternation, $BENCH_RUNS rounds
# (default 5; lib.sh's alt_run): `zstd -dc` of all the files in one process
# (the baseline) and one per core, and `commdebug ranks DIR` with its default
# number of threads and with --jobs=1; prints each one's median wall time, the
# median of its per-round ratios to the baseline with their range, its CPU
# time ratio and peak RSS, the parallel speedup, and the issue's goal (ranks
# <= 1.5x zstd -dc of all files).  Then the merge at scale: BIG (default 1024) and BIG/4
# ranks of a small generated job with two faults (tests/cli/cases/ranks-1024/
# gen.awk: 20 steps, 4 blocks, 160 collectives per rank) through `commdebug
# ranks --stats`, its merge time (merge_s: matching, findings, report; not
# reading) and the ratio of the two, and the ratio of the merge's work
# (merge_visits: rank positions matched), which is 4 when the merge is linear
# in the ranks (16 would be quadratic); the time ratio is above the work ratio
# when the summaries outgrow the caches.  Timings never fail the run: the exit status is 0
# unless a command fails (commdebug ranks may exit 0, 3 or 4) or the analyzer
# is not built (1, after the zstd measurements).
set -u

orig=$PWD
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
ranks=${2:-64}
events=${3:-200000}
big=${4:-1024}
case $build in
/*) ;;
*) if [ -d "$orig/$build" ]; then build=$orig/$build; else build=$root/$build; fi ;;
esac
cd "$root" || exit 1

die() {
	echo "ranks.sh: $*" >&2
	exit 1
}

case $ranks$events$big in
*[!0-9]*) die "RANKS, EVENTS and BIG must be numbers (usage: ranks.sh [BUILD_DIR] [RANKS] [EVENTS] [BIG])" ;;
esac
[ "$ranks" -ge 1 ] || die "RANKS must be >= 1"

bin=$build/commdebug
dir=tests/bench/out/ranks-$ranks
stamp=$dir/.events
runs=${BENCH_RUNS:-5}
name=ranks.sh
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for tool in python3 zstd; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

# ------------------------------------------------------------------ traces
fresh=1
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$events" ] || [ tests/bench/gen_trace.py -nt "$stamp" ]; then
	fresh=0
else
	for ((r = 0; r < ranks; r++)); do
		[ -s "$dir/rank$r.jsonl.zst" ] || { fresh=0; break; }
	done
fi
if [ $fresh -eq 0 ]; then
	echo "ranks.sh: generating $ranks traces of $events events in $dir ($cores at a time)" >&2
	rm -rf "$dir"
	mkdir -p "$dir" || exit 1
	t0=${EPOCHREALTIME/,/.}
	seq 0 $((ranks - 1)) | xargs -P "$cores" -I{} sh -c \
		'python3 tests/bench/gen_trace.py --events "$1" --rank "$2" --world "$3" --seed "$2" \
			"$4/rank$2.jsonl.zst.tmp" 2>/dev/null && mv "$4/rank$2.jsonl.zst.tmp" "$4/rank$2.jsonl.zst"' \
		_ "$events" {} "$ranks" "$dir" || die "cannot generate the traces"
	for ((r = 0; r < ranks; r++)); do
		[ -s "$dir/rank$r.jsonl.zst" ] || die "cannot generate $dir/rank$r.jsonl.zst"
	done
	echo "$events" >"$stamp"
	t1=${EPOCHREALTIME/,/.}
	echo "ranks.sh: generated in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s" >&2
fi
files=()
for ((r = 0; r < ranks; r++)); do
	files+=("$dir/rank$r.jsonl.zst")
done

# ------------------------------------------------------------------ timing
. "$root/tests/bench/lib.sh"

row() { printf '  %-34s %8s %10s %-13s %6s %9s %10s  %s\n' "$@"; }

z_bytes=$(cat "${files[@]}" | wc -c)
read -r n_events n_bytes < <(zstd -dcq "${files[@]}" | wc -lc) || die "cannot read the traces"

echo "commdebug ranks benchmark"
printf '  traces  %s: %d ranks, %d events (%d per rank), %.1f MiB JSONL, %.1f MiB zstd\n' \
	"$dir" "$ranks" "$n_events" $((n_events / ranks)) \
	"$(awk -v b="$n_bytes" 'BEGIN { print b / 1048576 }')" \
	"$(awk -v b="$z_bytes" 'BEGIN { print b / 1048576 }')"
printf '  build   %s\n' "$bin"
printf '  %d alternating rounds, medians; machine: %s; peak RSS from %s\n\n' "$runs" \
	"$(machine_load)" \
	"$([ -x /usr/bin/time ] && echo /usr/bin/time ||
		echo "python3 getrusage (no /usr/bin/time; includes python3 itself)")"
row "" "median s" "x zstd -dc" "(range)" "CPU x" "RSS MiB" "RSS/rank" "exit"

printf '%s\n' "${files[@]}" >"$tmp/list"
alt_reset
alt_add zstd 0 zstd -dcq "${files[@]}"
alt_add zstdn 0 sh -c 'xargs -P "$1" -n 1 zstd -dcq <"$2"' _ "$cores" "$tmp/list"
if [ -x "$bin" ]; then
	alt_add par "0 3 4" "$bin" ranks "$dir"
	alt_add one "0 3 4" "$bin" ranks --jobs=1 "$dir"
fi
alt_run
alt_get zstd
row "zstd -dc, all files (baseline)" "$med_s" "1.00" "(spread $(alt_spread zstd)%)" "1.00" \
	"$(mib "$med_kib")" "" ""
# crow NAME LABEL
crow() {
	alt_get "$1"
	alt_ratio "$1" zstd
	row "$2" "$med_s" "$ratio" "($ratio_lo-$ratio_hi)" "$cpu_ratio" "$(mib "$med_kib")" \
		"$(awk -v k="$med_kib" -v n="$ranks" 'BEGIN { printf "%.0f KiB", k / n }')" "$last_rc"
}
crow zstdn "zstd -dc, one per core"

status=0
if [ -x "$bin" ]; then
	crow par "commdebug ranks DIR"
	par_s=$med_s par_ratio=$ratio par_lo=$ratio_lo par_hi=$ratio_hi
	crow one "commdebug ranks --jobs=1 DIR"
	one_s=$med_s

	printf '\n  %-34s %s x (--jobs=1 %s s / default %s s, %d cores)\n' "parallel speedup" \
		"$(ratio "$one_s" "$par_s")" "$one_s" "$par_s" "$cores"
	printf '  %-34s %s events/s, %s MiB/s of JSONL\n' "throughput (default)" \
		"$(awk -v n="$n_events" -v s="$par_s" 'BEGIN { if (s < 0.001) s = 0.001; printf "%.0f", n / s }')" \
		"$(awk -v b="$n_bytes" -v s="$par_s" 'BEGIN { if (s < 0.001) s = 0.001; printf "%.0f", b / 1048576 / s }')"
	printf '\n  goal (issue 25), machine at the end: %s\n' "$(machine_load)"
	printf '    %-34s %5sx  (range %s-%s, %d rounds)  goal <= 1.5x: %s\n' \
		"ranks on $ranks ranks" "$par_ratio" "$par_lo" "$par_hi" "$runs" "$(verdict "$par_ratio" 1.5)"
else
	printf '\n  analyzer not built: %s missing; ranks measurements skipped\n' "$bin"
	status=1
fi

# ------------------------------------------------------------------ merge at scale
# median merge_s of 3 runs of `commdebug ranks --stats DIR`
merge_time() {
	local d=$1 k out
	for k in 1 2 3; do
		"$bin" ranks --stats "$d" 2>&1 >/dev/null | sed -n 's/.*merge_s=\([0-9.]*\).*/\1/p'
	done | sort -n | sed -n 2p
}
if [ -x "$bin" ] && command -v awk >/dev/null; then
	gen=$root/tests/cli/cases/ranks-1024/gen.awk
	printf '\n  merge at scale (two faults; 160 collectives per rank)\n'
	for w in $((big / 4)) "$big"; do
		d=tests/bench/out/ranks-awk-$w
		if [ ! -f "$d/.done" ] || [ "$gen" -nt "$d/.done" ]; then
			rm -rf "$d"
			mkdir -p "$d" || exit 1
			(cd "$d" && awk -v W="$w" -v S=20 -v B=4 \
				-v F="size:3:2:1 stop:$((w / 2 + 1)):20:2:bw end:0:20:2:bw:3" -f "$gen") ||
				die "cannot generate $d"
			: >"$d/.done"
		fi
		m=$(merge_time "$d")
		[ -n "$m" ] || { echo "ranks.sh: no merge_s from $bin ranks --stats $d" >&2; status=1; continue; }
		printf '  %-34s %9s s merge, %s ns per collective (%s findings)\n' \
			"commdebug ranks, $w ranks" "$m" \
			"$(awk -v m="$m" -v w="$w" 'BEGIN { printf "%.0f", m * 1e9 / (w * 160) }')" \
			"$("$bin" ranks --json "$d" 2>/dev/null | grep -c '"kind"')"
		eval "merge_$w=\$m"
		eval "visits_$w=$("$bin" ranks --stats "$d" 2>&1 >/dev/null |
			sed -n 's/.*merge_visits=\([0-9]*\).*/\1/p')"
	done
	eval "m_small=\${merge_$((big / 4)):-}; m_big=\${merge_$big:-}"
	eval "v_small=\${visits_$((big / 4)):-}; v_big=\${visits_$big:-}"
	if [ -n "$v_small" ] && [ -n "$v_big" ]; then
		printf '  %-34s %s x for 4 x the ranks (%s and %s rank positions matched)\n' \
			"merge work ratio" "$(ratio "$v_big" "$v_small")" "$v_small" "$v_big"
	fi
	if [ -n "$m_small" ] && [ -n "$m_big" ]; then
		printf '  %-34s %s x for 4 x the ranks (linear work: about 4; more when the\n' \
			"merge time ratio" "$(ratio "$m_big" "$m_small")"
		printf '  %-34s summaries outgrow the caches)\n' ""
	fi
fi
exit $status
