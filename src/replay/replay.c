/* The replay state machine.  Each handler below mirrors one hook of
 * PyTorch's CommDebugMode / _CommModeModuleTracker / ModTracker:
 *
 *   fw_pre    global forward pre-hook  (_CommModeModuleTracker._fw_pre_hook)
 *   fw_post   global forward hook      (ModTracker._fw_post_hook: pop parents)
 *   fw_done   the module's own forward hook (_fw_set_module_hook)
 *   bw_pre    global full backward pre-hook (_bw_hook)
 *   bw_enter  multi-grad hook on outputs (ModTracker append, in backward)
 *   bw_exit   multi-grad hook on inputs  (ModTracker pop, in backward)
 *   bw_end    engine callback at the end of backward (parents = {Global})
 *   op        CommDebugMode.__torch_dispatch__
 */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GLOBAL 0u

/* ---- the collective registry ---- */

static const char *const funcol_ops[] = {
	"all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_reduce",
	"all_reduce_coalesced", "all_to_all_single", "broadcast", "reduce_scatter_tensor",
	"reduce_scatter_tensor_coalesced",
};

static const char *const c10d_ops[] = {
	"_allgather_base_", "_reduce_scatter_base_", "allgather_", "allgather_coalesced_",
	"allgather_into_tensor_coalesced_", "allreduce_", "allreduce_coalesced_", "alltoall_",
	"alltoall_base_", "broadcast_", "gather_", "scatter_", "reduce_", "reduce_scatter_",
	"reduce_scatter_tensor_coalesced_",
};

/* The in-place and out= forms torch.compile's inductor lowers functional
 * collectives to (torch/_inductor/comm_lowering.py): all_reduce runs as
 * all_reduce_, broadcast as broadcast_, and so on.  CommDebugMode never sees
 * them (under it a compiled function runs eagerly and issues the functional
 * op itself), so they are not in its registry; in a light trace, where a
 * compiled graph runs compiled, each counts as the functional op it stands
 * for: the count CommDebugMode gives for the same program. */
static const char *const lowered_ops[][2] = {
	{"all_reduce_", "all_reduce"},
	{"all_reduce_coalesced_", "all_reduce_coalesced"},
	{"broadcast_", "broadcast"},
	{"all_gather_into_tensor_out", "all_gather_into_tensor"},
	{"reduce_scatter_tensor_out", "reduce_scatter_tensor"},
};

static const char *lowered_as(const char *p, size_t n)
{
	for (size_t i = 0; i < sizeof lowered_ops / sizeof lowered_ops[0]; i++)
		if (strlen(lowered_ops[i][0]) == n && memcmp(lowered_ops[i][0], p, n) == 0)
			return lowered_ops[i][1];
	return NULL;
}

static const char *const trivial_ops[] = {
	"aten.detach.default", "aten.t.default", "aten.view.default", "aten._to_copy.default",
	"aten.as_strided.default", "aten.transpose.int",
};

static bool in_list(const char *p, size_t n, const char *const *list, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (strlen(list[i]) == n && memcmp(list[i], p, n) == 0)
			return true;
	return false;
}

static bool has_prefix(const char *p, size_t n, const char *pre)
{
	size_t k = strlen(pre);
	return n >= k && memcmp(p, pre, k) == 0;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The name a collective op is counted under, or NULL.  buf receives the
 * mapped name when it differs from the packet.  light: the trace was
 * recorded light (inductor's lowered forms count, lowered_ops). */
static const char *collective_name(const char *name, uint32_t n, bool light, uint32_t *out_n,
				   char *buf, size_t bufsize)
{
	/* packet = overload name without its last component */
	uint32_t dots = 0, last = 0;
	for (uint32_t i = 0; i < n; i++)
		if (name[i] == '.') {
			dots++;
			last = i;
		}
	uint32_t pn = dots >= 2 ? last : n;
	const char *tail;

	if (has_prefix(name, pn, "_c10d_functional.")) {
		tail = name + 17;
		if (in_list(tail, pn - 17, funcol_ops, COUNT(funcol_ops)))
			goto legacy;
		const char *as = light ? lowered_as(tail, pn - 17) : NULL;
		if (!as)
			return NULL;
		int k = snprintf(buf, bufsize, "c10d_functional.%s", as);
		*out_n = (uint32_t)k;
		return buf;
	}
	if (has_prefix(name, pn, "_c10d_functional_autograd.")) {
		tail = name + 26;
		if (pn - 26 != 17 || memcmp(tail, "all_to_all_single", 17) != 0)
			return NULL;
		goto legacy;
	}
	if (has_prefix(name, pn, "c10d_functional.")) {
		if (!in_list(name + 16, pn - 16, funcol_ops, COUNT(funcol_ops)))
			return NULL;
		*out_n = pn;
		return name;
	}
	if (has_prefix(name, pn, "c10d.")) {
		if (!in_list(name + 5, pn - 5, c10d_ops, COUNT(c10d_ops)))
			return NULL;
		*out_n = pn;
		return name;
	}
	if (pn == sizeof "_dtensor.shard_dim_alltoall" - 1 &&
	    memcmp(name, "_dtensor.shard_dim_alltoall", pn) == 0) {
		*out_n = pn;
		return name;
	}
	return NULL;
legacy:
	{
		size_t tn = (size_t)(name + pn - tail);
		int k = snprintf(buf, bufsize, "c10d_functional.%.*s", (int)tn, tail);
		*out_n = (uint32_t)k;
		return buf;
	}
}

/* ---- helpers ---- */

/* The caches in front of the interning of op names and retained ops: most
 * lines name one of a few dozen ops, and most retained ops repeat. */
#define NAME_SLOTS 256
#define REC_SLOTS 1024
struct cd_replay_cache {
	struct name_slot {
		uint64_t head, tail;   /* the name's first and last 8 bytes (fewer: all) */
		uint32_t n, id;        /* id CD_NOID: empty */
	} names[NAME_SLOTS];
	struct rec_slot {
		struct cd_oprec rec;
		uint32_t id;           /* CD_NOID: empty */
	} recs[REC_SLOTS];
};

static struct cd_replay_cache *cache_of(struct cd_replay *r)
{
	if (!r->cache && (r->cache = malloc(sizeof *r->cache))) {
		for (int i = 0; i < NAME_SLOTS; i++)
			r->cache->names[i].id = CD_NOID;
		for (int i = 0; i < REC_SLOTS; i++)
			r->cache->recs[i].id = CD_NOID;
	}
	return r->cache;
}

/* Are the bytes of s between its first and last 8 those of a (whose first
 * and last 8 bytes are known to be equal)? */
static inline bool same_middle(const char *a, struct cd_str s)
{
	for (uint32_t i = 8; i + 8 < s.n; i += 8) {
		uint64_t x, y;
		memcpy(&x, a + i, 8);
		memcpy(&y, s.p + i, 8);
		if (x != y)
			return false;
	}
	return true;
}

/* The first and last 8 bytes of s (for fewer, all of them, zero-filled). */
static void name_words(struct cd_str s, uint64_t *head, uint64_t *tail)
{
	*head = *tail = 0;
	if (s.n >= 8) {
		memcpy(head, s.p, 8);
		memcpy(tail, s.p + s.n - 8, 8);
	} else {
		memcpy(head, s.p, s.n);
	}
}

static enum cd_status nomem(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

static void warnf(struct cd_replay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warnf(struct cd_replay *r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!r->opts.warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->opts.warn(r->opts.ud, msg);
}

static const char *mname(const struct cd_replay *r, uint32_t id)
{
	return cd_intern_str(&r->mods, id);
}

/* Module id for a name; grows the per-module arrays. */
static uint32_t mod_id(struct cd_replay *r, struct cd_str s)
{
	uint32_t id = cd_intern(&r->mods, s.p, s.n);
	if (id == CD_NOID)
		return CD_NOID;
	if (id >= r->pcnt.n) {
		uint32_t need = id + 1;
		if (!cd_vec_reserve(&r->pcnt, need) || !cd_vec_reserve(&r->ppos, need) ||
		    !cd_vec_reserve(&r->pfw, need) || !cd_vec_reserve(&r->rm, need))
			return CD_NOID;
		for (uint32_t i = r->pcnt.n; i < need; i++) {
			r->pcnt.v[i] = 0;
			r->ppos.v[i] = 0;
			r->pfw.v[i] = 0;
			memset(&r->rm.v[i], 0, sizeof r->rm.v[i]);
			r->rm.v[i].more = CD_NOID;
		}
		r->pcnt.n = r->ppos.n = r->pfw.n = r->rm.n = need;
	}
	return id;
}

/* The module's state in this region, reset on first touch. */
static struct cd_rmod *rmod(struct cd_replay *r, uint32_t id)
{
	struct cd_rmod *m = &r->rm.v[id];
	if (m->gen != r->gen) {
		m->gen = r->gen;
		m->in_helper = m->hooked = m->has_parents = m->has_counts = m->warned = false;
		m->type = CD_NOID;
		m->depth = 0;
		m->parents.n = 0;
		if (m->more != CD_NOID) {
			struct cd_rmod_more *x = &r->more.v[m->more];
			x->children.n = x->params.n = x->hparams.n = 0;
		}
		m->fw.n = m->bw.n = m->ops.n = 0;
		r->mods_in_region++;
	}
	return m;
}

/* The module's extra lists, made on first use (NULL: out of memory).
 * Valid until the next call for another module. */
static struct cd_rmod_more *more_of(struct cd_replay *r, struct cd_rmod *m)
{
	if (m->more == CD_NOID) {
		struct cd_rmod_more z;
		memset(&z, 0, sizeof z);
		if (!cd_vec_push(&r->more, z))
			return NULL;
		m->more = r->more.n - 1;
	}
	return &r->more.v[m->more];
}

const struct cd_rmod_more *cd_replay_more(const struct cd_replay *r, const struct cd_rmod *m)
{
	static const struct cd_rmod_more none;
	return m->more == CD_NOID ? &none : &r->more.v[m->more];
}

const struct cd_rmod *cd_replay_mod(const struct cd_replay *r, uint32_t id)
{
	if (id >= r->rm.n || r->rm.v[id].gen != r->gen)
		return NULL;
	return &r->rm.v[id];
}

static uint32_t str_id(struct cd_replay *r, struct cd_str s)
{
	if (!s.p)
		return CD_NOID;
	return cd_intern(&r->strs, s.p, s.n);
}

/* ---- the parents set (ModTracker.parents with _active_module_cnt) ---- */

static bool parents_add(struct cd_replay *r, uint32_t id)
{
	if (r->pcnt.v[id]++ == 0) {
		r->ppos.v[id] = r->pmembers.n;
		if (!cd_vec_push(&r->pmembers, id))
			return false;
	}
	return true;
}

static bool parents_has(const struct cd_replay *r, uint32_t id)
{
	return r->pcnt.v[id] > 0;
}

static void parents_drop(struct cd_replay *r, uint32_t id)
{
	if (r->pcnt.v[id] == 0)
		return;
	if (r->pfw.v[id] > 0)
		r->pfw.v[id]--;  /* a forward's entry goes first: hooks pair up */
	if (--r->pcnt.v[id] > 0)
		return;
	uint32_t pos = r->ppos.v[id];
	uint32_t last = r->pmembers.v[--r->pmembers.n];
	r->pmembers.v[pos] = last;
	r->ppos.v[last] = pos;
}

static void parents_reset(struct cd_replay *r)
{
	for (uint32_t i = 0; i < r->pmembers.n; i++)
		r->pcnt.v[r->pmembers.v[i]] = r->pfw.v[r->pmembers.v[i]] = 0;
	r->pmembers.n = 0;
	parents_add(r, GLOBAL);
}

/* ---- counts ---- */

static bool count_add(cd_countv *v, uint32_t coll)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->v[i].coll == coll) {
			v->v[i].n++;
			return true;
		}
	struct cd_count c = {coll, 1};
	return cd_vec_push(v, c);
}

/* ---- regions ---- */

static enum cd_status region_end(struct cd_replay *r, bool cut, struct cd_err *err)
{
	enum cd_status st = CD_OK;

	r->region_cut = cut;
	if (r->ops_retained > r->max_ops_retained)
		r->max_ops_retained = r->ops_retained;
	uint64_t ob = cd_replay_op_bytes(r);
	if (ob > r->max_op_bytes)
		r->max_op_bytes = ob;
	if (r->reporting && r->opts.region_done) {
		if (r->opts.defer_done)
			r->done_pending = true;
		else
			st = r->opts.region_done(r->opts.ud, r, err);
	}
	r->in_region = false;
	r->reporting = false;
	return st;
}

/* The deferred region_done of the last region, if it is due. */
static enum cd_status done_now(struct cd_replay *r, bool more, struct cd_err *err)
{
	if (!r->done_pending)
		return CD_OK;
	r->done_pending = false;
	r->more_regions = more;
	enum cd_status st = r->opts.region_done(r->opts.ud, r, err);
	r->more_regions = false;
	return st;
}

enum cd_status cd_replay_flush(struct cd_replay *r, struct cd_err *err)
{
	return done_now(r, false, err);
}

static enum cd_status region_begin(struct cd_replay *r, const struct cd_event *e,
				   struct cd_err *err)
{
	enum cd_status st = done_now(r, true, err);
	if (st)
		return st;
	r->in_region = true;
	r->region = e->region;
	r->label = (e->have & CD_F_LABEL) ? str_id(r, e->label) : CD_NOID;
	r->reporting = !r->opts.select || r->opts.region == e->region;
	r->regions++;
	r->gen++;
	r->mods_in_region = 0;
	r->helper.n = r->parent_list.n = r->sharding.n = 0;
	r->comm.n = r->outside.n = r->outside_src.n = 0;
	r->ops_retained = 0;
	r->cur = GLOBAL;
	r->ac = false;
	struct cd_rmod *g = rmod(r, GLOBAL);
	g->in_helper = true;
	g->depth = 0;
	g->has_counts = true;
	g->has_parents = true; /* module_parents_dict["Global"] = set() */
	if (!cd_vec_push(&r->helper, GLOBAL) || !cd_vec_push(&r->parent_list, GLOBAL))
		return nomem(err);
	return CD_OK;
}

/* ---- hooks ---- */

static enum cd_status record_params(struct cd_replay *r, struct cd_rmod *m, uint32_t id,
				    const struct cd_event *e, struct cd_err *err)
{
	char buf[64];

	if (!e->nparams)
		return CD_OK;
	struct cd_rmod_more *x = more_of(r, m);
	if (!x)
		return nomem(err);
	for (uint32_t i = 0; i < e->nparams; i++) {
		const struct cd_param *p = &e->params[i];
		uint32_t name = str_id(r, p->name);
		uint32_t k;
		if (name == CD_NOID)
			return nomem(err);
		for (k = 0; k < x->params.n; k++)
			if (x->params.v[k].name == name)
				break;
		if (k == x->params.n) {
			struct cd_pinfo z = {.name = name, .dtype = CD_NOID, .shape = CD_NOID,
					     .placements = CD_NOID, .mesh = CD_NOID, .nbytes = -1};
			if (!cd_vec_push(&x->params, z))
				return nomem(err);
		}
		struct cd_pinfo *pi = &x->params.v[k];
		pi->dtype = str_id(r, p->dtype);
		pi->nbytes = p->nbytes;
		pi->requires_grad = p->requires_grad;
		if (p->has_shape) {
			/* "[16, 10]" */
			size_t need = 2 + (size_t)p->ndim * 22;
			char *s = need <= sizeof buf ? buf : NULL;
			if (!s) {
				if (r->scratch_cap < need) {
					char *ns = realloc(r->scratch, need);
					if (!ns)
						return nomem(err);
					r->scratch = ns;
					r->scratch_cap = need;
				}
				s = r->scratch;
			}
			size_t o = 0;
			s[o++] = '[';
			for (uint32_t d = 0; d < p->ndim; d++)
				o += (size_t)sprintf(s + o, d ? ", %lld" : "%lld", (long long)p->shape[d]);
			s[o++] = ']';
			pi->shape = cd_intern(&r->strs, s, (uint32_t)o);
		} else {
			pi->shape = CD_NOID;
		}
		pi->mesh = str_id(r, p->mesh);
		if (p->placements.p) {
			/* a DTensor parameter */
			pi->placements = str_id(r, p->placements);
			if (!pi->dtensor_ever) {
				pi->dtensor_ever = true;
				struct cd_shard_ref ref = {id, k};
				if (!cd_vec_push(&x->hparams, k) || !cd_vec_push(&r->sharding, ref))
					return nomem(err);
			}
		}
	}
	return CD_OK;
}

/* CommDebugMode's module type: str(type(mod)) with every '<' and '>' removed
 * (also those of "<locals>" in the qualified name of a class made in a
 * function).  The trace has the qualified name; the report adds "class '...'". */
static uint32_t type_id(struct cd_replay *r, struct cd_str type)
{
	if (!memchr(type.p, '<', type.n) && !memchr(type.p, '>', type.n))
		return str_id(r, type);
	if (r->scratch_cap < type.n + 1) {
		char *ns = realloc(r->scratch, type.n + 1);
		if (!ns)
			return CD_NOID;
		r->scratch = ns;
		r->scratch_cap = type.n + 1;
	}
	uint32_t n = 0;
	for (uint32_t i = 0; i < type.n; i++)
		if (type.p[i] != '<' && type.p[i] != '>')
			r->scratch[n++] = type.p[i];
	return cd_intern(&r->strs, r->scratch, n);
}

static uint32_t argset_id(struct cd_replay *r, const struct cd_event *e, struct cd_err *err,
			  enum cd_status *st);
static uint32_t op_id(struct cd_replay *r, struct cd_str name);

/* Append an op record to the current module's op list: distinct records
 * are interned once, and a repeat of the entry before is counted in a run. */
static enum cd_status retain(struct cd_replay *r, struct cd_oprec rec, struct cd_err *err)
{
	uint32_t id = r->last_rec_id;
	if (id == CD_NOID || memcmp(&rec, &r->last_rec, sizeof rec) != 0) {
		struct cd_replay_cache *c = cache_of(r);
		struct rec_slot *slot = NULL;
		if (c) {
			uint32_t h = (rec.op * 0x9E3779B1u ^ rec.argset * 0x85EBCA77u ^ rec.flags) *
				     0xC2B2AE3Du;
			slot = &c->recs[h >> 22];
			id = slot->id;
		}
		if (!slot || id == CD_NOID || memcmp(&slot->rec, &rec, sizeof rec) != 0) {
			uint32_t before = r->opkeys.count;
			id = cd_intern(&r->opkeys, (const char *)&rec, sizeof rec);
			if (id == CD_NOID || id >= CD_OPS_RUN)
				return nomem(err);
			if (id == before && !cd_vec_push(&r->oprecs, rec))
				return nomem(err);
			if (slot)
				*slot = (struct rec_slot){rec, id};
		}
		r->last_rec = rec;
		r->last_rec_id = id;
	}
	struct cd_rmod *m = rmod(r, r->cur);
	cd_opv *v = &m->ops;
	/* a repeat of the entry before: count it in the run entry after it */
	if (v->n >= 2 && (v->v[v->n - 1] & CD_OPS_RUN) && v->v[v->n - 2] == id &&
	    v->v[v->n - 1] != UINT32_MAX)
		v->v[v->n - 1]++;
	else {
		uint32_t x = v->n && v->v[v->n - 1] == id ? CD_OPS_RUN | 1u : id;
		if (!cd_vec_push(v, x))
			return nomem(err);
	}
	r->ops_retained++;
	return CD_OK;
}


/* The ops CommDebugMode's own forward pre-hook dispatches, recorded as it
 * records them: reading param.data under its dispatch mode, twice per plain
 * parameter (one aten.detach.default each) and four times per DTensor
 * parameter (a DTensor aten.detach.default with the parameter's shape,
 * placements and mesh, then the local one), in parameter order, in the
 * module's forward ops, right after the module is entered (never in backward
 * or recompute: the caller returns before). */
static enum cd_status observe_params(struct cd_replay *r, const struct cd_event *e,
				     struct cd_err *err)
{
	static const struct cd_str detach = {"aten.detach.default", 19};
	enum cd_status st = CD_OK;
	uint32_t op = op_id(r, detach);
	if (op == CD_NOID)
		return nomem(err);
	for (uint32_t i = 0; i < e->nparams; i++) {
		const struct cd_param *p = &e->params[i];
		struct cd_oprec local = {op, CD_NOID, 0};
		if (!p->placements.p) {
			if ((st = retain(r, local, err)) || (st = retain(r, local, err)))
				return st;
			continue;
		}
		struct cd_arg a = {p->shape, p->ndim, p->has_shape, p->placements, p->mesh};
		struct cd_event one = {.ev = CD_EV_OP, .dt = true, .args = &a, .nargs = 1};
		struct cd_oprec dt = {op, argset_id(r, &one, err, &st), 0};
		if (dt.argset == CD_NOID)
			return st;
		for (int k = 0; k < 4; k++)
			if ((st = retain(r, dt, err)) || (st = retain(r, local, err)))
				return st;
	}
	return CD_OK;
}

static enum cd_status on_fw_pre(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	uint32_t id = mod_id(r, e->mod);
	if (id == CD_NOID)
		return nomem(err);

	r->ac = e->bw;
	r->cur = id;
	/* ModTracker append (not a backward append) */
	if (!parents_add(r, id))
		return nomem(err);
	if (!e->bw)
		r->pfw.v[id]++;
	if (r->ac)
		return CD_OK;

	/* its depth: parent_list holds Global and the modules open around it,
	 * pmembers Global, the running modules and itself */
	if (r->parent_list.n > CD_MAX_DEPTH || r->pmembers.n - 1 > CD_MAX_DEPTH)
		return cd_fail(err, CD_ERR_LIMIT,
			       "module \"%.*s\" is nested more than %d modules deep", (int)e->mod.n,
			       e->mod.p, CD_MAX_DEPTH);
	struct cd_rmod *m = rmod(r, id);
	if (!m->in_helper) {
		m->in_helper = true;
		if (!cd_vec_push(&r->helper, id))
			return nomem(err);
	}
	m->type = type_id(r, e->type);
	if (m->type == CD_NOID)
		return nomem(err);
	m->depth = r->pmembers.n - 1;
	if (r->opts.want_params) {
		enum cd_status st = record_params(r, m, id, e, err);
		if (st)
			return st;
	}
	if (!m->has_parents) {
		m->has_parents = true;
		if (!cd_vec_reserve(&m->parents, r->pmembers.n))
			return nomem(err);
		memcpy(m->parents.v, r->pmembers.v, r->pmembers.n * sizeof *m->parents.v);
		m->parents.n = r->pmembers.n;
	}
	uint32_t parent = r->parent_list.v[r->parent_list.n - 1];
	if (r->opts.want_tree) {
		struct cd_rmod *pm = rmod(r, parent);
		struct cd_rmod_more *px = more_of(r, pm);
		if (!px || !cd_vec_push(&px->children, id))
			return nomem(err);
		m = &r->rm.v[id];
	}
	if (!cd_vec_push(&r->parent_list, id))
		return nomem(err);
	m->hooked = true;
	if (r->opts.retain_ops && r->reporting && e->nparams)
		return observe_params(r, e, err);
	return CD_OK;
}

static void on_fw_post(struct cd_replay *r, const struct cd_event *e)
{
	uint32_t id = cd_intern_find(&r->mods, e->mod.p, e->mod.n);
	if (id != CD_NOID && parents_has(r, id)) {
		parents_drop(r, id);
	} else if (!e->bw) {
		/* the reference raises "The Module hierarchy tracking is wrong" */
		warnf(r, "fw_post of module \"%.*s\" that is not running; ignored",
		      (int)e->mod.n, e->mod.p);
	}
}

static void on_fw_done(struct cd_replay *r, const struct cd_event *e)
{
	uint32_t id = cd_intern_find(&r->mods, e->mod.p, e->mod.n);
	if (id == CD_NOID)
		return;
	const struct cd_rmod *m = cd_replay_mod(r, id);
	if (!m || !m->hooked)
		return; /* no per-module hook registered in this region */
	r->ac = e->bw;
	if (r->ac)
		return;
	if (r->parent_list.n <= 1) {
		/* the reference pops "Global" and fails with IndexError */
		warnf(r, "fw_done of module \"%.*s\" with no module open; ignored", (int)e->mod.n,
		      e->mod.p);
		return;
	}
	r->parent_list.n--;
	r->cur = r->parent_list.v[r->parent_list.n - 1];
}

static enum cd_status on_bw_pre(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	uint32_t id = mod_id(r, e->mod);
	if (id == CD_NOID)
		return nomem(err);
	r->ac = false;
	r->cur = id;
	return CD_OK;
}

static enum cd_status on_bw_enter(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	uint32_t id = mod_id(r, e->mod);
	if (id == CD_NOID || !parents_add(r, id))
		return nomem(err);
	return CD_OK;
}

static void on_bw_exit(struct cd_replay *r, const struct cd_event *e)
{
	uint32_t id = cd_intern_find(&r->mods, e->mod.p, e->mod.n);
	if (id != CD_NOID)
		parents_drop(r, id); /* missing in backward: ignored, as the reference does */
}

/* The key of an op's DTensor argument list, and its decoded form. */
static uint32_t argset_id(struct cd_replay *r, const struct cd_event *e, struct cd_err *err,
			  enum cd_status *st)
{
	/* room for the key, and for one formatted shape afterwards */
	size_t need = 16, mesh_n = 0;
	for (uint32_t i = 0; i < e->nargs; i++) {
		size_t key = 8 + (size_t)e->args[i].ndim * 8 + e->args[i].placements.n;
		size_t text = 16 + (size_t)e->args[i].ndim * 22;
		need += key > text ? key : text;
		if (e->args[i].mesh.n > mesh_n)
			mesh_n = e->args[i].mesh.n;
	}
	need += mesh_n;
	if (r->scratch_cap < need) {
		char *ns = realloc(r->scratch, need);
		if (!ns) {
			*st = nomem(err);
			return CD_NOID;
		}
		r->scratch = ns;
		r->scratch_cap = need;
	}
	/* binary key: per arg ndim, dims, placements length and bytes; then
	 * the mesh (of the last DTensor arg that names one) */
	char *s = r->scratch;
	size_t o = 0;
	struct cd_str mesh = {"", 0};
	for (uint32_t i = 0; i < e->nargs; i++) {
		const struct cd_arg *a = &e->args[i];
		memcpy(s + o, &a->ndim, sizeof a->ndim);
		o += sizeof a->ndim;
		if (a->ndim)
			memcpy(s + o, a->shape, (size_t)a->ndim * sizeof *a->shape);
		o += (size_t)a->ndim * sizeof *a->shape;
		memcpy(s + o, &a->placements.n, sizeof a->placements.n);
		o += sizeof a->placements.n;
		if (a->placements.n)
			memcpy(s + o, a->placements.p, a->placements.n);
		o += a->placements.n;
		if (a->mesh.p)
			mesh = a->mesh;
	}
	if (mesh.n)
		memcpy(s + o, mesh.p, mesh.n);
	o += mesh.n;
	uint32_t before = r->argkeys.count;
	uint32_t id = cd_intern(&r->argkeys, s, (uint32_t)o);
	if (id == CD_NOID) {
		*st = nomem(err);
		return CD_NOID;
	}
	if (id < before)
		return id;
	/* new: decode it once */
	struct cd_argset as = {0};
	as.nargs = e->nargs;
	as.shape = malloc((e->nargs ? e->nargs : 1) * sizeof *as.shape);
	as.plc = malloc((e->nargs ? e->nargs : 1) * sizeof *as.plc);
	if (!as.shape || !as.plc) {
		free(as.shape);
		free(as.plc);
		*st = nomem(err);
		return CD_NOID;
	}
	for (uint32_t i = 0; i < e->nargs; i++) {
		const struct cd_arg *a = &e->args[i];
		char *t = r->scratch; /* the key is interned: scratch is free again */
		size_t n = (size_t)sprintf(t, "torch.Size([");
		for (uint32_t d = 0; d < a->ndim; d++)
			n += (size_t)sprintf(t + n, d ? ", %lld" : "%lld", (long long)a->shape[d]);
		n += (size_t)sprintf(t + n, "])");
		struct cd_str none = {"", 0};
		as.shape[i] = cd_intern(&r->strs, t, (uint32_t)n);
		as.plc[i] = str_id(r, a->placements.p ? a->placements : none);
	}
	as.mesh = cd_intern(&r->strs, mesh.p, mesh.n);
	if (!cd_vec_push(&r->argsets, as)) {
		free(as.shape);
		free(as.plc);
		*st = nomem(err);
		return CD_NOID;
	}
	return id;
}

static uint32_t op_id(struct cd_replay *r, struct cd_str name)
{
	struct cd_replay_cache *rc = cache_of(r);
	struct name_slot *slot = NULL;
	uint64_t head = 0, tail = 0;
	if (rc) {
		name_words(name, &head, &tail);
		uint64_t h = (head ^ tail * 0x9E3779B97F4A7C15ull ^ name.n) * 0xFF51AFD7ED558CCDull;
		slot = &rc->names[h >> 56];
		if (slot->id != CD_NOID && slot->n == name.n && slot->head == head &&
		    slot->tail == tail && same_middle(cd_intern_str(&r->ops, slot->id), name))
			return slot->id;
	}
	uint32_t before = r->ops.count;
	uint32_t id = cd_intern(&r->ops, name.p, name.n);
	if (id == CD_NOID || id < before) {
		if (id != CD_NOID && slot)
			*slot = (struct name_slot){head, tail, name.n, id};
		return id;
	}
	char buf[128];
	uint32_t cn = 0;
	const char *c = collective_name(name.p, name.n, r->light, &cn, buf, sizeof buf);
	struct cd_opinfo info = {CD_NOID, in_list(name.p, name.n, trivial_ops, COUNT(trivial_ops))};
	if (c) {
		info.coll = cd_intern(&r->colls, c, cn);
		if (info.coll == CD_NOID)
			return CD_NOID;
	}
	if (!cd_vec_push(&r->opinfo, info))
		return CD_NOID;
	if (slot)
		*slot = (struct name_slot){head, tail, name.n, id};
	return id;
}

static enum cd_status count_collective(struct cd_replay *r, uint32_t coll, bool bw,
				       struct cd_err *err)
{
	if (!count_add(&r->comm, coll))
		return nomem(err);
	struct cd_rmod *m = rmod(r, r->cur);
	m->has_counts = true;
	if (!count_add(bw ? &m->bw : &m->fw, coll))
		return nomem(err);
	const uint32_t *par;
	uint32_t npar;
	cd_replay_charge_list(r, &par, &npar);
	if (!m->has_parents) {
		/* Its forward ran outside this region: the reference fails with a
		 * KeyError here.  Count it for the modules running now instead. */
		if (!m->warned) {
			m->warned = true;
			warnf(r, "region %lld: module \"%s\" issued a collective in backward but its "
				 "forward ran outside the region; counted for it and for the modules "
				 "running at that time",
			      (long long)r->region, mname(r, r->cur));
		}
	}
	for (uint32_t i = 0; i < npar; i++) {
		uint32_t p = par[i];
		if (p == r->cur)
			continue;
		struct cd_rmod *pm = rmod(r, p);
		pm->has_counts = true;
		if (!count_add(bw ? &pm->bw : &pm->fw, coll))
			return nomem(err);
	}
	return CD_OK;
}

void cd_replay_charge_list(const struct cd_replay *r, const uint32_t **v, uint32_t *n)
{
	const struct cd_rmod *m = &r->rm.v[r->cur];
	if (m->gen == r->gen && m->has_parents) {
		*v = m->parents.v;
		*n = m->parents.n;
	} else {
		*v = r->pmembers.v;
		*n = r->pmembers.n;
	}
}

static enum cd_status on_op(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	enum cd_status st = CD_OK;
	uint32_t op = op_id(r, e->name);
	if (op == CD_NOID)
		return nomem(err);
	const struct cd_opinfo *info = &r->opinfo.v[op];
	r->last_op = op;
	r->last_op_mod = r->cur;

	if (!e->dt && info->coll != CD_NOID) {
		if ((st = count_collective(r, info->coll, e->bw, err)))
			return st;
		if (r->opts.on_collective)
			r->opts.on_collective(r->opts.ud, r, e, info->coll);
	}
	if (!r->opts.retain_ops || !r->reporting)
		return CD_OK;
	if (!e->dt && e->fake)
		return CD_OK; /* fake-tensor ops are not recorded */
	struct cd_oprec rec = {op, CD_NOID, (e->bw ? CD_OP_BW : 0u) | (r->ac ? CD_OP_AC : 0u)};
	if (e->dt && e->nargs) {
		rec.argset = argset_id(r, e, err, &st);
		if (rec.argset == CD_NOID)
			return st;
	}
	return retain(r, rec, err);
}

static enum cd_status on_coll(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	/* strip an overload suffix so "c10d.allreduce_.default" and
	 * "c10d.allreduce_" count together */
	uint32_t n = e->name.n, dots = 0, last = 0;
	for (uint32_t i = 0; i < n; i++)
		if (e->name.p[i] == '.') {
			dots++;
			last = i;
		}
	if (dots >= 2)
		n = last;
	uint32_t coll = cd_intern(&r->colls, e->name.p, n);
	uint32_t src = e->src.p ? str_id(r, e->src) : CD_NOID;
	if (coll == CD_NOID)
		return nomem(err);
	for (uint32_t i = 0; i < r->outside.n; i++)
		if (r->outside.v[i].coll == coll && r->outside_src.v[i] == src) {
			r->outside.v[i].n++;
			return CD_OK;
		}
	struct cd_count c = {coll, 1};
	if (!cd_vec_push(&r->outside, c) || !cd_vec_push(&r->outside_src, src))
		return nomem(err);
	return CD_OK;
}

enum cd_status cd_replay_event(struct cd_replay *r, const struct cd_event *e, struct cd_err *err)
{
	enum cd_status st;

	r->events++;
	switch (e->ev) {
	case CD_EV_META:
		r->light = e->light;
		return CD_OK;
	case CD_EV_REGION_ENTER:
		if (r->in_region) {
			warnf(r, "region %lld entered while region %lld is open; region %lld ends here",
			      (long long)e->region, (long long)r->region, (long long)r->region);
			if ((st = region_end(r, false, err)))
				return st;
		}
		return region_begin(r, e, err);
	case CD_EV_REGION_EXIT:
		if (!r->in_region) {
			warnf(r, "region_exit of region %lld, which is not open; ignored",
			      (long long)e->region);
			return CD_OK;
		}
		if (e->region != r->region)
			warnf(r, "region_exit names region %lld but region %lld is open; closing it",
			      (long long)e->region, (long long)r->region);
		return region_end(r, false, err);
	/* the gradient hooks and the engine callback outlive the region */
	case CD_EV_BW_ENTER:
		return on_bw_enter(r, e, err);
	case CD_EV_BW_EXIT:
		on_bw_exit(r, e);
		return CD_OK;
	case CD_EV_BW_END:
		parents_reset(r);
		return CD_OK;
	default:
		break;
	}
	if (!r->in_region)
		return CD_OK; /* module hooks and the dispatch mode exist only inside */
	switch (e->ev) {
	case CD_EV_FW_PRE:
		return on_fw_pre(r, e, err);
	case CD_EV_FW_POST:
		on_fw_post(r, e);
		return CD_OK;
	case CD_EV_FW_DONE:
		on_fw_done(r, e);
		return CD_OK;
	case CD_EV_BW_PRE:
		return on_bw_pre(r, e, err);
	case CD_EV_OP:
		return on_op(r, e, err);
	case CD_EV_COLL:
		return on_coll(r, e, err);
	default:
		return CD_OK;
	}
}

enum cd_status cd_replay_finish(struct cd_replay *r, struct cd_err *err)
{
	if (r->in_region) {
		warnf(r, "region %lld has no region_exit: the trace ends inside it",
		      (long long)r->region);
		enum cd_status st = region_end(r, true, err);
		if (st)
			return st;
	}
	return done_now(r, false, err);
}

uint64_t cd_replay_op_bytes(const struct cd_replay *r)
{
	uint64_t b = 0;
	for (uint32_t i = 0; i < r->rm.n; i++)
		if (r->rm.v[i].gen == r->gen)
			b += (uint64_t)r->rm.v[i].ops.cap * sizeof *r->rm.v[i].ops.v;
	return b;
}

enum cd_status cd_replay_init(struct cd_replay *r, const struct cd_replay_opts *opts,
			      struct cd_err *err)
{
	memset(r, 0, sizeof *r);
	r->opts = *opts;
	r->last_op = r->last_op_mod = CD_NOID;
	r->last_rec_id = CD_NOID;
	struct cd_str g = {"Global", 6};
	if (mod_id(r, g) != GLOBAL || !parents_add(r, GLOBAL))
		return nomem(err);
	return CD_OK;
}

void cd_replay_free(struct cd_replay *r)
{
	for (uint32_t i = 0; i < r->rm.n; i++) {
		struct cd_rmod *m = &r->rm.v[i];
		cd_vec_free(&m->parents);

		cd_vec_free(&m->fw);
		cd_vec_free(&m->bw);
		cd_vec_free(&m->ops);
	}
	for (uint32_t i = 0; i < r->argsets.n; i++) {
		free(r->argsets.v[i].shape);
		free(r->argsets.v[i].plc);
	}
	for (uint32_t i = 0; i < r->more.n; i++) {
		cd_vec_free(&r->more.v[i].children);
		cd_vec_free(&r->more.v[i].params);
		cd_vec_free(&r->more.v[i].hparams);
	}
	cd_vec_free(&r->more);
	cd_vec_free(&r->rm);
	cd_vec_free(&r->argsets);
	cd_vec_free(&r->oprecs);
	cd_intern_free(&r->opkeys);
	cd_vec_free(&r->opinfo);
	cd_vec_free(&r->pcnt);
	cd_vec_free(&r->pfw);
	cd_vec_free(&r->ppos);
	cd_vec_free(&r->pmembers);
	cd_vec_free(&r->helper);
	cd_vec_free(&r->parent_list);
	cd_vec_free(&r->sharding);
	cd_vec_free(&r->comm);
	cd_vec_free(&r->outside);
	cd_vec_free(&r->outside_src);
	free(r->scratch);
	free(r->cache);
	cd_intern_free(&r->mods);
	cd_intern_free(&r->ops);
	cd_intern_free(&r->colls);
	cd_intern_free(&r->strs);
	cd_intern_free(&r->argkeys);
}
