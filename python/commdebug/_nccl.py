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

__all__ = ["tagger", "sibling_trace"]


def _bind(lib):
    tag = lib.commdebug_nccl_tag
    untag = lib.commdebug_nccl_untag
    tag.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    tag.restype = ctypes.c_int
    untag.argtypes = []
    untag.restype = None
    return tag, untag


def tagger():
    """(tag, untag) functions of the NCCL-side recorder that records in
    this process, or None.  The plugin first: when NCCL_PROFILER_PLUGIN
    names it, a preloaded interposer only passes calls on, and its tags
    would go nowhere."""
    plugin = os.environ.get("NCCL_PROFILER_PLUGIN", "")
    if "commdebug" in plugin:
        # NCCL loads the plugin by this name or path; loading it here gives
        # the same library (the dynamic linker loads a file once per process)
        path = plugin if "/" in plugin else "libnccl-profiler-%s.so" % plugin
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
