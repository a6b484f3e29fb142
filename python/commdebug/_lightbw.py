"""Light mode's bw_pre and bw_end: where each module call's backward starts,
without CommDebugMode's wrapper nodes (see commdebug._light).

CommDebugMode's global full-backward pre-hook makes every module wrap its
outputs in an autograd node (BackwardHookFunction), which costs more than
light mode's whole budget.  Instead one gradient hook is put on the module's
final outputs, the tensors that node would wrap (a Tensor, or the Tensors of
a tuple, when one requires grad and grad mode is on): it fires when their
gradient is computed, which is when that node would run, at most once per
backward pass.

Order on one tensor.  Where nested modules return the same tensor, its hooks
are put in the order the nested wrapping nodes would run them: each module's
own ``bw_pre`` first, then the gradient hooks put there after the module
inside it returned the tensor (by the module's own forward hooks, as FSDP2's
pre-backward all-gather is, or by its forward, as FSDP1's wrapper puts its
hook on its inner module's output), then the inner module's ``bw_pre`` and
the hooks before it.  A hook dict remembers where the last ``bw_pre`` hook
was put (``_cd_since``: the next handle id then).  Nested modules returning
the same tensor with nothing registered in between share one hook (its lines
outermost first).

The C++ hook.  Where commdebug._gradhook is built for this torch, a
module's own hook on a tensor without a hook dict (the common case, and the
joins that follow it) is a C++ hook on the tensor's grad_fn instead: the node
runs its tensor hooks in the order they were added, a hook dict being one of
them, added when the dict is made.  So hooks registered later on the tensor
run after it, as above; when a module outside puts its bw_pre in such a later
dict, the C++ hook is moved after the dict first (before_dict, after_dict),
all of the dict counting as registered since it.  The hook a module's
output tensors share (a tuple of several requiring grad) is a C++ hook on
each tensor's node too, where the dict it would go in is not there yet
(_gradhook.attach_shared: put after the node's other hooks and before the
C++ hooks of modules inside, as that dict would be); a module outside
returning one of those tensors puts its line first in the shared hook's
lines, as in the dict.  The order stays the one above, tested against the
Python hooks (test_speedups).

Calls torch wraps anyway.  A call that torch wraps in its own BackwardHook for
full-backward pre-hooks (the module's, or global ones of other code) runs
them where the wrapper node runs, before any gradient hook on its output, as
under CommDebugMode: there ``bw_pre`` is put first among that call's
pre-hooks instead (the BackwardHook is a local of nn.Module's call, whose
frame calls the forward hooks).

``bw_end``: the end of each backward pass (an engine callback queued by the
first ``bw_pre``).

Not exact (the golden programs have none of these; the full recorder is):
a wrapper node runs when the gradients of all the tensors it wraps are in,
and right before the node that made them; the gradient hook fires when the
node that made the tensor runs.  The two part where a module returns several
tensors requiring grad whose gradients come in apart (``bw_pre`` at the
first, not the last), or a tensor whose node is not the newest when the
module returns (it made nodes after, such as an auxiliary loss: those may
run between the two).  A collective issued in backward between the two
moments is counted for another module than under CommDebugMode.
"""

import itertools
import sys
import time
from collections import OrderedDict

import torch
from torch.utils.hooks import BackwardHook, RemovableHandle

from . import _compat as C
from ._native import gradhook, speedups

# Keys of the gradient hooks put in a tensor's hook dict directly: negative,
# never those of torch's RemovableHandle.
hook_keys = itertools.count(-1, -1)
# Functions of nn.Module's call in which the forward hooks run (the local
# bw_hook: the call's BackwardHook).
_CALL_FRAMES = ("inner", "_call_impl")


def make_bw_hooks(rec, compiling, slots):
    """(attach, attach1, outputs, pre_hooked, shared) of a light Recorder whose
    trace is open (closures, as _light._make_hooks's; slots: those of a
    module's entry holding its bw_pre line, its own hook, its joined hooks,
    its module pre-hook):

    * attach(tensors, e, mark): bw_pre of the module of entry e when the
      first of tensors gets its gradient (mark: the first handle id its own
      forward hooks may have registered, or None); attach1(t, e, mark) for
      one tensor;
    * outputs(output): the tensors torch's BackwardHook would wrap, or None;
    * pre_hooked(e, depth): whether this call's bw_pre is one of its
      BackwardHook's pre-hooks (then it needs no attach);
    * shared(lines, one): the hook several tensors share (one: one tensor
      whose hook others may join) writing lines, a list."""
    _BWPRE, _BWHOOK, _BWJOIN, _BWMOD = slots
    append = rec._w.buf.append
    mono0 = rec._mono0
    lleaf = rec._lleaf
    state = rec._lstate          # [region, a bw_end callback is queued, in a region]
    clock = time.monotonic_ns
    cur_task = torch._C._current_graph_task_id
    grad_enabled = torch.is_grad_enabled
    Tensor = torch.Tensor
    keys = hook_keys
    Handle = RemovableHandle
    queue = C.queue_engine_callback
    getframe = sys._getframe

    def bw_end():
        state[1] = False
        append('{"ev":"bw_end","t":%d}\n' % (clock() - mono0))

    native = speedups()
    Fire = getattr(native, "Fire", None) if native is not None else None
    gh = rec._lgradhook
    gh_attach = gh.attach if gh is not None else None
    gh_replace = gh.replace if gh is not None else None
    gh_demote = gh.demote if gh is not None else None
    gh_shared = gh.attach_shared if gh is not None else None

    def fire(lines):
        """A gradient hook writing lines, all at the time it fires (the C
        module's Fire where it is built: this Python where not)."""
        if Fire is not None:
            return Fire(lines, state, queue, bw_end, rec._w.buf)

        def bw_pre(grad):
            if not state[1]:
                state[1] = True
                queue(bw_end)
            t = clock()
            for p in lines:
                append((p, t))
            return None
        return bw_pre

    def joined(prefixes):
        """The bw_pre hook of a module (prefixes: its line), or of nested
        modules returning the same tensor (their lines, outermost first),
        made once: a tensor's node runs once per backward pass, so does it."""
        fn = fire(prefixes)
        fn._cd_own = prefixes
        return fn

    def module_bw_pre(prefix):
        """bw_pre as a full-backward pre-hook of a module call."""
        write = fire((prefix,))

        def bw_pre(mod, grad_output):
            if compiling() or not state[2]:
                return None
            return write(None)
        return bw_pre

    def pre_hooked(e, depth):
        """For a call with full-backward pre-hooks (the module's own or
        global ones: the caller checks), whether its bw_pre is put first
        among those of the BackwardHook torch made for it (depth: frames
        from the caller to nn.Module's call)."""
        frame = getframe(depth + 1)
        bw_hook = frame.f_locals.get("bw_hook") if frame.f_code.co_name in _CALL_FRAMES \
            else None
        if type(bw_hook) is not BackwardHook or \
                not isinstance(getattr(bw_hook, "user_pre_hooks", None), list):
            # (a LeanBackwardHook of a full recorder open too decides at its
            # construction what it runs: not a pre-hook put in later)
            return False
        fn = e[_BWMOD]
        if fn is None:
            fn = e[_BWMOD] = module_bw_pre(e[_BWPRE])
        bw_hook.user_pre_hooks.insert(0, fn)
        return True

    def newer(d, mark):
        """The smallest key of a hook on d registered after the last bw_pre
        hook put there (without one: mark, or None)."""
        since = getattr(d, "_cd_since", None)
        return mark if since is None else since

    def quiet(d, mark):
        """Whether nothing was registered on d since its last bw_pre hook
        (or since mark)."""
        since = newer(d, mark)
        return since is None or max(d) < since

    def join(e, d, mark):
        """Where the first hook on a tensor (dict d) is a module's own (or
        joined) bw_pre hook, with nothing registered since, make it this
        module's too, its line first (made once per pair).  True when done."""
        k, first = next(iter(d.items()))
        inner = getattr(first, "_cd_own", None)
        if inner is None:
            return False
        if not quiet(d, mark):
            return False
        d[k] = joined_with(e, first)
        d._cd_since = Handle.next_id
        return True

    def joined_with(e, first):
        """The bw_pre hook of e's module joined with first, the hook of a
        module inside it that returned the same tensor (made once per pair)."""
        cache = e[_BWJOIN]
        if cache is None:
            cache = e[_BWJOIN] = {}
        fn = cache.get(first)
        if fn is None:
            fn = cache[first] = joined((e[_BWPRE],) + first._cd_own)
        return fn

    def before_dict(t, d):
        """Before t's hook dict d gets a bw_pre hook: t's _gradhook hook, if
        it has one, moved to run after d's hooks, as a hook put there before
        d was made; all of d is then newer than it.  (After: a dict made now
        is after it already, and is moved before it with after_dict.)"""
        if gh_demote is not None and gh_demote(t) and getattr(d, "_cd_since", None) is None:
            d._cd_since = 0

    def after_dict(t):
        """After t's hook dict was made for a bw_pre hook: t's _gradhook hook
        moved after it."""
        if gh_demote is not None:
            gh_demote(t)

    def put_first(d, key, fn, mark):
        """fn first among the hooks of d, then those registered since the
        last bw_pre hook put on d (or since mark), then the rest."""
        since = newer(d, mark)
        items = list(d.items())
        d.clear()
        d[key] = fn
        if since is not None:
            for k, v in items:
                if k >= since:
                    d[k] = v
            for k, v in items:
                if k < since:
                    d[k] = v
        else:
            d.update(items)
        d._cd_since = Handle.next_id

    def shared(lines, one):
        """A bw_pre hook whose lines the modules returning its tensors add
        to (one: for one tensor, else fired once per backward pass)."""
        if one:
            fn = fire(lines)
        elif Fire is not None:
            fn = Fire(lines, state, queue, bw_end, rec._w.buf, cur_task)
        else:
            last = [None]
            write = fire(lines)

            def fn(grad):
                task = cur_task()
                if last[0] != task:
                    last[0] = task
                    write(grad)
                return None
        fn._cd_lines = lines
        return fn

    def attach1(t, e, mark):
        """attach((t,), e, mark), in one call where t can own its hook or
        join one (the common case)."""
        if not own_or_join(t, e, mark):
            attach_many((t,), e, mark)

    def own_or_join(t, e, mark):
        """The hook of a module's one output tensor where it can own a hook
        or join one.  True when done."""
        d = t._backward_hooks
        if d is None:
            g = t.grad_fn
            if g is None or type(t) is not Tensor:
                return False
            # the common case: the module's own hook, made once
            fn = e[_BWHOOK]
            if fn is None:
                fn = e[_BWHOOK] = joined((e[_BWPRE],))
            if gh_attach is not None:
                # on the grad_fn, in C++; or joined with the one a module
                # inside put there (nothing registered since: no dict), or
                # first in the lines of a hook its tensors share
                first = gh_attach(t, fn)
                if first is None:
                    return True
                lines = getattr(first, "_cd_lines", None)
                if lines is not None:
                    lines.insert(0, e[_BWPRE])
                else:
                    gh_replace(t, joined_with(e, first))
                return True
            d = t._backward_hooks = OrderedDict()
            g._register_hook_dict(t)
            d[next(keys)] = fn
            d._cd_since = Handle.next_id
            return True
        if not d:
            return False
        before_dict(t, d)
        lines = getattr(next(iter(d.values())), "_cd_lines", None)
        if lines is None:
            return type(t) is Tensor and join(e, d, mark)
        if not quiet(d, mark):
            return False
        lines.insert(0, e[_BWPRE])
        d._cd_since = Handle.next_id
        return True

    def attach(tensors, e, mark):
        if len(tensors) == 1:
            attach1(tensors[0], e, mark)
        else:
            attach_many(tensors, e, mark)

    def attach_many(tensors, e, mark):
        """A hook of bw_pre's own on each of tensors (see the module's doc
        for where it goes among their hooks)."""
        bw_pre = shared([e[_BWPRE]], len(tensors) == 1)
        for t in tensors:
            d = t._backward_hooks
            key = next(keys)
            if d is None:
                if type(t) is not Tensor:       # a subclass (DTensor): its own way
                    h = t.register_hook(bw_pre)
                    t._backward_hooks._cd_since = Handle.next_id
                    if t.grad_fn is None:
                        lleaf.append((t._backward_hooks, h.id))
                    continue
                g = t.grad_fn
                if g is not None and gh_shared is not None:
                    # in C++, where the hook dict made here would be
                    gh_shared(t, bw_pre)
                    continue
                # Tensor.register_hook without its handle
                d = t._backward_hooks = OrderedDict()
                if g is not None:
                    g._register_hook_dict(t)
                d[key] = bw_pre
                d._cd_since = Handle.next_id
                after_dict(t)
            elif d:
                before_dict(t, d)
                put_first(d, key, bw_pre, mark)
            else:
                before_dict(t, d)
                d[key] = bw_pre
                d._cd_since = Handle.next_id
            if t.grad_fn is None:
                lleaf.append((d, key))

    def outputs(output):
        if type(output) is Tensor or isinstance(output, Tensor):
            return (output,) if output.requires_grad and grad_enabled() else None
        if isinstance(output, tuple):
            ts = [o for o in output if isinstance(o, Tensor) and o.requires_grad]
            return ts if ts and grad_enabled() else None
        return None

    C.skip_in_dynamo([bw_end, fire, joined, module_bw_pre, pre_hooked, newer, quiet, join,
                      joined_with, before_dict, after_dict, put_first, shared, attach1,
                      own_or_join, attach, attach_many, outputs])
    return attach, attach1, outputs, pre_hooked, shared
