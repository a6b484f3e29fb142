"""The Recorder: CommDebugMode's observation points, written to a trace file.

A Recorder is a context manager usable wherever ``CommDebugMode`` is used.
Each entry is one *region* (what one ``with CommDebugMode():`` block sees).
Inside a region it pushes a TorchDispatchMode and registers the same global
module hooks as CommDebugMode's module tracker, but instead of keeping
counts it writes one event per observation (see commdebug-trace(5); the C
analyzer replays them through the module-tracker state machine).

What is mirrored from the reference (torch/distributed/_tools/mod_tracker.py
and torch/distributed/tensor/debug/_comm_mode.py):

* module names (``_mod_name``) follow ModTracker._get_mod_name exactly, and
  persist across the regions of one Recorder like the tracker's do;
* the global forward pre-hook registers the input multi-grad hook ("all")
  only outside backward and only when an input requires grad; the global
  forward hook registers the output hook (mode "any") likewise;
* the output hook queues the end-of-backward engine callback once per
  backward pass (``bw_end``);
* outside activation-checkpoint recompute the pre-hook makes sure the module
  has a module-local forward hook that runs after every forward hook the
  module already has (tensor-parallel output redistribution): ``fw_done``.
  One per module: an earlier registration is kept while it is still the last
  hook and replaced otherwise, so a module called twice does not accumulate
  hooks (the fix of pytorch#191452);
* ops on DTensors are recorded with their DTensor arguments and then answered
  with NotImplemented, so the DTensor desugars and its local ops and
  collectives are recorded as well.
"""

import atexit
import json
import os
import socket
import sys
import time
import weakref

import torch

from . import _compat as C
from . import _collectives as K
from . import _nccl
from ._version import __version__ as RECORDER_VERSION
from ._writer import TraceWriter

__all__ = ["Recorder", "RECORDER_VERSION"]

_dumps = json.dumps
_Tensor = torch.Tensor
_is_bw = C.is_bw
_clock = time.monotonic_ns

# Recorders currently inside a region, innermost last.
_ACTIVE = []
try:
    from torch.nn.parallel import DistributedDataParallel as _DDP
except Exception:  # torch built without distributed
    _DDP = None
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


def _flat_tensors_requiring_grad(x):
    """Tensors requiring grad among the leaves of x, as tree_flatten finds them."""
    if isinstance(x, _Tensor):
        return [x] if x.requires_grad else []
    if type(x) is tuple:
        simple = True
        for a in x:
            if not isinstance(a, _Tensor):
                simple = False
                break
        if simple:
            return [a for a in x if a.requires_grad]
    from torch.utils._pytree import tree_flatten
    leaves, _ = tree_flatten(x)
    return [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]


def _ints(shape):
    out = []
    for d in shape:
        try:
            out.append(int(d))
        except Exception:
            out.append(0)
    return out


def _shape_json(shape):
    return "[" + ",".join([str(d) for d in _ints(shape)]) + "]"


class Recorder:
    """Record what CommDebugMode would see into a per-rank trace file.

    ``path`` may contain ``{rank}``: it becomes the launcher's rank
    variable (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK)
    when the file is opened at the first entry, or, without one, the trace
    waits under a hidden name and is renamed (its meta event rewritten) when
    init_process_group gives the rank; see close() for a process that never
    learns one.  The file is claimed with flock and never truncated while
    another live recorder writes it.  It is kept open and every later entry
    appends to it.

    ``label`` names the regions (``with rec(label="step 3"):`` names just
    the next one).

    The gradient bucket all-reduces of DistributedDataParallel's reducer,
    issued by C++ autograd hooks, are written both as the op the dispatcher
    sees and as a ``coll`` event (``"src":"ddp_reducer"``); nothing about
    DDP is changed.
    """

    def __init__(self, path="commdebug-rank{rank}.zst", label=None):
        self.path_template = os.fspath(path)
        self.label = label
        self.path = None
        self.region = 0
        self._next_label = None
        self._w = None
        self._nccl = None            # (tag, untag) of the NCCL-side recorder
        self._in_region = False
        self._mode = None
        self._handles = []
        # Module-tracker state that outlives regions (ModTracker's _known_modules,
        # _seen_modules, _has_callback).
        self._known = weakref.WeakKeyDictionary()
        self._seen = weakref.WeakSet()
        self._has_callback = False
        self._done_handles = {}      # id(module) -> (fw_done hook handle, name json)
        self._param_cache = weakref.WeakKeyDictionary()
        self._name_json = {}
        self._type_json = {}
        # Collectives.
        self._op_cache = {}
        self._pg_emitted = set()
        # id(ProcessGroup) -> name, for the live groups.  No reference to a
        # group is kept: a group that outlives destroy_process_group until
        # interpreter shutdown can abort the process there (gloo, torch 1.13).
        self._pg_names = {}
        self._seq = {}
        self._pg_ctx = []
        self._ddp_groups = set()     # names of the process groups of DDP modules seen
        # DDP module -> what its ddp events still need (see _ddp_first_sight).
        self._ddp_state = weakref.WeakKeyDictionary()
        self._bucket_task = None
        self._bucket_idx = 0
        # DDP's tensors of collectives issued from C++ (see _coll_events).
        self._held = {}
        self._rank = 0
        self._world = 1
        self._rank_src = None        # "pg", "env" or None (not known yet)
        self._forked_from = None
        self._placements_json = {}
        self._mesh_json = {}

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
        job = os.environ.get("COMMDEBUG_RECORD_JOB")
        if job:
            meta["job"] = job
        return _dumps(meta, separators=(",", ":")) + "\n"

    def _pending_path(self):
        """Where the trace waits for its rank: a hidden file (the analyzer
        skips names starting with a dot) named after the process."""
        d, base = os.path.split(self.path_template)
        return os.path.join(d, "." + base.replace("{rank}", "-pending-%d" % os.getpid()))

    def _open(self):
        pg = _pg_rank_world()
        env = None if pg is not None else _launcher_rank_world()
        if pg is not None:
            self._rank, self._world = pg
            self._rank_src = "pg"
        elif env is not None:
            self._rank = env[0]
            self._world = env[1] if env[1] is not None else env[0] + 1
            self._rank_src = "env"
            os.environ[_ENV_MARK] = env[2]
        if "{rank}" not in self.path_template:
            path = self.path_template
        elif self._rank_src is None:
            path = self._pending_path()
        else:
            path = self.path_template.replace("{rank}", str(self._rank))
        self._t0 = time.time_ns()
        self._mono0 = _clock()
        self._w = TraceWriter(path, self._meta_line())
        self.path = self._w.path
        self._append = self._w.buf.append
        # The NCCL-side recorder, if loaded, writes next to this trace (told
        # again whenever the trace moves); the dispatch mode tags
        # collectives for it.
        self._nccl = _nccl.tagger()
        _nccl.point_to(_nccl.sibling_trace(self.path))
        _LIVE.append(weakref.ref(self))
        _wrap_init_process_group()
        _install_end_hooks()
        C.install_bw_tracking()
        notes = list(C.degraded)
        missing = _install_python_api()
        if missing:
            notes.append("%s run without the dispatcher: recorded from the ProcessGroup "
                         "methods (\"via\":\"python_api\")" % ", ".join(missing))
        if notes:
            _note("torch %s lacks some hooks CommDebugMode uses; the recorder emulates "
                  "them: %s" % (torch.__version__, "; ".join(notes)))
        self._scan_groups()

    def _emit(self, body):
        """Append one event: body is the JSON object text without its closing
        brace; the time field is added here."""
        now = _clock()
        self._append(body + ',"t":' + str(now - self._mono0) + "}\n")
        w = self._w
        if now > w.due:
            w.poke()

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
        if not discard and self._forked_from is None:
            self._emit(_end_line())
        w.close(discard=discard)

    # --------------------------------------------------------------- regions
    def __call__(self, label=None):
        """``with rec(label="step 3"):`` enters a region with that label."""
        self._next_label = label
        return self

    def __enter__(self):
        if self._in_region:
            raise RuntimeError("commdebug: this Recorder is already recording; "
                               "regions do not nest")
        if self._w is None:
            self._open()
        else:
            self._scan_groups()
        label = self._next_label if self._next_label is not None else self.label
        self._next_label = None
        self.region += 1
        body = '{"ev":"region_enter","region":' + str(self.region)
        if label is not None:
            body += ',"label":' + _dumps(str(label))
        self._emit(body)
        if self._mode is None:
            self._mode = _make_mode(self)
        self._mode.__enter__()
        self._handles = [
            C.register_global_fw_pre(self._fw_pre),
            C.register_global_fw_post(self._fw_post),
        ]
        h = C.register_global_bw_pre(self._bw_pre)
        if h is not None:
            self._handles.append(h)
        _install_python_api()
        _ACTIVE.append(self)
        self._in_region = True
        return self

    def __exit__(self, *exc):
        try:
            _ACTIVE.remove(self)
        except ValueError:
            pass
        for h in self._handles:
            h.remove()
        self._handles = []
        for h, _ in self._done_handles.values():
            h.remove()
        self._done_handles.clear()
        self._mode.__exit__(*exc)
        del self._pg_ctx[:]
        self._in_region = False
        self._emit('{"ev":"region_exit","region":' + str(self.region))
        self._w.sync()
        return False

    def next_region(self, label=None):
        """End the current region and start the next one without touching the
        dispatch mode (used at optimizer steps by ``commdebug.record``)."""
        if not self._in_region:
            raise RuntimeError("commdebug: next_region() outside a recording region")
        for h, _ in self._done_handles.values():
            h.remove()
        self._done_handles.clear()
        self._emit('{"ev":"region_exit","region":' + str(self.region))
        self._w.sync()
        self._scan_groups()
        self.region += 1
        body = '{"ev":"region_enter","region":' + str(self.region)
        if label is not None:
            body += ',"label":' + _dumps(str(label))
        self._emit(body)

    # -------------------------------------------------------- process groups
    def _scan_groups(self):
        if self._rank_src != "pg":
            self._learn_rank()
        live = K.group_names()
        self._pg_names = {id(pg): name for pg, name in live.items()}
        for pg, name in live.items():
            if name in self._pg_emitted:
                continue
            self._pg_emitted.add(name)
            name, desc, ranks, backend = K.group_info(pg, name)
            self._emit('{"ev":"pg","name":%s,"desc":%s,"ranks":[%s],"backend":%s'
                       % (_dumps(name), _dumps(desc), ",".join(str(r) for r in ranks),
                          _dumps(backend)))

    def _group_name(self, pg):
        name = self._pg_names.get(id(pg))
        if name is None:
            name = getattr(pg, "group_name", None)
            if not isinstance(name, str) or not name:
                self._scan_groups()
                name = self._pg_names.get(id(pg))
        return name

    def _next_seq(self, name):
        if name not in self._pg_emitted:
            self._scan_groups()
            self._pg_emitted.add(name)
        s = self._seq.get(name, 0) + 1
        self._seq[name] = s
        return s

    # ----------------------------------------------------------- module names
    def _mod_name(self, mod):
        """ModTracker._get_mod_name: the first module seen is named by its
        class; then all its descendants, eagerly, as "parent.child".  A module
        reachable from two parents keeps the name given last."""
        known = self._known
        name = known.get(mod)
        if name is None:
            name = type(mod).__name__
            known[mod] = name
        if mod not in self._seen:
            for child_name, child in mod.named_children():
                known[child] = name + "." + child_name
                self._mod_name(child)
            self._seen.add(mod)
        return name

    def _nj(self, name):
        j = self._name_json.get(name)
        if j is None:
            j = self._name_json[name] = _dumps(name)
        return j

    def _type_of(self, mod):
        cls = type(mod)
        j = self._type_json.get(cls)
        if j is None:
            j = self._type_json[cls] = _dumps(cls.__module__ + "." + cls.__qualname__)
        return j

    def _params_json(self, mod):
        """fw_pre's params list for mod, cached per module while its
        parameters (identity, shape, dtype, requires_grad) stay the same.
        Returns the json text."""
        key = tuple([(k, id(p), p.requires_grad, p.shape, p.dtype)
                     for k, p in mod._parameters.items() if p is not None])
        hit = self._param_cache.get(mod)
        if hit is not None and hit[0] == key:
            return hit[1]
        parts = []
        DT = C.DTensor
        for pname, p in mod.named_parameters(recurse=False):
            shape = _ints(p.shape)
            n = 1
            for d in shape:
                n *= d
            s = ('{"name":%s,"shape":[%s],"dtype":"%s","nbytes":%d,"requires_grad":%s'
                 % (_dumps(pname), ",".join([str(d) for d in shape]), str(p.dtype),
                    n * p.element_size(), "true" if p.requires_grad else "false"))
            if DT is not None and isinstance(p, DT):
                s += ',"placements":%s,"mesh":%s' % (self._plc_json(p.placements),
                                                      self._mesh_js(p.device_mesh))
            parts.append(s + "}")
        text = "[" + ",".join(parts) + "]"
        try:
            self._param_cache[mod] = (key, text)
        except TypeError:
            pass
        return text

    def _plc_json(self, placements):
        try:
            j = self._placements_json.get(placements)
        except TypeError:
            return _dumps(str(placements))
        if j is None:
            j = self._placements_json[placements] = _dumps(str(placements))
        return j

    def _mesh_js(self, mesh):
        e = self._mesh_json.get(id(mesh))
        if e is None or e[0] is not mesh:
            e = self._mesh_json[id(mesh)] = (mesh, _dumps(str(mesh)))
        return e[1]

    # ----------------------------------------------------------- module hooks
    def _fw_pre(self, mod, inputs):
        bw = _is_bw()
        name = self._mod_name(mod)
        nj = self._nj(name)
        tensors = _flat_tensors_requiring_grad(inputs)
        grad_in = (not bw) and bool(tensors)
        if bw:
            params = "[]"
        else:
            params = self._params_json(mod)
        self._emit('{"ev":"fw_pre","mod":%s,"type":%s,"bw":%s,"params":%s,"grad_in":%s'
                   % (nj, self._type_of(mod), "true" if bw else "false", params,
                      "true" if grad_in else "false"))
        if grad_in:
            C.multi_grad_hook(tensors, self._exit_fn(nj))
        if bw:
            return
        # (CommDebugMode reads param.data here, which for a DTensor dispatches
        # a detach; the recorder reads nothing that dispatches: the analyzer
        # accounts for those detaches.)
        # The module-local forward hook that reports fw_done must run after the
        # module's other forward hooks: keep the one registered by an earlier
        # call only while it is still the last one (and for the same name).
        old = self._done_handles.get(id(mod))
        if old is not None:
            hooks = mod._forward_hooks
            if old[1] == nj and hooks and next(reversed(hooks)) == old[0].id:
                pass
            else:
                old[0].remove()
                old = None
        if old is None:
            self._done_handles[id(mod)] = (mod.register_forward_hook(self._done_fn(nj)), nj)
        if _DDP is not None and isinstance(mod, _DDP):
            pg = mod.process_group
            name = self._group_name(pg)
            if name is not None:
                self._ddp_groups.add(name)
            if _NEED_PG_CTX:
                # DDP's forward issues collectives from C++ (bucket rebuild, buffer
                # broadcast) on its group; 1.13 cannot tell the mode which one.
                self._pg_ctx.append(mod.process_group)
            if mod not in self._ddp_state:
                self._ddp_first_sight(mod)

    def _fw_post(self, mod, inputs, output):
        if C.in_compiled_region():
            return
        if _DDP is not None and isinstance(mod, _DDP):
            if _NEED_PG_CTX and self._pg_ctx and self._pg_ctx[-1] is mod.process_group:
                self._pg_ctx.pop()
            st = self._ddp_state.get(mod)
            if st is not None and not st[0]:
                self._ddp_check_rebuilt(mod, st)
        bw = _is_bw()
        nj = self._nj(self._mod_name(mod))
        tensors = _flat_tensors_requiring_grad(output)
        grad_out = (not bw) and bool(tensors)
        self._emit('{"ev":"fw_post","mod":%s,"bw":%s,"grad_out":%s'
                   % (nj, "true" if bw else "false", "true" if grad_out else "false"))
        emulate = tensors and _EMULATE_BW_PRE and torch.is_grad_enabled()
        if grad_out:
            if emulate:
                # torch < 2.0 has no global full-backward pre-hook: bw_pre fires at
                # the first gradient of an output, just before the tracker's own
                # output hook, as the BackwardHookFunction node that torch >= 2.0
                # wraps around the outputs would.  One tensor hook does both.
                fn = self._pre_enter_fn(weakref.ref(mod), nj)
            else:
                fn = self._enter_fn(nj)
            C.multi_grad_hook(tensors, fn, mode="any")
        elif emulate:
            # In backward (activation-checkpoint recompute) the tracker registers
            # nothing, but the full-backward pre-hook would still fire.
            C.multi_grad_hook(tensors, self._bw_pre_fn(weakref.ref(mod)), mode="any")

    # ------------------------------------------------------------ DDP buckets
    # One "ddp" event with the buckets DDP built at construction, when the
    # recorder first sees the module's forward, and one more when DDP has
    # rebuilt them (see commdebug-trace(5)).  Nothing here changes DDP: its
    # attributes and logger are read, its bucket assignment is recomputed with
    # the function DDP used, and DDP's own buckets are listed by the reducer
    # only when they are small (the listing allocates a zero copy of them).
    def _ddp_first_sight(self, ddp):
        # [done, region of the forward that rebuilt, probes, info]
        st = self._ddp_state[ddp] = [False, None, 0, None]
        try:
            info = st[3] = _ddp_info(ddp)
            ev = self._ddp_head(ddp, info, False)
            sizes = _csv_ints(info["log"].get("bucket_sizes"))
            notes = list(info["notes"])
            buckets, why = _ddp_initial_buckets(ddp, info, sizes)
            if buckets is None and getattr(ddp, "_has_rebuilt_buckets", True) is False \
                    and info["total"] <= _DDP_LIST_LIMIT:
                buckets = _ddp_reducer_buckets(ddp, info)
                if buckets is not None:
                    why = None
            if why:
                notes.append(why)
            if buckets is not None:
                ev["buckets"] = buckets
            if sizes:
                ev["sizes"] = sizes
            elif buckets is not None:
                ev["sizes"] = [sum(info["nbytes"][i] for i in b) for b in buckets]
            if notes:
                ev["note"] = "; ".join(notes)
            self._ddp_emit(ev)
        except Exception as e:  # never break the job over DDP's internals
            st[0] = True
            self._ddp_failed(ddp, False, e)

    def _ddp_check_rebuilt(self, ddp, st):
        flag = getattr(ddp, "_has_rebuilt_buckets", None)
        if flag is False:
            return
        try:
            info = st[3]
            if info is None:
                st[0] = True
                return
            if flag and st[1] is None:
                # DDP rebuilt its buckets in this forward (or before the
                # recorder saw it): list them now, before this step's backward.
                st[1] = self.region
                if info["total"] <= _DDP_LIST_LIMIT:
                    buckets = _ddp_reducer_buckets(ddp, info)
                    if buckets is not None:
                        ev = self._ddp_head(ddp, info, True)
                        ev["buckets"] = buckets
                        ev["sizes"] = [sum(info["nbytes"][i] for i in b) for b in buckets]
                        if info["notes"]:
                            ev["note"] = "; ".join(info["notes"])
                        self._ddp_emit(ev)
                        st[0] = True
                        return
            # DDP's logger reports the rebuilt buckets at its next sampled
            # forward after the rebuild.
            log = ddp._get_ddp_logging_data()
            idx = log.get("rebuilt_per_bucket_param_indices")
            if log.get("has_rebuilt_buckets") and idx:
                ev = self._ddp_head(ddp, info, True)
                ev["buckets"] = _bucket_lists(idx)
                ev["sizes"] = _csv_ints(log.get("rebuilt_bucket_sizes"))
                notes = list(info["notes"])
                if st[1] is not None and st[1] != self.region:
                    ev["rebuilt_region"] = st[1]
                    notes.append("DDP rebuilt its buckets in its forward in region %d; its "
                                 "logger reported them in region %d" % (st[1], self.region))
                elif st[1] is None:
                    notes.append("this torch does not say when DDP rebuilt its buckets; "
                                 "its logger reported them in region %d" % self.region)
                if notes:
                    ev["note"] = "; ".join(notes)
                self._ddp_emit(ev)
                st[0] = True
                return
            st[2] += 1
            if flag is None and st[2] >= 20:
                st[0] = True    # no rebuild reported in 20 forwards: stop asking
        except Exception as e:
            st[0] = True
            self._ddp_failed(ddp, True, e)

    def _ddp_head(self, ddp, info, rebuilt):
        ev = {"ev": "ddp", "mod": self._mod_name(ddp)}
        try:
            pg = self._group_name(ddp.process_group)
        except Exception:
            pg = None
        if pg is not None:
            ev["pg"] = pg
        for k in ("cap", "first_cap", "default_first_cap", "find_unused", "static_graph",
                  "grad_as_view"):
            if info.get(k) is not None:
                ev[k] = info[k]
        ev["rebuilt"] = rebuilt
        # Names as the module tree names them: the DDP module's name, then
        # the name ddp.named_parameters() gives.
        prefix = ev["mod"] + "."
        ev["params"] = [dict(p, name=prefix + p["name"]) for p in info["params_json"]]
        return ev

    def _ddp_emit(self, ev):
        if ("pg" not in ev or "cap" not in ev) and "note" not in ev:
            # readers need both to analyze the buckets; without them, say why
            ev["note"] = "DDP's process group or bucket cap could not be read"
        self._emit(_dumps(ev, separators=(",", ":"))[:-1])

    def _ddp_failed(self, ddp, rebuilt, e):
        msg = "could not read DDP's buckets (%s: %s)" % (type(e).__name__, e)
        try:
            self._ddp_emit({"ev": "ddp", "mod": self._mod_name(ddp), "rebuilt": rebuilt,
                            "params": [], "note": msg})
        except Exception:
            _note(msg)

    def _bw_pre(self, mod, grad_output):
        self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
        return None

    def _bw_pre_fn(self, wmod):
        def bw_pre(*_):
            mod = wmod()
            if mod is not None:
                self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
        return bw_pre

    def _pre_enter_fn(self, wmod, nj):
        def bw_pre_enter(*_):
            mod = wmod()
            if mod is not None:
                self._emit('{"ev":"bw_pre","mod":' + self._nj(self._mod_name(mod)))
            self._queue_bw_end()
            self._emit('{"ev":"bw_enter","mod":' + nj)
        return bw_pre_enter

    def _done_fn(self, nj):
        def fw_done(mod, inputs, output):
            self._emit('{"ev":"fw_done","mod":%s,"bw":%s' % (nj, "true" if _is_bw() else "false"))
        return fw_done

    def _enter_fn(self, nj):
        def bw_enter(*_):
            self._queue_bw_end()
            self._emit('{"ev":"bw_enter","mod":' + nj)
        return bw_enter

    def _exit_fn(self, nj):
        def bw_exit(*_):
            self._emit('{"ev":"bw_exit","mod":' + nj)
        return bw_exit

    def _queue_bw_end(self):
        # ModTracker._maybe_set_engine_callback: once per backward pass.
        if self._has_callback:
            return

        def bw_end():
            self._has_callback = False
            self._emit('{"ev":"bw_end"')

        C.queue_engine_callback(bw_end)
        self._has_callback = True

    # ------------------------------------------------------------------- ops
    def _op_info(self, func):
        """Per-OpOverload cache entry, keyed by id(func) (OpOverload's
        __hash__ is Python code; the entry keeps func alive, so its id stays
        its own): (fw fragment, bw fragment, collective details or None,
        func).  The fragments are the op event up to its time; a
        higher-order operator (run, not recorded) has None for both."""
        if not isinstance(func, C.OpOverload):
            info = self._op_cache[id(func)] = (None, None, None, func)
            return info
        name = str(func)
        nj = _dumps(name)
        fw = '{"ev":"op","name":' + nj + ',"bw":false,"dt":false,"args":[],"fake":false,"t":'
        bw = '{"ev":"op","name":' + nj + ',"bw":true,"dt":false,"args":[],"fake":false,"t":'
        ns, _, rest = name.partition(".")
        base = rest.rpartition(".")[0] or rest
        coll = None
        idx = K.payload_indices(ns, base)
        if idx is not None:
            pg_idx = pg_kind = None
            try:
                for i, a in enumerate(func._schema.arguments):
                    if "ProcessGroup" in str(a.type):
                        pg_idx, pg_kind = i, "obj"
                        break
                    if a.name == "group_name":
                        pg_idx, pg_kind = i, "name"
                        break
            except Exception:
                pass
            coll = (nj, pg_idx, pg_kind, idx[0], idx[1],
                    ns == "c10d" and base == "allreduce_")
        info = (fw, bw, coll, func)
        self._op_cache[id(func)] = info
        return info

    def _coll_fields(self, pg_name, args, in_idx, out_idx):
        """',"pg":..,"seq":..,"bytes":..,"dtype":..,"shape":[..]' for a collective,
        and its first payload tensor (or None)."""
        s = ""
        self._last_seq = None
        if pg_name is not None:
            seq = self._last_seq = self._next_seq(pg_name)
            s = ',"pg":' + _dumps(pg_name) + ',"seq":' + str(seq)
        ts = []
        if in_idx is not None and in_idx < len(args):
            K.tensors_of(args[in_idx], ts)
        if not ts and out_idx is not None and out_idx < len(args):
            K.tensors_of(args[out_idx], ts)
        if ts:
            nbytes = 0
            for t in ts:
                try:
                    nbytes += int(t.numel()) * t.element_size()
                except Exception:
                    pass
            s += ',"bytes":%d,"dtype":"%s","shape":%s' % (nbytes, str(ts[0].dtype),
                                                          _shape_json(ts[0].shape))
            return s, ts[0]
        return s + ',"bytes":0', None

    def _arg_group(self, pg_kind, pg_idx, args):
        """The process group a collective's arguments name (by name, or by
        a group object, or by the ProcessGroup method running it on torch
        1.13): (its name or None, True when the op takes a group object
        and none could be found)."""
        if pg_kind == "name":
            a = args[pg_idx] if pg_idx < len(args) else None
            return (a if isinstance(a, str) else None), False
        if pg_kind != "obj":
            return None, False
        pg = C.unbox_process_group(args[pg_idx]) if pg_idx < len(args) else None
        if pg is None and self._pg_ctx:
            pg = self._pg_ctx[-1]
        if pg is None:
            return None, True
        return self._group_name(pg), False

    def _coll_call(self, func, coll, bw, fake, args, kwargs):
        """Run a collective: its events go into the file first (the
        collective may hang or abort the process), then the backend gets it,
        tagged for the NCCL-side recorder with its group and seq."""
        pg_name = self._coll_events(coll, bw, fake, args, _clock() - self._mono0)
        self._w.sync()
        nccl = self._nccl
        if nccl is None or fake or pg_name is None:
            return func(*args, **kwargs) if kwargs else func(*args)
        nccl[0](pg_name.encode(), self._last_seq)
        try:
            return func(*args, **kwargs) if kwargs else func(*args)
        finally:
            nccl[1]()

    def _coll_events(self, coll, bw, fake, args, t):
        """Append the op event of a collective (time t: when it is issued);
        for a gradient all-reduce that the autograd engine's C++ hooks issued
        (DistributedDataParallel's reducer), followed by its coll event.
        Returns the group's name (None when unknown)."""
        nj, pg_idx, pg_kind, in_idx, out_idx, allreduce = coll
        origin = _issuer()
        from_engine = allreduce and bw and (origin is None or origin in _ENGINE_ENTRIES)
        held = None
        if C.TORCH < (2,) and (origin is None or not origin[0].startswith(_PY_COLLECTIVES)) \
                and (self._ddp_groups or self._pg_ctx):
            # Torch 1.13 only: DDP's tensors made in C++ (its gradient buckets,
            # the flat buffers of its construction-time broadcast) got a Python
            # object when they were handed to this mode.  Keep them, so that a
            # communication thread does not free that object last: it would
            # need the GIL, which the main thread holds while
            # ProcessGroupGloo's destructor waits for that thread (a hang at
            # destroy_process_group).  DDP keeps its buckets for its lifetime
            # anyway; nothing else is kept.  Torch 2.x needs none of it (its
            # DDP and destroy_process_group tests pass without), and a
            # reference kept to a tensor can change what the program
            # dispatches (the autograd engine copies a gradient someone else
            # holds instead of stealing it), so there nothing is kept at all.
            held = K.tensors_of(list(args[:3]), [])
        pg_name, no_obj = self._arg_group(pg_kind, pg_idx, args)
        if no_obj:
            if from_engine and len(self._ddp_groups) == 1:
                # 1.13 cannot unbox the group: the reducer's is DDP's group.
                for pg_name in self._ddp_groups:
                    pass
            elif len(self._pg_names) == 1:
                # Issued from C++ on a torch that cannot unbox the group (1.13),
                # but there is only one group it can be.
                for pg_name in self._pg_names.values():
                    pass
        fields, t0 = self._coll_fields(pg_name, args, in_idx, out_idx)
        ts = ',"t":%d}\n' % t
        self._append('{"ev":"op","name":%s,"bw":%s,"dt":false,"args":[],"fake":%s%s%s'
                     % (nj, "true" if bw else "false", "true" if fake else "false", fields, ts))
        if held is not None and not from_engine:
            self._held[("ctx", pg_name, len(self._held) % 16)] = held
        if not from_engine or t0 is None or not (t0.is_floating_point() or t0.is_complex()):
            return pg_name
        # A gradient bucket: numbered per backward pass.
        task = C.task_id()
        if self._bucket_task != task:
            self._bucket_task = task
            self._bucket_idx = 0
        else:
            self._bucket_idx += 1
        if held is not None:
            self._held[(pg_name, self._bucket_idx)] = held
        self._append('{"ev":"coll","name":"c10d.allreduce_","src":"%s","bw":true%s,"bucket":%d%s'
                     % ("ddp_reducer" if self._ddp_groups else "autograd_hook", fields,
                        self._bucket_idx, ts))
        return pg_name

    def _dtensor_line(self, func, bw, args):
        DT = C.DTensor
        parts = []
        for a in args:
            if isinstance(a, DT):
                parts.append('{"shape":%s,"placements":%s,"mesh":%s}'
                             % (_shape_json(a.shape), self._plc_json(a.placements),
                                self._mesh_js(a.device_mesh)))
        return ('{"ev":"op","name":%s,"bw":%s,"dt":true,"args":[%s],"fake":false'
                % (_dumps(str(func)), "true" if bw else "false", ",".join(parts)))

    def _python_api_op(self, opname, pg, args):
        """A collective that this torch runs without the dispatcher (1.13):
        recorded under the c10d op name newer torch dispatches."""
        in_idx, out_idx = K.payload_indices("c10d", opname) or (0, 0)
        name = self._group_name(pg) if pg is not None else None
        self._emit('{"ev":"op","name":%s,"bw":%s,"dt":false,"args":[],"fake":false,"via":"python_api"%s'
                   % (_dumps("c10d.%s.default" % opname), "true" if _is_bw() else "false",
                      self._coll_fields(name, args, in_idx, out_idx)[0]))
        self._w.sync()


# ------------------------------------------------------------------- DDP buckets
# DDP's buckets are listed through its reducer (a zero-filled copy of every
# bucket is allocated for the listing) only while their total is at most this.
_DDP_LIST_LIMIT = 64 << 20


def _csv_ints(s):
    """"1, 2, 3" (DDP's logger) -> [1, 2, 3]."""
    if not isinstance(s, str) or not s.strip():
        return []
    return [int(x) for x in s.split(",")]


def _bucket_lists(s):
    """"4 3, 2 1 0" (rebuilt_per_bucket_param_indices) -> [[4, 3], [2, 1, 0]]."""
    return [[int(x) for x in part.split()] for part in s.split(",") if part.strip()]


def _ddp_sparse(module):
    # DDP's own test (torch/nn/parallel/distributed.py, produces_sparse_gradient).
    if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return bool(module.sparse)
    return False


def _ddp_info(ddp):
    """What a ddp event says about a DDP module, read without changing it:
    its parameters in its reducer's order (as _build_params_for_reducer
    builds them), caps, flags and logger data."""
    dist = _dist()
    ignore = set(getattr(ddp, "parameters_to_ignore", None) or ())
    params, sparse, nbytes, index_of, pj = [], [], [], {}, []
    for mname, m in ddp.module.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            if not p.requires_grad or ("%s.%s" % (mname, pname)) in ignore \
                    or id(p) in index_of:
                continue
            index_of[id(p)] = len(params)
            params.append(p)
            sparse.append(_ddp_sparse(m))
            n = int(p.numel()) * p.element_size()
            nbytes.append(n)
            pj.append({"name": "module.%s%s" % (mname + "." if mname else "", pname),
                       "nbytes": n, "dtype": str(p.dtype), "shape": _ints(p.shape),
                       "requires_grad": True})
    notes = []
    try:
        log = ddp._get_ddp_logging_data()
    except Exception as e:
        log = {}
        notes.append("DDP's logger could not be read (%s)" % e)
    info = {"params": params, "sparse": sparse, "nbytes": nbytes, "index_of": index_of,
            "total": sum(nbytes), "log": log, "notes": notes}
    cap = getattr(ddp, "bucket_bytes_cap", None)
    info["cap"] = int(cap) if cap is not None else log.get("bucket_cap_bytes")
    cfg = getattr(ddp, "_bucket_config", None)
    first = getattr(cfg, "first_bucket_bytes_cap", None) if cfg is not None else None
    if first is None:
        default = getattr(ddp, "bucket_bytes_cap_default", None)
        if default is False:
            # torch that passes bucket_cap_mb on as the first bucket's cap when given.
            first = info["cap"]
        else:
            first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None)
            if default is None:
                notes.append("first_cap is dist._DEFAULT_FIRST_BUCKET_BYTES as read at "
                             "DDP's first forward")
    info["first_cap"] = int(first) if first is not None else None
    # The first-bucket cap of torch.compile's DDPOptimizer, which is built
    # with DDP's bucket_bytes_cap alone and takes this default for its first
    # bucket (DDP itself may use its cap there instead).
    default = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None)
    info["default_first_cap"] = int(default) if isinstance(default, int) else None
    info["find_unused"] = bool(getattr(ddp, "find_unused_parameters", False))
    info["static_graph"] = bool(getattr(ddp, "static_graph", False))
    info["grad_as_view"] = bool(getattr(ddp, "gradient_as_bucket_view", False))
    n_log = log.get("num_parameter_tensors")
    if isinstance(n_log, int) and n_log != len(params):
        notes.append("DDP manages %d parameters, the recorder found %d"
                     % (n_log, len(params)))
        info["mismatch"] = True
    info["params_json"] = pj
    return info


def _ddp_initial_buckets(ddp, info, sizes):
    """DDP's construction-time buckets, recomputed the way DDP computes them
    (dist._compute_bucket_assignment_by_size, then reversed), kept only when
    their byte counts equal those DDP's logger reports: (buckets or None,
    why not)."""
    if info.get("mismatch"):
        return None, "bucket members not known (parameter list differs)"
    dist = _dist()
    assign = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if assign is None or not sizes:
        return None, ("bucket members not exposed by torch %s; sizes only"
                      % torch.__version__)
    cap, first = info["cap"], info["first_cap"]
    limits = []
    if info["static_graph"] or not info["find_unused"]:
        limits.append([sys.maxsize])
    if first is not None and cap is not None:
        limits.append([first, cap])
    if cap is not None:
        limits.append([cap])
    limits.append([sys.maxsize])
    nb = info["nbytes"]
    seen = []
    for lim in limits:
        if lim in seen:
            continue
        seen.append(lim)
        idx, _ = assign(info["params"], lim, info["sparse"])
        buckets = [list(b) for b in reversed(idx)]
        if [sum(nb[i] for i in b) for b in buckets] == sizes:
            return buckets, None
    return None, "bucket members could not be recomputed to DDP's sizes; sizes only"


def _ddp_reducer_buckets(ddp, info):
    """DDP's current buckets as its reducer lists them (zero-filled copies
    of the buckets are made for it, outside the recording), or None."""
    reducer = getattr(ddp, "reducer", None)
    f = getattr(reducer, "_get_zeros_like_grad_buckets", None)
    if f is None:
        return None
    with C.no_dispatch_modes(), torch.no_grad():
        gbs = f()
    index_of = info["index_of"]
    out = []
    for gb in sorted(gbs, key=lambda b: b.index()):
        out.append([index_of[id(p)] for p in gb.parameters()])
    del gbs
    return out


_EMULATE_BW_PRE = C.EMULATE_BW_PRE
_NEED_PG_CTX = not C.can_unbox_process_group()
# The frames between the dispatcher and the Python code that issued an op:
# the recorder's own, and torch 1.13's _TorchDispatchStackMode (the only mode
# its C++ dispatcher calls; it calls the current one).  torch 2.x calls the
# mode's __torch_dispatch__ itself, but TorchDispatchMode.__init_subclass__
# wraps it with torch._disable_dynamo: torch._compile's inner, which calls
# dynamo's disabled copy (torch._dynamo.eval_frame's _fn).  Those wrappers
# are found from the mode's class (_dispatch_wrappers), not by their names.
_SKIP_MODULES = ("commdebug.recorder", "commdebug._compat", "torch.utils._python_dispatch")
# The Python functions that hand a backward pass to the C++ autograd engine
# (Variable._execution_engine.run_backward): torch.autograd.backward and
# grad on 1.13; torch.autograd.graph._engine_run_backward, which both call,
# on 2.x.  An op they issue came from a C++ autograd hook.
_ENGINE_ENTRIES = {("torch.autograd", "backward"), ("torch.autograd", "grad"),
                   ("torch.autograd.graph", "_engine_run_backward")}


# Python modules that issue collectives themselves (their tensors are Python's).
_PY_COLLECTIVES = ("torch.distributed", "torch._ops", "torch.testing")

# How torch's wrappers lead to the function they wrap: functools.wraps'
# __wrapped__; torch._disable_dynamo keeps dynamo's disabled copy on the
# wrapped function as __dynamo_disable (from its first call), and that copy
# names its original as _torchdynamo_orig_callable.
_WRAP_LINKS = ("__wrapped__", "__dynamo_disable", "_torchdynamo_orig_callable")


def _dispatch_wrappers(cls):
    """The code objects of a dispatch mode's __torch_dispatch__ and of the
    functions torch wrapped around it, following _WRAP_LINKS from the
    class attribute."""
    codes = set()
    todo = [cls.__dict__.get("__torch_dispatch__")]
    seen = set()
    while todo and len(seen) < 16:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if code is not None:
            codes.add(code)
        for attr in _WRAP_LINKS:
            nxt = getattr(fn, attr, None)
            if callable(nxt):
                todo.append(nxt)
    return codes


def _issuer():
    """(module, function) of the first Python frame below the dispatch
    machinery -- the Python code that issued the op being dispatched -- or
    None when there is none (the op comes from C++ on a thread without
    Python frames, such as a device thread of the autograd engine).  An op
    whose issuer is one of _ENGINE_ENTRIES was issued by a C++ autograd
    hook, such as DDP's reducer."""
    f = sys._getframe(1)
    wrappers = ()
    while f is not None:
        code = f.f_code
        mod = f.f_globals.get("__name__")
        if mod in _SKIP_MODULES:
            if mod == "commdebug.recorder" and code.co_name == "__torch_dispatch__":
                # The recorder's mode: what torch wrapped around it comes next.
                mode = f.f_locals.get("self")
                if mode is not None:
                    wrappers = _dispatch_wrappers(type(mode))
            f = f.f_back
            continue
        if code in wrappers:
            f = f.f_back
            continue
        return (mod or "", code.co_name)
    return None


def _make_mode(rec):
    """The TorchDispatchMode of one Recorder.  Its __torch_dispatch__ is the
    hot path: everything it needs is bound in this closure, the op event is a
    cached prefix plus the time, and nothing is allocated for ordinary ops
    beyond the line itself."""
    cache = rec._op_cache
    op_info = rec._op_info
    w = rec._w
    append = w.buf.append
    mono0 = rec._mono0
    clock = _clock
    is_bw = _is_bw
    DT = C.DTensor
    Fake = C.FakeTensor
    fake_context = C.fake_context
    coll_call = rec._coll_call
    dtensor_line = rec._dtensor_line

    class _RecorderMode(C.TorchDispatchMode):
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            info = cache.get(id(func))
            if info is None:
                info = op_info(func)
            fw, bwf, coll, _ = info
            if fw is None:
                return func(*args, **(kwargs or {}))
            bw = is_bw()
            if DT is not None and DT in types:
                line = dtensor_line(func, bw, args)
                append(line + ',"t":' + str(clock() - mono0) + "}\n")
                return NotImplemented
            fake = (Fake is not None and Fake in types) or fake_context()
            if coll is not None:
                return coll_call(func, coll, bw, fake, args, kwargs)
            out = func(*args, **kwargs) if kwargs else func(*args)
            now = clock()
            if fake:
                append((bwf if bw else fw).replace('"fake":false', '"fake":true')
                       + str(now - mono0) + "}\n")
            else:
                append((bwf if bw else fw) + str(now - mono0) + "}\n")
            if now > w.due:
                w.poke()
            return out

    return _RecorderMode()


# ------------------------------------------------------------------- torch 1.13
_python_api_installed = []


def _install_python_api():
    """Wrap ProcessGroup methods where this torch needs it (1.13): methods
    whose c10d op newer torch dispatches but this one does not are recorded
    as op events marked "via":"python_api"; the others only tell the
    dispatch mode which group the op runs on (1.13 cannot unbox it).
    Returns the c10d op names recorded this way."""
    if _python_api_installed:
        return _python_api_installed[0]
    missing = []
    _python_api_installed.append(missing)
    try:
        from torch._C._distributed_c10d import ProcessGroup
    except Exception:
        return missing
    need_ctx = not C.can_unbox_process_group()
    for meth, opname in K.python_api_methods.items():
        orig = ProcessGroup.__dict__.get(meth)
        if orig is None:
            continue
        try:
            getattr(torch.ops.c10d, opname)
            dispatched = True
        except Exception:
            dispatched = False
        if dispatched and not need_ctx:
            continue
        if not dispatched:
            missing.append(opname)
        setattr(ProcessGroup, meth, _wrap_pg_method(orig, opname, dispatched))
    if need_ctx:
        # C++ helpers DDP calls with its process group (parameter broadcast and
        # shape check at construction): tell the dispatch mode the group.
        import torch.distributed as dist
        for fname in ("_broadcast_coalesced", "_verify_params_across_processes"):
            f = getattr(dist, fname, None)
            if f is not None and not hasattr(f, "_commdebug_orig"):
                setattr(dist, fname, _wrap_group_first(f))
    return missing


def _wrap_group_first(orig):
    def helper(process_group, *args, **kwargs):
        rec = _active()
        if rec is None:
            return orig(process_group, *args, **kwargs)
        rec._pg_ctx.append(process_group)
        try:
            return orig(process_group, *args, **kwargs)
        finally:
            rec._pg_ctx.pop()
    helper.__name__ = getattr(orig, "__name__", "helper")
    helper.__doc__ = getattr(orig, "__doc__", None)
    helper._commdebug_orig = orig
    return helper


def _wrap_pg_method(orig, opname, dispatched):
    if dispatched:
        def method(self, *args, **kwargs):
            rec = _active()
            if rec is None:
                return orig(self, *args, **kwargs)
            ctx = rec._pg_ctx
            ctx.append(self)
            try:
                return orig(self, *args, **kwargs)
            finally:
                ctx.pop()
    else:
        def method(self, *args, **kwargs):
            rec = _active()
            if rec is not None:
                rec._python_api_op(opname, self, args)
            return orig(self, *args, **kwargs)
    method.__name__ = getattr(orig, "__name__", opname)
    method.__doc__ = getattr(orig, "__doc__", None)
    method._commdebug_orig = orig
    return method
