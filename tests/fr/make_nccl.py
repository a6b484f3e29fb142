#!/usr/bin/env python3
"""Hand-built NCCL-shaped Flight Recorder dumps (BUILT BY HAND, not recorded).

No GPU cluster here: these follow the schema PyTorch's own analyzer reads
(torch/distributed/flight_recorder/components/{loader,builder,types,utils}.py of
the torch 2.14 install) and what NCCL dumps carry beyond the gloo ones made by
fr_jobs.py: pg_config keyed by pg name (with desc "default_pg" for the world),
nccl_comm_state, stack "frames", p2p entries ("nccl:send 0->1"), states
scheduled/started/completed with time_discovered_* set.

Scenario (4 ranks, version "2.10"): world pg "0", pair pgs "1" {0,1} and
"2" {2,3}.  Five world all_reduces of 1024 float32 (bf16 for seq 4) and one
pair all_reduce; rank 2 issues an all_gather at world seq 3 (a wrong
collective); ranks 0, 1, 3 wait in seq 3 (started), rank 2 in seq 3 too; a
send/recv between 0 and 1 at p2p seq 1.  Written as the watchdog's pickle
(protocol 2, as torch's pickler) and as _dump_fr_trace_json()'s JSON (no
frames; 0 for unknown times), one file per rank: nccl_trace_rank_<R>.

    tests/torch2/env.sh run python3 tests/fr/make_nccl.py testdata/fr/nccl-hand
"""
import json
import os
import pickle
import sys

T0 = 1795600000000000000


def frames(fn, line):
    return [
        {"name": "all_reduce", "filename": "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", "line": 3906},
        {"name": fn, "filename": "/job/train.py", "line": line},
        {"name": "main", "filename": "/job/train.py", "line": 200},
    ]


def entry(rec, pg, seq, p2p_seq, name, numel, dtype, state, t, fn, line, p2p=False, out_mult=1):
    desc = "default_pg" if pg == "0" else "undefined"
    started = t + 1000 if state in ("started", "completed") else None
    done = t + 5000 if state == "completed" else None
    return {
        "record_id": rec, "pg_id": int(pg), "process_group": (pg, desc),
        "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": rec + 1,
        "profiling_name": "nccl:" + name, "time_created_ns": t,
        "duration_ms": 0.5 if done else None,
        "input_sizes": [[numel]], "input_dtypes": [dtype],
        "output_sizes": [[numel * out_mult]], "output_dtypes": [dtype],
        "state": state, "time_discovered_started_ns": started,
        "time_discovered_completed_ns": done, "retired": state == "completed",
        "timeout_ms": 600000, "is_p2p": p2p, "thread_id": "140000000000000",
        "thread_name": "pt_main_thread", "frames": frames(fn, line),
    }


def dump(rank):
    pair = "1" if rank < 2 else "2"
    es = []
    t = T0 + rank * 1000
    rec = 0
    for seq in range(1, 6):
        if seq > 3:
            break
        state = "completed" if seq < 3 else "started"
        if seq == 3 and rank == 2:
            es.append(entry(rec, "0", seq, 0, "_allgather_base", 1024, "Float", state, t, "gather_step", 120, out_mult=4))
        else:
            es.append(entry(rec, "0", seq, 0, "all_reduce", 1024, "Float", state, t, "train_step", 110))
        rec += 1
        t += 10_000_000
        if seq == 1:
            es.append(entry(rec, pair, 1, 0, "all_reduce", 256, "BFloat16", "completed", t, "tp_step", 90))
            rec += 1
            t += 10_000_000
            if rank < 2:
                kind = "send 0->1" if rank == 0 else "recv 0<-1"
                es.append(entry(rec, "0", 0, 1, kind, 64, "Float", "completed", t, "pipe_step", 80, p2p=True))
                rec += 1
                t += 10_000_000
    pgc = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
           pair: {"name": pair, "desc": "undefined", "ranks": "[0, 1]" if rank < 2 else "[2, 3]"}}
    pgs = {"0": {"last_enqueued_collective": 3, "last_started_collective": 3, "last_completed_collective": 2},
           pair: {"last_enqueued_collective": 1, "last_started_collective": 1, "last_completed_collective": 1}}
    comm = {"0": {"commId": "0x%x" % (0xabc0 + rank), "nranks": "4", "rank": str(rank)}}
    return {"version": "2.10", "comm_lib_version": "2.27.3", "pg_config": pgc, "pg_status": pgs,
            "nccl_comm_state": comm, "entries": es}


def main():
    out = sys.argv[1]
    for sub in ("pickle", "json"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    for r in range(4):
        d = dump(r)
        with open(os.path.join(out, "pickle", "nccl_trace_rank_%d" % r), "wb") as f:
            pickle.dump(d, f, protocol=2)
        j = json.loads(json.dumps(d))
        for e in j["entries"]:
            e.pop("frames")
            for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                if e[k] is None:
                    e[k] = 0
        with open(os.path.join(out, "json", "nccl_trace_rank_%d" % r), "w") as f:
            json.dump(j, f)


if __name__ == "__main__":
    main()
