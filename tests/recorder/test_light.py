"""Light mode (Recorder(light=True), python -m commdebug.record --light): on
real jobs, the same noise-0 outputs as the full recorder, every command of
the analyzer on light traces, torch.compile compiling as without a recorder
(and its collectives recorded), the same first finding as the full recorder
on failing jobs.  (The noise-0 comparison with torch's own CommDebugMode on
the golden programs is tests/golden: regen.py runs them light too.)

Skipped where the installed torch has no light mode (1.13)."""

import json
import os
import re
import stat
import subprocess
import textwrap

from _util import PYTHON, Skip, check, env, eq, events, need_light, regions, run_ranks

try:
    import faulty_jobs
except Exception:  # pragma: no cover
    faulty_jobs = None



def _noise0(ctx, trace):
    """What the light trace must share with the full one: noise-0 tables,
    the JSON dump, counts and sharding, every region."""
    out = []
    for args in (["analyze", "--noise", "0", "--no-nccl"],
                 ["analyze", "--noise", "0", "--json", "--no-nccl"],
                 ["counts", "--json"], ["sharding", "--json"]):
        out.append(ctx.analyzer.run(*(args + [trace]))[1])
    return out


def test_light_jobs_equal_full(ctx):
    """The tensor-parallel transformer and the DDP job of workers.py, 2 ranks,
    recorded light and full: every region's noise-0 outputs are equal; the
    light trace has no op but collectives, marks itself light, and every
    command reads it (ranks agree, check passes with expectations written
    from the light traces on the full ones, buckets prints what it prints
    for the full traces, export and report write their files); at noise 1
    the table says it was recorded light."""
    need_light()
    if ctx.analyzer is None:
        raise Skip("no analyzer")
    a = ctx.analyzer
    for what in ("tp", "ddp"):
        full = os.path.join(ctx.tmp, what + "-full")
        light = os.path.join(ctx.tmp, what + "-light")
        run_ranks(what, full, 2, "--steps", "3")
        run_ranks(what, light, 2, "--steps", "3", "--light")
        for r in range(2):
            ft = os.path.join(full, "rank%d.zst" % r)
            lt = os.path.join(light, "rank%d.zst" % r)
            evs = events(lt)
            eq(evs[0].get("light"), True, "%s rank %d: meta light" % (what, r))
            ops = [e for e in evs if e["ev"] == "op"]
            check(ops, "%s rank %d: no collective recorded", what, r)
            bad = [e["name"] for e in ops if "pg" not in e and "bytes" not in e]
            eq(bad, [], "%s rank %d: ops that are not collectives" % (what, r))
            eq(sorted(regions(evs)), [1, 2, 3], "%s rank %d: regions" % (what, r))
            for got, want, n in zip(_noise0(ctx, lt), _noise0(ctx, ft),
                                    ("table", "json", "counts", "sharding")):
                eq(got, want, "%s rank %d: noise-0 %s, light vs full" % (what, r, n))
        traces = [os.path.join(light, "rank%d.zst" % r) for r in range(2)]
        _, text, _ = a.run("ranks", *traces)
        check("all ranks agree" in text, "%s: ranks on light traces:\n%s", what, text)
        exp = os.path.join(ctx.tmp, what + ".yaml")
        a.run("check", "--write", exp, *traces)
        a.run("check", exp, *[os.path.join(full, "rank%d.zst" % r) for r in range(2)])
        _, table1, _ = a.run("analyze", "--noise", "1", "--region", "2", traces[0])
        check(table1.startswith("# recorded light:"), "%s: noise 1 says nothing:\n%s", what,
              table1[:300])
        perfetto = os.path.join(ctx.tmp, what + ".json")
        a.run("export", "--perfetto", "-o", perfetto, *traces)
        with open(perfetto) as f:
            doc = json.load(f)
        names = {e.get("name") for e in doc["traceEvents"]}
        check(any(n and n.startswith("c10d.") for n in names),
              "%s: export has no collective", what)
        page = os.path.join(ctx.tmp, what + ".html")
        a.run("report", "-o", page, *traces)
        check(os.path.getsize(page) > 10000, "%s: report page too small", what)
        if what == "ddp":
            got = a.run("buckets", *traces)[1]
            want = a.run("buckets", *[os.path.join(full, "rank%d.zst" % r) for r in range(2)])[1]
            # (line numbers and the share of the backward left, a time, differ)
            def same(text):
                text = re.sub(r"event at line \d+", "event", text)
                return re.sub(r"  [\d.]+% of backward left( \(\d+ ops?\))?", "", text)
            check(" ops)" not in got, "buckets counts ops in a light trace:\n%s", got)
            eq(same(got), same(want), "buckets, light vs full")


COMPILED = textwrap.dedent(r'''
    import json, os, sys
    import torch, torch.nn as nn, torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch._dynamo.utils import counters
    from commdebug import Recorder
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    pg = dist.distributed_c10d._get_default_group()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            return self.b(torch.relu(funcol.all_reduce(self.a(x), "sum", pg)))

    def run(rec):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        m = torch.compile(Net(), backend="aot_eager")
        x = torch.randn(4, 8, requires_grad=True)
        for i in range(3):
            if rec is None:
                m(x).sum().backward()
            else:
                with rec(label="step %d" % i):
                    m(x).sum().backward()
        return {k: dict(v) for k, v in counters.items()
                if k in ("frames", "stats", "graph_break", "aot_autograd", "recompiles")}

    out = sys.argv[1]
    plain = run(None)
    light = Recorder(os.path.join(out, "light.zst"), light=True)
    got = run(light)
    light.close()
    full = Recorder(os.path.join(out, "full.zst"))
    fallback = run(full)
    full.close()
    json.dump({"plain": plain, "light": got, "full": fallback}, open(os.path.join(out, "c.json"), "w"))
''')


def test_light_compiled_model(ctx):
    """A torch.compile'd model (aot_eager) with a functional all-reduce in its
    graph: dynamo's counters (frames, graphs, graph breaks, AOT compiles) are
    the same under the light recorder as without one, every step's
    all-reduce of the compiled graph, forward and backward, is recorded
    and counted; under the full recorder dynamo falls back to eager, and the
    recorder says so once on stderr."""
    need_light()
    try:
        import torch
        torch.compile  # noqa: B018
    except Exception:
        raise Skip("no torch.compile")
    script = os.path.join(ctx.tmp, "compiled.py")
    with open(script, "w") as f:
        f.write(COMPILED)
    r = subprocess.run([PYTHON, script, ctx.tmp], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    err = r.stderr.decode(errors="replace")
    eq(r.returncode, 0, "exit status of the compiled job (stderr: %s)" % err[-2000:])
    with open(os.path.join(ctx.tmp, "c.json")) as f:
        c = json.load(f)
    check(c["plain"].get("stats", {}).get("unique_graphs"), "nothing compiled: %r", c)
    eq(c["light"], c["plain"], "dynamo's counters under light mode")
    check(c["full"].get("stats", {}).get("unique_graphs") in (None, 0),
          "compiled under the full recorder: %r", c["full"])
    notes = [l for l in err.splitlines() if "torch.compile'd function ran" in l]
    eq(len(notes), 1, "notes of the eager fallback on stderr (%s)" % err[-1000:])
    check("--light" in notes[0], "the note does not point at light mode: %s", notes[0])
    per = regions(events(os.path.join(ctx.tmp, "light.zst")))
    eq(sorted(per), [1, 2, 3], "regions")
    for k, evs in per.items():
        colls = [(e["name"], e["bw"]) for e in evs if e["ev"] == "op"]
        eq(colls, [("_c10d_functional.all_reduce.default", False),
                   ("_c10d_functional.all_reduce.default", True)],
           "collectives of region %d" % k)
    if ctx.analyzer is not None:
        docs, _, _ = ctx.analyzer.json_docs("counts", "--json",
                                            os.path.join(ctx.tmp, "light.zst"))
        eq([d["counts"] for d in docs], [{"c10d_functional.all_reduce": 2}] * 3, "counts")


def _first(ctx, traces):
    doc = json.loads(ctx.analyzer.run("ranks", "--json", traces, check_rc=(4,))[1])
    f = doc["findings"][0]
    where = [(m["side"], m.get("module"), m.get("phase"), m.get("label"))
             for m in f["modules"]]
    return (f["kind"], f["ranks"], f["pg"], f["seq"], f["step"]["label"], where)


def test_light_failing_jobs(ctx):
    """Real failing 4-rank gloo jobs (faulty_jobs.py) recorded light and
    full: ranks gives the same first finding (kind, culprit, position, step,
    modules and phases) on both: a rank that skips an all-reduce, and one
    killed inside a module."""
    need_light()
    if ctx.analyzer is None or faulty_jobs is None:
        raise Skip("no analyzer or faulty_jobs.py")
    for name in ("skip", "kill"):
        got = {}
        for light in (False, True):
            out = os.path.join(ctx.tmp, "%s-%s" % (name, "light" if light else "full"))
            job = faulty_jobs.run_scenario(out, name, light=light)
            got[light] = _first(ctx, job.traces)
        eq(got[True], got[False], "%s: the first finding, light vs full" % name)
        ctx.note("%s: %s" % (name, got[True][:2]))


def test_light_bounded_job(ctx):
    """A 4-rank job recorded light and bounded (rank 0 keeps its last 2 to 4
    regions in full, the others 3 to 6), 12 steps, rank 0 pausing 0.3 s in
    step 8, rank 2 killed inside Net.blocks.1 in step 10: each trace dropped its first regions, holds
    them as trim events (one per process group) and goes on with the
    region_enter of its first region kept; ranks names rank 2, step 10
    first, with no gap finding although the ranks dropped different regions
    (an analyzer without trim events reports one); analyze reads the kept
    regions."""
    need_light()
    if ctx.analyzer is None or faulty_jobs is None:
        raise Skip("no analyzer or faulty_jobs.py")
    out = os.path.join(ctx.tmp, "bounded")
    keep = {0: 2, 1: 3, 2: 3, 3: 3}
    # rank 0 sleeps 0.3 s in step 8, and the others wait in its all-reduce:
    # the writer threads drop regions every 0.1 s, and a fast machine (an
    # H200 host's 16 cores) ran all 10 steps between two of their rounds
    job = faulty_jobs.run_job(out, ["sleep:0:8:Net.blocks.1:0.3", "kill:2:10"], steps=12,
                              light=True, keep=keep)
    for r in range(4):
        evs = events(os.path.join(job.traces, "rank%d.zst" % r), allow_cut=True)
        kept = sorted(regions(evs))
        # (a job holds a few more regions between the writer's rounds;
        # test_light_bounded_trace checks the bound)
        check(kept and kept[0] > 1 and kept[-1] >= 9, "rank %d kept regions %r", r, kept)
        trims = [e for e in evs if e["ev"] == "trim"]
        check(trims, "rank %d: no trim event", r)
        eq(max(t["region"] for t in trims), kept[0] - 1, "rank %d: last region trimmed" % r)
        eq({t["pg"] for t in trims}, {"0"}, "rank %d: groups of the trim events" % r)
        body = [e for e in evs if e["ev"] not in ("meta", "pg", "ddp", "trim")]
        eq((body[0]["ev"], body[0].get("region")), ("region_enter", kept[0]),
           "rank %d: the first event kept" % r)
    doc = json.loads(ctx.analyzer.run("ranks", "--json", job.traces, check_rc=(4,))[1])
    kinds = [f["kind"] for f in doc["findings"]]
    check("gap" not in kinds, "gap findings in a bounded job: %r", kinds)
    first = doc["findings"][0]
    eq((first["kind"], first["ranks"], first["step"]["label"]), ("hang", [2], "step 10"),
       "the first finding")
    ctx.analyzer.run("analyze", "--noise", "0", os.path.join(job.traces, "rank0.zst"))


def test_light_bounded_trace(ctx):
    """keep=4 in one process, 30 regions with a DDP module and an
    all-reduce each: after flush() the trace holds 4 to 8 regions, its head
    every pg and ddp event (buckets still reads it) and the trim events,
    whose seq is the group's last collective before the first region kept
    and whose counts add up to the collectives of the regions dropped."""
    need_light()
    script = os.path.join(ctx.tmp, "b.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import sys, torch, torch.nn as nn, torch.distributed as dist
            from commdebug import Recorder
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            m = nn.parallel.DistributedDataParallel(nn.Linear(8, 8))
            rec = Recorder(sys.argv[1], light=True, keep=4)
            for i in range(30):
                with rec(label="step %d" % (i + 1)):
                    m(torch.randn(4, 8)).sum().backward()
                    dist.all_reduce(torch.ones(2))
            rec.flush()
            import shutil
            shutil.copy(rec.path, sys.argv[1] + ".flushed")
            rec.close()
            dist.destroy_process_group()
        '''))
    path = os.path.join(ctx.tmp, "b.zst")
    r = subprocess.run([PYTHON, script, path], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    eq(r.returncode, 0, "exit status (%s)" % r.stdout.decode(errors="replace")[-2000:])
    for p in (path + ".flushed", path):
        evs = events(p)
        kept = sorted(regions(evs))
        check(4 <= len(kept) <= 8 and kept[-1] == 30, "%s: kept regions %r", p, kept)
        trims = [e for e in evs if e["ev"] == "trim"]
        eq(max(t["region"] for t in trims), kept[0] - 1, "last region trimmed")
        first_seq = min(e["seq"] for e in evs if e["ev"] == "op" and e.get("pg") == "0")
        eq(max(t["seq"] for t in trims), first_seq - 1, "trimmed seq")
        # two collectives a region (DDP's bucket, the all-reduce), and DDP's
        # two broadcasts after it rebuilt its buckets (region 2)
        eq(sum(t["count"] for t in trims), 2 * (kept[0] - 1) + 2, "collectives dropped")
        check(sum(1 for e in evs if e["ev"] == "ddp") == 2, "ddp events kept")
    if ctx.analyzer is not None:
        out = ctx.analyzer.run("buckets", path)[1]
        check("rebuilt buckets" in out, "buckets on a bounded trace:\n%s", out)


def test_light_bounded_device(ctx):
    """keep=N on a path that is not a regular file (a character device, as
    /dev/null is for a dry run): written as it comes, never renamed over:
    the device stays a device, with one warning, and the writer stops
    indexing its frames.  Needs root (mknod)."""
    need_light()
    dev = os.path.join(ctx.tmp, "null")
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as e:
        raise Skip("cannot make a device node here (%s)" % e)
    script = os.path.join(ctx.tmp, "d.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import sys, torch
            from commdebug import Recorder
            rec = Recorder(sys.argv[1], light=True, keep=1)
            m = torch.nn.Linear(4, 4)
            for i in range(8):
                with rec(label="step %d" % i):
                    m(torch.randn(2, 4)).sum().backward()
            rec.flush()
            print("frames indexed: %s" % (rec._w.index is not None))
            rec.close()
        '''))
    r = subprocess.run([PYTHON, script, dev], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    eq(r.returncode, 0, "exit status (%s)" % out[-2000:])
    check(stat.S_ISCHR(os.lstat(dev).st_mode), "the device was replaced: %s", out[-2000:])
    eq(out.count("is not a regular file"), 1, "one warning (%s)" % out[-2000:])
    check("frames indexed: False" in out, "the writer still indexes its frames: %s",
          out[-2000:])


def test_record_cli_light(ctx):
    """python -m commdebug.record --every-step --light --keep 2 on an
    unmodified script (one process, a gloo group of one, an all-reduce and 8
    optimizer steps): a light trace (meta light, no op but collectives), one
    region per step, bounded to the last 2 to 4 steps with trim events."""
    need_light()
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import torch, torch.distributed as dist
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            m = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for i in range(8):
                opt.zero_grad()
                m(torch.randn(3, 4)).sum().backward()
                dist.all_reduce(m.weight.grad)
                opt.step()
            dist.destroy_process_group()
        '''))
    out = os.path.join(ctx.tmp, "traces")
    r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--every-step",
                        "--light", "--keep", "2", "--", script], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    eq(r.returncode, 0, "exit status (stderr: %s)" % r.stderr.decode()[-2000:])
    evs = events(os.path.join(out, "rank0.zst"))
    eq(evs[0].get("light"), True, "meta light")
    labels = [e.get("label") for e in evs if e["ev"] == "region_enter"]
    check(2 <= len(labels) <= 4 and labels[-1] == "step 9", "regions kept: %r", labels)
    check([e for e in evs if e["ev"] == "trim"], "no trim event")
    ops = {e["name"] for e in evs if e["ev"] == "op"}
    eq(ops, {"c10d.allreduce_.default"}, "op events")


def test_light_mode_does_not_change_the_ops(ctx):
    """A logging dispatch mode sees the same ops with and without the light
    recorder (which has no dispatch mode and none of CommDebugMode's module
    hooks: its baseline is the bare program), and the input gradients are
    the same: leaf inputs that require grad, a two-input module, activation
    checkpointing reentrant and not, three steps."""
    need_light()
    import torch
    from commdebug import Recorder
    import test_observer as O

    def run(reentrant, rec):
        torch.manual_seed(0)
        net = O.Net(reentrant)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        log = O.OpLog()
        grads = []
        for step in range(3):
            x = torch.randn(4, 8, requires_grad=True)
            y = torch.randn(4, 8, requires_grad=True)
            with log:
                if rec is not None:
                    with rec(label="step %d" % step):
                        net(x, y).sum().backward()
                else:
                    net(x, y).sum().backward()
            grads += [x.grad.clone(), y.grad.clone()]
            opt.step()
            opt.zero_grad()
        return log.ops, grads

    for reentrant in (False, True):
        want, gwant = run(reentrant, None)
        rec = Recorder(os.path.join(ctx.tmp, "l%d.zst" % reentrant), light=True)
        got, ggot = run(reentrant, rec)
        rec.close()
        if got != want:
            raise AssertionError("use_reentrant=%s: light mode changed the ops %s"
                                 % (reentrant, O.first_difference(got, want)))
        for a, b in zip(ggot, gwant):
            eq(torch.equal(a, b), True, "input gradients")
        evs = events(os.path.join(ctx.tmp, "l%d.zst" % reentrant))
        check(any(e["ev"] == "fw_pre" and e["bw"] for e in evs),
              "use_reentrant=%s: no recompute recorded" % reentrant)


def test_light_rank_never_learned(ctx):
    """A light Recorder on a {rank} path in one process with no launcher
    variable and no init_process_group: close() ends it as rank 0's trace
    (rank0.zst, no hidden name left), exit status 0, nothing on stderr but
    what a run says anyway."""
    need_light()
    script = os.path.join(ctx.tmp, "alone.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import os, sys, torch
            from commdebug import Recorder
            rec = Recorder(os.path.join(sys.argv[1], "rank{rank}.zst"), light=True)
            m = torch.nn.Linear(4, 4)
            for i in range(2):
                with rec(label="step %d" % i):
                    m(torch.randn(2, 4)).sum().backward()
            rec.close()
        '''))
    out = os.path.join(ctx.tmp, "traces")
    os.makedirs(out)
    e = env()
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
              "PMIX_RANK", "PMIX_SIZE", "COMMDEBUG_ENV_RANK", "COMMDEBUG_RECORD_JOB",
              "COMMDEBUG_RECORD_OUT"):
        e.pop(k, None)
    r = subprocess.run([PYTHON, script, out], env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    err = r.stderr.decode(errors="replace")
    eq(r.returncode, 0, "exit status (stderr: %s)" % err[-2000:])
    check("Traceback" not in err, "stderr: %s", err[-2000:])
    eq(sorted(os.listdir(out)), ["rank0.zst"], "files left")
    evs = events(os.path.join(out, "rank0.zst"))
    eq((evs[0].get("rank"), evs[0].get("light")), (0, True), "meta rank, light")
    eq(sorted(regions(evs)), [1, 2], "regions")
    eq(evs[-1]["ev"], "end", "the last event")


def _light_events(path, run):
    from commdebug import Recorder
    rec = Recorder(path, light=True)
    try:
        run(rec)
    finally:
        rec.close()
    return events(path)


def test_light_module_id_reused(ctx):
    """A module that takes the id of a dead one which had forward hooks of
    its own (its fw_done handle left behind) is recorded whole: fw_post,
    fw_done and bw_pre; and a recorded module with a forward hook that dies
    leaves no fw_done handle behind."""
    need_light()
    import gc
    import torch

    m = torch.nn.Linear(4, 4)
    other = torch.nn.Linear(4, 4)
    stale = other.register_forward_hook(lambda *a: None)

    def run(rec):
        # what a dead module's id left in the table (the new module has no hooks)
        rec._done_handles[id(m)] = (stale, '"Dead"')
        with rec:
            m(torch.randn(2, 4, requires_grad=True)).sum().backward()
    evs = _light_events(os.path.join(ctx.tmp, "reused.zst"), run)
    got = [e["ev"] for e in evs if e.get("mod") == "Linear"]
    eq(got, ["fw_pre", "fw_post", "fw_done", "bw_pre"], "events of the module")

    def run2(rec):
        h = torch.nn.Linear(4, 4)
        h.register_forward_hook(lambda *a: None)
        with rec:
            h(torch.randn(2, 4, requires_grad=True)).sum().backward()
        k = id(h)
        check(k in rec._done_handles, "no fw_done handle for a module with hooks")
        del h
        gc.collect()
        check(k not in rec._done_handles, "the dead module's fw_done handle is kept")
        check(k not in rec._lmark, "the dead module's mark is kept")
    _light_events(os.path.join(ctx.tmp, "dies.zst"), run2)


def test_light_leaf_output_next_region(ctx):
    """A module whose output is a parameter (a leaf that requires grad),
    recorded light in one `with` whose steps are next_region calls (as
    record --every-step does): one bw_pre per step, not one more each step."""
    need_light()
    import torch

    class P(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4))

        def forward(self):
            return self.w

    p = P()

    def run(rec):
        with rec(label="step 1"):
            for i in range(4):
                (p() * 2).sum().backward()
                rec.next_region(label="step %d" % (i + 2))
    per = regions(_light_events(os.path.join(ctx.tmp, "leaf.zst"), run))
    eq(sorted(per), [1, 2, 3, 4, 5], "regions")
    got = [sum(1 for e in per[k] if e["ev"] == "bw_pre" and e.get("mod") == "P")
           for k in range(1, 5)]
    eq(got, [1, 1, 1, 1], "bw_pre of P per step")
    eq([sum(1 for e in per[k] if e["ev"] == "bw_end") for k in range(1, 5)], [1, 1, 1, 1],
       "bw_end per step")
    check(p.w._backward_hooks is None or not p.w._backward_hooks,
          "hooks left on the parameter: %r", p.w._backward_hooks)


def test_light_bounded_plain(ctx):
    """keep=2 without libzstd (plain JSON Lines): bounded all the same, the
    regions kept, trim events, and no warning that it could not bound."""
    need_light()
    script = os.path.join(ctx.tmp, "p.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import sys, torch
            import commdebug._zstd
            commdebug._zstd.load = lambda: None
            from commdebug import Recorder
            rec = Recorder(sys.argv[1], light=True, keep=2)
            m = torch.nn.Linear(4, 4)
            for i in range(10):
                with rec(label="step %d" % (i + 1)):
                    m(torch.randn(2, 4)).sum().backward()
                rec.flush()
            rec.close()
        '''))
    path = os.path.join(ctx.tmp, "p.jsonl")
    r = subprocess.run([PYTHON, script, path], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    eq(r.returncode, 0, "exit status (%s)" % out[-2000:])
    check("could not bound" not in out, "bounding failed: %s", out[-2000:])
    with open(path, "rb") as f:
        eq(f.read(1), b"{", "the trace's first byte (plain JSON Lines)")
    evs = events(path)
    kept = sorted(regions(evs))
    check(2 <= len(kept) <= 4 and kept[-1] == 10, "kept regions %r", kept)
    trims = [e for e in evs if e["ev"] == "trim"]
    check(trims, "no trim event")
    eq(max(t["region"] for t in trims), kept[0] - 1, "last region trimmed")
    eq(evs[-1]["ev"], "end", "the last event")
    if ctx.analyzer is not None:
        ctx.analyzer.run("analyze", "--noise", "0", path)


def test_record_cli_light_unavailable(ctx):
    """Where light mode is unavailable (torch 1.13), record --light --keep 2
    records in full mode and says that the trace is not bounded."""
    from commdebug import _light
    if _light.available() is None:
        raise Skip("light mode is available here")
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write("import torch\nm = torch.nn.Linear(4, 2)\nm(torch.randn(3, 4)).sum().backward()\n")
    out = os.path.join(ctx.tmp, "traces")
    r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--light",
                        "--keep", "2", "--", script], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    err = r.stderr.decode(errors="replace")
    eq(r.returncode, 0, "exit status (stderr: %s)" % err[-2000:])
    check("recording in full mode, not bounded (--keep 2 needs light mode)" in err,
          "stderr: %s", err[-2000:])
    evs = events(os.path.join(out, "rank0.zst"))
    check("light" not in evs[0], "meta says light: %r", evs[0])


def test_light_kernels_out_after_close(ctx):
    """The collective kernels are in the dispatcher while a light recorder
    is open and out once the last one closed (a collective then costs what
    it did); a light recorder opened after that records collectives again."""
    need_light()
    script = os.path.join(ctx.tmp, "kernels.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(r'''
            import os, sys, torch
            import torch.distributed as dist
            from commdebug import Recorder
            from commdebug.tracefile import read_events

            def ours():
                return any("commdebug" in ln for ln in
                           torch._C._dispatch_dump("c10d::allreduce_").splitlines()
                           if ln.startswith("BackendSelect"))

            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            t = torch.ones(4)
            a = Recorder(os.path.join(sys.argv[1], "a.zst"), light=True)
            b = Recorder(os.path.join(sys.argv[1], "b.zst"), light=True)
            for rec in (a, b):
                with rec:
                    dist.all_reduce(t)
            a.close()
            print("after a", ours())
            b.close()
            print("after b", ours())
            dist.all_reduce(t)
            c = Recorder(os.path.join(sys.argv[1], "c.zst"), light=True)
            with c:
                dist.all_reduce(t)
            c.close()
            n = sum(1 for ev in read_events(c.path) if ev.get("ev") == "op")
            print("c records", n)
            dist.destroy_process_group()
        '''))
    r = subprocess.run([PYTHON, script, ctx.tmp], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    out = r.stdout.decode(errors="replace")
    eq(r.returncode, 0, "exit status (stderr: %s)" % r.stderr.decode(errors="replace")[-2000:])
    eq(out.split("\n")[:3], ["after a True", "after b False", "c records 1"], "kernels")


def test_regions_spend_no_type_versions(ctx):
    """Light and full regions, after the first, change no class: CPython
    3.13+ gives a class 1000 type versions, and past them every attribute of
    its instances is looked up the slow way for the rest of the process, so
    a recorder that assigned a class attribute per region (as the full one
    once assigned nn.Module._call_impl) would slow a long job down for good.
    The versions of nn.Module, its subclasses the model uses, Tensor and
    Parameter are the same before and after 10 regions of each mode."""
    try:
        from _testcapi import type_get_version
    except ImportError:
        raise Skip("this Python has no _testcapi.type_get_version")
    import torch
    import torch.nn as nn
    from commdebug import Recorder
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 2))
    classes = [nn.Module, nn.Sequential, nn.Linear, nn.GELU, nn.LayerNorm, torch.Tensor,
               nn.Parameter]
    modes = [("full", False)]
    try:
        need_light()
        modes.append(("light", True))
    except Skip:
        pass

    def step():
        model(torch.randn(4, 8)).sum().backward()
        model.zero_grad()
        for c in classes:      # (a version is given at the next lookup)
            getattr(c, "__init__")
        return [type_get_version(c) for c in classes]

    for name, light in modes:
        rec = Recorder(os.path.join(ctx.tmp, name + ".zst"), light=light)
        try:
            for _ in range(2):
                with rec:
                    step()
            with rec:
                before = step()
            for _ in range(10):
                with rec:
                    after = step()
        finally:
            rec.close()
        changed = [c.__name__ for c, a, b in zip(classes, before, after) if a != b]
        eq(changed, [], "%s regions: classes whose type version changed" % name)
        check(all(before), "%s: every class has a version (%r)", name, before)


KERNELS = r'''
import os, sys, torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from commdebug import Recorder, _collkernels

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
sub = dist.new_group([0])
torch.manual_seed(0)
ddp = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)),
    bucket_cap_mb=0.00001)
rec = Recorder(sys.argv[1], light=True)
for step in range(2):
    with rec:
        ddp(torch.randn(3, 4)).sum().backward()
        x = torch.ones(4)
        dist.all_reduce(x)
        dist.all_reduce(torch.ones(2, 3, dtype=torch.float64), group=sub)
        dist.all_reduce(torch.ones(5, dtype=torch.int64))
        outs = [torch.zeros(4)]
        dist.all_gather(outs, x)
        dist.all_gather_into_tensor(torch.zeros(4), x)
        dist.reduce_scatter_tensor(torch.zeros(4), torch.ones(4))
        dist.broadcast(torch.ones(3, dtype=torch.complex64), 0)
        dist.all_to_all_single(torch.zeros(4), torch.ones(4))
        dist.barrier()
        fc.wait_tensor(fc.all_reduce(torch.ones(3), "sum", sub))
        fc.wait_tensor(fc.all_gather_tensor(torch.ones(2, 2), 0, dist.group.WORLD))
        try:
            dist.all_gather_into_tensor(torch.zeros(3), torch.ones(4))
        except Exception as e:
            print("raised", type(e).__name__)
print("native", _collkernels._native[0] is not None)
rec.close()
dist.destroy_process_group()
'''


def test_light_collective_kernels_both_ways(ctx):
    """One program's collectives (DDP's buckets, c10d ops on the world group
    and on a subgroup, float, double and integer payloads, a complex one, list
    outputs, functional collectives by group name, a collective that
    raises) recorded light with the C++ collective kernels
    (_collkernel.cpp, where commdebug._gradhook is built) and with the
    Python ones (COMMDEBUG_COLLKERNEL=0): the traces hold the same events,
    and each run used the kernels it was meant to."""
    need_light()
    from _util import zstd_cli_text
    script = os.path.join(ctx.tmp, "kernels.py")
    with open(script, "w") as f:
        f.write(KERNELS)
    got = {}
    for way in ("1", "0"):
        trace = os.path.join(ctx.tmp, "k%s.zst" % way)
        r = subprocess.run([PYTHON, script, trace], env=env(COMMDEBUG_COLLKERNEL=way),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        out = r.stdout.decode(errors="replace")
        eq(r.returncode, 0, "way %s: exit status (stderr: %s)"
           % (way, r.stderr.decode(errors="replace")[-2000:]))
        got[way] = (out, [{k: v for k, v in e.items() if k not in ("t", "pid", "t0")}
                          for e in events(trace)])
        zstd_cli_text(trace)
    from commdebug._native import collkernel
    built = collkernel() is not None
    eq(got["1"][0].split("\n")[-2], "native %s" % built, "C++ kernels used where built")
    eq(got["0"][0].split("\n")[-2], "native False", "Python kernels with COMMDEBUG_COLLKERNEL=0")
    check("raised" in got["0"][0], "the bad all-gather did not raise: %s", got["0"][0])
    eq(got["1"][0], got["0"][0].replace("native False", "native %s" % built), "stdout")
    want = got["0"][1]
    ops = [e for e in want if e["ev"] == "op"]
    names = {e["name"] for e in ops}
    for n in ("c10d.allreduce_.default", "c10d.allgather_.default", "c10d.broadcast_.default",
              "c10d.barrier.default", "_c10d_functional.all_reduce.default",
              "c10d.alltoall_base_.default"):
        check(n in names, "no %s recorded: %r", n, sorted(names))
    check(len({e.get("pg") for e in ops}) >= 2, "one group only: %r", ops[:3])
    # (torch.distributed hands a complex tensor on as its real view)
    check({"torch.float64", "torch.int64"} <= {e.get("dtype") for e in ops},
          "dtypes: %r", sorted({str(e.get("dtype")) for e in ops}))
    check(any(e["ev"] == "coll" and e.get("bucket") == 1 for e in want), "no second bucket")
    got1 = got["1"][1]
    if got1 != want:
        i = next(i for i, (a, b) in enumerate(zip(got1 + [None] * len(want), want)) if a != b)
        raise AssertionError("the C++ kernels' trace differs at event %d: %s vs %s"
                             % (i, json.dumps(got1[i:i + 3]), json.dumps(want[i:i + 3])))
    ctx.note("%d events, %d collectives, the same both ways (C++ kernels %s)"
             % (len(want), len(ops), "built" if built else "not built"))
