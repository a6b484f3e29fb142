#!/usr/bin/env python3
"""DistributedDataParallel jobs for the bucket tests (test_buckets.py): one
rank of a small gloo job, recorded, with DDP's own account of its buckets.

    ddp_jobs.py CASE --out DIR          CASE: one of CASES below

Rank and world size come from RANK / WORLD_SIZE, the rendezvous from
MASTER_ADDR / MASTER_PORT.  Each rank writes DIR/rank<R>.zst (the trace) and
DIR/truth<R>.json: what DDP itself reports, read by this worker outside the
recording regions and never from the recorder --

  construction   DDP's buckets before the first step: the reducer's own
                 listing (reducer._get_zeros_like_grad_buckets(), parameter
                 names per bucket in bucket index order) and its logger data
  steps          the same after every step, plus ddp._has_rebuilt_buckets and
                 whether the step synchronised gradients (no_sync)
  params         every parameter of the model: name (as the module tree names
                 it), nbytes, requires_grad, and whether DDP manages it
  forward_order  the modules in the order of their first forward (step 1)
  cap, first_cap what this worker configured (bucket_cap_mb in bytes,
                 dist._DEFAULT_FIRST_BUCKET_BYTES when DDP was constructed)
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from commdebug import Recorder  # noqa: E402

DDP_NAME = "DistributedDataParallel"


class Uneven(nn.Module):
    """Layers of very different sizes, one frozen parameter."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 96)
        self.mid = nn.Linear(96, 40)
        self.wide = nn.Linear(40, 200)
        self.out = nn.Linear(200, 10)
        self.mid.bias.requires_grad_(False)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        x = self.wide(self.mid(x))
        return self.out(torch.relu(x))


class Branchy(nn.Module):
    """Registered in another order than it runs; ``unused`` never runs;
    ``side`` runs but DDP is told to ignore it."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(64, 4)
        self.embed = nn.Linear(16, 64)
        self.unused = nn.Linear(64, 256)
        self.used = nn.Linear(64, 64)
        self.side = nn.Linear(16, 64)
        self._ddp_params_and_buffers_to_ignore = ["side.weight", "side.bias"]

    def forward(self, x):
        s = self.side(x)
        h = torch.relu(self.embed(x)) + s
        return self.head(torch.relu(self.used(h)))


# name: (model, input width, DDP keyword arguments, first bucket bytes or None
# (DDP's default), steps, steps run under no_sync)
CASES = {
    "rebuild": (Uneven, 32, dict(bucket_cap_mb=0.015), 2048, 4, ()),
    "unused": (Branchy, 16, dict(bucket_cap_mb=0.02, find_unused_parameters=True),
               4096, 4, (3,)),
    "static": (Uneven, 32, dict(bucket_cap_mb=0.02, static_graph=True), None, 4, ()),
    "caps": (Uneven, 32, dict(bucket_cap_mb=0.01, find_unused_parameters=True), 512, 2, ()),
    # As "rebuild", with the recorder told that DDP's buckets are too large
    # to list through the reducer: it takes the rebuilt buckets from DDP's
    # logger, which reports them one forward later.
    "late": (Uneven, 32, dict(bucket_cap_mb=0.015), 2048, 4, ()),
}


def logging_data(ddp):
    d = ddp._get_ddp_logging_data()
    return {k: v for k, v in d.items() if isinstance(v, (int, str)) and
            ("bucket" in k or "indices" in k or k in ("iteration", "num_parameter_tensors",
                                                       "find_unused_parameters",
                                                       "gradient_as_bucket_view"))}


def reducer_buckets(ddp, names):
    """DDP's current buckets as its reducer lists them: parameter names per
    bucket, in bucket index order."""
    gbs = ddp.reducer._get_zeros_like_grad_buckets()
    out = []
    for gb in sorted(gbs, key=lambda b: b.index()):
        out.append([names[id(p)] for p in gb.parameters()])
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    make, width, kwargs, first, steps, unsynced = CASES[args.case]

    if args.case == "late":
        import commdebug.recorder
        commdebug.recorder._DDP_LIST_LIMIT = 0
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = make()
    if first is not None:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first
    first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    ddp = nn.parallel.DistributedDataParallel(model, **kwargs)
    names = {id(p): DDP_NAME + "." + n for n, p in ddp.named_parameters()}

    ignored = set(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
    construction = {"buckets": reducer_buckets(ddp, names), "logging": logging_data(ddp)}
    managed = set(n for b in construction["buckets"] for n in b)
    params = [{"name": DDP_NAME + "." + n, "nbytes": p.numel() * p.element_size(),
               "requires_grad": p.requires_grad, "managed": DDP_NAME + "." + n in managed,
               "ignored": n[len("module."):] in ignored}
              for n, p in ddp.named_parameters()]

    # The modules in the order of their first forward (module-local pre-hooks,
    # removed after the first step).
    order = []
    tree = {ddp: DDP_NAME}
    for n, m in ddp.named_modules():
        if n:
            tree[m] = DDP_NAME + "." + n

    def pre(m, _inputs):
        if tree[m] not in order:
            order.append(tree[m])
    handles = [m.register_forward_pre_hook(pre) for m in tree]

    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"))
    per_step = []
    for step in range(1, steps + 1):
        x = torch.randn(8, width) + rank
        synced = step not in unsynced
        with rec(label="step %d" % step):
            opt.zero_grad()
            if synced:
                ddp(x).square().mean().backward()
            else:
                with ddp.no_sync():
                    ddp(x).square().mean().backward()
            opt.step()
        if step == 1:
            for h in handles:
                h.remove()
        per_step.append({"step": step, "synced": synced,
                         "has_rebuilt": bool(ddp._has_rebuilt_buckets),
                         "buckets": reducer_buckets(ddp, names),
                         "logging": logging_data(ddp)})
    rec.close()
    truth = {"case": args.case, "rank": rank, "world_size": world, "torch": torch.__version__,
             "cap": ddp.bucket_bytes_cap, "first_cap": first_cap,
             "find_unused": bool(ddp.find_unused_parameters),
             "static_graph": bool(ddp.static_graph),
             "grad_as_view": bool(ddp.gradient_as_bucket_view),
             "params": params, "forward_order": order,
             "construction": construction, "steps": per_step,
             "trace": os.path.basename(rec.path)}
    with open(os.path.join(args.out, "truth%d.json" % rank), "w") as f:
        json.dump(truth, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
