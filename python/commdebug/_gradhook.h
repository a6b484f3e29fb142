/*
 * commdebug._gradhook's C interface (a capsule, CD_GRADHOOK_CAPSULE, holding
 * a cd_gradhook_api), for _speedups.c: light mode's own bw_pre hook put on
 * a tensor's grad_fn as a C++ hook of torch's autograd (_gradhook.cpp).
 * Each function takes a tensor (attach: one with a grad_fn) and needs the
 * interpreter's lock.  A tensor's hook is the one on its grad_fn for its
 * output of that node.
 */
#ifndef COMMDEBUG_GRADHOOK_H
#define COMMDEBUG_GRADHOOK_H

#include <Python.h>

#define CD_GRADHOOK_CAPSULE "commdebug._gradhook.api.2"   /* (.2: attach_shared) */

typedef struct {
	/* fire (a bw_pre hook, called with None) put on t's grad_fn for t:
	 * Py_None when put; the fire of the one there already, the first
	 * where several (a module inside returned t; nothing done); NULL
	 * with an error set. */
	PyObject *(*attach)(PyObject *t, PyObject *fire);
	/* The fire of t's hook replaced by fire: 1, 0 (no hook of t's, or
	 * no grad_fn), -1. */
	int (*replace)(PyObject *t, PyObject *fire);
	/* t's hooks moved after every other hook of its grad_fn, so that they
	 * run after the hook dict of t made since: 1, 0 (none), -1. */
	int (*demote)(PyObject *t);
	/* fire (a hook several output tensors share) put on t's grad_fn for
	 * t, t's hooks there moved after it: 0, or -1 with an error set. */
	int (*attach_shared)(PyObject *t, PyObject *fire);
} cd_gradhook_api;

#ifdef __cplusplus
/* The interpreter's lock, held for a scope (the module's C++ sources). */
struct cd_gil {
	PyGILState_STATE s = PyGILState_Ensure();
	cd_gil() = default;
	cd_gil(const cd_gil &) = delete;
	cd_gil &operator=(const cd_gil &) = delete;
	~cd_gil() { PyGILState_Release(s); }
};
#endif

#endif
