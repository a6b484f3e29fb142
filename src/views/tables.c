#include "tables.h"

#include <stdlib.h>

#define YELLOW "\033[1;33m"
#define RED "\033[1;31m"
#define RESET "\033[0m"

static void strid(struct cd_out *o, const struct cd_intern *t, uint32_t id)
{
	cd_out_write(o, cd_intern_str(t, id), cd_intern_len(t, id));
}

/* Which ops a noise level shows (the table's and the JSON's rules agree). */
static bool op_shown(const struct cd_replay *r, const struct cd_oprec *op, int noise)
{
	if (noise >= 3)
		return true;
	if (r->opinfo.v[op->op].trivial)
		return false;
	if (noise == 2)
		return true;
	return op->argset != CD_NOID && r->argsets.v[op->argset].nargs > 0;
}

enum dir { FWD, BWD, ACK };

/* The reference splits a module's op list three ways; an op in
 * checkpointing is any op with the flag, whatever is_bw says. */
static bool op_in(const struct cd_oprec *op, enum dir d)
{
	switch (d) {
	case FWD:
		return !(op->flags & CD_OP_BW);
	case BWD:
		return (op->flags & CD_OP_BW) && !(op->flags & CD_OP_AC);
	case ACK:
		return (op->flags & CD_OP_AC) != 0;
	}
	return false;
}

static bool any_op_in(const struct cd_replay *r, const struct cd_rmod *m, enum dir d)
{
	uint32_t i = 0, rec;
	uint64_t count;
	while (cd_ops_next(&m->ops, &i, &rec, &count))
		if (op_in(&r->oprecs.v[rec], d))
			return true;
	return false;
}

/* ---- table ---- */

static void colored_line_start(struct cd_out *o, const char *color, bool on, size_t indent)
{
	if (on)
		cd_out_str(o, color);
	cd_out_spaces(o, indent);
}

static void colored_line_end(struct cd_out *o, bool on)
{
	if (on)
		cd_out_write(o, RESET "\n", sizeof RESET);
	else
		cd_out_write(o, "\n", 1);
}

/* One op of a table section: its line and, for DTensor args, three more. */
static void table_op(struct cd_out *o, const struct cd_replay *r, const struct cd_oprec *op,
		     bool c, size_t cind, size_t oind)
{
	colored_line_start(o, YELLOW, c, cind);
	cd_out_write(o, "**", 2);
	strid(o, &r->ops, op->op);
	colored_line_end(o, c);
	if (op->argset == CD_NOID || r->argsets.v[op->argset].nargs == 0)
		return;
	const struct cd_argset *as = &r->argsets.v[op->argset];
	colored_line_start(o, RED, c, oind);
	cd_out_write(o, "shape: [", 8);
	for (uint32_t k = 0; k < as->nargs; k++) {
		if (k)
			cd_out_write(o, ", ", 2);
		strid(o, &r->strs, as->shape[k]);
	}
	cd_out_write(o, "]", 1);
	colored_line_end(o, c);
	colored_line_start(o, RED, c, oind);
	cd_out_write(o, "sharding: [", 11);
	for (uint32_t k = 0; k < as->nargs; k++) {
		if (k)
			cd_out_write(o, ", ", 2);
		strid(o, &r->strs, as->plc[k]);
	}
	cd_out_write(o, "]", 1);
	colored_line_end(o, c);
	colored_line_start(o, RED, c, oind);
	cd_out_write(o, "device mesh: ", 13);
	strid(o, &r->strs, as->mesh);
	colored_line_end(o, c);
}

static void table_section(struct cd_out *o, const struct cd_replay *r, const struct cd_rmod *m,
			  const cd_countv *colls, enum dir d, size_t cind, size_t oind,
			  const struct cd_report_opts *ro)
{
	bool c = ro->color;

	for (uint32_t i = 0; colls && i < colls->n; i++) {
		colored_line_start(o, YELLOW, c, cind);
		cd_out_write(o, "*", 1);
		strid(o, &r->colls, colls->v[i].coll);
		cd_out_write(o, ": ", 2);
		cd_out_i64(o, colls->v[i].n);
		colored_line_end(o, c);
	}
	if (ro->noise < 1)
		return;
	uint32_t i = 0, rec;
	uint64_t count;
	while (cd_ops_next(&m->ops, &i, &rec, &count)) {
		const struct cd_oprec *op = &r->oprecs.v[rec];
		if (!op_in(op, d) || !op_shown(r, op, ro->noise))
			continue;
		for (uint64_t k = 0; k < count && !o->failed; k++)
			table_op(o, r, op, c, cind, oind);
	}
}

void cd_report_table(struct cd_out *o, const struct cd_replay *r, const struct cd_report_opts *ro)
{
	for (uint32_t h = 0; h < r->helper.n; h++) {
		uint32_t id = r->helper.v[h];
		const struct cd_rmod *m = cd_replay_mod(r, id);
		size_t indent = 4 * (size_t)m->depth;

		cd_out_spaces(o, indent);
		strid(o, &r->mods, id);
		cd_out_write(o, "\n", 1);
		if (ro->noise >= 1) {
			if (m->type != CD_NOID) {
				cd_out_spaces(o, indent);
				cd_out_write(o, "*module type: class '", 21);
				strid(o, &r->strs, m->type);
				cd_out_write(o, "'\n", 2);
			}
			const struct cd_rmod_more *x = cd_replay_more(r, m);
			if (x->hparams.n) {
				cd_out_spaces(o, indent);
				cd_out_write(o, "*Parameter List\n", 16);
				for (uint32_t k = 0; k < x->hparams.n; k++) {
					const struct cd_pinfo *p = &x->params.v[x->hparams.v[k]];
					cd_out_spaces(o, indent);
					cd_out_write(o, " *", 2);
					strid(o, &r->strs, p->name);
					cd_out_write(o, ": ", 2);
					strid(o, &r->strs, p->placements);
					cd_out_write(o, "\n", 1);
				}
			}
		}
		indent += 2;
		size_t cind = indent + 2, oind = indent + 4;
		bool ops = ro->noise >= 1;

		if (m->fw.n || (ops && any_op_in(r, m, FWD))) {
			cd_out_spaces(o, indent);
			cd_out_write(o, "FORWARD PASS\n", 13);
			table_section(o, r, m, &m->fw, FWD, cind, oind, ro);
		}
		if (m->bw.n || (ops && any_op_in(r, m, BWD))) {
			cd_out_spaces(o, indent);
			cd_out_write(o, "BACKWARD PASS\n", 14);
			table_section(o, r, m, &m->bw, BWD, cind, oind, ro);
		}
		if (ops && any_op_in(r, m, ACK)) {
			cd_out_spaces(o, indent);
			cd_out_write(o, "ACTIVATION CHECKPOINTING\n", 25);
			table_section(o, r, m, NULL, ACK, cind, oind, ro);
		}
	}
}

/* ---- JSON dump ---- */

static void json_colls(struct cd_out *o, const struct cd_replay *r, const cd_countv *v)
{
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < v->n; i++) {
		cd_pj_begin_arr(o);
		cd_pj_str(o, cd_intern_str(&r->colls, v->v[i].coll), cd_intern_len(&r->colls, v->v[i].coll));
		cd_pj_int(o, v->v[i].n);
		cd_pj_end(o);
	}
	cd_pj_end(o);
}

static void json_strid(struct cd_out *o, const struct cd_intern *t, uint32_t id)
{
	cd_pj_str(o, cd_intern_str(t, id), cd_intern_len(t, id));
}

static void json_op(struct cd_out *o, const struct cd_replay *r, const struct cd_oprec *op)
{
	const struct cd_argset *as = op->argset == CD_NOID ? NULL : &r->argsets.v[op->argset];
	cd_pj_begin_obj(o);
	cd_pj_key(o, "name");
	json_strid(o, &r->ops, op->op);
	cd_pj_key(o, "input_shape");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; as && k < as->nargs; k++)
		json_strid(o, &r->strs, as->shape[k]);
	cd_pj_end(o);
	cd_pj_key(o, "input_sharding");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; as && k < as->nargs; k++)
		json_strid(o, &r->strs, as->plc[k]);
	cd_pj_end(o);
	cd_pj_key(o, "device_mesh");
	if (as)
		json_strid(o, &r->strs, as->mesh);
	else
		cd_pj_str(o, "", 0);
	cd_pj_key(o, "is_bw");
	cd_pj_bool(o, (op->flags & CD_OP_BW) != 0);
	cd_pj_key(o, "is_activation_checkpointing");
	cd_pj_bool(o, (op->flags & CD_OP_AC) != 0);
	cd_pj_end(o);
}

struct cd_cache_slot {
	uint64_t key;   /* 0 = empty */
	uint64_t off;
	uint32_t len;
};

void cd_report_cache_free(struct cd_report_cache *c)
{
	free(c->slots);
	free(c->text);
	memset(c, 0, sizeof *c);
}

static bool cache_grow(struct cd_report_cache *c)
{
	uint32_t n = c->nslots ? c->nslots * 2 : 1024;
	struct cd_cache_slot *ns = calloc(n, sizeof *ns);
	if (!ns)
		return false;
	for (uint32_t i = 0; i < c->nslots; i++) {
		if (!c->slots[i].key)
			continue;
		uint32_t h = (uint32_t)((c->slots[i].key * 0x9E3779B97F4A7C15ull) >> 32) & (n - 1);
		while (ns[h].key)
			h = (h + 1) & (n - 1);
		ns[h] = c->slots[i];
	}
	free(c->slots);
	c->slots = ns;
	c->nslots = n;
	return true;
}

/* The op object as JSON text at the current depth of o, from the cache
 * or rendered into it.  NULL when it cannot be cached. */
static const char *cached_op(struct cd_report_cache *c, const struct cd_out *o,
			     const struct cd_replay *r, const struct cd_oprec *op, uint32_t *len)
{
	uint32_t depth = cd_pj_depth(o);
	uint64_t as = op->argset == CD_NOID ? 0xFFFFFFu : op->argset;
	if (op->op >= 0xFFFFFFu || as > 0xFFFFFFu || depth >= 0x3FFF)
		return NULL;
	uint64_t key = 1 + ((uint64_t)op->op | as << 24 | (uint64_t)(op->flags & 3) << 48 |
			    (uint64_t)depth << 50);
	if ((c->count + 1) * 2 > c->nslots && !cache_grow(c))
		return NULL;
	uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (c->nslots - 1);
	while (c->slots[h].key && c->slots[h].key != key)
		h = (h + 1) & (c->nslots - 1);
	if (!c->slots[h].key) {
		struct cd_out tmp;
		cd_out_init(&tmp, NULL);
		tmp.hold = true;
		cd_pj_prime(&tmp, depth);
		json_op(&tmp, r, op);
		const char *brace = tmp.failed ? NULL : memchr(tmp.buf, '{', tmp.len);
		size_t n = brace ? tmp.len - (size_t)(brace - tmp.buf) : 0;
		if (!brace) {
			cd_out_free(&tmp);
			return NULL;
		}
		if (c->cap - c->len < n) {
			size_t cap = c->cap ? c->cap : 65536;
			while (cap - c->len < n)
				cap *= 2;
			char *nt = realloc(c->text, cap);
			if (!nt) {
				cd_out_free(&tmp);
				return NULL;
			}
			c->text = nt;
			c->cap = cap;
		}
		memcpy(c->text + c->len, brace, n);
		c->slots[h].key = key;
		c->slots[h].off = c->len;
		c->slots[h].len = (uint32_t)n;
		c->len += n;
		c->count++;
		cd_out_free(&tmp);
	}
	*len = c->slots[h].len;
	return c->text + c->slots[h].off;
}

/* The op list of one direction; returns how many ops ro->max_ops left out. */
static uint64_t json_ops(struct cd_out *o, const struct cd_replay *r, const struct cd_rmod *m,
			 enum dir d, const struct cd_report_opts *ro)
{
	uint32_t i = 0, rec;
	uint64_t count, written = 0, left = 0;
	cd_pj_begin_arr(o);
	while (ro->noise >= 1 && cd_ops_next(&m->ops, &i, &rec, &count)) {
		const struct cd_oprec *op = &r->oprecs.v[rec];
		if (!op_in(op, d) || !op_shown(r, op, ro->noise))
			continue;
		if (ro->max_ops && written + count > ro->max_ops) {
			left += written + count - ro->max_ops;
			count = ro->max_ops - written;
		}
		written += count;
		uint32_t len;
		const char *text = ro->cache ? cached_op(ro->cache, o, r, op, &len) : NULL;
		if (text)
			cd_pj_raw_n(o, text, len, count);   /* a run of one op: one lookup */
		else
			for (uint64_t k = 0; k < count && !o->failed; k++)
				json_op(o, r, op);
	}
	cd_pj_end(o);
	return left;
}

/* An op list and, when max_ops cut it, "<key>_omitted": the ops left out. */
static void json_ops_key(struct cd_out *o, const char *key, const struct cd_replay *r,
			 const struct cd_rmod *m, enum dir d, const struct cd_report_opts *ro)
{
	cd_pj_key(o, key);
	uint64_t left = json_ops(o, r, m, d, ro);
	if (left) {
		char k[64];
		snprintf(k, sizeof k, "%s_omitted", key);
		cd_pj_key(o, k);
		cd_pj_int(o, (int64_t)left);
	}
}

struct path {
	uint32_t *v;
	uint32_t n, cap;
	bool warned;
};

static bool on_path(const struct path *p, uint32_t id)
{
	for (uint32_t i = 0; i < p->n; i++)
		if (p->v[i] == id)
			return true;
	return false;
}

static void json_node(struct cd_out *o, const struct cd_replay *r, uint32_t id, struct path *path,
		      const struct cd_report_opts *ro)
{
	const struct cd_rmod *m = cd_replay_mod(r, id);
	static const struct cd_rmod empty;
	static const struct cd_rmod_more none;

	if (!m)
		m = &empty;
	cd_pj_begin_obj(o);
	cd_pj_key(o, "fqn");
	json_strid(o, &r->mods, id);
	cd_pj_key(o, "module_type");
	if (ro->noise >= 1 && m->type != CD_NOID) {
		/* str(type(mod)) without '<' and '>' */
		const char *t = cd_intern_str(&r->strs, m->type);
		size_t tn = cd_intern_len(&r->strs, m->type);
		char stack[256];
		char *buf = tn + 8 <= sizeof stack ? stack : malloc(tn + 8);
		if (buf) {
			memcpy(buf, "class '", 7);
			memcpy(buf + 7, t, tn);
			buf[7 + tn] = '\'';
			cd_pj_str(o, buf, tn + 8);
			if (buf != stack)
				free(buf);
		} else {
			cd_pj_str(o, "", 0);
		}
	} else {
		cd_pj_str(o, "", 0);
	}
	cd_pj_key(o, "parameters");
	cd_pj_begin_arr(o);
	const struct cd_rmod_more *x = m == &empty ? &none : cd_replay_more(r, m);
	for (uint32_t k = 0; ro->noise >= 1 && m->type != CD_NOID && k < x->hparams.n; k++) {
		const struct cd_pinfo *p = &x->params.v[x->hparams.v[k]];
		cd_pj_begin_arr(o);
		json_strid(o, &r->strs, p->name);
		json_strid(o, &r->strs, p->placements);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "children");
	cd_pj_begin_arr(o);
	if (x->children.n && path->n < UINT32_MAX - 1) {
		if (path->n == path->cap) {
			uint32_t cap = path->cap ? path->cap * 2 : 16;
			uint32_t *nv = realloc(path->v, cap * sizeof *nv);
			if (nv) {
				path->v = nv;
				path->cap = cap;
			}
		}
		if (path->n < path->cap) {
			path->v[path->n++] = id;
			for (uint32_t k = 0; k < x->children.n; k++) {
				uint32_t c = x->children.v[k];
				if (on_path(path, c)) {
					/* the reference recurses forever here */
					if (!path->warned && ro->warn) {
						char msg[512];
						snprintf(msg, sizeof msg,
							 "module \"%s\" runs inside itself; the JSON "
							 "tree lists it once under itself and stops",
							 cd_intern_str(&r->mods, c));
						ro->warn(ro->ud, msg);
					}
					path->warned = true;
					continue;
				}
				json_node(o, r, c, path, ro);
			}
			path->n--;
		}
	}
	cd_pj_end(o);
	cd_pj_key(o, "collectives_forward");
	json_colls(o, r, &m->fw);
	cd_pj_key(o, "collectives_backward");
	json_colls(o, r, &m->bw);
	json_ops_key(o, "operations_forward", r, m, FWD, ro);
	json_ops_key(o, "operations_backward", r, m, BWD, ro);
	json_ops_key(o, "operations_checkpointing", r, m, ACK, ro);
	cd_pj_end(o);
}

void cd_report_json(struct cd_out *o, const struct cd_replay *r, const struct cd_report_opts *ro)
{
	struct path path = {0};
	json_node(o, r, 0, &path, ro);
	free(path.v);
	cd_out_write(o, "\n", 1);
}

/* ---- counts ---- */

void cd_report_counts(struct cd_out *o, const struct cd_replay *r, bool json)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < r->comm.n; i++)
		total += r->comm.v[i].n;
	if (!json) {
		cd_out_str(o, "total: ");
		cd_out_i64(o, (int64_t)total);
		cd_out_write(o, "\n", 1);
		for (uint32_t i = 0; i < r->comm.n; i++) {
			strid(o, &r->colls, r->comm.v[i].coll);
			cd_out_write(o, ": ", 2);
			cd_out_i64(o, r->comm.v[i].n);
			cd_out_write(o, "\n", 1);
		}
		if (r->outside.n) {
			cd_out_str(o, "by source (the recorder's attribution; not added to the counts):\n");
			for (uint32_t i = 0; i < r->outside.n; i++) {
				cd_out_str(o, "  ");
				strid(o, &r->colls, r->outside.v[i].coll);
				if (r->outside_src.v[i] != CD_NOID) {
					cd_out_str(o, " [");
					strid(o, &r->strs, r->outside_src.v[i]);
					cd_out_str(o, "]");
				}
				cd_out_write(o, ": ", 2);
				cd_out_i64(o, r->outside.v[i].n);
				cd_out_write(o, "\n", 1);
			}
		}
		return;
	}
	cd_pj_begin_obj(o);
	cd_pj_key(o, "total");
	cd_pj_int(o, (int64_t)total);
	cd_pj_key(o, "counts");
	cd_pj_begin_obj(o);
	for (uint32_t i = 0; i < r->comm.n; i++) {
		cd_pj_key(o, cd_intern_str(&r->colls, r->comm.v[i].coll));
		cd_pj_int(o, r->comm.v[i].n);
	}
	cd_pj_end(o);
	/* {source: {collective: count}}: which of the collectives the recorder
	 * also attributed to a source by other means (DDP's reducer); an
	 * attribution, never added to the counts */
	cd_pj_key(o, "by_source");
	cd_pj_begin_obj(o);
	for (uint32_t i = 0; i < r->outside.n; i++) {
		uint32_t src = r->outside_src.v[i];
		bool seen = false;
		for (uint32_t k = 0; k < i && !seen; k++)
			seen = r->outside_src.v[k] == src;
		if (seen)
			continue;
		cd_pj_key(o, src == CD_NOID ? "unknown" : cd_intern_str(&r->strs, src));
		cd_pj_begin_obj(o);
		for (uint32_t k = i; k < r->outside.n; k++) {
			if (r->outside_src.v[k] != src)
				continue;
			cd_pj_key(o, cd_intern_str(&r->colls, r->outside.v[k].coll));
			cd_pj_int(o, r->outside.v[k].n);
		}
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_end(o);
	cd_out_write(o, "\n", 1);
}

/* ---- parameters and sharding ---- */

void cd_report_sharding(struct cd_out *o, const struct cd_replay *r, bool json)
{
	if (!json) {
		cd_out_str(o, "parameters:\n");
		for (uint32_t h = 0; h < r->helper.n; h++) {
			const struct cd_rmod_more *x =
				cd_replay_more(r, cd_replay_mod(r, r->helper.v[h]));
			for (uint32_t k = 0; k < x->params.n; k++) {
				const struct cd_pinfo *p = &x->params.v[k];
				cd_out_str(o, "  ");
				strid(o, &r->mods, r->helper.v[h]);
				cd_out_write(o, ".", 1);
				strid(o, &r->strs, p->name);
				cd_out_write(o, ":", 1);
				if (p->shape != CD_NOID) {
					cd_out_str(o, " torch.Size(");
					strid(o, &r->strs, p->shape);
					cd_out_str(o, ")");
				}
				if (p->dtype != CD_NOID) {
					cd_out_write(o, " ", 1);
					strid(o, &r->strs, p->dtype);
				}
				if (p->placements != CD_NOID) {
					cd_out_write(o, " ", 1);
					strid(o, &r->strs, p->placements);
				}
				cd_out_write(o, "\n", 1);
			}
		}
		cd_out_str(o, "sharding:\n");
		for (uint32_t i = 0; i < r->sharding.n; i++) {
			const struct cd_rmod_more *x =
				cd_replay_more(r, cd_replay_mod(r, r->sharding.v[i].mod));
			const struct cd_pinfo *p = &x->params.v[r->sharding.v[i].param];
			cd_out_str(o, "  ");
			strid(o, &r->mods, r->sharding.v[i].mod);
			cd_out_write(o, ".", 1);
			strid(o, &r->strs, p->name);
			cd_out_write(o, ": ", 2);
			strid(o, &r->strs, p->placements);
			cd_out_write(o, "\n", 1);
		}
		return;
	}
	cd_pj_begin_obj(o);
	cd_pj_key(o, "parameters");
	cd_pj_begin_obj(o);
	for (uint32_t h = 0; h < r->helper.n; h++) {
		const struct cd_rmod_more *x = cd_replay_more(r, cd_replay_mod(r, r->helper.v[h]));
		if (!x->params.n)
			continue;
		cd_pj_key(o, cd_intern_str(&r->mods, r->helper.v[h]));
		cd_pj_begin_obj(o);
		for (uint32_t k = 0; k < x->params.n; k++) {
			const struct cd_pinfo *p = &x->params.v[k];
			cd_pj_key(o, cd_intern_str(&r->strs, p->name));
			cd_pj_begin_obj(o);
			if (p->shape != CD_NOID) {
				cd_pj_key(o, "shape");
				cd_pj_begin_arr(o);
				/* the interned text is "[a, b]": re-emit as a JSON list */
				const char *s = cd_intern_str(&r->strs, p->shape) + 1;
				while (*s && *s != ']') {
					cd_pj_int(o, strtoll(s, (char **)&s, 10));
					while (*s == ',' || *s == ' ')
						s++;
				}
				cd_pj_end(o);
			}
			if (p->dtype != CD_NOID) {
				cd_pj_key(o, "dtype");
				json_strid(o, &r->strs, p->dtype);
			}
			if (p->nbytes >= 0) {
				cd_pj_key(o, "nbytes");
				cd_pj_int(o, p->nbytes);
			}
			cd_pj_key(o, "requires_grad");
			cd_pj_bool(o, p->requires_grad);
			if (p->placements != CD_NOID) {
				cd_pj_key(o, "placements");
				json_strid(o, &r->strs, p->placements);
			}
			if (p->mesh != CD_NOID) {
				cd_pj_key(o, "mesh");
				json_strid(o, &r->strs, p->mesh);
			}
			cd_pj_end(o);
		}
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "sharding");
	cd_pj_begin_obj(o);
	for (uint32_t i = 0; i < r->sharding.n; i++) {
		const struct cd_rmod_more *x =
			cd_replay_more(r, cd_replay_mod(r, r->sharding.v[i].mod));
		const struct cd_pinfo *p = &x->params.v[r->sharding.v[i].param];
		const char *mn = cd_intern_str(&r->mods, r->sharding.v[i].mod);
		const char *pn = cd_intern_str(&r->strs, p->name);
		size_t len = strlen(mn) + strlen(pn) + 2;
		char *key = malloc(len);
		if (!key)
			continue;
		snprintf(key, len, "%s.%s", mn, pn);
		cd_pj_key(o, key);
		free(key);
		json_strid(o, &r->strs, p->placements);
	}
	cd_pj_end(o);
	cd_pj_end(o);
	cd_out_write(o, "\n", 1);
}
