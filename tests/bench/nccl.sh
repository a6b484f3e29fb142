#!/bin/sh
# The NCCL-side recorder's cost per NCCL call, on the calling thread.
#
#   tests/bench/nccl.sh BUILD_DIR [CALLS]
#
# interpose_app (tests/nccl) calls ncclAllReduce CALLS times (default 200k)
# on the stand-in libnccl, whose call does almost nothing; the baseline is the
# same program without the interposer, measured in the same run.  Reported:
# ns per call with and without, the difference (what the recorder adds to
# each call: argument capture, clock, communicator lookup, the queue push),
# with a queue big enough to hold every call (real NCCL calls take
# microseconds, so the writer keeps up; the second figure, with the default
# queue of 16384, shows what happens when calls come faster than it writes:
# the excess is counted as lost, never waited for).  Median of 5 runs each.
# The plugin is timed by plugin_driver, which raises for each call every
# event NCCL raises (API call on v5+, group, task start/stop, one kernel
# channel's start/stop with kernel timing): the plugin's own time per call,
# without NCCL around it (no baseline to divide by; NCCL's own launch of a
# collective takes microseconds).
# With valgrind installed, also the calling thread's instructions per call
# (callgrind): the same comparison, unaffected by a busy machine.
# Never pass/fail.
set -u
build=${1:?usage: nccl.sh BUILD_DIR [CALLS]}
n=${2:-200000}
q=16; while [ $q -le "$n" ]; do q=$((q * 2)); done
app=$build/tests/interpose_app
lib=$build/libcommdebug-nccl-preload.so
driver=$build/tests/plugin_driver
plugin=$build/libnccl-profiler-commdebug.so
[ -x "$app" ] && [ -f "$lib" ] || { echo "nccl.sh: build $build first (ninja -C $build)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset RANK WORLD_SIZE COMMDEBUG_NCCL_QUEUE

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$tmp/base"
: >"$tmp/rec"
: >"$tmp/small"
for i in 1 2 3 4 5; do
	"$app" bench "$n" >>"$tmp/base"
	COMMDEBUG_NCCL_QUEUE=$q COMMDEBUG_NCCL_TRACE="$tmp/t$i.nccl.zst" LD_PRELOAD=$lib \
		"$app" bench "$n" >>"$tmp/rec"
	COMMDEBUG_NCCL_TRACE="$tmp/s$i.nccl.zst" LD_PRELOAD=$lib "$app" bench "$n" >>"$tmp/small"
done
base=$(median <"$tmp/base")
rec=$(median <"$tmp/rec")
small=$(median <"$tmp/small")
kept_small=$(zstd -qdc "$tmp/s1.nccl.zst" | grep -c '"ev":"nccl"')
kept=$(zstd -qdc "$tmp/t1.nccl.zst" | grep -c '"ev":"nccl"')
size=$(wc -c <"$tmp/t1.nccl.zst")
echo "NCCL calls: $n ncclAllReduce on the stand-in libnccl, median of 5 runs"
echo "  without the recorder: $base ns per call"
echo "  with the interposer:  $rec ns per call"
awk -v a="$base" -v b="$rec" 'BEGIN { printf "  added per call:       %.1f ns (%.2fx the bare call)\n", b - a, b / a }'
awk -v k="$kept" -v n="$n" -v s="$size" 'BEGIN {
	printf "  recorded:             %d of %d calls, %.1f bytes per call compressed\n", k, n + 1, s / k }'
awk -v a="$base" -v b="$small" -v k="$kept_small" -v n="$n" 'BEGIN {
	printf "  default queue, calls back to back: %.1f ns per call (%.1f ns added), %d of %d recorded (the rest counted as lost)\n",
	       b, b - a, k, n + 1 }'
for v in 3 4 5 6; do
	: >"$tmp/p$v"
	for i in 1 2 3 4 5; do
		COMMDEBUG_NCCL_QUEUE=$((q * 2)) COMMDEBUG_NCCL_TRACE="$tmp/p.nccl.zst" \
			"$driver" "$plugin" "$v" bench "$n" >>"$tmp/p$v"
	done
	echo "  profiler plugin v$v:   $(median <"$tmp/p$v") ns per call in the plugin (all its events)"
done

# Instructions on the calling thread per call (valgrind's callgrind, when
# installed): a count that does not depend on what else the machine runs,
# for comparing builds on a busy machine.  Each figure is the difference of
# two runs (N and 3N calls) divided by 2N, so start-up costs cancel out.
if command -v valgrind >/dev/null 2>&1; then
	ir() {  # VARS (NAME=VALUE ..., no spaces inside) COMMAND...: its calling thread's instructions
		vars=$1
		shift
		rm -f "$tmp"/cg.out*
		# shellcheck disable=SC2086
		env $vars valgrind --tool=callgrind --separate-threads=yes \
			--callgrind-out-file="$tmp/cg.out" "$@" >/dev/null 2>&1
		awk '/^summary:/ { print $2 }' "$tmp/cg.out-01" 2>/dev/null
	}
	per_call() {  # N VARS COMMAND...: run with N and 3N calls appended
		k=$1
		shift
		a=$(ir "$@" "$k")
		b=$(ir "$@" $((k * 3)))
		[ -n "$a" ] && [ -n "$b" ] && echo $(((b - a) / (k * 2)))
	}
	rec="COMMDEBUG_NCCL_QUEUE=262144 COMMDEBUG_NCCL_TRACE=$tmp/v.nccl.zst"
	bare=$(per_call 20000 "" "$app" bench)
	inter=$(per_call 20000 "$rec LD_PRELOAD=$lib" "$app" bench)
	echo "instructions per call on the calling thread (callgrind):"
	echo "  without the recorder: $bare"
	awk -v a="$bare" -v b="$inter" 'BEGIN {
		printf "  with the interposer:  %d (%d added, %.1fx the bare call)\n", b, b - a, b / a }'
	for v in 4 5; do
		echo "  profiler plugin v$v:   $(per_call 10000 "$rec" "$driver" "$plugin" $v bench)" \
			"(the plugin's events and the driver's own work)"
	done
fi
