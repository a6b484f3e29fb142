#!/usr/bin/env python3
"""Regenerate golden data on the installed PyTorch: every case run three times,
with the same seeds, in separate processes: under commdebug's Recorder, under
the Recorder in light mode, and under PyTorch's own CommDebugMode.

    regen.py OUTDIR [-k CASE]... [--list] [--timeout S] [--no-light]

writes OUTDIR/CASE/rankR.zst (the Recorder's traces), OUTDIR/CASE/light-rankR.zst
(light mode's, which check.py compares at noise level 0 only; not on a torch
without light mode, or with --no-light) and OUTDIR/CASE/exp-rankR/regionK/
(CommDebugMode's outputs): the layout of testdata/golden, for `check.py
COMMDEBUG OUTDIR`.  Each case is
programs/golden.py CASE as 4 gloo processes on the CPU (mesh2d: a 2x2 mesh),
or programs/gpt2.py (one process), forked from this one after it has imported
torch once (programs/launch.py).  The processes' output goes to
OUTDIR/CASE/log-MODE-rankR.txt.

A case the installed torch cannot run (DTensor or transformers missing) is
left out with a note.  Without -k, the directories of cases an earlier run
made that are not on the list are removed (check.py compares every one).  A region where CommDebugMode itself fails leaves no
exp-rankR/regionK/ (nothing to compare) and is listed at the end; a Recorder
run that fails, or a timeout, is an error (exit status 1).
"""

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "programs"))

from launch import LEFT_OUT, REGION_FAILED, log_tail, preload, run_case  # noqa: E402

# (case, world size): the 2.11 set first, then cases of our own.
CASES = [("mlp", 4), ("mlp_stacked", 4), ("ac", 4), ("ddp", 4), ("funcol", 4),
         ("redistribute", 4), ("mesh2d", 4), ("gpt2", 1),
         ("twice", 4), ("shared", 4), ("locals", 4), ("c10d", 4), ("fsdp2", 4),
         ("sp_block", 4), ("wraphook", 4), ("bwhooks", 4),
         ("backwards", 4)]
# Not here: "compiled" (programs/golden.py: a TP MLP under torch.compile with
# aot_eager).  CommDebugMode does not handle it on 2.14: its module tree nests
# each module under the one before it and counts net2's all-reduce in every
# module it shows, so there is nothing right to compare with.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("-k", action="append", default=[], help="only the cases named so")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per run (180)")
    ap.add_argument("--no-light", action="store_true", help="no light-mode runs")
    a = ap.parse_args()
    if a.list:
        for c, w in CASES:
            print(c, w)
        return 0
    known = [c for c, _ in CASES]
    for k in a.k:
        if k not in known:
            ap.error("unknown case %s (known: %s)" % (k, " ".join(known)))
    t0 = time.time()
    errors, notes = [], []
    preload()
    import torch
    print("regen: torch %s, Python %d.%d, into %s" % (torch.__version__, sys.version_info[0],
                                                      sys.version_info[1], a.outdir), flush=True)
    modes = ["rec", "cdm"]
    if not a.no_light:
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
        from commdebug import _light
        why = _light.available()
        if why is None:
            modes.insert(1, "light")
        else:
            notes.append("no light-mode runs: " + why)
    if not a.k and os.path.isdir(a.outdir):
        # A full run leaves only its own cases: check.py compares every
        # directory there, so a case an earlier run made is removed.
        for d in os.listdir(a.outdir):
            p = os.path.join(a.outdir, d)
            if d not in known and os.path.isdir(p) and any(
                    f.startswith("log-") for f in os.listdir(p)):
                shutil.rmtree(p)
    for case, world in CASES:
        if a.k and case not in a.k:
            continue
        cdir = os.path.join(a.outdir, case)
        shutil.rmtree(cdir, ignore_errors=True)
        t = time.time()
        status = []
        for mode in modes:
            rcs = run_case(case, world, a.outdir, mode, timeout=a.timeout)
            status.append("%s %s" % (mode, ",".join(str(r) for r in rcs)))
            if all(r == LEFT_OUT for r in rcs):
                notes.append("%s: left out on this torch: %s" % (
                    case, log_tail(a.outdir, case, mode, 0, 300).strip()))
                shutil.rmtree(cdir, ignore_errors=True)
                break
            for r, rc in enumerate(rcs):
                if rc == 0:
                    continue
                if rc == REGION_FAILED and mode == "cdm":
                    notes.append("%s rank %d: CommDebugMode failed in a region, nothing "
                                 "to compare there:\n%s" % (case, r, log_tail(
                                     a.outdir, case, mode, r, 600)))
                    continue
                errors.append("%s %s rank %d exited %s:\n%s" % (
                    case, mode, r, rc, log_tail(a.outdir, case, mode, r)))
        print("regen: %-13s %5.1f s  (%s)" % (case, time.time() - t, "; ".join(status)),
              flush=True)
    for n in notes:
        print("note: " + n)
    for e in errors:
        print("ERROR: " + e)
    print("regen: %.0f s, %d error(s)" % (time.time() - t0, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
