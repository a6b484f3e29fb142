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
