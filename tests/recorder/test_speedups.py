"""The recorder's C module (commdebug._speedups) says exactly what the Python
it stands for says, and light mode's nn.Module call (_modcall) records
what its global hooks recorded: the same light trace, event for event,
from the C module or the Python, from the call or the global hooks; the
writer's text and raw frames equal the Python's.

Skipped where the C module is not built for this Python (the system's
Python 3.11 with torch 1.13: tests/torch2/env.sh ext builds it for the torch
2.x root's)."""

import json
import os
import subprocess
import textwrap
import time

from _util import PYTHON, Skip, check, env, eq, events, need_light, zstd_cli_text


def _native():
    from commdebug._native import speedups
    m = speedups()
    if m is None:
        raise Skip("commdebug._speedups is not built for this Python")
    return m


def _gradhook_built():
    """Whether commdebug._gradhook loads here (an error where it is built
    beside the package but not for this torch: then the tests would not
    test it)."""
    import importlib.machinery
    import torch
    from commdebug import _native
    if _native.gradhook() is not None:
        return True
    here = os.path.dirname(_native.__file__)
    built = [p for p in (os.path.join(here, "_gradhook" + x)
                         for x in importlib.machinery.EXTENSION_SUFFIXES) if os.path.exists(p)]
    if built and os.environ.get("COMMDEBUG_GRADHOOK", "1") != "0":
        import importlib
        m = importlib.import_module("commdebug._gradhook")
        raise AssertionError("%s is built for torch %s, this is %s"
                             % (built[0], m.TORCH_VERSION, torch.__version__))
    return False


def test_gradhook(ctx):
    """commdebug._gradhook's hook, where it is built: put on a tensor's
    grad_fn it fires once when the gradient gets there (before the hooks of
    a dict made after it; after them once moved); attach gives the hook
    there already and replace changes it; attach_shared puts a hook before
    the ones there (attach and replace then see the first, demote moves them
    all, in their order); a tensor without a grad_fn has
    none to move; a hook that raises makes backward() raise that error.
    The recorder does not use it for another torch version than it was
    built for, under compiled autograd, or with COMMDEBUG_GRADHOOK=0."""
    if not _gradhook_built():
        raise Skip("commdebug._gradhook is not built for this torch")
    import torch
    import torch._dynamo.config as dynamo_config
    from commdebug import _gradhook as gh
    from commdebug._native import gradhook
    version = torch.__version__
    try:
        torch.__version__ = version + ".other"
        eq(gradhook(), None, "gradhook() for another torch version")
    finally:
        torch.__version__ = version
    with dynamo_config.patch(compiled_autograd=True):
        eq(gradhook(), None, "gradhook() under compiled autograd")
    was = os.environ.get("COMMDEBUG_GRADHOOK")
    os.environ["COMMDEBUG_GRADHOOK"] = "0"
    try:
        eq(gradhook(), None, "gradhook() with COMMDEBUG_GRADHOOK=0")
    finally:
        if was is None:
            del os.environ["COMMDEBUG_GRADHOOK"]
        else:
            os.environ["COMMDEBUG_GRADHOOK"] = was
    eq(gradhook(), gh, "gradhook() here")
    calls = []
    w = torch.randn(3, requires_grad=True)

    def fire(name):
        def f(grad):
            eq(grad, None, "the hook's argument")
            calls.append(name)
        return f

    a, b = fire("a"), fire("b")
    t = w * 2
    eq(gh.attach(t, a), None, "attach to a fresh output")
    eq(gh.attach(t, b), a, "attach where a hook is: the one there")
    eq(gh.count(t), 1, "hooks on the node after two attaches")
    t.register_hook(lambda g: calls.append("dict"))
    eq(gh.count(t), 2, "hooks on the node with a hook dict")
    (t * 1).sum().backward(retain_graph=True)
    eq(calls, ["a", "dict"], "order: the C++ hook, then the dict made after it")
    del calls[:]
    eq(gh.replace(t, b), True, "replace")
    eq(gh.demote(t), True, "demote")
    (t * 1).sum().backward()
    eq(calls, ["dict", "b"], "order once moved, with the replaced fire")
    # a hook its tensors share, put before the one a module inside put there
    del calls[:]
    s1, s2 = fire("s1"), fire("s2")
    t = w * 4
    eq(gh.attach(t, a), None, "attach (the inner module's)")
    eq(gh.attach_shared(t, s1), None, "attach_shared")
    eq(gh.attach_shared(t, s2), None, "attach_shared again (a module outside)")
    eq(gh.count(t), 3, "hooks on the node after attach_shared twice")
    eq(gh.attach(t, b), s2, "attach where shared hooks are: the first")
    t.register_hook(lambda g: calls.append("dict"))
    (t * 1).sum().backward(retain_graph=True)
    eq(calls, ["s2", "s1", "a", "dict"], "order: the shared hooks, the inner one, the dict")
    del calls[:]
    eq(gh.replace(t, b), True, "replace (the first)")
    eq(gh.demote(t), True, "demote (all of them)")
    (t * 1).sum().backward()
    eq(calls, ["dict", "b", "s1", "a"], "order once moved, the first replaced")
    eq(gh.demote(w), False, "demote on a leaf")
    eq(gh.replace(w * 1, a), False, "replace where there is no hook")
    try:
        gh.attach(w, a)
    except ValueError:
        pass
    else:
        raise AssertionError("attach to a leaf did not raise")

    def boom(grad):
        raise KeyError("from the hook")

    u = w * 3
    gh.attach(u, boom)
    try:
        u.sum().backward()
    except KeyError as e:
        eq(str(e), "'from the hook'", "the error backward() raised")
    else:
        raise AssertionError("backward() did not raise the hook's error")


def test_text_equals_python(ctx):
    """text() gives the bytes and the marks of the Python formatter for
    lines, pairs of lines, marks between them, non-ASCII (and lone
    surrogate) text, times of zero, below zero and of 19 digits; an item it
    does not know (a float time) leaves the chunk to the Python."""
    native = _native()
    from commdebug import _writer
    w = _writer.TraceWriter.__new__(_writer.TraceWriter)
    w.mono0 = 1000
    chunk = [3, '{"ev":"region_enter","region":3}\n', ('{"ev":"fw_pre","mod":"a","t":', 1500),
             ('{"ev":"fw_post","t":', '{"ev":"fw_done","t":', 2000), 4,
             ('{"ev":"x","mod":"\u00e9\u4e2d\ud800","t":', 10 ** 15), '{"ev":"y"}\n', 5,
             ('{"ev":"z","t":', 1000), ('{"ev":"z","t":', 999), ('{"ev":"z","t":', 10),
             ('{"ev":"z","t":', 9 * 10 ** 18 + 12345)]
    w._ctext = None
    want = w._text(chunk), w._marks
    got = native.text(chunk, 1000)
    eq(got[0], want[0], "text's bytes")
    eq([tuple(m) for m in got[1]], [tuple(m) for m in want[1]], "text's marks")
    odd = [('{"t":', 1500.5)]
    want = w._text(odd)                 # (the Python's: _ctext is None)
    w._ctext = native.text
    eq(w._text(odd), want, "a float time, through the Python")
    eq(w._text(chunk), got[0], "the writer's text with the C module")


def test_linebuf_equals_python(ctx):
    """LineBuf, the writer's buffer that formats each item as it is
    appended, gives the bytes and marks of the Python formatter for the same
    items (those of test_text_equals_python, a float time and an int past 64
    bits among them, formatted as the Python does), in any number of takes;
    an item of another type is refused and leaves what it holds as it was."""
    native = _native()
    from commdebug import _writer
    w = _writer.TraceWriter.__new__(_writer.TraceWriter)
    w._ctext = None
    w.mono0 = 1000
    chunk = [3, '{"ev":"region_enter","region":3}\n', ('{"ev":"fw_pre","mod":"a","t":', 1500),
             ('{"ev":"fw_post","t":', '{"ev":"fw_done","t":', 2000), 4,
             ('{"ev":"x","mod":"\u00e9\u4e2d\ud800","t":', 10 ** 15), '{"ev":"y"}\n', 5,
             ('{"ev":"z","t":', 999), ('{"ev":"z","t":', 1500.5), ('{"ev":"z","t":', 2 ** 70),
             ('{"ev":"p","t":', '{"ev":"q","t":', 2 ** 64 + 1)]
    want = w._text(chunk), list(w._marks)
    lb = native.LineBuf()
    lb.mono0 = 1000
    for x in chunk[:6]:
        lb.append(x)
    eq(len(lb), 6, "len() counts items")
    data, marks, n = lb.take()
    eq(n, 6, "items taken")
    eq(len(lb), 0, "empty after take")
    want6 = w._text(chunk[:6]), list(w._marks)
    eq((data, [tuple(m) for m in marks]), (want6[0], [tuple(m) for m in want6[1]]),
       "the first take")
    lb.extend(chunk)
    for bad in (("{", "x"), b"bytes"):
        try:
            lb.append(bad)
        except TypeError:
            pass
        else:
            raise AssertionError("LineBuf took %r" % (bad,))
    data, marks, n = lb.take()
    eq((data, [tuple(m) for m in marks], n),
       (want[0], [tuple(m) for m in want[1]], len(chunk)), "every item")
    # take_frame(): the same lines and marks, as the raw frame raw_frame()
    # makes of them, their line and byte counts the content's
    from commdebug import _zstd
    for big in (1, 3000):
        lb.extend(chunk * big)
        frame, marks, n, lines, nbytes = lb.take_frame()
        content = want[0] * big
        eq(frame, native.raw_frame(content), "take_frame() is raw_frame() of the lines")
        eq(_zstd.raw_content(frame), content, "raw_content() gives them back")
        eq((n, lines, nbytes), (len(chunk) * big, content.count(b"\n"), len(content)),
           "items, lines and bytes")
        eq([tuple(m) for m in marks][:len(want[1])], [tuple(m) for m in want[1]], "marks")
    eq(len(frame) > 2 * 128 * 1024, True, "a frame of several raw blocks")
    # a time of every length, each side of every power of ten, and negative
    ts = sorted({s * (10 ** k + d) for k in range(19) for d in (-1, 0, 1) for s in (1, -1)}
                | {0, 42, -7, 2 ** 63 - 1 - 1000})
    for t in ts:
        lb.append(('{"t":', 1000 + t))
    eq(lb.take()[0], b"".join(b'{"t":%d}\n' % t for t in ts), "times of every length")
    lb.append("x\n")
    lb.clear()
    eq(lb.take()[0], b"", "cleared")
    eq(_zstd.raw_content(lb.take_frame()[0]), b"", "an empty frame")


def test_writer_frames_lines(ctx):
    """The writer's frames written before a collective (sync), at a
    region's end (sync(later=True): by the C module's thread) and at close
    hold the lines its LineBuf formatted (a float time as the Python
    formats it): every line, in order, the frame written after a region's
    end's after it; the buffer is left empty."""
    _native()
    from commdebug import _writer, tracefile
    path = os.path.join(ctx.tmp, "take.zst")
    w = _writer.TraceWriter(path, '{"ev":"meta"}\n')
    w.mono0 = 100
    w.buf.extend([('{"ev":"a","t":', 150), ('{"ev":"b","t":', '{"ev":"c","t":', 200)])
    w.sync()
    eq(len(w.buf), 0, "the buffer after sync")
    w.buf.extend(['{"ev":"d"}\n', ('{"ev":"e","t":', 250.5), ('{"ev":"f","t":', 300)])
    w.sync()                 # (a float time: formatted as the Python does)
    eq(len(w.buf), 0, "the buffer after the second frame")
    w.buf.append(('{"ev":"g","t":', 400))
    w._compact = lambda: None    # (the raw frames stay: a compressed copy would hide one lost)
    w.sync(later=True)       # (a region's end: the C module's thread writes it)
    w.buf.append(('{"ev":"h","t":', 500))
    w.sync()                 # (a collective's: after it, not over it)
    w.buf.append(('{"ev":"i","t":', 600))
    w.close()
    text, cut = tracefile.read_text(path)
    eq((text, cut), ('{"ev":"meta"}\n{"ev":"a","t":50}\n{"ev":"b","t":100}\n'
                     '{"ev":"c","t":100}\n{"ev":"d"}\n{"ev":"e","t":150.5}\n'
                     '{"ev":"f","t":200}\n{"ev":"g","t":300}\n{"ev":"h","t":400}\n'
                     '{"ev":"i","t":500}\n', False), "the trace's lines")


def test_async_write(ctx):
    """AsyncWrite, the C module's thread that writes a full recorder's
    region-exit frames: frames handed over (submit) land at their offsets,
    in order, before wait() returns; a write that fails is reported by
    wait() once, as (errno, items dropped), with the items of the frames
    after it, and submit refuses from then on; a forked child's wait()
    returns at once, dropping what the parent had queued."""
    native = _native()
    import errno
    path = os.path.join(ctx.tmp, "aw.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    aw = native.AsyncWrite()
    parts = [bytes([65 + i]) * (1000 + 37 * i) for i in range(20)]
    at = 0
    for p in parts:
        eq(aw.submit(fd, p, at, 1), True, "submit")
        at += len(p)
    eq(aw.wait(), (0, 0, 0, 0), "wait after the frames")
    with open(path, "rb") as f:
        eq(f.read(), b"".join(parts), "the file")
    bad = os.open(path, os.O_RDONLY)             # (a write to it fails: EBADF)
    eq(aw.submit(bad, b"x" * 10, 0, 3), True, "submit before the failure is known")
    aw.wait()
    eq(aw.submit(fd, b"y", 0, 2), False, "submit after a failed write")
    aw2 = native.AsyncWrite()
    eq(aw2.submit(bad, b"x" * 10, 0, 3), True, "submit")
    eq(aw2.submit(bad, b"x" * 10, 10, 4), True, "submit")
    got = aw2.wait()
    eq(got[0], errno.EBADF, "the first failure's errno")
    check(got[1] in (7,), "items dropped: %r", got)
    eq(aw2.wait(), (errno.EBADF, 0, 0, 0), "dropped items told once")
    aw3 = native.AsyncWrite()
    eq(aw3.submit(fd, b"z" * 100, 0, 1), True, "submit")
    pid = os.fork()
    if pid == 0:
        try:
            r = aw3.wait()
            os._exit(0 if r == (0, 0, 0, 0) and aw3.submit(fd, b"q", 0, 1) is False else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    eq(os.WEXITSTATUS(status), 0, "the child's wait and submit")
    eq(aw3.close(), (0, 0, 0, 0), "close")
    eq(aw3.submit(fd, b"z", 0, 1), False, "submit after close")
    os.close(bad)
    os.close(fd)


def _aw_and_file(ctx, name):
    """(the C module, libzstd, a new file's path and fd, an AsyncWrite) for
    the tests of compressed jobs (Skip without libzstd)."""
    native = _native()
    from commdebug import _zstd
    z = _zstd.load()
    if z is None:
        raise Skip("no libzstd")
    path = os.path.join(ctx.tmp, name)
    return native, z, path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC), \
        native.AsyncWrite()


def test_async_write_compresses(ctx):
    """AsyncWrite given libzstd (compress_with): lines submitted with
    compress=True are written as one zstd frame each, with its content
    checksum, at the offsets given, after and between plain jobs; wait()
    says the bytes and frames the compressed jobs wrote, once; compress
    without compress_with is refused; and a full recorder's region exits
    reach the file as compressed frames, with no raw frame waiting at its end
    for the writer thread (COMMDEBUG_AW_COMPRESS=0: raw frames as before)."""
    _, z, path, fd, aw = _aw_and_file(ctx, "awz.zst")
    try:
        aw.submit(fd, b"x", 0, 1, True)
        raise AssertionError("compress without compress_with accepted")
    except ValueError:
        pass
    zc = z.compressor(1)
    aw.compress_with(zc, *zc.entry_points())
    head = z.compressor(1).frame(b'{"ev":"meta"}\n')
    eq(aw.submit(fd, head, 0, 1), True, "submit a frame as it is")
    texts = [b"".join(b'{"ev":"op","i":%d,"k":%d}\n' % (i, k) for i in range(300 + 50 * k))
             for k in range(5)]
    at = len(head)
    eq(aw.submit(fd, texts[0], at, 300, True), True, "submit lines to compress")
    r = aw.wait()
    eq((r[0], r[1], r[3]), (0, 0, 1), "wait: no error, one compressed frame")
    check(0 < r[2] < len(texts[0]) // 4, "compressed bytes %r of %d", r, len(texts[0]))
    at += r[2]
    for t in texts[1:]:
        eq(aw.submit(fd, t, at, 1, True), True, "submit")
        r = aw.wait()
        eq((r[0], r[3]), (0, 1), "one frame each")
        at += r[2]
    eq(aw.wait(), (0, 0, 0, 0), "the bytes told once")
    eq(os.fstat(fd).st_size, at, "the file's end where the frames say")
    os.close(fd)
    with open(path, "rb") as f:
        first = f.read()[len(head):len(head) + 5]
    eq(first[:4], b"\x28\xb5\x2f\xfd", "a zstd frame where the first compressed job went")
    check(first[4] & 4, "its header sets the content checksum flag: %r", first)
    out = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=True).stdout
    eq(out, b'{"ev":"meta"}\n' + b"".join(texts), "zstd -dc of the file")
    eq(aw.close()[:2], (0, 0), "close")
    # a full recorder's region exits
    for flag, want_raw in (("1", False), ("0", True)):
        prog = os.path.join(ctx.tmp, "awz_prog%s.py" % flag)
        trace = os.path.join(ctx.tmp, "awz%s.zst" % flag)
        with open(prog, "w") as f:
            f.write(AWZ_PROG)
        r = subprocess.run([PYTHON, prog, trace], env=env(COMMDEBUG_AW_COMPRESS=flag),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        eq(r.returncode, 0, "COMMDEBUG_AW_COMPRESS=%s: %s" % (flag, r.stdout.decode()[-1500:]))
        got = json.loads(r.stdout.decode().strip().splitlines()[-1])
        eq(got["raw_tail"], want_raw, "COMMDEBUG_AW_COMPRESS=%s: raw frames at the end" % flag)
        eq(got["regions"], 6, "COMMDEBUG_AW_COMPRESS=%s: region exits in the file before close"
           % flag)


def _lines_refused_then_compressing(native, z, fd, aw, method):
    """aw.<method>(fd, linebuf, 0) refused before compress_with, with nothing
    taken; then aw given a compressor.  Returns the (empty) LineBuf."""
    lb = native.LineBuf()
    lb.append("x\n")
    try:
        getattr(aw, method)(fd, lb, 0)
        raise AssertionError("%s without compress_with accepted" % method)
    except ValueError:
        pass
    eq(len(lb), 1, "nothing taken when refused")
    lb.clear()
    zc = z.compressor(1)
    aw.compress_with(zc, *zc.entry_points())
    return lb

def test_async_write_submit_lines(ctx):
    """AsyncWrite.submit_lines(fd, linebuf, at): the LineBuf's lines (what
    take() would give: its marks and items, their byte count) written as one
    compressed frame at the offset given, the LineBuf left empty and usable,
    its buffer handed back to it from a written job (round after round, big
    and small); refused without compress_with or with a list for a LineBuf;
    after a failed write, None with nothing taken from the LineBuf."""
    native, z, path, fd, aw = _aw_and_file(ctx, "lines.zst")
    lb = _lines_refused_then_compressing(native, z, fd, aw, "submit_lines")
    lb.mono0 = 10
    try:
        aw.submit_lines(fd, ["x\n"], 0)
        raise AssertionError("submit_lines took a list")
    except TypeError:
        pass
    at, want = 0, b""
    for k, n in enumerate((300, 20000, 5, 20000, 1)):
        lb.append(7 + k)                    # (a mark before the first line)
        for i in range(n):
            lb.append(('{"ev":"op","k":%d,"i":%d,"t":' % (k, i), 10 + i))
        text = b"".join(b'{"ev":"op","k":%d,"i":%d,"t":%d}\n' % (k, i, i) for i in range(n))
        got = aw.submit_lines(fd, lb, at)
        eq((got[1], got[2]), (n + 1, len(text)), "round %d: items and bytes" % k)
        eq([tuple(m) for m in got[0]], [(7 + k, 0)], "round %d: the mark" % k)
        eq(len(lb), 0, "round %d: the LineBuf empty" % k)
        r = aw.wait()
        eq((r[0], r[1], r[3]), (0, 0, 1), "round %d: one frame, no error" % k)
        at += r[2]
        want += text
    eq(os.fstat(fd).st_size, at, "the file's end where the frames say")
    out = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=True).stdout
    eq(out, want, "zstd -dc of the file: every round's lines, in order")
    # a failed write: the next submit_lines says None and takes nothing
    bad = os.open(os.devnull, os.O_RDONLY)
    lb.append("y\n")
    eq(aw.submit_lines(bad, lb, 0)[1], 1, "submit_lines to a read-only fd")
    r = aw.wait()
    check(r[0] != 0 and r[1] == 1, "the failure and its one item: %r", r)
    lb.append("z\n")
    eq(aw.submit_lines(fd, lb, at), None, "submit_lines after a failed write")
    eq(lb.take()[0], b"z\n", "the lines left in the LineBuf")
    aw.close()
    os.close(bad)
    os.close(fd)



def test_async_write_sync_lines(ctx):
    """AsyncWrite.sync_lines(fd, linebuf, end): wait(0)'s answer and, where
    no write failed and lines wait, submit_lines at end plus the compressed
    bytes that answer counts.  While jobs are still being written, the lines
    are queued after them, each frame written where the one before ended
    (a big job first, then small ones at once: the file holds every round's
    lines in order, and the answers count every frame once); None (nothing
    taken) only with MAX_QUEUED (4) jobs not yet counted; (None, 0, 0) for an
    empty LineBuf; after a failed write, the error with (None, 0, 0) and the
    lines left where they are."""
    native, z, path, fd, aw = _aw_and_file(ctx, "sync.zst")
    lb = _lines_refused_then_compressing(native, z, fd, aw, "sync_lines")
    end, want, nones, queued, frames, most = 0, [], 0, 0, 0, 0
    rounds = (600000, 3, 5, 2, 6, 1, 7, 2, 9, 0, 4, 40000, 1, 8)
    for k, n in enumerate(rounds):
        for i in range(n):
            lb.append('{"k":%d,"i":%d}\n' % (k, i))
        text = b"".join(b'{"k":%d,"i":%d}\n' % (k, i) for i in range(n))
        while True:
            r = aw.sync_lines(fd, lb, end)
            if r is not None:
                break
            nones += 1
            check(queued - frames >= 4, "round %d: None with %d jobs not counted", k,
                  queued - frames)
            eq(len(lb), n, "round %d: nothing taken" % k)
            time.sleep(0.001)
        err, dropped, zbytes, zframes, (marks, items, nbytes) = r
        eq((err, dropped), (0, 0), "round %d: no error" % k)
        check((zbytes > 0) == (zframes > 0), "round %d: bytes and frames: %r", k, r)
        end += zbytes
        frames += zframes
        if n:
            eq((items, nbytes, marks), (n, len(text), []), "round %d: what was queued" % k)
            queued += 1
        else:
            eq((marks, items, nbytes), (None, 0, 0), "round %d: an empty LineBuf" % k)
        most = max(most, queued - frames)
        eq(len(lb), 0, "round %d: the LineBuf empty" % k)
        want.append(text)     # (joined at the end: the rounds follow at once)
    r = aw.wait()
    end += r[2]
    eq(frames + r[3], sum(1 for n in rounds if n), "frames counted, once each")
    eq(os.fstat(fd).st_size, end, "the file's end where the answers say")
    out = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=True).stdout
    eq(out, b"".join(want), "zstd -dc of the file: every round's lines, in order")
    ctx.note("at most %d jobs queued and not counted; None %d times" % (most, nones))
    # a failed write: its error, nothing queued, the lines kept
    bad = os.open(os.devnull, os.O_RDONLY)
    lb.append("y\n")
    aw.submit_lines(bad, lb, 0)
    aw.wait()       # (the failure, taken by wait: sync_lines still refuses)
    lb.append("z\n")
    r = aw.sync_lines(fd, lb, end)
    check(r is not None and r[0] != 0 and r[4] == (None, 0, 0), "after a failed write: %r", r)
    eq(lb.take()[0], b"z\n", "the lines left in the LineBuf")
    aw.close()
    os.close(bad)
    os.close(fd)


# Six regions of a small model under a full recorder with the writer thread
# held off (its rounds would write the lines it finds as raw frames, and
# compact them): what the file holds then.
AWZ_PROG = textwrap.dedent(r'''
    import json, os, subprocess, sys, time
    import torch, torch.nn as nn
    from commdebug import Recorder
    rec = Recorder(sys.argv[1])
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.LayerNorm(8))
    with rec:
        m(torch.randn(4, 8, requires_grad=True)).sum().backward()
    w = rec._w
    w.tick = 3600.0
    w._wake.set()
    time.sleep(0.3)
    w.flush()
    w._set_due(time.monotonic_ns() + 3600 * 10**9)   # (no poke() to wake it either)
    for _ in range(6):
        with rec:
            m(torch.randn(4, 8, requires_grad=True)).sum().backward()
        time.sleep(0.01)
    with w._io:
        w._settle()
        raw_tail = w._tail_at is not None
    out = subprocess.run(["zstd", "-dc", sys.argv[1]], stdout=subprocess.PIPE).stdout
    regions = out.count(b'"ev":"region_exit"') - 1
    print(json.dumps({"raw_tail": raw_tail, "regions": regions}))
    rec.close()
''')


DIES_AFTER_REGION = textwrap.dedent(r'''
    import os, sys, time, signal
    import torch, torch.nn as nn
    from commdebug import Recorder
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)])
    rec = Recorder(sys.argv[1])
    for step in range(int(sys.argv[2])):
        with rec:
            m(torch.randn(4, 16)).sum().backward()
    time.sleep(float(sys.argv[3]))
    os.kill(os.getpid(), signal.SIGKILL)
''')


def test_region_exit_frame_survives_sigkill(ctx):
    """A full recorder killed (SIGKILL) soon after a region's end leaves
    that region whole in the trace, its region_exit included: the frame
    the C module's thread writes is handed over at the region's end, so
    the first step's, written while that thread sleeps, and the last of
    several, written while it polls (within 1 ms), are both there 20 ms
    later."""
    _native()
    script = os.path.join(ctx.tmp, "dies.py")
    with open(script, "w") as f:
        f.write(DIES_AFTER_REGION)
    for steps in (1, 30):
        trace = os.path.join(ctx.tmp, "dies-%d.zst" % steps)
        r = subprocess.run([PYTHON, script, trace, str(steps), "0.02"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, env=env())
        eq(r.returncode, -9, "killed (%s)" % r.stderr.decode()[-2000:])
        evs = events(trace, allow_cut=True)
        exits = [e["region"] for e in evs if e["ev"] == "region_exit"]
        eq(exits, list(range(1, steps + 1)), "%d steps: the regions that ended" % steps)


def test_raw_frames(ctx):
    """raw_frame() is a zstd frame of raw blocks that zstd reads back,
    across block boundaries; its checksum is XXH64's (libxxhash's where it
    is there, and then the frame is the Python's byte for byte)."""
    native = _native()
    from commdebug import _zstd
    xxh = _zstd._xxh64()
    for n in (0, 1, 3, 4, 7, 8, 31, 32, 33, 100, 4096, 128 * 1024, 128 * 1024 + 1, 300000):
        data = bytes((i * 7 + n) & 0xFF for i in range(n))
        frame = native.raw_frame(data)
        path = os.path.join(ctx.tmp, "f%d.zst" % n)
        with open(path, "wb") as f:
            f.write(frame)
        r = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        eq(r.returncode, 0, "zstd -dc of a raw frame of %d bytes (%s)" % (n, r.stderr[-300:]))
        eq(r.stdout, data, "the content of a raw frame of %d bytes" % n)
        if xxh is not None:
            eq(native.xxh64(data), xxh(data, n, 0), "XXH64 of %d bytes" % n)
            eq(frame, _zstd.raw_frame(data), "the frame of %d bytes, C and Python" % n)
    if xxh is None:
        ctx.note("no libxxhash here: frames compared through zstd only")


PROGRAM = textwrap.dedent(r'''
    import os, sys
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.utils.checkpoint import checkpoint
    from commdebug import Recorder
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x)
            dist.all_reduce(y.detach())
            return y, self.b(y), 3

    class Same(nn.Module):
        def forward(self, x):
            return x

    class Two(nn.Module):
        def forward(self, x):
            return x * 2, x.sin()

    class PassTwo(nn.Module):
        # returns an inner module's tuple as it is (a shared hook put before
        # the inner one's on each tensor)
        def __init__(self):
            super().__init__()
            self.two = Two()

        def forward(self, x):
            return self.two(x)

    class Pick(nn.Module):
        # returns one tensor of an inner module's tuple (its bw_pre first in
        # the lines of the hook the tuple's tensors share)
        def __init__(self):
            super().__init__()
            self.two = Two()

        def forward(self, x):
            return self.two(x)[1]

    class Flex(nn.Module):
        # its output fresh (the C makes its hook), or an inner module's with
        # a hook registered after that one's (the Python's path, each time)
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x, inner):
            if not inner:
                return x * 3
            y = self.lin(x)
            if y.requires_grad:
                y.register_hook(lambda g: None)
            return y

    class Fails(nn.Module):
        def forward(self, x):
            y = x * 2
            raise RuntimeError("caught by the program")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()
            self.hooked = nn.Linear(8, 8)
            self.prehooked = nn.Linear(8, 8)
            self.bwhooked = nn.Linear(8, 8)
            self.same = Same()
            self.two = Two()
            self.two1 = Two()
            self.flex = Flex()
            self.passtwo = PassTwo()
            self.pick = Pick()
            self.ck = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
            self.late = nn.Linear(8, 8)
            self.kw = nn.Linear(8, 8)
            self.fails = Fails()
            self.inplace = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True))
            self.nograd = nn.Linear(8, 8)

        def forward(self, x, late=False):
            y, z, _ = self.pair(x)
            y = self.hooked(y + z + self.nograd(x.detach()))
            y = self.prehooked(y)
            y = self.bwhooked(self.same(y))
            u, v = self.two(y)
            _, y = self.two1(u + v)
            y = self.flex(y, False) + self.flex(y, True)
            p, q = self.passtwo(y)
            y = self.pick(p + q) + p
            y = checkpoint(self.ck, y, use_reentrant=False)
            if late:
                y = self.late(y)
            y = self.inplace(self.kw(input=y))
            try:
                self.fails(y)
            except RuntimeError:
                pass
            return y

    def allreduce_grad(grad):
        dist.all_reduce(grad.detach().clone())

    net = Net()
    net.hooked.register_forward_hook(
        lambda m, i, o: o.register_hook(allreduce_grad) and None if o.requires_grad else None)
    net.prehooked.register_forward_pre_hook(lambda m, i: None)
    net.bwhooked.register_full_backward_pre_hook(lambda m, g: None)
    ddp = torch.nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 8), net),
                                                    find_unused_parameters=True)
    rec = Recorder(sys.argv[1], light=sys.argv[2] == "light")
    x = torch.randn(4, 8, requires_grad=True)
    for step in range(4):
        net.pair.b.bias.requires_grad_(step != 2)      # (the same object, in place)
        with rec(label="step %d" % step):
            (ddp(x) if step != 2 else net(x, late=True)).sum().backward()
        if step == 1:
            net.pair.a.weight = nn.Parameter(net.pair.a.weight.detach().clone())
    with torch.no_grad(), rec(label="no grad"):
        net(x)
    rec.close()
''')


def _body(path):
    """The trace's events without times and without the meta event (its
    clock and process facts differ from run to run)."""
    out = []
    for e in events(path):
        if e["ev"] == "meta":
            continue
        out.append({k: v for k, v in e.items() if k not in ("t", "dur")})
    return out


def _same_ways(ctx, mode, ways):
    """PROGRAM recorded in mode ("light" or "full") with each environment
    of ways ({name: {var: value}}, the last the reference): the traces hold
    the same events in the same order.  Returns the reference's events."""
    script = os.path.join(ctx.tmp, "prog.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    got = {}
    for name, extra in ways.items():
        trace = os.path.join(ctx.tmp, "%s-%s.zst" % (mode, name))
        r = subprocess.run([PYTHON, script, trace, mode], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, env=env(**extra))
        eq(r.returncode, 0, "%s: exit status (%s)" % (name, r.stderr.decode()[-2000:]))
        zstd_cli_text(trace)
        got[name] = _body(trace)
    ref, want = list(got.items())[-1]
    kinds = {e["ev"] for e in want}
    for ev in ("fw_pre", "fw_done", "bw_pre", "op", "ddp", "bw_end"):
        check(ev in kinds, "no %s event in the trace: %r", ev, sorted(kinds))
    check(any(e["ev"] == "fw_pre" and e.get("bw") for e in want), "no recompute recorded")
    for name, evs in got.items():
        if evs != want:
            diff = next(i for i, (a, b) in enumerate(zip(evs + [None] * len(want), want))
                        if a != b)
            raise AssertionError("%s differs from %s at event %d: %s vs %s"
                                 % (name, ref, diff, json.dumps(evs[diff:diff + 3]),
                                    json.dumps(want[diff:diff + 3])))
    ctx.note("%d events, the same %d ways (%s)" % (len(want), len(got), ", ".join(got)))
    return want


def test_light_traces_same_every_way(ctx):
    """One program (tuple outputs: of a tensor with hooks and one without,
    of two fresh tensors both used or the second only; a module whose output
    is fresh in one call and hooked by other code in the next; a module with
    a forward hook that puts a gradient hook issuing an all-reduce, one with
    a forward pre-hook, one
    with a full-backward pre-hook, a module returning its input,
    checkpointing, DDP, a parameter replaced, a module first called in a
    later region, a region under no_grad, a module called with keyword
    arguments, one whose forward raises, a module whose input does not
    require grad, an in-place ReLU on a module's
    input, a parameter's requires_grad changed in place) recorded light
    four ways: with
    the C module or without (COMMDEBUG_SPEEDUPS=0), its hooks in nn.Module's
    call or global (COMMDEBUG_MODULE_CALL=torch); and, where
    commdebug._gradhook is built (then the four use its C++ gradient hooks),
    two more with torch's Python hooks instead (COMMDEBUG_GRADHOOK=0), with
    the C module and without.  The traces hold the same events in the same
    order (among them the bw_pre of modules returning one tensor, in the
    order their wrapper nodes would run)."""
    _native()
    need_light()
    ways = {
        "c1-call": {"COMMDEBUG_SPEEDUPS": "1"},
        "c1-global": {"COMMDEBUG_SPEEDUPS": "1", "COMMDEBUG_MODULE_CALL": "torch"},
        "c0-call": {"COMMDEBUG_SPEEDUPS": "0"},
        "c0-global": {"COMMDEBUG_SPEEDUPS": "0", "COMMDEBUG_MODULE_CALL": "torch"}}
    if _gradhook_built():
        # the C++ gradient hooks (the default where built) against torch's
        # Python ones, with the C module and without
        ways = {"c1-call-py-hooks": {"COMMDEBUG_SPEEDUPS": "1", "COMMDEBUG_GRADHOOK": "0"},
                "c0-call-py-hooks": {"COMMDEBUG_SPEEDUPS": "0", "COMMDEBUG_GRADHOOK": "0"},
                **ways}
    _same_ways(ctx, "light", ways)


def test_full_traces_same_four_ways(ctx):
    """The same program recorded by the full recorder four ways: its op
    events from the C module's dispatch or the Python's, its module events
    from its own nn.Module call or through torch's slow path
    (COMMDEBUG_MODULE_CALL=torch).  The four traces hold the same events,
    every op among them, in the same order."""
    _native()
    from commdebug import _leanbw
    if not _leanbw.available():
        raise Skip("this torch has no LeanBackwardHook (the full recorder's call needs it)")
    want = _same_ways(ctx, "full", {
        "c1-call": {"COMMDEBUG_SPEEDUPS": "1"},
        "c1-torch": {"COMMDEBUG_SPEEDUPS": "1", "COMMDEBUG_MODULE_CALL": "torch"},
        "c0-call": {"COMMDEBUG_SPEEDUPS": "0"},
        "c0-torch": {"COMMDEBUG_SPEEDUPS": "0", "COMMDEBUG_MODULE_CALL": "torch"}})
    ops = [e for e in want if e["ev"] == "op"]
    check(len(ops) > 100, "only %d op events in a full trace", len(ops))
    # a parameter's requires_grad changed in place is read at the module's
    # first call of the next region (the full recorder reads its parameters
    # whole once a region; the last, the no_grad region)
    bias = [p["requires_grad"] for e in want if e["ev"] == "fw_pre" and
            e["mod"].endswith("pair.b") for p in e.get("params", []) if p["name"] == "bias"]
    eq(bias, [True, True, False, True, True], "pair.b's bias requires_grad at each fw_pre")
    check(any(e.get("bw") for e in ops) and any(e.get("fake") is False for e in ops),
          "no backward op: %r", ops[:5])


def test_module_call_put_back(ctx):
    """nn.Module's call is light mode's while a light recorder's hooks are on
    and torch's again after the last one closed (two recorders, closed in
    the order opened); where other code replaced it first, light mode
    leaves it alone and uses global hooks."""
    from commdebug import Recorder
    need_light()
    import torch
    import torch.nn.modules.module as nnm
    torch_call = nnm.Module._call_impl
    lin = torch.nn.Linear(2, 2)
    a = Recorder(os.path.join(ctx.tmp, "a.zst"), light=True)
    b = Recorder(os.path.join(ctx.tmp, "b.zst"), light=True)
    with a:
        lin(torch.ones(2))
    with b:
        lin(torch.ones(2))
    check(nnm.Module._call_impl is not torch_call, "light mode's call is not in place")
    eq(len(nnm._global_forward_pre_hooks), 0, "global pre-hooks while light mode's call runs")
    a.close()
    check(nnm.Module._call_impl is not torch_call, "the call went with the first recorder")
    b.close()
    check(nnm.Module._call_impl is torch_call, "torch's call not put back")

    def other(self, *args, **kwargs):
        return torch_call(self, *args, **kwargs)
    nnm.Module._call_impl = other
    try:
        c = Recorder(os.path.join(ctx.tmp, "c.zst"), light=True)
        with c:
            lin(torch.ones(2))
        check(nnm.Module._call_impl is other, "another call replaced")
        eq(len(nnm._global_forward_pre_hooks), 1, "global pre-hooks beside another call")
        c.close()
        eq(len(nnm._global_forward_pre_hooks), 0, "global pre-hooks after close")
        evs = [e["ev"] for e in events(os.path.join(ctx.tmp, "c.zst"))]
        check("fw_pre" in evs, "nothing recorded through global hooks: %r", evs)
    finally:
        nnm.Module._call_impl = torch_call


def test_full_call_stays_between_regions(ctx):
    """A full recorder puts nn.Module's call in at its first region and
    takes it out at its close, not at each region: an assignment to
    nn.Module's class attribute spends one of the type versions CPython gives
    a class (1000, 3.13 and later), after which every module attribute is
    looked up the slow way.  Between regions a module's call is torch's in
    effect (its hooks run, its output is the forward's)."""
    from commdebug import Recorder, _leanbw
    if not _leanbw.available():
        raise Skip("this torch has no LeanBackwardHook (the full recorder's call needs it)")
    import torch
    import torch.nn.modules.module as nnm
    torch_call = nnm.Module._call_impl
    lin = torch.nn.Linear(2, 2)
    seen = []
    h = lin.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    rec = Recorder(os.path.join(ctx.tmp, "full.zst"))
    try:
        calls = set()
        for _ in range(3):
            with rec:
                lin(torch.ones(2))
            calls.add(nnm.Module._call_impl)
            out = lin(torch.ones(2))
        eq(len(calls), 1, "nn.Module's calls between regions")
        check(torch_call not in calls, "torch's call between the regions of an open recorder")
        eq((out.shape, len(seen)), (torch.Size([2]), 6), "a call between regions (its hook ran)")
    finally:
        h.remove()
        rec.close()
    check(nnm.Module._call_impl is torch_call, "torch's call not put back at close")
    evs = [e for e in events(os.path.join(ctx.tmp, "full.zst")) if e["ev"] == "fw_pre"]
    eq(len(evs), 3, "fw_pre events (one per region)")


def test_full_call_finds_forward_as_python_does(ctx):
    """The full recorder's call looks a module's forward up as Python does:
    an instance's own forward before its class's, a class attribute that is
    not a function (called unbound) as it is; a module with a hook of its own
    gets torch's call (its hook runs); each call recorded, with the output
    the module gives without a recorder."""
    from commdebug import Recorder, _leanbw
    if not _leanbw.available():
        raise Skip("this torch has no LeanBackwardHook (the full recorder's call needs it)")
    import torch

    ran = []

    def doubled(x):
        ran.append("own")
        return x * 2

    class Tripled:
        def __call__(self, x):
            return x * 3

    class CallableForward(torch.nn.Module):
        forward = Tripled()         # (no __get__: called unbound)

    own = torch.nn.Linear(2, 2)
    own.forward = doubled
    hooked = torch.nn.Linear(2, 2)
    hooked.register_forward_hook(lambda m, i, o: ran.append("hook"))
    mods = [own, CallableForward(), torch.nn.Linear(2, 2), hooked]
    base = torch.ones(2, requires_grad=True)
    want = [m(base * 1.5) for m in mods]
    del ran[:]
    rec = Recorder(os.path.join(ctx.tmp, "forward.zst"))
    try:
        with rec:
            # (twice: a module's first call in a region is the Python's,
            # which makes what the C call reads; each on a tensor of its own,
            # made by a node, without hooks: the C call's common case)
            got = [m(base * 1.5) for m in mods for _ in range(2)][1::2]
            sum(g.sum() for g in got).backward()
    finally:
        rec.close()
    eq(ran, ["own", "own", "hook", "hook"],
       "the instance's own forward ran, at each call, and the module's own hook")
    for i, (g, w) in enumerate(zip(got, want)):
        check(torch.equal(g, w), "module %d: %r under the recorder, %r without" % (i, g, w))
    evs = events(os.path.join(ctx.tmp, "forward.zst"))
    eq([e["type"].rsplit(".", 1)[-1] for e in evs if e["ev"] == "fw_pre"],
       ["Linear", "Linear", "CallableForward", "CallableForward", "Linear", "Linear", "Linear",
        "Linear"],
       "fw_pre events")
    eq(len([e for e in evs if e["ev"] == "bw_exit"]), 4, "bw_exit events (the second calls')")


def _aw_threads():
    """{tid: context switches so far} of this process's AsyncWrite threads
    (named commdebug-aw), or None without /proc."""
    base = "/proc/self/task"
    if not os.path.isdir(base):
        return None
    out = {}
    for tid in os.listdir(base):
        try:
            with open(os.path.join(base, tid, "comm")) as f:
                if f.read().strip() != "commdebug-aw":
                    continue
            with open(os.path.join(base, tid, "status")) as f:
                n = sum(int(line.split()[1]) for line in f
                        if line.startswith(("voluntary_ctxt_switches",
                                            "nonvoluntary_ctxt_switches")))
        except OSError:
            continue                    # (a thread that ended meanwhile)
        out[tid] = n
    return out


def _aw_tid(hand_over, before=None):
    """The thread id of the AsyncWrite thread that hand_over() starts (by
    handing it its first job), or that started since before (_aw_threads())."""
    before = _aw_threads() if before is None else before
    if before is None:
        raise Skip("no /proc/self/task here")
    hand_over()
    time.sleep(0.005)
    new = [t for t in _aw_threads() if t not in before]
    eq(len(new), 1, "new commdebug-aw threads")
    return new[0]


def _wakeups(tid, idle_s):
    """tid's context switches in the next idle_s seconds."""
    n0 = _aw_threads()[tid]
    time.sleep(idle_s)
    return _aw_threads()[tid] - n0


def _wakeups_after_job(hand_over, idle_s=0.2, before=None):
    """The context switches of the AsyncWrite thread that hand_over() starts
    (or that started since before), in idle_s seconds after its job."""
    return _wakeups(_aw_tid(hand_over, before), idle_s)


def test_async_write_polls(ctx):
    """AsyncWrite.set_polls(n): after a job its thread looks at the queue
    every 1 ms n times (100 unless set) before it sleeps until a submit
    wakes it; with 0 it sleeps at once, and a job submitted then is still
    written.  A light Recorder's writer sets 0 (sleep_between_frames), a
    full one's keeps 100; with its file's end padded (light mode's default,
    _padtail) it hands the thread nothing, so none starts.  Counted by the
    thread's context switches (/proc) in the 0.2 s after a job: one per look
    while it polls."""
    native = _native()
    path = os.path.join(ctx.tmp, "polls.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    for bad, err in ((-1, ValueError), (100001, ValueError), ("1", TypeError)):
        try:
            native.AsyncWrite().set_polls(bad)
        except err:
            pass
        else:
            check(False, "set_polls(%r) did not raise %s", bad, err.__name__)
    polling = native.AsyncWrite()
    got = _wakeups_after_job(lambda: (polling.submit(fd, b"a" * 100, 0, 1), polling.wait()))
    check(got >= 20, "the default thread looked at its queue only %d times in 0.2 s", got)
    quiet = native.AsyncWrite()
    quiet.set_polls(0)
    got = _wakeups_after_job(lambda: (quiet.submit(fd, b"b" * 50, 100, 1), quiet.wait()))
    check(got <= 2, "set_polls(0): the thread woke %d times in 0.2 s without a job", got)
    eq(quiet.submit(fd, b"c" * 25, 150, 1), True, "a job for the sleeping thread")
    eq(quiet.wait(5), (0, 0, 0, 0), "written")
    for aw in (polling, quiet):
        aw.close()
    with open(path, "rb") as f:
        eq(f.read(), b"a" * 100 + b"b" * 50 + b"c" * 25, "the file")
    os.close(fd)
    from commdebug import Recorder
    for light, pad in ((False, False), (True, False), (True, True)):
        before = _aw_threads()
        old = os.environ.get("COMMDEBUG_PAD_TAIL")
        os.environ["COMMDEBUG_PAD_TAIL"] = "1" if pad else "0"
        try:
            rec = Recorder(os.path.join(ctx.tmp, "polls%d%d.zst" % (light, pad)), light=light)
            with rec:
                pass
        finally:
            if old is None:
                del os.environ["COMMDEBUG_PAD_TAIL"]
            else:
                os.environ["COMMDEBUG_PAD_TAIL"] = old
        w = rec._w
        if w._aw is None:
            rec.close()
            raise Skip("the trace writer hands no frames to the C module's thread here")
        w.tick = 3600.0                  # (the writer thread does not come round)

        def frame():
            w.buf.append('{"ev":"x"}\n')
            w.do_round()
            w._settle()
        if pad:
            check(w._fsize is not None, "a light recorder's end is not padded")
            frame()
            time.sleep(0.005)
            eq([t for t in _aw_threads() if t not in before], [],
               "C threads started by a light recorder with its end padded")
            rec.close()
            continue
        got = _wakeups_after_job(frame, before=before)
        rec.close()
        if light:
            check(got <= 2, "a light recorder's C thread woke %d times without a job", got)
        else:
            check(got >= 20, "a full recorder's C thread looked %d times", got)


def test_async_write_looks_when_due(ctx):
    """AsyncWrite's thread looks at its queue only shortly before the next
    job is due (one gap between the last two jobs after the last, less 1
    ms), and not at all where jobs come further apart than its looks last
    (0.1 s); a job that comes before it is due still wakes it at once.
    Counted by the thread's context switches (/proc)."""
    native = _native()
    path = os.path.join(ctx.tmp, "due.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    at = [0]

    def job(aw, n=10):
        eq(aw.submit(fd, b"j" * n, at[0], 1), True, "submit")
        at[0] += n
        eq(aw.wait(5), (0, 0, 0, 0), "written")

    steady = native.AsyncWrite()
    tid = _aw_tid(lambda: job(steady))
    for _ in range(4):
        time.sleep(0.06)
        job(steady)
    got = _wakeups(tid, 0.04)
    check(got <= 3, "jobs every 60 ms: %d looks in the 40 ms after one (none due)", got)
    got = _wakeups(tid, 0.1)
    check(got >= 20, "jobs every 60 ms: only %d looks once the next was due", got)
    job(steady)
    time.sleep(0.06)
    job(steady)
    time.sleep(0.005)
    t0 = time.monotonic()
    job(steady)                          # (55 ms early)
    took = time.monotonic() - t0
    check(took < 0.03, "a job before its time waited %.3f s to be written", took)
    steady.close()

    slow = native.AsyncWrite()
    tid = _aw_tid(lambda: job(slow))
    time.sleep(0.15)
    job(slow)
    got = _wakeups(tid, 0.2)
    check(got <= 2, "jobs 150 ms apart: %d looks after one (longer than the looks last)", got)
    job(slow)
    slow.close()
    with open(path, "rb") as f:
        eq(f.read(), b"j" * at[0], "the file")
    os.close(fd)
