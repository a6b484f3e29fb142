#!/usr/bin/env bash
# A Debian root with a current PyTorch (python3-torch 2.14 from the suite after
# trixie, CPU and gloo, Python 3.14), next to the host system, for the recorder's
# tests on torch 2.x.
#
#   tests/torch2/env.sh setup          build the root, or reuse one that works
#   tests/torch2/env.sh run CMD ARG... run CMD inside it, in this checkout
#   tests/torch2/env.sh ext            build the recorder's C module for its Python
#   tests/torch2/env.sh san CMD ARG... run CMD inside it with that module built with
#                                      ASan and UBSan (build-san/)
#   tests/torch2/env.sh grind CMD ARG... run CMD inside it with valgrind there
#                                      (installed on first use) and
#                                      tests/bench/cgtoggle.c built (build-bench/),
#                                      for instruction counts
#   tests/torch2/env.sh path           print where the root is
#   tests/torch2/env.sh ok             exit 0 when the root is ready
#
# The root is $COMMDEBUG_TORCH2_ROOT (default /var/tmp/commdebug-torch2). Needs
# root (debootstrap, mount, chroot); `setup` installs debootstrap when missing.
# Inside, this checkout is bind-mounted at its own absolute path, so paths to
# the build directory work the same inside and out (the analyzer built on the
# host runs there: the root has libzstd, libcjson and libyaml).
set -euo pipefail

ROOT=${COMMDEBUG_TORCH2_ROOT:-/var/tmp/commdebug-torch2}
SUITE=${COMMDEBUG_TORCH2_SUITE:-forky}
MIRROR=${COMMDEBUG_TORCH2_MIRROR:-http://deb.debian.org/debian}
PKGS=python3-torch,python3-transformers,python3-tabulate,libcjson1,libyaml-0-2,libzstd1,zstd
REPO=$(cd "$(dirname "$0")/../.." && pwd -P)
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

die() { echo "torch2: $*" >&2; exit 1; }

ready() {
	[ -x "$ROOT/usr/bin/python3" ] && [ -f "$ROOT/.commdebug-ready" ]
}

mounts() {
	# /proc for Python's multiprocessing and torch; /dev (with /dev/shm) for
	# shared memory; this checkout at its own path.
	mountpoint -q "$ROOT/proc" || $SUDO mount -t proc proc "$ROOT/proc"
	mountpoint -q "$ROOT/dev" || $SUDO mount --rbind /dev "$ROOT/dev"
	$SUDO mkdir -p "$ROOT$REPO"
	# A checkout removed and cloned again at the same path (CI) leaves the
	# old bind mount on a deleted directory: mount the one that is there now.
	if mountpoint -q "$ROOT$REPO" &&
		[ "$(stat -c %d:%i "$ROOT$REPO")" != "$(stat -c %d:%i "$REPO")" ]; then
		$SUDO umount -l "$ROOT$REPO"
	fi
	mountpoint -q "$ROOT$REPO" || $SUDO mount --bind "$REPO" "$ROOT$REPO"
}

setup() {
	if ready; then
		echo "torch2: reusing $ROOT ($(cat "$ROOT/.commdebug-ready"))"
		return 0
	fi
	command -v debootstrap >/dev/null || {
		$SUDO apt-get update -q
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
	}
	# Bookworm's debootstrap has no script for the newest suites: sid's fits them.
	local script=/usr/share/debootstrap/scripts/sid
	[ -f "$script" ] || die "no debootstrap script $script"
	if mountpoint -q "$ROOT/proc" 2>/dev/null || mountpoint -q "$ROOT/dev" 2>/dev/null; then
		die "$ROOT is half made and still mounted; unmount it (umount -R) and remove it"
	fi
	$SUDO rm -rf "$ROOT"
	$SUDO mkdir -p "$ROOT"
	echo "torch2: debootstrap $SUITE into $ROOT (about 2 GB)"
	$SUDO debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$ROOT" "$MIRROR" "$script" \
		>"$ROOT.log" 2>&1 || { tail -n 20 "$ROOT.log" >&2; die "debootstrap failed (log: $ROOT.log)"; }
	# The suite's Release file may be past its Valid-Until on an old snapshot.
	echo 'Acquire::Check-Valid-Until "false";' | $SUDO tee "$ROOT/etc/apt/apt.conf.d/99commdebug" >/dev/null
	mounts
	local v
	v=$($SUDO chroot "$ROOT" python3 -c 'import sys, torch; print("torch %s, Python %d.%d" % (torch.__version__, *sys.version_info[:2]))') \
		|| die "python3 -c 'import torch' fails inside $ROOT"
	echo "$v" | $SUDO tee "$ROOT/.commdebug-ready" >/dev/null
	echo "torch2: ready: $v"
}

run() {
	ready || die "no root at $ROOT: run tests/torch2/env.sh setup"
	mounts
	# No libuv in Debian's torch: the TCP store must not ask for it.
	exec $SUDO chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp \
		LANG=C.UTF-8 USE_LIBUV=0 TORCH_CPP_LOG_LEVEL=ERROR \
		${COMMDEBUG_TORCH2_ENV:-} /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$PWD" "$@"
}

root_install() { # PKG: apt-get install PKG inside the root (quietly; 1 when it fails)
	$SUDO chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -q &&
		apt-get install -y -q --no-install-recommends "$1"' sh "$1" >/dev/null
}

build_ext() { # OUT_DIR EXTRA_CFLAGS...: the module for the root's Python in OUT_DIR
	ready || die "no root at $ROOT: run tests/torch2/env.sh setup"
	local outdir=$1 dir=$REPO/python/commdebug inc suffix out f stale=
	shift
	read -r inc suffix <<-EOF
	$($SUDO chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c \
		'import sysconfig as s; print(s.get_path("include"), s.get_config_var("EXT_SUFFIX"))')
	EOF
	[ -n "$suffix" ] || die "ext: the root's Python gave no include path and suffix"
	out=$outdir/_speedups$suffix
	for f in "$dir"/_speedups*.c "$dir"/_speedups.h "$dir"/_gradhook.h; do
		[ -f "$out" ] && [ "$out" -nt "$f" ] || stale=1
	done
	[ -z "$stale" ] && { EXT_OUT=$out; return 0; }
	if [ ! -f "$ROOT$inc/Python.h" ]; then
		# (apt resolves its dependencies; debootstrap's --include might not)
		echo "torch2: ext: installing libpython3-dev in $ROOT"
		root_install libpython3-dev || die "ext: no Python headers in $ROOT"
	fi
	mkdir -p "$outdir"
	${CC:-cc} -Wall -Wextra -Werror -fPIC -shared "$@" -I"$ROOT$inc" \
		-idirafter "$ROOT/usr/include" "$dir"/_speedups*.c -o "$out.tmp" ||
		die "ext: $dir/_speedups*.c do not build"
	mv "$out.tmp" "$out"
	echo "torch2: ext: built $out"
	EXT_OUT=$out
}

build_gradhook() { # OUT_DIR: light mode's C++ module (_gradhook.cpp, _collkernel.cpp) in OUT_DIR,
	# against the root's torch headers, for the torch version there
	local outdir=$1 dir=$REPO/python/commdebug torch inc ver suffix out f stale=
	shift
	torch=$ROOT/usr/lib/python3/dist-packages/torch
	read -r inc suffix ver <<-EOF
	$($SUDO chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c \
		'import sysconfig as s, torch.version as v; print(s.get_path("include"), s.get_config_var("EXT_SUFFIX"), v.__version__)')
	EOF
	[ -n "$ver" ] || die "gradhook: the root's torch gave no version"
	if [ ! -d "$torch/include/torch/csrc/autograd" ]; then
		# (python3-torch only recommends them: debootstrap leaves them out)
		echo "torch2: gradhook: installing libtorch-dev in $ROOT"
		root_install libtorch-dev || die "gradhook: libtorch-dev does not install in $ROOT"
		[ -d "$torch/include/torch/csrc/autograd" ] || die "gradhook: no torch headers in $torch/include"
	fi
	out=$outdir/_gradhook$suffix
	for f in "$dir"/_gradhook.cpp "$dir"/_collkernel.cpp "$dir"/_gradhook.h "$0"; do
		[ -f "$out" ] && [ "$out" -nt "$f" ] || stale=1
	done
	# (and again for another torch in the root: it would not load it)
	[ "$(cat "$out.torch" 2>/dev/null)" = "$ver" ] || stale=1
	GRADHOOK_OUT=$out
	[ -z "$stale" ] && return 0
	mkdir -p "$outdir"
	# This machine's g++ (12 on bookworm) with C++20, as torch 2.14's headers
	# need; they are -isystem: their own warnings are not ours.
	${CXX:-g++} -std=c++20 -O2 -Wall -Wextra -Werror -fPIC -shared "$@" \
		-DCD_TORCH_VERSION="\"$ver\"" -isystem "$torch/include" -I"$ROOT$inc" \
		-idirafter "$ROOT/usr/include" "$dir"/_gradhook.cpp "$dir"/_collkernel.cpp -o "$out.tmp" \
		-L"$torch/lib" -ltorch_python -ltorch_cpu -lc10 ||
		die "gradhook: $dir/_gradhook.cpp or _collkernel.cpp does not build"
	mv "$out.tmp" "$out"
	echo "$ver" >"$out.torch"
	echo "torch2: ext: built $out (torch $ver)"
}

ext() {
	# The recorder's C module (python/commdebug/_speedups*.c) for the root's
	# Python, in place beside the package as `pip install` would put it, and
	# light mode's C++ module (_gradhook.cpp: its gradient hook and, from
	# _collkernel.cpp, its collective kernels) for its torch.
	# The root has no compiler: this machine's builds them against the root's
	# headers (its own C headers first, the root's Python ones after).
	build_ext "$REPO/python/commdebug" -O2
	build_gradhook "$REPO/python/commdebug"
}

san() {
	# CMD run inside the root with the C module and the C++ one built with
	# ASan and UBSan (build-san/, loaded through COMMDEBUG_SPEEDUPS_SO and
	# COMMDEBUG_GRADHOOK_SO; UBSan's vptr check left out for the C++, whose
	# torch classes' type information it cannot see whole) and this machine's
	# sanitizer runtimes preloaded (the root's Python is not built with
	# them; leaks are not looked for: Python and torch keep memory at exit).
	local lib=/usr/local/lib/commdebug-san r
	build_ext "$REPO/build-san" -O1 -g -fno-omit-frame-pointer \
		-fsanitize=address,undefined -fno-sanitize-recover=undefined
	build_gradhook "$REPO/build-san" -O1 -g -fno-omit-frame-pointer \
		-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined
	$SUDO mkdir -p "$ROOT$lib"
	for r in libasan.so libubsan.so; do
		r=$(readlink -f "$(${CC:-cc} -print-file-name=$r)")
		[ -f "$r" ] || die "san: no $r here (${CC:-cc} -print-file-name)"
		$SUDO cp "$r" "$ROOT$lib/$(basename "$r" | sed 's/\(\.so\.[0-9]*\).*/\1/')"
	done
	COMMDEBUG_TORCH2_ENV="${COMMDEBUG_TORCH2_ENV:-} COMMDEBUG_SPEEDUPS_SO=$EXT_OUT
		COMMDEBUG_GRADHOOK_SO=$GRADHOOK_OUT
		LD_PRELOAD=$(ls "$ROOT$lib"/libasan.so.* | sed "s|^$ROOT||"):$(ls "$ROOT$lib"/libubsan.so.* | sed "s|^$ROOT||")
		ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0:abort_on_error=1
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1" run "$@"
}

grind() {
	# CMD run inside the root with valgrind installed there and
	# BENCH_CGTOGGLE naming tests/bench/cgtoggle.c built against its
	# headers (tests/bench/recorder.py --only instr).
	ready || die "no root at $ROOT: run tests/torch2/env.sh setup"
	local out=$REPO/build-bench/cgtoggle.so src=$REPO/tests/bench/cgtoggle.c
	if [ ! -x "$ROOT/usr/bin/valgrind" ] || [ ! -f "$ROOT/usr/include/valgrind/callgrind.h" ]; then
		echo "torch2: grind: installing valgrind in $ROOT"
		root_install valgrind || die "grind: valgrind does not install in $ROOT"
	fi
	if [ ! -f "$out" ] || [ "$src" -nt "$out" ]; then
		mkdir -p "$(dirname "$out")"
		${CC:-cc} -Wall -Wextra -Werror -O1 -fPIC -shared -idirafter "$ROOT/usr/include" \
			"$src" -o "$out" || die "grind: $src does not build"
	fi
	COMMDEBUG_TORCH2_ENV="${COMMDEBUG_TORCH2_ENV:-} BENCH_CGTOGGLE=$out" run "$@"
}

case "${1:-}" in
setup) setup ;;
ext) ext ;;
run) shift; [ $# -gt 0 ] || die "run: no command"; run "$@" ;;
san) shift; [ $# -gt 0 ] || die "san: no command"; san "$@" ;;
grind) shift; [ $# -gt 0 ] || die "grind: no command"; grind "$@" ;;
path) echo "$ROOT" ;;
ok) ready ;;
*) echo "usage: $0 setup | run CMD [ARG...] | ext | san CMD [ARG...] | grind CMD [ARG...] | path | ok" >&2; exit 2 ;;
esac
