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

The Recorder is made of parts, one job each:

* ``_process``: the process around it: the live recorders, fork, exit, how
  the process ends, its rank (``TraceLife``: the trace's name, its move
  when the rank is learned, its close);
* ``_events``: JSON pieces of events (``EventText``);
* ``_mode``: the dispatch mode, op and collective events (``OpEvents``),
  the ProcessGroup wrappers of torch 1.13;
* ``_ddp``: DistributedDataParallel's buckets (``DDPEvents``);
* ``_tracker``: the module tracker's hooks of the full recorder
  (``TrackerEvents``);
* ``_light``: light mode's hooks (``LightEvents``), ``_collkernels`` its
  collectives (kernels at the BackendSelect key), ``_bounded`` its bounded
  traces;
* ``_compat``: what the installed torch offers; ``_collectives``: which ops
  are collectives; ``_writer``: the trace file (``_claim``, ``_relocate``,
  ``_tail``: claiming it, moving it, its raw frames); ``_nccl``: the NCCL
  side.

This module holds the Recorder itself: its regions, process groups and
module names.  ``Recorder(path, light=True)`` records in light mode: module
boundaries and every collective, no other op and no dispatch mode (see
``_light``).
"""

import json
import os
import time
import weakref

import torch

from . import _compat as C
from . import _collectives as K
from . import _nccl
from ._version import __version__ as RECORDER_VERSION
from ._writer import TraceWriter
from . import _writer
from ._native import speedups
from ._process import (_ACTIVE, _ENV_MARK, _LIVE, TraceLife, _install_end_hooks,
                       _launcher_rank_world, _note, _pg_rank_world,
                       _wrap_init_process_group)
from ._process import note_ending  # noqa: F401  (commdebug.recorder.note_ending)
from ._events import EventText
from ._ddp import DDPEvents
from ._mode import OpEvents, _install_python_api, _make_mode, watch_compile
from ._light import LightEvents
from ._tracker import TrackerEvents
from . import _leanbw
from ._bounded import Bounded
from . import _light
from . import _modcall

__all__ = ["Recorder", "RECORDER_VERSION"]

_dumps = json.dumps
_clock = time.monotonic_ns

class Recorder(TraceLife, EventText, OpEvents, DDPEvents, TrackerEvents, LightEvents):
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

    ``light=True`` records module boundaries, regions and every collective
    (DDP's reducer's, DTensor's, compiled graphs' included) but no other op,
    without a dispatch mode, so that torch.compile keeps compiling and the
    cost stays a few percent of a step (see ``_light``; torch 2.1 or later).
    """

    def __init__(self, path="commdebug-rank{rank}.zst", label=None, light=False, keep=None):
        self.path_template = os.fspath(path)
        self.label = label
        self.light = bool(light)
        if self.light:
            why = _light.available()
            if why is not None:
                raise RuntimeError("commdebug: light mode: " + why)
        if keep is not None and not self.light:
            raise ValueError("commdebug: keep= bounds light traces (light=True)")
        self._bounded = Bounded(keep) if keep is not None else None
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
        # Full mode with LeanBackwardHook (_leanbw): its bw_enter hooks waiting
        # for setup_output_hook (id(module) -> (tensor, key, hook)), the op
        # event texts of the views it does not dispatch.
        self._lean_bw = None         # (decided at the first region)
        self._own_call = True        # nn.Module's call ours (_modcall; decided then too)
        self._call_held = False      # ours put in, until close (_modcall.full_on's hold)
        self._cmarker = None         # the C module's gradient hook type (then too)
        self._pending_enter = {}
        self._fcall = None           # its nn.Module call (_leanbw.make_call), made once
        self._view_text = None
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
        self._pg_scanned = None
        self._seq = {}
        self._pg_ctx = []
        self._ddp_groups = set()     # names of the process groups of DDP modules seen
        # DDP module -> what its ddp events still need (see _ddp_first_sight).
        self._ddp_state = weakref.WeakKeyDictionary()
        self._bucket_task = None
        self._bucket_idx = 0
        # DDP's tensors of collectives issued from C++ (see _coll_events).
        self._held = {}
        self._held_n = {}             # group -> slot of its last one of those (ring of 16)
        self._rank = 0
        self._world = 1
        self._rank_src = None        # "pg", "env" or None (not known yet)
        self._forked_from = None
        self._placements_json = {}
        self._mesh_json = {}
        # Light mode: id(module) -> its events' texts; hooks left on leaf tensors.
        self._lc = {}
        self._lleaf = []
        self._lmark = {}
        self._lstate = [0, False, False]
        self._lhooks = None
        self._lhandles = []
        self._lgradhook = None       # commdebug._gradhook, where light mode uses it

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
        self._w.mono0 = self._mono0
        if self.light:
            self._w.tick = _writer.LIGHT_TICK_S
            self._w.sleep_between_frames()
            self._w.pad_tail()
            self._w.compact_after = _writer.LIGHT_COMPACT_S
        if self._bounded is not None:
            self._w.index = []
            self._w.bounded = self._bounded
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
        line = body + ',"t":' + str(now - self._mono0) + "}\n"
        self._append(line)
        w = self._w
        if now > w.due:
            w.poke()
        return line

    def _emit_state(self, body):
        """An event later regions need (pg, ddp): kept by a bounded trace."""
        line = self._emit(body)
        if self._bounded is not None:
            self._bounded.note_state(self.region, line)

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
        if self._bounded is not None:
            self._bounded.note_region(self.region, label, _clock() - self._mono0, self._seq)
            self._append(self.region)      # where it starts, for the writer
        self._emit(body)
        if self.light:
            self._light_enter()
            _ACTIVE.append(self)
            self._in_region = True
            return self
        if self._mode is None:
            self._mode = _make_mode(self)
        if self._lean_bw is None:
            # decided at the first region, for the recorder's life
            self._lean_bw = _leanbw.available()
            self._own_call = os.environ.get("COMMDEBUG_MODULE_CALL", "") != "torch"
            native = speedups()
            self._cmarker = native.Marker if native is not None and self._lean_bw else None
            if self._lean_bw:
                info = self._op_info(torch.ops.aten.view.default)
                self._view_text = (info[0], info[1])
        if self._lean_bw:
            _leanbw.install()
        watch_compile(_note)
        self._mode.__enter__()
        lean = self._lean_bw
        self._handles = [C.GlobalHooks(self._fw_pre_lean if lean else self._fw_pre,
                                       self._fw_post_lean if lean else self._fw_post,
                                       self._bw_pre)]
        if lean and self._own_call:
            # nn.Module's call does the slow path's steps for these hooks
            # itself (made once: what it holds is the recorder's for its life)
            if self._fcall is None:
                self._fcall = _leanbw.make_call(self)
            h = _modcall.full_on(self._fcall, _light._is_compiling(), not self._call_held)
            if h is not None:
                self._call_held = True
                self._handles.insert(0, h)
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
        self._pending_enter.clear()
        if self.light:
            self._light_exit()
        else:
            self._mode.__exit__(*exc)
            if self._lean_bw:
                _leanbw.uninstall()
        del self._pg_ctx[:]
        self._in_region = False
        self._emit('{"ev":"region_exit","region":' + str(self.region))
        if not self.light:
            self._w.sync(later=True)
        return False

    def next_region(self, label=None):
        """End the current region and start the next one without touching the
        dispatch mode (used at optimizer steps by ``commdebug.record``)."""
        if not self._in_region:
            raise RuntimeError("commdebug: next_region() outside a recording region")
        self._emit('{"ev":"region_exit","region":' + str(self.region))
        if self.light:
            self._light_unleaf()    # as at region exit
        else:
            self._w.sync(later=True)
        self._scan_groups()
        self.region += 1
        self._lstate[0] = self.region
        body = '{"ev":"region_enter","region":' + str(self.region)
        if label is not None:
            body += ',"label":' + _dumps(str(label))
        if self._bounded is not None:
            self._bounded.note_region(self.region, label, _clock() - self._mono0, self._seq)
            self._append(self.region)      # where it starts, for the writer
        self._emit(body)

    # -------------------------------------------------------- process groups
    def _scan_groups(self):
        reg = K.group_registry()
        if self._rank_src != "pg" and (reg is None or reg):
            self._learn_rank()      # (no group: no default group, no rank)
        live = dict(reg) if reg else {}
        key = [(id(pg), name) for pg, name in live.items()]
        if key == self._pg_scanned:
            return          # the same groups as at the last scan (every region)
        self._pg_scanned = key
        self._pg_names = {id(pg): name for pg, name in live.items()}
        for pg, name in live.items():
            if name in self._pg_emitted:
                continue
            self._pg_emitted.add(name)
            name, desc, ranks, backend = K.group_info(pg, name)
            self._emit_state('{"ev":"pg","name":%s,"desc":%s,"ranks":[%s],"backend":%s'
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
            self._lc.clear()    # names may change: light mode's cached texts go
            for child_name, child in mod.named_children():
                known[child] = name + "." + child_name
                self._mod_name(child)
            self._seen.add(mod)
        return name
