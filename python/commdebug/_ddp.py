"""DistributedDataParallel's buckets, read without changing DDP: the ``ddp``
events (commdebug-trace(5)).

``DDPEvents`` is a base of commdebug.recorder.Recorder (its state:
_ddp_state); the functions below read a DDP module's parameters, caps,
flags, logger and reducer.
"""

import json
import sys

import torch

from . import _compat as C
from ._events import _ints
from ._process import _dist, _note

_dumps = json.dumps


class DDPEvents:
    """The Recorder's ddp events."""

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
        self._emit_state(_dumps(ev, separators=(",", ":"))[:-1])

    def _ddp_failed(self, ddp, rebuilt, e):
        msg = "could not read DDP's buckets (%s: %s)" % (type(e).__name__, e)
        try:
            self._ddp_emit({"ev": "ddp", "mod": self._mod_name(ddp), "rebuilt": rebuilt,
                            "params": [], "note": msg})
        except Exception:
            _note(msg)


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
