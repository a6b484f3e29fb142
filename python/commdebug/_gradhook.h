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

#define CD_GRADHOOK_CAPSULE "commdebug._gradhook.api"

typedef struct {
	/* fire (a bw_pre hook, called with None) put on t's grad_fn for t:
	 * Py_None when put; the fire of the one there already (a module
	 * inside returned t; nothing done); NULL with an error set. */
	PyObject *(*attach)(PyObject *t, PyObject *fire);
	/* The fire of t's hook replaced by fire: 1, 0 (no hook of t's, or
	 * no grad_fn), -1. */
	int (*replace)(PyObject *t, PyObject *fire);
	/* t's hook moved after every other hook of its grad_fn, so that it
	 * runs after the hook dict of t made since: 1, 0 (none), -1. */
	int (*demote)(PyObject *t);
} cd_gradhook_api;

#endif
