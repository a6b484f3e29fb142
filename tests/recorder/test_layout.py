"""The layout of the Python package (issue 21): python/commdebug has no
import cycle (imports inside functions included), every module is under 500
lines, and every module with the recorder's code in it is one that
``_issuer`` skips when it looks for the Python code that issued a
collective (checked in a one-process gloo job on this torch)."""

import ast
import os
import subprocess
import textwrap

from _util import PYDIR, PYTHON, check, env, eq, free_port

PKG = os.path.join(PYDIR, "commdebug")
MAX_LINES = 500


def _modules():
    """{dotted name: path} of every module of the commdebug package."""
    out = {}
    for d, _, files in os.walk(PKG):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, PYDIR)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = path
    return out


def _import_graph(mods):
    """{module: set of commdebug modules it imports}, anywhere in its code."""
    graph = {}
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        deps.add(a.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    sub = base + "." + a.name
                    if sub in mods:
                        deps.add(sub)          # from . import _compat
                    elif base in mods:
                        deps.add(base)         # from .recorder import Recorder
        deps.discard(name)
        graph[name] = deps
    return graph


def _cycle(graph):
    """A cycle of the graph as a list of modules, or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def test_no_import_cycle(ctx):
    """No module of python/commdebug imports, directly or not, one that
    imports it (imports inside functions count)."""
    graph = _import_graph(_modules())
    check("commdebug.recorder" in graph and "commdebug._mode" in graph["commdebug.recorder"],
          "the import graph misses recorder -> _mode: %r", graph.get("commdebug.recorder"))
    c = _cycle(graph)
    check(c is None, "import cycle: %s", " -> ".join(c or []))


def test_module_sizes(ctx):
    """Every module of python/commdebug is under 500 lines."""
    big = []
    for name, path in sorted(_modules().items()):
        with open(path) as f:
            n = sum(1 for _ in f)
        if n >= MAX_LINES:
            big.append("%s: %d lines" % (name, n))
    check(not big, "modules of %d lines or more: %s", MAX_LINES, "; ".join(big))


def test_skip_modules_cover_recorder_code(ctx):
    """The modules holding the Recorder's code (its class and bases, the
    mode, the ProcessGroup wrappers, the compat shims) are all in
    _SKIP_MODULES, and _issuer finds the mode's frame in its module."""
    import inspect
    from commdebug import _mode, _process, _compat, recorder
    skip = _mode._SKIP_MODULES
    holders = {c.__module__ for c in recorder.Recorder.__mro__ if c is not object}
    holders |= {f.__module__ for f in (_mode._make_mode, _mode._wrap_pg_method,
                                       _mode._wrap_group_first, _mode._issuer,
                                       _process._wrap_init_process_group, _compat.is_bw)}
    missing = sorted(m for m in holders if m not in skip)
    eq(missing, [], "modules with recorder code missing from _SKIP_MODULES")
    check('mod == "%s" and code.co_name == "__torch_dispatch__"' % _mode._make_mode.__module__
          in inspect.getsource(_mode._issuer), "_issuer does not look for the mode in %s",
          _mode._make_mode.__module__)


_ISSUER_JOB = r'''
import sys, torch, torch.distributed as dist
from commdebug import Recorder, _mode
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%(port)d", rank=0, world_size=1)
seen = []
# A spy around _issuer whose own frame counts as the mode's module (skipped).
ns = {"__name__": "commdebug._mode", "orig": _mode._issuer, "seen": seen}
exec("def spy():\n    r = orig()\n    seen.append(r)\n    return r\n", ns)
_mode._issuer = ns["spy"]
t = torch.ones(4)

def by_function():
    dist.all_reduce(t)

def by_method():
    dist.distributed_c10d._get_default_group().allreduce([t]).wait()

# The recorder asks who issued an all-reduce in backward (DDP's reducer?):
# issued from a custom Function's backward here.
class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        by_function()
        by_method()
        return g * 2

modes = [False]
try:
    from commdebug import _light
    if _light.available() is None:
        modes.append(True)
except Exception:
    pass
for light in modes:
    rec = Recorder(sys.argv[1] + (".light" if light else ""), light=light)
    with rec:
        Twice.apply(torch.ones(2, requires_grad=True)).sum().backward()
    rec.close()
print("ISSUERS", seen)
dist.destroy_process_group()
'''


def test_issuer_skips_recorder_frames(ctx):
    """The issuer of a collective is the user's (or torch's) Python code,
    never a frame of the recorder: dist.all_reduce is issued by
    torch.distributed, a ProcessGroup method called directly by its caller
    (on 1.13 through the recorder's wrapper), in the full recorder's dispatch
    mode and, where this torch has it, in light mode's collective kernel.
    (The recorder asks only for all-reduces in backward: they are issued
    from a custom Function's backward here.)"""
    script = os.path.join(ctx.tmp, "job.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(_ISSUER_JOB % {"port": free_port()}))
    r = subprocess.run([PYTHON, script, os.path.join(ctx.tmp, "t.zst")], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    check(r.returncode == 0, "job failed:\n%s", r.stdout)
    line = [x for x in r.stdout.splitlines() if x.startswith("ISSUERS ")]
    check(line, "no ISSUERS line:\n%s", r.stdout)
    got = ast.literal_eval(line[0][len("ISSUERS "):])
    check(len(got) in (2, 4), "two collectives per mode expected, issuers %r", got)
    for i in range(0, len(got), 2):
        check(got[i] is not None and got[i][0].startswith("torch.distributed"),
              "dist.all_reduce's issuer: %r", got[i])
        eq(got[i + 1], ("__main__", "by_method"), "a ProcessGroup method's issuer")
