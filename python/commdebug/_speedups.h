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

/* time.monotonic_ns() (a new int). */
PyObject *cd_now_ns(void);

/* (text, t) appended to the list buf: 0, or -1 with an error set. */
int cd_append2(PyObject *buf, PyObject *text, PyObject *t);

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
