/* PyTorch Flight Recorder dumps (frdump.h).
 *
 * Phase 2 of issue 23 put what a dump holds beyond struct cd_crec into the
 * summary (ranks.h): struct cd_fr_crec per collective in s->fr (parallel
 * to s->colls, dumps only, so that trace summaries keep their size),
 * s->frames, s->pg_status, s->source, s->fr_version, s->fr_p2p,
 * s->fr_states and s->pg_conf_broken.  The runner (run.c) sends a file to
 * cd_fr_summarize when cd_run_input_kind says it is a dump.
 */
#include "frdump.h"
#include "../read/event.h"
#include "../read/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cd_fr_state_names[] = {"scheduled", "started", "completed", "other"};

static const struct {
	const char *c10, *torch;
	int size;
} dtypes[] = {
	{"Float", "torch.float32", 4}, {"Double", "torch.float64", 8},
	{"Half", "torch.float16", 2}, {"BFloat16", "torch.bfloat16", 2},
	{"Long", "torch.int64", 8}, {"Int", "torch.int32", 4},
	{"Short", "torch.int16", 2}, {"Char", "torch.int8", 1},
	{"Byte", "torch.uint8", 1}, {"Bool", "torch.bool", 1},
	{"ComplexFloat", "torch.complex64", 8}, {"ComplexDouble", "torch.complex128", 16},
	{"ComplexHalf", "torch.complex32", 4},
	{"Float8_e4m3fn", "torch.float8_e4m3fn", 1}, {"Float8_e5m2", "torch.float8_e5m2", 1},
	{"Float8_e4m3fnuz", "torch.float8_e4m3fnuz", 1}, {"Float8_e5m2fnuz", "torch.float8_e5m2fnuz", 1},
	{"UInt16", "torch.uint16", 2}, {"UInt32", "torch.uint32", 4}, {"UInt64", "torch.uint64", 8},
};

int cd_fr_dtype_size(const char *c10)
{
	for (size_t i = 0; c10 && i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (strcmp(dtypes[i].c10, c10) == 0)
			return dtypes[i].size;
	return 0;
}

const char *cd_fr_dtype_torch(const char *c10)
{
	for (size_t i = 0; c10 && i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (strcmp(dtypes[i].c10, c10) == 0)
			return dtypes[i].torch;
	return NULL;
}

bool cd_fr_sniff(const uint8_t *d, size_t len)
{
	if (len >= 3 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5) {
		size_t i = 2;
		if (d[1] >= 4 && len >= 11 && d[2] == 0x95)
			i = 11;   /* FRAME */
		return i < len && d[i] == '}';
	}
	size_t i = 0;
	while (i < len && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t'))
		i++;
	if (i >= len || d[i] != '{')
		return false;
	static const char *const keys[] = {"\"version\"", "\"entries\"", "\"pg_config\"",
					   "\"pg_status\"", "\"comm_lib_version\"",
					   "\"nccl_comm_state\""};
	i++;
	while (i < len && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t'))
		i++;
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		size_t n = strlen(keys[k]);
		if (len - i >= n && memcmp(d + i, keys[k], n) == 0)
			return true;
	}
	return false;
}

bool cd_fr_sniff_file(const char *path)
{
	uint8_t buf[64];
	long n = cd_reader_peek_file(path, buf, sizeof buf);
	return n > 0 && cd_fr_sniff(buf, (size_t)n);
}

/* An int, or a string of one (the JSON dump writes pg_status as strings). */
static int64_t int_or(const struct cd_pv *v, int64_t dflt)
{
	int64_t i;
	const char *s = cd_pv_str(v);
	if (cd_pv_int(v, &i))
		return i;
	if (s && *s) {
		char *end;
		errno = 0;
		long long x = strtoll(s, &end, 10);
		if (!errno && *end == 0)
			return x;
	}
	return dflt;
}

static const char *str_or(const struct cd_pv *v, const char *dflt)
{
	const char *s = cd_pv_str(v);
	return s ? s : dflt;
}

/* A pg_config rank (parsed: it fit in a long long) as a trace's pg event
 * may have one (event.c, check_dims): 0 to CD_INT_MAX. */
static enum cd_status conf_rank(int64_t r, bool parsed, const char *pg, struct cd_err *err)
{
	if (parsed && r < 0)
		return cd_fail(err, CD_ERR_TRACE, "pg_config \"%.100s\": negative rank %lld in \"ranks\"",
			       pg, (long long)r);
	if (!parsed || r > CD_INT_MAX)
		return cd_fail(err, CD_ERR_TRACE, "pg_config \"%.100s\": rank out of range in \"ranks\"",
			       pg);
	return CD_OK;
}

/* The ranks of group pg, "[0, 1, 2]" or a list of ints, into a new array:
 * each 0 to CD_INT_MAX, at most CD_RANKS_MAX of them (as a trace's pg
 * event).  Items of a list that are not ints are left out.  Returns CD_OK,
 * CD_ERR_TRACE (err says why) or CD_ERR_NOMEM. */
static enum cd_status parse_ranks(const struct cd_pv *v, const char *pg, int64_t **out,
				  uint32_t *n, struct cd_err *err)
{
	struct cd_pv *const *it;
	size_t k = cd_pv_seq(v, &it), cap = 0;
	const char *s = k ? NULL : cd_pv_str(v);
	enum cd_status st;
	*out = NULL;
	*n = 0;
	/* a number starts at a digit not after a digit, or at "-" and a digit */
	for (const char *p = s; p && *p; p++)
		if (*p >= '0' && *p <= '9' && (p == s || p[-1] < '0' || p[-1] > '9') &&
		    (p == s || p[-1] != '-'))
			cap++;
		else if (*p == '-' && p[1] >= '0' && p[1] <= '9')
			cap++;
	if (k)
		cap = k;
	if (!cap)
		return CD_OK;
	if (cap > CD_RANKS_MAX)
		return cd_fail(err, CD_ERR_TRACE, "pg_config \"%.100s\": more than %u ranks", pg,
			       CD_RANKS_MAX);
	if (!(*out = calloc(cap, sizeof **out)))
		return CD_ERR_NOMEM;
	for (size_t i = 0; i < k; i++) {
		int64_t r;
		if (!cd_pv_int(it[i], &r))
			continue;
		if ((st = conf_rank(r, true, pg, err)))
			return st;
		(*out)[(*n)++] = r;
	}
	for (const char *p = s; p && *p;) {
		if ((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')) {
			char *end;
			errno = 0;
			long long r = strtoll(p, &end, 10);
			if ((st = conf_rank(r, errno == 0, pg, err)))
				return st;
			if (*n < cap)
				(*out)[(*n)++] = r;
			p = end;
		} else {
			p++;
		}
	}
	return CD_OK;
}

static enum cd_status tensors(const struct cd_pv *sizes, const struct cd_pv *dt,
			      struct cd_fr_tensor **out, uint32_t *n, int64_t *total)
{
	struct cd_pv *const *sv, *const *dv;
	size_t ns = cd_pv_seq(sizes, &sv), nd = cd_pv_seq(dt, &dv);
	*out = NULL;
	*n = 0;
	*total = 0;
	if (!ns)
		return CD_OK;
	if (!(*out = calloc(ns, sizeof **out)))
		return CD_ERR_NOMEM;
	for (size_t i = 0; i < ns; i++) {
		struct cd_pv *const *dims;
		size_t k = cd_pv_seq(sv[i], &dims);
		int64_t numel = 1;
		for (size_t j = 0; j < k; j++) {
			int64_t x = int_or(dims[j], 0);
			if (x < 0 || (x && numel > INT64_MAX / x))
				numel = 0;
			else
				numel *= x;
		}
		(*out)[i].numel = numel;
		(*out)[i].ndim = (uint32_t)k;
		(*out)[i].dtype = i < nd ? cd_pv_str(dv[i]) : NULL;
		if (*total <= INT64_MAX - numel)
			*total += numel;
	}
	*n = (uint32_t)ns;
	return CD_OK;
}

static int64_t time_or(const struct cd_pv *v)
{
	int64_t t;
	return cd_pv_int(v, &t) && t > 0 ? t : -1;
}

static enum cd_status entry(const struct cd_pv *e, struct cd_fr_entry *x, size_t idx,
			    struct cd_err *err)
{
	struct cd_pv *const *it;
	if (!cd_pv_is(e, CD_PV_DICT))
		return cd_fail(err, CD_ERR_TRACE, "entries[%zu] is a %s, not a dict", idx,
			       e ? cd_pv_kind_names[e->kind] : "nothing");
	x->record_id = int_or(cd_pv_get(e, "record_id"), (int64_t)idx);
	x->pg_id = int_or(cd_pv_get(e, "pg_id"), -1);
	x->op_id = int_or(cd_pv_get(e, "op_id"), -1);
	x->seq = int_or(cd_pv_get(e, "collective_seq_id"), -1);
	x->p2p_seq = int_or(cd_pv_get(e, "p2p_seq_id"), -1);
	size_t npg = cd_pv_seq(cd_pv_get(e, "process_group"), &it);
	x->pg_name = npg > 0 ? str_or(it[0], "") : "";
	x->pg_desc = npg > 1 ? str_or(it[1], "") : "";
	x->profiling_name = cd_pv_str(cd_pv_get(e, "profiling_name"));
	if (!x->profiling_name)
		return cd_fail(err, CD_ERR_TRACE, "entries[%zu] has no profiling_name", idx);
	const char *colon = strchr(x->profiling_name, ':');
	x->coll = colon ? colon + 1 : x->profiling_name;
	int64_t b;
	x->is_p2p = cd_pv_int(cd_pv_get(e, "is_p2p"), &b) ? b != 0 : false;
	x->has_retired = cd_pv_int(cd_pv_get(e, "retired"), &b);
	x->retired = x->has_retired && b != 0;
	x->state_text = str_or(cd_pv_get(e, "state"), "");
	x->state = CD_FR_STATE_OTHER;
	for (int s = 0; s < CD_FR_STATE_OTHER; s++)
		if (strcmp(x->state_text, cd_fr_state_names[s]) == 0)
			x->state = (enum cd_fr_state)s;
	x->time_created_ns = time_or(cd_pv_get(e, "time_created_ns"));
	x->time_started_ns = time_or(cd_pv_get(e, "time_discovered_started_ns"));
	x->time_completed_ns = time_or(cd_pv_get(e, "time_discovered_completed_ns"));
	x->timeout_ms = int_or(cd_pv_get(e, "timeout_ms"), -1);
	if (tensors(cd_pv_get(e, "input_sizes"), cd_pv_get(e, "input_dtypes"), &x->in, &x->n_in,
		    &x->in_numel) ||
	    tensors(cd_pv_get(e, "output_sizes"), cd_pv_get(e, "output_dtypes"), &x->out, &x->n_out,
		    &x->out_numel))
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	size_t nf = cd_pv_seq(cd_pv_get(e, "frames"), &it);
	if (nf) {
		if (!(x->frames = calloc(nf, sizeof *x->frames)))
			return cd_fail(err, CD_ERR_NOMEM, "out of memory");
		for (size_t i = 0; i < nf; i++) {
			x->frames[i].name = str_or(cd_pv_get(it[i], "name"), "");
			x->frames[i].file = str_or(cd_pv_get(it[i], "filename"), "");
			x->frames[i].line = int_or(cd_pv_get(it[i], "line"), -1);
		}
		x->n_frames = (uint32_t)nf;
	}
	return CD_OK;
}

static int by_record(const void *a, const void *b)
{
	const struct cd_fr_entry *x = a, *y = b;
	return x->record_id < y->record_id ? -1 : x->record_id > y->record_id;
}

/* Order of index arrays: by the seq the array is about, then record. */
struct idx_key { int64_t k, rec; uint32_t i; };
static int by_key(const void *a, const void *b)
{
	const struct idx_key *x = a, *y = b;
	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return x->rec < y->rec ? -1 : x->rec > y->rec;
}

static enum cd_status group(struct cd_fr_dump *d)
{
	struct idx_key *keys = NULL;
	enum cd_status st = CD_OK;
	if (d->n_entries && !(d->pgs = calloc(d->n_entries, sizeof *d->pgs)))
		return CD_ERR_NOMEM;
	if (d->n_entries && !(keys = calloc(d->n_entries, sizeof *keys)))
		return CD_ERR_NOMEM;
	for (uint32_t i = 0; i < d->n_entries; i++) {
		const struct cd_fr_entry *e = &d->entries[i];
		uint32_t g = 0;
		while (g < d->n_pgs && strcmp(d->pgs[g].name, e->pg_name) != 0)
			g++;
		if (g == d->n_pgs) {
			d->pgs[g].name = e->pg_name;
			d->pgs[g].desc = e->pg_desc;
			for (uint32_t c = 0; c < d->n_conf; c++)
				if (strcmp(d->conf[c].key, e->pg_name) == 0 ||
				    strcmp(d->conf[c].name, e->pg_name) == 0)
					d->pgs[g].conf = &d->conf[c];
			for (uint32_t s = 0; s < d->n_status; s++)
				if (strcmp(d->status[s].pg, e->pg_name) == 0)
					d->pgs[g].status = &d->status[s];
			d->n_pgs++;
		}
	}
	for (uint32_t g = 0; g < d->n_pgs; g++) {
		struct cd_fr_pg *p = &d->pgs[g];
		for (int p2p = 0; p2p < 2; p2p++) {
			uint32_t n = 0;
			for (uint32_t i = 0; i < d->n_entries; i++) {
				const struct cd_fr_entry *e = &d->entries[i];
				if (strcmp(e->pg_name, p->name) != 0 || e->is_p2p != (p2p != 0))
					continue;
				keys[n].k = p2p ? e->p2p_seq : e->seq;
				keys[n].rec = e->record_id;
				keys[n].i = i;
				n++;
			}
			if (!n)
				continue;
			uint32_t *out = calloc(n, sizeof *out);
			if (!out) {
				st = CD_ERR_NOMEM;
				goto out;
			}
			qsort(keys, n, sizeof *keys, by_key);
			for (uint32_t i = 0; i < n; i++)
				out[i] = keys[i].i;
			if (p2p) {
				p->p2p = out;
				p->n_p2p = n;
			} else {
				p->colls = out;
				p->n_colls = n;
			}
		}
	}
out:
	free(keys);
	return st;
}

enum cd_status cd_fr_parse(const uint8_t *data, size_t len, const char *name,
			   struct cd_fr_dump *d, struct cd_err *err)
{
	enum cd_status st;
	struct cd_pv *const *it;

	memset(d, 0, sizeof *d);
	if (len && data[0] == 0x80) {
		d->format = CD_FR_PICKLE;
		st = cd_pickle_parse(data, len, &d->doc, err);
	} else {
		d->format = CD_FR_JSON;
		st = cd_pvjson_parse(data, len, &d->doc, err);
	}
	if (st)
		return st;
	const struct cd_pv *root = d->doc.root;
	if (!cd_pv_is(root, CD_PV_DICT)) {
		st = cd_fail(err, CD_ERR_TRACE, "not a Flight Recorder dump: the top value is a %s, not a dict",
			     cd_pv_kind_names[root->kind]);
		goto fail;
	}
	d->version = cd_pv_str(cd_pv_get(root, "version"));
	if (!d->version) {
		st = cd_fail(err, CD_ERR_TRACE, "not a Flight Recorder dump: no \"version\"");
		goto fail;
	}
	if (sscanf(d->version, "%d.%d", &d->major, &d->minor) != 2 || d->major != 2) {
		st = cd_fail(err, CD_ERR_TRACE,
			     "Flight Recorder dump version \"%.40s\" is not supported (2.0 to 2.x: "
			     "PyTorch 2.x; torch 2.14 writes 2.10)", d->version);
		goto fail;
	}
	const struct cd_pv *entries = cd_pv_get(root, "entries");
	if (entries && !cd_pv_is(entries, CD_PV_LIST) && !cd_pv_is(entries, CD_PV_TUPLE)) {
		st = cd_fail(err, CD_ERR_TRACE, "\"entries\" is a %s, not a list",
			     cd_pv_kind_names[entries->kind]);
		goto fail;
	}
	d->comm_lib_version = cd_pv_str(cd_pv_get(root, "comm_lib_version"));
	d->has_comm_state = cd_pv_get(root, "nccl_comm_state") != NULL;
	d->has_rank = cd_pv_int(cd_pv_get(root, "rank"), &d->rank);
	if (d->has_rank && (d->rank < 0 || d->rank > CD_INT_MAX)) {
		/* as a trace's meta event: 0 to CD_INT_MAX */
		st = cd_fail(err, CD_ERR_TRACE, "\"rank\" %lld is out of range", (long long)d->rank);
		goto fail;
	}
	if (!d->has_rank && cd_rank_from_name(name, CD_RANK_NAME_TAIL, &d->rank))
		d->has_rank = d->rank_from_name = true;

	const struct cd_pv *pc = cd_pv_get(root, "pg_config");
	if (cd_pv_is(pc, CD_PV_DICT) && pc->u.c.n) {
		size_t n = pc->u.c.n / 2;
		if (!(d->conf = calloc(n, sizeof *d->conf)))
			goto nomem;
		for (size_t i = 0; i < n; i++) {
			struct cd_fr_pgconf *c = &d->conf[d->n_conf];
			const struct cd_pv *v = pc->u.c.v[2 * i + 1];
			c->key = str_or(pc->u.c.v[2 * i], "");
			c->name = str_or(cd_pv_get(v, "name"), c->key);
			c->desc = str_or(cd_pv_get(v, "desc"), "");
			st = parse_ranks(cd_pv_get(v, "ranks"), c->key, &c->ranks, &c->n_ranks, err);
			d->n_conf++;
			if (st == CD_ERR_NOMEM)
				goto nomem;
			if (st)
				goto fail;
		}
	}
	const struct cd_pv *ps = cd_pv_get(root, "pg_status");
	if (cd_pv_is(ps, CD_PV_DICT) && ps->u.c.n) {
		size_t n = ps->u.c.n / 2;
		if (!(d->status = calloc(n, sizeof *d->status)))
			goto nomem;
		for (size_t i = 0; i < n; i++) {
			struct cd_fr_pgstatus *s = &d->status[d->n_status++];
			const struct cd_pv *v = ps->u.c.v[2 * i + 1];
			s->pg = str_or(ps->u.c.v[2 * i], "");
			s->last_enqueued = int_or(cd_pv_get(v, "last_enqueued_collective"), -1);
			s->last_started = int_or(cd_pv_get(v, "last_started_collective"), -1);
			s->last_completed = int_or(cd_pv_get(v, "last_completed_collective"), -1);
		}
	}
	size_t ne = cd_pv_seq(entries, &it);
	if (ne) {
		if (!(d->entries = calloc(ne, sizeof *d->entries)))
			goto nomem;
		for (size_t i = 0; i < ne; i++) {
			if ((st = entry(it[i], &d->entries[i], i, err))) {
				d->n_entries = (uint32_t)i + 1;
				goto fail;
			}
		}
		d->n_entries = (uint32_t)ne;
		qsort(d->entries, ne, sizeof *d->entries, by_record);
	}
	if (group(d))
		goto nomem;
	return CD_OK;
nomem:
	st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
fail:
	cd_fr_dump_free(d);
	return st;
}

enum cd_status cd_fr_read(const char *path, struct cd_fr_dump *d, struct cd_err *err)
{
	enum cd_status st;
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;
	FILE *f = fopen(path, "rb");

	memset(d, 0, sizeof *d);
	if (!f)
		return cd_fail(err, CD_ERR_IO, "cannot open: %s", strerror(errno));
	for (;;) {
		if (n == cap) {
			if (cap >= CD_PV_MAX_INPUT) {
				st = cd_fail(err, CD_ERR_LIMIT, "larger than 256 MiB");
				goto out;
			}
			cap = cap ? cap * 2 : 65536;
			uint8_t *nb = realloc(buf, cap);
			if (!nb) {
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
				goto out;
			}
			buf = nb;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		n += k;
		if (k == 0)
			break;
	}
	if (ferror(f)) {
		st = cd_fail(err, CD_ERR_IO, "read error: %s", strerror(errno));
		goto out;
	}
	st = cd_fr_parse(buf, n, path, d, err);
out:
	fclose(f);
	free(buf);
	return st;
}

void cd_fr_dump_free(struct cd_fr_dump *d)
{
	if (!d)
		return;
	for (uint32_t i = 0; i < d->n_entries; i++) {
		free(d->entries[i].in);
		free(d->entries[i].out);
		free(d->entries[i].frames);
	}
	free(d->entries);
	for (uint32_t i = 0; i < d->n_conf; i++)
		free(d->conf[i].ranks);
	free(d->conf);
	free(d->status);
	for (uint32_t i = 0; i < d->n_pgs; i++) {
		free(d->pgs[i].colls);
		free(d->pgs[i].p2p);
	}
	free(d->pgs);
	cd_pv_doc_free(&d->doc);
	memset(d, 0, sizeof *d);
}

/* ---- the summary */

static uint32_t sidz(struct cd_rank_summary *s, const char *p)
{
	return cd_intern(&s->s, p, (uint32_t)strlen(p));
}

/* Is file a frame of torch itself (or of Python's own machinery, or of
 * commdebug's recorder when it ran beside the Flight Recorder), not of the
 * job's code? */
static bool torch_file(const char *f)
{
	return strstr(f, "/torch/") || strncmp(f, "torch/", 6) == 0 || f[0] == '<' ||
	       strstr(f, "/threading.py") || strstr(f, "/commdebug/_") ||
	       strstr(f, "/commdebug/recorder.py") || strstr(f, "/commdebug/record.py");
}

/* The frames of e into s->frames; *fc says where. */
static bool summarize_frames(struct cd_rank_summary *s, const struct cd_fr_entry *e,
			     struct cd_fr_crec *fc)
{
	fc->frames_off = s->frames.n;
	fc->user_frame = UINT32_MAX;
	for (uint32_t k = 0; k < e->n_frames; k++) {
		const struct cd_fr_frame *fr = &e->frames[k];
		struct cd_sframe sf = {sidz(s, fr->name ? fr->name : ""),
				       sidz(s, fr->file ? fr->file : ""), fr->line};
		if (sf.fn == CD_NOID || sf.file == CD_NOID || !cd_vec_push(&s->frames, sf))
			return false;
		if (fc->user_frame == UINT32_MAX && fr->file && !torch_file(fr->file))
			fc->user_frame = s->frames.n - 1;
	}
	fc->frames_n = s->frames.n - fc->frames_off;
	return true;
}

/* Bytes of n tensors (elements x element size), -1 when a dtype is unknown. */
static int64_t tensor_bytes(const struct cd_fr_tensor *t, uint32_t n)
{
	int64_t b = 0;
	for (uint32_t k = 0; k < n; k++) {
		int sz = cd_fr_dtype_size(t[k].dtype);
		if (!sz || t[k].numel < 0 || t[k].numel > INT64_MAX / 16 || b > INT64_MAX / 2)
			return -1;
		b += t[k].numel * sz;
	}
	return b;
}

void cd_fr_summarize(const char *path, struct cd_rank_summary *s)
{
	struct cd_fr_dump d;
	struct cd_err err = {0};

	s->path = strdup(path);
	s->end = CD_END_CLOSED;
	s->open_region = -1;
	s->end_time = -1;
	s->last_time = -1;
	s->end_how = s->end_exc = s->end_msg = s->end_signame = CD_NOID;
	s->fr_version = CD_NOID;
	s->source = CD_SRC_FR_PICKLE;
	if (cd_fr_read(path, &d, &err) != CD_OK) {
		s->error = strdup(err.msg);
		s->end = CD_END_ERROR;
		/* "<prefix><rank>": the rank is there, only unread (not missing) */
		if (cd_rank_from_name(path, CD_RANK_NAME_TAIL, &s->rank))
			s->has_rank = s->rank_from_name = true;
		return;
	}
	s->source = d.format == CD_FR_JSON ? CD_SRC_FR_JSON : CD_SRC_FR_PICKLE;
	s->fr_version = sidz(s, d.version ? d.version : "");
	s->has_rank = d.has_rank;
	s->rank = d.rank;
	s->rank_from_name = d.rank_from_name;
	uint32_t mod = sidz(s, "(no module: Flight Recorder)");
	for (uint32_t i = 0; i < d.n_entries; i++) {
		const struct cd_fr_entry *e = &d.entries[i];
		if (e->is_p2p) {
			s->fr_p2p++;
			continue;
		}
		struct cd_crec c = {0};
		struct cd_fr_crec fc = {0};
		c.pg = sidz(s, e->pg_name);
		c.coll = sidz(s, e->coll);
		const char *dt = e->n_in ? cd_fr_dtype_torch(e->in[0].dtype) : NULL;
		c.dtype = dt ? sidz(s, dt) : CD_NOID;
		int64_t b = e->n_in ? tensor_bytes(e->in, e->n_in) : -1;
		c.has_bytes = b >= 0;
		c.bytes = b >= 0 ? b : 0;
		c.module = mod;
		c.phase = CD_PH_FORWARD;
		c.seq = e->seq;
		c.region = -1;
		c.time = e->time_created_ns;
		fc.record_id = e->record_id;
		fc.op_id = e->op_id;
		fc.state = (uint8_t)e->state;
		fc.retired = (int8_t)(e->has_retired ? e->retired : -1);
		if (!s->fr_has_world_pg && c.pg != CD_NOID && strcmp(e->pg_desc, "default_pg") == 0) {
			s->fr_has_world_pg = true;
			s->fr_world_pg = c.pg;
		}
		fc.t_started = e->time_started_ns;
		fc.t_completed = e->time_completed_ns;
		fc.out_bytes = e->n_out ? tensor_bytes(e->out, e->n_out) : -1;
		if (e->state != CD_FR_SCHEDULED || fc.t_started >= 0 || fc.t_completed >= 0)
			s->fr_states = true;
		if (c.pg == CD_NOID || c.coll == CD_NOID || !summarize_frames(s, e, &fc) ||
		    !cd_vec_push(&s->colls, c) || !cd_vec_push(&s->fr, fc)) {
			free(s->error);
			s->error = strdup("out of memory");
			s->end = CD_END_ERROR;
			if (s->fr.n != s->colls.n)
				s->fr.n = 0;
			break;
		}
		s->events++;
		if (c.time > 0 && (s->t0 == 0 || c.time < s->t0))
			s->t0 = c.time;   /* its first record: the dump's start */
		int64_t t = c.time;
		if (fc.t_started > t)
			t = fc.t_started;
		if (fc.t_completed > t)
			t = fc.t_completed;
		if (t > s->last_time)
			s->last_time = t;
	}
	for (uint32_t i = 0; i < d.n_status; i++) {
		const struct cd_fr_pgstatus *st = &d.status[i];
		struct cd_pgstat ps = {sidz(s, st->pg ? st->pg : ""), st->last_enqueued,
				       st->last_started, st->last_completed};
		if (ps.pg != CD_NOID)
			cd_vec_push(&s->pg_status, ps);
	}
	int64_t seen = s->has_rank ? s->rank + 1 : 0;
	for (uint32_t i = 0; i < d.n_conf; i++) {
		const struct cd_fr_pgconf *c = &d.conf[i];
		for (uint32_t k = 0; k < c->n_ranks; k++)   /* 0 .. CD_INT_MAX (parse_ranks) */
			if (c->ranks[k] + 1 > seen)
				seen = c->ranks[k] + 1;
		if (!*c->name) {
			s->pg_conf_broken = true;
			continue;   /* gloo's "" key: which group it is is unknown */
		}
		cd_rank_add_pg(s, sidz(s, c->name), c->ranks, c->n_ranks);
		if (strcmp(c->desc, "default_pg") == 0 && c->n_ranks > 0 &&
		    (!s->has_rank || s->rank < c->n_ranks)) {
			s->has_world = true;
			s->world_size = c->n_ranks;
		}
	}
	if (!s->has_world && seen > 0 && seen <= CD_RANKS_MAX) {
		/* no world group in pg_config (or one without this rank): at
		 * least every rank it names, when a trace could have as many */
		s->has_world = true;
		s->world_size = seen;
	}
	cd_fr_dump_free(&d);
}

static void fr_read(const char *path, const void *ctx, void *res)
{
	(void)ctx;
	cd_fr_summarize(path, res);
}

static void fr_free(void *res)
{
	cd_rank_summary_free(res);
}

static uint64_t fr_bytes(const void *res)
{
	return cd_rank_summary_bytes(res);
}

const struct cd_run_reader cd_run_fr_reader = {
	.name = "flight-recorder",
	.size = sizeof(struct cd_rank_summary),
	.read = fr_read,
	.free = fr_free,
	.bytes = fr_bytes,
};
