#!/usr/bin/env python3
"""Generate the summary files of a very large job directly (no traces).

The job is gen_job.py's (a dp x tp mesh, STEPS steps of LAYERS blocks, a tp
all-reduce in each block's forward and backward and a dp all-reduce in its
backward), written as `commdebug summarize` would write its summaries (the
format of commdebug-trace(5), SUMMARY FILES), FILES files of RANKS/FILES
ranks each.  This writer is independent of the C one: `commdebug ranks` on
its output checks the format too.  Faults (--fault, any number):
  skip:RANK:STEP:LAYER        RANK does not issue that dp all-reduce
  sleep:RANK:STEP:LAYER:SEC   RANK reaches that tp forward all-reduce SEC late
                              (the others wait inside it)

usage: gen_summaries.py --ranks 100000 --tp 8 --files 1000 --out DIR
"""
import argparse
import os
import random
import subprocess
import sys

import gen_job

MAGIC = b"commdebug summary\n"
T0 = 1764000000000000000


def uv(v, out):
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def sv(v, out):
    uv((v << 1) ^ (v >> 63) if v >= 0 else ((-v) << 1) - 1, out)


def idv(i, out):
    uv(0 if i is None else i + 1, out)


def sstr(s, out):
    b = s.encode()
    uv(len(b), out)
    out.extend(b)


def cstr(s, out):
    if s is None:
        uv(0, out)
    else:
        b = s.encode()
        uv(len(b) + 1, out)
        out.extend(b)


def record(tag, body):
    out = bytearray([ord(tag)])
    uv(len(body), out)
    return bytes(out) + bytes(body)


class Job:
    def __init__(self, a):
        self.a = a
        self.classes = {}

    def shape(self, rank):
        """The rank's collectives (phase, which pg, bytes, module, region) and
        module counts, in its own string numbering."""
        a = self.a
        skips = {(f[2], f[3]) for f in a.fault if f[0] == "skip" and f[1] == rank}
        colls = []
        mods = []
        for step in range(1, a.steps + 1):
            for k in range(a.layers):
                colls.append((0, "tp", 4096, k, step))
            for k in reversed(range(a.layers)):
                colls.append((1, "tp", 4096, k, step))
                if (step, k) not in skips:
                    colls.append((1, "dp", 262144, k, step))
            ndp = a.layers - sum(1 for s in skips if s[0] == step)
            nbw = a.layers + ndp
            counts = [("Global", 0, a.layers), ("Global", 1, nbw), ("Net", 0, a.layers),
                      ("Net", 1, nbw)]
            for k in range(a.layers):
                counts.append(("Net.blocks.%d" % k, 0, 1))
                counts.append(("Net.blocks.%d" % k, 1, 1 if (step, k) in skips else 2))
            mods.append((step, counts))
        return tuple(colls), tuple((s, tuple(c)) for s, c in mods)

    def class_body(self, colls, mods):
        strings = []
        index = {}

        def sid(s):
            if s not in index:
                index[s] = len(strings)
                strings.append(s)
            return index[s]

        out = bytearray()
        uv(len(colls), out)
        seq = {"tp": 0, "dp": 0}
        prev_seq = prev_bytes = prev_region = 0
        for bw, pg, nbytes, k, step in colls:
            seq[pg] += 1
            idv(sid("pg:" + pg), out)
            idv(sid("c10d.allreduce_"), out)
            idv(sid("torch.float32"), out)
            idv(sid("Net.blocks.%d" % k), out)
            uv((bw << 1) | 1, out)
            sv(seq[pg] - prev_seq, out)
            sv(nbytes - prev_bytes, out)
            sv(step - prev_region, out)
            prev_seq, prev_bytes, prev_region = seq[pg], nbytes, step
        n = sum(len(c) for _, c in mods)
        uv(n, out)
        prev_region = 0
        for step, counts in mods:
            for mod, bw, cnt in counts:
                sv(step - prev_region, out)
                prev_region = step
                idv(sid(mod), out)
                idv(sid("c10d.allreduce_"), out)
                uv(bw, out)
                uv(cnt, out)
        return bytes(out), strings

    def rank_record(self, rank, path):
        a = self.a
        colls, mods = self.shape(rank)
        key = (colls, mods)
        new = None
        if key not in self.classes:
            body, strings = self.class_body(colls, mods)
            self.classes[key] = (len(self.classes), strings)
            new = body
        cid, cstrings = self.classes[key]
        tp_pg = str(1 + rank // a.tp)
        dp_pg = str(1 + a.ranks // a.tp + rank % a.tp)
        strings = [tp_pg if s == "pg:tp" else dp_pg if s == "pg:dp" else s for s in cstrings]
        extra = ["step %d" % s for s in range(1, a.steps + 1)] + ["exit", "0", "aten.add.Tensor",
                                                                 "Net"]
        for s in extra:
            if s not in strings:
                strings.append(s)
        sid = {s: i for i, s in enumerate(strings)}
        out = bytearray()
        uv(len(strings), out)
        for s in strings:
            sstr(s, out)
        uv(cid, out)
        # times: one event a few microseconds after the last
        rng = random.Random(rank)
        t = 0
        times, regions = [], []
        sleeps = [f for f in a.fault if f[0] == "sleep"]
        ci = 0
        for step in range(1, a.steps + 1):
            t += 1000 + rng.randrange(4000)
            enter = t
            for k in range(a.layers):
                t += 12 * (1000 + rng.randrange(4000))
                for f in sleeps:
                    if f[1] == rank and f[2] == step and f[3] == k:
                        t += int(f[4] * 1e9)
                times.append(t)
                for f in sleeps:
                    if f[1] != rank and f[2] == step and f[3] == k:
                        t += int(f[4] * 1e9)
                ci += 1
            for k in reversed(range(a.layers)):
                t += 12 * (1000 + rng.randrange(4000))
                times.append(t)
                ci += 1
                if colls[ci][1] == "dp" if ci < len(colls) else False:
                    t += 1000 + rng.randrange(4000)
                    times.append(t)
                    ci += 1
            t += 11 * (1000 + rng.randrange(4000))
            regions.append((step, enter, t))
        t += 1000 + rng.randrange(4000)
        end_time = t
        # the rank's own fields
        cstr(path, out)
        cstr(None, out)
        flags = (1 << 3) | (1 << 4) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10)
        uv(flags, out)
        uv(0, out)                  # end: closed
        sv(a.steps, out)           # open_region
        sv(rank, out)
        sv(a.ranks, out)
        sv(T0, out)
        sv(len(times) * 30, out)   # end_line (a line number)
        sv(T0 + end_time, out)
        sv(0, out)                 # end_code
        sv(0, out)                 # end_signal
        idv(sid["exit"], out)
        idv(None, out)
        idv(None, out)
        idv(None, out)
        sv(T0 + end_time, out)     # last_time
        uv(len(times) * 25, out)   # events
        uv(a.steps, out)
        idv(sid["aten.add.Tensor"], out)
        idv(sid["Net"], out)
        prev = T0
        for x in times:
            d = T0 + x - prev
            uv(((d << 1) if d >= 0 else ((-d) << 1) - 1) + 1, out)
            prev = T0 + x
        uv(len(regions), out)
        prev = T0
        ncoll = {}
        for c in colls:
            ncoll[c[4]] = ncoll.get(c[4], 0) + 1
        for step, enter, leave in regions:
            sv(step, out)
            idv(sid["step %d" % step], out)
            uv(1, out)
            uv(ncoll[step], out)
            for x in (enter, leave):
                d = T0 + x - prev
                uv(((d << 1) if d >= 0 else ((-d) << 1) - 1) + 1, out)
                prev = T0 + x
        uv(0, out)                 # stack
        g = rank // a.tp
        pgs = [("0", [(0, 1, a.ranks)]), (tp_pg, [(g * a.tp, 1, a.tp)]),
               (dp_pg, [(rank % a.tp, a.tp, a.ranks // a.tp)])]
        uv(len(pgs), out)
        for name, runs in pgs:
            idv(sid[name], out)
            uv(len(runs), out)
            for first, step, n in runs:
                sv(first, out)
                sv(step if n > 1 else 0, out)
                uv(n, out)
        uv(0, out)                 # source: a trace
        idv(None, out)             # fr_version
        idv(None, out)             # fr_world_pg
        uv(0, out)
        uv(0, out)
        cstr(None, out)
        uv(0, out)                 # fr records
        uv(0, out)                 # frames
        uv(0, out)                 # pg_status
        recs = []
        if new is not None:
            recs.append(record("C", new))
        recs.append(record("R", out))
        return b"".join(recs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gen_job.job_args(ap)
    ap.add_argument("--files", type=int, default=1000)
    a = ap.parse_args()
    if a.ranks % a.tp:
        sys.exit("gen_summaries.py: --ranks must be a multiple of --tp")
    if any(f[0] not in ("skip", "sleep") for f in a.fault):
        sys.exit("gen_summaries.py: --fault takes skip or sleep")
    os.makedirs(a.out, exist_ok=True)
    for f in range(a.files):
        job = Job(a)   # classes are per file
        ranks = range(f, a.ranks, a.files)
        head = bytearray()
        uv(1, head)
        sv(f, head)
        sv(a.files, head)
        cstr("gen_summaries.py", head)
        parts = [record("H", head)]
        for r in ranks:
            parts.append(job.rank_record(r, "job/node%04d/rank%d.zst" % (r // 64, r)))
        end = bytearray()
        uv(len(ranks), end)
        uv(len(job.classes), end)
        parts.append(record("E", end))
        path = os.path.join(a.out, "s%05d.cdsum" % f)
        with open(path, "wb") as fh:
            fh.write(MAGIC)
            fh.flush()
            z = subprocess.run(["zstd", "-q", "-c", "-3", "--check"], input=b"".join(parts),
                               stdout=subprocess.PIPE, check=True)
            fh.write(z.stdout)


if __name__ == "__main__":
    main()
