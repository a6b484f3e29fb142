/*
 * commdebug._speedups: the recorder's hottest Python, in C, for where a
 * training step's own work has just pushed the interpreter out of the CPU's
 * caches (it runs between a model's ops, many times a step).  Optional:
 * without it (no compiler at install time, another Python) the recorder
 * runs the Python it stands for, which stays the reference.  This module
 * must write exactly what that Python writes.
 *
 * Hooks(...): light mode's two module hooks (_light._make_hooks's fw_pre
 * and fw_post).  pre(mod, inputs) and post(mod, inputs, output) are the
 * hooks past their is_compiling() check (their callers, nn.Module's call in
 * _modcall and the Python hooks, make it: dynamo, tracing, never meets
 * this module).  Outside a region they do nothing.  They do the common case
 * whole, or else call the Python body (pre_body, post_body) having done
 * nothing: they decide before they change anything.
 *
 * Left to Python: a module seen for the first time (its entry),
 * DistributedDataParallel, a module with forward hooks or full-backward
 * pre-hooks of its own (or global ones), parameters to be written again,
 * an output that is a Tensor subclass, more than MAX_OUT tensors requiring
 * grad, a parameter, one tensor with gradient hooks already (but where it
 * joins another module's), one of several with an empty hook dict.
 * Given commdebug._gradhook (Hooks' gradhook, its capsule), a module's own
 * bw_pre hook goes on its output's grad_fn as a C++ hook, not in a hook
 * dict (_lightbw's own_or_join).
 *
 * Fire(...): light mode's bw_pre gradient hook (_lightbw's fire).
 *
 * raw_frame(data): _zstd.raw_frame, with its content checksum always
 * (XXH64 here; the Python needs libxxhash).  The writer's lines (text(),
 * LineBuf) are _speedups_lines.c's, its thread that writes without the
 * interpreter (AsyncWrite) _speedups_io.c's.
 */
#include "_speedups.h"
#include "_gradhook.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Slots of a module's entry (_light._lentry), in the order Python gives them. */
enum { S_NJ, S_PRE, S_PRE_BW, S_POST, S_POST_BW, S_PARAMS_REGION, S_DDP, S_PKEY, S_PPRE,
	S_PCHECKED, S_BWHOOK, S_BWJOIN, S_BWPRE, S_NSLOTS };

typedef struct {
	PyObject_HEAD
	PyObject *lc;           /* dict: id(module) -> entry (list) */
	PyObject *buf;          /* the writer's lines (a LineBuf, or a list) */
	PyObject *state;        /* list: [region, bw_end queued, in a region] */
	PyObject *writer;       /* .due, .poke() */
	PyObject *done_handles; /* dict: id(module) -> its fw_done hook */
	PyObject *global_pre;   /* nn.Module's global full-backward pre-hooks (dict) */
	PyObject *cur_task;     /* torch._C._current_graph_task_id */
	PyObject *grad_enabled; /* torch.is_grad_enabled */
	PyObject *tensor;       /* torch.Tensor */
	PyObject *odict;        /* collections.OrderedDict */
	PyObject *keys;         /* iterator of the hook keys (negative ints) */
	PyObject *handle;       /* torch.utils.hooks.RemovableHandle (its next_id) */
	PyObject *pre_body;     /* fw_pre's Python body: pre_body(mod, inputs) */
	PyObject *post_body;    /* fw_post's: post_body(mod, inputs, output) */
	PyObject *shared;       /* _lightbw's shared(lines, one): a hook tensors share */
	PyObject *gradhook;     /* commdebug._gradhook's capsule, or None */
	const cd_gradhook_api *gh;      /* its functions (NULL: none) */
	Py_ssize_t slot[S_NSLOTS];
	Py_ssize_t nslots;      /* an entry's length at least (its last slot + 1) */
	long long recheck;      /* _light.PARAMS_RECHECK */
} Hooks;

static PyObject *s_due, *s_poke, *s_fwd_hooks, *s_bwpre_hooks, *s_params, *s_requires_grad,
	*s_bw_hooks, *s_grad_fn, *s_register, *s_since, *s_next_id, *s_cd_own, *s_cd_lines, *s_items,
	*s_clear;

PyObject *cd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);        /* time.monotonic_ns()'s clock */
	return PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

int cd_in_backward(PyObject *cur_task)
{
	PyObject *r = PyObject_CallNoArgs(cur_task);
	if (!r)
		return -1;
	long v = PyLong_AsLong(r);
	Py_DECREF(r);
	if (v == -1 && PyErr_Occurred())
		return -1;
	return v != -1;
}

/* The truth of v, a new reference it takes (-1: v NULL, an error set). */
static int truth_of(PyObject *v)
{
	if (!v)
		return -1;
	int r = PyObject_IsTrue(v);
	Py_DECREF(v);
	return r;
}

int cd_attr_true(PyObject *o, PyObject *name)
{
	return truth_of(PyObject_GetAttr(o, name));
}

/* The module's entry (borrowed), or NULL with no error set: none yet. */
static PyObject *entry_of(Hooks *h, PyObject *mod)
{
	PyObject *key = PyLong_FromVoidPtr(mod);
	if (!key)
		return NULL;
	PyObject *e = PyDict_GetItemWithError(h->lc, key);
	Py_DECREF(key);
	if (e && (!PyList_CheckExact(e) || PyList_GET_SIZE(e) < h->nslots))
		return NULL;        /* not an entry this module knows: Python's path */
	return e;
}

#define SLOT(h, e, s) PyList_GET_ITEM((e), (h)->slot[(s)])

/*
 * torch.Tensor's attributes that its C type defines (getset descriptors):
 * read and set through their getter and setter for a torch.Tensor, which is
 * what attribute lookup finds and calls (the getters still give a torch
 * function mode its turn), without the lookup.  Found once, for the
 * torch.Tensor that Hooks and FullCall are given; any other object, or an
 * attribute that is not such a descriptor there, is looked up.
 */
typedef struct {
	getter get;
	setter set;
	void *closure;
} tensor_attr;

static PyObject *tensor_type;           /* torch.Tensor, once found */
static tensor_attr tensor_attrs[CD_TA_N];
static PyObject **tensor_attr_names[CD_TA_N] = {&s_requires_grad, &s_grad_fn, &s_bw_hooks};

int cd_tensor_attrs_find(PyObject *T)
{
	if (!PyType_Check(T)) {
		PyErr_SetString(PyExc_TypeError, "commdebug._speedups: tensor is not a type");
		return -1;
	}
	if (T == tensor_type)
		return 0;
	for (int i = 0; i < CD_TA_N; i++) {
		PyObject *d = _PyType_Lookup((PyTypeObject *)T, *tensor_attr_names[i]);
		tensor_attr *a = &tensor_attrs[i];
		a->get = NULL;
		a->set = NULL;
		a->closure = NULL;
		if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
			PyGetSetDef *def = ((PyGetSetDescrObject *)d)->d_getset;
			a->get = def->get;
			a->set = def->set;
			a->closure = def->closure;
		}
	}
	Py_XSETREF(tensor_type, Py_NewRef(T));
	return 0;
}

PyObject *cd_tensor_get(PyObject *t, int which)
{
	tensor_attr *a = &tensor_attrs[which];
	if (a->get && (PyObject *)Py_TYPE(t) == tensor_type)
		return a->get(t, a->closure);
	return PyObject_GetAttr(t, *tensor_attr_names[which]);
}

int cd_tensor_set(PyObject *t, int which, PyObject *v)
{
	tensor_attr *a = &tensor_attrs[which];
	if (a->set && (PyObject *)Py_TYPE(t) == tensor_type)
		return a->set(t, v, a->closure);
	return PyObject_SetAttr(t, *tensor_attr_names[which], v);
}

int cd_tensor_true(PyObject *t, int which)
{
	return truth_of(cd_tensor_get(t, which));
}

/* RemovableHandle.next_id (a new reference): from the class's own dict,
 * where its __init__ keeps it. */
static PyObject *next_handle_id(Hooks *h)
{
	PyTypeObject *T = (PyTypeObject *)h->handle;
	if (PyType_Check(h->handle) && PyType_HasFeature(T, Py_TPFLAGS_HEAPTYPE) && T->tp_dict) {
		PyObject *v = PyDict_GetItemWithError(T->tp_dict, s_next_id);
		if (v)
			return Py_NewRef(v);
		if (PyErr_Occurred())
			return NULL;
	}
	return PyObject_GetAttr(h->handle, s_next_id);
}

int cd_append2(PyObject *buf, PyObject *a, PyObject *t)
{
	if (Py_TYPE(buf) == &cd_LineBufType)
		return cd_lines_put2(buf, a, t);
	PyObject *item = PyTuple_Pack(2, a, t);
	if (!item)
		return -1;
	int r = PyList_Append(buf, item);
	Py_DECREF(item);
	return r;
}

void cd_time_now(cd_time *t)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);        /* time.monotonic_ns()'s clock */
	t->ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
	t->obj = NULL;
}

void cd_time_clear(cd_time *t)
{
	Py_CLEAR(t->obj);
}

/* t's int (borrowed), made at first use. */
static PyObject *time_obj(cd_time *t)
{
	if (!t->obj)
		t->obj = PyLong_FromLongLong(t->ns);
	return t->obj;
}

int cd_append_t(PyObject *buf, PyObject *text, cd_time *t)
{
	if (Py_TYPE(buf) == &cd_LineBufType)
		return cd_lines_put_ns(buf, text, t->ns);
	PyObject *o = time_obj(t);
	return o ? cd_append2(buf, text, o) : -1;
}

int cd_maybe_poke_t(PyObject *writer, PyObject *buf, cd_time *t)
{
	if (Py_TYPE(buf) == &cd_LineBufType) {
		if (t->ns <= cd_lines_due(buf))
			return 0;
		PyObject *r = PyObject_CallMethodNoArgs(writer, s_poke);
		Py_XDECREF(r);
		return r ? 0 : -1;
	}
	PyObject *o = time_obj(t);
	return o ? cd_maybe_poke(writer, o) : -1;
}

int cd_maybe_poke(PyObject *writer, PyObject *now)
{
	PyObject *due = PyObject_GetAttr(writer, s_due);
	if (!due)
		return -1;
	int late = PyObject_RichCompareBool(now, due, Py_GT);
	Py_DECREF(due);
	if (late <= 0)
		return late;
	PyObject *r = PyObject_CallMethodNoArgs(writer, s_poke);
	Py_XDECREF(r);
	return r ? 0 : -1;
}

/* fw_pre's key: the ids of the module's parameters (None: not a dict). */
static PyObject *params_key(PyObject *mod)
{
	PyObject *ps = PyObject_GetAttr(mod, s_params);
	if (!ps)
		return NULL;
	if (!PyDict_Check(ps)) {
		Py_DECREF(ps);
		return Py_NewRef(Py_None);
	}
	PyObject *key = PyTuple_New(PyDict_GET_SIZE(ps));
	Py_ssize_t pos = 0, i = 0;
	PyObject *k, *v;
	while (key && PyDict_Next(ps, &pos, &k, &v)) {
		PyObject *id = PyLong_FromVoidPtr(v);
		if (!id) {
			Py_CLEAR(key);
			break;
		}
		PyTuple_SET_ITEM(key, i++, id);
	}
	Py_DECREF(ps);
	return key;
}

/*
 * The text of fw_pre at a module's first call in a region (borrowed): its
 * cached text with the parameters, while they are the same objects and not
 * due to be read again.  NULL: Python's path (or an error, when
 * PyErr_Occurred()).
 */
static PyObject *params_text(Hooks *h, PyObject *mod, PyObject *e, PyObject *region)
{
	PyObject *ppre = SLOT(h, e, S_PPRE);
	if (ppre == Py_None)
		return NULL;
	long long r = PyLong_AsLongLong(region);
	long long checked = PyLong_AsLongLong(SLOT(h, e, S_PCHECKED));
	if (PyErr_Occurred() || r - checked >= h->recheck)
		return NULL;
	PyObject *key = params_key(mod);
	if (!key || key == Py_None) {
		Py_XDECREF(key);
		return NULL;
	}
	int same = PyObject_RichCompareBool(key, SLOT(h, e, S_PKEY), Py_EQ);
	Py_DECREF(key);
	return same == 1 ? ppre : NULL;
}

static PyObject *python_path(int yes)
{
	return Py_NewRef(yes ? Py_True : Py_False);
}

/* fw_pre's common case for the module of entry e: False when done, True
 * for Python's path. */
static PyObject *pre_fast(Hooks *h, PyObject *mod, PyObject *e, PyObject *inputs)
{
	(void)inputs;
	if (SLOT(h, e, S_NJ) == Py_None)
		return python_path(0);          /* a module not recorded */
	int bw = cd_in_backward(h->cur_task);
	if (bw < 0)
		return NULL;
	if (bw) {                               /* a recompute */
		cd_time now;
		cd_time_now(&now);
		int r = cd_append_t(h->buf, SLOT(h, e, S_PRE_BW), &now);
		cd_time_clear(&now);
		return r < 0 ? NULL : python_path(0);
	}
	int t = PyObject_IsTrue(SLOT(h, e, S_DDP));
	if (t != 0)
		return t < 0 ? NULL : python_path(1);
	t = cd_attr_true(mod, s_fwd_hooks);
	if (t != 0)
		return t < 0 ? NULL : python_path(1);

	PyObject *region = PyList_GET_ITEM(h->state, 0);
	PyObject *text = SLOT(h, e, S_PRE);
	int first = PyObject_RichCompareBool(SLOT(h, e, S_PARAMS_REGION), region, Py_NE);
	if (first < 0)
		return NULL;
	if (first) {
		text = params_text(h, mod, e, region);
		if (!text)
			return PyErr_Occurred() ? NULL : python_path(1);
	}
	Py_INCREF(text);
	Py_INCREF(region);
	cd_time now;
	cd_time_now(&now);
	int r = 0;
	if (first) {
		Py_INCREF(region);
		r = PyList_SetItem(e, h->slot[S_PARAMS_REGION], region);  /* (steals it) */
	}
	if (!r)
		r = cd_append_t(h->buf, text, &now);
	if (!r)
		r = cd_maybe_poke_t(h->writer, h->buf, &now);
	Py_DECREF(text);
	Py_DECREF(region);
	cd_time_clear(&now);
	return r < 0 ? NULL : python_path(0);
}

/* Tensors of a module's output that light mode hooks, at most this many
 * here (more: Python's path). */
#define MAX_OUT 8

/* _lightbw's outputs(output) where it is plain Tensors: returns 0 with *n
 * of them in ts (new references; 0: none to hook), or 1 for Python's path
 * (a Tensor subclass, more than MAX_OUT, one tensor twice), -1 on error. */
static int output_tensors(Hooks *h, PyObject *output, PyObject **ts, int *n)
{
	PyTypeObject *T = (PyTypeObject *)h->tensor;
	PyObject *found[MAX_OUT];
	int k = 0;
	*n = 0;
	if (Py_IS_TYPE(output, T)) {
		int rg = cd_tensor_true(output, CD_TA_REQUIRES_GRAD);
		if (rg <= 0)
			return rg;
		found[k++] = output;
	} else if (PyObject_TypeCheck(output, T)) {
		return 1;                       /* a subclass: its own way */
	} else if (PyTuple_Check(output)) {
		Py_ssize_t len = PyTuple_GET_SIZE(output);
		for (Py_ssize_t i = 0; i < len; i++) {
			PyObject *o = PyTuple_GET_ITEM(output, i);
			if (!PyObject_TypeCheck(o, T))
				continue;
			int rg = cd_tensor_true(o, CD_TA_REQUIRES_GRAD);
			if (rg < 0)
				return -1;
			if (!rg)
				continue;
			if (k == MAX_OUT || !Py_IS_TYPE(o, T))
				return 1;
			for (int j = 0; j < k; j++)
				if (found[j] == o)
					return 1;
			found[k++] = o;
		}
		if (!k)
			return 0;
	} else {
		return 0;
	}
	PyObject *ge = PyObject_CallNoArgs(h->grad_enabled);
	if (!ge)
		return -1;
	int on = PyObject_IsTrue(ge);
	Py_DECREF(ge);
	if (on <= 0)
		return on;
	for (int i = 0; i < k; i++)
		ts[i] = Py_NewRef(found[i]);
	*n = k;
	return 0;
}

/* The module's own bw_pre hook on t, the first hook t gets
 * (_lightbw's own_or_join, its common case). */
static int own_hook(Hooks *h, PyObject *t, PyObject *g, PyObject *fn)
{
	PyObject *d = PyObject_CallNoArgs(h->odict);
	if (!d)
		return -1;
	PyObject *key = NULL, *since = NULL, *r = NULL;
	int rc = -1;
	if (cd_tensor_set(t, CD_TA_BW_HOOKS, d) < 0)
		goto out;
	r = PyObject_CallMethodOneArg(g, s_register, t);
	if (!r)
		goto out;
	key = PyIter_Next(h->keys);
	if (!key) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError, "commdebug: the hook keys ran out");
		goto out;
	}
	since = next_handle_id(h);
	if (!since || PyObject_SetItem(d, key, fn) < 0 || PyObject_SetAttr(d, s_since, since) < 0)
		goto out;
	rc = 0;
out:
	Py_XDECREF(r);
	Py_XDECREF(key);
	Py_XDECREF(since);
	Py_DECREF(d);
	return rc;
}

int cd_attr_opt(PyObject *o, PyObject *name, PyObject **v)
{
#if PY_VERSION_HEX >= 0x030D0000
	/* (no AttributeError made and cleared for a missing one: a module's
	 * asks its spec about a circular import, in Python, to word it) */
	return PyObject_GetOptionalAttr(o, name, v);
#else
	*v = PyObject_GetAttr(o, name);
	if (*v)
		return 1;
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
	return 0;
#endif
}

/* hasattr(o, name): 1, 0, -1 (PyObject_HasAttrWithError is Python 3.13's). */
static int has_attr(PyObject *o, PyObject *name)
{
	PyObject *v;
	int r = cd_attr_opt(o, name, &v);
	Py_XDECREF(v);
	return r;
}

/* The module's own bw_pre hook fn on t through commdebug._gradhook (on
 * t's grad_fn, where t has no hook dict), or, where a module inside
 * returned t, the two joined, when e's join cache has them (_lightbw's
 * own_or_join, its common case with _gradhook).  1 done, 0 for Python's
 * path (nothing changed), -1 on error. */
static int gh_own(Hooks *h, PyObject *e, PyObject *t, PyObject *fn)
{
	PyObject *prev = h->gh->attach(t, fn);
	if (!prev)
		return -1;
	if (prev == Py_None) {
		Py_DECREF(prev);
		return 1;
	}
	PyObject *cache = SLOT(h, e, S_BWJOIN);
	PyObject *joined = PyDict_CheckExact(cache) ? PyDict_GetItemWithError(cache, prev) : NULL;
	Py_DECREF(prev);
	if (!joined)
		return PyErr_Occurred() ? -1 : 0;
	return h->gh->replace(t, joined) < 0 ? -1 : 1;
}

/* Before t's hook dict d gets a bw_pre hook on Python's path: t's
 * _gradhook hook (if any) moved after d's, as a hook put before d was made
 * (_lightbw's before_dict).  0, or -1 with an error set. */
static int gh_before_dict(Hooks *h, PyObject *t, PyObject *d)
{
	int moved = h->gh ? h->gh->demote(t) : 0;
	if (moved <= 0)
		return moved;
	int has = has_attr(d, s_since);
	if (has != 0)
		return has < 0 ? -1 : 0;
	/* (all of d was registered after that hook: newer than it) */
	PyObject *zero = PyLong_FromLong(0);
	int r = zero ? PyObject_SetAttr(d, s_since, zero) : -1;
	Py_XDECREF(zero);
	return r;
}

/* _lightbw's quiet(d, None): nothing registered on the hook dict d since
 * its last bw_pre hook (d._cd_since: the next handle id then): 1, 0, -1. */
static int quiet(PyObject *d)
{
	PyObject *since;
	int r = cd_attr_opt(d, s_since, &since);
	if (r <= 0)
		return r < 0 ? -1 : 1;
	if (since != Py_None) {
		PyObject *it = PyObject_GetIter(d), *k;
		if (!it)
			r = -1;
		while (r > 0 && (k = PyIter_Next(it))) {
			int below = PyObject_RichCompareBool(k, since, Py_LT);
			Py_DECREF(k);
			r = below;
		}
		if (r >= 0 && PyErr_Occurred())
			r = -1;
		Py_XDECREF(it);
	}
	Py_DECREF(since);
	return r;
}

/* _lightbw's join(e, d, None) where the Python has made the joined hook
 * already (it is in e's join cache): the first hook on the module's output
 * tensor (hook dict d) is another module's own bw_pre hook, with nothing
 * registered since, and becomes the joined hook of both.  1 done, 0 for
 * Python's path, -1 on error. */
static int join_fast(Hooks *h, PyObject *e, PyObject *d)
{
	PyObject *cache = SLOT(h, e, S_BWJOIN);
	if (!PyDict_CheckExact(cache) || !PyDict_Check(d) || PyDict_GET_SIZE(d) == 0)
		return 0;
	PyObject *it = PyObject_GetIter(d);
	PyObject *k = it ? PyIter_Next(it) : NULL, *first = NULL, *fn, *since = NULL;
	Py_XDECREF(it);
	int r = -1;
	if (!k)
		goto out;
	if (!(first = PyObject_GetItem(d, k)))
		goto out;
	/* a shared hook (_cd_lines), or not a module's own (_cd_own): Python's */
	if ((r = has_attr(first, s_cd_lines)) != 0) {
		r = r < 0 ? -1 : 0;
		goto out;
	}
	if ((r = has_attr(first, s_cd_own)) <= 0 || (r = quiet(d)) <= 0)
		goto out;
	r = -1;
	if (!(fn = PyDict_GetItemWithError(cache, first))) {
		r = PyErr_Occurred() ? -1 : 0;
		goto out;
	}
	since = next_handle_id(h);
	if (since && PyObject_SetItem(d, k, fn) == 0 && PyObject_SetAttr(d, s_since, since) == 0)
		r = 1;
out:
	Py_XDECREF(k);
	Py_XDECREF(first);
	Py_XDECREF(since);
	return r;
}

/* Whether this fw_post call is not the common case: 1 (Python's path),
 * 0, -1 on error.  *pair: the entry's (fw_post, fw_done) texts. */
static int post_unusual(Hooks *h, PyObject *mod, PyObject *e, PyObject **pair)
{
	int t = PyObject_IsTrue(SLOT(h, e, S_DDP));
	if (t != 0)
		return t;
	PyObject *key = PyLong_FromVoidPtr(mod);
	if (!key)
		return -1;
	t = PyDict_Contains(h->done_handles, key);
	Py_DECREF(key);
	if (t != 0)
		return t;
	t = cd_attr_true(mod, s_bwpre_hooks);
	if (t != 0)
		return t;
	t = PyObject_IsTrue(h->global_pre);
	if (t != 0)
		return t;
	int bw = cd_in_backward(h->cur_task);
	if (bw < 0)
		return -1;
	*pair = SLOT(h, e, bw ? S_POST_BW : S_POST);
	return !PyTuple_Check(*pair) || PyTuple_GET_SIZE(*pair) != 2;
}

/* Whether light mode's hook can go on each of the n tensors of a module's
 * output here (_lightbw's attach_many where each has a grad_fn and no hooks,
 * or some hooks): 1 yes, with their grad_fns in gs and their hook dicts (or
 * NULL: none yet) in ds, new references; 0 no (Python's path); -1 on error. */
static int all_plain(PyObject **ts, int n, PyObject **gs, PyObject **ds)
{
	int i, r = 1;
	for (i = 0; r == 1 && i < n; i++) {
		PyObject *d = cd_tensor_get(ts[i], CD_TA_BW_HOOKS);
		gs[i] = d ? cd_tensor_get(ts[i], CD_TA_GRAD_FN) : NULL;
		ds[i] = d != Py_None ? d : NULL;
		if (d == Py_None)
			Py_DECREF(d);
		if (!gs[i])
			r = -1;
		else if (gs[i] == Py_None)
			r = 0;                  /* a leaf: its hook is taken off at region exit */
		else if (ds[i] && (!PyDict_Check(ds[i]) || PyDict_GET_SIZE(ds[i]) == 0))
			r = 0;
	}
	if (r != 1)
		while (i-- > 0) {
			Py_CLEAR(gs[i]);
			Py_CLEAR(ds[i]);
		}
	return r;
}

/* _lightbw's put_first(d, next(keys), fn, None): fn first among the hooks
 * of d, then those registered since its last bw_pre hook, then the rest.
 * 0, or -1 with an error set. */
static int put_first(Hooks *h, PyObject *d, PyObject *fn)
{
	PyObject *since = NULL, *items = NULL, *key = NULL, *nid = NULL, *r;
	int rc = -1;
	if (cd_attr_opt(d, s_since, &since) < 0)
		return -1;
	if (!(key = PyIter_Next(h->keys))) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError, "commdebug: the hook keys ran out");
		goto out;
	}
	if (!(r = PyObject_CallMethodNoArgs(d, s_items)))
		goto out;
	items = PySequence_List(r);
	Py_DECREF(r);
	if (!items || !(r = PyObject_CallMethodNoArgs(d, s_clear)))
		goto out;
	Py_DECREF(r);
	if (PyObject_SetItem(d, key, fn) < 0)
		goto out;
	int split = since != NULL && since != Py_None;
	for (int pass = 0; pass < 1 + split; pass++)
		for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
			PyObject *kv = PyList_GET_ITEM(items, i);
			if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
				PyErr_SetString(PyExc_TypeError, "commdebug: a hook dict's item");
				goto out;
			}
			if (split) {
				int newer = PyObject_RichCompareBool(PyTuple_GET_ITEM(kv, 0), since,
								     Py_GE);
				if (newer < 0)
					goto out;
				if (newer != (pass == 0))
					continue;
			}
			if (PyObject_SetItem(d, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1)) < 0)
				goto out;
		}
	if ((nid = next_handle_id(h)) && PyObject_SetAttr(d, s_since, nid) == 0)
		rc = 0;
out:
	Py_XDECREF(since);
	Py_XDECREF(items);
	Py_XDECREF(key);
	Py_XDECREF(nid);
	return rc;
}

/* The hook several output tensors share: _lightbw's shared([bw_pre], False)
 * (a new reference). */
static PyObject *shared_hook(Hooks *h, PyObject *e)
{
	PyObject *lines = PyList_New(1);
	if (!lines)
		return NULL;
	PyList_SET_ITEM(lines, 0, Py_NewRef(SLOT(h, e, S_BWPRE)));
	PyObject *fn = PyObject_CallFunctionObjArgs(h->shared, lines, Py_False, NULL);
	Py_DECREF(lines);
	return fn;
}

/* (text1, text2, now) appended: fw_post and fw_done at one time. */
static int append_pair(Hooks *h, PyObject *text1, PyObject *text2)
{
	cd_time now;
	cd_time_now(&now);
	if (Py_TYPE(h->buf) == &cd_LineBufType)
		return cd_lines_put_pair_ns(h->buf, text1, text2, now.ns);
	PyObject *t = PyLong_FromLongLong(now.ns);
	PyObject *item = t ? PyTuple_Pack(3, text1, text2, t) : NULL;
	int r = item ? PyList_Append(h->buf, item) : -1;
	Py_XDECREF(item);
	Py_XDECREF(t);
	return r;
}

/* fw_post's common case for the module of entry e: False when done, True
 * for Python's path. */
static PyObject *post_fast(Hooks *h, PyObject *mod, PyObject *e, PyObject *output)
{
	PyObject *pair = NULL;
	if (SLOT(h, e, S_NJ) == Py_None)
		return python_path(0);
	int u = post_unusual(h, mod, e, &pair);
	if (u != 0)
		return u < 0 ? NULL : python_path(1);

	PyObject *ts[MAX_OUT], *gs[MAX_OUT] = {NULL}, *ds[MAX_OUT] = {NULL}, *fn = NULL;
	int n = 0, own = 0;
	u = output_tensors(h, output, ts, &n);
	if (u != 0)
		return u < 0 ? NULL : python_path(1);
	if (n == 1) {
		/* no hooks on it yet, a grad_fn, the module's own hook made; or
		 * hooks whose first is a module's own, to join */
		PyObject *d = cd_tensor_get(ts[0], CD_TA_BW_HOOKS);
		fn = Py_NewRef(SLOT(h, e, S_BWHOOK));     /* (released below, whatever happens) */
		gs[0] = d == Py_None ? cd_tensor_get(ts[0], CD_TA_GRAD_FN) : NULL;
		int common = d == Py_None && gs[0] && gs[0] != Py_None && fn != Py_None;
		if (common && h->gh) {
			/* (put now: nothing below can send it to Python's path) */
			common = gh_own(h, e, ts[0], fn);
			Py_CLEAR(gs[0]);        /* no hook dict to make */
		} else if (!common && d && d != Py_None) {
			/* (gh_before_dict's change is one Python's path makes again) */
			common = gh_before_dict(h, ts[0], d);
			common = common < 0 ? -1 : join_fast(h, e, d);
		}
		Py_XDECREF(d);
		if (common > 0 && !PyErr_Occurred()) {
			own = gs[0] != NULL;    /* else joined or put: no hook dict to make */
			u = 0;
		} else {
			u = common < 0 || PyErr_Occurred() ? -1 : 1;
		}
	} else if (n > 1) {
		u = all_plain(ts, n, gs, ds);
		u = u == 1 ? 0 : u == 0 ? 1 : -1;
		if (!u && !(fn = shared_hook(h, e)))
			u = -1;
		own = 1;
	}
	int r = -1;
	if (!u) {
		r = append_pair(h, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1));
		for (int i = 0; own && !r && i < n; i++) {
			if (ds[i])
				r = gh_before_dict(h, ts[i], ds[i]) < 0 ? -1 : put_first(h, ds[i], fn);
			else if (h->gh && n > 1)
				r = h->gh->attach_shared(ts[i], fn);
			else if (!(r = own_hook(h, ts[i], gs[i], fn)) && h->gh)
				r = h->gh->demote(ts[i]) < 0 ? -1 : 0;
		}
	}
	Py_XDECREF(fn);
	for (int i = 0; i < n; i++) {
		Py_DECREF(ts[i]);
		Py_XDECREF(gs[i]);
		Py_XDECREF(ds[i]);
	}
	if (u)
		return u < 0 ? NULL : python_path(1);
	return r < 0 ? NULL : python_path(0);
}

/* 1: in a region, 0: not, -1: error. */
static int in_region(Hooks *h)
{
	return PyObject_IsTrue(PyList_GET_ITEM(h->state, 2));
}

/* The common case of a hook: False when done, True for Python's path
 * (h, the module, its entry, the hook's last argument). */
typedef PyObject *(*fast_fn)(Hooks *, PyObject *, PyObject *, PyObject *);

/* A hook call (args: the module first): nothing outside a region, else its
 * common case, else its Python body. */
static PyObject *run_hook(Hooks *h, fast_fn fast, PyObject *body, PyObject *const *args,
			  Py_ssize_t nargs)
{
	int on = in_region(h);
	if (on <= 0)
		return on < 0 ? NULL : Py_NewRef(Py_None);
	/* (the entry held: the Python the checks call cannot free it) */
	PyObject *e = entry_of(h, args[0]), *r;
	if (!e) {
		r = PyErr_Occurred() ? NULL : python_path(1);
	} else {
		Py_INCREF(e);
		r = fast(h, args[0], e, args[nargs - 1]);
		Py_DECREF(e);
	}
	if (!r)
		return NULL;
	int python = r == Py_True;
	Py_DECREF(r);
	if (!python)
		Py_RETURN_NONE;
	return PyObject_Vectorcall(body, args, (size_t)nargs, NULL);
}

/* pre(mod, inputs): fw_pre past its is_compiling() check. */
static PyObject *Hooks_pre(Hooks *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "pre(mod, inputs)");
		return NULL;
	}
	return run_hook(h, pre_fast, h->pre_body, args, nargs);
}

/* post(mod, inputs, output): fw_post past its is_compiling() check. */
static PyObject *Hooks_post(Hooks *h, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "post(mod, inputs, output)");
		return NULL;
	}
	return run_hook(h, post_fast, h->post_body, args, nargs);
}

#define HOOKS_FIELDS(X) X(lc) X(buf) X(state) X(writer) X(done_handles) X(global_pre) \
	X(cur_task) X(grad_enabled) X(tensor) X(odict) X(keys) X(handle) X(pre_body) X(post_body) \
	X(shared) X(gradhook)

CD_GC_FUNCS(Hooks, HOOKS_FIELDS)

static int Hooks_init(Hooks *h, PyObject *args, PyObject *kw)
{
	static char *names[] = {"lc", "buf", "state", "writer", "done_handles", "global_pre",
				"cur_task", "grad_enabled", "tensor", "odict", "keys", "handle",
				"slots", "recheck", "pre_body", "post_body", "shared", "gradhook", NULL};
	PyObject *o[16], *slots;
	long long recheck;
	o[15] = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!OO!O!OOO!OOOO!LOOO|O", names,
					 &PyDict_Type, &o[0], &o[1],
					 &PyList_Type, &o[2], &o[3], &PyDict_Type, &o[4],
					 &PyDict_Type, &o[5], &o[6], &o[7], &PyType_Type, &o[8],
					 &o[9], &o[10], &o[11], &PyTuple_Type, &slots, &recheck,
					 &o[12], &o[13], &o[14], &o[15]) || !cd_check_buf(o[1], "Hooks"))
		return -1;
	const cd_gradhook_api *gh = NULL;
	if (o[15] != Py_None &&
	    !(gh = (const cd_gradhook_api *)PyCapsule_GetPointer(o[15], CD_GRADHOOK_CAPSULE)))
		return -1;
	if (PyTuple_GET_SIZE(slots) != S_NSLOTS || PyList_GET_SIZE(o[2]) < 3) {
		PyErr_SetString(PyExc_ValueError, "commdebug._speedups: entry slots of another version");
		return -1;
	}
	for (int i = 0; i < S_NSLOTS; i++) {
		h->slot[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
		if (h->slot[i] < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "commdebug._speedups: a negative slot");
			return -1;
		}
		if (h->slot[i] >= h->nslots)
			h->nslots = h->slot[i] + 1;
	}
	h->recheck = recheck;
	if (cd_tensor_attrs_find(o[8]) < 0)
		return -1;
	Hooks_clear(h);
	PyObject **dst[] = {&h->lc, &h->buf, &h->state, &h->writer, &h->done_handles,
			    &h->global_pre, &h->cur_task, &h->grad_enabled, &h->tensor, &h->odict,
			    &h->keys, &h->handle, &h->pre_body, &h->post_body, &h->shared,
			    &h->gradhook};
	for (int i = 0; i < 16; i++)
		*dst[i] = Py_NewRef(o[i]);
	h->gh = gh;
	return 0;
}

static PyMethodDef Hooks_methods[] = {
	{"pre", (PyCFunction)(void (*)(void))Hooks_pre, METH_FASTCALL,
	 "pre(mod, inputs): fw_pre past its is_compiling() check"},
	{"post", (PyCFunction)(void (*)(void))Hooks_post, METH_FASTCALL,
	 "post(mod, inputs, output): fw_post past its is_compiling() check"},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject HooksType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.Hooks",
	.tp_basicsize = sizeof(Hooks),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "Light mode's module hooks, their common case (see commdebug._light)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Hooks_init,
	.tp_dealloc = (destructor)Hooks_dealloc,
	.tp_traverse = (traverseproc)Hooks_traverse,
	.tp_clear = (inquiry)Hooks_clear,
	.tp_methods = Hooks_methods,
};

/* ------------------------------------------------------------------ fire */

/*
 * Fire(lines, state, queue, bw_end, buf[, task]): _lightbw's fire(lines),
 * the gradient hook that writes a module's bw_pre lines when its output's
 * gradient is computed.  Called with the gradient; returns None (the
 * gradient unchanged).  The first call in a backward pass queues bw_end
 * (state[1]: one is queued).  With task (torch._C._current_graph_task_id):
 * it writes at the first of its calls in each backward pass only (a hook
 * several tensors share, _lightbw's shared(lines, False)).  Attributes may
 * be set on it (_cd_own, _cd_lines), as on the Python function.
 */
typedef struct {
	PyObject_HEAD
	PyObject *lines;        /* tuple or list of line prefixes */
	PyObject *state;        /* list: [region, bw_end queued, in a region] */
	PyObject *queue;        /* queue(callback): an engine callback */
	PyObject *bw_end;       /* the callback */
	PyObject *buf;          /* the writer's lines (a LineBuf, or a list) */
	PyObject *task;         /* the graph task's id, or None: every call writes */
	PyObject *last;         /* the graph task it wrote in last, or None */
	PyObject *dict;         /* attributes */
	vectorcallfunc vectorcall;
} Fire;

static PyObject *Fire_call(Fire *f, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
	(void)args;
	if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
		PyErr_SetString(PyExc_TypeError, "a bw_pre hook takes the gradient");
		return NULL;
	}
	if (f->task != Py_None) {
		PyObject *task = PyObject_CallNoArgs(f->task);
		if (!task)
			return NULL;
		int same = f->last != Py_None ? PyObject_RichCompareBool(task, f->last, Py_EQ) : 0;
		if (same != 0) {
			Py_DECREF(task);
			return same < 0 ? NULL : Py_NewRef(Py_None);
		}
		Py_SETREF(f->last, task);
	}
	int queued = PyObject_IsTrue(PyList_GET_ITEM(f->state, 1));
	if (queued < 0)
		return NULL;
	if (!queued) {
		if (PyList_SetItem(f->state, 1, Py_NewRef(Py_True)) < 0)
			return NULL;
		PyObject *r = PyObject_CallOneArg(f->queue, f->bw_end);
		if (!r)
			return NULL;
		Py_DECREF(r);
	}
	cd_time now;
	cd_time_now(&now);
	int rc = 0;
	/* (a list's lines are added to in forward only, never while it fires) */
	for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(f->lines); i++)
		rc = cd_append_t(f->buf, PySequence_Fast_GET_ITEM(f->lines, i), &now);
	cd_time_clear(&now);
	return rc ? NULL : Py_NewRef(Py_None);
}

#define FIRE_FIELDS(X) X(lines) X(state) X(queue) X(bw_end) X(buf) X(task) X(last) X(dict)

CD_GC_FUNCS(Fire, FIRE_FIELDS)

static PyObject *Fire_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *lines, *state, *queue, *bw_end, *buf, *task = Py_None;
	if (kw && PyDict_GET_SIZE(kw)) {
		PyErr_SetString(PyExc_TypeError, "Fire(lines, state, queue, bw_end, buf[, task])");
		return NULL;
	}
	if (!PyArg_ParseTuple(args, "OO!OOO|O:Fire", &lines, &PyList_Type, &state, &queue, &bw_end,
			      &buf, &task) || !cd_check_buf(buf, "Fire"))
		return NULL;
	if (!PyTuple_CheckExact(lines) && !PyList_CheckExact(lines)) {
		PyErr_SetString(PyExc_TypeError, "Fire: lines is a tuple or a list");
		return NULL;
	}
	if (PyList_GET_SIZE(state) < 3) {
		PyErr_SetString(PyExc_ValueError, "Fire: a state of another version");
		return NULL;
	}
	Fire *f = (Fire *)type->tp_alloc(type, 0);
	if (!f)
		return NULL;
	f->lines = Py_NewRef(lines);
	f->state = Py_NewRef(state);
	f->queue = Py_NewRef(queue);
	f->bw_end = Py_NewRef(bw_end);
	f->buf = Py_NewRef(buf);
	f->task = Py_NewRef(task);
	f->last = Py_NewRef(Py_None);
	f->vectorcall = (vectorcallfunc)Fire_call;
	return (PyObject *)f;
}

static PyTypeObject FireType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.Fire",
	.tp_basicsize = sizeof(Fire),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "Light mode's bw_pre gradient hook (see commdebug._lightbw)",
	.tp_new = Fire_new,
	.tp_dealloc = (destructor)Fire_dealloc,
	.tp_traverse = (traverseproc)Fire_traverse,
	.tp_clear = (inquiry)Fire_clear,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Fire, vectorcall),
	.tp_dictoffset = offsetof(Fire, dict),
	.tp_getattro = PyObject_GenericGetAttr,
	.tp_setattro = PyObject_GenericSetAttr,
};

/* ----------------------------------------------------------- raw frames */

/* XXH64 (the content checksum of a zstd frame: its low 32 bits), from the
 * algorithm's specification. */
#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Little-endian loads: one load on a little-endian host (the byte loop
 * elsewhere). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint64_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
#else
static uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t rd32(const unsigned char *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}
#endif

static uint64_t xxround(uint64_t acc, uint64_t in)
{
	return rotl(acc + in * P2, 31) * P1;
}

static uint64_t xxmerge(uint64_t h, uint64_t v)
{
	return (h ^ xxround(0, v)) * P1 + P4;
}

static uint64_t xxh64(const unsigned char *p, size_t n)
{
	const unsigned char *end = p + n;
	uint64_t h;
	if (n >= 32) {
		uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
		for (; end - p >= 32; p += 32) {
			v1 = xxround(v1, rd64(p));
			v2 = xxround(v2, rd64(p + 8));
			v3 = xxround(v3, rd64(p + 16));
			v4 = xxround(v4, rd64(p + 24));
		}
		h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
		h = xxmerge(xxmerge(xxmerge(xxmerge(h, v1), v2), v3), v4);
	} else {
		h = P5;
	}
	h += (uint64_t)n;
	for (; end - p >= 8; p += 8)
		h = rotl(h ^ xxround(0, rd64(p)), 27) * P1 + P4;
	if (end - p >= 4) {
		h = rotl(h ^ rd32(p) * P1, 23) * P2 + P3;
		p += 4;
	}
	for (; p < end; p++)
		h = rotl(h ^ *p * P5, 11) * P1;
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	return h ^ (h >> 32);
}

#define RAW_BLOCK (128 * 1024)      /* _zstd._RAW_BLOCK */

/* The zstd frame of raw blocks holding data (_zstd.raw_frame: single
 * segment, the content size in 4 bytes, the content checksum). */
PyObject *cd_raw_frame_of(const unsigned char *data, size_t n)
{
	if (n > 0xFFFFFFFFu) {
		PyErr_SetString(PyExc_OverflowError, "commdebug: a raw frame over 4 GiB");
		return NULL;
	}
	size_t blocks = n ? (n + RAW_BLOCK - 1) / RAW_BLOCK : 1;
	PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 + 1 + 4 + 3 * blocks + n + 4));
	if (!out)
		return NULL;
	unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
	static const unsigned char magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
	memcpy(o, magic, 4);
	o[4] = 0xA4;                            /* single segment, 4-byte size, checksum */
	for (int i = 0; i < 4; i++)
		o[5 + i] = (unsigned char)(n >> (8 * i));
	o += 9;
	size_t pos = 0;
	do {
		size_t size = n - pos < RAW_BLOCK ? n - pos : RAW_BLOCK;
		uint32_t hdr = (uint32_t)(size << 3) | (pos + size >= n);
		o[0] = (unsigned char)hdr;
		o[1] = (unsigned char)(hdr >> 8);
		o[2] = (unsigned char)(hdr >> 16);
		memcpy(o + 3, data + pos, size);
		o += 3 + size;
		pos += size;
	} while (pos < n);
	uint32_t sum = (uint32_t)xxh64(data, n);
	for (int i = 0; i < 4; i++)
		o[i] = (unsigned char)(sum >> (8 * i));
	return out;
}

static PyObject *xxh64_of(const unsigned char *p, size_t n)
{
	return PyLong_FromUnsignedLongLong(xxh64(p, n));
}

/* fn of the bytes of a bytes-like object. */
static PyObject *on_bytes(PyObject *data, PyObject *(*fn)(const unsigned char *, size_t))
{
	Py_buffer b;
	if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	PyObject *out = fn(b.buf, (size_t)b.len);
	PyBuffer_Release(&b);
	return out;
}

/* raw_frame(data) -> bytes: that frame of bytes data. */
static PyObject *raw_frame(PyObject *self, PyObject *data)
{
	(void)self;
	return on_bytes(data, cd_raw_frame_of);
}

/* xxh64(data) -> int (seed 0). */
static PyObject *py_xxh64(PyObject *self, PyObject *data)
{
	(void)self;
	return on_bytes(data, xxh64_of);
}

static PyMethodDef module_methods[] = {
	{"text", (PyCFunction)(void (*)(void))cd_text, METH_FASTCALL,
	 "text(chunk, mono0) -> (bytes, marks): the writer's lines (see _writer.TraceWriter._text)"},
	{"raw_frame", (PyCFunction)raw_frame, METH_O,
	 "raw_frame(data) -> bytes: a zstd frame of raw blocks holding data, with its checksum"},
	{"xxh64", (PyCFunction)py_xxh64, METH_O, "xxh64(data) -> int: XXH64 of data, seed 0"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "commdebug._speedups",
	.m_doc = "The recorder's hottest Python, in C (see the source's head comment)",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
	struct { PyObject **p; const char *s; } names[] = {
		{&s_due, "due"}, {&s_poke, "poke"}, {&s_fwd_hooks, "_forward_hooks"},
		{&s_bwpre_hooks, "_backward_pre_hooks"}, {&s_params, "_parameters"},
		{&s_requires_grad, "requires_grad"}, {&s_bw_hooks, "_backward_hooks"},
		{&s_grad_fn, "grad_fn"}, {&s_register, "_register_hook_dict"},
		{&s_since, "_cd_since"}, {&s_next_id, "next_id"}, {&s_cd_own, "_cd_own"},
		{&s_cd_lines, "_cd_lines"}, {&s_items, "items"}, {&s_clear, "clear"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!*names[i].p && !(*names[i].p = PyUnicode_InternFromString(names[i].s)))
			return NULL;
	if (PyType_Ready(&HooksType) < 0 || PyType_Ready(&FireType) < 0 || cd_mode_ready() < 0 ||
	    cd_full_ready() < 0 || PyType_Ready(&cd_LineBufType) < 0 ||
	    PyType_Ready(&cd_AsyncWriteType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&speedups_module);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "Hooks", (PyObject *)&HooksType) < 0 ||
	    PyModule_AddObjectRef(m, "Fire", (PyObject *)&FireType) < 0 ||
	    PyModule_AddObjectRef(m, "Dispatch", (PyObject *)&cd_DispatchType) < 0 ||
	    PyModule_AddObjectRef(m, "FullCall", (PyObject *)&cd_FullCallType) < 0 ||
	    PyModule_AddObjectRef(m, "Marker", (PyObject *)&cd_MarkerType) < 0 ||
	    PyModule_AddObjectRef(m, "LineBuf", (PyObject *)&cd_LineBufType) < 0 ||
	    PyModule_AddObjectRef(m, "AsyncWrite", (PyObject *)&cd_AsyncWriteType) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
