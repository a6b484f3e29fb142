"""Light mode's padded file end: ``PadTail``, a base of _writer.TraceWriter.

Before each collective the recording thread writes every line since the
last frame into the file (``sync``: a raw frame, about 30 KB a step of a
small model).  Appended with write(2), that costs 60-95 us inside a
training step (the kernel's page allocation and size update, with the
caches the step leaves cold), and each compaction's ftruncate another
60 us on the writer thread.  So in light mode the file is kept longer than
its frames:

* the bytes from the end of the last frame (``_end``) to the file's size
  (``_fsize``) are one zstd skippable frame (its 8-byte header at
  ``_end``), which every reader skips: the file is a valid trace at every
  moment;
* the file from just before ``_end`` on is mapped (MAP_SHARED, ``_map``),
  so a frame written at the end is a copy into page-cache pages already
  there: no system call.  The copy goes in an order that keeps the file
  valid wherever a kill stops it: first the new padding header after the
  frame, then the frame but its first 8 bytes, then those 8 bytes (one
  store) over the old padding header;
* a write the mapping cannot take (a frame larger than the room left) and
  the writer thread's compaction write with pwrite, the padding header
  behind them in the same call (``_pad_write``); the writer thread maps
  more room ahead when less than ``PAD_AHEAD`` is left (``_pad_grow``);
* nothing else writes at the end while the padding is there: the C
  module's thread (AsyncWrite) is not given frames (_handoff's
  ``_lines_to_thread``, _writer's ``_put``);
* a rewrite (a bounded trace's, a relocation) drops the mapping before it
  swaps the file (``_pad_drop``); the next round maps the new one, and
  close() cuts the file at ``_end``: a trace closed normally has no padding.

A process killed before close() leaves its trace with the padding at the
end (at most PAD_MAP bytes, zeros and old raw frames inside a skippable
frame).  Used for light traces in regular files; COMMDEBUG_PAD_TAIL=0
turns it off (every frame appended with write(2), the file cut after each
compaction, as before).
"""

import mmap
import os
import sys

from . import _zstd

__all__ = ["PadTail", "PAD_MAP", "PAD_AHEAD", "stores"]

PAD_MAP = 1 << 20          # bytes mapped from the page holding _end on
PAD_AHEAD = 256 << 10      # map again when less than this is left after _end
_HDR = 8                   # a skippable frame's header
# (Python 3.13 and later: the mapping keeps no duplicate of the fd)
_NO_DUP = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def stores(o, out, pad):
    """The copies that put frame out at offset o of the padding, with pad
    bytes of padding left after it, in the order that keeps the file valid
    wherever they stop: the new padding header after the frame, the frame
    but its first 8 bytes, then those 8 bytes (one store) over the old
    padding header."""
    n = len(out)
    view = memoryview(out)
    return [(o + n, _zstd.skippable_header(pad)), (o + _HDR, view[_HDR:]), (o, view[:_HDR])]


def _wanted():
    return os.environ.get("COMMDEBUG_PAD_TAIL", "1") != "0"


class PadTail:
    def _pad_init(self):
        self._fsize = None         # the file's size while padded, else None
        self._map = None           # mmap of [_map_at, _map_at + len(_map))
        self._map_at = 0
        self._map_failed = False   # (then frames go by pwrite, still padded)

    def pad_tail(self):
        """Light mode: keep the file's end padded and mapped (the writer
        thread sets it up at its next round)."""
        if _wanted() and self.regular and self._fd >= 0 and self._z is not None:
            with self._io:
                if not self._dead and self._fsize is None and self._settle():
                    self._fsize = self._end

    # ------------------------------------------------------------ writing
    def _pad_write(self, out, at, mapped=True):
        """Write out at offset at, which becomes the end of the file's
        frames, and the padding header behind it (the caller holds _io;
        padding on).  True when out went through the mapping.  mapped=False:
        with pwrite, in one call (a compaction, whose frame goes over raw
        frames: the mapping's order keeps a file valid only where it writes
        over padding)."""
        n = len(out)
        new = at + n
        m = self._map
        if mapped and m is not None and n >= _HDR and at >= self._map_at and \
                new + _HDR <= min(self._fsize, self._map_at + len(m)):
            for o, b in stores(at - self._map_at, out, self._fsize - new - _HDR):
                m[o:o + len(b)] = b
            return True
        left = self._fsize - new
        if left <= 0:
            tail = b""                      # (the file ends with the frame)
        elif left < _HDR:
            tail = _zstd.skippable_header(0)
        else:
            tail = _zstd.skippable_header(left - _HDR)
        parts = [memoryview(out), tail] if tail else [memoryview(out)]
        while parts:
            k = os.pwritev(self._fd, parts, at)
            at += k
            while parts and k >= len(parts[0]):
                k -= len(parts[0])
                parts.pop(0)
            if parts and k:
                parts[0] = parts[0][k:]
        self._fsize = max(self._fsize, new + len(tail))
        return False

    def _pad_grow(self):
        """Map room ahead of _end when less than PAD_AHEAD is left (writer
        thread; the caller holds _io).  The padding header at _end is
        written to reach the new size first, then the file is extended: a
        kill in between leaves a skippable frame cut short at the file's
        end, as a kill inside a write(2) leaves a frame cut short.  Once
        this failed (a full disk, no /proc, a file system that cannot map
        files), it is not tried again: frames go by pwrite, still padded."""
        if self._fsize is None or self._dead or self._fd < 0 or self._map_failed:
            return
        end = self._end
        if self._map is not None and end >= self._map_at and \
                end + PAD_AHEAD <= self._map_at + len(self._map):
            return
        at = end & ~(mmap.ALLOCATIONGRANULARITY - 1)
        size = at + PAD_MAP
        if size < self._fsize:
            size = self._fsize
        old = self._fsize
        if size > old:
            # (size - end >= PAD_MAP - a page).  The file is extended with
            # its blocks allocated, not as a hole: a store into a hole's
            # page on a full disk would be SIGBUS, where this fails here.
            try:
                os.pwrite(self._fd, _zstd.skippable_header(size - end - _HDR), end)
                os.posix_fallocate(self._fd, old, size - old)
            except OSError:
                self._map_failed = True
                self._pad_restore(old)
                return
            self._fsize = size
        try:
            self._pad_unmap()
            # (the writer's fd is write-only; a shared writable mapping
            # needs one opened for reading too: the same file, again)
            fd = os.open("/proc/self/fd/%d" % self._fd, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            try:
                self._map = mmap.mmap(fd, self._fsize - at, mmap.MAP_SHARED,
                                      mmap.PROT_READ | mmap.PROT_WRITE, offset=at, **_NO_DUP)
            finally:
                os.close(fd)
            self._map_at = at
        except (OSError, ValueError):
            self._map_failed = True
            self._pad_unmap()

    def _pad_restore(self, old):
        """The padding as it was before _pad_grow failed (no mapping: frames
        go by pwrite, padded the same)."""
        self._pad_unmap()
        end = self._end
        try:
            os.ftruncate(self._fd, old)
            if old > end:
                os.pwrite(self._fd, _zstd.skippable_header(old - end - _HDR), end)
        except OSError:
            pass           # (a write error: the next frame's write reports it)

    def _pad_unmap(self):
        m, self._map = self._map, None
        if m is not None:
            try:
                m.close()
            except (OSError, ValueError, BufferError):
                pass

    def _pad_drop(self, cut):
        """No mapping, and the file's end at _end (cut: truncated there, as
        at close; else the file is being replaced).  The caller holds _io;
        padding stays on for the next file unless the writer is closing."""
        self._pad_unmap()
        if self._fsize is None:
            return
        if cut and self._fsize > self._end and self._fd >= 0 and not self._dead:
            try:
                os.ftruncate(self._fd, self._end)
            except OSError:
                pass      # (the padding stays: a skippable frame)
        self._fsize = self._end
