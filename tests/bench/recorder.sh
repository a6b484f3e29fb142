#!/bin/sh
# What recording costs on torch 2.14: plain vs light vs full recorder vs a
# do-nothing dispatch mode vs CommDebugMode, on a 2-rank gloo DDP GPT-2 step
# and on 8 blocks of Linear+GELU+LayerNorm, plus what each source of
# collectives costs (tests/bench/recorder.py, run in the root of
# tests/torch2/env.sh).  Ratios from one run, never pass/fail.
#
#   tests/bench/recorder.sh [BUILD_DIR] [recorder.py options]
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
[ $# -gt 0 ] && [ -d "$1" ] && shift
if ! "$repo/tests/torch2/env.sh" ok; then
	echo "recorder bench: no torch 2.14 root (sudo tests/torch2/env.sh setup); skipped"
	exit 0
fi
if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
	echo "recorder bench: chroot needs root or password-less sudo; skipped"
	exit 0
fi
"$repo/tests/torch2/env.sh" ext || echo "recorder bench: without the recorder's C module"
# instruction counts run under valgrind, installed in the root on first use
how=run
case " $* " in *" instr "* | *" --only=instr "*) how=grind ;; esac
cd "$repo" && exec "$repo/tests/torch2/env.sh" $how python3 tests/bench/recorder.py "$@"
