"""Read a trace back into Python (for tests and quick looks; the C analyzer
is the real reader).  Accepts zstd (one or more frames) and plain JSON Lines.

``read_events`` streams: it decodes the file a megabyte at a time and yields
one event at a time, so its memory does not grow with the trace (keep the
events you need, not the whole list)."""

import json

from . import _zstd

__all__ = ["read_events", "read_text", "TraceCut"]

_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20


class TraceCut(Exception):
    """The trace ends inside a zstd frame or inside a line.  Raised by
    ``read_events`` after it has yielded every complete event before the
    cut; ``count`` is how many that was."""

    def __init__(self, msg, count):
        super().__init__(msg)
        self.count = count


def _chunks(path):
    """(decoded byte chunks iterator, state dict with "cut")."""
    state = {"cut": False}

    def gen():
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0)
            if head != _MAGIC:
                while True:
                    data = f.read(_CHUNK)
                    if not data:
                        return
                    yield data
            z = _zstd.load()
            if z is None:
                raise RuntimeError("%s is zstd-compressed and libzstd is not available" % path)
            try:
                for data in z.decompress_iter(f, _CHUNK):
                    yield data
            except _zstd.TruncatedError:
                state["cut"] = True
    return gen(), state


def read_text(path):
    """(text, cut): the whole decoded text and whether the zstd stream was
    cut (loads everything: for small traces)."""
    it, state = _chunks(path)
    data = b"".join(it)
    return data.decode("utf-8", "replace"), state["cut"]


def read_events(path, allow_cut=False):
    """Yield the events (dicts) of a trace, in order, streaming.  A cut
    trace (inside a frame or a line) raises TraceCut after the last complete
    event unless allow_cut, in which case the iteration just ends there."""
    it, state = _chunks(path)
    rest = b""
    n = 0
    for data in it:
        if rest:
            data = rest + data
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            yield json.loads(data[start:nl])
            n += 1
            start = nl + 1
        rest = data[start:]
    cut = state["cut"] or bool(rest)
    if cut and not allow_cut:
        raise TraceCut("%s: trace was cut after %d complete events" % (path, n), n)
