"""The dispatch mode: op events and collectives.

``_make_mode`` makes a Recorder's TorchDispatchMode, the hot path (one op
event per dispatched op).  ``OpEvents``, a base of
commdebug.recorder.Recorder, writes the events of collectives (group,
sequence number, payload; the ``coll`` event of a gradient all-reduce that
a C++ autograd hook, DDP's reducer, issued: see ``_issuer``) and then hands
them to the backend.  On torch 1.13 ProcessGroup methods are wrapped
(``_install_python_api``): the collectives 1.13 does not dispatch are
recorded from them, and the others learn their group from them.

The frames of this module, and of the Recorder's other modules, are skipped
when looking for the Python code that issued an op (``_SKIP_MODULES``).
"""

import functools
import json
import sys
import time

import torch

from . import _compat as C
from . import _collectives as K
from ._native import speedups
from ._process import _active

_dumps = json.dumps
_is_bw = C.is_bw
_clock = time.monotonic_ns


class OpEvents:
    """The Recorder's op and collective events (its state: _op_cache,
    _pg_names, _seq, _pg_ctx, _held, the bucket count)."""

    # ------------------------------------------------------------------- ops
    def _op_info(self, func):
        """Per-OpOverload cache entry, keyed by id(func) (OpOverload's
        __hash__ is Python code; the entry keeps func alive, so its id stays
        its own): (fw fragment, bw fragment, collective details or None,
        func, fw fragment of a call on fake tensors, bw fragment of one).
        The fragments are the op event up to its time; a higher-order
        operator (run, not recorded) has None for all."""
        if not isinstance(func, C.OpOverload):
            info = self._op_cache[id(func)] = (None, None, None, func, None, None)
            return info
        name = str(func)
        nj = _dumps(name)
        fw = '{"ev":"op","name":' + nj + ',"bw":false,"dt":false,"args":[],"fake":false,"t":'
        bw = '{"ev":"op","name":' + nj + ',"bw":true,"dt":false,"args":[],"fake":false,"t":'
        coll = K.coll_details(func)
        fake = '"fake":true'
        info = (fw, bw, coll, func, fw.replace('"fake":false', fake),
                bw.replace('"fake":false', fake))
        self._op_cache[id(func)] = info
        return info

    def _coll_fields(self, pg_name, args, in_idx, out_idx):
        """',"pg":..,"seq":..,"bytes":..,"dtype":..,"shape":[..]' for a collective,
        and its first payload tensor (or None)."""
        text, nbytes, t0 = K.payload(args, in_idx, out_idx)
        return self._group_fields(pg_name, nbytes) + text, t0

    def _group_fields(self, pg_name, nbytes):
        """',"pg":..,"seq":..' of a collective (its group's next seq; "" for
        no group), its payload's bytes (None: no tensors) noted for a
        bounded trace."""
        s = ""
        self._last_seq = None
        if pg_name is not None:
            seq = self._last_seq = self._next_seq(pg_name)
            s = ',"pg":' + self._nj(pg_name) + ',"seq":' + str(seq)
        if nbytes is not None and self._bounded is not None:
            self._bounded.note_coll(self.region, pg_name, nbytes)
        return s

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
        end = self._coll_begin(coll, bw, fake, args)
        if end is None:
            return func(*args, **kwargs) if kwargs else func(*args)
        try:
            return func(*args, **kwargs) if kwargs else func(*args)
        finally:
            end()

    def _coll_begin(self, coll, bw, fake, args):
        """A collective's events from its arguments, in the file: the NCCL
        tag's end to call when it is done, or None."""
        return self._coll_synced(self._coll_events(coll, bw, fake, args, _clock() - self._mono0),
                                 fake)

    def _coll_synced(self, pg_name, fake):
        """The events written get into the file, then the collective is
        tagged for the NCCL-side recorder with its group and seq: the tag's
        end, or None."""
        self._w.sync()
        nccl = self._nccl
        if nccl is None or fake or pg_name is None:
            return None
        nccl[0](pg_name.encode(), self._last_seq)
        return nccl[1]

    def _coll_events(self, coll, bw, fake, args, t):
        """Append the op event of a collective (time t: when it is issued);
        for a gradient all-reduce that the autograd engine's C++ hooks issued
        (DistributedDataParallel's reducer), followed by its coll event.
        Returns the group's name (None when unknown)."""
        nj, pg_idx, pg_kind, in_idx, out_idx, allreduce = coll
        # (who issued it matters only for a backward all-reduce, and on 1.13)
        origin = _issuer() if (allreduce and bw) or C.TORCH < (2,) else ()
        from_engine = allreduce and bw and (origin is None or origin in _ENGINE_ENTRIES)
        held = None
        if C.TORCH < (2,) and (origin is None or not origin[0].startswith(_PY_COLLECTIVES)) \
                and (self._ddp_groups or self._pg_ctx):
            # Torch 1.13 only: DDP's tensors made in C++ (its gradient buckets,
            # the map of used parameters that find_unused_parameters
            # all-reduces, the flat buffers of its construction-time
            # broadcast) got a Python object when they were handed to this
            # mode.  Keep them, so that a communication thread does not free
            # that object last: it would need the GIL, which the main thread
            # holds while ProcessGroupGloo's destructor joins that thread (a
            # hang when the reducer or destroy_process_group drops the group;
            # gdb showed the gloo thread in ~TensorImpl waiting for the GIL,
            # the main thread in ~ProcessGroupGloo joining it).  DDP keeps
            # those tensors for its lifetime anyway; nothing else is kept.
            # Torch 2.x needs none of it (its DDP and destroy_process_group
            # tests pass without), and a reference kept to a tensor can
            # change what the program dispatches (the autograd engine copies
            # a gradient someone else holds instead of stealing it), so there
            # nothing is kept at all.
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
        text, nbytes, t0 = K.payload(args, in_idx, out_idx)
        bucket = from_engine and t0 is not None and (t0.is_floating_point() or t0.is_complex())
        self._coll_lines(coll, bw, fake, pg_name, text, nbytes, bucket, held, t)
        return pg_name

    def _coll_lines(self, coll, bw, fake, pg_name, payload, nbytes, bucket, held, t):
        """The op event of a collective on group pg_name, its payload's text
        and bytes as K.payload gives them; a gradient bucket's coll event
        after it (bucket: a floating all-reduce the autograd engine's C++
        hooks issued); held: its tensors to keep (torch 1.13, see
        _coll_events)."""
        fields = self._group_fields(pg_name, nbytes) + payload
        ts = ',"t":%d}\n' % t
        self._append('{"ev":"op","name":%s,"bw":%s,"dt":false,"args":[],"fake":%s%s%s'
                     % (coll[0], "true" if bw else "false", "true" if fake else "false", fields,
                        ts))
        if held is not None and not bucket:
            # (the last 16 others of each group: the used-parameter map, broadcasts)
            n = self._held_n[pg_name] = (self._held_n.get(pg_name, -1) + 1) % 16
            self._held[("ctx", pg_name, n)] = held
        if not bucket:
            return
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

    def _python_api_op(self, opname, pg, args):
        """A collective that this torch runs without the dispatcher (1.13):
        recorded under the c10d op name newer torch dispatches."""
        in_idx, out_idx = K.payload_indices("c10d", opname) or (0, 0)
        name = self._group_name(pg) if pg is not None else None
        self._emit('{"ev":"op","name":%s,"bw":%s,"dt":false,"args":[],"fake":false,"via":"python_api"%s'
                   % (_dumps("c10d.%s.default" % opname), "true" if _is_bw() else "false",
                      self._coll_fields(name, args, in_idx, out_idx)[0]))
        self._w.sync()


# The frames between the dispatcher and the Python code that issued an op:
# the recorder's own, and torch 1.13's _TorchDispatchStackMode (the only mode
# its C++ dispatcher calls; it calls the current one).  The recorder's own
# are those of every module that has Recorder code: this one (the mode, the
# collectives' events, the ProcessGroup wrappers that call into C++ on 1.13),
# the Recorder's class and its other bases, and _compat (on 1.13 its engine
# proxy sits between torch.autograd.backward and the engine's C++ hooks).  torch 2.x calls the
# mode's __torch_dispatch__ itself, but TorchDispatchMode.__init_subclass__
# wraps it with torch._disable_dynamo: torch._compile's inner, which calls
# dynamo's disabled copy (torch._dynamo.eval_frame's _fn).  Those wrappers
# are found from the mode's class (_dispatch_wrappers), not by their names.
_SKIP_MODULES = ("commdebug._mode", "commdebug.recorder", "commdebug._events", "commdebug._ddp",
                 "commdebug._process", "commdebug._compat", "commdebug._light",
                 "commdebug._collkernels", "commdebug._tracker", "commdebug._bounded",
                 "commdebug._leanbw", "commdebug._lightbw", "commdebug._gradhooks",
                 "torch.utils._python_dispatch")
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


def from_engine():
    """Whether the collective being recorded was issued by a C++ autograd
    hook (see _issuer)."""
    origin = _issuer()
    return origin is None or origin in _ENGINE_ENTRIES


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
            if mod == "commdebug._mode" and code.co_name == "__torch_dispatch__":
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
    hot path: everything it needs is bound in this closure, and an ordinary
    op costs a cache lookup, the call and one tuple (its event's cached text
    and the time, which the writer thread formats: _writer.TraceWriter._text).

    TorchDispatchMode.__init_subclass__ wraps __torch_dispatch__ in
    torch._disable_dynamo (torch._compile's inner, then dynamo's disabled
    copy of the function, which sets and restores dynamo's frame callback):
    about 1 us of every op on torch 2.14.  The recorder's mode makes dynamo
    skip compiled frames anyway ("non-infra torch dispatch mode present"), so
    the function is set on the class after it is made, unwrapped, and dynamo
    is told to skip its code (and what it calls) instead: the same effect at
    no cost per op."""
    cache = rec._op_cache
    op_info = rec._op_info
    w = rec._w
    append = w.buf.append
    clock = _clock
    is_bw = _is_bw
    DT = C.DTensor
    Fake = C.FakeTensor
    fake_context = C.fake_context
    coll_call = rec._coll_call
    dtensor_line = rec._dtensor_line
    # is_bw() and fake_context() inline where this torch allows (no Python
    # call per op): the graph task id, the tracing context's fake mode and
    # the mode stack's fake slot
    cur_task = getattr(torch._C, "_current_graph_task_id", None)
    tls, get_mode, fake_key = C._tracing_tls, C._get_mode, C._FAKE_KEY
    inline = cur_task is not None and tls is not None and get_mode is not None \
        and fake_key is not None

    class _RecorderMode(C.TorchDispatchMode):
        supports_higher_order_operators = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        info = cache.get(id(func))
        if info is None:
            info = op_info(func)
        if info[0] is None:
            return func(*args, **(kwargs or {}))
        bw = cur_task() != -1 if inline else is_bw()
        if DT is not None and DT in types:
            append((dtensor_line(func, bw, args) + ',"t":', clock()))
            return NotImplemented
        if Fake is not None and Fake in types:
            fake = True
        elif inline:
            ctx = getattr(tls, "tracing_context", None)
            fake = (ctx is not None and getattr(ctx, "fake_mode", None) is not None) \
                or get_mode(fake_key) is not None
        else:
            fake = fake_context()
        if info[2] is not None:
            return coll_call(func, info[2], bw, fake, args, kwargs)
        out = func(*args, **kwargs) if kwargs else func(*args)
        now = clock()
        append((info[(4 if fake else 0) + bw], now))
        if now > w.due:
            w.poke()
        return out

    _RecorderMode.__torch_dispatch__ = __torch_dispatch__
    C.skip_in_dynamo([__torch_dispatch__])
    mode = _RecorderMode()
    native = speedups() if inline else None
    if native is not None:
        # The C module's common case, on the object (where torch looks the
        # method up): ops in the cache, no collective, no DTensor.
        mode.__torch_dispatch__ = native.Dispatch(
            cache=cache, buf=w.buf, writer=w, cur_task=cur_task, dtensor=DT, fake=Fake,
            tls=tls, get_mode=get_mode, fake_key=fake_key, op_type=C.OP_CALLS_OP,
            body=functools.partial(__torch_dispatch__, mode), mode=mode)
    return mode


# ----------------------------------------------------------- torch.compile
_NOTE_COMPILE = ("a torch.compile'd function ran under the recorder's dispatch mode: dynamo "
                 "runs it eagerly (\"non-infra torch dispatch mode present\"), as under "
                 "CommDebugMode; Recorder(light=True) / --light records without a dispatch "
                 "mode and lets it compile")


def watch_compile(note):
    """Say once (note) when dynamo falls back to eager because a full
    recorder's dispatch mode is on the stack: its check in convert_frame is
    wrapped (from the first region after torch._dynamo is imported).  It
    runs only when a compiled function is called."""
    cf = sys.modules.get("torch._dynamo.convert_frame")
    if cf is None or getattr(cf, "_commdebug_watched", False):
        return
    cf._commdebug_watched = True
    for name in ("any_torch_dispatch_mode_on_stack",
                 "is_in_any_mode_without_ignore_compile_internals"):
        orig = getattr(cf, name, None)
        if not callable(orig):
            continue

        def check(*args, _orig=orig, **kwargs):
            on = _orig(*args, **kwargs)
            if on:
                rec = _active()
                if rec is not None and not rec.light:
                    note(_NOTE_COMPILE)
            return on
        check.__wrapped__ = orig
        setattr(cf, name, check)


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
