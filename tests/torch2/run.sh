#!/bin/sh
# The recorder's tests and the golden comparison on torch 2.14, inside the root
# of tests/torch2/env.sh (meson suite torch2).
#
#   run.sh recorder COMMDEBUG   tests/recorder/run_tests.py under torch 2.14
#   run.sh golden COMMDEBUG     the golden programs run under torch 2.14's own
#                               CommDebugMode and under the Recorder
#                               (tests/golden/regen.py), then compared
#                               (tests/golden/check.py)
#   run.sh sanitize COMMDEBUG   the recorder's tests that run its C module
#                               most, with it built with ASan and UBSan
#                               (env.sh san)
#
# Without a ready root the test is skipped (77) unless COMMDEBUG_REQUIRE_TORCH2=1
# (CI sets it), which makes that a failure; so is not being root (chroot).
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
what=${1:-}
cd_bin=${2:-}
case $cd_bin in /*) ;; *) cd_bin=$(pwd -P)/$cd_bin ;; esac

skip() {
	if [ "${COMMDEBUG_REQUIRE_TORCH2:-0}" = 1 ]; then
		echo "torch2: $* (COMMDEBUG_REQUIRE_TORCH2=1)"
		echo "0 passed, 1 failed"
		exit 1
	fi
	echo "torch2: $*; skipped (set it up with: sudo tests/torch2/env.sh setup)"
	exit 77
}

"$here/env.sh" ok || skip "no torch 2.14 root at $("$here/env.sh" path)"
if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
	skip "chroot needs root or password-less sudo"
fi
case $cd_bin in "$repo"/*) ;; *) skip "the analyzer $cd_bin is outside the checkout, so not inside the root" ;; esac

cd "$repo" || exit 1
# the recorder's C module for the root's Python (the tests then run it; the
# Python it stands for runs on the system's torch 1.13 and under
# COMMDEBUG_SPEEDUPS=0, and tests compare the two)
if ! "$here/env.sh" ext; then
	[ "${COMMDEBUG_REQUIRE_TORCH2:-0}" = 1 ] && { echo "0 passed, 1 failed"; exit 1; }
	echo "torch2: without the recorder's C module"
fi
case $what in
recorder)
	exec "$here/env.sh" run python3 tests/recorder/run_tests.py --commdebug "$cd_bin" \
		--require-analyzer ;;
sanitize)
	# (the golden programs once each: the runs that check they repeat are suite torch2's)
	COMMDEBUG_TORCH2_ENV="${COMMDEBUG_TORCH2_ENV:-} COMMDEBUG_OBSERVE_RUNS=1"
	export COMMDEBUG_TORCH2_ENV
	exec "$here/env.sh" san python3 tests/recorder/run_tests.py --commdebug "$cd_bin" \
		--require-analyzer -k test_speedups -k test_observer -k test_chains \
		-k test_light.test_light_jobs_equal_full -k test_light.test_light_compiled_model \
		-k test_light.test_light_collective_kernels_both_ways ;;
golden)
	out=$(mktemp -d "$repo/build-golden-torch2.XXXXXX") || exit 1
	trap 'rm -rf "$out"' EXIT
	"$here/env.sh" run python3 tests/golden/regen.py "$out" || { echo "0 passed, 1 failed"; exit 1; }
	python3 tests/golden/check.py "$cd_bin" "$out" ;;
*)
	echo "usage: $0 recorder|golden|sanitize COMMDEBUG" >&2
	exit 2 ;;
esac
