/* Expectations files: YAML -> a small node tree (libyaml's event parser,
 * no aliases, bounded depth and size) -> validated struct cd_expect.
 * The schema is documented in commdebug-expect(5). */
#include "expect.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../read/sniff.h"

/* ---- the node tree ---- */

enum ykind { Y_SCALAR, Y_MAP, Y_SEQ };

struct ynode {
	enum ykind kind;
	bool plain;              /* a plain (unquoted) scalar */
	char *s;                 /* scalar text, NUL-terminated */
	size_t n;
	struct cd_where at;
	struct ynode **kid;      /* map: key, value, key, value, ... */
	uint32_t nkid, cap;
};

#define Y_MAX_DEPTH 32
#define Y_MAX_NODES (1u << 20)

static void ynode_free(struct ynode *y)
{
	if (!y)
		return;
	/* iterative: a hostile file cannot blow the C stack */
	struct ynode **stack = NULL;
	size_t n = 0, cap = 0;
	struct ynode *cur = y;
	for (;;) {
		if (cur) {
			if (n + cur->nkid > cap) {
				size_t nc = cap ? cap * 2 : 64;
				while (nc < n + cur->nkid)
					nc *= 2;
				struct ynode **ns = realloc(stack, nc * sizeof *ns);
				if (!ns)
					break; /* leak rather than crash; cannot happen in practice */
				stack = ns;
				cap = nc;
			}
			for (uint32_t i = 0; i < cur->nkid; i++)
				stack[n++] = cur->kid[i];
			free(cur->kid);
			free(cur->s);
			free(cur);
		}
		if (!n)
			break;
		cur = stack[--n];
	}
	free(stack);
}

static struct cd_where mark(const yaml_mark_t *m)
{
	struct cd_where w = {(uint32_t)m->line + 1, (uint32_t)m->column + 1};
	return w;
}

static enum cd_status fail_at(struct cd_err *err, struct cd_where at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum cd_status fail_at(struct cd_err *err, struct cd_where at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	err->line = at.line;
	err->column = at.column;
	return CD_ERR_FORMAT;
}

static bool add_kid(struct ynode *p, struct ynode *k)
{
	if (p->nkid == p->cap) {
		uint32_t nc = p->cap ? p->cap * 2 : 4;
		struct ynode **nk = realloc(p->kid, nc * sizeof *nk);
		if (!nk)
			return false;
		p->kid = nk;
		p->cap = nc;
	}
	p->kid[p->nkid++] = k;
	return true;
}

/* Parse one YAML document into a tree; *out NULL for an empty file. */
static enum cd_status load_tree(const char *buf, size_t len, struct ynode **out,
				struct cd_err *err)
{
	yaml_parser_t p;
	yaml_event_t ev;
	struct ynode *stack[Y_MAX_DEPTH + 1];
	uint32_t depth = 0, nodes = 0, docs = 0;
	struct ynode *root = NULL;
	enum cd_status st = CD_OK;
	bool done = false;

	*out = NULL;
	if (!yaml_parser_initialize(&p))
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	while (!done) {
		if (!yaml_parser_parse(&p, &ev)) {
			struct cd_where at = mark(&p.problem_mark);
			st = fail_at(err, at, "bad YAML: %s", p.problem ? p.problem : "syntax error");
			break;
		}
		struct cd_where at = mark(&ev.start_mark);
		struct ynode *node = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1)
				st = fail_at(err, at, "more than one YAML document; an expectations "
						      "file holds one");
			break;
		case YAML_ALIAS_EVENT:
			st = fail_at(err, at, "YAML aliases (*name) are not supported here");
			break;
		case YAML_SCALAR_EVENT:
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			if (++nodes > Y_MAX_NODES) {
				st = fail_at(err, at, "more than %u YAML nodes", Y_MAX_NODES);
				break;
			}
			node = calloc(1, sizeof *node);
			if (!node) {
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
				break;
			}
			node->at = at;
			if (ev.type == YAML_SCALAR_EVENT) {
				node->kind = Y_SCALAR;
				node->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
				node->n = ev.data.scalar.length;
				node->s = malloc(node->n + 1);
				if (!node->s) {
					free(node);
					node = NULL;
					st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
					break;
				}
				memcpy(node->s, ev.data.scalar.value, node->n);
				node->s[node->n] = '\0';
			} else {
				node->kind = ev.type == YAML_MAPPING_START_EVENT ? Y_MAP : Y_SEQ;
			}
			if (depth == 0) {
				root = node;
			} else if (!add_kid(stack[depth - 1], node)) {
				ynode_free(node);
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
				break;
			}
			if (node->kind != Y_SCALAR) {
				if (depth == Y_MAX_DEPTH) {
					st = fail_at(err, at, "YAML nested more than %d levels deep",
						     Y_MAX_DEPTH);
					break;
				}
				stack[depth++] = node;
			}
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			if (depth)
				depth--;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
		if (st)
			break;
	}
	yaml_parser_delete(&p);
	if (st) {
		ynode_free(root);
		return st;
	}
	*out = root;
	return CD_OK;
}

/* ---- schema ---- */

static const char *kind_name(const struct ynode *y)
{
	return y->kind == Y_MAP ? "a mapping" : y->kind == Y_SEQ ? "a list" : "a scalar";
}

static bool is_word(const struct ynode *y, const char *w)
{
	return y->kind == Y_SCALAR && y->plain && strcmp(y->s, w) == 0;
}

static enum cd_status want_kind(const struct ynode *y, enum ykind k, const char *what,
				struct cd_err *err)
{
	if (y->kind == k)
		return CD_OK;
	return fail_at(err, y->at, "%s must be %s, not %s", what,
		       k == Y_MAP ? "a mapping" : k == Y_SEQ ? "a list" : "a scalar",
		       kind_name(y));
}

/* A plain integer scalar within [lo, hi]. */
static enum cd_status get_int(const struct ynode *y, const char *what, int64_t lo, int64_t hi,
			      int64_t *out, struct cd_err *err)
{
	if (y->kind != Y_SCALAR || !y->plain || !y->n)
		return fail_at(err, y->at, "%s must be a whole number", what);
	char *end;
	errno = 0;
	long long v = strtoll(y->s, &end, 10);
	if (*end || errno || end == y->s)
		return fail_at(err, y->at, "%s must be a whole number, not \"%.40s\"", what, y->s);
	if (v < lo || v > hi)
		return fail_at(err, y->at, "%s must be between %lld and %lld, not %lld", what,
			       (long long)lo, (long long)hi, v);
	*out = v;
	return CD_OK;
}

static enum cd_status get_str(const struct ynode *y, const char *what, char **out,
			      struct cd_err *err)
{
	if (y->kind != Y_SCALAR || !y->n)
		return fail_at(err, y->at, "%s must be a non-empty string", what);
	*out = strdup(y->s);
	return *out ? CD_OK : cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

/* Reject a key seen twice in one mapping (YAML says keys are unique). */
static enum cd_status unique_keys(const struct ynode *map, struct cd_err *err)
{
	/* maps here are small (people write them): quadratic is fine up to a
	 * bound; beyond it, sort a copy */
	uint32_t n = map->nkid / 2;
	if (n > 4096)
		return fail_at(err, map->at, "a mapping with more than 4096 keys");
	for (uint32_t i = 0; i < n; i++) {
		const struct ynode *k = map->kid[2 * i];
		if (k->kind != Y_SCALAR)
			return fail_at(err, k->at, "keys must be scalars");
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(map->kid[2 * j]->s, k->s) == 0)
				return fail_at(err, k->at, "key \"%.80s\" given twice", k->s);
	}
	return CD_OK;
}

/* count: N, or {min: N, max: N} (either or both) */
static enum cd_status get_bound(const struct ynode *y, const char *what, struct cd_bound *b,
				struct cd_err *err)
{
	enum cd_status st;
	b->set = true;
	b->at = y->at;
	b->min = 0;
	b->max = INT64_MAX;
	if (y->kind == Y_SCALAR) {
		if ((st = get_int(y, what, 0, INT64_MAX, &b->min, err)))
			return st;
		b->max = b->min;
		return CD_OK;
	}
	if (y->kind != Y_MAP)
		return fail_at(err, y->at, "%s must be a number or {min: N, max: N}", what);
	if ((st = unique_keys(y, err)))
		return st;
	if (!y->nkid)
		return fail_at(err, y->at, "%s: {} bounds nothing; give min, max or both", what);
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *k = y->kid[i], *v = y->kid[i + 1];
		if (strcmp(k->s, "min") == 0)
			st = get_int(v, "min", 0, INT64_MAX, &b->min, err);
		else if (strcmp(k->s, "max") == 0)
			st = get_int(v, "max", 0, INT64_MAX, &b->max, err);
		else
			st = fail_at(err, k->at, "unknown key \"%.80s\" in %s (min, max)", k->s, what);
		if (st)
			return st;
	}
	if (b->min > b->max)
		return fail_at(err, y->at, "%s: min %lld is above max %lld", what,
			       (long long)b->min, (long long)b->max);
	return CD_OK;
}

static enum cd_status count_map(const struct ynode *y, const char *what, bool allow_total,
				struct cd_bound *total, cd_exp_countv *v, struct cd_err *err)
{
	enum cd_status st;
	if ((st = want_kind(y, Y_MAP, what, err)) || (st = unique_keys(y, err)))
		return st;
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *k = y->kid[i], *val = y->kid[i + 1];
		if (!k->n)
			return fail_at(err, k->at, "empty collective name in %s", what);
		if (allow_total && strcmp(k->s, "total") == 0) {
			if ((st = get_bound(val, "total", total, err)))
				return st;
			continue;
		}
		struct cd_exp_count c = {0};
		if ((st = get_bound(val, k->s, &c.b, err)))
			return st;
		c.b.at = k->at;
		if (!(c.name = strdup(k->s)) || !cd_vec_push(v, c)) {
			free(c.name);
			return cd_fail(err, CD_ERR_NOMEM, "out of memory");
		}
	}
	return CD_OK;
}

static const char *const phase_names[CD_EXP_NPHASES] = {"forward", "backward", "checkpointing"};

/* forward: none | {total: B, collective: B, ...} */
static enum cd_status get_phase(const struct ynode *y, const char *what, struct cd_exp_phase *ph,
				struct cd_err *err)
{
	ph->set = true;
	ph->at = y->at;
	if (is_word(y, "none")) {
		ph->total = (struct cd_bound){.set = true, .min = 0, .max = 0, .at = y->at};
		return CD_OK;
	}
	if (y->kind != Y_MAP)
		return fail_at(err, y->at, "%s must be none or a mapping of collective counts", what);
	return count_map(y, what, true, &ph->total, &ph->colls, err);
}

static enum cd_status get_module(const struct ynode *k, const struct ynode *y,
				 struct cd_exp_module *m, struct cd_err *err)
{
	enum cd_status st;
	m->at = k->at;
	if (!(m->glob = strdup(k->s)))
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	if (is_word(y, "none")) {
		m->none = true;
		return CD_OK;
	}
	if (y->kind != Y_MAP)
		return fail_at(err, y->at, "module \"%.80s\" must be none or a mapping "
					   "(forward, backward, checkpointing, bytes)", k->s);
	if ((st = unique_keys(y, err)))
		return st;
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *key = y->kid[i], *val = y->kid[i + 1];
		int ph = -1;
		for (int p = 0; p < CD_EXP_NPHASES; p++)
			if (strcmp(key->s, phase_names[p]) == 0)
				ph = p;
		if (ph >= 0)
			st = get_phase(val, phase_names[ph], &m->phase[ph], err);
		else if (strcmp(key->s, "bytes") == 0)
			st = get_bound(val, "bytes", &m->bytes, err);
		else
			st = fail_at(err, key->at, "unknown key \"%.80s\" for a module (forward, "
						   "backward, checkpointing, bytes)", key->s);
		if (st)
			return st;
	}
	return CD_OK;
}

static enum cd_status get_int_list(const struct ynode *y, const char *what, int64_t lo,
				   cd_i64v *v, struct cd_err *err)
{
	enum cd_status st;
	int64_t x;
	if (y->kind == Y_SCALAR) {
		if ((st = get_int(y, what, lo, INT64_MAX, &x, err)))
			return st;
		return cd_vec_push(v, x) ? CD_OK : cd_fail(err, CD_ERR_NOMEM, "out of memory");
	}
	if (y->kind != Y_SEQ || !y->nkid)
		return fail_at(err, y->at, "%s must be a number or a non-empty list of numbers", what);
	for (uint32_t i = 0; i < y->nkid; i++) {
		if ((st = get_int(y->kid[i], what, lo, INT64_MAX, &x, err)))
			return st;
		if (!cd_vec_push(v, x))
			return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	}
	return CD_OK;
}

/* regions: all | N | [N, ...] | {from: N, to: N} | {label: GLOB} */
static enum cd_status get_regions(const struct ynode *y, struct cd_scope *s, struct cd_err *err)
{
	enum cd_status st;
	s->at = y->at;
	s->all_regions = false;
	if (is_word(y, "all")) {
		s->all_regions = true;
		return CD_OK;
	}
	if (y->kind != Y_MAP)
		return get_int_list(y, "a region", 0, &s->regions, err);
	if ((st = unique_keys(y, err)))
		return st;
	bool from = false, to = false;
	s->to = INT64_MAX;
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *k = y->kid[i], *v = y->kid[i + 1];
		if (strcmp(k->s, "label") == 0) {
			st = get_str(v, "label", &s->label, err);
		} else if (strcmp(k->s, "from") == 0) {
			from = true;
			st = get_int(v, "from", 0, INT64_MAX, &s->from, err);
		} else if (strcmp(k->s, "to") == 0) {
			to = true;
			st = get_int(v, "to", 0, INT64_MAX, &s->to, err);
		} else {
			st = fail_at(err, k->at, "unknown key \"%.80s\" in regions (from, to, label)",
				     k->s);
		}
		if (st)
			return st;
	}
	if (!s->label && !from && !to)
		return fail_at(err, y->at, "regions: give all, numbers, {from, to} or {label}");
	s->range = from || to;
	if (s->range && s->from > s->to)
		return fail_at(err, y->at, "regions: from %lld is after to %lld",
			       (long long)s->from, (long long)s->to);
	return CD_OK;
}

static enum cd_status get_section(const struct ynode *y, struct cd_exp_section *sec,
				  struct cd_err *err)
{
	enum cd_status st;
	sec->at = y->at;
	sec->scope.all_regions = true;
	sec->scope.all_ranks = true;
	if ((st = want_kind(y, Y_MAP, "each entry of expect", err)) || (st = unique_keys(y, err)))
		return st;
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *k = y->kid[i], *v = y->kid[i + 1];
		const char *key = k->s;
		if (strcmp(key, "regions") == 0) {
			st = get_regions(v, &sec->scope, err);
		} else if (strcmp(key, "rank") == 0) {
			sec->scope.all_ranks = false;
			sec->scope.rank_at = v->at;
			st = get_int_list(v, "a rank", 0, &sec->scope.ranks, err);
		} else if (strcmp(key, "total") == 0) {
			st = get_bound(v, "total", &sec->total, err);
		} else if (strcmp(key, "collectives") == 0) {
			st = count_map(v, "collectives", false, NULL, &sec->colls, err);
		} else if (strcmp(key, "bytes") == 0) {
			st = count_map(v, "bytes", true, &sec->bytes_total, &sec->bytes, err);
		} else if (strcmp(key, "modules") == 0) {
			if ((st = want_kind(v, Y_MAP, "modules", err)) || (st = unique_keys(v, err)))
				return st;
			for (uint32_t j = 0; j + 1 < v->nkid && !st; j += 2) {
				struct cd_exp_module m = {0};
				if (!v->kid[j]->n)
					return fail_at(err, v->kid[j]->at, "empty module name");
				if (!cd_vec_push(&sec->modules, m))
					return cd_fail(err, CD_ERR_NOMEM, "out of memory");
				st = get_module(v->kid[j], v->kid[j + 1],
						&sec->modules.v[sec->modules.n - 1], err);
			}
		} else if (strcmp(key, "parameters") == 0) {
			if ((st = want_kind(v, Y_MAP, "parameters", err)) || (st = unique_keys(v, err)))
				return st;
			for (uint32_t j = 0; j + 1 < v->nkid && !st; j += 2) {
				struct cd_exp_param p = {.at = v->kid[j]->at};
				if (!cd_vec_push(&sec->params, p))
					return cd_fail(err, CD_ERR_NOMEM, "out of memory");
				struct cd_exp_param *pp = &sec->params.v[sec->params.n - 1];
				if (!(st = get_str(v->kid[j], "a parameter name", &pp->name, err)))
					st = get_str(v->kid[j + 1], "placements", &pp->placements, err);
			}
		} else {
			st = fail_at(err, k->at, "unknown key \"%.80s\" in an expect entry (regions, "
						 "rank, total, collectives, bytes, modules, parameters)",
				     key);
		}
		if (st)
			return st;
	}
	return CD_OK;
}

static enum cd_status get_top(const struct ynode *y, struct cd_expect *x, struct cd_err *err)
{
	enum cd_status st;
	bool version = false;
	if (!y)
		return fail_at(err, (struct cd_where){1, 1}, "empty file: no expectations");
	if ((st = want_kind(y, Y_MAP, "the file", err)) || (st = unique_keys(y, err)))
		return st;
	for (uint32_t i = 0; i + 1 < y->nkid; i += 2) {
		const struct ynode *k = y->kid[i], *v = y->kid[i + 1];
		if (strcmp(k->s, "version") == 0) {
			int64_t ver;
			if ((st = get_int(v, "version", 0, INT64_MAX, &ver, err)))
				return st;
			if (ver != 1)
				return fail_at(err, v->at, "version %lld is not one this commdebug reads "
							   "(it reads version 1)", (long long)ver);
			version = true;
		} else if (strcmp(k->s, "ranks") == 0) {
			if (!is_word(v, "agree"))
				return fail_at(err, v->at, "ranks: the only expectation is \"agree\"");
			x->ranks_agree = true;
			x->ranks_at = k->at;
		} else if (strcmp(k->s, "expect") == 0) {
			if ((st = want_kind(v, Y_SEQ, "expect", err)))
				return st;
			for (uint32_t j = 0; j < v->nkid; j++) {
				struct cd_exp_section s = {0};
				if (!cd_vec_push(&x->sections, s))
					return cd_fail(err, CD_ERR_NOMEM, "out of memory");
				if ((st = get_section(v->kid[j], &x->sections.v[x->sections.n - 1],
						      err)))
					return st;
			}
		} else {
			return fail_at(err, k->at, "unknown key \"%.80s\" (version, ranks, expect)",
				       k->s);
		}
	}
	if (!version)
		return fail_at(err, y->at, "missing \"version: 1\"");
	if (!x->sections.n && !x->ranks_agree)
		return fail_at(err, y->at, "no expectations: give expect, ranks or both");
	return CD_OK;
}

static void ids_counts(cd_exp_countv *v, uint32_t *n)
{
	for (uint32_t i = 0; i < v->n; i++)
		v->v[i].b.id = (*n)++;
}

/* Number every checkable thing in file order (see struct cd_bound). */
static void assign_ids(struct cd_expect *x)
{
	uint32_t n = 0;
	x->ranks_id = n++;
	for (uint32_t i = 0; i < x->sections.n; i++) {
		struct cd_exp_section *s = &x->sections.v[i];
		s->scope.id = n++;
		s->total.id = n++;
		ids_counts(&s->colls, &n);
		s->bytes_total.id = n++;
		ids_counts(&s->bytes, &n);
		for (uint32_t k = 0; k < s->modules.n; k++) {
			struct cd_exp_module *m = &s->modules.v[k];
			m->id = n++;
			for (int p = 0; p < CD_EXP_NPHASES; p++) {
				m->phase[p].total.id = n++;
				ids_counts(&m->phase[p].colls, &n);
			}
			m->bytes.id = n++;
		}
		for (uint32_t k = 0; k < s->params.n; k++)
			s->params.v[k].id = n++;
	}
	x->nids = n;
}

enum cd_status cd_expect_parse(const char *buf, size_t n, struct cd_expect *x,
			       struct cd_err *err)
{
	struct ynode *root;
	memset(x, 0, sizeof *x);
	err->line = err->column = 0;
	if (n > CD_EXPECT_MAX_BYTES)
		return cd_fail(err, CD_ERR_LIMIT, "larger than %u MiB", CD_EXPECT_MAX_BYTES >> 20);
	enum cd_status st = load_tree(buf, n, &root, err);
	if (!st)
		st = get_top(root, x, err);
	ynode_free(root);
	/* another kind of file (a trace, arguments swapped): say so (sniff.h) */
	const char *what = st && st != CD_ERR_NOMEM ? cd_sniff(buf, n, CD_SNIFF_WANT_YAML) : NULL;
	if (what) {
		err->line = 1;
		err->column = 0;
		st = cd_fail(err, st, "not an expectations file: %s", what);
	}
	if (!st)
		assign_ids(x);
	if (st)
		cd_expect_free(x);
	return st;
}

enum cd_status cd_expect_load(const char *path, struct cd_expect *x, struct cd_err *err)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;
	enum cd_status st = CD_OK;

	memset(x, 0, sizeof *x);
	err->line = err->column = 0;
	if (!f)
		return cd_fail(err, CD_ERR_IO, "cannot open: %s", strerror(errno));
	for (;;) {
		if (n == cap) {
			if (cap > CD_EXPECT_MAX_BYTES) {
				st = cd_fail(err, CD_ERR_LIMIT, "larger than %u MiB",
					     CD_EXPECT_MAX_BYTES >> 20);
				goto out;
			}
			size_t nc = cap ? cap * 2 : 4096;
			char *nb = realloc(buf, nc);
			if (!nb) {
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
				goto out;
			}
			buf = nb;
			cap = nc;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0) {
			if (ferror(f))
				st = cd_fail(err, CD_ERR_IO, "read error: %s", strerror(errno));
			break;
		}
	}
	if (!st)
		st = cd_expect_parse(buf, n, x, err);
out:
	free(buf);
	fclose(f);
	return st;
}

static void free_counts(cd_exp_countv *v)
{
	for (uint32_t i = 0; i < v->n; i++)
		free(v->v[i].name);
	cd_vec_free(v);
}

void cd_expect_free(struct cd_expect *x)
{
	for (uint32_t i = 0; i < x->sections.n; i++) {
		struct cd_exp_section *s = &x->sections.v[i];
		cd_vec_free(&s->scope.regions);
		cd_vec_free(&s->scope.ranks);
		free(s->scope.label);
		free_counts(&s->colls);
		free_counts(&s->bytes);
		for (uint32_t k = 0; k < s->modules.n; k++) {
			free(s->modules.v[k].glob);
			for (int p = 0; p < CD_EXP_NPHASES; p++)
				free_counts(&s->modules.v[k].phase[p].colls);
		}
		cd_vec_free(&s->modules);
		for (uint32_t k = 0; k < s->params.n; k++) {
			free(s->params.v[k].name);
			free(s->params.v[k].placements);
		}
		cd_vec_free(&s->params);
	}
	cd_vec_free(&x->sections);
	memset(x, 0, sizeof *x);
}

bool cd_scope_has(const struct cd_scope *s, bool has_rank, int64_t rank, int64_t region,
		  const char *label)
{
	if (!s->all_ranks) {
		bool in = false;
		for (uint32_t i = 0; i < s->ranks.n && !in; i++)
			in = has_rank && s->ranks.v[i] == rank;
		if (!in)
			return false;
	}
	if (s->all_regions)
		return true;
	if (s->label && (!label || fnmatch(s->label, label, 0) != 0))
		return false;
	if (s->range && (region < s->from || region > s->to))
		return false;
	if (s->regions.n) {
		for (uint32_t i = 0; i < s->regions.n; i++)
			if (s->regions.v[i] == region)
				return true;
		return false;
	}
	return true;
}
