"""Collective ops: which ops they are, where their process group and payload are.

The dispatcher hands a collective to the recorder as an OpOverload with its
arguments in schema order.  For c10d ops the process group is a ScriptObject
argument (unboxed to a ProcessGroup on torch 2.x), for functional
collectives it is the ``group_name`` string.  The payload (what ``bytes``,
``dtype`` and ``shape`` describe) is this rank's input buffer; for
receive-only participation (recv, scatter on a non-root rank) it is the
output buffer.

On torch 1.13 several ProcessGroup methods do not go through the dispatcher
at all, and the ones that do cannot tell which group they run on.
``python_api_methods`` lists the ProcessGroup methods with the c10d op name
newer PyTorch dispatches for each, so the recorder can wrap them.
"""

import json

import torch

from ._events import _shape_json

__all__ = ["COLLECTIVE_NAMESPACES", "payload_indices", "python_api_methods",
           "tensors_of", "group_registry", "group_info"]

COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional",
                         "_c10d_functional_autograd")

# c10d op -> (input payload arg index, output arg index); None: no payload.
_C10D_PAYLOAD = {
    "broadcast_": (0, 0),
    "allreduce_": (0, 0),
    "allreduce_coalesced_": (0, 0),
    "reduce_": (0, 0),
    "send": (0, None),
    "recv_": (None, 0),
    "recv_any_source_": (None, 0),
    "allgather_": (1, 0),
    "_allgather_base_": (1, 0),
    "allgather_coalesced_": (1, 0),
    "allgather_into_tensor_coalesced_": (1, 0),
    "reduce_scatter_": (1, 0),
    "_reduce_scatter_base_": (1, 0),
    "reduce_scatter_tensor_coalesced_": (1, 0),
    "gather_": (1, 0),
    "scatter_": (1, 0),
    "alltoall_": (1, 0),
    "alltoall_base_": (1, 0),
    "barrier": (None, None),
    "monitored_barrier_": (None, None),
}

# Ops in the collective namespaces that are not collectives.
_NOT_COLLECTIVE = {"wait_tensor", "wait", "ProcessGroup", "Work", "ReduceOp"}

# ProcessGroup method -> the c10d op newer torch dispatches for it.  The method's
# tensor arguments come in the op's order, so _C10D_PAYLOAD applies to both.
python_api_methods = {
    "allreduce": "allreduce_",
    "allreduce_coalesced": "allreduce_coalesced_",
    "allgather": "allgather_",
    "_allgather_base": "_allgather_base_",
    "allgather_coalesced": "allgather_coalesced_",
    "broadcast": "broadcast_",
    "reduce": "reduce_",
    "gather": "gather_",
    "scatter": "scatter_",
    "reduce_scatter": "reduce_scatter_",
    "_reduce_scatter_base": "_reduce_scatter_base_",
    "alltoall": "alltoall_",
    "alltoall_base": "alltoall_base_",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv_",
    "recv_anysource": "recv_any_source_",
}


def payload_indices(ns, base):
    """(input index, output index) for a collective, or None when the op is
    not a collective."""
    if base in _NOT_COLLECTIVE:
        return None
    if ns == "c10d":
        return _C10D_PAYLOAD.get(base, (0, 0))
    if ns in COLLECTIVE_NAMESPACES:
        return (0, None)
    if ns == "_dtensor" and base == "shard_dim_alltoall":
        return (0, None)
    return None


def coll_details(func):
    """(its name's JSON text, the group argument's index, its kind: "obj" a
    ProcessGroup, "name" a group's name, the payload's input and output
    indices, whether it is c10d's all_reduce) of a collective OpOverload,
    or None when it is not one."""
    name = str(func)
    ns, _, rest = name.partition(".")
    base = rest.rpartition(".")[0] or rest
    idx = payload_indices(ns, base)
    if idx is None:
        return None
    pg_idx = pg_kind = None
    try:
        for i, a in enumerate(func._schema.arguments):
            if "ProcessGroup" in str(a.type):
                pg_idx, pg_kind = i, "obj"
                break
            if a.name == "group_name":
                pg_idx, pg_kind = i, "name"
                break
    except Exception:
        pass
    return (json.dumps(name), pg_idx, pg_kind, idx[0], idx[1],
            ns == "c10d" and base == "allreduce_")


def tensors_of(x, out):
    """Append the tensors in x (a tensor, or nested lists/tuples) to out."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            tensors_of(y, out)
    return out


_shapes = {}             # torch.Size -> its JSON text (collectives repeat their shapes)


def payload(args, in_idx, out_idx):
    """A collective's payload, the tensors of its input argument (a tensor,
    or nested lists) or else of its output one: (',"bytes":..,"dtype":..,
    "shape":[..]', their bytes, the first tensor), or (',"bytes":0', None,
    None) without tensors.  (_collkernel.cpp reads the same off the
    dispatcher's stack.)"""
    ts = []
    if in_idx is not None and in_idx < len(args):
        tensors_of(args[in_idx], ts)
    if not ts and out_idx is not None and out_idx < len(args):
        tensors_of(args[out_idx], ts)
    if not ts:
        return ',"bytes":0', None, None
    nbytes = 0
    for t in ts:
        try:
            nbytes += int(t.numel()) * t.element_size()
        except Exception:
            pass
    shape = ts[0].shape
    sj = _shapes.get(shape)
    if sj is None:
        sj = _shapes[shape] = _shape_json(shape)
        if len(_shapes) > 4096:
            _shapes.clear()
    return ',"bytes":%d,"dtype":"%s","shape":%s' % (nbytes, str(ts[0].dtype), sj), nbytes, ts[0]


_registry_home = []      # [distributed_c10d's _world, or the module, or None], found once


def group_registry():
    """torch.distributed's own {ProcessGroup: name} of the live groups (to be
    read, not changed), empty before init_process_group and after
    destroy_process_group; None where this torch keeps it elsewhere or has
    no torch.distributed.  Found once, then read (every region's start asks
    it)."""
    if not _registry_home:
        home = None
        try:
            import torch.distributed as dist
            if dist.is_available():
                c = dist.distributed_c10d
                world = getattr(c, "_world", None)
                if isinstance(getattr(world, "pg_names", None), dict):
                    home = (world, "pg_names")
                elif isinstance(getattr(c, "_pg_names", None), dict):
                    home = (c, "_pg_names")
        except Exception:
            pass
        _registry_home.append(home)
    home = _registry_home[0]
    if home is None:
        return None
    names = getattr(home[0], home[1], None)
    return names if isinstance(names, dict) else None


def group_info(pg, name):
    """(name, desc, ranks, backend) of a process group."""
    import torch.distributed as dist
    try:
        ranks = list(dist.get_process_group_ranks(pg))
    except Exception:
        ranks = []
    try:
        backend = str(dist.get_backend(pg))
    except Exception:
        backend = ""
    desc = getattr(pg, "group_desc", None)
    if not isinstance(desc, str):
        try:
            desc = "default_pg" if pg is dist.distributed_c10d._get_default_group() else "undefined"
        except Exception:
            desc = "undefined"
    return name, desc, ranks, backend
