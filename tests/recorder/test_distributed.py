"""Multi-process tests (gloo on CPU): the ranks run tests/recorder/workers.py,
which counts its own collectives; the traces are then checked against those
counts, replayed through a Python model of CommDebugMode (replay_ref.py) and,
when it is built, through the commdebug analyzer."""

import os
import signal
import subprocess
import time

from _util import (PYTHON, HERE, Skip, check, env, eq, events, free_port, load_truth, pairs,
                   regions, run_ranks, tree_index)
import replay_ref

TP_WORLD = 2
TP_STEPS = 3


def expected_module_counts(calls, region, fqns):
    """fqn -> {"forward": {pkt: n}, "backward": {...}} from the worker's own
    ledger: a call counts for the module that issued it and every ancestor."""
    want = {f: {"forward": {}, "backward": {}} for f in fqns}
    for r, fqn, direction, pkt in calls:
        if r != region:
            continue
        for m in fqns:
            if m == "Global" or fqn == m or fqn.startswith(m + "."):
                d = want[m][direction]
                d[pkt] = d.get(pkt, 0) + 1
    return want


def analyzer_counts(ctx, trace):
    docs, _, _ = ctx.analyzer.json_docs("counts", "--json", trace)
    return docs


def test_tp_transformer(ctx):
    """(a) Two transformer blocks with hand-written tensor-parallel collectives
    (all_reduce after row-parallel linears, all-reduce of the input gradient
    of column-parallel linears, all_gather of the logits), 3 training steps,
    one region per step, 2 ranks."""
    out = ctx.tmp
    run_ranks("tp", out, TP_WORLD, "--steps", str(TP_STEPS))
    for rank in range(TP_WORLD):
        truth = load_truth(out, rank)
        trace = os.path.join(out, "rank%d.zst" % rank)
        evs = events(trace)
        meta = evs[0]
        eq((meta["rank"], meta["world_size"]), (rank, TP_WORLD), "meta rank/world_size")
        pgs = [e for e in evs if e["ev"] == "pg"]
        eq([(p["name"], p["ranks"], p["backend"]) for p in pgs],
           [("0", list(range(TP_WORLD)), "gloo")], "pg events")
        per = regions(evs)
        eq(sorted(per), list(range(1, TP_STEPS + 1)), "regions")
        modules = truth["modules"]
        for r in range(1, TP_STEPS + 1):
            calls = [c for c in truth["calls"] if c[0] == r]
            colls = [e for e in per[r] if e["ev"] == "op" and e["name"].startswith("c10d.")]
            eq([(e["name"].rsplit(".", 1)[0], e["bw"]) for e in colls],
               [(c[3], c[2] == "backward") for c in calls],
               "rank %d region %d collectives (name, bw) in call order" % (rank, r))
            for e in colls:
                eq((e["pg"], e["dtype"], e["bytes"]), ("0", "torch.float32", 4 * 8 * 4 * 32),
                   "collective pg/dtype/bytes")
            seqs = [e["seq"] for e in colls]
            eq(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "seq numbers")
            ran = {e["mod"] for e in per[r] if e["ev"] == "fw_pre"}
            eq(ran, set(modules), "rank %d region %d modules run" % (rank, r))
            types = {e["mod"]: e["type"] for e in per[r] if e["ev"] == "fw_pre"}
            eq(types, {k: v[0] for k, v in modules.items()}, "module types")

        # Replayed like CommDebugMode would count it.
        fqns = ["Global"] + list(modules)
        for reg in replay_ref.replay(evs):
            want = expected_module_counts(truth["calls"], reg.number, fqns)
            for m in fqns:
                got = reg.module_counts.get(m, {"forward": {}, "backward": {}})
                eq(got, want[m], "rank %d region %d replayed counts of %s" % (rank, reg.number, m))
            eq(reg.comm_counts, {"c10d.allreduce_": 9, "c10d.allgather_": 1},
               "replayed comm counts")

        if ctx.analyzer is None:
            ctx.note("analyzer checks skipped (no binary)")
            continue
        docs = analyzer_counts(ctx, trace)
        eq(len(docs), TP_STEPS, "analyzer counts: one document per region")
        for r, doc in enumerate(docs, 1):
            want = {}
            for c in truth["calls"]:
                if c[0] == r:
                    want[c[3]] = want.get(c[3], 0) + 1
            eq(doc["counts"], want, "analyzer counts region %d" % r)
            eq(doc["total"], sum(want.values()), "analyzer total region %d" % r)
        docs, _, _ = ctx.analyzer.json_docs("analyze", "--json", "--noise", "1", trace)
        eq(len(docs), TP_STEPS, "analyzer analyze --json: one document per region")
        for r, doc in enumerate(docs, 1):
            nodes, parents = tree_index(doc)
            eq(set(nodes), set(fqns), "analyzer module tree region %d" % r)
            for fqn, (typ, parent) in modules.items():
                eq(parents[fqn], parent, "parent of %s" % fqn)
                eq(nodes[fqn]["module_type"], "class '%s'" % typ, "module_type of %s" % fqn)
            want = expected_module_counts(truth["calls"], r, fqns)
            for fqn in fqns:
                got = {"forward": pairs(nodes[fqn]["collectives_forward"]),
                       "backward": pairs(nodes[fqn]["collectives_backward"])}
                eq(got, want[fqn], "analyzer collectives of %s, region %d" % (fqn, r))


def ddp_buckets(step_report):
    """DDP's own bucket list (byte sizes, in bucket order) used in a step:
    the construction-time buckets in step 1, the rebuilt ones after."""
    sizes = step_report.get("rebuilt_bucket_sizes") or step_report["bucket_sizes"]
    return [int(s) for s in sizes.split(",")]


def test_ddp_buckets(ctx):
    """(b) DistributedDataParallel with small buckets: per step, one coll
    event (src ddp_reducer) per bucket DDP reports, with its byte size."""
    out = ctx.tmp
    world, steps = 2, 4
    run_ranks("ddp", out, world, "--steps", str(steps))
    for rank in range(world):
        truth = load_truth(out, rank)
        trace = os.path.join(out, "rank%d.zst" % rank)
        evs = events(trace)
        per = regions(evs)
        initial = [int(s) for s in truth["per_step"][0]["bucket_sizes"].split(",")]
        rebuilt = [int(s) for s in truth["final"]["rebuilt_bucket_sizes"].split(",")]
        check(len(rebuilt) >= 3, "the test model should have several buckets: %r", rebuilt)
        eq(sum(initial), truth["param_bytes"], "DDP bucket sizes add up to the parameters")
        for step in range(1, steps + 1):
            # DDP builds its buckets at construction and rebuilds them once,
            # at the start of step 2, in the order gradients became ready.
            want = initial if step == 1 else rebuilt
            colls = [e for e in per[step] if e["ev"] == "coll"]
            eq(len(colls), len(want), "rank %d step %d: coll events vs DDP buckets" % (rank, step))
            eq([e["bytes"] for e in colls], want, "bucket bytes, step %d" % step)
            for i, e in enumerate(colls):
                eq((e["name"], e["src"], e["pg"], e["bw"], e["bucket"], e["dtype"]),
                   ("c10d.allreduce_", "ddp_reducer", "0", True, i, "torch.float32"),
                   "coll event")
            # The dispatcher saw the same all-reduces (CommDebugMode counts them too):
            # each coll shares the seq of the op event just before it.
            ops = {e["seq"]: e for e in per[step] if e["ev"] == "op"
                   and e["name"] == "c10d.allreduce_.default"}
            for e in colls:
                check(e["seq"] in ops and ops[e["seq"]]["bytes"] == e["bytes"],
                      "coll seq %r has no matching op event", e["seq"])
        if ctx.analyzer is None:
            ctx.note("analyzer checks skipped (no binary)")
            continue
        docs = analyzer_counts(ctx, trace)
        eq(len(docs), steps, "analyzer counts: one document per region")
        for step, doc in enumerate(docs, 1):
            want = initial if step == 1 else rebuilt
            by_source = doc.get("by_source", {}).get("ddp_reducer", {})
            eq(by_source.get("c10d.allreduce_"), len(want),
               "analyzer all-reduces attributed to DDP's reducer, step %d" % step)
            eq(doc["counts"].get("c10d.allreduce_"), len(want),
               "analyzer dispatcher all-reduces, step %d" % step)


def test_c10d_ops(ctx):
    """(d) Each collective gloo supports, called once in a region: the op
    event names the c10d overload newer PyTorch dispatches (1.13 runs some
    without the dispatcher: "via":"python_api"), with group and bytes."""
    out = ctx.tmp
    world = 2
    run_ranks("c10d", out, world)
    for rank in range(world):
        truth = load_truth(out, rank)
        trace = os.path.join(out, "rank%d.zst" % rank)
        evs = events(trace)
        per = regions(evs)
        colls = [e for e in per[1] if e["ev"] == "op" and e["name"].startswith("c10d.")]
        eq([(e["name"], e["bytes"]) for e in colls], [tuple(c) for c in truth["calls"]],
           "rank %d c10d op events" % rank)
        groups = truth["groups"]
        eq([e["pg"] for e in colls],
           [groups["sub"] if i == 1 else groups["world"] for i in range(len(colls))],
           "process group of each op")
        pgs = {e["name"]: e for e in evs if e["ev"] == "pg"}
        eq(sorted(pgs), sorted(groups.values()), "pg events")
        eq(pgs[groups["world"]]["desc"], "default_pg", "default group desc")
        for p in pgs.values():
            eq((p["ranks"], p["backend"]), (list(range(world)), truth["backend"]), "pg event")
        registry = [replay_ref.packet(c[0]) for c in truth["calls"]]
        want = {}
        for pkt in registry:
            if pkt is not None:
                want[pkt] = want.get(pkt, 0) + 1
        eq(replay_ref.replay(evs)[0].comm_counts, want, "replayed counts")
        if ctx.analyzer is None:
            ctx.note("analyzer checks skipped (no binary)")
            continue
        docs = analyzer_counts(ctx, trace)
        eq(docs[0]["counts"], want, "analyzer counts")
        eq(docs[0]["total"], sum(want.values()), "analyzer total")


def open_region_flushed(trace, errors):
    """Whether the readable part of a trace being written holds an op of a
    region that has not ended (a read that fails is kept in errors)."""
    try:
        evs = events(trace, allow_cut=True)
    except Exception as e:
        errors[:] = [e]     # (read while the writer rewrote its end: read again)
        return False
    exits = {e["region"] for e in evs if e["ev"] == "region_exit"}
    return any(e["ev"] == "op" for r, got in regions(evs).items() if r not in exits
               for e in got)


def test_sigkill_leaves_readable_prefix(ctx):
    """(c) A recording process killed with SIGKILL in the middle of a step
    leaves a trace whose prefix reads back: the closed regions complete, and
    frames the writer flushed during the open region."""
    out = ctx.tmp
    p = subprocess.Popen([PYTHON, os.path.join(HERE, "workers.py"), "forever", "--out", out],
                         env=env(RANK=0), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ready = os.path.join(out, "ready0")
    trace = os.path.join(out, "rank0.zst")
    deadline = time.time() + 60
    try:
        while not os.path.exists(ready):
            check(time.time() < deadline and p.poll() is None,
                  "worker did not get ready: %s", p.stderr.read().decode() if p.poll() is not None else "")
            time.sleep(0.05)
        # Step 3 runs for three seconds: kill it as soon as the writer's timer
        # has flushed a frame of it.  (The file's size alone says nothing:
        # the writer thread also shrinks it, when it compresses the raw
        # frame of step 2's end in place.)
        errors = []
        while not open_region_flushed(trace, errors):
            check(time.time() < deadline, "no frame was written during step 3 (last read: %r)",
                  errors)
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(30)
    eq(p.returncode, -signal.SIGKILL, "worker exit")
    evs = events(trace, allow_cut=True)
    eq(evs[0]["ev"], "meta", "first event")
    per = regions(evs)
    check(len(per) >= 3, "regions in the prefix: %r", sorted(per))
    exits = [e["region"] for e in evs if e["ev"] == "region_exit"]
    check(exits[:2] == [1, 2], "closed regions: %r", exits)
    open_region = max(per)
    check(open_region not in exits, "the last region should be open")
    check(any(e["ev"] == "op" for e in per[open_region]),
          "no events of the open region %d were flushed", open_region)

    # A cut inside a frame: a copy truncated in the middle of its last frame.
    with open(trace, "rb") as f:
        data = f.read()
    last = data.rfind(b"\x28\xb5\x2f\xfd")
    check(last > 0, "expected several frames")
    cut = os.path.join(out, "cut.zst")
    with open(cut, "wb") as f:
        f.write(data[:last + (len(data) - last) // 2])
    cevs = events(cut, allow_cut=True)
    check(len(cevs) < len(evs) and cevs == evs[:len(cevs)], "cut trace is a prefix")

    if ctx.analyzer is None:
        ctx.note("analyzer checks skipped (no binary)")
        return
    rc, stdout, err = ctx.analyzer.run("counts", "--json", trace, check_rc=(0, 3))
    if rc == 3:
        check(trace in err or "rank0.zst" in err, "warning does not name the file: %r", err)
    rc, stdout, err = ctx.analyzer.run("counts", "--json", cut, check_rc=(3,))
    check("cut.zst" in err, "warning does not name the file: %r", err)
    rc, stdout, err = ctx.analyzer.run("analyze", "--color=never", cut, check_rc=(3,))
    check(stdout.strip(), "analyze printed nothing for the readable prefix")


DDP_SCRIPT = ("import torch, torch.distributed as dist\n"
              "dist.init_process_group('gloo')\n"
              "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))\n"
              "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
              "for i in range(2):\n"
              "    opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); opt.step()\n"
              "dist.destroy_process_group()\n")


def check_cli_traces(out):
    for rank in range(2):
        evs = events(os.path.join(out, "rank%d.zst" % rank))
        eq((evs[0]["rank"], evs[0]["world_size"]), (rank, 2), "meta")
        per = regions(evs)
        for step in (1, 2):
            eq(len([e for e in per[step] if e["ev"] == "coll"]), 1,
               "rank %d step %d DDP bucket all-reduces" % (rank, step))


def test_record_cli_launcher_env(ctx):
    """python -m commdebug.record as a launcher starts it (RANK, WORLD_SIZE,
    MASTER_ADDR/PORT in the environment, the script initializing the group
    itself): one trace per rank, named by the launcher's rank."""
    out = os.path.join(ctx.tmp, "traces")
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write(DDP_SCRIPT)
    port = free_port()
    procs = [subprocess.Popen([PYTHON, "-m", "commdebug.record", "--out", out, "--every-step",
                               "--", script],
                              env=env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2,
                                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        eq(p.returncode, 0, "rank exit (stderr: %s)" % err.decode()[-3000:])
    check_cli_traces(out)


def test_torchrun_record_cli(ctx):
    """The same under torchrun itself (skipped where torchrun does not start)."""
    probe = os.path.join(ctx.tmp, "probe.py")
    with open(probe, "w") as f:
        f.write("pass\n")
    base = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
            "127.0.0.1"]
    r = subprocess.run(base + ["--master_port", str(free_port()), probe], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    if r.returncode != 0:
        last = r.stderr.decode().strip().splitlines()[-1:] or ["?"]
        raise Skip("torchrun does not run a trivial script here (%s)" % last[0])
    out = os.path.join(ctx.tmp, "traces")
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write(DDP_SCRIPT)
    cmd = base + ["--master_port", str(free_port()), "-m", "commdebug.record", "--out", out,
                  "--every-step", "--", script]
    r = subprocess.run(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=240)
    eq(r.returncode, 0, "torchrun exit (stderr: %s)" % r.stderr.decode()[-3000:])
    check_cli_traces(out)
