#!/usr/bin/env python3
"""A 2-rank gloo job whose rank 1 is SIGKILLed after its last collective:
the post-mortem case where no collective is left waiting.

As a worker (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):

    death_jobs.py --out DIR [--steps N]

Every step, in a recorded region labelled "step N": a DistributedDataParallel
forward and backward (its gradient all-reduce), and, where torch has DTensor,
a DTensor redistributed from Partial to Replicate over a 1-D device mesh (an
all-reduce).  After the last step rank 1 waits 1.5 s (so the recorder, which
flushes every 0.5 s, has written all it saw) and SIGKILLs itself; rank 0 then
all-reduces once more outside any region, which gloo fails (the peer is gone):
the RuntimeError ends rank 0's process.

The ledger DIR/ledger<R>.jsonl (one os.write per line, before the act):
{"ev": "start", "rank", "dtensor"}, {"ev": "coll", "step", "what"} per
collective the worker issues, {"ev": "kill"} right before the SIGKILL,
{"ev": "error", "exc", "msg"} when the last all-reduce raised (then re-raised).
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")


def ledger(out, rank):
    fd = os.open(os.path.join(out, "ledger%d.jsonl" % rank),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)

    def write(**kw):
        kw.setdefault("t_ns", time.time_ns())
        os.write(fd, (json.dumps(kw, sort_keys=True) + "\n").encode())
    return write


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    sys.path.insert(0, PYDIR)
    from commdebug import Recorder

    rank = int(os.environ["RANK"])
    log = ledger(args.out, rank)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    mesh = None
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Partial, Replicate
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    except ImportError:
        pass
    log(ev="start", rank=rank, dtensor=mesh is not None)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 8))
    rec = Recorder(os.path.join(args.out, "traces", "rank{rank}.zst"))
    for step in range(1, args.steps + 1):
        with rec(label="step %d" % step):
            x = torch.randn(4, 8)
            log(ev="coll", step=step, what="ddp")
            model(x).sum().backward()
            if mesh is not None:
                log(ev="coll", step=step, what="dtensor")
                d = DTensor.from_local(torch.ones(4), mesh, [Partial()])
                d.redistribute(mesh, [Replicate()]).to_local()
    if rank == 1:
        time.sleep(1.5)
        log(ev="kill")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    try:
        dist.all_reduce(torch.ones(1))
        log(ev="done")
    except Exception as e:
        log(ev="error", exc=type(e).__name__, msg=str(e).splitlines()[0] if str(e) else "")
        raise


def run(out, python=None, steps=3, deadline=120):
    """Run both ranks; returns their exit statuses (negative: the signal)."""
    os.makedirs(os.path.join(out, "traces"), exist_ok=True)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
        f = open(os.path.join(out, "log%d.txt" % rank), "w")
        procs.append((subprocess.Popen([python or sys.executable, os.path.abspath(__file__),
                                        "--out", out, "--steps", str(steps)], env=env,
                                       stdout=f, stderr=subprocess.STDOUT), f))
    end = time.time() + deadline
    rcs = []
    for p, f in procs:
        try:
            rcs.append(p.wait(max(0.1, end - time.time())))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(p.wait(30))
        f.close()
    return rcs


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    worker(ap.parse_args())
