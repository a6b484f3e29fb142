#!/usr/bin/env python3
"""One NCCL rank on the GPU with PyTorch's Flight Recorder on
(TORCH_FR_BUFFER_SIZE) and NCCL timing (TORCH_NCCL_ENABLE_TIMING), recorded
light by commdebug at the same time: real NCCL Flight Recorder dumps, one
taken while a collective is in flight, beside the trace they join with.

    fr_job.py OUTDIR [--device cuda:0|cpu]

Steps 0-2 (regions "step 0".."step 2"): Net.world_reduce all-reduces in
forward; DDP's reducer all-reduces the gradients in backward.  Between
steps 1 and 2, outside any region, an all-reduce of the same shape as
world_reduce's (as an evaluation would issue), 0.2 s from the steps: the
trace does not see it, the Flight Recorder does.  Step 3: the
GPU is kept busy (torch.cuda._sleep, about 2 s) before Net.world_reduce's
all-reduce, so that collective waits behind it on the GPU; while it waits,
the Flight Recorder is dumped (OUTDIR/inflight/fr_rank0, pickle, and
OUTDIR/inflight-json/fr_rank0), then again once all is done
(OUTDIR/exit/fr_rank0, OUTDIR/exit-json/fr_rank0).  OUTDIR/rank0.zst is the
light trace; OUTDIR/meta/truth.json (a subdirectory: not read as a trace) what the program issued (per step, its
forward all-reduces), its process group's name, and which dump functions
this torch had.

--device cpu runs the same on gloo (no sleep, no NCCL timing): a dry run.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from commdebug import Recorder  # noqa: E402


class WorldReduce(nn.Module):
    def forward(self, h):
        t = h.detach().clone()
        dist.all_reduce(t)
        return h + 0 * t


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.world_reduce = WorldReduce()
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.world_reduce(self.fc1(x))))


def dumpers(cuda):
    """(pickle dump, JSON dump) of the Flight Recorder of this torch's
    backend: ProcessGroupNCCL's is _dump_nccl_trace* (2.11: _dump_fr_trace*
    dumps the CPU backends' recorder, empty on NCCL), gloo's _dump_fr_trace*."""
    import torch._C._distributed_c10d as c10d
    out = []
    pick, js = ("_dump_fr_trace", "_dump_fr_trace_json")
    if cuda:
        pick, js = ("_dump_nccl_trace", pick), ("_dump_nccl_trace_json", js)
    else:
        pick, js = (pick,), (js,)
    for names in (pick, js):
        fn = next((getattr(c10d, n) for n in names if hasattr(c10d, n)), None)
        out.append((fn.__name__ if fn else None, fn))
    return out


def dump(out, sub, cuda):
    for (name, fn), d in zip(dumpers(cuda), (sub, sub + "-json")):
        if fn is None:
            continue
        os.makedirs(os.path.join(out, d), exist_ok=True)
        data = fn()
        with open(os.path.join(out, d, "fr_rank0"), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                            world_size=1, **({"device_id": dev} if cuda else {}))
    rec = Recorder(os.path.join(a.outdir, "rank0.zst"), light=True)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32, device=dev)
    for step in range(3):
        with rec(label="step %d" % step):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
        if step == 1:
            # outside any region, as an evaluation would be: an all-reduce of
            # the same shape as world_reduce's, which the trace does not see
            time.sleep(0.2)
            dist.all_reduce(torch.ones(8, 64, device=dev))
            time.sleep(0.2)
    if cuda:
        torch.cuda.synchronize()
    waited = None
    with rec(label="step 3"):
        if cuda:
            torch.cuda._sleep(int(4e9))      # cycles: about 2 s at the H200's clock
        t0 = time.monotonic()
        y = model.module.world_reduce(model.module.fc1(x))   # its all-reduce waits
        dump(a.outdir, "inflight", cuda)
        waited = time.monotonic() - t0
        if cuda:
            torch.cuda.synchronize()
        y.sum().backward()
    rec.close()
    if cuda:
        torch.cuda.synchronize()
    dump(a.outdir, "exit", cuda)
    pg = dist.distributed_c10d._get_default_group()
    truth = {"steps": 4, "forward_all_reduces_per_step": 1, "pg_name": pg.group_name,
             "outside_regions": "one all_reduce of [8, 64] float32 between steps 1 and 2",
             "dumpers": [n for n, _ in dumpers(cuda)], "dump_after_s": round(waited, 3),
             "torch": torch.__version__,
             "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None}
    dist.destroy_process_group()
    os.makedirs(os.path.join(a.outdir, "meta"), exist_ok=True)
    with open(os.path.join(a.outdir, "meta", "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print("fr_job: %s" % truth)


if __name__ == "__main__":
    main()
