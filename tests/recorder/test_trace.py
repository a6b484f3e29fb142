"""Single-process tests: the events the Recorder writes, read back from the trace.

Module names must follow ModTracker._get_mod_name; hooks are registered
under the same conditions as in CommDebugMode's module tracker; the file is
a multi-frame zstd stream any zstd decoder reads.
"""

import json
import os
import subprocess

from _util import PYTHON, check, env, eq, events, regions, zstd_cli_text

import torch
import torch.nn as nn

from commdebug import Recorder


def record(path, fn, n=1, **kw):
    rec = Recorder(path, **kw)
    for i in range(n):
        with rec(label="r%d" % (i + 1)):
            fn()
    rec.close()
    return events(rec.path)


def mods(evs, ev):
    return [e["mod"] for e in evs if e["ev"] == ev]


def test_meta_and_container(ctx):
    """meta first with the contract's fields; every line an object with "ev";
    times never go back; regions numbered 1.. with labels; the file is zstd
    frames that the zstd CLI decodes to the same text."""
    path = os.path.join(ctx.tmp, "rank{rank}.zst")
    m = nn.Linear(4, 4)
    evs = record(path, lambda: m(torch.randn(2, 4)).sum().backward(), n=3)
    real = os.path.join(ctx.tmp, "rank0.zst")
    meta = evs[0]
    eq(meta["ev"], "meta", "first event")
    for k, v in (("format", "commdebug-trace"), ("version", 1), ("rank", 0),
                 ("world_size", 1), ("pid", os.getpid()), ("torch", torch.__version__)):
        eq(meta[k], v, "meta " + k)
    check(meta["recorder"].startswith("commdebug-py "), "meta recorder %r", meta["recorder"])
    check(isinstance(meta["t0"], int) and meta["t0"] > 1.5e18, "meta t0 %r", meta["t0"])
    check(meta["host"], "meta host empty")
    last = -1
    for e in evs[1:]:
        check("ev" in e, "event without ev: %r", e)
        check(e["t"] >= last, "time goes back at %r", e)
        last = e["t"]
    enters = [(e["region"], e.get("label")) for e in evs if e["ev"] == "region_enter"]
    eq(enters, [(1, "r1"), (2, "r2"), (3, "r3")], "region_enter events")
    eq([e["region"] for e in evs if e["ev"] == "region_exit"], [1, 2, 3], "region_exit events")
    with open(real, "rb") as f:
        data = f.read()
    eq(data[:4], b"\x28\xb5\x2f\xfd", "zstd magic")
    check(data.count(b"\x28\xb5\x2f\xfd") >= 2, "expected the meta frame and more")
    text = zstd_cli_text(real)
    eq([json.loads(line) for line in text.splitlines()], evs, "zstd CLI decode")


def test_names_shared_module(ctx):
    """A module reachable from two parents is named by the last parent that
    names it; its own children keep the first path (eager naming)."""
    shared = nn.Sequential(nn.Linear(4, 4))

    class A(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = shared

        def forward(self, x):
            return self.a(x)

    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.b = shared

        def forward(self, x):
            return self.b(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = A()
            self.y = B()

        def forward(self, x):
            return self.y(self.x(x))

    model = Outer()
    evs = record(os.path.join(ctx.tmp, "t.zst"), lambda: model(torch.randn(2, 4)))
    eq(mods(evs, "fw_pre"),
       ["Outer", "Outer.x", "Outer.y.b", "Outer.x.a.0", "Outer.y", "Outer.y.b", "Outer.x.a.0"],
       "fw_pre module names")
    eq(mods(evs, "fw_done"),
       ["Outer.x.a.0", "Outer.y.b", "Outer.x", "Outer.x.a.0", "Outer.y.b", "Outer.y", "Outer"],
       "fw_done module names")


def test_names_same_class_roots(ctx):
    """Two separate models of one class both take the class name (they collide,
    as in CommDebugMode); so do their children."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x)

    n1, n2 = Net(), Net()
    evs = record(os.path.join(ctx.tmp, "t.zst"), lambda: n2(n1(torch.randn(2, 4))))
    eq(mods(evs, "fw_pre"), ["Net", "Net.fc", "Net", "Net.fc"], "fw_pre module names")
    types = [e["type"] for e in evs if e["ev"] == "fw_pre"]
    eq(types[0], "test_trace.test_names_same_class_roots.<locals>.Net", "module type")
    eq(types[1], "torch.nn.modules.linear.Linear", "module type")


def test_module_called_twice(ctx):
    """A module run twice per forward gets one fw_done per call, in every
    region (no hooks left behind: pytorch#191452); names persist across regions."""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(self.lin(x))

    model = Twice()
    evs = record(os.path.join(ctx.tmp, "t.zst"), lambda: model(torch.randn(2, 4)), n=3)
    for r, revs in sorted(regions(evs).items()):
        eq(mods(revs, "fw_pre"), ["Twice", "Twice.lin", "Twice.lin"], "fw_pre region %d" % r)
        eq(mods(revs, "fw_done"), ["Twice.lin", "Twice.lin", "Twice"], "fw_done region %d" % r)
        eq(mods(revs, "fw_post"), ["Twice.lin", "Twice.lin", "Twice"], "fw_post region %d" % r)
    eq(len(model.lin._forward_hooks), 0, "forward hooks left on the module after exit")


def test_names_persist_across_regions(ctx):
    """The name mapping belongs to the Recorder, like ModTracker's: a child
    first named under its parent keeps that name when later called alone."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    rec = Recorder(os.path.join(ctx.tmp, "t.zst"))
    with rec:
        model(torch.randn(2, 4))
    with rec:
        model[0](torch.randn(2, 4))
    rec.close()
    r = regions(events(os.path.join(ctx.tmp, "t.zst")))
    eq(mods(r[2], "fw_pre"), ["Sequential.0"], "region 2 fw_pre")
    # A fresh Recorder starts a fresh mapping.
    rec2 = Recorder(os.path.join(ctx.tmp, "t2.zst"))
    with rec2:
        model[0](torch.randn(2, 4))
    rec2.close()
    eq(mods(events(os.path.join(ctx.tmp, "t2.zst")), "fw_pre"), ["Linear"], "fresh recorder")


def test_params_and_types(ctx):
    """fw_pre lists the module's own parameters (recurse=False) with shape,
    dtype, nbytes and requires_grad."""
    model = nn.Sequential(nn.Linear(3, 5), nn.LayerNorm(5).double())
    model[1].weight.requires_grad_(False)
    evs = record(os.path.join(ctx.tmp, "t.zst"),
                 lambda: model[1](model[0](torch.randn(2, 3)).double()))
    pre = {e["mod"]: e for e in evs if e["ev"] == "fw_pre"}
    eq(pre["Linear"]["params"], [
        {"name": "weight", "shape": [5, 3], "dtype": "torch.float32", "nbytes": 60,
         "requires_grad": True},
        {"name": "bias", "shape": [5], "dtype": "torch.float32", "nbytes": 20,
         "requires_grad": True}], "Linear params")
    eq(pre["LayerNorm"]["params"][0], {"name": "weight", "shape": [5], "dtype": "torch.float64",
                                       "nbytes": 40, "requires_grad": False}, "LayerNorm weight")
    eq(pre["LayerNorm"]["type"], "torch.nn.modules.normalization.LayerNorm", "type")


def test_grad_hook_rules(ctx):
    """Mirror of the tracker's rules: the input hook (bw_exit) only when an
    input requires grad, the output hook (bw_enter) only when an output does,
    neither under no_grad; one bw_end per backward pass."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def run():
        with torch.no_grad():
            model(torch.randn(2, 4))
        x = torch.randn(2, 4, requires_grad=True)
        model(x).sum().backward()
        model(torch.randn(2, 4)).sum().backward()

    evs = record(os.path.join(ctx.tmp, "t.zst"), run)
    pre = [(e["mod"], e["grad_in"]) for e in evs if e["ev"] == "fw_pre"]
    post = [(e["mod"], e["grad_out"]) for e in evs if e["ev"] == "fw_post"]
    eq(pre, [("Sequential", False), ("Sequential.0", False), ("Sequential.1", False),
             ("Sequential", True), ("Sequential.0", True), ("Sequential.1", True),
             ("Sequential", False), ("Sequential.0", False), ("Sequential.1", True)],
       "fw_pre grad_in")
    eq(post, [("Sequential.0", False), ("Sequential.1", False), ("Sequential", False),
              ("Sequential.0", True), ("Sequential.1", True), ("Sequential", True),
              ("Sequential.0", True), ("Sequential.1", True), ("Sequential", True)],
       "fw_post grad_out")
    bw = [(e["ev"], e.get("mod")) for e in evs if e["ev"] in ("bw_enter", "bw_exit", "bw_end")]
    eq(bw, [("bw_enter", "Sequential"), ("bw_enter", "Sequential.1"),
            ("bw_exit", "Sequential.1"), ("bw_enter", "Sequential.0"),
            ("bw_exit", "Sequential.0"), ("bw_exit", "Sequential"), ("bw_end", None),
            ("bw_enter", "Sequential"), ("bw_enter", "Sequential.1"),
            ("bw_exit", "Sequential.1"), ("bw_enter", "Sequential.0"), ("bw_end", None)],
       "backward tracker events")
    # bw_pre names the module whose backward starts, before its bw_enter.
    seq = [(e["ev"], e.get("mod")) for e in evs if e["ev"] in ("bw_pre", "bw_enter")]
    eq(seq[:4], [("bw_pre", "Sequential"), ("bw_enter", "Sequential"),
                 ("bw_pre", "Sequential.1"), ("bw_enter", "Sequential.1")], "bw_pre order")


def test_activation_checkpointing_order(ctx):
    """The event order of PyTorch's test_mod_tracker test_ac (Foo with two
    Linears, the second checkpointed): the recompute's forward hooks fire
    inside backward with bw true and register no gradient hooks."""
    from torch.utils.checkpoint import checkpoint

    class Foo(nn.Module):
        def __init__(self):
            super().__init__()
            self.linears = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x):
            x = self.linears[0](x)
            return checkpoint(self.linears[1], x, use_reentrant=False)

    import contextlib
    import torch.utils.checkpoint as ckpt

    model = Foo()
    # torch 2.x stops a non-reentrant recompute as soon as it has what
    # backward needs (early stop, on by default): the recomputed Linear's
    # forward ends in an exception, so forward hooks registered without
    # always_call -- CommDebugMode's, and so the recorder's -- do not fire.
    # test_ac's order is that of a recompute that runs to its end.
    early = getattr(ckpt, "set_checkpoint_early_stop", None)

    def run(name, early_stop):
        cm = early(early_stop) if early is not None else contextlib.nullcontext()
        with cm:
            evs = record(os.path.join(ctx.tmp, name),
                         lambda: model(torch.randn(3, 4, requires_grad=True)).sum().backward())
        return evs, [(e["ev"], e.get("mod"), e.get("bw")) for e in evs
                     if e["ev"] in ("fw_pre", "fw_post", "bw_enter", "bw_exit")]
    evs, seq = run("t.zst", False)
    want = [("fw_pre", "Foo", False), ("fw_pre", "Foo.linears.0", False),
            ("fw_post", "Foo.linears.0", False), ("fw_pre", "Foo.linears.1", False),
            ("fw_post", "Foo.linears.1", False), ("fw_post", "Foo", False),
            ("bw_enter", "Foo", None), ("bw_enter", "Foo.linears.1", None),
            ("fw_pre", "Foo.linears.1", True), ("fw_post", "Foo.linears.1", True),
            ("bw_exit", "Foo.linears.1", None), ("bw_enter", "Foo.linears.0", None),
            ("bw_exit", "Foo.linears.0", None), ("bw_exit", "Foo", None)]
    eq(seq, want, "AC event order")
    recompute = [e for e in evs if e["ev"] == "fw_pre" and e["bw"]]
    eq([(e["grad_in"], e["params"]) for e in recompute], [(False, [])], "recompute fw_pre")
    if early is not None:
        _, seq = run("early.zst", True)
        eq(seq, [x for x in want if x != ("fw_post", "Foo.linears.1", True)],
           "AC event order with early stop")


def test_op_events(ctx):
    """Every dispatched op is an op event named by its overload, with bw set
    for the ops the autograd engine runs; fake tensors are flagged."""
    w = torch.randn(4, 4, requires_grad=True)

    def run():
        x = torch.randn(2, 4)
        (x @ w).sum().backward()

    evs = record(os.path.join(ctx.tmp, "t.zst"), run)
    ops = [(e["name"], e["bw"]) for e in evs if e["ev"] == "op"]
    check(("aten.mm.default", False) in ops, "forward mm missing: %r", ops)
    check(("aten.mm.default", True) in ops, "backward mm missing: %r", ops)
    check(("aten.sum.default", False) in ops, "sum missing: %r", ops)
    for e in evs:
        if e["ev"] == "op":
            eq((e["dt"], e["args"]), (False, []), "dt/args of " + e["name"])

    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        ctx.note("no FakeTensorMode in this torch; fake flag not checked")
        return
    fm = FakeTensorMode()
    fake = fm.from_tensor(torch.randn(3, 3))
    evs = record(os.path.join(ctx.tmp, "f.zst"), lambda: fake * 2)
    ops = [(e["name"], e["fake"]) for e in evs if e["ev"] == "op"]
    eq(ops, [("aten.mul.Tensor", True)], "op on fake tensor")


def test_regions_do_not_nest(ctx):
    rec = Recorder(os.path.join(ctx.tmp, "t.zst"))
    with rec:
        try:
            with rec:
                pass
        except RuntimeError:
            pass
        else:
            raise AssertionError("entering an active Recorder did not raise")
    rec.close()
    eq([e["ev"] for e in events(os.path.join(ctx.tmp, "t.zst"))],
       ["meta", "region_enter", "region_exit", "end"], "events")


def test_plain_jsonl_without_libzstd(ctx):
    """Without libzstd the trace is plain JSON Lines and stderr says so once."""
    script = ("import torch; from commdebug import Recorder\n"
              "rec = Recorder(%r)\n"
              "for i in range(2):\n"
              "    with rec: torch.ones(2) + 1\n" % os.path.join(ctx.tmp, "p.zst"))
    r = subprocess.run([PYTHON, "-c", script], env=env(COMMDEBUG_NO_ZSTD=1),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    eq(r.returncode, 0, "exit status (stderr: %s)" % r.stderr.decode())
    err = r.stderr.decode()
    eq(err.count("libzstd.so.1 not found"), 1, "libzstd messages on stderr (%r)" % err)
    with open(os.path.join(ctx.tmp, "p.zst")) as f:
        lines = [json.loads(line) for line in f]
    eq(lines[0]["ev"], "meta", "first line")
    eq([e["ev"] for e in lines if e["ev"].startswith("region")],
       ["region_enter", "region_exit"] * 2, "regions")


def test_record_cli_every_step(ctx):
    """python -m commdebug.record runs an unmodified script with its argv,
    one region per optimizer step, and passes its exit status on."""
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write("import sys, torch\n"
                "assert sys.argv[1:] == ['--lr', '0.1'], sys.argv\n"
                "m = torch.nn.Linear(4, 2)\n"
                "opt = torch.optim.SGD(m.parameters(), lr=float(sys.argv[2]))\n"
                "for i in range(3):\n"
                "    opt.zero_grad(); m(torch.randn(3, 4)).sum().backward(); opt.step()\n"
                "sys.exit(7)\n")
    out = os.path.join(ctx.tmp, "traces")
    r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--every-step", "--",
                        script, "--lr", "0.1"], env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    eq(r.returncode, 7, "exit status (stderr: %s)" % r.stderr.decode()[-2000:])
    evs = events(os.path.join(out, "rank0.zst"))
    enters = [e.get("label") for e in evs if e["ev"] == "region_enter"]
    eq(enters, ["step 1", "step 2", "step 3", "step 4"], "region labels")
    per = regions(evs)
    for r_ in (1, 2, 3):
        check(any(e["ev"] == "fw_pre" and e["mod"] == "Linear" for e in per[r_]),
              "region %d has no forward", r_)
        check(any(e["ev"] == "op" and e["bw"] for e in per[r_]), "region %d has no backward", r_)
    eq([e for e in per[4] if e["ev"] == "fw_pre"], [], "forward after the last step")

    # Without --every-step: one region named after the script.
    r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--", script, "--lr",
                        "0.1"], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    eq(r.returncode, 7, "exit status")
    evs = events(os.path.join(out, "rank0.zst"))
    eq([e.get("label") for e in evs if e["ev"] == "region_enter"], ["train.py"], "labels")


def test_one_version(ctx):
    """The recorder's version (meta "recorder", commdebug.__version__, the
    package metadata) is meson.build's project version."""
    import re
    import commdebug
    from _util import REPO
    with open(os.path.join(REPO, "meson.build")) as f:
        m = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'", f.read(), re.S)
    check(m, "no project version in meson.build")
    eq(commdebug.__version__, m.group(1), "commdebug.__version__ vs meson.build")
    with open(os.path.join(REPO, "python", "pyproject.toml")) as f:
        toml = f.read()
    check('dynamic = ["version"]' in toml and "commdebug._version.__version__" in toml,
          "pyproject.toml does not take its version from commdebug._version")
    evs = record(os.path.join(ctx.tmp, "v.zst"), lambda: torch.ones(1) + 1)
    eq(evs[0]["recorder"], "commdebug-py " + m.group(1), "meta recorder")
    if ctx.analyzer is not None:
        _, out, err = ctx.analyzer.run("--version")
        check(m.group(1) in out + err, "analyzer --version: %r", out + err)


def test_read_events_streams(ctx):
    """read_events yields events one by one, decoding the file in pieces:
    the first event comes before the rest of a large trace is decoded, and
    memory does not grow with the trace."""
    import tracemalloc
    from commdebug import read_events, _zstd
    z = _zstd.load()
    path = os.path.join(ctx.tmp, "big.zst")
    line = '{"ev":"op","name":"aten.add.Tensor","bw":false,"dt":false,"args":[],"fake":false,"t":%d}\n'
    with open(path, "wb") as f:
        head = '{"ev":"meta","format":"commdebug-trace","version":1,"rank":0,"world_size":1}\n'
        f.write(z.compressor().frame(head.encode()) if z else head.encode())
        for k in range(20):
            chunk = "".join(line % (k * 20000 + i) for i in range(20000)).encode()
            f.write(z.compressor().frame(chunk) if z else chunk)
    tracemalloc.start()
    n = 0
    last = -1
    peak_at_first = None
    for e in read_events(path):
        if n == 1:
            peak_at_first = tracemalloc.get_traced_memory()[1]
        if e["ev"] == "op":
            check(e["t"] == last + 1, "event order at %d", n)
            last = e["t"]
        n += 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    eq(n, 400001, "events")
    # 400k events are about 40 MB of text and far more as dicts; streaming
    # keeps a megabyte-sized window.
    check(peak < 16 * 2**20, "peak traced memory %d bytes", peak)
    ctx.note("peak %.1f MiB reading 400001 events (%.1f MiB at the first)"
             % (peak / 2**20, peak_at_first / 2**20))


def test_bw_flag_every_entry(ctx):
    """"bw" is true exactly for the ops the autograd engine runs, whatever
    started the backward pass (Tensor.backward, autograd.grad, a reentrant
    checkpoint's inner backward, a backward on another thread) and false for
    forward ops (also on another thread while a backward runs)."""
    import threading
    from torch.utils.checkpoint import checkpoint
    w = torch.randn(4, 4, requires_grad=True)

    def fw():
        return (torch.randn(2, 4) @ w).tanh().sum()

    def run():
        fw().backward()
        torch.autograd.grad(fw(), [w])
        x = torch.randn(2, 4, requires_grad=True)
        checkpoint(lambda a: (a @ w).sigmoid(), x, use_reentrant=True).sum().backward()
        t = threading.Thread(target=lambda: fw().backward())
        t.start()
        t.join()

    evs = record(os.path.join(ctx.tmp, "b.zst"), run)
    ops = [(e["name"], e["bw"]) for e in evs if e["ev"] == "op"]
    want_bw = {"aten.tanh_backward.default", "aten.sigmoid_backward.default"}
    for name, bw in ops:
        if name in want_bw or name in ("aten.tanh.default", "aten.randn.default",
                                       "aten.sum.default"):
            eq(bw, name in want_bw, "bw flag of %s" % name)
    # the checkpoint recomputes sigmoid inside backward
    check(("aten.sigmoid.default", True) in ops and ("aten.sigmoid.default", False) in ops,
          "checkpointed sigmoid: %r", ops)
    # the dispatch mode sees the calling thread: two tanh_backward from it
    eq(sum(1 for o in ops if o == ("aten.tanh_backward.default", True)), 2,
       "tanh_backward ops")


def test_unclosed_recorder_named_at_exit(ctx):
    """A Recorder the program never closes (no rank variable, no process
    group) is named rank0.zst at exit and holds all its regions."""
    out = os.path.join(ctx.tmp, "t")
    script = ("import torch; from commdebug import Recorder\n"
              "rec = Recorder(%r)\n"
              "for i in range(3):\n"
              "    with rec: torch.ones(2) + 1\n" % os.path.join(out, "rank{rank}.zst"))
    e = env()
    for var in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                "COMMDEBUG_RECORD_JOB"):
        e.pop(var, None)
    r = subprocess.run([PYTHON, "-c", script], env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    eq(r.returncode, 0, "exit status (stderr: %s)" % r.stderr.decode())
    eq(sorted(os.listdir(out)), ["rank0.zst"], "files")
    evs = events(os.path.join(out, "rank0.zst"))
    eq((evs[0]["rank"], evs[0]["world_size"]), (0, 1), "meta rank")
    eq(sum(1 for ev in evs if ev["ev"] == "region_exit"), 3, "regions")
