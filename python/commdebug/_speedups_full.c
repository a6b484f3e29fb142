/*
 * The full recorder's module calls (_leanbw.make_call): FullCall(...) is
 * the call of a module with no hooks of its own while the recorder's three
 * global hooks are the only ones (_modcall), and Marker(...) the gradient
 * hook that writes bw_pre, bw_enter and bw_exit lines (_leanbw.make_marker).
 *
 * The call does the common case of each side in C, as the Python it stands
 * for does it (_tracker's _fw_pre_lean and _fw_post_lean, LeanBackwardHook's
 * setup_input_hook and setup_output_hook):
 *
 * - before the forward: in a region, in forward, a module the recorder
 *   knows whose parameters were read this region and are the same objects,
 *   not DistributedDataParallel, grad mode on, called with one positional
 *   argument that is a plain Tensor requiring grad with a grad_fn, whose
 *   gradient hooks are none or end in a marker with nothing registered
 *   since: fw_pre, its bw_exit line (joined to that marker, or a marker of
 *   its own), the identity node (none along nn.Sequential's chains: see
 *   "chains" below) and its view event; or one that is a plain
 *   Tensor not requiring grad, without gradient hooks: fw_pre alone;
 * - after it: the same module facts, not in compiled code, an output that
 *   is a plain Tensor requiring grad whose grad_fn is the thread's newest
 *   node, its hooks as above, no output side waiting elsewhere: fw_post,
 *   fw_done, the view event and the marker of bw_pre and bw_enter.
 *
 * It decides each side before it changes anything; where it does not do
 * the first, the Python call does the whole call (py_call), where it does
 * not do the second, the Python does that side (py_post).
 */
#include "_speedups.h"

#include <stddef.h>
#include <structmember.h>

/* Slots of a module's entry (_light) and of its full-mode texts (_tracker._fentry). */
enum { F_KEY, F_REGION, F_PRE_IN, F_PRE_NOIN, F_PRE_BW, F_POST_OUT, F_POST_NOOUT, F_POST_BW,
       F_EXIT, F_ENTER, F_META, F_N };

static PyObject *s_in_region, *s_region, *s_parameters, *s_requires_grad, *s_register,
	*s_next_id, *s_queue_bw_end, *s_seq_nr, *s_enter, *s_exit,
	*s_forward, *s_fparams, *s_exit_prefix, *s_eval_frame, *s_is_in_compiled, *s_shape,
	*s_dtype, *s_has_callback, *s_inplace, *s_modules, *s_own_hooks[4];

/* ---------------------------------------------------------------- Marker */

typedef struct {
	PyObject_HEAD
	PyObject *buf;          /* the writer's lines (a LineBuf, or a list) */
	PyObject *rec;          /* the recorder (its _queue_bw_end()) */
	PyObject *lines;        /* _cd_lines: the line prefixes it writes */
	PyObject *enter;        /* _cd_enter: one of them is a bw_enter */
	PyObject *bound;        /* _cd_bound: the key hooks after it are put before it from */
	vectorcallfunc vectorcall;
} Marker;

/* marker(grad): its lines, one time; the end-of-backward callback queued
 * for a bw_enter (as the module tracker's own hook does). */
static PyObject *Marker_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
				   PyObject *kwnames)
{
	(void)argv;
	(void)nargsf;
	(void)kwnames;
	Marker *m = (Marker *)self;
	if (!m->lines || !PyList_Check(m->lines) || !m->enter) {
		PyErr_SetString(PyExc_TypeError, "commdebug: a Marker without its lines");
		return NULL;
	}
	cd_time now;
	cd_time_now(&now);
	PyObject *lines = Py_NewRef(m->lines);
	int r = 0;
	for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(lines); i++)
		r = cd_append_t(m->buf, PyList_GET_ITEM(lines, i), &now);
	Py_DECREF(lines);
	cd_time_clear(&now);
	if (r == 0) {
		int enter = PyObject_IsTrue(m->enter);
		if (enter > 0)          /* (queued already: rec._has_callback) */
			enter = cd_attr_true(m->rec, s_has_callback) == 0 ? 1 :
				PyErr_Occurred() ? -1 : 0;
		if (enter > 0) {
			PyObject *q = PyObject_CallMethodNoArgs(m->rec, s_queue_bw_end);
			r = q ? 0 : -1;
			Py_XDECREF(q);
		} else if (enter < 0) {
			r = -1;
		}
	}
	return r < 0 ? NULL : Py_NewRef(Py_None);
}

#define MARKER_FIELDS(X) X(buf) X(rec) X(lines) X(enter) X(bound)

CD_GC_FUNCS(Marker, MARKER_FIELDS)

static int Marker_init(Marker *m, PyObject *args, PyObject *kw)
{
	static char *names[] = {"buf", "rec", "lines", "enter", NULL};
	PyObject *buf, *rec, *lines, *enter;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO!O", names, &buf, &rec,
					 &PyList_Type, &lines, &enter) || !cd_check_buf(buf, "Marker"))
		return -1;
	Marker_clear(m);
	m->buf = Py_NewRef(buf);
	m->rec = Py_NewRef(rec);
	m->lines = Py_NewRef(lines);
	m->enter = Py_NewRef(enter);
	m->bound = Py_NewRef(Py_None);
	m->vectorcall = Marker_vectorcall;
	return 0;
}

static PyMemberDef Marker_members[] = {
	{"_cd_lines", T_OBJECT_EX, offsetof(Marker, lines), 0, "the line prefixes it writes"},
	{"_cd_enter", T_OBJECT_EX, offsetof(Marker, enter), 0, "one of them is a bw_enter"},
	{"_cd_bound", T_OBJECT_EX, offsetof(Marker, bound), 0, "hooks registered after it"},
	{NULL, 0, 0, 0, NULL},
};

PyTypeObject cd_MarkerType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.Marker",
	.tp_basicsize = sizeof(Marker),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "The full recorder's gradient hook of bw_pre/bw_enter/bw_exit lines "
		  "(see commdebug._leanbw.make_marker)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Marker_init,
	.tp_dealloc = (destructor)Marker_dealloc,
	.tp_traverse = (traverseproc)Marker_traverse,
	.tp_clear = (inquiry)Marker_clear,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Marker, vectorcall),
	.tp_members = Marker_members,
};

/* -------------------------------------------------------------- FullCall */

typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	PyObject *rec;          /* the recorder: _in_region, region, its buf */
	PyObject *lc;           /* dict: id(module) -> entry */
	PyObject *buf;          /* the writer's lines (a LineBuf, or a list) */
	PyObject *pending;      /* rec._pending_enter (dict) */
	PyObject *cur_task;     /* torch._C._current_graph_task_id */
	PyObject *grad_enabled; /* torch.is_grad_enabled */
	PyObject *tensor;       /* torch.Tensor */
	PyObject *odict;        /* collections.OrderedDict */
	PyObject *handle;       /* torch.utils.hooks.RemovableHandle (its next_id) */
	PyObject *alias;        /* aten.alias.default */
	PyObject *op_type;      /* _compat.OP_CALLS_OP (OpOverload or None) */
	PyObject *no_dispatch;  /* torch._C._DisableTorchDispatch */
	PyObject *view;         /* (the view's op event text in forward, in backward) */
	PyObject *next_seq;     /* torch._C._autograd._get_sequence_nr */
	PyObject *tracing;      /* torch._C._get_tracing_state */
	PyObject *py_call;      /* the Python call: py_call(mod, args, kwargs) */
	PyObject *py_post;      /* its output side: py_post(mod, args, result) */
	PyObject *tf_mode;      /* torch._C._is_torch_function_mode_enabled, or None */
	PyObject *single;       /* classes whose forward makes one node of its input (a tuple) */
	PyObject *seq;          /* (nn.Sequential, its forward), or None: no chains */
	PyObject *leaves;       /* ((class, its forward), ...): one use of their input, none kept */
	PyObject *py_exit;      /* py_exit(t, line): _leanbw.exit_line for the recorder */
	/* _modcall.only_ours's: torch's four global hook dicts, the light
	 * recorders' hooks and the full recorders' calls (lists), and the call
	 * of the rest (_modcall.other(mod, args, kwargs)) */
	PyObject *gfp, *gf, *gbp, *gb, *pairs, *full, *other;
	int guard_raii;         /* no_dispatch() is on from its making to its freeing */
	Py_ssize_t nj_slot, post_slot, bwpre_slot, ddp_slot, full_slot;
} FullCall;

/* A new key from torch's handle counter (RemovableHandle.next_id += 1). */
static PyObject *new_key(FullCall *c)
{
	PyObject *k = PyObject_GetAttr(c->handle, s_next_id);
	if (!k)
		return NULL;
	PyObject *one = PyLong_FromLong(1), *next = one ? PyNumber_Add(k, one) : NULL;
	Py_XDECREF(one);
	if (!next || PyObject_SetAttr(c->handle, s_next_id, next) < 0) {
		Py_XDECREF(next);
		Py_DECREF(k);
		return NULL;
	}
	Py_DECREF(next);
	return k;
}

/* The module's entry and its full-mode texts (borrowed) when it is one the
 * common case serves: 1, else 0 (no error), -1 on error. */
static int entry_of(FullCall *c, PyObject *mod, PyObject **e, PyObject **f)
{
	PyObject *key = PyLong_FromVoidPtr(mod);
	if (!key)
		return -1;
	*e = PyDict_GetItemWithError(c->lc, key);
	Py_DECREF(key);
	if (!*e)
		return PyErr_Occurred() ? -1 : 0;
	if (!PyList_CheckExact(*e) || PyList_GET_SIZE(*e) <= c->full_slot ||
	    PyList_GET_ITEM(*e, c->nj_slot) == Py_None)
		return 0;
	int ddp = PyObject_IsTrue(PyList_GET_ITEM(*e, c->ddp_slot));
	if (ddp)
		return ddp < 0 ? -1 : 0;
	*f = PyList_GET_ITEM(*e, c->full_slot);
	return PyList_CheckExact(*f) && PyList_GET_SIZE(*f) == F_N;
}

/* 1 when the call's result is true, 0, -1 on error. */
static int call_true(PyObject *fn)
{
	PyObject *v = PyObject_CallNoArgs(fn);
	if (!v)
		return -1;
	int r = PyObject_IsTrue(v);
	Py_DECREF(v);
	return r;
}

/* The facts both sides need: in a region, in forward, grad mode on. */
static int in_forward_region(FullCall *c)
{
	int r = cd_attr_true(c->rec, s_in_region);
	if (r <= 0)
		return r;
	if ((r = cd_in_backward(c->cur_task)) != 0)
		return r < 0 ? -1 : 0;
	return call_true(c->grad_enabled);
}

/* t, a plain Tensor requiring grad (rg: what its requires_grad says), has a
 * grad_fn: 1 with *g (new reference) that grad_fn, 0, -1 on error. */
static int grad_fn_of(PyObject *t, int rg, PyObject **g)
{
	if (rg <= 0)
		return rg;
	*g = cd_tensor_get(t, CD_TA_GRAD_FN);
	if (!*g)
		return -1;
	if (*g == Py_None) {
		Py_CLEAR(*g);
		return 0;
	}
	return 1;
}

/* t when it is a plain Tensor requiring grad with a grad_fn: 1 with *g (new
 * reference) its grad_fn, 0, -1 on error. */
static int plain_grad_tensor(FullCall *c, PyObject *t, PyObject **g)
{
	if ((PyObject *)Py_TYPE(t) != c->tensor)
		return 0;
	return grad_fn_of(t, cd_tensor_true(t, CD_TA_REQUIRES_GRAD), g);
}

/* t, a plain Tensor whose requires_grad says rg, does not require grad and
 * has no gradient hooks (from when it did): 1, 0, -1 on error. */
static int no_grad_tensor(PyObject *t, int rg)
{
	if (rg != 0)
		return rg < 0 ? -1 : 0;
	PyObject *d = cd_tensor_get(t, CD_TA_BW_HOOKS);
	if (!d)
		return -1;
	int none = d == Py_None || (PyDict_Check(d) && PyDict_GET_SIZE(d) == 0);
	Py_DECREF(d);
	return none;
}

/* Appends (text, now): 0, -1 on error. */
static int append_now(FullCall *c, PyObject *text)
{
	cd_time now;
	cd_time_now(&now);
	int r = cd_append_t(c->buf, text, &now);
	cd_time_clear(&now);
	return r;
}

/* A tensor's hooks as the common case takes them: 1 with *d (new reference)
 * None or the empty dict and *first NULL, or the dict and *first (borrowed)
 * its first hook, a Marker with nothing registered since it (_leanbw._quiet);
 * 0 for anything else, -1 on error.  (The dict is an OrderedDict, read in
 * the order of its dict: nobody moves a tensor's hooks with move_to_end,
 * so that is the order they run in.) */
static int quiet_hooks(PyObject *t, PyObject **d, PyObject **first)
{
	*first = NULL;
	*d = cd_tensor_get(t, CD_TA_BW_HOOKS);
	if (!*d)
		return -1;
	if (*d == Py_None)
		return 1;
	if (!PyDict_Check(*d))
		goto no;
	if (PyDict_GET_SIZE(*d) == 0)
		return 1;
	Py_ssize_t pos = 0;
	PyObject *k, *v, *max = NULL;
	while (PyDict_Next(*d, &pos, &k, &v)) {
		if (!PyLong_CheckExact(k))
			goto no;
		if (!*first)
			*first = v;
		if (!max) {
			max = k;
		} else {
			int gt = PyObject_RichCompareBool(k, max, Py_GT);
			if (gt < 0)
				goto err;
			if (gt)
				max = k;
		}
	}
	Marker *m = (Marker *)*first;
	if (Py_TYPE(*first) != &cd_MarkerType || !m->bound || !PyLong_CheckExact(m->bound) ||
	    !m->lines || !PyList_CheckExact(m->lines))
		goto no;
	int le = PyObject_RichCompareBool(max, m->bound, Py_LE);
	if (le < 0)
		goto err;
	if (le)
		return 1;
no:
	Py_CLEAR(*d);
	*first = NULL;
	return 0;
err:
	Py_CLEAR(*d);
	*first = NULL;
	return -1;
}

/* t's hook dict made where it has none (_leanbw._hook_dict): a new reference. */
static PyObject *hook_dict(FullCall *c, PyObject *t, PyObject *d, PyObject *g)
{
	if (d != Py_None)
		return Py_NewRef(d);
	PyObject *nd = PyObject_CallNoArgs(c->odict);
	if (!nd)
		return NULL;
	PyObject *r = NULL;
	if (cd_tensor_set(t, CD_TA_BW_HOOKS, nd) == 0)
		r = PyObject_CallMethodOneArg(g, s_register, t);
	if (!r) {
		Py_DECREF(nd);
		return NULL;
	}
	Py_DECREF(r);
	return nd;
}

/* A Marker of lines (a new list of the n texts) and enter, at a new key in
 * the dict d (with_bound: that key is its _cd_bound too). */
static int add_marker(FullCall *c, PyObject *d, PyObject *const *texts, int n, int enter,
		      int with_bound)
{
	PyObject *lines = PyList_New(n);
	if (!lines)
		return -1;
	for (int i = 0; i < n; i++)
		PyList_SET_ITEM(lines, i, Py_NewRef(texts[i]));
	/* (made as Marker(buf, rec, lines, enter) makes one, without parsing
	 * its arguments) */
	Marker *m = (Marker *)cd_MarkerType.tp_alloc(&cd_MarkerType, 0);
	if (!m) {
		Py_DECREF(lines);
		return -1;
	}
	m->buf = Py_NewRef(c->buf);
	m->rec = Py_NewRef(c->rec);
	m->lines = lines;
	m->enter = Py_NewRef(enter ? Py_True : Py_False);
	m->bound = Py_NewRef(Py_None);
	m->vectorcall = Marker_vectorcall;
	PyObject *key = new_key(c);
	int r = key ? 0 : -1;
	if (!r && with_bound)
		Py_SETREF(m->bound, Py_NewRef(key));
	if (!r)
		r = PyObject_SetItem(d, key, (PyObject *)m);
	Py_XDECREF(key);
	Py_DECREF(m);
	return r;
}

/* The exception being raised, held aside while cleanup code runs (and put
 * back after it, over any error of that code). */
typedef struct {
	PyObject *type, *value, *tb;    /* (3.12 and later: value alone) */
} held_exc;

static void exc_hold(held_exc *h)
{
#if PY_VERSION_HEX >= 0x030C0000
	h->type = h->tb = NULL;
	h->value = PyErr_GetRaisedException();
#else
	PyErr_Fetch(&h->type, &h->value, &h->tb);
#endif
}

static int exc_held(const held_exc *h)
{
	return h->type || h->value;
}

static void exc_restore(held_exc *h)
{
	if (!exc_held(h))
		return;
	PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
	PyErr_SetRaisedException(h->value);
#else
	PyErr_Restore(h->type, h->value, h->tb);
#endif
}

/* aten.alias of t below the Python dispatch key (no op event: the view's
 * is written by the caller), as `with _DisableTorchDispatch(): alias(t)`. */
static PyObject *identity_node(FullCall *c, PyObject *t)
{
	PyObject *guard = PyObject_CallNoArgs(c->no_dispatch), *a = NULL, *r;
	if (!guard)
		return NULL;
	if (!c->guard_raii) {
		if (!(r = PyObject_CallMethodNoArgs(guard, s_enter))) {
			Py_DECREF(guard);
			return NULL;
		}
		Py_DECREF(r);
	}
	/* t[...] is at::alias(t) without the operator's boxed call (1.6 us in
	 * place, against 0.5), where no torch function mode would see it */
	int tf = c->tf_mode == Py_None ? 1 : call_true(c->tf_mode);
	if (tf == 0) {
		a = PyObject_GetItem(t, Py_Ellipsis);
	} else if (tf > 0) {
		PyObject *args = PyTuple_Pack(1, t);
		if (args) {
			a = cd_call_op(c->op_type, c->alias, args, NULL);
			Py_DECREF(args);
		}
	}
	/* (its freeing is its exit where guard_raii: torch's RAII guard, which
	 * __enter__ and __exit__ only wrap, 0.2 us less; else __exit__ with no
	 * exception.  Either way an error of the alias is kept for the caller,
	 * as `with` would re-raise it after an __exit__ that does not swallow
	 * it) */
	held_exc exc;
	exc_hold(&exc);
	r = c->guard_raii ? Py_NewRef(Py_None) :
		PyObject_CallMethodObjArgs(guard, s_exit, Py_None, Py_None, Py_None, NULL);
	Py_DECREF(guard);
	exc_restore(&exc);
	if (!r)
		Py_CLEAR(a);
	Py_XDECREF(r);
	return a;
}

/* The parameters in ps (a dict) are the objects whose ids key holds, in
 * their order (tuple(map(id, ps.values())) == key, without making it): 1,
 * 0. */
static int same_objects(PyObject *ps, PyObject *key)
{
	if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != PyDict_GET_SIZE(ps))
		return 0;
	Py_ssize_t pos = 0, i = 0;
	PyObject *k, *v;
	while (PyDict_Next(ps, &pos, &k, &v)) {
		PyObject *id = PyTuple_GET_ITEM(key, i++);
		if (!PyLong_CheckExact(id) || PyLong_AsVoidPtr(id) != (void *)v) {
			PyErr_Clear();
			return 0;
		}
	}
	return 1;
}

/* a == b for two of a parameter's facts: identity first (names, bools and
 * dtypes are the same objects while they are equal). */
static int same_fact(PyObject *a, PyObject *b)
{
	return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
}

/* What the parameters in ps (a dict) are now says what meta (what their
 * texts say of them, _tracker._params_meta's tuple) says, compared item by item
 * without making that tuple: 1, 0, -1 on error. */
static int same_meta(PyObject *ps, PyObject *meta)
{
	if (!PyTuple_CheckExact(meta))
		return 0;
	Py_ssize_t pos = 0, i = 0, n = PyTuple_GET_SIZE(meta);
	PyObject *k, *v;
	int r = 1;
	while (r == 1 && PyDict_Next(ps, &pos, &k, &v)) {
		if (v == Py_None)
			continue;
		PyObject *m = i < n ? PyTuple_GET_ITEM(meta, i++) : NULL;
		if (!m || !PyTuple_CheckExact(m) || PyTuple_GET_SIZE(m) != 4)
			return 0;
		/* (held: the getters run torch's code, with the dict's items borrowed) */
		Py_INCREF(k);
		Py_INCREF(v);
		r = same_fact(k, PyTuple_GET_ITEM(m, 0));
		PyObject *names[3] = {s_requires_grad, s_shape, s_dtype};
		for (int f = 0; r == 1 && f < 3; f++) {
			PyObject *x = PyObject_GetAttr(v, names[f]);
			r = x ? same_fact(x, PyTuple_GET_ITEM(m, f + 1)) : -1;
			Py_XDECREF(x);
		}
		Py_DECREF(k);
		Py_DECREF(v);
	}
	return r == 1 ? i == n : r;
}

/* mod's attribute name (a new reference), read in md, its instance dict,
 * where it is there (nn.Module's __getattr__ makes every attribute lookup of
 * a module a Python-level hook's, about 300 instructions each), else as the
 * Python reads it. */
static PyObject *mod_attr(PyObject *mod, PyObject *md, PyObject *name)
{
	PyObject *v = PyDict_GetItemWithError(md, name);
	if (v)
		return Py_NewRef(v);
	return PyErr_Occurred() ? NULL : PyObject_GetAttr(mod, name);
}

/* The module's fw_pre texts with its parameters as they are (_tracker's
 * _fw_pre_lean): kept within a region while its parameters are the same
 * objects (f[F_KEY], f[F_REGION]); at its first call in another region,
 * kept where what they say of them is the same too (f[F_META]); else
 * made again by rec._fparams(mod, e, f, key).  0, -1 on error. */
static int params_fresh(FullCall *c, PyObject *mod, PyObject *md, PyObject *e, PyObject *f)
{
	PyObject *region = PyObject_GetAttr(c->rec, s_region);
	if (!region)
		return -1;
	PyObject *ps = mod_attr(mod, md, s_parameters), *key = NULL;
	int r = -1, same;
	if (!ps)
		goto out;
	if (!PyDict_Check(ps)) {
		PyErr_SetString(PyExc_TypeError, "commdebug: a module's _parameters is not a dict");
		goto out;
	}
	/* the same objects as when the texts were made, this region: kept */
	same = same_objects(ps, PyList_GET_ITEM(f, F_KEY));
	if (same) {
		int now = PyObject_RichCompareBool(region, PyList_GET_ITEM(f, F_REGION), Py_EQ);
		if (now < 0)
			goto out;
		if (!now) {
			/* another region: read whole again, and the texts made again
			 * only where a name, requires_grad, shape or dtype changed */
			same = same_meta(ps, PyList_GET_ITEM(f, F_META));
			if (same < 0)
				goto out;
			if (same && PyList_SetItem(f, F_REGION, Py_NewRef(region)) < 0)
				goto out;
		}
	}
	if (!same) {
		/* key = tuple(map(id, ps.values())) */
		key = PyTuple_New(PyDict_GET_SIZE(ps));
		if (!key)
			goto out;
		Py_ssize_t pos = 0, i = 0;
		PyObject *k, *v;
		while (PyDict_Next(ps, &pos, &k, &v)) {
			PyObject *id = PyLong_FromVoidPtr(v);
			if (!id)
				goto out;
			PyTuple_SET_ITEM(key, i++, id);
		}
		PyObject *res = PyObject_CallMethodObjArgs(c->rec, s_fparams, mod, e, f, key, NULL);
		if (!res)
			goto out;
		Py_DECREF(res);
	}
	r = 0;
out:
	Py_XDECREF(key);
	Py_XDECREF(ps);
	Py_DECREF(region);
	return r;
}

/* mod is of one of the classes in c->single (activations: their forward
 * makes one autograd node, whose only input is the module's input), not in
 * place, without a forward of its own, and no torch function mode would see
 * that forward: 1, 0, -1 on error.  Such a module's identity node would run
 * right after that node, with nothing between (no other node can be ready
 * with a higher sequence number then), and change no op's order and no
 * event's: it is left out. */
static int single_node(FullCall *c, PyObject *mod, PyObject *d)
{
	Py_ssize_t n = PyTuple_GET_SIZE(c->single), i = 0;
	while (i < n && (PyObject *)Py_TYPE(mod) != PyTuple_GET_ITEM(c->single, i))
		i++;
	if (i == n)
		return 0;
	/* (read in the instance's dict: nn.Module's __getattr__ for an attribute
	 * it lacks is Python) */
	int r = 1;
	PyObject *ip = PyDict_GetItemWithError(d, s_inplace);
	if (ip) {
		Py_INCREF(ip);          /* (its __bool__ is anybody's code) */
		int t = PyObject_IsTrue(ip);
		Py_DECREF(ip);
		r = t < 0 ? -1 : !t;
	} else if (PyErr_Occurred()) {
		r = -1;
	}
	if (r > 0) {
		int own = PyDict_Contains(d, s_forward);
		r = own < 0 ? -1 : !own;
	}
	if (r > 0 && c->tf_mode != Py_None) {
		int tf = call_true(c->tf_mode);
		r = tf < 0 ? -1 : !tf;
	}
	return r;
}

/* ---------------------------------------------------------------- chains
 *
 * nn.Sequential hands each child's result to the next child and nothing
 * else.  Where that tensor t is clean (nothing holds it but the chain, its
 * grad_fn P is the thread's newest node and has no other output anyone
 * holds), the identity node W the next module's input side would put on t
 * changes nothing the trace says: made right after P, W runs right before
 * it (nothing can be ready with a sequence number between theirs), every
 * gradient of t reaches P's buffer when it would have reached W's, and the
 * hooks put on W's output would run as the first of those on t.  It is left
 * out for a module whose forward puts no hook on its input and keeps none
 * of its tensors (leaves: torch's Linear and LayerNorm), and for an
 * nn.Sequential whose first child is a leaf, an activation of c->single or
 * an nn.Sequential, with no hooks of its own; the bw_exit lines its
 * children put on t are then before its own, which waits for the end of
 * its forward (put_waiting_exit).  No torch function mode may see inside
 * (it could put hooks there).  A clean tensor is an nn.Sequential's input
 * after its input side made the identity node or left it out, or the
 * result of a child that keeps nothing (a leaf, an activation, an
 * nn.Sequential whose last child's result it is) taken by post_fast, which
 * found its grad_fn the newest node.  Each thread keeps its stack of module
 * calls (FullCall's frames), so that a module knows the call it is made
 * from.  COMMDEBUG_IDENTITY=all keeps every node.  tests/recorder/
 * test_chains.py compares traces with torch's BackwardHook's. */

typedef struct call_frame {
	struct call_frame *up;  /* the call this one was made from */
	int seq;                /* an nn.Sequential running its forward from here */
	int clean_result;       /* clean is its last child's result (else its input) */
	int keeps_none;         /* the module keeps no tensor of the call (its result is clean) */
	int post_taken;         /* the output side's common case was taken */
	PyObject *clean;        /* (held) the tensor whose only use is the next child's */
	PyObject *exit_t;       /* (held) where its bw_exit line goes at the forward's end */
	PyObject *exit_text;    /* (held) that line */
} call_frame;

static _Thread_local call_frame *cd_calls;

/* mod is of class cls exactly, with fwd the class's forward and none in
 * the instance's dict md: 1, 0, -1 on error. */
static int exact_module(PyObject *mod, PyObject *md, PyObject *cls, PyObject *fwd)
{
	if ((PyObject *)Py_TYPE(mod) != cls || _PyType_Lookup(Py_TYPE(mod), s_forward) != fwd)
		return 0;
	int own = PyDict_Contains(md, s_forward);
	return own < 0 ? -1 : !own;
}

static int is_leaf(FullCall *c, PyObject *mod, PyObject *md)
{
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c->leaves); i++) {
		PyObject *p = PyTuple_GET_ITEM(c->leaves, i);
		int r = exact_module(mod, md, PyTuple_GET_ITEM(p, 0), PyTuple_GET_ITEM(p, 1));
		if (r)
			return r;
	}
	return 0;
}

static int is_seq(FullCall *c, PyObject *mod, PyObject *md)
{
	if (c->seq == Py_None)
		return 0;
	return exact_module(mod, md, PyTuple_GET_ITEM(c->seq, 0), PyTuple_GET_ITEM(c->seq, 1));
}

/* The first child of the nn.Sequential whose instance dict is md is a leaf,
 * an activation of c->single or an nn.Sequential, with no hooks of its
 * own: it puts no hook on its input but the recorder's bw_exit line.  1, 0,
 * -1 on error. */
static int first_child_plain(FullCall *c, PyObject *md)
{
	PyObject *mods = PyDict_GetItemWithError(md, s_modules), *k, *child;
	Py_ssize_t pos = 0;
	if (!mods)
		return PyErr_Occurred() ? -1 : 0;
	if (!PyDict_Check(mods) || !PyDict_Next(mods, &pos, &k, &child))
		return 0;
	Py_INCREF(child);
	PyObject *cd = PyObject_GenericGetDict(child, NULL);
	int r = -1;
	if (!cd) {
		PyErr_Clear();
		r = 0;
		goto out;
	}
	r = PyDict_Check(cd);
	for (int i = 0; r == 1 && i < 4; i++) {
		PyObject *h = PyDict_GetItemWithError(cd, s_own_hooks[i]);
		r = h ? (PyDict_Check(h) && PyDict_GET_SIZE(h) == 0) : PyErr_Occurred() ? -1 : 0;
	}
	if (r == 1 && !(r = is_leaf(c, child, cd)) && !(r = single_node(c, child, cd)))
		r = is_seq(c, child, cd);
out:
	Py_XDECREF(cd);
	Py_DECREF(child);
	return r;
}

/* Whether the identity node of the module's input t is left out: 1 for a
 * leaf, 2 for an nn.Sequential (its bw_exit line waits for the end of its
 * forward), 0 not, -1 on error: t is the tensor the calling nn.Sequential
 * holds clean, no torch function mode is on.  (t's grad_fn is then the
 * thread's newest node: nothing but nn.Sequential's loop runs between.) */
static int chain_leaves_out(FullCall *c, call_frame *f, PyObject *md, PyObject *t, int seq,
			    int leaf)
{
	call_frame *up = f->up;
	if (!up || !up->seq || up->clean != t || !(seq || leaf))
		return 0;
	int kind = 1;
	if (seq) {
		kind = first_child_plain(c, md);
		if (kind <= 0)
			return kind;
		kind = 2;
	}
	if (c->tf_mode != Py_None) {
		int tf = call_true(c->tf_mode);
		if (tf)
			return tf < 0 ? -1 : 0;
	}
	return kind;
}

/* The bw_exit line text into a marker's lines, after the bw_exit lines put
 * there before it (_leanbw.exit_line): 0, -1 on error. */
static int insert_exit(PyObject *lines, PyObject *text)
{
	Py_ssize_t i = 0;
	for (; i < PyList_GET_SIZE(lines); i++) {
		PyObject *s = PyList_GET_ITEM(lines, i);
		int m = PyUnicode_Check(s) ? PyUnicode_Tailmatch(s, s_exit_prefix, 0,
								 PY_SSIZE_T_MAX, -1) : 0;
		if (m < 0)
			return -1;
		if (!m)
			break;
	}
	return PyList_Insert(lines, i, text);
}

/* A bw_exit line that waited for the forward's end, put now as
 * _leanbw.exit_line puts one (an error of the forward kept): 0, -1. */
static int put_waiting_exit(FullCall *c, call_frame *f)
{
	PyObject *t = f->exit_t, *text = f->exit_text, *d, *first, *r;
	f->exit_t = f->exit_text = NULL;
	held_exc exc;
	exc_hold(&exc);
	int bad = quiet_hooks(t, &d, &first);
	if (bad > 0 && first) {
		bad = insert_exit(((Marker *)first)->lines, text) < 0;
	} else if (bad >= 0) {
		PyObject *av[2] = {t, text};
		r = PyObject_Vectorcall(c->py_exit, av, 2, NULL);
		bad = !r;
		Py_XDECREF(r);
	}
	Py_XDECREF(d);
	Py_DECREF(t);
	Py_DECREF(text);
	if (exc_held(&exc)) {
		exc_restore(&exc);
		return 0;
	}
	return bad ? -1 : 0;
}

/* The input side's common case: 1 with *out the arguments to call the
 * forward with, 0 when not taken (nothing changed), -1 on error.  f: the
 * call's frame (its chain facts set here). */
static int pre_fast(FullCall *c, call_frame *f, PyObject *mod, PyObject *md, PyObject *args,
		    PyObject **out)
{
	PyObject *e, *fx, *g = NULL, *d = NULL, *first, *t;
	int r = in_forward_region(c);
	if (r <= 0)
		return r;
	if (PyTuple_GET_SIZE(args) != 1)
		return 0;
	if ((r = entry_of(c, mod, &e, &fx)) <= 0)
		return r;
	/* (the entry held: the Python the checks call cannot free it; its
	 * parameters' texts made first, as the Python does, which is all the
	 * Python the common case runs) */
	Py_INCREF(e);
	t = PyTuple_GET_ITEM(args, 0);
	if ((r = params_fresh(c, mod, md, e, fx)) < 0)
		goto done;
	if ((PyObject *)Py_TYPE(t) != c->tensor) {
		r = 0;
		goto done;
	}
	int seq = is_seq(c, mod, md), leaf = seq ? 0 : is_leaf(c, mod, md);
	if (seq < 0 || leaf < 0) {
		r = -1;
		goto done;
	}
	int rg = cd_tensor_true(t, CD_TA_REQUIRES_GRAD);   /* (read once, for both cases) */
	if ((r = no_grad_tensor(t, rg)) != 0) {
		/* fw_pre alone: no gradient comes back through it (no bw_exit,
		 * no node; torch's setup_input_hook returns the arguments) */
		if (r > 0 && (r = append_now(c, PyList_GET_ITEM(fx, F_PRE_NOIN))) == 0) {
			*out = Py_NewRef(args);
			f->seq = seq;
			f->keeps_none = leaf;
			r = 1;
		}
		goto done;
	}
	if ((r = grad_fn_of(t, rg, &g)) <= 0 || (r = quiet_hooks(t, &d, &first)) <= 0)
		goto done;
	int single = single_node(c, mod, md), chain = 0;
	if (single == 0 && c->seq != Py_None)
		chain = chain_leaves_out(c, f, md, t, seq, leaf);
	if (single < 0 || chain < 0) {
		r = -1;
		goto done;
	}
	/* fw_pre, its bw_exit line, the identity node (where it changes
	 * anything) and its view */
	r = -1;
	if (append_now(c, PyList_GET_ITEM(fx, F_PRE_IN)) < 0)
		goto done;
	int bad;
	PyObject *exit_text = PyList_GET_ITEM(fx, F_EXIT);
	if (chain == 2) {
		/* (at the forward's end: put_waiting_exit) */
		f->exit_t = Py_NewRef(t);
		f->exit_text = Py_NewRef(exit_text);
	} else if (first) {
		if (insert_exit(((Marker *)first)->lines, exit_text) < 0)
			goto done;
	} else {
		PyObject *hd = hook_dict(c, t, d, g);
		if (!hd)
			goto done;
		bad = add_marker(c, hd, &exit_text, 1, 0, 0);
		Py_DECREF(hd);
		if (bad)
			goto done;
	}
	PyObject *a = single || chain ? Py_NewRef(t) : identity_node(c, t);
	if (!a)
		goto done;
	bad = append_now(c, PyTuple_GET_ITEM(c->view, 0)) < 0;
	*out = bad ? NULL : PyTuple_Pack(1, a);
	r = *out ? 1 : -1;
	if (r > 0) {
		f->seq = seq;
		f->keeps_none = single || leaf;
		if (seq)
			f->clean = Py_NewRef(a);
	}
	Py_DECREF(a);
done:
	Py_XDECREF(d);
	Py_XDECREF(g);
	Py_DECREF(e);
	return r;
}

/* _compat.in_compiled_region(): dynamo's _is_in_compiled_region() where
 * dynamo is imported and has it (an error in it counts as no): 1, 0, -1. */
static int in_compiled_region(void)
{
	/* (sys.modules read directly: PyImport_GetModule asks the module's
	 * spec whether it is being imported, which runs Python on 3.14) */
	static PyObject *without;       /* that module, seen without the function */
	PyObject *dyn = PyDict_GetItemWithError(PyImport_GetModuleDict(), s_eval_frame);
	if (!dyn)
		return PyErr_Occurred() ? -1 : 0;
	if (dyn == without)
		return 0;
	PyObject *f;
	int r = cd_attr_opt(dyn, s_is_in_compiled, &f);
	if (r == 0 && PyModule_CheckExact(dyn))
		Py_XSETREF(without, Py_NewRef(dyn));    /* (torch 2.14 has none) */
	if (r <= 0)
		return r;
	r = f == Py_None ? 0 : call_true(f);
	Py_DECREF(f);
	if (r < 0 && PyErr_ExceptionMatches(PyExc_Exception)) {
		PyErr_Clear();
		r = 0;
	}
	return r;
}

/* The grad_fn g is the thread's newest node: 1, 0, -1 on error. */
static int newest_node(FullCall *c, PyObject *g)
{
	PyObject *seq = PyObject_CallMethodNoArgs(g, s_seq_nr);
	if (!seq)
		return -1;
	PyObject *next = PyObject_CallNoArgs(c->next_seq);
	long long a = PyLong_AsLongLong(seq), b = next ? PyLong_AsLongLong(next) : -1;
	Py_DECREF(seq);
	Py_XDECREF(next);
	if (PyErr_Occurred())
		return -1;
	return a == b - 1;
}

/* The module keeps its result in its instance dict (self.out = y; return
 * y): code using it later would pass the output side's node by, so that
 * side is the Python's, which makes torch's node there.  1, 0, -1. */
static int kept_by(PyObject *mod, PyObject *result)
{
	PyObject *md = PyObject_GenericGetDict(mod, NULL), *k, *v;
	if (!md)
		return -1;
	Py_ssize_t pos = 0;
	int r = 0;
	while (!r && PyDict_Check(md) && PyDict_Next(md, &pos, &k, &v))
		r = v == result;
	Py_DECREF(md);
	return r;
}

/* The output side's common case: 1 done, 0 not taken (nothing changed),
 * -1 on error. */
static int post_fast(FullCall *c, PyObject *mod, PyObject *result)
{
	PyObject *e, *f, *g = NULL, *d = NULL, *first;
	int r = in_forward_region(c);
	if (r <= 0)
		return r;
	if (PyDict_GET_SIZE(c->pending) != 0)
		return 0;
	if ((r = entry_of(c, mod, &e, &f)) <= 0)
		return r;
	PyObject *post = PyList_GET_ITEM(e, c->post_slot);
	if (!PyTuple_CheckExact(post) || PyTuple_GET_SIZE(post) != 2)
		return 0;
	Py_INCREF(e);           /* (as in pre_fast) */
	if ((r = in_compiled_region()) != 0) {
		r = r < 0 ? -1 : 0;
		goto done;
	}
	if ((r = plain_grad_tensor(c, result, &g)) <= 0 || (r = newest_node(c, g)) <= 0)
		goto done;
	if ((r = kept_by(mod, result)) != 0) {
		r = r < 0 ? -1 : 0;
		goto done;
	}
	if ((r = quiet_hooks(result, &d, &first)) <= 0)
		goto done;
	/* fw_post, fw_done, the view, the marker of bw_pre and bw_enter */
	r = -1;
	/* (the Python's fw_post reserves a key for bw_enter, which then joins
	 * the marker: keys only order hooks, so none is taken for it here) */
	PyObject *key = NULL;
	if (append_now(c, PyList_GET_ITEM(f, F_POST_OUT)) < 0)
		goto done;
	cd_time now;
	cd_time_now(&now);
	int bad = cd_append_t(c->buf, PyTuple_GET_ITEM(post, 1), &now) < 0 ||
		  cd_append_t(c->buf, PyTuple_GET_ITEM(c->view, 0), &now) < 0;
	cd_time_clear(&now);
	if (bad)
		goto done;
	PyObject *texts[2] = {PyList_GET_ITEM(e, c->bwpre_slot), PyList_GET_ITEM(f, F_ENTER)};
	if (first) {
		Marker *m = (Marker *)first;
		PyObject *pair = PyList_New(2);
		if (!pair)
			goto done;
		PyList_SET_ITEM(pair, 0, Py_NewRef(texts[0]));
		PyList_SET_ITEM(pair, 1, Py_NewRef(texts[1]));
		bad = PyList_SetSlice(m->lines, 0, 0, pair) < 0;
		Py_DECREF(pair);
		if (bad || !(key = new_key(c)))
			goto done;
		Py_XSETREF(m->enter, Py_NewRef(Py_True));
		Py_XSETREF(m->bound, key);
	} else {
		PyObject *hd = hook_dict(c, result, d, g);
		if (!hd)
			goto done;
		bad = add_marker(c, hd, texts, 2, 1, 1);
		Py_DECREF(hd);
		if (bad)
			goto done;
	}
	r = 1;
done:
	Py_XDECREF(d);
	Py_XDECREF(g);
	Py_DECREF(e);
	return r;
}

/* _modcall.only_ours(mod): no hooks of the module's own, no light
 * recorder's hooks on, the recorder's three global hooks the only ones: 1,
 * 0, -1 on error. */
static int only_ours(FullCall *c, PyObject *mod, PyObject *d)
{
	if (PyList_GET_SIZE(c->pairs) || PyDict_GET_SIZE(c->gb) || PyDict_GET_SIZE(c->gfp) != 1 ||
	    PyDict_GET_SIZE(c->gf) != 1 || PyDict_GET_SIZE(c->gbp) != 1 ||
	    PyList_GET_SIZE(c->full) != 1)
		return 0;
	int r = 1;
	for (int i = 0; r == 1 && i < 4; i++) {
		PyObject *h = mod_attr(mod, d, s_own_hooks[i]);
		int on = !h ? -1 : PyDict_Check(h) ? PyDict_GET_SIZE(h) != 0 : PyObject_IsTrue(h);
		Py_XDECREF(h);
		r = on < 0 ? -1 : !on;
	}
	return r;
}

/* mod.forward (a new reference), its function bound here where the class
 * has a plain function and the instance's dict (md) none (as the Python
 * lookup finds it, without nn.Module's hook: only_ours's note). */
static PyObject *forward_of(PyObject *mod, PyObject *md)
{
	PyObject *f = _PyType_Lookup(Py_TYPE(mod), s_forward), *r;
	if (!f || !PyFunction_Check(f))
		return PyObject_GetAttr(mod, s_forward);
	Py_INCREF(f);           /* (held: a key's __eq__ in md could change the class) */
	PyObject *own = PyDict_GetItemWithError(md, s_forward);
	r = own ? Py_NewRef(own) : PyErr_Occurred() ? NULL : PyMethod_New(f, mod);
	Py_DECREF(f);
	return r;
}

/* call(mod, args, kwargs), in the frame f */
static PyObject *full_call(FullCall *c, call_frame *f, PyObject *const *argv, size_t nargsf,
			   PyObject *kwnames)
{
	if (kwnames || PyVectorcall_NARGS(nargsf) != 3 || !PyTuple_CheckExact(argv[1]) ||
	    !PyDict_Check(argv[2]))
		return PyObject_Vectorcall(c->py_call, argv, nargsf, kwnames);
	PyObject *mod = argv[0], *args = argv[1], *kwargs = argv[2], *in = NULL;
	/* (the module's instance dict, read once by what follows) */
	PyObject *md = PyObject_GenericGetDict(mod, NULL);
	if (!md)
		return NULL;
	if (!PyDict_Check(md)) {        /* (not a module as torch makes them) */
		Py_DECREF(md);
		return PyObject_Vectorcall(c->py_call, argv, nargsf, NULL);
	}
	int r = only_ours(c, mod, md);
	if (r <= 0) {
		Py_DECREF(md);
		return r < 0 ? NULL : PyObject_Vectorcall(c->other, argv, nargsf, NULL);
	}
	/* r: 1 the common case, 0 the Python call (while torch.jit traces, or
	 * where pre_fast does not take the call), -1 an error */
	r = call_true(c->tracing);
	r = r < 0 ? -1 : r > 0 ? 0 : pre_fast(c, f, mod, md, args, &in);
	PyObject *fwd = r > 0 ? forward_of(mod, md) : NULL;
	Py_DECREF(md);
	if (r <= 0)
		return r < 0 ? NULL : PyObject_Vectorcall(c->py_call, argv, nargsf, NULL);
	PyObject *result = fwd ? PyObject_Call(fwd, in, PyDict_GET_SIZE(kwargs) ? kwargs : NULL)
			       : NULL;
	Py_XDECREF(fwd);
	if (f->exit_t && put_waiting_exit(c, f) < 0)
		Py_CLEAR(result);
	if (result && (r = post_fast(c, mod, result)) <= 0) {
		if (r == 0) {
			PyObject *post[3] = {mod, in, result};
			Py_SETREF(result, PyObject_Vectorcall(c->py_post, post, 3, NULL));
		} else {
			Py_CLEAR(result);
		}
	}
	f->post_taken = result && r > 0;
	Py_DECREF(in);
	return result;
}

/* call(mod, args, kwargs): full_call in a frame of the thread's stack of
 * calls; the result handed on as the calling nn.Sequential's clean tensor
 * where nothing is kept of it (a module that keeps none of its tensors, or
 * an nn.Sequential whose last child's result it is). */
static PyObject *FullCall_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
				     PyObject *kwnames)
{
	call_frame f = {.up = cd_calls};
	cd_calls = &f;
	PyObject *result = full_call((FullCall *)self, &f, argv, nargsf, kwnames);
	cd_calls = f.up;
	if (f.up && f.up->seq) {
		Py_CLEAR(f.up->clean);
		if (result && f.post_taken &&
		    (f.keeps_none || (f.seq && f.clean_result && f.clean == result))) {
			f.up->clean = Py_NewRef(result);
			f.up->clean_result = 1;
		}
	}
	Py_XDECREF(f.clean);
	Py_XDECREF(f.exit_t);
	Py_XDECREF(f.exit_text);
	return result;
}

#define FULL_FIELDS(X) X(rec) X(lc) X(buf) X(pending) X(cur_task) X(grad_enabled) X(tensor) \
	X(odict) X(handle) X(alias) X(op_type) X(no_dispatch) X(view) X(next_seq) X(tracing) \
	X(py_call) X(py_post) X(tf_mode) X(single) X(seq) X(leaves) X(py_exit) X(gfp) X(gf) X(gbp) X(gb) X(pairs) X(full) \
	X(other)

CD_GC_FUNCS(FullCall, FULL_FIELDS)

static int FullCall_init(FullCall *c, PyObject *args, PyObject *kw)
{
	static char *names[] = {"rec", "lc", "buf", "pending", "cur_task", "grad_enabled",
				"tensor", "odict", "handle", "alias", "op_type", "no_dispatch",
				"view", "next_seq", "tracing", "py_call", "py_post", "tf_mode",
				"slots", "gfp", "gf", "gbp", "gb", "pairs", "full", "other",
				"guard_raii", "single", "seq", "leaves", "py_exit", NULL};
	PyObject *o[18], *slots, *single = NULL, *st[7], *seq = Py_None, *leaves = NULL,
		 *py_exit = Py_None;
	int raii = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!OO!OOO!OOOOOO!OOOOOO!O!O!O!O!O!O!O|pO!OO!O",
					 names, &o[0], &PyDict_Type, &o[1], &o[2],
					 &PyDict_Type, &o[3], &o[4], &o[5], &PyType_Type, &o[6],
					 &o[7], &o[8], &o[9], &o[10], &o[11],
					 &PyTuple_Type, &o[12], &o[13], &o[14], &o[15], &o[16],
					 &o[17], &PyTuple_Type, &slots, &PyDict_Type, &st[0],
					 &PyDict_Type, &st[1], &PyDict_Type, &st[2], &PyDict_Type, &st[3],
					 &PyList_Type, &st[4], &PyList_Type, &st[5], &st[6], &raii,
					 &PyTuple_Type, &single, &seq, &PyTuple_Type, &leaves, &py_exit) ||
	    !cd_check_buf(o[2], "FullCall"))
		return -1;
	Py_ssize_t *dst_slot[] = {&c->nj_slot, &c->post_slot, &c->bwpre_slot, &c->ddp_slot,
				  &c->full_slot};
	if (PyTuple_GET_SIZE(slots) != 5 || PyTuple_GET_SIZE(o[12]) != 2) {
		PyErr_SetString(PyExc_ValueError, "commdebug._speedups: FullCall of another version");
		return -1;
	}
	for (int i = 0; i < 5; i++) {
		*dst_slot[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
		if (*dst_slot[i] < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "commdebug._speedups: a negative slot");
			return -1;
		}
	}
	if (c->full_slot < c->nj_slot || c->full_slot < c->post_slot ||
	    c->full_slot < c->bwpre_slot || c->full_slot < c->ddp_slot) {
		PyErr_SetString(PyExc_ValueError, "commdebug._speedups: the full texts' slot is last");
		return -1;
	}
	/* (seq None, or (class, function) with a py_exit; leaves such pairs) */
	int ok = seq == Py_None || (PyTuple_CheckExact(seq) && PyTuple_GET_SIZE(seq) == 2 &&
				    PyType_Check(PyTuple_GET_ITEM(seq, 0)) &&
				    PyCallable_Check(py_exit));
	for (Py_ssize_t i = 0; ok && leaves && i < PyTuple_GET_SIZE(leaves); i++) {
		PyObject *p = PyTuple_GET_ITEM(leaves, i);
		ok = PyTuple_CheckExact(p) && PyTuple_GET_SIZE(p) == 2 &&
		     PyType_Check(PyTuple_GET_ITEM(p, 0));
	}
	if (!ok) {
		PyErr_SetString(PyExc_TypeError, "commdebug._speedups: FullCall's seq or leaves");
		return -1;
	}
	FullCall_clear(c);
	PyObject **dst[] = {&c->rec, &c->lc, &c->buf, &c->pending, &c->cur_task,
			    &c->grad_enabled, &c->tensor, &c->odict, &c->handle, &c->alias,
			    &c->op_type, &c->no_dispatch, &c->view, &c->next_seq, &c->tracing,
			    &c->py_call, &c->py_post, &c->tf_mode};
	for (int i = 0; i < 18; i++)
		*dst[i] = Py_NewRef(o[i]);
	PyObject **sdst[] = {&c->gfp, &c->gf, &c->gbp, &c->gb, &c->pairs, &c->full, &c->other};
	for (int i = 0; i < 7; i++)
		*sdst[i] = Py_NewRef(st[i]);
	c->guard_raii = raii;
	c->single = single ? Py_NewRef(single) : PyTuple_New(0);
	c->leaves = leaves ? Py_NewRef(leaves) : PyTuple_New(0);
	c->seq = Py_NewRef(seq);
	c->py_exit = Py_NewRef(py_exit);
	if (!c->single || !c->leaves)
		return -1;
	if (cd_tensor_attrs_find(c->tensor) < 0)
		return -1;
	c->vectorcall = FullCall_vectorcall;
	return 0;
}

PyTypeObject cd_FullCallType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.FullCall",
	.tp_basicsize = sizeof(FullCall),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "The full recorder's module call, its common case (see commdebug._leanbw)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)FullCall_init,
	.tp_dealloc = (destructor)FullCall_dealloc,
	.tp_traverse = (traverseproc)FullCall_traverse,
	.tp_clear = (inquiry)FullCall_clear,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(FullCall, vectorcall),
};

int cd_full_ready(void)
{
	struct { PyObject **p; const char *s; } names[] = {
		{&s_in_region, "_in_region"}, {&s_region, "region"},
		{&s_parameters, "_parameters"}, {&s_requires_grad, "requires_grad"},
		{&s_register, "_register_hook_dict"}, {&s_next_id, "next_id"},
		{&s_queue_bw_end, "_queue_bw_end"}, {&s_seq_nr, "_sequence_nr"},
		{&s_enter, "__enter__"}, {&s_exit, "__exit__"}, {&s_forward, "forward"},
		{&s_fparams, "_fparams"}, {&s_exit_prefix, "{\"ev\":\"bw_exit\""},
		{&s_eval_frame, "torch._dynamo.eval_frame"},
		{&s_is_in_compiled, "_is_in_compiled_region"}, {&s_shape, "shape"},
		{&s_dtype, "dtype"}, {&s_has_callback, "_has_callback"}, {&s_inplace, "inplace"},
		{&s_modules, "_modules"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!*names[i].p && !(*names[i].p = PyUnicode_InternFromString(names[i].s)))
			return -1;
	const char *own[4] = {"_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
			      "_backward_hooks"};
	for (int i = 0; i < 4; i++)
		if (!s_own_hooks[i] && !(s_own_hooks[i] = PyUnicode_InternFromString(own[i])))
			return -1;
	if (PyType_Ready(&cd_MarkerType) < 0)
		return -1;
	return PyType_Ready(&cd_FullCallType);
}
