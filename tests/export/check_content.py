#!/usr/bin/env python3
"""Check what `commdebug export --perfetto` wrote against its inputs, worked
out independently of the exporter:

- module spans: every fw_pre (forward, or recompute when "bw" is true) and
  every bw_enter with a time is one B slice of that phase on the rank's
  process (pid = rank), named after the module, at
  (t0 + t - job start) / 1000 us, the job's start being the earliest t0, as
  read here from the traces themselves;
- regions: every region_enter with a time is one B slice on the regions thread;
- collectives: every collective `commdebug colls --json` lists with a time is
  one instant on the rank with the same pg, seq, collective, bytes, dtype,
  module, phase and region, at its time_s (within 1 us, colls rounds to us);
- findings: every finding of `commdebug ranks --json` is one instant on each
  of its culprit ranks with its kind and text, at the culprit's own arrival
  at the collective (time_s of its "odd" record, or the rank's last event
  for a hang) when known;
- NCCL (with --nccl FILE, the NCCL-side trace of the one trace): every nccl
  call with a time is one instant, every completion with a time and dur one
  GPU slice of that dur ending at its time.

usage: check_content.py COMMDEBUG EXPORT.json [--nccl FILE] TRACE...
Exit status 0 when everything matches; 1 with one line per difference."""
import collections
import json
import os
import subprocess
import sys


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"\x28\xb5\x2f\xfd":
        data = subprocess.run(["zstd", "-dcq"], input=data, stdout=subprocess.PIPE).stdout
    out = []
    for line in data.decode("utf-8", "replace").split("\n"):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a cut last line
    return out


def expand(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            for n in sorted(os.listdir(p)):
                if n.startswith(".") or n.endswith((".nccl.zst", ".nccl.jsonl")):
                    continue
                if n.endswith((".zst", ".jsonl", ".json")):
                    out.append(os.path.join(p, n))
        else:
            out.append(p)
    return out


def us(ns):
    return round(ns / 1000.0, 3)


def main(argv):
    if len(argv) < 3:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    cd, export = argv[0], argv[1]
    rest = argv[2:]
    nccl = None
    if rest[:1] == ["--nccl"]:
        nccl, rest = rest[1], rest[2:]
    traces = expand(rest)
    with open(export, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    problems = []

    # ---- the inputs, read here ----
    evs = {}
    for p in traces:
        lines = read_lines(p)
        if lines and lines[0].get("ev") == "meta":
            evs[p] = lines
    t0s = [ls[0].get("t0", 0) for ls in evs.values() if ls[0].get("t0", 0) > 0]
    start = min(t0s) if t0s else 0

    def ts_of(meta, t):
        t0 = meta.get("t0", 0)
        return us(t + (t0 - start if t0 > 0 and start > 0 else 0))

    want = collections.Counter()
    for p, lines in evs.items():
        meta = lines[0]
        rank = meta.get("rank")
        for e in lines[1:]:
            if "t" not in e:
                continue
            ev = e.get("ev")
            if ev == "fw_pre":
                want[(rank, "recompute" if e.get("bw") else "forward", e["mod"],
                      ts_of(meta, e["t"]))] += 1
            elif ev == "bw_enter":
                want[(rank, "backward", e["mod"], ts_of(meta, e["t"]))] += 1
            elif ev == "region_enter":
                want[(rank, "region", e.get("label", "region %d" % e["region"]),
                      ts_of(meta, e["t"]))] += 1
    got = collections.Counter()
    for e in events:
        if e.get("ph") == "B":
            got[(e["pid"], e["cat"], e["name"], round(e["ts"], 3))] += 1
    for k in sorted(set(want) | set(got), key=str):
        if want[k] != got[k]:
            problems.append("span %s: %d in the traces, %d in the export" % (k, want[k], got[k]))
    nspans = sum(want.values())

    # ---- collectives, as colls lists them ----
    run = subprocess.run([cd, "colls", "--json"] + traces, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    colls = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    exp_c = {}
    for e in events:
        if e.get("cat") == "collective":
            a = e["args"]
            key = (e["pid"], a["pg"], a["seq"])
            if key in exp_c:
                problems.append("collective %s twice in the export" % (key,))
            exp_c[key] = e
    ncoll = 0
    for c in colls:
        key = (c["rank"], c["pg"], c["seq"])
        if c.get("time_s") is None:
            if key in exp_c:
                problems.append("collective %s has no time but was exported" % (key,))
            continue
        ncoll += 1
        e = exp_c.pop(key, None)
        if e is None:
            problems.append("collective %s missing from the export" % (key,))
            continue
        a = e["args"]
        for field, val in (("name", e["name"]), ("bytes", a.get("bytes")),
                           ("dtype", a.get("dtype")), ("module", a.get("module")),
                           ("phase", a.get("phase")), ("region", a.get("region"))):
            ref = c.get("collective" if field == "name" else field)
            if ref != val:
                problems.append("collective %s: %s %r, colls says %r" % (key, field, val, ref))
        if abs(e["ts"] - c["time_s"] * 1e6) > 1.0:
            problems.append("collective %s at %s us, colls says %s s" % (key, e["ts"], c["time_s"]))
    for key in exp_c:
        problems.append("collective %s in the export but not in colls" % (key,))

    # ---- findings, as ranks reports them ----
    run = subprocess.run([cd, "ranks", "--json"] + traces, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    report = json.loads(run.stdout)
    want_f = collections.Counter()
    when = {}
    for f in report.get("findings", []):
        for r in f.get("ranks") or []:
            want_f[(r, f["kind"], f["text"])] += 1
            for m in f.get("modules") or []:
                if m.get("side") == "odd" and m.get("rank") == r and m.get("time_s") is not None:
                    when[(r, f["kind"], f["text"])] = m["time_s"]
            if f["kind"] == "hang":
                for s in f.get("states") or []:
                    if s.get("rank") == r and s.get("last_event_s") is not None:
                        when.setdefault((r, f["kind"], f["text"]), s["last_event_s"])
    got_f = collections.Counter()
    for e in events:
        if e.get("cat") == "finding":
            k = (e["pid"], e["args"]["kind"], e["args"]["finding"])
            got_f[k] += 1
            if k in when and abs(e["ts"] - when[k] * 1e6) > 1.0:
                problems.append("finding %s at %s us, ranks says %s s" % (k[:2], e["ts"], when[k]))
    for k in set(want_f) | set(got_f):
        if want_f[k] != got_f[k]:
            problems.append("finding %s: %d from ranks, %d in the export" % (k, want_f[k], got_f[k]))

    # ---- NCCL ----
    ncalls = 0
    if nccl:
        lines = read_lines(nccl)
        meta = lines[0]
        calls, gpu = collections.Counter(), collections.Counter()
        for e in lines[1:]:
            if e.get("ev") != "nccl" or "t" not in e:
                continue
            if e.get("state") == "completed":
                if "dur" in e:
                    gpu[(us(e["dur"]), ts_of(meta, e["t"] - e["dur"]))] += 1
            else:
                calls[(e.get("func"), e.get("seq"), ts_of(meta, e["t"]))] += 1
        got_calls, got_gpu = collections.Counter(), collections.Counter()
        for e in events:
            if e.get("cat") == "nccl" and e["name"] != "NCCL calls lost":
                got_calls[(e["args"].get("func"), e["args"].get("seq"), round(e["ts"], 3))] += 1
            elif e.get("cat") == "gpu":
                got_gpu[(round(e["dur"], 3), round(e["ts"], 3))] += 1
        if calls != got_calls:
            problems.append("NCCL calls differ: traces %s, export %s" % (calls, got_calls))
        if gpu != got_gpu:
            problems.append("NCCL GPU slices differ: traces %s, export %s" % (gpu, got_gpu))
        ncalls = sum(calls.values())

    for p in problems[:40]:
        print("%s: %s" % (export, p))
    if problems:
        return 1
    print("%s: %d spans and regions, %d collectives, %d findings, %d NCCL calls match"
          % (export, nspans, ncoll, sum(want_f.values()), ncalls))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
