"""The identity nodes the full recorder leaves out along nn.Sequential's
chains (python/commdebug/_speedups_full.c, "chains"): where one child's
output goes to nothing but the next child, the node the wrapper would put
on that child's input changes nothing CommDebugMode sees.

Every test here compares the trace made with LeanBackwardHook (chains
included) with the trace made with torch's own BackwardHook, event for
event (every op, fw_pre, bw_pre, bw_enter, bw_exit and its place), over
programs where a chain's node is left out and programs built so that
leaving it out would change what the trace says."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from _util import Skip, eq, recorded, same_events

from commdebug import Recorder, _leanbw
from commdebug._native import speedups


def _needs_chains():
    if not _leanbw.available():
        raise Skip("torch %s has no LeanBackwardHook" % torch.__version__)
    if speedups() is None:
        raise Skip("the recorder's C module is not built (the chains are its)")
    if _leanbw._chain_classes()[0] is None:
        raise Skip("nn.Sequential's forward is not torch's own here")


def events(ctx, name, run, lean=True, identity=None, c_module=None):
    """The events of the trace run(rec) records, times left out (lean:
    LeanBackwardHook, else torch's own BackwardHook; identity, c_module: the
    values of COMMDEBUG_IDENTITY and COMMDEBUG_SPEEDUPS)."""
    return recorded(os.path.join(ctx.tmp, name), run, COMMDEBUG_IDENTITY=identity,
                    COMMDEBUG_LEAN_BW=None if lean else "0", COMMDEBUG_SPEEDUPS=c_module)[0]


def same_as_torch(ctx, name, run, c_module=None):
    """The trace with LeanBackwardHook is the one with torch's; its events."""
    want = events(ctx, name + "-torch.zst", run, lean=False, c_module=c_module)
    got = events(ctx, name + "-lean.zst", run, c_module=c_module)
    same_events(got, want, name + " (LeanBackwardHook's, torch's)")
    return got


def blocks(n=3, width=8):
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU(),
                                         nn.LayerNorm(width)) for _ in range(n)])


def aliases(loss):
    """The identity nodes (AliasBackward0) in loss's graph."""
    seen, todo, n = set(), [loss.grad_fn], 0
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        n += type(node).__name__ == "AliasBackward0"
        todo.extend(f for f, _ in node.next_functions)
    return n


def train(make, steps=3, x_kind="nonleaf"):
    """run(rec) for events(): steps of the model make() makes on a (4, 8)
    input, a region each."""
    def run(rec):
        model = make()
        for _ in range(steps):
            x = torch.randn(4, 8, requires_grad=x_kind != "nograd")
            if x_kind == "nonleaf":
                x = x * 1
            with rec:
                model(x).sum().backward()
    return run


def test_blocks_leave_out_every_node(ctx):
    """Blocks of nn.Sequential(Linear, GELU, LayerNorm) in an nn.Sequential
    (the benchmark's workload): from the second step on (the first reads
    the modules' parameters in Python) the graph has no identity node where
    it had one per Linear, LayerNorm and inner nn.Sequential, and the trace
    is torch's, with inputs that do not require grad, leaves and not."""
    _needs_chains()
    for kind in ("nograd", "leaf", "nonleaf"):
        torch.manual_seed(0)
        model = blocks()
        counts = {}
        for identity in ("all", None):
            rec = Recorder(os.path.join(ctx.tmp, "count-%s-%s.zst" % (kind, identity)))
            saved = os.environ.pop("COMMDEBUG_IDENTITY", None)
            if identity:
                os.environ["COMMDEBUG_IDENTITY"] = identity
            try:
                for step in range(2):
                    x = torch.randn(4, 8, requires_grad=kind != "nograd")
                    with rec:
                        loss = model(x * 1 if kind == "nonleaf" else x).sum()
                        counts[identity] = aliases(loss)
                        loss.backward()
            finally:
                os.environ.pop("COMMDEBUG_IDENTITY", None)
                if saved is not None:
                    os.environ["COMMDEBUG_IDENTITY"] = saved
                rec.close()
        # with every node kept: one for each module taking a tensor that
        # requires grad (with COMMDEBUG_IDENTITY=all the GELUs' too), but the
        # outer Sequential's where its input is a leaf (torch's own node)
        want = {"nograd": (10, 0), "leaf": (12, 3), "nonleaf": (13, 1)}[kind]
        # left: the outer Sequential's (its caller is no Sequential); with a
        # leaf input, whose module call is torch's, each block's as well
        eq((counts["all"], counts[None]), want, "%s input: identity nodes with every one "
           "kept, and with the chains left out" % kind)
        evs = same_as_torch(ctx, "blocks-" + kind, train(blocks, x_kind=kind))
    ctx.note("%d events a run, the same as torch's" % len(evs))


class Keep(nn.Module):
    """Keeps its result, which the program uses again past the chain (its
    output side makes torch's node, the next child's node stays)."""

    def forward(self, x):
        self.kept = x * 2
        return self.kept


class HookInputs(torch.overrides.TorchFunctionMode):
    """Puts a gradient hook that dispatches on the input of every linear
    and layer_norm (a torch function mode sees inside the leaves' forward:
    their nodes stay)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (F.linear, F.layer_norm) and args[0].requires_grad:
            args[0].register_hook(lambda g: (g.abs().sum(), None)[1])
        return func(*args, **(kwargs or {}))


class Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


class Chains(nn.Module):
    """Chains where the recorder leaves nodes out and where it must not:
    a child keeping the result it returns, used again later, an
    nn.Identity and a Dropout between (kept), a torch function mode on (kept), a first child with a forward
    pre-hook of its own that uses the input (its Sequential's node stays),
    nn.Sequential three deep, one module twice in a chain, an empty
    nn.Sequential in a chain, a residual around an nn.Sequential, chains
    under activation checkpointing, and a chain whose child raises."""

    def __init__(self, reentrant):
        super().__init__()
        L, G, N, S = nn.Linear, nn.GELU, nn.LayerNorm, nn.Sequential
        shared = L(8, 8)
        hooked = L(8, 8)
        # (a gradient hook on its input that dispatches: where the hook runs
        # shows in the ops' order)
        hooked.register_forward_pre_hook(
            lambda m, args: args[0].register_hook(lambda g: (g.abs().sum(), None)[1]) and None)
        self.keep = S(L(8, 8), Keep(), N(8))
        self.odd = S(L(8, 8), nn.Identity(), N(8), nn.Dropout(0.25), L(8, 8))
        self.pre = S(L(8, 8), S(hooked, G()), N(8))
        self.deep = S(S(S(L(8, 8), G()), N(8)), L(8, 8))
        self.twice = S(shared, G(), shared, S(), N(8))
        self.res = S(L(8, 8), G())
        self.ckpt = S(S(L(8, 8), G()), N(8))
        self.boom = S(L(8, 8), Boom())
        self.reentrant = reentrant

    def forward(self, x):
        h = self.keep(x)
        with HookInputs():
            h = self.odd(h) + self.keep[1].kept
        h = self.pre(h)
        h = self.twice(self.deep(h))
        h = self.res(h) + h
        try:
            self.boom(h)
        except ValueError:
            pass
        return checkpoint(self.ckpt, h, use_reentrant=self.reentrant)


def test_chains_same_trace(ctx):
    """Chains (every case in its doc), under both kinds of activation
    checkpointing, with inputs that do not require grad, leaves and not:
    the trace is torch's, event for event, and nodes are left out (fewer
    than with COMMDEBUG_IDENTITY=all)."""
    _needs_chains()
    for reentrant in (False, True):
        for kind in ("nograd", "leaf", "nonleaf"):
            run = train(lambda: Chains(reentrant), x_kind=kind)
            evs = same_as_torch(ctx, "chains-%d-%s" % (reentrant, kind), run)
    ctx.note("%d events a run, the same as torch's" % len(evs))


class KeepOut(nn.Module):
    """A Linear and a module keeping the tensor it returns, which the
    program uses again after the next module."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.keep = Keep()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.keep(self.lin(x))) + self.keep.kept


def test_kept_output_same_trace(ctx):
    """A module that keeps the tensor it returns (self.out = y; return y),
    used again later: the output side makes torch's node there (else the
    later use's gradient would be added before the module's bw_pre, not
    after), with the C module and without it (the Python alone)."""
    if not _leanbw.available():
        raise Skip("torch %s has no LeanBackwardHook" % torch.__version__)
    for c in ("1", "0"):
        evs = same_as_torch(ctx, "kept-" + c, train(KeepOut), c_module=c)
        ctx.note("COMMDEBUG_SPEEDUPS=%s: %d events a run, the same as torch's" % (c, len(evs)))
