/* Summary files: rank summaries written and read back.  See summary.h. */
#include "summary.h"

#include "../read/event.h"
#include "frdump.h"
#include "../read/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#ifndef CD_VERSION
#define CD_VERSION "0.0"
#endif

/* 'T': what a bounded trace dropped (trim events), after its rank's 'R'
 * record; a reader that does not know it skips it */
enum { TAG_HEADER = 'H', TAG_CLASS = 'C', TAG_RANK = 'R', TAG_END = 'E', TAG_TRIM = 'T' };

/* ---- bytes out ---- */

struct wbuf {
	unsigned char *p;
	size_t n, cap;
	bool oom;
};

static void w_bytes(struct wbuf *w, const void *p, size_t n)
{
	if (w->oom)
		return;
	if (w->n + n > w->cap) {
		size_t nc = w->cap ? w->cap : 256;
		while (nc < w->n + n)
			nc *= 2;
		unsigned char *np = realloc(w->p, nc);
		if (!np) {
			w->oom = true;
			return;
		}
		w->p = np;
		w->cap = nc;
	}
	memcpy(w->p + w->n, p, n);
	w->n += n;
}

/* v as a varint into b (at most 10 bytes); returns how many. */
static size_t enc_u(unsigned char *b, uint64_t v)
{
	size_t n = 0;
	do {
		b[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v)
			b[n] |= 0x80;
		n++;
	} while (v);
	return n;
}

static void w_u(struct wbuf *w, uint64_t v)
{
	unsigned char b[10];
	w_bytes(w, b, enc_u(b, v));
}

static void w_s(struct wbuf *w, int64_t v)
{
	w_u(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

/* A string id as id + 1 (0: none). */
static void w_id(struct wbuf *w, uint32_t id)
{
	w_u(w, id == CD_NOID ? 0 : (uint64_t)id + 1);
}

static void w_str(struct wbuf *w, const char *p, size_t n)
{
	w_u(w, n);
	w_bytes(w, p, n);
}

/* A malloc'd C string, or none (0; else its length + 1). */
static void w_cstr(struct wbuf *w, const char *s)
{
	if (!s) {
		w_u(w, 0);
		return;
	}
	size_t n = strlen(s);
	w_u(w, n + 1);
	w_bytes(w, s, n);
}

/* ---- bytes in ---- */

/* The memory the summaries read from one file hold (summary.h,
 * CD_SUMMARY_MEM_RATIO): used, and the bound for the records read so far. */
struct mem {
	uint64_t used, limit;
};

#define INTERN_ITEM 16   /* a string's cost in a rank's table, at least */
_Static_assert(CD_SUMMARY_MEM_RATIO == 64 && CD_SUMMARY_MEM_FLOOR == 64u << 20,
	       "MEM_PAST names the bound");
#define MEM_PAST "reading it would take more memory than its size allows (64 bytes a " \
		 "byte of its records, plus 64 MiB)"

struct rbuf {
	const unsigned char *p, *start, *end;
	const char *bad;          /* the first problem met, NULL: none */
	const struct mem *mem;    /* the file's memory (NULL: unbounded) */
};

static bool r_fail(struct rbuf *r, const char *why)
{
	if (!r->bad)
		r->bad = why;
	r->p = r->end;
	return false;
}

static uint64_t r_u(struct rbuf *r)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end) {
			r_fail(r, "a record ends inside a number");
			return 0;
		}
		unsigned char b = *r->p++;
		if (shift == 63 && b > 1) {
			r_fail(r, "a number is out of range");
			return 0;
		}
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	r_fail(r, "a number is out of range");
	return 0;
}

static int64_t r_s(struct rbuf *r)
{
	uint64_t u = r_u(r);
	return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static bool r_bool(struct rbuf *r)
{
	uint64_t v = r_u(r);
	if (v > 1)
		r_fail(r, "a flag is neither 0 nor 1");
	return v == 1;
}

static uint32_t r_u32(struct rbuf *r, uint32_t max)
{
	uint64_t v = r_u(r);
	if (v > max) {
		r_fail(r, "a number is out of range");
		return 0;
	}
	return (uint32_t)v;
}

/* Room in the file's memory for n items of size bytes?  Else fails. */
static bool r_room(struct rbuf *r, uint64_t n, size_t size)
{
	if (r->mem && (r->mem->used > r->mem->limit || n * size > r->mem->limit - r->mem->used))
		return r_fail(r, MEM_PAST);
	return true;
}

/* A count of items of at least one byte each, that take size bytes of
 * memory each: never more than the bytes left, nor than the file's memory
 * has room for (0 then). */
static uint32_t r_count(struct rbuf *r, size_t size)
{
	uint64_t v = r_u(r);
	if (v > (uint64_t)(r->end - r->p) || v > UINT32_MAX / 2) {
		r_fail(r, "a count is larger than its record");
		return 0;
	}
	return r_room(r, v, size) ? (uint32_t)v : 0;
}

/* A string id (id + 1, 0: none) below n. */
static uint32_t r_id(struct rbuf *r, uint32_t n)
{
	uint64_t v = r_u(r);
	if (v == 0)
		return CD_NOID;
	if (v > n) {
		r_fail(r, "a string id is out of range");
		return CD_NOID;
	}
	return (uint32_t)(v - 1);
}

static const unsigned char *r_take(struct rbuf *r, uint64_t n)
{
	if (n > (uint64_t)(r->end - r->p)) {
		r_fail(r, "a string runs past its record");
		return NULL;
	}
	const unsigned char *p = r->p;
	r->p += n;
	return p;
}

static char *r_cstr(struct rbuf *r, bool *oom)
{
	uint64_t n = r_u(r);
	if (n == 0)
		return NULL;
	const unsigned char *p = r_take(r, n - 1);
	if (!p)
		return NULL;
	char *s = malloc(n);
	if (!s) {
		*oom = true;
		return NULL;
	}
	memcpy(s, p, n - 1);
	s[n - 1] = '\0';
	return s;
}

/* ---- sniffing ---- */

bool cd_summary_sniff(const void *p, size_t n)
{
	return n >= CD_SUMMARY_MAGIC_LEN && memcmp(p, CD_SUMMARY_MAGIC, CD_SUMMARY_MAGIC_LEN) == 0;
}

/* ---- writing ---- */

/* One rank's strings renumbered: the class's in the order it uses them,
 * then the rest in their own order. */
struct renum {
	uint32_t *to;     /* old id -> new id */
	uint32_t *from;   /* new id -> old id */
	uint32_t n;
};

static uint32_t rn(const struct renum *m, uint32_t id)
{
	return id == CD_NOID || id >= m->n ? CD_NOID : m->to[id];
}

static uint32_t rn_use(struct renum *m, uint32_t *next, uint32_t id)
{
	if (id == CD_NOID || id >= m->n)
		return CD_NOID;
	if (m->to[id] == CD_NOID) {
		m->to[id] = *next;
		m->from[*next] = id;
		(*next)++;
	}
	return m->to[id];
}

struct classes {
	struct wbuf store;   /* every class body, one after another */
	struct {
		uint64_t hash;
		size_t off, len;
		uint32_t id;
	} *slot;
	uint32_t nslots, count;
};

static uint64_t fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h ^ n;
}

/* The id of the class with this body: an earlier one, or a new one
 * (*is_new).  UINT32_MAX: out of memory. */
static uint32_t class_id(struct classes *c, const struct wbuf *body, bool *is_new)
{
	uint64_t h = fnv(body->p, body->n);
	*is_new = false;
	if ((c->count + 1) * 2 > c->nslots) {
		uint32_t ns = c->nslots ? c->nslots * 2 : 64;
		__typeof__(c->slot) nt = calloc(ns, sizeof *nt);
		if (!nt)
			return UINT32_MAX;
		for (uint32_t i = 0; i < c->nslots; i++) {
			if (!c->slot[i].len)
				continue;
			uint32_t k = (uint32_t)c->slot[i].hash & (ns - 1);
			while (nt[k].len)
				k = (k + 1) & (ns - 1);
			nt[k] = c->slot[i];
		}
		free(c->slot);
		c->slot = nt;
		c->nslots = ns;
	}
	uint32_t k = (uint32_t)h & (c->nslots - 1);
	for (;; k = (k + 1) & (c->nslots - 1)) {
		__typeof__(c->slot[0]) *e = &c->slot[k];
		if (!e->len)
			break;   /* empty: a stored body has at least its two counts */
		if (e->hash == h && e->len == body->n &&
		    memcmp(c->store.p + e->off, body->p, body->n) == 0)
			return e->id;
	}
	size_t off = c->store.n;
	w_bytes(&c->store, body->p, body->n);
	if (c->store.oom)
		return UINT32_MAX;
	c->slot[k].hash = h;
	c->slot[k].off = off;
	c->slot[k].len = body->n;
	c->slot[k].id = c->count;
	*is_new = true;
	return c->count++;
}

/* The class body of s: collectives without their times, module counts. */
static void put_class(struct wbuf *w, const struct cd_rank_summary *s, struct renum *m,
		      uint32_t *next)
{
	int64_t seq = 0, bytes = 0, region = 0;
	w_u(w, s->colls.n);
	for (uint32_t i = 0; i < s->colls.n; i++) {
		const struct cd_crec *c = &s->colls.v[i];
		w_id(w, rn_use(m, next, c->pg));
		w_id(w, rn_use(m, next, c->coll));
		w_id(w, rn_use(m, next, c->dtype));
		w_id(w, rn_use(m, next, c->module));
		w_u(w, (uint64_t)c->phase << 1 | c->has_bytes);
		w_s(w, (int64_t)((uint64_t)c->seq - (uint64_t)seq));
		w_s(w, (int64_t)((uint64_t)c->bytes - (uint64_t)bytes));
		w_s(w, (int64_t)((uint64_t)c->region - (uint64_t)region));
		seq = c->seq;
		bytes = c->bytes;
		region = c->region;
	}
	region = 0;
	w_u(w, s->mods.n);
	for (uint32_t i = 0; i < s->mods.n; i++) {
		const struct cd_modcount *c = &s->mods.v[i];
		w_s(w, (int64_t)((uint64_t)c->region - (uint64_t)region));
		w_id(w, rn_use(m, next, c->module));
		w_id(w, rn_use(m, next, c->coll));
		w_u(w, c->bw);
		w_u(w, c->n);
		region = c->region;
	}
}

/* A time as 0 (none: -1) or its zigzag delta from *prev, plus 1. */
static void put_time(struct wbuf *w, int64_t t, int64_t *prev)
{
	if (t < 0) {
		w_u(w, 0);
		return;
	}
	uint64_t d = (uint64_t)t - (uint64_t)*prev;
	w_u(w, ((d << 1) ^ (uint64_t)((int64_t)d >> 63)) + 1);
	*prev = t;
}

static void put_rank_end(struct wbuf *w, const struct cd_rank_summary *s, struct renum *m)
{
	w_cstr(w, s->path);
	w_cstr(w, s->error);
	w_u(w, (uint64_t)s->cut | (uint64_t)s->cut_first << 1 | (uint64_t)s->in_region << 2 |
		       (uint64_t)s->has_rank << 3 | (uint64_t)s->has_world << 4 |
		       (uint64_t)s->rank_from_name << 5 | (uint64_t)s->ends << 6 |
		       (uint64_t)s->has_end << 7 | (uint64_t)s->has_code << 8 |
		       (uint64_t)s->rgn_sorted << 9 | (uint64_t)s->has_last_op << 10 |
		       (uint64_t)s->pg_conf_broken << 11 | (uint64_t)s->fr_states << 12 |
		       (uint64_t)s->fr_joined << 13 | (uint64_t)s->fr_has_world_pg << 14);
	w_u(w, s->end);
	w_s(w, s->open_region);
	w_s(w, s->rank);
	w_s(w, s->world_size);
	w_s(w, s->t0);
	w_s(w, s->end_line);
	w_s(w, s->end_time);
	w_s(w, s->end_code);
	w_s(w, s->end_signal);
	w_id(w, rn(m, s->end_how));
	w_id(w, rn(m, s->end_exc));
	w_id(w, rn(m, s->end_msg));
	w_id(w, rn(m, s->end_signame));
	w_s(w, s->last_time);
	w_u(w, s->events);
	w_u(w, s->regions);
	w_id(w, rn(m, s->last_op));
	w_id(w, rn(m, s->last_op_module));
}

static void put_rank_lists(struct wbuf *w, const struct cd_rank_summary *s, struct renum *m)
{
	int64_t prev = s->t0;
	for (uint32_t i = 0; i < s->colls.n; i++)
		put_time(w, s->colls.v[i].time, &prev);
	w_u(w, s->rgn.n);
	prev = s->t0;
	for (uint32_t i = 0; i < s->rgn.n; i++) {
		const struct cd_rregion *g = &s->rgn.v[i];
		w_s(w, g->region);
		w_id(w, rn(m, g->label));
		w_u(w, g->done);
		w_u(w, g->colls);
		put_time(w, g->t_enter, &prev);
		put_time(w, g->t_exit, &prev);
	}
	w_u(w, s->stack.n);
	for (uint32_t i = 0; i < s->stack.n; i++) {
		w_id(w, rn(m, s->stack.v[i].module));
		w_u(w, s->stack.v[i].phase);
	}
	w_u(w, s->pg_names.n);
	for (uint32_t k = 0; k < s->pg_names.n; k++) {
		w_id(w, rn(m, s->pg_names.v[k]));
		w_u(w, s->pg_runs_n.v[k]);
		for (uint32_t q = 0; q < s->pg_runs_n.v[k]; q++) {
			const struct cd_rrun *r = &s->pg_runs.v[s->pg_runs_off.v[k] + q];
			w_s(w, r->first);
			w_s(w, r->step);
			w_u(w, r->n);
		}
	}
}

static void put_rank_fr(struct wbuf *w, const struct cd_rank_summary *s, struct renum *m)
{
	w_u(w, s->source);
	w_id(w, rn(m, s->fr_version));
	w_id(w, rn(m, s->fr_world_pg));
	w_u(w, s->fr_p2p);
	w_u(w, s->fr_matched);
	w_cstr(w, s->fr_path);
	w_u(w, s->fr.n);
	for (uint32_t i = 0; i < s->fr.n; i++) {
		const struct cd_fr_crec *f = &s->fr.v[i];
		w_s(w, f->record_id);
		w_s(w, f->op_id);
		w_s(w, f->t_started);
		w_s(w, f->t_completed);
		w_s(w, f->out_bytes);
		w_u(w, f->frames_off);
		w_u(w, f->frames_n);
		w_u(w, f->user_frame);
		w_u(w, f->state);
		w_s(w, f->retired);
	}
	w_u(w, s->frames.n);
	for (uint32_t i = 0; i < s->frames.n; i++) {
		w_id(w, rn(m, s->frames.v[i].fn));
		w_id(w, rn(m, s->frames.v[i].file));
		w_s(w, s->frames.v[i].line);
	}
	w_u(w, s->pg_status.n);
	for (uint32_t i = 0; i < s->pg_status.n; i++) {
		const struct cd_pgstat *p = &s->pg_status.v[i];
		w_id(w, rn(m, p->pg));
		w_s(w, p->enqueued);
		w_s(w, p->started);
		w_s(w, p->completed);
	}
}

/* The rank record of s: its strings (in the renumbered order), its class,
 * then everything that is its own. */
static void put_rank(struct wbuf *w, const struct cd_rank_summary *s, struct renum *m,
		     uint32_t cls)
{
	w_u(w, m->n);
	for (uint32_t k = 0; k < m->n; k++)
		w_str(w, cd_intern_str(&s->s, m->from[k]), cd_intern_len(&s->s, m->from[k]));
	w_u(w, cls);
	put_rank_end(w, s, m);
	put_rank_lists(w, s, m);
	put_rank_fr(w, s, m);
}

struct zout {
	FILE *f;
	ZSTD_CCtx *cc;
	unsigned char *buf;
	size_t cap;
	uint64_t bytes;
};

static enum cd_status z_write(struct zout *z, const void *p, size_t n, ZSTD_EndDirective end,
			      struct cd_err *err)
{
	ZSTD_inBuffer in = {p, n, 0};
	for (;;) {
		ZSTD_outBuffer out = {z->buf, z->cap, 0};
		size_t left = ZSTD_compressStream2(z->cc, &out, &in, end);
		if (ZSTD_isError(left))
			return cd_fail(err, CD_ERR_FORMAT, "zstd: %s", ZSTD_getErrorName(left));
		if (out.pos && fwrite(z->buf, 1, out.pos, z->f) != out.pos)
			return cd_fail(err, CD_ERR_IO, "write failed: %s", strerror(errno));
		z->bytes += out.pos;
		if (end == ZSTD_e_end ? left == 0 : in.pos == in.size)
			return CD_OK;
	}
}

static enum cd_status put_record(struct zout *z, int tag, const struct wbuf *body,
				 struct cd_err *err)
{
	unsigned char h[11];   /* the tag, the length (a varint of at most 10 bytes) */
	enum cd_status st;

	if (body->oom)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	if (body->n > CD_SUMMARY_RECORD_MAX)
		return cd_fail(err, CD_ERR_LIMIT, "a rank's summary is larger than %u bytes",
			       CD_SUMMARY_RECORD_MAX);
	h[0] = (unsigned char)tag;
	st = z_write(z, h, 1 + enc_u(h + 1, body->n), ZSTD_e_continue, err);
	return st ? st : z_write(z, body->p, body->n, ZSTD_e_continue, err);
}

/* Renumber s's strings and write its class (when new) and rank records. */
static enum cd_status put_one(struct zout *z, struct classes *cl,
			      const struct cd_rank_summary *s, struct cd_err *err)
{
	struct renum m = {.n = s->s.count};
	struct wbuf body = {0};
	uint32_t next = 0;
	bool is_new;
	enum cd_status st = CD_OK;

	m.to = malloc((size_t)(m.n ? m.n : 1) * sizeof *m.to);
	m.from = malloc((size_t)(m.n ? m.n : 1) * sizeof *m.from);
	if (!m.to || !m.from) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	memset(m.to, 0xff, (size_t)m.n * sizeof *m.to);
	put_class(&body, s, &m, &next);
	for (uint32_t k = 0; k < m.n; k++)
		rn_use(&m, &next, k);
	if (body.oom) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	uint32_t cls = class_id(cl, &body, &is_new);
	if (cls == UINT32_MAX) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (is_new && (st = put_record(z, TAG_CLASS, &body, err)))
		goto out;
	body.n = 0;
	put_rank(&body, s, &m, cls);
	st = put_record(z, TAG_RANK, &body, err);
	if (!st && (s->trim_region || s->trim_pg.n)) {
		body.n = 0;
		w_s(&body, s->trim_region);
		w_u(&body, s->trim_pg.n);
		for (uint32_t k = 0; k < s->trim_pg.n; k++) {
			w_id(&body, rn(&m, s->trim_pg.v[k]));
			w_s(&body, s->trim_seq.v[k]);
		}
		st = put_record(z, TAG_TRIM, &body, err);
	}
out:
	free(body.p);
	free(m.to);
	free(m.from);
	return st;
}

enum cd_status cd_summary_write(FILE *f, struct cd_rank_summary *const *sums, int n,
				struct cd_summary_info *info, struct cd_err *err)
{
	struct zout z = {.f = f, .cap = ZSTD_CStreamOutSize()};
	struct classes cl = {0};
	struct wbuf body = {0};
	enum cd_status st = CD_OK;

	z.cc = ZSTD_createCCtx();
	z.buf = malloc(z.cap);
	if (!z.cc || !z.buf) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	ZSTD_CCtx_setParameter(z.cc, ZSTD_c_compressionLevel, 6);
	ZSTD_CCtx_setParameter(z.cc, ZSTD_c_checksumFlag, 1);
	if (fwrite(CD_SUMMARY_MAGIC, 1, CD_SUMMARY_MAGIC_LEN, f) != CD_SUMMARY_MAGIC_LEN) {
		st = cd_fail(err, CD_ERR_IO, "write failed: %s", strerror(errno));
		goto out;
	}
	z.bytes = CD_SUMMARY_MAGIC_LEN;
	w_u(&body, CD_SUMMARY_VERSION);
	w_s(&body, info->shard_k);
	w_s(&body, info->shard_n);
	w_cstr(&body, CD_VERSION);
	if ((st = put_record(&z, TAG_HEADER, &body, err)))
		goto out;
	for (int i = 0; i < n; i++)
		if ((st = put_one(&z, &cl, sums[i], err)))
			goto out;
	body.n = 0;
	w_u(&body, (uint64_t)n);
	w_u(&body, cl.count);
	if ((st = put_record(&z, TAG_END, &body, err)) ||
	    (st = z_write(&z, NULL, 0, ZSTD_e_end, err)))
		goto out;
	if (fflush(f)) {
		st = cd_fail(err, CD_ERR_IO, "write failed: %s", strerror(errno));
		goto out;
	}
	info->ranks = (uint64_t)n;
	info->classes = cl.count;
	info->bytes = z.bytes;
out:
	free(body.p);
	free(cl.store.p);
	free(cl.slot);
	free(z.buf);
	ZSTD_freeCCtx(z.cc);
	return st;
}

/* ---- reading ---- */

struct class {
	struct cd_crec *colls;
	struct cd_modcount *mods;   /* given to the first rank of the class (mods_given),
				     * lent to the others */
	uint32_t ncolls, nmods;
	uint32_t nstr;   /* strings it refers to: ids below this */
	bool mods_given;
};

struct zin {
	bool raw;             /* the records given whole (cd_summary_parse) */
	int fd;
	ZSTD_DCtx *dc;
	unsigned char *in;
	size_t in_cap;
	ZSTD_inBuffer ib;
	bool eof;
	unsigned char *buf;   /* decompressed, not yet used: buf[pos..len) */
	size_t pos, len, cap;
	uint64_t offset;      /* of buf[pos] in the decompressed records */
	size_t frame_left;    /* ZSTD_decompressStream's hint: 0 at a frame's end */
};

/* Have at least need bytes at z->buf + z->pos.  false: the input ended
 * (err untouched) or failed (err filled, *failed). */
static bool z_need(struct zin *z, size_t need, bool *failed, struct cd_err *err)
{
	if (z->len - z->pos >= need)
		return true;
	if (z->raw)
		return false;
	if (z->pos) {
		memmove(z->buf, z->buf + z->pos, z->len - z->pos);
		z->len -= z->pos;
		z->pos = 0;
	}
	if (need > z->cap) {
		size_t nc = z->cap ? z->cap : 1 << 16;
		while (nc < need)
			nc *= 2;
		unsigned char *nb = realloc(z->buf, nc);
		if (!nb) {
			*failed = true;
			cd_fail(err, CD_ERR_NOMEM, "out of memory");
			return false;
		}
		z->buf = nb;
		z->cap = nc;
	}
	while (z->len < need) {
		if (z->ib.pos == z->ib.size && !z->eof) {
			ssize_t r = read(z->fd, z->in, z->in_cap);
			if (r < 0) {
				*failed = true;
				cd_fail(err, CD_ERR_IO, "read failed: %s", strerror(errno));
				return false;
			}
			if (r == 0)
				z->eof = true;
			z->ib = (ZSTD_inBuffer){z->in, (size_t)r, 0};
		}
		if (z->ib.pos == z->ib.size && z->eof)
			return false;
		ZSTD_outBuffer ob = {z->buf, z->cap, z->len};
		size_t ret = ZSTD_decompressStream(z->dc, &ob, &z->ib);
		if (ZSTD_isError(ret)) {
			*failed = true;
			cd_fail(err, CD_ERR_FORMAT, "zstd: %s", ZSTD_getErrorName(ret));
			return false;
		}
		z->frame_left = ret;
		z->len = ob.pos;
	}
	return true;
}

static enum cd_status bad_at(struct cd_err *err, uint64_t off, const char *why)
{
	return cd_fail(err, CD_ERR_FORMAT, "byte %" PRIu64 " of its records: %s", off, why);
}

/* The next record: *tag, and its body in *r.  CD_END after the last. */
static enum cd_status next_record(struct zin *z, int *tag, struct rbuf *r, struct cd_err *err)
{
	bool failed = false;
	z->pos += (size_t)(r->end - r->start);   /* the previous record */
	z->offset += (uint64_t)(r->end - r->start);
	*r = (struct rbuf){0};
	if (!z_need(z, 1, &failed, err))
		return failed ? CD_ERR_FORMAT : CD_END;
	/* the tag and a length of at most 10 bytes */
	size_t have = 0;
	for (size_t want = 2; want <= 11; want++) {
		if (!z_need(z, want, &failed, err)) {
			if (failed)
				return CD_ERR_FORMAT;
			break;
		}
		have = want;
		if (!(z->buf[z->pos + want - 1] & 0x80))
			break;
	}
	struct rbuf h = {.p = z->buf + z->pos + 1, .start = z->buf + z->pos + 1,
			 .end = z->buf + z->pos + have};
	uint64_t len = have >= 2 ? r_u(&h) : 0;
	if (have < 2 || h.bad)
		return bad_at(err, z->offset, "the file is cut inside a record's head");
	if (len > CD_SUMMARY_RECORD_MAX)
		return bad_at(err, z->offset, "a record is larger than the limit (256 MiB)");
	size_t head = (size_t)(h.p - (z->buf + z->pos));
	if (!z_need(z, head + (size_t)len, &failed, err))
		return failed ? CD_ERR_FORMAT : bad_at(err, z->offset, "the file is cut inside a record");
	*tag = z->buf[z->pos];
	z->pos += head;
	z->offset += head;
	r->start = r->p = z->buf + z->pos;
	r->end = r->p + len;
	return CD_OK;
}

static bool get_class(struct rbuf *r, struct class *c)
{
	int64_t seq = 0, bytes = 0, region = 0;
	*c = (struct class){0};
	c->ncolls = r_count(r, sizeof *c->colls);
	if (!(c->colls = calloc(c->ncolls ? c->ncolls : 1, sizeof *c->colls)))
		return false;
	for (uint32_t i = 0; i < c->ncolls && !r->bad; i++) {
		struct cd_crec *x = &c->colls[i];
		x->pg = r_id(r, UINT32_MAX - 1);
		x->coll = r_id(r, UINT32_MAX - 1);
		x->dtype = r_id(r, UINT32_MAX - 1);
		x->module = r_id(r, UINT32_MAX - 1);
		uint32_t f = r_u32(r, 5);
		x->phase = (uint8_t)(f >> 1);
		x->has_bytes = f & 1;
		if (x->phase > CD_PH_RECOMPUTE)
			r_fail(r, "a collective's phase is out of range");
		seq = x->seq = (int64_t)((uint64_t)seq + (uint64_t)r_s(r));
		bytes = x->bytes = (int64_t)((uint64_t)bytes + (uint64_t)r_s(r));
		region = x->region = (int64_t)((uint64_t)region + (uint64_t)r_s(r));
		x->time = -1;
		if (x->pg == CD_NOID || x->coll == CD_NOID || x->module == CD_NOID)
			r_fail(r, "a collective lacks its group, name or module");
		uint32_t ids[4] = {x->pg, x->coll, x->dtype, x->module};
		for (int k = 0; k < 4; k++)
			if (ids[k] != CD_NOID && ids[k] + 1 > c->nstr)
				c->nstr = ids[k] + 1;
	}
	c->nmods = r_count(r, sizeof *c->mods);
	if (!(c->mods = calloc(c->nmods ? c->nmods : 1, sizeof *c->mods)))
		return false;
	region = 0;
	for (uint32_t i = 0; i < c->nmods && !r->bad; i++) {
		struct cd_modcount *m = &c->mods[i];
		region = m->region = (int64_t)((uint64_t)region + (uint64_t)r_s(r));
		m->module = r_id(r, UINT32_MAX - 1);
		m->coll = r_id(r, UINT32_MAX - 1);
		m->bw = r_bool(r);
		m->n = r_u(r);
		if (m->module == CD_NOID || m->coll == CD_NOID)
			r_fail(r, "a module count lacks its module or collective");
		uint32_t ids[2] = {m->module, m->coll};
		for (int k = 0; k < 2; k++)
			if (ids[k] != CD_NOID && ids[k] + 1 > c->nstr)
				c->nstr = ids[k] + 1;
	}
	if (!r->bad && r->p != r->end)
		r_fail(r, "a class record has bytes left over");
	return true;
}

static int64_t get_time(struct rbuf *r, int64_t *prev)
{
	uint64_t v = r_u(r);
	if (v == 0)
		return -1;
	v--;
	int64_t d = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
	*prev = (int64_t)((uint64_t)*prev + (uint64_t)d);
	return *prev;
}

static void get_rank_end(struct rbuf *r, struct cd_rank_summary *s, uint32_t ns, bool *oom)
{
	s->path = r_cstr(r, oom);
	s->error = r_cstr(r, oom);
	uint64_t f = r_u(r);
	if (f >> 15)
		r_fail(r, "unknown flags in a rank record");
	s->cut = f & 1;
	s->cut_first = f >> 1 & 1;
	s->in_region = f >> 2 & 1;
	s->has_rank = f >> 3 & 1;
	s->has_world = f >> 4 & 1;
	s->rank_from_name = f >> 5 & 1;
	s->ends = f >> 6 & 1;
	s->has_end = f >> 7 & 1;
	s->has_code = f >> 8 & 1;
	s->rgn_sorted = f >> 9 & 1;
	s->has_last_op = f >> 10 & 1;
	s->pg_conf_broken = f >> 11 & 1;
	s->fr_states = f >> 12 & 1;
	s->fr_joined = f >> 13 & 1;
	s->fr_has_world_pg = f >> 14 & 1;
	s->end = (enum cd_rank_end)r_u32(r, CD_END_KILLED);
	s->open_region = r_s(r);
	s->rank = r_s(r);
	s->world_size = r_s(r);
	s->t0 = r_s(r);
	s->end_line = r_s(r);
	s->end_time = r_s(r);
	s->end_code = r_s(r);
	s->end_signal = r_s(r);
	s->end_how = r_id(r, ns);
	s->end_exc = r_id(r, ns);
	s->end_msg = r_id(r, ns);
	s->end_signame = r_id(r, ns);
	s->last_time = r_s(r);
	s->events = r_u(r);
	s->regions = r_u(r);
	s->last_op = r_id(r, ns);
	s->last_op_module = r_id(r, ns);
	if (!s->path && !r->bad)
		r_fail(r, "a rank record has no path");
}

static bool get_rank_lists(struct rbuf *r, struct cd_rank_summary *s, uint32_t ns)
{
	int64_t prev = s->t0;
	for (uint32_t i = 0; i < s->colls.n; i++)
		s->colls.v[i].time = get_time(r, &prev);
	uint32_t n = r_count(r, sizeof *s->rgn.v);
	if (!cd_vec_reserve(&s->rgn, n))
		return false;
	prev = s->t0;
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		struct cd_rregion *g = &s->rgn.v[s->rgn.n++];
		g->region = r_s(r);
		g->label = r_id(r, ns);
		g->done = r_bool(r);
		g->colls = r_u32(r, UINT32_MAX);
		g->t_enter = get_time(r, &prev);
		g->t_exit = get_time(r, &prev);
	}
	n = r_count(r, sizeof *s->stack.v);
	if (!cd_vec_reserve(&s->stack, n))
		return false;
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		struct cd_frame *f = &s->stack.v[s->stack.n++];
		f->module = r_id(r, ns);
		f->phase = (uint8_t)r_u32(r, CD_PH_RECOMPUTE);
	}
	n = r_count(r, 3 * sizeof(uint32_t));
	for (uint32_t k = 0; k < n && !r->bad; k++) {
		uint32_t name = r_id(r, ns), nruns = r_count(r, sizeof *s->pg_runs.v);
		uint32_t off = s->pg_runs.n;
		if (!cd_vec_reserve(&s->pg_runs, off + nruns) ||
		    !cd_vec_push(&s->pg_names, name) || !cd_vec_push(&s->pg_runs_off, off) ||
		    !cd_vec_push(&s->pg_runs_n, nruns))
			return false;
		uint64_t members = 0;
		for (uint32_t q = 0; q < nruns && !r->bad; q++) {
			struct cd_rrun *x = &s->pg_runs.v[s->pg_runs.n++];
			x->first = r_s(r);
			x->step = r_s(r);
			x->n = r_u32(r, CD_RANKS_MAX);
			members += x->n;
			/* as a trace's ranks are: 0 .. CD_INT_MAX, at most
			 * CD_RANKS_MAX in a group */
			if (x->first < 0 || x->step < 0 || x->n == 0 || x->first > CD_INT_MAX ||
			    (x->n > 1 && x->step > (CD_INT_MAX - x->first) / (x->n - 1)))
				r_fail(r, "a group's ranks are out of range");
		}
		if (members > CD_RANKS_MAX)
			r_fail(r, "a group has more ranks than the limit");
	}
	return true;
}

static bool get_rank_fr(struct rbuf *r, struct cd_rank_summary *s, uint32_t ns, bool *oom)
{
	s->source = (uint8_t)r_u32(r, CD_SRC_FR_JSON);
	s->fr_version = r_id(r, ns);
	s->fr_world_pg = r_id(r, ns);
	s->fr_p2p = r_u32(r, UINT32_MAX);
	s->fr_matched = r_u32(r, UINT32_MAX);
	s->fr_path = r_cstr(r, oom);
	uint32_t n = r_count(r, sizeof *s->fr.v);
	if (n && n != s->colls.n) {
		r_fail(r, "a rank's Flight Recorder records are not one per collective");
		n = 0;
	}
	if (!cd_vec_reserve(&s->fr, n))
		return false;
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		struct cd_fr_crec *f = &s->fr.v[s->fr.n++];
		f->record_id = r_s(r);
		f->op_id = r_s(r);
		f->t_started = r_s(r);
		f->t_completed = r_s(r);
		f->out_bytes = r_s(r);
		f->frames_off = r_u32(r, UINT32_MAX);
		f->frames_n = r_u32(r, UINT32_MAX);
		f->user_frame = r_u32(r, UINT32_MAX);
		f->state = (uint8_t)r_u32(r, CD_FR_STATE_OTHER);
		int64_t ret = r_s(r);
		if (ret < -1 || ret > 1)
			r_fail(r, "a Flight Recorder record's retired is neither -1, 0 nor 1");
		f->retired = (int8_t)ret;
	}
	n = r_count(r, sizeof *s->frames.v);
	if (!cd_vec_reserve(&s->frames, n))
		return false;
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		struct cd_sframe *f = &s->frames.v[s->frames.n++];
		f->fn = r_id(r, ns);
		f->file = r_id(r, ns);
		f->line = r_s(r);
	}
	for (uint32_t i = 0; i < s->fr.n && !r->bad; i++) {
		const struct cd_fr_crec *f = &s->fr.v[i];
		if ((uint64_t)f->frames_off + f->frames_n > s->frames.n ||
		    (f->user_frame != UINT32_MAX && f->user_frame >= s->frames.n))
			r_fail(r, "a Flight Recorder record's frames are out of range");
	}
	n = r_count(r, sizeof *s->pg_status.v);
	if (!cd_vec_reserve(&s->pg_status, n))
		return false;
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		struct cd_pgstat *p = &s->pg_status.v[s->pg_status.n++];
		p->pg = r_id(r, ns);
		p->enqueued = r_s(r);
		p->started = r_s(r);
		p->completed = r_s(r);
	}
	return true;
}

/* One rank record into s (zeroed).  false: out of memory. */
static bool get_rank(struct rbuf *r, struct class *cls, uint32_t ncls,
		     struct cd_rank_summary *s)
{
	bool oom = false;
	uint32_t ns = r_count(r, INTERN_ITEM);
	for (uint32_t k = 0; k < ns && !r->bad; k++) {
		uint64_t len = r_u(r);
		const unsigned char *p = r_take(r, len);
		if (!p)
			break;
		uint32_t id = cd_intern(&s->s, (const char *)p, (uint32_t)len);
		if (id == CD_NOID)
			return false;
		if (id != k)
			r_fail(r, "a rank record lists a string twice");
	}
	uint32_t c = r_u32(r, UINT32_MAX);
	if (!r->bad && c >= ncls)
		r_fail(r, "a rank record names a class that has not come yet");
	if (!r->bad && cls[c].nstr > ns)
		r_fail(r, "a class refers to strings its rank does not have");
	/* the rank's own copy of the class's collectives: a time of at least
	 * a byte each follows in this record */
	if (!r->bad && cls[c].ncolls > (uint64_t)(r->end - r->p))
		r_fail(r, "a rank record is too short for the times of its class's collectives");
	if (!r->bad)
		r_room(r, cls[c].ncolls, sizeof *s->colls.v);
	if (r->bad)
		return true;
	/* the collectives: the class's, each rank with its own times */
	if (cls[c].ncolls) {
		if (!(s->colls.v = malloc((size_t)cls[c].ncolls * sizeof *s->colls.v)))
			return false;
		memcpy(s->colls.v, cls[c].colls, (size_t)cls[c].ncolls * sizeof *s->colls.v);
		s->colls.n = s->colls.cap = cls[c].ncolls;
	}
	/* the per-module counts: one copy for the ranks of the class */
	s->mods.v = cls[c].mods;
	s->mods.n = s->mods.cap = cls[c].nmods;
	s->mods_borrowed = cls[c].mods_given;
	cls[c].mods_given = true;
	get_rank_end(r, s, ns, &oom);
	if (oom || !get_rank_lists(r, s, ns) || !get_rank_fr(r, s, ns, &oom) || oom)
		return false;
	if (!r->bad && r->p != r->end)
		r_fail(r, "a rank record has bytes left over");
	s->from_summary = true;
	return true;
}

/* A trim record into the rank read last.  false: out of memory. */
static bool get_trim(struct rbuf *r, struct cd_rank_summary *s)
{
	s->trim_region = r_s(r);
	uint32_t n = r_count(r, sizeof *s->trim_pg.v + sizeof *s->trim_seq.v);
	for (uint32_t k = 0; k < n && !r->bad; k++) {
		uint32_t pg = r_id(r, s->s.count);
		int64_t seq = r_s(r);
		if (!r->bad && pg == CD_NOID)
			r_fail(r, "a trim record names no group");
		if (!r->bad && (!cd_vec_push(&s->trim_pg, pg) || !cd_vec_push(&s->trim_seq, seq)))
			return false;
	}
	if (!r->bad && r->p != r->end)
		r_fail(r, "a trim record has bytes left over");
	return true;
}

/* The header into info; *version: the format version it names (the rest
 * is read only when it is CD_SUMMARY_VERSION). */
static void get_header(struct rbuf *r, struct cd_summary_info *info, uint64_t *version,
		       bool *oom)
{
	*version = r_u(r);
	if (r->bad || *version != CD_SUMMARY_VERSION)
		return;
	info->shard_k = r_s(r);
	info->shard_n = r_s(r);
	free(r_cstr(r, oom));
}

struct reading {
	struct zin z;
	struct class *cls;
	uint32_t ncls, capcls;
	struct cd_rank_summary *sums;
	uint32_t n, cap;
};

static void reading_free(struct reading *x)
{
	if (x->z.raw)
		x->z.buf = NULL;   /* the caller's */
	for (uint32_t i = 0; i < x->ncls; i++) {
		free(x->cls[i].colls);
		if (!x->cls[i].mods_given)
			free(x->cls[i].mods);
	}
	free(x->cls);
	for (uint32_t i = 0; x->sums && i < x->n; i++)
		cd_rank_summary_free(&x->sums[i]);
	free(x->sums);
	free(x->z.in);
	free(x->z.buf);
	ZSTD_freeDCtx(x->z.dc);
	if (x->z.fd >= 0)
		close(x->z.fd);
}

/* Room for one more item in *v (of *cap, n used, size bytes each), the
 * growth counted in m.  false: out of memory. */
static bool grow(void **v, uint32_t n, uint32_t *cap, size_t size, struct mem *m)
{
	if (n < *cap)
		return true;
	uint32_t nc = *cap ? *cap * 2 : 16;
	void *nv = nc > *cap ? realloc(*v, (size_t)nc * size) : NULL;
	if (!nv)
		return false;
	m->used += (uint64_t)(nc - *cap) * size;
	*v = nv;
	*cap = nc;
	return true;
}

/* What a rank read holds (its class's per-module counts aside: they are
 * counted with the class). */
static uint64_t rank_bytes(const struct cd_rank_summary *s)
{
	uint64_t b = cd_rank_summary_bytes(s);
	if (!s->mods_borrowed)
		b -= (uint64_t)s->mods.cap * sizeof *s->mods.v;
	b += (uint64_t)s->trim_pg.cap * sizeof *s->trim_pg.v +
	     (uint64_t)s->trim_seq.cap * sizeof *s->trim_seq.v;
	b += (s->path ? strlen(s->path) + 1 : 0) + (s->error ? strlen(s->error) + 1 : 0) +
	     (s->fr_path ? strlen(s->fr_path) + 1 : 0);
	return b;
}

/* The rank and world size of rank record k (from 1) as a trace's meta
 * event may have them (event.c): a world size of 1 to CD_RANKS_MAX, a
 * rank of 0 to CD_INT_MAX and below the world size.  false: why says what
 * is wrong. */
static bool rank_in_range(const struct cd_rank_summary *s, uint32_t k, char *why, size_t n)
{
	bool ranked = s->has_rank || s->rank_from_name;
	const char *path = s->path ? s->path : "";
	if (s->has_world && (s->world_size < 1 || s->world_size > (int64_t)CD_RANKS_MAX))
		snprintf(why, n, "rank record %" PRIu32 " (%.200s): world_size %" PRId64
			 " is out of range (1 to %u)", k, path, s->world_size, CD_RANKS_MAX);
	else if (ranked && (s->rank < 0 || s->rank > CD_INT_MAX))
		snprintf(why, n, "rank record %" PRIu32 " (%.200s): rank %" PRId64
			 " is out of range (0 to %lld)", k, path, s->rank, CD_INT_MAX);
	else if (ranked && s->has_world && s->rank >= s->world_size)
		snprintf(why, n, "rank record %" PRIu32 " (%.200s): rank %" PRId64
			 " is not below world_size %" PRId64, k, path, s->rank, s->world_size);
	else
		return true;
	return false;
}

/* One class or rank record (tag) into x.  false: out of memory. */
static bool read_one(struct reading *x, int tag, struct rbuf *r, struct mem *m, char *why,
		     size_t nwhy)
{
	if (tag == TAG_CLASS) {
		if (!grow((void **)&x->cls, x->ncls, &x->capcls, sizeof *x->cls, m))
			return false;
		struct class *c = &x->cls[x->ncls++];
		if (!get_class(r, c))
			return false;
		m->used += (uint64_t)c->ncolls * sizeof *c->colls + (uint64_t)c->nmods * sizeof *c->mods;
	} else if (tag == TAG_RANK) {
		if (!grow((void **)&x->sums, x->n, &x->cap, sizeof *x->sums, m))
			return false;
		struct cd_rank_summary *s = &x->sums[x->n++];
		memset(s, 0, sizeof *s);
		if (!get_rank(r, x->cls, x->ncls, s))
			return false;
		m->used += rank_bytes(s);
		if (!r->bad && !rank_in_range(s, x->n, why, nwhy))
			r_fail(r, why);
	} else {   /* TAG_TRIM, x->n > 0 */
		struct cd_rank_summary *s = &x->sums[x->n - 1];
		uint64_t before = rank_bytes(s);
		if (!get_trim(r, s))
			return false;
		m->used += rank_bytes(s) - before;
	}
	if (m->used > m->limit)
		r_fail(r, MEM_PAST);
	return true;
}

/* Read records until 'E'. */
static enum cd_status read_records(struct reading *x, struct cd_summary_info *info,
				   struct cd_err *err)
{
	struct rbuf r = {0};
	struct mem m = {0};
	bool header = false, oom = false;
	int tag = 0;
	char why[400];
	enum cd_status st;

	while ((st = next_record(&x->z, &tag, &r, err)) == CD_OK) {
		uint64_t at = x->z.offset, version;
		/* the bound: the records up to the end of this one */
		m.limit = (uint64_t)CD_SUMMARY_MEM_FLOOR +
			  (uint64_t)CD_SUMMARY_MEM_RATIO * (at + (uint64_t)(r.end - r.start));
		r.mem = &m;
		if (!header && tag != TAG_HEADER)
			return bad_at(err, at, "the first record is not its header");
		switch (tag) {
		case TAG_HEADER:
			if (header)
				return bad_at(err, at, "a second header");
			header = true;
			get_header(&r, info, &version, &oom);
			if (!r.bad && version != CD_SUMMARY_VERSION) {
				snprintf(why, sizeof why, "its version is %" PRIu64 ", not %d%s", version,
					 CD_SUMMARY_VERSION,
					 version > CD_SUMMARY_VERSION ? " (a newer commdebug wrote it)" : "");
				r_fail(&r, why);
			}
			break;
		case TAG_TRIM:
			if (!x->n)
				return bad_at(err, at, "a trim record before any rank");
			/* fall through */
		case TAG_CLASS:
		case TAG_RANK:
			if (!read_one(x, tag, &r, &m, why, sizeof why))
				return cd_fail(err, CD_ERR_NOMEM, "out of memory");
			break;
		case TAG_END: {
			uint64_t nr = r_u(&r), nc = r_u(&r);
			if (!r.bad && (nr != x->n || nc != x->ncls))
				r_fail(&r, "its end record counts other ranks or classes than came before");
			if (!r.bad && r.p != r.end)
				r_fail(&r, "its end record has bytes left over");
			if (!r.bad) {
				info->ranks = nr;
				info->classes = nc;
				x->z.pos += (size_t)(r.end - r.start);
				x->z.offset += (uint64_t)(r.end - r.start);
				return CD_OK;
			}
			break;
		}
		default:
			break;   /* a record of a later version: skipped */
		}
		if (oom)
			return cd_fail(err, CD_ERR_NOMEM, "out of memory");
		if (r.bad)
			return bad_at(err, at + (uint64_t)(r.p - r.start), r.bad);
	}
	if (st == CD_END)
		return bad_at(err, x->z.offset, "the file is cut: it has no end record");
	return st;
}

/* After the end record: nothing but the end of the zstd stream. */
static enum cd_status check_tail(struct zin *z, struct cd_err *err)
{
	bool failed = false;
	if (z_need(z, 1, &failed, err))
		return bad_at(err, z->offset, "data after its end record");
	if (failed)
		return CD_ERR_FORMAT;
	if (!z->raw && z->frame_left != 0)
		return bad_at(err, z->offset, "the file is cut inside its last zstd frame");
	return CD_OK;
}

/* The records read, the summaries handed over. */
static enum cd_status finish_read(struct reading *x, struct cd_rank_summary **sums,
				  uint32_t *n, struct cd_summary_info *info, struct cd_err *err)
{
	enum cd_status st = read_records(x, info, err);
	if (!st)
		st = check_tail(&x->z, err);
	if (!st) {
		*sums = x->sums;
		*n = x->n;
		x->sums = NULL;
		x->n = 0;
	}
	reading_free(x);
	return st;
}

enum cd_status cd_summary_parse(const void *p, size_t size, struct cd_rank_summary **sums,
				uint32_t *n, struct cd_summary_info *info, struct cd_err *err)
{
	struct reading x = {.z = {.raw = true, .fd = -1, .buf = (unsigned char *)p, .len = size,
				  .cap = size, .eof = true}};
	*sums = NULL;
	*n = 0;
	*info = (struct cd_summary_info){0};
	return finish_read(&x, sums, n, info, err);
}

enum cd_status cd_summary_read(const char *path, struct cd_rank_summary **sums, uint32_t *n,
			       struct cd_summary_info *info, struct cd_err *err)
{
	struct reading x = {.z = {.fd = -1}};
	char magic[CD_SUMMARY_MAGIC_LEN];
	enum cd_status st = CD_OK;

	*sums = NULL;
	*n = 0;
	*info = (struct cd_summary_info){0};
	x.z.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (x.z.fd < 0) {
		st = cd_fail(err, CD_ERR_IO, "cannot open: %s", strerror(errno));
		goto out;
	}
	if (read(x.z.fd, magic, sizeof magic) != (ssize_t)sizeof magic ||
	    !cd_summary_sniff(magic, sizeof magic)) {
		st = cd_fail(err, CD_ERR_FORMAT, "not a commdebug summary file");
		goto out;
	}
	x.z.in_cap = ZSTD_DStreamInSize();
	x.z.in = malloc(x.z.in_cap);
	x.z.dc = ZSTD_createDCtx();
	if (!x.z.in || !x.z.dc) {
		st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	return finish_read(&x, sums, n, info, err);
out:
	reading_free(&x);
	return st;
}
