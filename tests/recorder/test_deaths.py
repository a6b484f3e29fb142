"""A process that died is a finding even when no collective is left waiting.

death_jobs.py: a real 2-rank gloo job (DDP, and DTensor where torch has it)
whose rank 1 is SIGKILLed after its last collective, so rank 0 dies of the
RuntimeError of its next all-reduce.  `commdebug ranks` must exit 4 and name
rank 1 as died (killed: its recorder writes an end event, its trace has
none) and rank 0 as ended by the exception its ledger records.  Traces of a
recorder without end events (no "ends" in meta) skip the end checks."""

import json
import os
import time

from _util import Skip, check, eq, events
from test_postmortem import ranks_json, ranks_supported

import death_jobs


def read_ledger(out, rank):
    with open(os.path.join(out, "ledger%d.jsonl" % rank)) as f:
        return [json.loads(l) for l in f if l.endswith("\n")]


def test_killed_after_last_collective(ctx):
    out = os.path.join(ctx.tmp, "killed")
    t0 = time.time()
    rcs = death_jobs.run(out)
    ctx.note("exits %r; %.1f s" % (rcs, time.time() - t0))
    led = [read_ledger(out, r) for r in range(2)]
    check(led[1] and led[1][-1]["ev"] == "kill", "rank 1 did not kill itself: %r\n%s",
          led[1][-3:], open(os.path.join(out, "log1.txt")).read()[-2000:])
    eq(rcs[1], -9, "rank 1's exit status")
    check(led[0][-1]["ev"] == "error", "rank 0 did not die of its last all-reduce: %r\n%s",
          led[0][-3:], open(os.path.join(out, "log0.txt")).read()[-2000:])
    check(rcs[0] != 0, "rank 0 exited 0")
    # both ranks issued every collective of every step (their ledgers agree)
    eq([(e["step"], e["what"]) for e in led[0] if e["ev"] == "coll"],
       [(e["step"], e["what"]) for e in led[1] if e["ev"] == "coll"], "the ranks' collectives")
    meta = events(os.path.join(out, "traces", "rank1.zst"), allow_cut=True)[0]
    if not ranks_supported(ctx):
        return
    doc, code, _ = ranks_json(ctx, os.path.join(out, "traces"), rc=(4,))
    _, text, _ = ctx.analyzer.run("ranks", os.path.join(out, "traces"), check_rc=(4,))
    if not meta.get("ends"):
        raise Skip("this recorder writes no end event (no \"ends\" in meta): "
                   "a kill between regions cannot be told")
    ends = {t["rank"]: t for t in doc["traces"]}
    eq(ends[1]["end"], "killed", "rank 1's end")
    check(ends[1]["end_event"] is None, "rank 1 has an end event: %r", ends[1]["end_event"])
    eq(ends[0]["end"], "exception", "rank 0's end")
    err = led[0][-1]
    eq(ends[0]["end_event"]["exc"].rsplit(".", 1)[-1], err["exc"], "rank 0's exception type")
    check(ends[0]["end_event"]["msg"].startswith(err["msg"][:60]),
          "rank 0's message %r, the ledger's %r", ends[0]["end_event"]["msg"], err["msg"])
    died = [f for f in doc["findings"] if f["kind"] == "died"]
    eq([f["ranks"] for f in died], [[1], [0]], "died findings (rank 1 first: it died first)")
    first = doc["findings"][0]
    eq((first["kind"], first["ranks"]), ("died", [1]), "the first finding")
    check(not any(f["kind"] in ("hang", "skip", "size_mismatch", "type_mismatch")
                  for f in doc["findings"]), "collective findings: %r",
          [f["text"] for f in doc["findings"]])
    eq(ends[1]["region"], None, "rank 1 was killed between regions")
    check("1. died: rank 1 cut off after region 3 \"step 3\"" in text,
          "the text report does not name rank 1 first:\n%s", text)
    check("all ranks agree" not in text, "the text report says the ranks agree")
