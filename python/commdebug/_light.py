"""Light mode: module boundaries and collectives, no per-op events.

``LightEvents`` is a base of commdebug.recorder.Recorder, used when it is
made with ``light=True``.  A region then has no dispatch mode: collectives
come from kernels at the dispatcher's BackendSelect key (``_collkernels``),
and the module events from two module hooks doing as little as they can,
run from light mode's nn.Module call (``_modcall``; global hooks where it
cannot be used), their common case in C where the recorder's C module is
built (``_speedups.c``).  What the events must give is CommDebugMode's module table and its
collective counts (its noise-0 outputs), so each hook keeps what that needs:

* ``fw_pre``: the module's name and type (cached per module as the start of
  the event's text), its parameters at its first call in a region;
* ``fw_post`` and ``fw_done``: written together by the forward hook
  when the module has no forward hooks of its own (nothing can run between
  them); otherwise ``fw_done`` comes from a module-local hook that runs after
  the module's other hooks, as in the full recorder (tensor-parallel output
  redistribution issues collectives there);
* ``bw_pre``: not CommDebugMode's full-backward pre-hook, whose wrapper
  nodes around every module call cost more than the whole budget here, but a
  gradient hook on the module's outputs, put where the wrapper node would run
  it (``_lightbw``); ``bw_end`` at the end of each backward pass.

Not recorded: ops other than collectives, ``bw_enter`` and ``bw_exit`` (the
module tracker's gradient hooks, which count for CommDebugMode's tables only
where a collective is issued in the backward of a module whose forward ran
before the region: CommDebugMode fails there with a KeyError).

Inside a graph torch.compile traces, the hooks do nothing (dynamo inlines
them and finds ``is_compiling()`` true), and an FX GraphModule that compiled
code calls is not a module of the program: it is not recorded.
"""

from collections import OrderedDict
import functools
import sys
import warnings
import time
import weakref

import torch
import torch.nn.modules.module as _nn_module
from torch.utils.hooks import RemovableHandle

from . import _collkernels
from . import _compat as C
from . import _mode
from . import _modcall
from ._lightbw import hook_keys, make_bw_hooks
from ._native import gradhook, speedups
from ._process import _live

_clock = time.monotonic_ns
_cur_task = getattr(torch._C, "_current_graph_task_id", None)


def _is_compiling():
    """torch's is_compiling() (true while dynamo traces): torch.compiler's
    from torch 2.3, torch._dynamo's before (2.1, 2.2; dynamo is imported
    only here, when the hooks are made, not with this module)."""
    f = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if f is not None:
        return f
    import importlib
    for mod in ("torch._dynamo", "torch._dynamo.external_utils"):
        try:
            f = getattr(importlib.import_module(mod), "is_compiling", None)
        except Exception:
            f = None
        if f is not None:
            return f
    return lambda: False

try:
    from torch.nn.parallel import DistributedDataParallel as _DDP
except Exception:
    _DDP = None
try:
    from torch.fx import GraphModule as _GraphModule
except Exception:
    _GraphModule = None

# Entry of the per-module cache (Recorder._lc, keyed by id(module)).
_REF, _NJ, _PRE, _PRE_BW, _POST, _POST_BW, _BWPRE, _PARAMS_REGION, _DDP_MOD, _PKEY, \
    _PPRE, _PCHECKED, _BWHOOK, _FULL, _BWJOIN, _BWMOD = range(16)
# Every this many regions a module's parameters are read again whole (dtype,
# shape, requires_grad, which can change without the parameter object
# changing); in between, only which objects they are.
PARAMS_RECHECK = 64

# Callers of an FX GraphModule that make it compiled code's, not the program's.
_COMPILER_MODULES = ("torch._functorch", "torch._dynamo", "torch._inductor")
# Frames between a GraphModule's caller and the module hook.
_CALL_MODULES = ("torch.nn.modules.module", "torch.fx.graph_module", "torch.fx._lazy_graph_module")
_OWN_MODULES = (__name__, _modcall.__name__)


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
        if not mod.startswith(_CALL_MODULES) and mod not in _OWN_MODULES:
            return mod.startswith(_COMPILER_MODULES)
        f = f.f_back
    return False


class LightEvents:
    """The Recorder's light-mode hooks (state: _lc, _lleaf, _lmark, _lstate,
    _lhooks, _lhandles)."""

    def _light_enter(self):
        # The two hooks (and the modules' fw_done hooks) stay from the first
        # region to close(): registering global hooks anew for each region
        # would change what torch.compile's guards check and make it
        # compile its graphs again.  Outside a region they return at once.
        # They run from nn.Module's call (_modcall), or as global hooks.
        if self._lhooks is None:
            self._lhooks = _make_hooks(self)
            self._lhandles = _modcall.on(self._lhooks, _is_compiling())
            # torch warns, for each compiled module called, that global hooks
            # fire for its OptimizedModule too: these hooks know it
            warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when "
                                    r"there are global hooks on modules")
        self._lstate[0] = self.region
        self._lstate[2] = True
        _collkernels.install()      # (again, after the last light recorder's close)
        _collkernels.route(self)

    def _light_exit(self):
        self._lstate[2] = False
        _collkernels.unroute(self)
        self._light_unleaf()

    def _light_unleaf(self):
        """Take the bw_pre hooks off the leaf tensors (a module's output that
        is a parameter): a leaf outlives the region, and the next region's
        forward puts its own hook there (at region exit and next_region)."""
        for d, key in self._lleaf:
            d.pop(key, None)
        del self._lleaf[:]

    def _hooks_close(self):
        """At close: the hooks kept across regions (both modes keep the
        modules' fw_done hooks; light mode its global hooks; the full
        recorder nn.Module's call, _modcall.full_on's hold)."""
        for h in self._lhandles:
            h.remove()
        self._lhandles = []
        if getattr(self, "_call_held", False):
            self._call_held = False
            _modcall.release()
        for h, _ in self._done_handles.values():
            h.remove()
        self._done_handles.clear()
        self._lhooks = None
        if self.light and not any(r is not self and r.light and r._w is not None
                                  and not r._w._closed for r in _live()):
            _collkernels.uninstall()

    def _lentry(self, mod):
        """The cached texts of a module's events (None: not recorded)."""
        if _GraphModule is not None and isinstance(mod, _GraphModule) \
                and _called_from_compiled_code():
            e = [self._lref(mod), None]
            self._lc[id(mod)] = e
            return e
        nj = self._nj(self._mod_name(mod))
        tj = self._type_of(mod)
        e = [self._lref(mod), nj,
             '{"ev":"fw_pre","mod":%s,"type":%s,"bw":false,"t":' % (nj, tj),
             '{"ev":"fw_pre","mod":%s,"type":%s,"bw":true,"t":' % (nj, tj),
             ('{"ev":"fw_post","mod":%s,"bw":false,"t":' % nj,
              '{"ev":"fw_done","mod":%s,"bw":false,"t":' % nj),
             ('{"ev":"fw_post","mod":%s,"bw":true,"t":' % nj,
              '{"ev":"fw_done","mod":%s,"bw":true,"t":' % nj),
             '{"ev":"bw_pre","mod":%s,"t":' % nj,
             -1,
             _DDP is not None and isinstance(mod, _DDP),
             None, None, -PARAMS_RECHECK, None,
             None,          # the full recorder's texts (_tracker.TrackerEvents._fentry)
             None,          # {inner module's bw_pre hook: the two joined} (_lightbw join)
             None]          # its bw_pre as a full-backward pre-hook (_lightbw pre_hooked)
        self._lc[id(mod)] = e
        return e

    def _lref(self, mod):
        """A weak reference that drops the module's entry when it dies, so
        that an id in _lc is always the live module's (no check per call),
        and its fw_done handle and mark (an id in _done_handles can still be
        a dead module's whose entry _mod_name dropped: fw_post checks that
        the module has forward hooks too)."""
        k = id(mod)
        lc = self._lc
        done = self._done_handles
        lmark = self._lmark

        def gone(_, k=k, lc=lc, done=done, lmark=lmark):
            lc.pop(k, None)
            done.pop(k, None)
            lmark.pop(k, None)
        return weakref.ref(mod, gone)

    def _lparams(self, mod, e, key):
        """fw_pre's text up to its time, with the module's parameters."""
        e[_PKEY] = key
        e[_PCHECKED] = self.region
        e[_PPRE] = e[_PRE][:-4] + '"params":%s,"t":' % self._params_json(mod)
        return e[_PPRE]

    def _lddp_pre(self, mod):
        name = self._group_name(mod.process_group)
        if name is not None:
            self._ddp_groups.add(name)
        if mod not in self._ddp_state:
            self._ddp_first_sight(mod)

    def _lddp_post(self, mod):
        st = self._ddp_state.get(mod)
        if st is not None and not st[0]:
            self._ddp_check_rebuilt(mod, st)

    def _ldone_last(self, mod, e):
        """The module has forward hooks of its own: fw_done comes from one
        that runs after them (kept while it is still the last one)."""
        old = self._done_handles.get(id(mod))
        if old is not None:
            hooks = mod._forward_hooks
            if old[1] == e[_NJ] and next(reversed(hooks)) == old[0].id:
                return
            old[0].remove()
        self._done_handles[id(mod)] = (mod.register_forward_hook(self._lhooks[2](e)), e[_NJ])

    # -------------------------------------------------------- collectives
    def _light_collective(self, op, keyset, args, kwargs):
        """A collective from _collkernels: its events, then the call."""
        info = self._op_cache.get(id(op))
        if info is None:
            info = self._op_info(op)
        return self._coll_call(functools.partial(op.redispatch, keyset), info[2],
                               _cur_task() != -1, False, args, kwargs)

    # The C++ kernels' calls (_collkernel.cpp): i is the op's index in
    # _collkernels.KINFO; each returns the NCCL tag's end, or None.
    def _light_coll_native(self, i, pg_name, payload, floating, bw, nbytes):
        """A collective's events from what the kernel read: its group's name
        (None: unknown), its payload's text as _collectives.payload gives it and
        its bytes (-1: no tensors), whether its first tensor is floating or
        complex."""
        t = _clock() - self._mono0
        coll = _collkernels.KINFO[i]
        bucket = floating and coll[5] and bw and _mode.from_engine()
        self._coll_lines(coll, bw, False, pg_name, payload, None if nbytes < 0 else nbytes,
                         bucket, None, t)
        return self._coll_synced(pg_name, False)

    def _light_coll_args(self, i, args, bw):
        """A collective's events from its arguments (what the kernel does
        not read itself)."""
        if _collkernels.fake_payload(args):
            return None
        return self._coll_begin(_collkernels.KINFO[i], bw, False, args)

    def _light_group(self, obj):
        """The name of the group a c10d op's ScriptObject argument holds
        (the kernel keeps it while the group lives), or None."""
        pg = C.unbox_process_group(obj)
        return None if pg is None else self._group_name(pg)


def _make_hooks(rec):
    """The light hooks of a Recorder whose trace is open: (forward
    pre-hook, forward hook, maker of the module-local fw_done hook, the
    two as _modcall's call() runs them: past its is_compiling() check,
    the C module's where it is built).  They are the hot path (every module
    call): closures over what they use, as few Python calls as can be."""
    lc = rec._lc
    append = rec._w.buf.append
    w = rec._w
    done_handles = rec._done_handles
    lmark = rec._lmark
    state = rec._lstate          # [region, a bw_end callback is queued, in a region]
    entry = rec._lentry
    params = rec._lparams
    clock = _clock
    cur_task = _cur_task
    compiling = _is_compiling()
    recheck = PARAMS_RECHECK
    # the module's own bw_pre hook as a C++ hook on its output's grad_fn,
    # where commdebug._gradhook is built for this torch
    rec._lgradhook = gradhook()

    attach, attach1, outputs, pre_hooked, shared = make_bw_hooks(
        rec, compiling, (_BWPRE, _BWHOOK, _BWJOIN, _BWMOD))
    grad_enabled = torch.is_grad_enabled
    Tensor = torch.Tensor
    global_pre = _nn_module._global_backward_pre_hooks

    def pre_body(mod, inputs):
        """fw_pre past its is_compiling() and region checks."""
        e = lc.get(id(mod))
        if e is None:
            e = entry(mod)
        if e[1] is None:
            return
        now = clock()
        if cur_task() != -1:
            append((e[3], now))
            return
        if e[7] != state[0]:
            # its parameters, once per region; their text is remade when a
            # parameter is replaced (and read again whole every
            # PARAMS_RECHECK regions: a dtype, shape or requires_grad can
            # change in place)
            e[7] = state[0]
            ps = mod._parameters
            key = tuple(map(id, ps.values())) if ps else ()
            ppre = e[10]
            if ppre is None or key != e[9] or state[0] - e[11] >= recheck:
                ppre = params(mod, e, key)
            append((ppre, now))
        else:
            append((e[2], now))
        if mod._forward_hooks:
            rec._ldone_last(mod, e)
        if e[8]:
            rec._lddp_pre(mod)
        if now > w.due:
            w.poke()

    def post_body(mod, inputs, output):
        """fw_post past its is_compiling() and region checks."""
        e = lc.get(id(mod))
        if e is None:
            e = entry(mod)
        if e[1] is None:
            return
        bw = cur_task() != -1
        post, done = e[5] if bw else e[4]
        t = clock()
        if id(mod) in done_handles and mod._forward_hooks:
            # (a module of its own forward hooks; not one that took a dead
            # module's id)
            append((post, t))
            # the gradient hooks the module's own forward hooks add from now on
            lmark[id(mod)] = RemovableHandle.next_id
        else:
            append((post, done, t))
            # (a module with full-backward pre-hooks runs in torch's own
            # call, which calls fw_post, which calls this)
            if (mod._backward_pre_hooks or global_pre) and pre_hooked(e, 2):
                pass
            elif type(output) is Tensor:
                if output.requires_grad and grad_enabled():
                    attach1(output, e, None)
            else:
                ts = outputs(output)
                if ts is not None:
                    attach(ts, e, None)
        if e[8] and not bw:
            rec._lddp_post(mod)

    # The C module's pre and post do the common case of the bodies
    # themselves and call them for the rest.
    native = _native_hooks(rec, pre_body, post_body, shared)
    run_pre = pre_body if native is None else native.pre
    run_post = post_body if native is None else native.post

    def fw_pre(mod, inputs):
        if compiling() or not state[2]:
            return
        run_pre(mod, inputs)

    def fw_post(mod, inputs, output):
        if compiling() or not state[2]:
            return
        run_post(mod, inputs, output)

    def done_hook(e):
        def fw_done(mod, inputs, output):
            if compiling() or not state[2]:
                return
            append((e[5 if cur_task() != -1 else 4][1], clock()))
            ts = outputs(output)
            mark = lmark.pop(id(mod), None)
            if ts is not None and not ((mod._backward_pre_hooks or global_pre)
                                       and pre_hooked(e, 1)):
                attach(ts, e, RemovableHandle.next_id if mark is None else mark)
        return fw_done

    C.skip_in_dynamo([fw_pre, fw_post, pre_body, post_body, done_hook(None)])
    if native is None:
        return fw_pre, fw_post, done_hook, fw_pre, fw_post
    return fw_pre, fw_post, done_hook, native.pre, native.post


def _native_hooks(rec, pre_body, post_body, shared):
    """The C module's Hooks: pre(mod, inputs) and post(mod, inputs, output),
    fw_pre and fw_post past their is_compiling() check (None without it)."""
    native = speedups()
    if native is None:
        return None
    return native.Hooks(lc=rec._lc, buf=rec._w.buf, state=rec._lstate, writer=rec._w,
                        done_handles=rec._done_handles,
                        global_pre=_nn_module._global_backward_pre_hooks,
                        cur_task=_cur_task, grad_enabled=torch.is_grad_enabled,
                        tensor=torch.Tensor, odict=OrderedDict, keys=hook_keys,
                        handle=RemovableHandle,
                        slots=(_NJ, _PRE, _PRE_BW, _POST, _POST_BW, _PARAMS_REGION, _DDP_MOD,
                               _PKEY, _PPRE, _PCHECKED, _BWHOOK, _BWJOIN, _BWPRE),
                        recheck=PARAMS_RECHECK, pre_body=pre_body, post_body=post_body,
                        shared=shared,
                        gradhook=rec._lgradhook.api if rec._lgradhook is not None else None)
