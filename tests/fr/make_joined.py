#!/usr/bin/env python3
"""Hand-built Flight Recorder dumps (NOT recorded) to go beside the commdebug
traces of testdata/jobs/desync, for the join of a rank's trace with its dump
by process group and sequence number (issue 23, item 3):

    build/commdebug ranks --json testdata/jobs/desync > /tmp/r.json
    build/commdebug colls --json testdata/jobs/desync > /tmp/c.jsonl
    python3 tests/fr/make_joined.py /tmp/r.json /tmp/c.jsonl testdata/fr/joined

One pickle (protocol 2, as the NCCL watchdog writes) per rank, fr_rank<R>:
every collective of the rank's trace as an NCCL-shaped entry (pg name, seq,
"nccl:all_reduce", float32 sizes from its bytes, its time), state
"completed" but the rank's last, "started"; stack frames made up from the
module that issued it (function "<module>_forward" in /job/net.py, line 40 +
its block number).  pg_config keyed by pg name, pg_status from the entries.
"""
import json
import pickle
import sys


def main():
    rep = json.load(open(sys.argv[1]))
    start = rep["job_start_ns"]
    colls = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    out = sys.argv[3]
    ranks = sorted({c["rank"] for c in colls})
    for r in ranks:
        mine = [c for c in colls if c["rank"] == r]
        es = []
        for i, c in enumerate(mine):
            last = i == len(mine) - 1
            t = start + int(round(c["time_s"] * 1e9))
            mod = c["module"] or "Net"
            block = int(mod.split(".")[-1]) if mod.split(".")[-1].isdigit() else 0
            name = {"c10d.allreduce_": "all_reduce", "c10d.broadcast_": "broadcast",
                    "c10d.allgather_": "all_gather"}.get(c["collective"], c["collective"])
            numel = (c["bytes"] or 0) // 4
            state = "started" if last else "completed"
            es.append({
                "record_id": i, "pg_id": int(c["pg"]), "process_group": (c["pg"], "default_pg"),
                "collective_seq_id": c["seq"], "p2p_seq_id": 0, "op_id": i + 1,
                "profiling_name": "nccl:" + name, "time_created_ns": t,
                "input_sizes": [[numel]], "input_dtypes": ["Float"],
                "output_sizes": [[numel]], "output_dtypes": ["Float"],
                "state": state, "time_discovered_started_ns": t + 1000,
                "time_discovered_completed_ns": None if last else t + 5000,
                "retired": not last, "timeout_ms": 600000, "is_p2p": False,
                "frames": [
                    {"name": "all_reduce", "line": 3906,
                     "filename": "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py"},
                    {"name": mod.replace(".", "_") + "_forward", "filename": "/job/net.py",
                     "line": 40 + block},
                    {"name": "main", "filename": "/job/net.py", "line": 200},
                ],
            })
        seqs = [e["collective_seq_id"] for e in es]
        d = {
            "version": "2.10", "rank": r, "entries": es,
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(ranks)}},
            "pg_status": {"0": {"last_enqueued_collective": max(seqs),
                                "last_started_collective": max(seqs),
                                "last_completed_collective": max(seqs) - 1}},
            "nccl_comm_state": {},
        }
        with open("%s/fr_rank%d" % (out, r), "wb") as f:
            pickle.dump(d, f, protocol=2)


if __name__ == "__main__":
    main()
