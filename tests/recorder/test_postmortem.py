"""Post-mortem of real diverging runs (gloo on CPU): `commdebug ranks`.

The ranks run `workers.py diverge`: the tensor-parallel transformer, where in
step 2 one rank departs from the others at a known all-reduce (skips it,
all-gathers instead, or sends twice the bytes).  The others block there (or,
for a skipped backward all-reduce that gloo silently pairs with the next one,
a step later); once the traces have stopped growing (the recorder flushes
every 0.5 s) the harness SIGKILLs every process, as one would kill a hung job.  Each worker writes, right
before it issues its collective at the diverging position, what it knows: the
position (process group, seq counted by the worker itself), what the others
issue there and what it issues there.

Checked without the analyzer: each trace ends with the collective the worker
says it was blocked in, at that seq, attributed to that module, and the traces
agree with the workers' ledgers up to there.  With an analyzer that has the
`ranks` command (`commdebug ranks --help` exits 0): its --json report against
the workers' truth and a small model of the report (first_divergence,
module_rows).  Without it that part is skipped with a note (a failure with
--require-analyzer).
"""

import json
import os
import shutil
import subprocess
import time

from _util import check, eq, events, run_ranks, start_ranks
import replay_ref

WORLD = 3
STEPS = 2
KIND = {"skip": "type_mismatch", "type": "type_mismatch", "size": "size_mismatch"}
_RANKS_SUPPORTED = {}


# ------------------------------------------------------------------ harness
def run_until_hung(out, world, how, odd, steps, timeout=40, quiet=1.2):
    """Start `world` ranks of `workers.py diverge --how HOW --odd-rank ODD`,
    wait until every rank has written its truth file (it is about to issue its
    collective at the diverging position) and the traces have not grown for
    `quiet` seconds, then SIGKILL whatever still runs.  Returns the exit
    statuses (negative: the signal)."""
    procs = start_ranks("diverge", out, world, "--how", how, "--odd-rank", odd,
                        "--steps", steps, "--max-seconds", timeout + 20)
    truths = [os.path.join(out, "truth%d.json" % r) for r in range(world)]
    traces = [os.path.join(out, "traces", "rank%d.zst" % r) for r in range(world)]
    deadline = time.time() + timeout
    problem = None
    try:
        while problem is None and not all(os.path.exists(t) for t in truths):
            for rank, (p, _) in enumerate(procs):
                if p.poll() is not None and not os.path.exists(truths[rank]):
                    problem = "rank %d exited %s before reaching the divergence" % (
                        rank, p.returncode)
            if time.time() > deadline:
                problem = "not every rank reached the divergence in %d s" % timeout
            time.sleep(0.05)
        sizes, since = None, time.time()
        while problem is None:
            now = time.time()
            cur = [os.path.getsize(t) if os.path.exists(t) else -1 for t in traces]
            if cur != sizes:
                sizes, since = cur, now
            elif now - since >= quiet:
                break
            if now > deadline:
                problem = "the traces kept growing for %d s: %r" % (timeout, cur)
            time.sleep(0.05)
    finally:
        rcs = []
        for p, log in procs:
            if p.poll() is None:
                p.kill()
            rcs.append(p.wait(30))
            log.close()
    if problem:
        logs = []
        for rank in range(world):
            with open(os.path.join(out, "log%d.txt" % rank)) as f:
                logs.append("rank %d (exit %s):\n%s" % (rank, rcs[rank], f.read()[-2000:]))
        raise AssertionError(problem + "\n" + "\n".join(logs))
    return rcs


def load(out, rank):
    with open(os.path.join(out, "truth%d.json" % rank)) as f:
        return json.load(f)


def collectives(evs):
    """The collective op events of a trace with the module CommDebugMode would
    attribute each to (the innermost module, as replay_ref tracks it) and its
    phase: [{"pg", "seq", "collective", "bytes", "dtype", "module", "phase"}]."""
    out = []
    parent_list, name, ac = ["Global"], "Global", False
    for e in evs:
        ev = e["ev"]
        if ev == "region_enter":
            parent_list, name, ac = ["Global"], "Global", False
        elif ev == "fw_pre":
            ac = e["bw"]
            name = e["mod"]
            if not ac:
                parent_list.append(name)
        elif ev == "fw_done":
            ac = e["bw"]
            if not ac:
                parent_list.pop()
                name = parent_list[-1]
        elif ev == "bw_pre":
            ac = False
            name = e["mod"]
        elif ev == "op" and not e.get("dt"):
            pkt = replay_ref.packet(e["name"])
            if pkt is None:
                continue
            out.append({"pg": e.get("pg"), "seq": e.get("seq"), "collective": pkt,
                        "bytes": e.get("bytes"), "dtype": e.get("dtype"), "module": name,
                        "phase": "recompute" if ac else ("backward" if e["bw"] else "forward")})
    return out


def where(d):
    return {k: d[k] for k in ("collective", "module", "phase", "bytes", "dtype")}


LOG_KEYS = ("region", "seq", "collective", "module", "phase", "bytes", "dtype")


def log_of(truth):
    """The worker's log as dicts: every collective it issued (the last one is
    the one it was about to call when it wrote the truth file)."""
    return [dict(zip(LOG_KEYS, e), pg=truth["pg"]) for e in truth["log"]]


# CommDebugMode packets whose payload may differ between ranks (only the
# dtype is compared).
UNEVEN = {"c10d.alltoall_", "c10d.alltoall_base_", "c10d_functional.all_to_all_single",
          "c10d.gather_", "c10d.scatter_"}


def first_divergence(logs):
    """A model of what `ranks` reports first, from the workers' own logs:
    the first seq (one group here) where the ranks did not all issue the same
    collective with the same payload, the majority's against the odd ranks'.
    Ties are not modelled (the tests use 3 or 4 ranks, one odd)."""
    world = len(logs)
    by_seq = [{e["seq"]: e for e in log} for log in logs]
    last = max(max(b) for b in by_seq if b)
    for seq in range(1, last + 1):
        at = {r: by_seq[r].get(seq) for r in range(world)}
        reached = [r for r in range(world) if at[r] is not None]
        groups = {}
        for r in reached:
            e = at[r]
            groups.setdefault(e["collective"], []).append(r)
        kind = None
        if len(groups) > 1:
            kind = "type_mismatch"
            key = lambda e: e["collective"]
        else:
            pkt = next(iter(groups))
            for k, name in (("bytes", "size_mismatch"), ("dtype", "dtype_mismatch")):
                if k == "bytes" and pkt in UNEVEN:
                    continue
                if len({at[r][k] for r in reached}) > 1:
                    kind = name
                    key = lambda e, k=k: e[k]
                    break
        if kind is not None:
            split = {}
            for r in reached:
                split.setdefault(key(at[r]), []).append(r)
            sizes = sorted((len(v) for v in split.values()), reverse=True)
            check(sizes[0] > sizes[1], "model: a tie at seq %d: %r", seq, split)
            ranks = max(split.values(), key=len)
        elif len(reached) < world:
            kind, ranks = "hang", reached
        else:
            continue
        m = at[ranks[0]]
        odd = [r for r in range(world) if r not in ranks]
        return {"kind": kind, "pg": m["pg"], "seq": seq, "collective": m["collective"],
                "module": m["module"], "phase": m["phase"], "ranks": ranks, "odd_ranks": odd,
                "detail": [dict(where(at[r]), rank=r) if at[r] else {"rank": r} for r in odd]}
    return None


def check_traces(out, world, how, odd):
    """Recorder-side checks; returns (truths, per-rank trace events, per-rank
    collectives)."""
    truths = [load(out, r) for r in range(world)]
    pos = {k: truths[0][k] for k in ("pg", "seq", "collective", "module", "phase", "bytes",
                                     "dtype")}
    evs_all, colls_all = [], []
    for r, t in enumerate(truths):
        eq({k: t[k] for k in pos}, pos, "rank %d: the diverging position" % r)
        eq((t["rank"], t["world_size"], t["how"], t["odd_rank"]), (r, world, how, odd),
           "rank %d truth header" % r)
        evs = events(os.path.join(out, "traces", "rank%d.zst" % r), allow_cut=True)
        eq((evs[0]["ev"], evs[0]["rank"], evs[0]["world_size"]), ("meta", r, world),
           "rank %d meta" % r)
        colls = collectives(evs)
        eq([c["seq"] for c in colls], list(range(1, len(colls) + 1)),
           "rank %d: seq numbers 1..N" % r)
        # The trace holds every collective the worker issued, up to the one it
        # was blocked in: the recorder flushed it although it was killed.
        log = log_of(t)
        eq([dict(where(c), seq=c["seq"], pg=c["pg"]) for c in colls],
           [dict(where(e), seq=e["seq"], pg=e["pg"]) for e in log],
           "rank %d: trace vs the worker's log" % r)
        eq([[c["module"], c["phase"], c["collective"]] for c in colls],
           [call[1:] for call in t["calls"]], "rank %d: trace vs the worker's ledger" % r)
        eq(where(colls[pos["seq"] - 1]), where(t["issued"]),
           "rank %d: what the trace has at seq %d" % (r, pos["seq"]))
        open_regions = sorted({e["region"] for e in evs if e["ev"] == "region_enter"}
                              - {e["region"] for e in evs if e["ev"] == "region_exit"})
        eq(open_regions, [log[-1]["region"]],
           "rank %d: open region (the rank hung in it)" % r)
        if r != odd:
            eq(where(t["issued"]), where(pos), "rank %d issued what the plan says" % r)
        evs_all.append(evs)
        colls_all.append(colls)
    issued = truths[odd]["issued"]
    if how in ("skip", "silent"):
        check(issued["module"] != pos["module"], "the skipping rank issued at seq %d in %s"
              % (pos["seq"], issued["module"]))
    if how == "skip":
        # the skipped all-reduce's seq went to the next collective: the all-gather
        # of this rank's slice of the logits
        eq(issued, {"collective": "c10d.allgather_", "module": "Transformer.output",
                    "phase": "forward", "bytes": 4 * 8 * (96 // world) * 4,
                    "dtype": "torch.float32"}, "skipping rank's next")
    elif how == "type":
        eq(where(issued), dict(where(pos), collective="c10d.allgather_"), "odd rank issued")
    elif how == "size":
        eq(where(issued), dict(where(pos), bytes=2 * pos["bytes"]), "odd rank issued")
    elif how == "silent":
        # gloo matched the skipping rank's next all-reduces with the others'
        eq((issued["collective"], issued["bytes"]), (pos["collective"], pos["bytes"]),
           "skipping rank's next")
    ref = first_divergence([log_of(t) for t in truths])
    check(ref is not None, "no divergence in the workers' logs")
    if how == "silent":
        # Nothing differs at the skipped seq but the module; the run hangs
        # in the next step, where the odd rank all-gathers (Transformer.output)
        # and the others still all-reduce.
        eq((ref["kind"], ref["odd_ranks"], ref["detail"][0]["collective"],
            ref["detail"][0]["module"], ref["detail"][0]["phase"]),
           ("type_mismatch", [odd], "c10d.allgather_", "Transformer.output", "forward"),
           "model's first divergence")
        check(ref["seq"] > pos["seq"] and log_of(truths[odd])[-1]["region"] == 3,
              "the silent skip should hang in step 3: %r", ref)
    else:
        eq(ref, {"kind": KIND[how], "pg": pos["pg"], "seq": pos["seq"],
                 "collective": pos["collective"], "module": pos["module"],
                 "phase": pos["phase"], "ranks": [r for r in range(world) if r != odd],
                 "odd_ranks": [odd], "detail": [dict(where(issued), rank=odd)]},
           "model's first divergence")
    return truths, evs_all, colls_all


# ------------------------------------------------------------------ analyzer
def ranks_supported(ctx):
    if ctx.analyzer is None:
        ctx.note("analyzer checks skipped (no binary)")
        return False
    path = ctx.analyzer.path
    if path not in _RANKS_SUPPORTED:
        r = subprocess.run([path, "ranks", "--help"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        _RANKS_SUPPORTED[path] = r.returncode == 0
    if not _RANKS_SUPPORTED[path]:
        check(not getattr(ctx, "require_analyzer", False),
              "`%s ranks --help` fails: no ranks command (--require-analyzer)", path)
        ctx.note("`commdebug ranks` checks skipped (`%s ranks --help` fails: not implemented "
                 "in this binary)" % path)
    return _RANKS_SUPPORTED[path]


def ranks_json(ctx, *args, rc=(0,)):
    code, stdout, err = ctx.analyzer.run("ranks", "--json", *args, check_rc=rc)
    try:
        doc = json.loads(stdout)
    except ValueError as e:
        raise AssertionError("ranks --json printed no JSON document (%s): %r" % (e, stdout[:500]))
    return doc, code, err


def check_trace_list(doc, out, world, evs_all, colls_all, cut=None):
    eq(doc["world_size"], world, "world_size")
    eq([t["rank"] for t in doc["traces"]], list(range(world)), "traces, sorted by rank")
    for r, t in enumerate(doc["traces"]):
        eq(os.path.basename(t["path"]), "rank%d.zst" % r, "trace path of rank %d" % r)
        eq(t["events"], len(evs_all[r]), "events of rank %d" % r)
        eq(t["regions"], len([e for e in evs_all[r] if e["ev"] == "region_enter"]),
           "regions of rank %d" % r)
        eq(t["collectives"], len(colls_all[r]), "collectives of rank %d" % r)
        if cut is not None:
            eq(t["cut"], cut, "cut of rank %d" % r)
    eq(doc["missing_ranks"], [], "missing_ranks")
    eq(doc["duplicate_ranks"], [], "duplicate_ranks")


def module_rows(truths, evs_all):
    """(module, direction, packet) -> {rank: count} from the workers' logs,
    summed over the regions every rank finished; only where ranks differ."""
    done = None
    for evs in evs_all:
        d = {e["region"] for e in evs if e["ev"] == "region_exit"}
        done = d if done is None else done & d
    per_rank = []
    for t in truths:
        c = {}
        for e in log_of(t):
            if e["region"] in done:
                k = (e["module"], e["phase"], e["collective"])
                c[k] = c.get(k, 0) + 1
        per_rank.append(c)
    rows = {}
    for k in set().union(*per_rank):
        if len({c.get(k, 0) for c in per_rank}) > 1:
            rows[k] = {r: c[k] for r, c in enumerate(per_rank) if c.get(k)}
    return rows, per_rank


def check_report(ctx, out, world, how, odd, truths, evs_all, colls_all):
    doc, rc, err = ranks_json(ctx, os.path.join(out, "traces"), rc=(4,))
    check_trace_list(doc, out, world, evs_all, colls_all)
    eq(doc["agree"], False, "agree")
    check(doc["divergences"], "no divergence reported")
    ref = first_divergence([log_of(t) for t in truths])
    d = doc["divergences"][0]
    eq({k: d.get(k) for k in ("kind", "pg", "seq", "collective", "module", "phase", "ranks",
                              "odd_ranks")},
       {k: ref[k] for k in ("kind", "pg", "seq", "collective", "module", "phase", "ranks",
                            "odd_ranks")}, "the first divergence")
    eq([{k: got.get(k) for k in want} for got, want in zip(d["detail"], ref["detail"])]
       + d["detail"][len(ref["detail"]):], ref["detail"], "what the odd ranks issued there")
    # Every rank blocked at or soon after that seq: nothing disagrees earlier.
    for later in doc["divergences"][1:]:
        check(later["seq"] >= d["seq"] or later["pg"] != d["pg"],
              "divergence %r is earlier than the first one", later)

    # lagging: each entry as the trace of that rank ends; the odd ranks among them.
    lag_ranks = [lag["rank"] for lag in doc["lagging"]]
    for r in ref["odd_ranks"]:
        check(r in lag_ranks, "odd rank %d not in lagging: %r", r, lag_ranks)
    for lag in doc["lagging"]:
        r = lag["rank"]
        check(0 <= r < world, "lagging rank %r", r)
        last = log_of(truths[r])[-1]
        lc = lag["last_collective"]
        check(lc is not None, "rank %d: no last_collective although it issued %d", r,
              last["seq"])
        eq({k: lc.get(k) for k in ("pg", "seq", "collective", "module", "phase")},
           {k: last[k] for k in ("pg", "seq", "collective", "module", "phase")},
           "lagging rank %d: last collective" % r)
        stack = lag["stack"]
        check(stack and stack[0]["module"] == "Transformer",
              "rank %d: open modules should start at Transformer: %r", r, stack)
        eq((stack[-1]["module"], stack[-1]["phase"]), (last["module"], last["phase"]),
           "rank %d: innermost open module" % r)

    # modules: where the workers' own counts differ over the regions every
    # rank finished, for the modules that issue collectives themselves
    # (ancestors may be listed too).
    rows, per_rank = module_rows(truths, evs_all)
    listed = {}
    for m in doc["modules"]:
        check(len(set(m["counts"].get(str(r), 0) for r in range(world))) > 1,
              "modules lists an entry where the ranks agree: %r", m)
        listed[(m["module"], m["direction"], m["collective"])] = {
            int(k): v for k, v in m["counts"].items() if v}
    for k in sorted(set().union(*per_rank)):
        if k in rows:
            eq(listed.get(k), rows[k], "modules entry for %r" % (k,))
        else:
            check(k not in listed, "modules lists %r where the ranks agree", k)
    return doc, rc, rows


def diverge_case(ctx, how, odd, world=WORLD, steps=STEPS):
    out = os.path.join(ctx.tmp, "%s-%d" % (how, world))
    t0 = time.time()
    rcs = run_until_hung(out, world, how, odd, steps)
    truths, evs_all, colls_all = check_traces(out, world, how, odd)
    ctx.note("%s, %d ranks: diverged at seq %d in %s (%s); exits %r; %.1f s"
             % (how, world, truths[0]["seq"], truths[0]["module"], truths[0]["phase"], rcs,
                time.time() - t0))
    if ranks_supported(ctx):
        return check_report(ctx, out, world, how, odd, truths, evs_all, colls_all)
    return None


# ------------------------------------------------------------------ tests
def test_agree_missing_duplicate(ctx):
    """A run without divergence (3 ranks, 2 steps, ends normally): `ranks`
    agrees (exit 0), also given the files one by one and with --jobs=1; without
    rank 1's trace it reports rank 1 missing, with rank 1's trace twice a
    duplicate (exit 4 both)."""
    out = os.path.join(ctx.tmp, "none")
    run_ranks("diverge", out, WORLD, "--how", "none", "--steps", str(STEPS))
    evs_all, colls_all = [], []
    for r in range(WORLD):
        t = load(out, r)
        check(t.get("done"), "rank %d did not finish" % r)
        evs = events(os.path.join(out, "traces", "rank%d.zst" % r))
        colls = collectives(evs)
        eq(len(colls), t["collectives"], "rank %d collectives" % r)
        eq([[c["module"], c["phase"], c["collective"]] for c in colls],
           [call[1:] for call in t["calls"]], "rank %d: trace vs ledger" % r)
        eq([c["seq"] for c in colls], list(range(1, len(colls) + 1)), "rank %d seq" % r)
        evs_all.append(evs)
        colls_all.append(colls)
    if not ranks_supported(ctx):
        return
    tdir = os.path.join(out, "traces")
    doc, _, _ = ranks_json(ctx, tdir, rc=(0,))
    check_trace_list(doc, out, WORLD, evs_all, colls_all, cut=False)
    eq((doc["agree"], doc["divergences"], doc["lagging"], doc["modules"]),
       (True, [], [], []), "agree, divergences, lagging, modules")
    files = [os.path.join(out, "traces", "rank%d.zst" % r) for r in range(WORLD)]
    doc2, _, _ = ranks_json(ctx, *reversed(files), rc=(0,))
    eq(doc2, doc, "files given one by one (in another order)")
    _, stdout1, _ = ctx.analyzer.run("ranks", "--json", "--jobs=1", tdir)
    _, stdout4, _ = ctx.analyzer.run("ranks", "--json", "--jobs=4", tdir)
    eq(stdout1, stdout4, "ranks --json --jobs=1 vs --jobs=4")
    _, table, _ = ctx.analyzer.run("ranks", tdir, check_rc=(0,))
    check(table.strip(), "ranks printed nothing")

    missing = os.path.join(ctx.tmp, "missing")
    os.makedirs(missing)
    for r in (0, 2):
        shutil.copy(files[r], missing)
    doc, _, _ = ranks_json(ctx, missing, rc=(4,))
    eq((doc["world_size"], [t["rank"] for t in doc["traces"]], doc["missing_ranks"],
        doc["duplicate_ranks"], doc["agree"]),
       (WORLD, [0, 2], [1], [], False), "rank 1 missing")

    dup = os.path.join(ctx.tmp, "dup")
    os.makedirs(dup)
    for r in range(WORLD):
        shutil.copy(files[r], dup)
    shutil.copy(files[1], os.path.join(dup, "again1.zst"))
    doc, _, _ = ranks_json(ctx, dup, rc=(4,))
    eq(doc["agree"], False, "agree with a duplicate")
    eq(doc["missing_ranks"], [], "missing_ranks with a duplicate")
    eq([(d["rank"], sorted(os.path.basename(p) for p in d["paths"]))
        for d in doc["duplicate_ranks"]],
       [(1, ["again1.zst", "rank1.zst"])], "duplicate_ranks")


def test_skip(ctx):
    """Rank 1 skips the last forward all-reduce of step 2 (layers.1.mlp.fc2)
    and goes on to the logits' all-gather, which takes that seq: a
    type mismatch at the skipped all-reduce's seq, in fc2, rank 1 odd."""
    diverge_case(ctx, "skip", 1)


def test_type(ctx):
    """Rank 1 all-gathers where the others all-reduce (layers.0.mlp.fc1's
    input gradient, in backward)."""
    diverge_case(ctx, "type", 1)


def test_size(ctx):
    """Rank 1 all-reduces twice the bytes (layers.0.attn.proj, forward)."""
    diverge_case(ctx, "size", 1)


def test_silent_skip(ctx):
    """Rank 1 skips a backward all-reduce of step 2 (layers.1.attn.qkv's
    input gradient); gloo pairs its next all-reduces with the others' (same
    size), so nothing fails until step 3, where rank 1 all-gathers the logits
    while the others are still at their last forward all-reduce.  The first
    divergence is there; the per-module counts of the regions every rank
    finished point back at layers.1.attn.qkv."""
    res = diverge_case(ctx, "silent", 1, steps=3)
    if res is not None:
        _, _, rows = res
        eq(rows.get(("Transformer.layers.1.attn.qkv", "backward", "c10d.allreduce_")),
           {0: 2, 1: 1, 2: 2}, "model: the skipped all-reduce in the module counts")


def test_skip_4_ranks(ctx):
    """The skip again with 4 ranks, rank 2 the odd one."""
    diverge_case(ctx, "skip", 2, world=4)
