#!/usr/bin/env python3
"""Overhead of the recorder per dispatched op.

    /usr/bin/python3 tests/recorder/bench_overhead.py [--iters N] [--repeat R]
                                                      [--width W] [--depth D]

Two workloads, each run three ways -- plain, under a TorchDispatchMode that
only calls the op, and under the commdebug Recorder -- printing the time per
op and the ratios (best of R repeats):

* ops: 20000 small in-place ops, no modules: the dispatch hot path alone;
* step: a small training step (MLP of D Linear(W)+ReLU, backward, SGD step),
  one region per step: ops plus the module hooks and region bookkeeping.
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from commdebug import Recorder  # noqa: E402


class NothingMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class CountMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def make(width, depth):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, width)
    return model, opt, x


def step(model, opt, x):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()


def timed(fn, iters, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, opt, x = make(args.width, args.depth)

    counter = CountMode()
    with counter:
        step(model, opt, x)
    step_ops = counter.n

    def plain():
        step(model, opt, x)

    def nothing():
        with NothingMode():
            step(model, opt, x)

    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    rec = Recorder(os.path.join(tmp, "bench.zst"))

    def recorded():
        with rec:
            step(model, opt, x)

    # --- ops only
    y = torch.zeros(4)
    n_ops = 20000

    def ops():
        for _ in range(n_ops):
            y.add_(1)

    def ops_mode():
        with NothingMode():
            ops()

    rec_ops = Recorder(os.path.join(tmp, "ops.zst"))

    def ops_rec():
        with rec_ops:
            ops()

    o_plain = timed(ops, 1, args.repeat) / n_ops
    o_mode = timed(ops_mode, 1, args.repeat) / n_ops
    o_rec = timed(ops_rec, 1, args.repeat) / n_ops
    rec_ops.close()
    os.remove(rec_ops.path)

    for fn in (plain, nothing, recorded):  # warm up
        for _ in range(10):
            fn()
    t_plain = timed(plain, args.iters, args.repeat)
    t_mode = timed(nothing, args.iters, args.repeat)
    t_rec = timed(recorded, args.iters, args.repeat)
    rec.close()
    w = rec._w
    size = os.path.getsize(rec.path)

    us = 1e6
    print("torch %s, python %s" % (torch.__version__, sys.version.split()[0]))
    print()
    print("ops: %d x Tensor.add_ on a 4-element tensor, one region" % n_ops)
    print("%-28s %12s %10s" % ("", "us/op", "vs plain"))
    print("%-28s %12.2f %10.2f" % ("plain", o_plain * us, 1.0))
    print("%-28s %12.2f %10.2f" % ("do-nothing dispatch mode", o_mode * us, o_mode / o_plain))
    print("%-28s %12.2f %10.2f" % ("commdebug Recorder", o_rec * us, o_rec / o_plain))
    print("recorder vs do-nothing mode: %.2fx; added per op over the mode: %.2f us"
          % (o_rec / o_mode, (o_rec - o_mode) * us))
    print()
    print("step: %d x Linear(%d) + ReLU, batch 8, backward, SGD step, one region per step; "
          "%d ops and %d module calls per step"
          % (args.depth, args.width, step_ops, 2 * args.depth + 1))
    print("%-28s %12s %12s %10s" % ("", "us/step", "us/op", "vs plain"))
    print("%-28s %12.1f %12.2f %10.2f" % ("plain", t_plain * us, t_plain * us / step_ops, 1.0))
    print("%-28s %12.1f %12.2f %10.2f" % ("do-nothing dispatch mode", t_mode * us,
                                          t_mode * us / step_ops, t_mode / t_plain))
    print("%-28s %12.1f %12.2f %10.2f" % ("commdebug Recorder", t_rec * us, t_rec * us / step_ops,
                                          t_rec / t_plain))
    print("recorder vs do-nothing mode: %.2fx; added per op over the mode: %.2f us "
          "(module hooks and regions included)" % (t_rec / t_mode, (t_rec - t_mode) * us / step_ops))
    print("trace: %d bytes on disk, %d bytes of JSON (%.1fx), %d frames, %.1f bytes/step"
          % (size, w.bytes_in, w.bytes_in / max(size, 1), w.frames, size / rec.region))
    os.remove(rec.path)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
