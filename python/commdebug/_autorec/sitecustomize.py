"""Started by ``python -m commdebug.record`` in every Python process of the
job it runs (this directory is on PYTHONPATH): when the process imports
torch, recording starts (commdebug._autostart).  Processes that never import
torch are not touched.  The sitecustomize this one shadows, if any, is run
afterwards."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps torch's loader so that recording starts
    right after torch's own module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            try:
                from commdebug import _autostart
                _autostart.start()
            except Exception as e:  # never break the program
                sys.stderr.write("commdebug: recording not started in pid %d: %s\n"
                                 % (os.getpid(), e))
        loader.exec_module = exec_module
        return spec


def _chain():
    """Run the next sitecustomize on sys.path (the distribution's)."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.stderr.write("commdebug: %s: %s\n" % (spec.origin, e))


if os.environ.get("COMMDEBUG_RECORD_OUT") and "torch" not in sys.modules:
    sys.meta_path.insert(0, _AfterTorch())
_chain()
