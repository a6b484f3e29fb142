#include "ranks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "trace.h"

static const char *const phase_names[] = {"forward", "backward", "recompute"};

/* ---- building one rank's summary ---- */

struct build {
	struct cd_rank_summary *s;
	struct cd_trace_run *tr;
	CD_VEC(int64_t) pg_counter;      /* per pg string id: collectives seen (no seq field) */
	uint64_t *slots;                 /* (module, coll, bw) -> index+1 in s->mods */
	uint32_t nslots;
};

static uint32_t sid(struct cd_rank_summary *s, const char *p, size_t n)
{
	return cd_intern(&s->s, p, (uint32_t)n);
}

static uint32_t sidz(struct cd_rank_summary *s, const char *p)
{
	return sid(s, p, strlen(p));
}

static void on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			  uint32_t coll)
{
	struct build *b = ud;
	struct cd_rank_summary *s = b->s;
	struct cd_crec c = {0};

	c.pg = e->pg.p ? sid(s, e->pg.p, e->pg.n) : sidz(s, "?");
	if (c.pg == CD_NOID)
		return;
	if (c.pg >= b->pg_counter.n) {
		if (!cd_vec_reserve(&b->pg_counter, c.pg + 1))
			return;
		while (b->pg_counter.n <= c.pg)
			b->pg_counter.v[b->pg_counter.n++] = 0;
	}
	b->pg_counter.v[c.pg]++;
	c.seq = (e->have & CD_F_SEQ) ? e->seq : b->pg_counter.v[c.pg];
	c.coll = sidz(s, cd_intern_str(&r->colls, coll));
	c.dtype = e->dtype.p ? sid(s, e->dtype.p, e->dtype.n) : CD_NOID;
	c.has_bytes = (e->have & CD_F_BYTES) != 0;
	c.bytes = e->bytes;
	c.module = sidz(s, cd_intern_str(&r->mods, r->cur));
	c.phase = r->ac ? CD_PH_RECOMPUTE : e->bw ? CD_PH_BACKWARD : CD_PH_FORWARD;
	c.time = (e->have & CD_F_T) ? b->tr->t0 + e->t : -1;
	cd_vec_push(&s->colls, c);
}

static void after_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct build *b = ud;
	struct cd_rank_summary *s = b->s;

	(void)r;
	if (e->ev == CD_EV_PG && e->name.p) {
		uint32_t off = s->pg_ranks.n;
		for (uint32_t i = 0; i < e->nranks_list; i++)
			cd_vec_push(&s->pg_ranks, e->ranks[i]);
		cd_vec_push(&s->pg_names, sid(s, e->name.p, e->name.n));
		cd_vec_push(&s->pg_ranks_off, off);
		cd_vec_push(&s->pg_ranks_n, s->pg_ranks.n - off);
	}
}

static uint64_t mc_hash(int64_t region, uint32_t module, uint32_t coll, bool bw)
{
	uint64_t k = ((uint64_t)module << 33) ^ ((uint64_t)coll << 1) ^ bw ^
		     ((uint64_t)region * 0xC2B2AE3D27D4EB4Full);
	return k * 0x9E3779B97F4A7C15ull;
}

static void modcount_add(struct build *b, int64_t region, uint32_t module, uint32_t coll, bool bw,
			 uint64_t n)
{
	struct cd_rank_summary *s = b->s;
	if ((s->mods.n + 1) * 2 > b->nslots) {
		uint32_t ns = b->nslots ? b->nslots * 2 : 256;
		uint64_t *nt = calloc(ns, sizeof *nt);
		if (!nt)
			return;
		for (uint32_t i = 0; i < s->mods.n; i++) {
			const struct cd_modcount *m = &s->mods.v[i];
			uint32_t h = (uint32_t)(mc_hash(m->region, m->module, m->coll, m->bw) >> 40) &
				     (ns - 1);
			while (nt[h])
				h = (h + 1) & (ns - 1);
			nt[h] = i + 1;
		}
		free(b->slots);
		b->slots = nt;
		b->nslots = ns;
	}
	uint32_t h = (uint32_t)(mc_hash(region, module, coll, bw) >> 40) & (b->nslots - 1);
	while (b->slots[h]) {
		struct cd_modcount *m = &s->mods.v[b->slots[h] - 1];
		if (m->region == region && m->module == module && m->coll == coll && m->bw == bw) {
			m->n += n;
			return;
		}
		h = (h + 1) & (b->nslots - 1);
	}
	struct cd_modcount m = {region, module, coll, bw, n};
	if (cd_vec_push(&s->mods, m))
		b->slots[h] = s->mods.n;
}

static enum cd_status region_done(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	struct build *b = ud;
	(void)err;
	if (r->region_cut)
		return CD_OK;
	cd_vec_push(&b->s->done_regions, r->region);
	for (uint32_t h = 0; h < r->helper.n; h++) {
		uint32_t id = r->helper.v[h];
		const struct cd_rmod *m = cd_replay_mod(r, id);
		uint32_t mod = sidz(b->s, cd_intern_str(&r->mods, id));
		for (int bw = 0; bw < 2; bw++) {
			const cd_countv *v = bw ? &m->bw : &m->fw;
			for (uint32_t i = 0; i < v->n; i++)
				modcount_add(b, r->region, mod,
					     sidz(b->s, cd_intern_str(&r->colls, v->v[i].coll)), bw,
					     v->v[i].n);
		}
	}
	return CD_OK;
}

/* Where the rank is at the end of its trace: the forward stack, a module
 * being recomputed, then the modules whose backward is running. */
static void end_state(struct cd_rank_summary *s, const struct cd_replay *r)
{
	if (r->in_region) {
		for (uint32_t i = 1; i < r->parent_list.n; i++) {
			struct cd_frame f = {sidz(s, cd_intern_str(&r->mods, r->parent_list.v[i])),
					     CD_PH_FORWARD};
			cd_vec_push(&s->stack, f);
		}
		if (r->ac && r->cur != 0) {
			struct cd_frame f = {sidz(s, cd_intern_str(&r->mods, r->cur)), CD_PH_RECOMPUTE};
			cd_vec_push(&s->stack, f);
		}
	}
	for (uint32_t i = 0; i < r->pmembers.n; i++) {
		uint32_t id = r->pmembers.v[i];
		bool fwd = false;
		if (id == 0)
			continue;
		for (uint32_t k = 1; r->in_region && k < r->parent_list.n; k++)
			if (r->parent_list.v[k] == id)
				fwd = true;
		if (!fwd) {
			struct cd_frame f = {sidz(s, cd_intern_str(&r->mods, id)), CD_PH_BACKWARD};
			cd_vec_push(&s->stack, f);
		}
	}
}

void cd_rank_summarize(const char *path, bool general_parser, struct cd_rank_summary *s)
{
	struct build b = {.s = s};
	struct cd_replay rp;
	struct cd_err err = {0};
	struct cd_replay_opts ro = {.region_done = region_done, .on_collective = on_collective,
				    .ud = &b};
	struct cd_trace_run tr = {.general_parser = general_parser, .skip_detail = true,
				  .after_event = after_event, .ud = &b};
	char msg[sizeof err.msg + 64];

	b.tr = &tr;
	s->path = strdup(path);
	if (cd_replay_init(&rp, &ro, &err)) {
		s->error = strdup(err.msg);
		return;
	}
	enum cd_status st = cd_trace_replay(path, &rp, &tr, &err);
	if (st) {
		if (err.line > 0 && err.column > 0)
			snprintf(msg, sizeof msg, "%lld:%lld: %s", err.line, err.column, err.msg);
		else if (err.line > 0)
			snprintf(msg, sizeof msg, "%lld: %s", err.line, err.msg);
		else
			snprintf(msg, sizeof msg, "%s", err.msg);
		s->error = strdup(msg);
	}
	s->cut = tr.cut;
	s->has_rank = tr.has_rank;
	s->rank = tr.rank;
	s->has_world = tr.has_world;
	s->world_size = tr.world_size;
	end_state(s, &rp);
	if (rp.last_op != CD_NOID) {
		s->has_last_op = true;
		s->last_op = sidz(s, cd_intern_str(&rp.ops, rp.last_op));
		s->last_op_module = sidz(s, cd_intern_str(&rp.mods, rp.last_op_mod));
	}
	s->in_region = rp.in_region;
	s->open_region = rp.region;
	if (!st)
		cd_replay_finish(&rp, &err);
	s->events = rp.events;
	s->regions = rp.regions;
	cd_replay_free(&rp);
	cd_vec_free(&b.pg_counter);
	free(b.slots);
}

void cd_rank_summary_free(struct cd_rank_summary *s)
{
	free(s->path);
	free(s->error);
	cd_intern_free(&s->s);
	cd_vec_free(&s->colls);
	cd_vec_free(&s->mods);
	cd_vec_free(&s->done_regions);
	cd_vec_free(&s->stack);
	cd_vec_free(&s->pg_names);
	cd_vec_free(&s->pg_ranks_off);
	cd_vec_free(&s->pg_ranks);
	cd_vec_free(&s->pg_ranks_n);
	memset(s, 0, sizeof *s);
}

uint64_t cd_rank_summary_bytes(const struct cd_rank_summary *s)
{
	return s->s.bytes + (uint64_t)s->colls.cap * sizeof *s->colls.v +
	       (uint64_t)s->mods.cap * sizeof *s->mods.v + (uint64_t)s->stack.cap * sizeof *s->stack.v;
}

/* ---- merging ---- */

enum div_kind { DIV_HANG, DIV_TYPE, DIV_SIZE, DIV_DTYPE };
static const char *const div_names[] = {"hang", "type_mismatch", "size_mismatch", "dtype_mismatch"};

struct divergence {
	enum div_kind kind;
	const char *pg;
	int64_t seq;
	const struct cd_rank_summary *ref;   /* a rank that issued the majority's collective */
	const struct cd_crec *rec;           /* its record */
	CD_VEC(int) ranks;                   /* indexes into the merged rank list */
	CD_VEC(int) odd;
	CD_VEC(const struct cd_crec *) odd_rec;   /* NULL: never reached */
	int64_t time;
};

static const char *str(const struct cd_rank_summary *s, uint32_t id)
{
	return id == CD_NOID ? "" : cd_intern_str(&s->s, id);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int by_rank(const void *a, const void *b)
{
	const struct cd_rank_summary *x = *(const struct cd_rank_summary *const *)a;
	const struct cd_rank_summary *y = *(const struct cd_rank_summary *const *)b;
	int64_t rx = x->has_rank ? x->rank : INT64_MAX, ry = y->has_rank ? y->rank : INT64_MAX;
	if (rx != ry)
		return rx < ry ? -1 : 1;
	return strcmp(x->path, y->path);
}

/* Collectives whose input payload may differ between ranks. */
static bool sizes_may_differ(const char *coll)
{
	static const char *const v[] = {"c10d.alltoall_", "c10d.alltoall_base_", "c10d.gather_",
					"c10d.scatter_", "c10d_functional.all_to_all_single"};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		if (strcmp(v[i], coll) == 0)
			return true;
	return false;
}

struct merge {
	struct cd_rank_summary **r;   /* ranks used, sorted */
	int n;
	CD_VEC(struct divergence) divs;
};

/* The members of a process group, from the first trace that declares it
 * (sorted); NULL with *n = 0 when no trace does (then every rank is). */
static int64_t *pg_members(const struct merge *m, const char *pg, uint32_t *n)
{
	*n = 0;
	for (int i = 0; i < m->n; i++) {
		const struct cd_rank_summary *t = m->r[i];
		for (uint32_t k = 0; k < t->pg_names.n; k++) {
			if (strcmp(str(t, t->pg_names.v[k]), pg) != 0)
				continue;
			uint32_t cnt = t->pg_ranks_n.v[k];
			int64_t *v = malloc((cnt ? cnt : 1) * sizeof *v);
			if (!v)
				return NULL;
			if (cnt)
				memcpy(v, &t->pg_ranks.v[t->pg_ranks_off.v[k]], cnt * sizeof *v);
			qsort(v, cnt, sizeof *v, cmp_i64);
			*n = cnt;
			return v;
		}
	}
	return NULL;
}

static bool member(const int64_t *v, uint32_t n, int64_t rank)
{
	if (!v)
		return true;
	return bsearch(&rank, v, n, sizeof *v, cmp_i64) != NULL;
}

static int cmp_seq(const void *a, const void *b)
{
	const struct cd_crec *x = *(const struct cd_crec *const *)a;
	const struct cd_crec *y = *(const struct cd_crec *const *)b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void match_pg(struct merge *m, const char *pg)
{
	int n = m->n;
	CD_VEC(const struct cd_crec *) *lists = calloc((size_t)n, sizeof *lists);
	uint32_t *cur = calloc((size_t)n, sizeof *cur);
	bool *in = calloc((size_t)n, sizeof *in);
	uint32_t nmem = 0;
	int64_t *mem = pg_members(m, pg, &nmem);
	if (!lists || !cur || !in)
		goto out;
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = m->r[i];
		uint32_t pid = cd_intern_find(&s->s, pg, (uint32_t)strlen(pg));
		in[i] = member(mem, nmem, s->rank);
		if (pid == CD_NOID)
			continue;
		for (uint32_t k = 0; k < s->colls.n; k++)
			if (s->colls.v[k].pg == pid)
				cd_vec_push(&lists[i], &s->colls.v[k]);
		if (lists[i].n)
			qsort(lists[i].v, lists[i].n, sizeof *lists[i].v, cmp_seq);
		in[i] = in[i] || lists[i].n > 0;
	}
	for (;;) {
		/* the next position: the smallest sequence number any member has left */
		int64_t seq = INT64_MAX;
		for (int i = 0; i < n; i++)
			if (in[i] && cur[i] < lists[i].n && lists[i].v[cur[i]]->seq < seq)
				seq = lists[i].v[cur[i]]->seq;
		if (seq == INT64_MAX)
			break;
		/* the majority's collective at this position (ties: lowest rank);
		 * there are few distinct names, so count per distinct name */
		struct { const char *name; int votes, first; } cand[8];
		int ncand = 0, best = -1, best_votes = 0;
		for (int i = 0; i < n; i++) {
			if (!in[i] || cur[i] >= lists[i].n || lists[i].v[cur[i]]->seq != seq)
				continue;
			const char *ci = str(m->r[i], lists[i].v[cur[i]]->coll);
			int k;
			for (k = 0; k < ncand; k++)
				if (strcmp(cand[k].name, ci) == 0)
					break;
			if (k == ncand) {
				if (ncand == 8)
					continue; /* past eight distinct names: not candidates */
				cand[k].name = ci;
				cand[k].votes = 0;
				cand[k].first = i;
				ncand++;
			}
			cand[k].votes++;
		}
		for (int k = 0; k < ncand; k++)
			if (cand[k].votes > best_votes) {
				best = cand[k].first;
				best_votes = cand[k].votes;
			}
		const struct cd_crec *ref = lists[best].v[cur[best]];
		const char *rc = str(m->r[best], ref->coll);
		const char *rd = str(m->r[best], ref->dtype);
		struct divergence d = {.pg = pg, .seq = seq, .ref = m->r[best], .rec = ref,
				       .time = ref->time, .kind = DIV_HANG};
		bool hang = false, type = false, dtype = false, size = false;
		for (int i = 0; i < n; i++) {
			if (!in[i])
				continue;
			const struct cd_crec *c = cur[i] < lists[i].n && lists[i].v[cur[i]]->seq == seq
							  ? lists[i].v[cur[i]] : NULL;
			const struct cd_rank_summary *s = m->r[i];
			bool odd = false;
			if (!c) {
				hang = odd = true;
			} else if (strcmp(str(s, c->coll), rc) != 0) {
				type = odd = true;
			} else if (strcmp(str(s, c->dtype), rd) != 0) {
				dtype = odd = true;
			} else if (!sizes_may_differ(rc) && c->has_bytes && ref->has_bytes &&
				   c->bytes != ref->bytes) {
				size = odd = true;
			}
			if (odd) {
				cd_vec_push(&d.odd, i);
				cd_vec_push(&d.odd_rec, c);
			} else {
				cd_vec_push(&d.ranks, i);
			}
		}
		if (d.odd.n) {
			d.kind = type ? DIV_TYPE : hang ? DIV_HANG : dtype ? DIV_DTYPE : DIV_SIZE;
			(void)size;
			/* later positions of this group are not comparable any more */
			cd_vec_push(&m->divs, d);
			break;
		}
		cd_vec_free(&d.ranks);
		cd_vec_free(&d.odd);
		cd_vec_free(&d.odd_rec);
		for (int i = 0; i < n; i++)
			if (in[i] && cur[i] < lists[i].n && lists[i].v[cur[i]]->seq == seq)
				cur[i]++;
	}
out:
	for (int i = 0; lists && i < n; i++)
		cd_vec_free(&lists[i]);
	free(lists);
	free(cur);
	free(in);
	free(mem);
}

static int cmp_div(const void *a, const void *b)
{
	const struct divergence *x = a, *y = b;
	/* the earliest first; without times, by group and sequence */
	if (x->time >= 0 && y->time >= 0 && x->time != y->time)
		return x->time < y->time ? -1 : 1;
	int c = strcmp(x->pg, y->pg);
	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ---- module rows ---- */

struct modrow {
	const char *module, *coll;
	bool bw;
	uint64_t *counts;   /* per merged rank */
};

struct modrows {
	struct modrow *v;
	uint32_t n, cap;
};

/* Per-module counts summed over the regions every rank finished, the rows
 * where ranks differ. */
static void module_rows(const struct merge *m, struct modrows *rows)
{
	struct cd_intern keys = {0};
	char buf[4096];
	/* the regions every rank finished: sorted, intersected once */
	CD_VEC(int64_t) common = {0};
	for (int i = 0; i < m->n; i++) {
		const struct cd_rank_summary *s = m->r[i];
		int64_t *d = malloc((s->done_regions.n ? s->done_regions.n : 1) * sizeof *d);
		if (!d)
			goto out;
		if (s->done_regions.n)
			memcpy(d, s->done_regions.v, s->done_regions.n * sizeof *d);
		qsort(d, s->done_regions.n, sizeof *d, cmp_i64);
		if (i == 0) {
			for (uint32_t k = 0; k < s->done_regions.n; k++)
				cd_vec_push(&common, d[k]);
		} else {
			uint32_t w = 0;
			for (uint32_t k = 0; k < common.n; k++)
				if (bsearch(&common.v[k], d, s->done_regions.n, sizeof *d, cmp_i64))
					common.v[w++] = common.v[k];
			common.n = w;
		}
		free(d);
	}
	if (common.n)
		qsort(common.v, common.n, sizeof *common.v, cmp_i64);
	for (int i = 0; i < m->n; i++) {
		const struct cd_rank_summary *s = m->r[i];
		for (uint32_t k = 0; k < s->mods.n; k++) {
			const struct cd_modcount *mc = &s->mods.v[k];
			if (!common.n ||
			    !bsearch(&mc->region, common.v, common.n, sizeof *common.v, cmp_i64))
				continue;
			int len = snprintf(buf, sizeof buf, "%s%c%s%c%d", str(s, mc->module), 0,
					   str(s, mc->coll), 0, mc->bw);
			if (len < 0 || (size_t)len >= sizeof buf)
				continue;
			uint32_t before = keys.count;
			uint32_t id = cd_intern(&keys, buf, (uint32_t)len);
			if (id == CD_NOID)
				continue;
			if (id >= before) {
				struct modrow row = {str(s, mc->module), str(s, mc->coll), mc->bw,
						     calloc((size_t)m->n, sizeof(uint64_t))};
				if (!row.counts || !cd_vec_push(rows, row)) {
					free(row.counts);
					continue;
				}
			}
			if (id < rows->n)
				rows->v[id].counts[i] += mc->n;
		}
	}
	/* keep the rows where ranks differ */
	uint32_t w = 0;
	for (uint32_t i = 0; i < rows->n; i++) {
		bool differ = false;
		for (int k = 1; k < m->n; k++)
			if (rows->v[i].counts[k] != rows->v[i].counts[0])
				differ = true;
		if (differ)
			rows->v[w++] = rows->v[i];
		else
			free(rows->v[i].counts);
	}
	rows->n = w;
out:
	cd_vec_free(&common);
	cd_intern_free(&keys);
}

/* ---- output ---- */

static void text_where(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c)
{
	cd_out_printf(o, "%s, in %s", phase_names[c->phase], str(s, c->module));
}

static const struct cd_crec *last_coll(const struct cd_rank_summary *s)
{
	return s->colls.n ? &s->colls.v[s->colls.n - 1] : NULL;
}

static void text_end_state(struct cd_out *o, const struct cd_rank_summary *s)
{
	cd_out_str(o, "      stopped in: ");
	if (!s->stack.n)
		cd_out_str(o, "no module");
	for (uint32_t k = 0; k < s->stack.n; k++)
		cd_out_printf(o, "%s%s (%s)", k ? " > " : "", str(s, s->stack.v[k].module),
			      phase_names[s->stack.v[k].phase]);
	cd_out_str(o, "\n");
	const struct cd_crec *lc = last_coll(s);
	if (lc) {
		cd_out_printf(o, "      last collective: pg %s seq %" PRId64 " %s (", str(s, lc->pg),
			      lc->seq, str(s, lc->coll));
		text_where(o, s, lc);
		cd_out_str(o, ")\n");
	} else {
		cd_out_str(o, "      last collective: none\n");
	}
	if (s->has_last_op)
		cd_out_printf(o, "      last op: %s in %s\n", str(s, s->last_op),
			      str(s, s->last_op_module));
	if (s->in_region)
		cd_out_printf(o, "      (its trace ends inside region %" PRId64 ")\n", s->open_region);
	if (s->cut)
		cd_out_str(o, "      (its trace is cut: the last events before the cut may be lost)\n");
}

static void text_rank_list(struct cd_out *o, const struct merge *m, const int *idx, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		cd_out_printf(o, "%s%" PRId64, k ? "," : "", m->r[idx[k]]->rank);
}

static void text_divergence(struct cd_out *o, const struct merge *m, const struct divergence *d)
{
	cd_out_printf(o, "  %s: pg %s seq %" PRId64 ": %s (", div_names[d->kind], d->pg, d->seq,
		      str(d->ref, d->rec->coll));
	text_where(o, d->ref, d->rec);
	if (d->rec->has_bytes)
		cd_out_printf(o, ", %" PRId64 " bytes %s", d->rec->bytes, str(d->ref, d->rec->dtype));
	cd_out_str(o, ") issued by rank");
	cd_out_str(o, d->ranks.n == 1 ? " " : "s ");
	text_rank_list(o, m, d->ranks.v, d->ranks.n);
	cd_out_str(o, "\n");
	for (uint32_t k = 0; k < d->odd.n; k++) {
		const struct cd_rank_summary *s = m->r[d->odd.v[k]];
		const struct cd_crec *c = d->odd_rec.v[k];
		if (!c) {
			cd_out_printf(o, "    rank %" PRId64 " never reached it\n", s->rank);
			text_end_state(o, s);
			continue;
		}
		cd_out_printf(o, "    rank %" PRId64 " issued %s (", s->rank, str(s, c->coll));
		text_where(o, s, c);
		if (c->has_bytes)
			cd_out_printf(o, ", %" PRId64 " bytes %s", c->bytes, str(s, c->dtype));
		cd_out_str(o, ")\n");
		text_end_state(o, s);
	}
}

/* The keys of a collective record inside an object being written. */
static void json_crec_fields(struct cd_out *o, const struct cd_rank_summary *s,
			     const struct cd_crec *c)
{
	cd_pj_key(o, "collective");
	cd_pj_cstr(o, str(s, c->coll));
	if (c->has_bytes) {
		cd_pj_key(o, "bytes");
		cd_pj_int(o, c->bytes);
	}
	if (c->dtype != CD_NOID) {
		cd_pj_key(o, "dtype");
		cd_pj_cstr(o, str(s, c->dtype));
	}
	cd_pj_key(o, "module");
	cd_pj_cstr(o, str(s, c->module));
	cd_pj_key(o, "phase");
	cd_pj_cstr(o, phase_names[c->phase]);
}

static void json_crec(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c,
		      bool with_pg)
{
	cd_pj_begin_obj(o);
	if (with_pg) {
		cd_pj_key(o, "pg");
		cd_pj_cstr(o, str(s, c->pg));
		cd_pj_key(o, "seq");
		cd_pj_int(o, c->seq);
	}
	json_crec_fields(o, s, c);
	cd_pj_end(o);
}

static void json_end_state(struct cd_out *o, const struct cd_rank_summary *s)
{
	cd_pj_begin_obj(o);
	cd_pj_key(o, "rank");
	cd_pj_int(o, s->rank);
	cd_pj_key(o, "cut");
	cd_pj_bool(o, s->cut);
	cd_pj_key(o, "open_region");
	if (s->in_region)
		cd_pj_int(o, s->open_region);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "stack");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < s->stack.n; k++) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "module");
		cd_pj_cstr(o, str(s, s->stack.v[k].module));
		cd_pj_key(o, "phase");
		cd_pj_cstr(o, phase_names[s->stack.v[k].phase]);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "last_collective");
	const struct cd_crec *lc = last_coll(s);
	if (lc)
		json_crec(o, s, lc, true);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "last_op");
	if (s->has_last_op) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "name");
		cd_pj_cstr(o, str(s, s->last_op));
		cd_pj_key(o, "module");
		cd_pj_cstr(o, str(s, s->last_op_module));
		cd_pj_end(o);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	cd_pj_end(o);
}

int cd_ranks_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n, bool json)
{
	struct cd_rank_summary **all = malloc((size_t)(n ? n : 1) * sizeof *all);
	struct merge m = {0};
	CD_VEC(int) dups = {0};
	CD_VEC(int64_t) missing = {0};
	struct modrows rows = {0};
	int64_t world = 0;
	bool bad = false, cut = false;
	int outcome;

	if (!all)
		return CD_RANKS_BAD;
	memcpy(all, sums, (size_t)n * sizeof *all);
	qsort(all, (size_t)n, sizeof *all, by_rank);
	m.r = malloc((size_t)(n ? n : 1) * sizeof *m.r);
	if (!m.r) {
		free(all);
		return CD_RANKS_BAD;
	}
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = all[i];
		if (s->error)
			bad = true;
		if (s->cut)
			cut = true;
		if (s->has_world && s->world_size > world)
			world = s->world_size;
		if (!s->has_rank) {
			bad = true;
			continue;
		}
		if (m.n && m.r[m.n - 1]->rank == s->rank) {
			cd_vec_push(&dups, i);
			continue;
		}
		m.r[m.n++] = all[i];
	}
	for (int64_t rk = 0, k = 0; rk < world; rk++) {
		while (k < m.n && m.r[k]->rank < rk)
			k++;
		if (k >= m.n || m.r[k]->rank != rk)
			cd_vec_push(&missing, rk);
	}
	/* every process group any rank used, in first-seen order */
	struct cd_intern pgs = {0};
	for (int i = 0; i < m.n; i++)
		for (uint32_t k = 0; k < m.r[i]->colls.n; k++) {
			const char *pg = str(m.r[i], m.r[i]->colls.v[k].pg);
			cd_intern(&pgs, pg, (uint32_t)strlen(pg));
		}
	for (uint32_t p = 0; p < pgs.count; p++)
		match_pg(&m, cd_intern_str(&pgs, p));
	if (m.divs.n > 1)
		qsort(m.divs.v, m.divs.n, sizeof *m.divs.v, cmp_div);
	module_rows(&m, &rows);

	bool differ = m.divs.n || dups.n || missing.n || rows.n;
	outcome = bad ? CD_RANKS_BAD : differ ? CD_RANKS_DIFFER : cut ? CD_RANKS_CUT : CD_RANKS_AGREE;

	/* ranks to describe in detail: the odd ranks of every divergence */
	CD_VEC(int) lag = {0};
	for (uint32_t d = 0; d < m.divs.n; d++)
		for (uint32_t k = 0; k < m.divs.v[d].odd.n; k++) {
			bool seen = false;
			for (uint32_t j = 0; j < lag.n; j++)
				if (lag.v[j] == m.divs.v[d].odd.v[k])
					seen = true;
			if (!seen)
				cd_vec_push(&lag, m.divs.v[d].odd.v[k]);
		}

	if (json) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "world_size");
		cd_pj_int(o, world);
		cd_pj_key(o, "traces");
		cd_pj_begin_arr(o);
		for (int i = 0; i < n; i++) {
			const struct cd_rank_summary *s = all[i];
			cd_pj_begin_obj(o);
			cd_pj_key(o, "rank");
			if (s->has_rank)
				cd_pj_int(o, s->rank);
			else
				cd_pj_raw(o, "null", 4);
			cd_pj_key(o, "path");
			cd_pj_cstr(o, s->path);
			cd_pj_key(o, "cut");
			cd_pj_bool(o, s->cut);
			if (s->error) {
				cd_pj_key(o, "error");
				cd_pj_cstr(o, s->error);
			}
			cd_pj_key(o, "events");
			cd_pj_int(o, (int64_t)s->events);
			cd_pj_key(o, "regions");
			cd_pj_int(o, (int64_t)s->regions);
			cd_pj_key(o, "collectives");
			cd_pj_int(o, s->colls.n);
			cd_pj_end(o);
		}
		cd_pj_end(o);
		cd_pj_key(o, "missing_ranks");
		cd_pj_begin_arr(o);
		for (uint32_t i = 0; i < missing.n; i++)
			cd_pj_int(o, missing.v[i]);
		cd_pj_end(o);
		cd_pj_key(o, "duplicate_ranks");
		cd_pj_begin_arr(o);
		for (uint32_t i = 0; i < dups.n; i++) {
			const struct cd_rank_summary *s = all[dups.v[i]];
			cd_pj_begin_obj(o);
			cd_pj_key(o, "rank");
			cd_pj_int(o, s->rank);
			cd_pj_key(o, "paths");
			cd_pj_begin_arr(o);
			for (int k = 0; k < m.n; k++)
				if (m.r[k]->rank == s->rank)
					cd_pj_cstr(o, m.r[k]->path);   /* the one used */
			cd_pj_cstr(o, s->path);                        /* the one left out */
			cd_pj_end(o);
			cd_pj_end(o);
		}
		cd_pj_end(o);
		cd_pj_key(o, "agree");
		cd_pj_bool(o, !differ && !bad);
		cd_pj_key(o, "divergences");
		cd_pj_begin_arr(o);
		for (uint32_t d = 0; d < m.divs.n; d++) {
			const struct divergence *dv = &m.divs.v[d];
			cd_pj_begin_obj(o);
			cd_pj_key(o, "kind");
			cd_pj_cstr(o, div_names[dv->kind]);
			cd_pj_key(o, "pg");
			cd_pj_cstr(o, dv->pg);
			cd_pj_key(o, "seq");
			cd_pj_int(o, dv->seq);
			cd_pj_key(o, "collective");
			cd_pj_cstr(o, str(dv->ref, dv->rec->coll));
			if (dv->rec->has_bytes) {
				cd_pj_key(o, "bytes");
				cd_pj_int(o, dv->rec->bytes);
			}
			cd_pj_key(o, "module");
			cd_pj_cstr(o, str(dv->ref, dv->rec->module));
			cd_pj_key(o, "phase");
			cd_pj_cstr(o, phase_names[dv->rec->phase]);
			cd_pj_key(o, "ranks");
			cd_pj_begin_arr(o);
			for (uint32_t k = 0; k < dv->ranks.n; k++)
				cd_pj_int(o, m.r[dv->ranks.v[k]]->rank);
			cd_pj_end(o);
			cd_pj_key(o, "odd_ranks");
			cd_pj_begin_arr(o);
			for (uint32_t k = 0; k < dv->odd.n; k++)
				cd_pj_int(o, m.r[dv->odd.v[k]]->rank);
			cd_pj_end(o);
			cd_pj_key(o, "detail");
			cd_pj_begin_arr(o);
			for (uint32_t k = 0; k < dv->odd.n; k++) {
				const struct cd_rank_summary *s = m.r[dv->odd.v[k]];
				const struct cd_crec *c = dv->odd_rec.v[k];
				if (!c) {
					cd_pj_begin_obj(o);
					cd_pj_key(o, "rank");
					cd_pj_int(o, s->rank);
					cd_pj_key(o, "reached");
					cd_pj_bool(o, false);
					cd_pj_end(o);
					continue;
				}
				/* the record, with the rank first */
				cd_pj_begin_obj(o);
				cd_pj_key(o, "rank");
				cd_pj_int(o, s->rank);
				cd_pj_key(o, "reached");
				cd_pj_bool(o, true);
				json_crec_fields(o, s, c);
				cd_pj_end(o);
			}
			cd_pj_end(o);
			cd_pj_end(o);
		}
		cd_pj_end(o);
		cd_pj_key(o, "lagging");
		cd_pj_begin_arr(o);
		for (uint32_t k = 0; k < lag.n; k++)
			json_end_state(o, m.r[lag.v[k]]);
		cd_pj_end(o);
		cd_pj_key(o, "modules");
		cd_pj_begin_arr(o);
		for (uint32_t i = 0; i < rows.n; i++) {
			cd_pj_begin_obj(o);
			cd_pj_key(o, "module");
			cd_pj_cstr(o, rows.v[i].module);
			cd_pj_key(o, "direction");
			cd_pj_cstr(o, rows.v[i].bw ? "backward" : "forward");
			cd_pj_key(o, "collective");
			cd_pj_cstr(o, rows.v[i].coll);
			cd_pj_key(o, "counts");
			cd_pj_begin_obj(o);
			for (int k = 0; k < m.n; k++) {
				char key[24];
				snprintf(key, sizeof key, "%" PRId64, m.r[k]->rank);
				cd_pj_key(o, key);
				cd_pj_int(o, (int64_t)rows.v[i].counts[k]);
			}
			cd_pj_end(o);
			cd_pj_end(o);
		}
		cd_pj_end(o);
		cd_pj_end(o);
		cd_out_write(o, "\n", 1);
	} else {
		cd_out_printf(o, "%d trace%s, world size %" PRId64 "\n", n, n == 1 ? "" : "s", world);
		for (int i = 0; i < n; i++) {
			const struct cd_rank_summary *s = all[i];
			if (s->has_rank)
				cd_out_printf(o, "  rank %-4" PRId64, s->rank);
			else
				cd_out_str(o, "  rank ?   ");
			cd_out_printf(o, " %s: %" PRIu64 " events, %" PRIu64 " regions, %u collectives",
				      s->path, s->events, s->regions, s->colls.n);
			if (s->error)
				cd_out_printf(o, "; error: %s", s->error);
			else if (!s->has_rank)
				cd_out_str(o, "; no rank in its meta event: left out");
			else if (s->cut)
				cd_out_str(o, "; cut");
			cd_out_str(o, "\n");
		}
		if (missing.n) {
			cd_out_str(o, "missing ranks: ");
			for (uint32_t i = 0; i < missing.n; i++)
				cd_out_printf(o, "%s%" PRId64, i ? "," : "", missing.v[i]);
			cd_out_str(o, "\n");
		}
		for (uint32_t i = 0; i < dups.n; i++)
			cd_out_printf(o, "duplicate rank %" PRId64 ": %s (left out)\n", all[dups.v[i]]->rank,
				      all[dups.v[i]]->path);
		if (m.divs.n) {
			cd_out_str(o, "\nFIRST DIVERGENCE\n");
			text_divergence(o, &m, &m.divs.v[0]);
		}
		if (m.divs.n > 1) {
			cd_out_str(o, "\nOTHER DIVERGENCES\n");
			for (uint32_t d = 1; d < m.divs.n; d++)
				text_divergence(o, &m, &m.divs.v[d]);
		}
		if (rows.n) {
			cd_out_str(o, "\nMODULES WHERE RANKS DIFFER (collective counts)\n");
			cd_out_str(o, "  module / direction / collective");
			for (int k = 0; k < m.n; k++)
				cd_out_printf(o, "  rank %" PRId64, m.r[k]->rank);
			cd_out_str(o, "\n");
			for (uint32_t i = 0; i < rows.n; i++) {
				cd_out_printf(o, "  %s %s %s", rows.v[i].module,
					      rows.v[i].bw ? "backward" : "forward", rows.v[i].coll);
				for (int k = 0; k < m.n; k++)
					cd_out_printf(o, "  %" PRIu64, rows.v[i].counts[k]);
				cd_out_str(o, "\n");
			}
		}
		if (!differ && !bad)
			cd_out_printf(o, "\nall ranks agree%s\n",
				      cut ? " on what their traces hold (some are cut)" : "");
	}

	for (uint32_t d = 0; d < m.divs.n; d++) {
		cd_vec_free(&m.divs.v[d].ranks);
		cd_vec_free(&m.divs.v[d].odd);
		cd_vec_free(&m.divs.v[d].odd_rec);
	}
	for (uint32_t i = 0; i < rows.n; i++)
		free(rows.v[i].counts);
	cd_vec_free(&rows);
	cd_vec_free(&m.divs);
	cd_vec_free(&lag);
	cd_vec_free(&dups);
	cd_vec_free(&missing);
	cd_intern_free(&pgs);
	free(m.r);
	free(all);
	return outcome;
}
