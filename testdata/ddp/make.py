#!/usr/bin/env python3
"""Writes the hand-made DDP traces of this directory (see ../SOURCE.md).

The model: DistributedDataParallel around Sequential(Linear(4, 8), ReLU,
Linear(8, 8), ReLU, Linear(8, 2)), float32; cap 300 bytes, first cap 100.
Two regions (steps): step 1 with DDP's initial buckets, step 2 after the
rebuild.  Times are round so that positions in backward can be checked by hand.
"""
import json, os, subprocess, sys

D = "DistributedDataParallel"
M = D + ".module"
LIN = "torch.nn.modules.linear.Linear"
PARAMS = [  # DDP's order: index i
    ("0.weight", 128, [8, 4]), ("0.bias", 32, [8]),
    ("2.weight", 256, [8, 8]), ("2.bias", 32, [8]),
    ("4.weight", 64, [2, 8]), ("4.bias", 8, [2]),
]


def own(mod_idx):
    return [{"name": n.split(".")[1], "shape": s, "dtype": "torch.float32",
             "nbytes": b, "requires_grad": True}
            for n, b, s in PARAMS if n.startswith(f"{mod_idx}.")]


def ddp(rebuilt, buckets, sizes, t, extra=None):
    e = {"ev": "ddp", "mod": D, "pg": "0", "cap": 300, "first_cap": 100,
         "find_unused": False, "static_graph": False, "grad_as_view": False,
         "rebuilt": rebuilt,
         "params": [{"name": f"{M}.{n}", "nbytes": b, "dtype": "torch.float32",
                     "shape": s, "requires_grad": True} for n, b, s in PARAMS],
         "buckets": buckets, "sizes": sizes, "t": t}
    if extra:
        e.update(extra)
    return e


def step(region, t, seq, buckets, sizes, rebuilt_event=None, skip=()):
    ev = [{"ev": "region_enter", "region": region, "label": f"step {region}", "t": t}]
    ev.append({"ev": "fw_pre", "mod": D, "type": "torch.nn.parallel.distributed."
               "DistributedDataParallel", "params": [], "t": t + 10})
    if rebuilt_event:
        ev.append(rebuilt_event)
    ev.append({"ev": "fw_pre", "mod": M, "type": "torch.nn.modules.container.Sequential",
               "params": [], "t": t + 20})
    for i in range(5):
        typ = LIN if i % 2 == 0 else "torch.nn.modules.activation.ReLU"
        ev.append({"ev": "fw_pre", "mod": f"{M}.{i}", "type": typ,
                   "params": own(i) if i % 2 == 0 else [], "t": t + 30 + 10 * i})
        ev.append({"ev": "op", "name": "aten.addmm.default" if i % 2 == 0 else
                   "aten.relu.default", "t": t + 35 + 10 * i})
        ev.append({"ev": "fw_post", "mod": f"{M}.{i}", "t": t + 38 + 10 * i})
    ev.append({"ev": "fw_post", "mod": M, "t": t + 90})
    ev.append({"ev": "fw_post", "mod": D, "t": t + 95})
    # backward: from t+1000 (first backward event) to t+2000 (bw_end), 10 ops
    b = t + 1000
    ev.append({"ev": "bw_pre", "mod": f"{M}.4", "t": b})
    ev.append({"ev": "op", "name": "aten.mm.default", "bw": True, "t": b + 100})
    ev.append({"ev": "op", "name": "aten.sum.dim_IntList", "bw": True, "t": b + 200})
    fire = [(0, b + 300)] if 0 not in skip else []
    for k, tt in fire:
        ev.append({"ev": "coll", "name": "c10d.allreduce_", "src": "ddp_reducer", "bw": True,
                   "pg": "0", "seq": seq, "bytes": sizes[k], "dtype": "torch.float32",
                   "bucket": k, "t": tt})
        seq += 1
    ev.append({"ev": "bw_pre", "mod": f"{M}.2", "t": b + 400})
    for j in range(5):
        ev.append({"ev": "op", "name": "aten.mm.default", "bw": True, "t": b + 450 + 50 * j})
    if 1 not in skip:
        ev.append({"ev": "coll", "name": "c10d.allreduce_", "src": "ddp_reducer", "bw": True,
                   "pg": "0", "seq": seq, "bytes": sizes[1], "dtype": "torch.float32",
                   "bucket": 1, "t": b + 800})
        seq += 1
    ev.append({"ev": "bw_pre", "mod": f"{M}.0", "t": b + 850})
    for j in range(3):
        ev.append({"ev": "op", "name": "aten.mm.default", "bw": True, "t": b + 900 + 20 * j})
    ev.append({"ev": "bw_end", "t": b + 1000})
    ev.append({"ev": "region_exit", "region": region, "t": b + 1010})
    return ev, seq


def trace(rank, initial, init_sizes, rebuilt, reb_sizes, skip2=(), extra=None, world=2):
    ev = [{"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": rank,
           "world_size": world, "t0": 0},
          {"ev": "pg", "name": "0", "desc": "default_pg", "ranks": [0, 1], "backend": "gloo"}]
    s1, seq = step(1, 1000, 1, initial, init_sizes)
    # the initial buckets are written at the DDP module's first forward
    s1.insert(3, ddp(False, initial, init_sizes, 1015, extra))
    ev += s1
    s2, seq = step(2, 5000, seq, rebuilt, reb_sizes,
                   rebuilt_event=ddp(True, rebuilt, reb_sizes, 5015, extra), skip=skip2)
    ev += s2
    return "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in ev)


INITIAL = [[5, 4, 3], [2, 1, 0]]      # DDP: reversed params, first cap 100, cap 300
INIT_SIZES = [104, 416]
REBUILT = [[5, 4, 3, 2], [1, 0]]      # gradient-ready order
REB_SIZES = [360, 160]

out = sys.argv[1] if len(sys.argv) > 1 else "."
# job/: the two ranks of one run (a directory argument), rank 0 with its NCCL side
os.makedirs(f"{out}/job", exist_ok=True)
open(f"{out}/job/rank0.jsonl", "w").write(trace(0, INITIAL, INIT_SIZES, REBUILT, REB_SIZES))
open(f"{out}/job/rank1.jsonl", "w").write(trace(1, INITIAL, INIT_SIZES, REBUILT, REB_SIZES))
# rank 1 of another job whose rebuilt buckets differ from rank 0's
odd = [[5, 4], [3, 2, 1, 0]]
open(f"{out}/odd-rank1.jsonl", "w").write(trace(1, INITIAL, INIT_SIZES, odd, [72, 448]))
# step 2 never fires bucket 1 (an unused parameter without find_unused_parameters)
open(f"{out}/unused.jsonl", "w").write(
    trace(0, INITIAL, INIT_SIZES, REBUILT, REB_SIZES, skip2=(1,)))
# the NCCL side of rank 0 (as if the group were on NCCL): the four bucket
# all-reduces, tagged with pg "0" and pseq 1-4; GPU times 1000, 2000, 3000 ns for
# the first three, none for the fourth
nccl = [{"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": 0, "world_size": 2,
         "t0": 0, "recorder": "hand"}]
for pseq, nbytes in ((1, 104), (2, 416), (3, 360), (4, 160)):
    nccl.append({"ev": "nccl", "func": "AllReduce", "count": nbytes // 4, "dtype": "float32",
                 "bytes": nbytes, "redop": "sum", "comm": "0xa", "nranks": 2, "rank": 0,
                 "seq": pseq, "pg": "0", "pseq": pseq, "state": "enqueued"})
    if pseq < 4:
        nccl.append({"ev": "nccl", "state": "completed", "comm": "0xa", "seq": pseq,
                     "dur": 1000 * pseq})
text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in nccl)
subprocess.run(["zstd", "-q", "-f", "--check", "-o", f"{out}/job/rank0.nccl.zst"],
               input=text.encode(), check=True)

# late-rebuild.jsonl: three steps; DDP rebuilt its buckets in step 2's forward
# (step 2's all-reduces have the rebuilt sizes) but the rebuilt event is only
# written in step 3, saying they were in force from region 2 (as the recorder
# does when it reads them from torch 1.13's logging data, a step late)
ev = [{"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": 0, "world_size": 2}]
s1, seq = step(1, 1000, 1, INITIAL, INIT_SIZES)
s1.insert(3, ddp(False, INITIAL, INIT_SIZES, 1015))
s2, seq = step(2, 5000, seq, REBUILT, REB_SIZES)
s3, seq = step(3, 9000, seq, REBUILT, REB_SIZES,
               rebuilt_event=ddp(True, REBUILT, REB_SIZES, 9015, {"rebuilt_region": 2}))
ev += s1 + s2 + s3
open(f"{out}/late-rebuild.jsonl", "w").write(
    "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in ev))

# sizes-only.jsonl: a torch that does not expose bucket members: sizes and a
# note only; DDP left 4.bias out of its parameters (as parameters_to_ignore
# would), so the plan does not count it; no times on the events
def strip_t(e):
    e = dict(e)
    e.pop("t", None)
    return e
ev = [{"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": 0}]
s1, seq = step(1, 1000, 1, INITIAL, INIT_SIZES)
d = ddp(False, None, INIT_SIZES, 1015,
        {"note": "bucket members not exposed by this torch; sizes only",
         "find_unused": True, "static_graph": None})
del d["buckets"]
d["params"] = d["params"][:5]
s1.insert(3, d)
ev += [strip_t(e) for e in s1]
open(f"{out}/sizes-only.jsonl", "w").write(
    "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in ev))

# unbucketed.jsonl: DDP's buckets leave 0.weight (index 0) out of every bucket
ev = [{"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": 0}]
s1, seq = step(1, 1000, 1, INITIAL, [104, 288])
s1.insert(3, ddp(False, [[5, 4, 3], [2, 1]], [104, 288], 1015))
ev += s1
open(f"{out}/unbucketed.jsonl", "w").write(
    "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in ev))

# odd-rank2.jsonl: a rank 2 whose initial buckets differ (same sizes, other members)
open(f"{out}/odd-rank2.jsonl", "w").write(
    trace(2, [[5, 4, 1], [3, 2, 0]], [104, 416], REBUILT, REB_SIZES, world=3))
