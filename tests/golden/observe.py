#!/usr/bin/env python3
"""The observer check: does recording a program change what it dispatches?

    observe.py OUTDIR [-k CASE]... [--runs N] [--timeout S]

For every golden case (regen.py's list; those this torch can run), N times
(3 by default): the case once under a dispatch mode that only notes the name
of every op it sees (programs/oplog.py), and once, in a separate job with the
same seeds, under commdebug's Recorder.  For every rank and region the op
names in the Recorder's trace must be the op names the do-nothing mode saw, in
the same order.  Two separate jobs, because two dispatch modes on one stack do
not both see DTensor ops.

Prints one line per case and run and, for a difference, where the sequences
part; the last line is "N passed, M failed" (exit status 1 when one failed).
With --baseline, compares the do-nothing runs with each other instead (is the
program itself deterministic?).  With --lean, compares two recorded runs: one
with torch's own BackwardHook around every module call (COMMDEBUG_LEAN_BW=0)
and one with the recorder's LeanBackwardHook; their traces must be the same
event for event (every field but the time).
"""

import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "programs"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from launch import LEFT_OUT, log_tail, preload, run_case  # noqa: E402
from regen import CASES  # noqa: E402


def trace_ops(path):
    """The op names of a trace, one list per region (ops the dispatcher ran:
    not the collectives a torch without them in the dispatcher recorded
    through its Python API)."""
    from commdebug.tracefile import read_events
    regions = []
    for ev in read_events(path):
        e = ev.get("ev")
        if e == "region_enter":
            regions.append([])
        elif e == "op" and "via" not in ev and regions:
            regions[-1].append(ev["name"])
    return regions


def trace_events(path):
    """A trace's events but the meta event, without their times."""
    from commdebug.tracefile import read_events
    out = []
    for ev in read_events(path):
        if ev.get("ev") == "meta":
            continue
        ev.pop("t", None)
        out.append(ev)
    return out


def lean_difference(case, world, outdir, timeout):
    """[problem] where the traces with torch's BackwardHook and with
    LeanBackwardHook differ."""
    cdir = os.path.join(outdir, case)
    runs = []
    for lean in ("0", "1"):
        os.environ["COMMDEBUG_LEAN_BW"] = lean
        try:
            rcs = run_case(case, world, outdir, "rec", timeout=timeout)
        finally:
            del os.environ["COMMDEBUG_LEAN_BW"]
        if any(rc != 0 for rc in rcs):
            return ["rec (COMMDEBUG_LEAN_BW=%s) rank %d exited %s:\n%s"
                    % (lean, r, rc, log_tail(outdir, case, "rec", r))
                    for r, rc in enumerate(rcs) if rc != 0]
        runs.append([trace_events(os.path.join(cdir, "rank%d.zst" % r)) for r in range(world)])
    problems = []
    for r in range(world):
        want, got = runs[0][r], runs[1][r]
        if want != got:
            i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
            problems.append("rank %d: event %d of %d/%d: lean %s, torch's %s" % (
                r, i, len(got), len(want), got[max(0, i - 1):i + 2], want[max(0, i - 1):i + 2]))
    return problems


def first_difference(got, want):
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return "at op %d of %d/%d: recorded %s, without the recorder %s" % (
        i, len(got), len(want), got[max(0, i - 1):i + 3], want[max(0, i - 1):i + 3])


def compare(case, world, want_of, got_of):
    """[problem] for every rank/region where the op lists differ."""
    problems = []
    for r in range(world):
        want, got = want_of(r), got_of(r)
        if len(want) != len(got):
            problems.append("rank %d: %d regions recorded, %d without the recorder"
                            % (r, len(got), len(want)))
            continue
        for k, (w, g) in enumerate(zip(want, got), 1):
            if w is None:
                problems.append("rank %d region %d: failed without the recorder" % (r, k))
            elif w != g:
                problems.append("rank %d region %d: %s" % (r, k, first_difference(g, w)))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("-k", action="append", default=[], help="only the cases named so")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--baseline", action="store_true",
                    help="compare the do-nothing runs with each other")
    ap.add_argument("--lean", action="store_true",
                    help="compare traces with torch's BackwardHook and with LeanBackwardHook")
    a = ap.parse_args()
    preload()
    passed = failed = 0
    for case, world in CASES:
        if a.k and case not in a.k:
            continue
        cdir = os.path.join(a.outdir, case)
        first = None
        for run in range(1, a.runs + 1):
            shutil.rmtree(cdir, ignore_errors=True)
            bad = []
            if a.lean:
                rcs = run_case(case, world, a.outdir, "ops", timeout=a.timeout)
                if all(rc == LEFT_OUT for rc in rcs):
                    print("skip %s: %s" % (case, log_tail(a.outdir, case, "ops", 0, 300).strip()))
                    break
                bad = lean_difference(case, world, a.outdir, a.timeout)
                if bad:
                    failed += 1
                    print("FAIL %s run %d:\n  %s" % (case, run, "\n  ".join(bad)), flush=True)
                else:
                    passed += 1
                    print("ok   %s run %d (the same trace on %d ranks)" % (case, run, world),
                          flush=True)
                continue
            rcs = run_case(case, world, a.outdir, "ops", timeout=a.timeout)
            if all(rc == LEFT_OUT for rc in rcs):
                print("skip %s: %s" % (case, log_tail(a.outdir, case, "ops", 0, 300).strip()))
                break
            bad += ["ops rank %d exited %s:\n%s" % (r, rc, log_tail(a.outdir, case, "ops", r))
                    for r, rc in enumerate(rcs) if rc != 0]
            ops = []
            for r in range(world):
                try:
                    with open(os.path.join(cdir, "ops-rank%d.json" % r)) as f:
                        ops.append(json.load(f))
                except OSError:
                    ops.append([])
            if a.baseline:
                if first is None:
                    first = ops
                elif not bad:
                    bad += compare(case, world, lambda r: first[r], lambda r: ops[r])
            else:
                rcs = run_case(case, world, a.outdir, "rec", timeout=a.timeout)
                bad += ["rec rank %d exited %s:\n%s" % (r, rc, log_tail(a.outdir, case, "rec", r))
                        for r, rc in enumerate(rcs) if rc != 0]
                if not bad:
                    bad += compare(case, world, lambda r: ops[r], lambda r: trace_ops(
                        os.path.join(cdir, "rank%d.zst" % r)))
            n = sum(len(x or []) for rk in ops for x in rk)
            if bad:
                failed += 1
                print("FAIL %s run %d:\n  %s" % (case, run, "\n  ".join(bad)), flush=True)
            else:
                passed += 1
                print("ok   %s run %d (%d ops on %d ranks)" % (case, run, n, world), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
