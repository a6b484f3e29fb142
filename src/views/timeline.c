/* A trace's timeline for the export, recorded beside its summary in one
 * read.  See timeline.h. */
#include "timeline.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../replay/replay.h"
#include "../replay/trace.h"

/* ---- the records' bytes ----
 * A record is its kind (one byte), then its fields in the order of
 * fields[kind]: t as the difference from the record before's t (zigzag
 * LEB128), strings as id + 1 (0: absent), other numbers zigzag LEB128; a
 * number (FI) with a `need` bit is there only when the record's `have`
 * holds it (0 when not).  A record never spans two chunks of the log.
 *
 * Strings: a new one (the next id) is written before the first record that
 * uses it, as STR (its length, then its first bytes) and, when longer than
 * a record holds, STR_MORE records (a length, that many bytes). */

enum { STR = CD_TL_KINDS, STR_MORE };
#define STR_ROOM (CD_SLOG_RECORD_MAX - 16)

enum { X_END, X_T, X_I64, X_ID, X_U32 };
struct field {
	uint8_t type;
	uint16_t off;
	uint32_t need;
};
#define FT {X_T, offsetof(struct cd_tl_rec, t), 0}
#define FI(f, b) {X_I64, offsetof(struct cd_tl_rec, f), b}
#define FS(f) {X_ID, offsetof(struct cd_tl_rec, f), 0}
#define FU(f) {X_U32, offsetof(struct cd_tl_rec, f), 0}

static const struct field fields[CD_TL_KINDS][18] = {
	[CD_TL_META] = {FS(name), FI(t0, 0)},
	[CD_TL_REGION_ENTER] = {FT, FI(region, 0), FS(name)},
	[CD_TL_REGION_EXIT] = {FT},
	[CD_TL_OPEN] = {FT, FU(phase), FS(name), FS(type)},
	[CD_TL_CLOSE] = {FT, FU(phase), FS(name)},
	[CD_TL_BW_END] = {FT},
	[CD_TL_COLL] = {FT, FU(coll), FS(op)},
	[CD_TL_NCCL] = {FT, FU(have), FS(name), FI(count, CD_F_COUNT), FS(dtype),
			FI(bytes, CD_F_BYTES), FS(redop), FI(root, CD_F_ROOT), FI(peer, CD_F_PEER),
			FS(comm), FI(nranks, CD_F_NRANKS), FI(seq, CD_F_SEQ), FS(stream), FS(pg),
			FI(pseq, CD_F_PSEQ), FI(dur, CD_F_DUR), FS(state)},
	[CD_TL_GPU] = {FT, FU(have), FS(comm), FI(seq, 0), FI(dur, 0)},
	[CD_TL_NCCL_LOST] = {FT, FU(have), FI(count, CD_F_COUNT)},
	[CD_TL_FINISH] = {FT},
	[CD_TL_SIBLING] = {{X_END, 0, 0}},
};

static char *put_u64(char *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (char)(v | 0x80);
		v >>= 7;
	}
	*p++ = (char)v;
	return p;
}

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t u)
{
	return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* Encode r at p (room for CD_SLOG_RECORD_MAX bytes); returns its end. */
static char *encode(char *p, const struct cd_tl_rec *r, int64_t *prev_t)
{
	const char *base = (const char *)r;
	*p++ = (char)r->kind;
	for (const struct field *f = fields[r->kind]; f->type != X_END; f++) {
		if (f->need && !(r->have & f->need))
			continue;
		if (f->type == X_T) {
			p = put_u64(p, zigzag((int64_t)((uint64_t)r->t - (uint64_t)*prev_t)));
			*prev_t = r->t;
		} else if (f->type == X_I64) {
			int64_t v;
			memcpy(&v, base + f->off, sizeof v);
			p = put_u64(p, zigzag(v));
		} else {
			uint32_t v;
			memcpy(&v, base + f->off, sizeof v);
			p = put_u64(p, f->type == X_ID ? ((uint64_t)v + 1) & 0xFFFFFFFFu : v);
		}
	}
	return p;
}

static bool get_u64(const char **pp, const char *e, uint64_t *v)
{
	const char *p = *pp;
	uint64_t x = 0;
	for (int shift = 0; p < e && shift < 64; shift += 7) {
		unsigned char c = (unsigned char)*p++;
		x |= (uint64_t)(c & 0x7F) << shift;
		if (!(c & 0x80)) {
			*pp = p;
			*v = x;
			return true;
		}
	}
	return false;
}

/* Decode a record at *pp (before e) into r; false when it is not whole. */
static bool decode(const char **pp, const char *e, struct cd_tl_rec *r, int64_t *prev_t)
{
	const char *p = *pp;
	char *base = (char *)r;

	if (p >= e)
		return false;
	memset(r, 0, sizeof *r);
	r->kind = (unsigned char)*p++;
	if (r->kind == 0 || r->kind >= CD_TL_KINDS)
		return false;
	for (const struct field *f = fields[r->kind]; f->type != X_END; f++) {
		uint64_t u;
		if (f->need && !(r->have & f->need))
			continue;
		if (!get_u64(&p, e, &u))
			return false;
		if (f->type == X_T) {
			r->t = (int64_t)((uint64_t)*prev_t + (uint64_t)unzigzag(u));
			*prev_t = r->t;
		} else if (f->type == X_I64) {
			int64_t v = unzigzag(u);
			memcpy(base + f->off, &v, sizeof v);
		} else {
			uint32_t v = (uint32_t)(f->type == X_ID ? u - 1 : u);
			memcpy(base + f->off, &v, sizeof v);
		}
	}
	*pp = p;
	return true;
}

/* ---- recording ---- */

struct rec {
	struct cd_tl *tl;
	struct cd_intern names;   /* the strings written so far: their ids */
	const struct cd_rank_summary *s;
	bool sibling;             /* reading the NCCL-side trace */
	bool ignore;              /* ... which is another rank's */
	int64_t last_t;           /* the trace's largest t, -1: none */
	int64_t prev_t;           /* the last record's t (encoding) */
	uint32_t strs;            /* strings written to the log */
	uint32_t colls;           /* s->colls.n at the last collective */
};

/* String id of k->names into the log. */
static void put_str(struct rec *k, uint32_t id)
{
	const char *s = cd_intern_str(&k->names, id);
	uint32_t n = cd_intern_len(&k->names, id), done = 0;
	int kind = STR;

	do {
		char *p = cd_slog_reserve(&k->tl->log), *q = p;
		uint32_t m = n - done < STR_ROOM ? n - done : STR_ROOM;
		if (!p)
			return;
		*q++ = (char)kind;
		q = put_u64(q, kind == STR ? n : m);
		memcpy(q, s + done, m);
		cd_slog_commit(&k->tl->log, (size_t)(q + m - p));
		done += m;
		kind = STR_MORE;
	} while (done < n);
}

/* Record r, after the strings it is the first to use. */
static void put(struct rec *k, const struct cd_tl_rec *r)
{
	while (k->strs < k->names.count)
		put_str(k, k->strs++);
	char *p = cd_slog_reserve(&k->tl->log);
	if (!p)
		return;   /* the log says why */
	cd_slog_commit(&k->tl->log, (size_t)(encode(p, r, &k->prev_t) - p));
	k->tl->records++;
}

static uint32_t str_id(struct rec *k, struct cd_str s)
{
	if (!s.p)
		return CD_NOID;
	uint32_t id = cd_intern(&k->names, s.p, s.n);
	if (id == CD_NOID)
		k->tl->oom = true;
	return id;
}

/* A module's name: "" when the event has none. */
static uint32_t mod_id(struct rec *k, struct cd_str mod)
{
	return str_id(k, mod.p ? mod : (struct cd_str){"", 0});
}

/* A collective the replay counted.  The summary has just kept its record
 * (ranks.c: its group, sequence number, name, bytes, dtype, the module and
 * phase that issued it, its region): the timeline keeps where it is in
 * s->colls, with what the record lacks, the trace's own time and the op. */
static void on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			  uint32_t coll)
{
	struct rec *k = ud;
	bool kept = k->s->colls.n > k->colls;
	(void)r;
	(void)coll;
	k->colls = k->s->colls.n;
	if (!(e->have & CD_F_T)) {
		k->tl->untimed++;
		return;
	}
	if (!kept) {
		/* none after the end event (an error: such a trace is not
		 * exported); else the summary ran out of memory */
		if (!k->s->has_end)
			k->tl->oom = true;
		return;
	}
	put(k, &(struct cd_tl_rec){.kind = CD_TL_COLL, .t = e->t, .coll = k->colls - 1,
				   .op = str_id(k, e->name)});
}

static bool is_completed(const struct cd_event *e)
{
	return e->state.p && e->state.n == 9 && memcmp(e->state.p, "completed", 9) == 0;
}

static void nccl_event(struct rec *k, const struct cd_event *e)
{
	if (is_completed(e)) {
		if (!(e->have & CD_F_DUR))
			return;
		struct cd_tl_rec g = {.kind = CD_TL_GPU, .t = e->t, .have = e->have & CD_F_SEQ,
				      .comm = str_id(k, e->comm), .seq = e->seq, .dur = e->dur};
		put(k, &g);
		return;
	}
	struct cd_tl_rec c = {
		.kind = CD_TL_NCCL, .t = e->t,
		.have = e->have & (CD_F_COUNT | CD_F_BYTES | CD_F_ROOT | CD_F_PEER | CD_F_NRANKS |
				   CD_F_SEQ | CD_F_PSEQ | CD_F_DUR),
		.name = str_id(k, e->func), .count = e->count, .dtype = str_id(k, e->dtype),
		.bytes = e->bytes, .redop = str_id(k, e->redop), .root = e->root, .peer = e->peer,
		.comm = str_id(k, e->comm), .nranks = e->nranks, .seq = e->seq,
		.stream = str_id(k, e->stream), .pg = str_id(k, e->pg), .pseq = e->pseq,
		.dur = e->dur, .state = str_id(k, e->state),
	};
	put(k, &c);
}

/* The meta event: the trace's host and t0; of the NCCL-side trace, the
 * rank it names, checked against the trace's. */
static void meta_event(struct rec *k, const struct cd_event *e)
{
	struct cd_tl_rec m = {.kind = CD_TL_META, .name = CD_NOID, .t0 = e->t0};
	if (!k->sibling)
		m.name = str_id(k, e->host);
	else if ((e->have & CD_F_RANK) && k->s->has_rank && e->rank != k->s->rank)
		k->ignore = k->tl->sib_refused = true;
	put(k, &m);
}

/* A timed event of the timeline's kinds but NCCL calls. */
static void timed_event(struct rec *k, const struct cd_event *e)
{
	struct cd_tl_rec v = {.t = e->t, .name = CD_NOID, .type = CD_NOID};
	switch (e->ev) {
	case CD_EV_REGION_ENTER:
		v.kind = CD_TL_REGION_ENTER;
		v.region = e->region;
		v.name = str_id(k, e->label);
		break;
	case CD_EV_REGION_EXIT:
		v.kind = CD_TL_REGION_EXIT;
		break;
	case CD_EV_FW_PRE:
	case CD_EV_BW_ENTER:
		v.kind = CD_TL_OPEN;
		v.phase = e->ev == CD_EV_BW_ENTER ? CD_TL_BW : e->bw ? CD_TL_RC : CD_TL_FW;
		if ((v.name = mod_id(k, e->mod)) == CD_NOID)
			return;
		if (e->ev == CD_EV_FW_PRE)
			v.type = str_id(k, e->type);
		break;
	case CD_EV_FW_POST:
	case CD_EV_BW_EXIT:
		v.kind = CD_TL_CLOSE;
		v.phase = e->ev == CD_EV_BW_EXIT ? CD_TL_BW : e->bw ? CD_TL_RC : CD_TL_FW;
		if ((v.name = mod_id(k, e->mod)) == CD_NOID)
			return;
		break;
	case CD_EV_BW_END:
		v.kind = CD_TL_BW_END;
		break;
	default:   /* CD_EV_NCCL_LOST */
		v.kind = CD_TL_NCCL_LOST;
		v.have = e->have & CD_F_COUNT;
		v.count = e->count;
		break;
	}
	put(k, &v);
}

static void on_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct rec *k = ud;
	bool shown = false;
	(void)r;
	k->tl->events++;
	switch (e->ev) {
	case CD_EV_META:
		meta_event(k, e);
		return;
	case CD_EV_REGION_ENTER: case CD_EV_REGION_EXIT: case CD_EV_FW_PRE:
	case CD_EV_FW_POST: case CD_EV_BW_ENTER: case CD_EV_BW_EXIT: case CD_EV_BW_END:
	case CD_EV_NCCL: case CD_EV_NCCL_LOST:
		shown = true;   /* events the timeline shows (an op's collective:
				 * on_collective) */
		break;
	default:
		break;
	}
	if (k->ignore)
		return;
	if (!(e->have & CD_F_T)) {
		if (shown)
			k->tl->untimed++;
		return;
	}
	if (!k->sibling && e->t > k->last_t)
		k->last_t = e->t;
	if (!shown)
		return;
	if (e->ev == CD_EV_NCCL)
		nccl_event(k, e);
	else
		timed_event(k, e);
}

/* The NCCL-side trace, after the trace: into the same timeline. */
static void read_sibling(struct rec *k, const char *path, bool general_parser)
{
	struct cd_tl *tl = k->tl;
	struct cd_replay rp;
	struct cd_replay_opts ro = {.ud = k};
	struct cd_trace_run tr = {.general_parser = general_parser, .skip_detail = true,
				  .after_event = on_event, .ud = k};

	k->sibling = true;
	k->prev_t = 0;
	put(k, &(struct cd_tl_rec){.kind = CD_TL_SIBLING});
	tl->sibling = true;
	if (!(tl->sib_path = strdup(path))) {
		tl->oom = true;
		return;
	}
	if ((tl->sib_st = cd_replay_init(&rp, &ro, &tl->sib_err)))
		return;
	tl->sib_st = cd_trace_replay(path, &rp, &tr, &tl->sib_err);
	tl->sib_cut = tr.cut;
	cd_replay_free(&rp);
}

void cd_tl_summarize(const char *path, const char *nccl_path, bool general_parser,
		     struct cd_spool *sp, struct cd_rank_summary *s)
{
	struct cd_tl *tl = calloc(1, sizeof *tl);
	struct rec k = {.tl = tl, .s = s, .last_t = -1};
	struct cd_rank_hooks h = {.after_event = on_event, .on_collective = on_collective,
				  .ud = &k};

	if (!tl) {
		cd_rank_summarize(path, general_parser, s);
		return;
	}
	cd_slog_init(&tl->log, sp);
	tl->st = cd_rank_summarize_with(path, general_parser, &h, s, &tl->err);
	tl->cut = s->cut;
	put(&k, &(struct cd_tl_rec){.kind = CD_TL_FINISH, .t = k.last_t});
	if (s->end == CD_END_EMPTY) {
		/* nothing to draw: the export names the process only */
		cd_tl_free(tl);
		tl = NULL;
	} else if (!tl->st && !tl->oom && !tl->log.err_no && nccl_path) {
		read_sibling(&k, nccl_path, general_parser);
	}
	if (tl)
		cd_slog_end(&tl->log);
	cd_intern_free(&k.names);
	s->extra = tl;
	s->free_extra = tl ? cd_tl_free : NULL;
}

void cd_tl_free(void *p)
{
	struct cd_tl *tl = p;
	if (!tl)
		return;
	cd_slog_free(&tl->log);
	free(tl->sib_path);
	free(tl);
}

/* ---- reading ---- */

void cd_tl_rd_init(struct cd_tl_rd *rd, const struct cd_tl *tl)
{
	memset(rd, 0, sizeof *rd);
	rd->tl = tl;
	cd_slog_rd_init(&rd->rd, &tl->log);
}

static enum cd_status damaged(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_FORMAT, "the export's timeline is damaged");
}

/* A STR or STR_MORE record (kind read) at rd->p: its bytes kept, the
 * string added to rd->names when whole. */
static enum cd_status get_str(struct cd_tl_rd *rd, int kind, struct cd_err *err)
{
	uint64_t n;
	if (!get_u64(&rd->p, rd->e, &n) || n > UINT32_MAX || (kind == STR) != (rd->str_n == 0))
		return damaged(err);
	uint32_t m = (uint32_t)n;
	if (kind == STR) {
		if (!(rd->str = malloc(m ? m : 1)))
			return cd_fail(err, CD_ERR_NOMEM, "out of memory");
		rd->str_n = m;
		rd->str_have = 0;
		if (m > STR_ROOM)
			m = STR_ROOM;
	}
	if (m > rd->str_n - rd->str_have || m > (size_t)(rd->e - rd->p))
		return damaged(err);
	memcpy(rd->str + rd->str_have, rd->p, m);
	rd->p += m;
	rd->str_have += m;
	if (rd->str_have < rd->str_n)
		return CD_OK;
	uint32_t count = rd->names.count;
	uint32_t id = cd_intern(&rd->names, rd->str, rd->str_n);
	free(rd->str);
	rd->str = NULL;
	rd->str_n = rd->str_have = 0;
	if (id == CD_NOID)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	return id == count ? CD_OK : damaged(err);
}

enum cd_status cd_tl_next(struct cd_tl_rd *rd, struct cd_tl_rec *rec, struct cd_err *err)
{
	for (;;) {
		while (rd->p == rd->e) {
			size_t n;
			enum cd_status st = cd_slog_rd_next(&rd->rd, &rd->p, &n, err);
			if (st)
				return st == CD_END && rd->str ? damaged(err) : st;
			rd->e = rd->p + n;
		}
		int kind = (unsigned char)*rd->p;
		if (kind == STR || kind == STR_MORE) {
			rd->p++;
			enum cd_status st = get_str(rd, kind, err);
			if (st)
				return st;
			continue;
		}
		if (rd->str || !decode(&rd->p, rd->e, rec, &rd->prev_t))
			return damaged(err);
		if (rec->kind == CD_TL_SIBLING)
			rd->prev_t = 0;   /* as when it was written */
		return CD_OK;
	}
}

void cd_tl_rd_free(struct cd_tl_rd *rd)
{
	cd_slog_rd_free(&rd->rd);
	cd_intern_free(&rd->names);
	free(rd->str);
	rd->str = NULL;
}
