"""The link to commdebug's NCCL-side recorder, when it is loaded in this
process (LD_PRELOAD=libcommdebug-nccl-preload.so, or
NCCL_PROFILER_PLUGIN naming libnccl-profiler-commdebug.so).

While a collective runs, the dispatch mode tags the thread with the
collective's process group and per-group sequence number
(commdebug_nccl_tag); every NCCL call made meanwhile carries that tag in the
NCCL-side trace, which is how commdebug charges NCCL bytes and time to
modules (commdebug(1), NCCL CALLS)."""

import ctypes
import os
import sys

__all__ = ["tagger", "sibling_trace", "point_to"]

_ENV = "COMMDEBUG_NCCL_TRACE"
_ENV_AUTO = "COMMDEBUG_NCCL_TRACE_AUTO"   # set when the recorder chose _ENV


def _bind(lib):
    tag = lib.commdebug_nccl_tag
    untag = lib.commdebug_nccl_untag
    tag.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    tag.restype = ctypes.c_int
    untag.argtypes = []
    untag.restype = None
    return tag, untag


def _plugin_path():
    plugin = os.environ.get("NCCL_PROFILER_PLUGIN", "")
    if "commdebug" not in plugin:
        return None
    # NCCL loads the plugin by this name or path; loading it here gives the
    # same library (the dynamic linker loads a file once per process)
    return plugin if "/" in plugin else "libnccl-profiler-%s.so" % plugin


def _libs():
    """The NCCL-side recorder libraries loaded in this process."""
    out = []
    path = _plugin_path()
    if path is not None:
        try:
            out.append(ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4) | os.RTLD_LAZY))
        except OSError:
            pass
    try:
        out.append(ctypes.CDLL(None))
    except OSError:
        pass
    return out


def point_to(path):
    """Send the NCCL-side trace to path, whatever happened before: set
    COMMDEBUG_NCCL_TRACE (read when the NCCL side opens its file, in this
    process and in the children it starts) and, when an NCCL-side recorder
    is loaded, call its commdebug_nccl_set_trace(path), which moves a file
    it already writes.  A COMMDEBUG_NCCL_TRACE the user set is left alone.
    Returns the number of libraries told."""
    cur = os.environ.get(_ENV)
    if cur and os.environ.get(_ENV_AUTO) != "1":
        return 0
    os.environ[_ENV] = path
    os.environ[_ENV_AUTO] = "1"
    told = 0
    seen = set()
    for lib in _libs():
        try:
            fn = lib.commdebug_nccl_set_trace
        except AttributeError:
            continue
        if ctypes.cast(fn, ctypes.c_void_p).value in seen:
            continue
        seen.add(ctypes.cast(fn, ctypes.c_void_p).value)
        fn.argtypes = [ctypes.c_char_p]
        fn.restype = ctypes.c_int
        if fn(os.fsencode(path)) == 0:
            told += 1
        else:
            sys.stderr.write("commdebug: the NCCL-side recorder could not move its trace "
                             "to %s\n" % path)
    return told


def tagger():
    """(tag, untag) functions of the NCCL-side recorder that records in
    this process, or None.  The plugin first: when NCCL_PROFILER_PLUGIN
    names it, a preloaded interposer only passes calls on, and its tags
    would go nowhere."""
    path = _plugin_path()
    if path is not None:
        try:
            return _bind(ctypes.CDLL(path))
        except (OSError, AttributeError):
            return None
    try:
        return _bind(ctypes.CDLL(None))     # preloaded: in the global scope
    except (OSError, AttributeError):
        return None


def sibling_trace(path):
    """The NCCL-side trace that goes with the trace at path: rank0.zst ->
    rank0.nccl.zst (commdebug finds it there)."""
    for ext in (".zst", ".jsonl", ".json"):
        if path.endswith(ext):
            return path[:-len(ext)] + ".nccl.zst"
    return path + ".nccl.zst"
