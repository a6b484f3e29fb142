#!/usr/bin/env python3
"""Check a file against the rules of the Chrome trace-event format (the JSON
that Perfetto and chrome://tracing open), as strictly as commdebug export
promises to write it.

usage: check_trace_events.py [--quiet] FILE...

Rules checked:
- the document is JSON: an object with a "traceEvents" array, or an array;
- every event is an object with "ph" (a known phase), "pid" and "tid"
  (integers) and, except metadata ("M"), a numeric "ts";
- "X": "dur" a number >= 0;
- "B"/"E": per (pid, tid), in file order, every "E" closes the innermost
  open "B" (same "name" when the "E" has one), not before it (ts), with the
  B/E times of a thread never going back (a viewer sorts by ts, so a later
  event with an earlier ts would be matched differently); every "B" is closed;
- slices of a thread ("B"/"E" pairs and "X") nest properly: two of them are
  disjoint or one holds the other;
- "b"/"e" (nestable async): matched by (cat, id) with the same name, "e" not
  before its "b", all closed; "n" has an id;
- instants ("i", "I"): "s", when present, is "g", "p" or "t";
- "M": name is process_name, process_labels, process_sort_index,
  thread_name or thread_sort_index with args.name (a string),
  args.labels (a string) or args.sort_index (an integer).

Exit status: 0 valid, 1 not valid (each problem on one line, at most 20 per
file), 2 usage."""
import json
import sys

PHASES = set("BEXiIbneMCsftPONDR")
META = {
    "process_name": ("name", str),
    "thread_name": ("name", str),
    "process_labels": ("labels", str),
    "process_sort_index": ("sort_index", int),
    "thread_sort_index": ("sort_index", int),
}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and v == v and v not in (float("inf"), float("-inf")))


def check(doc):
    """Problems of a parsed document, as (event index or None, message)."""
    out = []
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            return [(None, 'the top-level object has no "traceEvents" array')]
    elif isinstance(doc, list):
        events = doc
    else:
        return [(None, "the document is neither an object nor an array")]

    stacks = {}      # (pid, tid) -> [(name, ts, index)]
    last_be = {}     # (pid, tid) -> ts of the last B/E
    slices = {}      # (pid, tid) -> [(start, end, index)]
    asyncs = {}      # (cat, id) -> [(name, ts, index)]
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            out.append((i, "the event is not an object"))
            continue
        ph = e.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            out.append((i, "ph is missing or unknown: %r" % (ph,)))
            continue
        for k in ("pid", "tid"):
            if not is_int(e.get(k)):
                out.append((i, "%s is missing or not an integer" % k))
        if ph != "M" and not is_num(e.get("ts")):
            out.append((i, "ts is missing or not a number"))
            continue
        key = (e.get("pid"), e.get("tid"))
        ts = e.get("ts")
        if ph == "M":
            name = e.get("name")
            args = e.get("args")
            if name not in META:
                out.append((i, "unknown metadata event %r" % (name,)))
            elif not isinstance(args, dict):
                out.append((i, "metadata %s has no args" % name))
            else:
                field, typ = META[name]
                v = args.get(field)
                if not (is_int(v) if typ is int else isinstance(v, typ)):
                    out.append((i, "metadata %s: args.%s is missing or not a %s"
                                % (name, field, typ.__name__)))
        elif ph == "X":
            dur = e.get("dur")
            if not is_num(dur) or dur < 0:
                out.append((i, "X event without a dur >= 0"))
            else:
                slices.setdefault(key, []).append((ts, ts + dur, i))
        elif ph in "BE":
            if ts < last_be.get(key, ts):
                out.append((i, "%s at ts %s comes after ts %s on pid %s tid %s"
                            % (ph, ts, last_be[key], key[0], key[1])))
            last_be[key] = max(ts, last_be.get(key, ts))
            st = stacks.setdefault(key, [])
            if ph == "B":
                if not isinstance(e.get("name"), str):
                    out.append((i, "B event without a name"))
                st.append((e.get("name"), ts, i))
            elif not st:
                out.append((i, "E event with no open B on pid %s tid %s" % key))
            else:
                name, bts, bi = st.pop()
                if "name" in e and e["name"] != name:
                    out.append((i, "E %r closes B %r (event %d)" % (e["name"], name, bi)))
                if ts < bts:
                    out.append((i, "E at ts %s before its B at %s" % (ts, bts)))
                slices.setdefault(key, []).append((bts, ts, bi))
        elif ph in "be":
            if "id" not in e and "id2" not in e:
                out.append((i, "async %s event without an id" % ph))
                continue
            akey = (e.get("cat"), json.dumps(e.get("id", e.get("id2")), sort_keys=True))
            st = asyncs.setdefault(akey, [])
            if ph == "b":
                st.append((e.get("name"), ts, i))
            else:
                for j in range(len(st) - 1, -1, -1):
                    if st[j][0] == e.get("name"):
                        if ts < st[j][1]:
                            out.append((i, "e at ts %s before its b at %s" % (ts, st[j][1])))
                        del st[j]
                        break
                else:
                    out.append((i, "e event %r with no open b of (cat, id) %s"
                                % (e.get("name"), akey)))
        elif ph == "n":
            if "id" not in e and "id2" not in e:
                out.append((i, "async n event without an id"))
        elif ph in "iI":
            if "s" in e and e["s"] not in ("g", "p", "t"):
                out.append((i, "instant with scope %r (not g, p or t)" % (e["s"],)))
    for key, st in stacks.items():
        for name, ts, i in st:
            out.append((i, "B %r on pid %s tid %s is never closed" % (name, key[0], key[1])))
    for akey, st in asyncs.items():
        for name, ts, i in st:
            out.append((i, "b %r of (cat, id) %s is never closed" % (name, akey)))
    for key, v in slices.items():
        v.sort(key=lambda s: (s[0], -s[1], s[2]))
        open_ = []
        for s in v:
            while open_ and open_[-1][1] <= s[0]:
                open_.pop()
            if open_ and open_[-1][1] < s[1]:
                p = open_[-1]
                out.append((s[2], "slice [%s, %s] overlaps slice [%s, %s] (event %d) on pid %s "
                            "tid %s without nesting" % (s[0], s[1], p[0], p[1], p[2],
                                                        key[0], key[1])))
                continue
            open_.append(s)
    return out


def main(argv):
    quiet = False
    if argv and argv[0] == "--quiet":
        quiet = True
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    bad = 0
    for path in argv:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            print("%s: not valid JSON: %s" % (path, exc))
            bad += 1
            continue
        problems = check(doc)
        for i, msg in problems[:20]:
            print("%s: %s%s" % (path, "" if i is None else "event %d: " % i, msg))
        if len(problems) > 20:
            print("%s: ... and %d more" % (path, len(problems) - 20))
        if problems:
            bad += 1
        elif not quiet:
            n = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
            print("%s: valid, %d events" % (path, n))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
