"""Light mode: module boundaries and collectives, no per-op events.

``LightEvents`` is a base of commdebug.recorder.Recorder, used when it is
made with ``light=True``.  A region then has no dispatch mode: collectives
come from kernels at the dispatcher's BackendSelect key (``_collkernels``),
and the module events from two global module hooks doing as little as they
can.  What the events must give is CommDebugMode's module table and its
collective counts (its noise-0 outputs), so each hook keeps what that needs:

* ``fw_pre``: the module's name and type (cached per module as the start of
  the event's text), its parameters at its first call in a region;
* ``fw_post`` and ``fw_done``: written together by the global forward hook
  when the module has no forward hooks of its own (nothing can run between
  them); otherwise ``fw_done`` comes from a module-local hook that runs after
  the module's other hooks, as in the full recorder (tensor-parallel output
  redistribution issues collectives there);
* ``bw_pre``: CommDebugMode's global full-backward pre-hook makes every
  module wrap its outputs in an autograd node (BackwardHookFunction), which
  costs more than the whole budget here.  Instead one gradient hook is put
  on the module's final outputs, the tensors that node would wrap (a Tensor,
  or the Tensors of a tuple, when one requires grad and grad mode is on): it
  fires when their gradient is computed, which is when that node would run,
  at most once per backward pass.  Where nested modules return the same
  tensor, the hooks on it are put in the order the nested wrapping nodes
  would run them: each module's own ``bw_pre`` first, then the gradient
  hooks its own forward hooks put there (FSDP2's pre-backward all-gather),
  then those of the modules inside it;
* ``bw_end``: the end of each backward pass (an engine callback queued by
  the first ``bw_pre``).

Not recorded: ops other than collectives, ``bw_enter`` and ``bw_exit`` (the
module tracker's gradient hooks, which count for CommDebugMode's tables only
where a collective is issued in the backward of a module whose forward ran
before the region: CommDebugMode fails there with a KeyError).

Inside a graph torch.compile traces, the hooks do nothing (dynamo inlines
them and finds ``is_compiling()`` true), and an FX GraphModule that compiled
code calls is not a module of the program: it is not recorded.
"""

import itertools
import sys
import time
import weakref

import torch
from torch.utils.hooks import RemovableHandle

from . import _collkernels
from . import _compat as C

_clock = time.monotonic_ns
_Tensor = torch.Tensor
_cur_task = getattr(torch._C, "_current_graph_task_id", None)
_grad_enabled = torch.is_grad_enabled
try:
    _compiling = torch.compiler.is_compiling
except AttributeError:  # torch < 2.3
    def _compiling():
        return False

try:
    from torch.nn.parallel import DistributedDataParallel as _DDP
except Exception:
    _DDP = None
try:
    from torch.fx import GraphModule as _GraphModule
except Exception:
    _GraphModule = None

# Keys of the gradient hooks put in a tensor's hook dict directly: negative,
# never those of torch's RemovableHandle.
_hook_keys = itertools.count(-1, -1)

# Entry of the per-module cache (Recorder._lc, keyed by id(module)).
_REF, _NJ, _PRE, _PRE_BW, _POST, _POST_BW, _BWPRE, _PARAMS_REGION, _DDP_MOD = range(9)

# Callers of an FX GraphModule that make it compiled code's, not the program's.
_COMPILER_MODULES = ("torch._functorch", "torch._dynamo", "torch._inductor", "torch.fx")


def _next_handle_id():
    return RemovableHandle.next_id


def available():
    """Why light mode cannot run on this torch, or None when it can."""
    if _cur_task is None or C.TORCH < (2, 1):
        return "torch %s lacks the hooks light mode needs (torch 2.1 or later)" % torch.__version__
    if _collkernels.install() is None:
        return "torch %s cannot take collective kernels from Python" % torch.__version__
    return None


def _called_from_compiled_code():
    """Whether the module being called was called by torch's compilers (an
    FX GraphModule that AOTAutograd's runtime runs)."""
    f = sys._getframe(2)
    while f is not None:
        mod = f.f_globals.get("__name__", "")
        if mod != "torch.nn.modules.module":
            return mod.startswith(_COMPILER_MODULES)
        f = f.f_back
    return False


class LightEvents:
    """The Recorder's light-mode hooks (state: _lc, _lleaf, _lmark)."""

    def _light_enter(self):
        self._lc.clear()
        self._handles = [C.register_global_fw_pre(self._lfw_pre),
                         C.register_global_fw_post(self._lfw_post)]
        _collkernels.route(self)

    def _light_exit(self):
        _collkernels.unroute(self)
        for d, key in self._lleaf:
            d.pop(key, None)
        del self._lleaf[:]

    def _lentry(self, mod):
        """The cached texts of a module's events (None: not recorded)."""
        if _GraphModule is not None and isinstance(mod, _GraphModule) \
                and _called_from_compiled_code():
            e = [weakref.ref(mod), None]
            self._lc[id(mod)] = e
            return e
        nj = self._nj(self._mod_name(mod))
        tj = self._type_of(mod)
        e = [weakref.ref(mod), nj,
             '{"ev":"fw_pre","mod":%s,"type":%s,"bw":false,"t":' % (nj, tj),
             '{"ev":"fw_pre","mod":%s,"type":%s,"bw":true,"t":' % (nj, tj),
             ('{"ev":"fw_post","mod":%s,"bw":false,"t":' % nj,
              '{"ev":"fw_done","mod":%s,"bw":false,"t":' % nj),
             ('{"ev":"fw_post","mod":%s,"bw":true,"t":' % nj,
              '{"ev":"fw_done","mod":%s,"bw":true,"t":' % nj),
             '{"ev":"bw_pre","mod":%s,"t":' % nj,
             -1,
             _DDP is not None and isinstance(mod, _DDP)]
        self._lc[id(mod)] = e
        return e

    # ------------------------------------------------------------ forward
    def _lfw_pre(self, mod, inputs):
        if _compiling():
            return
        e = self._lc.get(id(mod))
        if e is None or e[_REF]() is not mod:
            e = self._lentry(mod)
        if e[_NJ] is None:
            return
        now = _clock()
        if _cur_task() != -1:
            self._append(e[_PRE_BW] + str(now - self._mono0) + "}\n")
            return
        if e[_PARAMS_REGION] != self.region:
            # its parameters, once per region (what CommDebugMode's parameter
            # and sharding tables take from the module's first call)
            e[_PARAMS_REGION] = self.region
            self._append(e[_PRE][:-4] + '"params":%s,"t":%d}\n'
                         % (self._params_json(mod), now - self._mono0))
        else:
            self._append(e[_PRE] + str(now - self._mono0) + "}\n")
        if mod._forward_hooks:
            self._ldone_last(mod, e)
        if e[_DDP_MOD]:
            name = self._group_name(mod.process_group)
            if name is not None:
                self._ddp_groups.add(name)
            if mod not in self._ddp_state:
                self._ddp_first_sight(mod)
        if now > self._w.due:
            self._w.poke()

    def _ldone_last(self, mod, e):
        """The module has forward hooks of its own: fw_done comes from one
        that runs after them (kept while it is still the last one)."""
        old = self._done_handles.get(id(mod))
        if old is not None:
            hooks = mod._forward_hooks
            if old[1] == e[_NJ] and next(reversed(hooks)) == old[0].id:
                return
            old[0].remove()
        self._done_handles[id(mod)] = (mod.register_forward_hook(self._ldone_fn(e)), e[_NJ])

    def _ldone_fn(self, e):
        def fw_done(mod, inputs, output):
            if _compiling():
                return
            t = str(_clock() - self._mono0)
            self._append(e[_POST_BW if _cur_task() != -1 else _POST][1] + t + "}\n")
            self._lbw_hooks(output, e, self._lmark.pop(id(mod), _next_handle_id()))
        return fw_done

    def _lfw_post(self, mod, inputs, output):
        if _compiling():
            return
        e = self._lc.get(id(mod))
        if e is None or e[_REF]() is not mod:
            e = self._lentry(mod)
        if e[_NJ] is None:
            return
        bw = _cur_task() != -1
        post, done = e[_POST_BW if bw else _POST]
        t = str(_clock() - self._mono0)
        if id(mod) in self._done_handles:
            self._append(post + t + "}\n")
            # the gradient hooks the module's own forward hooks add from now on
            self._lmark[id(mod)] = _next_handle_id()
        else:
            self._append(post + t + "}\n" + done + t + "}\n")
            self._lbw_hooks(output, e, None)
        if e[_DDP_MOD] and not bw:
            st = self._ddp_state.get(mod)
            if st is not None and not st[0]:
                self._ddp_check_rebuilt(mod, st)

    # ----------------------------------------------------------- backward
    def _lbw_hooks(self, output, e, mark):
        """A gradient hook on the tensors the full backward pre-hook's node
        would wrap: bw_pre when the first of them gets its gradient.  Put
        first on each tensor, followed by the hooks registered since mark
        (a RemovableHandle id: those of the module's own forward hooks, which
        its node would run after bw_pre), then the older ones (those of the
        modules inside it, whose nodes run later)."""
        if isinstance(output, _Tensor):
            if not output.requires_grad or not _grad_enabled():
                return
            tensors = (output,)
        elif isinstance(output, tuple):
            tensors = [o for o in output if isinstance(o, _Tensor) and o.requires_grad]
            if not tensors or not _grad_enabled():
                return
        else:
            return
        hook = self._lbw_fn(e[_BWPRE])
        for t in tensors:
            d = t._backward_hooks
            if d is None:
                h = t.register_hook(hook)
                if t.grad_fn is None:
                    self._lleaf.append((t._backward_hooks, h.id))
                continue
            key = next(_hook_keys)
            if d:
                items = list(d.items())
                d.clear()
                d[key] = hook
                if mark is not None:
                    for k, v in items:
                        if k >= mark:
                            d[k] = v
                    for k, v in items:
                        if k < mark:
                            d[k] = v
                else:
                    d.update(items)
            else:
                d[key] = hook
            if t.grad_fn is None:
                self._lleaf.append((d, key))

    def _lbw_fn(self, prefix):
        last = [None]

        def bw_pre(grad):
            task = _cur_task()
            if last[0] == task:
                return None
            last[0] = task
            self._queue_bw_end()
            self._append(prefix + str(_clock() - self._mono0) + "}\n")
            return None
        return bw_pre

    # -------------------------------------------------------- collectives
    def _light_collective(self, op, keyset, args, kwargs):
        """A collective from _collkernels: its events, then the call."""
        info = self._op_cache.get(id(op))
        if info is None:
            info = self._op_info(op)
        redispatch = op.redispatch

        def run(*a, **kw):
            return redispatch(keyset, *a, **kw)
        return self._coll_call(run, info[2], _cur_task() != -1, False, args, kwargs)


def skip_in_dynamo(functions):
    """Dynamo must not treat these as frames to compile when compiled code
    calls them at run time (a GraphModule's module hooks, a kernel): that
    would change its frame counts.  Inlined while tracing, they are still
    traced (and return at once: is_compiling())."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except Exception:
        return
    for fn in functions:
        code = getattr(fn, "__code__", None)
        if code is not None:
            try:
                skip_code(code)
            except Exception:
                pass
