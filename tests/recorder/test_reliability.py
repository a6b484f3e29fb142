"""The recorder never breaks or stalls the job it watches (issue 16):
a full disk, a FIFO nobody reads, two writers on one path, a fork; every
frame carries a checksum."""

import ctypes
import json
import os
import subprocess
import time

from _util import PYTHON, check, env, eq, events, zstd_cli_text

TRAIN = r"""
import os, sys, time, torch
from commdebug import Recorder
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
path = os.environ.get("TRACE")
rec = Recorder(path) if path else None
def step():
    opt.zero_grad(); m(torch.randn(8, 16)).sum().backward(); opt.step()
for i in range(int(os.environ.get("STEPS", "20"))):
    if rec is not None:
        with rec(label="step %d" % i):
            step()
    else:
        step()
print("RESULT", repr(sum(float(p.sum()) for p in m.parameters())))
if rec is not None:
    rec.close()  # the writer thread may not have tried to write yet
    print("DROPPED", rec.dropped)
"""


def run(script, timeout=120, **extra):
    t0 = time.monotonic()
    r = subprocess.run([PYTHON, "-c", script], env=env(**extra), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(), r.stderr.decode(), time.monotonic() - t0


def field(out, name):
    for line in out.splitlines():
        if line.startswith(name + " "):
            return line.split(" ", 1)[1]
    raise AssertionError("no %s line in %r" % (name, out))


def test_dev_full(ctx):
    """Recorder("/dev/full"): one warning, the run goes on, its result is the
    one it has without the recorder, the lost events are counted."""
    rc, out, err, _ = run(TRAIN)
    eq(rc, 0, "plain run (stderr %s)" % err)
    want = field(out, "RESULT")
    rc, out, err, _ = run(TRAIN, TRACE="/dev/full")
    eq(rc, 0, "recorded run exit (stderr %s)" % err)
    eq(field(out, "RESULT"), want, "training result with the recorder on /dev/full")
    eq(err.count("writing /dev/full failed"), 1, "warnings (stderr %r)" % err)
    check("No space left on device" in err, "warning does not say why: %r", err)
    check(int(field(out, "DROPPED")) > 100, "dropped events not counted: %s", out)


FIFO_JOB = r"""
import os, sys, time, torch, resource
from commdebug import Recorder
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
rec = Recorder(os.environ["TRACE"])
y = torch.zeros(4)
with rec:
    for _ in range(2000):
        y.add_(1)
    base = rss()
    n = 0
    while n < int(os.environ["OPS"]):
        for _ in range(1000):
            y.add_(1)
        n += 1000
    grown = rss() - base
print("OPS", n)
print("GROWN", grown)
print("DROPPED", rec.dropped)
sys.stdout.flush()
print("EXIT_START", time.monotonic())
sys.stdout.flush()
"""


def test_fifo_without_reader(ctx):
    """A FIFO nobody opens for reading: the training thread never blocks,
    memory stays bounded (what does not fit is dropped and counted), and
    the process exits within the stated bound (COMMDEBUG_EXIT_TIMEOUT,
    2 s) plus interpreter teardown."""
    fifo = os.path.join(ctx.tmp, "fifo")
    os.mkfifo(fifo)
    rc, out, err, wall = run(FIFO_JOB, timeout=300, TRACE=fifo, OPS=300000)
    eq(rc, 0, "exit status (stderr %s)" % err)
    ops, grown, dropped = (int(field(out, k)) for k in ("OPS", "GROWN", "DROPPED"))
    ctx.note("%d ops, RSS grew %.1f MiB, %d events dropped" % (ops, grown / 2**20, dropped))
    check(dropped > 0, "nothing was dropped: %s", out)
    # The buffer holds at most 65536 lines of about 60 bytes (plus list and
    # string overhead): far less than the ops recorded.
    check(grown < 40 * 2**20, "memory grew %d bytes for %d ops", grown, ops)
    check("did not finish within 2 s" in err, "no exit message: %r", err)
    check(wall < 280, "took %.0f s", wall)


def test_two_recorders_one_path(ctx):
    """Two Recorders on one path in one process, and two processes on one
    path: the second writer gets a name of its own and a warning; both
    traces are whole, neither file holds the other's frames."""
    import torch
    from commdebug import Recorder
    path = os.path.join(ctx.tmp, "t.zst")
    a = Recorder(path)
    b = Recorder(path)
    with a:
        torch.ones(2).cos()
    with b:
        torch.ones(2).sin()
    with a:
        torch.ones(2).cos()
    a.close()
    b.close()
    eq(a.path, path, "first recorder's path")
    check(b.path != path and os.path.exists(b.path), "second path %r", b.path)
    for rec, op, other in ((a, "aten.cos.default", "aten.sin.default"),
                           (b, "aten.sin.default", "aten.cos.default")):
        evs = events(rec.path)
        names = [e["name"] for e in evs if e["ev"] == "op"]
        check(op in names and other not in names, "%s holds %r", rec.path, names)
        eq(sum(1 for e in evs if e["ev"] == "meta"), 1, "meta events in %s" % rec.path)
        zstd_cli_text(rec.path)

    # Two processes: the first keeps writing while the second opens the path.
    path2 = os.path.join(ctx.tmp, "p.zst")
    job = ("import os, sys, time, torch\nfrom commdebug import Recorder\n"
           "rec = Recorder(%r)\n"
           "with rec:\n"
           "    t_end = time.time() + 60\n"
           "    while True:\n"
           "        torch.ones(2).%s()\n"
           "        if time.time() > t_end or os.path.exists(sys.argv[1]): break\n"
           "print(rec.path)\n")
    stop1 = os.path.join(ctx.tmp, "stop1")
    p1 = subprocess.Popen([PYTHON, "-c", job % (path2, "cos"), stop1], env=env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not (os.path.exists(path2) and os.path.getsize(path2) > 0):
        check(time.time() < deadline, "first process did not start writing")
        time.sleep(0.05)
    p2 = subprocess.run([PYTHON, "-c", job % (path2, "sin"), ctx.tmp], env=env(),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    with open(stop1, "w"):
        pass
    out1, _ = p1.communicate(timeout=120)
    eq((p1.returncode, p2.returncode), (0, 0), "exit statuses")
    eq(out1.decode().strip(), path2, "first process's path")
    other = p2.stdout.decode().strip()
    check(other != path2, "second process wrote %s", other)
    check("being written by another live recorder" in p2.stderr.decode(), "no warning: %r",
          p2.stderr.decode())
    for p, op, bad in ((path2, "aten.cos.default", "aten.sin.default"),
                       (other, "aten.sin.default", "aten.cos.default")):
        names = {e.get("name") for e in events(p)}
        check(op in names and bad not in names, "%s: %r", p, names)


def test_fork_does_not_write_parent_trace(ctx):
    """A child forked while recording runs ops under the inherited mode; the
    parent's trace holds none of them, decodes whole, and the parent's
    later events are all there."""
    import torch
    from commdebug import Recorder
    path = os.path.join(ctx.tmp, "f.zst")
    rec = Recorder(path)
    with rec:
        torch.ones(2).cos()
        pid = os.fork()
        if pid == 0:
            try:
                for _ in range(50000):
                    torch.ones(2).cosh()
                rec.flush()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        eq(status, 0, "child exit")
        torch.ones(2).sin()
    rec.close()
    names = [e["name"] for e in events(path) if e["ev"] == "op"]
    check("aten.cosh.default" not in names, "the child's ops are in the parent's trace")
    check("aten.sin.default" in names and "aten.cos.default" in names, "parent ops %r", names)
    zstd_cli_text(path)


def test_frames_have_checksums(ctx):
    """Every frame of a recorder trace (skippable frames aside: what is left
    of raw frames replaced by a compressed one) has the content-checksum
    flag, and a flipped byte in a frame's data is an error, not different
    text."""
    import torch
    from commdebug import Recorder, _zstd
    z = _zstd.load()
    if z is None:
        from _util import Skip
        raise Skip("no libzstd")
    path = os.path.join(ctx.tmp, "c.zst")
    rec = Recorder(path)
    for _ in range(3):
        with rec:
            torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum().backward()
    rec.close()
    with open(path, "rb") as f:
        data = f.read()
    lib = z._lib
    lib.ZSTD_findFrameCompressedSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_findFrameCompressedSize.restype = ctypes.c_size_t
    pos, frames = 0, []
    while pos < len(data):
        n = lib.ZSTD_findFrameCompressedSize(data[pos:], len(data) - pos)
        check(not lib.ZSTD_isError(n), "bad frame at %d", pos)
        frames.append((pos, n))
        pos += n
    check(len(frames) >= 2, "frames: %r", frames)
    frames = [(off, n) for off, n in frames
              if not (data[off + 1:off + 4] == b"\x2a\x4d\x18" and data[off] & 0xF0 == 0x50)]
    for off, n in frames:
        eq(data[off:off + 4], b"\x28\xb5\x2f\xfd", "magic at %d" % off)
        check(data[off + 4] & 0x04, "frame at %d has no checksum flag", off)
    # Flip one byte inside the last frame's checksum: libzstd rejects it.
    off, n = frames[-1]
    bad = bytearray(data)
    bad[off + n - 1] ^= 0x55
    bpath = os.path.join(ctx.tmp, "bad.zst")
    with open(bpath, "wb") as f:
        f.write(bytes(bad))
    try:
        events(bpath)
    except _zstd.ZstdError as e:
        check("checksum" in str(e).lower(), "error %r", str(e))
    else:
        raise AssertionError("a trace with a wrong checksum decoded")


def test_move_keeps_lines_after_raw_tail(ctx):
    """A trace moved (its rank learned) while raw frames wait at its end for
    the writer thread: the lines the move writes, and those after it, are
    all still there once the raw frames are compacted, and in order."""
    from commdebug import _zstd
    from commdebug._writer import TraceWriter
    if _zstd.load() is None:
        from _util import Skip
        raise Skip("no libzstd")
    meta = ('{"ev":"meta","format":"commdebug-trace","version":1,"rank":%s,'
            '"world_size":1,"t0":1}\n')
    lines = ['{"ev":"pg","name":"%d","ranks":[0],"t":%d}\n' % (i, i) for i in range(300)]
    # the new meta line as long as the old one, and longer
    for n, rank in enumerate(("0", "12345")):
        path = os.path.join(ctx.tmp, ".pending%d.zst" % n)
        w = TraceWriter(path, meta % "0")
        w._compact = lambda: None       # the writer thread leaves the raw frames
        w.buf.extend(lines[:100])
        w.sync()                        # a raw frame at the end
        w.buf.extend(lines[100:200])    # lines the move must write
        new = os.path.join(ctx.tmp, "rank%d.zst" % n)
        eq(w.relocate(new, meta % rank), new, "relocate")
        w.buf.extend(lines[200:])
        w.sync()
        del w._compact
        w._compact()
        w.close()
        text = zstd_cli_text(new).splitlines(True)
        eq(text[0], meta % rank, "moved trace's meta line")
        eq([json.loads(t)["name"] for t in text[1:]], [str(i) for i in range(300)],
           "moved trace (meta rank %s) by zstd -dc" % rank)
        eq([e["name"] for e in events(new) if e["ev"] == "pg"], [str(i) for i in range(300)],
           "moved trace (meta rank %s) by read_events" % rank)


def _one_writer(ctx, name):
    """(path, meta line, a TraceWriter of a one-rank trace at ctx.tmp/name);
    skipped without libzstd."""
    from commdebug import _zstd
    from commdebug._writer import TraceWriter
    if _zstd.load() is None:
        from _util import Skip
        raise Skip("no libzstd")
    path = os.path.join(ctx.tmp, name)
    meta = ('{"ev":"meta","format":"commdebug-trace","version":1,"rank":0,'
            '"world_size":1,"t0":1}\n')
    return path, meta, TraceWriter(path, meta)


def test_raw_frames_then_compacted(ctx):
    """Frames the training thread writes before a collective hold raw
    blocks (with their checksum where libxxhash is there); the writer thread
    replaces them with one compressed frame, leaving at most a skippable
    frame behind.  Both states decode to the same lines, with libzstd, the
    zstd command-line tool and the analyzer."""
    path, meta, w = _one_writer(ctx, "raw.zst")
    w._compact = lambda: None           # the writer thread leaves the raw frames
    lines = ['{"ev":"pg","name":"%d","ranks":[0],"t":%d}\n' % (i, i) for i in range(300)]
    for i in range(0, 300, 100):
        w.buf.extend(lines[i:i + 100])
        w.sync()
    with open(path, "rb") as f:
        data = f.read()
    raw_at = data.index(b"\x28\xb5\x2f\xfd", 1)
    check(data[raw_at + 4] in (0xA0, 0xA4), "descriptor %x", data[raw_at + 4])
    eq(data[raw_at + 9] >> 1 & 3, 0, "block type of the raw frame")
    want = meta + "".join(lines)
    eq(zstd_cli_text(path), want, "raw frames by zstd -dc")
    eq([e["name"] for e in events(path) if e["ev"] == "pg"], [str(i) for i in range(300)],
       "raw frames by read_events")
    del w._compact
    w._compact()
    with open(path, "rb") as f:
        after = f.read()
    check(len(after) < len(data) / 2, "compacted %d -> %d bytes", len(data), len(after))
    eq(zstd_cli_text(path), want, "compacted trace by zstd -dc")
    w.close()
    eq(zstd_cli_text(path), want, "closed trace by zstd -dc")
    if ctx.analyzer is not None:
        rc, out, err = ctx.analyzer.run("ranks", path, check_rc=(0, 4))
        check("cut" not in err and "unreadable" not in out, "ranks: %s %s", out, err)


def test_padded_end(ctx):
    """Light mode's padded, mapped file end (_padtail): the frame before a
    collective is copied into the mapping, in an order after any prefix of
    which the file is a valid trace holding the lines before it or all of
    them; a frame too large for the mapping is written with pwrite, padded
    the same; compaction leaves the padding; close() cuts it off."""
    from commdebug import _padtail, _zstd
    from commdebug._writer import TraceWriter
    path, meta, w = _one_writer(ctx, "pad.zst")
    w.tick = 3600                       # (the writer thread stays out of the way,
    time.sleep(0.1)                     # after its first round)
    w.pad_tail()
    with w._io:
        w._pad_grow()
    check(w._map is not None, "no mapping")
    eq(os.path.getsize(path), _padtail.PAD_MAP, "the padded file's size")
    eq(zstd_cli_text(path), meta, "the padded file by zstd -dc")
    pad_write = w._pad_write
    def spy(out, at, mapped=True):
        r = pad_write(out, at, mapped)
        if mapped:
            got.append(r)
        return r
    got = []
    w._pad_write = spy
    lines = ['{"ev":"pg","name":"%d","ranks":[0],"t":%d}\n' % (i, i) for i in range(400)]
    w.buf.extend(lines[:100])
    w.sync()
    eq(got, [True], "the frame before a collective went through the mapping")
    want = meta + "".join(lines[:100])
    eq(zstd_cli_text(path), want, "after a mapped frame, by zstd -dc")
    eq([e["name"] for e in events(path)[1:]], [str(i) for i in range(100)],
       "after a mapped frame, by read_events")
    # every prefix of the next frame's stores, applied to the file as it is
    with open(path, "rb") as f:
        before = bytearray(f.read())
    frame = _zstd.raw_frame("".join(lines[100:200]).encode())
    steps = _padtail.stores(w._end - w._map_at, frame, w._fsize - w._end - len(frame) - 8)
    cut = os.path.join(ctx.tmp, "cut.zst")
    for k in range(len(steps) + 1):
        data = bytearray(before)
        for o, b in steps[:k]:
            data[w._map_at + o:w._map_at + o + len(b)] = bytes(b)
        with open(cut, "wb") as f:
            f.write(data)
        eq(zstd_cli_text(cut), want + ("".join(lines[100:200]) if k == len(steps) else ""),
           "the file after %d of the %d stores" % (k, len(steps)))
    # larger than the mapping: pwrite, the padding after it
    big = ['{"ev":"pg","name":"big%d","ranks":[0],"pad":"%s"}\n' % (i, os.urandom(500).hex())
           for i in range(1200)]
    w.buf.extend(lines[100:200] + big)
    w.sync()
    eq(got[1:], [False], "a frame larger than the mapping")
    want += "".join(lines[100:200] + big)
    eq(zstd_cli_text(path), want, "after the large frame, by zstd -dc")
    with w._io:
        w._pad_grow()
    check(w._map is not None and w._map_at <= w._end, "mapped again after the large frame")
    w.buf.extend(lines[200:300])
    w.sync()
    eq(got[2:], [True], "the next frame, mapped again")
    want += "".join(lines[200:300])
    size = os.path.getsize(path)
    w._compact()
    eq(os.path.getsize(path), size, "compaction keeps the padded size")
    check(w._end < size, "compaction: end %d, size %d", w._end, size)
    eq(zstd_cli_text(path), want, "compacted, by zstd -dc")
    w.buf.extend(lines[300:])
    w.close()
    want += "".join(lines[300:])
    eq(os.path.getsize(path), w._end, "the closed file's size")
    eq(zstd_cli_text(path), want, "closed, by zstd -dc")
    if ctx.analyzer is not None:
        rc, out, err = ctx.analyzer.run("ranks", path, check_rc=(0, 4))
        check("cut" not in err and "unreadable" not in out, "ranks: %s %s", out, err)
    # a disk too full for the padding: it stays as it was, frames go by pwrite
    path = os.path.join(ctx.tmp, "full.zst")
    w = TraceWriter(path, meta)
    w.tick = 3600
    time.sleep(0.1)
    w.pad_tail()
    w.buf.extend(lines[:100])
    w.sync()
    fallocate = os.posix_fallocate

    def full(*_):
        raise OSError(28, "No space left on device")
    os.posix_fallocate = full
    try:
        with w._io:
            w._pad_grow()
    finally:
        os.posix_fallocate = fallocate
    check(w._map is None and w._map_failed, "a mapping after the padding failed")
    eq(os.path.getsize(path), w._end, "the file's size after the padding failed")
    eq(zstd_cli_text(path), meta + "".join(lines[:100]), "after the padding failed")
    w.buf.extend(lines[100:])
    w.sync()
    eq(zstd_cli_text(path), meta + "".join(lines), "a frame after the padding failed")
    w.close()
    eq(zstd_cli_text(path), meta + "".join(lines), "closed after the padding failed")


WRITER_SEEDS = range(24)


def test_writer_random_interleavings(ctx):
    """Lines appended between random writer steps, from the recording thread
    (sync, sync(later) handing a frame to the C module's thread), another
    thread's flush, compaction of the raw tail on the recording thread while
    the writer thread also compacts, and moves of the file with meta lines of
    other lengths: once closed, the trace holds every line once, in order
    (zstd -dc and read_events), and the frame index of a bounded trace names
    frames that hold the lines it says.  Half the seeds with light mode's
    padded, mapped end (_padtail), mapped again at random, cut off at close."""
    import io
    import random
    import threading
    from commdebug import _zstd
    from commdebug._writer import TraceWriter
    z = _zstd.load()
    if z is None:
        from _util import Skip
        raise Skip("no libzstd")
    meta = ('{"ev":"meta","format":"commdebug-trace","version":1,"rank":%d,'
            '"world_size":1,"t0":1}\n')
    for seed in WRITER_SEEDS:
        rnd = random.Random(seed)
        path = os.path.join(ctx.tmp, ".pending%d.zst" % seed)
        w = TraceWriter(path, meta % 0)
        if seed % 2:
            w.index = []
        padded = seed % 4 >= 2
        if padded:
            w.pad_tail()
        rank, n = 0, 0
        for _ in range(60):
            k = rnd.randrange(0, 40)
            w.buf.extend('{"ev":"pg","name":"%d","ranks":[0],"t":%d}\n' % (n + i, n + i)
                         for i in range(k))
            n += k
            step = rnd.randrange(6)
            if step == 0:
                w.sync()
            elif step == 1:
                w.sync(later=True)
            elif step == 2:
                t = threading.Thread(target=w.flush)
                t.start()
                if rnd.random() < 0.5:
                    t.join()
            elif step == 3:
                w._compact()
            elif step == 4 and rnd.random() < 0.3:
                rank = rnd.choice((0, 7, 123456))
                new = os.path.join(ctx.tmp, "s%d-%d.zst" % (seed, rank))
                if w.relocate(new, meta % rank) is not None:
                    path = new
            elif padded and rnd.random() < 0.3:
                with w._io:
                    w._pad_grow()
            else:
                time.sleep(rnd.random() * 0.03)
        w.close()
        index = w.index
        what = "seed %d" % seed
        eq(os.path.getsize(path), w._end, what + ": the closed file's size")
        text = zstd_cli_text(path).splitlines(True)
        eq(text[0], meta % rank, what + ": meta line")
        eq([json.loads(t)["name"] for t in text[1:]], [str(i) for i in range(n)],
           what + ": lines by zstd -dc")
        eq([e["name"] for e in events(path)[1:]], [str(i) for i in range(n)],
           what + ": lines by read_events")
        if index is None:
            continue
        with open(path, "rb") as f:
            data = f.read()
        last = 0
        for off, length, nlines, _ in index:
            check(off >= last, "%s: index frames overlap at %d", what, off)
            last = off + length
            got = b"".join(z.decompress_iter(io.BytesIO(data[off:off + length])))
            eq(got.count(b"\n"), nlines, "%s: lines of the indexed frame at %d" % (what, off))
