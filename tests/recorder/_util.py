"""Helpers shared by the recorder tests: running ranks, reading traces, the analyzer."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PYDIR = os.path.join(REPO, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

PYTHON = sys.executable


class Skip(Exception):
    """Raised by a test that cannot run here (the runner reports it as skipped)."""


def need_light():
    """Skip where the installed torch has no light mode (1.13)."""
    from commdebug import _light
    why = _light.available()
    if why is not None:
        raise Skip(why)


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("OMP_NUM_THREADS", "1")
    for k, v in extra.items():
        e[k] = str(v)
    return e


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_ranks(what, out, world, *args, script="workers.py"):
    """Start workers.py (or SCRIPT) WHAT --out OUT ARGS as WORLD gloo ranks on
    a free port, each logging to OUT/log<R>.txt; returns [(process, log file)]."""
    os.makedirs(out, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(world):
        e = env(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port)
        log = open(os.path.join(out, "log%d.txt" % rank), "w")
        p = subprocess.Popen([PYTHON, os.path.join(HERE, script), what, "--out", out]
                             + [str(a) for a in args], env=e, stdout=log,
                             stderr=subprocess.STDOUT)
        procs.append((p, log))
    return procs


def dump_stacks_and_kill(procs):
    """Kill the ranks still running, after each has written the Python stack
    of every thread to its log (the job scripts register faulthandler for
    SIGUSR2), so that a hang can be read after the fact."""
    live = [q for q, _ in procs if q.poll() is None]
    for q in live:
        try:
            q.send_signal(signal.SIGUSR2)
        except OSError:
            pass
    time.sleep(2)
    for q, _ in procs:
        q.kill()
        q.wait()


def run_ranks(what, out, world, *args, timeout=240, script="workers.py"):
    """Run workers.py (or SCRIPT) WHAT as WORLD gloo ranks; raise with their
    output if one fails (a rank still running after timeout seconds: with
    the stacks of every rank still running)."""
    procs = start_ranks(what, out, world, *args, script=script)
    deadline = time.time() + timeout
    failed = []
    for rank, (p, log) in enumerate(procs):
        try:
            rc = p.wait(max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            dump_stacks_and_kill(procs)
            rc = "timeout"
        log.close()
        if rc != 0:
            failed.append((rank, rc))
    if failed:
        msgs = []
        for rank, rc in failed:
            with open(os.path.join(out, "log%d.txt" % rank)) as f:
                msgs.append("rank %d exited %s:\n%s" % (rank, rc, f.read()[-6000:]))
        raise AssertionError("\n".join(msgs))


def load_truth(out, rank):
    with open(os.path.join(out, "truth%d.json" % rank)) as f:
        return json.load(f)


def events(path, allow_cut=False):
    from commdebug.tracefile import read_events
    return list(read_events(path, allow_cut=allow_cut))


def timeless_events(path):
    """A trace's events but meta, pg and end, each without its time: what
    two runs of one program must have alike."""
    out = []
    for ev in events(path):
        if ev.get("ev") in ("meta", "pg", "end"):
            continue
        ev.pop("t", None)
        out.append(ev)
    return out


def recorded(path, run, **variables):
    """The timeless events of the trace a Recorder at path records while
    run(rec) runs, with the environment's variables set as given for it (a
    value of None: unset), torch seeded with 0; and the Recorder."""
    import torch
    from commdebug import Recorder
    saved = {k: os.environ.get(k) for k in variables}
    for k, v in variables.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        rec = Recorder(path)
        torch.manual_seed(0)
        run(rec)
        rec.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return timeless_events(rec.path), rec


def same_events(got, want, what):
    """got == want, else an AssertionError naming the first event apart."""
    if got != want:
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                 min(len(got), len(want)))
        raise AssertionError("%s: event %d: %r vs %r (%d vs %d events)"
                             % (what, i, got[i:i + 3], want[i:i + 3], len(got), len(want)))


def zstd_cli_text(path):
    """Decode with the zstd command-line tool (an independent decoder)."""
    r = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise AssertionError("zstd -dc %s failed: %s" % (path, r.stderr.decode()))
    return r.stdout.decode()


def regions(evs):
    """{region number: [events between its region_enter and region_exit]}"""
    out = {}
    cur = None
    for e in evs:
        if e["ev"] == "region_enter":
            cur = e["region"]
            out[cur] = []
        elif e["ev"] == "region_exit":
            cur = None
        elif cur is not None:
            out[cur].append(e)
    return out


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def eq(got, want, what):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


# ----------------------------------------------------------------------- analyzer
class Analyzer:
    def __init__(self, path):
        self.path = path

    def run(self, *args, check_rc=(0,)):
        r = subprocess.run([self.path] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        out, err = r.stdout.decode(), r.stderr.decode()
        if check_rc is not None and r.returncode not in check_rc:
            raise AssertionError("%s %s exited %d\nstderr: %s\nstdout: %s"
                                 % (self.path, " ".join(map(str, args)), r.returncode,
                                    err[-2000:], out[-2000:]))
        return r.returncode, out, err

    def json_docs(self, *args, check_rc=(0,)):
        rc, out, err = self.run(*args, check_rc=check_rc)
        return json_stream(out), rc, err


def json_stream(text):
    """Parse concatenated JSON documents (one per region)."""
    dec = json.JSONDecoder()
    docs = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return docs
        doc, i = dec.raw_decode(text, i)
        docs.append(doc)


def tree_index(doc):
    """fqn -> node (first occurrence) and fqn -> parent fqn, from a JSON dump."""
    nodes, parents = {}, {}

    def walk(node, parent):
        fqn = node["fqn"]
        if fqn not in nodes:
            nodes[fqn] = node
            parents[fqn] = parent
        for c in node.get("children", []):
            walk(c, fqn)

    walk(doc, None)
    return nodes, parents


def pairs(lst):
    """[[name, count], ...] -> {name: count}"""
    return {k: v for k, v in lst}
