"""How a recorded process ended (the end event), and runs into a directory
that already holds traces.

Every trace of this recorder says in its meta that it ends with an end event
("ends": true); the end event says whether the process exited (with the
status it passed to sys.exit when the recorder saw it) or was ended by an
exception nothing caught.  A process killed by a signal leaves no end event.
Each case runs a real script, under a Recorder of its own and under
python -m commdebug.record, and reads the trace back.
"""

import os
import signal
import subprocess
import time

from _util import PYTHON, check, env, eq, events

_BODY = {
    "normal": "pass\n",
    "sys_exit": "import sys; sys.exit(3)\n",
    "sys_exit_zero": "import sys; sys.exit(0)\n",
    "sys_exit_msg": "import sys; sys.exit('giving up')\n",
    "exception": "raise RuntimeError('Connection closed by peer\\nsecond line')\n",
    "custom_exception": "class PeerGone(Exception): pass\nraise PeerGone('rank 1')\n",
    "keyboard": "raise KeyboardInterrupt\n",
    "sigkill": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n",
}
# (exit status of the process, the end event's fields or None for no end event)
_WANT = {
    "normal": (0, {"how": "exit"}),
    "sys_exit": (3, {"how": "exit", "code": 3}),
    "sys_exit_zero": (0, {"how": "exit"}),
    "sys_exit_msg": (1, {"how": "exit", "code": 1}),
    "exception": (1, {"how": "exception", "exc": "RuntimeError",
                      "msg": "Connection closed by peer\nsecond line"}),
    "custom_exception": (1, {"how": "exception", "exc": "__main__.PeerGone", "msg": "rank 1"}),
    "keyboard": (None, {"how": "exception", "exc": "KeyboardInterrupt", "msg": ""}),
    "sigkill": (-signal.SIGKILL, None),
}


def _script(path, body, cli):
    """A script that records one region with a forward in it, then ends as
    BODY says (inside no region)."""
    lines = ["import torch\n"]
    if not cli:
        lines.append("from commdebug import Recorder\n"
                     "rec = Recorder(%r)\n"
                     "with rec:\n"
                     "    torch.nn.Linear(2, 2)(torch.ones(1, 2))\n" % path)
    else:
        lines.append("torch.nn.Linear(2, 2)(torch.ones(1, 2))\n")
    lines.append(body)
    return "".join(lines)


def _check_end(evs, want, what):
    eq(evs[0].get("ends"), True, "%s: meta ends" % what)
    ends = [e for e in evs if e["ev"] == "end"]
    if want is None:
        eq(ends, [], "%s: end events" % what)
        return
    eq(len(ends), 1, "%s: end events" % what)
    eq(evs[-1]["ev"], "end", "%s: last event" % what)
    got = {k: v for k, v in ends[0].items() if k not in ("ev", "t")}
    eq(got, want, "%s: end event" % what)


def test_end_event(ctx):
    """Each way of ending, under a Recorder of the program's own."""
    for case, body in sorted(_BODY.items()):
        path = os.path.join(ctx.tmp, case + ".zst")
        script = os.path.join(ctx.tmp, case + ".py")
        with open(script, "w") as f:
            f.write(_script(path, body, cli=False))
        r = subprocess.run([PYTHON, script], env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        rc, want = _WANT[case]
        if rc is not None:
            eq(r.returncode, rc, "%s: exit status (stderr: %s)" % (case, r.stderr.decode()[-800:]))
        if case.endswith("exception"):
            check(b"Traceback" in r.stderr, "%s: the traceback is still printed", case)
        _check_end(events(path, allow_cut=True), want, case)


def test_end_event_record_cli(ctx):
    """The same under python -m commdebug.record, which runs the script in
    its own process (and catches what the script raises)."""
    for case in ("normal", "sys_exit", "exception", "sigkill"):
        out = os.path.join(ctx.tmp, case)
        script = os.path.join(ctx.tmp, case + ".py")
        with open(script, "w") as f:
            f.write(_script(None, _BODY[case], cli=True))
        r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--", script],
                           env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rc, want = _WANT[case]
        eq(r.returncode, rc, "%s: exit status (stderr: %s)" % (case, r.stderr.decode()[-800:]))
        files = sorted(os.listdir(out))
        if case != "sigkill":
            eq(files, ["rank0.zst"], "%s: files" % case)
            _check_end(events(os.path.join(out, "rank0.zst"), allow_cut=True), want, case)
            continue
        # Killed before it learned a rank: the trace keeps its hidden
        # pending name, and the analyzer names it instead of "no traces".
        eq(len(files), 1, "%s: files %r" % (case, files))
        check(files[0].startswith(".rank-pending-"), "%s: files %r", case, files)
        _check_end(events(os.path.join(out, files[0]), allow_cut=True), want, case)
        if ctx.analyzer is not None:
            rc, _, err = ctx.analyzer.run("ranks", out, check_rc=None)
            eq(rc, 1, "ranks on a directory holding only a pending trace")
            check(files[0] in err and "waiting for its rank" in err, "ranks says %r", err)


def test_rerun_into_the_same_directory(ctx):
    """Two runs of python -m commdebug.record into one directory, the second
    started right after the first ended (well within the same second): the
    second run's trace replaces the first's, it is not taken for a launcher's
    and dropped."""
    script = os.path.join(ctx.tmp, "train.py")
    with open(script, "w") as f:
        f.write("import torch\ntorch.nn.Linear(2, 2)(torch.ones(1, 2))\n")
    out = os.path.join(ctx.tmp, "traces")
    seen = []
    for run in range(3):
        t = time.time()
        r = subprocess.run([PYTHON, "-m", "commdebug.record", "--out", out, "--", script],
                           env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        eq(r.returncode, 0, "run %d: exit status (stderr: %s)" % (run, r.stderr.decode()))
        eq(sorted(os.listdir(out)), ["rank0.zst"], "run %d: files" % run)
        evs = events(os.path.join(out, "rank0.zst"))
        labels = [e.get("label") for e in evs if e["ev"] == "region_enter"]
        eq(labels, ["train.py"], "run %d: labels" % run)
        check(evs[0]["pid"] not in seen, "run %d: the trace is an earlier run's (pid %d)",
              run, evs[0]["pid"])
        check(evs[0].get("job"), "run %d: no job in the meta event", run)
        seen.append(evs[0]["pid"])
        check(time.time() - t < 30, "run %d took too long", run)
