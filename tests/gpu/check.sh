#!/bin/bash
# The recorder's checks on a GPU machine (PyTorch with CUDA and NCCL, no
# Debian dev packages): run in the repository root there, with the NCCL-side
# libraries built elsewhere in build/ (x86-64) and, where the machine has no
# libzstd.so.1, a copy of it in .gpu/lib.  Everything lands in OUTDIR
# (default $OUT): check.log, the bench outputs, and gpu.tar.gz with the
# traces (what testdata/gpu keeps of them: testdata/SOURCE.md).
#
#   [CHECKS="nccl compiled golden fr gpt2 blocks"] tests/gpu/check.sh [OUTDIR]
#
# CHECKS picks the checks (all by default).
# Phase A, at once: the golden programs on this torch (tests/golden/regen.py,
# recorder, light mode and CommDebugMode; on CPUs 8-15) beside the NCCL jobs
# (tests/gpu/nccl_job.py full and light with the interposer preloaded, once
# with the profiler plugin), the inductor check (tests/gpu/compiled.py) and
# the Flight Recorder job (tests/gpu/fr_job.py).
# Phase B, alone: the benches (tests/bench/gpu_gpt2.py on the GPU, the
# blocks workload of tests/bench/recorder.py on this machine's CPU).
set -u
out=${1:-${OUT:?no OUTDIR and no OUT}}
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
cd "$repo" || exit 1
mkdir -p "$out"
w=$(mktemp -d /tmp/commdebug-gpu.XXXXXX)
exec > >(tee "$out/check.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::FutureWarning
step() { echo; echo "== $* ($(date +%T))"; }
want() { case " ${CHECKS:-nccl compiled golden fr gpt2 blocks} " in *" $1 "*) return 0 ;; esac; return 1; }

step facts
nvidia-smi -L
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpu", torch.cuda.get_device_name(0))'
nproc; cc --version | head -1
if ! ldconfig -p | grep -q 'libzstd.so.1 '; then
	echo "no libzstd.so.1 here: the carried .gpu/lib"
	export LD_LIBRARY_PATH=$repo/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
ls -l build/libcommdebug-nccl-preload.so build/libnccl-profiler-commdebug.so

step "the recorder's C module for this Python"
read -r inc suffix < <(python3 -c 'import sysconfig as s; print(s.get_path("include"), s.get_config_var("EXT_SUFFIX"))')
if [ -f "$inc/Python.h" ] && cc -O2 -Wall -Wextra -Werror -fPIC -shared -I"$inc" \
	python/commdebug/_speedups*.c -o "python/commdebug/_speedups$suffix"; then
	echo "built python/commdebug/_speedups$suffix"
else
	echo "no C module (no $inc/Python.h, or it did not build): the recorder's Python stands in"
fi

step "phase A: golden programs (CPUs 8-15) beside the NCCL jobs"
regen=
if want golden; then
	taskset -c 8-15 timeout 300 python3 tests/golden/regen.py "$w/golden" --timeout 120 \
		> "$w/regen.log" 2>&1 &
	regen=$!
fi
pre=$repo/build/libcommdebug-nccl-preload.so
if want nccl; then
	for mode in full light; do
		LD_PRELOAD=$pre taskset -c 0-7 timeout 120 python3 tests/gpu/nccl_job.py "$w/nccl-$mode" $mode ||
			echo "nccl_job $mode: exit $?"
	done
	NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV NCCL_PROFILER_PLUGIN=$repo/build/libnccl-profiler-commdebug.so \
		taskset -c 0-7 timeout 120 python3 tests/gpu/nccl_job.py "$w/nccl-plugin" full \
		> "$w/plugin.log" 2>&1 || echo "nccl_job with the plugin: exit $?"
	grep -i -E 'profiler|commdebug' "$w/plugin.log" | head -20
	ls -l "$w"/nccl-*/
fi
if want compiled; then
	LD_PRELOAD=$pre taskset -c 0-7 timeout 240 python3 tests/gpu/compiled.py "$w/compiled" \
		> "$w/compiled.log" 2>&1 || echo "compiled.py: exit $?"
	tail -3 "$w/compiled.log"
fi
if want fr; then
	taskset -c 0-7 timeout 120 python3 tests/gpu/fr_job.py "$w/fr" || echo "fr_job: exit $?"
	ls -lR "$w/fr"
fi
if [ -n "$regen" ]; then
	wait $regen; echo "regen: exit $?"; tail -22 "$w/regen.log"
fi

if want gpt2; then
	step "phase B: GPT-2 124M on the GPU"
	timeout 200 python3 tests/bench/gpu_gpt2.py 2>&1 | grep -v -E 'Warning|return |loss_type' |
		tee "$out/gpu_gpt2.txt"
fi
if want blocks; then
	step "phase B: the blocks workload on this CPU"
	timeout 120 python3 tests/bench/recorder.py --only blocks --rounds 20 2>&1 | tee "$out/blocks.txt"
fi

step pack
cp "$w"/*.log "$w/golden" 2>/dev/null
(cd "$w" && ls -d golden nccl-full nccl-light nccl-plugin compiled fr 2>/dev/null) |
	tar -C "$w" -cf - -T - | gzip -9 > "$out/gpu.tar.gz"
ls -l "$out"
