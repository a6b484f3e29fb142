#!/bin/sh
# The NCCL-side recorder, without NCCL and without a GPU:
#  - the LD_PRELOAD interposer over the stand-in libnccl (fake_nccl.c), run by
#    interpose_app: exact events, a killed process, a full queue, a plugin in
#    the same process, an unwritable trace path;
#  - the profiler plugin driven by plugin_driver the way NCCL drives it, for
#    every plugin ABI version it exports: exact events.
# Each trace is also read back by commdebug.  Expected traces are in
# expected/, written by hand from the scenarios (times, pids, host names and
# communicator addresses are normalized away: communicators become c1, c2, ...
# in order of first appearance).
# usage: run.sh COMMDEBUG PRELOAD_LIB PLUGIN_LIB INTERPOSE_APP PLUGIN_DRIVER
set -u
CD=$1 PRELOAD=$2 PLUGIN=$3 APP=$4 DRIVER=$5
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset RANK WORLD_SIZE NCCL_PROFILER_PLUGIN COMMDEBUG_NCCL_TRACE COMMDEBUG_NCCL_QUEUE \
	COMMDEBUG_NCCL_FLUSH_MS COMMDEBUG_NCCL_DISABLE COMMDEBUG_NCCL_KERNEL_TIMING
# an instrumented test program gets our (instrumented) library preloaded
# before the sanitizer runtime; that is fine here
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
fail=0
pass=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

norm() {
	zstd -qdc "$1" | jq -c -s '
	  (reduce (.[] | select(.comm) | .comm) as $c ({};
	     if has($c) then . else .[$c] = "c\(length + 1)" end)) as $m
	  | .[] | del(.t, .t0, .pid, .host)
	  | if .comm then .comm = $m[.comm] else . end'
}

check_trace() {  # NAME TRACE EXPECTED
	if [ ! -f "$2" ]; then
		bad "$1: no trace written ($2)"
		return
	fi
	if norm "$2" >"$tmp/got" && diff -u "$3" "$tmp/got" >"$tmp/diff"; then
		ok "$1"
	else
		bad "$1: the trace differs from $3:"
		head -30 "$tmp/diff" | sed 's/^/    /'
	fi
}

# --- interposer: the fixed scenario
T="$tmp/i%r.nccl.zst"
if RANK=1 WORLD_SIZE=4 COMMDEBUG_NCCL_TRACE=$T LD_PRELOAD=$PRELOAD "$APP" scenario 2>"$tmp/err"; then
	check_trace "interposer scenario" "$tmp/i1.nccl.zst" "$here/expected/interpose.jsonl"
else
	bad "interposer scenario: the program failed"; cat "$tmp/err"
fi
if "$CD" analyze "$tmp/i1.nccl.zst" >"$tmp/out" 2>"$tmp/err" &&
   grep -q "^NCCL calls ($tmp/i1.nccl.zst): 13 calls, 0 charged to modules, 0 with GPU time$" "$tmp/out" &&
   grep -q "^AllGather  *4  *2  *4.0 KiB  *-  *-  *-$" "$tmp/out"; then
	ok "interposer trace read by commdebug"
else
	bad "interposer trace read by commdebug:"; cat "$tmp/out" "$tmp/err"
fi

# --- interposer: SIGKILL after a flush interval leaves a readable trace
RANK=1 COMMDEBUG_NCCL_FLUSH_MS=20 COMMDEBUG_NCCL_TRACE="$tmp/k%r.nccl.zst" LD_PRELOAD=$PRELOAD \
	"$APP" kill 2>/dev/null
n=$(zstd -qdc "$tmp/k1.nccl.zst" 2>/dev/null | jq -s 'map(select(.ev == "nccl")) | length')
if [ "$n" = 5 ] && "$CD" analyze --json "$tmp/k1.nccl.zst" >"$tmp/out" 2>"$tmp/err" &&
   [ "$(jq '.nccl.calls' "$tmp/out")" = 5 ]; then
	ok "killed process: its calls are in the trace"
else
	bad "killed process: $n calls in the trace, not 5"; cat "$tmp/err"
fi

# --- interposer: a full queue loses calls, counted, never blocks
RANK=0 COMMDEBUG_NCCL_QUEUE=16 COMMDEBUG_NCCL_TRACE="$tmp/m%r.nccl.zst" LD_PRELOAD=$PRELOAD \
	"$APP" many 20000 2>"$tmp/err"
got=$(zstd -qdc "$tmp/m0.nccl.zst" | jq -s -r '[(map(select(.ev == "nccl")) | length),
	(map(select(.ev == "nccl_lost") | .count) | add // 0)] | "\(.[0]) \(.[1])"')
seqs=$(zstd -qdc "$tmp/m0.nccl.zst" | jq -s 'map(select(.ev == "nccl") | .seq) | (unique | length) == length')
if [ "$(echo "$got" | awk '{print $1 + $2}')" = 80000 ] && [ "$seqs" = true ]; then
	ok "full queue: recorded + lost = calls made ($got)"
else
	bad "full queue: recorded, lost = $got; seqs unique: $seqs"
fi
lost=${got#* }
"$CD" analyze "$tmp/m0.nccl.zst" >/dev/null 2>"$tmp/err"
if [ "$lost" = 0 ] || grep -q "could not record $lost call(s)" "$tmp/err"; then
	ok "full queue: commdebug warns about the lost calls"
else
	bad "full queue: no warning about $lost lost calls:"; cat "$tmp/err"
fi

# --- without a launcher's rank the file is named by process id, and the
#     meta event leaves rank and world size out (a communicator's rank may
#     be a sub-group's)
COMMDEBUG_NCCL_TRACE="$tmp/u%r.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" scenario 2>/dev/null
f=$(ls "$tmp"/upid*.nccl.zst 2>/dev/null)
if [ -n "$f" ] && [ "$(zstd -qdc "$f" | head -1 | jq -c '[has("rank"), has("world_size")]')" = "[false,false]" ]; then
	ok "no RANK: trace named by process id"
else
	bad "no RANK: trace named by process id: $(ls "$tmp")"
fi

# --- a call NCCL refuses is not recorded; a destroyed communicator's
#     address may come back for a new one, which counts from 1 again
RANK=0 COMMDEBUG_NCCL_TRACE="$tmp/r%r.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" reuse 2>"$tmp/err"
got=$(zstd -qdc "$tmp/r0.nccl.zst" | jq -c -s 'map(select(.ev == "nccl") | [.nranks, .seq])')
if [ "$got" = "[[4,1],[4,2],[8,1]]" ]; then
	ok "refused call, destroyed communicator"
else
	bad "refused call, destroyed communicator: $got"; cat "$tmp/err"
fi

# --- interposer stays passive when the commdebug plugin records
if NCCL_PROFILER_PLUGIN=commdebug COMMDEBUG_NCCL_TRACE="$tmp/p%r.nccl.zst" LD_PRELOAD=$PRELOAD \
	"$APP" scenario 2>"$tmp/err" && [ ! -e "$tmp/p1.nccl.zst" ] &&
   grep -q "the interposer only passes them on" "$tmp/err"; then
	ok "interposer passive next to the plugin"
else
	bad "interposer passive next to the plugin"; cat "$tmp/err"
fi

# --- an unwritable trace: one line, NCCL calls still succeed
if COMMDEBUG_NCCL_TRACE=/nonexistent/dir/x.zst LD_PRELOAD=$PRELOAD "$APP" scenario 2>"$tmp/err" &&
   grep -q "^commdebug-nccl: cannot write /nonexistent/dir/x.zst: No such file or directory; NCCL calls are not recorded$" "$tmp/err" &&
   [ "$(wc -l <"$tmp/err")" = 1 ]; then
	ok "unwritable trace path"
else
	bad "unwritable trace path:"; cat "$tmp/err"
fi

# --- the profiler plugin, each ABI version it exports
for v in 1 2 3 4 5 6; do
	exp="$here/expected/plugin-v$v.jsonl"
	[ -f "$exp" ] || continue
	rm -f "$tmp"/pl*.nccl.zst
	if RANK=1 WORLD_SIZE=4 COMMDEBUG_NCCL_TRACE="$tmp/pl%r.nccl.zst" "$DRIVER" "$PLUGIN" "$v" \
		2>"$tmp/err"; then
		f=$(ls "$tmp"/pl*.nccl.zst 2>/dev/null | head -1)
		check_trace "plugin v$v" "${f:-$tmp/pl.nccl.zst}" "$exp"
		if [ -n "$f" ] && "$CD" analyze "$f" >/dev/null 2>"$tmp/err"; then
			ok "plugin v$v trace read by commdebug"
		else
			bad "plugin v$v trace read by commdebug"; cat "$tmp/err"
		fi
	else
		bad "plugin v$v: the driver failed"; cat "$tmp/err"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
