#!/usr/bin/env python3
"""Generate the Flight Recorder dumps of a large NCCL job, for tests/bench/fr.sh.

    gen_fr.py OUTDIR [--ranks N] [--entries E] [--fault RANK]

Writes OUTDIR/nccl_trace_rank_<R> for R in 0..N-1: pickles of plain types in
the shape of a watchdog dump (version "2.10", pg_config keyed by group name
with every rank listed, pg_status, E entries of which the last is still in
flight, stack frames on every entry), built from the hand-made dump
testdata/fr/nccl-hand/pickle/nccl_trace_rank_0 (its first entry is the model
of every entry).  Every rank all-reduces 4 KiB at each seq, except RANK
(default N/2 + 1), which all-gathers at the last seq: one type mismatch.
Python's pickler writes protocol 2 with the opcodes torch's dumps use."""

import argparse
import copy
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "testdata", "fr", "nccl-hand", "pickle",
                     "nccl_trace_rank_0")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--entries", type=int, default=2000)
    p.add_argument("--fault", type=int, default=None)
    a = p.parse_args()
    fault = a.fault if a.fault is not None else a.ranks // 2 + 1
    with open(MODEL, "rb") as f:
        model = pickle.load(f)
    entry0 = model["entries"][0]
    os.makedirs(a.out, exist_ok=True)
    t0 = entry0["time_created_ns"]
    members = str(list(range(a.ranks)))
    for r in range(a.ranks):
        entries = []
        for k in range(a.entries):
            e = copy.deepcopy(entry0)
            seq = k + 1
            last = k == a.entries - 1
            e.update(record_id=k, collective_seq_id=seq, op_id=seq,
                     input_sizes=[[1024]], output_sizes=[[1024]],
                     time_created_ns=t0 + k * 1000000 + r * 37,
                     time_discovered_started_ns=t0 + k * 1000000 + r * 37 + 100,
                     time_discovered_completed_ns=None if last else t0 + k * 1000000 + 5000,
                     state="started" if last else "completed", retired=not last)
            if last and r == fault:
                e["profiling_name"] = "nccl:all_gather"
                e["output_sizes"] = [[1024 * a.ranks]]
            entries.append(e)
        dump = {"version": model["version"], "comm_lib_version": model["comm_lib_version"],
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": members}},
                "pg_status": {"0": {"last_enqueued_collective": a.entries,
                                    "last_started_collective": a.entries,
                                    "last_completed_collective": a.entries - 1}},
                "nccl_comm_state": model.get("nccl_comm_state", {}),
                "rank": r, "entries": entries}
        with open(os.path.join(a.out, "nccl_trace_rank_%d" % r), "wb") as f:
            pickle.dump(dump, f, protocol=2)


if __name__ == "__main__":
    main()
