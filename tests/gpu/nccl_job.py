#!/usr/bin/env python3
"""One rank of NCCL on the GPU under commdebug's recorder, with the NCCL-side
interposer preloaded: the real-NCCL check of the two halves together.

    LD_PRELOAD=build/libcommdebug-nccl-preload.so \
        nccl_job.py OUTDIR full|light [--device cuda|cpu] [--steps N]

writes OUTDIR/rank0.zst (the PyTorch side), OUTDIR/rank0.nccl.zst (the NCCL
side, put beside it by the recorder) and OUTDIR/truth.json: what the program
itself issued, counted here and never read from the recorder --

  per_step   the collectives each step's forward issues, by name (c10d:
             all_reduce, all_gather_into_tensor, reduce_scatter_tensor,
             broadcast, all_to_all_single; functional: all_reduce), in the
             order issued, with the module that issued them
  ddp        DDP's bucket count before the first step and after the last
  steps      N

The model: DistributedDataParallel (bucket_cap_mb small, so several
buckets) around Stem -> Mixer -> Head, where Mixer issues one of each
collective in its forward.  On one rank every collective is an identity, so
the numbers the program computes do not depend on them.

--device cpu uses gloo (a dry run on a machine without a GPU: no NCCL side).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn as nn  # noqa: E402

from commdebug import Recorder  # noqa: E402

ISSUED = []   # (module, collective) in the order the program issues them


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 256)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Mixer(nn.Module):
    """One of each collective, on one rank each an identity."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 256)

    def forward(self, h):
        h = self.fc(h)
        with torch.no_grad():
            t = h.detach().clone()
            ISSUED.append(("mixer", "all_reduce"))
            dist.all_reduce(t)
            out = torch.empty_like(t)
            ISSUED.append(("mixer", "all_gather_into_tensor"))
            dist.all_gather_into_tensor(out, t)
            ISSUED.append(("mixer", "reduce_scatter_tensor"))
            dist.reduce_scatter_tensor(t, out)
            ISSUED.append(("mixer", "broadcast"))
            dist.broadcast(t, 0)
            ISSUED.append(("mixer", "all_to_all_single"))
            dist.all_to_all_single(out, t)
        ISSUED.append(("mixer", "funcol.all_reduce"))
        g = funcol.all_reduce(h, "sum", dist.group.WORLD)
        return torch.relu(g)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 8)

    def forward(self, h):
        return self.fc(h)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Stem()
        self.mixer = Mixer()
        self.head = Head()

    def forward(self, x):
        return self.head(self.mixer(self.stem(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("mode", choices=["full", "light"])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(0)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                            **({"device_id": dev} if dev.type == "cuda" else {}))
    torch.manual_seed(0)
    rec = Recorder(os.path.join(a.outdir, "rank0.zst"), light=(a.mode == "light"))
    model = nn.parallel.DistributedDataParallel(Net().to(dev), bucket_cap_mb=0.1)
    buckets0 = len(model.reducer._get_zeros_like_grad_buckets())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device=dev)
    per_step = []
    for i in range(a.steps):
        del ISSUED[:]
        with rec(label="step %d" % i):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        per_step.append(list(ISSUED))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    buckets1 = len(model.reducer._get_zeros_like_grad_buckets())
    rec.close()
    dist.destroy_process_group()
    with open(os.path.join(a.outdir, "truth.json"), "w") as f:
        json.dump({"per_step": per_step, "ddp": [buckets0, buckets1], "steps": a.steps,
                   "torch": torch.__version__,
                   "nccl": ".".join(map(str, torch.cuda.nccl.version()))
                   if dev.type == "cuda" else None}, f, indent=1)
    print("nccl_job: %s, %d steps, buckets %d then %d" % (a.mode, a.steps, buckets0, buckets1))


if __name__ == "__main__":
    main()
