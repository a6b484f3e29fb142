"""Frames handed to the C module's thread (``AsyncWrite``), which writes
them without the interpreter's lock: ``Handoff``, a base of
_writer.TraceWriter.

A region exit's lines go to that thread in one of two ways:

* as lines, which the thread compresses into one frame (with its content
  checksum, at the writer's level) and writes: where the thread was given
  libzstd (``_zstd.Compressor.entry_points``) and no raw frames wait at the
  file's end for the writer thread to compress (a frame after them would
  keep them from being compacted), the trace has no frame index (a
  bounded trace's index needs each frame's length when it is made), and
  its end is not padded (light mode's, _padtail: that thread would write
  over the padding header without moving it).  The frame's length is known
  once it is written: ``_settle`` adds it to the file's end;
* else as a raw frame made here (``_drain_locked``), which the writer thread
  compresses later with the raw frames before it (``RawTail._compact``).
  A raw frame goes to that thread to be written (``_put``) only where the
  end is not padded either.
"""

import os

__all__ = ["Handoff"]


class Handoff:
    def _handoff_init(self, native, level):
        """The C module's thread for this writer's region exits (None where
        it cannot write: no C module, not a regular file); self._awz: it
        compresses them itself."""
        aw = getattr(native, "AsyncWrite", None)
        self._aw = aw() if aw is not None and self.regular and self._fd >= 0 else None
        self._awz = False
        if self._aw is not None and self._z is not None and \
                os.environ.get("COMMDEBUG_AW_COMPRESS", "1") != "0":
            try:
                zc = self._z.compressor(level)
                self._aw.compress_with(zc, *zc.entry_points())
                self._awz = True
            except Exception:
                pass             # (raw frames, compacted by the writer thread)

    def sleep_between_frames(self):
        """Light mode: every frame comes from the writer thread (region
        exits leave their lines to it), which can afford to wake the C
        module's thread; so that thread sleeps after each frame instead of
        looking at its queue every 1 ms, a wake-up each time, taken from
        the CPUs the training job runs on."""
        if self._aw is not None:
            self._aw.set_polls(0)

    def _lines_to_thread(self):
        """Whether the lines can go to the C module's thread, which
        compresses them (see the module's doc)."""
        return self._awz and self._formatted and self._tail_at is None and \
            self.index is None and not self._dead and self._fd >= 0 and self._fsize is None

    def _hand_lines(self):
        """A region exit's lines handed to the C module's thread to compress
        and write (the caller holds _io, and the thread's last frame is
        written): True when handed, or when there was nothing to hand."""
        if not self._lines_to_thread():
            return False
        with self._take:
            if len(self.buf) == 0:
                return True
            # (the LineBuf's own buffer goes to the thread: nothing copied)
            got = self._aw.submit_lines(self._fd, self.buf, self._end)
        if got is None:
            # (an earlier write failed, or no thread can start: the lines
            # go the way of a raw frame, which reports the failure)
            return False
        self._marks, n, nbytes = got
        self.bytes_in += nbytes
        return True

    def _settle(self, timeout=None):
        """Wait for the frames handed to the C module's thread to be written
        (the caller holds _io); False when timeout seconds passed first.  A
        failed write fails the writer as one of its own would."""
        if self._aw is None:
            return True
        r = self._aw.wait(timeout)
        if r is None:
            return False
        self._settled(*r)
        return True

    def _settled(self, err, dropped, zbytes, zframes):
        """What the C module's thread says of the frames it wrote since it
        last said (AsyncWrite.wait), counted."""
        if zbytes:
            # the compressed frames' lengths, known now
            self._end += zbytes
            self.bytes_out += zbytes
            self.frames += zframes
        if err and not self._dead:
            self._fail(OSError(err, os.strerror(err)), dropped)
        elif dropped:
            self.dropped += dropped

    def _sync_lines(self):
        """A region end's sync (the caller holds _io): _settle(0), then
        _hand_lines(), in one call of the C module where the lines go to its
        thread (queued after the frames it still writes, if any).  True when
        the lines were handed (or there were none), False while it has
        MAX_QUEUED frames to write (nothing done), None where this does not
        apply (the caller takes the long way)."""
        if self._closed or not self._lines_to_thread():
            return None
        with self._take:
            r = self._aw.sync_lines(self._fd, self.buf, self._end)
        if r is None:
            return False
        err, dropped, zbytes, zframes, (marks, n, nbytes) = r
        self._settled(err, dropped, zbytes, zframes)
        if marks is None:
            # (no lines, or an earlier write failed: the lines go the way of
            # a raw frame, which reports the failure)
            if self.buf:
                self._drain_locked(raw=True, later=True)
            return True
        self._marks = marks
        self.bytes_in += nbytes
        return True
