#!/usr/bin/env python3
"""The real GPU runs in testdata/gpu (PyTorch 2.11 with CUDA, NCCL 2.28.9,
tests/gpu/check.sh; testdata/SOURCE.md) read back by the analyzer.

    check_traces.py COMMDEBUG TESTDATA_GPU

nccl-full, nccl-light (tests/gpu/nccl_job.py under the full recorder and in
light mode, the NCCL-side interposer preloaded):
  * every step's forward collectives of the mixer module, in order, are what
    the program says it issued (truth.json, counted by the program itself);
  * the two modes give the same collectives (group, seq, op, bytes, module,
    phase, region);
  * the NCCL side: every NCCL call the interposer wrote is counted, every
    tagged call is charged to a module, and the tags are exactly the (group,
    seq) of the collective op events, except the reduce-scatters, for which
    one-rank ProcessGroupNCCL makes no NCCL call;
  * the text table of NCCL traffic per module keeps its columns with the
    long module names of DDP.
nccl-plugin: the profiler plugin, loaded by NCCL, wrote the communicator
  and no call (NCCL gives a plugin no call events on a one-rank
  communicator: commdebug-nccl(7)).
fr (tests/gpu/fr_job.py): fr_job() below.
compiled (tests/gpu/compiled.py, inductor): dynamo compiled the same frames
  and graphs under light mode as without a recorder, and every step's
  all-reduce of the compiled graph, forward and backward, counts in the light
  trace (as inductor's in-place all_reduce_); the full recorder ran eagerly.
"""

import json
import os
import subprocess
import sys

CD = DATA = None    # main: the analyzer and testdata/gpu
FAILED = []

# truth.json's names -> the op the recorder sees for it
AS_OP = {"all_reduce": "c10d.allreduce_", "all_gather_into_tensor": "c10d._allgather_base_",
         "reduce_scatter_tensor": "c10d._reduce_scatter_base_", "broadcast": "c10d.broadcast_",
         "all_to_all_single": "c10d.alltoall_base_",
         "funcol.all_reduce": "c10d_functional.all_reduce"}


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def run(*args):
    r = subprocess.run([CD] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    if r.returncode != 0:
        raise SystemExit("%s %s: exit %d: %s" % (CD, " ".join(args), r.returncode,
                                                 r.stderr.decode(errors="replace")))
    return r.stdout.decode()


def lines(path):
    out = subprocess.run(["zstd", "-dcq", path], stdout=subprocess.PIPE, check=True).stdout
    return [json.loads(x) for x in out.decode().splitlines()]


def docs(text):
    """The JSON documents of analyze --json (one per region, then the NCCL
    side's), one after the other."""
    dec, i, out = json.JSONDecoder(), 0, []
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        d, i = dec.raw_decode(text, i)
        out.append(d)
    return out


def colls(trace):
    return [json.loads(x) for x in run("colls", "--json", trace).splitlines()]


def nccl_job(mode):
    d = os.path.join(DATA, "nccl-" + mode)
    trace = os.path.join(d, "rank0.zst")
    with open(os.path.join(d, "truth.json")) as f:
        truth = json.load(f)
    cs = colls(trace)
    for step, issued in enumerate(truth["per_step"]):
        got = [c["collective"] for c in cs if c["region"] == step + 1 and c["phase"] == "forward"
               and c["module"].endswith(".mixer")]
        check(got == [AS_OP[name] for _, name in issued],
              "%s step %d: the mixer's forward collectives are the program's (%s)"
              % (mode, step, got))
    nccl = None
    for doc in docs(run("analyze", "--json", trace)):
        nccl = doc.get("nccl", nccl)
    calls = [e for e in lines(os.path.join(d, "rank0.nccl.zst")) if e["ev"] == "nccl"]
    tagged = {(e["pg"], e["pseq"]) for e in calls if "pseq" in e}
    ops = {(c["pg"], c["seq"]): c["collective"] for c in cs}
    check(nccl is not None and nccl["calls"] == len(calls),
          "%s: analyze counts every NCCL call of the interposer's trace (%d)" % (mode, len(calls)))
    check(nccl is not None and nccl["charged_calls"] == nccl["tagged_calls"] == len(tagged),
          "%s: every tagged NCCL call is charged to a module" % mode)
    no_call = sorted(k for k in ops if k not in tagged)
    check(tagged <= set(ops) and no_call and
          all(ops[k] == "c10d._reduce_scatter_base_" for k in no_call),
          "%s: the NCCL calls' tags are the collectives' (group, seq); without one: %s"
          % (mode, [ops[k] for k in no_call]))
    check(nccl is not None and nccl["collectives_without_nccl_calls"] == len(no_call),
          "%s: analyze counts the collectives without an NCCL call" % mode)
    # the text table: its columns line up however long a module's name
    table = run("analyze", trace).split("NCCL traffic per module (region 1")[1].splitlines()[1:]
    rows = [x for x in table[1:] if x.strip()][:22]
    at = table[0].index("Direction")
    check(len(rows) == 22 and all(x[at - 1] == " " and x[at:at + 9].strip() in
                                  ("forward", "backward") for x in rows),
          "%s: the module table's directions all under its header" % mode)
    return [(c["pg"], c["seq"], c["collective"], c["bytes"], c["module"], c["phase"], c["region"])
            for c in cs]


def fr_job():
    """The light trace of tests/gpu/fr_job.py joined with its NCCL Flight
    Recorder dumps: the records joined are exactly those created inside the
    trace's regions (by the two files' own clocks), each of its collective's
    kind and size, in order; the in-flight one is "scheduled" in the dump
    taken while it waited and "completed" in the one taken at exit."""
    import pickle
    d = os.path.join(DATA, "fr")
    trace = os.path.join(d, "rank0.zst")
    ev = lines(trace)
    t0 = ev[0]["t0"]
    spans, enter = [], None
    for e in ev:
        if e["ev"] == "region_enter":
            enter = t0 + e["t"]
        elif e["ev"] == "region_exit":
            spans.append((enter, t0 + e["t"]))
    with open(os.path.join(d, "inflight", "fr_rank0"), "rb") as f:
        entries = pickle.load(f)["entries"]
    inside = [x["record_id"] for x in entries
              if any(a <= x["time_created_ns"] <= b for a, b in spans)]
    by_id = {x["record_id"]: x for x in entries}
    family = {"c10d.allreduce_": "nccl:all_reduce", "c10d.broadcast_": "nccl:broadcast"}
    size = {"Float": 4, "Int": 4, "Long": 8}
    joined = {}
    for sub in ("inflight", "inflight-json", "exit", "exit-json"):
        cs = [json.loads(x) for x in
              run("colls", "--json", trace, os.path.join(d, sub, "fr_rank0")).splitlines()]
        fr = [c.get("flight_recorder") or {} for c in cs]
        joined[sub] = [x.get("record_id") for x in fr]
        check(joined[sub] == inside, "fr %s: the records joined are those made in the "
              "trace's regions (%s; %s)" % (sub, joined[sub], inside))
        ok = all(x.get("record_id") in by_id and
                 by_id[x["record_id"]]["profiling_name"] == family.get(c["collective"]) and
                 c["bytes"] == size[by_id[x["record_id"]]["input_dtypes"][0]] *
                 _numel(by_id[x["record_id"]]["input_sizes"][0])
                 for c, x in zip(cs, fr))
        check(ok, "fr %s: each record is of its collective's kind and size" % sub)
        want = "scheduled" if sub.startswith("inflight") else "completed"
        check(fr and fr[-1].get("state") == want,
              "fr %s: the last collective (step 3's, in flight) is %s" % (sub, want))


def _numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def compiled_the_same(x):
    """What dynamo and AOTAutograd compiled, from their counters: without
    the caches' hits and misses (a second compile in one process finds the
    first's) and the counters left empty (tests/gpu/compiled.py too)."""
    return {k: {n: v for n, v in sub.items() if "cache" not in n} for k, sub in x.items() if sub}


def main():
    global CD, DATA
    CD, DATA = sys.argv[1], sys.argv[2]
    full = nccl_job("full")
    light = nccl_job("light")
    check(full == light, "full and light record the same collectives (%d)" % len(full))

    fr_job()
    ev = lines(os.path.join(DATA, "nccl-plugin", "rank0.nccl.zst"))
    check("profiler plugin" in ev[0].get("recorder", "") and
          [e["ev"] for e in ev[1:]] == ["nccl_comm"] and ev[1]["nranks"] == 1,
          "plugin: the one-rank communicator, no call")

    d = os.path.join(DATA, "compiled")
    with open(os.path.join(d, "counters.json")) as f:
        c = json.load(f)

    check(c["plain"]["stats"]["unique_graphs"] >= 1 and
          compiled_the_same(c["light"]) == compiled_the_same(c["plain"]),
          "compiled: light mode compiles the same frames and graphs as no recorder")
    check("unique_graphs" not in c["full"].get("stats", {}),
          "compiled: under the full recorder dynamo ran eagerly")
    names = {e["name"] for e in lines(os.path.join(d, "light.zst")) if e["ev"] == "op"}
    check(names == {"_c10d_functional.all_reduce_.default"},
          "compiled: light mode saw inductor's in-place all-reduce (%s)" % sorted(names))
    for trace in ("light.zst", "full.zst"):
        out = run("counts", os.path.join(d, trace))
        want = "".join("# region %d: step %d\ntotal: 2\nc10d_functional.all_reduce: 2\n"
                       % (i + 1, i) for i in range(3))
        check(out == want, "compiled: counts of %s: one all-reduce forward, one backward, "
              "each step" % trace)
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
