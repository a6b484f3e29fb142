/* commdebug check: each replayed region against the expectations that apply
 * to it, and the snapshot of a region for check --write. */
#include "check.h"

#include <fnmatch.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What CommDebugMode does not count, per module and region: collectives
 * issued while the activation-checkpointing flag was set, and bytes. */
struct cd_check_acc {
	uint32_t gen;
	cd_countv ac;
	int64_t bytes;
};

static enum cd_status nomem(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

enum cd_status cd_check_init(struct cd_check *c, const struct cd_expect *x, bool write,
			     struct cd_err *err)
{
	memset(c, 0, sizeof *c);
	c->x = x;
	c->write = write;
	c->gen = UINT32_MAX;
	cd_out_init(&c->scratch, NULL);
	c->scratch.hold = true; /* text is built here, never written */
	cd_out_init(&c->name, NULL);
	c->name.hold = true;
	if (x && x->nids) {
		c->items = calloc(x->nids, sizeof *c->items);
		c->label_matched = calloc(x->sections.n + 1, sizeof *c->label_matched);
		if (!c->items || !c->label_matched)
			return nomem(err);
	}
	return CD_OK;
}

void cd_check_free(struct cd_check *c)
{
	for (uint32_t i = 0; c->x && i < c->x->nids; i++)
		free(c->items[i].what);
	free(c->items);
	for (uint32_t i = 0; i < c->fails.n; i++) {
		free(c->fails.v[i].what);
		free(c->fails.v[i].expected);
		free(c->fails.v[i].got);
		free(c->fails.v[i].label);
	}
	cd_vec_free(&c->fails);
	for (uint32_t i = 0; i < c->traces.n; i++) {
		free(c->traces.v[i].path);
		cd_vec_free(&c->traces.v[i].regions);
	}
	cd_vec_free(&c->traces);
	for (uint32_t i = 0; i < c->snaps.n; i++) {
		free(c->snaps.v[i].label);
		free(c->snaps.v[i].body);
	}
	cd_vec_free(&c->snaps);
	free(c->label_matched);
	for (uint32_t i = 0; i < c->acc.n; i++)
		cd_vec_free(&c->acc.v[i].ac);
	cd_vec_free(&c->acc);
	cd_vec_free(&c->coll_bytes);
	cd_out_free(&c->scratch);
	cd_out_free(&c->name);
	memset(c, 0, sizeof *c);
}

enum cd_status cd_check_trace_begin(struct cd_check *c, const char *path, struct cd_err *err)
{
	struct cd_check_trace t = {0};
	if (!(t.path = strdup(path)) || !cd_vec_push(&c->traces, t)) {
		free(t.path);
		return nomem(err);
	}
	c->gen = UINT32_MAX;
	for (uint32_t i = 0; i < c->acc.n; i++)
		c->acc.v[i].gen = UINT32_MAX;
	return CD_OK;
}

void cd_check_meta(struct cd_check *c, int64_t rank)
{
	struct cd_check_trace *t = &c->traces.v[c->traces.n - 1];
	t->has_rank = true;
	t->rank = rank;
}

/* ---- per-region accumulators ---- */

static void region_sync(struct cd_check *c, const struct cd_replay *r)
{
	if (c->gen == r->gen)
		return;
	c->gen = r->gen;
	c->colls_in_region = c->colls_with_bytes = 0;
	if (c->coll_bytes.n)
		memset(c->coll_bytes.v, 0, c->coll_bytes.n * sizeof *c->coll_bytes.v);
}

static struct cd_check_acc *acc_get(struct cd_check *c, const struct cd_replay *r, uint32_t id,
				    bool create)
{
	if (id >= c->acc.n) {
		if (!create)
			return NULL;
		uint32_t old = c->acc.n;
		if (!cd_vec_reserve(&c->acc, id + 1))
			return NULL;
		memset(c->acc.v + old, 0, (id + 1 - old) * sizeof *c->acc.v);
		for (uint32_t i = old; i <= id; i++)
			c->acc.v[i].gen = UINT32_MAX;
		c->acc.n = id + 1;
	}
	struct cd_check_acc *a = &c->acc.v[id];
	if (a->gen != r->gen) {
		if (!create)
			return NULL;
		a->gen = r->gen;
		a->ac.n = 0;
		a->bytes = 0;
	}
	return a;
}

static void charge(struct cd_check *c, const struct cd_replay *r, uint32_t id, uint32_t coll,
		   int64_t bytes)
{
	struct cd_check_acc *a = acc_get(c, r, id, true);
	if (!a)
		return; /* out of memory: the module's extras stay short; rare enough */
	if (bytes > 0)
		a->bytes += bytes;
	if (!r->ac)
		return;
	for (uint32_t i = 0; i < a->ac.n; i++)
		if (a->ac.v[i].coll == coll) {
			a->ac.v[i].n++;
			return;
		}
	struct cd_count k = {coll, 1};
	(void)cd_vec_push(&a->ac, k);
}

void cd_check_on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			    uint32_t coll)
{
	struct cd_check *c = ud;
	region_sync(c, r);
	c->colls_in_region++;
	int64_t bytes = -1;
	if (e->have & CD_F_BYTES) {
		bytes = e->bytes;
		c->colls_with_bytes++;
		if (coll >= c->coll_bytes.n) {
			uint32_t old = c->coll_bytes.n;
			if (!cd_vec_reserve(&c->coll_bytes, coll + 1))
				return;
			memset(c->coll_bytes.v + old, 0, (coll + 1 - old) * sizeof *c->coll_bytes.v);
			c->coll_bytes.n = coll + 1;
		}
		c->coll_bytes.v[coll] += bytes;
	}
	/* charged as CommDebugMode charges counts: the current module, then the
	 * modules of its parent snapshot */
	const uint32_t *par;
	uint32_t npar;
	charge(c, r, r->cur, coll, bytes);
	cd_replay_charge_list(r, &par, &npar);
	for (uint32_t i = 0; i < npar; i++)
		if (par[i] != r->cur)
			charge(c, r, par[i], coll, bytes);
}

/* ---- what a region shows ---- */

static uint64_t count_total(const cd_countv *v)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < v->n; i++)
		n += v->v[i].n;
	return n;
}

static uint64_t count_of(const cd_countv *v, uint32_t coll)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->v[i].coll == coll)
			return v->v[i].n;
	return 0;
}

static uint32_t coll_id(const struct cd_replay *r, const char *name)
{
	return cd_intern_find(&r->colls, name, (uint32_t)strlen(name));
}

static bool has_bytes(const struct cd_check *c)
{
	return c->colls_with_bytes == c->colls_in_region;
}

static int64_t bytes_of(const struct cd_check *c, uint32_t coll)
{
	return coll < c->coll_bytes.n ? c->coll_bytes.v[coll] : 0;
}

/* The counts of a module in a phase (ac: NULL when it has none). */
static const cd_countv *phase_counts(struct cd_check *c, const struct cd_replay *r, uint32_t id,
				     const struct cd_rmod *m, int phase)
{
	static const cd_countv empty;
	if (phase == CD_EXP_FORWARD)
		return &m->fw;
	if (phase == CD_EXP_BACKWARD)
		return &m->bw;
	const struct cd_check_acc *a = acc_get(c, r, id, false);
	return a ? &a->ac : &empty;
}

static int64_t module_bytes(struct cd_check *c, const struct cd_replay *r, uint32_t id)
{
	const struct cd_check_acc *a = acc_get(c, r, id, false);
	return a ? a->bytes : 0;
}

/* Modules of the region: in the helper (ran forward) or counted. */
static const struct cd_rmod *region_mod(const struct cd_replay *r, uint32_t id)
{
	const struct cd_rmod *m = cd_replay_mod(r, id);
	return m && (m->in_helper || m->has_counts) ? m : NULL;
}

/* ---- checking ---- */

void cd_bound_text(const struct cd_bound *b, char *buf, size_t n)
{
	if (b->min == b->max)
		snprintf(buf, n, "%" PRId64, b->min);
	else if (b->max == INT64_MAX)
		snprintf(buf, n, "at least %" PRId64, b->min);
	else if (b->min == 0)
		snprintf(buf, n, "at most %" PRId64, b->max);
	else
		snprintf(buf, n, "%" PRId64 "..%" PRId64, b->min, b->max);
}

struct where_now {
	const struct cd_replay *r;  /* NULL: not about one region */
	const char *label;
};

/* A failure about a whole trace, not one of its regions. */
static const struct where_now whole_trace = {NULL, NULL};

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Record that expectation id (written at `at`, generic text `item`) held or
 * not for `subject`. */
static void record(struct cd_check *c, uint32_t id, struct cd_where at, const char *item,
		   const char *subject, bool held, const char *expected, const char *got,
		   const struct where_now *w)
{

	struct cd_check_item *it = &c->items[id];
	if (!it->what) {
		it->at = at;
		it->what = strdup(item);
	}
	if (held) {
		it->held++;
		return;
	}
	it->failed++;
	c->nfails++;
	if (c->fails.n >= CD_CHECK_MAX_FAILS)
		return;
	/* w NULL: about no trace (the file's ranks and labels over all traces);
	 * w without a replay: about the whole current trace */
	bool in_trace = w && c->traces.n;
	const struct cd_check_trace *t = in_trace ? &c->traces.v[c->traces.n - 1] : NULL;
	struct cd_check_fail f = {
		.id = id, .at = at, .what = strdup(subject), .expected = strdup(expected),
		.got = strdup(got), .trace = t ? c->traces.n - 1 : CD_CHECK_NO_TRACE,
		.has_rank = t && t->has_rank, .rank = t ? t->rank : 0,
		.region = w && w->r ? w->r->region : -1,
		.label = w ? dup_or_null(w->label) : NULL,
	};
	if (!f.what || !f.expected || !f.got || !cd_vec_push(&c->fails, f)) {
		free(f.what);
		free(f.expected);
		free(f.got);
		free(f.label);
	}
}

static void check_bound(struct cd_check *c, const struct cd_bound *b, const char *item,
			const char *subject, int64_t got, const struct where_now *w)
{
	char want[64], have[32];
	if (!b->set)
		return;
	bool held = got >= b->min && got <= b->max;
	cd_bound_text(b, want, sizeof want);
	snprintf(have, sizeof have, "%" PRId64, got);
	record(c, b->id, b->at, item, subject, held, want, have, w);
}

/* A byte bound on a region whose collectives do not all carry bytes. */
static void bytes_unknown(struct cd_check *c, const struct cd_bound *b, const char *item,
			  const struct where_now *w)
{
	char want[64];
	cd_bound_text(b, want, sizeof want);
	record(c, b->id, b->at, item, item, false, want, "unknown (collectives without bytes)", w);
}

static void check_phase(struct cd_check *c, const struct cd_replay *r, uint32_t id,
			const struct cd_rmod *m, const struct cd_exp_module *em, int ph,
			const char *mname, const struct where_now *w)
{
	static const char *const names[CD_EXP_NPHASES] = {"forward", "backward", "checkpointing"};
	const struct cd_exp_phase *p = &em->phase[ph];
	const cd_countv *v = phase_counts(c, r, id, m, ph);
	char item[512], subject[512];

	snprintf(item, sizeof item, "%s %s total", em->glob, names[ph]);
	snprintf(subject, sizeof subject, "%s %s total", mname, names[ph]);
	check_bound(c, &p->total, item, subject, (int64_t)count_total(v), w);
	for (uint32_t k = 0; k < p->colls.n; k++) {
		const struct cd_exp_count *ec = &p->colls.v[k];
		uint32_t coll = coll_id(r, ec->name);
		snprintf(item, sizeof item, "%s %s %s", em->glob, names[ph], ec->name);
		snprintf(subject, sizeof subject, "%s %s %s", mname, names[ph], ec->name);
		check_bound(c, &ec->b, item, subject,
			    coll == CD_NOID ? 0 : (int64_t)count_of(v, coll), w);
	}
}

/* A glob with no unescaped * ? [ is a plain name: copy it without its
 * backslashes into buf.  False when it is a pattern (or too long). */
static bool unescape_literal(const char *glob, char *buf, size_t n)
{
	size_t o = 0;
	for (const char *p = glob; *p; p++) {
		if (*p == '*' || *p == '?' || *p == '[')
			return false;
		if (*p == '\\' && p[1])
			p++;
		if (o + 1 >= n)
			return false;
		buf[o++] = *p;
	}
	buf[o] = '\0';
	return true;
}

static void check_module(struct cd_check *c, const struct cd_replay *r,
			 const struct cd_exp_module *em, const struct where_now *w)
{
	char item[512], subject[512];
	bool any = false;

	/* a name without pattern characters is looked up, not matched against
	 * every module */
	char lit[512];
	bool literal = unescape_literal(em->glob, lit, sizeof lit);
	uint32_t only = literal ? cd_intern_find(&r->mods, lit, (uint32_t)strlen(lit)) : CD_NOID;
	for (uint32_t id = literal ? only : 0; id < r->rm.n; id++) {
		const struct cd_rmod *m = region_mod(r, id);
		if (literal && id != only)
			break;
		if (!m)
			continue;
		const char *name = cd_intern_str(&r->mods, id);
		if (!literal && fnmatch(em->glob, name, 0) != 0)
			continue;
		any = true;
		if (em->none) {
			uint64_t n = count_total(&m->fw) + count_total(&m->bw);
			char got[32];
			snprintf(got, sizeof got, "%" PRIu64, n);
			snprintf(item, sizeof item, "%s: no collectives", em->glob);
			snprintf(subject, sizeof subject, "%s: no collectives", name);
			record(c, em->id, em->at, item, subject, n == 0, "0", got, w);
		}
		for (int ph = 0; ph < CD_EXP_NPHASES; ph++)
			if (em->phase[ph].set)
				check_phase(c, r, id, m, em, ph, name, w);
		if (em->bytes.set) {
			snprintf(item, sizeof item, "%s bytes", em->glob);
			snprintf(subject, sizeof subject, "%s bytes", name);
			if (!has_bytes(c))
				bytes_unknown(c, &em->bytes, item, w);
			else
				check_bound(c, &em->bytes, item, subject, module_bytes(c, r, id), w);
		}
	}
	snprintf(item, sizeof item, "module %s", em->glob);
	if (!any)
		record(c, em->id, em->at, item, item, false, "a module matching it",
		       "none in this region", w);
	else if (!em->none)
		record(c, em->id, em->at, item, item, true, "", "", w);
}

/* Sharding entry i of the region: its fully qualified name, written into
 * o (NUL-terminated), and its placements ("" when none); NULL when its
 * module has no state in the region. */
static const char *sharded_param(const struct cd_replay *r, uint32_t i, struct cd_out *o)
{
	const struct cd_shard_ref *ref = &r->sharding.v[i];
	const struct cd_rmod *m = cd_replay_mod(r, ref->mod);
	if (!m)
		return NULL;
	const struct cd_pinfo *p = &cd_replay_more(r, m)->params.v[ref->param];
	o->len = 0;
	cd_out_str(o, cd_intern_str(&r->mods, ref->mod));
	cd_out_write(o, ".", 1);
	cd_out_str(o, cd_intern_str(&r->strs, p->name));
	cd_out_write(o, "", 1);
	if (o->failed)
		return NULL;
	return p->placements == CD_NOID ? "" : cd_intern_str(&r->strs, p->placements);
}

static const char *param_placements(const struct cd_replay *r, const char *fqn, struct cd_out *o)
{
	for (uint32_t i = 0; i < r->sharding.n; i++) {
		const char *plc = sharded_param(r, i, o);
		if (plc && strcmp(o->buf, fqn) == 0)
			return plc;
	}
	return NULL;
}

static void check_section(struct cd_check *c, const struct cd_replay *r,
			  const struct cd_exp_section *s, const struct where_now *w)
{
	char item[512];
	uint64_t total = count_total(&r->comm);

	check_bound(c, &s->total, "total", "total", (int64_t)total, w);
	for (uint32_t k = 0; k < s->colls.n; k++) {
		const struct cd_exp_count *ec = &s->colls.v[k];
		uint32_t coll = coll_id(r, ec->name);
		check_bound(c, &ec->b, ec->name, ec->name,
			    coll == CD_NOID ? 0 : (int64_t)count_of(&r->comm, coll), w);
	}
	if (s->bytes_total.set || s->bytes.n) {
		int64_t all = 0;
		for (uint32_t i = 0; i < c->coll_bytes.n; i++)
			all += c->coll_bytes.v[i];
		if (s->bytes_total.set) {
			if (!has_bytes(c))
				bytes_unknown(c, &s->bytes_total, "bytes total", w);
			else
				check_bound(c, &s->bytes_total, "bytes total", "bytes total", all, w);
		}
		for (uint32_t k = 0; k < s->bytes.n; k++) {
			const struct cd_exp_count *ec = &s->bytes.v[k];
			uint32_t coll = coll_id(r, ec->name);
			snprintf(item, sizeof item, "bytes %s", ec->name);
			if (!has_bytes(c))
				bytes_unknown(c, &ec->b, item, w);
			else
				check_bound(c, &ec->b, item, item,
					    coll == CD_NOID ? 0 : bytes_of(c, coll), w);
		}
	}
	for (uint32_t k = 0; k < s->modules.n; k++)
		check_module(c, r, &s->modules.v[k], w);
	for (uint32_t k = 0; k < s->params.n; k++) {
		const struct cd_exp_param *ep = &s->params.v[k];
		const char *got = param_placements(r, ep->name, &c->scratch);
		snprintf(item, sizeof item, "parameter %s", ep->name);
		record(c, ep->id, ep->at, item, item, got && strcmp(got, ep->placements) == 0,
		       ep->placements, got ? (*got ? got : "not a DTensor") : "no such DTensor parameter",
		       w);
	}
}

/* ---- snapshots (check --write) ---- */

static bool plain_ok(const char *s)
{
	static const char *const words[] = {"true", "false", "null", "yes", "no", "on", "off",
					    "none", "all", "y", "n", "True", "False", "Null",
					    "TRUE", "FALSE", "NULL", "Yes", "No", "On", "Off"};
	if (!*s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' || *p == '-'))
			return false;
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (strcmp(s, words[i]) == 0)
			return false;
	return true;
}

/* A YAML scalar: plain when safe, else double-quoted.  glob: escape the
 * characters fnmatch would take as a pattern. */
static void yaml_scalar(struct cd_out *o, const char *s, bool glob)
{
	bool meta = glob && strpbrk(s, "*?[\\");
	if (!meta && plain_ok(s)) {
		cd_out_str(o, s);
		return;
	}
	cd_out_write(o, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (glob && (*p == '*' || *p == '?' || *p == '[' || *p == '\\'))
			cd_out_str(o, "\\\\");
		if (*p == '"' || *p == '\\')
			cd_out_printf(o, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			cd_out_printf(o, "\\x%02x", *p);
		else
			cd_out_write(o, (const char *)p, 1);
	}
	cd_out_write(o, "\"", 1);
}

static void snap_counts(struct cd_out *o, const struct cd_replay *r, const cd_countv *v,
			size_t indent, bool with_total)
{
	if (with_total) {
		cd_out_spaces(o, indent);
		cd_out_printf(o, "total: %" PRIu64 "\n", count_total(v));
	}
	for (uint32_t i = 0; i < v->n; i++) {
		cd_out_spaces(o, indent);
		yaml_scalar(o, cd_intern_str(&r->colls, v->v[i].coll), false);
		cd_out_printf(o, ": %" PRIu32 "\n", v->v[i].n);
	}
}

static void snap_module(struct cd_check *c, struct cd_out *o, const struct cd_replay *r,
			uint32_t id, const struct cd_rmod *m)
{
	static const char *const names[CD_EXP_NPHASES] = {"forward", "backward", "checkpointing"};
	cd_out_spaces(o, 6);
	yaml_scalar(o, cd_intern_str(&r->mods, id), true);
	if (!count_total(&m->fw) && !count_total(&m->bw)) {
		cd_out_str(o, ": none\n");
		return;
	}
	cd_out_str(o, ":\n");
	for (int ph = 0; ph < CD_EXP_NPHASES; ph++) {
		const cd_countv *v = phase_counts(c, r, id, m, ph);
		if (ph == CD_EXP_CHECKPOINTING && !count_total(v))
			continue;
		cd_out_spaces(o, 8);
		cd_out_str(o, names[ph]);
		if (!count_total(v)) {
			cd_out_str(o, ": none\n");
			continue;
		}
		cd_out_str(o, ":\n");
		snap_counts(o, r, v, 10, true);
	}
	if (has_bytes(c)) {
		cd_out_spaces(o, 8);
		cd_out_printf(o, "bytes: %" PRId64 "\n", module_bytes(c, r, id));
	}
}

static char *snapshot(struct cd_check *c, const struct cd_replay *r)
{
	struct cd_out *o = &c->scratch;
	o->len = 0;
	cd_out_printf(o, "    total: %" PRIu64 "\n", count_total(&r->comm));
	if (r->comm.n) {
		cd_out_str(o, "    collectives:\n");
		snap_counts(o, r, &r->comm, 6, false);
		if (has_bytes(c)) {
			int64_t all = 0;
			for (uint32_t i = 0; i < c->coll_bytes.n; i++)
				all += c->coll_bytes.v[i];
			cd_out_printf(o, "    bytes:\n      total: %" PRId64 "\n", all);
			for (uint32_t i = 0; i < r->comm.n; i++) {
				cd_out_spaces(o, 6);
				yaml_scalar(o, cd_intern_str(&r->colls, r->comm.v[i].coll), false);
				cd_out_printf(o, ": %" PRId64 "\n", bytes_of(c, r->comm.v[i].coll));
			}
		}
	}
	bool header = false;
	/* helper order first (as the table prints them), then modules that were
	 * only counted (backward without forward in the region) */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t n = pass == 0 ? r->helper.n : r->rm.n;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t id = pass == 0 ? r->helper.v[i] : i;
			const struct cd_rmod *m = region_mod(r, id);
			if (!m || (pass == 1 && m->in_helper))
				continue;
			if (!header) {
				cd_out_str(o, "    modules:\n");
				header = true;
			}
			snap_module(c, o, r, id, m);
		}
	}
	if (r->sharding.n) {
		cd_out_str(o, "    parameters:\n");
		for (uint32_t i = 0; i < r->sharding.n; i++) {
			const char *plc = sharded_param(r, i, &c->name);
			if (!plc)
				continue;
			cd_out_spaces(o, 6);
			yaml_scalar(o, c->name.buf, false);
			cd_out_str(o, ": ");
			yaml_scalar(o, plc, false);
			cd_out_write(o, "\n", 1);
		}
	}
	char *body = malloc(o->len + 1);
	if (body) {
		memcpy(body, o->buf, o->len);
		body[o->len] = '\0';
	}
	return body;
}

enum cd_status cd_check_region_done(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	struct cd_check *c = ud;
	struct cd_check_trace *t = &c->traces.v[c->traces.n - 1];
	const char *label = r->label != CD_NOID ? cd_intern_str(&r->strs, r->label) : NULL;

	region_sync(c, r);
	if (!cd_vec_push(&t->regions, r->region))
		return nomem(err);
	if (c->write) {
		struct cd_check_snap s = {c->traces.n - 1, r->region, dup_or_null(label),
					  snapshot(c, r)};
		if (!s.body || (label && !s.label) || !cd_vec_push(&c->snaps, s)) {
			free(s.body);
			free(s.label);
			return nomem(err);
		}
		return CD_OK;
	}
	struct where_now w = {r, label};
	for (uint32_t i = 0; i < c->x->sections.n; i++) {
		const struct cd_exp_section *s = &c->x->sections.v[i];
		if (!cd_scope_has(&s->scope, t->has_rank, t->rank, r->region, label))
			continue;
		if (s->scope.label)
			c->label_matched[i] = true;
		check_section(c, r, s, &w);
	}
	return CD_OK;
}

/* ---- whole traces ---- */

static bool seen(const struct cd_check_trace *t, int64_t region)
{
	for (uint32_t i = 0; i < t->regions.n; i++)
		if (t->regions.v[i] == region)
			return true;
	return false;
}

enum cd_status cd_check_trace_end(struct cd_check *c, bool cut, struct cd_err *err)
{
	struct cd_check_trace *t = &c->traces.v[c->traces.n - 1];
	(void)err;
	t->cut = cut;
	if (c->write)
		return CD_OK;
	for (uint32_t i = 0; i < c->x->sections.n; i++) {
		const struct cd_exp_section *s = &c->x->sections.v[i];
		const struct cd_scope *sc = &s->scope;
		char what[96], got[64];
		if (sc->all_regions || sc->label)
			continue;
		/* does the scope's rank list include this trace? */
		bool rank_in = sc->all_ranks;
		for (uint32_t k = 0; k < sc->ranks.n && !rank_in; k++)
			rank_in = t->has_rank && sc->ranks.v[k] == t->rank;
		if (!rank_in)
			continue;
		for (uint32_t k = 0; k < sc->regions.n; k++) {
			bool ok = seen(t, sc->regions.v[k]);
			snprintf(what, sizeof what, "region %" PRId64, sc->regions.v[k]);
			record(c, sc->id, sc->at, "the regions named", what, ok, "in the trace",
			       "not in the trace", &whole_trace);
		}
		if (sc->range && !sc->regions.n) {
			bool ok = false;
			for (uint32_t k = 0; k < t->regions.n && !ok; k++)
				ok = t->regions.v[k] >= sc->from && t->regions.v[k] <= sc->to;
			if (sc->to == INT64_MAX)
				snprintf(what, sizeof what, "regions from %" PRId64, sc->from);
			else
				snprintf(what, sizeof what, "regions %" PRId64 "-%" PRId64, sc->from,
					 sc->to);
			snprintf(got, sizeof got, "none in the trace");
			record(c, sc->id, sc->at, "the regions named", what, ok, "at least one",
			       ok ? "" : got, &whole_trace);
		}
	}
	return CD_OK;
}

enum cd_status cd_check_finish(struct cd_check *c, struct cd_err *err)
{
	(void)err;
	if (c->write)
		return CD_OK;
	for (uint32_t i = 0; i < c->x->sections.n; i++) {
		const struct cd_exp_section *s = &c->x->sections.v[i];
		char what[512];
		if (s->scope.label) {
			snprintf(what, sizeof what, "regions labelled %s", s->scope.label);
			record(c, s->scope.id, s->scope.at, what, what, c->label_matched[i],
			       "at least one", c->label_matched[i] ? "" : "none", NULL);
		}
		for (uint32_t k = 0; k < s->scope.ranks.n; k++) {
			bool found = false;
			for (uint32_t j = 0; j < c->traces.n && !found; j++)
				found = c->traces.v[j].has_rank &&
					c->traces.v[j].rank == s->scope.ranks.v[k];
			snprintf(what, sizeof what, "rank %" PRId64, s->scope.ranks.v[k]);
			record(c, s->scope.id, s->scope.rank_at, "the ranks named", what, found,
			       "a trace of it", found ? "" : "none given", NULL);
		}
	}
	return CD_OK;
}

enum cd_status cd_check_ranks(struct cd_check *c, bool agree, const char *finding,
			      struct cd_err *err)
{
	(void)err;
	record(c, c->x->ranks_id, c->x->ranks_at, "ranks agree", "ranks agree", agree, "agree",
	       finding ? finding : "", NULL);
	return CD_OK;
}

/* ---- writing the snapshot ---- */

static void write_regions(struct cd_out *o, const int64_t *v, uint32_t n, uint32_t all)
{
	if (n == all) {
		cd_out_str(o, "all");
		return;
	}
	bool contiguous = true;
	for (uint32_t i = 1; i < n && contiguous; i++)
		contiguous = v[i] == v[i - 1] + 1;
	if (n == 1) {
		cd_out_printf(o, "%" PRId64, v[0]);
	} else if (contiguous) {
		cd_out_printf(o, "{from: %" PRId64 ", to: %" PRId64 "}", v[0], v[n - 1]);
	} else {
		cd_out_write(o, "[", 1);
		for (uint32_t i = 0; i < n; i++)
			cd_out_printf(o, i ? ", %" PRId64 : "%" PRId64, v[i]);
		cd_out_write(o, "]", 1);
	}
}

/* s[0..n) into pattern p (at most cap bytes with its NUL) with fnmatch's
 * characters escaped; returns the new end, or NULL when it does not fit. */
static char *glob_escape(char *p, const char *end, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strchr("*?[\\", s[i]) && p < end)
			*p++ = '\\';
		if (p >= end)
			return NULL;
		*p++ = s[i];
	}
	return p;
}

/* Whether snapshot s is of trace tr (of any when tr is CD_CHECK_NO_TRACE). */
static bool of_trace(const struct cd_check_snap *s, uint32_t tr)
{
	return tr == CD_CHECK_NO_TRACE || s->trace == tr;
}

/* Whether region is one of v[0..n). */
static bool region_in(const int64_t *v, uint32_t n, int64_t region)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i] == region)
			return true;
	return false;
}

/* Whether pattern picks exactly the regions v[0..n) of trace tr (of every
 * trace when tr is CD_CHECK_NO_TRACE) among their labelled regions. */
static bool label_picks(const struct cd_check *c, const char *pattern, const int64_t *v,
			uint32_t n, uint32_t tr)
{
	for (uint32_t k = 0; k < c->snaps.n; k++) {
		const struct cd_check_snap *s = &c->snaps.v[k];
		if (!of_trace(s, tr))
			continue;
		if (region_in(v, n, s->region) != (s->label && fnmatch(pattern, s->label, 0) == 0))
			return false;
	}
	return true;
}

/* A label pattern for the regions v[0..n) of trace tr (or of every trace):
 * their label, or the labels' common start and end around a '*', when it
 * picks those regions and no other (written into buf); else NULL. */
static const char *label_scope(const struct cd_check *c, const int64_t *v, uint32_t n,
			       uint32_t tr, char *buf, size_t cap)
{
	const char *first = NULL;
	size_t pre = 0, suf = 0;
	bool same = true;

	for (uint32_t k = 0; k < c->snaps.n; k++) {
		const struct cd_check_snap *s = &c->snaps.v[k];
		if (!of_trace(s, tr) || !region_in(v, n, s->region))
			continue;
		if (!s->label || !*s->label)
			return NULL;
		for (const unsigned char *p = (const unsigned char *)s->label; *p; p++)
			if (*p < 0x20 || *p == 0x7f)
				return NULL;
		if (!first) {
			first = s->label;
			pre = suf = strlen(first);
			continue;
		}
		size_t len = strlen(s->label), fl = strlen(first), i = 0;
		same = same && strcmp(first, s->label) == 0;
		while (i < pre && i < len && first[i] == s->label[i])
			i++;
		pre = i;
		for (i = 0; i < suf && i < len && first[fl - 1 - i] == s->label[len - 1 - i]; i++)
			;
		suf = i;
	}
	if (!first)
		return NULL;
	size_t fl = strlen(first);
	char *p = buf, *end = buf + cap - 1;
	if (same) {
		p = glob_escape(p, end, first, fl);
	} else {
		if (pre + suf > fl)
			suf = fl - pre;
		if (!(p = glob_escape(p, end, first, pre)) || p >= end)
			return NULL;
		*p++ = '*';
		p = glob_escape(p, end, first + fl - suf, suf);
	}
	if (!p)
		return NULL;
	*p = '\0';
	if (label_picks(c, buf, v, n, tr))
		return buf;
	/* labels of one length that differ in one place: "step [12]" */
	if (same || pre + suf + 1 != fl || fl >= cap / 2)
		return NULL;
	char set[256] = {0}, cls[257];
	size_t nc = 0;
	for (uint32_t k = 0; k < c->snaps.n; k++) {
		const struct cd_check_snap *sn = &c->snaps.v[k];
		if (!of_trace(sn, tr) || !region_in(v, n, sn->region))
			continue;
		if (strlen(sn->label) != fl)
			return NULL;
		unsigned char ch = (unsigned char)sn->label[pre];
		if (strchr("!^]-[\\", ch))
			return NULL;
		if (!set[ch]) {
			set[ch] = 1;
			cls[nc++] = (char)ch;
		}
	}
	p = glob_escape(buf, end, first, pre);
	if (!p || end - p < (ptrdiff_t)nc + 2)
		return NULL;
	*p++ = '[';
	memcpy(p, cls, nc);
	p += nc;
	*p++ = ']';
	if (!(p = glob_escape(p, end, first + pre + 1, suf)))
		return NULL;
	*p = '\0';
	return label_picks(c, buf, v, n, tr) ? buf : NULL;
}

/* A double-quoted YAML scalar of printable s. */
static void yaml_quoted(struct cd_out *o, const char *s)
{
	cd_out_write(o, "\"", 1);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			cd_out_write(o, "\\", 1);
		cd_out_write(o, s, 1);
	}
	cd_out_write(o, "\"", 1);
}

/* The label of region in trace tr's (or any trace's) snapshots, or NULL. */
static const char *snap_label(const struct cd_check *c, int64_t region, uint32_t tr)
{
	for (uint32_t k = 0; k < c->snaps.n; k++)
		if ((tr == CD_CHECK_NO_TRACE || c->snaps.v[k].trace == tr) &&
		    c->snaps.v[k].region == region)
			return c->snaps.v[k].label;
	return NULL;
}

/* "  - regions: ...\n" of an entry for the regions v[0..n) of trace tr (or
 * of every trace), which has all regions: all; a label pattern when the
 * regions' labels pick them and no other; else their numbers, with their
 * labels in a comment. */
static void write_scope(const struct cd_check *c, struct cd_out *o, const int64_t *v,
			uint32_t n, uint32_t all, uint32_t tr)
{
	char pat[512];
	const char *lb = n == all ? NULL : label_scope(c, v, n, tr, pat, sizeof pat);

	cd_out_str(o, "  - regions: ");
	if (lb) {
		cd_out_str(o, "{label: ");
		yaml_quoted(o, lb);
		cd_out_str(o, "}\n");
		return;
	}
	write_regions(o, v, n, all);
	/* the labels: of a range its ends, of a list (up to 4) each */
	bool range = n > 1 && v[n - 1] - v[0] + 1 == (int64_t)n;
	bool ok = n && n != all && (range || n <= 4);
	for (uint32_t i = 0; ok && i < n; i++) {
		const char *l = range && i && i < n - 1 ? "" : snap_label(c, v[i], tr);
		ok = l != NULL;
		for (const unsigned char *q = (const unsigned char *)l; ok && *q; q++)
			ok = *q >= 0x20 && *q != 0x7f;
	}
	if (ok && range) {
		cd_out_printf(o, "  # %s .. %s", snap_label(c, v[0], tr), snap_label(c, v[n - 1], tr));
	} else if (ok) {
		for (uint32_t i = 0; i < n; i++)
			cd_out_printf(o, i ? ", %s" : "  # %s", snap_label(c, v[i], tr));
	}
	cd_out_write(o, "\n", 1);
}

void cd_check_write_yaml(struct cd_check *c, struct cd_out *o, bool ranks_agree)
{
	uint32_t n = c->snaps.n;
	bool *done = calloc(n ? n : 1, sizeof *done);
	int64_t *regs = malloc((n ? n : 1) * sizeof *regs);
	uint32_t *owner = malloc((n ? n : 1) * sizeof *owner);

	cd_out_str(o, "# commdebug expectations (commdebug-expect(5)), written by\n"
		      "# `commdebug check --write`: what the traces do today.  Edit it down to\n"
		      "# what matters; `commdebug check` then fails when a change breaks it.\n"
		      "version: 1\n");
	if (ranks_agree)
		cd_out_str(o, "ranks: agree\n");
	cd_out_str(o, "expect:\n");
	if (!done || !regs || !owner)
		goto out;
	/* one entry per distinct body: for all traces at once when each has it
	 * in the same regions, else one entry per trace */
	for (uint32_t i = 0; i < n; i++) {
		if (done[i])
			continue;
		const char *body = c->snaps.v[i].body;
		uint32_t nown = 0;
		for (uint32_t j = i; j < n; j++)
			if (!done[j] && strcmp(c->snaps.v[j].body, body) == 0)
				owner[nown++] = j;
		/* owner[] is in trace order (snapshots are): trace t's regions are
		 * a contiguous run of owner[] */
		uint32_t ntr = 0, run = 0;
		bool same = true;
		for (uint32_t a = 0; a < nown; a++)
			regs[a] = c->snaps.v[owner[a]].region;
		for (uint32_t a = 0; a < nown;) {
			uint32_t tr = c->snaps.v[owner[a]].trace, b = a;
			while (b < nown && c->snaps.v[owner[b]].trace == tr)
				b++;
			if (ntr == 0)
				run = b - a;
			else if (b - a != run || memcmp(regs + a, regs, run * sizeof *regs) != 0)
				same = false;
			ntr++;
			a = b;
		}
		if (ntr == c->traces.n && same && c->traces.n > 1) {
			const struct cd_check_trace *t = &c->traces.v[c->snaps.v[owner[0]].trace];
			write_scope(c, o, regs, run, t->regions.n, CD_CHECK_NO_TRACE);
			cd_out_str(o, body);
		} else {
			for (uint32_t a = 0; a < nown;) {
				uint32_t tr = c->snaps.v[owner[a]].trace, b = a;
				while (b < nown && c->snaps.v[owner[b]].trace == tr)
					b++;
				const struct cd_check_trace *t = &c->traces.v[tr];
				write_scope(c, o, regs + a, b - a, t->regions.n, tr);
				if (c->traces.n > 1 && t->has_rank)
					cd_out_printf(o, "    rank: %" PRId64 "\n", t->rank);
				cd_out_str(o, body);
				a = b;
			}
		}
		for (uint32_t a = 0; a < nown; a++)
			done[owner[a]] = true;
	}
out:
	free(done);
	free(regs);
	free(owner);
}
