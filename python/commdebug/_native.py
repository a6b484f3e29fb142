"""The recorder's C module (commdebug._speedups: light mode's module hooks
and the writer's formatting, where a training step leaves the interpreter
out of the CPU's caches), when it is built for this Python.

COMMDEBUG_SPEEDUPS=0 in the environment runs the Python it stands for
instead (read where each recorder starts).  Its C source says what it does
and where it hands a call back to the Python."""

import importlib
import os


def speedups():
    """The module, or None: not built for this Python, or turned off."""
    if os.environ.get("COMMDEBUG_SPEEDUPS", "1") == "0":
        return None
    try:
        return importlib.import_module(__package__ + "._speedups")
    except ImportError:
        return None
