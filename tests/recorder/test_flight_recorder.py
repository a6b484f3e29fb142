"""Post-mortem on PyTorch Flight Recorder dumps alone (issue 23): `commdebug ranks`.

Runs tests/fr/fr_jobs.py's real failing 4-rank gloo jobs afresh (no commdebug
recorder: only the Flight Recorder, TORCH_FR_BUFFER_SIZE set), each worker
writing a ledger of what it did before doing it and dumping its Flight
Recorder while a collective is in flight (as the watchdog would on a timeout)
and at exit.  What `commdebug ranks --json` says of each directory of dumps is
checked against the ledgers: the culprit rank, the process group, the
sequence number, the collective each side issued there and its bytes, the
kind of finding; a rank that left no dump (gloo aborts one with SIGABRT in the
size case) is a missing rank.

Needs torch 2.x with the Flight Recorder (torch._C._distributed_c10d.
_dump_fr_trace: the torch 2.14 root of tests/torch2/env.sh); skipped on
torch 1.13.
"""

import json
import os
import subprocess
import sys

from _util import REPO, Skip, check, eq

JOBS = os.path.join(REPO, "tests", "fr", "fr_jobs.py")

# case -> (culprit rank, the kinds that name it rightly)
CASES = {
    "skip": (1, ("skip", "type_mismatch")),
    "coll": (1, ("type_mismatch",)),
    "size": (1, ("size_mismatch",)),
    "sleep": (2, ("straggler",)),
}
ELEM = {"float32": 4}


def need(ctx):
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise Skip("no torch")
    if int(torch.__version__.split(".")[0]) < 2 or not hasattr(
            torch._C._distributed_c10d, "_dump_fr_trace"):
        raise Skip("torch %s has no Flight Recorder dump (torch 2.x only)" % torch.__version__)
    if ctx.analyzer is None:
        if ctx.require_analyzer:
            raise AssertionError("analyzer missing (--require-analyzer)")
        raise Skip("no analyzer")


def run_job(ctx, case):
    out = os.path.join(ctx.tmp, case)
    r = subprocess.run([sys.executable, JOBS, "--case", case, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    check(r.returncode == 0, "fr_jobs.py --case %s: exit %d\n%s", case, r.returncode,
          r.stdout.decode(errors="replace")[-2000:])
    return out


def ledgers(out):
    led = {}
    for r in range(4):
        p = os.path.join(out, "ledger%d.jsonl" % r)
        if os.path.exists(p):
            with open(p) as f:
                led[r] = [json.loads(line) for line in f if line.strip()]
    return led


def truth(led, culprit):
    """The culprit's first collective after its fault, and what the others
    issued at the same (pg, seq)."""
    evs = led[culprit]
    i = next(k for k, e in enumerate(evs) if e["ev"] == "fault")
    odd = next(e for e in evs[i + 1:] if e["ev"] == "coll")
    ref = {}
    for r, es in led.items():
        if r == culprit:
            continue
        for e in es:
            if e["ev"] == "coll" and e["pg"] == odd["pg"] and e["seq"] == odd["seq"]:
                ref[r] = e
    return odd, ref


def report(ctx, d):
    rc, out, err = ctx.analyzer.run("ranks", "--json", d, check_rc=(0, 1, 3, 4))
    return rc, json.loads(out)


def check_dir(ctx, case, d, led, rcs):
    culprit, kinds = CASES[case]
    odd, ref = truth(led, culprit)
    rc, doc = report(ctx, d)
    where = "%s (%s)" % (case, os.path.relpath(d, ctx.tmp))
    have = sorted(int(n[len("fr_rank"):]) for n in os.listdir(d) if n.startswith("fr_rank"))
    eq(sorted(t["rank"] for t in doc["traces"]), have, where + ": ranks read")
    for t in doc["traces"]:
        check(t.get("source", "").startswith("flight_recorder"), "%s: rank %s read as %r",
              where, t["rank"], t.get("source"))
    # a rank without a dump (killed before it could write one) is missing
    eq(doc["missing_ranks"], [r for r in range(4) if r not in have], where + ": missing ranks")
    check(rc == 4, "%s: exit %d, want 4 (the ranks differ)", where, rc)
    fs = [f for f in doc["findings"] if f["kind"] in kinds]
    check(fs, "%s: no %s finding in %s", where, "/".join(kinds),
          [(f["kind"], f["ranks"]) for f in doc["findings"]])
    f = fs[0]
    eq(f["ranks"], [culprit], where + ": culprit rank")
    eq(f["pg"], odd["pg"], where + ": process group")
    if f["kind"] != "skip":
        eq(f["seq"], odd["seq"], where + ": seq")
    mods = {m["side"]: m for m in f.get("modules", [])}
    elem = ELEM[odd["dtype"]]
    if f["kind"] == "straggler":
        # the late arrival: the culprit's ledger time against the others'
        others = [e["t_ns"] for r, e in ref.items() if r in have]
        delay = (odd["t_ns"] - max(others)) / 1e9
        got = f["times"]["delay_s"]
        check(abs(got - delay) < 0.5, "%s: delay %.3f s, the ledgers say %.3f s", where, got, delay)
        return f
    o = mods.get("odd")
    check(o is not None, "%s: no record of the culprit's collective", where)
    eq(o["rank"], culprit, where + ": odd record's rank")
    eq(o["collective"], odd["collective"], where + ": the culprit's collective")
    eq(o["bytes"], odd["numel"] * elem, where + ": the culprit's bytes")
    eq(o["dtype"], "torch." + odd["dtype"], where + ": the culprit's dtype")
    # frames: in the pickle only (the JSON dump has none)
    check(o["source"] == "flight_recorder_json" or any(fr["file"] == JOBS or fr["file"].endswith("/fr_jobs.py") for fr in o["frames"]),
          "%s: no frame of fr_jobs.py in %r", where, o["frames"])
    oth = mods.get("others")
    if oth is not None and oth["rank"] in ref:
        e = ref[oth["rank"]]
        eq(oth["collective"], e["collective"], where + ": the others' collective")
        eq(oth["bytes"], e["numel"] * elem, where + ": the others' bytes")
    st = [s for s in f.get("states", []) if s["rank"] == culprit]
    check(st and st[0].get("pg_status"), "%s: no pg_status in the culprit's state", where)
    return f


def run_case(ctx, case):
    need(ctx)
    out = run_job(ctx, case)
    led = ledgers(out)
    with open(os.path.join(out, "rcs.json")) as f:
        rcs = json.load(f)
    checked = 0
    for sub in ("exit", "exit-json", "inflight", "inflight-json"):
        d = os.path.join(out, sub)
        if not os.path.isdir(d) or not os.listdir(d):
            continue
        if sub.startswith("inflight") and case == "sleep":
            continue   # taken while rank 2 slept: it has none, the others wait
        check_dir(ctx, case, d, led, rcs)
        checked += 1
    check(checked >= 2, "%s: only %d dump directories to check", case, checked)


def test_fr_skip(ctx):
    run_case(ctx, "skip")


def test_fr_coll(ctx):
    run_case(ctx, "coll")


def test_fr_size(ctx):
    run_case(ctx, "size")


def test_fr_sleep(ctx):
    run_case(ctx, "sleep")
