"""The observer test's baseline: a dispatch mode that does nothing but note
the name of every op it sees, with module hooks that do nothing where
CommDebugMode has its own.

The hooks matter: a global full-backward pre-hook (CommDebugMode's module
tracker has one, and so does the Recorder, to see what it sees) makes every
module call wrap its inputs and outputs in BackwardHookFunction, which
dispatches views of its own; the multi-grad hooks on module inputs and outputs
hold gradients while they wait for the others.  CommDebugMode shows the
program with them, so the Recorder must too: the baseline is the program with
those hooks and nothing else (no parameter reads, no kept tensors).
"""
import torch
import torch.nn.modules.module as _module
from torch.utils._python_dispatch import TorchDispatchMode

try:
    from torch.autograd.graph import register_multi_grad_hook
except Exception:  # torch 1.13
    register_multi_grad_hook = None

try:
    from torch.distributed.tensor import DTensor
except Exception:
    try:
        from torch.distributed._tensor import DTensor
    except Exception:
        DTensor = None


class OpLog(TorchDispatchMode):
    """Does nothing but note the name of every op (OpOverload) it sees.  A
    DTensor op is answered NotImplemented, as CommDebugMode and the Recorder
    answer it, so that DTensor runs it and its local ops come here too."""

    supports_higher_order_operators = True

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if isinstance(func, torch._ops.OpOverload):
            self.ops.append(str(func))
            if DTensor is not None and DTensor in types:
                return NotImplemented
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._hooks = install_hooks()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for h in self._hooks:
                h.remove()


def _is_bw():
    f = getattr(torch._C, "_current_graph_task_id", None)
    return f is not None and f() != -1


def _requiring_grad(x):
    flat = torch.utils._pytree.tree_flatten(x)[0]
    return [a for a in flat if isinstance(a, torch.Tensor) and a.requires_grad]


def _nothing(*args):
    pass


def _fw_pre(mod, inputs):
    tensors = _requiring_grad(inputs)
    if tensors and not _is_bw() and register_multi_grad_hook is not None:
        register_multi_grad_hook(tensors, _nothing)


def _fw_post(mod, inputs, output):
    tensors = _requiring_grad(output)
    if tensors and not _is_bw() and register_multi_grad_hook is not None:
        register_multi_grad_hook(tensors, _nothing, mode="any")


def install_hooks():
    """The hooks of CommDebugMode's module tracker (torch 2.x), doing nothing;
    on a torch without multi-grad or global backward hooks (1.13), none."""
    hooks = []
    bw_pre = getattr(_module, "register_module_full_backward_pre_hook", None)
    if bw_pre is None or register_multi_grad_hook is None:
        return hooks
    hooks.append(_module.register_module_forward_pre_hook(_fw_pre))
    try:
        hooks.append(_module.register_module_forward_hook(_fw_post, always_call=True))
    except TypeError:
        hooks.append(_module.register_module_forward_hook(_fw_post))
    hooks.append(bw_pre(lambda mod, grad_output: None))
    return hooks
