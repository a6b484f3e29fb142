#!/usr/bin/env python3
"""What recording costs: plain vs light vs full recorder (and the full
recorder with torch's own BackwardHook, as before commdebug/_leanbw.py) vs a
do-nothing dispatch mode vs CommDebugMode, on two workloads, ratios from one
run.

    tests/torch2/env.sh run python3 tests/bench/recorder.py [--rounds R] [--steps K]
                                                            [--only gpt2|light|once|blocks|pieces|split|
                                                                   colls|instr]
                                                            [--variants plain,light,...]

(tests/bench/recorder.sh runs it in the torch 2.14 root.)

* gpt2: a 2-rank gloo DistributedDataParallel Hugging Face GPT-2 (4 layers,
  64 wide, 4 heads, vocabulary 512, batch 2 x 32), forward + backward + SGD
  step, one region per step under the recorders (one CommDebugMode per step).
  Both ranks run the variants in the same interleaved order, K steps each,
  R rounds (at most 400 in one pair of processes, a longer run in several:
  ROUNDS_PER_PROCESS).  Reported per variant: the median wall and CPU
  (process: every thread) time per step, and the median over rounds of its
  ratio to the plain step of the same round, with its 95% confidence
  interval (order statistics, nothing assumed of the distribution) and the
  spread (25th-75th percentile); and per rank, as the light section does, each variant's low
  quantiles of the training thread's CPU per step against plain's.
* light: the gpt2 step in one process (a one-rank group), plain and light
  mode with and without its parts (the C module, its nn.Module call; cut
  one after another, and the bw_pre hooks cut alone): the CPU time each
  adds per step, the median of per-round differences;
  and, steadier, each variant's low quantiles (2nd-20th percentile) of the
  training thread's CPU per step against plain's.
* once: the gpt2 step in one process under light mode: the training
  thread's CPU in each part of light mode's work done once a step (a
  region's enter and exit, a collective's events, the frame written before
  it and that frame's write(2)) per call and per step, against the same
  parts called in a loop of regions of one all_reduce of 4 floats (whose
  frames are a few hundred bytes where a step's are about 30 KB); and the
  writer thread's rounds (compressing the raw frames) per step.
* blocks: one process, 8 blocks of Linear(64) + GELU + LayerNorm, batch 16,
  forward + backward, one region per step.  Reported: the time each variant
  adds per dispatched op over plain, and its ratio to the do-nothing mode's.
* pieces: the blocks workload under the full recorder with its module-hook
  work taken out piece by piece (markers, identity nodes, bw_exit, the
  views' events and checks, the module hooks): what each costs, and the
  floor with all of it returning at once.
* split: the blocks workload in regions of two steps, plain, the
  do-nothing mode and the full recorder, each part timed on its own (the
  region's enter and exit, each step's forward and backward): the added
  time of a one-step region split into the region's share (enter, exit and
  the first step's extra), the forward's and the backward's.
* colls: one process, a gloo all_reduce of 4 floats: what each source of
  collectives costs per collective (a BackendSelect kernel that only hands the
  call on, the light recorder, a ProcessGroup pre-hook, a Python wrapper of
  dist.all_reduce, a do-nothing dispatch mode), and reading PyTorch's Flight
  Recorder buffer (_dump_fr_trace_json) once per step.
* instr (only when asked for: --only instr, a few minutes): instructions per
  step under valgrind's callgrind, each variant in a process of its own,
  plain, light and the full recorder on both workloads (the do-nothing mode
  on blocks), with the ratios the time columns give.  The count is the same
  from run to run, where time here moves by several per cent from one
  process to the next; it leaves out what an instruction costs (cache
  misses, system calls), of which callgrind's cache and branch models give
  the training thread's first-level instruction-cache misses and
  mispredicted branches per step.  Light mode also runs with torch's Python
  gradient hooks (lightpyhooks).  tests/bench/recorder.sh --only instr runs
  it with valgrind (tests/torch2/env.sh grind).

Timings vary with the load of the machine: every variant runs in every
round, next to the others, in an order drawn for each round, and ratios are
taken within a round.  A variant runs SETTLE steps untimed each time it
takes over from another, as a job turns a recorder on once.  Nothing here
passes or fails on time.
"""

import argparse
import contextlib
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

VARIANTS = ["plain", "light", "lightwrite", "lightpykernels", "lightpy", "lightpyhooks",
            "lightglobal", "full", "fullpy",
            "fullslow", "fulltorch", "nothing", "hooks", "cdm"]
LABELS = {"plain": "plain", "light": "light recorder", "full": "full recorder",
          "lightpy": "light, no C module", "lightglobal": "light, global module hooks",
          "lightpyhooks": "light, torch's Python gradient hooks",
          "lightwrite": "light, frames by write(2)",
          "lightpykernels": "light, Python collective kernels",
          "fullpy": "full, no C module", "fullslow": "full, torch's module call",
          "fulltorch": "full, torch's BackwardHook",
          "nothing": "do-nothing dispatch mode", "cdm": "CommDebugMode",
          "hooks": "do-nothing mode + CDM hooks"}


def quartiles(v):
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4)
    return q[0], q[2]


def median_ci(v):
    """A 95% confidence interval of the median of v that assumes nothing of
    its distribution (the rounds are independent draws): the order
    statistics at n/2 -+ 0.98 sqrt(n) (the sign test's normal
    approximation); the extremes where n is too small for one."""
    s = sorted(v)
    n = len(s)
    half = 0.98 * n ** 0.5
    return s[max(0, math.floor(n / 2 - half))], s[min(n - 1, math.ceil(n / 2 + half))]


# Steps each variant runs untimed whenever it takes over from another, before
# its timed steps.  Switching variants (every round here, never in a job)
# puts hooks on nn.Module, kernels in the dispatcher or a mode on the stack
# and takes them off again; the first step after a switch pays for that
# (the interpreter's attribute caches of every module class start over, the
# dispatcher's tables of the collectives change): up to 4 ms on the gpt2
# step.  A job turns a recorder on once.
SETTLE = 2


def nothing_mode():
    """The do-nothing dispatch mode every section measures against: a
    TorchDispatchMode whose __torch_dispatch__ only runs the op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class NothingMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    return NothingMode


def run_steps(step, ctx, k):
    """k steps, each in its own ctx() (a region) unless ctx is None."""
    for _ in range(k):
        if ctx is None:
            step()
        else:
            with ctx():
                step()


# The light section's per-step record: {variant: [the training thread's CPU
# seconds of each timed step]}, for the variant named in _current.
_step_cpu = {}
_current = [None]


def keep_steps(runs):
    """Each of runs ({variant: run(k)}) made to keep its timed steps' CPU in
    _step_cpu[variant], from its second call on (rounds() warms every
    variant up with a first one)."""
    def keeping(v, run):
        calls = [0]

        def kept(k):
            calls[0] += 1
            _current[0] = v if calls[0] > 1 else None
            try:
                return run(k)
            finally:
                _current[0] = None
        return kept
    for v in list(runs):
        _step_cpu[v] = []
        runs[v] = keeping(v, runs[v])


def timed_steps(step, ctx, k):
    """run_steps(step, ctx, k), each step's training-thread CPU time appended
    to _step_cpu[_current[0]] where a section keeps them."""
    out = _step_cpu.get(_current[0])
    if out is None:
        run_steps(step, ctx, k)
        return
    for _ in range(k):
        m = time.thread_time()
        run_steps(step, ctx, 1)
        out.append(time.thread_time() - m)


def light_off(rec):
    """Take a light recorder's module hooks and collective kernels off,
    outside the timing of its variant: they stay from its first region to
    its close (returning at once outside its regions), and the other
    variants must run without them."""
    from commdebug import _collkernels
    for h in rec._lhandles:
        h.remove()
    rec._lhandles = []
    _collkernels.uninstall()


def light_on(rec):
    """Put them back."""
    from commdebug import _collkernels, _light, _modcall
    var, value = getattr(rec, "_bench_env", (None, None))
    if var is not None:
        os.environ[var] = value
    try:
        _collkernels.install()
        if rec._lhooks is not None and not rec._lhandles:
            rec._lhandles = _modcall.on(rec._lhooks, _light._is_compiling())
    finally:
        if var is not None:
            del os.environ[var]


def light_variant(tmp, name, var=None, value=None):
    """A light recorder made and started (with var=value in the environment),
    its hooks off (light_on puts them on again as they were made)."""
    from commdebug import Recorder
    if var is not None:
        os.environ[var] = value
    try:
        rec = Recorder(os.path.join(tmp, name), light=True)
        with rec:
            pass
    finally:
        if var is not None:
            del os.environ[var]
    light_off(rec)
    rec._bench_env = (var, value)
    return rec


def drop_done_hooks(rec):
    """Take off the module-local fw_done hooks a full recorder without
    LeanBackwardHook leaves on every module it saw (it puts them back at
    its next region), outside the timing of its variant: with them there,
    every other variant's module calls take nn.Module's slow path."""
    for handle, _ in rec._done_handles.values():
        handle.remove()
    rec._done_handles.clear()


def full_variant(tmp, name, var, value):
    """A full recorder whose first region ran with var=value in the
    environment (it decides then what it uses for its life)."""
    from commdebug import Recorder
    rec = Recorder(os.path.join(tmp, name))
    os.environ[var] = value
    try:
        with rec:
            pass
    finally:
        del os.environ[var]
    return rec


def make_variants(step, tmp, rank, hooks=False):
    """{name: run(k) -> (wall s, cpu s, the training thread's cpu s) per
    step} for the variants (with
    hooks: also the do-nothing mode with CommDebugMode's module hooks, doing
    nothing, as tests/golden/programs/oplog.py installs them)."""
    import torch
    from commdebug import Recorder

    NothingMode = nothing_mode()

    light = light_variant(tmp, "light-rank%d.zst" % rank)
    # light mode without commdebug._speedups, as where it is not built; with
    # torch's global module hooks in place of its nn.Module call (_modcall)
    lightpy = light_variant(tmp, "lightpy-rank%d.zst" % rank, "COMMDEBUG_SPEEDUPS", "0")
    lightglobal = light_variant(tmp, "lightglobal-rank%d.zst" % rank, "COMMDEBUG_MODULE_CALL",
                                "torch")
    # its bw_pre hooks through torch's Python API, as where commdebug._gradhook
    # is not built
    lightpyhooks = light_variant(tmp, "lightpyhooks-rank%d.zst" % rank, "COMMDEBUG_GRADHOOK",
                                 "0")
    # its file's end not padded and mapped (_padtail): every frame appended
    # with write(2), the file cut after each compaction
    lightwrite = light_variant(tmp, "lightwrite-rank%d.zst" % rank, "COMMDEBUG_PAD_TAIL", "0")
    # its collective kernels in Python, as where commdebug._gradhook is not built
    lightpykernels = light_variant(tmp, "lightpykernels-rank%d.zst" % rank,
                                   "COMMDEBUG_COLLKERNEL", "0")
    full = Recorder(os.path.join(tmp, "full-rank%d.zst" % rank))
    # without the C module; with torch's own nn.Module call (its slow path,
    # for the recorder's global hooks); as it was before LeanBackwardHook
    # (commdebug/_leanbw.py): torch's own wrappers around every module call
    # (each decided at the recorder's first region)
    fullpy = full_variant(tmp, "fullpy-rank%d.zst" % rank, "COMMDEBUG_SPEEDUPS", "0")
    fullslow = full_variant(tmp, "fullslow-rank%d.zst" % rank, "COMMDEBUG_MODULE_CALL", "torch")
    fulltorch = full_variant(tmp, "fulltorch-rank%d.zst" % rank, "COMMDEBUG_LEAN_BW", "0")
    try:
        from torch.distributed.tensor.debug import CommDebugMode
    except Exception:
        CommDebugMode = None

    def timed(k, ctx, rec=None, done_hooks=None):
        if rec is not None:
            light_on(rec)
        try:
            run_steps(step, ctx, SETTLE)
            c0, m0 = time.process_time(), time.thread_time()
            t0 = time.perf_counter()
            timed_steps(step, ctx, k)
            return ((time.perf_counter() - t0) / k, (time.process_time() - c0) / k,
                    (time.thread_time() - m0) / k)
        finally:
            if rec is not None:
                light_off(rec)
            if done_hooks is not None:
                drop_done_hooks(done_hooks)

    runs = {
        "plain": lambda k: timed(k, None),
        "light": lambda k: timed(k, lambda: light, light),
        "lightpy": lambda k: timed(k, lambda: lightpy, lightpy),
        "lightglobal": lambda k: timed(k, lambda: lightglobal, lightglobal),
        "lightpyhooks": lambda k: timed(k, lambda: lightpyhooks, lightpyhooks),
        "lightwrite": lambda k: timed(k, lambda: lightwrite, lightwrite),
        "lightpykernels": lambda k: timed(k, lambda: lightpykernels, lightpykernels),
        "full": lambda k: timed(k, lambda: full),
        "fullpy": lambda k: timed(k, lambda: fullpy),
        "fullslow": lambda k: timed(k, lambda: fullslow),
        "fulltorch": lambda k: timed(k, lambda: fulltorch, done_hooks=fulltorch),
        "nothing": lambda k: timed(k, NothingMode),
    }
    if CommDebugMode is not None:
        runs["cdm"] = lambda k: timed(k, CommDebugMode)
    if hooks:
        sys.path.insert(0, os.path.join(REPO, "tests", "golden", "programs"))
        from oplog import install_hooks

        class Hooked(NothingMode):
            def __enter__(self):
                self._h = install_hooks()
                return super().__enter__()

            def __exit__(self, *exc):
                try:
                    return super().__exit__(*exc)
                finally:
                    for h in self._h:
                        h.remove()
        runs["hooks"] = lambda k: timed(k, Hooked)
    return runs, (light, lightpy, lightglobal, full, fullpy, fullslow, fulltorch, lightpyhooks,
                  lightwrite, lightpykernels)


# Variants a job runs with torch's own nn.Module._call_impl; the others with
# the recorders' (commdebug/_modcall.py), which a job puts in once.  Each
# switch between the two gives nn.Module and every subclass a new type
# version, of the 1000 CPython gives a class before its attributes are looked
# up the slow way for good (see _modcall): a round runs the variants of one
# kind, then those of the other, so that a run switches twice per round.
TORCH_CALL = {"plain", "nothing", "cdm", "hooks", "fullslow", "fulltorch", "lightglobal", "cut-call"}

# Rounds one process runs at most: each round switches nn.Module's call
# twice (see TORCH_CALL), and past about 1000 switches in a process every
# module attribute is looked up the slow way (2.5x here), in plain and in
# the recorders alike; the gpt2 section runs a longer run in batches, each
# in new processes.
ROUNDS_PER_PROCESS = 400


def _torch_call():
    """torch's own nn.Module call (where the recorders' is in)."""
    from commdebug import _modcall
    import torch.nn.modules.module as nnm
    if nnm.Module._call_impl is not _modcall._TORCH_CALL:
        nnm.Module._call_impl = _modcall._TORCH_CALL


class _OursHeld:
    """The recorders' call kept in while the variants that use it run (a
    light variant's hooks come off after each of its rounds; without this,
    torch's call would come back each time)."""

    def __enter__(self):
        from commdebug import _modcall
        _modcall._held[0] += 1

    def __exit__(self, *exc):
        from commdebug import _modcall
        _modcall._held[0] -= 1
        _torch_call()


def rounds(runs, n_rounds, k):
    """Every variant k steps per round, in an order drawn anew for each
    round (the same on every rank: a seeded generator), so that no variant
    always runs after the same one: the variants of torch's module call and
    those of the recorders', one kind after the other, in an order drawn too."""
    if n_rounds > ROUNDS_PER_PROCESS:
        raise SystemExit("at most %d rounds in one process (each switches nn.Module's call "
                         "twice; see ROUNDS_PER_PROCESS)" % ROUNDS_PER_PROCESS)
    names = [v for v in VARIANTS if v in runs]
    for v in names:          # warm up (DDP rebuilds its buckets, caches fill)
        with _OursHeld():
            runs[v](2)
    res = {v: [] for v in names}
    order = random.Random(20261126)
    torch_call = [v for v in names if v in TORCH_CALL]
    ours = [v for v in names if v not in TORCH_CALL]
    for _ in range(n_rounds):
        kinds = [(False, order.sample(torch_call, len(torch_call))),
                 (True, order.sample(ours, len(ours)))]
        for held, vs in order.sample(kinds, 2):
            with _OursHeld() if held else contextlib.nullcontext():
                for v in vs:
                    res[v].append(runs[v](k))
    return res


def summary(res):
    """{variant: (wall ms, cpu ms, wall ratio, (q1, q3), cpu ratio, (q1, q3),
    (the wall ratio's 95% interval), (the CPU ratio's))}"""
    out = {}
    for v, xs in res.items():
        w = [a[0] / b[0] for a, b in zip(xs, res["plain"])]
        c = [a[1] / b[1] for a, b in zip(xs, res["plain"])]
        out[v] = (statistics.median(a[0] for a in xs) * 1e3,
                  statistics.median(a[1] for a in xs) * 1e3,
                  statistics.median(w), quartiles(w), statistics.median(c), quartiles(c),
                  median_ci(w), median_ci(c))
    return out


# --------------------------------------------------------------------- gpt2
def gpt2_step():
    """The GPT-2 DDP training step (the process group is up)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=64, n_head=4, n_positions=64, vocab_size=512,
                     attn_implementation="eager")
    model = torch.nn.parallel.DistributedDataParallel(GPT2LMHeadModel(cfg))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, cfg.vocab_size, (2, 32))

    def step():
        opt.zero_grad()
        model(ids, labels=ids).loss.backward()
        opt.step()
    return step


def gpt2_rank(args):
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    step = gpt2_step()
    tmp = os.environ["BENCH_TMP"]
    runs, recs = make_variants(step, tmp, rank)
    keep_steps(runs)
    res = rounds(runs, args.rounds, args.steps)
    for r in recs:
        r.close()
    import json
    with open(os.path.join(tmp, "gpt2-rank%d.json" % rank), "w") as f:
        json.dump({"rounds": res, "steps": _step_cpu}, f)
    dist.barrier()
    dist.destroy_process_group()


def gpt2_batch(args, n_rounds, tmp):
    """One pair of rank processes running n_rounds rounds: each rank's
    {"rounds": {variant: [...]}, "steps": {variant: [...]}}."""
    import json
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), BENCH_TMP=tmp, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-of",
                                       "gpt2", "--rounds", str(n_rounds), "--steps",
                                       str(args.steps), "--variants", ",".join(VARIANTS)],
                                      env=env,
                                      stderr=subprocess.PIPE))
    errs = [p.communicate()[1] for p in procs]
    if any(p.returncode for p in procs):
        for r, e in enumerate(errs):
            sys.stderr.write("rank %d:\n%s\n" % (r, e.decode(errors="replace")[-3000:]))
        raise SystemExit("gpt2: a rank failed")
    out = []
    for r in range(2):
        with open(os.path.join(tmp, "gpt2-rank%d.json" % r)) as f:
            out.append(json.load(f))
    return out


def gpt2(args):
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    got = [{"rounds": {}, "steps": {}} for _ in range(2)]
    left = args.rounds
    batches = 0
    while left > 0:
        n = min(left, ROUNDS_PER_PROCESS)
        for acc, b in zip(got, gpt2_batch(args, n, tmp)):
            for part in ("rounds", "steps"):
                for v, xs in b[part].items():
                    acc[part].setdefault(v, []).extend(xs)
        left -= n
        batches += 1
    print("gpt2: 2-rank gloo DDP GPT-2 (4 layers, 64 wide), forward + backward + SGD, "
          "one region per step; %d rounds of %d steps per variant (%d pair%s of processes)"
          % (args.rounds, args.steps, batches, "s" if batches > 1 else ""))
    steps = []
    for r in range(2):
        steps.append(got[r]["steps"])
        sm = summary(got[r]["rounds"])
        print("rank %d %-24s %9s %9s %34s %34s" % (r, "", "wall ms", "CPU ms",
                                                    "wall ratio [95%] (IQR)",
                                                    "CPU ratio [95%] (IQR)"))
        for v, (w, c, wr, wq, cr, cq, wi, ci) in sm.items():
            print("       %-24s %9.2f %9.2f %8.3f [%.3f-%.3f] (%.3f-%.3f) %8.3f [%.3f-%.3f] "
                  "(%.3f-%.3f)" % (LABELS[v], w, c, wr, wi[0], wi[1], wq[0], wq[1],
                                   cr, ci[0], ci[1], cq[0], cq[1]))
    print("[95%]: the median ratio's confidence interval over the rounds (a sign "
          "test's order statistics)")
    for r in range(2):
        print("rank %d:" % r)
        _step_cpu.clear()
        _step_cpu.update(steps[r])
        low_quantiles([(LABELS[v], v) for v in VARIANTS if v != "plain" and v in steps[r]])
    print()


# -------------------------------------------------------------------- light
LIGHT_PARTS = ["plain", "light", "lightwrite", "lightpykernels", "lightpyhooks", "lightpy",
               "lightglobal"]
# light mode taken apart: its recorder with parts replaced by ones doing
# nothing (each also without what the ones above it took out)
LIGHT_CUTS = [("collectives' events and frames", "colls"),
              ("the bw_pre gradient hooks", "attach"),
              ("the hooks' work (called, doing nothing)", "hooks"),
              ("the module call and its hooks", "call")]
# and one part taken out alone (the rest of light mode kept): the cuts above
# are not additive, a step's caches being shared by all its parts
LIGHT_ALONE = [("the bw_pre hooks alone (collectives kept)", "attach"),
               ("tuple outputs but their first tensor", "first")]


def _cut(rec, what, hooks):
    """Put light mode's hooks on with its parts after `what` in LIGHT_CUTS
    replaced by ones doing nothing (hooks: _light._make_hooks's); what
    "alone-X": only the part X of LIGHT_ALONE."""
    from commdebug import _collkernels, _modcall
    cuts = [c for _, c in LIGHT_CUTS]
    if what.startswith("alone-"):
        gone = {what[len("alone-"):]}
    else:
        gone = set(cuts[:cuts.index(what) + 1])
    h = list(hooks)
    if "colls" in gone:
        # (the Python kernels' call, and the C++ kernels': read at each
        # region's start)
        rec._light_collective = lambda op, keyset, args, kwargs: op.redispatch(keyset, *args,
                                                                               **kwargs)
        rec._light_coll_native = lambda *a: None
        rec._light_coll_args = lambda *a: None
    if "attach" in gone:
        post = hooks[4]
        h[4] = lambda mod, inputs, output: post(mod, inputs, None)
    if "first" in gone:
        # (a module returning several tensors that require grad gets the
        # hook of one: what the hook they share costs)
        post = hooks[4]
        h[4] = lambda mod, inputs, output: post(
            mod, inputs, output[0] if type(output) is tuple and len(output) > 1 else output)
    if "hooks" in gone:
        h[3] = lambda mod, inputs: None
        h[4] = lambda mod, inputs, output: None
    _collkernels.install()
    rec._lhandles = [] if "call" in gone else _modcall.on(h, lambda: False)


def light(args):
    """The GPT-2 step in one process (a one-rank group): what light mode
    adds per step, without each of its parts, and taken apart, as the median
    of the per-round differences with plain (less noise than two ranks
    sharing two cores)."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    step = gpt2_step()
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    runs, recs = make_variants(step, tmp, 0)
    runs = {v: f for v, f in runs.items() if v in LIGHT_PARTS}
    cut = recs[0]
    hooks = cut._lhooks

    def run_cut(what):
        def run(k):
            _cut(cut, what, hooks)
            try:
                run_steps(step, lambda: cut, SETTLE)
                c0 = time.process_time()
                timed_steps(step, lambda: cut, k)
                return 0.0, (time.process_time() - c0) / k
            finally:
                for k in ("_light_collective", "_light_coll_native", "_light_coll_args"):
                    cut.__dict__.pop(k, None)
                light_off(cut)
        return run
    for what in [w for _, w in LIGHT_CUTS] + ["alone-" + w for _, w in LIGHT_ALONE]:
        runs["cut-" + what] = run_cut(what)
        VARIANTS.append("cut-" + what)

    keep_steps(runs)
    res = rounds(runs, args.rounds, args.steps)
    for r in recs:
        r.close()
    dist.destroy_process_group()
    plain = [x[1] for x in res["plain"]]
    print("light: the GPT-2 step in one process (one-rank gloo DDP), light mode's parts; "
          "%d rounds of %d steps; plain %.2f ms CPU per step (the writer thread included)"
          % (args.rounds, args.steps, statistics.median(plain) * 1e3))
    rows = [(LABELS[v], v) for v in LIGHT_PARTS[1:]] + \
        [("light, without " + label, "cut-" + what) for label, what in LIGHT_CUTS] + \
        [("light, without " + label, "cut-alone-" + what) for label, what in LIGHT_ALONE]
    for label, v in rows:
        if v not in res:
            continue
        d = [x[1] - p for x, p in zip(res[v], plain)]
        q = quartiles(d)
        print("  %-58s +%.3f ms (IQR %.3f-%.3f), %.3fx plain"
              % (label, statistics.median(d) * 1e3, q[0] * 1e3, q[1] * 1e3,
                 1 + statistics.median(d) / statistics.median(plain)))
    low_quantiles(rows)
    print()


LOW_QS = (0.02, 0.05, 0.1, 0.2)


def low_quantiles(rows):
    """The light section's second measure: each variant's low quantiles of
    the training thread's CPU per step, over every timed step of every
    round, against plain's.  Other load on the machine only makes a step
    slower, so a step's low quantiles move less with it than its median."""
    base = sorted(_step_cpu.get("plain", []))
    if not base:
        return

    def at(xs, q):
        return xs[int(q * (len(xs) - 1))]
    print("  the training thread's CPU per step, low quantiles (%d steps each): plain %s ms"
          % (len(base), " ".join("%.2f" % (at(base, q) * 1e3) for q in LOW_QS)))
    print("  %-58s %s" % ("x plain at", " ".join("%6s" % ("q%.2f" % q) for q in LOW_QS)))
    for label, v in rows:
        xs = sorted(_step_cpu.get(v, []))
        if xs:
            print("  %-58s %s" % (label, " ".join("%6.3f" % (at(xs, q) / at(base, q))
                                                   for q in LOW_QS)))


# ------------------------------------------------------------------- blocks
def blocks_step():
    """One step of the 8-block workload (forward and backward)."""
    import torch
    import torch.nn as nn
    torch.set_num_threads(1)
    torch.manual_seed(0)
    width = 64
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU(),
                                          nn.LayerNorm(width)) for _ in range(8)])
    x = torch.randn(16, width)

    def step():
        model(x).sum().backward()
    step.model, step.x = model, x
    return step


def blocks(args):
    import torch
    import torch.nn as nn
    from torch.utils._python_dispatch import TorchDispatchMode
    torch.set_num_threads(1)
    torch.manual_seed(0)
    step = blocks_step()

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))
    with Count():
        step()
    ops = Count.n
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    runs, recs = make_variants(step, tmp, 0, hooks=True)
    res = rounds(runs, args.rounds, args.steps)
    for r in recs:
        r.close()
    print("blocks: 8 x (Linear(64) + GELU + LayerNorm), batch 16, forward + backward, one "
          "region per step, %d ops per step; %d rounds of %d steps per variant"
          % (ops, args.rounds, args.steps))
    print("%-26s %9s %9s %17s %17s %22s" % ("", "wall ms", "CPU ms", "wall us/op added",
                                            "CPU us/op added", "x do-nothing (wall, CPU)"))
    sm = summary(res)
    added = {}
    for v, xs in res.items():
        w = [(a[0] - b[0]) / ops * 1e6 for a, b in zip(xs, res["plain"])]
        c = [(a[1] - b[1]) / ops * 1e6 for a, b in zip(xs, res["plain"])]
        added[v] = (w, c)
    for v in res:
        w, c = added[v]
        rw = [a / b for a, b in zip(w, added["nothing"][0])] if v != "plain" else [0]
        rc = [a / b for a, b in zip(c, added["nothing"][1])] if v != "plain" else [0]
        print("%-26s %9.3f %9.3f %17.2f %17.2f %10.2f %10.2f"
              % (LABELS[v], sm[v][0], sm[v][1], statistics.median(w), statistics.median(c),
                 statistics.median(rw), statistics.median(rc)))
    q = quartiles([a / b for a, b in zip(added["full"][1], added["nothing"][1])])
    print("full recorder / do-nothing mode, CPU per op added: spread %.2f-%.2f over rounds"
          % q)
    # the training thread's CPU alone: the writer threads' compressing runs beside it
    t = [((f[2] - p[2]) / (n[2] - p[2])) for f, n, p in zip(res["full"], res["nothing"],
                                                             res["plain"])]
    print("full recorder / do-nothing mode, the training thread's CPU per op added: %.2f "
          "(spread %.2f-%.2f)" % ((statistics.median(t),) + quartiles(t)))
    for other, what in (("hooks", "do-nothing mode with CommDebugMode's module hooks (the "
                                  "program CommDebugMode shows)"),
                        ("fulltorch", "the same with torch's BackwardHook")):
        if other not in added:
            continue
        r = [a / b for a, b in zip(added["full"][1], added[other][1])]
        print("full recorder / %s, CPU per op added: %.2f (spread %.2f-%.2f)"
              % ((what, statistics.median(r)) + quartiles(r)))
    print()
    ops_only(args)


def ops_only(args):
    """The per-op path alone: 2000 in-place adds in one region, no module."""
    import torch
    from commdebug import Recorder
    y = torch.zeros(4)
    n = 2000

    def ops():
        for _ in range(n):
            y.add_(1)

    NothingMode = nothing_mode()

    rec = Recorder(os.path.join(tempfile.mkdtemp(prefix="commdebug-bench-"), "ops.zst"))

    def nothing():
        with NothingMode():
            ops()

    def full():
        with rec:
            ops()
    fns = {"plain": ops, "nothing": nothing, "full": full}
    for f in fns.values():
        f()
    res = {k: [] for k in fns}
    for _ in range(args.rounds * 3):
        for k, f in fns.items():
            c0 = time.process_time()
            f()
            res[k].append(time.process_time() - c0)
    rec.close()
    base = res["plain"]
    add = {k: [(a - b) / n * 1e6 for a, b in zip(v, base)] for k, v in res.items()}
    ratio = [a / b for a, b in zip(add["full"], add["nothing"])]
    print("ops: %d x Tensor.add_, one region, no module (the per-op path alone); %d rounds"
          % (n, args.rounds * 3))
    print("  do-nothing mode adds %.2f us/op CPU, the full recorder %.2f (writer thread "
          "included): ratio %.2f (spread %.2f-%.2f)"
          % ((statistics.median(add["nothing"]), statistics.median(add["full"]),
              statistics.median(ratio)) + quartiles(ratio)))
    print()


# ------------------------------------------------------------------- pieces
def pieces(args):
    """The full recorder on the 8-block workload with its module-hook work
    taken out piece by piece (cumulatively), main thread CPU per step: what
    each piece costs, and what is left with none of it (the floor of the
    module call, the per-op path).  The pieces are its Python (a recorder
    without the C module, whose module call does them in one function);
    the C module's figure is the last line."""
    import torch
    import torch.nn as nn
    from commdebug import Recorder, _leanbw
    if not _leanbw.available():
        print("pieces: this torch has no LeanBackwardHook; skipped\n")
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.LayerNorm(64))
                            for _ in range(8)])
    x = torch.randn(16, 64)

    def step():
        model(x).sum().backward()

    NothingMode = nothing_mode()

    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    rec = full_variant(tmp, "pieces.zst", "COMMDEBUG_SPEEDUPS", "0")
    crec = Recorder(os.path.join(tmp, "pieces-c.zst"))
    L = _leanbw.LeanBackwardHook
    orig = (_leanbw.place, _leanbw._alias, _leanbw.exit_line, L.setup_input_hook,
            L.setup_output_hook)

    def level(n):
        (_leanbw.place, _leanbw._alias, _leanbw.exit_line, L.setup_input_hook,
         L.setup_output_hook) = orig
        rec.__dict__.pop("_fw_pre_lean", None)
        rec.__dict__.pop("_fw_post_lean", None)
        rec._fcall = None       # (its call holds the hooks it was made with)
        if n >= 1:
            _leanbw.place = lambda *a: None
        if n >= 2:
            _leanbw._alias = lambda t: t
        if n >= 3:
            _leanbw.exit_line = lambda *a: None
        if n >= 4:
            L.setup_input_hook = lambda self, a: a
            L.setup_output_hook = lambda self, a: a
        if n >= 5:
            rec._fw_pre_lean = lambda *a: None
            rec._fw_post_lean = lambda *a: None

    names = ["full recorder, no C module", "- bw_pre markers", "- input identity nodes",
             "- bw_exit lines and hooks", "- views' events and the wrappers' checks",
             "- module hooks' work (all of it returning at once)"]

    def timed(v, k):
        if v in TORCH_CALL:
            _torch_call()       # (the recorders' call comes back at their next region)
        if v in ("plain", "nothing", "c"):
            ctx = NothingMode if v == "nothing" else (lambda: crec) if v == "c" else None
        else:
            level(v)
            ctx = lambda: rec  # noqa: E731
        run_steps(step, ctx, SETTLE)
        t0 = time.thread_time()
        run_steps(step, ctx, k)
        return (time.thread_time() - t0) / k
    variants = ["plain", "nothing", "c"] + list(range(len(names)))
    for v in variants:
        timed(v, 3)
    res = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            res[v].append(timed(v, args.steps))
    level(0)
    rec.close()
    crec.close()
    med = {v: statistics.median(r) for v, r in res.items()}
    base, nothing = med["plain"], med["nothing"] - med["plain"]
    print("pieces: the 8-block workload under the full recorder without its C module, its "
          "module-hook work taken out piece by piece; main thread CPU per step, medians of %d "
          "rounds" % args.rounds)
    print("  %-52s %8.3f ms" % ("plain", base * 1e3))
    print("  %-52s %+8.3f ms" % ("do-nothing dispatch mode", nothing * 1e3))
    prev = None
    for v in range(len(names)):
        added = med[v] - base
        print("  %-52s %+8.3f ms  %.2fx the do-nothing mode%s"
              % (names[v], added * 1e3, added / nothing,
                 "" if prev is None else "  (the piece: %.3f ms)" % ((prev - added) * 1e3)))
        prev = added
    added = med["c"] - base
    print("  %-52s %+8.3f ms  %.2fx the do-nothing mode"
          % ("full recorder (its C module)", added * 1e3, added / nothing))
    print()


# -------------------------------------------------------------------- split
def split(args):
    """Where the full recorder's added time goes on the 8-block workload,
    against the do-nothing mode's: regions of two steps, each part timed on
    its own (wall, the training thread): the region's enter and exit, the
    first step's forward and backward, the second step's.  What the first
    step costs beyond the second is a region's too (the parameters read
    whole, the frame before being written meanwhile); the second step's is
    the module tracking and the per-op path."""
    from commdebug import Recorder
    step_model = blocks_step()
    model, x = step_model.model, step_model.x

    NothingMode = nothing_mode()
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    rec = Recorder(os.path.join(tmp, "split.zst"))
    ctxs = {"plain": contextlib.nullcontext, "nothing": NothingMode, "full": lambda: rec}
    clock = time.perf_counter_ns
    parts = ("enter", "fw1", "bw1", "fw2", "bw2", "exit")

    def region(ctx, out):
        t = [clock()]
        c = ctx()
        c.__enter__()
        t.append(clock())
        for _ in range(2):
            loss = model(x).sum()
            t.append(clock())
            loss.backward()
            t.append(clock())
        c.__exit__(None, None, None)
        t.append(clock())
        if out is not None:
            for i, p in enumerate(parts):
                out[p].append((t[i + 1] - t[i]) / 1e3)
    res = {v: {p: [] for p in parts} for v in ctxs}
    for v in ctxs:
        for _ in range(SETTLE):
            region(ctxs[v], None)
    for _ in range(args.rounds):
        order = list(ctxs)
        random.shuffle(order)
        for v in order:
            if v in TORCH_CALL:
                _torch_call()   # (the recorder's call comes back at its next region)
            for _ in range(SETTLE):
                region(ctxs[v], None)
            for _ in range(args.steps):
                region(ctxs[v], res[v])
    rec.close()
    med = {v: {p: statistics.median(r[p]) for p in parts} for v, r in res.items()}
    n = args.rounds * args.steps
    print("split: the 8-block workload, regions of two steps, each part timed on its own "
          "(wall, training thread, medians of %d regions), us" % n)
    print("  %-26s" % "" + "".join("%9s" % p for p in parts))
    for v in ctxs:
        print("  %-26s" % LABELS[v] + "".join("%9.1f" % med[v][p] for p in parts))

    def added(v):
        m, b = med[v], med["plain"]
        return {"region": (m["enter"] - b["enter"]) + (m["exit"] - b["exit"])
                + (m["fw1"] + m["bw1"] - m["fw2"] - m["bw2"])
                - (b["fw1"] + b["bw1"] - b["fw2"] - b["bw2"]),
                "forward": m["fw2"] - b["fw2"], "backward": m["bw2"] - b["bw2"]}
    a, z = added("full"), added("nothing")
    total = {v: sum(added(v).values()) for v in ("full", "nothing")}
    print("  added over plain, per step of a one-step region (region = enter + exit + the "
          "first step's extra):")
    for p in ("region", "forward", "backward"):
        print("    %-9s full recorder %7.1f  do-nothing mode %7.1f  difference %+7.1f"
              % (p, a[p], z[p], a[p] - z[p]))
    print("    %-9s full recorder %7.1f  do-nothing mode %7.1f  ratio %.2f"
          % ("in all", total["full"], total["nothing"], total["full"] / total["nothing"]))
    print()


# ------------------------------------------------------------------- once
def _once_parts():
    """Light mode's work done once a step, timed by once(): (label, class,
    attribute, which calls count: (args, kwargs) -> bool, or None for all)."""
    from commdebug import _light, _mode, _writer, recorder as crec
    main = threading.get_ident()
    return [("region enter", crec.Recorder, "__enter__", None),
            ("region exit", crec.Recorder, "__exit__", None),
            ("a collective's events, Python kernel", _mode.OpEvents, "_coll_events", None),
            ("C++ kernel's call: events, frame", _light.LightEvents,
             "_light_coll_native", None),
            ("the frame before it (sync)", _writer.TraceWriter, "sync",
             lambda a, k: not (a[1] if len(a) > 1 else k.get("later", False))),
            ("  a frame's write, training thread", _writer.TraceWriter, "_write",
             lambda a, k: threading.get_ident() == main),
            ("the writer thread's rounds", _writer.TraceWriter, "do_round", None)]


def once(args):
    """The gpt2 step in one process (a one-rank group) under light mode:
    the CPU time of each part of light mode's work done once a step (not
    per module), timed per call in the steps, against the same parts timed
    in a loop of regions of one all_reduce of 4 floats, where nothing else
    runs between two calls.  The ratio is what the caches a training step
    leaves cold cost that part (for the write(2), also the frame's size: a
    step's frame is about 30 KB, the loop's a few hundred bytes)."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    step = gpt2_step()
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    rec = light_variant(tmp, "once-rank0.zst")
    took = {}
    saved = []
    for label, cls, name, pick in _once_parts():
        f = cls.__dict__[name]
        saved.append((cls, name, f))

        def timed(*a, _f=f, _label=label, _pick=pick, **k):
            if _pick is not None and not _pick(a, k):
                return _f(*a, **k)
            c = time.thread_time_ns()
            try:
                return _f(*a, **k)
            finally:
                took.setdefault(_label, []).append(time.thread_time_ns() - c)
        setattr(cls, name, timed)
    n = args.rounds * args.steps
    try:
        light_on(rec)
        run_steps(step, lambda: rec, SETTLE + 10)
        took.clear()
        c0 = time.thread_time()
        run_steps(step, lambda: rec, n)
        per_step = (time.thread_time() - c0) / n
        in_step, took = took, {}
        x = torch.ones(4)
        for _ in range(n):
            with rec:
                dist.all_reduce(x)
        loop = took
    finally:
        for cls, name, f in saved:
            setattr(cls, name, f)
        light_off(rec)
        rec.close()
        dist.destroy_process_group()
    print("once: light mode's work done once a step, the GPT-2 step in one process "
          "(one-rank gloo DDP), %d steps; the training thread's CPU %.2f ms a step"
          % (n, per_step * 1e3))
    print("  %-36s %11s %10s %10s   %s" % ("", "calls/step", "us a call", "us a step",
                                        "in a loop: us a call"))
    for label, _, name, _ in _once_parts():
        xs = in_step.get(label, [])
        if not xs:
            continue
        med = statistics.median(xs) / 1e3
        line = "  %-36s %11.2f %10.1f %10.1f" % (label, len(xs) / n, med, sum(xs) / n / 1e3)
        ys = loop.get(label) if name != "do_round" else None   # (other work there)
        if ys:
            w = statistics.median(ys) / 1e3
            line += "   %8.1f (%.1fx)" % (w, med / w)
        print(line)
    print()


# -------------------------------------------------------------------- colls
def colls(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    pg = dist.distributed_c10d._get_default_group()
    from commdebug import Recorder, _collkernels
    t = torch.zeros(4)
    n = 500

    def loop():
        for _ in range(n):
            dist.all_reduce(t)

    NothingMode = nothing_mode()

    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    orig = dist.all_reduce

    def wrapped(*a, **k):
        return orig(*a, **k)

    def with_wrapper():
        dist.all_reduce = wrapped
        try:
            loop()
        finally:
            dist.all_reduce = orig

    def with_prehook():
        pg.register_pre_hook(7, lambda a: None)
        try:
            loop()
        finally:
            pg.unregister_pre_hook(7)

    def with_mode():
        with NothingMode():
            loop()

    def best(variants):
        out = {name: float("inf") for name, _ in variants}
        for _ in range(args.rounds):
            for name, fn in variants:
                c0 = time.process_time()
                fn()
                out[name] = min(out[name], (time.process_time() - c0) / n)
        return out

    # before any kernel is installed
    first = [("plain", loop), ("Python wrapper of dist.all_reduce", with_wrapper),
             ("do-nothing dispatch mode", with_mode)]
    if hasattr(pg, "register_pre_hook"):
        first.append(("ProcessGroup pre-hook (register_pre_hook)", with_prehook))
    b1 = best(first)
    light = Recorder(os.path.join(tmp, "colls.zst"), light=True)
    _collkernels.install()

    def with_light():
        with light:
            loop()
    second = [("plain", loop), ("BackendSelect kernels, outside a light region", loop),
              ("light recorder (kernel, event, frame written first)", with_light)]
    b2 = best(second)
    light.close()
    print("colls: gloo all_reduce of 4 floats, one process, %d per round, best of %d rounds "
          "(CPU us per collective, added over plain in the same run)" % (n, args.rounds))
    for name, _ in first[1:]:
        print("  %-56s %+8.2f" % (name, (b1[name] - b1["plain"]) * 1e6))
    print("  %-56s %+8.2f" % ("BackendSelect kernels, outside a light region",
                              (b2["plain"] - b1["plain"]) * 1e6))
    print("  %-56s %+8.2f" % (second[2][0], (b2[second[2][0]] - b1["plain"]) * 1e6))
    # Reading the Flight Recorder: its whole buffer each time.
    k = 20
    c0 = time.process_time()
    for _ in range(k):
        torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True,
                                                        onlyActive=False)
    d = (time.process_time() - c0) / k
    print("  %-56s %8.0f  (per read of a buffer of %s entries)"
          % ("_dump_fr_trace_json() of the Flight Recorder", d * 1e6,
             os.environ.get("TORCH_FR_BUFFER_SIZE")))
    dist.destroy_process_group()
    print()


# -------------------------------------------------------------------- instr
# (workload, variant) counted by --only instr: every variant's instructions
# per step, each in a process of its own under callgrind
INSTR = [("gpt2", "plain"), ("gpt2", "light"), ("gpt2", "lightpyhooks"), ("blocks", "plain"), ("blocks", "nothing"),
         ("blocks", "full"), ("blocks", "light")]


def instr_child(args):
    """Under callgrind (--instr-atstart=no): warm-up steps uninstrumented,
    then args.steps steps counted (cgtoggle.c's requests), a region each;
    a light recorder's hooks put on before either, as the timed variants
    have them."""
    import ctypes
    from commdebug import Recorder
    workload, variant = args.instr_child.split(":")
    cg = ctypes.CDLL(os.environ["BENCH_CGTOGGLE"])
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    if workload == "gpt2":
        import torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        step = gpt2_step()
    else:
        step = blocks_step()

    NothingMode = nothing_mode()
    rec = ctx = None
    if variant == "light":
        rec = light_variant(tmp, "light.zst")
        light_on(rec)
    elif variant == "lightpyhooks":
        rec = light_variant(tmp, "light.zst", "COMMDEBUG_GRADHOOK", "0")
        light_on(rec)
    elif variant == "full":
        rec = Recorder(os.path.join(tmp, "full.zst"))
    elif variant == "nothing":
        ctx = NothingMode
    elif variant != "plain":
        raise SystemExit("instr: no variant %s" % variant)
    if rec is not None:
        ctx = lambda: rec     # noqa: E731
    run_steps(step, ctx, 5)
    w = rec._w if rec is not None else None
    if w is not None:
        # The writer thread comes round on a clock (every 20 ms, light mode
        # every 0.1 s), which valgrind slows 50-fold: here it waits, and
        # does one round for all the counted steps at their end instead.
        w.tick = 3600.0
        w._wake.set()
        time.sleep(0.5)
        w.do_round()
    cg.cd_cg_start()
    run_steps(step, ctx, args.steps)
    if w is not None:
        w.do_round()
    cg.cd_cg_stop()
    if rec is not None:
        rec.close()


def _callgrind_totals(path):
    """({event: count} of the training thread, the other threads' Ir) of
    callgrind's dumps for one run made with --separate-threads=yes: path-NN
    (what was left at exit) and path.K-NN (cd_cg_stop's dumps), NN the
    thread (01 the main thread, which runs the steps).  Events: Ir, and with
    the cache and branch models I1mr (first-level instruction-cache misses),
    Bcm and Bim (mispredicted conditional and indirect branches), ..."""
    import glob
    main, rest, seen = {}, 0, 0
    for p in sorted(glob.glob(path + "-*") + glob.glob(path + ".*-*")):
        names = []
        with open(p) as f:
            for line in f:
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith("totals:"):
                    counts = dict(zip(names, map(int, line.split()[1:])))
                    if p.endswith("-01"):
                        for k, n in counts.items():
                            main[k] = main.get(k, 0) + n
                    else:
                        rest += counts.get("Ir", 0)
                    seen += 1
                    break
    if not seen or "Ir" not in main:
        raise SystemExit("instr: no total in %s-*" % path)
    return main, rest


def instr(args):
    """Instructions per step (valgrind's callgrind), the training thread's
    apart from the other threads': the training thread's count is the same
    on every run, where time on this machine moves by several per cent from
    process to process.  What it leaves out is what an instruction costs:
    cache misses, system calls, waiting for the GIL.  Callgrind's cache and
    branch models give the first in part: the training thread's
    first-level instruction-cache misses and mispredicted branches per step
    (a model of a CPU, not this one's counters, which this machine lacks),
    the same on every run."""
    import shutil
    if not shutil.which("valgrind") or not os.environ.get("BENCH_CGTOGGLE"):
        print("instr: needs valgrind and BENCH_CGTOGGLE (tests/bench/recorder.sh --only instr "
              "sets both up); skipped\n")
        return
    tmp = tempfile.mkdtemp(prefix="commdebug-bench-")
    per, others, model = {}, {}, {}
    for workload, variant in INSTR:
        if variant not in VARIANTS:
            continue
        out = os.path.join(tmp, "cg-%s-%s.out" % (workload, variant))
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
               "--cache-sim=yes", "--branch-sim=yes", "--callgrind-out-file=" + out, sys.executable, os.path.abspath(__file__),
               "--instr-child", "%s:%s" % (workload, variant), "--steps", str(args.steps)]
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode:
            raise SystemExit("instr: %s %s failed:\n%s" % (workload, variant,
                                                           r.stderr.decode()[-2000:]))
        main, rest = _callgrind_totals(out)
        per[workload, variant] = main["Ir"] / args.steps
        model[workload, variant] = {k: main.get(k, 0) / args.steps for k in MODEL}
        others[workload, variant] = rest / args.steps
    print("instr: instructions per step (callgrind) of the training thread, %d steps counted "
          "per variant after 5 uncounted, each variant in a process of its own; the other "
          "threads' after it (the recorders' writers, gloo's: how much of the compressing falls "
          "in the counted steps depends on their timing under valgrind)" % args.steps)
    for workload in ("gpt2", "blocks"):
        base = per.get((workload, "plain"))
        if base is None:
            continue
        nothing = per.get((workload, "nothing"))
        for variant in [v for w, v in INSTR if w == workload]:
            n = per.get((workload, variant))
            if n is None:
                continue
            line = "  %-7s %-36s %14.0f" % (workload, LABELS[variant], n)
            if variant != "plain":
                line += "  %+10.0f (%.4fx plain)" % (n - base, n / base)
                if nothing is not None and variant != "nothing":
                    line += ", %.2fx the do-nothing mode's added" % ((n - base) / (nothing - base))
            if others.get((workload, variant)):
                line += "; other threads %.0f" % others[workload, variant]
            print(line)
    print("  the training thread per step in callgrind's cache and branch models "
          "(in brackets: added to plain's)")
    print("  %-7s %-36s %s" % ("", "", " ".join("%22s" % name for name in MODEL.values())))
    for workload in ("gpt2", "blocks"):
        base = model.get((workload, "plain"))
        for variant in [v for w, v in INSTR if w == workload]:
            m = model.get((workload, variant))
            if m is None or base is None:
                continue
            cells = ["%10.0f" % m[k] + ("" if variant == "plain" else " (%+9.0f)" % (m[k] - base[k]))
                     for k in MODEL]
            print("  %-7s %-36s %s" % (workload, LABELS[variant],
                                       " ".join("%22s" % c for c in cells)))
    print()


# callgrind's model events the instr section gives beside instructions
MODEL = {"I1mr": "I1 misses", "Bcm": "cond. mispredicts", "Bim": "ind. mispredicts"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", choices=["gpt2", "light", "once", "blocks", "pieces", "split",
                                       "colls", "instr"],
                    action="append")
    ap.add_argument("--variants", help="comma-separated: only these of %s (plain always)"
                    % ",".join(VARIANTS))
    ap.add_argument("--rank-of", help=argparse.SUPPRESS)
    ap.add_argument("--instr-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variants:
        keep = set(args.variants.split(",")) | {"plain"}
        unknown = keep - set(VARIANTS)
        if unknown:
            ap.error("unknown variants: %s" % ",".join(sorted(unknown)))
        VARIANTS[:] = [v for v in VARIANTS if v in keep]
    if args.rank_of == "gpt2":
        return gpt2_rank(args)
    if args.instr_child:
        return instr_child(args)
    import torch
    print("torch %s, Python %s, %d CPUs" % (torch.__version__, sys.version.split()[0],
                                          os.cpu_count()))
    print()
    for what in args.only or ["gpt2", "light", "once", "blocks", "pieces", "split", "colls"]:
        {"gpt2": gpt2, "light": light, "once": once, "blocks": blocks, "pieces": pieces,
         "split": split, "colls": colls, "instr": instr}[what](args)


if __name__ == "__main__":
    sys.exit(main())
