#!/usr/bin/env python3
"""Python baseline for the benchmark: replay a commdebug trace the plain way.

Decompresses with a `zstd -dcf` pipe (plain JSONL passes through), json.loads every
line and replays what `commdebug analyze --noise 0` counts, with CommDebugMode's
rules: the current module moves on fw_pre / fw_done (pop of the parent list) /
bw_pre; a module's parents are the tracker's `parents` set at its first fw_pre in
the region; each collective op (not a DTensor op) counts for the current module and
every recorded parent, under forward or backward by its "bw" flag, native funcol
names reported under their legacy names.

Prints per-region totals; with --table also the noise-0 module table of each region
(as CommDebugMode prints it, without colour).
Usage: replay.py [--table] TRACE
"""

import argparse
import json
import os
import subprocess
import sys

FUNCOL = ("all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_reduce",
          "all_reduce_coalesced", "all_to_all_single", "broadcast",
          "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced")
C10D = ("_allgather_base_", "_reduce_scatter_base_", "allgather_", "allgather_coalesced_",
        "allgather_into_tensor_coalesced_", "allreduce_", "allreduce_coalesced_",
        "alltoall_", "alltoall_base_", "broadcast_", "gather_", "scatter_", "reduce_",
        "reduce_scatter_", "reduce_scatter_tensor_coalesced_")

LEGACY = {"_c10d_functional." + n: "c10d_functional." + n for n in FUNCOL}
LEGACY["_c10d_functional_autograd.all_to_all_single"] = "c10d_functional.all_to_all_single"
COLLECTIVES = (set(LEGACY) | set(LEGACY.values()) | {"c10d." + n for n in C10D}
               | {"_dtensor.shard_dim_alltoall"})


class Region:
    def __init__(self, rid, label):
        self.rid = rid
        self.label = label
        self.events = 0
        self.parent_list = ["Global"]
        self.depth = {"Global": 0}             # module_helper_dict: order and depth
        self.mod_parents = {"Global": set()}   # module_parents_dict
        self.name = "Global"
        self.ac = False
        self.comm_counts = {}
        self.mod_counts = {"Global": ({}, {})}  # name -> (forward, backward)


def bump(d, key):
    d[key] = d.get(key, 0) + 1


def print_region(r, table, out):
    total = sum(r.comm_counts.values())
    label = ' "%s"' % r.label if r.label is not None else ""
    out.write("region %s%s: %d events, %d modules, %d collectives\n"
              % (r.rid, label, r.events, len(r.depth) - 1, total))
    fw, bw = r.mod_counts["Global"]
    for title, d in (("total", r.comm_counts), ("forward", fw), ("backward", bw)):
        out.write("  %-9s%s\n" % (title, ", ".join(
            "%s %d" % kv for kv in sorted(d.items())) or "-"))
    if not table:
        return
    for fqn, depth in r.depth.items():
        indent = "  " * (2 * depth)
        out.write("%s%s\n" % (indent, fqn))
        counts = r.mod_counts.get(fqn)
        if counts is None:
            continue
        coll_indent = "  " * (2 * depth + 2)
        for title, d in (("FORWARD PASS", counts[0]), ("BACKWARD PASS", counts[1])):
            if d:
                out.write("%s  %s\n" % (indent, title))
                for name, n in d.items():
                    out.write("%s*%s: %d\n" % (coll_indent, name, n))


def main():
    ap = argparse.ArgumentParser(description="Python baseline: replay a commdebug trace")
    ap.add_argument("--table", action="store_true", help="print each region's module table")
    ap.add_argument("trace", help='trace file (zstd or plain JSONL), "-" for stdin')
    a = ap.parse_args()

    proc = subprocess.Popen(["zstd", "-dcfq", a.trace], stdout=subprocess.PIPE)
    out = sys.stdout
    parents = {"Global": 1}   # ModTracker.parents, with its active counts
    r = None
    regions = events = collectives = 0
    lineno = 0
    for line in proc.stdout:
        lineno += 1
        try:
            ev = json.loads(line)
        except ValueError:
            print("replay.py: %s:%d: not JSON (trace cut?)" % (a.trace, lineno),
                  file=sys.stderr)
            break
        events += 1
        kind = ev["ev"]
        if r is not None:
            r.events += 1
        if kind == "op":
            if r is None or ev["dt"]:
                continue
            packet = ev["name"].rsplit(".", 1)[0]
            if packet not in COLLECTIVES:
                continue
            packet = LEGACY.get(packet, packet)
            collectives += 1
            bump(r.comm_counts, packet)
            key = 1 if ev["bw"] else 0
            name = r.name
            if name not in r.mod_counts:
                r.mod_counts[name] = ({}, {})
            bump(r.mod_counts[name][key], packet)
            for par in r.mod_parents.get(name, ()):
                if par != name:
                    if par not in r.mod_counts:
                        r.mod_counts[par] = ({}, {})
                    bump(r.mod_counts[par][key], packet)
        elif kind == "fw_pre":
            name = ev["mod"]
            parents[name] = parents.get(name, 0) + 1
            if r is None:
                continue
            r.ac = ev["bw"]
            r.name = name
            if not r.ac:
                r.depth[name] = len(parents) - 1
                if name not in r.mod_parents:
                    r.mod_parents[name] = set(parents)
                r.parent_list.append(name)
        elif kind == "fw_post" or kind == "bw_exit":
            name = ev["mod"]
            if name in parents:
                parents[name] -= 1
                if parents[name] == 0:
                    del parents[name]
        elif kind == "fw_done":
            if r is None:
                continue
            r.ac = ev["bw"]
            if not r.ac and len(r.parent_list) > 1:
                r.parent_list.pop()
                r.name = r.parent_list[-1]
        elif kind == "bw_pre":
            if r is not None:
                r.ac = False
                r.name = ev["mod"]
        elif kind == "bw_enter":
            name = ev["mod"]
            parents[name] = parents.get(name, 0) + 1
        elif kind == "bw_end":
            parents = {"Global": 1}
        elif kind == "region_enter":
            r = Region(ev["region"], ev.get("label"))
            r.events = 1
        elif kind == "region_exit":
            if r is not None:
                print_region(r, a.table, out)
                regions += 1
            r = None
    proc.stdout.close()
    rc = proc.wait()
    if r is not None:
        print_region(r, a.table, out)
        regions += 1
        print("replay.py: region %s not closed at end of trace" % r.rid, file=sys.stderr)
    out.write("trace: %d events, %d regions, %d collectives\n"
              % (events, regions, collectives))
    if rc != 0:
        print("replay.py: zstd exited with status %d" % rc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:   # e.g. piped into head
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
