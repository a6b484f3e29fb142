#!/usr/bin/env python3
"""Generate a synthetic commdebug trace of a tensor-parallel transformer training run.

The trace has the shape of what the recorder writes for one rank of a 4-way
tensor-parallel run (trace format version 1): a meta line, a pg line, then
one region per training step holding the forward of a Transformer (the model of
PyTorch's test_comm_mode_features.py, parallelized like its TP test: embeddings and
wo/w2 row-wise, wq/wk/wv/w1/output column-wise, output gathered to Replicate), the
loss, the backward in reverse module order, gradient-norm clipping and an AdamW step.

Ops on DTensors appear twice, as the DTensor op ("dt":true, with "args") and then
as the local op(s) it desugars into, as CommDebugMode sees them.  Collectives carry
"pg", "seq", "bytes", "dtype" and "shape".

Usage: gen_trace.py [--events N] [--layers L] [--seed S] [--ac] [--plain]
                    [--rank R] [--world W] OUTPUT

OUTPUT is written zstd-compressed (through the zstd CLI, one frame per region like
the recorder, small regions merged into frames of at least 1 MiB) unless --plain.
OUTPUT "-" writes to standard output.  The run is deterministic for a seed: only the
timestamp jitter is random.  Whole steps are generated until at least N events
(lines) are written.  Standard library only.

--rank R and --world W set the meta event's "rank" and "world_size" and the
ranks of process group "0" (range(W)), for sets of per-rank traces
(tests/bench/ranks.sh); the model stays 4-way tensor parallel.  Every
collective is in group "0" and numbered by a per-group "seq" (1, 2, ...), so
traces generated with the same --events, --layers and --ac agree collective
for collective whatever their seed.  Without these options the output is
that of rank 0 of 4.

--fault KIND:STEP:INDEX[:ARG] (repeatable) makes this rank depart from the
others at the INDEX-th collective (0-based) of step STEP, for post-mortem tests
(tests/cli/cases/ranks-*, tests/bench/ranks.sh):
  skip   the collective is not issued (the later ones take its seq)
  gap    the collective's line is lost (its seq is missing from the trace)
  type   an all-gather instead of the collective
  size   twice the bytes
  extra  the collective is issued twice
  swap   blocks INDEX and INDEX+1 run in swapped order (the same collectives
         and sizes, issued from each other's modules: a desync)
  sleep  ARG seconds pass before it is issued (a straggler)
  stop   the trace ends right after it (no region exit: an abrupt end; with
         ARG "cut", half a line follows)
"""

import argparse
import json
import queue
import random
import re
import subprocess
import sys
import threading
import time

MESH = "DeviceMesh('cpu', [0, 1, 2, 3])"
WORLD = 4
R = "(Replicate(),)"
S0 = "(Shard(dim=0),)"
S1 = "(Shard(dim=1),)"
S2 = "(Shard(dim=2),)"
P = "(Partial(sum),)"

# Model size (only used for shapes, byte counts and timings).
BATCH, SEQ, DIM, HIDDEN, VOCAB = 4, 1024, 2048, 8192, 32000

CD = "torch.testing._internal.distributed._tensor.common_dtensor."
T_LINEAR = "torch.nn.modules.linear.Linear"
T_EMB = "torch.nn.modules.sparse.Embedding"
T_DROP = "torch.nn.modules.dropout.Dropout"
T_NORM = "torch.nn.modules.normalization.LayerNorm"
T_GELU = "torch.nn.modules.activation.GELU"

F32, BF16 = "torch.float32", "torch.bfloat16"
ITEMSIZE = {F32: 4, BF16: 2}

# Base durations (ns) between an event and the previous one.
DUR_MOD = 1500
DUR_LOCAL = 4000
DUR_DT = 28000          # DTensor sharding propagation is slow on the host
DUR_COLL = 15000
DUR_HEAVY = {
    "aten.addmm.default": 60000, "aten.mm.default": 55000,
    "_c10d_functional.wait_tensor.default": 900000,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": 400000,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": 900000,
    "aten.native_layer_norm.default": 30000,
    "aten.native_layer_norm_backward.default": 45000,
}


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def arg(shape, placements):
    return {"shape": list(shape), "placements": placements, "mesh": MESH}


def param(name, shape, dtype=F32, placements=None):
    p = {"name": name, "shape": list(shape), "dtype": dtype,
         "nbytes": numel(shape) * ITEMSIZE[dtype], "requires_grad": True}
    if placements is not None:
        p["placements"] = placements
        p["mesh"] = MESH
    return p


class Step:
    """Template of one step: a list of (kind, text, text2, base_duration); timed()
    adds the bit width of the random extra time.

    kind 0: line = text + str(t) + "}"
    kind 1: line = text + str(seq) + text2 + str(t) + "}"   (collective)
    """

    def __init__(self):
        self.ev = []

    def _add(self, obj, dur):
        s = dumps(obj)
        assert s.endswith("}")
        self.ev.append((0, s[:-1] + ',"t":', None, dur))

    def timed(self):
        """The template with, per event, the bit width of its random extra time
        (up to about the base duration)."""
        return [(k, a, b, d, max(8, d.bit_length())) for k, a, b, d in self.ev]

    # module events
    def fw_pre(self, mod, typ, bw, params, grad_in):
        self._add({"ev": "fw_pre", "mod": mod, "type": typ, "bw": bw,
                   "params": params, "grad_in": grad_in and not bw}, DUR_MOD)

    def fw_post(self, mod, bw, grad_out=True):
        self._add({"ev": "fw_post", "mod": mod, "bw": bw,
                   "grad_out": grad_out and not bw}, DUR_MOD)

    def fw_done(self, mod, bw):
        self._add({"ev": "fw_done", "mod": mod, "bw": bw}, DUR_MOD)

    def bw_pre(self, mod):
        self._add({"ev": "bw_pre", "mod": mod}, DUR_MOD)

    def bw_enter(self, mod):
        self._add({"ev": "bw_enter", "mod": mod}, DUR_MOD)

    def bw_exit(self, mod):
        self._add({"ev": "bw_exit", "mod": mod}, DUR_MOD)

    def bw_end(self):
        self._add({"ev": "bw_end"}, DUR_MOD)

    # ops
    def op(self, name, bw):
        self._add({"ev": "op", "name": name, "bw": bw, "dt": False},
                  DUR_HEAVY.get(name, DUR_LOCAL))

    def dop(self, name, bw, args, local=None):
        """A DTensor op followed by the local op(s) it runs."""
        self._add({"ev": "op", "name": name, "bw": bw, "dt": True, "args": args},
                  DUR_DT)
        for lname in (local if local is not None else (name,)):
            self.op(lname, bw)

    def coll(self, name, bw, shape, dtype, nbytes=None):
        if nbytes is None:
            nbytes = numel(shape) * ITEMSIZE[dtype]
        head = dumps({"ev": "op", "name": name, "bw": bw, "dt": False, "pg": "0",
                      "seq": 0})
        head = head[: -len("0}")]
        tail = dumps({"bytes": nbytes, "dtype": dtype, "shape": list(shape)})
        self.ev.append((1, head, "," + tail[1:-1] + ',"t":', DUR_COLL))
        self.op("_c10d_functional.wait_tensor.default", bw)


# ---------------------------------------------------------------------------
# Model pieces.  `bw` is true when the forward runs inside the autograd engine
# (activation-checkpoint recompute).

X3 = (BATCH, SEQ, DIM)
X2 = (BATCH * SEQ, DIM)


def linear_fw(s, fqn, out_f, in_f, style, bias, bw):
    """Forward of a tensor-parallel Linear: style 'col', 'row' or 'out'."""
    in3 = (BATCH, SEQ, in_f)
    in2 = (BATCH * SEQ, in_f)
    out3 = (BATCH, SEQ, out_f)
    out2 = (BATCH * SEQ, out_f)
    if style == "row":
        wpl, bpl, xpl, opl = S1, R, S2, P
        wtpl = S0
    else:
        wpl, bpl, xpl, opl = S0, S0, R, S2
        wtpl = S1
    params = [param("weight", (out_f, in_f), F32, wpl)]
    if bias:
        params.append(param("bias", (out_f,), F32, bpl))
    s.fw_pre(fqn, T_LINEAR, bw, params, True)
    s.op("aten.view.default", bw)                         # DTensor.from_local
    s.dop("aten._to_copy.default", bw, [arg(in3, xpl)])   # autocast
    s.dop("aten._to_copy.default", bw, [arg((out_f, in_f), wpl)])
    if bias:
        s.dop("aten._to_copy.default", bw, [arg((out_f,), bpl)])
    s.dop("aten.view.default", bw, [arg(in3, xpl)])
    s.dop("aten.t.default", bw, [arg((out_f, in_f), wpl)])
    if bias:
        s.dop("aten.addmm.default", bw,
              [arg((out_f,), bpl), arg(in2, xpl), arg((in_f, out_f), wtpl)])
        s.dop("aten.view.default", bw, [arg(out2, opl if style == "row" else S1)])
    else:
        s.dop("aten.mm.default", bw, [arg(in2, xpl), arg((in_f, out_f), wtpl)])
        s.dop("aten._unsafe_view.default", bw, [arg(out2, S1)])
    s.fw_post(fqn, bw)
    # module-local forward hooks: TP output redistribution
    if style == "row":
        s.coll("_c10d_functional.all_reduce.default", bw, out3, BF16)
    elif style == "out":
        local = (BATCH, SEQ, out_f // WORLD)
        s.coll("_c10d_functional.all_gather_into_tensor.default", bw, local, BF16)
        s.op("aten.split.Tensor", bw)
        s.op("aten.cat.default", bw)
    s.fw_done(fqn, bw)


def linear_bw(s, fqn, out_f, in_f, style, bias, exit_now=True):
    bw = True
    in2 = (BATCH * SEQ, in_f)
    out3 = (BATCH, SEQ, out_f)
    out2 = (BATCH * SEQ, out_f)
    if style == "row":
        gpl, wpl, gwpl, gipl = R, S1, S1, S1
    else:
        gpl, wpl, gwpl, gipl = S2, S0, S0, P
    s.bw_pre(fqn)
    s.bw_enter(fqn)
    if style == "out":
        s.op("aten.split.Tensor", bw)                    # Replicate -> Shard(-1)
        s.op("aten.clone.default", bw)
    s.dop("aten.view.default", bw, [arg(out3, gpl)])
    s.dop("aten.mm.default", bw, [arg(out2, S1 if gpl == S2 else gpl),
                                   arg((out_f, in_f), wpl)])
    s.dop("aten.t.default", bw, [arg(out2, S1 if gpl == S2 else gpl)])
    s.dop("aten.mm.default", bw, [arg((out_f, BATCH * SEQ), S0 if gpl == S2 else gpl),
                                   arg(in2, R if style != "row" else S1)])
    s.dop("aten.t.default", bw, [arg((out_f, in_f), gwpl)])
    if bias:
        s.dop("aten.sum.dim_IntList", bw, [arg(out2, S1 if gpl == S2 else gpl)])
    s.dop("aten.view.default", bw, [arg(in2, gipl)])
    s.dop("aten._to_copy.default", bw, [arg((out_f, in_f), gwpl)])
    if bias:
        s.dop("aten._to_copy.default", bw, [arg((out_f,), S0 if style != "row" else R)])
    s.dop("aten._to_copy.default", bw, [arg((BATCH, SEQ, in_f), gipl)])
    if style != "row":
        # from_local backward: Partial -> Replicate gradient of the input
        s.coll("_c10d_functional.all_reduce.default", bw, (BATCH, SEQ, in_f), F32)
    if exit_now:
        s.bw_exit(fqn)


def leaf_fw(s, fqn, typ, ops, bw, params=(), grad_in=True):
    s.fw_pre(fqn, typ, bw, list(params), grad_in)
    for o in ops:
        s.op(o, bw)
    s.fw_post(fqn, bw)
    s.fw_done(fqn, bw)


def leaf_bw(s, fqn, ops, exit_now=True):
    s.bw_pre(fqn)
    s.bw_enter(fqn)
    for o in ops:
        s.op(o, True)
    if exit_now:
        s.bw_exit(fqn)


def norm_params():
    return [param("weight", (DIM,)), param("bias", (DIM,))]


def embedding_fw(s, fqn, rows, in_shape, bw):
    s.fw_pre(fqn, T_EMB, bw, [param("weight", (rows, DIM), F32, S0)], False)
    s.op("aten.view.default", bw)                          # from_local(tokens)
    s.dop("aten.embedding.default", bw, [arg((rows, DIM), S0), arg(in_shape, R)],
          local=("aten.lt.Scalar", "aten.ge.Scalar", "aten.bitwise_or.Tensor",
                 "aten.sub.Tensor", "aten.clone.default", "aten.index_put_.default",
                 "aten.embedding.default", "aten.index_put_.default"))
    s.fw_post(fqn, bw)
    s.coll("_c10d_functional.all_reduce.default", bw, X3, F32)
    s.fw_done(fqn, bw)


def embedding_bw(s, fqn, in_shape):
    # inputs are integer tokens: no post-backward hook, so no bw_exit
    s.bw_pre(fqn)
    s.bw_enter(fqn)
    s.dop("aten.embedding_dense_backward.default", True, [arg(X3, R), arg(in_shape, R)],
          local=("aten.index_put_.default", "aten.embedding_dense_backward.default"))


def block_fw(s, i, bw):
    L = "Transformer.layers.%d" % i
    A, F = L + ".attention", L + ".feed_forward"
    s.fw_pre(L, CD + "TransformerBlock", bw, [], True)
    leaf_fw(s, L + ".attention_norm", T_NORM, ["aten.native_layer_norm.default"], bw,
            norm_params())
    s.fw_pre(A, CD + "Attention", bw, [], True)
    for w in ("wq", "wk", "wv"):
        linear_fw(s, A + "." + w, DIM, DIM, "col", True, bw)
    for _ in range(3):
        s.op("aten.view.default", bw)
        s.op("aten.transpose.int", bw)
    s.op("aten._scaled_dot_product_flash_attention_for_cpu.default", bw)
    s.op("aten.transpose.int", bw)
    s.op("aten.clone.default", bw)
    s.op("aten.view.default", bw)
    linear_fw(s, A + ".wo", DIM, DIM, "row", True, bw)
    leaf_fw(s, A + ".resid_dropout", T_DROP, ["aten.native_dropout.default"], bw)
    s.fw_post(A, bw)
    s.fw_done(A, bw)
    s.op("aten.add.Tensor", bw)
    leaf_fw(s, L + ".ffn_norm", T_NORM, ["aten.native_layer_norm.default"], bw,
            norm_params())
    s.fw_pre(F, CD + "FeedForward", bw, [], True)
    linear_fw(s, F + ".w1", HIDDEN, DIM, "col", True, bw)
    leaf_fw(s, F + ".gelu", T_GELU, ["aten.gelu.default"], bw)
    linear_fw(s, F + ".w2", DIM, HIDDEN, "row", True, bw)
    leaf_fw(s, F + ".resid_dropout", T_DROP, ["aten.native_dropout.default"], bw)
    s.fw_post(F, bw)
    s.fw_done(F, bw)
    s.op("aten.add.Tensor", bw)
    s.fw_post(L, bw)
    s.fw_done(L, bw)


def block_bw(s, i, ac):
    L = "Transformer.layers.%d" % i
    A, F = L + ".attention", L + ".feed_forward"
    s.bw_pre(L)
    s.bw_enter(L)
    s.bw_pre(F)
    s.bw_enter(F)
    s.bw_pre(F + ".resid_dropout")
    s.bw_enter(F + ".resid_dropout")
    if ac:
        # the first saved tensor unpacked triggers the recompute of the block
        block_fw(s, i, True)
    s.op("aten.native_dropout_backward.default", True)
    s.bw_exit(F + ".resid_dropout")
    linear_bw(s, F + ".w2", DIM, HIDDEN, "row", True)
    leaf_bw(s, F + ".gelu", ["aten.gelu_backward.default"])
    # feed_forward and w1 share their input: both hooks fire after w1's backward
    linear_bw(s, F + ".w1", HIDDEN, DIM, "col", True, exit_now=False)
    s.bw_exit(F)
    s.bw_exit(F + ".w1")
    leaf_bw(s, L + ".ffn_norm", ["aten.native_layer_norm_backward.default"])
    s.op("aten.add.Tensor", True)                         # residual gradient
    s.bw_pre(A)
    s.bw_enter(A)
    s.bw_pre(A + ".resid_dropout")
    s.bw_enter(A + ".resid_dropout")
    s.op("aten.native_dropout_backward.default", True)
    s.bw_exit(A + ".resid_dropout")
    linear_bw(s, A + ".wo", DIM, DIM, "row", True)
    s.op("aten.view.default", True)
    s.op("aten.transpose.int", True)
    s.op("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", True)
    for _ in range(3):
        s.op("aten.transpose.int", True)
        s.op("aten.view.default", True)
    # wq, wk and wv share the attention input: their post-backward hooks (and the
    # attention's) fire once the gradient of that input is complete
    linear_bw(s, A + ".wv", DIM, DIM, "col", True, exit_now=False)
    linear_bw(s, A + ".wk", DIM, DIM, "col", True, exit_now=False)
    s.op("aten.add.Tensor", True)
    linear_bw(s, A + ".wq", DIM, DIM, "col", True, exit_now=False)
    s.op("aten.add.Tensor", True)
    for m in (A, A + ".wq", A + ".wk", A + ".wv"):
        s.bw_exit(m)
    # block and attention_norm share the block input
    leaf_bw(s, L + ".attention_norm", ["aten.native_layer_norm_backward.default"],
            exit_now=False)
    s.op("aten.add.Tensor", True)
    s.bw_exit(L)
    s.bw_exit(L + ".attention_norm")


def model_params(layers):
    """(shape, placements or None) of every parameter, in model.parameters() order."""
    ps = [((VOCAB, DIM), S0), ((SEQ, DIM), S0)]
    norm = [((DIM,), None), ((DIM,), None)]
    col = [((DIM, DIM), S0), ((DIM,), S0)]
    row = [((DIM, DIM), S1), ((DIM,), R)]
    for _ in range(layers):
        ps += norm + col * 3 + row + norm
        ps += [((HIDDEN, DIM), S0), ((HIDDEN,), S0), ((DIM, HIDDEN), S1), ((DIM,), R)]
    return ps + norm + [((VOCAB, DIM), S0)]


def build_step(layers, ac):
    s = Step()
    # forward
    s.fw_pre("Transformer", CD + "Transformer", False, [], False)
    embedding_fw(s, "Transformer.tok_embeddings", VOCAB, (BATCH, SEQ), False)
    s.op("aten.arange.start", False)
    embedding_fw(s, "Transformer.pos_embeddings", SEQ, (SEQ,), False)
    s.op("aten.add.Tensor", False)
    leaf_fw(s, "Transformer.dropout", T_DROP, ["aten.native_dropout.default"], False)
    for i in range(layers):
        block_fw(s, i, False)
    leaf_fw(s, "Transformer.norm", T_NORM, ["aten.native_layer_norm.default"], False,
            norm_params())
    linear_fw(s, "Transformer.output", VOCAB, DIM, "out", False, False)
    s.op("aten._to_copy.default", False)                  # .float()
    s.fw_post("Transformer", False)
    s.fw_done("Transformer", False)
    # loss, under Global
    for o in ("aten.view.default", "aten.view.default", "aten._log_softmax.default",
              "aten.nll_loss_forward.default", "aten.ones_like.default"):
        s.op(o, False)
    # backward
    for o in ("aten.nll_loss_backward.default", "aten._log_softmax_backward_data.default",
              "aten.view.default"):
        s.op(o, True)
    s.bw_pre("Transformer")
    s.bw_enter("Transformer")
    s.op("aten._to_copy.default", True)
    linear_bw(s, "Transformer.output", VOCAB, DIM, "out", False)
    leaf_bw(s, "Transformer.norm", ["aten.native_layer_norm_backward.default"])
    for i in reversed(range(layers)):
        block_bw(s, i, ac)
    leaf_bw(s, "Transformer.dropout", ["aten.native_dropout_backward.default"])
    embedding_bw(s, "Transformer.pos_embeddings", (SEQ,))
    embedding_bw(s, "Transformer.tok_embeddings", (BATCH, SEQ))
    s.bw_end()
    # clip_grad_norm_ and an AdamW step, per tensor (foreach is off by default for
    # a CPU mesh); the current module is still the last one whose backward started
    # (tok_embeddings), so CommDebugMode puts all of this there, as forward.
    params = model_params(layers)
    for shape, pl in params:
        if pl:
            s.dop("aten.linalg_vector_norm.default", False, [arg(shape, pl)])
        else:
            s.op("aten.linalg_vector_norm.default", False)
    s.dop("aten.stack.default", False, [])
    s.dop("aten.linalg_vector_norm.default", False, [arg((len(params),), P)])
    s.coll("_c10d_functional.all_reduce.default", False, (), F32)
    for o in ("aten.add.Scalar", "aten.reciprocal.default", "aten.mul.Tensor",
              "aten.clamp.default"):
        s.op(o, False)
    for shape, pl in params:
        if pl:
            s.dop("aten.mul_.Tensor", False, [arg(shape, pl)])
        else:
            s.op("aten.mul_.Tensor", False)
    for shape, pl in params:
        s.op("aten.add_.Tensor", False)                   # step += 1
        s.op("aten._local_scalar_dense.default", False)   # step.item()
        for o in ("aten.mul_.Scalar", "aten.lerp_.Scalar", "aten.mul_.Tensor",
                  "aten.addcmul_.default", "aten.sqrt.default", "aten.div.Scalar",
                  "aten.add_.Scalar", "aten.addcdiv_.default"):
            if pl:
                s.dop(o, False, [arg(shape, pl)])
            else:
                s.op(o, False)
    return s.timed()


# ---------------------------------------------------------------------------

class Sink:
    """Writes text; one zstd frame per flush (each frame is its own zstd run)."""

    FRAME_MIN = 1 << 20

    def __init__(self, path, plain, level):
        self.plain = plain
        self.level = level
        self.f = sys.stdout.buffer if path == "-" else open(path, "wb")
        self.own = path != "-"
        self.buf = []
        self.size = 0
        self.raw_bytes = 0
        self.q = None
        if not plain:
            self.q = queue.Queue(maxsize=4)
            self.err = None
            self.th = threading.Thread(target=self._worker, daemon=True)
            self.th.start()

    def _worker(self):
        while True:
            data = self.q.get()
            if data is None:
                return
            if self.err:
                continue
            try:
                r = subprocess.run(["zstd", "-q", "-%d" % self.level, "-T1", "-c"],
                                   input=data, stdout=self.f)
                if r.returncode != 0:
                    self.err = "zstd exited with status %d" % r.returncode
            except OSError as e:
                self.err = "cannot run zstd: %s" % e

    def write(self, text):
        self.buf.append(text)
        self.size += len(text)

    def flush_frame(self, final=False):
        if not self.buf or (self.size < self.FRAME_MIN and not final):
            return
        data = "".join(self.buf).encode()
        self.buf = []
        self.size = 0
        self.raw_bytes += len(data)
        if self.plain:
            self.f.write(data)
        else:
            self.q.put(data)

    def close(self):
        self.flush_frame(final=True)
        if self.q is not None:
            self.q.put(None)
            self.th.join()
            if self.err:
                raise SystemExit("gen_trace.py: " + self.err)
        self.f.flush()
        if self.own:
            self.f.close()


def parse_fault(text):
    parts = text.split(":")
    kinds = ("skip", "gap", "type", "size", "extra", "swap", "sleep", "stop")
    if len(parts) not in (3, 4) or parts[0] not in kinds:
        raise argparse.ArgumentTypeError("--fault takes KIND:STEP:INDEX[:ARG], KIND one of "
                                         + ", ".join(kinds))
    try:
        step, index = int(parts[1]), int(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError("--fault: STEP and INDEX are numbers: %r" % text)
    return (parts[0], step, index, parts[3] if len(parts) == 4 else None)


def faulty_step(tmpl, faults):
    """The template of a step with this rank's faults: (template, extra ns
    before each entry, index of the entry after which the trace stops or
    None, cut, entries whose seq is lost)."""
    tmpl = list(tmpl)
    colls = [i for i, e in enumerate(tmpl) if e[0] == 1]
    delay = {}
    stop, cut, lost = None, False, set()
    drop = set()
    for kind, _, index, arg in faults:
        if kind != "swap" and not 0 <= index < len(colls):
            raise SystemExit("gen_trace.py: --fault %s: the step has %d collectives"
                             % (kind, len(colls)))
        i = colls[index]
        if kind in ("skip",):
            drop.update((i, i + 1))
        elif kind == "gap":
            lost.add(i)
        elif kind == "type":
            k, head, tail, d, b = tmpl[i]
            name = head.split('"name":"')[1].split('"')[0]
            tmpl[i] = (k, head.replace(name, "_c10d_functional.all_gather_into_tensor.default"),
                       tail, d, b)
        elif kind == "size":
            k, head, tail, d, b = tmpl[i]
            n = int(tail.split('"bytes":')[1].split(",")[0])
            tmpl[i] = (k, head, tail.replace('"bytes":%d' % n, '"bytes":%d' % (2 * n)), d, b)
        elif kind == "swap":
            # blocks INDEX and INDEX+1 run in swapped order: the same collectives
            # with the same sizes, issued from each other's modules
            pat = re.compile(r'Transformer\.layers\.(%d|%d)(?=[."])' % (index, index + 1))
            other = {str(index): str(index + 1), str(index + 1): str(index)}
            sub = lambda m: "Transformer.layers." + other[m.group(1)]
            tmpl = [(k, pat.sub(sub, x), y, d, b) for k, x, y, d, b in tmpl]
        elif kind == "sleep":
            delay[i] = delay.get(i, 0) + int(float(arg or "1") * 1e9)
        elif kind == "stop":
            stop, cut = i + 1, arg == "cut"
    extra = [colls[index] for kind, _, index, _ in faults if kind == "extra"]
    out, dl, stop_at, lost_at = [], [], None, set()
    for i, e in enumerate(tmpl):
        if i in drop:
            continue
        if stop is not None and i == stop:
            stop_at = len(out)
        out.append(e)
        dl.append(delay.get(i, 0))
        if i in lost:
            lost_at.add(len(out) - 1)
        if i in extra:
            out.append(e)
            dl.append(0)
    if stop is not None and stop_at is None:
        stop_at = len(out)
    return out, dl, stop_at, cut, lost_at


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000,
                    help="write whole steps until at least this many events (default 2000000)")
    ap.add_argument("--layers", type=int, default=32, help="transformer blocks (default 32)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--ac", action="store_true",
                    help="activation checkpointing: recompute every block in backward")
    ap.add_argument("--plain", action="store_true", help="write plain JSONL, not zstd")
    ap.add_argument("--level", type=int, default=3, help="zstd level (default 3)")
    ap.add_argument("--rank", type=int, default=0, help="meta rank (default 0)")
    ap.add_argument("--world", type=int, default=WORLD,
                    help="meta world_size and ranks of group 0 (default %d)" % WORLD)
    ap.add_argument("--fault", type=parse_fault, action="append", default=[],
                    help="KIND:STEP:INDEX[:ARG]: depart from the other ranks (see above)")
    ap.add_argument("--steps", type=int, default=0,
                    help="write exactly this many steps (overrides --events)")
    ap.add_argument("output", help='output file, "-" for standard output')
    a = ap.parse_args()
    if a.events < 0 or a.layers < 1:
        ap.error("--events must be >= 0 and --layers >= 1")
    if a.world < 1 or not 0 <= a.rank < a.world:
        ap.error("--world must be >= 1 and 0 <= --rank < --world")

    started = time.monotonic()
    rng = random.Random(a.seed)
    jitter = rng.getrandbits
    tmpl = build_step(a.layers, a.ac)
    per_step = len(tmpl) + 2
    n_ops = sum(1 for e in tmpl if e[1].startswith('{"ev":"op"'))

    sink = Sink(a.output, a.plain, a.level)
    sink.write(dumps({"ev": "meta", "format": "commdebug-trace", "version": 1, "rank": a.rank,
                      "world_size": a.world, "host": "node%d" % (a.rank // 8),
                      "pid": 1234 + a.rank % 8,
                      "t0": 1700000000000000000, "torch": "2.11.0",
                      "recorder": "commdebug-py 0.1"}) + "\n")
    t = 1_000_000 + jitter(16)
    sink.write(dumps({"ev": "pg", "name": "0", "desc": "default_pg",
                      "ranks": list(range(a.world)), "backend": "gloo", "t": t}) + "\n")
    events = 2
    seq = 0
    step = 0
    stopped = False
    while (step < a.steps if a.steps else (events < a.events or step == 0)) and not stopped:
        step += 1
        t += 200_000 + jitter(16)
        out = ['{"ev":"region_enter","region":%d,"label":"step %d","t":%d}\n'
               % (step, step, t)]
        app = out.append
        faults = [f for f in a.fault if f[1] == step]
        if not faults:
            for kind, text, text2, dur, bits in tmpl:
                t += dur + jitter(bits)
                if kind:
                    seq += 1
                    app("%s%d%s%d}\n" % (text, seq, text2, t))
                else:
                    app("%s%d}\n" % (text, t))
        else:
            ftmpl, delays, stop_at, cut, lost = faulty_step(tmpl, faults)
            for i, (kind, text, text2, dur, bits) in enumerate(ftmpl):
                if i == stop_at:
                    stopped = True
                    if cut:
                        app('{"ev":"op","name":"aten.add')
                    break
                t += dur + delays[i] + jitter(bits)
                if kind:
                    seq += 1
                    if i not in lost:
                        app("%s%d%s%d}\n" % (text, seq, text2, t))
                else:
                    app("%s%d}\n" % (text, t))
        if not stopped:
            t += 5000 + jitter(11)
            app('{"ev":"region_exit","region":%d,"t":%d}\n' % (step, t))
        sink.write("".join(out))
        sink.flush_frame(final=stopped)
        events += per_step
    sink.close()
    secs = time.monotonic() - started
    print("gen_trace.py: %d events in %d steps (%d per step, %.1f%% ops), %d layers, "
          "%.1f MiB uncompressed, %.1f s"
          % (events, step, per_step, 100.0 * n_ops / per_step, a.layers,
             sink.raw_bytes / 1048576.0, secs), file=sys.stderr)


if __name__ == "__main__":
    main()
