"""Post-mortem of real diverging runs (gloo on CPU): `commdebug ranks`.

The ranks run `workers.py diverge`: the tensor-parallel transformer, where in
step 2 one rank departs from the others at a known all-reduce (skips it,
all-gathers instead, or sends twice the bytes).  The others block there; once
the traces have stopped growing (the recorder flushes every 0.5 s) the harness
SIGKILLs every process, as one would kill a hung job.  Each worker writes, right
before it issues its collective at the diverging position, what it knows: the
position (process group, seq counted by the worker itself), what the others
issue there and what it issues there.

Checked without the analyzer: each trace ends with the collective the worker
says it was blocked in, at that seq, attributed to that module, and the traces
agree with the workers' ledgers up to there.  With an analyzer that has the
`ranks` command (`commdebug ranks --help` exits 0): its --json report against
the workers' truth.  Without it that part is skipped with a note.
"""

import json
import os
import shutil
import subprocess
import time

from _util import (HERE, PYTHON, check, env, eq, events, free_port, run_ranks)
import replay_ref

WORLD = 3
STEPS = 2
KIND = {"skip": "type_mismatch", "type": "type_mismatch", "size": "size_mismatch"}
_RANKS_SUPPORTED = {}


# ------------------------------------------------------------------ harness
def run_until_hung(out, world, how, odd, timeout=40, quiet=1.2):
    """Start `world` ranks of `workers.py diverge --how HOW --odd-rank ODD`,
    wait until every rank has written its truth file (it is about to issue its
    collective at the diverging position) and the traces have not grown for
    `quiet` seconds, then SIGKILL whatever still runs.  Returns the exit
    statuses (negative: the signal)."""
    os.makedirs(out, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(world):
        e = env(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port)
        log = open(os.path.join(out, "log%d.txt" % rank), "w")
        p = subprocess.Popen([PYTHON, os.path.join(HERE, "workers.py"), "diverge", "--out",
                              out, "--how", how, "--odd-rank", str(odd), "--steps", str(STEPS),
                              "--max-seconds", str(timeout + 20)],
                             env=e, stdout=log, stderr=subprocess.STDOUT)
        procs.append((p, log))
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
        check(all(c["pg"] == pos["pg"] for c in colls), "rank %d: collectives in another pg" % r)
        # The trace ends with the collective the rank says it was blocked in:
        # the recorder flushed it although the process was killed.
        eq(len(colls), pos["seq"], "rank %d: collectives in the trace (the last one is the "
           "one at the diverging seq)" % r)
        eq(where(colls[-1]), where(t["issued"]), "rank %d: what the trace has at seq %d"
           % (r, pos["seq"]))
        eq([[c["module"], c["phase"], c["collective"]] for c in colls],
           [call[1:] for call in t["calls"]], "rank %d: trace vs the worker's ledger" % r)
        regs = [e["region"] for e in evs if e["ev"] == "region_enter"]
        eq(regs, [1, 2], "rank %d regions" % r)
        check(not any(e["ev"] == "region_exit" and e["region"] == 2 for e in evs),
              "rank %d: region 2 should be open (the rank hung in it)" % r)
        if r != odd:
            eq(where(t["issued"]), where(pos), "rank %d issued what the plan says" % r)
        evs_all.append(evs)
        colls_all.append(colls)
    issued = truths[odd]["issued"]
    if how == "skip":
        # the skipped all-reduce's seq went to the next collective: the all-gather
        eq((issued["collective"], issued["module"], issued["phase"]),
           ("c10d.allgather_", "Transformer.output", "forward"), "skipping rank's next")
        # (the all-gather's payload is this rank's slice of the logits)
        eq(issued["bytes"], 4 * 8 * (96 // world) * 4, "skipping rank's next bytes")
    elif how == "type":
        eq(where(issued), dict(where(pos), collective="c10d.allgather_"), "odd rank issued")
    elif how == "size":
        eq(where(issued), dict(where(pos), bytes=2 * pos["bytes"]), "odd rank issued")
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


def own_counts(truth):
    """(module, direction, packet) -> count, from a worker's ledger."""
    out = {}
    for _, fqn, direction, pkt in truth["calls"]:
        k = (fqn, direction, pkt)
        out[k] = out.get(k, 0) + 1
    return out


def check_report(ctx, out, world, how, odd, truths, evs_all, colls_all):
    doc, rc, err = ranks_json(ctx, os.path.join(out, "traces"), rc=(4,))
    check_trace_list(doc, out, world, evs_all, colls_all)
    eq(doc["agree"], False, "agree")
    check(doc["divergences"], "no divergence reported")
    t = truths[odd]
    d = doc["divergences"][0]
    others = [r for r in range(world) if r != odd]
    eq({k: d[k] for k in ("kind", "pg", "seq", "collective", "module", "phase", "ranks",
                          "odd_ranks")},
       {"kind": KIND[how], "pg": t["pg"], "seq": t["seq"], "collective": t["collective"],
        "module": t["module"], "phase": t["phase"], "ranks": others, "odd_ranks": [odd]},
       "the first divergence")
    eq(len(d["detail"]), 1, "detail entries")
    got = d["detail"][0]
    eq({k: got.get(k) for k in ("rank", "collective", "bytes", "dtype", "module", "phase")},
       dict(where(t["issued"]), rank=odd), "what the odd rank issued there")
    # Every rank blocked at the diverging seq: nothing can disagree earlier.
    for later in doc["divergences"][1:]:
        check((later["pg"], later["seq"]) != (d["pg"], d["seq"]) or later["kind"] != d["kind"],
              "the divergence is reported twice: %r", later)

    # lagging: each entry as the trace of that rank ends.
    for lag in doc["lagging"]:
        r = lag["rank"]
        check(0 <= r < world, "lagging rank %r", r)
        issued = truths[r]["issued"]
        lc = lag["last_collective"]
        check(lc is not None, "rank %d: no last_collective although it issued %d" % (r, t["seq"]))
        eq({k: lc[k] for k in ("pg", "seq", "collective", "module", "phase")},
           {"pg": t["pg"], "seq": t["seq"], "collective": issued["collective"],
            "module": issued["module"], "phase": issued["phase"]},
           "lagging rank %d: last collective" % r)
        stack = lag["stack"]
        check(stack and stack[0]["module"] == "Transformer",
              "rank %d: open modules should start at Transformer: %r", r, stack)
        eq((stack[-1]["module"], stack[-1]["phase"]), (issued["module"], issued["phase"]),
           "rank %d: innermost open module" % r)

    # modules: exactly where the workers' own counts differ, for the modules
    # that issue collectives themselves (ancestors may be listed as well).
    per_rank = [own_counts(tr) for tr in truths]
    keys = set().union(*per_rank)
    listed = {}
    for m in doc["modules"]:
        counts = {int(k): v for k, v in m["counts"].items() if v}
        check(len(set(m["counts"].get(str(r), 0) for r in range(world))) > 1,
              "modules lists an entry where the ranks agree: %r", m)
        listed[(m["module"], m["direction"], m["collective"])] = counts
    for k in sorted(keys):
        want = {r: c[k] for r, c in enumerate(per_rank) if c.get(k)}
        if len(set(c.get(k, 0) for c in per_rank)) > 1:
            eq(listed.get(k), want, "modules entry for %r" % (k,))
        else:
            check(k not in listed, "modules lists %r where the ranks agree", k)
    return doc, rc


def diverge_case(ctx, how, odd, world=WORLD):
    out = os.path.join(ctx.tmp, "%s-%d" % (how, world))
    t0 = time.time()
    rcs = run_until_hung(out, world, how, odd)
    truths, evs_all, colls_all = check_traces(out, world, how, odd)
    ctx.note("%s, %d ranks: diverged at seq %d in %s (%s); exits %r; %.1f s"
             % (how, world, truths[0]["seq"], truths[0]["module"], truths[0]["phase"], rcs,
                time.time() - t0))
    if ranks_supported(ctx):
        check_report(ctx, out, world, how, odd, truths, evs_all, colls_all)


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


def test_skip_4_ranks(ctx):
    """The skip again with 4 ranks, rank 2 the odd one."""
    diverge_case(ctx, "skip", 2, world=4)
