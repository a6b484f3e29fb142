/*
 * What the parts of commdebug._speedups share (one extension module built
 * from _speedups.c, its module and light mode's hooks; _speedups_mode.c,
 * the full recorder's per-op path; _speedups_full.c, its module calls).
 */
#ifndef COMMDEBUG_SPEEDUPS_H
#define COMMDEBUG_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030A0000
#error "commdebug._speedups needs Python 3.10 or later (older Pythons run its Python twin)"
#endif

/* tp_traverse, tp_clear and tp_dealloc (T_traverse, T_clear, T_dealloc) of
 * a type T whose object fields FIELDS lists (FIELDS(X): X(field) each). */
#define CD_VISIT_FIELD(f) Py_VISIT(o->f);
#define CD_CLEAR_FIELD(f) Py_CLEAR(o->f);
#define CD_GC_FUNCS(T, FIELDS)                                                  \
	static int T##_traverse(T *o, visitproc visit, void *arg)              \
	{                                                                       \
		FIELDS(CD_VISIT_FIELD)                                          \
		return 0;                                                       \
	}                                                                       \
	static int T##_clear(T *o)                                              \
	{                                                                       \
		FIELDS(CD_CLEAR_FIELD)                                          \
		return 0;                                                       \
	}                                                                       \
	static void T##_dealloc(T *o)                                           \
	{                                                                       \
		PyObject_GC_UnTrack(o);                                         \
		T##_clear(o);                                                   \
		Py_TYPE(o)->tp_free((PyObject *)o);                             \
	}

/* time.monotonic_ns() (a new int). */
PyObject *cd_now_ns(void);

/* 1 in a backward pass (cur_task, torch._C._current_graph_task_id, says a
 * graph task runs), 0 not, -1 on error. */
int cd_in_backward(PyObject *cur_task);

/* The truth of o.name: 1, 0, -1 on error. */
int cd_attr_true(PyObject *o, PyObject *name);

/* torch.Tensor's requires_grad, grad_fn and _backward_hooks, read and set
 * through their descriptors' getter and setter where t is a torch.Tensor
 * (_speedups.c says more).  cd_tensor_attrs_find(torch.Tensor) first: 0, or
 * -1 with an error set; then cd_tensor_get (a new reference), cd_tensor_set
 * and cd_tensor_true (1, 0, -1) as getattr, setattr and its truth. */
enum { CD_TA_REQUIRES_GRAD, CD_TA_GRAD_FN, CD_TA_BW_HOOKS, CD_TA_N };
int cd_tensor_attrs_find(PyObject *tensor);
PyObject *cd_tensor_get(PyObject *t, int which);
int cd_tensor_set(PyObject *t, int which, PyObject *v);
int cd_tensor_true(PyObject *t, int which);

/* o.name where o has it: 1 with *v a new reference, 0 (*v NULL) where
 * getting it raises AttributeError (cleared), -1 on another error. */
int cd_attr_opt(PyObject *o, PyObject *name, PyObject **v);

/* (text, t) appended to the writer's buf (a LineBuf, or a list): 0, or -1
 * with an error set. */
int cd_append2(PyObject *buf, PyObject *text, PyObject *t);

/* A time for the writer's lines: time.monotonic_ns() as a C number, and
 * the int made of it where a list buf needs one (made once, at first use);
 * cd_time_clear() drops that. */
typedef struct {
	long long ns;
	PyObject *obj;
} cd_time;
void cd_time_now(cd_time *t);
void cd_time_clear(cd_time *t);

/* cd_append2 of (text, t): into a LineBuf without an int for the time. */
int cd_append_t(PyObject *buf, PyObject *text, cd_time *t);

/* writer.poke() once t is past the writer's due time (a LineBuf's copy of
 * it, writer.due for a list buf): 0, -1 on error. */
int cd_maybe_poke_t(PyObject *writer, PyObject *buf, cd_time *t);

/* An item appended to the writer's buf (a LineBuf, or a list). */
int cd_append_item(PyObject *buf, PyObject *item);

/* The writer's lines (_speedups_lines.c): LineBuf, its (text, t) append,
 * text(chunk, mono0). */
extern PyTypeObject cd_LineBufType;
int cd_lines_put2(PyObject *buf, PyObject *text, PyObject *t);
int cd_lines_put_ns(PyObject *buf, PyObject *text, long long ns);
int cd_lines_put_pair_ns(PyObject *buf, PyObject *text1, PyObject *text2, long long ns);
long long cd_lines_due(PyObject *buf);
/* The buffer's bytes moved out of a LineBuf, which takes spare as its buffer
 * (AsyncWrite.submit_lines; _speedups_lines.c says more). */
int cd_lines_steal(PyObject *buf, char **p, size_t *n, size_t *cap, PyObject **marks,
		   Py_ssize_t *items, char *spare, size_t spare_cap);
/* The items a LineBuf holds (its len()). */
Py_ssize_t cd_lines_count(PyObject *buf);

/* The writer's frames written without the interpreter (_speedups_io.c). */
extern PyTypeObject cd_AsyncWriteType;

/* o is a writer's buf (a LineBuf or a list): 1, else 0 with a TypeError
 * naming who (the constructor) set. */
int cd_check_buf(PyObject *o, const char *who);

/* The zstd frame of raw blocks holding data, with its content checksum
 * (raw_frame(); _speedups.c): a new bytes. */
PyObject *cd_raw_frame_of(const unsigned char *data, size_t n);
PyObject *cd_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* The writer's `if now > w.due: w.poke()`: 0, or -1 with an error set. */
int cd_maybe_poke(PyObject *writer, PyObject *now);

/* func(*args, **kwargs) for an op (OpOverload op_type or another callable),
 * past OpOverload.__call__'s frame where that only calls func._op
 * (_speedups_mode.c). */
PyObject *cd_call_op(PyObject *op_type, PyObject *func, PyObject *args, PyObject *kwargs);

/* The full recorder's per-op path (_speedups_mode.c). */
extern PyTypeObject cd_DispatchType;
int cd_mode_ready(void);

/* The full recorder's module call and gradient hook (_speedups_full.c). */
extern PyTypeObject cd_FullCallType, cd_MarkerType;
int cd_full_ready(void);

#endif
