#!/usr/bin/env python3
"""Real failing 4-rank gloo jobs recorded only by PyTorch's Flight Recorder
(no commdebug recorder), for the Flight Recorder reader (issue 23).

As a harness (inside the torch 2.14 root, from the repository root):

    tests/torch2/env.sh run python3 tests/fr/fr_jobs.py --case skip --out testdata/fr/skip

As a worker (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by the harness):

    fr_jobs.py --worker --case CASE --out DIR

The job: the world group "0" and a pair group "1" ({0,1}) / "2" ({2,3}) made by
new_group in that order on every rank.  Each of STEPS steps issues, in order:
an all_reduce of 16 float32 in the world group, a broadcast of 8 float32 from
rank 0 in the world group, an all_reduce of 4 float32 in the rank's pair group;
in step 1 also a send/recv of 4 float32 between the pair (the lower rank sends).

Faults (rank 1, step 2, at the world all_reduce unless said):

    ok        none
    skip      rank 1 does not issue the world all_reduce of step 2
    coll      rank 1 all_gathers (16 float32 per rank) instead
    size      rank 1 all_reduces 32 float32 instead of 16
    sleep     rank 2 sleeps before the world all_reduce of step 2 until the other
              ranks have dumped in flight (at least 6.5 s, past commdebug's 5 s
              straggler threshold, at most --timeout less 2 s: a straggler; the
              job ends normally)

Dumps, named <prefix><rank> as fr_trace infers the rank:

    DIR/inflight/fr_rank<R>        pickle, _dump_fr_trace(), taken from a thread
                                   once a collective has been in flight 3 s (as the
                                   watchdog would; only where one hangs)
    DIR/inflight-json/fr_rank<R>   the same moment, _dump_fr_trace_json()
    DIR/exit/fr_rank<R>            pickle at exit (normal or after the error)
    DIR/exit-json/fr_rank<R>       JSON at exit
    DIR/watchdog/fr_rank<R>        whatever the watchdog itself wrote through
                                   TORCH_FR_DUMP_TEMP_FILE=DIR/watchdog/fr_rank
    DIR/trace/rank<R>.zst          with --record: the commdebug trace of the same
                                   run (a Recorder in the worker, one region per
                                   step labelled "step <step>", the step's
                                   collectives issued from the forward of the
                                   modules Net.world_reduce, Net.broadcast and
                                   Net.pair_reduce), closed before the exit dump
    DIR/ledger<R>.jsonl            the worker's own account, one line per event,
                                   each collective's line written before the call:
      {"ev":"start","rank","world_size","groups":{pg:[ranks]}}
      {"ev":"coll","pg","seq","collective","numel","dtype","step","t_ns"}
          seq: counted by the worker per pg, 1-based, collectives only (p2p
          has its own "p2p_seq", as FR counts it)
      {"ev":"fault","kind","step","t_ns"}
      {"ev":"error","msg","t_ns"}       a collective raised (timeout, peer gone)
      {"ev":"done","t_ns"}
"""

import argparse
import contextlib
import datetime
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 4
WORLD = 4
FAULT_RANK = {"skip": 1, "coll": 1, "size": 1, "sleep": 2}
FAULT_STEP = 2


class Ledger:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)

    def write(self, **kw):
        os.write(self.fd, (json.dumps(kw, sort_keys=True) + "\n").encode())


def dump(out, sub, rank, json_too=True):
    """Each file written whole under DIR/.tmp, then renamed into place: a
    dump in its directory is complete."""
    import torch._C._distributed_c10d as c10d
    tmp = os.path.join(out, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    for d, fn in ((sub, c10d._dump_fr_trace),) + (((sub + "-json", c10d._dump_fr_trace_json),)
                                                   if json_too else ()):
        os.makedirs(os.path.join(out, d), exist_ok=True)
        t = os.path.join(tmp, "%s.%d" % (d, rank))
        with open(t, "wb") as f:
            f.write(fn())
        os.replace(t, os.path.join(out, d, "fr_rank%d" % rank))


def wait_for_dumps(out, ranks, least, most):
    """The straggler's sleep: until every rank of ranks has dumped in flight
    (pickle and JSON), and at least least, at most most seconds."""
    t0 = time.monotonic()
    names = [os.path.join(out, d, "fr_rank%d" % r) for r in ranks
             for d in ("inflight", "inflight-json")]
    while time.monotonic() - t0 < most:
        if time.monotonic() - t0 >= least and all(os.path.exists(n) for n in names):
            return
        time.sleep(0.05)


def worker(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    led = Ledger(os.path.join(args.out, "ledger%d.jsonl" % rank))
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    g01 = dist.new_group([0, 1], timeout=timeout)
    g23 = dist.new_group([2, 3], timeout=timeout)
    pair = g01 if rank < 2 else g23
    pair_name = "1" if rank < 2 else "2"
    led.write(ev="start", rank=rank, world_size=world,
              groups={"0": list(range(world)), pair_name: [0, 1] if rank < 2 else [2, 3]})
    seqs = {"0": 0, pair_name: 0}
    p2p = [0]
    inflight = {"since": None}

    def watch():
        # a collective in flight 3 s: dump, as the watchdog would on a timeout
        while True:
            time.sleep(0.2)
            since = inflight["since"]
            if since is not None and time.monotonic() - since > 3.0:
                dump(args.out, "inflight", rank)
                return

    threading.Thread(target=watch, daemon=True).start()

    def coll(pg, name, fn, t, step):
        seqs[pg] += 1
        led.write(ev="coll", pg=pg, seq=seqs[pg], collective=name, numel=t.numel(),
                  dtype=str(t.dtype).replace("torch.", ""), step=step, t_ns=time.time_ns())
        inflight["since"] = time.monotonic()
        fn()
        inflight["since"] = None

    rec = None
    mods = {}
    if args.record:
        # the commdebug recorder beside the Flight Recorder: one region per step,
        # each collective issued from a module's forward (the job is otherwise
        # the same)
        sys.path.insert(0, os.path.join(REPO, "python"))
        from commdebug import Recorder
        os.makedirs(os.path.join(args.out, "trace"), exist_ok=True)
        rec = Recorder(os.path.join(args.out, "trace", "rank{rank}.zst"))

        class Issue(torch.nn.Module):
            def forward(self, fn):
                fn()
                return torch.empty(0)   # a tensor: no warning about backward hooks

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.world_reduce = Issue()
                self.broadcast = Issue()
                self.pair_reduce = Issue()

            def forward(self, which, fn):
                return getattr(self, which)(fn)

        net = Net()
        mods = {"world": "world_reduce", "bcast": "broadcast", "pair": "pair_reduce"}

    def region(step):
        return rec(label="step %d" % step) if rec else contextlib.nullcontext()

    def via(which, fn):
        m = mods.get(which)
        return (lambda: net(m, fn)) if m is not None else fn

    fault = args.case if rank == FAULT_RANK.get(args.case) else None
    try:
        for step in range(STEPS):
            with region(step):
                x = torch.full((16,), float(rank + step))
                if fault and step == FAULT_STEP:
                    led.write(ev="fault", kind=fault, step=step, t_ns=time.time_ns())
                if fault == "skip" and step == FAULT_STEP:
                    pass
                elif fault == "coll" and step == FAULT_STEP:
                    outs = [torch.empty(16) for _ in range(world)]
                    coll("0", "all_gather", via("world", lambda: dist.all_gather(outs, x)), x, step)
                elif fault == "size" and step == FAULT_STEP:
                    y = torch.ones(32)
                    coll("0", "all_reduce", via("world", lambda: dist.all_reduce(y)), y, step)
                else:
                    if fault == "sleep" and step == FAULT_STEP:
                        wait_for_dumps(args.out, [r for r in range(world) if r != rank],
                                       6.5, max(6.5, args.timeout - 2))
                    coll("0", "all_reduce", via("world", lambda: dist.all_reduce(x)), x, step)
                b = torch.full((8,), float(rank))
                coll("0", "broadcast", via("bcast", lambda: dist.broadcast(b, src=0)), b, step)
                p = torch.full((4,), float(rank))
                coll(pair_name, "all_reduce", via("pair", lambda: dist.all_reduce(p, group=pair)), p, step)
                if step == 1:
                    q = torch.full((4,), float(rank))
                    p2p[0] += 1
                    peer = rank ^ 1
                    kind = "send" if rank % 2 == 0 else "recv"
                    led.write(ev="p2p", pg="0", p2p_seq=p2p[0], collective=kind, numel=4,
                              dtype="float32", peer=peer, step=step, t_ns=time.time_ns())
                    inflight["since"] = time.monotonic()
                    if kind == "send":
                        dist.send(q, peer)
                    else:
                        dist.recv(q, peer)
                    inflight["since"] = None
        led.write(ev="done", t_ns=time.time_ns())
        rc = 0
    except Exception as e:  # a timeout or a peer gone
        inflight["since"] = None
        led.write(ev="error", msg=str(e).splitlines()[0][:300] if str(e) else type(e).__name__,
                  t_ns=time.time_ns())
        rc = 1
    if rec is not None:
        rec.close()   # os._exit below runs no atexit: the trace is closed here
    dump(args.out, "exit", rank)
    os._exit(rc)


def harness(args):
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(out, "watchdog"), exist_ok=True)
    port = 29500 + (os.getpid() % 2000)
    procs = []
    for r in range(WORLD):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), USE_LIBUV="0", TORCH_FR_BUFFER_SIZE="2000",
                   TORCH_FR_DUMP_TEMP_FILE=os.path.join(out, "watchdog", "fr_rank"),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                       "--case", args.case, "--out", out,
                                       "--timeout", str(args.timeout)]
                                      + (["--record"] if args.record else []), env=env))
    deadline = time.monotonic() + args.timeout + 40
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(max(1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(p.wait())
    with open(os.path.join(out, "rcs.json"), "w") as f:
        json.dump(rcs, f)
    print("case %s: exit statuses %s" % (args.case, rcs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--case", default="ok", choices=["ok", "skip", "coll", "size", "sleep"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--record", action="store_true",
                    help="also record each worker with commdebug's Recorder (DIR/trace/)")
    args = ap.parse_args()
    (worker if args.worker else harness)(args)


if __name__ == "__main__":
    main()
