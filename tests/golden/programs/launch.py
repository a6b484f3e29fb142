"""Run a golden program as the processes of one job, forked from this process.

Importing torch takes seconds per process, and many processes on two cores
make that the bulk of a run: preload() imports what the programs import, once,
and run_case() forks every rank from here, so each rank is still a fresh
process of its own (its own process group, Recorder, garbage collector), with
nothing of torch initialised before the fork but its modules.  Nothing here
may start a thread or a process group in the parent.
"""

import os
import runpy
import select
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

LEFT_OUT = 3        # the program's exit status when this torch cannot run the case
REGION_FAILED = 4   # ... when a region failed under the observer


def preload():
    """Import what the programs import (the parts this torch has)."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.utils.checkpoint  # noqa: F401
    for name in ("torch.distributed.tensor", "torch.distributed.tensor.parallel",
                 "torch.distributed.tensor.debug", "torch.distributed.device_mesh",
                 "torch.distributed._functional_collectives", "torch.distributed.fsdp",
                 "torch.nn.parallel", "transformers"):
        try:
            __import__(name)
        except Exception:
            pass
    try:
        from transformers import GPT2LMHeadModel  # noqa: F401  (transformers loads lazily)
    except Exception:
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _child(argv, env, log):
    """In the forked child: run the program as __main__; never returns."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ.update(env)
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(argv[0]))
        try:
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def program_argv(case, outdir, mode):
    if case == "gpt2":
        return [os.path.join(HERE, "gpt2.py"), outdir, mode]
    return [os.path.join(HERE, "golden.py"), case, outdir, mode]


def run_case(case, world, outdir, mode, tag=None, timeout=180):
    """Run CASE under MODE (rec, cdm or ops) as WORLD processes forked from
    here; their output goes to OUTDIR/CASE/log-TAG-rankR.txt (TAG: MODE).
    Returns [exit status per rank], "timeout" for a rank that was killed."""
    cdir = os.path.join(outdir, case)
    os.makedirs(cdir, exist_ok=True)
    env = {"WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    argv = program_argv(case, outdir, mode)
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for r in range(world):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        log = os.path.join(cdir, "log-%s-rank%d.txt" % (tag or mode, r))
        pid = os.fork()
        if pid == 0:
            _child(argv, e, log)
        pids.append(pid)
    rcs = {}
    deadline = time.time() + timeout
    while len(rcs) < len(pids):
        for pid in pids:
            if pid in rcs:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rcs[pid] = os.waitstatus_to_exitcode(status) if hasattr(
                    os, "waitstatus_to_exitcode") else (status >> 8)
        if len(rcs) == len(pids):
            break
        if time.time() > deadline:
            for pid in pids:
                if pid not in rcs:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    rcs[pid] = "timeout"
            break
        select.select([], [], [], 0.05)
    return [rcs[p] for p in pids]


def log_tail(outdir, case, tag, rank, n=2000):
    try:
        with open(os.path.join(outdir, case, "log-%s-rank%d.txt" % (tag, rank)),
                  errors="replace") as f:
            return f.read()[-n:]
    except OSError as e:
        return str(e)
