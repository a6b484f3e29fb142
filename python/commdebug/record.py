"""Record an unmodified training script.

    python -m commdebug.record --out DIR [--every-step] -- script.py ARGS...
    python -m commdebug.record --out DIR -- -m package.module ARGS...
    torchrun --nproc-per-node 4 -m commdebug.record --out DIR -- train.py ARGS...

The script runs as ``__main__`` (runpy) with recording on from its first line
to its end, into DIR/rank<RANK>.zst (the rank comes from torch.distributed,
or the RANK variable torchrun sets).  By default the whole run is one region.
With ``--every-step`` a region ends after every optimizer step (any
``torch.optim.Optimizer``), so region k holds step k's forward, backward and
optimizer step; the last region holds whatever ran after the last step.
"""

import argparse
import os
import runpy
import sys

import torch

from .recorder import Recorder

__all__ = ["main"]


def _step_hook(rec):
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


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m commdebug.record",
        description="Run a Python script with the commdebug recorder on.",
        usage="python -m commdebug.record --out DIR [--every-step] "
              "-- script.py [ARGS...] | -m module [ARGS...]")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for the traces (DIR/rank<RANK>.zst)")
    p.add_argument("--every-step", action="store_true",
                   help="one region per optimizer step instead of one for the whole run")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        p.error("no script to run (give it after --)")
    module = None
    if cmd[0] == "-m":
        if len(cmd) < 2:
            p.error("-m needs a module name")
        module = cmd[1]
        sys.argv = [module] + cmd[2:]
        label = module
    else:
        script = cmd[0]
        if not os.path.exists(script):
            p.error("%s: no such file" % script)
        sys.argv = cmd
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        label = os.path.basename(script)

    rec = Recorder(os.path.join(args.out, "rank{rank}.zst"),
                   label="step 1" if args.every_step else label)
    undo = _step_hook(rec) if args.every_step else (lambda: None)
    code = 0
    rec.__enter__()
    try:
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        undo()
        rec.__exit__(*sys.exc_info())
        rec.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
