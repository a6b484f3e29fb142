#!/usr/bin/env python3
"""Generate the traces of a large tensor-parallel x data-parallel job.

Every rank runs STEPS steps (regions "step N") of a model of LAYERS blocks on
a dp x tp mesh: each block's forward and backward all-reduce its activations
over the rank's tp group ("c10d.allreduce_", 4 KiB), each block's backward
also all-reduces a gradient bucket over the rank's dp group (256 KiB), and
OPS aten operators surround each collective, as a full recording has them.
Process groups are named as torch names them: "0" the world (every rank
listed), then the tp groups, then the dp groups.  Times have a few
microseconds of jitter per event; t0 is the same on every rank.

The traces go to OUT/node<N>/rank<R>.zst, RANKS_PER_NODE ranks a node (the
layout of a cluster's per-node log directories), zstd-compressed by the
zstd command (one process per core).

Faults (--fault, any number): KIND:RANK:STEP:LAYER[:ARG]
  skip    RANK does not issue the dp all-reduce of LAYER's backward in STEP
  size    RANK's tp all-reduce of LAYER's forward in STEP is twice as large
  sleep   RANK reaches the tp all-reduce of LAYER's forward in STEP ARG s late
          (every other rank waits that long inside it)
  stop    RANK's trace ends before the tp all-reduce of LAYER's forward in STEP

usage: gen_job.py --ranks 8192 --tp 8 --out DIR [--steps 12] [--layers 8]
                  [--ops 10] [--per-node 64] [--fault KIND:RANK:STEP:LAYER[:ARG]]...
"""
import argparse
import json
import os
import random
import subprocess
import sys

T0 = 1764000000000000000


def parse_fault(text):
    p = text.split(":")
    if len(p) < 4 or p[0] not in ("skip", "size", "sleep", "stop"):
        raise argparse.ArgumentTypeError("--fault takes KIND:RANK:STEP:LAYER[:ARG], "
                                         "KIND one of skip, size, sleep, stop")
    try:
        return (p[0], int(p[1]), int(p[2]), int(p[3]), float(p[4]) if len(p) > 4 else 0.0)
    except ValueError:
        raise argparse.ArgumentTypeError("--fault: RANK, STEP and LAYER are numbers: %r" % text)


class Rank:
    """One rank's trace, written line by line."""

    def __init__(self, a, rank, faults):
        self.a = a
        self.rank = rank
        self.faults = faults
        self.rng = random.Random(rank)
        self.t = 0
        self.lines = []
        self.seq = {}
        self.stopped = False
        tp = a.tp
        self.tp_pg = str(1 + rank // tp)
        self.dp_pg = str(1 + a.ranks // tp + rank % tp)

    def fault(self, kind, step, layer):
        for f in self.faults:
            if f[0] == kind and f[1] == self.rank and f[2] == step and f[3] == layer:
                return f[4] or 1.0
        return 0.0

    def ev(self, text):
        self.t += 1000 + self.rng.randrange(4000)
        self.lines.append('%s,"t":%d}' % (text, self.t))

    def ops(self, bw, names=("aten.mm.default", "aten.add.Tensor", "aten.gelu.default",
                             "aten.native_layer_norm.default", "aten.view.default")):
        b = "true" if bw else "false"
        for i in range(self.a.ops):
            self.ev('{"ev":"op","name":"%s","bw":%s,"dt":false' % (names[i % len(names)], b))

    def coll(self, pg, nbytes, bw):
        s = self.seq[pg] = self.seq.get(pg, 0) + 1
        self.ev('{"ev":"op","name":"c10d.allreduce_.default","bw":%s,"pg":"%s","seq":%d,'
                '"bytes":%d,"dtype":"torch.float32","shape":[%d]'
                % ("true" if bw else "false", pg, s, nbytes, nbytes // 4))

    def head(self):
        a = self.a
        self.lines.append(json.dumps({"ev": "meta", "format": "commdebug-trace", "version": 1,
                                      "rank": self.rank, "world_size": a.ranks,
                                      "host": "node%04d" % (self.rank // a.per_node),
                                      "pid": 1000 + self.rank, "t0": T0, "torch": "2.14.1",
                                      "recorder": "gen_job.py", "ends": True},
                                     separators=(",", ":")))
        world = ",".join(str(r) for r in range(a.ranks))
        self.lines.append('{"ev":"pg","name":"0","desc":"default_pg","ranks":[%s],'
                          '"backend":"nccl","t":0}' % world)
        g = self.rank // a.tp
        tp = ",".join(str(r) for r in range(g * a.tp, (g + 1) * a.tp))
        self.lines.append('{"ev":"pg","name":"%s","desc":"tp","ranks":[%s],"backend":"nccl",'
                          '"t":0}' % (self.tp_pg, tp))
        d = self.rank % a.tp
        dp = ",".join(str(r) for r in range(d, a.ranks, a.tp))
        self.lines.append('{"ev":"pg","name":"%s","desc":"dp","ranks":[%s],"backend":"nccl",'
                          '"t":0}' % (self.dp_pg, dp))

    def forward(self, step):
        self.ev('{"ev":"fw_pre","mod":"Net","type":"model.Net","bw":false,"grad_in":false')
        for k in range(self.a.layers):
            m = "Net.blocks.%d" % k
            self.ev('{"ev":"fw_pre","mod":"%s","type":"model.Block","bw":false,"grad_in":true' % m)
            self.ops(False)
            if self.fault("stop", step, k):
                self.stopped = True
                return
            late = self.fault("sleep", step, k)
            if late:
                self.t += int(late * 1e9)
            self.coll(self.tp_pg, 8192 if self.fault("size", step, k) else 4096, False)
            # the others wait for a straggler inside this collective
            for f in self.faults:
                if f[0] == "sleep" and f[1] != self.rank and f[2] == step and f[3] == k:
                    self.t += int(f[4] * 1e9)
            self.ops(False)
            self.ev('{"ev":"fw_post","mod":"%s","bw":false,"grad_out":true' % m)
            self.ev('{"ev":"fw_done","mod":"%s","bw":false' % m)
        self.ev('{"ev":"fw_post","mod":"Net","bw":false,"grad_out":true')
        self.ev('{"ev":"fw_done","mod":"Net","bw":false')

    def backward(self, step):
        self.ev('{"ev":"bw_pre","mod":"Net"')
        self.ev('{"ev":"bw_enter","mod":"Net"')
        for k in reversed(range(self.a.layers)):
            m = "Net.blocks.%d" % k
            self.ev('{"ev":"bw_pre","mod":"%s"' % m)
            self.ev('{"ev":"bw_enter","mod":"%s"' % m)
            self.ops(True)
            self.coll(self.tp_pg, 4096, True)
            if not self.fault("skip", step, k):
                self.coll(self.dp_pg, 262144, True)
            self.ops(True)
            self.ev('{"ev":"bw_exit","mod":"%s"' % m)
        self.ev('{"ev":"bw_exit","mod":"Net"')
        self.ev('{"ev":"bw_end"')

    def trace(self):
        self.head()
        for step in range(1, self.a.steps + 1):
            self.ev('{"ev":"region_enter","region":%d,"label":"step %d"' % (step, step))
            self.forward(step)
            if self.stopped:
                break
            self.backward(step)
            self.ops(False)
            self.ev('{"ev":"region_exit","region":%d' % step)
        if not self.stopped:
            self.ev('{"ev":"end","how":"exit","code":0')
        return "\n".join(self.lines) + "\n"


def job_args(ap):
    """The job's shape and faults, as gen_summaries.py takes them too."""
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--fault", type=parse_fault, action="append", default=[])
    ap.add_argument("--out", required=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_args(ap)
    ap.add_argument("--ops", type=int, default=10)
    ap.add_argument("--per-node", type=int, default=64)
    a = ap.parse_args()
    if a.ranks % a.tp:
        sys.exit("gen_job.py: --ranks must be a multiple of --tp")
    jobs = []
    cores = os.cpu_count() or 1
    for r in range(a.ranks):
        d = os.path.join(a.out, "node%04d" % (r // a.per_node))
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "rank%d.zst" % r)
        p = subprocess.Popen(["zstd", "-q", "-f", "-3", "-o", path], stdin=subprocess.PIPE)
        p.stdin.write(Rank(a, r, a.fault).trace().encode())
        p.stdin.close()
        jobs.append(p)
        while len(jobs) >= cores:
            if jobs[0].wait():
                sys.exit("gen_job.py: zstd failed")
            jobs.pop(0)
    for p in jobs:
        if p.wait():
            sys.exit("gen_job.py: zstd failed")


if __name__ == "__main__":
    main()
