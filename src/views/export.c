/* Chrome trace-event JSON of a job's traces (the layout is in export.h). */
#include "export.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../postmortem/findings_text.h"
#include "../util/intern.h"
#include "timeline.h"
#include "../util/vec.h"

/* Threads of a rank's process (tids) and their order in the viewer. */
enum {
	TID_FINDINGS = 1,
	TID_REGIONS = 2,
	TID_COLLS = 3,
	TID_NCCL = 4,
	TID_FORWARD = 1000,   /* + lane */
	TID_RECOMPUTE = 2000, /* + lane */
	TID_BACKWARD = 3000,  /* + lane */
	TID_GPU = 4000,       /* + lane */
};
enum { PH_FW = CD_TL_FW, PH_RC = CD_TL_RC, PH_BW = CD_TL_BW, PH_N };
static const char *const ph_name[PH_N] = {"forward", "recompute", "backward"};
static const int ph_tid[PH_N] = {TID_FORWARD, TID_RECOMPUTE, TID_BACKWARD};
#define LANE_NONE 0xFFFFu
#define PENDING_MAX 4096u

/* One module span: ns on the export's clock (t + the trace's offset). */
struct span {
	int64_t start, end;
	uint32_t name, type;   /* ids in rk.names; type CD_NOID: none */
	uint32_t ord;          /* opening order (ties) */
	uint16_t lane;
	bool open, unclosed;
};

/* Indexes in a phase's spans. */
struct idxv {
	uint32_t *v;
	uint32_t n, cap;
};

struct phase {
	CD_VEC(struct span) buf;    /* the spans of this pass, open or closed */
	struct idxv open;           /* indexes in buf of the open ones, oldest first */
	struct idxv stack[CD_EXPORT_LANE_MAX];   /* layout scratch, per lane */
	int64_t floor[CD_EXPORT_LANE_MAX];      /* per lane: the last time written */
	bool named[CD_EXPORT_LANE_MAX];
	uint32_t nlanes;                        /* lanes written to so far */
};

/* An NCCL call waiting for its completion. */
struct pend {
	uint32_t comm, func;   /* ids in rk.names */
	int64_t seq, bytes;
};

/* One trace being written. */
struct rk {
	struct cd_export *x;
	const struct cd_rank_summary *s;
	int64_t pid;
	int64_t off;             /* added to a record's t: ns on the export's clock */
	bool sibling;            /* the NCCL-side trace's records */
	const struct cd_intern *names;   /* the timeline's strings */
	struct phase ph[PH_N];
	bool region_open;
	int64_t region_last;     /* last ts written on the regions thread */
	bool named_fixed[5];     /* TID_FINDINGS .. TID_NCCL named */
	bool gpu_named[CD_EXPORT_LANE_MAX];
	CD_VEC(int64_t) gpu_end; /* per GPU lane: where its last slice ends */
	CD_VEC(struct pend) pend;
	bool oom;
};

/* ---- writing ---- */

/* ns as microseconds with three decimals: "-12.345". */
static void put_us(struct cd_out *o, int64_t ns)
{
	uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
	char tmp[32], *e = tmp + sizeof tmp, *p = e;
	uint64_t frac = u % 1000, whole = u / 1000;
	*--p = (char)('0' + frac % 10);
	*--p = (char)('0' + frac / 10 % 10);
	*--p = (char)('0' + frac / 100);
	*--p = '.';
	do {
		*--p = (char)('0' + whole % 10);
		whole /= 10;
	} while (whole);
	if (ns < 0)
		*--p = '-';
	cd_out_write(o, p, (size_t)(e - p));
}

static void put_lit(struct cd_out *o, const char *s)
{
	cd_out_str(o, s);
}

/* ,"key": */
static void put_key(struct cd_out *o, bool *first, const char *key)
{
	if (!*first)
		cd_out_write(o, ",", 1);
	*first = false;
	cd_out_write(o, "\"", 1);
	cd_out_str(o, key);
	cd_out_write(o, "\":", 2);
}

static void kv_str(struct cd_out *o, bool *first, const char *key, const char *p, size_t n)
{
	put_key(o, first, key);
	cd_pj_escape(o, p, n);
}

static void kv_cstr(struct cd_out *o, bool *first, const char *key, const char *s)
{
	kv_str(o, first, key, s, strlen(s));
}

static void kv_int(struct cd_out *o, bool *first, const char *key, int64_t v)
{
	put_key(o, first, key);
	cd_out_i64(o, v);
}

/* Start an event: separator, {"ph":..,"cat":..,"pid":..,"tid":.. and, for
 * all but metadata, "ts".  The caller adds fields and the closing brace. */
static void ev_head(struct rk *k, const char *ph, const char *cat, int64_t tid, bool has_ts,
		    int64_t ts)
{
	struct cd_out *o = k->x->o;
	put_lit(o, k->x->any ? ",\n{\"ph\":\"" : "\n{\"ph\":\"");
	k->x->any = true;
	k->x->st.written++;
	put_lit(o, ph);
	put_lit(o, "\"");
	if (cat) {
		put_lit(o, ",\"cat\":\"");
		put_lit(o, cat);
		put_lit(o, "\"");
	}
	put_lit(o, ",\"pid\":");
	cd_out_i64(o, k->pid);
	put_lit(o, ",\"tid\":");
	cd_out_i64(o, tid);
	if (has_ts) {
		put_lit(o, ",\"ts\":");
		put_us(o, ts);
	}
}

/* A metadata event: name (process_name, thread_name, ...) with one arg. */
static void meta_str(struct rk *k, int64_t tid, const char *what, const char *val)
{
	struct cd_out *o = k->x->o;
	ev_head(k, "M", NULL, tid, false, 0);
	put_lit(o, ",\"name\":\"");
	put_lit(o, what);
	put_lit(o, "\",\"args\":{\"name\":");
	cd_pj_escape(o, val, strlen(val));
	put_lit(o, "}}");
}

static void meta_sort(struct rk *k, int64_t tid, const char *what, int64_t v)
{
	struct cd_out *o = k->x->o;
	ev_head(k, "M", NULL, tid, false, 0);
	put_lit(o, ",\"name\":\"");
	put_lit(o, what);
	put_lit(o, "\",\"args\":{\"sort_index\":");
	cd_out_i64(o, v);
	put_lit(o, "}}");
}

static void name_thread(struct rk *k, int64_t tid, const char *name, int64_t sort)
{
	meta_str(k, tid, "thread_name", name);
	meta_sort(k, tid, "thread_sort_index", sort);
}

static void fixed_thread(struct rk *k, int tid)
{
	static const char *const names[] = {"", "findings", "regions", "collectives", "NCCL calls"};
	static const int sorts[] = {0, 1, 2, 3900, 3950};
	if (k->named_fixed[tid])
		return;
	k->named_fixed[tid] = true;
	name_thread(k, tid, names[tid], sorts[tid]);
}

static void lane_thread(struct rk *k, bool *named, int base, const char *what, uint32_t lane)
{
	char buf[64];
	if (named[lane])
		return;
	named[lane] = true;
	if (lane == 0)
		snprintf(buf, sizeof buf, "%s", what);
	else
		snprintf(buf, sizeof buf, "%s %u", what, lane + 1);
	name_thread(k, base + (int)lane, buf, base + (int)lane);
}

static const char *nm(const struct rk *k, uint32_t id)
{
	return id == CD_NOID ? "" : cd_intern_str(k->names, id);
}

static size_t nm_len(const struct rk *k, uint32_t id)
{
	return id == CD_NOID ? 0 : cd_intern_len(k->names, id);
}

/* A string field of a record as an arg: left out when absent. */
static void kv_id(struct rk *k, bool *first, const char *key, uint32_t id)
{
	if (id != CD_NOID)
		kv_str(k->x->o, first, key, nm(k, id), nm_len(k, id));
}

/* ---- module spans ---- */

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->end != y->end)
		return x->end > y->end ? -1 : 1;
	return x->ord < y->ord ? -1 : x->ord > y->ord;
}

static void span_b(struct rk *k, int ph, const struct span *s)
{
	struct cd_out *o = k->x->o;
	bool first = true;
	ev_head(k, "B", ph_name[ph], ph_tid[ph] + s->lane, true, s->start);
	put_lit(o, ",\"name\":");
	cd_pj_escape(o, nm(k, s->name), nm_len(k, s->name));
	put_lit(o, ",\"args\":{");
	kv_cstr(o, &first, "module", nm(k, s->name));
	if (s->type != CD_NOID)
		kv_cstr(o, &first, "type", nm(k, s->type));
	kv_cstr(o, &first, "phase", ph_name[ph]);
	if (s->unclosed) {
		put_key(o, &first, "unclosed");
		put_lit(o, "true");
	}
	put_lit(o, "}}");
	k->x->st.spans++;
}

static void span_e(struct rk *k, int ph, const struct span *s)
{
	struct cd_out *o = k->x->o;
	ev_head(k, "E", ph_name[ph], ph_tid[ph] + s->lane, true, s->end);
	put_lit(o, ",\"name\":");
	cd_pj_escape(o, nm(k, s->name), nm_len(k, s->name));
	put_lit(o, "}");
}

/* Lay out the spans of a pass on the phase's threads so that the slices of
 * each thread nest, and write them: sorted by start (longest first), each
 * span goes to the first thread whose innermost span still open at its
 * start holds it whole (or that has none). */
static void flush(struct rk *k, int p)
{
	struct phase *ph = &k->ph[p];
	uint32_t n = ph->buf.n, nl = 0;
	struct span *v = ph->buf.v;

	if (!n)
		return;
	qsort(v, n, sizeof *v, cmp_span);
	for (uint32_t i = 0; i < n; i++) {
		v[i].lane = LANE_NONE;
		for (uint32_t l = 0;; l++) {
			if (l == nl) {
				if (nl == CD_EXPORT_LANE_MAX)
					break;
				nl++;
			}
			struct idxv *st = &ph->stack[l];
			while (st->n && v[st->v[st->n - 1]].end <= v[i].start)
				st->n--;
			/* a thread's times never go back, even when the trace's do */
			if (!st->n && l < ph->nlanes && v[i].start < ph->floor[l])
				continue;
			if (!st->n || v[st->v[st->n - 1]].end >= v[i].end) {
				if (!cd_vec_push(st, i)) {
					k->oom = true;
					break;
				}
				v[i].lane = (uint16_t)l;
				break;
			}
		}
		if (v[i].lane == LANE_NONE)
			k->x->st.dropped++;
	}
	for (uint32_t l = 0; l < nl; l++) {
		struct idxv *st = &ph->stack[l];
		st->n = 0;
		lane_thread(k, ph->named, ph_tid[p], ph_name[p], l);
		for (uint32_t i = 0; i < n; i++) {
			if (v[i].lane != l)
				continue;
			while (st->n && v[st->v[st->n - 1]].end <= v[i].start)
				span_e(k, p, &v[st->v[--st->n]]);
			span_b(k, p, &v[i]);
			if (!cd_vec_push(st, i))
				k->oom = true;
		}
		while (st->n) {
			const struct span *e = &v[st->v[--st->n]];
			span_e(k, p, e);
			if (l >= ph->nlanes || e->end > ph->floor[l])
				ph->floor[l] = e->end;
		}
		if (l >= ph->nlanes)
			ph->nlanes = l + 1;
	}
	ph->buf.n = 0;
	ph->open.n = 0;
}

static void close_open(struct rk *k, int p, uint32_t from, int64_t ts)
{
	struct phase *ph = &k->ph[p];
	for (uint32_t i = from; i < ph->open.n; i++) {
		struct span *s = &ph->buf.v[ph->open.v[i]];
		s->end = ts > s->start ? ts : s->start;
		s->open = false;
		s->unclosed = true;
		k->x->st.unclosed++;
	}
	ph->open.n = from;
}

static void span_open(struct rk *k, int p, uint32_t mod, uint32_t type, int64_t ts)
{
	struct phase *ph = &k->ph[p];
	struct span s = {.start = ts, .end = ts, .name = mod, .type = type, .open = true};

	if (ph->buf.n >= CD_EXPORT_SPAN_MAX) {
		close_open(k, p, 0, ts);
		flush(k, p);
	}
	s.ord = ph->buf.n;
	if (!cd_vec_reserve(&ph->open, ph->open.n + 1) ||
	    !cd_vec_push(&ph->buf, s)) {
		k->oom = true;
		return;
	}
	ph->open.v[ph->open.n++] = ph->buf.n - 1;
}

/* Close the latest open span of mod.  Forward and recompute are call
 * stacks: the spans opened inside it end with it.  Backward spans may
 * overlap: the others stay open. */
static void span_close(struct rk *k, int p, uint32_t mod, int64_t ts)
{
	struct phase *ph = &k->ph[p];
	uint32_t i = ph->open.n;

	while (i-- > 0)
		if (ph->buf.v[ph->open.v[i]].name == mod)
			break;
	if (i == UINT32_MAX) {
		k->x->st.unmatched++;
		return;
	}
	struct span *s = &ph->buf.v[ph->open.v[i]];
	s->end = ts > s->start ? ts : s->start;
	s->open = false;
	if (p != PH_BW) {
		close_open(k, p, i + 1, ts);
		ph->open.n = i;
	} else {
		memmove(&ph->open.v[i], &ph->open.v[i + 1],
			(ph->open.n - i - 1) * sizeof *ph->open.v);
		ph->open.n--;
	}
	if (!ph->open.n)
		flush(k, p);
}

/* ---- regions, collectives, NCCL ---- */

static void region_end(struct rk *k, int64_t ts)
{
	if (!k->region_open)
		return;
	if (ts < k->region_last)
		ts = k->region_last;
	ev_head(k, "E", "region", TID_REGIONS, true, ts);
	put_lit(k->x->o, "}");
	k->region_open = false;
	k->region_last = ts;
}

static void region_begin(struct rk *k, const struct cd_tl_rec *e, int64_t ts)
{
	struct cd_out *o = k->x->o;
	bool first = true;
	char buf[48];

	region_end(k, ts);
	fixed_thread(k, TID_REGIONS);
	if (ts < k->region_last)
		ts = k->region_last;
	ev_head(k, "B", "region", TID_REGIONS, true, ts);
	put_lit(o, ",\"name\":");
	if (e->name != CD_NOID) {
		cd_pj_escape(o, nm(k, e->name), nm_len(k, e->name));
	} else {
		snprintf(buf, sizeof buf, "region %" PRId64, e->region);
		cd_pj_escape(o, buf, strlen(buf));
	}
	put_lit(o, ",\"args\":{");
	kv_int(o, &first, "region", e->region);
	kv_id(k, &first, "label", e->name);
	put_lit(o, "}}");
	k->region_open = true;
	k->region_last = ts;
}

static const char *const fr_states[] = {"scheduled", "started", "completed", "other"};

/* The dump's facts of a collective as args: record id, op id, state, times,
 * the frame it was called from. */
static void fr_args(struct rk *k, bool *first, const struct cd_fr_crec *fc)
{
	const struct cd_rank_summary *s = k->s;
	struct cd_out *o = k->x->o;

	kv_int(o, first, "record_id", fc->record_id);
	if (s->fr_states)
		kv_cstr(o, first, "state", fr_states[fc->state < 4 ? fc->state : 3]);
	if (fc->t_started >= 0)
		kv_int(o, first, "started_ns", fc->t_started);
	if (fc->t_completed >= 0)
		kv_int(o, first, "completed_ns", fc->t_completed);
	if (fc->user_frame != UINT32_MAX) {
		struct cd_out t;
		cd_out_init(&t, NULL);
		t.hold = true;
		cd_text_frame(&t, s, fc->user_frame);
		kv_str(o, first, "called_from", t.buf ? t.buf : "", t.len);
		cd_out_free(&t);
	}
}

/* Start collective c of the summary: its instant at ts on the collectives
 * thread, named, and its args' object opened. */
static void coll_head(struct rk *k, const struct cd_crec *c, int64_t ts)
{
	const char *name = cd_rank_str(k->s, c->coll);
	struct cd_out *o = k->x->o;

	fixed_thread(k, TID_COLLS);
	ev_head(k, "i", "collective", TID_COLLS, true, ts);
	put_lit(o, ",\"s\":\"t\",\"name\":");
	cd_pj_escape(o, name, strlen(name));
	put_lit(o, ",\"args\":{");
}

/* What the summary holds of collective c as args: pg, seq, bytes, dtype,
 * and, with issued, the module and phase that issued it and its region. */
static void coll_args(struct rk *k, bool *first, const struct cd_crec *c, bool issued)
{
	const struct cd_rank_summary *s = k->s;
	struct cd_out *o = k->x->o;

	kv_cstr(o, first, "pg", cd_rank_str(s, c->pg));
	kv_int(o, first, "seq", c->seq);
	if (c->has_bytes)
		kv_int(o, first, "bytes", c->bytes);
	if (c->dtype != CD_NOID)
		kv_cstr(o, first, "dtype", cd_rank_str(s, c->dtype));
	if (!issued)
		return;
	kv_cstr(o, first, "module", cd_rank_str(s, c->module));
	kv_cstr(o, first, "phase", cd_phase_names[c->phase]);
	if (c->region >= 0)
		kv_int(o, first, "region", c->region);
}

/* A collective of the trace: its record in the summary (the post-mortem's
 * sequence number, the module and phase that issued it, its region), the
 * op that issued it, and its rank's Flight Recorder record (cd_fr_join)
 * when the dump has it. */
static void collective(struct rk *k, const struct cd_tl_rec *e, int64_t ts)
{
	const struct cd_rank_summary *s = k->s;
	const struct cd_crec *c = &s->colls.v[e->coll];
	const struct cd_fr_crec *fc = s->fr_path ? cd_rank_fr(s, c) : NULL;
	struct cd_out *o = k->x->o;
	bool first = true;

	coll_head(k, c, ts);
	kv_id(k, &first, "op", e->op);
	coll_args(k, &first, c, true);
	if (fc && fc->record_id >= 0) {
		kv_cstr(o, &first, "flight_recorder", s->fr_path);
		fr_args(k, &first, fc);
	}
	put_lit(o, "}}");
	k->x->st.collectives++;
}

static void gpu_slice(struct rk *k, const struct cd_tl_rec *e, int64_t ts)
{
	struct cd_out *o = k->x->o;
	uint32_t comm = e->comm;
	struct pend call = {CD_NOID, CD_NOID, 0, -1};
	bool first = true;

	for (uint32_t i = k->pend.n; comm != CD_NOID && i-- > 0;)
		if (k->pend.v[i].comm == comm && k->pend.v[i].seq == e->seq) {
			call = k->pend.v[i];
			memmove(&k->pend.v[i], &k->pend.v[i + 1],
				(k->pend.n - i - 1) * sizeof *k->pend.v);
			k->pend.n--;
			break;
		}
	int64_t start = ts - e->dur, end = ts;
	uint32_t l = 0;
	while (l < k->gpu_end.n && k->gpu_end.v[l] > start)
		l++;
	if (l == k->gpu_end.n) {
		if (l == CD_EXPORT_LANE_MAX) {
			k->x->st.dropped++;
			return;
		}
		if (!cd_vec_push(&k->gpu_end, end)) {
			k->oom = true;
			return;
		}
	}
	k->gpu_end.v[l] = end;
	lane_thread(k, k->gpu_named, TID_GPU, "NCCL GPU", l);
	ev_head(k, "X", "gpu", TID_GPU + l, true, start);
	put_lit(o, ",\"dur\":");
	put_us(o, e->dur);
	put_lit(o, ",\"name\":");
	const char *fn = call.func != CD_NOID ? nm(k, call.func) : "NCCL call";
	cd_pj_escape(o, fn, strlen(fn));
	put_lit(o, ",\"args\":{");
	kv_id(k, &first, "comm", e->comm);
	if (e->have & CD_F_SEQ)
		kv_int(o, &first, "seq", e->seq);
	if (call.bytes >= 0) {
		kv_int(o, &first, "bytes", call.bytes);
		if (e->dur > 0) {
			char num[48];
			snprintf(num, sizeof num, "%.3f", (double)call.bytes / (double)e->dur);
			put_key(o, &first, "algbw_GBps");
			put_lit(o, num);
		}
	}
	kv_int(o, &first, "gpu_ns", e->dur);
	put_lit(o, "}}");
	k->x->st.gpu_slices++;
}

static void nccl_call(struct rk *k, const struct cd_tl_rec *e, int64_t ts)
{
	struct cd_out *o = k->x->o;
	bool first = true;

	if (e->comm != CD_NOID && (e->have & CD_F_SEQ)) {
		struct pend p = {e->comm, e->name, e->seq, (e->have & CD_F_BYTES) ? e->bytes : -1};
		if (k->pend.n == PENDING_MAX) {   /* never completed: forget the oldest */
			memmove(&k->pend.v[0], &k->pend.v[1], (k->pend.n - 1) * sizeof *k->pend.v);
			k->pend.n--;
		}
		if (p.comm != CD_NOID && !cd_vec_push(&k->pend, p))
			k->oom = true;
	}
	fixed_thread(k, TID_NCCL);
	ev_head(k, "i", "nccl", TID_NCCL, true, ts);
	put_lit(o, ",\"s\":\"t\",\"name\":");
	if (e->name != CD_NOID)
		cd_pj_escape(o, nm(k, e->name), nm_len(k, e->name));
	else
		put_lit(o, "\"NCCL call\"");
	put_lit(o, ",\"args\":{");
	kv_id(k, &first, "func", e->name);
	if (e->have & CD_F_COUNT)
		kv_int(o, &first, "count", e->count);
	kv_id(k, &first, "dtype", e->dtype);
	if (e->have & CD_F_BYTES)
		kv_int(o, &first, "bytes", e->bytes);
	kv_id(k, &first, "redop", e->redop);
	if (e->have & CD_F_ROOT)
		kv_int(o, &first, "root", e->root);
	if (e->have & CD_F_PEER)
		kv_int(o, &first, "peer", e->peer);
	kv_id(k, &first, "comm", e->comm);
	if (e->have & CD_F_NRANKS)
		kv_int(o, &first, "nranks", e->nranks);
	if (e->have & CD_F_SEQ)
		kv_int(o, &first, "seq", e->seq);
	kv_id(k, &first, "stream", e->stream);
	kv_id(k, &first, "pg", e->pg);
	if (e->have & CD_F_PSEQ)
		kv_int(o, &first, "pseq", e->pseq);
	if (e->have & CD_F_DUR)
		kv_int(o, &first, "gpu_ns", e->dur);
	kv_id(k, &first, "state", e->state);
	put_lit(o, "}}");
	k->x->st.nccl_calls++;
}

static void nccl_lost(struct rk *k, const struct cd_tl_rec *e, int64_t ts)
{
	struct cd_out *o = k->x->o;
	fixed_thread(k, TID_NCCL);
	ev_head(k, "i", "nccl", TID_NCCL, true, ts);
	put_lit(o, ",\"s\":\"t\",\"name\":\"NCCL calls lost\",\"args\":{\"count\":");
	cd_out_i64(o, (e->have & CD_F_COUNT) ? e->count : -1);
	put_lit(o, "}}");
}

/* ---- the rank's process and its findings ---- */

/* The process's name and labels; host: the meta event's (CD_NOID: none,
 * or no meta event). */
static void process_meta(struct rk *k, uint32_t host)
{
	const struct cd_rank_summary *s = k->s;
	const char *base = strrchr(s->path, '/');
	char name[384];
	int n;

	base = base ? base + 1 : s->path;
	if (s->has_rank || s->rank_from_name)
		n = snprintf(name, sizeof name, "rank %" PRId64, s->rank);
	else
		n = snprintf(name, sizeof name, "%s", base);
	if (n < 0 || (size_t)n >= sizeof name)
		n = (int)sizeof name - 1;
	if (host != CD_NOID)
		snprintf(name + n, sizeof name - (size_t)n, " (%.*s)",
			 (int)(nm_len(k, host) > 200 ? 200 : nm_len(k, host)), nm(k, host));
	else if (s->end == CD_END_EMPTY)
		snprintf(name + n, sizeof name - (size_t)n, " (empty trace)");
	else if (s->source != CD_SRC_TRACE)
		snprintf(name + n, sizeof name - (size_t)n, " (Flight Recorder dump)");
	else if (s->from_summary)
		snprintf(name + n, sizeof name - (size_t)n, " (summary)");
	meta_str(k, 0, "process_name", name);
	meta_sort(k, 0, "process_sort_index", k->pid);
	if (s->t0 <= 0 && s->end != CD_END_EMPTY)
		snprintf(name, sizeof name, "%s; no t0: not aligned with the other ranks", base);
	else
		snprintf(name, sizeof name, "%s", base);
	struct cd_out *o = k->x->o;
	ev_head(k, "M", NULL, 0, false, 0);
	put_lit(o, ",\"name\":\"process_labels\",\"args\":{\"labels\":");
	cd_pj_escape(o, name, strlen(name));
	put_lit(o, "}}");
}

/* Where finding f is placed on this rank: ns on the export's clock, or -1. */
static int64_t finding_time(const struct rk *k, const struct cd_finding *f, uint32_t j,
			    const char **how)
{
	int64_t t = -1;
	*how = "at this rank's arrival";
	if (f->kind == CD_FK_DIED) {
		const struct cd_rank_summary *s = k->s;
		t = s->has_end ? s->end_time : -1;
		*how = "at this rank's end event";
		if (t < 0) {
			t = s->last_time;
			*how = "where this rank's trace ends";
		}
	}
	if (j < f->odd_rec.n && f->odd_rec.v[j])
		t = f->odd_rec.v[j]->time;
	if (t < 0 && f->kind == CD_FK_HANG) {
		t = k->s->last_time;
		*how = "where this rank's trace ends";
	}
	if (t < 0) {
		t = f->time;
		*how = "at the earliest arrival of the other ranks";
	}
	if (t < 0 || k->x->start <= 0) {
		*how = "at 0: no time known";
		return -1;
	}
	return t - k->x->start;
}

static void finding_event(struct rk *k, const struct cd_finding *f, uint32_t num, int64_t t,
			  const char *how)
{
	const struct cd_pm *pm = k->x->pm;
	struct cd_out *o = k->x->o, line;
	bool first = true;

	cd_out_init(&line, NULL);
	line.hold = true;
	cd_finding_headline(&line, pm, f);
	while (line.len && line.buf[line.len - 1] == '\n')
		line.len--;
	fixed_thread(k, TID_FINDINGS);
	ev_head(k, "i", "finding", TID_FINDINGS, true, t < 0 ? 0 : t);
	put_lit(o, ",\"s\":\"t\",\"name\":");
	cd_pj_escape(o, cd_fkind_names[f->kind], strlen(cd_fkind_names[f->kind]));
	put_lit(o, ",\"args\":{");
	kv_str(o, &first, "finding", line.buf ? line.buf : "", line.len);
	kv_cstr(o, &first, "kind", cd_fkind_names[f->kind]);
	kv_int(o, &first, "number", num);
	if (f->kind == CD_FK_DIED)
		kv_cstr(o, &first, "end", cd_end_names[k->s->end]);
	if (f->kind != CD_FK_EMPTY && f->kind != CD_FK_DIED) {
		kv_cstr(o, &first, "pg", cd_pm_str(pm, f->pg));
		kv_int(o, &first, "seq", f->seq);
		kv_int(o, &first, "seq_end", f->seq_end);
	}
	if (f->follows >= 0)
		kv_int(o, &first, "follows", f->follows + 1);
	kv_cstr(o, &first, "placed", how);
	put_lit(o, "}}");
	cd_out_free(&line);
	k->x->st.findings++;
	if (t < 0)
		k->x->st.findings_untimed++;
}

static void findings(struct rk *k)
{
	const struct cd_pm *pm = k->x->pm;
	for (uint32_t i = 0; pm && i < pm->f.n; i++) {
		const struct cd_finding *f = &pm->f.v[i];
		const char *how;
		if (f->kind == CD_FK_EMPTY) {
			if (f->trace == k->s)
				finding_event(k, f, i + 1, -1, "at 0: the trace holds no event");
			continue;
		}
		for (uint32_t j = 0; j < f->odd.n; j++)
			if (f->odd.v[j] >= 0 && f->odd.v[j] < pm->n && pm->r[f->odd.v[j]] == k->s) {
				int64_t t = finding_time(k, f, j, &how);
				finding_event(k, f, i + 1, t, how);
			}
		/* about ranks that left nothing to draw: on the first waiting rank */
		if (!f->odd.n && f->absent.n && f->others.n && f->others.v[0] >= 0 &&
		    f->others.v[0] < pm->n && pm->r[f->others.v[0]] == k->s) {
			int64_t t = f->time >= 0 && k->x->start > 0 ? f->time - k->x->start : -1;
			finding_event(k, f, i + 1, t,
				      t < 0 ? "at 0: no time known"
					    : "at the earliest arrival of the waiting ranks (the rank "
					      "it names left no trace or dump)");
		}
	}
}

/* ---- Flight Recorder dumps and summary files: the collectives of the summary ---- */

static void summary_colls(struct rk *k)
{
	const struct cd_rank_summary *s = k->s;
	struct cd_out *o = k->x->o;

	for (uint32_t i = 0; i < s->colls.n; i++) {
		const struct cd_crec *c = &s->colls.v[i];
		const struct cd_fr_crec *fc = cd_rank_fr(s, c);
		bool first = true;
		if (c->time < 0 || k->x->start <= 0) {
			k->x->st.untimed++;
			continue;
		}
		coll_head(k, c, c->time - k->x->start);
		/* a summary file's rank: where it was issued too */
		coll_args(k, &first, c, s->source == CD_SRC_TRACE);
		kv_cstr(o, &first, "source", s->source == CD_SRC_TRACE ? "summary" : "Flight Recorder");
		if (fc)
			fr_args(k, &first, fc);
		put_lit(o, "}}");
		k->x->st.collectives++;
	}
}

/* ---- drawing the timeline ---- */

/* The end of the trace: what is open closes at its last time. */
static void finish(struct rk *k, int64_t last_t)
{
	int64_t ts = (last_t >= 0 ? last_t : 0) + k->off;
	for (int p = 0; p < PH_N; p++) {
		close_open(k, p, 0, ts);
		flush(k, p);
	}
	region_end(k, ts);
}

/* One record of the timeline, in the order of the trace's events. */
static void apply(struct rk *k, const struct cd_tl_rec *e)
{
	int64_t ts = e->t + k->off;
	switch (e->kind) {
	case CD_TL_META:
		if (!k->sibling) {
			process_meta(k, e->name);
			findings(k);
		}
		k->off = e->t0 > 0 && k->x->start > 0 ? e->t0 - k->x->start : 0;
		break;
	case CD_TL_REGION_ENTER:
		region_begin(k, e, ts);
		break;
	case CD_TL_REGION_EXIT:
		region_end(k, ts);
		break;
	case CD_TL_OPEN:
		span_open(k, (int)e->phase, e->name, e->type, ts);
		break;
	case CD_TL_CLOSE:
		span_close(k, (int)e->phase, e->name, ts);
		break;
	case CD_TL_BW_END:
		close_open(k, PH_BW, 0, ts);
		flush(k, PH_BW);
		break;
	case CD_TL_COLL:
		collective(k, e, ts);
		break;
	case CD_TL_NCCL:
		nccl_call(k, e, ts);
		break;
	case CD_TL_GPU:
		gpu_slice(k, e, ts);
		break;
	case CD_TL_NCCL_LOST:
		nccl_lost(k, e, ts);
		break;
	case CD_TL_FINISH:
		finish(k, e->t);
		break;
	case CD_TL_SIBLING:
		k->sibling = true;
		k->off = 0;
		break;
	default:
		break;
	}
}

/* Draw the timeline tl of k's trace; what reading it met goes to res and
 * err. */
static enum cd_status draw(struct rk *k, const struct cd_tl *tl, struct cd_export_rank_res *res,
			   struct cd_err *err)
{
	struct cd_tl_rd rd;
	struct cd_tl_rec e;
	enum cd_status st;

	k->x->st.events += tl->events;
	k->x->st.untimed += tl->untimed;
	cd_tl_rd_init(&rd, tl);
	k->names = &rd.names;
	while ((st = cd_tl_next(&rd, &e, err)) == CD_OK) {
		if (e.kind == CD_TL_COLL && e.coll >= k->s->colls.n) {
			st = cd_fail(err, CD_ERR_FORMAT, "the export's timeline is damaged");
			break;
		}
		apply(k, &e);
	}
	cd_tl_rd_free(&rd);
	res->nccl_path = tl->sib_path;
	if (st != CD_END) {
		res->tl_failed = true;
		return st;
	}
	res->cut = tl->cut;
	res->nccl_cut = tl->sib_cut;
	res->nccl_refused = tl->sib_refused;
	if (tl->oom)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	if (tl->st) {
		*err = tl->err;
		return tl->st;
	}
	if (tl->sibling && tl->sib_st) {
		*err = tl->sib_err;
		res->nccl_failed = true;
		return tl->sib_st;
	}
	return CD_OK;
}

static void rk_free(struct rk *k)
{
	for (int p = 0; p < PH_N; p++) {
		cd_vec_free(&k->ph[p].buf);
		cd_vec_free(&k->ph[p].open);
		for (int l = 0; l < CD_EXPORT_LANE_MAX; l++)
			cd_vec_free(&k->ph[p].stack[l]);
	}
	cd_vec_free(&k->gpu_end);
	cd_vec_free(&k->pend);
}

void cd_export_begin(struct cd_export *x, struct cd_out *o, const struct cd_pm *pm)
{
	memset(x, 0, sizeof *x);
	x->o = o;
	x->pm = pm;
	x->start = pm ? pm->start : 0;
	cd_out_str(o, "{\"traceEvents\":[");
}

enum cd_status cd_export_rank(struct cd_export *x, const struct cd_rank_summary *s, int64_t pid,
			      struct cd_export_rank_res *res, struct cd_err *err)
{
	struct rk *k = calloc(1, sizeof *k);
	enum cd_status st = CD_OK;

	memset(res, 0, sizeof *res);
	if (!k)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	k->x = x;
	k->s = s;
	k->pid = pid;
	x->st.ranks++;
	if (s->source != CD_SRC_TRACE || s->from_summary) {
		/* a Flight Recorder dump, or a rank read from a summary file:
		 * what its summary holds */
		process_meta(k, CD_NOID);
		findings(k);
		summary_colls(k);
	} else if (s->end == CD_END_EMPTY) {
		/* nothing to read: the process, named, and its finding */
		process_meta(k, CD_NOID);
		findings(k);
		res->cut = s->cut_first;
	} else if (!s->extra) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory: the trace's timeline was not kept");
	} else {
		st = draw(k, s->extra, res, err);
	}
	if (!st && k->oom)
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
	rk_free(k);
	free(k);
	return st;
}

/* A part's output is held in memory up to this, then spilled to a file. */
#define PART_MEM (4u << 20)

void cd_export_part(const struct cd_export *x, struct cd_export *part, struct cd_out *out)
{
	*part = *x;
	cd_out_init(out, NULL);
	out->hold = true;
	cd_out_spill_at(out, PART_MEM);
	part->o = out;
	part->any = true;   /* every event after a comma: cd_export_join drops the first */
	memset(&part->st, 0, sizeof part->st);
}

void cd_export_join(struct cd_export *x, struct cd_export *part)
{
	struct cd_export_stats *d = &x->st;
	const struct cd_export_stats *s = &part->st;

	/* its first event began with a comma, which is only right after another */
	cd_out_append(x->o, part->o, s->written && !x->any ? 1 : 0);
	x->any = x->any || s->written;
	d->ranks += s->ranks;
	d->events += s->events;
	d->written += s->written;
	d->untimed += s->untimed;
	d->unmatched += s->unmatched;
	d->unclosed += s->unclosed;
	d->dropped += s->dropped;
	d->collectives += s->collectives;
	d->spans += s->spans;
	d->nccl_calls += s->nccl_calls;
	d->gpu_slices += s->gpu_slices;
	d->findings += s->findings;
	d->findings_untimed += s->findings_untimed;
}

void cd_export_end(struct cd_export *x)
{
	struct cd_out *o = x->o;
	const struct cd_export_stats *s = &x->st;
	bool first = true;

	cd_out_str(o, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{");
	kv_cstr(o, &first, "generator", "commdebug export --perfetto");
	kv_int(o, &first, "ranks", (int64_t)s->ranks);
	kv_int(o, &first, "job_start_unix_ns", x->start);
	kv_int(o, &first, "events_read", (int64_t)s->events);
	kv_int(o, &first, "trace_events_written", (int64_t)s->written);
	kv_int(o, &first, "collectives", (int64_t)s->collectives);
	kv_int(o, &first, "module_spans", (int64_t)s->spans);
	kv_int(o, &first, "nccl_calls", (int64_t)s->nccl_calls);
	kv_int(o, &first, "nccl_gpu_slices", (int64_t)s->gpu_slices);
	kv_int(o, &first, "findings", (int64_t)s->findings);
	kv_int(o, &first, "findings_without_time", (int64_t)s->findings_untimed);
	kv_int(o, &first, "untimed_events_left_out", (int64_t)s->untimed);
	kv_int(o, &first, "unmatched_span_ends", (int64_t)s->unmatched);
	kv_int(o, &first, "spans_closed_by_exporter", (int64_t)s->unclosed);
	kv_int(o, &first, "spans_left_out", (int64_t)s->dropped);
	cd_out_str(o, "}}\n");
}
