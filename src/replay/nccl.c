/* NCCL calls and their join with the replay's collectives.  See nccl.h. */
#include "nccl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static enum cd_status nomem(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

void cd_nccl_free(struct cd_nccl *n)
{
	cd_intern_free(&n->names);
	cd_intern_free(&n->calls_by_key);
	cd_intern_free(&n->tags);
	cd_vec_free(&n->tag_head);
	cd_vec_free(&n->calls);
	cd_vec_free(&n->charges);
	cd_vec_free(&n->mods);
	for (uint32_t i = 0; i < n->regions.n; i++)
		free(n->regions.v[i].label);
	cd_vec_free(&n->regions);
}

static uint32_t name_id(struct cd_nccl *n, struct cd_str s)
{
	return cd_intern(&n->names, s.p ? s.p : "", s.p ? s.n : 0);
}

/* The (comm, seq) key of an event into buf; its length, 0 if it has none. */
static uint32_t call_key(const struct cd_event *e, char *buf, size_t cap)
{
	if (!e->comm.p || !(e->have & CD_F_SEQ) || e->comm.n + 9 > cap)
		return 0;
	memcpy(buf, e->comm.p, e->comm.n);
	buf[e->comm.n] = 0;
	memcpy(buf + e->comm.n + 1, &e->seq, 8);
	return e->comm.n + 9;
}

/* The tag id of (pg, pseq), adding it if add; CD_NOID if absent. */
/* The tag of (group, sequence number), or CD_NOID when none was made. */
static uint32_t find_tag(const struct cd_nccl *n, uint32_t pg, int64_t pseq)
{
	char key[12];
	memcpy(key, &pg, 4);
	memcpy(key + 4, &pseq, 8);
	return cd_intern_find(&n->tags, key, sizeof key);
}

static uint32_t tag_id(struct cd_nccl *n, uint32_t pg, int64_t pseq, bool add)
{
	char key[12];
	if (!add)
		return find_tag(n, pg, pseq);
	memcpy(key, &pg, 4);
	memcpy(key + 4, &pseq, 8);
	uint32_t id = cd_intern(&n->tags, key, sizeof key);
	if (id != CD_NOID && id == n->tag_head.n && !cd_vec_push(&n->tag_head, CD_NOID))
		return CD_NOID;
	return id;
}

static bool is_completion(const struct cd_event *e)
{
	return e->state.p && e->state.n == 9 && memcmp(e->state.p, "completed", 9) == 0;
}

enum cd_status cd_nccl_event(struct cd_nccl *n, const struct cd_event *e, struct cd_err *err)
{
	char key[512];
	uint32_t klen;

	if (e->ev == CD_EV_NCCL_LOST) {
		n->lost += (uint64_t)e->count;
		return CD_OK;
	}
	if (e->ev != CD_EV_NCCL)
		return CD_OK;
	klen = call_key(e, key, sizeof key);
	if (is_completion(e)) {
		uint32_t id = klen ? cd_intern_find(&n->calls_by_key, key, klen) : CD_NOID;
		if (id == CD_NOID || !(e->have & CD_F_DUR))
			n->orphan_done++;
		else
			n->calls.v[id].dur = e->dur;
		return CD_OK;
	}
	struct cd_ncall c = {
		.func = name_id(n, e->func.p ? e->func : (struct cd_str){"unknown", 7}),
		.pg = CD_NOID,
		.bytes = (e->have & CD_F_BYTES) ? e->bytes : -1,
		.dur = (e->have & CD_F_DUR) ? e->dur : -1,
		.nranks = (e->have & CD_F_NRANKS) ? (int32_t)e->nranks : -1,
		.next = CD_NOID,
	};
	if (c.func == CD_NOID)
		return nomem(err);
	if (klen) {
		uint32_t before = n->calls_by_key.count;
		uint32_t id = cd_intern(&n->calls_by_key, key, klen);
		if (id == CD_NOID)
			return nomem(err);
		if (n->calls_by_key.count == before)
			return cd_fail(err, CD_ERR_TRACE,
				       "second nccl call with comm \"%.*s\" and seq %" PRId64,
				       (int)(e->comm.n > 64 ? 64 : e->comm.n), e->comm.p, e->seq);
		/* keys are added in call order only, so id is the call's index;
		 * calls without a key break that, hence the check */
		if (id != n->calls.n)
			return cd_fail(err, CD_ERR_TRACE,
				       "nccl calls without \"comm\" and \"seq\" mixed with calls "
				       "that have them");
	} else {
		if (n->calls_by_key.count)
			return cd_fail(err, CD_ERR_TRACE,
				       "nccl calls without \"comm\" and \"seq\" mixed with calls "
				       "that have them");
	}
	if (e->pg.p && (e->have & CD_F_PSEQ)) {
		c.pg = name_id(n, e->pg);
		c.pseq = e->pseq;
		uint32_t t = c.pg == CD_NOID ? CD_NOID : tag_id(n, c.pg, c.pseq, true);
		if (t == CD_NOID)
			return nomem(err);
		/* prepend; the report walks calls in index order anyway */
		c.next = n->tag_head.v[t];
		n->tag_head.v[t] = n->calls.n;
	}
	if (!cd_vec_push(&n->calls, c))
		return nomem(err);
	return CD_OK;
}

enum cd_status cd_nccl_charge(struct cd_nccl *n, const struct cd_replay *r,
			      const struct cd_event *e, struct cd_err *err)
{
	const uint32_t *par;
	uint32_t npar, pg;

	if (!e->pg.p || !(e->have & CD_F_SEQ) || !r->reporting)
		return CD_OK;
	if (!n->regions.n || n->regions.v[n->regions.n - 1].gen != r->gen) {
		struct cd_nregion reg = {.region = r->region, .gen = r->gen};
		if (r->label != CD_NOID && !(reg.label = strdup(cd_intern_str(&r->strs, r->label))))
			return nomem(err);
		if (!cd_vec_push(&n->regions, reg)) {
			free(reg.label);
			return nomem(err);
		}
	}
	/* only collectives that NCCL calls served are kept: memory grows with
	 * the tagged NCCL calls, not with the trace */
	pg = cd_intern_find(&n->names, e->pg.p, e->pg.n);
	uint32_t tag = pg == CD_NOID ? CD_NOID : tag_id(n, pg, e->seq, false);
	if (tag == CD_NOID) {
		n->unserved++;
		return CD_OK;
	}
	struct cd_ncharge ch = {
		.region = n->regions.n - 1,
		.tag = tag,
		.mods = n->mods.n,
		.bw = e->bw,
	};
	cd_replay_charge_list(r, &par, &npar);
	for (uint32_t i = 0; i <= npar; i++) {
		uint32_t m = i == 0 ? r->cur : par[i - 1];
		if (i > 0 && m == r->cur)
			continue;
		const struct cd_rmod *rm = &r->rm.v[m];
		uint32_t depth = rm->gen == r->gen ? rm->depth : 0;
		if (!cd_vec_push(&n->mods, m) || !cd_vec_push(&n->mods, depth))
			return nomem(err);
		ch.nmods++;
	}
	if (!cd_vec_push(&n->charges, ch))
		return nomem(err);
	return CD_OK;
}

void cd_nccl_served(const struct cd_nccl *n, struct cd_str pg, int64_t seq, uint32_t *ncalls,
		    int64_t *bytes, int64_t *dur)
{
	uint32_t g = pg.p ? cd_intern_find(&n->names, pg.p, pg.n) : CD_NOID;
	uint32_t t = g == CD_NOID ? CD_NOID : find_tag(n, g, seq);

	*ncalls = 0;
	*bytes = *dur = 0;
	for (uint32_t c = t == CD_NOID ? CD_NOID : n->tag_head.v[t]; c != CD_NOID;
	     c = n->calls.v[c].next) {
		const struct cd_ncall *k = &n->calls.v[c];
		(*ncalls)++;
		*bytes = k->bytes < 0 || *bytes < 0 ? -1 : *bytes + k->bytes;
		*dur = k->dur < 0 || *dur < 0 ? -1 : *dur + k->dur;
	}
	if (!*ncalls)
		*bytes = *dur = -1;
}

double cd_nccl_bus_factor(const char *func, int64_t nranks)
{
	double k = nranks > 0 ? (double)nranks : 1;

	if (strcmp(func, "AllReduce") == 0)
		return 2 * (k - 1) / k;
	if (strcmp(func, "AllGather") == 0 || strcmp(func, "ReduceScatter") == 0 ||
	    strcmp(func, "AllToAll") == 0 || strcmp(func, "Gather") == 0 ||
	    strcmp(func, "Scatter") == 0)
		return (k - 1) / k;
	return 1;
}

/* ------------------------------------------------------------- report */

struct agg {
	uint64_t calls, bytes, timed, dur;
	double bus;          /* sum of bytes * bus factor over the timed calls */
	uint64_t tbytes;     /* bytes of the timed calls */
};

static void agg_add(struct agg *a, const struct cd_ncall *c, double factor)
{
	a->calls++;
	if (c->bytes > 0)
		a->bytes += (uint64_t)c->bytes;
	if (c->dur > 0) {
		a->timed++;
		a->dur += (uint64_t)c->dur;
		if (c->bytes > 0) {
			a->tbytes += (uint64_t)c->bytes;
			a->bus += (double)c->bytes * factor;
		}
	}
}

struct sumrow {              /* per (function, ranks) */
	uint32_t func;
	int32_t nranks;
	struct agg a;
};

struct modrow {              /* per (region, module, direction, function) */
	uint32_t region, mod, depth, func;
	bool bw;
	struct agg a;
};

static int cmp_sum(const void *pa, const void *pb)
{
	const struct sumrow *a = pa, *b = pb;
	if (a->func != b->func)
		return a->func < b->func ? -1 : 1;
	return (a->nranks > b->nranks) - (a->nranks < b->nranks);
}

static int cmp_mod(const void *pa, const void *pb)
{
	const struct modrow *a = pa, *b = pb;
	if (a->region != b->region)
		return a->region < b->region ? -1 : 1;
	if (a->mod != b->mod)
		return a->mod < b->mod ? -1 : 1;
	if (a->bw != b->bw)
		return a->bw ? 1 : -1;
	return (a->func > b->func) - (a->func < b->func);
}

/* Find or add a row keyed by key[0..nkey) in (index, rows); the row index. */
static uint32_t row_of(struct cd_intern *index, void **rows, uint32_t *nrows, uint32_t *cap,
		       size_t size, const uint32_t *key, uint32_t nkey, bool *fresh)
{
	uint32_t before = index->count;
	uint32_t id = cd_intern(index, (const char *)key, nkey * 4);
	*fresh = id != CD_NOID && index->count != before;
	if (id == CD_NOID || (*fresh && !cd_vec_grow_(rows, cap, size, *nrows + 1)))
		return CD_NOID;
	if (*fresh)
		memset((char *)*rows + (size_t)(*nrows)++ * size, 0, size);
	return id;
}

static void put_bytes(char *buf, size_t cap, uint64_t b)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	int u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", b);
	else
		snprintf(buf, cap, "%.1f %s", v, unit[u]);
}

static void put_us(char *buf, size_t cap, const struct agg *a)
{
	if (a->timed)
		snprintf(buf, cap, "%.1f", (double)a->dur / 1e3);
	else
		snprintf(buf, cap, "-");
}

/* GB/s = bytes per ns */
static void put_bw(char *buf, size_t cap, double bytes, const struct agg *a)
{
	if (a->timed && a->dur)
		snprintf(buf, cap, "%.2f", bytes / (double)a->dur);
	else
		snprintf(buf, cap, "-");
}

static void json_agg(struct cd_out *o, const struct agg *a, bool bw)
{
	char num[64];
	cd_pj_key(o, "calls");
	cd_pj_int(o, (int64_t)a->calls);
	cd_pj_key(o, "bytes");
	cd_pj_int(o, (int64_t)a->bytes);
	cd_pj_key(o, "timed_calls");
	cd_pj_int(o, (int64_t)a->timed);
	cd_pj_key(o, "time_ns");
	cd_pj_int(o, (int64_t)a->dur);
	if (!bw)
		return;
	cd_pj_key(o, "algbw_gbps");
	if (a->timed && a->dur) {
		snprintf(num, sizeof num, "%.3f", (double)a->tbytes / (double)a->dur);
		cd_pj_raw(o, num, strlen(num));
		cd_pj_key(o, "busbw_gbps");
		snprintf(num, sizeof num, "%.3f", a->bus / (double)a->dur);
		cd_pj_raw(o, num, strlen(num));
	} else {
		cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "busbw_gbps");
		cd_pj_raw(o, "null", 4);
	}
}

static const char *nstr(const struct cd_nccl *n, uint32_t id)
{
	return cd_intern_str(&n->names, id);
}

/* The report's rows and counts, filled by tally_calls and tally_modules. */
struct tally {
	struct cd_intern sidx, midx;
	struct sumrow *sums;
	struct modrow *rows;
	uint32_t nsums, scap, nrows, rcap;
	uint64_t tagged, charged, timed, py_unserved;
};

/* One summary row per (function, ranks) over every NCCL call, and the counts
 * of tagged and timed calls.  False when out of memory. */
static bool tally_calls(struct tally *t, const struct cd_nccl *n)
{
	bool fresh;
	for (uint32_t i = 0; i < n->calls.n; i++) {
		const struct cd_ncall *c = &n->calls.v[i];
		uint32_t key[2] = {c->func, (uint32_t)c->nranks};
		uint32_t id = row_of(&t->sidx, (void **)&t->sums, &t->nsums, &t->scap,
				     sizeof *t->sums, key, 2, &fresh);
		if (id == CD_NOID)
			return false;
		t->sums[id].func = c->func;
		t->sums[id].nranks = c->nranks;
		agg_add(&t->sums[id].a, c, cd_nccl_bus_factor(nstr(n, c->func), c->nranks));
		t->tagged += c->pg != CD_NOID;
		t->timed += c->dur > 0;
	}
	return true;
}

/* One row per (region, module, direction, function): each Python collective's
 * NCCL calls charged to every module it ran under.  Marks the calls charged and
 * counts the collectives that have none.  False when out of memory. */
static bool tally_modules(struct tally *t, struct cd_nccl *n)
{
	bool fresh, oom = false;
	for (uint32_t i = 0; i < n->charges.n && !oom; i++) {
		const struct cd_ncharge *ch = &n->charges.v[i];
		uint32_t first = ch->tag < n->tag_head.n ? n->tag_head.v[ch->tag] : CD_NOID;
		if (first == CD_NOID)
			t->py_unserved++;
		for (uint32_t ci = first; ci != CD_NOID; ci = n->calls.v[ci].next) {
			struct cd_ncall *c = &n->calls.v[ci];
			double f = cd_nccl_bus_factor(nstr(n, c->func), c->nranks);
			if (!c->charged) {
				c->charged = true;
				t->charged++;
			}
			for (uint32_t k = 0; k < ch->nmods; k++) {
				uint32_t key[4] = {ch->region, n->mods.v[ch->mods + 2 * k], ch->bw,
						   c->func};
				uint32_t id = row_of(&t->midx, (void **)&t->rows, &t->nrows, &t->rcap,
						     sizeof *t->rows, key, 4, &fresh);
				if (id == CD_NOID) {
					oom = true;
					break;
				}
				if (fresh) {
					t->rows[id].region = ch->region;
					t->rows[id].mod = key[1];
					t->rows[id].depth = n->mods.v[ch->mods + 2 * k + 1];
					t->rows[id].bw = ch->bw;
					t->rows[id].func = c->func;
				}
				agg_add(&t->rows[id].a, c, f);
			}
		}
	}
	return !oom;
}

/* The "collectives" array of the JSON report: one object per summary row. */
static void json_collectives(struct cd_out *o, const struct cd_nccl *n, const struct tally *t)
{
	cd_pj_key(o, "collectives");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < t->nsums; i++) {
		const struct sumrow *s = &t->sums[i];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "func");
		cd_pj_cstr(o, nstr(n, s->func));
		cd_pj_key(o, "nranks");
		if (s->nranks > 0)
			cd_pj_int(o, s->nranks);
		else
			cd_pj_raw(o, "null", 4);
		json_agg(o, &s->a, true);
		cd_pj_end(o);
	}
	cd_pj_end(o);
}

/* The "regions" array of the JSON report: every region, with its module rows. */
static void json_regions(struct cd_out *o, const struct cd_nccl *n, const struct cd_intern *mods,
			 const struct tally *t)
{
	cd_pj_key(o, "regions");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0, r = 0; r < n->regions.n; r++) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "region");
		cd_pj_int(o, n->regions.v[r].region);
		if (n->regions.v[r].label) {
			cd_pj_key(o, "label");
			cd_pj_cstr(o, n->regions.v[r].label);
		}
		cd_pj_key(o, "modules");
		cd_pj_begin_arr(o);
		for (; i < t->nrows && t->rows[i].region == r; i++) {
			const struct modrow *m = &t->rows[i];
			cd_pj_begin_obj(o);
			cd_pj_key(o, "fqn");
			cd_pj_cstr(o, cd_intern_str(mods, m->mod));
			cd_pj_key(o, "direction");
			cd_pj_cstr(o, m->bw ? "backward" : "forward");
			cd_pj_key(o, "func");
			cd_pj_cstr(o, nstr(n, m->func));
			json_agg(o, &m->a, false);
			cd_pj_end(o);
		}
		cd_pj_end(o);
		cd_pj_end(o);
	}
	cd_pj_end(o);
}

/* The whole JSON document: {"nccl": {counts, collectives, regions}}. */
static void json_report(struct cd_out *o, const struct cd_nccl *n, const struct cd_intern *mods,
			const char *source, const struct tally *t)
{
	cd_pj_begin_obj(o);
	cd_pj_key(o, "nccl");
	cd_pj_begin_obj(o);
	cd_pj_key(o, "source");
	cd_pj_cstr(o, source);
	cd_pj_key(o, "calls");
	cd_pj_int(o, n->calls.n);
	cd_pj_key(o, "tagged_calls");
	cd_pj_int(o, (int64_t)t->tagged);
	cd_pj_key(o, "charged_calls");
	cd_pj_int(o, (int64_t)t->charged);
	cd_pj_key(o, "timed_calls");
	cd_pj_int(o, (int64_t)t->timed);
	cd_pj_key(o, "lost_calls");
	cd_pj_int(o, (int64_t)n->lost);
	cd_pj_key(o, "collectives_without_nccl_calls");
	cd_pj_int(o, (int64_t)t->py_unserved);
	json_collectives(o, n, t);
	json_regions(o, n, mods, t);
	cd_pj_end(o);
	cd_pj_end(o);
	cd_out_str(o, "\n");
}

/* The text header line and the per-collective summary table. */
static void text_collectives(struct cd_out *o, const struct cd_nccl *n, const char *source,
			     const struct tally *t)
{
	char b1[32], b2[32], b3[32], b4[32];
	cd_out_printf(o, "NCCL calls (%s): %u calls, %" PRIu64 " charged to modules, %" PRIu64
			 " with GPU time", source, n->calls.n, t->charged, t->timed);
	if (n->lost)
		cd_out_printf(o, ", %" PRIu64 " NOT RECORDED (the recorder's queue was full or its "
				 "trace not open)", n->lost);
	cd_out_str(o, "\n");
	cd_out_printf(o, "%-16s %6s %8s %12s %12s %13s %13s\n", "Collective", "Ranks", "Calls",
		      "Bytes", "Time (us)", "algbw (GB/s)", "busbw (GB/s)");
	for (uint32_t i = 0; i < t->nsums; i++) {
		const struct agg *a = &t->sums[i].a;
		char ranks[16];
		if (t->sums[i].nranks > 0)
			snprintf(ranks, sizeof ranks, "%d", t->sums[i].nranks);
		else
			snprintf(ranks, sizeof ranks, "-");
		put_bytes(b1, sizeof b1, a->bytes);
		put_us(b2, sizeof b2, a);
		put_bw(b3, sizeof b3, (double)a->tbytes, a);
		put_bw(b4, sizeof b4, a->bus, a);
		cd_out_printf(o, "%-16s %6s %8" PRIu64 " %12s %12s %13s %13s\n",
			      nstr(n, t->sums[i].func), ranks, a->calls, b1, b2, b3, b4);
	}
}

/* The width of the module column of region r's rows from row i on: 40, or
 * the widest indented name. */
static int module_width(const struct cd_intern *mods, const struct tally *t, uint32_t i,
			uint32_t r)
{
	size_t w = 40;
	for (; i < t->nrows && t->rows[i].region == r; i++) {
		const struct modrow *m = &t->rows[i];
		size_t need = (m->depth > 16 ? 16 : m->depth) * 2 +
			      strlen(cd_intern_str(mods, m->mod));
		if (need > w)
			w = need;
	}
	return w > 1024 ? 1024 : (int)w;
}

/* One text table of module traffic per region that has module rows, modules
 * indented by depth. */
static void text_modules(struct cd_out *o, const struct cd_nccl *n, const struct cd_intern *mods,
			 const struct tally *t)
{
	char b1[32], b2[32];
	for (uint32_t i = 0, r = 0; r < n->regions.n; r++) {
		if (i >= t->nrows || t->rows[i].region != r)
			continue;
		cd_out_printf(o, "\nNCCL traffic per module (region %" PRId64,
			      n->regions.v[r].region);
		if (n->regions.v[r].label)
			cd_out_printf(o, ": %s", n->regions.v[r].label);
		cd_out_str(o, ")\n");
		int width = module_width(mods, t, i, r);
		cd_out_printf(o, "%-*s %-9s %-16s %8s %12s %12s\n", width, "Module", "Direction",
			      "Collective", "Calls", "Bytes", "Time (us)");
		for (; i < t->nrows && t->rows[i].region == r; i++) {
			const struct modrow *m = &t->rows[i];
			const char *name = cd_intern_str(mods, m->mod);
			int ind = (int)(m->depth > 16 ? 16 : m->depth) * 2;
			int w = width - ind > 1 ? width - ind : 1;
			put_bytes(b1, sizeof b1, m->a.bytes);
			put_us(b2, sizeof b2, &m->a);
			cd_out_printf(o, "%*s%-*s %-9s %-16s %8" PRIu64 " %12s %12s\n", ind, "", w,
				      name, m->bw ? "backward" : "forward", nstr(n, m->func),
				      m->a.calls, b1, b2);
		}
	}
}

/* The text report: summary table, module tables, and the count of collectives
 * with no NCCL call. */
static void text_report(struct cd_out *o, const struct cd_nccl *n, const struct cd_intern *mods,
			const char *source, const struct tally *t)
{
	text_collectives(o, n, source, t);
	text_modules(o, n, mods, t);
	if (t->py_unserved)
		cd_out_printf(o, "\n%" PRIu64 " collective(s) in the regions have no NCCL call "
				 "tagged with their group and sequence number (another backend, "
				 "or the NCCL recorder was not loaded)\n", t->py_unserved);
}

enum cd_status cd_nccl_report(struct cd_out *o, struct cd_nccl *n, const struct cd_intern *mods,
			      const char *source, bool json, struct cd_err *err)
{
	struct tally t = {.py_unserved = n->unserved};
	bool ok = tally_calls(&t, n) && tally_modules(&t, n);
	if (ok) {
		if (t.nsums)
			qsort(t.sums, t.nsums, sizeof *t.sums, cmp_sum);
		if (t.nrows)
			qsort(t.rows, t.nrows, sizeof *t.rows, cmp_mod);
		if (json)
			json_report(o, n, mods, source, &t);
		else
			text_report(o, n, mods, source, &t);
	}
	free(t.sums);
	free(t.rows);
	cd_intern_free(&t.sidx);
	cd_intern_free(&t.midx);
	return ok ? CD_OK : nomem(err);
}
