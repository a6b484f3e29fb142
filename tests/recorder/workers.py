#!/usr/bin/env python3
"""Worker processes for the recorder tests: one rank of a small gloo job.

    workers.py tp      --out DIR [--steps N]   hand-written tensor-parallel transformer
    workers.py ddp     --out DIR [--steps N]   DistributedDataParallel, several buckets
    workers.py c10d    --out DIR               each gloo collective once
    workers.py forever --out DIR               records until killed (SIGKILL test)
    workers.py diverge --out DIR --how none|skip|silent|type|size --odd-rank K [--steps N]
                                               the TP transformer where, in step 2, rank K
                                               skips an all_reduce, all-gathers instead or
                                               all-reduces twice the bytes (see run_diverge;
                                               traces in DIR/traces/)

Rank and world size come from RANK / WORLD_SIZE, the rendezvous from
MASTER_ADDR / MASTER_PORT (env://).  Each worker writes its trace to
DIR/rank<R>.zst and, next to it, DIR/truth<R>.json: what the worker itself
knows about the run, counted by its own code and not by the recorder
(collective calls it made, DDP's own bucket report, module names).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import faulthandler  # noqa: E402
import signal  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from commdebug import Recorder  # noqa: E402

# the test harness sends SIGUSR2 to a rank that hangs: every thread's stack to the log
faulthandler.register(signal.SIGUSR2, all_threads=True)
from commdebug import _nccl  # noqa: E402

# COMMDEBUG_TEST_TAGSPY=FILE: stand-ins for the NCCL-side recorder's
# commdebug_nccl_tag / untag that log each call; FILE<R>.json gets the log.
if os.environ.get("COMMDEBUG_TEST_TAGSPY"):
    import atexit

    _spy = []

    def _spy_tag(pg, seq):
        _spy.append(["tag", pg.decode(), seq])
        return 0

    def _spy_untag():
        _spy.append(["untag"])

    def _spy_write():
        with open("%s%s.json" % (os.environ["COMMDEBUG_TEST_TAGSPY"],
                                 os.environ.get("RANK", "0")), "w") as f:
            json.dump(_spy, f)

    _nccl.tagger = lambda: (_spy_tag, _spy_untag)
    atexit.register(_spy_write)


def init():
    dist.init_process_group("gloo", init_method="env://")
    return dist.get_rank(), dist.get_world_size()


def write_truth(out, rank, truth):
    with open(os.path.join(out, "truth%d.json" % rank), "w") as f:
        json.dump(truth, f, indent=1)


# ---------------------------------------------------------------- tensor parallel
class Comm:
    """The worker's own ledger of the collectives it issues.

    ``seq`` numbers them the way the recorder does: per process group (there
    is one here), 1-based, every collective call made while recording.  A
    divergence plan (``diverge``, see run_diverge) makes one rank depart from
    the others at one all-reduce."""

    def __init__(self):
        self.region = 0
        self.calls = []   # [region, issuing module fqn, "forward"|"backward", packet]
        self.seq = 0
        self.plan = None  # run_diverge: {"step", "module", "phase", "how", "odd", ...}
        self.div = None   # the divergence, once reached: what the other ranks issue there
        self.issued = None  # what this rank issued at the diverging seq
        self.log = []     # with a plan: [region, seq, packet, module, phase, bytes, dtype]

    def _issue(self, packet, fqn, direction, t):
        self.seq += 1
        self.calls.append([self.region, fqn, direction, packet])
        if self.plan is None:
            return
        nbytes = t.numel() * t.element_size()
        self.log.append([self.region, self.seq, packet, fqn, direction, nbytes, str(t.dtype)])
        if self.div is not None and self.seq >= self.div["seq"]:
            # About to issue a collective at or after the diverging position
            # (which may block): say what this rank issued there, and its log
            # up to this call, before it calls it.
            if self.seq == self.div["seq"]:
                self.issued = {"collective": packet, "module": fqn, "phase": direction,
                               "bytes": nbytes, "dtype": str(t.dtype)}
            self.plan["write"](dict(self.div, issued=self.issued))

    def _call(self, fn):
        if self.plan is None:
            return fn()
        try:
            return fn()
        except Exception as e:  # a peer's gloo aborted: stay, like the hung ranks
            sys.stderr.write("collective failed: %s\n" % e)
            sys.stderr.flush()
            while True:
                time.sleep(1)

    def all_reduce(self, t, fqn, direction):
        plan = self.plan
        if (plan is not None and self.div is None and self.region == plan["step"]
                and fqn == plan["module"] and direction == plan["phase"]):
            self.div = {"pg": plan["pg"], "seq": self.seq + 1,
                        "collective": "c10d.allreduce_", "module": fqn, "phase": direction,
                        "bytes": t.numel() * t.element_size(), "dtype": str(t.dtype)}
            if plan["odd"]:
                how = plan["how"]
                if how in ("skip", "silent"):
                    return t          # and the next collective comes at this seq
                if how == "type":
                    parts = self.all_gather(t, fqn, direction)
                    return parts[dist.get_rank()]
                if how == "size":
                    # Late, so that the others' position is flushed before gloo
                    # aborts them on the longer message.
                    time.sleep(1.5)
                    big = torch.cat([t, t], dim=-1)
                    self._issue("c10d.allreduce_", fqn, direction, big)
                    self._call(lambda: dist.all_reduce(big))
                    return t
        self._issue("c10d.allreduce_", fqn, direction, t)
        self._call(lambda: dist.all_reduce(t))
        return t

    def all_gather(self, t, fqn, direction):
        self._issue("c10d.allgather_", fqn, direction, t)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        self._call(lambda: dist.all_gather(parts, t.contiguous()))
        return parts


COMM = Comm()


class CopyToTP(torch.autograd.Function):
    """Identity forward, all-reduce of the input gradient backward (Megatron's f)."""

    @staticmethod
    def forward(ctx, x, fqn):
        ctx.fqn = fqn
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return COMM.all_reduce(g.clone(), ctx.fqn, "backward"), None


class ReduceFromTP(torch.autograd.Function):
    """All-reduce forward, identity backward (Megatron's g)."""

    @staticmethod
    def forward(ctx, x, fqn):
        return COMM.all_reduce(x.clone(), fqn, "forward")

    @staticmethod
    def backward(ctx, g):
        return g, None


class GatherFromTP(torch.autograd.Function):
    """All-gather along the last dim forward, keep the own slice backward."""

    @staticmethod
    def forward(ctx, x, fqn):
        ctx.n = x.shape[-1]
        return torch.cat(COMM.all_gather(x, fqn, "forward"), dim=-1)

    @staticmethod
    def backward(ctx, g):
        r = dist.get_rank()
        return g[..., r * ctx.n:(r + 1) * ctx.n].contiguous(), None


class ColumnParallelLinear(nn.Module):
    def __init__(self, fin, fout, world, gather_output=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout // world, fin) * 0.1)
        self.bias = nn.Parameter(torch.zeros(fout // world))
        self.gather_output = gather_output
        self.fqn = None  # set by the worker from named_modules()

    def forward(self, x):
        y = F.linear(CopyToTP.apply(x, self.fqn), self.weight, self.bias)
        if self.gather_output:
            y = GatherFromTP.apply(y, self.fqn)
        return y


class RowParallelLinear(nn.Module):
    def __init__(self, fin, fout, world):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout, fin // world) * 0.1)
        self.bias = nn.Parameter(torch.zeros(fout))
        self.fqn = None

    def forward(self, x):
        return ReduceFromTP.apply(F.linear(x, self.weight), self.fqn) + self.bias


class Attention(nn.Module):
    def __init__(self, dim, heads, world):
        super().__init__()
        self.local_heads = heads // world
        self.head_dim = dim // heads
        self.qkv = ColumnParallelLinear(dim, 3 * dim, world)
        self.proj = RowParallelLinear(dim, dim, world)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = [t.reshape(b, s, self.local_heads, self.head_dim).transpose(1, 2)
                   for t in (q, k, v)]
        att = (q @ k.transpose(-1, -2)) / self.head_dim ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, dim, hidden, world):
        super().__init__()
        self.fc1 = ColumnParallelLinear(dim, hidden, world)
        self.act = nn.GELU()
        self.fc2 = RowParallelLinear(hidden, dim, world)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, world):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, world)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden, world)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, vocab, dim, heads, hidden, layers, seq, world):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.layers = nn.ModuleList([Block(dim, heads, hidden, world) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.output = ColumnParallelLinear(dim, vocab, world, gather_output=True)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def module_table(model, root):
    """fqn -> (type, parent fqn) for the modules that run, named like
    CommDebugMode names them (root = class name), skipping containers that
    are never called (ModuleList)."""
    table = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList):
            continue
        fqn = root if not name else root + "." + name
        parent = "Global" if not name else None
        if name:
            parts = name.split(".")
            while parts:
                parts.pop()
                pname = ".".join(parts)
                pm = model.get_submodule(pname) if pname else model
                if not isinstance(pm, nn.ModuleList):
                    parent = root + ("." + pname if pname else "")
                    break
        cls = type(m)
        table[fqn] = [cls.__module__ + "." + cls.__qualname__, parent]
    return table


def train(model, opt, rec, vocab, batch, seq, steps):
    """STEPS training steps on random tokens, one recorded region each."""
    for step in range(1, steps + 1):
        idx = torch.randint(0, vocab, (batch, seq))
        tgt = torch.randint(0, vocab, (batch, seq))
        COMM.region = rec.region + 1
        with rec(label="step %d" % step):
            opt.zero_grad()
            logits = model(idx)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
            loss.backward()
            opt.step()
    rec.close()


def run_tp(args):
    rank, world = init()
    torch.manual_seed(0)
    vocab, dim, heads, hidden, layers, seq, batch = 64, 32, 4, 64, 2, 8, 4
    model = Transformer(vocab, dim, heads, hidden, layers, seq, world)
    for name, m in model.named_modules():
        if isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
            m.fqn = "Transformer." + name
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"), light=args.light)
    train(model, opt, rec, vocab, batch, seq, args.steps)
    write_truth(args.out, rank, {
        "rank": rank, "world_size": world, "regions": args.steps,
        "calls": COMM.calls, "modules": module_table(model, "Transformer"),
    })
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------- DDP
def run_ddp(args):
    rank, world = init()
    torch.manual_seed(0)
    # Small buckets so that DDP makes several.  (Without find_unused_parameters
    # DDP reduces everything in one bucket in the first step, then rebuilds
    # its buckets in gradient-ready order: the first one limited by
    # dist._DEFAULT_FIRST_BUCKET_BYTES, read at construction, the others by
    # bucket_cap_mb.)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 96 * 1024
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64),
                          nn.ReLU(), nn.Linear(64, 8))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"), light=args.light)
    per_step = []
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 128)
        with rec(label="step %d" % step):
            opt.zero_grad()
            ddp(x).square().mean().backward()
            opt.step()
        # DDP's own account of its buckets, as of after this step.
        data = ddp._get_ddp_logging_data()
        per_step.append({k: data.get(k) for k in ("bucket_sizes", "rebuilt_bucket_sizes",
                                                   "has_rebuilt_buckets", "num_buckets",
                                                   "bucket_cap_bytes")})
    rec.close()
    data = ddp._get_ddp_logging_data()
    write_truth(args.out, rank, {
        "rank": rank, "world_size": world, "regions": args.steps,
        "per_step": per_step,
        "final": {k: v for k, v in data.items() if isinstance(v, (int, str))
                  and "bucket" in k},
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    })
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------- c10d
def run_c10d(args):
    """Each collective gloo supports on this torch, once, in one region."""
    rank, world = init()
    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"), light=args.light)
    x = torch.arange(8, dtype=torch.float32) + rank
    calls = []

    def call(name, nbytes, fn):
        calls.append([name, nbytes])
        fn()

    sub = dist.new_group(list(range(world)))
    with rec(label="c10d"):
        call("c10d.allreduce_.default", 32, lambda: dist.all_reduce(x))
        call("c10d.allreduce_.default", 32, lambda: dist.all_reduce(x, group=sub))
        call("c10d.broadcast_.default", 32, lambda: dist.broadcast(x, 0))
        call("c10d.reduce_.default", 32, lambda: dist.reduce(x, 0))
        call("c10d.allgather_.default", 32,
             lambda: dist.all_gather([torch.empty(8) for _ in range(world)], x))
        call("c10d.gather_.default", 32,
             lambda: dist.gather(x, [torch.empty(8) for _ in range(world)] if rank == 0 else None, 0))
        # scatter: the root sends world*8 floats, the others only receive 8.
        call("c10d.scatter_.default", 32 * world if rank == 0 else 32,
             lambda: dist.scatter(torch.empty(8),
                                  [torch.ones(8) for _ in range(world)] if rank == 0 else None, 0))
        call("c10d.allreduce_coalesced_.default", 64,
             lambda: dist.all_reduce_coalesced([x, x.clone()]))
        call("c10d.allgather_coalesced_.default", 32,
             lambda: dist.all_gather_coalesced([[torch.empty(8)] for _ in range(world)], [x]))
        if rank == 0:
            call("c10d.send.default", 32, lambda: dist.send(x, 1))
        elif rank == 1:
            call("c10d.recv_.default", 32, lambda: dist.recv(x, 0))
        call("c10d.barrier.default", 0, lambda: dist.barrier())
    rec.close()
    groups = {"world": dist.distributed_c10d._get_default_group(), "sub": sub}
    names = {}
    for key, g in groups.items():
        c = dist.distributed_c10d
        world_obj = getattr(c, "_world", None)
        table = getattr(world_obj, "pg_names", None) if world_obj is not None else None
        names[key] = (table if table is not None else c._pg_names)[g]
    write_truth(args.out, rank, {"rank": rank, "world_size": world, "calls": calls,
                                 "groups": names, "backend": dist.get_backend()})
    dist.barrier()
    dist.destroy_process_group()


# -------------------------------------------------------------------------- forever
def run_forever(args):
    """Record step after step until killed.  After step 2 has been closed (its
    region flushed) write DIR/ready<R>; every step takes three seconds, so the
    writer's timer flushes frames in the middle of a region."""
    rank = int(os.environ.get("RANK", "0"))
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"), light=args.light)
    step = 0
    while True:
        step += 1
        with rec(label="step %d" % step):
            t_end = time.time() + 3.0
            while time.time() < t_end:
                model(torch.randn(2, 16)).sum().backward()
                time.sleep(0.002)
        if step == 2:
            with open(os.path.join(args.out, "ready%d" % rank), "w") as f:
                f.write("%d\n" % rec.region)


# ------------------------------------------------------------------------- diverge
DIVERGE_AT = {
    # how: (module, phase) of the all-reduce of step 2 where rank K departs
    "none": ("Transformer.layers.0.attn.proj", "forward"),
    # the last all-reduce of the forward: the next collective is the logits'
    # all-gather (an all-reduce next would be matched by gloo, shifted by one)
    "skip": ("Transformer.layers.1.mlp.fc2", "forward"),
    "type": ("Transformer.layers.0.mlp.fc1", "backward"),
    # a backward all-reduce: the next ones are all-reduces of the same size,
    # which gloo matches (shifted by one) until the logits' all-gather of the
    # next step meets the others' last forward all-reduce
    "silent": ("Transformer.layers.1.attn.qkv", "backward"),
    "size": ("Transformer.layers.0.attn.proj", "forward"),
}


def run_diverge(args):
    """The TP transformer (sizes that divide by 2, 3 and 4 ranks), --steps
    steps, one region each; in step 2, at the all-reduce DIVERGE_AT[how]
    names, rank --odd-rank:

      skip  does not call it; its next collective (Transformer.output's
            all-gather) takes that seq, and every rank blocks there;
      silent  skips a backward all-reduce: gloo pairs the following
            all-reduces shifted by one, step 2 ends everywhere, and everyone
            blocks in step 3 where rank K all-gathers (use --steps 3);
      type  calls all_gather on the same tensor instead; everyone blocks;
      size  waits 1.5 s, then all-reduces twice the bytes; gloo then aborts a
            peer (terminate: the longer message) and the rest see errors;
      none  does what the others do: the run ends normally.

    A rank that gets an error from a collective sleeps (the harness SIGKILLs
    everything once the traces have stopped growing).  Right before issuing
    its collective at the diverging position, and again before each later
    one, each rank writes DIR/truth<R>.json: rank, how, odd_rank, the
    position ("pg", "seq", counted by the worker), what the other ranks issue
    there ("collective", "module", "phase", "bytes", "dtype"), what this rank
    issued there ("issued"), its ledger ("calls": [region, module, phase,
    packet]; "log": [region, seq, packet, module, phase, bytes, dtype]) up to
    and including the collective it is about to call, and the module table.  With how=none the truth is rewritten at the end with "done": true.
    The trace is DIR/traces/rank<R>.zst (a directory of traces only)."""
    import datetime
    rank = int(os.environ["RANK"])
    # Give up on our own if the harness never comes (gloo wait raises then).
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=args.max_seconds))
    world = dist.get_world_size()

    def watchdog():
        time.sleep(args.max_seconds + 10)
        os._exit(5)

    import threading
    threading.Thread(target=watchdog, daemon=True).start()
    torch.manual_seed(0)
    vocab, dim, heads, hidden, layers, seq, batch = 96, 48, 12, 96, 2, 8, 4
    model = Transformer(vocab, dim, heads, hidden, layers, seq, world)
    for name, m in model.named_modules():
        if isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
            m.fqn = "Transformer." + name
    modules = module_table(model, "Transformer")
    module, phase = DIVERGE_AT[args.how]
    c = dist.distributed_c10d
    world_obj = getattr(c, "_world", None)
    table = getattr(world_obj, "pg_names", None) if world_obj is not None else None
    pg = (table if table is not None else c._pg_names)[c._get_default_group()]

    def write(div):
        truth = dict(div, rank=rank, world_size=world, how=args.how, odd_rank=args.odd_rank,
                     calls=COMM.calls, log=COMM.log, modules=modules)
        tmp = os.path.join(args.out, "truth%d.json.tmp" % rank)
        with open(tmp, "w") as f:
            json.dump(truth, f, indent=1)
        os.replace(tmp, os.path.join(args.out, "truth%d.json" % rank))

    COMM.plan = {"step": 2, "module": module, "phase": phase, "how": args.how, "pg": pg,
                 "odd": rank == args.odd_rank and args.how != "none", "write": write}
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder(os.path.join(args.out, "traces", "rank{rank}.zst"))
    train(model, opt, rec, vocab, batch, seq, args.steps)
    if args.how == "none":
        with open(os.path.join(args.out, "truth%d.json" % rank)) as f:
            div = json.load(f)
        write(dict(div, done=True, collectives=COMM.seq))
        dist.barrier()
        dist.destroy_process_group()
        return
    # Not reached by any rank when the plan works: they all block at the
    # diverging position.
    sys.stderr.write("diverge: rank %d finished %d steps\n" % (rank, args.steps))
    while True:
        time.sleep(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["tp", "ddp", "c10d", "forever", "diverge"])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--light", action="store_true", help="tp, ddp, c10d: record in light mode")
    p.add_argument("--how", choices=sorted(DIVERGE_AT), default="none",
                   help="diverge: what the odd rank does (default none)")
    p.add_argument("--odd-rank", type=int, default=1, help="diverge: the rank that departs")
    p.add_argument("--max-seconds", type=int, default=60,
                   help="diverge: gloo timeout; the process exits 10 s after it regardless")
    args = p.parse_args()
    {"tp": run_tp, "ddp": run_ddp, "c10d": run_c10d, "forever": run_forever,
     "diverge": run_diverge}[args.what](args)


if __name__ == "__main__":
    main()
