"""The recorders' nn.Module call: nn.Module._call_impl is call() here while
a light recorder's hooks are on or a full recorder is open (from its first
region to its close).

Global module hooks send every module call down nn.Module._call_impl's slow
path (it gathers the global and the module's hooks, makes a BackwardHook
for a full-backward pre-hook, ...), which costs a training step more than
the recorders' hooks themselves.  call() does what that path would do, for
the calls where only a recorder's hooks are there:

* light mode (_light): a call of a module with no hooks of its own, while
  no other code's global hooks are registered: fw_pre, torch's _call_impl
  (its fast path: the forward alone), fw_post.  That is what the global
  hooks would have done, in the same order: nothing else runs around such a
  forward.  Any other call (a module with hooks of its own, as FSDP's and
  tensor-parallel modules have, or while other code's global hooks are
  registered): torch's _call_impl with light mode's hooks in torch's global
  hook dicts for its duration (after the global hooks already there), so
  that they run where they ran as global hooks, among the module's own
  hooks and those of every module called inside it;
* the full recorder (_tracker, _leanbw) keeps its three global hooks
  registered for its regions, as CommDebugMode does; a call of a module with
  no hooks of its own, while they are the only global hooks (only_ours),
  runs the recorder's full_call (_leanbw.make_call): the slow path's steps
  for exactly those hooks, in its order.  Any other call: torch's _call_impl
  (other).  call() hands every call to full_call, which asks only_ours
  itself (in C where the C module is built);
* while dynamo traces (is_compiling()): torch's _call_impl alone, as without
  a recorder (the hooks would return at once there).

The call is put in once and taken out once, not at every region: each
assignment to a class attribute of nn.Module gives it and every subclass a
new type version, and CPython gives a class at most 1000 of those (3.13 and
later); past that, every attribute of every module is looked up the slow
way for the rest of the process (twice as slow on 3.14), recorded or not.

Where nn.Module._call_impl is not torch's own when the hooks go on (other
code replaced it), or with COMMDEBUG_MODULE_CALL=torch, light mode's hooks
are global hooks and the full recorder's calls take torch's slow path, as
before this module.  A subclass that overrides _call_impl itself is not
seen either way.
"""

import os
import threading

import torch.nn.modules.module as _nn

from . import _compat as C

_TORCH_CALL = _nn.Module._call_impl
_pairs = []                 # the hooks of the light recorders whose hooks are on
_full = []                  # the full_call of the full recorder whose region is open
_held = [0]                 # full recorders open that have put call() in
_in_dicts = []              # the keys of those put in torch's global dicts, while they are
_depth = [0]                # calls running with them there
_lock = threading.Lock()
_KEY0 = -(1 << 40)          # their keys there (negative: never a RemovableHandle's)
# torch's global hook dicts (1.13 has no backward pre-hooks: light mode
# needs 2.1 anyway, but the recorder imports this module on every torch)
_gfp = _nn._global_forward_pre_hooks
_gf = _nn._global_forward_hooks
_gbp = getattr(_nn, "_global_backward_pre_hooks", {})
_gb = getattr(_nn, "_global_backward_hooks", {})


def _cheap_compiling(compiling):
    """(dyn, flags): call()'s is_compiling() in fewer Python calls.
    is_compiling() is two Python functions (it asks torch.jit.is_scripting()
    first, then reads torch.compiler._is_compiling_flag, set while torch.export
    traces without dynamo).  Dynamo folds is_dynamo_compiling(), one function
    returning False, to True while it traces, as it does is_compiling(): so
    `dyn() or flags._is_compiling_flag` is is_compiling() where this torch has
    both (2.3 and later); elsewhere (compiling, None)."""
    import torch
    tc = getattr(torch, "compiler", None)
    dyn = getattr(tc, "is_dynamo_compiling", None)
    if dyn is None or not isinstance(getattr(tc, "_is_compiling_flag", None), bool) or \
            compiling is not getattr(tc, "is_compiling", None):
        return compiling, None
    return dyn, tc


def _make_call(compiling):
    import torch
    dyn, flags = _cheap_compiling(compiling)
    tracing = torch._C._get_tracing_state

    def call(self, *args, **kwargs):
        if dyn() or flags is not None and flags._is_compiling_flag:
            return _TORCH_CALL(self, *args, **kwargs)
        full = _full
        if full:
            # (the full recorder's call looks at the hooks itself: only_ours)
            return full[0](self, args, kwargs)
        if self._forward_pre_hooks or self._forward_hooks or self._backward_pre_hooks \
                or self._backward_hooks or _gfp or _gf or _gbp or _gb:
            return _hooked(self, args, kwargs) if _pairs else _TORCH_CALL(self, *args, **kwargs)
        pairs = _pairs
        for hooks in pairs:
            hooks[3](self, args)
        # torch's _call_impl with no hooks anywhere, as it is then: the
        # forward (_slow_forward while torch.jit traces), one frame less
        out = _TORCH_CALL(self, *args, **kwargs) if tracing() else self.forward(*args, **kwargs)
        for hooks in pairs:
            hooks[4](self, args, out)
        return out
    return call


def only_ours(mod):
    """Whether a full recorder's call takes this call of mod itself: the
    module has no hooks of its own, no light recorder's hooks are on, and
    the recorder's three global hooks are the only ones (the C module's
    FullCall asks the same of the same dicts and lists)."""
    return not (mod._forward_pre_hooks or mod._forward_hooks or mod._backward_pre_hooks
                or mod._backward_hooks or _pairs or _gb or len(_gfp) != 1 or len(_gf) != 1
                or len(_gbp) != 1 or len(_full) != 1)


def other(mod, args, kwargs):
    """A call that a full recorder's call does not take: torch's, with light
    mode's hooks in its global dicts where those are on."""
    return _hooked(mod, args, kwargs) if _pairs else _TORCH_CALL(mod, *args, **kwargs)


def state():
    """What FullCall reads for only_ours: (the four global hook dicts, the
    light recorders' hooks, the full recorders' calls, other)."""
    return dict(gfp=_gfp, gf=_gf, gbp=_gbp, gb=_gb, pairs=_pairs, full=_full, other=other)


def _hooked(self, args, kwargs):
    """torch's call with light mode's hooks in its global dicts."""
    with _lock:
        if _depth[0] == 0:
            for i, hooks in enumerate(_pairs):
                _gfp[_KEY0 - i] = hooks[0]
                _gf[_KEY0 - i] = hooks[1]
                _in_dicts.append(_KEY0 - i)
        _depth[0] += 1
    try:
        return _TORCH_CALL(self, *args, **kwargs)
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0:
                for k in _in_dicts:
                    _gfp.pop(k, None)
                    _gf.pop(k, None)
                del _in_dicts[:]


_call = []      # call(), made once (it needs is_compiling, which can import dynamo)


def _put(compiling):
    """Make nn.Module's call ours (False where other code replaced it, or
    COMMDEBUG_MODULE_CALL=torch); the caller holds _lock."""
    if not _call:
        _call.append(_make_call(compiling))
        C.skip_in_dynamo([_call[0], _hooked, other], recursive=False)
    if _nn.Module._call_impl is _call[0]:
        return True         # (in already: the variable was read when it went in)
    if os.environ.get("COMMDEBUG_MODULE_CALL", "") == "torch" or \
            _nn.Module._call_impl not in (_TORCH_CALL, _call[0]):
        return False
    _nn.Module._call_impl = _call[0]
    return True


def _maybe_restore():
    """torch's call back once no recorder needs ours; the caller holds _lock."""
    if not _pairs and not _full and not _held[0] and _call and \
            _nn.Module._call_impl is _call[0]:
        _nn.Module._call_impl = _TORCH_CALL


class _Handle:
    """Takes one recorder's hooks off (and torch's call back, after the last)."""

    def __init__(self, pair, users):
        self.pair = pair
        self.users = users

    def remove(self):
        with _lock:
            if self.pair in self.users:
                self.users.remove(self.pair)
            _maybe_restore()


def on(hooks, compiling):
    """Put a light recorder's hooks on (_light._make_hooks's: [0] and [1]
    as torch's hooks, [3] and [4] as call() runs them); returns the handles
    that take them off (RemovableHandles of global hooks where call() cannot
    be used)."""
    with _lock:
        if _put(compiling):
            _pairs.append(hooks)
            return [_Handle(hooks, _pairs)]
    return [C.register_global_fw_pre(hooks[0]), C.register_global_fw_post(hooks[1])]


def full_on(full_call, compiling, hold):
    """A full recorder's region opens, its global hooks registered:
    full_call(mod, args, kwargs) runs the calls where they are the only
    hooks.  Returns the handle that takes it off at the region's end (None
    where call() cannot be used: torch's slow path then).  hold: the
    recorder's first region: call() stays in until its release()."""
    with _lock:
        if not _put(compiling):
            return None
        if hold:
            _held[0] += 1
        _full.append(full_call)
        return _Handle(full_call, _full)


def release():
    """A full recorder that held call() in (full_on's hold) closes."""
    with _lock:
        _held[0] = max(0, _held[0] - 1)
        _maybe_restore()
