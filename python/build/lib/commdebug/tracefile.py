"""Read a trace back into Python (for tests and quick looks; the C analyzer
is the real reader).  Accepts zstd (one or more frames) and plain JSON Lines."""

import json

from . import _zstd

__all__ = ["read_events", "read_text", "TraceCut"]

_MAGIC = b"\x28\xb5\x2f\xfd"


class TraceCut(Exception):
    """The trace ends inside a zstd frame or inside a line; ``events`` holds
    every complete event before the cut."""

    def __init__(self, msg, events):
        super().__init__(msg)
        self.events = events


def read_text(path):
    """(text, cut): the decoded text and whether the zstd stream was cut."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != _MAGIC:
        return data.decode("utf-8", "replace"), False
    z = _zstd.load()
    if z is None:
        raise RuntimeError("%s is zstd-compressed and libzstd is not available" % path)
    try:
        return z.decompress(data).decode("utf-8", "replace"), False
    except _zstd.TruncatedError as e:
        return e.data.decode("utf-8", "replace"), True


def read_events(path, allow_cut=False):
    """The list of events (dicts) in a trace.  A cut trace raises TraceCut
    unless allow_cut, in which case the complete events are returned."""
    text, cut = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        cut = True
        lines.pop()
    events = [json.loads(line) for line in lines]
    if cut and not allow_cut:
        raise TraceCut("%s: trace was cut after %d complete events" % (path, len(events)),
                       events)
    return events
