#!/usr/bin/env python3
"""Real failing jobs for post-mortem tests: a 4-rank gloo job through the recorder
in which chosen ranks do something wrong, the way real training jobs fail.

As a worker (one rank; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):

    faulty_jobs.py --out DIR [--steps N] [--groups | --mesh] [--fsdp] [--light [--keep N]]
                   [--timeout S]
                   [--fault KIND:RANK[:STEP[:MODULE[:ARG]]]]...

As a harness (from a test):

    job = run_job(out, ["swap:1"], world=4)     or run_scenario(out, "swap")
    job.rcs            exit status of each rank (negative: killed by that signal)
    job.ledgers[r]     what rank r did, in its own words (see below)
    job.traces         the directory of the recorder's traces (rank<R>.zst)

The model, ``Net``: ``Net.blocks.0`` .. ``Net.blocks.3``, each a Linear followed by
an all-reduce of its output (forward, in the block's process group) whose
backward all-reduces the gradient (backward, same group), so every block issues one
collective forward and one backward with the same size (16 float32 per row); after
the backward, a gradient all-reduce of all parameters, flattened, from outside any
module (``Global``, world group).  One recorded region per step, labelled
``step N``.  With ``--groups`` the blocks use tensor-parallel pairs ({0,1}, {2,3},
...) and only the gradient all-reduce uses the world group; otherwise every
collective is in the world group.

Faults (STEP defaults to 2, MODULE to Net.blocks.1; all at the block's forward
all-reduce unless said):

    skip      the rank does not issue that all-reduce (its next collective takes
              that seq: every later one is shifted by one)
    coll      the rank all-gathers the same tensor instead of all-reducing it
    size      the rank all-reduces twice the elements (gloo aborts a process on
              the longer message)
    swap      the rank runs MODULE and the next block in swapped order in STEP:
              the same collectives with the same sizes, issued from swapped
              modules; gloo pairs them and the job "succeeds" with wrong numbers
    sleep     the rank sleeps ARG seconds (default 20) inside MODULE before its
              all-reduce: a straggler (STEP defaults to 3); the others time out
    kill      the rank SIGKILLs itself inside MODULE before its all-reduce
    abort     the rank calls os.abort() inside MODULE before its all-reduce

The ledger, DIR/ledger<R>.jsonl, is written by the worker with one unbuffered
os.write per line (O_APPEND), so it survives any death, and each collective's line
is written *before* the collective is handed to gloo:

    {"ev": "start", "rank", "world_size", "pid", "faults",
     "groups": {pg name: [ranks]}}          the world group and the rank's own pair
    {"ev": "coll", "pg", "seq", "collective", "module", "phase", "step", "bytes",
     "dtype", "t_ns"}                       every collective issued; seq counted by
                                            the worker per process group, 1-based
    {"ev": "fault", "kind", "step", "module", "t_ns", ...}   right when the fault
                                            happens (before the odd call or sleep)
    {"ev": "error", "msg", "t_ns"}          a collective raised (timeout, peer gone)
    {"ev": "done", "t_ns", "sum"}           the job ended normally; sum: a checksum
                                            of the parameters (a silent desync
                                            shows as different sums)

With ``--mesh`` (torch 2.x) the ranks form a 2-D mesh, dp x tp, made by
init_device_mesh: the blocks all-reduce over their tp pair ({0,1}, {2,3}), the
gradients over their dp pair ({0,2}, {1,3}), nothing over the world group.

With ``--fsdp`` (torch 2.x) the job is an FSDP2 one instead, with faults of its
own and a ledger without "coll" lines (FSDP issues its collectives itself): see
fsdp_worker.

``pg`` is the process group name the recorder uses (c10d's name for the group:
"0" for the world group, "1", "2", ... for new groups in creation order), and
``t_ns`` is time.time_ns(), the clock of the trace's meta t0.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PYDIR = os.path.join(REPO, "python")

BLOCKS = 4
DIM = 16
BATCH = 4
KINDS = ("skip", "coll", "size", "swap", "sleep", "kill", "abort")


# ------------------------------------------------------------------------ faults
class Fault:
    def __init__(self, spec):
        parts = spec.split(":")
        if len(parts) < 2 or parts[0] not in KINDS:
            raise ValueError("bad fault %r: KIND:RANK[:STEP[:MODULE[:ARG]]], KIND one of %s"
                             % (spec, ", ".join(KINDS)))
        self.kind = parts[0]
        self.rank = int(parts[1])
        self.step = int(parts[2]) if len(parts) > 2 and parts[2] else (
            3 if self.kind == "sleep" else 2)
        self.module = parts[3] if len(parts) > 3 and parts[3] else "Net.blocks.1"
        self.arg = float(parts[4]) if len(parts) > 4 and parts[4] else 20.0

    def spec(self):
        return "%s:%d:%d:%s:%g" % (self.kind, self.rank, self.step, self.module, self.arg)


# The failures a post-mortem must explain, as run_job arguments, with who is to
# blame: the rank that did something wrong, in which step and module.  (Which
# rank dies is often another one: gloo aborts the receiver of a longer message.)
SCENARIOS = {
    "skip": dict(faults=["skip:1"], culprits={1: ("Net.blocks.1", 2)}),
    "coll": dict(faults=["coll:1"], culprits={1: ("Net.blocks.1", 2)}),
    "size": dict(faults=["size:1"], culprits={1: ("Net.blocks.1", 2)}),
    "swap": dict(faults=["swap:1"], culprits={1: ("Net.blocks.1", 2)}),
    "straggler": dict(faults=["sleep:3:3:Net.blocks.1:8"], culprits={3: ("Net.blocks.1", 3)}),
    "kill": dict(faults=["kill:2"], culprits={2: ("Net.blocks.1", 2)}),
    "abort": dict(faults=["abort:2"], culprits={2: ("Net.blocks.1", 2)}),
    "two": dict(faults=["size:1", "kill:3:2:Net.blocks.2"], groups=True,
                culprits={1: ("Net.blocks.1", 2), 3: ("Net.blocks.2", 2)}),
    # A pair is a tie at every position: the higher rank of the pair is the
    # culprit, so "the lowest rank is the reference" would blame its peer.
    "pair-size": dict(faults=["size:3"], groups=True, culprits={3: ("Net.blocks.1", 2)}),
    # A 2-D mesh (torch 2.x, init_device_mesh): dp 2 x tp 2; the blocks
    # all-reduce over their tp pair, the gradients over their dp pair.
    "mesh-size": dict(faults=["size:3"], mesh=True, culprits={3: ("Net.blocks.1", 2)}),
    "mesh-skip": dict(faults=["skip:3"], mesh=True, culprits={3: ("Net.blocks.1", 2)}),
    # (on torch 2.14 gloo does not time the mismatched pair out: the job hangs,
    # and is killed once its traces stop growing, as fsdp-tp-skip below)
    "mesh-coll": dict(faults=["coll:3"], mesh=True, quiet=3, culprits={3: ("Net.blocks.1", 2)}),
    "mesh-straggler": dict(faults=["sleep:3:3:Net.blocks.1:8"], mesh=True,
                           culprits={3: ("Net.blocks.1", 3)}),
    "mesh-kill": dict(faults=["kill:3"], mesh=True, culprits={3: ("Net.blocks.1", 2)}),
    # FSDP2 (torch 2.x, fully_shard over a 1-D mesh of the 4 ranks; see
    # fsdp_worker): the collectives are FSDP's all-gathers and reduce-scatters,
    # and the root module is named FSDPNet (fully_shard changes its class).
    "fsdp-skip": dict(faults=["skip:1"], fsdp=True, steps=2, timeout=3,
                      culprits={1: ("FSDPNet.blocks.1", 2)}),
    "fsdp-size": dict(faults=["size:1"], fsdp=True, steps=2,
                      culprits={1: ("FSDPNet.blocks.1", 1)}),
    "fsdp-straggler": dict(faults=["sleep:3:2:Net.blocks.1:6"], fsdp=True, steps=2, timeout=3,
                           culprits={3: ("FSDPNet.blocks.1", 2)}),
    "fsdp-kill": dict(faults=["kill:2"], fsdp=True, steps=2,
                      culprits={2: ("FSDPNet.blocks.1", 2)}),
    # FSDP2 over dp with tensor parallelism inside (fc1 column-, fc2
    # row-parallel over tp) on the 2 x 2 mesh: rank 3 leaves Net.blocks.1 out
    # in step 2, so both its pairs ({1,3} for FSDP, {2,3} for TP) lack its
    # collectives: ties in both.
    # Gloo does not time the functional all-reduces out here: the job hangs
    # and is killed once its traces stop growing.
    "fsdp-tp-skip": dict(faults=["skip:3"], fsdp=True, mesh=True, steps=2, quiet=3,
                         culprits={3: ("FSDPNet.blocks.1", 2)}),
}


def run_scenario(out, name, **kw):
    """run_job for SCENARIOS[name] (keyword arguments override)."""
    sc = dict(SCENARIOS[name])
    sc.pop("culprits")
    sc.update(kw)
    return run_job(out, **sc)


# ------------------------------------------------------------------------ worker
class Ledger:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)

    def write(self, **fields):
        fields.setdefault("t_ns", time.time_ns())
        os.write(self.fd, (json.dumps(fields, sort_keys=True) + "\n").encode())


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    sys.path.insert(0, PYDIR)
    from commdebug import Recorder

    rank = int(os.environ["RANK"])
    faults = [f for f in (Fault(s) for s in args.fault) if f.rank == rank]
    ledger = Ledger(os.path.join(args.out, "ledger%d.jsonl" % rank))
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    world = dist.get_world_size()

    def give_up():  # a hung rank that gloo never times out still ends
        time.sleep(args.max_seconds)
        ledger.write(ev="error", msg="watchdog: still running after %d s" % args.max_seconds)
        os._exit(5)

    threading.Thread(target=give_up, daemon=True).start()

    c10d = dist.distributed_c10d
    names = getattr(getattr(c10d, "_world", None), "pg_names", None) or c10d._pg_names

    def pg_name(group):
        return str(names[group if group is not None else c10d._get_default_group()])

    groups = {pg_name(None): list(range(world))}  # the world and this rank's pair
    block_group = [None] * world
    grad_group = None
    if args.mesh:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
        block_group[rank], grad_group = tp, dp
        groups[pg_name(tp)] = [r for r in range(world) if r // 2 == rank // 2]
        groups[pg_name(dp)] = [r for r in range(world) if r % 2 == rank % 2]
    elif args.groups:
        for lo in range(0, world, 2):
            members = list(range(lo, min(lo + 2, world)))
            # Group creation waits for every rank (a store barrier under this
            # timeout): generous, as ranks start seconds apart on a busy host.
            # The pairs' collectives keep it: group faults here end in aborts
            # and closed connections, not timeouts.
            g = dist.new_group(members, timeout=max(timeout, datetime.timedelta(seconds=60)))
            if rank in members:  # others get a placeholder without a name
                groups[pg_name(g)] = members
                block_group[rank] = g
    my_group = block_group[rank]
    ledger.write(ev="start", rank=rank, world_size=world, pid=os.getpid(), groups=groups,
                 faults=[f.spec() for f in faults])

    seqs = {}
    state = {"step": 0}

    def issue(collective, group, t, module, phase, call):
        pg = pg_name(group)
        seqs[pg] = seqs.get(pg, 0) + 1
        ledger.write(ev="coll", pg=pg, seq=seqs[pg], collective=collective, module=module,
                     phase=phase, step=state["step"], bytes=t.numel() * t.element_size(),
                     dtype=str(t.dtype))
        try:
            return call()
        except Exception as e:
            ledger.write(ev="error", msg=str(e).splitlines()[0] if str(e) else type(e).__name__)
            raise

    def fault_at(module, phase):
        if phase != "forward":
            return None
        for f in faults:
            if f.step == state["step"] and f.module == module and f.kind not in ("swap",):
                return f
        return None

    def all_reduce(x, module, phase):
        f = fault_at(module, phase)
        if f is not None:
            ledger.write(ev="fault", kind=f.kind, step=f.step, module=module, phase=phase)
            if f.kind == "skip":
                return x
            if f.kind == "coll":
                parts = [torch.empty_like(x) for _ in range(dist.get_world_size(my_group))]
                issue("c10d.allgather_", my_group, x, module, phase,
                      lambda: dist.all_gather(parts, x.contiguous(), group=my_group))
                return x
            if f.kind == "size":
                big = torch.cat([x, x], dim=-1).contiguous()
                issue("c10d.allreduce_", my_group, big, module, phase,
                      lambda: dist.all_reduce(big, group=my_group))
                return x
            if f.kind == "sleep":
                time.sleep(f.arg)
            elif f.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif f.kind == "abort":
                os.abort()
        issue("c10d.allreduce_", my_group, x, module, phase,
              lambda: dist.all_reduce(x, group=my_group))
        return x

    class AllReduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, module):
            ctx.module = module
            return all_reduce(x.clone(), module, "forward")

        @staticmethod
        def backward(ctx, g):
            return all_reduce(g.clone(), ctx.module, "backward"), None

    class Block(nn.Module):
        def __init__(self, name):
            super().__init__()
            self.fc = nn.Linear(DIM, DIM)
            self.name = name

        def forward(self, x):
            return torch.tanh(AllReduce.apply(self.fc(x), self.name))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block("Net.blocks.%d" % i) for i in range(BLOCKS))

        def forward(self, x):
            order = list(range(BLOCKS))
            for f in faults:
                if f.kind == "swap" and f.step == state["step"]:
                    i = int(f.module.rsplit(".", 1)[1])
                    order[i], order[i + 1] = order[i + 1], order[i]
                    ledger.write(ev="fault", kind="swap", step=f.step, module=f.module,
                                 swapped_with="Net.blocks.%d" % (i + 1))
            for i in order:
                x = self.blocks[i](x)
            return x

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(os.path.join(args.out, "traces", "rank{rank}.zst"), light=args.light,
                   keep=args.keep)
    for step in range(1, args.steps + 1):
        state["step"] = step
        torch.manual_seed(100 + step)  # the same batch on every rank
        x = torch.randn(BATCH, DIM, requires_grad=True)  # every module backward ends
        with rec(label="step %d" % step):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            # Outside the autograd engine: CommDebugMode counts it as forward.
            issue("c10d.allreduce_", grad_group, flat, "Global", "forward",
                  lambda: dist.all_reduce(flat, group=grad_group))
            flat /= dist.get_world_size(grad_group)
            off = 0
            for p in model.parameters():
                n = p.numel()
                p.grad.copy_(flat[off:off + n].view_as(p))
                off += n
            opt.step()
    rec.close()
    total = float(sum(p.detach().double().sum() for p in model.parameters()))
    ledger.write(ev="done", sum=total)
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------- FSDP2 worker
FSDP_HIDDEN = 8


def fsdp_worker(args):
    """The FSDP2 job (--fsdp): Net.blocks.0 .. Net.blocks.3, each a residual MLP
    (fc1: DIM -> FSDP_HIDDEN, tanh, fc2: back to DIM) wrapped with fully_shard
    over a 1-D mesh of every rank (with --mesh: a dp x tp mesh, fc1/fc2
    column/row-parallel over tp, fully_shard over dp), Net itself fully_shard-ed
    too.  Data parallel: each rank draws its own batch.  The collectives are
    FSDP2's own: per block an all-gather of its parameters in forward (again in
    backward, as blocks reshard after forward) and a reduce-scatter of its
    gradients in backward.  The worker cannot log them before they happen (FSDP
    issues them in its hooks), so the ledger has per step the blocks the rank
    is about to run ({"ev": "step", "step", "modules"}), and each fault, right
    before it happens.  Faults (STEP defaults to 2, MODULE to Net.blocks.1):

        skip    the rank's forward leaves MODULE out in STEP (a different code
                path): its all-gather and reduce-scatter for MODULE are missing
        size    the rank builds MODULE with twice the hidden size (a different
                model config): its shards, all-gathers and reduce-scatters differ
                in size from the first step on (the fault is logged at step 1)
        sleep   the rank sleeps ARG seconds inside MODULE in STEP, before
                FSDP's unshard of it (a pre-hook ahead of FSDP's)
        kill    the rank SIGKILLs itself there
        abort   the rank calls os.abort() there
    """
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard

    sys.path.insert(0, PYDIR)
    from commdebug import Recorder

    rank = int(os.environ["RANK"])
    faults = [f for f in (Fault(s) for s in args.fault) if f.rank == rank]
    for f in faults:
        if f.kind not in ("skip", "size", "sleep", "kill", "abort"):
            raise SystemExit("fault %s: not in an FSDP job" % f.kind)
    ledger = Ledger(os.path.join(args.out, "ledger%d.jsonl" % rank))
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    world = dist.get_world_size()

    def give_up():
        time.sleep(args.max_seconds)
        ledger.write(ev="error", msg="watchdog: still running after %d s" % args.max_seconds)
        os._exit(5)

    threading.Thread(target=give_up, daemon=True).start()

    c10d = dist.distributed_c10d
    names = getattr(getattr(c10d, "_world", None), "pg_names", None) or c10d._pg_names

    def pg_name(group):
        return str(names[group if group is not None else c10d._get_default_group()])

    groups = {pg_name(None): list(range(world))}
    if args.mesh:
        mesh2 = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh2["dp"], mesh2["tp"]
        groups[pg_name(tp_mesh.get_group())] = [r for r in range(world) if r // 2 == rank // 2]
        groups[pg_name(dp_mesh.get_group())] = [r for r in range(world) if r % 2 == rank % 2]
    else:
        dp_mesh, tp_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)), None
        groups[pg_name(dp_mesh.get_group())] = list(range(world))
    ledger.write(ev="start", rank=rank, world_size=world, pid=os.getpid(), groups=groups,
                 faults=[f.spec() for f in faults], fsdp=True)
    state = {"step": 0}

    class Block(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.fc1 = nn.Linear(DIM, hidden)
            self.fc2 = nn.Linear(hidden, DIM)

        def forward(self, x):
            return x + self.fc2(torch.tanh(self.fc1(x)))

    def block_of(f):  # MODULE is Net.blocks.N
        return int(f.module.rsplit(".", 1)[1])

    def hidden_of(i):
        for f in faults:
            if f.kind == "size" and block_of(f) == i:
                return 2 * FSDP_HIDDEN
        return FSDP_HIDDEN

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(hidden_of(i)) for i in range(BLOCKS))

        def forward(self, x):
            run = []
            for i in range(BLOCKS):
                if any(f.kind == "skip" and f.step == state["step"] and block_of(f) == i
                       for f in faults):
                    continue
                run.append(i)
            ledger.write(ev="step", step=state["step"], modules=[mod_name(i) for i in run])
            for i in run:
                x = self.blocks[i](x)
            return x

    torch.manual_seed(0)
    model = Net()
    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        for blk in model.blocks:
            parallelize_module(blk, tp_mesh, {"fc1": ColwiseParallel(),
                                              "fc2": RowwiseParallel()})
    for blk in model.blocks:
        fully_shard(blk, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    # The module names the trace has: ModTracker names the root by its class,
    # which fully_shard changed (Net -> FSDPNet).
    root = type(model).__name__

    def mod_name(i):
        return "%s.blocks.%d" % (root, i)

    for f in faults:
        if f.kind == "size":  # the model differs from the first step on
            ledger.write(ev="fault", kind="size", step=1, module=mod_name(block_of(f)),
                         hidden=2 * FSDP_HIDDEN, others_hidden=FSDP_HIDDEN)

    def fault_hook(i):
        def hook(module, inputs):
            for f in faults:
                if f.step != state["step"] or block_of(f) != i:
                    continue
                if f.kind in ("sleep", "kill", "abort"):
                    ledger.write(ev="fault", kind=f.kind, step=f.step, module=mod_name(i),
                                 phase="forward", **({"seconds": f.arg}
                                                     if f.kind == "sleep" else {}))
                if f.kind == "sleep":
                    time.sleep(f.arg)
                elif f.kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif f.kind == "abort":
                    os.abort()
        return hook

    for i, blk in enumerate(model.blocks):
        # ahead of FSDP's own pre-forward hook (its unshard)
        blk.register_forward_pre_hook(fault_hook(i), prepend=True)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(os.path.join(args.out, "traces", "rank{rank}.zst"), light=args.light,
                   keep=args.keep)
    for step in range(1, args.steps + 1):
        state["step"] = step
        for f in faults:
            if f.kind == "skip" and f.step == step:
                ledger.write(ev="fault", kind="skip", step=step, module=mod_name(block_of(f)),
                             phase="forward")
        torch.manual_seed(1000 * step + rank)  # data parallel: each rank its own batch
        x = torch.randn(BATCH, DIM)
        try:
            with rec(label="step %d" % step):
                opt.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
        except Exception as e:
            ledger.write(ev="error", msg=str(e).splitlines()[0] if str(e) else type(e).__name__)
            raise
    rec.close()
    total = float(sum(p.detach().to_local().double().sum() for p in model.parameters()))
    ledger.write(ev="done", sum=total)
    dist.barrier()
    dist.destroy_process_group()


# ----------------------------------------------------------------------- harness
class Job:
    def __init__(self, out, world, rcs):
        self.out = out
        self.world = world
        self.rcs = rcs
        self.traces = os.path.join(out, "traces")
        self.ledgers = [read_ledger(os.path.join(out, "ledger%d.jsonl" % r))
                        for r in range(world)]

    def colls(self, rank):
        return [e for e in self.ledgers[rank] if e["ev"] == "coll"]

    def log(self, rank):
        with open(os.path.join(self.out, "log%d.txt" % rank), errors="replace") as f:
            return f.read()

    def faults(self, rank):
        return [e for e in self.ledgers[rank] if e["ev"] == "fault"]


def read_ledger(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def _free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def run_job(out, faults, world=4, steps=3, groups=False, timeout=4, deadline=90,
            python=None, mesh=False, fsdp=False, quiet=None, light=False, keep=None):
    """Run the job as WORLD processes with FAULTS (specs as for --fault) and wait
    until every rank has ended; a rank still running after DEADLINE seconds is
    SIGKILLed, as one kills a hung job.  With QUIET (seconds), ranks still running
    once a fault was logged and no trace has grown for QUIET seconds are
    SIGKILLed then (the recorder flushes every 0.5 s): a hung job, killed
    without waiting for the deadline.  Returns a Job."""
    os.makedirs(os.path.join(out, "traces"), exist_ok=True)
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
        cmd = [python or sys.executable, os.path.abspath(__file__), "--out", out,
               "--steps", str(steps), "--timeout", str(timeout),
               "--max-seconds", str(deadline + 5)]
        if groups:
            cmd.append("--groups")
        if mesh:
            cmd.append("--mesh")
        if fsdp:
            cmd.append("--fsdp")
        if light:
            cmd.append("--light")
        k = keep.get(rank) if isinstance(keep, dict) else keep
        if k:
            cmd += ["--keep", str(k)]
        for f in faults:
            cmd += ["--fault", f]
        log = open(os.path.join(out, "log%d.txt" % rank), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    end = time.time() + deadline
    if quiet:
        sizes, since = None, time.time()
        while time.time() < end and any(p.poll() is None for p, _ in procs):
            cur = [_size(os.path.join(out, "traces", "rank%d.zst" % r)) for r in range(world)]
            if cur != sizes:
                sizes, since = cur, time.time()
            elif time.time() - since >= quiet and any(
                    e["ev"] == "fault" for r in range(world)
                    for e in read_ledger(os.path.join(out, "ledger%d.jsonl" % r))):
                end = time.time()  # hung: kill what still runs
                break
            time.sleep(0.1)
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(max(0.1, end - time.time())))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(p.wait(30))
        log.close()
    return Job(out, world, rcs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--groups", action="store_true",
                   help="blocks use tensor-parallel pairs of ranks")
    p.add_argument("--mesh", action="store_true",
                   help="a 2-D mesh (init_device_mesh, dp x tp): blocks over tp, gradients "
                        "over dp")
    p.add_argument("--fsdp", action="store_true",
                   help="FSDP2: every block fully_shard-ed over a 1-D mesh of all ranks "
                        "(with --mesh: over dp, the blocks tensor-parallel over tp)")
    p.add_argument("--light", action="store_true", help="record in light mode")
    p.add_argument("--keep", type=int, help="light mode: keep the last KEEP to 2 KEEP regions")
    p.add_argument("--timeout", type=float, default=4, help="gloo timeout, seconds")
    p.add_argument("--max-seconds", type=int, default=120,
                   help="the process exits after this long regardless")
    p.add_argument("--fault", action="append", default=[],
                   help="KIND:RANK[:STEP[:MODULE[:ARG]]] (repeatable)")
    p.add_argument("--run", type=int, metavar="WORLD",
                   help="harness: run WORLD ranks of this job and print the exit statuses")
    args = p.parse_args()
    for s in args.fault:
        Fault(s)  # reject a bad spec before any process starts
    if args.run:
        job = run_job(args.out, args.fault, world=args.run, steps=args.steps,
                      groups=args.groups, timeout=args.timeout, mesh=args.mesh,
                      fsdp=args.fsdp, deadline=args.max_seconds)
        print("exit statuses:", job.rcs)
        return
    if args.fsdp:
        fsdp_worker(args)
    else:
        worker(args)


if __name__ == "__main__":
    main()
