"""The full recorder's module hooks: CommDebugMode's module tracker.

``TrackerEvents`` is a base of commdebug.recorder.Recorder: the global
forward pre-hook and forward hook, the module-local hook that runs after a
module's other forward hooks (``fw_done``), the global full-backward
pre-hook and the multi-grad hooks that enter and leave a module in backward,
as CommDebugMode's _CommModeModuleTracker and ModTracker register them (the
recorder must register the same: they change what the program dispatches,
and CommDebugMode shows the program with them); on torch 1.13 the ones it
lacks are emulated (_compat).  Light mode has hooks of its own (_light).
"""

import time
import weakref

import torch

from . import _compat as C
from ._gradhooks import multi_grad_hook
from . import _leanbw
from . import _light

_Tensor = torch.Tensor
_is_bw = C.is_bw
_cur_task = getattr(torch._C, "_current_graph_task_id", None)
_in_compiled_region = C.in_compiled_region
_clock = time.monotonic_ns
_DDP_MOD, _FULL = _light._DDP_MOD, _light._FULL

try:
    from torch.nn.parallel import DistributedDataParallel as _DDP
except Exception:  # torch built without distributed
    _DDP = None


def _flat_tensors_requiring_grad(x):
    """Tensors requiring grad among the leaves of x, as tree_flatten finds them."""
    if isinstance(x, _Tensor):
        return [x] if x.requires_grad else []
    if type(x) is tuple:
        simple = True
        for a in x:
            if not isinstance(a, _Tensor):
                simple = False
                break
        if simple:
            return [a for a in x if a.requires_grad]
    from torch.utils._pytree import tree_flatten
    leaves, _ = tree_flatten(x)
    return [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]


def _params_meta(mod):
    """What fw_pre's parameter texts say of a module's parameters besides
    which objects they are: ((name, requires_grad, shape, dtype), ...).
    (The C module's FullCall compares the parameters with it item by item.)"""
    return tuple([(k, p.requires_grad, p.shape, p.dtype)
                  for k, p in mod._parameters.items() if p is not None])


class TrackerEvents:
    """The Recorder's module tracker hooks (full mode)."""

    def _fw_pre(self, mod, inputs):
        if not self._in_region:
            return
        bw = _is_bw()
        e = self._lc.get(id(mod))
        if e is None:
            e = self._lentry(mod)
        nj = e[1]
        tensors = _flat_tensors_requiring_grad(inputs)
        grad_in = (not bw) and bool(tensors)
        if bw:
            self._append((e[3][:-4] + '"params":[],"grad_in":false,"t":', _clock()))
        else:
            self._append((e[2][:-4] + '"params":%s,"grad_in":%s,"t":'
                          % (self._params_json(mod), "true" if grad_in else "false"), _clock()))
        if grad_in:
            multi_grad_hook(tensors, self._exit_fn(nj))
        if bw:
            return
        # (CommDebugMode reads param.data here, which for a DTensor dispatches
        # a detach; the recorder reads nothing that dispatches: the analyzer
        # accounts for those detaches.)
        # The module-local forward hook that reports fw_done must run after the
        # module's other forward hooks: keep the one registered by an earlier
        # call only while it is still the last one (and for the same name).
        self._keep_done_last(mod, nj)
        if _DDP is not None and isinstance(mod, _DDP):
            self._ddp_pre(mod)

    def _ddp_pre(self, mod):
        name = self._group_name(mod.process_group)
        if name is not None:
            self._ddp_groups.add(name)
        if _NEED_PG_CTX:
            # DDP's forward issues collectives from C++ (bucket rebuild, buffer
            # broadcast) on its group; 1.13 cannot tell the mode which one.
            self._pg_ctx.append(mod.process_group)
        if mod not in self._ddp_state:
            self._ddp_first_sight(mod)

    def _ddp_post(self, mod):
        if _NEED_PG_CTX and self._pg_ctx and self._pg_ctx[-1] is mod.process_group:
            self._pg_ctx.pop()
        st = self._ddp_state.get(mod)
        if st is not None and not st[0]:
            self._ddp_check_rebuilt(mod, st)

    def _keep_done_last(self, mod, nj):
        old = self._done_handles.get(id(mod))
        if old is not None:
            hooks = mod._forward_hooks
            if old[1] == nj and hooks and next(reversed(hooks)) == old[0].id:
                return
            old[0].remove()
        self._done_handles[id(mod)] = (mod.register_forward_hook(self._done_fn(nj)), nj)

    def _fw_post(self, mod, inputs, output):
        if C.in_compiled_region() or not self._in_region:
            return
        if _DDP is not None and isinstance(mod, _DDP):
            self._ddp_post(mod)
        bw = _is_bw()
        e = self._lc.get(id(mod))
        if e is None:
            e = self._lentry(mod)
        nj = e[1]
        tensors = _flat_tensors_requiring_grad(output)
        grad_out = (not bw) and bool(tensors)
        self._append((e[5 if bw else 4][0][:-4] + ('"grad_out":true,"t":' if grad_out
                                                   else '"grad_out":false,"t":'), _clock()))
        emulate = tensors and _EMULATE_BW_PRE and torch.is_grad_enabled()
        if grad_out:
            if emulate:
                # torch < 2.0 has no global full-backward pre-hook: bw_pre fires at
                # the first gradient of an output, just before the tracker's own
                # output hook, as the BackwardHookFunction node that torch >= 2.0
                # wraps around the outputs would.  One tensor hook does both.
                fn = self._pre_enter_fn(weakref.ref(mod), nj)
            else:
                fn = self._enter_fn(nj)
            multi_grad_hook(tensors, fn, mode="any")
        elif emulate:
            # In backward (activation-checkpoint recompute) the tracker registers
            # nothing, but the full-backward pre-hook would still fire.
            multi_grad_hook(tensors, self._bw_pre_fn(weakref.ref(mod)), mode="any")

    # ------------------------------------------- with LeanBackwardHook (_leanbw)
    def _fentry(self, e):
        """The full recorder's texts of a module's events (slot _FULL of its
        light-mode entry): [params key, region they were read whole,
        fw_pre with grad_in true, with grad_in false, fw_pre in backward,
        fw_post with grad_out true, false, in backward, bw_exit, bw_enter,
        what the parameters' texts say of them (_params_meta)]."""
        nj = e[1]
        f = e[_FULL] = [None, None, None, None, e[3][:-4] + '"params":[],"grad_in":false,"t":',
                        e[4][0][:-4] + '"grad_out":true,"t":',
                        e[4][0][:-4] + '"grad_out":false,"t":',
                        e[5][0][:-4] + '"grad_out":false,"t":',
                        '{"ev":"bw_exit","mod":' + nj + ',"t":',
                        '{"ev":"bw_enter","mod":' + nj + ',"t":', None]
        return f

    def _lean_entry(self, mod):
        """The module's cached texts, with the full recorder's (None: not a
        module of the program, but compiled code's)."""
        e = self._lc.get(id(mod))
        if e is None:
            e = self._lentry(mod)
        if e[1] is None:
            return None
        if e[_FULL] is None:
            self._fentry(e)
        return e

    def _fparams(self, mod, e, f, key):
        pj = self._params_json(mod)
        f[0] = key
        f[1] = self.region
        f[10] = _params_meta(mod)
        f[2] = e[2][:-4] + '"params":%s,"grad_in":true,"t":' % pj
        f[3] = e[2][:-4] + '"params":%s,"grad_in":false,"t":' % pj

    def _fw_pre_lean(self, mod, inputs):
        """_fw_pre where LeanBackwardHook makes fw_done: the module's texts
        cached, its parameters read whole at its first call in a region and
        again whenever one of them is another object."""
        if not self._in_region:
            return
        e = self._lean_entry(mod)
        if e is None:
            return
        f = e[_FULL]
        if _cur_task() != -1:
            self._append((f[4], _clock()))
            return
        ps = mod._parameters
        key = tuple(map(id, ps.values())) if ps else ()
        if key != f[0]:
            self._fparams(mod, e, f, key)
        elif f[1] != self.region:
            # read whole once a region: the texts made again where what
            # they say of the parameters changed
            if _params_meta(mod) != f[10]:
                self._fparams(mod, e, f, key)
            else:
                f[1] = self.region
        tensors = _flat_tensors_requiring_grad(inputs)
        if tensors:
            self._append((f[2], _clock()))
            t = tensors[0]
            if len(tensors) == 1 and type(t) is _Tensor and t.grad_fn is not None:
                # one gradient, held by nobody: a line of the marker it joins
                _leanbw.exit_line(self, t, f[8])
            else:
                multi_grad_hook(tensors, self._exit_fn(e[1]))
        else:
            self._append((f[3], _clock()))
        if e[_DDP_MOD]:
            self._ddp_pre(mod)

    def _fw_post_lean(self, mod, inputs, output):
        if not self._in_region or _in_compiled_region():
            return
        e = self._lean_entry(mod)
        if e is None:
            return
        f = e[_FULL]
        if e[_DDP_MOD]:
            self._ddp_post(mod)
        if _cur_task() != -1:
            self._append((f[7], _clock()))
            return
        tensors = _flat_tensors_requiring_grad(output)
        if not tensors:
            self._append((f[6], _clock()))
            return
        self._append((f[5], _clock()))
        t = tensors[0]
        if len(tensors) == 1 and type(t) is _Tensor and t.grad_fn is not None:
            # put on the tensor by setup_output_hook (as a line of bw_pre's
            # marker when it can be), at the key it is registered under now
            self._pending_enter[id(mod)] = (t, _leanbw.new_key(), f[9])
        else:
            multi_grad_hook(tensors, self._enter_fn(e[1]), mode="any")

    def _bw_pre(self, mod, grad_output):
        self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
        return None

    def _bw_pre_fn(self, wmod):
        def bw_pre(*_):
            mod = wmod()
            if mod is not None:
                self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
        return bw_pre

    def _pre_enter_fn(self, wmod, nj):
        def bw_pre_enter(*_):
            mod = wmod()
            if mod is not None:
                self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
            self._queue_bw_end()
            self._emit('{"ev":"bw_enter","mod":' + nj)
        return bw_pre_enter

    def _done_fn(self, nj):
        fw = '{"ev":"fw_done","mod":%s,"bw":false,"t":' % nj
        bw = '{"ev":"fw_done","mod":%s,"bw":true,"t":' % nj

        def fw_done(mod, inputs, output):
            if self._in_region:
                self._append((bw if _is_bw() else fw, _clock()))
        return fw_done

    def _enter_fn(self, nj):
        def bw_enter(*_):
            self._queue_bw_end()
            self._emit('{"ev":"bw_enter","mod":' + nj)
        return bw_enter

    def _exit_fn(self, nj):
        def bw_exit(*_):
            self._emit('{"ev":"bw_exit","mod":' + nj)
        return bw_exit

    def _queue_bw_end(self):
        # ModTracker._maybe_set_engine_callback: once per backward pass.
        if self._has_callback:
            return

        def bw_end():
            self._has_callback = False
            self._emit('{"ev":"bw_end"')

        C.queue_engine_callback(bw_end)
        self._has_callback = True


_EMULATE_BW_PRE = C.EMULATE_BW_PRE
_NEED_PG_CTX = not C.can_unbox_process_group()
