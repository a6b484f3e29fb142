"""Post-mortem on PyTorch Flight Recorder dumps alone (issue 23): `commdebug ranks`.

Runs tests/fr/fr_jobs.py's real failing 4-rank gloo jobs afresh (no commdebug
recorder: only the Flight Recorder, TORCH_FR_BUFFER_SIZE set), each worker
writing a ledger of what it did before doing it and dumping its Flight
Recorder while a collective is in flight (as the watchdog would on a timeout)
and at exit.  What `commdebug ranks --json` says of each directory of dumps is
checked against the ledgers, on the FIRST finding (the likeliest cause, the
one a user reads): its kind for that job and dump moment, the culprit rank,
the process group, the sequence number, the collective each side issued
there and its bytes; a rank that left no dump (gloo aborts one with SIGABRT
in the size case; rank 2 of the sleep job is asleep, not waiting, when the
others dump in flight) is a missing rank, and where the others wait for it,
the culprit of a hang.

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

# case -> (culprit rank, the kind of the first finding at each dump moment,
# the moments the job always dumps at)
CASES = {
    # torch 2.14 gloo fails the mismatched collective, so every rank stops at
    # it: the skip is told from rank 1's own repeating collectives
    "skip": (1, {"exit": "skip", "inflight": "skip"}, ("exit", "inflight")),
    "coll": (1, {"exit": "type_mismatch", "inflight": "type_mismatch"}, ("exit", "inflight")),
    # rank 0 is aborted at once (no dump of it, none in flight as a rule)
    "size": (1, {"exit": "size_mismatch", "inflight": "size_mismatch"}, ("exit",)),
    # in flight: ranks 0, 1, 3 wait for rank 2, which sleeps (and dumps
    # nothing then); at exit all ended normally, rank 2 late
    "sleep": (2, {"exit": "straggler", "inflight": "hang"}, ("exit", "inflight")),
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


def check_dir(ctx, case, moment, d, led, rcs):
    culprit, kinds, _ = CASES[case]
    kind = kinds[moment]
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
    # the first finding names the culprit
    check(doc["findings"], "%s: no finding", where)
    f = doc["findings"][0]
    eq((f["kind"], f["ranks"]), (kind, [culprit]), where + ": the first finding's kind and culprit "
       "(all: %r)" % [(x["kind"], x["ranks"]) for x in doc["findings"]])
    eq(f["pg"], odd["pg"], where + ": process group")
    eq(f["seq"], odd["seq"], where + ": seq")
    mods = {m["side"]: m for m in f.get("modules", [])}
    elem = ELEM[odd["dtype"]]
    if f["kind"] == "skip":
        # what decided it: rank 1's own collectives of the group repeat
        eq(f["count"], 1, where + ": collectives skipped")
        by = f.get("decided_by") or {}
        eq((by.get("basis"), by.get("rank")), ("own_pattern", culprit), where + ": decided by")
        # what it skipped: the others' collective there
        oth = mods.get("others")
        check(oth is not None and oth["rank"] in ref, "%s: no record of the others'", where)
        e = ref[oth["rank"]]
        eq((oth["collective"], oth["bytes"]), (e["collective"], e["numel"] * elem),
           where + ": the skipped collective")
    if f["kind"] == "hang":
        # the others wait in the culprit's collective; the culprit left no
        # dump (it was asleep) or one that ends before it
        oth = mods.get("others")
        check(oth is not None, "%s: no record of the waiting ranks'", where)
        eq((oth["collective"], oth["bytes"]), (odd["collective"], odd["numel"] * elem),
           where + ": the collective waited in")
        eq(f["others"], [r for r in have if r != culprit], where + ": the waiting ranks")
        eq(f.get("absent", []), [] if culprit in have else [culprit], where + ": no dump")
        # gloo keeps no states: that they wait is told by "retired"
        eq(f.get("in_flight_by"), "retired", where + ": what shows them waiting")
        return f
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
    must = CASES[case][2]
    for sub in ("exit", "exit-json", "inflight", "inflight-json"):
        d = os.path.join(out, sub)
        moment = sub.split("-")[0]
        if not os.path.isdir(d) or not os.listdir(d):
            check(moment not in must, "%s: no dumps in %s", case, sub)
            continue
        check_dir(ctx, case, moment, d, led, rcs)


def test_fr_skip(ctx):
    run_case(ctx, "skip")


def test_fr_coll(ctx):
    run_case(ctx, "coll")


def test_fr_size(ctx):
    run_case(ctx, "size")


def test_fr_sleep(ctx):
    run_case(ctx, "sleep")


def test_fr_joined_coll(ctx):
    """The same job recorded both ways at once (fr_jobs.py --record: a
    commdebug Recorder in each worker beside the Flight Recorder); each
    rank's trace and exit dump in one directory are joined (cd_fr_join):
    the finding names the module, phase and step from the trace and the
    record from the dump, and agrees with the ledgers."""
    need(ctx)
    out = os.path.join(ctx.tmp, "joined-coll")
    r = subprocess.run([sys.executable, JOBS, "--case", "coll", "--record", "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    check(r.returncode == 0, "fr_jobs.py --record: exit %d\n%s", r.returncode,
          r.stdout.decode(errors="replace")[-2000:])
    d = os.path.join(out, "joined")
    os.makedirs(d)
    for r_ in range(4):
        for src, name in ((os.path.join(out, "exit"), "fr_rank%d" % r_),
                          (os.path.join(out, "trace"), "rank%d.zst" % r_)):
            check(os.path.exists(os.path.join(src, name)), "no %s in %s", name, src)
            os.symlink(os.path.join(src, name), os.path.join(d, name))
    led = ledgers(out)
    odd, ref = truth(led, 1)
    rc, doc = report(ctx, d)
    eq(rc, 4, "joined: exit status")
    # every rank's trace and dump read, the dump joined to the trace
    eq(sorted(t["rank"] for t in doc["traces"]), [0, 0, 1, 1, 2, 2, 3, 3], "joined: ranks")
    eq(doc["missing_ranks"], [], "joined: missing ranks")
    traces = [t for t in doc["traces"] if t["path"].endswith(".zst")]
    eq(sorted(t["rank"] for t in traces), [0, 1, 2, 3], "joined: ranks of the traces")
    for t in traces:
        check(t["path"].endswith("rank%d.zst" % t["rank"]), "joined: rank %d read from %s",
              t["rank"], t["path"])
        check(str(t.get("flight_recorder", "")).endswith("fr_rank%d" % t["rank"]),
              "joined: rank %d has no dump joined: %r", t["rank"], t.get("flight_recorder"))
    fs = [f for f in doc["findings"] if f["kind"] == "type_mismatch"]
    check(fs, "joined: no type_mismatch in %s", [(f["kind"], f["ranks"]) for f in doc["findings"]])
    f = fs[0]
    eq(f["ranks"], [1], "joined: culprit")
    eq(f["pg"], odd["pg"], "joined: pg")
    # the trace numbers every op of the pg (the step-1 send/recv too), as FR's op_id
    p2p_before = sum(1 for e in led[1] if e["ev"] == "p2p" and e["pg"] == odd["pg"]
                     and e["t_ns"] < odd["t_ns"])
    eq(f["seq"], odd["seq"] + p2p_before, "joined: seq (collectives and p2p of the pg)")
    eq(f["step"]["label"], "step %d" % odd["step"], "joined: step")
    with open(os.path.join(out, "exit", "fr_rank1"), "rb") as fh:
        import pickle
        dump1 = pickle.load(fh)
    want_rec = [e["record_id"] for e in dump1["entries"]
                if e["process_group"][0] == odd["pg"] and e["collective_seq_id"] == odd["seq"]
                and not e.get("is_p2p")]
    mods = {m["side"]: m for m in f["modules"]}
    for side, rank_, e in (("odd", 1, odd),) + tuple(
            ("others", r_, ref[r_]) for r_ in ref if mods.get("others", {}).get("rank") == r_):
        m = mods[side]
        where = "joined: %s (rank %d)" % (side, rank_)
        eq(m["rank"], rank_, where + ": rank")
        # from the trace
        eq(m.get("source"), "trace", where + ": source of module, phase, step")
        eq(m["module"], "Net.world_reduce", where + ": module")
        eq(m["phase"], "forward", where + ": phase")
        eq(m["label"], "step %d" % e["step"], where + ": step")
        eq(m["collective"].replace("c10d.", "").rstrip("_"), e["collective"].replace("_", ""),
           where + ": collective")
        eq(m["bytes"], e["numel"] * ELEM[e["dtype"]], where + ": bytes")
        # from the dump
        fr = m.get("flight_recorder")
        check(fr, "%s: no Flight Recorder facts", where)
        check(fr["path"].endswith("fr_rank%d" % rank_), "%s: dump %s", where, fr["path"])
        eq(fr["op_id"], f["seq"], where + ": the dump's op_id")
        if rank_ == 1:
            eq([fr["record_id"]], want_rec, where + ": the dump's record of the ledger's seq")
        check(fr["state"] in (None, "scheduled"), "%s: state %r (gloo leaves every entry scheduled)",
              where, fr["state"])
        check(any(x["file"].endswith("/fr_jobs.py") for x in fr["frames"]),
              "%s: no frame of fr_jobs.py", where)
    st = [s for s in f.get("states", []) if s["rank"] == 1]
    check(st and str(st[0].get("flight_recorder", "")).endswith("fr_rank1") and st[0].get("pg_status"),
          "joined: the culprit's state lacks the dump's pg_status: %r", st)
