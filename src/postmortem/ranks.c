#include "ranks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../replay/replay.h"
#include "../replay/trace.h"

const char *const cd_phase_names[] = {"forward", "backward", "recompute"};
const char *const cd_end_names[] = {"closed", "abrupt", "cut", "empty", "error",
				     "exception", "exited", "signal", "other", "killed"};

/* An end event's message is kept to its first line, at most this many
 * bytes (then "..."). */
#define END_MSG_MAX 160

/* ---- building one rank's summary ---- */

struct build {
	struct cd_rank_summary *s;
	struct cd_trace_run *tr;
	const struct cd_rank_hooks *h;   /* the caller's, called after ours; may be NULL */
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

static void summary_collective(struct build *b, const struct cd_replay *r,
			       const struct cd_event *e, uint32_t coll)
{
	struct cd_rank_summary *s = b->s;
	struct cd_crec c = {0};

	if (s->has_end)
		return;   /* after the end event: an error (after_event) */
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
	c.time = (e->have & CD_F_T) && b->tr->t0 ? b->tr->t0 + e->t : -1;
	c.region = r->in_region ? r->region : -1;
	if (s->rgn.n && r->in_region && s->rgn.v[s->rgn.n - 1].region == r->region)
		s->rgn.v[s->rgn.n - 1].colls++;
	cd_vec_push(&s->colls, c);
}

static void end_state(struct cd_rank_summary *s, const struct cd_replay *r);

/* The first line of msg, at most END_MSG_MAX bytes (cut at a UTF-8
 * character boundary), "..." when anything was left out. */
static uint32_t first_line(struct cd_rank_summary *s, struct cd_str msg)
{
	char buf[END_MSG_MAX + 4];
	uint32_t n = 0;
	while (n < msg.n && msg.p[n] != '\n' && msg.p[n] != '\r')
		n++;
	bool more = n < msg.n;
	while (n > 0 && (msg.p[n - 1] == ' ' || msg.p[n - 1] == '\t'))
		n--;
	if (n > END_MSG_MAX) {
		n = END_MSG_MAX;
		while (n > 0 && ((unsigned char)msg.p[n] & 0xC0) == 0x80)
			n--;   /* msg.p[n] starts the first character left out */
		more = true;
	}
	/* other control characters (a terminal's escapes) become spaces */
	for (uint32_t k = 0; k < n; k++)
		buf[k] = (unsigned char)msg.p[k] < 0x20 || msg.p[k] == 0x7f ? ' ' : msg.p[k];
	if (more) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	return sid(s, buf, n);
}

/* The end event: how the process ended, and where the rank was then (the
 * summary stops here: what follows is an error). */
static void on_end(struct build *b, const struct cd_event *e, const struct cd_replay *r,
		   int64_t t)
{
	struct cd_rank_summary *s = b->s;
	s->has_end = true;
	s->end_line = b->tr->line;
	s->end_time = t;
	s->end_how = first_line(s, e->how);
	s->end_exc = e->exc.p ? first_line(s, e->exc) : CD_NOID;
	s->end_msg = e->msg.p ? first_line(s, e->msg) : CD_NOID;
	s->end_signame = e->name.p && e->name.n ? first_line(s, e->name) : CD_NOID;
	s->has_code = (e->have & CD_F_CODE) != 0;
	s->end_code = e->code;
	s->end_signal = (e->have & CD_F_SIGNAL) ? e->signal : 0;
	end_state(s, r);
	s->in_region = r->in_region;
	s->open_region = r->region;
	if (r->last_op != CD_NOID) {
		s->has_last_op = true;
		s->last_op = sidz(s, cd_intern_str(&r->ops, r->last_op));
		s->last_op_module = sidz(s, cd_intern_str(&r->mods, r->last_op_mod));
	}
}

static void summary_event(struct build *b, const struct cd_event *e, const struct cd_replay *r)
{
	struct cd_rank_summary *s = b->s;
	char msg[160];

	if (s->has_end) {
		if (!s->error) {
			snprintf(msg, sizeof msg, "%lld: %s event after the end event of line %lld",
				 b->tr->line, cd_ev_name(e->ev), (long long)s->end_line);
			s->error = strdup(msg);
		}
		return;
	}
	int64_t t = (e->have & CD_F_T) && b->tr->t0 ? b->tr->t0 + e->t : -1;
	if (t >= 0)
		s->last_time = t;
	if (e->ev == CD_EV_META)
		s->ends = e->ends;
	if (e->ev == CD_EV_END)
		on_end(b, e, r, t);
	if (e->ev == CD_EV_REGION_ENTER) {
		struct cd_rregion g = {.region = e->region, .label = CD_NOID, .t_enter = t,
				       .t_exit = -1};
		if (e->label.p)
			g.label = sid(s, e->label.p, e->label.n);
		cd_vec_push(&s->rgn, g);
	} else if (e->ev == CD_EV_REGION_EXIT && s->rgn.n &&
		   s->rgn.v[s->rgn.n - 1].region == e->region) {
		s->rgn.v[s->rgn.n - 1].done = true;
		s->rgn.v[s->rgn.n - 1].t_exit = t;
	}
	if (e->ev == CD_EV_TRIM) {
		if (e->region > s->trim_region)
			s->trim_region = e->region;
		if (e->pg.p && (e->have & CD_F_SEQ)) {
			uint32_t pg = sid(s, e->pg.p, e->pg.n);
			uint32_t k = 0;
			while (k < s->trim_pg.n && s->trim_pg.v[k] != pg)
				k++;
			if (k == s->trim_pg.n) {
				cd_vec_push(&s->trim_pg, pg);
				cd_vec_push(&s->trim_seq, e->seq);
			} else if (e->seq > s->trim_seq.v[k]) {
				s->trim_seq.v[k] = e->seq;
			}
		}
	}
	if (e->ev == CD_EV_PG && e->name.p)
		cd_rank_add_pg(s, sid(s, e->name.p, e->name.n), e->ranks, e->nranks_list);
}

/* The replay's callbacks: the summary's, then the caller's hooks. */
static void on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			  uint32_t coll)
{
	struct build *b = ud;
	summary_collective(b, r, e, coll);
	if (b->h && b->h->on_collective)
		b->h->on_collective(b->h->ud, r, e, coll);
}

static void after_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct build *b = ud;
	summary_event(b, e, r);
	if (b->h && b->h->after_event)
		b->h->after_event(b->h->ud, e, r);
}

bool cd_rank_add_pg(struct cd_rank_summary *s, uint32_t name, const int64_t *ranks, uint32_t n)
{
	uint32_t off = s->pg_runs.n;
	for (uint32_t i = 0; i < n;) {
		struct cd_rrun r = {ranks[i], 0, 1};
		/* a run only of ranks a trace can hold (0 .. CD_INT_MAX): its
		 * step and last member cannot overflow */
		if (i + 1 < n && ranks[i + 1] > ranks[i] && ranks[i] >= 0 &&
		    ranks[i + 1] <= CD_INT_MAX) {
			r.step = ranks[i + 1] - ranks[i];
			while (i + r.n < n && ranks[i + r.n] <= CD_INT_MAX &&
			       ranks[i + r.n] > ranks[i + r.n - 1] &&
			       ranks[i + r.n] - ranks[i + r.n - 1] == r.step)
				r.n++;
		}
		if (!cd_vec_push(&s->pg_runs, r)) {
			s->pg_runs.n = off;
			return false;
		}
		i += r.n;
	}
	if (!cd_vec_reserve(&s->pg_names, s->pg_names.n + 1) ||
	    !cd_vec_reserve(&s->pg_runs_off, s->pg_runs_off.n + 1) ||
	    !cd_vec_reserve(&s->pg_runs_n, s->pg_runs_n.n + 1)) {
		s->pg_runs.n = off;
		return false;
	}
	s->pg_names.v[s->pg_names.n++] = name;
	s->pg_runs_off.v[s->pg_runs_off.n++] = off;
	s->pg_runs_n.v[s->pg_runs_n.n++] = s->pg_runs.n - off;
	return true;
}

uint64_t cd_rank_pg_size(const struct cd_rank_summary *s, uint32_t k)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < s->pg_runs_n.v[k]; i++)
		n += s->pg_runs.v[s->pg_runs_off.v[k] + i].n;
	return n;
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
	if (r->region_cut || b->s->has_end)
		return CD_OK;
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
		/* a module a forward left in `parents` (an exception cut that
		 * forward short: its forward hook never came) is in forward */
		if (!fwd) {
			struct cd_frame f = {sidz(s, cd_intern_str(&r->mods, id)),
					     r->pfw.v[id] > 0 ? CD_PH_FORWARD : CD_PH_BACKWARD};
			cd_vec_push(&s->stack, f);
		}
	}
}

/* The end state an end event gives. */
static enum cd_rank_end end_how(const struct cd_rank_summary *s)
{
	const char *how = cd_rank_str(s, s->end_how);
	if (strcmp(how, "exit") == 0)
		return s->has_code && s->end_code != 0 ? CD_END_EXITED : CD_END_CLOSED;
	if (strcmp(how, "exception") == 0)
		return CD_END_EXCEPTION;
	if (strcmp(how, "signal") == 0)
		return CD_END_SIGNAL;
	return CD_END_OTHER;
}

bool cd_rank_died(const struct cd_rank_summary *s)
{
	switch (s->end) {
	case CD_END_EXCEPTION:
	case CD_END_EXITED:
	case CD_END_SIGNAL:
	case CD_END_OTHER:
	case CD_END_KILLED:
		return true;
	case CD_END_CUT:
		return s->ends && !s->has_end;   /* killed mid-write */
	default:
		return false;
	}
}

/* A number of 1 to 9 digits from p up to end (or the first non-digit):
 * its value, or -1. */
static int64_t name_digits(const char *p, const char *end)
{
	int64_t v = 0;
	const char *q = p;
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		if (q - p == 9)
			return -1;
		v = v * 10 + (*q - '0');
	}
	return q > p ? v : -1;
}

bool cd_rank_from_name(const char *path, unsigned how, int64_t *rank)
{
	static const char *const exts[] = {".nccl.zst", ".nccl.jsonl", ".zst", ".jsonl", ".json",
					   ".pkl", ".pickle", ".cdsum"};
	if (!path)
		return false;
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	const char *end = b + strlen(b), *r = strstr(b, "rank");
	int64_t v = -1;
	if ((how & CD_RANK_NAME_WORD) && r)
		v = name_digits(r + 4, end);
	if (v < 0 && (how & CD_RANK_NAME_TAIL)) {
		for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
			size_t k = strlen(exts[i]);
			if ((size_t)(end - b) > k && strcmp(end - k, exts[i]) == 0) {
				end -= k;
				break;
			}
		}
		const char *p = end;
		while (p > b && p[-1] >= '0' && p[-1] <= '9')
			p--;
		v = name_digits(p, end);
	}
	if (v < 0)
		return false;
	*rank = v;
	return true;
}

void cd_rank_summarize(const char *path, bool general_parser, struct cd_rank_summary *s)
{
	cd_rank_summarize_with(path, general_parser, NULL, s, NULL);
}

enum cd_status cd_rank_summarize_with(const char *path, bool general_parser,
				      const struct cd_rank_hooks *h, struct cd_rank_summary *s,
				      struct cd_err *errp)
{
	struct build b = {.s = s, .h = h};
	struct cd_replay rp;
	struct cd_err err = {0};
	struct cd_replay_opts ro = {.region_done = region_done, .on_collective = on_collective,
				    .ud = &b};
	struct cd_trace_run tr = {.general_parser = general_parser, .skip_detail = true,
				  .after_event = after_event, .ud = &b};
	char msg[sizeof err.msg + 64];

	b.tr = &tr;
	s->last_time = -1;
	s->end_time = -1;
	s->end_how = s->end_exc = s->end_msg = s->end_signame = CD_NOID;
	s->path = strdup(path);
	enum cd_status st = cd_replay_init(&rp, &ro, &err);
	if (st) {
		s->error = strdup(err.msg);
		if (errp)
			*errp = err;
		return st;
	}
	st = cd_trace_replay(path, &rp, &tr, &err);
	if (errp)
		*errp = err;
	if (st && !s->error) {   /* the first error in the file is the one told */
		if (err.line > 0 && err.column > 0)
			snprintf(msg, sizeof msg, "%lld:%lld: %s", err.line, err.column, err.msg);
		else if (err.line > 0)
			snprintf(msg, sizeof msg, "%lld: %s", err.line, err.msg);
		else
			snprintf(msg, sizeof msg, "%s", err.msg);
		s->error = strdup(msg);
	}
	s->cut = tr.cut;
	s->cut_first = tr.cut && !tr.seen_meta;
	s->t0 = tr.t0;
	s->has_rank = tr.has_rank;
	s->rank = tr.rank;
	s->has_world = tr.has_world;
	s->world_size = tr.world_size;
	if (!s->has_end) {   /* else taken at the end event */
		end_state(s, &rp);
		if (rp.last_op != CD_NOID) {
			s->has_last_op = true;
			s->last_op = sidz(s, cd_intern_str(&rp.ops, rp.last_op));
			s->last_op_module = sidz(s, cd_intern_str(&rp.mods, rp.last_op_mod));
		}
		s->in_region = rp.in_region;
		s->open_region = rp.region;
	}
	if (!tr.seen_meta && (tr.cut || (st && strncmp(err.msg, "empty trace", 11) == 0))) {
		/* nothing to read: an empty file or one cut before its first line */
		s->end = CD_END_EMPTY;
		s->rank_from_name = cd_rank_from_name(path, CD_RANK_NAME_WORD, &s->rank);
	} else if ((st && !tr.cut) || s->error) {
		s->end = CD_END_ERROR;   /* unreadable, or events after the end event */
	} else if (s->has_end) {
		s->end = end_how(s);
	} else if (tr.cut) {
		s->end = CD_END_CUT;
	} else if (s->ends) {
		s->end = CD_END_KILLED;   /* its recorder would have written an end event */
	} else {
		s->end = s->in_region ? CD_END_ABRUPT : CD_END_CLOSED;
	}
	if (!st)
		cd_replay_finish(&rp, &err);
	s->events = rp.events;
	s->regions = rp.regions;
	s->rgn_sorted = true;
	for (uint32_t k = 1; k < s->rgn.n; k++)
		if (s->rgn.v[k].region < s->rgn.v[k - 1].region)
			s->rgn_sorted = false;
	cd_replay_free(&rp);
	cd_vec_free(&b.pg_counter);
	free(b.slots);
	return st;
}

void cd_rank_summary_free(struct cd_rank_summary *s)
{
	free(s->path);
	free(s->error);
	cd_intern_free(&s->s);
	cd_vec_free(&s->colls);
	if (!s->mods_borrowed)
		cd_vec_free(&s->mods);
	cd_vec_free(&s->rgn);
	cd_vec_free(&s->stack);
	cd_vec_free(&s->pg_names);
	cd_vec_free(&s->pg_runs_off);
	cd_vec_free(&s->pg_runs_n);
	cd_vec_free(&s->pg_runs);
	cd_vec_free(&s->trim_pg);
	cd_vec_free(&s->trim_seq);
	cd_vec_free(&s->fr);
	cd_vec_free(&s->frames);
	cd_vec_free(&s->pg_status);
	free(s->fr_path);
	cd_rank_summary_free_extra(s);
	for (uint32_t i = 0; i < s->nset; i++)
		cd_rank_summary_free(&s->set[i]);
	free(s->set);
	memset(s, 0, sizeof *s);
}

void cd_rank_summary_free_extra(struct cd_rank_summary *s)
{
	if (s->free_extra)
		s->free_extra(s->extra);
	s->extra = NULL;
	s->free_extra = NULL;
}

uint64_t cd_rank_summary_bytes(const struct cd_rank_summary *s)
{
	uint64_t b = 0;
	for (uint32_t i = 0; i < s->nset; i++)
		b += cd_rank_summary_bytes(&s->set[i]);
	return b + s->s.bytes + (uint64_t)s->colls.cap * sizeof *s->colls.v +
	       (s->mods_borrowed ? 0 : (uint64_t)s->mods.cap * sizeof *s->mods.v) +
	       (uint64_t)s->stack.cap * sizeof *s->stack.v +
	       (uint64_t)s->rgn.cap * sizeof *s->rgn.v + (uint64_t)s->fr.cap * sizeof *s->fr.v +
	       (uint64_t)s->frames.cap * sizeof *s->frames.v +
	       (uint64_t)s->pg_status.cap * sizeof *s->pg_status.v +
	       (uint64_t)s->pg_runs.cap * sizeof *s->pg_runs.v +
	       (uint64_t)(s->pg_names.cap + s->pg_runs_off.cap + s->pg_runs_n.cap) * sizeof(uint32_t);
}

const char *cd_rank_str(const struct cd_rank_summary *s, uint32_t id)
{
	return id == CD_NOID || id >= s->s.count ? "" : cd_intern_str(&s->s, id);
}

const char *cd_rank_label(const struct cd_rank_summary *s, int64_t region)
{
	for (uint32_t i = s->rgn.n; i-- > 0;)
		if (s->rgn.v[i].region == region)
			return s->rgn.v[i].label == CD_NOID ? NULL : cd_intern_str(&s->s, s->rgn.v[i].label);
	return NULL;
}

