/* commdebug buckets: DDP's gradient buckets, observed, planned, compared.
 * See buckets.h for the layers and man/commdebug.1 (buckets) for the rules;
 * buckets_report.c prints what this file finds. */
#include "buckets.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../replay/replay.h"
#include "../postmortem/run.h"
#include "../replay/trace.h"

/* First forward of a module: its order and its own parameters then. */
struct cd_bk_mod {
	uint64_t seq;        /* UINT64_MAX: no forward seen (yet) */
	CD_VEC(struct cd_bk_param) params;
};

static enum cd_status nomem(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

static char *dupn(const char *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, p, n);
		s[n] = 0;
	}
	return s;
}

static void free_params(struct cd_bk_param *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].dtype);
	}
}

static void free_set(struct cd_bk_set *s)
{
	for (uint32_t i = 0; i < s->b.n; i++)
		free(s->b.v[i].p);
	cd_vec_free(&s->b);
	cd_vec_free(&s->unbucketed);
	s->present = s->members = false;
}

static void free_diffs(struct cd_bk_diff *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		free(d[i].kind);
		free(d[i].text);
	}
}

void cd_bk_plan_free(struct cd_bk_plan *plan)
{
	cd_vec_free(&plan->b);
	cd_vec_free(&plan->order);
}

static void free_ddp(struct cd_bk_ddp *d)
{
	free(d->mod);
	free(d->pg);
	free(d->note);
	free_params(d->params.v, d->params.n);
	cd_vec_free(&d->params);
	free_set(&d->sets[0]);
	free_set(&d->sets[1]);
	for (uint32_t i = 0; i < d->steps.n; i++) {
		struct cd_bk_step *s = &d->steps.v[i];
		for (uint32_t j = 0; j < s->fires.n; j++) {
			free(s->fires.v[j].dtype);
			free(s->fires.v[j].mod);
		}
		cd_vec_free(&s->fires);
		free(s->label);
	}
	cd_vec_free(&d->steps);
	cd_bk_plan_free(&d->plan);
	cd_vec_free(&d->unplanned);
	cd_vec_free(&d->ignored);
	free_diffs(d->compared.v, d->compared.n);
	cd_vec_free(&d->compared);
	free_diffs(d->notes.v, d->notes.n);
	cd_vec_free(&d->notes);
}

void cd_bk_trace_free(struct cd_bk_trace *t)
{
	for (uint32_t i = 0; i < t->ddp.n; i++)
		free_ddp(&t->ddp.v[i]);
	cd_vec_free(&t->ddp);
	for (uint32_t i = 0; i < t->mrec.n; i++) {
		free_params(t->mrec.v[i].params.v, t->mrec.v[i].params.n);
		cd_vec_free(&t->mrec.v[i].params);
	}
	cd_vec_free(&t->mrec);
	cd_intern_free(&t->mods);
	free(t->unread);
	free(t->path);
	memset(t, 0, sizeof *t);
}

void cd_bk_rank_free(struct cd_bk_rank *r)
{
	cd_bk_trace_free(&r->t);
	for (uint32_t i = 0; i < r->warnings.n; i++)
		free(r->warnings.v[i]);
	cd_vec_free(&r->warnings);
}

struct rank_ctx {
	struct cd_bk_rank *r;
	bool oom;
};

static void keep_warning(void *ud, const char *msg)
{
	struct rank_ctx *c = ud;
	char *m = strdup(msg);
	if (!m || !cd_vec_push(&c->r->warnings, m)) {
		free(m);
		c->oom = true;
	}
}

static void rank_read(const char *path, const void *ctx, void *res)
{
	struct cd_bk_opts o = *(const struct cd_bk_opts *)ctx;
	struct rank_ctx c = {.r = res};

	o.nccl = NULL;
	o.warn = keep_warning;
	o.ud = &c;
	c.r->st = cd_buckets_collect(path, &o, &c.r->t, &c.r->err);
	if (!c.r->st && c.oom)
		c.r->st = nomem(&c.r->err);
}

static void rank_free(void *res)
{
	cd_bk_rank_free(res);
}

const struct cd_run_reader cd_bk_reader = {
	"buckets", sizeof(struct cd_bk_rank), rank_read, rank_free, NULL,
};

static enum cd_status add_diff(void *vec, struct cd_err *err, const char *kind, const char *fmt,
			       ...) __attribute__((format(printf, 4, 5)));

/* Append {kind, printf text} to a CD_VEC(struct cd_bk_diff). */
static enum cd_status add_diff(void *vec, struct cd_err *err, const char *kind, const char *fmt, ...)
{
	CD_VEC(struct cd_bk_diff) *v = vec;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	struct cd_bk_diff d = {.kind = strdup(kind), .text = strdup(buf)};
	if (!d.kind || !d.text || !cd_vec_push(v, d)) {
		free(d.kind);
		free(d.text);
		return nomem(err);
	}
	return CD_OK;
}

/* ------------------------------------------------------------ planner */

enum cd_status cd_bk_plan_build(struct cd_bk_plan *plan, const struct cd_bk_node *nodes,
				uint32_t nnodes, const uint32_t *params, const int64_t *sizes,
				int64_t cap, int64_t first_cap, struct cd_err *err)
{
	/* DDPOptimizer.compile_fn: buckets[0] is the one being filled; here the
	 * buckets are kept in creation order, so the last is being filled and
	 * creation order is the printed index order (enumerate(reversed)). */
	struct cd_bk_pbucket cur = {0};
	uint32_t cur_nodes = 0;

	plan->b.n = plan->order.n = 0;
	plan->cap = cap;
	plan->first_cap = first_cap;
	for (uint32_t k = nnodes; k-- > 0;) {
		const struct cd_bk_node *nd = &nodes[k];
		if (cur.size >= cap || (plan->b.n == 0 && cur.size >= first_cap)) {
			/* bucket_has_external_output: in this module-level model a
			 * bucket holding a module has an output used outside it (by a
			 * later module or the graph's output); only an empty one has
			 * none, and is then extended as DDPOptimizer does */
			if (cur_nodes > 0) {
				if (!cd_vec_push(&plan->b, cur))
					return nomem(err);
				cur = (struct cd_bk_pbucket){.first = plan->order.n};
				cur_nodes = 0;
			} else {
				if (cur.extra_ops == 0)
					cur.extra_size = cur.size; /* paramsize_before_opcount_increase */
				cur.extra_ops++;
			}
		}
		for (uint32_t i = 0; i < nd->n; i++) {
			uint32_t p = params[nd->first + i];
			if (!cd_vec_push(&plan->order, p))
				return nomem(err);
			cur.size += sizes[p];
			cur.n++;
		}
		cur_nodes++;
	}
	if (!cd_vec_push(&plan->b, cur))
		return nomem(err);
	/* a leading (in forward order) bucket of parameter-free modules is
	 * folded into the one before it */
	if (plan->b.n > 1 && plan->b.v[plan->b.n - 1].size == 0 && plan->b.v[plan->b.n - 1].n == 0)
		plan->b.n--;
	for (uint32_t i = 0; i < plan->b.n; i++)
		if (plan->b.v[i].extra_ops)
			plan->b.v[i].extra_size = plan->b.v[i].size - plan->b.v[i].extra_size;
	return CD_OK;
}

/* --------------------------------------------------- the ddp event */

static bool json_int(const cJSON *j, int64_t *v)
{
	if (!cJSON_IsNumber(j))
		return false;
	double d = j->valuedouble;
	if (!(d == floor(d)) || fabs(d) > (double)CD_INT_MAX)
		return false;
	*v = (int64_t)d;
	return true;
}

/* A boolean flag: -1 when absent or null. */
static enum cd_status get_flag(const cJSON *root, const char *key, int8_t *v, struct cd_err *err)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
	*v = -1;
	if (!j || cJSON_IsNull(j))
		return CD_OK;
	if (!cJSON_IsBool(j))
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be true or false in ddp event",
			       key);
	*v = cJSON_IsTrue(j) ? 1 : 0;
	return CD_OK;
}

static enum cd_status get_cap(const cJSON *root, const char *key, int64_t *v, struct cd_err *err)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!j || cJSON_IsNull(j))
		return cd_fail(err, CD_ERR_TRACE, "missing field \"%s\" in ddp event", key);
	if (!json_int(j, v) || *v < 0)
		return cd_fail(err, CD_ERR_TRACE,
			       "field \"%s\" must be an integer of 0 or more in ddp event", key);
	return CD_OK;
}

/* An optional cap: -1 when absent or null. */
static enum cd_status get_opt_cap(const cJSON *root, const char *key, int64_t *v,
				  struct cd_err *err)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
	*v = -1;
	if (!j || cJSON_IsNull(j))
		return CD_OK;
	return get_cap(root, key, v, err);
}

static enum cd_status read_params(const cJSON *root, struct cd_bk_ddp *d, struct cd_err *err)
{
	const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "params");
	const cJSON *it;
	uint32_t i = 0;

	if (!ps || cJSON_IsNull(ps))
		return cd_fail(err, CD_ERR_TRACE, "missing field \"params\" in ddp event");
	if (!cJSON_IsArray(ps))
		return cd_fail(err, CD_ERR_TRACE, "field \"params\" must be a list in ddp event");
	cJSON_ArrayForEach(it, ps) {
		struct cd_bk_param p = {.requires_grad = true};
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
		const cJSON *nb = cJSON_GetObjectItemCaseSensitive(it, "nbytes");
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
		const cJSON *rg = cJSON_GetObjectItemCaseSensitive(it, "requires_grad");
		i++;
		if (!cJSON_IsObject(it))
			return cd_fail(err, CD_ERR_TRACE, "params entry %u of ddp event is not an object",
				       i);
		if (!cJSON_IsString(nm) || !nm->valuestring[0])
			return cd_fail(err, CD_ERR_TRACE, "params entry %u of ddp event has no \"name\"",
				       i);
		if (!nb || cJSON_IsNull(nb))
			return cd_fail(err, CD_ERR_TRACE,
				       "params entry %u (%.200s) of ddp event has no \"nbytes\"", i,
				       nm->valuestring);
		if (!json_int(nb, &p.nbytes) || p.nbytes < 0)
			return cd_fail(err, CD_ERR_TRACE,
				       "params entry %u (%.200s) of ddp event: \"nbytes\" must be an "
				       "integer of 0 or more", i, nm->valuestring);
		if (rg && !cJSON_IsNull(rg))
			p.requires_grad = cJSON_IsTrue(rg);
		for (uint32_t k = 0; k < d->params.n; k++)
			if (strcmp(d->params.v[k].name, nm->valuestring) == 0)
				return cd_fail(err, CD_ERR_TRACE,
					       "params entries %u and %u of ddp event are both \"%.200s\"",
					       k + 1, i, nm->valuestring);
		p.name = strdup(nm->valuestring);
		p.dtype = cJSON_IsString(dt) ? strdup(dt->valuestring) : NULL;
		if (!p.name || (cJSON_IsString(dt) && !p.dtype) || !cd_vec_push(&d->params, p)) {
			free(p.name);
			free(p.dtype);
			return nomem(err);
		}
	}
	return CD_OK;
}

/* "buckets" and "sizes" into s (params of d already read). */
static enum cd_status read_set(const cJSON *root, const struct cd_bk_ddp *d, struct cd_bk_set *s,
			       struct cd_err *err)
{
	const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "buckets");
	const cJSON *sz = cJSON_GetObjectItemCaseSensitive(root, "sizes");
	const cJSON *it, *x;
	uint32_t *where = NULL;
	enum cd_status st = CD_OK;

	s->present = true;
	if (bs && !cJSON_IsNull(bs)) {
		if (!cJSON_IsArray(bs))
			return cd_fail(err, CD_ERR_TRACE, "field \"buckets\" must be a list of lists "
				       "in ddp event");
		if (cJSON_GetArraySize(bs) > CD_LIST_MAX)
			return cd_fail(err, CD_ERR_LIMIT, "more than %d buckets in ddp event",
				       CD_LIST_MAX);
		where = malloc((d->params.n + 1) * sizeof *where);
		if (!where)
			return nomem(err);
		for (uint32_t i = 0; i < d->params.n; i++)
			where[i] = UINT32_MAX;
		s->members = true;
		uint32_t k = 0;
		cJSON_ArrayForEach(it, bs) {
			struct cd_bk_bucket b = {.size = -1};
			if (!cJSON_IsArray(it)) {
				st = cd_fail(err, CD_ERR_TRACE, "bucket %u of ddp event is not a list", k);
				goto out;
			}
			int n = cJSON_GetArraySize(it);
			if (n > 0 && !(b.p = malloc((size_t)n * sizeof *b.p))) {
				st = nomem(err);
				goto out;
			}
			cJSON_ArrayForEach(x, it) {
				int64_t v;
				if (!json_int(x, &v) || v < 0 || v >= (int64_t)d->params.n) {
					free(b.p);
					st = cd_fail(err, CD_ERR_TRACE,
						     "bucket %u of ddp event: member %u is not an index "
						     "into its %u params", k, b.n + 1, d->params.n);
					if (cJSON_IsNumber(x))
						snprintf(err->msg + strlen(err->msg),
							 sizeof err->msg - strlen(err->msg),
							 " (it is %.17g)", x->valuedouble);
					goto out;
				}
				if (where[v] != UINT32_MAX) {
					free(b.p);
					st = cd_fail(err, CD_ERR_TRACE,
						     "bucket %u of ddp event: param %" PRId64 " (%.200s) "
						     "is in bucket %u already", k, v,
						     d->params.v[v].name, where[v]);
					goto out;
				}
				where[v] = k;
				b.p[b.n++] = (uint32_t)v;
			}
			if (!cd_vec_push(&s->b, b)) {
				free(b.p);
				st = nomem(err);
				goto out;
			}
			k++;
		}
	}
	if (sz && !cJSON_IsNull(sz)) {
		if (!cJSON_IsArray(sz)) {
			st = cd_fail(err, CD_ERR_TRACE, "field \"sizes\" must be a list in ddp event");
			goto out;
		}
		int n = cJSON_GetArraySize(sz);
		if (n > CD_LIST_MAX) {
			st = cd_fail(err, CD_ERR_LIMIT, "more than %d sizes in ddp event", CD_LIST_MAX);
			goto out;
		}
		if (s->members && (uint32_t)n != s->b.n) {
			st = cd_fail(err, CD_ERR_TRACE, "ddp event has %u buckets but %d sizes", s->b.n,
				     n);
			goto out;
		}
		uint32_t k = 0;
		cJSON_ArrayForEach(x, sz) {
			int64_t v;
			if (!json_int(x, &v) || v < 0) {
				st = cd_fail(err, CD_ERR_TRACE, "size %u of ddp event must be an "
					     "integer of 0 or more", k);
				goto out;
			}
			if (!s->members && !cd_vec_push(&s->b, ((struct cd_bk_bucket){.size = -1}))) {
				st = nomem(err);
				goto out;
			}
			s->b.v[k++].size = v;
		}
	}
out:
	free(where);
	return st;
}

/* A ddp event that only says why the recorder could not read DDP's
 * buckets: a note on the module's buckets when it has them, else kept for
 * the error that the trace has none. */
static enum cd_status on_unread(struct cd_bk_trace *t, const struct cd_event *e, const char *note,
				struct cd_err *err)
{
	for (uint32_t i = t->ddp.n; i-- > 0;)
		if (strlen(t->ddp.v[i].mod) == e->mod.n &&
		    memcmp(t->ddp.v[i].mod, e->mod.p, e->mod.n) == 0)
			return add_diff(&t->ddp.v[i].notes, err, "recorder", "the recorder: %.900s",
					note);
	if (t->unread)
		return CD_OK;
	size_t n = e->mod.n + strlen(note) + 8;
	if (!(t->unread = malloc(n)))
		return nomem(err);
	snprintf(t->unread, n, "%.*s: %s", (int)e->mod.n, e->mod.p, note);
	return CD_OK;
}

/* One ddp event (its whole line): a new DDP module, or its rebuilt buckets. */
static enum cd_status on_ddp(struct cd_bk_trace *t, const struct cd_event *e, const char *text,
			     size_t n, long long line, struct cd_err *err)
{
	cJSON *root = cJSON_ParseWithLength(text, n);
	struct cd_bk_ddp nd = {.in_force = CD_BK_NOSET};
	struct cd_bk_ddp *d = NULL;
	enum cd_status st = CD_OK;
	int8_t rebuilt;

	if (!root || !cJSON_IsObject(root)) {
		st = cd_fail(err, CD_ERR_FORMAT, "invalid JSON in ddp event");
		goto out;
	}
	const cJSON *pg = cJSON_GetObjectItemCaseSensitive(root, "pg");
	const cJSON *note = cJSON_GetObjectItemCaseSensitive(root, "note");
	if (note && !cJSON_IsNull(note) && !cJSON_IsString(note)) {
		st = cd_fail(err, CD_ERR_TRACE, "field \"note\" must be a string in ddp event");
		goto out;
	}
	if (cJSON_IsString(note) && (!cJSON_IsString(pg) || !cJSON_HasObjectItem(root, "cap"))) {
		/* the recorder could not read DDP's buckets: its note says why */
		st = on_unread(t, e, note->valuestring, err);
		goto out;
	}
	if (!cJSON_IsString(pg)) {
		st = cd_fail(err, CD_ERR_TRACE, "missing field \"pg\" in ddp event");
		goto out;
	}
	/* every field of every ddp event is checked, the first one's kept */
	if ((st = get_flag(root, "rebuilt", &rebuilt, err)) ||
	    (st = get_cap(root, "cap", &nd.cap, err)) ||
	    (st = get_cap(root, "first_cap", &nd.first_cap, err)) ||
	    (st = get_opt_cap(root, "default_first_cap", &nd.default_first_cap, err)) ||
	    (st = get_flag(root, "find_unused", &nd.find_unused, err)) ||
	    (st = get_flag(root, "static_graph", &nd.static_graph, err)) ||
	    (st = get_flag(root, "grad_as_view", &nd.grad_as_view, err)))
		goto out;
	/* the rebuilt buckets of the latest DDP module of that name */
	if (rebuilt == 1) {
		for (uint32_t i = t->ddp.n; i-- > 0;)
			if (strlen(t->ddp.v[i].mod) == e->mod.n &&
			    memcmp(t->ddp.v[i].mod, e->mod.p, e->mod.n) == 0) {
				d = &t->ddp.v[i];
				break;
			}
		if (d && d->sets[CD_BK_REBUILT].present) {
			st = cd_fail(err, CD_ERR_TRACE, "second rebuilt ddp event of %.200s (line %lld "
				     "had its rebuilt buckets)", d->mod, d->sets[CD_BK_REBUILT].line);
			goto out;
		}
	}
	if (!d) {
		/* a new DDP module (or a rebuild of one whose first event is not
		 * in the trace) */
		d = &nd;
		if (!(d->mod = dupn(e->mod.p, e->mod.n)) || !(d->pg = strdup(pg->valuestring)) ||
		    (cJSON_IsString(note) && !(d->note = strdup(note->valuestring)))) {
			st = nomem(err);
			goto out;
		}
		if ((st = read_params(root, d, err)))
			goto out;
	} else {
		/* the same parameters, the same group */
		struct cd_bk_ddp chk = {0};
		st = read_params(root, &chk, err);
		bool same = !st && chk.params.n == d->params.n && strcmp(pg->valuestring, d->pg) == 0;
		for (uint32_t i = 0; same && i < chk.params.n; i++)
			same = strcmp(chk.params.v[i].name, d->params.v[i].name) == 0 &&
			       chk.params.v[i].nbytes == d->params.v[i].nbytes;
		free_params(chk.params.v, chk.params.n);
		cd_vec_free(&chk.params);
		if (st)
			goto out;
		if (!same) {
			st = cd_fail(err, CD_ERR_TRACE, "rebuilt ddp event of %.200s has other params "
				     "or another pg than its first one", d->mod);
			goto out;
		}
	}
	uint32_t which = rebuilt == 1 ? CD_BK_REBUILT : CD_BK_INITIAL;
	if ((st = read_set(root, d, &d->sets[which], err)))
		goto out;
	d->sets[which].line = line;
	d->sets[which].from_region = -1;
	const cJSON *rr = cJSON_GetObjectItemCaseSensitive(root, "rebuilt_region");
	if (rr && !cJSON_IsNull(rr) &&
	    (!json_int(rr, &d->sets[which].from_region) || d->sets[which].from_region < 0 ||
	     d->sets[which].from_region > INT32_MAX)) {
		st = cd_fail(err, CD_ERR_TRACE, "field \"rebuilt_region\" must be a region number "
			     "(0 to 2147483647) in ddp event");
		goto out;
	}
	d->in_force = which;
	if (d == &nd) {
		if (!cd_vec_push(&t->ddp, nd)) {
			st = nomem(err);
			goto out;
		}
		d = NULL;
	}
out:
	if (d == &nd)
		free_ddp(&nd);  /* not kept (once pushed, d is NULL: t owns it) */
	cJSON_Delete(root);
	return st;
}

/* ------------------------------------------------------- collecting */

struct pend {
	uint32_t d, s, f;   /* DDP module, step, fire */
};

struct coll_ctx {
	struct cd_bk_trace *t;
	const struct cd_bk_opts *o;
	struct cd_trace_run *run;
	struct cd_nccl *nccl;
	enum cd_status st;
	struct cd_err err;
	uint64_t fw_seq;
	/* the backward pass in progress */
	bool in_bw;
	int64_t bw_t0;             /* t of its first event, -1 */
	uint64_t bw_ops;
	CD_VEC(struct pend) pending;  /* its fires */
	uint32_t pass_gen;         /* replay generation the pass numbers are of */
	uint32_t passes;
	uint32_t gpasses;          /* backward passes of the trace */
};

static bool is_ddp_reducer(const struct cd_event *e)
{
	return e->src.p && e->src.n == 11 && memcmp(e->src.p, "ddp_reducer", 11) == 0;
}

static struct cd_bk_ddp *ddp_of(struct cd_bk_trace *t, const struct cd_event *e)
{
	if (!e->pg.p)
		return t->ddp.n == 1 ? &t->ddp.v[0] : NULL;
	for (uint32_t i = t->ddp.n; i-- > 0;)
		if (strlen(t->ddp.v[i].pg) == e->pg.n && memcmp(t->ddp.v[i].pg, e->pg.p, e->pg.n) == 0)
			return &t->ddp.v[i];
	return NULL;
}

static void end_pass(struct coll_ctx *c, const struct cd_event *e)
{
	for (uint32_t i = 0; i < c->pending.n; i++) {
		struct cd_bk_fire *f = &c->t->ddp.v[c->pending.v[i].d].steps.v[c->pending.v[i].s]
					.fires.v[c->pending.v[i].f];
		/* a light trace has no ops to count: n/a */
		f->ops_left = c->run->light ? -1 : (int64_t)(c->bw_ops - f->op_no);
		if (e && (e->have & CD_F_T) && f->t >= 0 && c->bw_t0 >= 0 && e->t > c->bw_t0 &&
		    f->t >= c->bw_t0 && f->t <= e->t)
			f->left = (double)(e->t - f->t) / (double)(e->t - c->bw_t0);
	}
	c->pending.n = 0;
	c->in_bw = false;
}

static enum cd_status on_fire(struct coll_ctx *c, const struct cd_event *e,
			      const struct cd_replay *r)
{
	struct cd_bk_trace *t = c->t;
	struct cd_bk_ddp *d;
	struct cd_err *err = &c->err;

	t->ddp_colls++;
	if (!r->in_region) {
		t->outside++;
		return CD_OK;
	}
	if (!(d = ddp_of(t, e))) {
		t->unmatched++;
		return CD_OK;
	}
	if (c->o->select && r->region != c->o->region)
		return CD_OK;
	if (!d->steps.n || d->steps.v[d->steps.n - 1].gen != r->gen) {
		struct cd_bk_step s = {.region = r->region, .gen = r->gen};
		if (r->label != CD_NOID && !(s.label = strdup(cd_intern_str(&r->strs, r->label))))
			return nomem(err);
		if (!cd_vec_push(&d->steps, s)) {
			free(s.label);
			return nomem(err);
		}
	}
	struct cd_bk_step *s = &d->steps.v[d->steps.n - 1];
	struct cd_bk_fire f = {
		.index = (e->have & CD_F_BUCKET) ? e->bucket : -1,
		.bytes = (e->have & CD_F_BYTES) ? e->bytes : -1,
		.seq = (e->have & CD_F_SEQ) ? e->seq : -1,
		.set = d->in_force,
		.pass = c->passes,
		.gpass = c->gpasses,
		.t = (e->have & CD_F_T) ? e->t : -1,
		.op_no = c->bw_ops,
		.left = -1,
		.ops_left = -1,
		.nccl_bytes = -1,
		.nccl_dur = -1,
	};
	if (s->passes < c->passes)
		s->passes = c->passes;
	if (e->pg.p && (e->have & CD_F_SEQ))
		cd_nccl_served(c->nccl, e->pg, e->seq, &f.ncalls, &f.nccl_bytes, &f.nccl_dur);
	f.mod = strdup(cd_intern_str(&r->mods, r->cur));
	if (e->dtype.p)
		f.dtype = dupn(e->dtype.p, e->dtype.n);
	if (!f.mod || (e->dtype.p && !f.dtype) || !cd_vec_push(&s->fires, f)) {
		free(f.mod);
		free(f.dtype);
		return nomem(err);
	}
	if (c->in_bw) {
		struct pend pe = {(uint32_t)(d - t->ddp.v), d->steps.n - 1, s->fires.n - 1};
		if (!cd_vec_push(&c->pending, pe))
			return nomem(err);
	}
	return CD_OK;
}

/* A module's first forward (not a recomputation): its order and params. */
static enum cd_status on_fw_pre(struct coll_ctx *c, const struct cd_event *e)
{
	struct cd_bk_trace *t = c->t;
	uint32_t id = cd_intern(&t->mods, e->mod.p, e->mod.n);
	struct cd_err *err = &c->err;

	if (id == CD_NOID)
		return nomem(err);
	while (t->mrec.n <= id)
		if (!cd_vec_push(&t->mrec, ((struct cd_bk_mod){.seq = UINT64_MAX})))
			return nomem(err);
	struct cd_bk_mod *m = &t->mrec.v[id];
	if (m->seq != UINT64_MAX)
		return CD_OK;
	m->seq = c->fw_seq++;
	for (uint32_t i = 0; i < e->nparams; i++) {
		const struct cd_param *p = &e->params[i];
		struct cd_bk_param q = {.nbytes = p->nbytes < 0 ? 0 : p->nbytes,
					.requires_grad = p->requires_grad};
		q.name = malloc((size_t)e->mod.n + p->name.n + 2);
		if (q.name) {
			memcpy(q.name, e->mod.p, e->mod.n);
			q.name[e->mod.n] = '.';
			memcpy(q.name + e->mod.n + 1, p->name.p, p->name.n);
			q.name[e->mod.n + 1 + p->name.n] = 0;
		}
		if (p->dtype.p)
			q.dtype = dupn(p->dtype.p, p->dtype.n);
		if (!q.name || (p->dtype.p && !q.dtype) || !cd_vec_push(&m->params, q)) {
			free(q.name);
			free(q.dtype);
			return nomem(err);
		}
	}
	return CD_OK;
}

static void after_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct coll_ctx *c = ud;
	enum cd_status st = CD_OK;

	if (c->st)
		return;
	if (r->gen != c->pass_gen) {
		c->pass_gen = r->gen;
		c->passes = 0;
	}
	bool bwish = e->ev == CD_EV_BW_PRE || e->ev == CD_EV_BW_ENTER || e->ev == CD_EV_BW_EXIT ||
		     ((e->ev == CD_EV_OP || e->ev == CD_EV_COLL) && e->bw);
	if (bwish && !c->in_bw) {
		c->in_bw = true;
		c->bw_t0 = (e->have & CD_F_T) ? e->t : -1;
		c->bw_ops = 0;
		c->passes++;
		c->gpasses++;
	}
	if (e->ev == CD_EV_FW_PRE && !e->bw && c->in_bw) {
		/* a new forward: the backward before it had no bw_end */
		c->pending.n = 0;
		c->in_bw = false;
	}
	switch (e->ev) {
	case CD_EV_DDP:
		st = on_ddp(c->t, e, c->run->text, c->run->text_n, c->run->line, &c->err);
		break;
	case CD_EV_FW_PRE:
		if (e->type.n >= 23 &&
		    memcmp(e->type.p + e->type.n - 23, "DistributedDataParallel", 23) == 0)
			c->t->saw_ddp_module = true;
		if (!e->bw && r->in_region)
			st = on_fw_pre(c, e);
		break;
	case CD_EV_OP:
		/* the pass's operators; collectives (which name a group) are not
		 * work left to overlap with */
		if (c->in_bw && !e->pg.p)
			c->bw_ops++;
		break;
	case CD_EV_COLL:
		if (is_ddp_reducer(e))
			st = on_fire(c, e, r);
		break;
	case CD_EV_BW_END:
		end_pass(c, e);
		break;
	case CD_EV_NCCL:
	case CD_EV_NCCL_LOST:
		st = cd_nccl_event(c->nccl, e, &c->err);
		break;
	default:
		break;
	}
	if (st) {
		c->st = st;
		c->err.line = c->run->line;
	}
}

static void replay_warn(void *ud, const char *msg)
{
	struct coll_ctx *c = ud;
	if (c->o->warn)
		c->o->warn(c->o->ud, msg);
}

static enum cd_status analyze(struct cd_bk_trace *t, const struct cd_bk_opts *o,
			      struct cd_err *err);

enum cd_status cd_buckets_collect(const char *path, const struct cd_bk_opts *o,
				  struct cd_bk_trace *t, struct cd_err *err)
{
	struct cd_nccl own = {0};
	struct coll_ctx c = {.t = t, .o = o, .nccl = o->nccl ? o->nccl : &own};
	struct cd_trace_run run = {.general_parser = o->general_parser, .after_event = after_event,
				   .ud = &c};
	struct cd_replay_opts ro = {.warn = replay_warn, .ud = &c};
	struct cd_replay rp;
	enum cd_status st;

	c.run = &run;
	err->line = err->column = 0;
	if (!(t->path = strdup(path)))
		return nomem(err);
	if ((st = cd_replay_init(&rp, &ro, err)))
		goto out_nccl;
	st = cd_trace_replay(path, &rp, &run, err);
	if (!st && c.st) {
		st = c.st;
		*err = c.err;
	}
	if (!st)
		st = cd_replay_finish(&rp, err);
	cd_replay_free(&rp);
	t->has_rank = run.has_rank;
	t->rank = run.rank;
	t->cut = run.cut;
	if (st)
		goto out;
	if (!t->ddp.n) {
		if (t->unread)
			st = cd_fail(err, CD_ERR_TRACE, "no ddp event with DDP's buckets; the recorder's note "
				     "on %.900s", t->unread);
		else if (t->ddp_colls)
			st = cd_fail(err, CD_ERR_TRACE,
				     "no ddp event: the trace has %" PRIu64 " bucket all-reduce%s of "
				     "DDP's reducer but not DDP's buckets (written by a recorder "
				     "older than the ddp event?)", t->ddp_colls,
				     t->ddp_colls == 1 ? "" : "s");
		else if (t->saw_ddp_module)
			st = cd_fail(err, CD_ERR_TRACE, "no ddp event: the trace has a "
				     "DistributedDataParallel module but not its buckets (written by a "
				     "recorder older than the ddp event?)");
		else
			st = cd_fail(err, CD_ERR_TRACE, "no ddp event: no DistributedDataParallel "
				     "module in this trace");
		goto out;
	}
	st = analyze(t, o, err);
out:
	cd_vec_free(&c.pending);
out_nccl:
	cd_nccl_free(&own);
	return st;
}

/* ------------------------------------------------------- analysis */

struct owned {
	uint64_t seq;   /* forward order of the module */
	uint32_t p;     /* param index */
};

static int cmp_owned(const void *a, const void *b)
{
	const struct owned *x = a, *y = b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x->p < y->p ? -1 : x->p > y->p;
}

static bool in_subtree(const char *name, uint32_t n, const char *mod)
{
	size_t m = strlen(mod);
	return n >= m && memcmp(name, mod, m) == 0 && (n == m || name[m] == '.');
}

/* The parameters (requires_grad) that the modules of d's subtree had at their
 * first forward and that the ddp event does not list: DDP was told to ignore
 * them, so no bucket all-reduces their gradients. */
static enum cd_status find_ignored(struct cd_bk_trace *t, struct cd_bk_ddp *d,
				   const uint32_t *mods, uint32_t nnodes, struct cd_err *err)
{
	struct cd_intern names = {0};
	enum cd_status st = CD_OK;
	for (uint32_t i = 0; i < d->params.n && !st; i++)
		if (cd_intern(&names, d->params.v[i].name, (uint32_t)strlen(d->params.v[i].name)) ==
		    CD_NOID)
			st = nomem(err);
	for (uint32_t k = 0; k < nnodes && !st; k++) {
		const struct cd_bk_mod *m = &t->mrec.v[mods[k]];
		for (uint32_t i = 0; i < m->params.n && !st; i++) {
			const char *nm = m->params.v[i].name;
			if (m->params.v[i].requires_grad &&
			    cd_intern_find(&names, nm, (uint32_t)strlen(nm)) == CD_NOID &&
			    !cd_vec_push(&d->ignored, nm))
				st = nomem(err);
		}
	}
	cd_intern_free(&names);
	return st;
}

/* The modules of d's subtree in first-forward order; with the ddp event's
 * params (or, when it lists none, the modules' own from fw_pre). */
static enum cd_status model(struct cd_bk_trace *t, struct cd_bk_ddp *d, const struct cd_bk_opts *o,
			    struct cd_err *err)
{
	uint32_t nm = t->mrec.n, nnodes = 0, np;
	uint32_t *mods = NULL;       /* subtree module ids in forward order */
	struct cd_bk_node *nodes = NULL;
	struct owned *own = NULL;
	uint32_t *params = NULL;
	int64_t *sizes = NULL;
	enum cd_status st = CD_OK;

	if (!(mods = malloc((nm + 1) * sizeof *mods)))
		return nomem(err);
	for (uint32_t i = 0; i < nm; i++)
		if (t->mrec.v[i].seq != UINT64_MAX &&
		    in_subtree(cd_intern_str(&t->mods, i), cd_intern_len(&t->mods, i), d->mod))
			mods[nnodes++] = i;
	/* ids are in first-seen order, which is first-forward order */
	if (!d->params.n) {
		d->params_from_fw_pre = true;
		for (uint32_t k = 0; k < nnodes; k++) {
			struct cd_bk_mod *m = &t->mrec.v[mods[k]];
			for (uint32_t i = 0; i < m->params.n; i++) {
				struct cd_bk_param q = m->params.v[i];
				if (!q.requires_grad)
					continue;
				q.name = strdup(q.name);
				q.dtype = q.dtype ? strdup(q.dtype) : NULL;
				if (!q.name || (m->params.v[i].dtype && !q.dtype) ||
				    !cd_vec_push(&d->params, q)) {
					free(q.name);
					free(q.dtype);
					st = nomem(err);
					goto out;
				}
			}
		}
	}
	if (!d->params_from_fw_pre && (st = find_ignored(t, d, mods, nnodes, err)))
		goto out;
	np = d->params.n;
	nodes = calloc(nnodes + 1, sizeof *nodes);
	own = malloc((np + 1) * sizeof *own);
	params = malloc((np + 1) * sizeof *params);
	sizes = malloc((np + 1) * sizeof *sizes);
	if (!nodes || !own || !params || !sizes) {
		st = nomem(err);
		goto out;
	}
	/* each parameter belongs to the module named by all but its last part */
	uint32_t nown = 0;
	for (uint32_t i = 0; i < np; i++) {
		const char *nmz = d->params.v[i].name;
		const char *dot = strrchr(nmz, '.');
		uint32_t id = dot ? cd_intern_find(&t->mods, nmz, (uint32_t)(dot - nmz)) : CD_NOID;
		sizes[i] = d->params.v[i].nbytes;
		if (!d->params.v[i].requires_grad)
			continue;
		if (id == CD_NOID || id >= nm || t->mrec.v[id].seq == UINT64_MAX ||
		    !in_subtree(nmz, (uint32_t)(dot - nmz), d->mod)) {
			if (!cd_vec_push(&d->unplanned, i)) {
				st = nomem(err);
				goto out;
			}
			continue;
		}
		own[nown++] = (struct owned){t->mrec.v[id].seq, i};
	}
	qsort(own, nown, sizeof *own, cmp_owned);
	for (uint32_t i = 0; i < nown; i++)
		params[i] = own[i].p;
	/* nodes: every subtree module, with its run of params */
	uint32_t j = 0;
	for (uint32_t k = 0; k < nnodes; k++) {
		uint64_t seq = t->mrec.v[mods[k]].seq;
		nodes[k].first = j;
		while (j < nown && own[j].seq == seq)
			j++;
		nodes[k].n = j - nodes[k].first;
	}
	/* DDPOptimizer's caps: torch.compile builds it with DDP's bucket cap
	 * and leaves its first cap at dist._DEFAULT_FIRST_BUCKET_BYTES */
	int64_t cap = o->cap >= 0 ? o->cap : d->cap;
	int64_t first_cap = d->first_cap;
	int from = CD_BK_FC_DDP;
	if (o->first_cap >= 0) {
		first_cap = o->first_cap;
		from = CD_BK_FC_OPTION;
	} else if (d->default_first_cap >= 0) {
		first_cap = d->default_first_cap;
		from = CD_BK_FC_DEFAULT;
	}
	st = cd_bk_plan_build(&d->plan, nodes, nnodes, params, sizes, cap, first_cap, err);
	d->plan.first_cap_from = from;
out:
	free(mods);
	free(nodes);
	free(own);
	free(params);
	free(sizes);
	return st;
}

int64_t cd_bk_set_size(const struct cd_bk_ddp *d, const struct cd_bk_bucket *b, bool members)
{
	if (!members)
		return b->size;
	int64_t s = 0;
	for (uint32_t i = 0; i < b->n; i++)
		s += d->params.v[b->p[i]].nbytes;
	return s;
}

/* Up to three names of a list of param indices into buf. */
static void name_list(char *buf, size_t cap, const struct cd_bk_ddp *d, const uint32_t *p,
		      uint32_t n)
{
	size_t len = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < n && i < 3; i++)
		len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", i ? ", " : "",
					d->params.v[p[i]].name);
	if (n > 3 && len < cap)
		snprintf(buf + len, cap - len, " and %u more", n - 3);
}

static bool member_of(const uint32_t *p, uint32_t n, uint32_t x)
{
	for (uint32_t i = 0; i < n; i++)
		if (p[i] == x)
			return true;
	return false;
}

static enum cd_status compare_set(struct cd_bk_ddp *d, const struct cd_bk_set *s,
				  const struct cd_bk_plan *pl, const char *wn, uint32_t plan_n,
				  char *a, char *b, struct cd_err *err);

/* One line per difference between a set of DDP's buckets and the plan. */
static enum cd_status compare(struct cd_bk_ddp *d, uint32_t which, struct cd_err *err)
{
	const struct cd_bk_set *s = &d->sets[which];
	const struct cd_bk_plan *pl = &d->plan;
	const char *wn = which == CD_BK_REBUILT ? "rebuilt" : "initial";
	enum cd_status st;
	char a[600], b[600];
	uint32_t plan_n = 0;

	/* the plan's buckets with parameters (those DDP could have) */
	for (uint32_t i = 0; i < pl->b.n; i++)
		plan_n += pl->b.v[i].n > 0;
	if (!s->present)
		return CD_OK;
	uint32_t before = d->compared.n;
	if ((st = compare_set(d, s, pl, wn, plan_n, a, b, err)))
		return st;
	for (uint32_t i = before; i < d->compared.n; i++)
		d->compared.v[i].buckets = wn;
	return CD_OK;
}

static enum cd_status compare_set(struct cd_bk_ddp *d, const struct cd_bk_set *s,
				  const struct cd_bk_plan *pl, const char *wn, uint32_t plan_n,
				  char *a, char *b, struct cd_err *err)
{
	enum cd_status st;
	if (s->b.n != plan_n &&
	    (st = add_diff(&d->compared, err, "count", "%s: DDP has %u bucket%s, the plan %u", wn,
			   s->b.n, s->b.n == 1 ? "" : "s", plan_n)))
		return st;
	for (uint32_t i = 0, k = 0; i < s->b.n && k < pl->b.n; i++, k++) {
		while (k < pl->b.n && pl->b.v[k].n == 0)
			k++;
		if (k >= pl->b.n)
			break;
		const struct cd_bk_bucket *x = &s->b.v[i];
		const struct cd_bk_pbucket *y = &pl->b.v[k];
		int64_t xs = cd_bk_set_size(d, x, s->members);
		if (xs >= 0 && xs != y->size &&
		    (st = add_diff(&d->compared, err, "sizes",
				   "%s: bucket %u has %" PRId64 " bytes in DDP, %" PRId64
				   " in the plan", wn, i, xs, y->size)))
			return st;
		if (!s->members)
			continue;
		/* an empty bucket of an empty plan: no order to point into */
		const uint32_t *yp = y->n ? pl->order.v + y->first : NULL;
		uint32_t only_x[CD_LIST_MAX], nx = 0, only_y[CD_LIST_MAX], ny = 0;
		for (uint32_t m = 0; m < x->n; m++)
			if (!member_of(yp, y->n, x->p[m]))
				only_x[nx++] = x->p[m];
		for (uint32_t m = 0; m < y->n; m++)
			if (!member_of(x->p, x->n, yp[m]))
				only_y[ny++] = yp[m];
		if (nx || ny) {
			name_list(a, 600, d, only_x, nx);
			name_list(b, 600, d, only_y, ny);
			if ((st = add_diff(&d->compared, err, "members",
					   "%s: bucket %u: only in DDP's: %s; only in the plan's: %s",
					   wn, i, nx ? a : "none", ny ? b : "none")))
				return st;
		}
		/* the order inside a bucket is DDP's gradient-ready order, which
		 * the plan does not claim to know: not a difference */
	}
	/* DDP's own byte counts against its members */
	for (uint32_t i = 0; s->members && i < s->b.n; i++) {
		int64_t xs = cd_bk_set_size(d, &s->b.v[i], true);
		if (s->b.v[i].size >= 0 && s->b.v[i].size != xs &&
		    (st = add_diff(&d->compared, err, "ddp-sizes",
				   "%s: DDP reports %" PRId64 " bytes for bucket %u, its parameters "
				   "hold %" PRId64, wn, s->b.v[i].size, i, xs)))
			return st;
	}
	return CD_OK;
}

/* Observed all-reduces that do not fit the buckets in force. */
static enum cd_status check_fires(struct cd_bk_ddp *d, struct cd_err *err)
{
	enum cd_status st;
	for (uint32_t i = 0; i < d->steps.n; i++) {
		const struct cd_bk_step *s = &d->steps.v[i];
		for (uint32_t j = 0; j < s->fires.n; j++) {
			const struct cd_bk_fire *f = &s->fires.v[j];
			if (f->set == CD_BK_NOSET || f->index < 0)
				continue;
			const struct cd_bk_set *set = &d->sets[f->set];
			if ((uint64_t)f->index >= set->b.n) {
				if (set->b.n && (st = add_diff(&d->notes, err, "index",
						"region %" PRId64 ": all-reduce of bucket %" PRId64
						", but DDP has %u buckets", s->region, f->index,
						set->b.n)))
					return st;
				continue;
			}
			int64_t want = cd_bk_set_size(d, &set->b.v[f->index], set->members);
			if (f->bytes >= 0 && want >= 0 && f->bytes != want &&
			    (st = add_diff(&d->notes, err, "bytes",
					   "region %" PRId64 ": bucket %" PRId64 " all-reduced %" PRId64
					   " bytes, its %s bucket holds %" PRId64, s->region, f->index,
					   f->bytes, f->set == CD_BK_REBUILT ? "rebuilt" : "initial",
					   want)))
				return st;
		}
	}
	return CD_OK;
}

/* The parameters of set that are in none of its buckets, once. */
static enum cd_status find_unbucketed(struct cd_bk_ddp *d, struct cd_bk_set *set,
				      struct cd_err *err)
{
	bool *in;
	if (!set->present || !set->members)
		return CD_OK;
	if (!(in = calloc(d->params.n + 1, sizeof *in)))
		return nomem(err);
	for (uint32_t k = 0; k < set->b.n; k++)
		for (uint32_t m = 0; m < set->b.v[k].n; m++)
			in[set->b.v[k].p[m]] = true;
	for (uint32_t i = 0; i < d->params.n; i++)
		if (!in[i] && d->params.v[i].requires_grad && !cd_vec_push(&set->unbucketed, i)) {
			free(in);
			return nomem(err);
		}
	free(in);
	return CD_OK;
}

/* Which of DDP's bucket sets each all-reduce used.  DDP rebuilds its
 * buckets once, in a forward after its first backward (the second forward;
 * the third with static_graph; never with find_unused_parameters without
 * static_graph), and the recorder writes the rebuilt buckets before that
 * step's backward.  Where it could learn them only later it says from which
 * region they were in force ("rebuilt_region").  So a backward pass used the
 * rebuilt buckets from that region on, or else when the rebuilt event came
 * before the pass's first all-reduce; every other pass used the initial
 * ones. */
static void assign_sets(struct cd_bk_ddp *d)
{
	const struct cd_bk_set *rb = &d->sets[CD_BK_REBUILT];
	for (uint32_t i = 0; i < d->steps.n; i++) {
		struct cd_bk_step *s = &d->steps.v[i];
		uint32_t gpass = UINT32_MAX, set = CD_BK_NOSET;
		for (uint32_t j = 0; j < s->fires.n; j++) {
			struct cd_bk_fire *f = &s->fires.v[j];
			if (f->gpass != gpass) {  /* a pass's first all-reduce decides */
				gpass = f->gpass;
				set = f->set;
			}
			if (rb->present && rb->from_region >= 0)
				set = s->region >= rb->from_region ? CD_BK_REBUILT : CD_BK_INITIAL;
			if (set == CD_BK_NOSET || !d->sets[set].present)  /* fall back */
				set = d->sets[CD_BK_INITIAL].present ? CD_BK_INITIAL
				      : rb->present		    ? CD_BK_REBUILT
								    : CD_BK_NOSET;
			f->set = set;
		}
	}
}

static enum cd_status analyze(struct cd_bk_trace *t, const struct cd_bk_opts *o,
			      struct cd_err *err)
{
	enum cd_status st;
	for (uint32_t i = 0; i < t->ddp.n; i++) {
		struct cd_bk_ddp *d = &t->ddp.v[i];
		assign_sets(d);
		if ((st = find_unbucketed(d, &d->sets[CD_BK_INITIAL], err)) ||
		    (st = find_unbucketed(d, &d->sets[CD_BK_REBUILT], err)) ||(st = model(t, d, o, err)) || (st = compare(d, CD_BK_INITIAL, err)) ||
		    (st = compare(d, CD_BK_REBUILT, err)) || (st = check_fires(d, err)))
			return st;
	}
	return CD_OK;
}
