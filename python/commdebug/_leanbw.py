"""CommDebugMode's global full-backward pre-hook, without its autograd nodes
where they change nothing that CommDebugMode sees (torch 2.4 and newer).

CommDebugMode's module tracker registers a global full-backward pre-hook.
With one registered, nn.Module's call makes a ``BackwardHook``
(torch/utils/hooks.py) for every module call: after the forward pre-hooks
it passes the call's tensor arguments through ``BackwardHookFunction``, a
custom autograd function, and after the forward hooks the output's tensors;
each wraps every tensor in a view (one ``aten.view`` dispatched per tensor)
and adds one Python autograd node, and the pre-hook fires when the output's
node has run.  That costs about 20 us per module call on torch 2.14, more
than everything else the full recorder does.

The recorder keeps that hook registered, so that nn.Module makes the
``BackwardHook`` where it always does, but replaces the class
(``torch.nn.modules.module.BackwardHook``) by ``LeanBackwardHook`` while its
regions are open.  When the
only backward hook of a module call is the recorder's own pre-hook, each
side is decided on its own:

* **the input side**, when the call has exactly one tensor argument and it
  requires grad and is not a leaf, gets an identity node of C++ instead
  (``aten.alias``, made below the Python dispatch key): the same place in
  the graph (the gradients of the argument's uses inside the module reach
  its producer when that node runs, which decides when they are added to
  those of its other uses), no Python in backward, nothing dispatched.  The
  view the wrapper would dispatch is written as the op event it would have
  been.
* **the output side** needs no node when the output is one tensor (or a
  tuple holding one), requiring grad, not a leaf, whose ``grad_fn`` is the
  newest autograd node of the thread (``_get_sequence_nr``): the wrapper
  node would have been made right after it, so no node can run between
  them, and a gradient hook on the tensor (a pre-hook of its ``grad_fn``)
  fires where the wrapper's post-hook would.  The view is written as an op
  event, and ``bw_pre`` comes from that gradient hook, put among the
  tensor's other hooks where the wrapper node would put it (``place``).
* anything else (several tensors, a tensor that does not require grad among
  them, whose node would materialize zeros; a leaf; a tensor subclass such
  as DTensor or FakeTensor; a node made after the output's; another backward
  hook on the module) gets torch's own ``BackwardHook``.

``fw_done`` comes from the same place: the output side runs right after a
module's last forward hook, where CommDebugMode's module-local hook runs.

Hook order on one tensor.  With the wrappers, each module boundary is a node
and a tensor object of its own: hooks put on the tensor the program sees
after a boundary run before the boundary's node, those put before it run
after.  The input side's alias keeps that boundary; without the output
side's node, the hooks of both sides of it land on one tensor, so a placed
``bw_pre`` hook (a *marker*, ``_cd_lines``) remembers the handle id it was
placed at (``_cd_bound``), and at the next module boundary the tensor
crosses (``settle``, ``place``) the hooks registered since then go before
it, in the order they were registered.  The module tracker's own gradient
hooks are lines of the marker they would run next to, where that is exact:
``bw_enter`` (registered at the forward hook on the same tensor, with
nothing registered on it since the marker below) right after ``bw_pre``,
and ``bw_exit`` (one input tensor, nothing registered since) before the
marker of the module that produced it; elsewhere they are hooks of their
own, put where they were registered.  Not exact: a gradient hook that code
outside any module (a training loop) puts on the output of the outermost
module after it returned runs after that module's ``bw_pre``, not before
(no later boundary settles it).

``tests/recorder/test_observer.py`` compares traces made with this and with
torch's own BackwardHook, event for event, and the ops of the golden
programs with CommDebugMode's.
"""

import os
import time
import warnings
from collections import OrderedDict

import torch
import torch.nn.modules.module as _nn_module
from torch.utils.hooks import BackwardHook, RemovableHandle

from . import _compat as C
from . import _modcall
from ._light import _BWPRE, _DDP_MOD, _FULL, _NJ, _POST
from ._native import speedups

try:
    from torch._C._autograd import _get_sequence_nr as _next_seq_nr
except Exception:  # older torch
    _next_seq_nr = None

_Tensor = torch.Tensor
_cur_task = getattr(torch._C, "_current_graph_task_id", None)
_alias = torch.ops.aten.alias.default
_no_python_dispatch = getattr(torch._C, "_DisableTorchDispatch", None)
_clock = time.monotonic_ns
_grad_enabled = torch.is_grad_enabled


def available():
    """Whether this torch makes BackwardHooks the way LeanBackwardHook knows
    (and COMMDEBUG_LEAN_BW is not 0: torch's own BackwardHook everywhere)."""
    return (os.environ.get("COMMDEBUG_LEAN_BW", "1") != "0" and _next_seq_nr is not None
            and _no_python_dispatch is not None and C.TORCH >= (2, 4) and not C.EMULATE_BW_PRE
            and getattr(_nn_module, "BackwardHook", None) in (BackwardHook, LeanBackwardHook)
            and hasattr(BackwardHook, "setup_input_hook")
            and hasattr(BackwardHook, "setup_output_hook"))


_regions = [0]     # full recorders' regions open with LeanBackwardHook in place


def install():
    """Make nn.Module use LeanBackwardHook while a full recorder's region is
    open (one call per region; uninstall() at its end)."""
    _regions[0] += 1
    _nn_module.BackwardHook = LeanBackwardHook


def uninstall():
    """At a region's end: torch's own BackwardHook again once no region is
    open (dynamo knows that class by identity: code compiled later, with
    full backward hooks of its own, sees the class it expects)."""
    _regions[0] = max(0, _regions[0] - 1)
    if _regions[0] == 0 and _nn_module.BackwardHook is LeanBackwardHook:
        _nn_module.BackwardHook = BackwardHook


new_key = C.new_hook_key


def _hook_dict(t):
    """t's gradient hook dict (as Tensor.register_hook makes it; t has a grad_fn)."""
    d = t._backward_hooks
    if d is None:
        d = t._backward_hooks = OrderedDict()
        t.grad_fn._register_hook_dict(t)
    return d


def make_marker(rec, lines, enter):
    """The gradient hook that writes lines (bw_pre, bw_enter, bw_exit
    prefixes) when it fires; enter: one of them is a bw_enter (which queues
    the end-of-backward callback, as the module tracker's does).  The C
    module's Marker where the recorder uses it (the same attributes)."""
    if rec._cmarker is not None:
        return rec._cmarker(rec._w.buf, rec, lines, enter)
    append = rec._append
    clock = _clock

    def marker(grad):
        t = clock()
        for p in lines:
            append((p, t))
        if marker._cd_enter:
            rec._queue_bw_end()
        return None
    marker._cd_lines = lines
    marker._cd_enter = enter
    marker._cd_bound = None
    return marker


def place(rec, t, lines, enter):
    """Put a marker with lines on t, where the wrapper node's post-hook
    would run: before every hook on t so far (they hang on the tensor it
    wraps, or deeper), with those registered since the newest marker right
    after it.  Hooks registered later are put in front of it by the next
    boundary (settle, place)."""
    d = _hook_dict(t)
    if d:
        if _quiet(d):
            # the newest marker runs first and nothing came since: join it
            first = next(iter(d.values()))
            first._cd_lines[0:0] = lines
            first._cd_enter = first._cd_enter or enter
            first._cd_bound = new_key()
            return
        since, rest = _layers(d, _newest_bound(d))
        d.clear()
        fn = make_marker(rec, lines, enter)
        fn._cd_bound = new_key()
        d[fn._cd_bound] = fn
        d.update(since)
        d.update(rest)
        return
    fn = make_marker(rec, lines, enter)
    fn._cd_bound = new_key()
    d[fn._cd_bound] = fn


_EXIT = '{"ev":"bw_exit"'


def exit_line(rec, t, line):
    """bw_exit of a module whose one input tensor requiring grad is t (a
    non-leaf): a line of the marker that runs first on t when nothing was
    registered since it (after the bw_exit lines put there before it: the
    hooks they stand for run in the order they were registered), else a
    hook of its own, registered now."""
    d = _hook_dict(t)
    if d and _quiet(d):
        lines = next(iter(d.values()))._cd_lines
        i = 0
        while i < len(lines) and lines[i].startswith(_EXIT):
            i += 1
        lines.insert(i, line)
        return
    fn = make_marker(rec, [line], False)
    d[new_key()] = fn


def _newest_bound(d):
    """The bound of the newest marker among a tensor's hooks (-1: none)."""
    bound = -1
    for v in d.values():
        b = getattr(v, "_cd_bound", None)
        if b is not None and b > bound:
            bound = b
    return bound


def _layers(d, bound):
    """A tensor's hooks split at bound: those registered since (by key, the
    order they were registered in) and the others (in their order)."""
    items = list(d.items())
    return sorted(kv for kv in items if kv[0] > bound), [kv for kv in items if kv[0] <= bound]


def _quiet(d):
    """Whether nothing was registered on a tensor (hook dict d) since its
    newest marker, which then runs first (or since ever, without one)."""
    if not d:
        return True
    first = next(iter(d.values()))
    bound = getattr(first, "_cd_bound", None)
    return bound is not None and max(d) <= bound


def settle(t):
    """At a module boundary (where the program with wrappers would go on
    with a new tensor): the hooks registered on t since its newest marker
    run before it, in the order they were registered."""
    d = t._backward_hooks
    if not d:
        return
    bound = _newest_bound(d)
    if bound < 0 or max(d) <= bound:
        return
    since, rest = _layers(d, bound)
    if list(d.items())[:len(since)] == since:
        return
    d.clear()
    d.update(since)
    d.update(rest)


def insert_hook(t, key, fn):
    """Put fn on t under key, a key reserved earlier, as if it had been
    registered then."""
    d = _hook_dict(t)
    if not d or max(d) < key:
        d[key] = fn
    else:
        items = list(d.items())
        d.clear()
        d.update(kv for kv in items if kv[0] < key)
        d[key] = fn
        d.update(kv for kv in items if kv[0] > key)
    settle(t)


def _settle_all(args):
    for a in args:
        if type(a) is _Tensor and a._backward_hooks:
            settle(a)


def _single(args):
    """The tensor among args when there is exactly one, else None (and
    False when there is none)."""
    one = False
    for a in args:
        if isinstance(a, _Tensor):
            if one is not False:
                return None
            one = a
    return one


class LeanBackwardHook(BackwardHook):
    """torch's BackwardHook, without its nodes where the module's doc says
    they change nothing; torch's own wherever a recorder's pre-hook is not
    the call's only backward hook."""

    # BackwardHook.__init__'s state, as class defaults (set on the instance
    # only by torch's own setup methods, where they run)
    grad_outputs = None
    n_outputs = -1
    output_tensors_index = None
    n_inputs = -1
    input_tensors_index = None

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        rec = None
        for h in user_pre_hooks:
            r = getattr(h, "__self__", None)
            if getattr(r, "_lean_bw", False) is True:
                rec = r
                break
        self._rec = rec
        self._lean = rec is not None and not user_hooks and len(user_pre_hooks) == 1

    def setup_input_hook(self, args):
        if self._lean and _grad_enabled():
            t = _single(args)
            if t is False:
                return args
            if t is not None and type(t) is _Tensor and t.grad_fn is not None:
                # An identity node of C++ (no Python in backward, nothing
                # dispatched) where the wrapper's would be: the gradients of
                # t's uses inside the module reach t's producer when it runs,
                # as through the wrapper (when they are added to those of t's
                # other uses decides what the engine runs when).
                if t._backward_hooks:
                    settle(t)
                with _no_python_dispatch():
                    a = _alias(t)
                rec = self._rec
                if rec._in_region:
                    rec._append((rec._view_text[_cur_task() != -1], _clock()))
                if len(args) == 1 and type(args) is tuple:
                    return (a,)
                return tuple(a if x is t else x for x in args) if type(args) is tuple \
                    else type(args)(*(a if x is t else x for x in args))
        if self._rec is not None:
            _settle_all(args)
        return BackwardHook.setup_input_hook(self, args)

    def setup_output_hook(self, args):
        rec = self._rec
        if rec is None:
            return BackwardHook.setup_output_hook(self, args)
        mod = self.module
        pending = rec._pending_enter.pop(id(mod), None) if rec._pending_enter else None
        if not rec._in_region:
            return BackwardHook.setup_output_hook(self, args)
        e = rec._lc.get(id(mod))
        if e is None:
            e = rec._lentry(mod)
        if e[1] is None:        # (not a module of the program: compiled code's)
            return BackwardHook.setup_output_hook(self, args)
        bw = _cur_task() != -1
        now = _clock()
        rec._append((e[5 if bw else 4][1], now))      # fw_done
        t = None
        if self._lean and _grad_enabled():
            t = args if type(args) is _Tensor else _single(args) if type(args) is tuple else None
            if t is None or t is False or type(t) is not _Tensor:
                t = None
            else:
                # (nor one the module keeps, self.out = y: code using it later
                # would pass the node by)
                g = t.grad_fn
                if g is None or g._sequence_nr() != _next_seq_nr() - 1 or \
                        any(v is t for v in mod.__dict__.values()):
                    t = None
        if t is None:
            if pending is not None:
                insert_hook(pending[0], pending[1], make_marker(rec, [pending[2]], True))
            if type(args) is _Tensor:
                if args._backward_hooks:
                    settle(args)
            elif type(args) is tuple:
                _settle_all(args)
            return BackwardHook.setup_output_hook(self, args)
        rec._append((rec._view_text[bw], now))
        if pending is None:
            place(rec, t, [e[6]], False)
            return args
        if pending[0] is t and _quiet(t._backward_hooks):
            place(rec, t, [e[6], pending[2]], True)
        else:
            insert_hook(pending[0], pending[1], make_marker(rec, [pending[2]], True))
            place(rec, t, [e[6]], False)
        return args


_tracing_state = torch._C._get_tracing_state
_global_bw_pre = getattr(_nn_module, "_global_backward_pre_hooks", {})
_NOT_WRAPPED = ("For backward hooks to be called, module output should be a Tensor or a tuple "
                "of Tensors but received %s")


def _guard_raii():
    """True where _DisableTorchDispatch() takes the Python dispatch key out
    from its making to its freeing, as torch's RAII guard it wraps does (its
    __enter__ does nothing: torch 1.13 to 2.14, py_context_manager_DEPRECATED),
    so that FullCall needs neither __enter__ nor __exit__; found by trying."""
    try:
        key = torch._C.DispatchKey.Python
        off = torch._C._dispatch_tls_is_dispatch_key_excluded
        if off(key):
            return False
        g = _no_python_dispatch()
        made = off(key)
        del g
        return made and not off(key)
    except Exception:
        return False


# Modules whose forward makes one autograd node, whose only input is the
# module's one tensor argument (not in place): the identity node of their input
# side would run right after that node with nothing between, and changes no
# op's order, so FullCall leaves it out (their class exactly, with no forward
# of their own; COMMDEBUG_IDENTITY=all keeps it everywhere).
_SINGLE_NODE = ("GELU", "ReLU", "ReLU6", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU",
                "Softplus", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh")


def _single_node_classes():
    if os.environ.get("COMMDEBUG_IDENTITY", "") == "all":
        return ()
    return tuple(c for c in (getattr(torch.nn, n, None) for n in _SINGLE_NODE)
                 if isinstance(c, type))


def _torch_forward(cls):
    """cls's forward where it is torch's own (defined with cls, in torch.nn),
    else None."""
    f = cls.__dict__.get("forward")
    if getattr(f, "__module__", None) != cls.__module__ or \
            getattr(f, "__qualname__", None) != cls.__name__ + ".forward" or \
            not cls.__module__.startswith("torch.nn.modules."):
        return None
    return f


def _chain_classes():
    """FullCall's (seq, leaves) for the chains of nn.Sequential (the C
    module's FullCall leaves their identity nodes out): (None, ()) where
    nn.Sequential's forward is not torch's own, or COMMDEBUG_IDENTITY=all."""
    seq = _torch_forward(torch.nn.Sequential)
    if os.environ.get("COMMDEBUG_IDENTITY", "") == "all" or seq is None:
        return None, ()
    leaves = tuple((c, f) for c, f in ((c, _torch_forward(c)) for c in
                                       (torch.nn.Linear, torch.nn.LayerNorm)) if f is not None)
    return (torch.nn.Sequential, seq), leaves


def make_call(rec):
    """The full recorder's call of a module (nn.Module._call_impl hands it
    every call in a region): torch's where the module has hooks of its own
    or the recorder's three global hooks are not the only ones
    (_modcall.only_ours), else the
    steps of nn.Module's slow path for exactly those, in its order (the
    forward pre-hook, the BackwardHook's input side, the forward, the
    forward hook, the warning for an output it cannot wrap, the output
    side).  The hooks return None, so nothing they return is looked at.
    The C module's FullCall where it is built (its common case; this
    Python for the rest)."""
    fw_pre = rec._fw_pre_lean
    fw_post = rec._fw_post_lean
    gbp = _global_bw_pre
    only_ours, other = _modcall.only_ours, _modcall.other

    def post(mod, args, result, bw_hook=None, level=3):
        """The output side (level: the warning's stack level, _wrapped_call_impl's)."""
        fw_post(mod, args, result)
        if not isinstance(result, (_Tensor, tuple)):
            warnings.warn(_NOT_WRAPPED % type(result), stacklevel=level)
        if bw_hook is None:
            bw_hook = LeanBackwardHook(mod, [], list(gbp.values()))
        return bw_hook.setup_output_hook(result)

    def full_call(mod, args, kwargs):
        if not only_ours(mod):
            return other(mod, args, kwargs)
        forward = mod._slow_forward if _tracing_state() else mod.forward
        fw_pre(mod, args)
        bw_hook = LeanBackwardHook(mod, [], list(gbp.values()))
        args = bw_hook.setup_input_hook(args)
        return post(mod, args, forward(*args, **kwargs), bw_hook, 4)
    native = speedups() if rec._cmarker is not None else None
    if native is None:
        return full_call
    seq, leaves = _chain_classes()
    return native.FullCall(
        rec=rec, lc=rec._lc, buf=rec._w.buf, pending=rec._pending_enter, cur_task=_cur_task,
        grad_enabled=_grad_enabled, tensor=_Tensor, odict=OrderedDict, handle=RemovableHandle,
        alias=_alias, op_type=C.OP_CALLS_OP, no_dispatch=_no_python_dispatch,
        view=tuple(rec._view_text), next_seq=_next_seq_nr, tracing=_tracing_state,
        py_call=full_call, py_post=post,
        tf_mode=getattr(torch._C, "_is_torch_function_mode_enabled", None),
        slots=(_NJ, _POST, _BWPRE, _DDP_MOD, _FULL), guard_raii=_guard_raii(),
        single=_single_node_classes(), seq=seq, leaves=leaves,
        py_exit=lambda t, line: exit_line(rec, t, line), **_modcall.state())
