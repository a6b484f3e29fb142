#!/usr/bin/env python3
"""Golden test: commdebug against PyTorch's own CommDebugMode on real runs.

    check.py COMMDEBUG GOLDEN_DIR [-k CASE] [--list]

GOLDEN_DIR holds one directory per case: testdata/golden/ (PyTorch 2.11, see
testdata/SOURCE.md), or what regen.py made on the installed torch.  In each,
rankR.zst, the recorder's trace of rank R, and exp-rankR/regionK/, what
CommDebugMode itself produced for region K of the same program:

    table<N>.txt   generate_comm_debug_tracing_table(noise_level=N), with colours
    log<N>.txt     log_comm_debug_tracing_table_to_file(noise_level=N)
    dump<N>.json   generate_json_dump(noise_level=N)
    counts.json    {"total": get_total_counts(), "counts": {op: n}}
    sharding.json  {"sharding": get_sharding_info()["sharding"] as str,
                    "parameters": {module: sorted parameter names}}

For every rank, region and noise level: the table must be byte-identical with
colour (--color=always) and without (--color=never), the JSON dump equal with the
same keys in the same order, and counts and sharding info equal.  Where the case
also has light-rankR.zst (a trace of the Recorder in light mode, which records
no ops but collectives), its noise-0 tables and JSON dump, counts and sharding
info must equal CommDebugMode's just the same.  Every
difference is printed (the first lines of a unified diff); the last line is
"N passed, M failed" and the exit status 1 when one failed.
"""

import argparse
import difflib
import json
import os
import subprocess
import sys


def run(cd, *args):
    r = subprocess.run([cd] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError("%s %s exited %d: %s" % (cd, " ".join(args), r.returncode,
                                                    r.stderr.decode(errors="replace")[-500:]))
    return r.stdout


def diff(got, want, what):
    g = got.decode(errors="replace").splitlines(keepends=True)
    w = want.decode(errors="replace").splitlines(keepends=True)
    lines = list(difflib.unified_diff(w, g, "expected/" + what, "commdebug/" + what, n=1))
    return "".join(lines[:30]) + ("  ... (%d more diff lines)\n" % (len(lines) - 30)
                                  if len(lines) > 30 else "")


def ordered(text):
    """JSON with objects as lists of pairs, so that key order is compared."""
    return json.loads(text, object_pairs_hook=lambda kv: ["{}"] + [list(p) for p in kv])


def checks(cd, case_dir):
    """Yield (name, problem or None) for every comparison of one case."""
    for exp in sorted(d for d in os.listdir(case_dir) if d.startswith("exp-rank")):
        rank = exp[len("exp-rank"):]
        yield from trace_checks(cd, case_dir, exp, os.path.join(case_dir, "rank%s.zst" % rank),
                                "", range(4))
        light = os.path.join(case_dir, "light-rank%s.zst" % rank)
        if os.path.exists(light):
            yield from trace_checks(cd, case_dir, exp, light, " light", range(1))


def trace_checks(cd, case_dir, exp, trace, tag, noises):
    """Yield (name, problem or None) for one trace against CommDebugMode's
    outputs in EXP, at the given noise levels."""
    rank = exp[len("exp-rank"):]
    for region in sorted(os.listdir(os.path.join(case_dir, exp)),
                         key=lambda s: int(s[len("region"):])):
        k = region[len("region"):]
        edir = os.path.join(case_dir, exp, region)
        base = "%s%s rank %s region %s" % (os.path.basename(case_dir), tag, rank, k)

        def expect(name):
            with open(os.path.join(edir, name), "rb") as f:
                return f.read()

        for n in noises:
            for color, fname in (("always", "table%d.txt" % n), ("never", "log%d.txt" % n)):
                if not os.path.exists(os.path.join(edir, fname)):
                    continue
                got = run(cd, "analyze", "--noise", str(n), "--region", k,
                          "--color=" + color, "--no-nccl", trace)
                want = expect(fname)
                yield "%s %s" % (base, fname), (None if got == want
                                                else diff(got, want, fname))
            fname = "dump%d.json" % n
            if os.path.exists(os.path.join(edir, fname)):
                got = run(cd, "analyze", "--noise", str(n), "--region", k, "--json",
                          "--no-nccl", trace)
                want = expect(fname)
                same = ordered(got) == ordered(want)
                yield "%s %s" % (base, fname), (None if same else diff(got, want, fname))
        if os.path.exists(os.path.join(edir, "counts.json")):
            got = json.loads(run(cd, "counts", "--json", "--region", k, trace))
            want = json.loads(expect("counts.json"))
            mine = {"total": got["total"], "counts": got["counts"]}
            yield "%s counts.json" % base, (None if mine == want else
                                            "expected %r\n got %r\n" % (want, mine))
        if os.path.exists(os.path.join(edir, "sharding.json")):
            got = json.loads(run(cd, "sharding", "--json", "--region", k, trace))
            want = json.loads(expect("sharding.json"))
            mine = {"sharding": got["sharding"],
                    "parameters": {m: sorted(p) for m, p in got["parameters"].items()}}
            yield "%s sharding.json" % base, (None if mine == want else
                                              "expected %r\n got %r\n" % (want, mine))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("commdebug")
    ap.add_argument("golden")
    ap.add_argument("-k", action="append", default=[], help="only cases named so")
    ap.add_argument("--list", action="store_true", help="print every comparison")
    a = ap.parse_args()
    cases = sorted(d for d in os.listdir(a.golden) if os.path.isdir(os.path.join(a.golden, d)))
    if a.k:
        cases = [c for c in cases if c in a.k]
    passed = failed = 0
    for case in cases:
        for name, problem in checks(a.commdebug, os.path.join(a.golden, case)):
            if problem is None:
                passed += 1
                if a.list:
                    print("ok   " + name)
            else:
                failed += 1
                print("FAIL " + name)
                sys.stdout.write(problem)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
