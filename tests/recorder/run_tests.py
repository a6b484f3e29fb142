#!/usr/bin/env python3
"""Run the recorder tests.

    /usr/bin/python3 tests/recorder/run_tests.py [--commdebug PATH] [--require-analyzer]
                                                 [-k SUBSTRING] [--keep] [-v]

Every function named test_* in tests/recorder/test_*.py is a test; it gets a
context with ``tmp`` (a fresh directory), ``analyzer`` (an _util.Analyzer or
None when the binary is missing), ``require_analyzer`` and ``note(msg)``.
Checks that need the analyzer are skipped, with a message, when it is
missing, unless --require-analyzer makes that a failure (CI); likewise the
checks of a command the binary does not have yet (test_postmortem.py:
`commdebug ranks`).  The last line of output is
"N passed, M failed"; the exit status is 1 when a test failed.
"""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _util  # noqa: E402


class Context:
    def __init__(self, tmp, analyzer, verbose, require_analyzer=False):
        self.tmp = tmp
        self.analyzer = analyzer
        self.require_analyzer = require_analyzer
        self.notes = []
        self.verbose = verbose

    def note(self, msg):
        self.notes.append(msg)


def discover(pattern):
    tests = []
    for fn in sorted(os.listdir(HERE)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        mod = importlib.import_module(fn[:-3])
        for name in sorted(vars(mod)):
            f = getattr(mod, name)
            if name.startswith("test_") and callable(f):
                full = "%s.%s" % (fn[:-3], name)
                if pattern and not any(p in full for p in pattern):
                    continue
                tests.append((full, f, getattr(f, "__code__", None)))
    tests.sort(key=lambda t: (t[0].split(".")[0], t[2].co_firstlineno if t[2] else 0))
    return [(n, f) for n, f, _ in tests]


_TAIL_LINES = 12      # of each failure's traceback, repeated at the end


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commdebug", metavar="PATH",
                   default=os.path.join(_util.REPO, "build", "commdebug"),
                   help="the analyzer binary (default: build/commdebug)")
    p.add_argument("--require-analyzer", action="store_true",
                   help="fail instead of skipping analyzer checks when PATH is missing")
    p.add_argument("-k", action="append", default=[], metavar="SUBSTRING",
                   help="run only tests whose name contains SUBSTRING (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directories")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()

    analyzer = None
    if os.path.isfile(args.commdebug) and os.access(args.commdebug, os.X_OK):
        analyzer = _util.Analyzer(os.path.abspath(args.commdebug))
    elif args.require_analyzer:
        print("analyzer %s not found (--require-analyzer)" % args.commdebug)
        print("0 passed, 1 failed")
        return 1
    else:
        print("note: analyzer %s not found; analyzer checks are skipped" % args.commdebug)

    root = tempfile.mkdtemp(prefix="commdebug-tests-")
    passed = failed = skipped = 0
    failures = []       # (name, traceback): repeated at the end, where a log's tail shows them
    for name, fn in discover(args.k):
        tmp = os.path.join(root, name)
        os.makedirs(tmp)
        ctx = Context(tmp, analyzer, args.verbose, args.require_analyzer)
        t0 = time.time()
        try:
            fn(ctx)
        except _util.Skip as e:
            skipped += 1
            print("SKIP %s: %s" % (name, e))
            continue
        except Exception:
            failed += 1
            tb = traceback.format_exc().rstrip()
            failures.append((name, tb))
            print("FAIL %s (%.1fs)" % (name, time.time() - t0))
            print("    " + tb.replace("\n", "\n    "))
            continue
        passed += 1
        print("PASS %s (%.1fs)" % (name, time.time() - t0))
        for n in ctx.notes:
            print("    note: %s" % n)
    sys.stdout.flush()
    if args.keep:
        print("kept %s" % root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    if skipped:
        print("%d skipped" % skipped)
    for name, tb in failures:
        # (meson's log of a failed test keeps only its last 100 lines)
        print("FAILED %s:\n    %s" % (name, "\n    ".join(tb.splitlines()[-_TAIL_LINES:])))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
