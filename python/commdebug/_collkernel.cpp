/*
 * commdebug._gradhook's collective kernels: light mode's kernels at the
 * dispatcher's BackendSelect key (see _collkernels.py) as C++ boxed kernels.
 *
 * The Python kernels cost every collective a trip through Python's boxing:
 * torch makes a Python object of each argument (a ScriptObject for the
 * group, a list of Python tensors), calls the kernel, which unboxes the
 * group again (ProcessGroup.unbox), reads its tensors' sizes through
 * Python, and hands the call on with OpOverload.redispatch, which parses
 * every argument back.  In a training step, where those paths are out of
 * the CPU's caches, that was most of a collective's 200 us.
 *
 * This kernel reads what the events need from the dispatcher's stack
 * itself: the group (a cache of its name, keyed by the group object, held
 * weakly so that its address is not reused while cached), the payload's
 * bytes, dtype and shape, whether a backward pass runs.  Then it calls the
 * routed recorder's _light_coll_native (the events, the frame before the
 * collective) and hands the call on.  Outside a light region it only hands
 * it on, with no Python at all.  Anything it does not read itself (a tensor
 * with the Python key, a group argument that is not a group object) goes to
 * _light_coll_args with the arguments as Python objects, as the Python
 * kernels had them; meta tensors, on which CommDebugMode never sees a
 * collective, are handed on unrecorded, as there.
 */
#include "_gradhook.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch::jit {
/* torch/csrc/jit/python/pybind_utils.h's, whose header needs fmt's, which
 * the torch packages do not bring */
TORCH_PYTHON_API py::object toPyObject(c10::IValue ivalue);
} // namespace torch::jit

namespace {

enum PgKind { PG_NONE, PG_OBJ, PG_NAME };

/* What a kernel needs of its op: its index in _collkernels.KINFO, where its
 * group and payload are among its arguments (-1: nowhere). */
struct OpInfo {
	long index;
	int pg_idx, pg_kind, in_idx, out_idx;
};

/* (never destroyed: a kernel may run, and the dispatcher go, at exit) */
auto &g_ops = *new std::unordered_map<c10::OperatorName, OpInfo>;
auto &g_libs = *new std::vector<std::unique_ptr<torch::Library>>;

/* The routed recorder (the GIL guards the three; g_routed is read
 * without it first). */
std::atomic<bool> g_routed{false};
PyObject *g_native, *g_slow, *g_group;

/* A collective of this thread is being handed on: the ones it runs
 * inside (a functional all_reduce's c10d op) are not recorded. */
thread_local bool t_busy;

/* Group objects seen (weakly held: the address stays theirs) and their
 * names (strong references); the GIL guards it.  A few groups. */
struct Group {
	c10::weak_intrusive_ptr<torch::CustomClassHolder> ref;
	PyObject *name;
};
auto &g_groups = *new std::vector<Group>;

/* str(dtype) of each ScalarType, made once (GIL). */
PyObject *g_dtype_str[static_cast<int>(c10::ScalarType::NumOptions)];

struct Busy {
	Busy() { t_busy = true; }
	~Busy() { t_busy = false; }
	Busy(const Busy &) = delete;
	Busy &operator=(const Busy &) = delete;
};

/* Calls the NCCL tag's end (if any) when the call handed on is done. */
struct End {
	PyObject *end = nullptr;
	End() = default;
	End(const End &) = delete;
	End &operator=(const End &) = delete;
	~End()
	{
		if (!end)
			return;
		cd_gil g;
		PyObject *r = PyObject_CallNoArgs(end);
		if (!r)
			PyErr_WriteUnraisable(end);
		Py_XDECREF(r);
		Py_DECREF(end);
	}
};

[[noreturn]] void throw_python_error()
{
	python_error e;
	e.persist();
	throw e;
}

/* The payload as _collectives.payload reads it: the tensors of the input
 * argument (a tensor, or nested lists), else of the output one; their
 * bytes, and the first one's dtype and shape. */
struct Payload {
	int64_t nbytes = 0;
	const at::Tensor *first = nullptr;
	bool odd = false;       /* something only the Python reads */
};

void add_tensor(const at::Tensor &t, Payload &p)
{
	if (!t.defined())
		return;
	if (t.key_set().has(c10::DispatchKey::Python) ||
	    t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
		p.odd = true;
		return;
	}
	p.nbytes += t.numel() * static_cast<int64_t>(t.element_size());
	if (!p.first)
		p.first = &t;
}

void tensors_of(const c10::IValue &v, Payload &p)
{
	if (v.isTensor()) {
		add_tensor(v.toTensor(), p);
	} else if (v.isList()) {      /* (a tensor list too) */
		for (const c10::IValue &x : v.toListRef())
			tensors_of(x, p);
	} else if (v.isTuple()) {
		for (const c10::IValue &x : v.toTupleRef().elements())
			tensors_of(x, p);
	}
}

/* What _collkernels._fake_payload decides from the first tensor argument
 * (a tensor, or a list whose first item is one): 1 meta (not recorded),
 * -1 the Python must look (a tensor with the Python key), 0 neither. */
int fake_payload(at::ArrayRef<c10::IValue> args)
{
	for (const c10::IValue &a : args) {
		const at::Tensor *t = nullptr;
		c10::IValue first;
		if (a.isTensor()) {
			t = &a.toTensor();
		} else if (a.isTensorList() || a.isList()) {
			auto l = a.toListRef();
			if (l.empty() || !l[0].isTensor())
				continue;
			first = l[0];
			t = &first.toTensor();
		} else {
			continue;
		}
		if (!t->defined())
			return 0;
		if (t->is_meta())
			return 1;
		return t->key_set().has(c10::DispatchKey::Python) ? -1 : 0;
	}
	return 0;
}

/* The group object's address, or nullptr (not a custom class object). */
torch::CustomClassHolder *group_of(const c10::IValue &v)
{
	if (!v.isObject())
		return nullptr;
	const auto &obj = v.toObjectRef();
	if (obj.slots().empty() || !obj.getSlot(0).isCapsule())
		return nullptr;
	return obj.getSlot(0).toCapsule().get();
}

/* The group's name (a new reference; None when unknown), from the cache or
 * from the recorder's _light_group(ScriptObject); GIL held. */
PyObject *group_name(const c10::IValue &v, torch::CustomClassHolder *pg)
{
	for (size_t i = 0; i < g_groups.size();) {
		Group &g = g_groups[i];
		if (g.ref.expired()) {
			Py_DECREF(g.name);
			g_groups.erase(g_groups.begin() + static_cast<long>(i));
			continue;
		}
		if (g.ref._unsafe_get_target() == pg)
			return Py_NewRef(g.name);
		i++;
	}
	PyObject *name;
	{
		py::object obj = torch::jit::toPyObject(v);
		name = PyObject_CallOneArg(g_group, obj.ptr());
	}
	if (!name)
		throw_python_error();
	if (PyUnicode_Check(name)) {
		auto strong = v.toObjectRef().getSlot(0).toCapsule();
		g_groups.push_back({c10::weak_intrusive_ptr<torch::CustomClassHolder>(strong),
				    Py_NewRef(name)});
	}
	return name;
}

/* ',"bytes":N,"dtype":"torch.x","shape":[..]' (or ',"bytes":0'); GIL held. */
PyObject *payload_text(const Payload &p)
{
	if (!p.first)
		return PyUnicode_FromString(",\"bytes\":0");
	const at::Tensor &t = *p.first;
	int st = static_cast<int>(t.scalar_type());
	PyObject *&dt = g_dtype_str[st];
	if (!dt) {
		dt = PyObject_Str(reinterpret_cast<PyObject *>(torch::getTHPDtype(t.scalar_type())));
		if (!dt)
			throw_python_error();
	}
	std::string s = ",\"bytes\":" + std::to_string(p.nbytes) + ",\"dtype\":\"";
	Py_ssize_t n;
	const char *d = PyUnicode_AsUTF8AndSize(dt, &n);
	if (!d)
		throw_python_error();
	s.append(d, static_cast<size_t>(n));
	s += "\",\"shape\":[";
	bool comma = false;
	for (int64_t x : t.sizes()) {
		if (comma)
			s += ',';
		s += std::to_string(x);
		comma = true;
	}
	s += ']';
	return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

/* The events of a collective read off the stack (GIL held): the NCCL
 * tag's end, or nullptr; throws on a Python error. */
PyObject *events_native(const OpInfo &info, at::ArrayRef<c10::IValue> args, const Payload &p,
			torch::CustomClassHolder *pg, bool bw)
{
	/* (pg: the group object at pg_idx, checked by the caller) */
	const size_t at = static_cast<size_t>(info.pg_idx);
	py::object text = py::reinterpret_steal<py::object>(payload_text(p));
	if (!text)
		throw_python_error();
	py::object name;
	if (info.pg_kind == PG_OBJ)
		name = py::reinterpret_steal<py::object>(group_name(args[at], pg));
	else if (info.pg_kind == PG_NAME && at < args.size() && args[at].isString())
		name = py::reinterpret_steal<py::object>(
			PyUnicode_FromString(args[at].toStringRef().c_str()));
	else
		name = py::none();
	py::object index = py::reinterpret_steal<py::object>(PyLong_FromLong(info.index));
	py::object nbytes = py::reinterpret_steal<py::object>(
		PyLong_FromLongLong(p.first ? p.nbytes : -1));
	if (!name || !index || !nbytes)
		throw_python_error();
	bool fl = p.first && (c10::isFloatingType(p.first->scalar_type()) ||
			      c10::isComplexType(p.first->scalar_type()));
	PyObject *a[6] = {index.ptr(), name.ptr(), text.ptr(), fl ? Py_True : Py_False,
			  bw ? Py_True : Py_False, nbytes.ptr()};
	PyObject *r = PyObject_Vectorcall(g_native, a, 6, nullptr);
	if (!r)
		throw_python_error();
	return r;
}

/* The events from the arguments as Python objects (GIL held). */
PyObject *events_slow(const OpInfo &info, at::ArrayRef<c10::IValue> args, bool bw)
{
	PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
	if (!tuple)
		throw_python_error();
	try {
		for (size_t i = 0; i < args.size(); i++)
			PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i),
					 torch::jit::toPyObject(args[i]).release().ptr());
	} catch (...) {
		Py_DECREF(tuple);
		throw;
	}
	PyObject *idx = PyLong_FromLong(info.index);
	PyObject *r = idx ? PyObject_CallFunctionObjArgs(g_slow, idx, tuple,
							  bw ? Py_True : Py_False, nullptr)
			  : nullptr;
	Py_XDECREF(idx);
	Py_DECREF(tuple);
	if (!r)
		throw_python_error();
	return r;
}

void kernel(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *stack)
{
	const auto after = ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
						      c10::DispatchKey::BackendSelect);
	if (!g_routed.load(std::memory_order_acquire) || t_busy) {
		op.redispatchBoxed(after, stack);
		return;
	}
	auto it = g_ops.find(op.operator_name());
	const size_t n = op.schema().arguments().size();
	at::ArrayRef<c10::IValue> args = torch::jit::last(stack, n);
	int fake = it == g_ops.end() ? 1 : fake_payload(args);
	if (fake == 1) {
		op.redispatchBoxed(after, stack);
		return;
	}
	const OpInfo &info = it->second;
	Payload p;
	if (info.in_idx >= 0 && static_cast<size_t>(info.in_idx) < n)
		tensors_of(args[static_cast<size_t>(info.in_idx)], p);
	if (!p.first && !p.odd && info.out_idx >= 0 && static_cast<size_t>(info.out_idx) < n)
		tensors_of(args[static_cast<size_t>(info.out_idx)], p);
	torch::CustomClassHolder *pg = nullptr;
	bool slow = fake == -1 || p.odd;
	if (info.pg_kind == PG_OBJ) {
		pg = static_cast<size_t>(info.pg_idx) < n ? group_of(args[static_cast<size_t>(info.pg_idx)])
							   : nullptr;
		slow = slow || !pg;
	}
	bool bw = torch::autograd::get_current_graph_task_id() != -1;
	Busy busy;
	End end;
	{
		cd_gil g;
		if (g_native) {       /* (still routed) */
			PyObject *r = slow ? events_slow(info, args, bw)
					   : events_native(info, args, p, pg, bw);
			if (r == Py_None)
				Py_DECREF(r);
			else
				end.end = r;
		}
	}
	op.redispatchBoxed(after, stack);
}

/* install([(namespace, name with overload or "", pg_idx, pg_kind, in_idx,
 * out_idx)], ...): the kernels registered (index: the item's place). */
PyObject *py_install(PyObject *, PyObject *ops)
{
	if (!PyList_Check(ops)) {
		PyErr_SetString(PyExc_TypeError, "kernels_install(list)");
		return nullptr;
	}
	if (!g_libs.empty()) {
		PyErr_SetString(PyExc_RuntimeError, "kernels_install: installed already");
		return nullptr;
	}
	try {
		std::unordered_map<std::string, torch::Library *> libs;
		for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ops); i++) {
			const char *ns, *name, *overload;
			int pg_idx, pg_kind, in_idx, out_idx;
			if (!PyArg_ParseTuple(PyList_GET_ITEM(ops, i), "sssiiii", &ns, &name, &overload,
					      &pg_idx, &pg_kind, &in_idx, &out_idx))
				throw_python_error();
			torch::Library *&lib = libs[ns];
			if (!lib) {
				g_libs.push_back(std::make_unique<torch::Library>(
					torch::Library::IMPL, ns, c10::DispatchKey::BackendSelect,
					__FILE__, __LINE__));
				lib = g_libs.back().get();
			}
			std::string full = std::string(name) + (*overload ? std::string(".") + overload : "");
			g_ops[c10::OperatorName(std::string(ns) + "::" + name, overload)] =
				OpInfo{static_cast<long>(i), pg_idx, pg_kind, in_idx, out_idx};
			lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&kernel>());
		}
	} catch (const python_error &) {
		g_libs.clear();
		return nullptr;
	} catch (const std::exception &e) {
		g_libs.clear();
		PyErr_Format(PyExc_RuntimeError, "commdebug._gradhook: %s", e.what());
		return nullptr;
	}
	return Py_NewRef(Py_None);
}

/* route(native, slow, group) or route(None, None, None). */
PyObject *py_route(PyObject *, PyObject *const *a, Py_ssize_t n)
{
	if (n != 3) {
		PyErr_SetString(PyExc_TypeError, "kernels_route(native, slow, group)");
		return nullptr;
	}
	bool on = a[0] != Py_None;
	g_routed.store(false, std::memory_order_release);
	Py_CLEAR(g_native);
	Py_CLEAR(g_slow);
	Py_CLEAR(g_group);
	if (on) {
		g_native = Py_NewRef(a[0]);
		g_slow = Py_NewRef(a[1]);
		g_group = Py_NewRef(a[2]);
		g_routed.store(true, std::memory_order_release);
	}
	return Py_NewRef(Py_None);
}

PyObject *py_uninstall(PyObject *, PyObject *)
{
	/* (g_ops stays, read by kernels running on other threads: a kernel
	 * install puts in again finds the same entries) */
	g_libs.clear();
	for (Group &g : g_groups)
		Py_DECREF(g.name);
	g_groups.clear();
	return Py_NewRef(Py_None);
}

PyMethodDef methods[] = {
	{"kernels_install", (PyCFunction)py_install, METH_O,
	 "kernels_install(ops): the C++ collective kernels registered at BackendSelect"},
	{"kernels_route", (PyCFunction)(void (*)(void))py_route, METH_FASTCALL,
	 "kernels_route(native, slow, group): the recorder the kernels report to (None: none)"},
	{"kernels_uninstall", (PyCFunction)py_uninstall, METH_NOARGS,
	 "kernels_uninstall(): the kernels taken out"},
	{nullptr, nullptr, 0, nullptr},
};

} // namespace

int cd_collkernel_add(PyObject *m)
{
	return PyModule_AddFunctions(m, methods);
}
