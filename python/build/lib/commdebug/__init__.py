"""commdebug: record what CommDebugMode sees, per rank, into a trace file.

    from commdebug import Recorder
    rec = Recorder("traces/rank{rank}.zst")
    for step in range(steps):
        with rec(label="step %d" % step):
            model(x).sum().backward()

Analyze the traces with the ``commdebug`` command (``commdebug analyze
traces/rank0.zst``).  ``python -m commdebug.record --out DIR -- script.py``
records an unmodified script.
"""

from .recorder import RECORDER_VERSION as __version__
from .recorder import Recorder
from .tracefile import read_events

__all__ = ["Recorder", "read_events", "__version__"]
