"""The recorder's C module (commdebug._speedups: light mode's module hooks
and the writer's formatting, where a training step leaves the interpreter
out of the CPU's caches), when it is built for this Python.

COMMDEBUG_SPEEDUPS=0 in the environment runs the Python it stands for
instead (read where each recorder starts).  Its C source says what it does
and where it hands a call back to the Python."""

import importlib
import importlib.util
import os
import sys


def speedups():
    """The module, or None: not built for this Python, or turned off.
    COMMDEBUG_SPEEDUPS_SO names a build of it to load instead of the one
    beside the package (tests/torch2/run.sh sanitize: one built with ASan
    and UBSan)."""
    if os.environ.get("COMMDEBUG_SPEEDUPS", "1") == "0":
        return None
    return _load(__package__ + "._speedups", "COMMDEBUG_SPEEDUPS_SO")


def _load(name, var):
    """The extension module name, from the file the variable var names
    where it is set (a sanitized build), else beside the package; None
    where it cannot be imported."""
    so = os.environ.get(var)
    if so and name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, so)
        if spec is None:
            return None
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        sys.modules[name] = m
    m = sys.modules.get(name)
    if m is not None:
        return m
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def gradhook():
    """Light mode's C++ gradient hook (commdebug._gradhook), or None: not
    built, built for another torch than the one imported (a C++ module of
    torch's must match its version), under compiled autograd (torch's
    compiled backward has no form for a C++ hook), or turned off with
    COMMDEBUG_GRADHOOK=0.  Then light mode puts its gradient hooks through
    torch's Python API, as before."""
    if os.environ.get("COMMDEBUG_GRADHOOK", "1") == "0":
        return None
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dynamo_config = sys.modules.get("torch._dynamo.config")
    if dynamo_config is not None and getattr(dynamo_config, "compiled_autograd", False):
        return None
    return collkernel()


def collkernel():
    """commdebug._gradhook where it is built for the torch imported (its
    collective kernels, _collkernel.cpp, do not depend on compiled
    autograd or COMMDEBUG_GRADHOOK: _collkernels.py has their switch), or
    None.  COMMDEBUG_GRADHOOK_SO names a build of it to load instead
    (tests/torch2/env.sh san: one built with ASan and UBSan)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    m = _load(__package__ + "._gradhook", "COMMDEBUG_GRADHOOK_SO")
    return m if m is not None and m.TORCH_VERSION == torch.__version__ else None
