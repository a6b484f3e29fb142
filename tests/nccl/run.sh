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
	COMMDEBUG_NCCL_FLUSH_MS COMMDEBUG_NCCL_DISABLE COMMDEBUG_NCCL_KERNEL_TIMING \
	COMMDEBUG_NCCL_EXIT_MS OMPI_COMM_WORLD_RANK PMI_RANK SLURM_PROCID
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

# --- nested calls: the stand-in's ncclBcast calls ncclBroadcast through its
#     exported symbol, as NCCL does; the interposer sees both and records the
#     outer one only (once, as a Broadcast of 5 int32)
n=$(zstd -qdc "$tmp/i1.nccl.zst" | jq -s 'map(select(.ev == "nccl" and .func == "Broadcast")) | length')
if [ "$n" = 2 ]; then
	ok "nested NCCL call recorded once"
else
	bad "nested NCCL call recorded once: $n Broadcast records, not 2 (ncclBroadcast + ncclBcast)"
fi

# --- frame checksums: the trace's frames carry one, and no single byte flip
#     gives exit 0 with another report (flips in the frame header, the last 8
#     bytes, and every 5th byte between: about 140 runs)
if zstd -lv "$tmp/i1.nccl.zst" 2>/dev/null | grep -q "^Check: XXH64"; then
	ok "frames carry an XXH64 checksum"
else
	bad "frames carry an XXH64 checksum:"; zstd -lv "$tmp/i1.nccl.zst"
fi
cp "$tmp/i1.nccl.zst" "$tmp/flip.zst"
"$CD" analyze "$tmp/flip.zst" >"$tmp/flip0" 2>/dev/null
size=$(wc -c <"$tmp/i1.nccl.zst")
off=0 silent=0 caught=0 tried=0
while [ "$off" -lt "$size" ]; do
	cp "$tmp/i1.nccl.zst" "$tmp/flip.zst"
	b=$(od -An -tu1 -j"$off" -N1 "$tmp/i1.nccl.zst" | tr -d ' ')
	printf "\\$(printf %o $((b ^ 0x10)))" |
		dd of="$tmp/flip.zst" bs=1 seek="$off" conv=notrunc 2>/dev/null
	if "$CD" analyze "$tmp/flip.zst" >"$tmp/flip1" 2>/dev/null; then
		cmp -s "$tmp/flip0" "$tmp/flip1" || silent=$((silent + 1))
	else
		caught=$((caught + 1))
	fi
	if [ "$off" -lt 16 ] || [ "$off" -ge $((size - 9)) ]; then
		off=$((off + 1))
	else
		off=$((off + 5))
	fi
	tried=$((tried + 1))
done
if [ "$silent" = 0 ] && [ "$caught" -gt 0 ]; then
	ok "byte flips: none changes the report unnoticed ($caught of $tried rejected)"
else
	bad "byte flips: $silent of $tried changed the report with exit 0"
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

# --- commdebug_nccl_set_trace: NCCL used before the Python recorder knew
#     where its trace goes; the trace moves there whole (rename on one file
#     system, copy across file systems), whatever the order
calls_in() { zstd -qdc "$1" 2>/dev/null | jq -s 'map(select(.ev == "nccl")) | length'; }
mkdir -p "$tmp/dir"
out=$(RANK=1 COMMDEBUG_NCCL_TRACE="$tmp/cwd-rank%r.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" settrace \
	"$tmp/dir/rank1.nccl.zst" 2>"$tmp/err")
if [ "$out" = OK ] && [ ! -e "$tmp/cwd-rank1.nccl.zst" ] && [ "$(calls_in "$tmp/dir/rank1.nccl.zst")" = 4 ] &&
   [ "$(zstd -qdc "$tmp/dir/rank1.nccl.zst" | head -1 | jq -r .ev)" = meta ] &&
   "$CD" analyze "$tmp/dir/rank1.nccl.zst" >/dev/null 2>&1; then
	ok "set_trace after NCCL calls: the trace moved beside the Python one"
else
	bad "set_trace after NCCL calls: $out; $(ls "$tmp" "$tmp/dir")"; cat "$tmp/err"
fi
shm=/dev/shm/commdebug-test-$$.nccl.zst
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -c %d /dev/shm)" != "$(stat -c %d "$tmp")" ]; then
	out=$(RANK=1 COMMDEBUG_NCCL_TRACE="$tmp/x%r.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" settrace "$shm" \
		2>"$tmp/err")
	if [ "$out" = OK ] && [ ! -e "$tmp/x1.nccl.zst" ] && [ "$(calls_in "$shm")" = 4 ] &&
	   "$CD" analyze "$shm" >/dev/null 2>&1; then
		ok "set_trace across file systems: one whole trace"
	else
		bad "set_trace across file systems: $out"; cat "$tmp/err"
	fi
	rm -f "$shm"
else
	echo "skip set_trace across file systems (no second file system)"
fi
out=$(RANK=1 COMMDEBUG_NCCL_TRACE="$tmp/y%r.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" settrace-first \
	"$tmp/dir/first.nccl.zst" 2>"$tmp/err")
if [ "$out" = OK ] && [ ! -e "$tmp/y1.nccl.zst" ] && [ "$(calls_in "$tmp/dir/first.nccl.zst")" = 4 ]; then
	ok "set_trace before any NCCL call"
else
	bad "set_trace before any NCCL call: $out; $(ls "$tmp")"; cat "$tmp/err"
fi

out=$(RANK=1 COMMDEBUG_NCCL_TRACE=/nonexistent/dir/z.zst LD_PRELOAD=$PRELOAD "$APP" settrace \
	"$tmp/dir/late.nccl.zst" 2>"$tmp/err")
got=$(zstd -qdc "$tmp/dir/late.nccl.zst" 2>/dev/null | jq -s -c '[(map(select(.ev == "nccl")) | length),
	(map(select(.ev == "nccl_lost") | .count) | add)]')
if [ "$out" = OK ] && [ "$got" = "[2,3]" ]; then
	ok "set_trace after an unwritable path: recording resumes, what came before counted lost"
else
	bad "set_trace after an unwritable path: $out $got"; cat "$tmp/err"
fi

# --- two writers on one path: the second one never truncates or interleaves
#     with the first; it writes NAME.pid<PID>.nccl.zst, and set_trace onto a
#     path another process writes is refused
wait_for_trace() {  # wait (at most 30 s) until file $1 holds a frame
	i=0
	while [ ! -s "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
}
rm -f "$tmp/go"
COMMDEBUG_NCCL_TRACE="$tmp/same.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" hold "$tmp/go" 2>/dev/null &
holder=$!
wait_for_trace "$tmp/same.nccl.zst"
COMMDEBUG_NCCL_TRACE="$tmp/same.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" scenario 2>"$tmp/err"
out=$(COMMDEBUG_NCCL_TRACE="$tmp/mine.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" settrace "$tmp/same.nccl.zst" \
	2>"$tmp/err2")
touch "$tmp/go"
wait $holder
other=$(ls "$tmp"/same.pid*.nccl.zst 2>/dev/null)
if [ -n "$other" ] && [ "$(calls_in "$tmp/same.nccl.zst")" = 2 ] && [ "$(calls_in "$other")" = 13 ] &&
   grep -q "^commdebug-nccl: $tmp/same.nccl.zst is being written by another process; this one (pid [0-9]*) writes $other$" "$tmp/err"; then
	ok "two processes, one trace path: separate files"
else
	bad "two processes, one trace path: $(ls "$tmp")"; cat "$tmp/err"
fi
if [ "$out" = EBUSY ] && [ "$(calls_in "$tmp/mine.nccl.zst")" = 4 ]; then
	ok "set_trace onto another process's trace: refused (EBUSY)"
else
	bad "set_trace onto another process's trace: $out"; cat "$tmp/err2"
fi
for mode in early late; do
	rm -f "$tmp"/f.*
	COMMDEBUG_NCCL_TRACE="$tmp/f.nccl.zst" LD_PRELOAD=$PRELOAD "$APP" fork $mode 2>"$tmp/err"
	rc=$?
	got=$(for f in "$tmp"/f.*nccl.zst; do
		zstd -qdc "$f" | jq -s -c '[map(select(.ev == "nccl")) | length,
			(map(select(.ev == "nccl") | .nranks) | unique)]'
	done | sort | tr -d '\n')
	want='[3,[2]][3,[4]]'
	[ $mode = late ] && want='[1,[4]]'
	if [ $rc = 0 ] && [ "$got" = "$want" ]; then
		ok "fork $mode: each trace holds one process's calls ($got)"
	else
		bad "fork $mode: $got, not $want (rc $rc)"; cat "$tmp/err"
	fi
done

# --- a trace whose writes block (a FIFO nobody reads; a hung network file
#     system): NCCL calls go on, and the process exits within
#     COMMDEBUG_NCCL_EXIT_MS (the outer timeout only catches a hang)
mkfifo "$tmp/fifo1" "$tmp/fifo2"
COMMDEBUG_NCCL_EXIT_MS=300 COMMDEBUG_NCCL_TRACE="$tmp/fifo1" LD_PRELOAD=$PRELOAD \
	timeout 60 "$APP" scenario 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && grep -q "the trace writer is blocked in open() or write()" "$tmp/err"; then
	ok "FIFO without a reader: the process exits"
else
	bad "FIFO without a reader: rc $rc"; cat "$tmp/err"
fi
exec 3<>"$tmp/fifo2"   # a reader that never reads: writes fill the pipe, then block
COMMDEBUG_NCCL_EXIT_MS=300 COMMDEBUG_NCCL_TRACE="$tmp/fifo2" LD_PRELOAD=$PRELOAD \
	timeout 60 "$APP" many 20000 2>"$tmp/err"
rc=$?
exec 3<&-
if [ $rc = 0 ] && grep -q "the trace writer is blocked in open() or write()" "$tmp/err"; then
	ok "FIFO never read: the process exits"
else
	bad "FIFO never read: rc $rc"; cat "$tmp/err"
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

# --- the plugin: set_trace; a one-rank communicator (no call events from
#     NCCL 2.28.9) is reported on stderr, at finalize or at exit
rm -f "$tmp"/pl*
if RANK=1 COMMDEBUG_NCCL_TRACE="$tmp/pl%r.nccl.zst" "$DRIVER" "$PLUGIN" 5 settrace "$tmp/dir/p.nccl.zst" \
	2>"$tmp/err" && [ ! -e "$tmp/pl1.nccl.zst" ] &&
   [ "$(zstd -qdc "$tmp/dir/p.nccl.zst" | jq -s 'map(select(.ev == "nccl" and .func)) | length')" = 2 ]; then
	ok "plugin set_trace"
else
	bad "plugin set_trace: $(ls "$tmp")"; cat "$tmp/err"
fi
for v in 3 4 5 6; do
	RANK=0 COMMDEBUG_NCCL_TRACE="$tmp/one.nccl.zst" "$DRIVER" "$PLUGIN" $v onerank 2>"$tmp/err"
	rc=$?
	n1=$(grep -c "^commdebug-nccl: communicator 0x1 has one rank and NCCL reported no call on it" "$tmp/err")
	n2=$(grep -c "communicator 0x2" "$tmp/err")
	n3=$(grep -c "^commdebug-nccl: 1 one-rank communicator(s) had no call reported" "$tmp/err")
	want="0 1 0 1"
	[ $v = 3 ] && want="0 0 0 0"   # v1..v3 do not know a communicator's size
	if [ "$rc $n1 $n2 $n3" = "$want" ]; then
		ok "plugin v$v: one-rank communicators without calls reported"
	else
		bad "plugin v$v: one-rank communicators: rc n1 n2 n3 = $rc $n1 $n2 $n3, not $want"; cat "$tmp/err"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
