"""The raw frames at the end of a trace: ``RawTail``, a base of
_writer.TraceWriter.

The recording thread writes the lines it must get into the file before a
collective as a frame of raw blocks (_zstd.raw_frame: a copy, no
compression, whose cost with cold caches after a training step is 100 us);
the writer thread then replaces those raw frames with one compressed frame
(``_compact``: every round, or in light mode once the first is
``compact_after`` seconds old or they hold COMPACT_BYTES, ``_compact_due``),
and keeps the index of frames of a bounded trace in step (``_merge_index``)."""

import os
import time

from . import _zstd

__all__ = ["RawTail", "COMPACT_BYTES"]

# Light mode compacts the raw tail once it holds this many bytes, or once its
# first frame is compact_after seconds old (every round otherwise, and for a
# bounded trace).
COMPACT_BYTES = 256 << 10


class RawTail:
    compact_after = None          # seconds (light mode), or None: every round

    def _compact_due(self):
        """Whether the writer thread's round compacts the raw tail now (a
        bounded trace's every round: its rewrite waits for a compacted tail)."""
        if self.compact_after is None or self._closing or self.bounded is not None:
            return True
        at = self._tail_at
        return at is None or self._end - at >= COMPACT_BYTES or \
            time.monotonic() - self._tail_t >= self.compact_after

    def _compact(self):
        """Replace the raw frames at the end of the file by one compressed
        frame of the same lines (writer thread; the compression runs outside
        _io, so the training thread never waits for it).  The compressed
        frame is written over the raw ones in one write, followed by a
        skippable frame's header over the bytes left, and the file is then
        cut after it: a process killed at any point leaves a readable
        trace with every line."""
        with self._io:
            if self._tail_at is None or self._dead or self._fd < 0:
                return
            at, parts, end = self._tail_at, list(self._tail), self._end
            if sum(map(len, parts)) != end - at:
                # (a frame not in the tail after it: never overwritten; the
                # raw frames stay, readable as they are)
                self._tail_at, self._tail = None, []
                return
        data = b"".join(b for f in parts for b in _zstd.raw_blocks(f))
        with self._zlock:
            out = self._comp.frame(data)
        with self._io:
            if self._tail_at != at or self._dead or self._fd < 0:
                return
            span = end - at
            if self._fsize is not None and self._end == end and len(out) <= span:
                # (the padded end: the compressed frame ends the frames, the
                # padding header behind it; no ftruncate)
                try:
                    self._pad_write(out, at, mapped=False)
                except OSError as e:
                    self._fail(e, 0)
                    return
                self._compacted(at, end, parts, out)
                self._end = at + len(out)
                self._tail_at = None
                self._tail = []
                return
            if len(out) == span:
                blob = out
            elif len(out) + 8 <= span:
                blob = out + _zstd.skippable_header(span - len(out) - 8)
            else:
                return       # (incompressible: the raw frames stay)
            if not self._write(blob, 0, at):
                return
            self._compacted(at, end, parts, out)
            if self._end == end:
                try:
                    os.ftruncate(self._fd, at + len(out))
                    os.lseek(self._fd, at + len(out), os.SEEK_SET)
                    self._end = at + len(out)
                except OSError:
                    pass     # the skippable frame stays
                self._tail_at = None
                self._tail = []
            else:
                # raw frames the training thread wrote meanwhile: the next tail
                self._tail = self._tail[len(parts):]
                self._tail_at = end
                self._tail_t = time.monotonic()

    def _compacted(self, at, end, parts, out):
        """The raw frames parts in [at, end) are now the frame out: counted."""
        if self.index is not None:
            self._merge_index(at, end, len(out))
        self.bytes_out -= end - at - len(out)
        self.frames -= len(parts) - 1

    def _merge_index(self, at, end, length):
        """The frames in [at, end) of the index became one frame of length."""
        ix = self.index
        k = len(ix)
        while k and ix[k - 1][0] >= end:
            k -= 1
        j = k
        while j and ix[j - 1][0] >= at:
            j -= 1
        lines, marks = 0, []
        for off, _, nl, mk in ix[j:k]:
            marks.extend((r, i + lines) for r, i in mk)
            lines += nl
        ix[j:k] = [[at, length, lines, marks]]
