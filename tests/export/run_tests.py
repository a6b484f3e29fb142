#!/usr/bin/env python3
"""Tests of `commdebug export --perfetto` (meson suite "export").

usage: run_tests.py COMMDEBUG TESTDATA [NAME...]

Each case exports real recorded traces (testdata/) or a hand-written one
(tests/export/data/), checks the file against the trace-event format's rules
(check_trace_events.py) and its content against the inputs
(check_content.py); then the edge cases: a cut trace, a broken trace, an
output that is an input, and the validator itself on broken files."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_trace_events  # noqa: E402

failures = []


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg))


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def export_case(cd, tmp, name, args, content_args, want_rc=None, expect=None):
    out = os.path.join(tmp, name + ".json")
    if want_rc is None:
        # 4 when the post-mortem has findings (as ranks says), else 0
        traces = [a for i, a in enumerate(args)
                  if not a.startswith("-") and (i == 0 or args[i - 1] != "--nccl")]
        rk = run([cd, "ranks", "--json"] + traces)
        want_rc = 4 if json.loads(rk.stdout)["findings"] else 0
    r = run([cd, "export", "--perfetto", "-o", out] + args)
    if r.returncode != want_rc:
        return fail(name, "exit %d, want %d: %s" % (r.returncode, want_rc, r.stderr.strip()))
    with open(out, encoding="utf-8") as f:
        doc = json.load(f)
    problems = check_trace_events.check(doc)
    if problems:
        return fail(name, "not valid: %s" % (problems[:3],))
    c = run([sys.executable, os.path.join(HERE, "check_content.py"), cd, out] + content_args)
    if c.returncode != 0:
        return fail(name, "content: %s" % c.stdout.strip())
    if expect:
        msg = expect(doc)
        if msg:
            return fail(name, msg)
    print("ok   %s: %s" % (name, c.stdout.strip().split(": ", 1)[-1]))


def threads(doc, pid):
    return sorted(e["args"]["name"] for e in doc["traceEvents"]
                  if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == pid)


def overlap_expect(doc):
    od = doc["otherData"]
    want = {"untimed_events_left_out": 1, "unmatched_span_ends": 1,
            "spans_closed_by_exporter": 1, "collectives": 2}
    for k, v in want.items():
        if od.get(k) != v:
            return "otherData.%s is %r, want %r" % (k, od.get(k), v)
    # A [60,80] and A.c [70,90] overlap without nesting: two backward threads
    by_tid = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "backward" and e["ph"] == "B":
            by_tid.setdefault(e["tid"], []).append(e["name"])
    if sorted(by_tid.values()) != [["A", "A.b"], ["A.c"]]:
        return "backward threads hold %r" % (by_tid,)
    if "backward 2" not in threads(doc, 0):
        return "no thread named 'backward 2'"
    return None


def finding_expect(kind, rank):
    def check(doc):
        f = [e for e in doc["traceEvents"] if e.get("cat") == "finding"]
        if [(e["pid"], e["name"]) for e in f] != [(rank, kind)]:
            return "findings %r, want one %s on rank %d" % (
                [(e["pid"], e["name"]) for e in f], kind, rank)
        return None
    return check


def main(argv):
    cd, data = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    only = set(argv[2:])
    tmp = tempfile.mkdtemp(prefix="cd-export-")
    try:
        cases = [
            ("sample", [data + "/sample.zst", data + "/sample-rank1.zst"], None, None),
            ("tp-nccl", ["--nccl", data + "/tp-nccl.nccl.jsonl", data + "/tp-nccl.jsonl"],
             ["--nccl", data + "/tp-nccl.nccl.jsonl", data + "/tp-nccl.jsonl"], None),
            ("mlp-tp", [data + "/mlp-tp.jsonl"], None, None),
            ("two-regions", [data + "/two-regions.jsonl"], None, None),
            ("straggler", [data + "/jobs/straggler"], None, finding_expect("straggler", 3)),
            ("desync", [data + "/jobs/desync"], None, finding_expect("desync", 1)),
            ("overlap", [HERE + "/data/overlap.jsonl"], None, overlap_expect),
            # times that go back: a thread's times still never do
            ("clock-back", [HERE + "/data/clock-back.jsonl"], None, None),
        ]
        for g in sorted(os.listdir(os.path.join(data, "golden"))):
            d = os.path.join(data, "golden", g)
            if not os.path.isdir(d):
                continue
            # a case's full traces (rankR.zst) and, where it has them, light
            # mode's of the same program (light-rankR.zst): two jobs
            for kind, pre in (("", "rank"), ("light-", "light-rank")):
                traces = [os.path.join(d, f) for f in sorted(os.listdir(d))
                          if f.startswith(pre) and f.endswith(".zst")]
                if traces:
                    cases.append(("golden-" + kind + g, traces, None, None))
        for name, args, cargs, expect in cases:
            if not only or name in only:
                export_case(cd, tmp, name, args, cargs if cargs is not None else args,
                            expect=expect)
        if not only or "edges" in only:
            edges(cd, data, tmp)
        if not only or "validator" in only:
            validator(tmp)
    finally:
        shutil.rmtree(tmp)
    print("%d failed" % len(failures))
    return 1 if failures else 0


def edges(cd, data, tmp):
    # a cut trace: what was read is exported, exit 3, still valid
    with open(data + "/sample.zst", "rb") as f:
        z = f.read()
    cut = os.path.join(tmp, "cut-rank0.zst")
    with open(cut, "wb") as f:
        f.write(z[: len(z) * 2 // 3])
    out = os.path.join(tmp, "cut.json")
    r = run([cd, "export", "-o", out, cut])
    if r.returncode != 3 or "cut" not in r.stderr:
        fail("cut", "exit %d, stderr %r" % (r.returncode, r.stderr))
    else:
        with open(out) as f:
            p = check_trace_events.check(json.load(f))
        if p:
            fail("cut", "not valid: %s" % (p[:3],))
        else:
            print("ok   cut: exit 3, valid")

    # a job with an empty trace: exported as its rank (by its file name), with
    # its finding
    job = os.path.join(tmp, "job-empty")
    shutil.copytree(data + "/jobs/desync", job)
    open(os.path.join(job, "rank3.zst"), "w").close()
    export_case(cd, tmp, "empty-rank", [job], [job], expect=lambda doc: None if any(
        e.get("cat") == "finding" and e["pid"] == 3 and e["name"] == "empty_trace"
        for e in doc["traceEvents"]) else "no empty_trace finding on pid 3")

    # a broken line in the middle: one line naming file and line, exit 1,
    # the output file left as it was
    with open(data + "/two-regions.jsonl") as f:
        lines = f.read().splitlines()
    lines[3] = lines[3][: len(lines[3]) // 2]
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = os.path.join(tmp, "bad.json")
    with open(out, "w") as f:
        f.write("old")
    r = run([cd, "export", "-o", out, bad])
    err = r.stderr.strip().splitlines()
    with open(out) as f:
        kept = f.read() == "old"
    if (r.returncode != 1 or len(err) != 1 or not err[0].startswith("commdebug: %s:4:" % bad)
            or not kept or [n for n in os.listdir(tmp) if n.startswith("bad.json.")]):
        fail("bad-line", "exit %d, stderr %r, old output kept %s" % (r.returncode, err, kept))
    else:
        print("ok   bad-line: %s" % err[0])

    # the output may not be an input (nor its NCCL-side trace)
    cp = os.path.join(tmp, "in.jsonl")
    shutil.copy(data + "/two-regions.jsonl", cp)
    r = run([cd, "export", "-o", cp, cp])
    with open(cp) as f:
        same = f.read() == open(data + "/two-regions.jsonl").read()
    if r.returncode != 2 or not same or "refusing" not in r.stderr:
        fail("same-file", "exit %d, stderr %r" % (r.returncode, r.stderr))
    else:
        print("ok   same-file")

    # standard output, and usage errors
    r = run([cd, "export", "-o", "-", data + "/sample.zst"])
    if r.returncode != 0 or check_trace_events.check(json.loads(r.stdout)):
        fail("stdout", "exit %d" % r.returncode)
    else:
        print("ok   stdout")
    # a trace on standard input is read once, as any other
    with open(data + "/sample.zst", "rb") as f:
        r = subprocess.run([cd, "export", "-o", "-", "-"], stdin=f, capture_output=True,
                           text=True)
    if r.returncode != 0 or check_trace_events.check(json.loads(r.stdout)):
        fail("stdin", "exit %d, stderr %r" % (r.returncode, r.stderr))
    else:
        print("ok   stdin")
    for args, what in ((["x.zst"], "no output"), (["-o", "o.json"], "no trace"),
                       (["--bogus", "-o", "o", "x"], "option")):
        r = run([cd, "export"] + args, cwd=tmp)
        if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 2:
            fail("usage-" + what, "exit %d, stderr %r" % (r.returncode, r.stderr))
        else:
            print("ok   usage: %s" % r.stderr.splitlines()[0])


def validator(tmp):
    """The validator must refuse each of these (and accept the first)."""
    m = [{"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "p"}}]
    good = m + [
        {"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "a"},
        {"ph": "B", "pid": 1, "tid": 1, "ts": 1, "name": "b"},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 2, "name": "b"},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 3, "name": "a"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 5, "name": "x"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 1, "dur": 2, "name": "y"},
        {"ph": "b", "pid": 1, "tid": 3, "ts": 0, "cat": "c", "id": 1, "name": "q"},
        {"ph": "b", "pid": 1, "tid": 3, "ts": 1, "cat": "c", "id": 2, "name": "r"},
        {"ph": "e", "pid": 1, "tid": 3, "ts": 2, "cat": "c", "id": 1, "name": "q"},
        {"ph": "e", "pid": 1, "tid": 3, "ts": 3, "cat": "c", "id": 2, "name": "r"},
        {"ph": "i", "pid": 1, "tid": 1, "ts": 1, "s": "g", "name": "i"},
    ]
    broken = {
        "unbalanced-B": m + [{"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "a"}],
        "E-without-B": [{"ph": "E", "pid": 1, "tid": 1, "ts": 0}],
        "E-wrong-name": [{"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "a"},
                         {"ph": "B", "pid": 1, "tid": 1, "ts": 1, "name": "b"},
                         {"ph": "E", "pid": 1, "tid": 1, "ts": 2, "name": "a"},
                         {"ph": "E", "pid": 1, "tid": 1, "ts": 3, "name": "b"}],
        "E-before-B": [{"ph": "B", "pid": 1, "tid": 1, "ts": 5, "name": "a"},
                       {"ph": "E", "pid": 1, "tid": 1, "ts": 4, "name": "a"}],
        "BE-ts-back": [{"ph": "B", "pid": 1, "tid": 1, "ts": 5, "name": "a"},
                       {"ph": "E", "pid": 1, "tid": 1, "ts": 6, "name": "a"},
                       {"ph": "B", "pid": 1, "tid": 1, "ts": 1, "name": "b"},
                       {"ph": "E", "pid": 1, "tid": 1, "ts": 2, "name": "b"}],
        "X-overlap": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "name": "a"},
                      {"ph": "X", "pid": 1, "tid": 1, "ts": 3, "dur": 5, "name": "b"}],
        "X-B-overlap": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "name": "a"},
                        {"ph": "B", "pid": 1, "tid": 1, "ts": 3, "name": "b"},
                        {"ph": "E", "pid": 1, "tid": 1, "ts": 8, "name": "b"}],
        "X-negative-dur": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1, "name": "a"}],
        "X-no-dur": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "name": "a"}],
        "no-ts": [{"ph": "i", "pid": 1, "tid": 1, "name": "a"}],
        "ts-string": [{"ph": "i", "pid": 1, "tid": 1, "ts": "1", "name": "a"}],
        "no-pid": [{"ph": "i", "tid": 1, "ts": 1, "name": "a"}],
        "no-tid": [{"ph": "i", "pid": 1, "ts": 1, "name": "a"}],
        "no-ph": [{"pid": 1, "tid": 1, "ts": 1, "name": "a"}],
        "unknown-ph": [{"ph": "Z", "pid": 1, "tid": 1, "ts": 1}],
        "instant-scope": [{"ph": "i", "pid": 1, "tid": 1, "ts": 1, "s": "x", "name": "a"}],
        "async-unmatched": [{"ph": "b", "pid": 1, "tid": 1, "ts": 1, "cat": "c", "id": 1,
                             "name": "a"},
                            {"ph": "e", "pid": 1, "tid": 1, "ts": 2, "cat": "c", "id": 2,
                             "name": "a"}],
        "async-no-id": [{"ph": "b", "pid": 1, "tid": 1, "ts": 1, "cat": "c", "name": "a"}],
        "meta-unknown": [{"ph": "M", "pid": 1, "tid": 1, "name": "colour", "args": {}}],
        "meta-no-name": [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {}}],
        "meta-sort-str": [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_sort_index",
                           "args": {"sort_index": "1"}}],
        "top-no-events": {"events": []},
        "top-string": "x",
    }
    files = {"good": json.dumps({"traceEvents": good})}
    for k, v in broken.items():
        files[k] = json.dumps({"traceEvents": v} if isinstance(v, list) else v)
    files["not-json"] = '{"traceEvents": [{"ph": "i",'
    files["array-top"] = json.dumps(good)
    for k, text in files.items():
        p = os.path.join(tmp, "v-%s.json" % k)
        with open(p, "w") as f:
            f.write(text)
        r = run([sys.executable, os.path.join(HERE, "check_trace_events.py"), "--quiet", p])
        want = 0 if k in ("good", "array-top") else 1
        if r.returncode != want:
            fail("validator-" + k, "exit %d, want %d: %s" % (r.returncode, want, r.stdout))
    print("ok   validator: accepts 2 valid files, refuses %d broken ones" % (len(files) - 2))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
