"""The recorder must not change what the program dispatches.

test_golden_programs: every golden program (tests/golden/programs, the cases
this torch can run), on every rank, over 3 runs: the op names in the
Recorder's trace are the op names a do-nothing dispatch mode sees in a
separate run with the same seeds (tests/golden/observe.py; the do-nothing
mode has CommDebugMode's module hooks, which dispatch views of their own).

test_same_ops_with_and_without_recorder: with torch's own BackwardHook, the
ops a logging dispatch mode below the recorder sees are the ops it sees
without the recorder (a leaf input that requires grad, activation
checkpointing, several steps); with LeanBackwardHook (_leanbw) the trace has
those ops all the same, and below the recorder only views are missing.

On torch 1.13 any dispatch mode above the logging one changes what it sees
(the autograd engine dispatches extra aten.detach ops while a Python mode is
active: a do-nothing mode shows the same), so there the baseline is a
do-nothing mode in the recorder's place; where a do-nothing mode changes
nothing, the baseline is the run without any mode."""

import collections
import os
import subprocess
import sys
import warnings

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from _util import REPO, eq, recorded, same_events

from commdebug import Recorder, _leanbw

sys.path.insert(0, os.path.join(REPO, "tests", "golden", "programs"))
from oplog import install_hooks  # noqa: E402


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class Nothing(TorchDispatchMode):
    """A do-nothing mode, with do-nothing hooks where the recorder has its own."""

    def __enter__(self):
        self._hooks = install_hooks()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for h in self._hooks:
                h.remove()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class NothingRegion:
    def __call__(self, label=None):
        return Nothing()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Mix(nn.Module):
    """Two inputs: the module-tracker's input hook waits for both gradients."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x, y):
        return self.a(x) * self.b(y)


class Net(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.mix = Mix()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 1)
        self.reentrant = reentrant

    def forward(self, x, y):
        x = self.mix(x, y)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=self.reentrant)
        return self.head(x)


class Acts(nn.Module):
    """Activation modules, whose identity node the recorder leaves out
    (_leanbw._SINGLE_NODE), where their input has other uses: a residual
    around one, two of one tensor, one of a parameter's module, the last of a
    checkpointed Sequential, one called twice."""

    def __init__(self, reentrant):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.gelu = nn.GELU()
        self.relu = nn.ReLU()
        self.tanh = nn.Tanh()
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.SiLU())
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 1)
        self.reentrant = reentrant

    def forward(self, x, y):
        h = self.lin(x * y)
        h = self.norm(h) + h        # (its identity node does matter: see the test)
        h = h + self.gelu(h)
        a, b = self.relu(h), self.tanh(h)
        h = a * b + h
        h = checkpoint(self.seq, h, use_reentrant=self.reentrant) + h
        return self.head(self.gelu(h) + self.relu(y))


def ops_of(reentrant, rec, make=Net):
    torch.manual_seed(0)
    net = make(reentrant)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    log = OpLog()
    grads = []
    for step in range(3):
        x = torch.randn(4, 8, requires_grad=True)    # leaves that require grad
        y = torch.randn(4, 8, requires_grad=True)
        with log:
            if rec is not None:
                with rec(label="step %d" % step):
                    loss = net(x, y).sum()
                    loss.backward()
            else:
                hooks = install_hooks()
                try:
                    loss = net(x, y).sum()
                    loss.backward()
                finally:
                    for h in hooks:
                        h.remove()
        grads.append(x.grad.clone())
        grads.append(y.grad.clone())
        opt.step()
        opt.zero_grad()
    return log.ops, grads


def first_difference(got, want):
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return "at op %d: %r vs %r (%d vs %d ops)" % (i, got[i:i + 4], want[i:i + 4], len(got),
                                                 len(want))


def trace_ops(path):
    from commdebug.tracefile import read_events
    return [ev["name"] for ev in read_events(path) if ev.get("ev") == "op"]


def left_out(below, want):
    """The ops of want that below lacks, when below is want with some left
    out (else None)."""
    out = []
    i = 0
    for op in want:
        if i < len(below) and below[i] == op:
            i += 1
        else:
            out.append(op)
    return out if i == len(below) else None


def test_same_ops_with_and_without_recorder(ctx):
    same_ops(ctx, Net)


def test_activations_same_ops(ctx):
    """Activation modules without their identity node: the ops, and their
    order, are CommDebugMode's (torch's wrappers around every module).  The
    program fails it where a LayerNorm on a residual loses its node
    (_SINGLE_NODE with "LayerNorm": the residual's add comes before the
    LayerNorm's parameters' gradients are accumulated, not after)."""
    same_ops(ctx, Acts)


def same_ops(ctx, make):
    for reentrant in (False, True):
        plain, gplain = ops_of(reentrant, None, make)
        mode, _ = ops_of(reentrant, NothingRegion(), make)
        want = plain if mode == plain else mode
        # torch's own BackwardHook everywhere: the program dispatches what it
        # does under CommDebugMode, and the trace has those ops
        os.environ["COMMDEBUG_LEAN_BW"] = "0"
        try:
            rec = Recorder(os.path.join(ctx.tmp, "o%s%d.zst" % (make.__name__, reentrant)))
            got, ggot = ops_of(reentrant, rec, make)
            rec.close()
        finally:
            del os.environ["COMMDEBUG_LEAN_BW"]
        if got != want:
            raise AssertionError("use_reentrant=%s: the recorder changed the ops %s"
                                 % (reentrant, first_difference(got, want)))
        for a, b in zip(ggot, gplain):
            eq(torch.equal(a, b), True, "input gradients")
        if not _leanbw.available():
            ctx.note("use_reentrant=%s: %d ops, the same as %s" % (
                reentrant, len(got), "without a mode (with do-nothing hooks)" if mode == plain
                else "under a do-nothing mode (which itself adds %d to the %d without one)"
                % (len(mode) - len(plain), len(plain))))
            continue
        eq(trace_ops(rec.path), want, "the trace's ops (torch's BackwardHook)")
        # LeanBackwardHook where it can (torch 2.4 and newer): the trace still
        # has the ops CommDebugMode sees; the program dispatches them, less
        # the views the wrapper nodes left out would have dispatched
        rec = Recorder(os.path.join(ctx.tmp, "lean%s%d.zst" % (make.__name__, reentrant)))
        below, glean = ops_of(reentrant, rec, make)
        rec.close()
        traced = trace_ops(rec.path)
        if traced != want:
            raise AssertionError("use_reentrant=%s: the trace's ops %s"
                                 % (reentrant, first_difference(traced, want)))
        missing = left_out(below, want)
        if missing is None or set(missing) - {"aten.view.default"}:
            raise AssertionError("use_reentrant=%s: below the recorder %s"
                                 % (reentrant, first_difference(below, want)))
        for a, b in zip(glean, gplain):
            eq(torch.equal(a, b), True, "input gradients")
        ctx.note("use_reentrant=%s: %d ops, the same as without a mode (with do-nothing "
                 "hooks); with LeanBackwardHook %d views written, not dispatched"
                 % (reentrant, len(got), len(missing)))


def test_golden_programs(ctx):
    # (COMMDEBUG_OBSERVE_RUNS: the sanitizer's run of this test, which is
    # there for the C module's memory, not for the programs' repeatability,
    # runs each once)
    runs = os.environ.get("COMMDEBUG_OBSERVE_RUNS", "3")
    r = subprocess.run([sys.executable, os.path.join(REPO, "tests", "golden", "observe.py"),
                        os.path.join(ctx.tmp, "obs"), "--runs", runs],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    out = r.stdout.decode(errors="replace")
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if r.returncode != 0:
        raise AssertionError("the recorder changed what a program dispatches "
                             "(tests/golden/observe.py):\n" + out[-6000:])
    cases = sorted({ln.split()[1] for ln in out.splitlines() if ln.startswith("ok ")})
    skipped = [ln.split()[1].rstrip(":") for ln in out.splitlines() if ln.startswith("skip ")]
    ctx.note("%s: %s the same with and without the recorder%s" % (
        last, " ".join(cases), "; left out on this torch: " + " ".join(skipped)
        if skipped else ""))


def test_golden_programs_lean(ctx):
    """Every golden program this torch runs, every rank: the trace recorded
    with LeanBackwardHook is the trace recorded with torch's own
    BackwardHook (COMMDEBUG_LEAN_BW=0), event for event, every field but the
    time (tests/golden/observe.py --lean): TP, FSDP2, DDP, activation
    checkpointing, functional collectives, GPT-2."""
    if not _leanbw.available():
        ctx.note("skipped: torch %s has no LeanBackwardHook" % torch.__version__)
        return
    r = subprocess.run([sys.executable, os.path.join(REPO, "tests", "golden", "observe.py"),
                        os.path.join(ctx.tmp, "lean"), "--lean", "--runs", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0:
        raise AssertionError("LeanBackwardHook changed a trace (tests/golden/observe.py "
                             "--lean):\n" + out[-6000:])
    cases = sorted({ln.split()[1] for ln in out.splitlines() if ln.startswith("ok ")})
    ctx.note("%s: %s" % (out.strip().splitlines()[-1], " ".join(cases)))


# ----------------------------------------------------------- LeanBackwardHook
class Side(nn.Module):
    """Makes a node after its output's (a side branch): torch's BackwardHook."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.aux = None

    def forward(self, x):
        y = self.lin(x)
        self.aux = (x * 3).sum()
        return y


class Wrap(nn.Module):
    """Like FSDP1: puts a gradient hook that dispatches ops on its inner
    module's output, from its own forward; and returns that tensor."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        y = self.inner(x)
        y.register_hook(lambda g: (g.abs().sum(), None)[1])
        return y


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        y = self.a(x)
        return y, y * 2


class Prog(nn.Module):
    def __init__(self):
        super().__init__()
        self.wrap = Wrap(nn.Sequential(nn.Linear(8, 8), nn.GELU()))
        self.side = Side()
        self.norm = nn.LayerNorm(8)
        self.pair = Pair()
        self.ident = nn.Identity()
        self.head = nn.Linear(8, 1)
        self.norm.register_forward_hook(
            lambda m, i, o: o.register_hook(lambda g: (g.mean(), None)[1]) and None)

    def forward(self, x, reentrant):
        h = self.wrap(x)
        h = h + self.norm(h)                     # a residual: gradients added up
        h = checkpoint(self.side, h, use_reentrant=reentrant)
        a, b = self.pair(h)
        return self.head(self.ident(a + b)).sum() + self.side.aux


def recorded_events(ctx, name, lean, run):
    """The events of a trace run(rec) records (with LeanBackwardHook, or
    with torch's own BackwardHook), times left out; and the Recorder."""
    return recorded(os.path.join(ctx.tmp, name), run,
                    COMMDEBUG_LEAN_BW=None if lean else "0")


def lean_events(ctx, name, lean, reentrant, leaf):
    """A trace's events of Prog, times left out."""
    def run(rec):
        prog = Prog()
        for step in range(2):
            x = torch.randn(4, 8, requires_grad=leaf)
            with rec:
                prog(x if leaf else x * 1, reentrant).backward()
    return recorded_events(ctx, name, lean, run)


def test_lean_backward_hook_same_trace(ctx):
    """The trace with LeanBackwardHook is the trace with torch's
    BackwardHook, event for event (every op, bw_pre, bw_enter, bw_exit and
    its place): nested modules returning one tensor, a wrapper putting a
    hook that dispatches on its inner module's output (as FSDP1 does), a
    module's own forward hook doing so (as FSDP2 does), a residual, a side
    branch, a tuple output, nn.Identity, activation checkpointing both ways,
    an input that is a leaf."""
    from commdebug import _leanbw
    if not _leanbw.available():
        ctx.note("skipped: torch %s has no LeanBackwardHook" % torch.__version__)
        return
    for reentrant in (False, True):
        for leaf in (False, True):
            tag = "r%d-l%d" % (reentrant, leaf)
            want, _ = lean_events(ctx, "torch-%s.zst" % tag, False, reentrant, leaf)
            got, rec = lean_events(ctx, "lean-%s.zst" % tag, True, reentrant, leaf)
            same_events(got, want, "use_reentrant=%s leaf=%s" % (reentrant, leaf))
    ctx.note("%d events, the same with LeanBackwardHook and with torch's" % len(got))


class Edge(nn.Module):
    """Calls LeanBackwardHook must tell apart: a call with keyword arguments
    only, a module called under no_grad with an input requiring grad, two
    modules taking the same tensor, outputs that are a list, a namedtuple, a
    dict, a tensor not requiring grad, the module's input itself."""

    NT = collections.namedtuple("NT", "a b")

    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x=None, scale=1.0):
            return self.lin(x) * scale

    class Out(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.kind = kind

        def forward(self, x):
            y = self.lin(x)
            if self.kind == "list":
                return [y, y + 1]
            if self.kind == "namedtuple":
                return Edge.NT(y, y * 3)
            if self.kind == "dict":
                return {"y": y}
            return y > 0

    class Argmax(nn.Module):
        def forward(self, x):
            return x.argmax(-1)

    class Stat(nn.Module):
        def forward(self, x):
            self.m = x.mean()
            return x

    def __init__(self):
        super().__init__()
        self.kw = Edge.Kw()
        self.mask = Edge.Out("mask")
        self.lo = Edge.Out("list")
        self.nt = Edge.Out("namedtuple")
        self.do = Edge.Out("dict")
        self.p1 = nn.Linear(8, 8)
        self.p2 = nn.Linear(8, 8)
        self.arg = Edge.Argmax()
        self.stat = Edge.Stat()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.kw(x=x, scale=2.0)
        with torch.no_grad():
            m = self.mask(h)
        a, b = self.lo(h)
        n = self.nt(a + b)
        d = self.do(n.a + n.b)["y"]
        d = self.p1(d) + self.p2(d)
        i = self.arg(d)
        s = self.stat(d * m)
        return self.head(s).sum() + i.sum() * 0


def edge_events(ctx, name, lean, mode):
    """A trace's events of Edge (mode: train, no_grad, inference_mode),
    times left out."""
    def run(rec):
        prog = Edge()
        with warnings.catch_warnings():
            # (torch: backward hooks are not called for a list or dict output)
            warnings.simplefilter("ignore")
            for step in range(2):
                x = torch.randn(4, 8, requires_grad=True) * 1
                with rec:
                    if mode == "train":
                        prog(x).backward()
                    elif mode == "no_grad":
                        with torch.no_grad():
                            prog(x)
                    else:
                        with torch.inference_mode():
                            prog(torch.randn(4, 8))
    return recorded_events(ctx, name, lean, run)[0]


def test_lean_edge_calls_same_trace(ctx):
    """Edge's trace with LeanBackwardHook is the trace with torch's
    BackwardHook, event for event, trained and under no_grad and
    inference_mode (the bw_exit hooks of the modules taking one tensor run in
    the order they were registered)."""
    from commdebug import _leanbw
    if not _leanbw.available():
        ctx.note("skipped: torch %s has no LeanBackwardHook" % torch.__version__)
        return
    for mode in ("train", "no_grad", "inference_mode"):
        want = edge_events(ctx, "edge-torch-%s.zst" % mode, False, mode)
        got = edge_events(ctx, "edge-lean-%s.zst" % mode, True, mode)
        same_events(got, want, mode)
        ctx.note("%s: %d events, the same" % (mode, len(got)))


def test_program_hooks_survive_gc(ctx):
    """The program's own gradient hooks all run under the recorder (full,
    and light where there is light mode) when the garbage collector runs
    between forward and backward: on torch before 2.1 a hook holding an
    autograd node made the collector empty the tensor's hook dict (wrappers
    putting a hook on their inner module's output, one or two tensors into
    a module)."""
    import gc
    from commdebug import _light
    fired = []

    class Hooked(nn.Module):
        def __init__(self, inner, name):
            super().__init__()
            self.inner = inner
            self.name = name

        def forward(self, x):
            y = self.inner(x)
            y.register_hook(lambda g: fired.append(self.name))
            return y

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x, z):
            return self.a(x) + z

    torch.manual_seed(0)
    m = nn.Sequential(Hooked(nn.Linear(8, 8), "a"), nn.ReLU(),
                      Hooked(Hooked(nn.Linear(8, 8), "b"), "c"))
    two = Two()
    modes = [False] + ([True] if _light.available() is None else [])
    for light in modes:
        rec = Recorder(os.path.join(ctx.tmp, "gc-%s.zst" % light), light=light)
        for step in range(3):
            del fired[:]
            with rec:
                h = m(torch.randn(4, 8))
                out = two(h * 2, h * 3)
                gc.collect()
                out.sum().backward()
            eq(sorted(fired), ["a", "b", "c"], "%s recorder, step %d: the program's hooks "
               "that ran" % ("light" if light else "full", step + 1))
        rec.close()


def test_autograd_grad_leaf_input(ctx):
    """torch.autograd.grad through modules whose input is a leaf (one, and
    two tensors) runs under the full recorder, with the gradients it gives
    without one: torch's register_multi_grad_hook raises there (it asks the
    engine whether the leaf's node runs, which autograd.grad does not allow),
    so CommDebugMode fails; the recorder's module tracker must not."""
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x, y):
            return self.a(x) * y

    torch.manual_seed(0)
    one, two = nn.Linear(4, 4), Two()
    x = torch.randn(2, 4, requires_grad=True)
    y = torch.randn(2, 4, requires_grad=True)

    def grads():
        return torch.autograd.grad((one(x) + two(x, y)).sum(), [x, y])
    want = grads()
    rec = Recorder(os.path.join(ctx.tmp, "grad.zst"))
    with rec:
        got = grads()
    rec.close()
    for a, b in zip(got, want):
        eq(torch.equal(a, b), True, "gradients")
    from commdebug.tracefile import read_events
    evs = [e for e in read_events(rec.path) if e.get("ev") == "bw_pre"]
    eq(sorted({e["mod"] for e in evs}), ["Linear", "Two", "Two.a"], "modules with bw_pre")


def test_lean_inplace_input(ctx):
    """A module changing its input in place (ReLU(inplace=True) after a
    Linear) fails under CommDebugMode's wrappers; with LeanBackwardHook
    the recorder runs it, with the program's gradients."""
    from commdebug import _leanbw
    if not _leanbw.available():
        ctx.note("skipped: torch %s has no LeanBackwardHook" % torch.__version__)
        return
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 1))
    x = torch.randn(2, 4)
    m(x).sum().backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    rec = Recorder(os.path.join(ctx.tmp, "inplace.zst"))
    with rec:
        m(x).sum().backward()
    rec.close()
    for a, b in zip(m.parameters(), want):
        eq(torch.equal(a.grad, b), True, "gradients")
    ops = trace_ops(rec.path)
    eq("aten.threshold_backward.default" in ops, True, "the ReLU's backward recorded")


def test_lean_only_inside_regions(ctx):
    """nn.Module makes LeanBackwardHooks only while a full recorder's region
    is open: outside one, code with full backward hooks of its own (and
    dynamo, which knows torch's class by identity) gets torch's."""
    from commdebug import _leanbw
    import torch.nn.modules.module as nn_module
    from torch.utils.hooks import BackwardHook
    if not _leanbw.available():
        ctx.note("skipped: torch %s has no LeanBackwardHook" % torch.__version__)
        return
    rec = Recorder(os.path.join(ctx.tmp, "regions.zst"))
    m = nn.Linear(4, 4)
    for step in range(2):
        with rec:
            eq(nn_module.BackwardHook, _leanbw.LeanBackwardHook, "the class inside a region")
            m(torch.randn(2, 4, requires_grad=True) * 1).sum().backward()
        eq(nn_module.BackwardHook, BackwardHook, "the class after region %d" % (step + 1))
    rec.close()
