#!/usr/bin/env python3
"""Ranks that die: for test_durability.py.

    die_jobs.py HOW --out DIR --port P --rank R --world W [--light 1]

Each rank records into DIR/rank<R>.zst, runs K = 4 steps of a few matmuls
and one all_reduce, and appends to DIR/log<R>.txt, with one write(2) each
(the kernel keeps them when the process dies), "mm N" after its N-th matmul
and "issue SEQ BYTES" just before it hands all_reduce SEQ to gloo.  Then:

  kill   rank 1 issues all_reduce K+1, which rank 0 never joins: it blocks
         there until the test SIGKILLs it (rank 0 sleeps until killed);
  abort  after the K collectives, two more matmuls, then os.abort();
  segv   the same, then a read of address 0 (SIGSEGV);
  size   all_reduce K+1 with a different size on each rank: gloo aborts
         the process (terminate) or raises; a rank that gets an exception
         logs "error" and sleeps until killed.

With --light 1 the recorder is a light one, and each "matmul" is a call of
an nn.Linear (light mode records module calls, not ops); the rank waits
0.3 s before its first step, so that its writer thread has padded and
mapped the trace's end (_padtail) when the frames before the collectives
are written.
"""

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from commdebug import Recorder  # noqa: E402

K = 4


def main():
    how = sys.argv[1]
    opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    out, port = opts["--out"], int(opts["--port"])
    rank, world = int(opts["--rank"]), int(opts["--world"])
    logfd = os.open(os.path.join(out, "log%d.txt" % rank),
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(*words):
        os.write(logfd, (" ".join(str(w) for w in words) + "\n").encode())

    light = opts.get("--light") == "1"
    rec = Recorder(os.path.join(out, "rank{rank}.zst"), light=light)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    a = torch.randn(8, 8)
    t = torch.ones(16)
    lin = torch.nn.Linear(8, 8)
    mm = [0]

    def matmuls(n):
        for _ in range(n):
            if light:
                lin(a)
            else:
                torch.mm(a, a)
            mm[0] += 1
            log("mm", mm[0])

    with rec(label="step"):
        if light:
            time.sleep(0.3)
        for seq in range(1, K + 1):
            matmuls(3)
            log("issue", seq, t.numel() * 4)
            dist.all_reduce(t)
        log("ready")
        if how in ("abort", "segv"):
            matmuls(2)
            if how == "abort":
                os.abort()
            ctypes.string_at(0)
        if how == "kill":
            if rank == 1:
                log("issue", K + 1, t.numel() * 4)
                dist.all_reduce(t)
            while True:
                time.sleep(1)
        if how == "size":
            x = torch.ones(16 * (rank + 1))
            log("issue", K + 1, x.numel() * 4)
            try:
                dist.all_reduce(x)
            except Exception as e:
                log("error", type(e).__name__)
            while True:
                time.sleep(1)


if __name__ == "__main__":
    main()
