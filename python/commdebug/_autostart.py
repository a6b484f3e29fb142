"""Starting and stopping the recording of a whole process, the one sequence
both ways of recording an unmodified job use: ``begin`` (a Recorder into
DIR/rank{rank}.zst entered at once, one region, or one per optimizer step
through ``step_hook``) and the stop function it returns.

``start`` is what a process started under ``python -m commdebug.record``
runs when it imports torch (_autorec/sitecustomize.py): one region from then
to the end of the process (or one per optimizer step), into
$COMMDEBUG_RECORD_OUT/rank<R>.zst.  commdebug.record's main() calls
``begin`` for the script it runs in its own process."""

import atexit
import os
import sys

__all__ = ["start", "begin", "step_hook"]

_started = []

# Launchers written in Python that run no training themselves: not recorded.
_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch",
              "torch.distributed.elastic.agent")


def _is_launcher():
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if argv0 in ("torchrun", "torchx"):
        return True
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", "") or ""
    return name.startswith(_LAUNCHERS)


def step_hook(rec):
    """Call rec.next_region after every optimizer step; returns an undo
    function.  torch >= 2.0 has a global step post-hook; torch 1.13 calls
    Optimizer._optimizer_step_code (a no-op kept as the profiler's entry
    point) after every step, which can be wrapped at the base class."""
    count = [0]

    def after_step(*_):
        count[0] += 1
        if rec._in_region:
            rec.next_region(label="step %d" % (count[0] + 1))

    import importlib
    import torch
    optim_mod = importlib.import_module("torch.optim.optimizer")
    reg = getattr(optim_mod, "register_optimizer_step_post_hook", None)
    if reg is not None:
        handle = reg(after_step)
        return handle.remove
    base = torch.optim.Optimizer
    orig = base.__dict__.get("_optimizer_step_code")
    if orig is None:
        sys.stderr.write("commdebug: this torch has no optimizer step hook; "
                         "--every-step records one region\n")
        return lambda: None

    def _optimizer_step_code(self):
        orig(self)
        after_step()

    base._optimizer_step_code = _optimizer_step_code

    def undo():
        base._optimizer_step_code = orig
    return undo


def begin(out, every_step, label, light=False, keep=None):
    """Record this process from now on into OUT/rank{rank}.zst: one region
    named label, or with every_step one per optimizer step ("step 1",
    "step 2", ...); light: in light mode; keep: bounded (see _bounded).  Returns stop(*exc_info), which
    ends the region (with the exception being handled, if any) and closes
    the trace."""
    _started.append(True)
    from .recorder import Recorder
    path = os.path.join(out, "rank{rank}.zst")
    label = "step 1" if every_step else label
    try:
        rec = Recorder(path, label=label, light=light, keep=keep if light else None)
    except RuntimeError as e:
        # a job is never stopped for its recording: full mode instead
        # (unbounded: keep bounds light traces only)
        sys.stderr.write("%s; recording in full mode%s\n"
                         % (e, ", not bounded (--keep %d needs light mode)" % keep
                            if keep else ""))
        rec = Recorder(path, label=label)
    undo = step_hook(rec) if every_step else (lambda: None)
    rec.__enter__()

    def stop(*exc_info):
        undo()
        try:
            if rec._in_region:
                rec.__exit__(*(exc_info or (None, None, None)))
        finally:
            rec.close()
    return stop


def start():
    if _started or _is_launcher():
        return
    out = os.environ.get("COMMDEBUG_RECORD_OUT")
    if not out:
        return
    every = os.environ.get("COMMDEBUG_RECORD_EVERY_STEP") == "1"
    light = os.environ.get("COMMDEBUG_RECORD_LIGHT") == "1"
    try:
        keep = int(os.environ.get("COMMDEBUG_RECORD_KEEP", "0")) or None
    except ValueError:
        keep = None
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    label = os.environ.get("COMMDEBUG_RECORD_LABEL") or argv0 or "python"
    atexit.register(begin(out, every, label, light, keep))
