"""What the installed torch offers, decided once at import.

The recorder targets torch 2.4 and newer (DTensor, functional collectives,
``register_multi_grad_hook(mode=...)``, the global full-backward pre-hook,
``torch._C._current_graph_task_id``) and keeps working on torch 1.13, where
several of these are missing.  Every substitute used for an old torch is
defined here, next to the API it replaces, and ``degraded`` lists them so the
recorder can say once what it had to emulate.
"""

import contextlib
import sys
import threading

import torch
import torch.nn.modules.module as _nn_module
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.hooks import RemovableHandle

__all__ = [
    "TORCH", "is_bw", "DTensor", "FakeTensor", "FakeTensorMode", "fake_context",
    "register_global_fw_pre", "register_global_fw_post",
    "GlobalHooks", "OpOverload", "OP_CALLS_OP", "unbox_process_group", "degraded",
    "queue_engine_callback", "task_id", "TorchDispatchMode", "install_bw_tracking",
]


def _version_tuple(v):
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        num = ""
        for ch in part:
            if ch.isdigit():
                num += ch
            else:
                break
        out.append(int(num) if num else 0)
    while len(out) < 3:
        out.append(0)
    return tuple(out)


TORCH = _version_tuple(torch.__version__)

# Human-readable notes about emulated or missing hooks on this torch.
degraded = []

from torch._ops import OpOverload  # noqa: E402

# OpOverload where its __call__ is known to call self._op alone while it has
# no Python dispatcher object (torch 2.14's, which has _pyobj_dispatcher):
# the C module then calls _op itself; None elsewhere (it calls the op).
try:
    OP_CALLS_OP = OpOverload if hasattr(torch.ops.aten.alias.default, "_pyobj_dispatcher") \
        else None
except Exception:  # noqa: BLE001 (an op registry this module does not know)
    OP_CALLS_OP = None

_engine = torch.autograd.Variable._execution_engine


def queue_engine_callback(cb):
    """Run cb when the autograd graph task currently executing finishes."""
    _engine.queue_callback(cb)


# --- is the autograd engine running? -------------------------------------------------
_cur_task = getattr(torch._C, "_current_graph_task_id", None)
_bw_tracked = [False]
if _cur_task is not None:
    def is_bw():
        return _cur_task() != -1

    def install_bw_tracking():
        pass
else:
    # torch 1.13: no graph-task id.  _will_engine_execute_node raises unless it is
    # called from inside a backward pass; a probe node of our own is enough.
    _will_exec = torch._C._will_engine_execute_node
    with torch.enable_grad():
        _probe_leaf = torch.zeros(1, requires_grad=True)
        _probe_node = _probe_leaf.expand(1).grad_fn

    def _probe_bw():
        try:
            _will_exec(_probe_node)
            return True
        except RuntimeError:
            return False

    # The probe raises (slow) on every op outside backward.  Backward passes
    # started from Python go through Variable._execution_engine.run_backward
    # (torch.autograd.backward and grad, Tensor.backward, checkpointing):
    # once install_bw_tracking() has put a counting proxy there, an op while
    # no such call is running is known to be outside backward without the
    # probe.  Inside one (on any thread) the probe decides.
    _bw_running = [0]
    _bw_lock = threading.Lock()

    class _EngineProxy:
        def __init__(self, engine):
            self._commdebug_engine = engine

        def run_backward(self, *args, **kwargs):
            with _bw_lock:
                _bw_running[0] += 1
            try:
                return self._commdebug_engine.run_backward(*args, **kwargs)
            finally:
                with _bw_lock:
                    _bw_running[0] -= 1

        def __getattr__(self, name):
            return getattr(self._commdebug_engine, name)

    def is_bw():
        if not _bw_running[0] and _bw_tracked[0]:
            return False
        return _probe_bw()

    def install_bw_tracking():
        if _bw_tracked[0]:
            return
        V = torch.autograd.Variable
        if isinstance(V.__dict__.get("_execution_engine"), _EngineProxy):
            _bw_tracked[0] = True
            return
        V._execution_engine = _EngineProxy(V._execution_engine)
        _bw_tracked[0] = True

# --- DTensor / fake tensors ----------------------------------------------------------
DTensor = None
try:
    from torch.distributed.tensor import DTensor  # torch >= 2.5
except Exception:
    try:
        from torch.distributed._tensor import DTensor  # torch 2.0 - 2.4
    except Exception:
        DTensor = None

FakeTensor = FakeTensorMode = None
try:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
except Exception:
    pass

_len_mode_stack = getattr(torch._C, "_len_torch_dispatch_stack", None)
_mode_stack_at = getattr(torch._C, "_get_dispatch_stack_at", None)
_tracing_tls = None
try:
    from torch._guards import TracingContext as _TracingContext
    _tracing_tls = getattr(sys.modules["torch._guards"], "_TLS", None)
except Exception:
    _TracingContext = None


_get_mode = getattr(torch._C, "_get_dispatch_mode", None)
_FAKE_KEY = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)


def fake_context():
    """True when ops run under a fake mode that is not visible from the op's
    arguments: a FakeTensorMode below ours on the dispatch-mode stack, or a
    tracing context with a fake mode (what detect_fake_mode looks at)."""
    if _tracing_tls is not None:
        ctx = getattr(_tracing_tls, "tracing_context", None)
        if ctx is not None and getattr(ctx, "fake_mode", None) is not None:
            return True
    if _get_mode is not None and _FAKE_KEY is not None:
        # torch 2.x keeps a FakeTensorMode in the stack's slot for its key
        return _get_mode(_FAKE_KEY) is not None
    if _len_mode_stack is not None and FakeTensorMode is not None:
        n = _len_mode_stack()
        for i in range(n):
            if isinstance(_mode_stack_at(i), FakeTensorMode):
                return True
    return False


# --- module hooks ----------------------------------------------------------------------
register_global_fw_pre = _nn_module.register_module_forward_pre_hook
register_global_fw_post = _nn_module.register_module_forward_hook
_global_bw_pre = getattr(_nn_module, "register_module_full_backward_pre_hook", None)
_gfp_dict = _nn_module._global_forward_pre_hooks
_gf_dict = _nn_module._global_forward_hooks
_gbp_dict = getattr(_nn_module, "_global_backward_pre_hooks", None) \
    if _global_bw_pre is not None else None


def new_hook_key():
    """A hook key from torch's own handle counter, as a RemovableHandle takes
    one (so keys order hooks by when they were registered, ours and
    everybody else's)."""
    k = RemovableHandle.next_id
    RemovableHandle.next_id = k + 1
    return k


class GlobalHooks:
    """A region's three global module hooks (forward pre-hook, forward hook,
    full-backward pre-hook where this torch has one), put into torch's global
    hook dicts as register_module_forward_pre_hook and the others put them
    (keys from the same counter, so in the same order among other code's
    hooks), without a RemovableHandle each: remove() takes them out."""

    __slots__ = ("keys",)

    def __init__(self, fw_pre, fw_post, bw_pre):
        self.keys = [(d, new_hook_key()) for d in (_gfp_dict, _gf_dict, _gbp_dict)
                     if d is not None]
        for (d, k), hook in zip(self.keys, (fw_pre, fw_post, bw_pre)):
            d[k] = hook

    def remove(self):
        for d, k in self.keys:
            d.pop(k, None)
        self.keys = []


if _global_bw_pre is None:
    degraded.append("no global full-backward pre-hook, bw_pre fires at the first "
                    "gradient of a module's outputs")

# --- backward passes ------------------------------------------------------------------
class _TaskClock:
    """Stands in for torch._C._current_graph_task_id on torch 1.13: a number
    that changes after every backward pass in which one of our hooks fired
    (bumped by an engine callback queued on the first such firing)."""

    def __init__(self):
        self.gen = 0
        self.queued = False

    def _bump(self):
        self.gen += 1
        self.queued = False

    def current(self):
        if not self.queued:
            self.queued = True
            try:
                queue_engine_callback(self._bump)
            except RuntimeError:
                self.queued = False
        return self.gen


_task_clock = _TaskClock()
if _cur_task is not None:
    _task_id = _cur_task
else:
    _task_id = _task_clock.current


def task_id():
    """An id of the backward pass running now (call only inside backward)."""
    return _task_id()


@contextlib.contextmanager
def no_dispatch_modes():
    """Run without any TorchDispatchMode, so that ops the recorder itself
    issues are not recorded."""
    from torch.utils import _python_dispatch as pd
    popped = []
    try:
        while _len_mode_stack is not None and _len_mode_stack() > 0:
            popped.append(pd._pop_mode())
        yield
    finally:
        for m in reversed(popped):
            pd._push_mode(m)


# Without a global full-backward pre-hook there are no BackwardHookFunction
# wrappers around module outputs and inputs; the recorder's hooks then go in
# front of those already on a tensor (see _fallback_multi_grad_hook).
EMULATE_BW_PRE = _global_bw_pre is None


# --- process groups seen by the dispatcher ------------------------------------------------
_unbox = None
_ScriptObject = getattr(torch._C, "ScriptObject", None)
try:
    from torch._C._distributed_c10d import ProcessGroup as _PG
    _unbox = getattr(_PG, "unbox", None)
except Exception:
    _PG = None


def unbox_process_group(obj):
    """The ProcessGroup behind a c10d op's ScriptObject argument, or None
    where this torch cannot unbox it (1.13)."""
    # (a ScriptObject is what a c10d op gets: no isinstance(obj, _PG) for
    # it, which would first run a metaclass's __instancecheck__ in Python)
    if type(obj) is not _ScriptObject and _PG is not None and isinstance(obj, _PG):
        return obj
    if _unbox is None:
        return None
    try:
        return _unbox(obj)
    except Exception:
        return None


def can_unbox_process_group():
    return _unbox is not None


def in_compiled_region():
    dyn = sys.modules.get("torch._dynamo.eval_frame")
    f = getattr(dyn, "_is_in_compiled_region", None) if dyn is not None else None
    if f is None:
        return False
    try:
        return bool(f())
    except Exception:
        return False


def skip_in_dynamo(functions, recursive=True):
    """Dynamo must not treat these, or what they call, as frames to compile
    when they run inside compiled code's call (an OptimizedModule's hooks, a
    GraphModule's, a kernel): that would change its frame counts and could
    fail.  Inlined while tracing, they are still traced (and return at once:
    is_compiling()).  recursive=False: what they call is compiled as it
    would be without them (light mode's nn.Module call, whose module's
    forward is what an OptimizedModule compiles)."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        strategy = FrameExecStrategy(FrameAction.SKIP,
                                     FrameAction.SKIP if recursive else FrameAction.DEFAULT)
    except Exception:
        return
    seen = set()
    todo = [getattr(fn, "__code__", None) for fn in functions]
    while todo:
        code = todo.pop()
        if code is None or code in seen:
            continue
        seen.add(code)
        try:
            set_code_exec_strategy(code, strategy)
        except Exception:
            pass
        todo.extend(c for c in code.co_consts if hasattr(c, "co_code"))
