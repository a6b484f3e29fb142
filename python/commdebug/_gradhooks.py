"""register_multi_grad_hook for the recorder's module tracker, on every torch
it runs on: torch's own where it has one that is safe, a lean copy of it on
2.x, a fallback with the same semantics on 1.13 (see multi_grad_hook)."""

import threading
import weakref

import torch

from ._compat import EMULATE_BW_PRE, TORCH, _cur_task, _task_id, degraded, no_dispatch_modes

_native_mgh = None
_native_has_mode = False
try:
    from torch.autograd.graph import register_multi_grad_hook as _native_mgh
    import inspect as _inspect
    _native_has_mode = "mode" in _inspect.signature(_native_mgh).parameters
except Exception:
    _native_mgh = None


class _Handles:
    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


def _will_run(node):
    """Whether the backward pass running now runs node.  A leaf's gradient
    accumulator in torch.autograd.grad runs only when the leaf is one of its
    inputs, which the engine does not say (it raises): counted as run, so
    that a hook waiting for it is never called early nor twice (at worst
    not at all: a bw_exit left out, where CommDebugMode raises)."""
    try:
        return torch._C._will_engine_execute_node(node)
    except RuntimeError:
        return True


def _grad_fn_or_acc(t):
    if t.requires_grad and t.grad_fn is None:
        # A leaf: its gradient accumulator, reached through a throwaway view.
        with no_dispatch_modes(), torch.enable_grad():
            return t.expand_as(t).grad_fn.next_functions[0][0]
    return t.grad_fn


def _register_hook(t, fn, prepend):
    h = t.register_hook(fn)
    if prepend:
        # Make the new hook run first.  The engine walks the hook dict with
        # PyDict_Next, which follows insertion order (not OrderedDict's
        # move_to_end), so rebuild the dict with the new hook in front.
        d = t._backward_hooks
        items = list(d.items())
        d.clear()
        d[h.id] = fn
        for k, v in items:
            if k != h.id:
                d[k] = v
    return h


def _fallback_multi_grad_hook(tensors, fn, mode, prepend=False):
    """register_multi_grad_hook for a torch that lacks it (or lacks ``mode``),
    with the same semantics: "all" calls fn once every tensor whose gradient
    this backward computes has it; "any" calls fn at the first one.

    ``prepend`` puts the hook before the tensor's existing hooks: without the
    full-backward-hook wrappers of torch >= 2.0 (which give every module
    boundary its own autograd node), that is the order in which the hooks of
    nested modules sharing one tensor would run there: outer module first."""
    if mode == "any":
        fired = [None]

        def any_hook(grad):
            tid = _task_id()
            if fired[0] == tid:
                return None
            fired[0] = tid
            fn(grad)
            return None

        return _Handles([_register_hook(t, any_hook, prepend)
                         for t in tensors if t.requires_grad])

    n = len(tensors)
    if n == 1:
        # one tensor: its hook runs once per backward pass that reaches it
        def one_hook(grad):
            fn([True])
            return None
        return _Handles([_register_hook(tensors[0], one_hook, prepend)])
    if NODE_HOOK_CYCLES:
        # Not the nodes themselves (see NODE_HOOK_CYCLES): the tensors,
        # weakly; one that died by the first gradient counts as one that
        # gets its gradient in that pass.
        refs = [weakref.ref(t) for t in tensors]

        def nodes():
            ts = [r() for r in refs]
            return [True if t is None else _grad_fn_or_acc(t) for t in ts]
    else:
        grad_fns = [_grad_fn_or_acc(t) for t in tensors]

        def nodes():
            return grad_fns
    count = {}
    buffers = {}

    def make(idx):
        def all_hook(grad):
            tid = _task_id()
            c = count.get(tid, 0)
            if c == 0:
                expected = sum(1 for g in nodes()
                               if g is True or (g is not None and _will_run(g)))
                buffers[tid] = ([None] * n, expected)
            buf, expected = buffers[tid]
            # Only that it arrived: a gradient kept here until the others
            # come would make AccumulateGrad copy it instead of stealing it
            # (new ops the program does not run without the recorder).
            buf[idx] = True
            count[tid] = c + 1
            if c + 1 == expected:
                del count[tid]
                del buffers[tid]
                fn(buf)
            return None
        return all_hook

    return _Handles([_register_hook(t, make(i), prepend) for i, t in enumerate(tensors)])


try:
    from torch.autograd.graph import _get_grad_fn_or_grad_acc as _grad_fn_of
except Exception:
    _grad_fn_of = None
_mgh_lock = threading.Lock()


def _lean_multi_grad_hook(tensors, fn, mode):
    """torch's register_multi_grad_hook (2.x), doing what it does with less
    work per registration: the same gradient hooks, in the same order, the
    gradient accumulators of leaves found by torch's own function (a view
    that dispatches what torch's does), and in mode "all" the gradients held
    the same way until the last arrives (holding one changes what the
    autograd engine dispatches: it copies a gradient it cannot steal).  No
    handle is returned: the recorder removes none."""
    if mode == "any":
        ran = {}

        def any_hook(grad):
            task = _cur_task()
            with _mgh_lock:
                prev = ran.get(task)
                ran[task] = True
            if not prev:
                fn(grad)

        for t in tensors:
            if t.requires_grad:
                t.register_hook(any_hook)
        return
    n = len(tensors)
    # (for a leaf, torch's function dispatches a view, which CommDebugMode
    # records: so does this, even where the node is not used)
    grad_fns = [_grad_fn_of(t) for t in tensors]
    if n == 1:
        # what torch's does for one tensor, without asking the engine
        # whether the node runs (it raises for a leaf in autograd.grad)
        def one_hook(grad):
            fn([grad])
        tensors[0].register_hook(one_hook)
        return
    count = {}
    buffer = {}
    nb = [0]

    def make(idx):
        def all_hook(grad):
            task = _cur_task()
            with _mgh_lock:
                c = count.get(task, 0)
                count[task] = c + 1
                if c == 0:
                    buffer[task] = [None] * n
                    nb[0] = sum(map(_will_run, grad_fns))
            buf = buffer[task]
            buf[idx] = grad
            if c == nb[0] - 1:
                fn(buf)
                del count[task]
                del buffer[task]
        return all_hook

    for i, t in enumerate(tensors):
        t.register_hook(make(i))


# Before torch 2.1 the Python object of an autograd node reports the hook
# dicts of that node to the garbage collector whether or not it owns the node
# (pytorch/pytorch#102174).  A gradient hook that holds that object (as
# register_multi_grad_hook's holds the nodes of its tensors) then closes a
# cycle the collector takes for garbage: it clears the tensor's hook dict,
# and every gradient hook on the tensor, the program's own too, is lost.
# There the recorder's hooks hold no node (_fallback_multi_grad_hook).
NODE_HOOK_CYCLES = TORCH < (2, 1)


def multi_grad_hook(tensors, fn, mode="all"):
    if _native_has_mode and _grad_fn_of is not None and _cur_task is not None:
        return _lean_multi_grad_hook(tensors, fn, mode)
    if _native_mgh is not None and (_native_has_mode or mode == "all") and not NODE_HOOK_CYCLES:
        if _native_has_mode:
            return _native_mgh(tensors, fn, mode=mode)
        return _native_mgh(tensors, fn)
    return _fallback_multi_grad_hook(tensors, fn, mode, prepend=EMULATE_BW_PRE)


if _native_mgh is None:
    degraded.append("no register_multi_grad_hook, bw_enter/bw_exit use tensor hooks "
                    "with the same semantics")
