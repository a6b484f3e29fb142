"""DDP gradient buckets: the recorder's ``ddp`` events against what DDP itself
reports, and `commdebug buckets` against DDP and against DDPOptimizer's
bucketing worked out here by hand.

The jobs (ddp_jobs.py) are real DistributedDataParallel runs on gloo: a
rebuild after step 1 with a tiny first bucket, unused parameters with
find_unused_parameters=True and a step under no_sync, static_graph, small
caps; layers of uneven sizes, a frozen parameter and parameters DDP is told
to ignore.  Each rank's truth file is DDP's own account (its reducer's
bucket listing and its logger), read by the worker, not by the recorder.
"""

import json
import os
import subprocess

from _util import check, eq, events, run_ranks

# case: world size (ddp_jobs.CASES has the rest)
JOBS = {"rebuild": 3, "unused": 2, "static": 2, "caps": 2, "late": 2, "linear6": 2,
        "embed": 2}
# Cases where the rebuilt event is written one forward after the rebuild.
LATE = ("late",)
_RAN = {}
_BUCKETS_SUPPORTED = {}


def job(ctx, case):
    """Run a job once per test run; returns (out dir, [truth per rank])."""
    if case not in _RAN:
        out = os.path.join(ctx.tmp, case)
        run_ranks(case, out, JOBS[case], script="ddp_jobs.py")
        truths = []
        for r in range(JOBS[case]):
            with open(os.path.join(out, "truth%d.json" % r)) as f:
                truths.append(json.load(f))
        _RAN[case] = (out, truths)
    return _RAN[case]


def csv_ints(s):
    return [int(x) for x in s.split(",")] if s else []


def index_lists(s):
    return [[int(x) for x in part.split()] for part in s.split(",")]


def rebuild_step(truth):
    """The step in whose forward DDP rebuilt its buckets (None: never)."""
    for s in truth["steps"]:
        if s["has_rebuilt"]:
            return s["step"]
    return None


def nbytes_of(truth):
    return {p["name"]: p["nbytes"] for p in truth["params"]}


# ------------------------------------------------------- the recorder's events
def check_rank(case, truth, evs):
    where = "%s rank %d" % (case, truth["rank"])
    nb = nbytes_of(truth)
    ddp = [(i, e) for i, e in enumerate(evs) if e["ev"] == "ddp"]
    initial = [(i, e) for i, e in ddp if e["rebuilt"] is False]
    rebuilt = [(i, e) for i, e in ddp if e["rebuilt"] is True]
    eq(len(initial), 1, "%s: rebuilt:false ddp events" % where)
    step = rebuild_step(truth)
    eq(len(rebuilt), 0 if step is None else 1, "%s: rebuilt:true ddp events" % where)
    check(initial[0][0] < min([i for i, _ in rebuilt] or [len(evs)]),
          "%s: the rebuilt event comes after the initial one" % where)

    for _, e in ddp:
        eq(e["mod"], "DistributedDataParallel", "%s: mod" % where)
        eq(e["pg"], "0", "%s: pg" % where)
        eq(e["cap"], truth["cap"], "%s: cap" % where)
        eq(e["first_cap"], truth["first_cap"], "%s: first_cap" % where)
        eq(e["default_first_cap"], truth["default_first_cap"], "%s: default_first_cap" % where)
        for k in ("find_unused", "static_graph", "grad_as_view"):
            eq(e[k], truth[k], "%s: %s" % (where, k))
        managed = [p["name"] for p in truth["params"] if p["managed"]]
        eq(sorted(p["name"] for p in e["params"]), sorted(managed), "%s: params" % where)
        for p in e["params"]:
            eq(p["nbytes"], nb[p["name"]], "%s: nbytes of %s" % (where, p["name"]))
            eq(p["requires_grad"], True, "%s: requires_grad of %s" % (where, p["name"]))

    def names(e):
        return [[e["params"][i]["name"] for i in b] for b in e["buckets"]]

    e0 = initial[0][1]
    eq(names(e0), truth["construction"]["buckets"], "%s: construction buckets" % where)
    eq(e0["sizes"], csv_ints(truth["construction"]["logging"]["bucket_sizes"]),
       "%s: construction sizes (DDP's logger)" % where)
    eq(e0["sizes"], [sum(nb[n] for n in b) for b in truth["construction"]["buckets"]],
       "%s: construction sizes (the reducer's members)" % where)

    if step is not None:
        er = rebuilt[0][1]
        final = truth["steps"][-1]["logging"]
        check("rebuilt_per_bucket_param_indices" in final,
              "%s: DDP's logger has not reported the rebuilt buckets (run more steps)", where)
        eq(names(er), truth["steps"][step - 1]["buckets"], "%s: rebuilt buckets" % where)
        eq(er["buckets"], index_lists(final["rebuilt_per_bucket_param_indices"]),
           "%s: rebuilt indices (DDP's logger)" % where)
        eq(er["sizes"], csv_ints(final["rebuilt_bucket_sizes"]),
           "%s: rebuilt sizes (DDP's logger)" % where)

    # Every bucket all-reduce: the buckets of its step, in index order, with
    # the byte size DDP gives that bucket; none in a no_sync step.  The
    # rebuilt event comes in the step DDP rebuilt, before its all-reduces, or
    # (when the recorder waits for DDP's logger) in the next step, naming the
    # step's region in "rebuilt_region".
    region = None
    per_region = {}
    for e in evs:
        if e["ev"] == "region_enter":
            region = e["region"]
            per_region[region] = []
        elif e["ev"] == "ddp" and e["rebuilt"]:
            if case in LATE:
                eq(region, step + 1, "%s: region of the late rebuilt event" % where)
                eq(e.get("rebuilt_region"), step, "%s: rebuilt_region" % where)
                check("logger" in e.get("note", ""), "%s: note on the late event", where)
            else:
                eq(region, step, "%s: region of the rebuilt event" % where)
                eq(per_region[region], [], "%s: bucket all-reduces before the rebuilt event"
                   % where)
                check("rebuilt_region" not in e, "%s: rebuilt_region on a timely event", where)
        elif e["ev"] == "coll" and e.get("src") == "ddp_reducer":
            sizes = (rebuilt[0][1] if step is not None and region >= step else e0)["sizes"]
            check(e["bucket"] < len(sizes), "%s: bucket %d out of range", where, e["bucket"])
            eq(e["bytes"], sizes[e["bucket"]], "%s: bytes of bucket %d in region %d"
               % (where, e["bucket"], region))
            per_region[region].append((e["bucket"], e["bytes"]))
    for s in truth["steps"]:
        want = [(k, sum(nb[n] for n in b)) for k, b in enumerate(s["buckets"])] \
            if s["synced"] else []
        eq(per_region.get(s["step"]), want, "%s: bucket all-reduces of step %d"
           % (where, s["step"]))


def test_ddp_events_equal_ddp(ctx):
    """The ddp events say what DDP reports: caps, flags, parameters, the
    construction buckets and the rebuilt ones (once, in the step DDP rebuilt
    them, before that step's all-reduces), and every bucket all-reduce has
    its bucket's size."""
    for case in JOBS:
        out, truths = job(ctx, case)
        for truth in truths:
            check_rank(case, truth, events(os.path.join(out, truth["trace"])))
        step = rebuild_step(truths[0])
        rebuilt = "no rebuild"
        if step:
            rebuilt = "rebuilt in step %d into %d" % (step,
                                                      len(truths[0]["steps"][step - 1]["buckets"]))
        ctx.note("%s: %d ranks, %d construction buckets, %s"
                 % (case, len(truths), len(truths[0]["construction"]["buckets"]), rebuilt))


def test_jobs_cover_the_cases(ctx):
    """The jobs do what the tests rely on (checked on DDP's own report)."""
    _, t = job(ctx, "rebuild")
    eq(rebuild_step(t[0]), 2, "rebuild: DDP rebuilt in step 2")
    check(len(t[0]["steps"][1]["buckets"]) >= 3, "rebuild: several rebuilt buckets")
    check(any(not p["requires_grad"] for p in t[0]["params"]), "a frozen parameter")
    _, t = job(ctx, "unused")
    check(any("unused" in p["name"] and p["managed"] for p in t[0]["params"]),
          "unused: DDP manages the unused module's parameters")
    check(any(p["ignored"] and p["requires_grad"] for p in t[0]["params"]),
          "unused: a parameter DDP ignores")
    check(any(not s["synced"] for s in t[0]["steps"]), "unused: a no_sync step")
    _, t = job(ctx, "static")
    check(t[0]["static_graph"] and rebuild_step(t[0]) is not None, "static: rebuilt")
    # first_cap is the first-bucket cap DDP used: its rebuilt buckets are
    # what DDP's assignment function makes of their own order with it.
    for case in JOBS:
        _, t = job(ctx, case)
        step = rebuild_step(t[0])
        if step is not None:
            eq(t[0]["rebuild_check"], t[0]["steps"][step - 1]["buckets"],
               "%s: rebuilt buckets recomputed with first cap %d" % (case, t[0]["first_cap"]))


# ----------------------------------------------------- DDPOptimizer, by hand
def ddpoptimizer_plan(forward_order, own_params, cap, first_cap):
    """DDPOptimizer's bucketing (torch/_dynamo/backends/distributed.py), worked
    step by step: walk the modules backwards from the last one to run
    forward; before each, open a new bucket when the bucket being filled has
    reached the cap (the first bucket's cap while it is the only one); put
    the module's own parameters that need gradients into it, in registration
    order.  An empty bucket left at the front is folded into the next.
    Index 0 is the bucket that was started first (the last modules: the
    first gradients)."""
    building = [{"size": 0, "params": []}]      # building[0]: being filled
    for mod in reversed(forward_order):
        cur = building[0]
        if cur["size"] >= cap or (len(building) == 1 and cur["size"] >= first_cap):
            building.insert(0, {"size": 0, "params": []})
        for name, nbytes in own_params.get(mod, []):
            building[0]["size"] += nbytes
            building[0]["params"].append(name)
    if len(building) > 1 and building[0]["size"] == 0:
        del building[0]
    return [dict(b, index=i) for i, b in enumerate(reversed(building))]


def test_ddpoptimizer_by_hand(ctx):
    """The derivation above on numbers worked on paper.  Modules run a, b, c,
    d; own parameters: a 100 bytes, b 50 + 30, c none, d 200; cap 120, first
    cap 60.  Backwards: d -> bucket 200 (the only bucket, 200 >= 60: next
    module opens a new one); c opens bucket 2 (empty); b -> 80; a: 80 < 120,
    not the only bucket -> 180.  Buckets: [d] 200, [b.x, b.y, a.w] 180."""
    own = {"a": [("a.w", 100)], "b": [("b.x", 50), ("b.y", 30)], "d": [("d.w", 200)]}
    eq(ddpoptimizer_plan(["a", "b", "c", "d"], own, 120, 60),
       [{"index": 0, "size": 200, "params": ["d.w"]},
        {"index": 1, "size": 180, "params": ["b.x", "b.y", "a.w"]}], "plan")
    # First cap not reached by d alone (d 50 < 60): b joins it, then a new
    # bucket for a.  With cap 1000 and first cap 1000 everything is one bucket.
    own["d"] = [("d.w", 50)]
    eq(ddpoptimizer_plan(["a", "b", "c", "d"], own, 120, 60),
       [{"index": 0, "size": 130, "params": ["d.w", "b.x", "b.y"]},
        {"index": 1, "size": 100, "params": ["a.w"]}], "plan 2")
    eq(ddpoptimizer_plan(["a", "b", "c", "d"], own, 1000, 1000),
       [{"index": 0, "size": 230, "params": ["d.w", "b.x", "b.y", "a.w"]}], "plan 3")
    # A module without parameters running first leaves an empty bucket at the
    # front when the last one filled up: folded.
    eq(ddpoptimizer_plan(["x", "a"], {"a": [("a.w", 100)]}, 50, 50),
       [{"index": 0, "size": 100, "params": ["a.w"]}], "folded")


def expected_plan(truth, cap, first_cap):
    """DDPOptimizer's plan for a job's model from its truth: the modules in
    the order of their first forward; a module's own parameters are those
    whose name is the module's name plus one component; only parameters DDP
    manages (needing gradients, not ignored)."""
    own = {}
    mods = set(truth["forward_order"])
    for p in truth["params"]:
        if not p["managed"]:
            continue
        mod = p["name"].rsplit(".", 1)[0]
        check(mod in mods or "unused" in mod, "module %s of %s ran", mod, p["name"])
        own.setdefault(mod, []).append((p["name"], p["nbytes"]))
    return ddpoptimizer_plan(truth["forward_order"], own, cap, first_cap)


# ------------------------------------------------------------ the analyzer
def buckets_supported(ctx):
    if ctx.analyzer is None:
        ctx.note("analyzer checks skipped (no binary)")
        return False
    path = ctx.analyzer.path
    if path not in _BUCKETS_SUPPORTED:
        r = subprocess.run([path, "buckets", "--help"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        _BUCKETS_SUPPORTED[path] = r.returncode == 0
    if not _BUCKETS_SUPPORTED[path]:
        check(not getattr(ctx, "require_analyzer", False),
              "`%s buckets --help` fails: no buckets command (--require-analyzer)", path)
        ctx.note("`commdebug buckets` checks skipped (`%s buckets --help` fails: not "
                 "implemented in this binary)" % path)
    return _BUCKETS_SUPPORTED[path]


def buckets_json(ctx, traces, *opts):
    docs, _, _ = ctx.analyzer.json_docs("buckets", "--json", *(list(opts) + traces))
    docs = [d for d in docs if isinstance(d, dict) and "ddp" in d]
    eq(len(docs), 1, "buckets --json documents with a \"ddp\" key")
    return docs[0]["ddp"]


def plan_of(entry):
    return [{"index": b["index"], "size": b["size"], "params": b["params"]}
            for b in entry["planned"]["buckets"]]


def check_entry(case, truth, entry, cap, first_cap, given=False):
    where = "%s rank %d" % (case, truth["rank"])
    nb = nbytes_of(truth)
    eq(entry["mod"], "DistributedDataParallel", "%s: mod" % where)
    eq(entry["pg"], "0", "%s: pg" % where)
    eq(entry["cap"], truth["cap"], "%s: cap" % where)
    eq(entry["first_cap"], truth["first_cap"], "%s: first_cap" % where)
    eq(entry["planned"]["cap"], cap, "%s: planned cap" % where)
    eq(entry["planned"]["first_cap"], first_cap, "%s: planned first_cap" % where)
    eq(entry["planned"]["first_cap_from"], "option" if given else "default_first_cap",
       "%s: planned first_cap_from" % where)
    eq(entry["default_first_cap"], truth["default_first_cap"], "%s: default_first_cap" % where)
    # one line where DDP's own first cap is not DDPOptimizer's
    eq(sum("DDP's own first bucket cap is %d bytes" % truth["first_cap"] in n
           for n in entry["planned"]["notes"]),
       int(not given and truth["first_cap"] != first_cap), "%s: first-cap note" % where)
    eq(plan_of(entry), expected_plan(truth, cap, first_cap), "%s: planned buckets" % where)
    step = rebuild_step(truth)
    eq(entry["ddp_buckets"]["initial"], truth["construction"]["buckets"],
       "%s: ddp_buckets.initial" % where)
    eq(entry["ddp_buckets"]["rebuilt"],
       truth["steps"][step - 1]["buckets"] if step else None, "%s: ddp_buckets.rebuilt" % where)

    observed = {o["region"]: o for o in entry["observed"]}
    ignored = set(p["name"] for p in truth["params"] if p["ignored"] and p["requires_grad"])
    managed = set(p["name"] for p in truth["params"] if p["managed"])
    for s in truth["steps"]:
        o = observed.get(s["step"])
        if not s["synced"]:
            # No bucket was reduced: the step is left out or has every bucket
            # as never fired.
            if o is not None:
                eq(o["buckets"], [], "%s: step %d (no_sync) buckets" % (where, s["step"]))
                eq(sorted(o["never_fired"]), list(range(len(s["buckets"]))),
                   "%s: step %d (no_sync) never fired" % (where, s["step"]))
            continue
        check(o is not None, "%s: no observed entry for step %d", where, s["step"])
        eq(o["label"], "step %d" % s["step"], "%s: label" % where)
        got = [(b["index"], b["bytes"], b["params"]) for b in o["buckets"]]
        want = [(k, sum(nb[n] for n in b), b) for k, b in enumerate(s["buckets"])]
        eq(got, want, "%s: observed buckets of step %d" % (where, s["step"]))
        for b in o["buckets"]:
            eq(b["dtype"], "torch.float32", "%s: dtype" % where)
        eq(o["never_fired"], [], "%s: never fired in step %d" % (where, s["step"]))
        # Parameters in no bucket: those DDP was told to ignore still need
        # gradients, which DDP never all-reduces.
        unb = set(o["unbucketed"])
        check(ignored <= unb, "%s: step %d: ignored parameters %s not in unbucketed %s",
              where, s["step"], sorted(ignored - unb), sorted(unb))
        check(not (unb & managed), "%s: step %d: DDP's parameters listed as unbucketed: %s",
              where, s["step"], sorted(unb & managed))


def test_buckets_command(ctx):
    """`commdebug buckets --json` on every job's traces: observed buckets per
    step equal DDP's (index, bytes, parameters), no_sync steps have none,
    ignored parameters are unbucketed, the plan equals DDPOptimizer's worked
    here, with DDP's caps and with --cap / --first-cap."""
    if not buckets_supported(ctx):
        return
    for case in JOBS:
        out, truths = job(ctx, case)
        traces = [os.path.join(out, t["trace"]) for t in truths]
        entries = buckets_json(ctx, traces)
        eq(sorted(e["rank"] for e in entries), list(range(len(truths))), "%s: ranks" % case)
        for e in entries:
            t = truths[e["rank"]]
            # DDPOptimizer's own first cap (torch.compile builds it with
            # DDP's cap alone), not necessarily DDP's
            check_entry(case, t, e, t["cap"], t["default_first_cap"])
        # What if: other caps (the plan changes, DDP's buckets do not).
        for cap, first in ((4096, 1024), (1 << 20, 100)):
            entries = buckets_json(ctx, traces, "--cap", str(cap), "--first-cap", str(first))
            for e in entries:
                t = truths[e["rank"]]
                check_entry(case, t, e, cap, first, given=True)
        plan = expected_plan(truths[0], truths[0]["cap"], truths[0]["default_first_cap"])
        ctx.note("%s: planned %s" % (case, [b["size"] for b in plan]))


# (run as: kept.py JOB --out DIR, as run_ranks runs a job)
_KEPT_SCRIPT = r'''
import faulthandler, json, os, signal, sys
import torch, torch.nn as nn, torch.distributed as dist
from commdebug import Recorder
faulthandler.register(signal.SIGUSR2, all_threads=True)   # (run_ranks's stacks of a hang)

class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 8)
        self.unused = nn.Linear(8, 8)

    def forward(self, x):
        return self.used(x)

dist.init_process_group("gloo", init_method="env://")
ddp = nn.parallel.DistributedDataParallel(Branchy(), find_unused_parameters=True,
                                          bucket_cap_mb=0.0001)
out = sys.argv[3]
rec = Recorder(os.path.join(out, "rank%d.zst" % dist.get_rank()))
seen = []
events = rec._coll_events

SPY = """
def spy(coll, bw, fake, args, t):
    out = []
    for a in args[:3]:
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, torch.Tensor):
                out.append(x)
    seen.append(out)
    return events(coll, bw, fake, args, t)
"""
# Every collective in these regions is DDP's reducer's (issued from C++).
# The spy's frame passes for the recorder's own, which the recorder skips
# when it looks for the Python code that issued a collective.
g = {"__name__": "commdebug.recorder", "torch": torch, "seen": seen, "events": events}
exec(SPY, g)
rec._coll_events = g["spy"]
for step in range(3):
    with rec(label="step %d" % step):
        ddp(torch.randn(4, 8)).sum().backward()
kept = set(id(x) for ts in rec._held.values() for x in ts)
with open(os.path.join(out, "kept%d.json" % dist.get_rank()), "w") as f:
    json.dump({"seen": [[str(x.dtype) for x in ts] for ts in seen],
               "kept": [[id(x) in kept for x in ts] for ts in seen],
               "held": len(rec._held)}, f)
rec.close()
dist.barrier()
dist.destroy_process_group()
'''


def test_cxx_collective_tensors_kept(ctx):
    """Torch 1.13, 2 ranks: every tensor that a collective issued from C++
    (DDP's reducer: its gradient buckets and, with find_unused_parameters,
    its map of used parameters) handed to the recorder's mode stays
    referenced by the recorder.  Otherwise gloo's worker thread can drop a
    tensor's Python object last, needing the GIL while the main thread,
    holding it, joins that thread in ~ProcessGroupGloo (a hang at exit,
    seen with gdb in this suite's DDP jobs).  Torch 2.x keeps nothing."""
    import torch
    script = os.path.join(ctx.tmp, "kept.py")
    with open(script, "w") as f:
        f.write(_KEPT_SCRIPT)
    out = os.path.join(ctx.tmp, "kept")
    run_ranks("kept", out, 2, script=script)
    for rank in range(2):
        with open(os.path.join(out, "kept%d.json" % rank)) as f:
            got = json.load(f)
        dtypes = [d for ts in got["seen"] for d in ts]
        check("torch.float32" in dtypes, "rank %d: a gradient bucket's all-reduce: %r",
              rank, dtypes)
        if int(torch.__version__.split(".")[0]) >= 2:
            eq(got["held"], 0, "rank %d: tensors kept on torch 2.x" % rank)
            continue
        check("torch.int32" in dtypes, "rank %d: the used-parameter map's all-reduce: %r",
              rank, dtypes)
        eq([k for ks in got["kept"] for k in ks], [True] * len(dtypes),
           "rank %d: each collective's tensors kept (dtypes %r)" % (rank, dtypes))
