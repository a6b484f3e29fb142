"""Wrapping a job in ``python -m commdebug.record --out DIR -- ...`` under
each launcher style: one trace per rank, named by the rank the worker really
has, meta right, the launcher itself leaves no trace, no file is written by
two processes (each trace's meta pid is the pid its rank logged)."""

import json
import os
import subprocess

from _util import HERE, PYTHON, Skip, check, env, eq, events, free_port

JOB = os.path.join(HERE, "launch_jobs.py")
WORLD = 2


def record(out, cmd, extra_env=None, timeout=240):
    e = env(**(extra_env or {}))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                "PMI_RANK", "PMIX_RANK", "COMMDEBUG_ENV_RANK"):
        if not (extra_env and var in extra_env):
            e.pop(var, None)
    return subprocess.Popen([PYTHON, "-m", "commdebug.record", "--out", out, "--"] + cmd,
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(procs, timeout=240):
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        err = err.decode()
        errs.append(err)
        eq(p.returncode, 0, "exit status (stderr: %s)" % err[-3000:])
    return "".join(errs)


def check_traces(out, world, err):
    names = sorted(os.listdir(out))
    traces = [n for n in names if n.endswith(".zst")]
    eq(traces, ["rank%d.zst" % r for r in range(world)], "traces in %s (all: %r)" % (out, names))
    check("another live recorder" not in err, "two recorders met on one file: %s", err)
    pids = set()
    for r in range(world):
        with open(os.path.join(out, "log-rank%d.json" % r)) as f:
            log = json.load(f)
        evs = events(os.path.join(out, "rank%d.zst" % r))
        meta = evs[0]
        eq((meta["ev"], meta["rank"], meta["world_size"]), ("meta", r, world), "rank %d meta" % r)
        eq(meta["pid"], log["pid"], "rank %d: meta pid vs the pid the worker logged" % r)
        pids.add(meta["pid"])
        ars = [e for e in evs if e["ev"] == "op" and e["name"].startswith("c10d.allreduce_")]
        eq([e["seq"] for e in ars], list(range(1, log["all_reduces"] + 1)),
           "rank %d all_reduce seqs" % r)
        eq(sum(1 for e in evs if e["ev"] == "meta"), 1, "rank %d: one meta event" % r)
        eq(sum(1 for e in evs if e["ev"] == "region_enter"), 1, "rank %d: one region" % r)
        eq(sum(1 for e in evs if e["ev"] == "region_exit"), 1, "rank %d: region closed" % r)
    eq(len(pids), world, "distinct processes")


def worker(out, port, *extra):
    return [JOB, "worker", "--out", out, "--port", str(port)] + [str(a) for a in extra]


def test_hand_started_rank_in_init_only(ctx):
    """Two processes started by hand, the rank given only to
    init_process_group (no launcher variable): each trace waits under a
    hidden name and takes its rank's name at init."""
    out = os.path.join(ctx.tmp, "t")
    port = free_port()
    procs = [record(out, worker(out, port, "--rank", r, "--world", WORLD)) for r in range(WORLD)]
    check_traces(out, WORLD, finish(procs))


def _env_style(ctx, var, sizevar):
    out = os.path.join(ctx.tmp, "t")
    port = free_port()
    procs = [record(out, worker(out, port), {var: r, sizevar: WORLD}) for r in range(WORLD)]
    check_traces(out, WORLD, finish(procs))


def test_env_rank(ctx):
    """RANK / WORLD_SIZE (torchrun's variables), each process wrapped."""
    _env_style(ctx, "RANK", "WORLD_SIZE")


def test_env_slurm_procid(ctx):
    _env_style(ctx, "SLURM_PROCID", "SLURM_NTASKS")


def test_env_ompi_rank(ctx):
    _env_style(ctx, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")


def test_wrapped_launcher_srun_style(ctx):
    """The launcher wrapped (record -- LAUNCHER ...), as with srun or mpirun:
    a stand-in launcher starts the workers with SLURM_PROCID / PMI_RANK."""
    for var, sizevar in (("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE")):
        out = os.path.join(ctx.tmp, var)
        port = free_port()
        p = record(out, [PYTHON, JOB, "fake-launcher", var, sizevar, str(WORLD), "--", PYTHON]
                   + worker(out, port))
        check_traces(out, WORLD, finish([p]))


def test_wrapped_launcher_script(ctx):
    """A launcher script that starts the workers itself (rank on their
    command line only): the script's own process leaves no trace."""
    out = os.path.join(ctx.tmp, "t")
    p = record(out, [JOB, "launcher", "--out", out, "--port", str(free_port()),
                     "--world", str(WORLD)])
    check_traces(out, WORLD, finish([p]))
    # The same started as a command (python launch.py), not in-process.
    out = os.path.join(ctx.tmp, "t2")
    p = record(out, [PYTHON, JOB, "launcher", "--out", out, "--port", str(free_port()),
                     "--world", str(WORLD)])
    check_traces(out, WORLD, finish([p]))


def test_mp_spawn(ctx):
    """torch.multiprocessing.spawn: the workers are fresh interpreters."""
    out = os.path.join(ctx.tmp, "t")
    p = record(out, [JOB, "spawn", "--out", out, "--port", str(free_port()),
                     "--world", str(WORLD)])
    check_traces(out, WORLD, finish([p]))


def test_wrapped_torchrun(ctx):
    """record -- torchrun ...: torchrun's agent is not recorded, its workers are."""
    out = os.path.join(ctx.tmp, "t")
    port = free_port()
    script = os.path.join(ctx.tmp, "probe.py")
    with open(script, "w") as f:
        f.write("pass\n")
    probe = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "1",
                            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                            script], env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=240)
    if probe.returncode != 0:
        last = probe.stderr.decode().strip().splitlines()[-1:] or ["?"]
        raise Skip("torchrun does not start here (%s)" % last[0])
    p = record(out, [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
                     "--master_addr", "127.0.0.1", "--master_port", str(free_port()), JOB,
                     "worker", "--out", out, "--port", str(port)])
    check_traces(out, WORLD, finish([p]))
