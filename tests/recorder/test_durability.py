"""What a rank's trace holds when the rank dies suddenly (SIGKILL, SIGABRT,
SIGSEGV, a gloo abort): every event up to and including the last collective
the rank issued, checked against the log the rank wrote (one write(2) per
line, kept by the kernel) before it died."""

import os
import signal
import subprocess
import time

from _util import HERE, PYTHON, check, env, eq, events, free_port, need_light

JOB = os.path.join(HERE, "die_jobs.py")


def start(how, out, world=2, light=False):
    os.makedirs(out, exist_ok=True)
    port = free_port()
    procs = []
    for r in range(world):
        e = env()
        for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            e.pop(var, None)
        procs.append(subprocess.Popen([PYTHON, JOB, how, "--out", out, "--port", str(port),
                                       "--rank", str(r), "--world", str(world),
                                       "--light", "1" if light else "0"], env=e,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return procs


def read_log(out, rank):
    try:
        with open(os.path.join(out, "log%d.txt" % rank)) as f:
            return [line.split() for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def wait_for(cond, what, procs, timeout=120):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            for p in procs:
                p.kill()
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


def blocked(pid):
    """The process's main thread has been asleep (state S) for 0.5 s."""
    for _ in range(10):
        try:
            with open("/proc/%d/task/%d/stat" % (pid, pid)) as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            return False
        if state != "S":
            return False
        time.sleep(0.05)
    return True


def check_trace(out, rank, light=False):
    """The rank's trace against its log: every collective it logged as
    issued is in the trace, in order, with its seq and bytes, and every
    matmul logged before the last one is there too (light: every call of
    the Linear that stands for one, its fw_pre)."""
    log = read_log(out, rank)
    issued = [(int(w[1]), int(w[2])) for w in log if w[0] == "issue"]
    check(issued, "rank %d logged no collective", rank)
    last = len(log) - 1 - [w[0] for w in reversed(log)].index("issue")
    mm_before_last = sum(1 for w in log[:last] if w[0] == "mm")
    evs = events(os.path.join(out, "rank%d.zst" % rank), allow_cut=True)
    eq(evs[0]["ev"], "meta", "rank %d: first event" % rank)
    eq(evs[0]["rank"], rank, "rank %d: meta rank" % rank)
    colls = [i for i, e in enumerate(evs) if e["ev"] == "op" and
             e["name"].startswith("c10d.allreduce_")]
    eq([(evs[i]["seq"], evs[i]["bytes"]) for i in colls], issued,
       "rank %d: collectives in the trace vs the ones it logged as issued" % rank)
    if light:
        mms = sum(1 for e in evs[:colls[-1]] if e["ev"] == "fw_pre" and e["mod"] == "Linear")
    else:
        mms = sum(1 for e in evs[:colls[-1]] if e["ev"] == "op" and e["name"] == "aten.mm.default")
    eq(mms, mm_before_last, "rank %d: matmuls before its last collective" % rank)
    return evs, log


def finish(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(30)


def test_sigkill_while_blocked_in_a_collective(ctx, light=False):
    out = ctx.tmp
    procs = start("kill", out, light=light)
    try:
        wait_for(lambda: any(w[:2] == ["issue", "5"] for w in read_log(out, 1)),
                 "rank 1 to issue its 5th all_reduce", procs)
        wait_for(lambda: blocked(procs[1].pid), "rank 1 to block in gloo", procs)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(30)
        eq(procs[1].returncode, -signal.SIGKILL, "rank 1 exit")
    finally:
        finish(procs)
    check_trace(out, 1, light)
    return out


def test_light_sigkill_while_blocked_in_a_collective(ctx):
    """The same, recorded light: the frames before its collectives went
    through the padded, mapped end of the file (_padtail), which the killed
    process leaves as it was."""
    need_light()
    out = test_sigkill_while_blocked_in_a_collective(ctx, light=True)
    size = os.path.getsize(os.path.join(out, "rank1.zst"))
    check(size >= 1 << 20, "rank 1's trace is %d bytes: its end was not padded", size)
    # the analyzer reads it whole, the padding skipped, as zstd does
    r = subprocess.run(["zstd", "-qdc", os.path.join(out, "rank1.zst")], capture_output=True)
    eq(r.returncode, 0, "zstd -dc of the killed rank's trace (%s)" % r.stderr.decode()[-300:])
    if ctx.analyzer is not None:
        _, text, err = ctx.analyzer.run("counts", os.path.join(out, "rank1.zst"))
        check("c10d.allreduce_: 5" in text, "commdebug counts of it: %s %s", text, err)



def _die(ctx, how, sig, light=False):
    out = ctx.tmp
    procs = start(how, out, light=light)
    try:
        for p in procs:
            p.wait(120)
        for r, p in enumerate(procs):
            eq(p.returncode, -sig, "rank %d exit (stderr: %s)" % (r, p.stderr.read().decode()[-2000:]))
    finally:
        finish(procs)
    for r in range(2):
        evs, log = check_trace(out, r, light)
        check(log[-1][0] == "mm", "rank %d log ends with %r", r, log[-1])


def test_os_abort_in_a_worker(ctx):
    _die(ctx, "abort", signal.SIGABRT)


def test_light_os_abort_in_a_worker(ctx):
    need_light()
    _die(ctx, "abort", signal.SIGABRT, light=True)


def test_sigsegv_in_a_worker(ctx):
    _die(ctx, "segv", signal.SIGSEGV)


def test_gloo_abort_size_mismatch(ctx):
    """all_reduce of 64 bytes on rank 0 and 128 on rank 1: gloo aborts (at
    least) one of them mid-step; both traces end with that collective."""
    out = ctx.tmp
    procs = start("size", out)
    try:
        def settled():
            done = 0
            for r, p in enumerate(procs):
                log = read_log(out, r)
                if p.poll() is not None or (log and log[-1][0] == "error"):
                    done += 1
            return done == len(procs)
        wait_for(settled, "both ranks to die or fail", procs)
        aborted = [r for r, p in enumerate(procs) if p.poll() == -signal.SIGABRT]
        check(aborted, "no rank was aborted: %r", [p.poll() for p in procs])
        ctx.note("aborted ranks: %r" % aborted)
    finally:
        finish(procs)
    for r in range(2):
        _, log = check_trace(out, r)
        eq([w[:2] for w in log if w[0] == "issue"][-1], ["issue", "5"], "rank %d last issue" % r)
