"""Recording in a process started under ``python -m commdebug.record``:
one region from the moment torch is imported to the end of the process (or
one per optimizer step), into $COMMDEBUG_RECORD_OUT/rank<R>.zst."""

import atexit
import os
import sys

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


def start():
    if _started or _is_launcher():
        return
    out = os.environ.get("COMMDEBUG_RECORD_OUT")
    if not out:
        return
    _started.append(True)
    from .recorder import Recorder
    from .record import step_hook
    every = os.environ.get("COMMDEBUG_RECORD_EVERY_STEP") == "1"
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    label = os.environ.get("COMMDEBUG_RECORD_LABEL") or argv0 or "python"
    rec = Recorder(os.path.join(out, "rank{rank}.zst"), label="step 1" if every else label)
    undo = step_hook(rec) if every else (lambda: None)
    rec.__enter__()

    def stop():
        undo()
        try:
            if rec._in_region:
                rec.__exit__(None, None, None)
        finally:
            rec.close()
    atexit.register(stop)
