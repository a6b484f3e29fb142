"""Bounded traces (light mode, ``Recorder(light=True, keep=N)``): the last N
to 2N regions in full, the earlier ones as ``trim`` events.

A job that runs for days must be recordable without its trace growing with
it, as PyTorch's Flight Recorder keeps its last entries.  With ``keep=N``,
whenever the file holds 2N regions the writer thread rewrites it with the
last N:

* its first frame, the meta line, as it was;
* a frame of what the kept regions need: every ``pg`` and ``ddp`` event
  written so far, and the ``trim`` events: for every N regions dropped, one
  per process group, saying up to which region was dropped, up to which
  sequence number of the group, and how many collectives and bytes the
  group had in those regions (commdebug ranks starts comparing a group after
  the highest such sequence number of any rank: the ranks of a job drop
  regions at different moments);
* the frame that holds the region_enter of the first kept region, cut just
  before it and compressed again;
* every later frame, byte for byte.

The new file is written beside the old one under a hidden name and renamed
over it; what the recorder appended meanwhile is copied first, under the
writer's lock, so nothing is lost.  Until the rename the old file is whole,
so a process killed at any moment leaves a readable trace with every event
of its last N regions, up to its last collective (see _writer).

The recording thread only does bookkeeping: a mark (an int, the region
number) before each region_enter line, whose place in the file the writer
notes (TraceWriter.index), the sequence numbers of each group at each region
start, and each collective's group and bytes.
"""

import io
import json
import os
import stat
import threading



__all__ = ["Bounded"]

_dumps = json.dumps


class Bounded:
    def __init__(self, keep):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError("keep must be a positive number of regions, not %r" % (keep,))
        self.keep = keep
        self._lock = threading.Lock()
        self.state = []      # (region when written, line) of pg and ddp events
        self.trims = []      # trim event lines written so far
        self.regions = {}    # region -> [label, t, {pg: seq at its start}, {pg: [n, bytes]}]
        self.dropped = 0     # the last region dropped
        self.compactions = 0
        self.off = False     # bounding was turned off (see _stop)
        self._busy = threading.Lock()   # one rewrite at a time (writer thread, flush)

    # --------------------------------------------------- recording thread
    def note_state(self, region, line):
        with self._lock:
            self.state.append((region, line))

    def note_region(self, region, label, t, seqs):
        if self.off:
            return
        with self._lock:
            self.regions[region] = [label, t, dict(seqs), {}]

    def note_coll(self, region, pg, nbytes):
        r = self.regions.get(region)
        if r is not None and pg is not None:
            c = r[3].get(pg)
            if c is None:
                r[3][pg] = [1, nbytes]
            else:
                c[0] += 1
                c[1] += nbytes

    # ------------------------------------------------------ writer thread
    def maybe_compact(self, w):
        """Rewrite w's file without its oldest regions when it holds 2N."""
        if self.off:
            return
        with self._busy:
            self._maybe_compact(w)

    def _maybe_compact(self, w):
        try:
            self._compact(w)
        except _Moved:
            pass             # renamed meanwhile (the rank learned): next time
        except Exception as e:      # the writer thread must go on writing
            with w._io:
                self._stop(w, "could not bound %s (%s: %s); it keeps growing"
                           % (w.path, type(e).__name__, e))

    def _cut(self, index):
        """(the first region kept, its frame, its line in the frame) when the
        frames of index hold 2N regions, else None.  The regions counted
        are those whose region_enter is in the file, the one in progress
        included: N are kept, so keep=1 keeps only the region in progress."""
        # (called under the writer's lock at every round: the first and the
        # last frames with a mark, not a list of every mark)
        first = next((f[3][0][0] for f in index if f[3]), None)
        if first is None:
            return None
        last = next(f[3][-1][0] for f in reversed(index) if f[3])
        if last - first + 1 < 2 * self.keep:
            return None
        cut = last - self.keep + 1          # the first region kept
        for fi, f in enumerate(index):
            for r, li in f[3]:
                if r == cut:
                    return cut, fi, li
        return None

    def _stop(self, w, why):
        """Turn bounding off for good, with one warning (the caller holds
        w._io: the writer then stops indexing its frames).  w.bounded stays
        (TraceWriter reads it twice without the lock, from two threads):
        maybe_compact returns at once from now on."""
        _warn_once(w, why)
        w.index = None
        self.off = True
        with self._lock:
            self.regions.clear()

    def _trim_lines(self, cut):
        """The trim events of regions up to cut - 1 (and forget them)."""
        with self._lock:
            gone = sorted(r for r in self.regions if r < cut)
            if not gone:
                return []
            start = self.regions.get(cut)
            seqs = start[2] if start is not None else {}
            last = gone[-1]
            label, t = self.regions[last][0], self.regions[last][1]
            tot = {}
            for r in gone:
                for pg, (n, b) in self.regions.pop(r)[3].items():
                    x = tot.setdefault(pg, [0, 0])
                    x[0] += n
                    x[1] += b
        lines = []
        head = '{"ev":"trim","region":%d' % last
        if label is not None:
            head += ',"label":' + _dumps(str(label))
        for pg in sorted(set(seqs) | set(tot)):
            n, b = tot.get(pg, (0, 0))
            lines.append('%s,"pg":%s,"seq":%d,"count":%d,"bytes":%d,"t":%d}\n'
                         % (head, _dumps(pg), seqs.get(pg, 0), n, b, t))
        if not lines:
            lines.append('%s,"count":0,"t":%d}\n' % (head, t))
        return lines

    def _compact(self, w):
        # What the file holds now (only the writer thread appends compressed
        # frames and rewrites the file; the recording thread may append raw
        # frames, and flush() on another thread merges the index entries of
        # raw frames: all under the lock; those appended meanwhile are copied
        # under the lock at the end).
        with w._io:
            w._settle()         # (a frame the C module's thread still writes)
            if w._dead or w._fd < 0 or w._tail_at is not None or w.index is None:
                return
            at = self._cut(w.index)
            if at is None:
                return
            cut, fi, li = at
            end = w._end
            frames = [list(f) for f in w.index]
            fd, path, meta_len = w._fd, w.path, w._meta_len
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                # a device, a FIFO (/dev/null for a dry run): written as
                # it comes, never replaced by a rewritten file
                self._stop(w, "%s is not a regular file: its regions are not bounded" % path)
                return
            rfd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._rewrite(w, cut, fi, li, end, frames, fd, rfd, path, meta_len)
        finally:
            os.close(rfd)

    def _rewrite(self, w, cut, fi, li, end, frames, fd, rfd, path, meta_len):
        # (without libzstd the frames are plain JSON Lines, rewritten as such)
        z = w._z
        off, length, nlines, fmarks = frames[fi]
        first = os.pread(rfd, length, off)
        data = b"".join(z.decompress_iter(io.BytesIO(first))) if z is not None else first
        lines = data.split(b"\n")
        kept = b"\n".join(lines[li:])
        trims = self._trim_lines(cut)
        self.trims.extend(trims)
        with self._lock:
            # those written before the first kept region; later ones are in
            # the frames kept
            state = "".join(line for r, line in self.state if r < cut)
        head_data = (state + "".join(self.trims)).encode("utf-8", "surrogatepass")
        with w._zlock:
            meta = os.pread(rfd, meta_len, 0)
            comp = w._comp
            head = comp.frame(head_data) if comp is not None else head_data
            kept_frame = comp.frame(kept) if comp is not None else kept
        d, base = os.path.split(path)
        tmp = os.path.join(d, ".%s.bound%d" % (base, os.getpid()))
        nfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                      0o644)
        try:
            import fcntl
            fcntl.flock(nfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            rest_at = off + length
            parts = [meta, head, kept_frame]
            pos = 0
            for p in parts:
                _write_all(nfd, p)
                pos += len(p)
            _copy(rfd, nfd, rest_at, end)
            with w._io:
                w._settle()
                if w._fd != fd or w._dead or w.index is None:
                    raise _Moved()
                _copy(rfd, nfd, end, w._end)       # appended meanwhile
                os.rename(tmp, path)
                os.close(fd)
                w._fd = nfd
                shift = (len(meta) + len(head) + len(kept_frame)) - rest_at
                lines_kept = nlines - li
                new_index = [[len(meta) + len(head), len(kept_frame), lines_kept,
                              [(r, i - li) for r, i in fmarks if i >= li]]]
                for f in w.index[fi + 1:]:
                    f[0] += shift
                    new_index.append(f)
                w.index[:] = new_index
                if w._tail_at is not None:
                    w._tail_at += shift
                w._end += shift
                w._pad_drop(cut=False)      # (the mapping was the old file's)
                os.lseek(nfd, w._end, os.SEEK_SET)
                w.bytes_out += shift
        except BaseException:
            try:
                os.close(nfd)
            except OSError:
                pass
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.dropped = cut - 1
        self.compactions += 1


class _Moved(Exception):
    pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _copy(src, dst, start, end):
    while start < end:
        chunk = os.pread(src, min(1 << 20, end - start), start)
        if not chunk:
            break
        _write_all(dst, chunk)
        start += len(chunk)


_warned = set()


def _warn_once(w, msg):
    if msg not in _warned:
        _warned.add(msg)
        from ._claim import _warn
        _warn(msg)
