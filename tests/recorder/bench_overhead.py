#!/usr/bin/env python3
"""Overhead of the recorder per dispatched op.

    /usr/bin/python3 tests/recorder/bench_overhead.py [--iters N] [--repeat R]
                                                      [--width W] [--depth D]

Three workloads, each run three ways -- plain, under a TorchDispatchMode
that only calls the op, and under the commdebug Recorder -- printing the
time per op and the ratios (best of R repeats, all in this one run):

* ops: 20000 small in-place ops, no modules: the dispatch hot path alone;
* step: a small training step (MLP of D Linear(W)+ReLU, backward, SGD step),
  one region per step: ops plus the module hooks and region bookkeeping;
* coll: all_reduce of 4 floats on a one-process gloo group, with 10 small
  ops between collectives: the cost of a collective, including the zstd
  frame the recorder writes before handing each collective to the backend;
* ddp: the training step with the MLP in DistributedDataParallel (one-process
  gloo group, small buckets), run plain, recorded with the recorder's ddp
  events switched off, and recorded as it is: the ratio of the last two is
  the per-step cost of the ddp events after DDP's rebuild (one flag read per
  forward); the one-time cost of the two ddp events is printed apart.

The figure the recorder is held to is "added cost per op": (recorder - plain)
/ (do-nothing mode - plain), at most 1.5 (the writer thread and the frames
before collectives included: the Recorder runs as it always does).
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


def timed(fns, iters, repeat):
    """Run each of fns iters times, the fns interleaved, repeat rounds;
    returns [(best wall s, best CPU s)] per call of each fn.  CPU time is
    the process's (every thread, the recorder's writer included): other
    processes on a shared machine do not count in it."""
    best = [[float("inf"), float("inf")] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            c0 = time.process_time()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t1 = time.perf_counter()
            c1 = time.process_time()
            best[i][0] = min(best[i][0], (t1 - t0) / iters)
            best[i][1] = min(best[i][1], (c1 - c0) / iters)
    return best


def added(rec, mode, plain):
    return (rec - plain) / (mode - plain)


def report(title, unit, per, res, n_units_note=""):
    """res: [(wall, cpu)] for plain, mode, recorder, per unit."""
    us = 1e6
    (pw, pc), (mw, mc), (rw, rc) = res
    print(title)
    print("%-28s %14s %14s" % ("", "wall us/" + unit, "CPU us/" + unit))
    for name, (w, c) in zip(("plain", "do-nothing dispatch mode", "commdebug Recorder"), res):
        print("%-28s %14.2f %14.2f" % (name, w * us / per, c * us / per))
    print("added per %s: recorder %.2f us, do-nothing mode %.2f us: ratio %.2f (CPU); "
          "wall: %.2f vs %.2f us, ratio %.2f%s"
          % (unit, (rc - pc) * us / per, (mc - pc) * us / per, added(rc, mc, pc),
             (rw - pw) * us / per, (mw - pw) * us / per, added(rw, mw, pw), n_units_note))
    print()
    return added(rc, mc, pc), added(rw, mw, pw)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, opt, x = make(args.width, args.depth)
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    print("torch %s, python %s" % (torch.__version__, sys.version.split()[0]))
    print()

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

    res = timed([ops, ops_mode, ops_rec], 1, args.repeat)
    rec_ops.close()
    report("ops: %d x Tensor.add_ on a 4-element tensor, one region" % n_ops, "op", n_ops, res)

    # --- training steps
    counter = CountMode()
    with counter:
        step(model, opt, x)
    step_ops = counter.n

    def plain():
        step(model, opt, x)

    def nothing():
        with NothingMode():
            step(model, opt, x)

    rec = Recorder(os.path.join(tmp, "bench.zst"))

    def recorded():
        with rec:
            step(model, opt, x)

    timed([plain, nothing, recorded], 10, 1)   # warm up
    res = timed([plain, nothing, recorded], args.iters, args.repeat)
    rec.close()
    w = rec._w
    size = os.path.getsize(rec.path)
    report("step: %d x Linear(%d) + ReLU, batch 8, backward, SGD step, one region per step; "
           "%d ops and %d module calls per step" % (args.depth, args.width, step_ops,
                                                     2 * args.depth + 1),
           "op", step_ops, res, " (module hooks and regions included)")
    print("trace: %d bytes on disk, %d bytes of JSON (%.1fx), %d frames, %.1f bytes/step"
          % (size, w.bytes_in, w.bytes_in / max(size, 1), w.frames, size / rec.region))
    print()

    # --- collectives
    import torch.distributed as dist
    store = dist.HashStore() if hasattr(dist, "HashStore") else \
        dist.FileStore(os.path.join(tmp, "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    c = torch.zeros(4)
    n_coll = 300
    between = 10

    def colls():
        for _ in range(n_coll):
            for _ in range(between):
                y.add_(1)
            dist.all_reduce(c)

    def colls_mode():
        with NothingMode():
            colls()

    rec_c = Recorder(os.path.join(tmp, "coll.zst"))

    def colls_rec():
        with rec_c:
            colls()

    res = timed([colls, colls_mode, colls_rec], 1, args.repeat)
    rec_c.close()
    report("coll: %d x (%d Tensor.add_ + all_reduce of 4 floats), gloo, one process; "
           "the recorder writes a frame before each all_reduce (%d frames)"
           % (n_coll, between, rec_c._w.frames), "collective", n_coll, res,
           " (its %d ops included)" % between)

    # --- DDP: the ddp events
    ddp_section(args, tmp)
    dist.destroy_process_group()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


def ddp_section(args, tmp):
    import torch.distributed as dist
    from commdebug import recorder as R
    model, _, x = make(args.width, args.depth)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    def plain():
        step(ddp, opt, x)

    rec_off = Recorder(os.path.join(tmp, "ddp-off.zst"))
    # The same Recorder without its ddp events (instance attributes shadow
    # the methods).
    rec_off._ddp_first_sight = lambda mod: rec_off._ddp_state.__setitem__(
        mod, [True, None, 0, None])
    rec_off._ddp_check_rebuilt = lambda mod, st: None
    rec_on = Recorder(os.path.join(tmp, "ddp-on.zst"))

    def off():
        with rec_off:
            step(ddp, opt, x)

    def on():
        with rec_on:
            step(ddp, opt, x)

    timed([plain, off, on], 10, 1)   # warm up: DDP has rebuilt its buckets after this
    res = timed([plain, off, on], args.iters, args.repeat)
    rec_off.close()
    rec_on.close()
    (pw, pc), (fw, fc), (nw, nc) = res
    us = 1e6
    print("ddp: the step above in DistributedDataParallel (bucket_cap_mb 0.004), gloo, one "
          "process, one region per step")
    print("%-28s %14s %14s" % ("", "wall us/step", "CPU us/step"))
    for name, (w, c) in zip(("plain DDP", "recorder, no ddp events", "recorder"), res):
        print("%-28s %14.2f %14.2f" % (name, w * us, c * us))
    print("ddp events per step after the rebuild: %.2f us CPU (recorder/no-ddp-events "
          "ratio %.3f CPU, %.3f wall)" % ((nc - fc) * us, nc / fc, nw / fw))

    # One-time costs: the first-sight event (recomputed construction buckets)
    # and the rebuilt event (the reducer's listing), on a fresh recorder.
    rec1 = Recorder(os.path.join(tmp, "ddp-once.zst"))
    n = 20
    with rec1:
        t0 = time.process_time()
        for _ in range(n):
            rec1._ddp_first_sight(ddp)
        t1 = time.process_time()
        for _ in range(n):
            st = rec1._ddp_state[ddp]
            st[0], st[1] = False, None
            rec1._ddp_check_rebuilt(ddp, st)
        t2 = time.process_time()
    rec1.close()
    nb = sum(p.numel() * p.element_size() for p in ddp.parameters())
    print("once per DDP module: first-sight event %.0f us CPU, rebuilt event %.0f us CPU "
          "(%d parameters, %d bytes; the listing allocates that much)"
          % ((t1 - t0) * us / n, (t2 - t1) * us / n, len(list(ddp.parameters())), nb))
    del R, dist
    print()


if __name__ == "__main__":
    main()
