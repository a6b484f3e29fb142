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

The test_job_* tests run faulty_jobs.py: 4-rank gloo jobs that fail the ways
real jobs do (a skipped all-reduce, another collective, a size mismatch that
gloo aborts, two blocks run in swapped order, a straggler past the timeout, a
rank killed or aborted mid-step, two faults at once), each rank writing a ledger
of what it did before doing it.  What `commdebug ranks` says (the culprit rank,
its module, its step, the kind, the sequence number, the times) is checked
against those ledgers.
"""

import json
import os
import shutil
import subprocess
import time

from _util import Skip, check, eq, events, run_ranks, start_ranks
import replay_ref

try:
    import faulty_jobs
except ImportError:  # the job script is not on this branch
    faulty_jobs = None

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


def finding_where(f, side):
    """The record of side ("others" or "odd") in a finding, as where() keys."""
    for m in f["modules"]:
        if m["side"] == side:
            return m
    return None


def check_report(ctx, out, world, how, odd, truths, evs_all, colls_all):
    doc, rc, err = ranks_json(ctx, os.path.join(out, "traces"), rc=(4,))
    check_trace_list(doc, out, world, evs_all, colls_all)
    eq(doc["agree"], False, "agree")
    check(doc["findings"], "no finding reported")
    d = doc["findings"][0]
    pos = {k: truths[0][k] for k in ("pg", "seq", "collective", "module", "phase")}
    if how == "silent":
        # The skipping rank's next all-reduces are the others' next ones
        # shifted by one: a skip at the skipped seq, in the skipped module.
        eq((d["kind"], d["pg"], d["seq"], d["ranks"], d["count"]),
           ("skip", pos["pg"], pos["seq"], [odd], 1), "the first finding")
        mine = finding_where(d, "others")
        eq({k: mine[k] for k in ("collective", "module", "phase")},
           {k: pos[k] for k in ("collective", "module", "phase")}, "what was skipped")
    else:
        ref = first_divergence([log_of(t) for t in truths])
        want_kind = ref["kind"]
        if how == "skip":
            # Every rank stopped at the skipped seq (killed while hung there),
            # so nothing follows to realign against; the skipping rank's own
            # step 1 issued, at this place, the skipped all-reduce and then
            # what it issued instead: a skip of 1, told by its own history.
            want_kind = "skip"
            eq((d.get("count"), d.get("decided_by", {}).get("basis"),
                d.get("decided_by", {}).get("rank"), d.get("decided_by", {}).get("label")),
               (1, "own_steps_history", odd, "step 1"), "the skip and what told it")
        eq({k: d.get(k) for k in ("kind", "pg", "seq", "ranks", "others")},
           {"kind": want_kind, "pg": ref["pg"], "seq": ref["seq"], "ranks": ref["odd_ranks"],
            "others": ref["ranks"]}, "the first finding")
        theirs = finding_where(d, "others")
        eq({k: theirs[k] for k in ("collective", "module", "phase")},
           {k: ref[k] for k in ("collective", "module", "phase")}, "what the others issued")
        for want in ref["detail"]:
            got = [m for m in d["modules"] if m["side"] == "odd" and m["rank"] == want["rank"]]
            check(got, "no record of odd rank %d in %r", want["rank"], d["modules"])
            eq({k: got[0][k] for k in want if k != "rank"},
               {k: v for k, v in want.items() if k != "rank"},
               "what odd rank %d issued there" % want["rank"])
    check("rank %d" % odd in d["text"] and pos["module"] in d["text"],
          "the first finding's text does not name rank %d and %s: %r", odd, pos["module"],
          d["text"])
    # Nothing disagrees earlier in that group.
    for later in doc["findings"][1:]:
        check(later["kind"] in ("empty_trace", "died") or later["seq"] >= d["seq"]
              or later["pg"] != d["pg"], "finding %r is earlier than the first one", later)

    # states: each odd rank as its trace ends.
    for f in doc["findings"]:
        for st in f.get("states", []):
            r = st["rank"]
            check(0 <= r < world, "state of rank %r", r)
            last = log_of(truths[r])[-1]
            lc = st["last_collective"]
            check(lc is not None, "rank %d: no last_collective although it issued %d", r,
                  last["seq"])
            eq({k: lc.get(k) for k in ("pg", "seq", "collective", "module", "phase")},
               {k: last[k] for k in ("pg", "seq", "collective", "module", "phase")},
               "rank %d: last collective" % r)
            eq((lc["rank"], lc["region"]), (r, last["region"]), "rank %d: last collective's "
               "rank and region" % r)
            stack = st["stack"]
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
        eq(sorted(r for g in m["groups"] for r in g["ranks"]), list(range(world)),
           "every rank in one group of %r" % m["module"])
        for g in m["groups"]:
            for r in g["ranks"]:
                eq(m["counts"][str(r)], g["count"], "group count of rank %d" % r)
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
    eq((doc["agree"], doc["findings"], doc["modules"]),
       (True, [], []), "agree, findings, modules")
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
    finding is the skip itself (its later collectives are the others' shifted
    by one), in layers.1.attn.qkv; the per-module counts of the regions every
    rank finished point at it too."""
    res = diverge_case(ctx, "silent", 1, steps=3)
    if res is not None:
        _, _, rows = res
        eq(rows.get(("Transformer.layers.1.attn.qkv", "backward", "c10d.allreduce_")),
           {0: 2, 1: 1, 2: 2}, "model: the skipped all-reduce in the module counts")


def test_skip_4_ranks(ctx):
    """The skip again with 4 ranks, rank 2 the odd one."""
    diverge_case(ctx, "skip", 2, world=4)


# ------------------------------------------------------------------ real failing jobs
# What `ranks` may call each scenario's culprit (the first finding that names it).
JOB_KINDS = {
    "skip": {"skip", "desync", "type_mismatch", "size_mismatch", "hang"},
    "coll": {"type_mismatch"},
    "size": {"size_mismatch", "hang"},
    "swap": {"desync"},
    "straggler": {"straggler"},
    "kill": {"hang"},
    "abort": {"hang"},
    "pair-size": {"size_mismatch"},
    "mesh-size": {"size_mismatch"},
    "mesh-skip": {"skip"},
    "mesh-coll": {"type_mismatch"},
    "mesh-straggler": {"straggler"},
    "mesh-kill": {"hang"},
}
# Where a rank's process can end: traces whose meta says "ends" tell a kill
# ("killed", or "cut" mid-line) from an abrupt end of an older recorder.
KILLED_ENDS = ("abrupt", "cut", "killed")


def job_report(ctx, name):
    """Run scenario NAME of faulty_jobs.py; returns (job, culprits, report
    document, text report)."""
    if faulty_jobs is None:
        raise Skip("tests/recorder/faulty_jobs.py is not here")
    out = os.path.join(ctx.tmp, "job-" + name)
    t0 = time.time()
    job = faulty_jobs.run_scenario(out, name)
    culprits = faulty_jobs.SCENARIOS[name]["culprits"]
    ctx.note("job %s: exits %r; %.1f s" % (name, job.rcs, time.time() - t0))
    for r in range(job.world):
        check(job.ledgers[r] and job.ledgers[r][0]["ev"] == "start",
              "rank %d wrote no ledger:\n%s", r, job.log(r)[-2000:])
    for r, (module, step) in culprits.items():
        check(any(f["step"] == step for f in job.faults(r)),
              "rank %d logged no fault in step %d: %r", r, step, job.faults(r))
    if not ranks_supported(ctx):
        return job, culprits, None, None
    doc, code, _ = ranks_json(ctx, job.traces, rc=(4,))
    _, text, _ = ctx.analyzer.run("ranks", job.traces, check_rc=(4,))
    eq(code, 4, "exit status of ranks")
    eq(doc["agree"], False, "agree")
    return job, culprits, doc, text


def culprit_seq(job, rank, module, step):
    """The position of the culprit's fault: the seq the other ranks of its
    own groups (its ledger's) gave the collective in MODULE's forward in
    STEP, and their process group."""
    mine = set(job.ledgers[rank][0].get("groups", {}))
    for r in range(job.world):
        if r == rank:
            continue
        for c in job.colls(r):
            if c["module"] == module and c["step"] == step and c["phase"] == "forward" \
                    and (not mine or c["pg"] in mine):
                return c["pg"], c["seq"], r
    return None, None, None


def names_culprit(f, rank, module, step):
    """Does finding f name rank, module and step (its label)?"""
    text = f["text"]
    ranks_named = rank in f["ranks"]
    return (ranks_named and ("rank %d" % rank in text or "ranks " in text)
            and module in text and '"step %d"' % step in text)


def check_job(ctx, name):
    job, culprits, doc, text = job_report(ctx, name)
    if doc is None:
        return
    findings = doc["findings"]
    check(findings, "no finding for %s", name)
    first = findings[0]
    rank, (module, step) = next(iter(culprits.items()))
    # the first finding names the culprit, its module and its step
    check(names_culprit(first, rank, module, step),
          "%s: the first finding does not name rank %d, %s, step %d: %r", name, rank, module,
          step, first["text"])
    check(first["kind"] in JOB_KINDS[name], "%s: first finding of kind %r, not one of %r",
          name, first["kind"], sorted(JOB_KINDS[name]))
    eq(first["step"]["label"], "step %d" % step, "%s: step of the first finding" % name)
    # at the position the others' ledgers give that collective
    pg, seq, other = culprit_seq(job, rank, module, step)
    check(seq is not None, "%s: no rank logged the collective of %s in step %d", name,
          module, step)
    eq((first["pg"], first["seq"]), (pg, seq), "%s: position of the first finding" % name)
    theirs = finding_where(first, "others")
    if theirs is not None and first["kind"] != "straggler":
        eq((theirs["module"], theirs["phase"], theirs["label"]), (module, "forward",
                                                                  "step %d" % step),
           "%s: what the others issued there" % name)
    # the text report says the same first
    lines = [l for l in text.splitlines() if l.startswith("1. ")]
    eq(lines, ["1. " + first["text"]], "%s: the text report's first finding" % name)
    return job, doc, first, rank


def test_job_skip(ctx):
    """Rank 1 skips Net.blocks.1's forward all-reduce in step 2."""
    check_job(ctx, "skip")


def test_job_coll(ctx):
    """Rank 1 all-gathers where the others all-reduce (Net.blocks.1, step 2)."""
    res = check_job(ctx, "coll")
    if res:
        job, doc, first, rank = res
        mine = [m for m in first["modules"] if m["side"] == "odd" and m["rank"] == rank]
        check(mine, "no record of rank %d in %r", rank, first["modules"])
        ledger = [c for c in job.colls(rank) if c["seq"] == first["seq"] and c["pg"] == first["pg"]]
        eq([(m["collective"], m["module"], m["bytes"]) for m in mine],
           [(c["collective"], c["module"], c["bytes"]) for c in ledger],
           "what rank %d issued, against its ledger" % rank)


def test_job_size(ctx):
    """Rank 1 all-reduces twice the elements; gloo aborts a process."""
    res = check_job(ctx, "size")
    if res:
        job, doc, first, rank = res
        if first["kind"] == "size_mismatch":
            mine = [m for m in first["modules"] if m["side"] == "odd"]
            led = [c for c in job.colls(rank) if c["seq"] == first["seq"]]
            eq([m["bytes"] for m in mine], [c["bytes"] for c in led], "the odd size")


def test_job_swap(ctx):
    """Rank 1 runs Net.blocks.1 and Net.blocks.2 in swapped order in step 2:
    the job ends "successfully" (exit 0 everywhere, different parameter sums);
    ranks finds the desync, and only one finding for the one fault."""
    res = check_job(ctx, "swap")
    if res:
        job, doc, first, rank = res
        eq(job.rcs, [0] * job.world, "the swapped job's exit statuses")
        mine = [m for m in first["modules"] if m["side"] == "odd"]
        eq([m["module"] for m in mine], ["Net.blocks.2"], "what rank 1 issued from")
        eq([f["kind"] for f in doc["findings"]], ["desync"], "one finding for one swap")


def test_job_straggler(ctx):
    """Rank 3 sleeps 8 s inside Net.blocks.1 in step 3; the others time out
    after 4 s.  The delay reported is the one in the ledgers."""
    res = check_job(ctx, "straggler")
    if res:
        job, doc, first, rank = res
        mine = [c["t_ns"] for c in job.colls(rank) if c["seq"] == first["seq"]
                and c["pg"] == first["pg"]]
        others = [c["t_ns"] for r in range(job.world) if r != rank for c in job.colls(r)
                  if c["seq"] == first["seq"] and c["pg"] == first["pg"]]
        check(mine and others, "ledgers lack seq %d", first["seq"])
        want = (mine[0] - max(others)) / 1e9
        check(abs(first["times"]["delay_s"] - want) < 0.5,
              "straggler delay %.3f s, the ledgers say %.3f s", first["times"]["delay_s"], want)
        eq(first["times"]["last_rank"], rank, "who arrived last")
        check(want > 5, "the straggler was only %.1f s late", want)


def test_job_kill(ctx):
    """Rank 2 SIGKILLs itself inside Net.blocks.1 (step 2) before its
    all-reduce: it never reached it; its trace ended abruptly."""
    res = check_job(ctx, "kill")
    if res:
        job, doc, first, rank = res
        st = [s for s in first["states"] if s["rank"] == rank]
        check(st and st[0]["end"] in KILLED_ENDS, "rank %d's end: %r", rank, st)
        eq(st[0]["label"], "step 2", "region the killed rank stopped in")
        last = job.colls(rank)[-1]
        eq((st[0]["last_collective"]["seq"], st[0]["last_collective"]["module"]),
           (last["seq"], last["module"]), "the killed rank's last collective, from its ledger")


def test_job_abort(ctx):
    """Rank 2 calls os.abort() inside Net.blocks.1 (step 2)."""
    check_job(ctx, "abort")


def test_job_two_faults(ctx):
    """Two faults at once (pairs as process groups): rank 1 all-reduces twice
    the elements in Net.blocks.1, rank 3 is killed in Net.blocks.2, both in
    step 2: both are named, each with its module and step."""
    job, culprits, doc, text = job_report(ctx, "two")
    if doc is None:
        return
    for rank, (module, step) in culprits.items():
        check(any(names_culprit(f, rank, module, step) for f in doc["findings"]),
              "two faults: no finding names rank %d, %s, step %d: %r", rank, module, step,
              [f["text"] for f in doc["findings"]])
    first = doc["findings"][0]
    check(any(names_culprit(first, r, m, s) for r, (m, s) in culprits.items()),
          "two faults: the first finding names neither culprit: %r", first["text"])


# ------------------------------------------------------------------ pairs and meshes
def has_device_mesh():
    try:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        return True
    except ImportError:
        return False


def check_tie(ctx, name):
    """A size mismatch in a two-rank group (a tie at the position): the
    culprit (the ledgers' faulty rank) is the one blamed, and the finding
    says what decided it: its own earlier step or the sibling group (the
    other pair ran the same modules)."""
    res = check_job(ctx, name)
    if not res:
        return
    job, doc, first, rank = res
    eq(first["ranks"], [rank], "%s: the rank blamed" % name)
    peer = rank ^ 1
    eq(first["others"], [peer], "%s: the other side" % name)
    basis = first.get("decided_by", {}).get("basis")
    check(basis in ("own_steps", "sibling_group"), "%s: the tie's basis: %r", name,
          first.get("decided_by"))
    if basis == "own_steps":
        # the peer's own step 1 issued there what it issues in step 2 (its ledger)
        eq(first["decided_by"]["rank"], peer, "%s: whose steps decided" % name)
        eq(first["decided_by"]["label"], "step 1", "%s: the step that decided" % name)
        pg, seq = first["pg"], first["seq"]
        led = {(c["module"], c["phase"], c["bytes"]) for c in job.colls(peer)
               if c["step"] == 1 and c["pg"] == pg}
        here = [c for c in job.colls(peer) if c["pg"] == pg and c["seq"] == seq]
        check(here and (here[0]["module"], here[0]["phase"], here[0]["bytes"]) in led,
              "%s: the peer's step 1 does not hold what it issued at seq %d", name, seq)
    mine = [m for m in first["modules"] if m["side"] == "odd"]
    led = [c for c in job.colls(rank) if c["seq"] == first["seq"] and c["pg"] == first["pg"]]
    eq([m["bytes"] for m in mine], [c["bytes"] for c in led], "%s: the odd size" % name)
    check("a tie, decided by" in first["text"], "%s: the text does not say what decided "
          "the tie: %r", name, first["text"])


def test_job_pair_size(ctx):
    """Pairs as process groups; rank 3 (the higher of pair {2,3}) all-reduces
    twice the elements in Net.blocks.1, step 2: rank 3 is blamed, not rank 2,
    and the finding says why."""
    check_tie(ctx, "pair-size")


def mesh_job(ctx, name):
    if not has_device_mesh():
        raise Skip("no torch.distributed.device_mesh in this torch")
    return check_job(ctx, name)


def test_job_mesh_size(ctx):
    """2-D mesh (dp 2 x tp 2): rank 3 sends twice the elements over its tp
    pair in Net.blocks.1, step 2: rank 3 blamed, the tie decided."""
    if not has_device_mesh():
        raise Skip("no torch.distributed.device_mesh in this torch")
    check_tie(ctx, "mesh-size")


def test_job_mesh_skip(ctx):
    """2-D mesh: rank 3 skips its tp all-reduce of Net.blocks.1 in step 2: a
    skip, blamed on rank 3 (not its peer)."""
    res = mesh_job(ctx, "mesh-skip")
    if res:
        job, doc, first, rank = res
        eq((first["ranks"], first["count"]), ([rank], 1), "mesh-skip: who skipped how many")


def test_job_mesh_coll(ctx):
    """2-D mesh: rank 3 all-gathers over its tp pair where rank 2 all-reduces."""
    res = mesh_job(ctx, "mesh-coll")
    if res:
        job, doc, first, rank = res
        eq(first["ranks"], [rank], "mesh-coll: the rank blamed")


def test_job_mesh_straggler(ctx):
    """2-D mesh: rank 3 sleeps 8 s in Net.blocks.1, step 3."""
    res = mesh_job(ctx, "mesh-straggler")
    if res:
        job, doc, first, rank = res
        eq(first["times"]["last_rank"], rank, "mesh-straggler: who arrived last")


def test_job_mesh_kill(ctx):
    """2-D mesh: rank 3 SIGKILLs itself in Net.blocks.1, step 2: rank 3 hangs
    there, and (with a recorder that writes end events) died, cut off."""
    res = mesh_job(ctx, "mesh-kill")
    if res:
        job, doc, first, rank = res
        st = [t for t in doc["traces"] if t["rank"] == rank][0]
        check(st["end"] in KILLED_ENDS, "mesh-kill: rank %d's end %r", rank, st["end"])
        if st.get("ends"):
            died = [f for f in doc["findings"] if f["kind"] == "died" and rank in f["ranks"]]
            check(died and died[0]["end"] in ("killed", "cut"),
                  "mesh-kill: no died finding for rank %d: %r", rank,
                  [f["text"] for f in doc["findings"]])


# ------------------------------------------------------------------ FSDP2
# faulty_jobs.py --fsdp: every block fully_shard-ed (FSDP2).  The collectives
# are FSDP's own (per block an all-gather in forward and in backward, a
# reduce-scatter in backward), issued from its hooks, so the ledgers cannot list
# them; they hold the fault (kind, module, step, time), logged right before it
# happens, and per step the blocks the rank ran.  Where the fault is is taken
# from the ledgers; which collective that is (pg, seq) from the peers' traces
# (the first collective of the module, or one inside it, in forward in that step),
# independently of the analyzer.
FSDP_FAULT = {"fsdp-skip": "skip", "fsdp-size": "size", "fsdp-straggler": "sleep",
              "fsdp-kill": "kill", "fsdp-tp-skip": "skip"}


def has_fsdp2():
    """FSDP2 (fully_shard) and init_device_mesh, or why not."""
    import torch
    try:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    except ImportError:
        return "no torch.distributed.device_mesh in torch %s" % torch.__version__
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # noqa: F401
        except ImportError:
            return "no FSDP2 (torch.distributed.fsdp.fully_shard) in torch %s" % (
                torch.__version__)
    return None


def colls_by_step(job, rank):
    """{region label: collectives()} of RANK's trace."""
    evs = events(os.path.join(job.traces, "rank%d.zst" % rank), allow_cut=True)
    per, cur = {}, None
    for e in evs:
        if e["ev"] == "region_enter":
            cur = e["label"]
            per[cur] = []
        if cur is not None:
            per[cur].append(e)
    return {label: collectives(v) for label, v in per.items()}


def fsdp_truth(job, rank, module, step):
    """Where RANK's fault is, per process group of its own (its ledger's):
    {pg: (seq, what the peers issued there)}, the first collective in forward
    in STEP from MODULE or a module inside it, as the peers' traces have it
    (they must agree)."""
    out = {}
    for pg, members in job.ledgers[rank][0]["groups"].items():
        for peer in members:
            if peer == rank:
                continue
            hits = [c for c in colls_by_step(job, peer).get("step %d" % step, [])
                    if c["pg"] == pg and c["phase"] == "forward"
                    and (c["module"] == module or c["module"].startswith(module + "."))]
            if not hits:
                continue
            if pg in out:
                eq((hits[0]["seq"], where(hits[0])), out[pg],
                   "rank %d's peers at the fault in pg %s" % (rank, pg))
            out[pg] = (hits[0]["seq"], where(hits[0]))
    check(out, "no peer of rank %d issued a collective of %s in step %d", rank, module, step)
    return out


def ledger_steps(job, rank):
    """{step: blocks the rank ran} from its ledger."""
    return {e["step"]: e["modules"] for e in job.ledgers[rank] if e["ev"] == "step"}


def check_fsdp(ctx, name, kind):
    """Run FSDP2 scenario NAME; the first finding is of KIND, names the culprit
    (rank, module, step: its ledger's fault) and sits where the peers' traces put
    the fault.  Returns (job, doc, first finding, rank, module, step, truth)."""
    why = has_fsdp2()
    if why:
        raise Skip(why)
    job, culprits, doc, text = job_report(ctx, name)
    rank, (module, step) = next(iter(culprits.items()))
    # The ledger: the fault the scenario asks for, in the module the trace names.
    eq([(f["kind"], f["module"], f["step"]) for f in job.faults(rank)],
       [(FSDP_FAULT[name], module, step)], "%s: rank %d's faults (ledger)" % (name, rank))
    for r in range(job.world):
        if r != rank:
            eq(job.faults(r), [], "%s: faults of rank %d" % (name, r))
    if doc is None:
        return None
    truth = fsdp_truth(job, rank, module, step)
    findings = doc["findings"]
    check(findings, "no finding for %s", name)
    first = findings[0]
    eq(first["kind"], kind, "%s: kind of the first finding (%s)" % (name, first["text"]))
    eq(first["ranks"], [rank], "%s: the rank blamed" % name)
    check(names_culprit(first, rank, module, step),
          "%s: the first finding does not name rank %d, %s, step %d: %r", name, rank, module,
          step, first["text"])
    eq(first["step"]["label"], "step %d" % step, "%s: step of the first finding" % name)
    check(first["pg"] in truth, "%s: the first finding is in pg %s, not one of rank %d's "
          "groups where the fault is: %r", name, first["pg"], rank, truth)
    seq, theirs = truth[first["pg"]]
    eq(first["seq"], seq, "%s: seq of the first finding (pg %s)" % (name, first["pg"]))
    rec = finding_where(first, "others")
    check(rec is not None, "%s: no record of the others in %r", name, first["modules"])
    eq(where(rec), theirs, "%s: what the others issued there (their traces)" % name)
    lines = [l for l in text.splitlines() if l.startswith("1. ")]
    eq(lines, ["1. " + first["text"]], "%s: the text report's first finding" % name)
    return job, doc, first, rank, module, step, truth


def shard_bytes(hidden, world):
    """The all-gather input of one block (fc1 DIM->hidden, fc2 hidden->DIM,
    float32) fully_shard-ed over WORLD ranks (dims divide: no padding)."""
    d = faulty_jobs.DIM
    return 4 * (d * hidden + hidden + hidden * d + d) // world


def test_job_fsdp_skip(ctx):
    """FSDP2, 4 ranks: rank 1's forward leaves Net.blocks.1 out in step 2 (a
    different code path), so its all-gather for the block is missing and its
    next one (Net.blocks.2's, the same size) takes that seq: gloo pairs them,
    and the ranks deadlock a few collectives on, in backward, where rank 1
    reduce-scatters while the others all-gather; every rank times out.  One
    skip, of 1 collective, at the block's forward all-gather."""
    res = check_fsdp(ctx, "fsdp-skip", "skip")
    if not res:
        return
    job, doc, first, rank, module, step, truth = res
    eq(first["count"], 1, "fsdp-skip: collectives skipped")
    # what rank 1 issued there: the block after the skipped one's predecessor
    others_run = ledger_steps(job, 0)[step]
    mine_run = ledger_steps(job, rank)[step]
    eq([m for m in others_run if m not in mine_run], [module], "fsdp-skip: the block left out")
    odd = finding_where(first, "odd")
    eq((odd["module"], odd["collective"], odd["bytes"]),
       (mine_run[others_run.index(module)], truth[first["pg"]][1]["collective"],
        truth[first["pg"]][1]["bytes"]), "fsdp-skip: what rank %d issued there" % rank)
    eq([f["kind"] for f in doc["findings"] if f["kind"] != "died"], ["skip"],
       "fsdp-skip: one finding (besides deaths) for one skip")
    eq(job.rcs, [1] * job.world, "fsdp-skip: every rank raised (gloo timeout)")
    # At least one rank times out; the others may time out too, or lose the
    # connection to a rank whose timeout ended it first (a loaded machine).
    errs = [[e["msg"] for e in job.ledgers[r] if e["ev"] == "error"] for r in range(job.world)]
    for r in range(job.world):
        check(errs[r] and ("Timed out" in errs[r][0] or "Connection" in errs[r][0]),
              "fsdp-skip: rank %d raised neither a timeout nor a lost peer: %r", r, errs[r])
    check(any("Timed out" in e[0] for e in errs), "fsdp-skip: no rank timed out: %r", errs)


def test_job_fsdp_size(ctx):
    """FSDP2, 4 ranks: rank 1 is built with twice the hidden size in
    Net.blocks.1 (a different model config), so its shard of that block, and
    its all-gather, are larger from step 1 on: a size mismatch at the block's
    first forward all-gather, the sizes those of the two configs; gloo aborts a
    process at once (SIGABRT) and the others lose their connections."""
    res = check_fsdp(ctx, "fsdp-size", "size_mismatch")
    if not res:
        return
    job, doc, first, rank, module, step, truth = res
    fault = job.faults(rank)[0]
    world = job.world
    odd = finding_where(first, "odd")
    eq((finding_where(first, "others")["bytes"], odd["bytes"]),
       (shard_bytes(fault["others_hidden"], world), shard_bytes(fault["hidden"], world)),
       "fsdp-size: the two all-gather sizes, from the two configs")
    eq(odd["module"], module, "fsdp-size: rank %d's module" % rank)
    check(-6 in job.rcs, "fsdp-size: no rank was aborted by gloo: %r", job.rcs)
    eq([t["regions"] for t in doc["traces"]], [1] * world, "fsdp-size: ended in step 1")


def test_job_fsdp_straggler(ctx):
    """FSDP2, 4 ranks: rank 3 sleeps 6 s inside Net.blocks.1 (step 2) before
    FSDP's unshard; the others wait in the block's all-gather and time out
    after 3 s.  A straggler, late by what its ledger says."""
    res = check_fsdp(ctx, "fsdp-straggler", "straggler")
    if not res:
        return
    job, doc, first, rank, module, step, truth = res
    fault = job.faults(rank)[0]
    eq(first["times"]["last_rank"], rank, "fsdp-straggler: who arrived last")
    # its arrival: the fault's time plus the sleep; the others': right after
    # their own step began (one block's all-gather before)
    started = max(e["t_ns"] for r in range(job.world) if r != rank
                  for e in job.ledgers[r] if e["ev"] == "step" and e["step"] == step)
    want = (fault["t_ns"] - started) / 1e9 + fault["seconds"]
    check(abs(first["times"]["delay_s"] - want) < 1.0,
          "fsdp-straggler: delay %.3f s, the ledgers say %.3f s", first["times"]["delay_s"],
          want)
    check(first["times"]["delay_s"] > fault["seconds"] - 1,
          "fsdp-straggler: only %.1f s late", first["times"]["delay_s"])
    # the waiting ranks time out; on a loaded machine one may first lose a
    # peer that timed out before it (gloo closes the connection)
    errs = {r: [e["msg"] for e in job.ledgers[r] if e["ev"] == "error"]
            for r in range(job.world) if r != rank}
    for r, e in errs.items():
        check(e and ("Timed out" in e[0] or "Connection" in e[0]),
              "fsdp-straggler: rank %d raised neither a timeout nor a lost peer: %r", r, e)
    check(any(e and "Timed out" in e[0] for e in errs.values()),
          "fsdp-straggler: no waiting rank timed out: %r", errs)


def test_job_fsdp_kill(ctx):
    """FSDP2, 4 ranks: rank 2 SIGKILLs itself inside Net.blocks.1 (step 2),
    before FSDP's unshard: it never reached the block's all-gather (a hang
    there), it died, and its last collective is the previous block's."""
    res = check_fsdp(ctx, "fsdp-kill", "hang")
    if not res:
        return
    job, doc, first, rank, module, step, truth = res
    eq(job.rcs[rank], -9, "fsdp-kill: rank %d's exit" % rank)
    st = [s for s in first["states"] if s["rank"] == rank]
    check(st and st[0]["end"] in KILLED_ENDS, "fsdp-kill: rank %d's end: %r", rank, st)
    eq(st[0]["label"], "step %d" % step, "fsdp-kill: region the killed rank stopped in")
    run = ledger_steps(job, rank)[step]
    eq((st[0]["last_collective"]["seq"], st[0]["last_collective"]["module"]),
       (first["seq"] - 1, run[run.index(module) - 1]), "fsdp-kill: the killed rank's last "
       "collective: the previous block's all-gather")
    died = [f for f in doc["findings"] if f["kind"] == "died" and rank in f["ranks"]]
    check(died and died[0]["end"] in KILLED_ENDS, "fsdp-kill: no died finding for rank %d: "
          "%r", rank, [f["text"] for f in doc["findings"]])


def test_job_fsdp_tp_skip(ctx):
    """FSDP2 over dp with TP inside (2 x 2 mesh): rank 3 leaves Net.blocks.1
    out in step 2.  Its dp pair ({1,3}) lacks its all-gather of the block, its
    tp pair ({2,3}) its all-reduce of fc2's output: two skips, each a tie in a
    pair decided for rank 3, at the places the peers' traces give.  Gloo does
    not time the ranks out here: the harness kills the hung job."""
    res = check_fsdp(ctx, "fsdp-tp-skip", "skip")
    if not res:
        return
    job, doc, first, rank, module, step, truth = res
    eq(len(truth), 2, "fsdp-tp-skip: the fault is in both of rank 3's pairs: %r" % truth)
    skips = {f["pg"]: f for f in doc["findings"] if f["kind"] == "skip"}
    eq(sorted(skips), sorted(truth), "fsdp-tp-skip: a skip in each pair")
    for pg, (seq, theirs) in truth.items():
        f = skips[pg]
        eq((f["ranks"], f["seq"], f["count"], where(finding_where(f, "others"))),
           ([rank], seq, 1, theirs), "fsdp-tp-skip: the skip in pg %s" % pg)
        check(f.get("decided_by", {}).get("basis") in ("own_steps", "sibling_group"),
              "fsdp-tp-skip: the tie in pg %s: %r", pg, f.get("decided_by"))
