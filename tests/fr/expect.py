#!/usr/bin/env python3
"""What each Flight Recorder dump under testdata/fr holds, as Python's own pickle
and json modules read it, in the text test_frdump.c prints from commdebug's reader:

    tests/torch2/env.sh run python3 tests/fr/expect.py testdata/fr > testdata/fr/expected.txt

One block per file ("file PATH" relative to testdata/fr, then "dump VERSION
nentries npgconf npgstatus commstate(0/1)", one "e ..." line per entry in
record order, one "s PG ENQ STARTED COMPLETED" per pg_status in key order).
"""
import json
import os
import pickle
import sys


def num(sizes):
    t = 0
    for s in sizes:
        n = 1
        for x in s:
            n *= x
        t += n
    return t


def t(v):
    return v if isinstance(v, int) and v > 0 else -1


def main():
    root = sys.argv[1]
    files = []
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            if "ledger" in f or f.endswith((".json", ".md", ".txt")) or "/" not in rel:
                continue
            files.append(rel)
    for rel in sorted(files):
        raw = open(os.path.join(root, rel), "rb").read()
        d = pickle.loads(raw) if raw[:1] == b"\x80" else json.loads(raw)
        es = sorted(d.get("entries", []), key=lambda e: e["record_id"])
        print("file %s" % rel)
        print("dump %s %d %d %d %d" % (d["version"], len(es), len(d.get("pg_config", {})),
                                       len(d.get("pg_status", {})), int("nccl_comm_state" in d)))
        for e in es:
            fr = e.get("frames", [])
            f0 = "%s:%d" % (fr[1]["name"], fr[1]["line"]) if len(fr) > 1 else "-"
            print("e %d %s %d %d %s %s %d %d %d %s %d %d %d %s" % (
                e["record_id"], e["process_group"][0] or "''", e["collective_seq_id"], e["p2p_seq_id"],
                e["profiling_name"].replace(" ", "_"), e["state"], e["time_created_ns"],
                num(e["input_sizes"]), num(e["output_sizes"]),
                (e["input_dtypes"] or ["-"])[0], int(e["is_p2p"]), t(e.get("time_discovered_completed_ns")),
                len(fr), f0))
        for k, v in d.get("pg_status", {}).items():
            print("s %s %d %d %d" % (k, int(v["last_enqueued_collective"]), int(v["last_started_collective"]),
                                     int(v["last_completed_collective"])))


if __name__ == "__main__":
    main()
