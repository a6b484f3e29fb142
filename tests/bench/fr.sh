#!/usr/bin/env bash
# Benchmark of `commdebug ranks` on a directory of Flight Recorder dumps.
#
# usage: tests/bench/fr.sh [BUILD_DIR] [RANKS] [ENTRIES]
#        (defaults: build, 1024 ranks, 500 entries per dump)
#
# Generates RANKS pickled dumps of ENTRIES entries each with gen_fr.py (an
# NCCL-shaped watchdog dump per rank: pg_config with every rank, stack frames
# on every entry, one rank all-gathering where the others all-reduce) into
# tests/bench/out/fr-RANKS-ENTRIES/, once.  Then measures, 3 times each
# (median wall time, peak RSS): `cat` of every dump (the baseline: reading the
# same bytes), and `commdebug ranks DIR` with its default threads and with
# --jobs=1, and prints the ratios.  Timings never fail the run: the exit
# status is 0 unless a command fails (ranks exits 4 here: the fault).
set -u

orig=$PWD
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
ranks=${2:-1024}
entries=${3:-500}
case $build in
/*) ;;
*) if [ -d "$orig/$build" ]; then build=$orig/$build; else build=$root/$build; fi ;;
esac
cd "$root" || exit 1
die() {
	echo "fr.sh: $*" >&2
	exit 1
}
case $ranks$entries in
*[!0-9]*) die "RANKS and ENTRIES must be numbers (usage: fr.sh [BUILD_DIR] [RANKS] [ENTRIES])" ;;
esac
bin=$build/commdebug
[ -x "$bin" ] || die "no analyzer at $bin (build it first)"
dir=tests/bench/out/fr-$ranks-$entries
runs=3
name=fr.sh
cores=$(nproc 2>/dev/null || echo 1)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$dir/.done" ] || [ tests/bench/gen_fr.py -nt "$dir/.done" ]; then
	echo "fr.sh: generating $ranks dumps of $entries entries in $dir" >&2
	rm -rf "$dir"
	python3 tests/bench/gen_fr.py "$dir" --ranks "$ranks" --entries "$entries" ||
		die "cannot generate the dumps"
	touch "$dir/.done"
fi

. "$root/tests/bench/lib.sh"
row() { printf '  %-34s %9s %9s %13s  %s\n' "$@"; }

bytes=$(cat "$dir"/nccl_trace_rank_* | wc -c)
echo "commdebug ranks on Flight Recorder dumps"
printf '  dumps   %s: %d ranks, %d entries each, %.1f MiB of pickles\n' "$dir" "$ranks" \
	"$entries" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')"
printf '  median of %d runs on %d cores\n\n' "$runs" "$cores"
row "" "median s" "x cat" "peak RSS MiB" "exit"
measure "0" sh -c 'cat "$1"/nccl_trace_rank_* >/dev/null' _ "$dir"
base_s=$med_s
row "cat, all dumps (baseline)" "$med_s" "1.00" "$(mib "$med_kib")" ""
measure "4" "$bin" ranks "$dir"
row "commdebug ranks DIR" "$med_s" "$(ratio "$med_s" "$base_s")" "$(mib "$med_kib")" "$last_rc"
measure "4" "$bin" ranks --jobs 1 "$dir"
row "commdebug ranks --jobs 1 DIR" "$med_s" "$(ratio "$med_s" "$base_s")" "$(mib "$med_kib")" "$last_rc"
"$bin" ranks "$dir" 2>/dev/null | grep -m1 -A1 '^1\. ' | cut -c1-160 | sed 's/^/  first finding: /'
