#!/usr/bin/env python3
"""Which zstd level the recorder's writer should use: the size and the
compression speed of real traces at several levels, in chunks the size of
what the writer compresses at once, all in one run (ratios against the
first level given).  Nothing passes or fails here.

    python3 tests/bench/zstd_level.py [--levels 3,1,2,-1] [--chunk-kb 160] TRACE...

Without TRACE: the shipped samples (testdata/*.zst) and, where it is there,
../shared/traces/gpt2-400steps.zst.  Needs libzstd (ctypes) and zstd.
"""

import argparse
import ctypes
import ctypes.util
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MAX_BYTES = 64 << 20          # of each trace's JSON, at most


def libzstd():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    z = ctypes.CDLL(name)
    z.ZSTD_compressBound.restype = ctypes.c_size_t
    z.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    z.ZSTD_compress.restype = ctypes.c_size_t
    z.ZSTD_compress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                ctypes.c_size_t, ctypes.c_int]
    z.ZSTD_isError.restype = ctypes.c_uint
    z.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return z


def json_of(path):
    r = subprocess.run(["zstd", "-dcq", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode and not r.stdout:
        raise SystemExit("zstd_level: %s: %s" % (path, r.stderr.decode().strip()))
    return r.stdout[:MAX_BYTES]


def measure(z, chunks, level, rounds):
    """(compressed bytes, MB/s of JSON, best of rounds)."""
    out = ctypes.create_string_buffer(z.ZSTD_compressBound(max(map(len, chunks))))
    best, size = None, 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        size = 0
        for c in chunks:
            n = z.ZSTD_compress(out, len(out), c, len(c), level)
            if z.ZSTD_isError(n):
                raise SystemExit("zstd_level: ZSTD_compress failed at level %d" % level)
            size += n
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return size, sum(map(len, chunks)) / best / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="3,1,2,-1")
    ap.add_argument("--chunk-kb", type=int, default=160,
                    help="bytes compressed at once (the light writer's 0.1 s of a small "
                         "GPT-2 step's events is about 160 KB)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    traces = args.traces or sorted(glob.glob(os.path.join(REPO, "testdata", "*.zst")))
    shared = os.path.join(REPO, "..", "shared", "traces", "gpt2-400steps.zst")
    if not args.traces and os.path.exists(shared):
        traces.append(shared)
    z = libzstd()
    print("zstd levels on traces, in chunks of %d KB, best of %d rounds (ratios against "
          "level %d in the same run)" % (args.chunk_kb, args.rounds, levels[0]))
    for path in traces:
        data = json_of(path)
        step = args.chunk_kb * 1024
        chunks = [data[i:i + step] for i in range(0, len(data), step)]
        if not chunks:
            continue
        res = {lv: measure(z, chunks, lv, args.rounds) for lv in levels}
        base_size, base_speed = res[levels[0]]
        print("%s (%d bytes of JSON)" % (os.path.relpath(path), len(data)))
        for lv in levels:
            size, speed = res[lv]
            print("  level %3d  %10d bytes (%.2fx)  %8.0f MB/s (%.2fx)"
                  % (lv, size, size / base_size, speed, speed / base_speed))


if __name__ == "__main__":
    sys.exit(main())
