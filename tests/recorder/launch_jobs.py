#!/usr/bin/env python3
"""Jobs for the launcher tests (test_launchers.py).  None of them imports
commdebug: they are recorded by wrapping them in ``python -m commdebug.record``.

    launch_jobs.py worker  --out DIR --port P [--rank R --world W]
        one gloo rank: init_process_group (rank and world from the arguments,
        else from RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK and
        their size variables), three all_reduces, DIR/log-rank<R>.json
    launch_jobs.py fake-launcher VAR SIZEVAR N -- CMD...
        a stand-in for srun / mpirun written in Python: starts N copies of
        CMD with VAR=i and SIZEVAR=N, waits for them
    launch_jobs.py launcher --out DIR --port P --world W
        a launcher script: starts W workers with the rank only on their
        command line, waits
    launch_jobs.py spawn --out DIR --port P --world W
        torch.multiprocessing.spawn of W workers
"""

import json
import os
import subprocess
import sys

ALL_REDUCES = 3
_VARS = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
         ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))


def work(rank, world, port, out):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    t = torch.ones(8) * (rank + 1)
    for _ in range(ALL_REDUCES):
        dist.all_reduce(t)
    with open(os.path.join(out, "log-rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "all_reduces": ALL_REDUCES,
                   "sum": float(t.sum())}, f)
    dist.barrier()
    dist.destroy_process_group()


def _spawned(i, world, port, out):
    work(i, world, port, out)


def main():
    argv = sys.argv[1:]
    what = argv[0]
    if what == "fake-launcher":
        var, sizevar, n = argv[1], argv[2], int(argv[3])
        cmd = argv[argv.index("--") + 1:]
        procs = []
        for i in range(n):
            e = dict(os.environ)
            e[var] = str(i)
            e[sizevar] = str(n)
            procs.append(subprocess.Popen(cmd, env=e))
        sys.exit(max(p.wait() != 0 for p in procs))
    opts = dict(zip(argv[1::2], argv[2::2]))
    out, port = opts["--out"], int(opts["--port"])
    if what == "worker":
        if "--rank" in opts:
            rank, world = int(opts["--rank"]), int(opts["--world"])
        else:
            for var, sizevar in _VARS:
                if var in os.environ:
                    rank, world = int(os.environ[var]), int(os.environ[sizevar])
                    break
        work(rank, world, port, out)
    elif what == "launcher":
        world = int(opts["--world"])
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", "--out",
                                   out, "--port", str(port), "--rank", str(r), "--world",
                                   str(world)]) for r in range(world)]
        sys.exit(max(p.wait() != 0 for p in procs))
    elif what == "spawn":
        import torch.multiprocessing as mp
        world = int(opts["--world"])
        mp.spawn(_spawned, args=(world, port, out), nprocs=world, join=True)


if __name__ == "__main__":
    main()
