"""The trace file: JSON Lines written as a sequence of zstd frames.

The recording thread only appends ready-made lines to ``buf``: the C
module's LineBuf, which formats each as it comes (``take()`` then gives a
frame its bytes whole), or, without it, a list whose items a frame formats
(``_text``); an append is atomic under the GIL either way.  Frames are made
and written

* by the writer thread, every 20 ms while lines are waiting (every 0.1 s in
  light mode, ``LIGHT_TICK_S``), handed to the C module's thread as a
  region exit's are where that thread can take them (below; not for a
  bounded trace, nor one whose end is padded: _padtail): an event is on
  its way to the file at most 50 ms (light: 150 ms) after it was recorded,
  so a process that dies by SIGKILL, SIGABRT or SIGSEGV (whose written
  bytes the kernel keeps) loses at most the last 50 ms (150 ms) of events;
* by the recording thread itself, just before a collective is handed to the
  backend (``sync``): the collective's own event is in the file before the
  collective can hang or abort the process.  This happens only for a regular
  file, only when the lock is free within 50 ms and only while no write has
  been stuck for longer than that; otherwise the lines go to the writer
  thread, and the recording thread never waits on a stalled file system, a
  pipe nobody reads or a full disk;
* in full mode also at every region exit and ``next_region``
  (``sync(later=True)``; light mode leaves the lines of its region exits to
  the writer thread): where the C module is built, handed to its thread,
  which compresses them into a frame (or writes the raw frame the recording
  thread made: _handoff.py says when) without the interpreter's lock
  (``AsyncWrite``: the write starts at once, and the training thread does
  not wait for it), up to four frames queued (``AsyncWrite.sync_lines``
  where it compresses them, else one): beyond that, the lines go to the
  writer thread.  Everything else that writes or reads the file waits for
  those frames first (``_settle``);
* at exit, by the writer thread, which the exit handler waits for at most
  ``EXIT_TIMEOUT_S`` seconds (COMMDEBUG_EXIT_TIMEOUT).

Memory is bounded: when the writer cannot keep up (a stalled write), lines
beyond ``MAX_LINES`` are dropped and counted.  A write error (a full disk,
/dev/full) prints one warning; from then on lines are dropped and counted.

Every frame carries a zstd content checksum.  Without libzstd the same lines
are written as plain JSON Lines, which have no checksum.

A trace file is claimed before it is written: opened without O_TRUNC, locked
with flock(LOCK_EX | LOCK_NB), and only then truncated.  A file another live
recorder holds is never truncated; the second writer gets a name of its own
(``rank0.zst`` -> ``rank0.<pid>.zst``) and a warning.  A forked child never
writes into its parent's file.
"""

import atexit
import errno
import os
import sys
import threading
import time

from . import _zstd
from ._native import speedups
from ._claim import Busy, _claim_free_name, _warn, alt_path, claim  # noqa: F401
from ._relocate import Relocation
from ._handoff import Handoff
from ._tail import RawTail
from ._padtail import PadTail
from ._linetext import LineText

__all__ = ["TraceWriter", "claim", "alt_path", "EXIT_TIMEOUT_S", "MAX_AGE_MS"]

TICK_S = 0.02              # writer thread period
MAX_AGE_MS = 50            # the documented bound on what a sudden death loses
# Light mode: the writer thread comes round every 0.1 s (every wake costs a
# context switch and the GIL): a sudden death loses at most the last 0.15 s,
# besides what the frame written before each collective keeps.
LIGHT_TICK_S = 0.1
LIGHT_MAX_AGE_MS = 150
# Light mode: the raw frames written before collectives are compacted once
# their first is this old or they hold _tail.COMPACT_BYTES, not every round
# (a round that compacts costs several times one that does not; the raw
# frames are a valid trace meanwhile).
LIGHT_COMPACT_S = 1.0
MAX_LINES = 1 << 16        # lines waiting beyond this are dropped when stalled
_STALL_NS = 50 * 1000000   # a write in progress longer than this: do not wait for it
_DUE_NS = 250 * 1000000    # the recording thread checks the writer after this long


def _exit_timeout():
    try:
        return max(0.0, float(os.environ.get("COMMDEBUG_EXIT_TIMEOUT", "2")))
    except ValueError:
        return 2.0


EXIT_TIMEOUT_S = _exit_timeout()

_open_writers = []
_warned_plain = []


def _close_all():
    for w in list(_open_writers):
        try:
            w.close()
        except Exception:
            pass


def _after_fork_in_child():
    for w in list(_open_writers):
        w._forked()
    del _open_writers[:]


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class TraceWriter(LineText, Handoff, RawTail, PadTail, Relocation):
    """Owns the file descriptor, the line buffer and the writer thread.

    ``buf``: the list the recorder appends lines to.  ``due``: monotonic ns
    after which the recording thread calls ``poke`` (the writer thread keeps
    pushing it forward; it only passes when the writer is stuck).
    """

    def __init__(self, path, first_line, level=None):
        self._z = _zstd.load()
        if self._z is None and not _warned_plain:
            _warned_plain.append(True)
            _warn("libzstd.so.1 not found; writing uncompressed JSON Lines to %s "
                  "(without checksums)" % path)
        if level is None:
            try:
                level = int(os.environ.get("COMMDEBUG_ZSTD_LEVEL", str(_zstd.DEFAULT_LEVEL)))
            except ValueError:
                level = _zstd.DEFAULT_LEVEL
        self._comp = self._z.compressor(level) if self._z is not None else None
        self._pid = os.getpid()
        native = speedups()
        lines = getattr(native, "LineBuf", None)
        self.buf = lines() if lines is not None else []
        self._formatted = lines is not None  # buf formats its items (LineBuf)
        self.mono0 = 0                    # the origin of the times of tuple items in buf
        self.index = None                 # [offset, length, lines, marks] per frame (bounded)
        self.tick = TICK_S                # the writer thread's period (LIGHT_TICK_S: light)
        self.bounded = None               # a _bounded.Bounded, or None
        self._marks = []
        self._ctext = native.text if native is not None else None
        self._raw_frame = native.raw_frame if native is not None else _zstd.raw_frame
        self.bytes_in = 0
        self.bytes_out = 0
        self.frames = 0
        self.dropped = 0
        self.error = None
        self._io = threading.Lock()       # the fd, the file's end and tail; frame order
        self._zlock = threading.Lock()    # the compressor
        self._end = 0                     # bytes in the file
        self._tail_at = None              # where the raw frames at its end start
        self._tail = []                   # those frames (bytes), in order
        self._tail_t = 0.0                # monotonic s when the first was written
        self._take = threading.Lock()     # taking lines out of buf (never held in I/O)
        self._closing = False
        self._closed = False
        self._dead = False                # nothing is written any more (error, fork)
        self._writing = 0                 # monotonic ns a write started, 0 when none
        self._meta_len = 0                # bytes of the first frame (the meta line)
        self._warned_drop = False
        self._set_due(time.monotonic_ns() + _DUE_NS)
        self._wake = threading.Event()
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        self._fd = -1
        self.regular = True
        self.path = path
        try:
            self._fd, self.regular, self.path = _claim_free_name(path)
        except OSError as e:
            if e.errno == errno.ENXIO:
                self.regular = False       # a FIFO without a reader: the thread opens it
            else:
                raise
        self._handoff_init(native, level)  # region exits' frames: the C module's thread
        self._pad_init()                   # light mode's padded, mapped end (_padtail)
        self.buf.append(first_line)
        if self._fd >= 0 and self.regular:
            with self._io:
                self._drain_locked()
                self._meta_len = self.bytes_out
        _open_writers.append(self)
        self._thread = threading.Thread(target=self._run, name="commdebug-writer", daemon=True)
        self._thread.start()

    @property
    def mono0(self):
        return self._mono0

    @mono0.setter
    def mono0(self, t):
        self._mono0 = t
        if getattr(self, "_formatted", False):
            self.buf.mono0 = t

    @property
    def compressed(self):
        return self._z is not None

    # ------------------------------------------------------------ writing
    def _encode(self, data):
        if self._comp is None:
            return data
        with self._zlock:
            return self._comp.frame(data)

    def _drain_locked(self, raw=False, later=False):
        """Write what buf holds as one frame; the caller holds _io.  raw:
        as a frame of raw blocks (no compression: fast on a thread whose
        caches a training step has just filled), which _compact replaces by
        a compressed one later (regular files only).  later (with raw): hand
        it to the C module's thread (AsyncWrite), which writes it at once
        while the caller goes on."""
        raw = raw and self._comp is not None and self.regular
        if later and raw and self._hand_lines():
            return                      # (the lines compressed by the C module's thread)
        if raw and self._formatted:     # (the frame made of the LineBuf's bytes: one copy)
            with self._take:
                if len(self.buf) == 0:
                    return
                out, self._marks, n, lines, nbytes = self.buf.take_frame()
        else:
            with self._take:
                n, got = self._take_lines()
            if n == 0:
                return
            data = got if self._formatted else self._text(got)
            out = self._raw_frame(data) if raw else self._encode(data)
            lines, nbytes = data.count(b"\n"), len(data)    # (a 2-time item: 2 lines)
        self._put(out, n, lines, nbytes, raw, later)

    def _put(self, out, n, lines, nbytes, raw, later=False):
        """Write the frame out (n items, lines lines, nbytes bytes of them) at
        the end, or hand it to the C module's thread (later), and count it."""
        if self._dead or self._fd < 0:
            self.dropped += n
            return
        handed = later and raw and self._aw is not None and type(out) is bytes and \
            self._fsize is None and self._aw.submit(self._fd, out, self._end, n)
        if not handed and not self._write(out, n):
            return
        if self.index is not None:
            self.index.append([self._end, len(out), lines, self._marks])
        if raw:
            if self._tail_at is None:
                self._tail_at = self._end
                self._tail_t = time.monotonic()
            self._tail.append(out)
        self._end += len(out)
        self.bytes_in += nbytes
        self.bytes_out += len(out)
        self.frames += 1

    def _write(self, out, n, at=None):
        """Write out at the end (or at offset at); False after an error.  A
        regular file is written at its offset (pwrite), as the C module's
        thread writes its frames, so that its position never needs setting;
        a pipe in order."""
        if not self._settle() or self._dead:
            self.dropped += n           # (an earlier frame's write failed)
            return False
        padded = at is None and self._fsize is not None
        if at is None and self.regular:
            at = self._end
        view = memoryview(out)
        self._writing = time.monotonic_ns()
        try:
            if padded:
                self._pad_write(out, at)
                view = None
            while view:
                k = os.write(self._fd, view) if at is None else os.pwrite(self._fd, view, at)
                view = view[k:]
                if at is not None:
                    at += k
        except OSError as e:
            self._fail(e, n)
            return False
        finally:
            self._writing = 0
        return True

    def _fail(self, e, n):
        self.error = e
        self._dead = True
        self.dropped += n
        _warn("writing %s failed (%s); recording goes on without writing, events dropped "
              "are counted (rec.dropped)" % (self.path, e.strerror or e))

    def _run(self):
        if self._fd < 0:
            # A FIFO nobody reads yet: wait for a reader here, never in the
            # recording thread.
            try:
                fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                with self._io:
                    self._fail(e, 0)
                fd = -1
            with self._io:
                if self._closed:
                    if fd >= 0:
                        os.close(fd)
                    return
                self._fd = fd
        wake = self._wake
        while True:
            wake.wait(self.tick)
            wake.clear()
            closing = self._closing
            self.do_round()
            if closing:
                return

    def do_round(self):
        """What the writer thread does each time it comes round: the lines
        waiting written, the raw tail compressed, a bounded trace trimmed."""
        if self.buf:
            with self._io:
                # (the C module's thread compresses them where it can, as
                # at a region's end: no raw frame for this thread to read
                # back and compress; its frame before written first.  A
                # bounded trace's frames stay this thread's: it reads the
                # file back)
                later = self.index is None
                if later:
                    self._settle()
                self._drain_locked(raw=True, later=later)
        if self._tail_at is not None and self._compact_due():
            self._compact()
        if self.bounded is not None and self._tail_at is None:
            self.bounded.maybe_compact(self)
        if self._fsize is not None:
            with self._io:
                self._pad_grow()
        self._set_due(time.monotonic_ns() + _DUE_NS)

    def _set_due(self, t):
        """due (monotonic ns), kept in the LineBuf too: the C reads it there."""
        self.due = t = int(t)
        if self._formatted:
            self.buf.due = t

    def sync(self, later=False):
        """Called by the recording thread: get everything buffered into the
        file now if that cannot block (see the module's doc), else leave it
        to the writer thread.  later: a region's end, whose frame the C
        module's thread may write while the caller goes on."""
        if not self.regular or self._dead:
            return
        w = self._writing
        if w and time.monotonic_ns() - w > _STALL_NS:
            self._wake.set()
            return
        if not self._io.acquire(timeout=0.05):
            self._wake.set()
            return
        try:
            # (frames handed over before still being written: a stalled file
            # system never holds the caller, nor more than four frames)
            done = self._sync_lines() if later else None
            if done is None and self._settle(0 if later else 0.05):
                done = True
                if not self._closed:
                    self._drain_locked(raw=True, later=later)
            if not done:
                self._wake.set()
        finally:
            self._io.release()

    def poke(self):
        """The writer thread has not come round for a while: bound memory."""
        self._set_due(time.monotonic_ns() + self.tick * 1e9)
        if os.getpid() != self._pid:
            self.buf.clear()
            return
        if len(self.buf) > MAX_LINES:
            with self._take:
                n = len(self.buf)
                self.buf.clear()
                self.dropped += n
            if not self._warned_drop:
                self._warned_drop = True
                _warn("writing %s is stalled; events are dropped and counted (rec.dropped)"
                      % self.path)
        self._wake.set()

    def flush(self, timeout=None):
        """Write what is buffered (the caller's thread waits for the lock at
        most timeout seconds, default EXIT_TIMEOUT_S).  True when done."""
        if not self._io.acquire(timeout=EXIT_TIMEOUT_S if timeout is None else timeout):
            return False
        try:
            if not self._closed:
                self._drain_locked(raw=True)
                self._settle()
        finally:
            self._io.release()
        self._compact()
        if self.bounded is not None and self._tail_at is None:
            self.bounded.maybe_compact(self)
        return True

    # -------------------------------------------------------------- closing
    def close(self, discard=False):
        """Write what is left (the writer thread does it; this waits at most
        EXIT_TIMEOUT_S) and close.  discard: remove the file instead."""
        if self._closed or os.getpid() != self._pid:
            return
        if discard:
            self._dead = True
        self._closing = True
        self._wake.set()
        self._thread.join(EXIT_TIMEOUT_S)
        if self._thread.is_alive():
            with self._take:
                n = len(self.buf)
                self.buf.clear()
                self.dropped += n
            _warn("writing %s did not finish within %g s (COMMDEBUG_EXIT_TIMEOUT); "
                  "%d events were not written" % (self.path, EXIT_TIMEOUT_S, self.dropped))
            self._closed = True
            return
        with self._io:
            if self._aw is not None:
                self._settle()
                self._aw.close()
            self._pad_drop(cut=not discard)
            self._fsize = None
            self._closed = True
            if self._fd >= 0:
                if discard and self.regular:
                    try:
                        os.unlink(self.path)
                    except OSError:
                        pass
                os.close(self._fd)
                self._fd = -1
        try:
            _open_writers.remove(self)
        except ValueError:
            pass
        if self.dropped and not discard:
            _warn("%s: %d events were not written" % (self.path, self.dropped))

    def _forked(self):
        # The child keeps the buffer (the recorder holds its bound append)
        # but writes nothing: poke() empties it.  (The C module's thread is
        # the parent's: the child's AsyncWrite drops what it holds.)
        self._io = threading.Lock()
        self._zlock = threading.Lock()
        self._take = threading.Lock()
        self._closed = True
        self._dead = True
        self._set_due(0)
        self.buf.clear()
        self._map = None          # (the parent's mapping: this child never writes)
        self._fsize = None
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
