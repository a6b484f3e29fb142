/*
 * The trace writer's lines (_writer.TraceWriter): how the recording thread
 * leaves them and how they become the bytes of a frame.
 *
 * An item is a str (a line), a tuple (prefix, t) for prefix + str(t -
 * mono0) + "}\n", (prefix1, prefix2, t) for two such lines with the same
 * time, or an int: a mark, noted as (mark, index of the line it comes
 * before, counting a tuple of two lines as two).
 *
 * LineBuf is the writer's buffer where this module is built: each item is
 * formatted when it is appended, while what it is made of is still in the
 * caches, into bytes the writer then takes whole (take()), so that a frame
 * written after a training step costs a copy.  text(chunk, mono0) formats
 * a list of items (the Python's buffer, and the tests' twin of LineBuf).
 */
#include "_speedups.h"

#include <stddef.h>
#include <string.h>
#include <structmember.h>


/* A growing byte buffer. */
typedef struct {
	char *p;
	size_t n, cap;
} Bytes;

static int bytes_put(Bytes *b, const char *s, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		char *p = PyMem_RawRealloc(b->p, cap);
		if (!p) {
			PyErr_NoMemory();
			return -1;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/* A line prefix: its UTF-8 (surrogates passed, as the Python encodes). */
static int put_str(Bytes *b, PyObject *s)
{
	if (!PyUnicode_Check(s)) {
		PyErr_SetString(PyExc_TypeError, "commdebug: a buffered line that is not a str");
		return -1;
	}
	Py_ssize_t n;
	const char *u = PyUnicode_AsUTF8AndSize(s, &n);
	if (u)
		return bytes_put(b, u, (size_t)n);
	PyErr_Clear();          /* a lone surrogate: as "surrogatepass" */
	PyObject *enc = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
	if (!enc)
		return -1;
	int r = bytes_put(b, PyBytes_AS_STRING(enc), (size_t)PyBytes_GET_SIZE(enc));
	Py_DECREF(enc);
	return r;
}

/* str(d) + "}\n" */
static int put_digits(Bytes *b, long long d)
{
	/* (digits from the end: snprintf costs more than the rest of a line) */
	char s[32], *q = s + sizeof s;
	*--q = '\n';
	*--q = '}';
	/* (two digits a division: a time is 9 to 13 of them) */
	static const char pairs[] =
		"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
		"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
		"8081828384858687888990919293949596979899";
	unsigned long long u = d < 0 ? 0ULL - (unsigned long long)d : (unsigned long long)d;
	while (u >= 100) {
		unsigned k = (unsigned)(u % 100) * 2;
		u /= 100;
		*--q = pairs[k + 1];
		*--q = pairs[k];
	}
	if (u >= 10) {
		*--q = pairs[u * 2 + 1];
		*--q = pairs[u * 2];
	} else {
		*--q = (char)('0' + u);
	}
	if (d < 0)
		*--q = '-';
	return bytes_put(b, q, (size_t)(s + sizeof s - q));
}

/* str(t - mono0) + "}\n" for an int t (TypeError for another, OverflowError
 * past 64 bits: text()'s caller formats those in Python) */
static int put_time(Bytes *b, PyObject *t, long long m0)
{
	if (!PyLong_Check(t)) {
		PyErr_SetString(PyExc_TypeError, "commdebug: a buffered time that is not an int");
		return -1;
	}
	long long v = PyLong_AsLongLong(t);
	if (v == -1 && PyErr_Occurred())
		return -1;
	return put_digits(b, v - m0);
}

/*
 * The items of a chunk were made while a training step ran, and that step
 * has pushed them out of the caches since: reading them one after the other
 * waits for memory at every object (the list's item, its tuple's prefix and
 * time).  Ask for the objects of items a few places ahead, so that those
 * waits overlap.
 */
#define AHEAD_ITEM 8
#define AHEAD_PARTS 4

static void prefetch_obj(PyObject *o)
{
#if defined(__GNUC__) || defined(__clang__)
	__builtin_prefetch(o);
	__builtin_prefetch((const char *)o + 64);
#else
	(void)o;
#endif
}

static void prefetch_items(PyObject *chunk, Py_ssize_t i)
{
	Py_ssize_t n = PyList_GET_SIZE(chunk);
	if (i + AHEAD_ITEM < n)
		prefetch_obj(PyList_GET_ITEM(chunk, i + AHEAD_ITEM));
	if (i + AHEAD_PARTS < n) {
		PyObject *x = PyList_GET_ITEM(chunk, i + AHEAD_PARTS);
		if (PyTuple_CheckExact(x))
			for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(x); k++)
				prefetch_obj(PyTuple_GET_ITEM(x, k));
	}
}

/*
 * text(chunk, mono0) -> (bytes, marks): _writer.TraceWriter._text.  An
 * item is a str (a line), a tuple (prefix, t) for prefix + str(t - mono0)
 * + "}\n", (prefix1, prefix2, t) for two such lines with the same time, or
 * an int: a mark, listed as (mark, index of the line it comes before,
 * counting a tuple of two lines as two).
 */
/* The bytes of the first n items of chunk, its marks in *marks (a new
 * list): a new bytes object, or NULL with an error set. */
static PyObject *format_items(PyObject *chunk, Py_ssize_t n, long long m0, PyObject **marks)
{
	*marks = PyList_New(0);
	if (!*marks)
		return NULL;
	Bytes b = {NULL, 0, 0};
	Py_ssize_t lines = 0;
	int r = 0;
	for (Py_ssize_t i = 0; !r && i < n; i++) {
		prefetch_items(chunk, i);
		PyObject *x = PyList_GET_ITEM(chunk, i);
		if (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == 2) {
			r = put_str(&b, PyTuple_GET_ITEM(x, 0));
			if (!r)
				r = put_time(&b, PyTuple_GET_ITEM(x, 1), m0);
			lines++;
		} else if (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == 3) {
			PyObject *t = PyTuple_GET_ITEM(x, 2);
			r = put_str(&b, PyTuple_GET_ITEM(x, 0));
			if (!r)
				r = put_time(&b, t, m0);
			if (!r)
				r = put_str(&b, PyTuple_GET_ITEM(x, 1));
			if (!r)
				r = put_time(&b, t, m0);
			lines += 2;
		} else if (PyUnicode_CheckExact(x)) {
			r = put_str(&b, x);
			lines++;
		} else if (PyTuple_CheckExact(x)) {
			PyErr_SetString(PyExc_TypeError, "commdebug: a buffered tuple of another size");
			r = -1;
		} else {
			PyObject *m = Py_BuildValue("(On)", x, lines);
			r = m ? PyList_Append(*marks, m) : -1;
			Py_XDECREF(m);
		}
	}
	PyObject *out = r ? NULL : PyBytes_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.n);
	PyMem_RawFree(b.p);
	if (!out)
		Py_CLEAR(*marks);
	return out;
}

PyObject *cd_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	(void)self;
	if (nargs != 2 || !PyList_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "text(chunk: list, mono0: int)");
		return NULL;
	}
	long long m0 = PyLong_AsLongLong(args[1]);
	if (m0 == -1 && PyErr_Occurred())
		return NULL;
	PyObject *marks, *out = format_items(args[0], PyList_GET_SIZE(args[0]), m0, &marks);
	if (!out)
		return NULL;
	PyObject *pair = PyTuple_Pack(2, out, marks);
	Py_DECREF(out);
	Py_DECREF(marks);
	return pair;
}


/* ---------------------------------------------------------------- LineBuf */

typedef struct {
	PyObject_HEAD
	Bytes b;                /* the lines formatted since the last take() */
	long long mono0;        /* the origin of the items' times */
	long long due;          /* the writer's due time (TraceWriter.due, kept here too) */
	Py_ssize_t items;       /* items appended since then (len()) */
	Py_ssize_t lines;       /* lines in b */
	PyObject *marks;        /* [(mark, line index), ...] or NULL: none */
} LineBuf;

/* str(t - mono0) + "}\n" as the Python makes it, for a time put_time
 * refuses (a float, an int past 64 bits). */
static int put_time_py(LineBuf *lb, PyObject *t)
{
	PyObject *m0 = PyLong_FromLongLong(lb->mono0);
	PyObject *d = m0 ? PyNumber_Subtract(t, m0) : NULL;
	PyObject *s = d ? PyObject_Str(d) : NULL;
	int r = s ? put_str(&lb->b, s) : -1;
	if (!r)
		r = bytes_put(&lb->b, "}\n", 2);
	Py_XDECREF(s);
	Py_XDECREF(d);
	Py_XDECREF(m0);
	return r;
}

static int put_lb_time(LineBuf *lb, PyObject *t)
{
	if (PyLong_CheckExact(t)) {
		long long v = PyLong_AsLongLong(t);
		if (v != -1 || !PyErr_Occurred())
			return put_digits(&lb->b, v - lb->mono0);
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return -1;
		PyErr_Clear();
	}
	return put_time_py(lb, t);
}

/* One item, formatted (on an error, b holds what it held before). */
static int lb_put(LineBuf *lb, PyObject *x)
{
	size_t at = lb->b.n;
	int r, lines = 1;
	if (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == 2) {
		r = put_str(&lb->b, PyTuple_GET_ITEM(x, 0));
		if (!r)
			r = put_lb_time(lb, PyTuple_GET_ITEM(x, 1));
	} else if (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == 3) {
		PyObject *t = PyTuple_GET_ITEM(x, 2);
		r = put_str(&lb->b, PyTuple_GET_ITEM(x, 0));
		if (!r)
			r = put_lb_time(lb, t);
		if (!r)
			r = put_str(&lb->b, PyTuple_GET_ITEM(x, 1));
		if (!r)
			r = put_lb_time(lb, t);
		lines = 2;
	} else if (PyUnicode_CheckExact(x)) {
		r = put_str(&lb->b, x);
	} else if (PyLong_CheckExact(x)) {
		if (!lb->marks && !(lb->marks = PyList_New(0)))
			return -1;
		PyObject *m = Py_BuildValue("(On)", x, lb->lines);
		r = m ? PyList_Append(lb->marks, m) : -1;
		Py_XDECREF(m);
		if (!r)
			lb->items++;
		return r;
	} else {
		PyErr_Format(PyExc_TypeError, "commdebug: a buffered line of type %s",
			     Py_TYPE(x)->tp_name);
		return -1;
	}
	if (r) {
		lb->b.n = at;
		return -1;
	}
	lb->lines += lines;
	lb->items++;
	return 0;
}

int cd_lines_put2(PyObject *buf, PyObject *text, PyObject *t)
{
	LineBuf *lb = (LineBuf *)buf;
	size_t at = lb->b.n;
	if (put_str(&lb->b, text) < 0 || put_lb_time(lb, t) < 0) {
		lb->b.n = at;
		return -1;
	}
	lb->lines++;
	lb->items++;
	return 0;
}

int cd_lines_put_ns(PyObject *buf, PyObject *text, long long ns)
{
	LineBuf *lb = (LineBuf *)buf;
	size_t at = lb->b.n;
	if (put_str(&lb->b, text) < 0 || put_digits(&lb->b, ns - lb->mono0) < 0) {
		lb->b.n = at;
		return -1;
	}
	lb->lines++;
	lb->items++;
	return 0;
}

/* Two lines with the same time, as one item (a (text1, text2, t) tuple's). */
int cd_lines_put_pair_ns(PyObject *buf, PyObject *text1, PyObject *text2, long long ns)
{
	LineBuf *lb = (LineBuf *)buf;
	size_t at = lb->b.n;
	if (put_str(&lb->b, text1) < 0 || put_digits(&lb->b, ns - lb->mono0) < 0 ||
	    put_str(&lb->b, text2) < 0 || put_digits(&lb->b, ns - lb->mono0) < 0) {
		lb->b.n = at;
		return -1;
	}
	lb->lines += 2;
	lb->items++;
	return 0;
}

long long cd_lines_due(PyObject *buf)
{
	return ((LineBuf *)buf)->due;
}

int cd_append_item(PyObject *buf, PyObject *item)
{
	if (Py_TYPE(buf) == &cd_LineBufType)
		return lb_put((LineBuf *)buf, item);
	return PyList_Append(buf, item);
}

static void lb_reset(LineBuf *lb)
{
	lb->b.n = 0;
	lb->items = 0;
	lb->lines = 0;
	Py_CLEAR(lb->marks);
	/* (a buffer grown far past a usual frame is given back) */
	if (lb->b.cap > ((size_t)1 << 22)) {
		PyMem_RawFree(lb->b.p);
		lb->b.p = NULL;
		lb->b.cap = 0;
	}
}

static PyObject *LineBuf_append(LineBuf *lb, PyObject *x)
{
	return lb_put(lb, x) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *LineBuf_extend(LineBuf *lb, PyObject *xs)
{
	PyObject *it = PyObject_GetIter(xs), *x;
	if (!it)
		return NULL;
	while ((x = PyIter_Next(it))) {
		int r = lb_put(lb, x);
		Py_DECREF(x);
		if (r < 0) {
			Py_DECREF(it);
			return NULL;
		}
	}
	Py_DECREF(it);
	return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

/* The buffer's bytes moved out (*p, *n, *cap: the caller owns them, a
 * PyMem_RawMalloc block; NULL when none), with its marks (a new list) and
 * items; the LineBuf empty again, with spare (PyMem_RawMalloc'd, spare_cap
 * bytes, or NULL) as its buffer.  0, -1 on error (nothing moved). */
int cd_lines_steal(PyObject *buf, char **p, size_t *n, size_t *cap, PyObject **marks,
		   Py_ssize_t *items, char *spare, size_t spare_cap)
{
	LineBuf *lb = (LineBuf *)buf;
	*marks = lb->marks ? Py_NewRef(lb->marks) : PyList_New(0);
	if (!*marks)
		return -1;
	*p = lb->b.p;
	*n = lb->b.n;
	*cap = lb->b.cap;
	*items = lb->items;
	lb->b.p = spare;
	lb->b.cap = spare ? spare_cap : 0;
	lb_reset(lb);
	return 0;
}

/* The items a LineBuf holds (its len()). */
Py_ssize_t cd_lines_count(PyObject *buf)
{
	return ((LineBuf *)buf)->items;
}

/* take() -> (bytes, marks, items): what was appended, and empty again. */
static PyObject *LineBuf_take(LineBuf *lb, PyObject *unused)
{
	(void)unused;
	PyObject *data = PyBytes_FromStringAndSize(lb->b.p ? lb->b.p : "", (Py_ssize_t)lb->b.n);
	PyObject *marks = lb->marks ? Py_NewRef(lb->marks) : PyList_New(0);
	PyObject *out = data && marks ? Py_BuildValue("(OOn)", data, marks, lb->items) : NULL;
	Py_XDECREF(data);
	Py_XDECREF(marks);
	if (out)
		lb_reset(lb);
	return out;
}

/* take_frame() -> (frame, marks, items, lines, nbytes): take(), its lines
 * made at once into the zstd frame of raw blocks that raw_frame() would make
 * of them (one copy, not two: 5-10 us less at a region's end). */
static PyObject *LineBuf_take_frame(LineBuf *lb, PyObject *unused)
{
	(void)unused;
	PyObject *frame = cd_raw_frame_of((const unsigned char *)(lb->b.p ? lb->b.p : ""), lb->b.n);
	PyObject *marks = lb->marks ? Py_NewRef(lb->marks) : PyList_New(0);
	PyObject *out = frame && marks ? Py_BuildValue("(OOnnn)", frame, marks, lb->items, lb->lines,
						       (Py_ssize_t)lb->b.n) : NULL;
	Py_XDECREF(frame);
	Py_XDECREF(marks);
	if (out)
		lb_reset(lb);
	return out;
}

static PyObject *LineBuf_clear(LineBuf *lb, PyObject *unused)
{
	(void)unused;
	lb_reset(lb);
	return Py_NewRef(Py_None);
}

static Py_ssize_t LineBuf_len(LineBuf *lb)
{
	return lb->items;
}

static int LineBuf_traverse(LineBuf *lb, visitproc visit, void *arg)
{
	Py_VISIT(lb->marks);
	return 0;
}

static int LineBuf_tp_clear(LineBuf *lb)
{
	Py_CLEAR(lb->marks);
	return 0;
}

static void LineBuf_dealloc(LineBuf *lb)
{
	PyObject_GC_UnTrack(lb);
	Py_CLEAR(lb->marks);
	PyMem_RawFree(lb->b.p);
	Py_TYPE(lb)->tp_free((PyObject *)lb);
}

static PyMethodDef LineBuf_methods[] = {
	{"append", (PyCFunction)LineBuf_append, METH_O, "append(item): one item, formatted"},
	{"extend", (PyCFunction)LineBuf_extend, METH_O, "extend(items)"},
	{"take", (PyCFunction)LineBuf_take, METH_NOARGS,
	 "take() -> (bytes, marks, items): the lines appended since the last take, and empty"},
	{"take_frame", (PyCFunction)LineBuf_take_frame, METH_NOARGS,
	 "take_frame() -> (frame, marks, items, lines, nbytes): take(), as a zstd frame of raw "
	 "blocks (raw_frame)"},
	{"clear", (PyCFunction)LineBuf_clear, METH_NOARGS, "clear(): drop what is buffered"},
	{NULL, NULL, 0, NULL},
};

static PyMemberDef LineBuf_members[] = {
	{"mono0", T_LONGLONG, offsetof(LineBuf, mono0), 0, "the origin of the items' times"},
	{"due", T_LONGLONG, offsetof(LineBuf, due), 0,
	 "the writer's due time (monotonic ns): a dispatched op past it pokes the writer"},
	{"nbytes", T_PYSSIZET, offsetof(LineBuf, b) + offsetof(Bytes, n), READONLY,
	 "bytes buffered"},
	{NULL, 0, 0, 0, NULL},
};

static PySequenceMethods LineBuf_seq = {
	.sq_length = (lenfunc)LineBuf_len,
};

PyTypeObject cd_LineBufType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.LineBuf",
	.tp_basicsize = sizeof(LineBuf),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "The trace writer's buffer of lines, formatted as they are appended "
		  "(see the source's head comment)",
	.tp_new = PyType_GenericNew,
	.tp_dealloc = (destructor)LineBuf_dealloc,
	.tp_traverse = (traverseproc)LineBuf_traverse,
	.tp_clear = (inquiry)LineBuf_tp_clear,
	.tp_methods = LineBuf_methods,
	.tp_members = LineBuf_members,
	.tp_as_sequence = &LineBuf_seq,
};

int cd_check_buf(PyObject *o, const char *who)
{
	if (Py_TYPE(o) == &cd_LineBufType || PyList_Check(o))
		return 1;
	PyErr_Format(PyExc_TypeError, "%s: buf is a LineBuf or a list, not %s", who,
		     Py_TYPE(o)->tp_name);
	return 0;
}
