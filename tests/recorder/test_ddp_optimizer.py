"""`commdebug buckets`' Planned section against torch's own DDPOptimizer
(torch._dynamo.backends.distributed, torch 2.x), byte for byte.

Each job (ddp_jobs.py: "linear6", six Linear(512, 512) with bucket_cap_mb
1.5; "embed", an embedding and blocks of unequal sizes with bucket_cap_mb 2)
is a real 2-rank gloo DDP run recorded by the recorder.  After the run,
rank 0 builds DDPOptimizer as torch.compile builds it (DDP's bucket_bytes_cap
alone, so its first bucket cap is dist._DEFAULT_FIRST_BUCKET_BYTES), runs
its compile_fn on torch.fx.symbolic_trace of the model DDP wraps and keeps
what its logger logged: the line "DDPOptimizer used bucket cap ... and
created N buckets." and the simple_grid table of its bucket assignments.
The analyzer, run on the traces, must print the same.
"""

import os

from _util import Skip, check, eq
from test_buckets import buckets_supported, job

CASES = ("linear6", "embed")
LINE_END = " Enable debug logs for detailed bucket info."
TABLE_HEAD = "\nDDPOptimizer produced the following bucket assignments:\n"


def ddpoptimizer_output(ddpo):
    """DDPOptimizer's log line (without its sentence about debug logs) and
    its table, from the records its logger gave."""
    line = table = None
    for r in ddpo["records"]:
        msg = r["msg"]
        if msg.startswith("\nDDPOptimizer used bucket cap "):
            check(msg.endswith(LINE_END), "DDPOptimizer's line ends otherwise: %r", msg)
            line = msg[1:-len(LINE_END)]
        elif msg.startswith(TABLE_HEAD):
            table = msg[len(TABLE_HEAD):]
    check(line is not None, "DDPOptimizer logged no bucket line: %r", ddpo["records"])
    check(table is not None, "DDPOptimizer logged no table (tabulate missing?): %r",
          ddpo["records"])
    return line, table


def planned_section(text):
    """The lines of the analyzer's Planned section (a one-module job)."""
    lines = text.split("\n")
    check("Planned" in lines, "no Planned section in:\n%s", text)
    start = lines.index("Planned") + 1
    end = lines.index("", start)
    return lines[start:end]


def test_ddpoptimizer_log_equals_planned(ctx):
    """The Planned section is DDPOptimizer's log, byte for byte: its line,
    then its table; after them, one line where DDP's own first bucket cap
    (bucket_cap_mb on torch 2.x) is not DDPOptimizer's."""
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        raise Skip("torch %s has no DDPOptimizer (torch._dynamo); it runs on torch 2.x"
                   % torch.__version__)
    if not buckets_supported(ctx):
        raise Skip("no analyzer with a buckets command")
    for case in CASES:
        out, truths = job(ctx, case)
        ddpo = truths[0]["ddpoptimizer"]
        check(ddpo is not None, "%s: rank 0 did not run DDPOptimizer", case)
        eq(ddpo["cap"], truths[0]["cap"], "%s: DDPOptimizer's cap is DDP's" % case)
        eq(ddpo["first_cap"], truths[0]["default_first_cap"],
           "%s: DDPOptimizer's first cap is dist._DEFAULT_FIRST_BUCKET_BYTES" % case)
        line, table = ddpoptimizer_output(ddpo)
        traces = [os.path.join(out, t["trace"]) for t in truths]
        _, text, _ = ctx.analyzer.run("buckets", *traces)
        got = planned_section(text)
        eq(got[0], line, "%s: DDPOptimizer's line" % case)
        want_table = table.split("\n")
        eq("\n".join(got[1:1 + len(want_table)]), table, "%s: DDPOptimizer's table" % case)
        notes = got[1 + len(want_table):]
        differs = truths[0]["first_cap"] != ddpo["first_cap"]
        eq(len(notes), int(differs), "%s: lines after the table: %r" % (case, notes))
        if differs:
            eq(notes[0], "note: DDP's own first bucket cap is %d bytes, DDPOptimizer's %d "
               "(torch.compile gives it DDP's bucket cap only): DDP's first bucket can "
               "differ from the compiled graph's" % (truths[0]["first_cap"], ddpo["first_cap"]),
               "%s: first-cap line" % case)
        # Observed: every step's bucket all-reduces, one per DDP bucket.
        obs = text[text.index("\nObserved\n"):text.index("\nPlanned\n")]
        for s in truths[0]["steps"]:
            check("region %d (step %d): %d bucket all-reduce" % (s["step"], s["step"],
                                                                 len(s["buckets"])) in obs,
                  "%s: step %d's %d all-reduces not in Observed:\n%s", case, s["step"],
                  len(s["buckets"]), obs)
        ctx.note("%s: %s; %d table lines equal; DDP's first cap %d, DDPOptimizer's %d"
                 % (case, line, len(want_table), truths[0]["first_cap"], ddpo["first_cap"]))
