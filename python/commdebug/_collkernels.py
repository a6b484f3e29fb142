"""Collectives seen without a dispatch mode: kernels at the BackendSelect key.

Light mode (``Recorder(light=True)``) records every collective but no other
op, so it cannot afford a TorchDispatchMode, which runs Python for every op
(and makes torch.compile fall back to eager).  Instead, a Python kernel is
registered for each collective op only (``c10d::*``, ``_c10d_functional::*``,
``_c10d_functional_autograd::*``, ``_dtensor::shard_dim_alltoall``) at the
dispatcher's BackendSelect key, with ``torch.library.Library.impl``.  Every
call of such an op passes there, whoever issues it: Python (torch.distributed,
functional collectives, DTensor's redistribution, FSDP2), C++
(DistributedDataParallel's reducer, which calls ``ProcessGroup::allreduce``,
a ``c10d::allreduce_`` op) and compiled graphs alike.  The kernel writes the
collective's events and hands the call on to the next key
(``OpOverload.redispatch``); no other op is touched.

BackendSelect sits below the Python key, where CommDebugMode's dispatch mode
sees ops: a collective that the mode sees arrives here too, once it runs on
real tensors.  Calls the mode would not see are left out:

* a collective issued while another one runs on the same thread (a
  functional all_reduce runs ``c10d::allreduce_`` inside; the mode sees only
  the outer op, whose kernel does the inner call with the mode popped);
* calls on fake or meta tensors (torch.compile tracing a graph; CommDebugMode
  under compile falls back to eager and never sees tracing).

The kernels are C++ where commdebug._gradhook is built for this torch
(``_collkernel.cpp``: no Python boxing of the arguments, no Python at all
outside a light region; it calls the routed recorder's
``_light_coll_native`` with what it read off the dispatcher's stack, or
``_light_coll_args`` with the arguments as Python objects where it cannot
read them), Python otherwise (``COMMDEBUG_COLLKERNEL=0`` too).  Both give the
same events (tested).

Installed on first use and kept while a light recorder is open: outside a
light region a kernel only hands the call on (a few microseconds per
collective for the Python ones); the last light recorder's close() takes
them out (``uninstall``), where this torch can (``Library._destroy``).
Needs ``Library.impl(..., with_keyset=True)`` and
``torch._C._dispatch_keyset_full_after`` (torch 2.1 and later).
"""

import os
import threading

import torch

from . import _collectives as K
from . import _compat as C
from ._native import collkernel

__all__ = ["install", "uninstall", "route", "unroute"]

# The light recorders inside a region, innermost last (a kernel reports to
# the last one).
_ROUTE = []
_installed = []          # [list of op names] once install() ran ([] on failure)
_libs = []               # the Library objects (kernels live as long as these)
_tls = threading.local()  # .busy: a collective of this thread is being handed on
# The C++ kernels' module while they are installed (else None), and each op's
# collective details (K.coll_details), by the index the kernel reports.
_native = [None]
KINFO = []


def route(rec):
    _ROUTE.append(rec)
    _route_native()


def unroute(rec):
    try:
        _ROUTE.remove(rec)
    except ValueError:
        pass
    _route_native()


def _route_native():
    m = _native[0]
    if m is None:
        return
    if _ROUTE:
        rec = _ROUTE[-1]
        m.kernels_route(rec._light_coll_native, rec._light_coll_args, rec._light_group)
    else:
        m.kernels_route(None, None, None)


def fake_payload(args):
    """True when the op runs on fake or meta tensors (tracing)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.is_meta or type(a) is not torch.Tensor and _is_fake(a)
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            t = a[0]
            return t.is_meta or type(t) is not torch.Tensor and _is_fake(t)
    return False


_FakeTensor = None


def _is_fake(t):
    global _FakeTensor
    if _FakeTensor is None:
        try:
            from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
        except Exception:
            return False
    return isinstance(t, _FakeTensor)


def _kernel(op, after):
    redispatch = op.redispatch
    tls = _tls

    def collective(keyset, *args, **kwargs):
        ks = keyset & after
        if not _ROUTE or getattr(tls, "busy", False) or fake_payload(args):
            return redispatch(ks, *args, **kwargs)
        rec = _ROUTE[-1]
        tls.busy = True
        try:
            return rec._light_collective(op, ks, args, kwargs)
        finally:
            tls.busy = False
    collective.__name__ = "commdebug_" + op.__name__.replace(".", "_")
    C.skip_in_dynamo([collective])
    return collective


def install():
    """Register the kernels (once per process).  Returns the op names
    covered, or None when this torch lacks what is needed."""
    if _installed:
        return _installed[0] or None
    names = []
    _installed.append(names)
    try:
        from torch.library import Library
        import inspect
        if "with_keyset" not in inspect.signature(Library.impl).parameters:
            return None
        after = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
        import importlib
        importlib.import_module("torch.distributed")  # the c10d ops
        try:
            importlib.import_module("torch.distributed._functional_collectives")
        except Exception:
            pass
        all_ops = torch._C._dispatch_get_all_op_names()
    except Exception:
        return None
    ops = []
    for full in sorted(all_ops):
        ns, _, rest = full.partition("::")
        base, _, overload = rest.partition(".")
        if K.payload_indices(ns, base) is None:
            continue
        try:
            packet = getattr(getattr(torch.ops, ns), base)
            op = getattr(packet, overload or "default")
        except Exception:
            continue
        ops.append((full, ns, base, overload, rest, op))
    m = collkernel() if os.environ.get("COMMDEBUG_COLLKERNEL", "1") != "0" else None
    if m is not None and _install_native(m, ops):
        names.extend(full for full, *_ in ops)
        return names or None
    libs = {}
    for full, ns, base, overload, rest, op in ops:
        try:
            if ns not in libs:
                libs[ns] = Library(ns, "IMPL")
            libs[ns].impl(rest, _kernel(op, after), "BackendSelect", with_keyset=True)
        except Exception:
            continue
        names.append(full)
    _libs.extend(libs.values())
    return names or None


def _install_native(m, ops):
    """The C++ kernels registered for ops: True, or False (none are)."""
    info = [K.coll_details(op) for *_, op in ops]
    try:
        m.kernels_install([(ns, base, overload, -1 if d[1] is None else d[1],
                            {"obj": 1, "name": 2}.get(d[2], 0),
                            -1 if d[3] is None else d[3], -1 if d[4] is None else d[4])
                           for (_, ns, base, overload, _, _), d in zip(ops, info)])
    except Exception:
        return False
    KINFO[:] = info
    _native[0] = m
    _route_native()
    return True


def uninstall():
    """Take the kernels out of the dispatcher (no light recorder is open):
    a collective then costs what it did before install().  Kept where this
    torch's Library cannot be destroyed."""
    m = _native[0]
    if m is not None:
        m.kernels_route(None, None, None)
        m.kernels_uninstall()
        _native[0] = None
        del _installed[:]
        return
    if not _libs or not all(callable(getattr(lib, "_destroy", None)) for lib in _libs):
        return
    for lib in _libs:
        try:
            lib._destroy()
        except Exception:
            pass
    del _libs[:]
    del _installed[:]
