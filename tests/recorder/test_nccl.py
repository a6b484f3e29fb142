"""The PyTorch-side recorder's link to the NCCL-side recorder: every
collective the dispatch mode sees is run with the thread tagged with the
same process group and sequence number that its op event gets, and untagged
after (commdebug joins NCCL calls to modules by that tag)."""

import json
import os

import _util


def test_collectives_tagged_like_their_op_events(ctx):
    out = os.path.join(ctx.tmp, "c10d")
    spy = os.path.join(ctx.tmp, "spy")
    os.environ["COMMDEBUG_TEST_TAGSPY"] = spy
    try:
        _util.run_ranks("c10d", out, 2)
    finally:
        del os.environ["COMMDEBUG_TEST_TAGSPY"]
    for rank in range(2):
        with open("%s%d.json" % (spy, rank)) as f:
            log = json.load(f)
        events = _util.events(os.path.join(out, "rank%d.zst" % rank))
        # op events of collectives that ran under the dispatch mode (those
        # recorded from ProcessGroup methods on torch 1.13 did not)
        want = [[e["pg"], e["seq"]] for e in events
                if e["ev"] == "op" and "seq" in e and e.get("via") != "python_api"]
        tags = [entry[1:] for entry in log if entry[0] == "tag"]
        assert want, "rank %d: no collective went through the dispatch mode" % rank
        assert tags == want, "rank %d: tags %s, op events %s" % (rank, tags, want)
        # each tag is undone before the next collective
        assert log == [x for t in tags for x in (["tag"] + t, ["untag"])], log


def test_sibling_trace_name(ctx):
    from commdebug import _nccl
    assert _nccl.sibling_trace("d/rank3.zst") == "d/rank3.nccl.zst"
    assert _nccl.sibling_trace("d/rank3.jsonl") == "d/rank3.nccl.zst"
    assert _nccl.sibling_trace("trace") == "trace.nccl.zst"


_TAGGED_CALL = r"""
import ctypes, sys
sys.path.insert(0, sys.argv[1])
from commdebug import _nccl
fake = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
tag, untag = _nccl.tagger()
nccl = ctypes.CDLL(None)          # the preloaded wrappers come first
comm = ctypes.c_void_p()
uid = (ctypes.c_char * 128)()
assert nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0) == 0
tag(b"3", 9)
assert nccl.ncclAllReduce(None, None, ctypes.c_size_t(64), 7, 0, comm, None) == 0
untag()
assert nccl.ncclAllReduce(None, None, ctypes.c_size_t(64), 7, 0, comm, None) == 0
"""


def test_tagger_reaches_the_preloaded_recorder(ctx):
    """Python's tag, through the real interposer (build/) over the stand-in
    libnccl of the C tests, ends up in the NCCL-side trace."""
    if ctx.analyzer is None:
        ctx.note("no commdebug build: skipped")
        return
    import subprocess
    build = os.path.dirname(os.path.abspath(ctx.analyzer.path))
    preload = os.path.join(build, "libcommdebug-nccl-preload.so")
    fake = os.path.join(build, "tests", "libfakenccl.so")
    if not (os.path.exists(preload) and os.path.exists(fake)):
        ctx.note("NCCL-side recorder not built: skipped")
        return
    trace = os.path.join(ctx.tmp, "py.nccl.zst")
    env = _util.env(LD_PRELOAD=preload, COMMDEBUG_NCCL_TRACE=trace)
    env.pop("RANK", None)
    subprocess.run([_util.PYTHON, "-c", _TAGGED_CALL, _util.PYDIR, fake], env=env, check=True,
                   timeout=60)
    calls = [e for e in _util.events(trace) if e["ev"] == "nccl"]
    assert [(c["func"], c["seq"], c.get("pg"), c.get("pseq")) for c in calls] == \
        [("AllReduce", 1, "3", 9), ("AllReduce", 2, None, None)], calls
    assert calls[0]["bytes"] == 256 and calls[0]["dtype"] == "float32", calls[0]


def test_tagger_prefers_the_plugin(ctx):
    """With NCCL_PROFILER_PLUGIN naming commdebug's plugin, tags go to the
    plugin even when the interposer is preloaded too (it only passes calls
    on then)."""
    if ctx.analyzer is None:
        ctx.note("no commdebug build: skipped")
        return
    import subprocess
    build = os.path.dirname(os.path.abspath(ctx.analyzer.path))
    preload = os.path.join(build, "libcommdebug-nccl-preload.so")
    plugin = os.path.join(build, "libnccl-profiler-commdebug.so")
    if not (os.path.exists(preload) and os.path.exists(plugin)):
        ctx.note("NCCL-side recorder not built: skipped")
        return
    code = r"""
import ctypes, sys
sys.path.insert(0, sys.argv[1])
from commdebug import _nccl
addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value
tag, _ = _nccl.tagger()
print(addr(tag) == addr(ctypes.CDLL(sys.argv[2]).commdebug_nccl_tag),
      addr(tag) != addr(ctypes.CDLL(None).commdebug_nccl_tag))
"""
    env = _util.env(LD_PRELOAD=preload, NCCL_PROFILER_PLUGIN=plugin)
    out = subprocess.run([_util.PYTHON, "-c", code, _util.PYDIR, plugin], env=env, check=True,
                         stdout=subprocess.PIPE, timeout=60).stdout.decode().split()
    # the plugin's function, not the (passive) interposer's
    assert out == ["True", "True"], out


_STUB = r"""
#include <stdio.h>
#include <stdlib.h>
int commdebug_nccl_set_trace(const char *path)
{
	FILE *f = fopen(getenv("STUB_LOG"), "a");
	if (!f)
		return -1;
	fprintf(f, "%s\n", path);
	fclose(f);
	return 0;
}
"""

_RENAMED = r"""
import os, sys, torch, torch.distributed as dist
from commdebug import Recorder
rec = Recorder(os.path.join(sys.argv[1], "rank{rank}.zst"))
with rec:
    torch.ones(2) + 1
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[2], rank=0,
                        world_size=1)
with rec:
    dist.all_reduce(torch.ones(2))
print(os.environ["COMMDEBUG_NCCL_TRACE"])
dist.destroy_process_group()
"""


def test_nccl_trace_follows_the_python_trace(ctx):
    """Whenever the Python trace's path is decided or changes (a hidden name
    while the rank is unknown, rank<R>.zst after init_process_group), the
    NCCL-side recorder is told through commdebug_nccl_set_trace, and
    COMMDEBUG_NCCL_TRACE says the same for child processes.  A stand-in
    library logs the calls."""
    import shutil
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise _util.Skip("no C compiler for the stand-in library")
    src = os.path.join(ctx.tmp, "stub.c")
    lib = os.path.join(ctx.tmp, "libstub.so")
    with open(src, "w") as f:
        f.write(_STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
    out = os.path.join(ctx.tmp, "t")
    log = os.path.join(ctx.tmp, "calls.txt")
    env = _util.env(LD_PRELOAD=lib, STUB_LOG=log)
    for var in ("RANK", "COMMDEBUG_NCCL_TRACE", "COMMDEBUG_NCCL_TRACE_AUTO"):
        env.pop(var, None)
    r = subprocess.run([_util.PYTHON, "-c", _RENAMED, out, str(_util.free_port())], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    with open(log) as f:
        calls = f.read().split()
    final = os.path.join(out, "rank0.nccl.zst")
    assert len(calls) == 2 and calls[1] == final, calls
    assert os.path.basename(calls[0]).startswith(".rank-pending-"), calls
    assert calls[0].endswith(".nccl.zst"), calls
    assert r.stdout.decode().strip() == final, r.stdout
    assert sorted(os.listdir(out)) == ["rank0.zst"], os.listdir(out)


_NCCL_FIRST = r"""
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
fake = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
nccl = ctypes.CDLL(None)
comm = ctypes.c_void_p()
uid = (ctypes.c_char * 128)()
assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
assert nccl.ncclAllReduce(None, None, ctypes.c_size_t(64), 7, 0, comm, None) == 0
import torch
from commdebug import Recorder
rec = Recorder(os.path.join(sys.argv[3], "rank{rank}.zst"))
with rec:
    torch.ones(2) + 1
assert nccl.ncclAllReduce(None, None, ctypes.c_size_t(32), 7, 0, comm, None) == 0
rec.close()
assert nccl.ncclAllReduce(None, None, ctypes.c_size_t(16), 7, 0, comm, None) == 0
"""


def test_nccl_used_before_the_first_region(ctx):
    """NCCL used before the recorder's first region (DDP's constructor, an
    init barrier): the NCCL-side trace still ends up beside the Python
    trace, DIR/rank0.nccl.zst, with every call; nothing is left in the
    working directory.  Needs the interposer with commdebug_nccl_set_trace."""
    if ctx.analyzer is None:
        raise _util.Skip("no commdebug build")
    import ctypes
    import subprocess
    build = os.path.dirname(os.path.abspath(ctx.analyzer.path))
    preload = os.path.join(build, "libcommdebug-nccl-preload.so")
    fake = os.path.join(build, "tests", "libfakenccl.so")
    if not (os.path.exists(preload) and os.path.exists(fake)):
        raise _util.Skip("NCCL-side recorder not built")
    if not hasattr(ctypes.CDLL(preload), "commdebug_nccl_set_trace"):
        raise _util.Skip("this interposer has no commdebug_nccl_set_trace yet")
    out = os.path.join(ctx.tmp, "t")
    cwd = os.path.join(ctx.tmp, "cwd")
    os.makedirs(cwd)
    env = _util.env(LD_PRELOAD=preload)
    for var in ("RANK", "COMMDEBUG_NCCL_TRACE", "COMMDEBUG_NCCL_TRACE_AUTO"):
        env.pop(var, None)
    r = subprocess.run([_util.PYTHON, "-c", _NCCL_FIRST, _util.PYDIR, fake, out], env=env,
                       cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert os.listdir(cwd) == [], os.listdir(cwd)
    assert sorted(os.listdir(out)) == ["rank0.nccl.zst", "rank0.zst"], os.listdir(out)
    calls = [e for e in _util.events(os.path.join(out, "rank0.nccl.zst")) if e["ev"] == "nccl"]
    assert [c["bytes"] for c in calls if c["func"] == "AllReduce"] == [256, 128, 64], calls
