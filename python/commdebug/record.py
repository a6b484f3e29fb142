"""Record an unmodified training job.

    python -m commdebug.record --out DIR [--every-step] [--light] -- script.py ARGS...
    python -m commdebug.record --out DIR [--every-step] [--light] -- -m package.module ARGS...
    python -m commdebug.record --out DIR [--every-step] [--light] -- LAUNCHER ARGS...
        (torchrun ..., srun ..., mpirun ..., python launch.py ..., any command)
    torchrun --nproc-per-node 4 -m commdebug.record --out DIR -- train.py ARGS...

A script (``.py`` or ``-m module``) runs in this process as ``__main__``
(runpy) with recording on from its first line to its end.  Any other command
runs as a child process.  Either way DIR/../commdebug/_autorec is put first
on PYTHONPATH: its sitecustomize.py makes every Python process the job
starts (torchrun's workers, srun's and mpirun's tasks, the workers of a
launcher script or of torch.multiprocessing.spawn) record from the moment it
imports torch to its end (commdebug._autostart).  Each trace is
DIR/rank<R>.zst, R the launcher's rank variable or, when there is none, the
rank the process gets from init_process_group (the trace waits under a
hidden name until then).  A process that never learns a rank while other
ranks write traces is a launcher: its trace is removed at exit.

By default the whole run is one region.  With ``--every-step`` a region ends
after every optimizer step (any ``torch.optim.Optimizer``), so region k holds
step k's forward, backward and optimizer step; the last region holds
whatever ran after the last step.  ``--light`` records in light mode
(``Recorder(light=True)``: module boundaries and every collective, no other
op, torch.compile still compiling); ``--keep N`` bounds its traces to the last
N to 2N regions (the earlier ones summarized as trim events).
"""

import argparse
import os
import runpy
import signal
import subprocess
import sys
import time

from ._autostart import _LAUNCHERS, begin, step_hook
from ._process import note_ending

__all__ = ["main", "step_hook"]

_AUTOREC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autorec")
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child_env(out, every_step, label, light=False, keep=None):
    """The environment every process of the job inherits."""
    e = os.environ
    e["COMMDEBUG_RECORD_KEEP"] = str(keep or 0)
    e["COMMDEBUG_RECORD_OUT"] = os.path.abspath(out)
    e["COMMDEBUG_RECORD_EVERY_STEP"] = "1" if every_step else "0"
    e["COMMDEBUG_RECORD_LIGHT"] = "1" if light else "0"
    e["COMMDEBUG_RECORD_LABEL"] = label
    # Names this job in every trace's meta, so that a trace left by an
    # earlier run into the same directory is never taken for one of this
    # job's (see Recorder._other_traces_of_this_job).
    e.setdefault("COMMDEBUG_RECORD_JOB", "%x-%x" % (time.time_ns(), os.getpid()))
    parts = [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in (_PKG_PARENT, _AUTOREC):
        if p in parts:
            parts.remove(p)
        parts.insert(0, p)
    e["PYTHONPATH"] = os.pathsep.join(parts)


def _run_command(cmd):
    """Run a launcher as a child; pass SIGINT / SIGTERM / SIGHUP on and
    return its exit status (128 + N when it died of signal N)."""
    try:
        p = subprocess.Popen(cmd)
    except OSError as e:
        sys.stderr.write("commdebug.record: %s: %s\n" % (cmd[0], e.strerror or e))
        return 127
    def forward(sig, _frame):
        try:
            p.send_signal(sig)
        except OSError:
            pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = p.wait()
    return 128 - rc if rc < 0 else rc


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m commdebug.record",
        description="Run a Python script, or a launcher and the Python workers it starts, "
                    "with the commdebug recorder on.",
        usage="python -m commdebug.record --out DIR [--every-step] [--light [--keep N]] "
              "-- script.py [ARGS...] | -m module [ARGS...] | COMMAND [ARGS...]")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for the traces (DIR/rank<RANK>.zst)")
    p.add_argument("--every-step", action="store_true",
                   help="one region per optimizer step instead of one for the whole run")
    p.add_argument("--light", action="store_true",
                   help="light mode: module boundaries and every collective, no other op "
                        "(a few percent of a step; torch.compile keeps compiling)")
    p.add_argument("--keep", type=int, metavar="N",
                   help="with --light: keep the last N to 2N regions in full, the earlier "
                        "ones as trim events (a bounded trace for long jobs)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        p.error("no script to run (give it after --)")
    if args.keep is not None and (not args.light or args.keep < 1):
        p.error("--keep N needs --light and N >= 1")
    module = None
    if cmd[0] == "-m" and len(cmd) > 1 and cmd[1].startswith(_LAUNCHERS):
        # torchrun as a module: a launcher, run as a child like any other
        cmd = [sys.executable] + cmd
    if cmd[0] == "-m":
        if len(cmd) < 2:
            p.error("-m needs a module name")
        module = cmd[1]
        label = module
    elif cmd[0].endswith(".py"):
        if not os.path.exists(cmd[0]):
            p.error("%s: no such file" % cmd[0])
        label = os.path.basename(cmd[0])
    else:
        # A launcher or any other command: every Python process it starts
        # records (sitecustomize); this process records nothing.
        label = os.path.basename(cmd[1]) if len(cmd) > 1 and cmd[1].endswith(".py") \
            else os.path.basename(cmd[0])
        _child_env(args.out, args.every_step, label, args.light, args.keep)
        return _run_command(cmd)

    _child_env(args.out, args.every_step, label, args.light, args.keep)
    if module is not None:
        sys.argv = [module] + cmd[2:]
    else:
        sys.argv = cmd
        sys.path[0] = os.path.dirname(os.path.abspath(cmd[0]))
    stop = begin(args.out, args.every_step, label, light=args.light, keep=args.keep)
    code = 0
    try:
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
        note_ending(code=code)
    except BaseException as e:
        # the interpreter's excepthook sees it only after the trace is closed below
        note_ending(exc=e)
        raise
    finally:
        stop(*sys.exc_info())
    return code


if __name__ == "__main__":
    sys.exit(main())
