"""The process around the recorders: its life and its rank.

* the Recorders with an open trace (``_LIVE``) and those inside a region
  (``_ACTIVE``, innermost last);
* init_process_group, wrapped to learn the rank as soon as it returns; a
  fork (a forked child records nothing); the exit handlers (the process
  groups' threads are given time to settle, the traces left open are
  closed);
* how the process ends (``note_ending``; sys.excepthook and sys.exit are
  wrapped to see it): the end event every trace gets;
* the rank: the launchers' variables, torch.distributed's default group,
  and ``TraceLife``, the part of the Recorder that names its trace by the
  rank, moves it when the rank is learned and closes it.

Nothing here imports the Recorder: it reaches the recorders through
``_LIVE`` and ``_ACTIVE``.
"""

import atexit
import json
import os
import socket
import sys
import time

import torch

from . import _nccl
# The writers' exit handler must be registered before the ones below: atexit
# runs the last registered first, and _close_live needs open writers.
from . import _writer  # noqa: F401
from ._version import __version__ as RECORDER_VERSION

_dumps = json.dumps

# Recorders currently inside a region, innermost last.
_ACTIVE = []

_notes = set()


# Recorders with an open trace (weak references).
_LIVE = []


def _live():
    out = []
    for r in list(_LIVE):
        rec = r()
        if rec is None:
            _LIVE.remove(r)
        else:
            out.append(rec)
    return out


def _after_init_process_group():
    for rec in _live():
        if rec._forked_from is not None:
            _note("process %d was forked from recording process %d; it is not recorded "
                  "(the parent's trace is the parent's)" % (os.getpid(), rec._forked_from))
            continue
        try:
            rec._learn_rank()
        except Exception as e:  # never break the program's init
            _note("could not rename the trace after init_process_group: %s" % e)


def _wrap_init_process_group():
    """Learn the rank as soon as init_process_group returns (the trace is
    renamed then); DeviceMesh and the like call it through the module."""
    dist = _dist()
    if dist is None:
        return
    c = dist.distributed_c10d
    orig = c.init_process_group
    if getattr(orig, "_commdebug_orig", None) is not None:
        return

    def init_process_group(*args, **kwargs):
        out = orig(*args, **kwargs)
        _after_init_process_group()
        return out
    init_process_group.__name__ = orig.__name__
    init_process_group.__doc__ = orig.__doc__
    init_process_group.__wrapped__ = orig
    init_process_group._commdebug_orig = orig
    c.init_process_group = init_process_group
    if getattr(dist, "init_process_group", None) is orig:
        dist.init_process_group = init_process_group


def _after_fork_in_child():
    for rec in _live():
        rec._forked_from = os.getppid()


_SETTLE_S = 0.2


def _settle_communication_threads():
    """At exit, before the interpreter finalizes: give the process groups'
    worker threads time to drop the collectives they just finished.

    A gloo worker signals a collective complete and only then destroys its
    work object, and with it the last reference to tensors that have a
    Python object (the program's, and C++ tensors that a dispatch mode was
    handed).  Freeing such a tensor takes the GIL; once finalization has
    begun, a thread that asks for the GIL is ended with pthread_exit, whose
    unwinding through the worker's C++ frames calls std::terminate:
    "terminate called without an active exception" at exit (torch 1.13,
    DDP and new_group, with a process group left for exit to clean up).
    Sleeping here releases the GIL while threads may still take it."""
    if not _LIVE:
        return
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            time.sleep(_SETTLE_S)
    except Exception:
        pass


atexit.register(_settle_communication_threads)


def _close_live():
    """At exit: close the Recorders the program did not close, so that a
    trace still waiting for its rank gets its name (the writers' own exit
    handler, which runs after this one, only closes files)."""
    for rec in _live():
        try:
            if rec._in_region:
                rec.__exit__(None, None, None)
            rec.close()
        except Exception as e:
            _note("closing %s at exit: %s" % (rec.path, e))


atexit.register(_close_live)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# How this process is ending, as far as the recorder can see it: the end
# event every trace gets when its Recorder closes (commdebug-trace(5)).
_ENDING = {"exc": None, "code": None}
_end_hooks = []


def _exc_name(tp):
    mod = getattr(tp, "__module__", None)
    name = getattr(tp, "__qualname__", None) or getattr(tp, "__name__", "?")
    return name if mod in (None, "builtins") else "%s.%s" % (mod, name)


def note_ending(exc=None, code=None):
    """Say how the process is ending: an exception that nothing caught, or
    the status passed to sys.exit.  The traces closed after this end with
    it.  commdebug.record calls it for the script it runs; the hooks below
    see the rest."""
    if isinstance(exc, SystemExit):
        code, exc = exc.code, None
    if exc is not None:
        try:
            msg = str(exc)
        except Exception:
            msg = "<str() failed>"
        _ENDING["exc"] = (_exc_name(type(exc)), msg)
    elif code is not None or _ENDING["code"] is None:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            code = 1          # sys.exit("message") prints it and exits 1
        _ENDING["code"] = code


def _install_end_hooks():
    """An uncaught exception of the main thread (sys.excepthook) and
    sys.exit's status are noted, then handed on unchanged.  Installed once,
    when the first trace opens."""
    if _end_hooks:
        return
    _end_hooks.append(True)
    prev_hook = sys.excepthook
    prev_exit = sys.exit

    def excepthook(tp, value, tb):
        try:
            note_ending(exc=value if value is not None else tp())
        except Exception:
            pass
        return prev_hook(tp, value, tb)

    def exit(status=None):
        note_ending(code=status)
        prev_exit(status)
    exit.__doc__ = getattr(prev_exit, "__doc__", None)
    sys.excepthook = excepthook
    sys.exit = exit


def _end_line():
    exc = _ENDING["exc"]
    if exc is not None:
        return '{"ev":"end","how":"exception","exc":%s,"msg":%s' % (
            _dumps(exc[0]), _dumps(exc[1][:4096]))
    code = _ENDING["code"]
    if code:
        return '{"ev":"end","how":"exit","code":%d' % code
    return '{"ev":"end","how":"exit"'


def _note(msg):
    """Say something on stderr once per process."""
    if msg in _notes:
        return
    _notes.add(msg)
    sys.stderr.write("commdebug: %s\n" % msg)


def _active():
    return _ACTIVE[-1] if _ACTIVE else None


def _dist():
    try:
        import torch.distributed as dist
        if dist.is_available():
            return dist
    except Exception:
        pass
    return None


# Launchers' variables: torchrun / torch.distributed.launch, Slurm srun,
# Open MPI mpirun, PMI and PMIx launchers (MPICH, Intel MPI).
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_WORLD_VARS = {"RANK": "WORLD_SIZE", "SLURM_PROCID": "SLURM_NTASKS",
               "OMPI_COMM_WORLD_RANK": "OMPI_COMM_WORLD_SIZE", "PMI_RANK": "PMI_SIZE",
               "PMIX_RANK": "PMIX_SIZE"}
# Set by a recording process that named its trace by a launcher variable
# ("VAR=value"): a child that inherits the same value (a worker it spawns, a
# data loader worker) is not that rank.
_ENV_MARK = "COMMDEBUG_ENV_RANK"


def _int_env(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _pg_rank_world():
    """(rank, world_size) of torch.distributed's default group, or None."""
    dist = _dist()
    try:
        if dist is not None and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return None


def _launcher_rank_world():
    """(rank, world_size or None, "VAR=value") from the launcher's
    variables, or None."""
    inherited = os.environ.get(_ENV_MARK)
    for var in _RANK_VARS:
        rank = _int_env(var)
        if rank is None or rank < 0:
            continue
        mark = "%s=%d" % (var, rank)
        if mark == inherited:
            return None
        return rank, _int_env(_WORLD_VARS[var]), mark
    return None


def _first_event(path):
    """The first event of a trace file, or None when it cannot be read."""
    try:
        from .tracefile import read_events
        for ev in read_events(path, allow_cut=True):
            return ev if isinstance(ev, dict) else None
    except Exception:
        pass
    return None


class TraceLife:
    """The Recorder's trace in the life of the process (a base of
    commdebug.recorder.Recorder): its meta event, the name it waits under
    for the rank, its move once the rank is known, and its close."""

    # ------------------------------------------------------------------ file
    def _meta_line(self):
        meta = {
            "ev": "meta", "format": "commdebug-trace", "version": 1,
            "rank": self._rank, "world_size": self._world, "host": socket.gethostname(),
            "pid": os.getpid(), "t0": self._t0, "torch": torch.__version__,
            "recorder": "commdebug-py " + RECORDER_VERSION,
            # this recorder ends every trace with an end event: one without
            # it was cut off (the process was killed or died in C)
            "ends": True,
        }
        if self.light:
            # no op events but collectives: commdebug says so at noise 1-3
            meta["light"] = True
        job = os.environ.get("COMMDEBUG_RECORD_JOB")
        if job:
            meta["job"] = job
        return _dumps(meta, separators=(",", ":")) + "\n"

    def _pending_path(self):
        """Where the trace waits for its rank: a hidden file (the analyzer
        skips names starting with a dot) named after the process."""
        d, base = os.path.split(self.path_template)
        return os.path.join(d, "." + base.replace("{rank}", "-pending-%d" % os.getpid()))

    def _learn_rank(self):
        """Rename the trace after torch.distributed's rank once the default
        group exists (the meta event is rewritten with it)."""
        if self._rank_src == "pg" or self._w is None or self._forked_from is not None:
            return
        pg = _pg_rank_world()
        if pg is None:
            return
        if pg == (self._rank, self._world) and self._rank_src == "env":
            self._rank_src = "pg"
            return
        self._rank, self._world = pg
        self._rank_src = "pg"
        self._move(self.path_template.replace("{rank}", str(self._rank)))

    def _move(self, newpath):
        p = self._w.relocate(newpath, self._meta_line())
        if p is not None:
            self.path = p
            _nccl.point_to(_nccl.sibling_trace(p))

    @property
    def dropped(self):
        """Events recorded but not written (a write error, a stalled file)."""
        return self._w.dropped if self._w is not None else 0

    def flush(self):
        """Write what is buffered now (waits for a stalled file at most
        COMMDEBUG_EXIT_TIMEOUT seconds)."""
        if self._w is not None:
            self._w.flush()

    def _other_traces_of_this_job(self):
        """Whether other processes of this job wrote traces in this
        recorder's directory.  A trace is of this job when its meta names
        the same job (COMMDEBUG_RECORD_JOB, which commdebug.record gives
        every process it starts) or, without a job, when it was opened after
        this one (a worker started by this process).  A trace of an earlier
        run into the same directory is neither, however recent."""
        d, base = os.path.split(self.path_template)
        pre, _, post = base.partition("{rank}")
        job = os.environ.get("COMMDEBUG_RECORD_JOB") or None
        mine = os.path.basename(self.path)
        try:
            names = os.listdir(d or ".")
        except OSError:
            return False
        for n in names:
            if n == mine or n.startswith(".") or not (n.startswith(pre) and n.endswith(post)):
                continue
            if n.endswith(".nccl.zst"):
                continue
            p = os.path.join(d, n)
            try:
                if os.stat(p).st_mtime_ns < self._t0 - 10 ** 9:
                    continue      # not written since this process started
            except OSError:
                continue
            meta = _first_event(p)
            if meta is None or meta.get("ev") != "meta" or meta.get("pid") == os.getpid():
                continue
            if job is not None:
                if meta.get("job") == job:
                    return True
            elif isinstance(meta.get("t0"), int) and meta["t0"] >= self._t0:
                return True
        return False

    def close(self):
        """Flush and close the trace file (done at interpreter exit anyway).
        A trace still waiting for its rank (no launcher variable, no
        init_process_group) becomes rank 0's, unless other ranks of this job
        wrote traces beside it: then this process was their launcher and its
        trace is removed."""
        if self._in_region:
            raise RuntimeError("commdebug: close() inside a recording region")
        w = self._w
        if w is None or w._closed:
            return
        self._learn_rank()
        discard = False
        if self._rank_src is None and "{rank}" in self.path_template \
                and self._forked_from is None:
            if self._other_traces_of_this_job():
                discard = True
            else:
                self._rank_src = "default"
                self._move(self.path_template.replace("{rank}", "0"))
        self._hooks_close()
        if not discard and self._forked_from is None:
            self._emit(_end_line())
        w.close(discard=discard)
