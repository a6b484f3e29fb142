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
  cap            DDP's bucket_bytes_cap (bucket_cap_mb in bytes)
  first_cap      the first-bucket cap DDP gave its reducer: DDP's own
                 _bucket_config.first_bucket_bytes_cap where DDP has one
                 (torch 2.x: its bucket_cap_mb when given), its
                 bucket_bytes_cap where its bucket_bytes_cap_default is False
                 (2.x before _bucket_config, 2.11 among them), else
                 dist._DEFAULT_FIRST_BUCKET_BYTES when DDP was constructed
  default_first_cap  dist._DEFAULT_FIRST_BUCKET_BYTES then
  rebuild_check  DDP's rebuilt buckets recomputed with its own assignment
                 function from their gradient-ready order and the limits
                 [first_cap, cap] (the rebuild's rule), to show that first_cap
                 is the cap DDP used
  ddpoptimizer   (torch 2.x, cases in DDPO_CASES, rank 0) what torch's own
                 DDPOptimizer logs for this model: DDPOptimizer built as
                 torch.compile builds it (DDP's bucket_bytes_cap alone), its
                 compile_fn run on torch.fx.symbolic_trace of the model DDP
                 wraps, the records of its logger
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import faulthandler  # noqa: E402
import signal  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from commdebug import Recorder  # noqa: E402

# the test harness sends SIGUSR2 to a rank that hangs: every thread's stack to the log
faulthandler.register(signal.SIGUSR2, all_threads=True)

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


class Linear6(nn.Sequential):
    """Six Linear(512, 512): 1,050,624 bytes each."""

    def __init__(self):
        super().__init__(*[nn.Linear(512, 512) for _ in range(6)])


class Block(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class EmbedBlocks(nn.Module):
    """An embedding, blocks of unequal sizes (hidden 512, 1024, 256) and a
    head: 1,024,000 + 1,053,696 + 2,104,320 + 528,384 + 10,280 bytes."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 256)
        self.blocks = nn.ModuleList([Block(256, h) for h in (512, 1024, 256)])
        self.head = nn.Linear(256, 10)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(dim=1))


def token_ids(width):
    return torch.randint(0, 1000, (4, width))


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
    # Caps of 1 MiB and more, DDP's default first cap (DDPOptimizer refuses
    # a cap below its first cap): issue 20's job, and an embedding with
    # blocks of unequal sizes.
    "linear6": (Linear6, 512, dict(bucket_cap_mb=1.5), None, 3, ()),
    "embed": (EmbedBlocks, 16, dict(bucket_cap_mb=2), None, 3, ()),
}
# Cases whose input is token ids of that many columns.
TOKENS = ("embed",)
# Cases for which rank 0 runs torch's DDPOptimizer on the model (torch 2.x).
DDPO_CASES = ("linear6", "embed")


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


def first_cap_of(ddp):
    """The first-bucket cap DDP handed its reducer, as DDP's code keeps it."""
    cfg = getattr(ddp, "_bucket_config", None)
    if cfg is not None:
        return int(cfg.first_bucket_bytes_cap)
    if getattr(ddp, "bucket_bytes_cap_default", None) is False:
        # torch 2.x before _bucket_config (2.11 among them): the reducer gets
        # bucket_bytes_cap as its first cap when bucket_cap_mb was given
        return int(ddp.bucket_bytes_cap)
    return int(dist._DEFAULT_FIRST_BUCKET_BYTES)


def rebuild_check(ddp, names, rebuilt, first_cap):
    """DDP's rebuilt buckets recomputed by dist._compute_bucket_assignment_by_size
    from their order (the order gradients became ready) with the limits
    [first_cap, cap]: equal to DDP's when first_cap is the cap it used."""
    by_name = {names[id(p)]: p for p in ddp.parameters() if id(p) in names}
    order = [n for b in rebuilt for n in b]
    idx = dist._compute_bucket_assignment_by_size(
        [by_name[n] for n in order], [first_cap, ddp.bucket_bytes_cap],
        [False] * len(order))
    if isinstance(idx, tuple):
        idx = idx[0]
    return [[order[i] for i in b] for b in idx]


def ddpoptimizer_log(ddp, example):
    """What torch's DDPOptimizer logs for the model DDP wraps, or None where
    torch has none (1.13).  Built as torch.compile builds it (convert_frame:
    DDPOptimizer(bucket_bytes_cap=ddp.bucket_bytes_cap, backend_compile_fn=...)),
    run on the model's torch.fx.symbolic_trace graph."""
    try:
        from torch._dynamo.backends.distributed import DDPOptimizer
    except ImportError:
        return None
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append({"level": record.levelname, "msg": record.getMessage()})

    log = logging.getLogger("torch._dynamo.backends.distributed")
    handler = Keep(logging.DEBUG)
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    error = None
    try:
        ddpo = DDPOptimizer(bucket_bytes_cap=ddp.bucket_bytes_cap,
                            backend_compile_fn=lambda gm, inputs: gm.forward)
        gm = torch.fx.symbolic_trace(ddp.module)
        try:
            ddpo.compile_fn(gm, [example])
        except Exception as e:  # after its logs: splitting a graph without dynamo's metadata
            error = "%s: %s" % (type(e).__name__, e)
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    return {"cap": ddpo.bucket_bytes_cap, "first_cap": ddpo.first_bucket_cap,
            "buckets": [list(b.params) for b in reversed(getattr(ddpo, "buckets", []))],
            "records": records, "error": error}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    make, width, kwargs, first, steps, unsynced = CASES[args.case]

    if args.case == "late":
        import commdebug._ddp
        commdebug._ddp._DDP_LIST_LIMIT = 0
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = make()
    if first is not None:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first
    default_first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    ddp = nn.parallel.DistributedDataParallel(model, **kwargs)
    first_cap = first_cap_of(ddp)
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
        x = token_ids(width) if args.case in TOKENS else torch.randn(8, width) + rank
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
    rebuilt = next((s["buckets"] for s in per_step if s["has_rebuilt"]), None)
    ddpo = None
    if args.case in DDPO_CASES and rank == 0:
        ddpo = ddpoptimizer_log(ddp, token_ids(width) if args.case in TOKENS
                                else torch.randn(8, width))
    truth = {"case": args.case, "rank": rank, "world_size": world, "torch": torch.__version__,
             "cap": ddp.bucket_bytes_cap, "first_cap": first_cap,
             "default_first_cap": default_first_cap,
             "rebuild_check": rebuild_check(ddp, names, rebuilt, first_cap) if rebuilt else None,
             "ddpoptimizer": ddpo,
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
