#!/usr/bin/env python3
"""The HTML report (commdebug report) opened in a real browser.

usage: browser_test.py COMMDEBUG TESTDATA ARTIFACT_DIR

For real traces (testdata/sample.zst + sample-rank1.zst, a two-rank run;
testdata/tp-nccl.jsonl with its NCCL side; testdata/postmortem-kill/, a real
4-rank job in which rank 2 was killed) the test writes the report, opens it
from file:// in headless Chromium driven over the DevTools protocol
(--remote-debugging-pipe: requests on fd 3, replies and events on fd 4, each
a JSON text ended by a NUL byte) and checks:

  - no console error, no uncaught exception, no error in the browser's log;
  - the DOM holds every module of the tree, in order, with the forward and
    backward collective counts of `commdebug analyze --json` of the same trace
    and region, and the totals of `commdebug counts --json`;
  - clicking (a mouse press and release at the button's place) a module's op
    button shows that module's operations as `analyze --json -n 3` lists them;
  - with several ranks the post-mortem comes first, its first finding being
    the first of `commdebug ranks --json`;
  - the NCCL charts show the bytes of analyze --json's NCCL report;
  - and, so that the checks are known to bite, that a page with a thrown
    exception, and one whose counts were altered, are both caught.

A screenshot of each page is kept in ARTIFACT_DIR (the paths are printed).
Exit 77 (skipped) without Chromium, unless COMMDEBUG_REQUIRE_BROWSER=1.
Standard library only.
"""

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


class Failure(Exception):
    pass


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    """Headless Chromium over --remote-debugging-pipe, one page."""

    def __init__(self, exe, profile):
        to_r, self.to_w = os.pipe()      # our requests -> its fd 3
        self.from_r, from_w = os.pipe()  # its fd 4 -> our replies and events

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-dev-shm-usage",
             "--window-size=1280,900",
             "--hide-scrollbars", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(profile, "stderr.txt"), "wb"))
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def close(self):
        try:
            self.send("Browser.close", session=False, wait=False)
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("the browser did not answer in time")
            ready, _, _ = select.select([self.from_r], [], [], left)
            if ready:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise Failure("the browser closed its DevTools pipe (exit %s)" % self.proc.poll())
                self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method, params=None, session=True, wait=True, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        if not wait:
            return None
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise Failure("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        for i, e in enumerate(self.events):
            if e["method"] == method:
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            if "method" in m:
                self.events.append(m)

    def attach(self):
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(domain + ".enable")

    def open(self, url):
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        deadline = time.monotonic() + 30
        while self.eval("document.documentElement.getAttribute('data-ready')") != "1":
            if time.monotonic() > deadline:
                break  # the page's script did not finish: errors() says why
            time.sleep(0.05)

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise Failure("evaluating %r: %s" % (expr[:60], r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def errors(self):
        """Console errors, uncaught exceptions and log errors seen so far."""
        self.eval("0")  # let pending events arrive first
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: %s %s" % (d.get("text"), d.get("exception", {}).get("description", "")))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description")))
                                                                     for a in p.get("args", []))))
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append("log: %s" % p["entry"].get("text"))
        return out

    def click(self, element):
        """A real click at the middle of the element (a JavaScript expression;
        scrolled into view first)."""
        box = self.eval("(function(){var e=%s; if(!e) return null;"
                        "e.scrollIntoView({block:'center'}); var r=e.getBoundingClientRect();"
                        "return [r.left+r.width/2, r.top+r.height/2];})()" % element)
        if not box:
            raise Failure("nothing to click: %s" % element)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            ev = {"type": kind, "x": box[0], "y": box[1]}
            if kind != "mouseMoved":
                ev.update(button="left", clickCount=1)
            self.send("Input.dispatchMouseEvent", ev)

    def screenshot(self, path):
        height = self.eval("Math.min(document.documentElement.scrollHeight, 4000)")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": int(height), "deviceScaleFactor": 1, "mobile": False})
        png = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        self.send("Emulation.clearDeviceMetricsOverride")
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))
        return path


# ---------------------------------------------------------------- commdebug

def run(cd, *args, ok=(0,)):
    p = subprocess.run([cd] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode not in ok:
        raise Failure("commdebug %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.decode()))
    return p.stdout.decode()


def json_docs(text):
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.append(doc)


def last_complete_region(path):
    """The last region with a region_exit, read from the trace itself."""
    if path.endswith(".zst"):
        text = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=True).stdout.decode()
    else:
        text = open(path).read()
    last = None
    for line in text.splitlines():
        if '"region_exit"' in line:
            last = json.loads(line)["region"]
    return last


def walk(node):
    yield node
    for c in node["children"]:
        yield from walk(c)


# ---------------------------------------------------------------- checks

DOM_MODULES = """Array.from(document.querySelectorAll('#tree li.mod')).map(function(li){
  function chips(dir){ return Array.from(li.querySelector(':scope > .row').querySelectorAll('.cnt[data-dir='+dir+']'))
      .map(function(c){ return [c.dataset.coll, Number(c.dataset.n)]; }); }
  return {fqn: li.dataset.fqn, fw: chips('forward'), bw: chips('backward'),
          ops: (function(b){ return b ? b.textContent : null; })(li.querySelector(':scope > .row > .ops-toggle'))};
})"""

DOM_COUNTS = """(function(){ var c = {}; document.querySelectorAll('#counts-table tr.count').forEach(function(tr){
  c[tr.dataset.coll] = Number(tr.dataset.n); });
  var t = document.getElementById('count-total'); return {total: t ? Number(t.dataset.n) : null, counts: c}; })()"""


def mod_li(fqn):
    """JavaScript: the tree's <li> of module fqn (compared as a string, so
    that no name needs quoting for a CSS selector)."""
    return ("Array.from(document.querySelectorAll('#tree li.mod')).find(function(li){"
            " return li.dataset.fqn === %s; })" % json.dumps(fqn))


def check_tree(b, cd, trace, region, extra=(), cap=100):
    """Modules, counts and one module's ops against analyze/counts --json
    (cap: the report's --max-ops, at most this many ops per list)."""
    shown = b.eval("Number(document.getElementById('app').dataset.region)")
    if shown != region:
        raise Failure("%s: the page shows region %s, expected %s" % (trace, shown, region))
    want = json_docs(run(cd, "analyze", "--json", "-n", "3", "-r", str(region), *extra, trace, ok=(0, 3)))[0]
    mods = b.eval(DOM_MODULES)
    want_mods = list(walk(want))
    if [m["fqn"] for m in mods] != [m["fqn"] for m in want_mods]:
        raise Failure("%s: modules in the page %s, analyze --json has %s" % (
            trace, [m["fqn"] for m in mods], [m["fqn"] for m in want_mods]))
    for got, exp in zip(mods, want_mods):
        for d, key in (("fw", "collectives_forward"), ("bw", "collectives_backward")):
            if got[d] != exp[key]:
                raise Failure("%s: %s %s counts in the page %s, analyze --json: %s" % (
                    trace, exp["fqn"], key, got[d], exp[key]))
    if not any(m["fw"] or m["bw"] for m in mods):
        raise Failure("%s: no collective count in the page at all" % trace)
    counts = json_docs(run(cd, "counts", "--json", "-r", str(region), trace, ok=(0, 3)))[0]
    got = b.eval(DOM_COUNTS)
    if got["total"] != counts["total"] or got["counts"] != counts["counts"]:
        raise Failure("%s: counts in the page %s, counts --json: %s" % (trace, got, counts))

    # expand the module with the most ops, by a click, and read its op rows
    ops_of = {m["fqn"]: [(d, op["name"]) for d, k in (("forward", "operations_forward"),
                                                     ("backward", "operations_backward"),
                                                     ("checkpointing", "operations_checkpointing"))
                         for op in m[k]] for m in want_mods}
    target = max(want_mods, key=lambda m: len(ops_of[m["fqn"]]))
    if not ops_of[target["fqn"]]:
        raise Failure("%s: no module has ops to expand" % trace)
    li = mod_li(target["fqn"])
    button = li + ".querySelector(':scope > .row > .ops-toggle')"
    if b.eval("document.querySelectorAll('#tree tr.op').length") != 0:
        raise Failure("%s: op rows are shown before any module was expanded" % trace)
    b.click(button)
    rows = b.eval("Array.from(%s.querySelectorAll(':scope > .ops tr.op'))"
                  ".map(function(tr){ return [tr.dataset.dir, tr.querySelector('td.op').textContent]; })" % li)
    expect, left = [], []
    for d in ("forward", "backward", "checkpointing"):
        mine = [x for x in ops_of[target["fqn"]] if x[0] == d]
        expect += mine[:cap]
        if len(mine) > cap:
            left.append(len(mine) - cap)
    if [tuple(r) for r in rows] != expect:
        raise Failure("%s: after clicking %s the page lists %s, analyze -n 3 lists %s" % (
            trace, target["fqn"], rows[:8], expect[:8]))
    # what --max-ops left out is said, per list
    notes = b.eval("Array.from(%s.querySelectorAll(':scope > .ops .omitted'))"
                   ".map(function(p){ return Number(p.dataset.omitted); })" % li)
    if notes != left:
        raise Failure("%s: %s: the page says %s ops were left out, analyze -n 3 has %s more than %d" % (
            trace, target["fqn"], notes, left, cap))
    if b.eval(button + ".getAttribute('aria-expanded')") != "true":
        raise Failure("%s: the op button does not say it is expanded" % trace)
    return target["fqn"], len(rows)


def check_postmortem(b, cd, traces):
    rep = json.loads(run(cd, "ranks", "--json", *traces, ok=(0, 3, 4)))
    if not rep["findings"]:
        raise Failure("the failing job's traces have no finding: not a failing job")
    order = b.eval("Array.from(document.querySelectorAll('#app > section')).map(function(s){ return s.id; })")
    if not order or order[0] != "postmortem" or order.index("tree") < order.index("postmortem"):
        raise Failure("the post-mortem is not the first section: %s" % order)
    got = b.eval("Array.from(document.querySelectorAll('#findings > li')).map(function(li){"
                 " return [li.dataset.kind, li.querySelector('.text').textContent]; })")
    want = [[f["kind"], f["text"]] for f in rep["findings"]]
    if got != want:
        raise Failure("findings in the page %s, ranks --json: %s" % (got, want))
    ranks = b.eval("Array.from(document.querySelectorAll('#ranks tbody tr')).map(function(tr){"
                   " return Number(tr.dataset.rank); })")
    if ranks != [t["rank"] for t in rep["traces"]]:
        raise Failure("rank rows %s, ranks --json: %s" % (ranks, [t["rank"] for t in rep["traces"]]))
    return want[0][1]


def check_nccl(b, cd, trace, nccl):
    docs = json_docs(run(cd, "analyze", "--json", "--nccl", nccl, trace))
    n = next(d for d in docs if "nccl" in d)["nccl"]
    got = b.eval("Array.from(document.querySelectorAll('#nccl-bytes .track')).map(function(t){"
                 " return Number(t.dataset.value); })")
    if got != [c["bytes"] for c in n["collectives"]]:
        raise Failure("NCCL bytes in the chart %s, analyze --json: %s" % (got, [c["bytes"] for c in n["collectives"]]))
    widths = b.eval("Array.from(document.querySelectorAll('#nccl-bytes .fill')).map(function(f){"
                    " return f.getBoundingClientRect().width; })")
    big = max(range(len(got)), key=lambda i: got[i])
    small = min(range(len(got)), key=lambda i: got[i])
    if not widths[big] > widths[small] > 0:
        raise Failure("the NCCL bars are not drawn to scale: %s for %s" % (widths, got))
    if not b.eval("document.querySelectorAll('#nccl-mod-bytes .track').length"):
        raise Failure("no per-module NCCL chart")


def expect_failure(what, fn):
    """fn must raise Failure: the checks catch a broken page."""
    try:
        fn()
    except Failure as e:
        print("ok   caught %s: %s" % (what, str(e)[:120]))
        return
    raise Failure("a broken page (%s) passed the checks" % what)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cd, data, artifacts = (os.path.abspath(a) for a in sys.argv[1:])
    exe = find_chromium()
    if not exe:
        if os.environ.get("COMMDEBUG_REQUIRE_BROWSER") == "1":
            print("FAIL: no chromium, and COMMDEBUG_REQUIRE_BROWSER=1")
            return 1
        print("skipped: no chromium (Debian package chromium)")
        return SKIP
    os.makedirs(artifacts, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cd-browser-")
    profile = os.path.join(work, "profile")
    os.makedirs(profile)
    b = Browser(exe, profile)
    try:
        b.attach()

        def report(name, *args, ok=(0,)):
            out = os.path.join(work, name + ".html")
            run(cd, "report", "-o", out, *args, ok=ok)
            return out

        def load(page):
            b.events = []
            b.open("file://" + page)
            errs = b.errors()
            if errs:
                raise Failure("%s: %s" % (os.path.basename(page), "; ".join(errs)))

        # a real two-rank run: the tree of rank 0, the last complete region
        s0, s1 = os.path.join(data, "sample.zst"), os.path.join(data, "sample-rank1.zst")
        page = report("sample", s0, s1)
        load(page)
        fqn, nops = check_tree(b, cd, s0, last_complete_region(s0))
        print("ok   sample: modules and counts as analyze --json; clicking %s shows its %d ops" % (fqn, nops))
        if b.eval("document.querySelector('#verdict').textContent").find("agrees") < 0:
            raise Failure("sample: the two agreeing ranks are not said to agree")
        regs = b.eval("document.querySelector('p.regions').textContent")
        if not regs.startswith("The trace has 2 regions: 1 \u201cstep 1\u201d, 2 \u201cstep 2\u201d (shown)") \
                or "--region N" not in regs:
            raise Failure("sample: the list of regions reads %r" % regs)
        print("ok   sample: the page lists the regions and how to show another")
        print("shot", b.screenshot(os.path.join(artifacts, "report-sample.png")))
        # the other rank, another region
        load(report("sample-r1", "--rank", "1", "--region", "1", "--max-ops", "5", s0, s1))
        fqn, nops = check_tree(b, cd, s1, 1, cap=5)
        print("ok   sample --rank 1 --region 1 --max-ops 5: rank 1's tree of region 1; %s shows %d ops "
              "and how many were left out" % (fqn, nops))

        # names that would end a <script> block or a JavaScript line if not escaped
        hostile = os.path.join(work, "hostile.jsonl")
        name = "Model.</script><!--<script>\u2028\u2029&amp;"
        with open(os.path.join(data, "two-regions.jsonl"), encoding="utf-8") as f, \
                open(hostile, "w", encoding="utf-8") as g:
            g.write(f.read().replace('"Model.lin"', json.dumps(name, ensure_ascii=False)))
        load(report("hostile", hostile))
        check_tree(b, cd, hostile, 2)
        if not b.eval("Array.from(document.querySelectorAll('#tree li.mod')).some(function(li){"
                      " return li.dataset.fqn === %s; })" % json.dumps(name)):
            raise Failure("hostile: the module %r is not in the page as it is named" % name)
        print("ok   a module named %r is shown as named, nothing escaped the data block" % name)

        # NCCL side
        tp, tpn = os.path.join(data, "tp-nccl.jsonl"), os.path.join(data, "tp-nccl.nccl.jsonl")
        load(report("nccl", "--nccl", tpn, tp))
        check_tree(b, cd, tp, last_complete_region(tp), extra=("--no-nccl",))
        check_nccl(b, cd, tp, tpn)
        print("ok   tp-nccl: NCCL bytes per collective and per module charted as analyze --json says")
        print("shot", b.screenshot(os.path.join(artifacts, "report-nccl.png")))

        # a real failing 4-rank job (rank 2 killed): findings first
        job = os.path.join(data, "postmortem-kill")
        ranks = sorted(os.path.join(job, f) for f in os.listdir(job) if f.endswith(".zst"))
        page = report("kill", job, ok=(4,))
        load(page)
        first = check_postmortem(b, cd, ranks)
        check_tree(b, cd, ranks[0], last_complete_region(ranks[0]))
        print("ok   postmortem-kill: the findings come first: %s" % first[:70])
        print("shot", b.screenshot(os.path.join(artifacts, "report-postmortem.png")))

        # the checks bite: a page that throws, and a page with other counts
        html = open(page, encoding="utf-8").read()
        broken = os.path.join(work, "broken-throw.html")
        with open(broken, "w") as f:
            f.write(html.replace("<script>\n", "<script>\nnull.boom;\n", 1))
        expect_failure("an exception in the page", lambda: load(broken))
        altered = os.path.join(work, "broken-counts.html")
        with open(altered, "w") as f:
            f.write(html.replace('"collectives_forward":[["c10d.allreduce_",', '"collectives_forward":[["c10d.allreduce_",1', 1))
        def altered_check():
            load(altered)
            check_tree(b, cd, ranks[0], last_complete_region(ranks[0]))
        expect_failure("altered counts", altered_check)
    except Failure as e:
        print("FAIL:", e)
        return 1
    finally:
        b.close()
        shutil.rmtree(work, ignore_errors=True)
    print("all browser checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
