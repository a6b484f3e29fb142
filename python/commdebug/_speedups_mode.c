/*
 * The full recorder's per-op path: Dispatch(...) is its dispatch mode's
 * __torch_dispatch__(func, types, args, kwargs) (_mode._make_mode puts it
 * on the mode object, where torch looks it up), the common case in C: an
 * op already in the recorder's cache, not a collective, no DTensor among
 * the types.  It calls the op and appends its event (the cached text for
 * forward or backward, real or fake tensors, and the time), as the Python
 * it stands for does (the op through OpOverload._op where OpOverload's
 * __call__ would only call that); anything else goes to that Python
 * (body), which then does all of it: C decides before it changes anything.
 *
 * Where the Python would call is_bw() and fake_context() (a torch that
 * lacks what they read inline), the recorder does not use this.
 */
#include "_speedups.h"

#include <stddef.h>
#include <structmember.h>

typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	PyObject *cache;        /* dict: id(op) -> (fw, bw, collective, op, fw fake, bw fake) */
	PyObject *buf;          /* the writer's lines (a LineBuf, or a list) */
	PyObject *writer;       /* .due, .poke() */
	PyObject *cur_task;     /* torch._C._current_graph_task_id */
	PyObject *dtensor;      /* DTensor, or None */
	PyObject *fake;         /* FakeTensor, or None */
	PyObject *tls;          /* the tracing context's thread-local */
	PyObject *get_mode;     /* torch._C._get_dispatch_mode */
	PyObject *fake_key;     /* the mode stack's fake slot */
	PyObject *op_type;      /* _compat.OP_CALLS_OP (OpOverload or None) */
	PyObject *body;         /* the Python: body(func, types, args, kwargs) */
	PyObject *mode;         /* the mode (__self__: torch checks that it is its own) */
} Dispatch;

static PyObject *s_tracing_context, *s_fake_mode, *s_pyobj_dispatcher, *s_op;

/* The Python body, called as Dispatch was. */
static PyObject *python_body(Dispatch *d, PyObject *const *args, size_t nargsf,
			     PyObject *kwnames)
{
	return PyObject_Vectorcall(d->body, args, nargsf, kwnames);
}

/* 1 when the op runs on fake tensors (a FakeTensor among types, a tracing
 * context with a fake mode, the fake mode on the stack), 0, -1 on error. */
static int is_fake(Dispatch *d, PyObject *types)
{
	if (d->fake != Py_None) {
		int in = PySequence_Contains(types, d->fake);
		if (in)
			return in;
	}
	PyObject *ctx = PyObject_GetAttr(d->tls, s_tracing_context);
	if (!ctx) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
	} else if (ctx != Py_None) {
		PyObject *fm = PyObject_GetAttr(ctx, s_fake_mode);
		Py_DECREF(ctx);
		if (!fm) {
			if (!PyErr_ExceptionMatches(PyExc_AttributeError))
				return -1;
			PyErr_Clear();
		} else {
			int yes = fm != Py_None;
			Py_DECREF(fm);
			if (yes)
				return 1;
		}
	} else {
		Py_DECREF(ctx);
	}
	PyObject *m = PyObject_CallOneArg(d->get_mode, d->fake_key);
	if (!m)
		return -1;
	int yes = m != Py_None;
	Py_DECREF(m);
	return yes;
}

/* func(*args, **kwargs), past OpOverload.__call__'s frame where that
 * would only call func._op: an op of type op_type (_compat.OP_CALLS_OP:
 * OpOverload itself, not a subclass with a __call__ of its own, where this
 * torch's is known; None: every call as it is), without a Python dispatcher
 * object. */
PyObject *cd_call_op(PyObject *op_type, PyObject *func, PyObject *args, PyObject *kwargs)
{
	if ((PyObject *)Py_TYPE(func) != op_type)
		return PyObject_Call(func, args, kwargs);
	PyObject *pd = PyObject_GetAttr(func, s_pyobj_dispatcher);
	if (!pd) {
		PyErr_Clear();
		return PyObject_Call(func, args, kwargs);
	}
	int plain = pd == Py_None;
	Py_DECREF(pd);
	PyObject *op = plain ? PyObject_GetAttr(func, s_op) : NULL;
	if (!op) {
		PyErr_Clear();
		return PyObject_Call(func, args, kwargs);
	}
	PyObject *r = PyObject_Call(op, args, kwargs);
	Py_DECREF(op);
	return r;
}

static PyObject *Dispatch_call(Dispatch *d, PyObject *const *args, size_t nargsf,
			       PyObject *kwnames)
{
	Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
	if (kwnames || nargs != 4 || !PyTuple_CheckExact(args[1]) || !PyTuple_CheckExact(args[2]))
		return python_body(d, args, nargsf, kwnames);
	PyObject *func = args[0], *types = args[1], *fargs = args[2], *fkw = args[3];
	if (fkw != Py_None && !PyDict_CheckExact(fkw))
		return python_body(d, args, nargsf, kwnames);
	PyObject *key = PyLong_FromVoidPtr(func);
	if (!key)
		return NULL;
	PyObject *info = PyDict_GetItemWithError(d->cache, key);
	Py_DECREF(key);
	if (!info) {
		if (PyErr_Occurred())
			return NULL;
		return python_body(d, args, nargsf, kwnames);
	}
	if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) < 6 ||
	    PyTuple_GET_ITEM(info, 0) == Py_None || PyTuple_GET_ITEM(info, 2) != Py_None)
		return python_body(d, args, nargsf, kwnames);
	if (d->dtensor != Py_None) {
		int dt = PySequence_Contains(types, d->dtensor);
		if (dt)
			return dt < 0 ? NULL : python_body(d, args, nargsf, kwnames);
	}
	/* (the entry held: the op's own Python could empty the cache) */
	Py_INCREF(info);
	PyObject *out = NULL;
	cd_time now = {0, NULL};
	int bw = cd_in_backward(d->cur_task), fake = bw < 0 ? -1 : is_fake(d, types);
	if (fake < 0)
		goto done;
	out = cd_call_op(d->op_type, func, fargs, fkw != Py_None && PyDict_GET_SIZE(fkw) ? fkw : NULL);
	if (!out)
		goto done;
	cd_time_now(&now);
	if (cd_append_t(d->buf, PyTuple_GET_ITEM(info, (fake ? 4 : 0) + bw), &now) < 0 ||
	    cd_maybe_poke_t(d->writer, d->buf, &now) < 0)
		Py_CLEAR(out);
done:
	cd_time_clear(&now);
	Py_DECREF(info);
	return out;
}

static PyObject *Dispatch_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
				     PyObject *kwnames)
{
	return Dispatch_call((Dispatch *)self, args, nargsf, kwnames);
}

#define DISPATCH_FIELDS(X) X(cache) X(buf) X(writer) X(cur_task) X(dtensor) X(fake) X(tls) \
	X(get_mode) X(fake_key) X(op_type) X(body) X(mode)

CD_GC_FUNCS(Dispatch, DISPATCH_FIELDS)

static int Dispatch_init(Dispatch *d, PyObject *args, PyObject *kw)
{
	static char *names[] = {"cache", "buf", "writer", "cur_task", "dtensor", "fake", "tls",
				"get_mode", "fake_key", "op_type", "body", "mode", NULL};
	PyObject *o[12];
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOOOOOOOOO", names, &PyDict_Type, &o[0],
					 &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
					 &o[7], &o[8], &o[9], &o[10], &o[11]) ||
	    !cd_check_buf(o[1], "Dispatch"))
		return -1;
	Dispatch_clear(d);
	PyObject **dst[] = {&d->cache, &d->buf, &d->writer, &d->cur_task, &d->dtensor, &d->fake,
			    &d->tls, &d->get_mode, &d->fake_key, &d->op_type, &d->body, &d->mode};
	for (int i = 0; i < 12; i++)
		*dst[i] = Py_NewRef(o[i]);
	d->vectorcall = Dispatch_vectorcall;
	return 0;
}

static PyMemberDef Dispatch_members[] = {
	{"__self__", T_OBJECT, offsetof(Dispatch, mode), READONLY, "the mode it is the method of"},
	{NULL, 0, 0, 0, NULL},
};

PyTypeObject cd_DispatchType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.Dispatch",
	.tp_basicsize = sizeof(Dispatch),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "The full recorder's __torch_dispatch__, its common case (see commdebug._mode)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Dispatch_init,
	.tp_dealloc = (destructor)Dispatch_dealloc,
	.tp_traverse = (traverseproc)Dispatch_traverse,
	.tp_clear = (inquiry)Dispatch_clear,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Dispatch, vectorcall),
	.tp_members = Dispatch_members,
};

int cd_mode_ready(void)
{
	if (!s_tracing_context && !(s_tracing_context = PyUnicode_InternFromString("tracing_context")))
		return -1;
	if (!s_fake_mode && !(s_fake_mode = PyUnicode_InternFromString("fake_mode")))
		return -1;
	if (!s_pyobj_dispatcher && !(s_pyobj_dispatcher = PyUnicode_InternFromString("_pyobj_dispatcher")))
		return -1;
	if (!s_op && !(s_op = PyUnicode_InternFromString("_op")))
		return -1;
	return PyType_Ready(&cd_DispatchType);
}
