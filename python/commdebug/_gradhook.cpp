/*
 * commdebug._gradhook: light mode's bw_pre hook as a C++ hook of torch's
 * autograd, put on the node that makes a module's output (its grad_fn).
 *
 * Light mode marks where each module call's backward starts with a gradient
 * hook on the call's output (_lightbw.py).  Put through torch's Python API
 * (the tensor's _backward_hooks dict) a hook costs about 2 µs: when it
 * fires, torch takes the interpreter's lock, wraps the gradient in a new
 * Python tensor, builds a tuple and walks the dict.  This module's hook
 * takes the lock and calls the hook's fire (_speedups.Fire, or _lightbw's
 * Python twin) with None, and that is all: about a third of the cost, and
 * far less of the CPU's caches in a step.
 *
 * Where it runs.  torch runs a node's tensor pre-hooks in the order they
 * were added, all when the node runs, before it.  A tensor's Python hook
 * dict is one of them, added when the dict is made.  So the hook runs when
 * a Python hook on the same tensor would, and an in-place change of the
 * tensor after the module returned leaves both on the old node (torch 2.x
 * moves neither).  Order among hooks on one tensor: _lightbw.py's rules;
 * demote() moves this one after a hook dict made later.  A hook several
 * output tensors share (a module returning a tuple) goes on each tensor's
 * node with attach_shared(), before the hooks of ours already there for
 * that tensor (modules inside that returned it), as a hook dict made then
 * would be: the tensor then has several, the first running first.
 *
 * The module holds light mode's C++ collective kernels too
 * (_collkernel.cpp, whose functions its init adds).
 *
 * Built against the torch it runs with (tests/torch2/env.sh ext, setup.py
 * where torch is there at build time); _native.py loads it only when the
 * torch version it was built for is the one imported.  Not for compiled
 * autograd (torch._dynamo's): a C++ hook has no compiled form there, so
 * the Recorder does not use this module under it.
 */
#include "_gradhook.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>

#include <exception>
#include <memory>

#ifndef CD_TORCH_VERSION
#error "build with -DCD_TORCH_VERSION=\"<torch.__version__ of the torch headers>\""
#endif

namespace {

using torch::autograd::FunctionPreHook;
using torch::autograd::Node;
using torch::autograd::variable_list;

struct Hook final : FunctionPreHook {
	PyObject *fire;         /* a strong reference */
	uint32_t nr;            /* the output of the node it stands for */

	Hook(PyObject *f, uint32_t output_nr) : fire(Py_NewRef(f)), nr(output_nr) {}
	Hook(const Hook &) = delete;
	Hook &operator=(const Hook &) = delete;

	~Hook() override
	{
		/* (the graph may be freed on any thread, or at the end) */
		if (Py_IsInitialized()) {
			cd_gil g;
			Py_DECREF(fire);
		}
	}

	variable_list operator()(const variable_list &grads) override
	{
		cd_gil g;
		PyObject *r = PyObject_CallOneArg(fire, Py_None);
		if (r) {
			Py_DECREF(r);
			return grads;
		}
		/* (the engine hands it to backward()'s caller, as for a Python hook) */
		python_error e;
		e.persist();
		throw e;
	}
};

/* The grad_fn of tensor t (checked) and t's output of it (*nr), or NULL:
 * an error set, or (no_fn_ok) none without one. */
Node *node_of(PyObject *t, uint32_t *nr, bool no_fn_ok = false)
{
	if (!THPVariable_Check(t)) {
		PyErr_SetString(PyExc_TypeError, "commdebug._gradhook: not a tensor");
		return nullptr;
	}
	const at::Tensor &v = THPVariable_Unpack(t);
	Node *fn = v.grad_fn().get();
	if (!fn && !no_fn_ok)
		PyErr_SetString(PyExc_ValueError, "commdebug._gradhook: a tensor without a grad_fn");
	*nr = v.output_nr();
	return fn;
}

/* Whether hook h is one of this module's for output nr. */
bool ours(const std::unique_ptr<FunctionPreHook> &h, uint32_t nr)
{
	auto *g = dynamic_cast<Hook *>(h.get());
	return g && g->nr == nr;
}

/* Where t's (first) hook is among its node's tensor pre-hooks (-1: none).
 * A tensor has one hook of ours, or, after attach_shared, a shared one
 * and the ones it was put before: the first runs first. */
Py_ssize_t find(Node *fn, uint32_t nr)
{
	auto &hooks = fn->tensor_pre_hooks();
	for (size_t i = 0; i < hooks.size(); i++)
		if (ours(hooks[i], nr))
			return (Py_ssize_t)i;
	return -1;
}

/* Our hooks for output nr from index i on, but skip, moved after every
 * other hook, in their order. */
template <typename V> void to_end(V &hooks, size_t i, uint32_t nr, const FunctionPreHook *skip)
{
	V moved;
	while (i < hooks.size()) {
		if (hooks[i].get() != skip && ours(hooks[i], nr)) {
			moved.push_back(std::move(hooks[i]));
			hooks.erase(hooks.begin() + (Py_ssize_t)i);
		} else {
			i++;
		}
	}
	for (auto &h : moved)
		hooks.push_back(std::move(h));
}

/* A C++ exception out of torch as a Python one (NULL or -1 returned). */
void set_error(const std::exception &e)
{
	PyErr_Format(PyExc_RuntimeError, "commdebug._gradhook: %s", e.what());
}

PyObject *attach(PyObject *t, PyObject *fire)
{
	try {
		uint32_t nr;
		Node *fn = node_of(t, &nr);
		if (!fn)
			return nullptr;
		Py_ssize_t i = find(fn, nr);
		if (i >= 0)
			return Py_NewRef(static_cast<Hook *>(fn->tensor_pre_hooks()[i].get())->fire);
		fn->add_tensor_pre_hook(std::make_unique<Hook>(fire, nr));
		return Py_NewRef(Py_None);
	} catch (const std::exception &e) {
		set_error(e);
		return nullptr;
	}
}

/* f(hooks, i) on t's hook, the i-th of its node's tensor pre-hooks: 1
 * done, 0 (t has none, or no grad_fn), -1 with an error set. */
template <typename F> int with_hook(PyObject *t, F f)
{
	try {
		uint32_t nr;
		Node *fn = node_of(t, &nr, true);
		if (!fn)
			return PyErr_Occurred() ? -1 : 0;
		Py_ssize_t i = find(fn, nr);
		if (i < 0)
			return 0;
		f(fn->tensor_pre_hooks(), (size_t)i);
		return 1;
	} catch (const std::exception &e) {
		set_error(e);
		return -1;
	}
}

int replace(PyObject *t, PyObject *fire)
{
	return with_hook(t, [fire](auto &hooks, size_t i) {
		auto *h = static_cast<Hook *>(hooks[i].get());
		Py_SETREF(h->fire, Py_NewRef(fire));
	});
}

int demote(PyObject *t)
{
	return with_hook(t, [](auto &hooks, size_t i) {
		to_end(hooks, i, static_cast<Hook *>(hooks[i].get())->nr, nullptr);
	});
}

int attach_shared(PyObject *t, PyObject *fire)
{
	try {
		uint32_t nr;
		Node *fn = node_of(t, &nr);
		if (!fn)
			return -1;
		auto h = std::make_unique<Hook>(fire, nr);
		const FunctionPreHook *added = h.get();
		fn->add_tensor_pre_hook(std::move(h));
		to_end(fn->tensor_pre_hooks(), 0, nr, added);
		return 0;
	} catch (const std::exception &e) {
		set_error(e);
		return -1;
	}
}

const cd_gradhook_api api = {attach, replace, demote, attach_shared};

bool two_args(Py_ssize_t n, const char *name)
{
	if (n == 2)
		return true;
	PyErr_Format(PyExc_TypeError, "%s(t, fire) takes 2 arguments", name);
	return false;
}

PyObject *py_attach(PyObject *, PyObject *const *a, Py_ssize_t n)
{
	return two_args(n, "attach") ? attach(a[0], a[1]) : nullptr;
}

PyObject *py_replace(PyObject *, PyObject *const *a, Py_ssize_t n)
{
	int r = two_args(n, "replace") ? replace(a[0], a[1]) : -1;
	return r < 0 ? nullptr : PyBool_FromLong(r);
}

PyObject *py_attach_shared(PyObject *, PyObject *const *a, Py_ssize_t n)
{
	int r = two_args(n, "attach_shared") ? attach_shared(a[0], a[1]) : -1;
	return r < 0 ? nullptr : Py_NewRef(Py_None);
}

PyObject *py_demote(PyObject *, PyObject *t)
{
	int r = demote(t);
	return r < 0 ? nullptr : PyBool_FromLong(r);
}

PyObject *py_count(PyObject *, PyObject *t)
{
	uint32_t nr;
	Node *fn = node_of(t, &nr);
	if (!fn)
		return nullptr;
	return PyLong_FromSize_t(fn->tensor_pre_hooks().size());
}

PyMethodDef methods[] = {
	{"attach", (PyCFunction)(void (*)(void))py_attach, METH_FASTCALL,
	 "attach(t, fire): fire put on t's grad_fn for t; None, or the fire there already"},
	{"replace", (PyCFunction)(void (*)(void))py_replace, METH_FASTCALL,
	 "replace(t, fire): the fire of t's hook replaced; False: t has none"},
	{"attach_shared", (PyCFunction)(void (*)(void))py_attach_shared, METH_FASTCALL,
	 "attach_shared(t, fire): fire put on t's grad_fn for t, t's hooks there moved after it"},
	{"demote", (PyCFunction)py_demote, METH_O,
	 "demote(t): t's hooks moved after its grad_fn's other tensor hooks; False: none"},
	{"count", (PyCFunction)py_count, METH_O,
	 "count(t): how many tensor pre-hooks t's grad_fn has (tests)"},
	{nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "commdebug._gradhook",
	"Light mode's bw_pre hook as a C++ autograd hook (see the source's head comment)", -1,
	methods, nullptr, nullptr, nullptr, nullptr,
};

} // namespace

int cd_collkernel_add(PyObject *m);      /* _collkernel.cpp */

PyMODINIT_FUNC PyInit__gradhook(void)
{
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return nullptr;
	PyObject *cap = PyCapsule_New((void *)&api, CD_GRADHOOK_CAPSULE, nullptr);
	int bad = !cap || PyModule_AddObjectRef(m, "api", cap) < 0 ||
		  PyModule_AddStringConstant(m, "TORCH_VERSION", CD_TORCH_VERSION) < 0 ||
		  cd_collkernel_add(m) < 0;
	Py_XDECREF(cap);
	if (bad)
		Py_CLEAR(m);
	return m;
}
