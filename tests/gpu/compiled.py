#!/usr/bin/env python3
"""torch.compile with the inductor backend on the GPU, one NCCL rank, with a
functional all-reduce in the compiled graph: dynamo's counters with no
recorder, under light mode and under the full recorder, and the traces.

    compiled.py OUTDIR [--device cuda|cpu] [--backend inductor|aot_eager]

writes OUTDIR/light.zst, OUTDIR/full.zst and OUTDIR/counters.json
({"plain": ..., "light": ..., "full": ...}: dynamo's frames, stats,
graph_break, aot_autograd and recompiles counters; "same": whether light
mode compiled what plain did, compiled_the_same).  Light mode promises the
same counters as plain and every step's all-reduce, forward and backward, in
its trace (tests/recorder/test_light.py checks the same on the CPU with
aot_eager); the full recorder makes dynamo fall back to eager and says so.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from check_traces import compiled_the_same  # noqa: E402
from commdebug import Recorder  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)

    def forward(self, x):
        return self.b(torch.relu(funcol.all_reduce(self.a(x), "sum", dist.group.WORLD)))


def run(rec, dev, backend, steps=3):
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    m = torch.compile(Net().to(dev), backend=backend)
    x = torch.randn(16, 64, device=dev, requires_grad=True)
    for i in range(steps):
        if rec is None:
            m(x).sum().backward()
        else:
            with rec(label="step %d" % i):
                m(x).sum().backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return {k: dict(v) for k, v in counters.items()
            if k in ("frames", "stats", "graph_break", "aot_autograd", "recompiles")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--backend", default="inductor")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.HashStore(),
                            rank=0, world_size=1,
                            **({"device_id": dev} if dev.type == "cuda" else {}))
    out = {"plain": run(None, dev, a.backend)}
    light = Recorder(os.path.join(a.outdir, "light.zst"), light=True)
    out["light"] = run(light, dev, a.backend)
    light.close()
    full = Recorder(os.path.join(a.outdir, "full.zst"))
    out["full"] = run(full, dev, a.backend)
    full.close()
    dist.destroy_process_group()
    out["same"] = compiled_the_same(out["plain"]) == compiled_the_same(out["light"])
    out["backend"] = a.backend
    with open(os.path.join(a.outdir, "counters.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("compiled: %s, light counters %s plain's" % (a.backend, "equal" if out["same"]
                                                       else "DIFFER from"))


if __name__ == "__main__":
    main()
