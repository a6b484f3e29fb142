"""One rank of one golden case, under one of three observers.

    RANK=r WORLD_SIZE=w MASTER_ADDR=.. MASTER_PORT=.. golden.py CASE OUTDIR MODE

MODE is one of
    rec   commdebug's Recorder around each region: OUTDIR/CASE/rank<R>.zst
    light the Recorder in light mode (Recorder(light=True)) around the same
          regions: OUTDIR/CASE/light-rank<R>.zst
    cdm   PyTorch's own CommDebugMode around the same regions: its outputs in
          OUTDIR/CASE/exp-rank<R>/region<K>/ (the layout of testdata/golden)
    ops   a dispatch mode that only notes str(func) of every op it sees:
          OUTDIR/CASE/ops-rank<R>.json, one list of op names per region (the
          baseline of the observer test, tests/recorder/test_observer.py)

Adapted from the program that made the PyTorch 2.11 golden data
(shared/golden-torch2.11/tools/golden.py): the same cases with the same seeds,
plus cases of our own (twice, shared, locals, c10d, fsdp2, sp_block, wraphook,
bwhooks, backwards; compiled, which regen.py leaves out).  The cases that
need DTensor are left out (exit status 3) on a torch without it; ddp, c10d,
wraphook and backwards also run on torch 1.13.
"""
import json
import os
import sys
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.distributed as dist  # noqa: E402

from commdebug import Recorder  # noqa: E402
from oplog import OpLog  # noqa: E402

try:
    from torch.distributed.tensor import DTensor
except Exception:
    DTensor = None

NEEDS_DTENSOR = {"mlp", "mlp_stacked", "ac", "funcol", "redistribute", "mesh2d", "twice",
                 "shared", "locals", "compiled", "fsdp2", "sp_block", "transformer", "transformer_sp"}

case, outdir, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
assert MODE in ("rec", "light", "cdm", "ops"), MODE
if case in NEEDS_DTENSOR and DTensor is None:
    print("%s needs DTensor: left out on torch %s" % (case, torch.__version__))
    sys.exit(3)
if case == "bwhooks" and not hasattr(nn.Module, "register_full_backward_pre_hook"):
    print("bwhooks needs full-backward pre-hooks: left out on torch %s" % torch.__version__)
    sys.exit(3)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", timeout=timedelta(seconds=90))
dev = "cpu"
cdir = os.path.join(outdir, case)
os.makedirs(cdir, exist_ok=True)
rec = Recorder(os.path.join(cdir, "rank{rank}.zst")) if MODE == "rec" else \
    Recorder(os.path.join(cdir, "light-rank{rank}.zst"), light=True) if MODE == "light" else None
region = [0]
ops_regions = []
failed = []


def dump(cdm):
    d = os.path.join(cdir, "exp-rank%d" % rank, "region%d" % region[0])
    os.makedirs(d, exist_ok=True)
    for n in range(4):
        with open(f"{d}/table{n}.txt", "w") as f:
            f.write(cdm.generate_comm_debug_tracing_table(noise_level=n))
        cdm.log_comm_debug_tracing_table_to_file(file_name=f"{d}/log{n}.txt", noise_level=n)
        cdm.generate_json_dump(file_name=f"{d}/dump{n}.json", noise_level=n)
    counts = {str(k): v for k, v in cdm.get_comm_counts().items()}
    with open(f"{d}/counts.json", "w") as f:
        json.dump({"total": cdm.get_total_counts(), "counts": counts}, f, indent=1)
    sharding = {k: str(v) for k, v in cdm.get_sharding_info().items()}
    params = {k: sorted(v) for k, v in cdm.get_parameter_info().items()}
    with open(f"{d}/sharding.json", "w") as f:
        json.dump({"sharding": sharding, "parameters": params}, f, indent=1)


def region_run(label, fn):
    """One region under this run's observer."""
    region[0] += 1
    try:
        if MODE == "cdm":
            from torch.distributed.tensor.debug import CommDebugMode
            cdm = CommDebugMode()
            with cdm:
                fn()
            dump(cdm)
        elif MODE in ("rec", "light"):
            with rec(label=label):
                fn()
        else:
            log = OpLog()
            with log:
                fn()
            ops_regions.append(log.ops)
    except Exception:
        failed.append(label)
        print(f"[rank {rank}] {case}/{label}: FAILED\n{traceback.format_exc()}", flush=True)
        if MODE == "ops":
            ops_regions.append(None)


if DTensor is not None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, Replicate, Partial, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    import torch.distributed._functional_collectives as funcol
    mesh = init_device_mesh(dev, (world,)) if case != "mesh2d" else None


class MLPModule(nn.Module):  # the shape of PyTorch's own test MLP
    def __init__(self, device):
        super().__init__()
        torch.manual_seed(5)
        self.net1 = nn.Linear(10, 16, device=device)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 10, device=device)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


class MLPStacked(nn.Module):
    def __init__(self, device, n_layers=2):
        super().__init__()
        self.layers = nn.ModuleList([MLPModule(device) for _ in range(n_layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def tp_mlp():
    m = MLPModule(dev)
    return parallelize_module(m, mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})


def inp():
    torch.manual_seed(0)
    return torch.rand(8, 10, device=dev)


def settled(leaf):
    """leaf (a tensor that requires grad), its gradient accumulated only
    once gloo's worker thread has let go of the collective that made it.

    The gradient a leaf gets straight from a collective (the all-reduce of a
    tensor-parallel input's gradient, an all-to-all's backward) is the
    collective's output tensor, which the gloo work also holds until its
    worker thread drops the finished work.  The autograd engine steals a
    gradient nobody else holds (aten.detach) and copies one that is still
    held (aten.new_empty_strided + aten.copy_): without this pause, which of
    the two a rank dispatches is a race between that thread and the main one,
    with or without an observer.  The hook dispatches nothing."""
    import time

    def pause(grad):
        time.sleep(0.02)
    leaf.register_hook(pause)
    return leaf


if case == "mlp":
    m = tp_mlp()
    x = inp()
    region_run("mlp fwd+bwd", lambda: m(x).sum().backward())
elif case == "mlp_stacked":
    m = MLPStacked(dev)
    plan = {f"layers.{i}.{n}": (ColwiseParallel() if n == "net1" else RowwiseParallel())
            for i in range(2) for n in ("net1", "net2")}
    m = parallelize_module(m, mesh, plan)
    x = inp()
    region_run("stacked fwd", lambda: m(x))
    region_run("stacked fwd+bwd", lambda: m(x).sum().backward())
elif case == "ac":
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLPModule(dev)

        def forward(self, x):
            return checkpoint(self.mlp, x, use_reentrant=False)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.head = MLPModule(dev)

        def forward(self, x):
            return self.head(self.block(x))

    m = Net()
    m = parallelize_module(m, mesh, {"block.mlp.net1": ColwiseParallel(),
                                     "block.mlp.net2": RowwiseParallel(),
                                     "head.net1": ColwiseParallel(),
                                     "head.net2": RowwiseParallel()})
    x = settled(inp().requires_grad_(True))
    region_run("ac fwd+bwd", lambda: m(x).sum().backward())
elif case == "fsdp2":
    from torch.distributed.fsdp import fully_shard
    m = MLPStacked(dev)
    for layer in m.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = inp()

    def step():
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
    region_run("fsdp2 step 1", step)
    region_run("fsdp2 step 2", step)
elif case == "twice":  # one module called twice in one forward
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLPModule(dev)

        def forward(self, x):
            return self.mlp(self.mlp(x))

    t = parallelize_module(Twice(), mesh, {"mlp.net1": ColwiseParallel(),
                                           "mlp.net2": RowwiseParallel()})
    x = inp()
    region_run("twice", lambda: t(x).sum().backward())
elif case == "shared":  # one module instance under two parents
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = MLPModule(dev)
            self.b = nn.Sequential(self.a)

        def forward(self, x):
            return self.b(self.a(x))

    s = parallelize_module(Shared(), mesh, {"a.net1": ColwiseParallel(),
                                            "a.net2": RowwiseParallel()})
    x = inp()
    region_run("shared", lambda: s(x).sum().backward())
elif case == "redistribute":
    torch.manual_seed(0)
    big = torch.randn(8, 8, device=dev)

    def redis():
        a = distribute_tensor(big, mesh, [Shard(0)])
        a.redistribute(mesh, [Replicate()])
        a.redistribute(mesh, [Shard(1)])
        p = DTensor.from_local(torch.ones(4, 4, device=dev), mesh, [Partial()])
        p.redistribute(mesh, [Replicate()])
        p.redistribute(mesh, [Shard(0)])
        (a @ a.redistribute(mesh, [Replicate()]).t()).full_tensor()
    region_run("redistribute", redis)
elif case == "c10d":
    def t(n=4):
        return torch.arange(n, dtype=torch.float32, device=dev) + rank
    W = world
    ops = [
        ("all_reduce", lambda: dist.all_reduce(t())),
        ("all_gather", lambda: dist.all_gather([t() for _ in range(W)], t())),
        ("broadcast", lambda: dist.broadcast(t(), src=0)),
        ("reduce", lambda: dist.reduce(t(), dst=0)),
        ("all_reduce_coalesced", lambda: dist.all_reduce_coalesced([t(), t(8)])),
        ("barrier", lambda: dist.barrier()),
    ]
    if int(torch.__version__.split(".")[0]) >= 2:  # gloo on 1.13 has none of these
        ops += [
            ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(t(4 * W), t())),
            ("gather", lambda: dist.gather(t(), [t() for _ in range(W)] if rank == 0 else None,
                                           dst=0)),
            ("scatter", lambda: dist.scatter(t(), [t() for _ in range(W)] if rank == 0 else None,
                                             src=0)),
            ("all_to_all_single", lambda: dist.all_to_all_single(t(4 * W), t(4 * W))),
            ("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(t(), t(4 * W))),
            ("reduce_scatter", lambda: dist.reduce_scatter(t(), [t() for _ in range(W)])),
        ]
    for name, fn in ops:
        region_run(name, fn)
elif case == "funcol":
    g = mesh.get_group()

    def t(n=4):
        return torch.arange(n, dtype=torch.float32, device=dev) + rank
    W = world
    ops = [
        ("funcol.all_reduce", lambda: funcol.all_reduce(t(), "sum", g).wait()),
        ("funcol.all_gather_tensor", lambda: funcol.all_gather_tensor(t(), 0, g).wait()),
        ("funcol.all_reduce_coalesced",
         lambda: [x.wait() for x in funcol.all_reduce_coalesced([t(), t(8)], "sum", g)]),
        ("funcol.all_gather_into_tensor_coalesced",
         lambda: [x.wait() for x in funcol.all_gather_into_tensor_coalesced([t(), t(8)], g)]),
        ("funcol.broadcast", lambda: funcol.broadcast(t(), 0, g).wait()),
        ("funcol.all_to_all_single",
         lambda: funcol.all_to_all_single(t(4 * W), None, None, g).wait()),
        ("funcol.all_to_all_single_autograd",
         lambda: funcol.all_to_all_single_autograd(settled(t(4 * W).requires_grad_(True)), None, None,
                                                   g).sum().backward()),
        ("funcol.reduce_scatter_tensor",
         lambda: funcol.reduce_scatter_tensor(t(4 * W), "sum", 0, g).wait()),
        ("funcol.reduce_scatter_tensor_coalesced",
         lambda: [x.wait() for x in funcol.reduce_scatter_tensor_coalesced(
             [t(4 * W), t(8 * W)], "sum", [0, 0], g)]),
    ]
    for name, fn in ops:
        region_run(name, fn)
elif case == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(MLPStacked(dev), bucket_cap_mb=0.0005)  # small buckets: several all-reduces
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = inp()

    def step():
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
    region_run("ddp step 1", step)
    region_run("ddp step 2", step)
elif case == "sp_block":  # Megatron-style tensor + sequence parallel block
    from torch.distributed.tensor.parallel import SequenceParallel, PrepareModuleInput

    class FF(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(16, 32)
            self.w2 = nn.Linear(32, 16)

        def forward(self, x):
            return self.w2(torch.relu(self.w1(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(3)
            self.norm = nn.LayerNorm(16)
            self.attn = FF()
            self.norm2 = nn.LayerNorm(16)
            self.mlp = FF()

        def forward(self, x):
            h = x + self.attn(self.norm(x))
            return h + self.mlp(self.norm2(h))

    m = Block().to(dev)

    def prep():
        return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan = {
        "norm": SequenceParallel(), "norm2": SequenceParallel(),
        "attn": prep(), "attn.w1": ColwiseParallel(),
        "attn.w2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "mlp": prep(), "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    m = parallelize_module(m, mesh, plan)
    torch.manual_seed(0)
    x = distribute_tensor(torch.rand(2, 8, 16, device=dev), mesh, [Shard(1)])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step():
        m(x).full_tensor().sum().backward()
        opt.step()
        opt.zero_grad()
    region_run("sp step 1", step)
    region_run("sp step 2", step)
elif case == "mesh2d":  # 2-D mesh: tensor parallel inside, FSDP2 across
    from torch.distributed.fsdp import fully_shard
    mesh2 = init_device_mesh(dev, (2, world // 2), mesh_dim_names=("dp", "tp"))
    m = MLPStacked(dev)
    for i in range(2):
        parallelize_module(m.layers[i], mesh2["tp"], {"net1": ColwiseParallel(),
                                                      "net2": RowwiseParallel()})
        fully_shard(m.layers[i], mesh=mesh2["dp"])
    fully_shard(m, mesh=mesh2["dp"])
    x = inp()
    region_run("2d fwd+bwd", lambda: m(x).sum().backward())
elif case == "compiled":  # torch.compile (aot_eager: no C compiler needed) of a TP MLP
    # Not in regen.py's list: CommDebugMode's own tree is wrong for it (2.14).
    m = torch.compile(tp_mlp(), backend="aot_eager")
    x = inp()
    region_run("compiled fwd+bwd", lambda: m(x).sum().backward())
elif case == "locals":  # classes defined in a function (<locals> in their names)
    def build():
        class Inner(nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = MLPModule(dev)
                self.ln = nn.LayerNorm(10)

            def forward(self, x):
                return self.ln(self.mlp(x))

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()
                self.head = nn.Linear(10, 4)

            def forward(self, x):
                return self.head(self.inner(x))
        return Outer()

    m = parallelize_module(build(), mesh, {"inner.mlp.net1": ColwiseParallel(),
                                           "inner.mlp.net2": RowwiseParallel()})
    x = inp()
    region_run("locals fwd+bwd", lambda: m(x).sum().backward())
elif case == "wraphook":
    # A wrapper that puts a gradient hook on its inner module's output in its
    # forward, as FSDP1's wrapper puts its pre-backward hook there, and the
    # hook issues a collective in backward: CommDebugMode counts it for the
    # wrapper (its bw_pre has run, the inner module's not yet).  Nested
    # twice, so that three modules return the same tensor; no DTensor.
    class Wrap(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            y = self.inner(x)
            if y.requires_grad:
                y.register_hook(self.pre_backward)
            return y

        def pre_backward(self, grad):
            t = torch.ones(4)
            dist.all_reduce(t)
            return None

    class Par(nn.Module):
        # the same hook put by a parent's forward between two modules, the
        # second of which returns its input (nn.Identity)
        def __init__(self):
            super().__init__()
            self.a = Wrap(nn.Linear(10, 10))
            self.idn = nn.Identity()
            self.b = Wrap(Wrap(nn.Linear(10, 10)))

        def forward(self, x):
            y = self.a(x)
            if y.requires_grad:
                y.register_hook(self.b.pre_backward)
            return self.b(torch.relu(self.idn(y)))

    torch.manual_seed(0)
    m = nn.Sequential(Wrap(nn.Linear(10, 10)), nn.ReLU(), Wrap(Wrap(nn.Linear(10, 10))))
    x = torch.randn(4, 10)
    region_run("wraphook fwd+bwd", lambda: m(x).sum().backward())
    p = Par()
    region_run("wraphook parent", lambda: p(x).sum().backward())
elif case == "bwhooks":
    # Module backward hooks of the program's own that issue collectives: a
    # full-backward pre-hook (runs where the module's backward starts), a
    # full-backward hook (where its input gradients are ready), on leaves,
    # on a module with children, on the outermost module, on a module with a
    # forward hook too.
    def coll(*_):
        t = torch.ones(4)
        dist.all_reduce(t)
        return None

    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 10))
    m = nn.Sequential(nn.Linear(10, 10), inner, nn.Linear(10, 10))
    m.register_full_backward_pre_hook(coll)
    m[0].register_full_backward_hook(coll)
    m[2].register_full_backward_pre_hook(coll)
    inner.register_full_backward_pre_hook(coll)
    inner.register_full_backward_hook(coll)
    inner[0].register_forward_hook(lambda *a: None)      # (and a forward hook)
    inner[0].register_full_backward_pre_hook(coll)
    inner[2].register_full_backward_hook(coll)
    x = torch.randn(4, 10, requires_grad=True)
    region_run("bwhooks fwd+bwd", lambda: m(x * 1).sum().backward())
elif case == "backwards":
    # Backward passes other than one loss.backward() per forward: two
    # forwards then one backward of their sum (gradient accumulation), a
    # backward run twice over a retained graph, torch.autograd.grad (no
    # gradient accumulated in the parameters); the collectives come from an
    # autograd function's backward inside a module, as tensor parallelism's
    # do.
    class AllReduceGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g)
            return g

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(10, 10)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.lin(AllReduceGrad.apply(x)))

    torch.manual_seed(0)
    m = nn.Sequential(Block(), Block())
    x = torch.randn(4, 10, requires_grad=True)

    def accumulate():
        (m(x * 1).sum() + m(x * 2).sum()).backward()

    def twice():
        loss = m(x * 1).sum()
        loss.backward(retain_graph=True)
        loss.backward()

    # (no leaf as a module's input: CommDebugMode's tracker leaves a gradient
    # hook on it, which raises in autograd.grad, as torch's
    # register_multi_grad_hook asks the engine about a leaf's node there;
    # test_observer.py has that case)
    region_run("two forwards, one backward", accumulate)
    region_run("backward twice", twice)
    region_run("autograd.grad", lambda: torch.autograd.grad(m(x * 1).sum(), [x]))
else:
    raise SystemExit("unknown case " + case)

if rec is not None:
    rec.close()
if MODE == "ops":
    with open(os.path.join(cdir, "ops-rank%d.json" % rank), "w") as f:
        json.dump(ops_regions, f)
dist.barrier()
dist.destroy_process_group()
print(f"[rank {rank}] {case}/{MODE}: done, {region[0]} regions"
      + (", failed: %s" % failed if failed else ""), flush=True)
sys.exit(4 if failed else 0)
