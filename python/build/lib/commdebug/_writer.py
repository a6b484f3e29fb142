"""Buffered trace file: JSON Lines, written as a sequence of zstd frames.

Events are appended to an in-memory list as ready-made text lines.  A flush
takes what is buffered, compresses it into one complete zstd frame and
appends the frame to the file with a single write.  Flushes happen

* on the writer's daemon thread, twice a second while there is something to
  write (so a SIGKILLed process loses at most about half a second),
* from the recording hot path when the last flush is more than a second old
  (in case the thread did not get to run),
* at every region exit, and at interpreter exit (atexit).

A file of concatenated frames is one valid zstd stream; a frame cut by a kill
is the only part a reader cannot decode.  Without libzstd the same lines are
written uncompressed.
"""

import atexit
import os
import sys
import threading
import time
import weakref

from . import _zstd

__all__ = ["TraceWriter"]

_FLUSH_INTERVAL_S = 0.5
_open_writers = weakref.WeakSet()
_warned_plain = []


def _close_all():
    for w in list(_open_writers):
        try:
            w.close()
        except Exception:
            pass


def _after_fork_in_child():
    # The child must not write into the parent's file: drop everything.
    for w in list(_open_writers):
        w._forked()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class TraceWriter:
    """Owns the file descriptor and the event buffer.

    ``buf`` is the list the recorder appends lines to (``buf.append`` is
    atomic under the GIL; flushes only remove a prefix of it, so appends from
    other threads are never lost).  ``last_flush`` is the monotonic time in
    ns of the last flush; the hot path compares against it.
    """

    def __init__(self, path, level=None):
        self.path = path
        self._z = _zstd.load()
        if self._z is None and not _warned_plain:
            _warned_plain.append(True)
            sys.stderr.write("commdebug: libzstd.so.1 not found; writing uncompressed "
                             "JSON Lines to %s\n" % path)
        if level is None:
            try:
                level = int(os.environ.get("COMMDEBUG_ZSTD_LEVEL", "3"))
            except ValueError:
                level = 3
        self._level = level
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                           0o644)
        self._pid = os.getpid()
        self.buf = []
        self.last_flush = time.monotonic_ns()
        self.bytes_in = 0
        self.bytes_out = 0
        self.frames = 0
        self._lock = threading.Lock()
        self._closed = False
        self._wake = threading.Event()
        _open_writers.add(self)
        self._thread = threading.Thread(target=self._run, name="commdebug-writer", daemon=True)
        self._thread.start()

    @property
    def compressed(self):
        return self._z is not None

    def _run(self):
        ref = weakref.ref(self)
        wake = self._wake
        del self
        while True:
            wake.wait(_FLUSH_INTERVAL_S)
            w = ref()
            if w is None or w._closed:
                return
            if w.buf:
                try:
                    w.flush(blocking=False)
                except Exception as e:  # never let the thread die silently
                    sys.stderr.write("commdebug: writing %s failed: %s\n" % (w.path, e))
                    return
            del w

    def flush(self, blocking=True):
        """Write everything buffered so far as one frame.  Returns False when
        another flush was in progress and ``blocking`` is False."""
        if not self._lock.acquire(blocking):
            return False
        try:
            if self._closed or os.getpid() != self._pid:
                del self.buf[:]
                return True
            n = len(self.buf)
            self.last_flush = time.monotonic_ns()
            if n == 0:
                return True
            chunk = self.buf[:n]
            del self.buf[:n]
            data = "".join(chunk).encode("utf-8", "surrogatepass")
            if self._z is not None:
                out = self._z.compress_frame(data, self._level)
            else:
                out = data
            view = memoryview(out)
            while view:
                k = os.write(self._fd, view)
                view = view[k:]
            self.bytes_in += len(data)
            self.bytes_out += len(out)
            self.frames += 1
            return True
        finally:
            self._lock.release()

    def close(self):
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
                if os.getpid() == self._pid:
                    os.close(self._fd)
            self._wake.set()
            _open_writers.discard(self)

    def _forked(self):
        # Keep the same list object: the recorder holds its bound append.
        self._lock = threading.Lock()
        self._closed = True
        self._pid = -1
        del self.buf[:]
        try:
            os.close(self._fd)
        except OSError:
            pass
