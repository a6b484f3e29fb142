/* commdebug buckets, printed: DDP's buckets, the observed all-reduces,
 * DDPOptimizer's plan as it logs it (tabulate's simple_grid), the
 * differences, and whether the ranks agree; text and JSON.  The findings
 * come from buckets.c. */
#include "buckets.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum cd_status nomem(struct cd_err *err)
{
	return cd_fail(err, CD_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------- simple_grid */

/* Characters as Python's len() counts them (code points). */
static size_t width(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xC0) != 0x80)
			w++;
	return w;
}

static void hline(struct cd_out *o, const char *l, const char *m, const char *r,
		  const size_t *w, uint32_t ncols)
{
	cd_out_str(o, l);
	for (uint32_t c = 0; c < ncols; c++) {
		if (c)
			cd_out_str(o, m);
		for (size_t i = 0; i < w[c] + 2; i++)
			cd_out_str(o, "─");
	}
	cd_out_str(o, r);
	cd_out_str(o, "\n");
}

static void cell_row(struct cd_out *o, const char *const *cells, const bool *numeric,
		     const size_t *w, uint32_t ncols)
{
	cd_out_str(o, "│");
	for (uint32_t c = 0; c < ncols; c++) {
		const char *s = cells[c] ? cells[c] : "";
		size_t pad = w[c] - width(s);
		if (c)
			cd_out_str(o, "│");
		cd_out_str(o, " ");
		if (numeric[c])
			cd_out_spaces(o, pad);
		cd_out_str(o, s);
		if (!numeric[c])
			cd_out_spaces(o, pad);
		cd_out_str(o, " ");
	}
	cd_out_str(o, "│\n");
}

void cd_bk_simple_grid(struct cd_out *o, const char *const *headers, const bool *numeric,
		       uint32_t ncols, const char *const *rows, uint32_t nrows)
{
	size_t w[8];
	if (ncols > 8)
		return;
	/* tabulate: a column is as wide as its widest cell and at least its
	 * header plus MIN_PADDING (2); padding 1 on each side of every cell */
	for (uint32_t c = 0; c < ncols; c++) {
		w[c] = width(headers[c]) + 2;
		for (uint32_t r = 0; r < nrows; r++) {
			const char *s = rows[(size_t)r * ncols + c];
			size_t x = s ? width(s) : 0;
			if (x > w[c])
				w[c] = x;
		}
	}
	hline(o, "┌", "┬", "┐", w, ncols);
	cell_row(o, headers, numeric, w, ncols);
	hline(o, "├", "┼", "┤", w, ncols);
	for (uint32_t r = 0; r < nrows; r++) {
		if (r)
			hline(o, "├", "┼", "┤", w, ncols);
		cell_row(o, rows + (size_t)r * ncols, numeric, w, ncols);
	}
	hline(o, "└", "┴", "┘", w, ncols);
}

/* ------------------------------------------------------- report */

/* The name DDPOptimizer gives a parameter: "<submodule>_<param>", the
 * submodule's path below the module DDP wraps (get_attr: the name alone). */
static const char *ddpo_name(const struct cd_bk_ddp *d, const char *full, char *buf, size_t cap)
{
	size_t m = strlen(d->mod);
	const char *rel = full;
	if (strncmp(full, d->mod, m) == 0 && full[m] == '.')
		rel = full + m + 1;
	if (strncmp(rel, "module.", 7) == 0)
		rel += 7;
	snprintf(buf, cap, "%s", rel);
	char *dot = strrchr(buf, '.');
	if (dot)
		*dot = '_';
	return buf;
}

static enum cd_status plan_table(struct cd_out *o, const struct cd_bk_ddp *d, struct cd_err *err)
{
	const struct cd_bk_plan *pl = &d->plan;
	uint32_t nrows = 0, k = 0, next = 0;
	char **cells;

	for (uint32_t i = 0; i < pl->b.n; i++)
		nrows += pl->b.v[i].n;
	if (!nrows) {
		cd_out_str(o, "DDPOptimizer captured no parameters and did not split this graph.\n");
		return CD_OK;
	}
	cd_out_printf(o, "DDPOptimizer used bucket cap %" PRId64 " and created %u buckets.\n",
		      pl->cap, pl->b.n);
	if (!(cells = calloc((size_t)nrows * 3, sizeof *cells)))
		return nomem(err);
	for (uint32_t i = 0; i < pl->b.n; i++)
		for (uint32_t j = 0; j < pl->b.v[i].n; j++, k++) {
			char nb[1024];
			if (j == 0) {
				cells[k * 3] = malloc(24);
				cells[k * 3 + 1] = malloc(24);
				if (cells[k * 3])
					snprintf(cells[k * 3], 24, "%u", i);
				if (cells[k * 3 + 1])
					snprintf(cells[k * 3 + 1], 24, "%" PRId64, pl->b.v[i].size);
			}
			cells[k * 3 + 2] = strdup(ddpo_name(d, d->params.v[pl->order.v[pl->b.v[i].first + j]].name,
						    nb, sizeof nb));
		}
	bool ok = true;
	for (uint32_t i = 0, r = 0; i < pl->b.n; r += pl->b.v[i++].n)
		if (pl->b.v[i].n && (!cells[r * 3] || !cells[r * 3 + 1]))
			ok = false;
	for (uint32_t r = 0; r < nrows; r++)
		ok = ok && cells[r * 3 + 2];
	if (ok) {
		static const char *const h[] = {"Index", "Size (b)", "Param Names"};
		static const bool num[] = {true, true, false};
		cd_bk_simple_grid(o, h, num, 3, (const char *const *)cells, nrows);
	}
	for (size_t i = 0; i < (size_t)nrows * 3; i++)
		free(cells[i]);
	free(cells);
	if (!ok)
		return nomem(err);
	/* the extended buckets */
	char ext[64][3][24];
	for (uint32_t i = 0; i < pl->b.n && next < 64; i++)
		if (pl->b.v[i].extra_ops) {
			snprintf(ext[next][0], 24, "%u", i);
			snprintf(ext[next][1], 24, "%u", pl->b.v[i].extra_ops);
			snprintf(ext[next][2], 24, "%" PRId64, pl->b.v[i].extra_size);
			next++;
		}
	if (next) {
		static const char *const h[] = {"Index", "Extra Ops", "Extra Param Size (b)"};
		static const bool num[] = {true, true, true};
		const char *rows[64 * 3];
		for (uint32_t i = 0; i < next; i++)
			for (int c = 0; c < 3; c++)
				rows[i * 3 + c] = ext[i][c];
		cd_out_str(o, "DDPOptimizer extended these buckets to ensure per-subgraph output nodes:\n");
		cd_bk_simple_grid(o, h, num, 3, rows, next);
	}
	return CD_OK;
}

/* The lines printed under the plan (each without its "note: "): a first
 * cap that DDPOptimizer would refuse, and DDP's own first cap where it is
 * not DDPOptimizer's.  Returns how many were written to line. */
static uint32_t plan_notes(const struct cd_bk_ddp *d, char line[2][400])
{
	const struct cd_bk_plan *pl = &d->plan;
	uint32_t n = 0;
	if (pl->first_cap > pl->cap)
		snprintf(line[n++], 400, "first cap %" PRId64 " is above cap %" PRId64 ": "
			 "DDPOptimizer would stop at its assertion; planned as if they were equal",
			 pl->first_cap, pl->cap);
	if (pl->first_cap_from == CD_BK_FC_DEFAULT && d->first_cap != pl->first_cap)
		snprintf(line[n++], 400, "DDP's own first bucket cap is %" PRId64 " bytes, "
			 "DDPOptimizer's %" PRId64 " (torch.compile gives it DDP's bucket cap "
			 "only): DDP's first bucket can differ from the compiled graph's",
			 d->first_cap, pl->first_cap);
	return n;
}

static void text_set(struct cd_out *o, const struct cd_bk_ddp *d, uint32_t which)
{
	const struct cd_bk_set *s = &d->sets[which];
	if (!s->present)
		return;
	cd_out_printf(o, "DDP's %s buckets (ddp event at line %lld): %u\n",
		      which == CD_BK_REBUILT ? "rebuilt" : "initial", s->line, s->b.n);
	for (uint32_t i = 0; i < s->b.n; i++) {
		int64_t sz = cd_bk_set_size(d, &s->b.v[i], s->members);
		cd_out_printf(o, "  %u  ", i);
		if (sz >= 0)
			cd_out_printf(o, "%" PRId64 " bytes", sz);
		else
			cd_out_str(o, "? bytes");
		for (uint32_t m = 0; m < s->b.v[i].n; m++)
			cd_out_printf(o, "%s%s", m ? ", " : "  ", d->params.v[s->b.v[i].p[m]].name);
		cd_out_str(o, "\n");
	}
}

/* The buckets of set that no all-reduce of step s fired. */
static uint32_t never_fired(const struct cd_bk_ddp *d, const struct cd_bk_step *s, uint32_t *out)
{
	uint32_t set = s->fires.n ? s->fires.v[0].set : CD_BK_NOSET, n = 0;
	if (set == CD_BK_NOSET)
		return 0;
	for (uint32_t k = 0; k < d->sets[set].b.n && k < CD_LIST_MAX; k++) {
		bool fired = false;
		for (uint32_t j = 0; j < s->fires.n && !fired; j++)
			fired = s->fires.v[j].index == (int64_t)k;
		if (!fired)
			out[n++] = k;
	}
	return n;
}

/* Params (requires_grad) of step s's set in no bucket of it. */
static uint32_t unbucketed(const struct cd_bk_ddp *d, const struct cd_bk_step *s, uint32_t *out)
{
	uint32_t set = s->fires.n ? s->fires.v[0].set : CD_BK_NOSET, n = 0;
	if (set == CD_BK_NOSET)
		return 0;
	for (uint32_t i = 0; i < d->sets[set].unbucketed.n && n < CD_LIST_MAX; i++)
		out[n++] = d->sets[set].unbucketed.v[i];
	return n;
}

static const struct cd_bk_bucket *fire_bucket(const struct cd_bk_ddp *d, const struct cd_bk_fire *f)
{
	if (f->set == CD_BK_NOSET || f->index < 0 || (uint64_t)f->index >= d->sets[f->set].b.n)
		return NULL;
	return &d->sets[f->set].b.v[f->index];
}

static void text_observed(struct cd_out *o, const struct cd_bk_ddp *d)
{
	uint32_t tmp[CD_LIST_MAX];
	/* a bucket's parameters are listed at its first all-reduce only */
	bool *listed = calloc((size_t)d->sets[0].b.n + d->sets[1].b.n + 1, sizeof *listed);
	cd_out_str(o, "Observed\n");
	if (!d->steps.n)
		cd_out_str(o, "  no bucket all-reduce of this DDP module in a reported region\n");
	for (uint32_t i = 0; i < d->steps.n; i++) {
		const struct cd_bk_step *s = &d->steps.v[i];
		cd_out_printf(o, "region %" PRId64 "%s%s%s: %u bucket all-reduce%s", s->region,
			      s->label ? " (" : "", s->label ? s->label : "", s->label ? ")" : "",
			      s->fires.n, s->fires.n == 1 ? "" : "s");
		if (s->fires.n && s->fires.v[0].set != CD_BK_NOSET)
			cd_out_printf(o, " (%s buckets)",
				      s->fires.v[0].set == CD_BK_REBUILT ? "rebuilt" : "initial");
		if (s->passes > 1)
			cd_out_printf(o, " in %u backward passes", s->passes);
		cd_out_str(o, "\n");
		for (uint32_t j = 0; j < s->fires.n; j++) {
			const struct cd_bk_fire *f = &s->fires.v[j];
			const struct cd_bk_bucket *b = fire_bucket(d, f);
			if (f->index >= 0)
				cd_out_printf(o, "  bucket %" PRId64, f->index);
			else
				cd_out_str(o, "  bucket ?");
			if (f->bytes >= 0)
				cd_out_printf(o, "  %" PRId64 " bytes", f->bytes);
			if (f->dtype)
				cd_out_printf(o, "  %s", f->dtype);
			cd_out_printf(o, "  in %s", f->mod);
			if (f->left >= 0)
				cd_out_printf(o, "  %.1f%% of backward left", f->left * 100);
			else
				cd_out_str(o, "  backward left n/a");
			if (f->ops_left >= 0)
				cd_out_printf(o, " (%" PRId64 " op%s)", f->ops_left,
					      f->ops_left == 1 ? "" : "s");
			if (f->ncalls) {
				cd_out_str(o, "  NCCL");
				if (f->nccl_bytes >= 0)
					cd_out_printf(o, " %" PRId64 " bytes", f->nccl_bytes);
				if (f->nccl_dur >= 0)
					cd_out_printf(o, " %.1f us", (double)f->nccl_dur / 1000.0);
			}
			cd_out_str(o, "\n");
			bool *l = b && listed ? &listed[(f->set ? d->sets[0].b.n : 0) + f->index] : NULL;
			if (b && b->n && !(l && *l)) {
				if (l)
					*l = true;
				cd_out_str(o, "    ");
				for (uint32_t m = 0; m < b->n; m++)
					cd_out_printf(o, "%s%s", m ? ", " : "",
						      d->params.v[b->p[m]].name);
				cd_out_str(o, "\n");
			}
		}
		uint32_t n = never_fired(d, s, tmp);
		for (uint32_t k = 0; k < n; k++) {
			const struct cd_bk_bucket *b = &d->sets[s->fires.v[0].set].b.v[tmp[k]];
			cd_out_printf(o, "  bucket %u never fired", tmp[k]);
			for (uint32_t m = 0; m < b->n; m++)
				cd_out_printf(o, "%s%s", m ? ", " : ": ", d->params.v[b->p[m]].name);
			cd_out_str(o, "\n");
		}
		n = unbucketed(d, s, tmp);
		if (n || d->ignored.n) {
			cd_out_str(o, "  in no bucket:");
			for (uint32_t k = 0; k < n; k++)
				cd_out_printf(o, " %s", d->params.v[tmp[k]].name);
			for (uint32_t k = 0; k < d->ignored.n; k++)
				cd_out_printf(o, " %s", d->ignored.v[k]);
			cd_out_str(o, "\n");
		}
	}
	for (uint32_t i = 0; i < d->notes.n; i++)
		cd_out_printf(o, "  note: %s\n", d->notes.v[i].text);
	free(listed);
}

static void flag_text(struct cd_out *o, const char *name, int8_t v)
{
	cd_out_printf(o, ", %s %s", name, v < 0 ? "unknown" : v ? "true" : "false");
}

static enum cd_status text_ddp(struct cd_out *o, const struct cd_bk_ddp *d, struct cd_err *err)
{
	enum cd_status st;
	cd_out_printf(o, "cap %" PRId64 " bytes, first bucket cap %" PRId64 " bytes", d->cap,
		      d->first_cap);
	flag_text(o, "find_unused", d->find_unused);
	flag_text(o, "static_graph", d->static_graph);
	flag_text(o, "grad_as_view", d->grad_as_view);
	cd_out_str(o, "\n");
	if (d->note)
		cd_out_printf(o, "note: %s\n", d->note);
	if (d->params_from_fw_pre)
		cd_out_str(o, "note: the ddp event lists no params; the modules' own (fw_pre) are "
			   "planned\n");
	text_set(o, d, CD_BK_INITIAL);
	text_set(o, d, CD_BK_REBUILT);
	cd_out_str(o, "\n");
	text_observed(o, d);
	cd_out_str(o, "\nPlanned\n");
	if ((st = plan_table(o, d, err)))
		return st;
	char line[2][400];
	uint32_t nn = plan_notes(d, line);
	for (uint32_t i = 0; i < nn; i++)
		cd_out_printf(o, "note: %s\n", line[i]);
	if (d->unplanned.n) {
		cd_out_str(o, "not planned (their module never ran forward):");
		for (uint32_t i = 0; i < d->unplanned.n; i++)
			cd_out_printf(o, " %s", d->params.v[d->unplanned.v[i]].name);
		cd_out_str(o, "\n");
	}
	cd_out_str(o, "\nCompared\n");
	if (!d->compared.n)
		cd_out_str(o, "  DDP's buckets are the plan's\n");
	for (uint32_t i = 0; i < d->compared.n; i++)
		cd_out_printf(o, "  %s\n", d->compared.v[i].text);
	return CD_OK;
}

/* ---- JSON ---- */

static void pj_names(struct cd_out *o, const struct cd_bk_ddp *d, const uint32_t *p, uint32_t n)
{
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < n; i++)
		cd_pj_cstr(o, d->params.v[p[i]].name);
	cd_pj_end(o);
}

static void pj_i64_or_null(struct cd_out *o, const char *key, int64_t v)
{
	cd_pj_key(o, key);
	if (v < 0)
		cd_pj_raw(o, "null", 4);
	else
		cd_pj_int(o, v);
}

static void pj_flag(struct cd_out *o, const char *key, int8_t v)
{
	cd_pj_key(o, key);
	if (v < 0)
		cd_pj_raw(o, "null", 4);
	else
		cd_pj_bool(o, v);
}

static void pj_set(struct cd_out *o, const struct cd_bk_ddp *d, uint32_t which)
{
	const struct cd_bk_set *s = &d->sets[which];
	if (!s->present || !s->members) {
		cd_pj_raw(o, "null", 4);
		return;
	}
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < s->b.n; i++)
		pj_names(o, d, s->b.v[i].p, s->b.v[i].n);
	cd_pj_end(o);
}

static void pj_sizes(struct cd_out *o, const struct cd_bk_ddp *d, uint32_t which)
{
	const struct cd_bk_set *s = &d->sets[which];
	if (!s->present) {
		cd_pj_raw(o, "null", 4);
		return;
	}
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < s->b.n; i++) {
		int64_t v = cd_bk_set_size(d, &s->b.v[i], s->members);
		if (v < 0)
			cd_pj_raw(o, "null", 4);
		else
			cd_pj_int(o, v);
	}
	cd_pj_end(o);
}

static void pj_diffs(struct cd_out *o, const struct cd_bk_diff *v, uint32_t n)
{
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < n; i++) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "kind");
		cd_pj_cstr(o, v[i].kind);
		if (v[i].buckets) {
			cd_pj_key(o, "buckets");
			cd_pj_cstr(o, v[i].buckets);
		}
		cd_pj_key(o, "text");
		cd_pj_cstr(o, v[i].text);
		cd_pj_end(o);
	}
	cd_pj_end(o);
}

/* One observed bucket all-reduce. */
static void json_fire(struct cd_out *o, const struct cd_bk_ddp *d, const struct cd_bk_fire *f)
{
	const struct cd_bk_bucket *b = fire_bucket(d, f);
	cd_pj_begin_obj(o);
	pj_i64_or_null(o, "index", f->index);
	pj_i64_or_null(o, "bytes", f->bytes);
	cd_pj_key(o, "dtype");
	if (f->dtype)
		cd_pj_cstr(o, f->dtype);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "params");
	if (b && d->sets[f->set].members)
		pj_names(o, d, b->p, b->n);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "buckets_of");
	if (f->set == CD_BK_NOSET)
		cd_pj_raw(o, "null", 4);
	else
		cd_pj_cstr(o, f->set == CD_BK_REBUILT ? "rebuilt" : "initial");
	cd_pj_key(o, "module");
	cd_pj_cstr(o, f->mod);
	cd_pj_key(o, "pass");
	cd_pj_int(o, f->pass);
	pj_i64_or_null(o, "seq", f->seq);
	pj_i64_or_null(o, "t", f->t);
	cd_pj_key(o, "backward_left");
	if (f->left >= 0) {
		/* four decimals, without trailing zeros (0.7, 1.0) */
		char v[32];
		int n = snprintf(v, sizeof v, "%.4f", f->left);
		while (n > 3 && v[n - 1] == '0' && v[n - 2] != '.')
			n--;
		cd_pj_raw(o, v, (size_t)n);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	pj_i64_or_null(o, "ops_left", f->ops_left);
	cd_pj_key(o, "nccl_calls");
	cd_pj_int(o, f->ncalls);
	pj_i64_or_null(o, "nccl_bytes", f->ncalls ? f->nccl_bytes : -1);
	pj_i64_or_null(o, "nccl_ns", f->ncalls ? f->nccl_dur : -1);
	cd_pj_end(o);
}

/* One region's bucket all-reduces, the buckets that never fired and the
 * parameters in no bucket. */
static void json_step(struct cd_out *o, const struct cd_bk_ddp *d, const struct cd_bk_step *s)
{
	uint32_t tmp[CD_LIST_MAX];

	cd_pj_begin_obj(o);
	cd_pj_key(o, "region");
	cd_pj_int(o, s->region);
	cd_pj_key(o, "label");
	if (s->label)
		cd_pj_cstr(o, s->label);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "passes");
	cd_pj_int(o, s->passes);
	cd_pj_key(o, "buckets");
	cd_pj_begin_arr(o);
	for (uint32_t j = 0; j < s->fires.n; j++)
		json_fire(o, d, &s->fires.v[j]);
	cd_pj_end(o);
	uint32_t n = never_fired(d, s, tmp);
	cd_pj_key(o, "never_fired");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < n; k++)
		cd_pj_int(o, tmp[k]);
	cd_pj_end(o);
	n = unbucketed(d, s, tmp);
	cd_pj_key(o, "unbucketed");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < n; k++)
		cd_pj_cstr(o, d->params.v[tmp[k]].name);
	for (uint32_t k = 0; k < d->ignored.n; k++)
		cd_pj_cstr(o, d->ignored.v[k]);
	cd_pj_end(o);
	cd_pj_end(o);
}

/* DDPOptimizer's plan (index 0: the first to all-reduce). */
static void json_plan(struct cd_out *o, const struct cd_bk_ddp *d)
{
	char nb[1024];

	cd_pj_begin_obj(o);
	cd_pj_key(o, "cap");
	cd_pj_int(o, d->plan.cap);
	cd_pj_key(o, "first_cap");
	cd_pj_int(o, d->plan.first_cap);
	cd_pj_key(o, "first_cap_from");
	cd_pj_cstr(o, d->plan.first_cap_from == CD_BK_FC_OPTION	   ? "option"
		      : d->plan.first_cap_from == CD_BK_FC_DEFAULT ? "default_first_cap"
								   : "first_cap");
	char line[2][400];
	uint32_t nn = plan_notes(d, line);
	cd_pj_key(o, "notes");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < nn; i++)
		cd_pj_cstr(o, line[i]);
	cd_pj_end(o);
	cd_pj_key(o, "buckets");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < d->plan.b.n; i++) {
		const struct cd_bk_pbucket *b = &d->plan.b.v[i];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "index");
		cd_pj_int(o, i);
		cd_pj_key(o, "size");
		cd_pj_int(o, b->size);
		cd_pj_key(o, "params");
		pj_names(o, d, b->n ? d->plan.order.v + b->first : NULL, b->n);
		cd_pj_key(o, "param_names");
		cd_pj_begin_arr(o);
		for (uint32_t j = 0; j < b->n; j++)
			cd_pj_cstr(o, ddpo_name(d, d->params.v[d->plan.order.v[b->first + j]].name, nb,
						sizeof nb));
		cd_pj_end(o);
		cd_pj_key(o, "extra_ops");
		cd_pj_int(o, b->extra_ops);
		cd_pj_key(o, "extra_size");
		cd_pj_int(o, b->extra_ops ? b->extra_size : 0);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "unplanned");
	pj_names(o, d, d->unplanned.v, d->unplanned.n);
	cd_pj_end(o);
}

static void json_ddp(struct cd_out *o, const struct cd_bk_trace *t, const struct cd_bk_ddp *d)
{
	cd_pj_begin_obj(o);
	if (t->has_rank) {
		cd_pj_key(o, "rank");
		cd_pj_int(o, t->rank);
	}
	cd_pj_key(o, "trace");
	cd_pj_cstr(o, t->path);
	cd_pj_key(o, "mod");
	cd_pj_cstr(o, d->mod);
	cd_pj_key(o, "pg");
	cd_pj_cstr(o, d->pg);
	cd_pj_key(o, "cap");
	cd_pj_int(o, d->cap);
	cd_pj_key(o, "first_cap");
	cd_pj_int(o, d->first_cap);
	pj_i64_or_null(o, "default_first_cap", d->default_first_cap);
	pj_flag(o, "find_unused", d->find_unused);
	pj_flag(o, "static_graph", d->static_graph);
	pj_flag(o, "grad_as_view", d->grad_as_view);
	cd_pj_key(o, "note");
	if (d->note)
		cd_pj_cstr(o, d->note);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "params_from_fw_pre");
	cd_pj_bool(o, d->params_from_fw_pre);

	cd_pj_key(o, "planned");
	json_plan(o, d);

	cd_pj_key(o, "observed");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < d->steps.n; i++)
		json_step(o, d, &d->steps.v[i]);
	cd_pj_end(o);

	cd_pj_key(o, "ddp_buckets");
	cd_pj_begin_obj(o);
	cd_pj_key(o, "initial");
	pj_set(o, d, CD_BK_INITIAL);
	cd_pj_key(o, "rebuilt");
	pj_set(o, d, CD_BK_REBUILT);
	cd_pj_key(o, "initial_sizes");
	pj_sizes(o, d, CD_BK_INITIAL);
	cd_pj_key(o, "rebuilt_sizes");
	pj_sizes(o, d, CD_BK_REBUILT);
	cd_pj_end(o);
	cd_pj_key(o, "compared");
	pj_diffs(o, d->compared.v, d->compared.n);
	cd_pj_key(o, "notes");
	pj_diffs(o, d->notes.v, d->notes.n);
	cd_pj_end(o);
}

/* ---- ranks ---- */

/* The first difference between two DDP modules' buckets into buf; false
 * when they agree (count, sizes and members of both sets). */
static bool first_diff(const struct cd_bk_ddp *a, const struct cd_bk_ddp *b, char *buf, size_t cap)
{
	if (strcmp(a->mod, b->mod) != 0) {
		snprintf(buf, cap, "module %s against %s", a->mod, b->mod);
		return true;
	}
	for (uint32_t w = 0; w < 2; w++) {
		const struct cd_bk_set *x = &a->sets[w], *y = &b->sets[w];
		const char *wn = w ? "rebuilt" : "initial";
		if (x->present != y->present) {
			snprintf(buf, cap, "%s buckets %s against %s", wn,
				 x->present ? "present" : "absent", y->present ? "present" : "absent");
			return true;
		}
		if (x->b.n != y->b.n) {
			snprintf(buf, cap, "%u %s buckets against %u", x->b.n, wn, y->b.n);
			return true;
		}
		for (uint32_t i = 0; i < x->b.n; i++) {
			int64_t sx = cd_bk_set_size(a, &x->b.v[i], x->members);
			int64_t sy = cd_bk_set_size(b, &y->b.v[i], y->members);
			if (sx != sy) {
				snprintf(buf, cap, "%s bucket %u: %" PRId64 " bytes against %" PRId64,
					 wn, i, sx, sy);
				return true;
			}
			if (x->members && y->members) {
				const struct cd_bk_bucket *bx = &x->b.v[i], *by = &y->b.v[i];
				for (uint32_t m = 0; m < bx->n || m < by->n; m++) {
					const char *px = m < bx->n ? a->params.v[bx->p[m]].name : "nothing";
					const char *py = m < by->n ? b->params.v[by->p[m]].name : "nothing";
					if (strcmp(px, py) == 0)
						continue;
					snprintf(buf, cap, "%s bucket %u, parameter %u: %.250s against %.250s",
						 wn, i, m, px, py);
					return true;
				}
			}
		}
	}
	return false;
}

/* Append src to the string in dst (cap bytes), cutting it short if needed. */
static void append(char *dst, size_t cap, const char *src)
{
	size_t l = strlen(dst), m = strlen(src);
	if (l + 1 >= cap)
		return;
	if (m > cap - l - 1)
		m = cap - l - 1;
	memcpy(dst + l, src, m);
	dst[l + m] = 0;
}

static void rank_name(char *buf, size_t cap, const struct cd_bk_trace *t)
{
	if (t->has_rank)
		snprintf(buf, cap, "rank %" PRId64, t->rank);
	else
		snprintf(buf, cap, "%s", t->path);
}

/* Do the ranks agree on their k-th DDP module's buckets?  Returns the first
 * rank that differs from t[0], with the difference in buf (and the further
 * ranks that differ too), or -1 when they all agree. */
static int rank_agreement(struct cd_bk_trace *const *t, uint32_t n, uint32_t k, char *buf,
			  size_t cap)
{
	int differs_at = -1;
	char others[200] = "", rb[300];
	uint32_t nothers = 0;
	for (uint32_t i = 1; i < n; i++) {
		char tmp[600];
		bool dif;
		if (k >= t[0]->ddp.n || k >= t[i]->ddp.n) {
			snprintf(tmp, sizeof tmp, "%u DDP modules against %u", t[0]->ddp.n,
				 t[i]->ddp.n);
			dif = true;
		} else {
			dif = first_diff(&t[0]->ddp.v[k], &t[i]->ddp.v[k], tmp, sizeof tmp);
		}
		if (!dif)
			continue;
		if (differs_at < 0) {
			differs_at = (int)i;
			snprintf(buf, cap, "%s", tmp);
			continue;
		}
		rank_name(rb, sizeof rb, t[i]);
		if (nothers++ < 8) {
			if (others[0])
				append(others, sizeof others, ", ");
			append(others, sizeof others, rb);
		} else if (nothers == 9) {
			append(others, sizeof others, ", ...");
		}
	}
	if (nothers) {
		append(buf, cap, " (");
		append(buf, cap, others);
		append(buf, cap, nothers == 1 ? " differs too)" : " differ too)");
	}
	return differs_at;
}

static void json_agreement(struct cd_out *o, struct cd_bk_trace *const *t, const char *mod,
			   int differs_at, const char *diff)
{
	char ra[300], rb[300];
	cd_pj_begin_obj(o);
	cd_pj_key(o, "mod");
	cd_pj_cstr(o, mod);
	cd_pj_key(o, "agree");
	cd_pj_bool(o, differs_at < 0);
	cd_pj_key(o, "difference");
	if (differs_at >= 0) {
		char line[1300];
		rank_name(ra, sizeof ra, t[0]);
		rank_name(rb, sizeof rb, t[differs_at]);
		snprintf(line, sizeof line, "%s against %s: %s", ra, rb, diff);
		cd_pj_cstr(o, line);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	cd_pj_end(o);
}

/* The k-th DDP module as text: once when the ranks agree, else the
 * difference and every rank's own. */
static enum cd_status text_module(struct cd_out *o, struct cd_bk_trace *const *t, uint32_t n,
				  uint32_t k, int differs_at, const char *diff, struct cd_err *err)
{
	enum cd_status st;
	char ra[300], rb[300];
	const struct cd_bk_trace *t0 = t[0];
	const char *mod = k < t0->ddp.n ? t0->ddp.v[k].mod : "?";

	if (n > 1 && differs_at < 0) {
		cd_out_printf(o, "DDP module %s, process group %s\n", mod, t0->ddp.v[k].pg);
		cd_out_str(o, "the same buckets on");
		for (uint32_t i = 0; i < n; i++) {
			rank_name(ra, sizeof ra, t[i]);
			cd_out_printf(o, "%s %s", i ? "," : "", ra);
		}
		rank_name(ra, sizeof ra, t0);
		cd_out_printf(o, "; the all-reduces shown are %s's\n", ra);
		return text_ddp(o, &t0->ddp.v[k], err);
	}
	if (n > 1) {
		rank_name(ra, sizeof ra, t[0]);
		rank_name(rb, sizeof rb, t[differs_at]);
		cd_out_printf(o, "DDP module %s: the ranks' buckets differ: %s against %s: %s\n",
			      mod, ra, rb, diff);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (k >= t[i]->ddp.n)
			continue;
		const struct cd_bk_ddp *d = &t[i]->ddp.v[k];
		rank_name(ra, sizeof ra, t[i]);
		if (n > 1 && i)
			cd_out_str(o, "\n");
		cd_out_printf(o, "DDP module %s (%s), process group %s\n", d->mod, ra, d->pg);
		if ((st = text_ddp(o, d, err)))
			return st;
	}
	return CD_OK;
}

/* Bucket all-reduces that no DDP module took. */
static void report_unattributed(struct cd_out *o, struct cd_bk_trace *const *t, uint32_t n,
				bool json)
{
	char ra[300];
	if (json) {
		cd_pj_key(o, "unattributed");
		cd_pj_begin_arr(o);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!t[i]->outside && !t[i]->unmatched)
			continue;
		if (json) {
			cd_pj_begin_obj(o);
			if (t[i]->has_rank) {
				cd_pj_key(o, "rank");
				cd_pj_int(o, t[i]->rank);
			}
			cd_pj_key(o, "trace");
			cd_pj_cstr(o, t[i]->path);
			cd_pj_key(o, "outside_regions");
			cd_pj_int(o, (int64_t)t[i]->outside);
			cd_pj_key(o, "no_ddp_module");
			cd_pj_int(o, (int64_t)t[i]->unmatched);
			cd_pj_end(o);
			continue;
		}
		rank_name(ra, sizeof ra, t[i]);
		if (t[i]->outside)
			cd_out_printf(o, "\nnote: %s: %" PRIu64 " bucket all-reduce%s of DDP's reducer "
				      "outside every region (not reported)\n", ra, t[i]->outside,
				      t[i]->outside == 1 ? "" : "s");
		if (t[i]->unmatched)
			cd_out_printf(o, "\nnote: %s: %" PRIu64 " bucket all-reduce%s of DDP's reducer "
				      "on a process group of no ddp event (not reported)\n", ra,
				      t[i]->unmatched, t[i]->unmatched == 1 ? "" : "s");
	}
	if (json)
		cd_pj_end(o);
}

enum cd_status cd_buckets_report(struct cd_out *o, struct cd_bk_trace *const *t, uint32_t n,
				 bool json, bool *differ, struct cd_err *err)
{
	enum cd_status st;
	char diff[600];
	uint32_t maxd = 0;

	*differ = false;
	for (uint32_t i = 0; i < n; i++)
		if (t[i]->ddp.n > maxd)
			maxd = t[i]->ddp.n;
	if (json) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "ddp");
		cd_pj_begin_arr(o);
		for (uint32_t k = 0; k < maxd; k++)
			for (uint32_t i = 0; i < n; i++)
				if (k < t[i]->ddp.n)
					json_ddp(o, t[i], &t[i]->ddp.v[k]);
		cd_pj_end(o);
		cd_pj_key(o, "ranks");
		cd_pj_begin_arr(o);
	}
	for (uint32_t k = 0; k < maxd; k++) {
		int differs_at = rank_agreement(t, n, k, diff, sizeof diff);
		if (differs_at >= 0)
			*differ = true;
		if (json) {
			if (n > 1)
				json_agreement(o, t, k < t[0]->ddp.n ? t[0]->ddp.v[k].mod : "?",
					       differs_at, diff);
			continue;
		}
		if (k)
			cd_out_str(o, "\n");
		if ((st = text_module(o, t, n, k, differs_at, diff, err)))
			return st;
	}
	if (json)
		cd_pj_end(o);
	report_unattributed(o, t, n, json);
	if (json) {
		cd_pj_end(o);
		cd_out_str(o, "\n");
	}
	return CD_OK;
}
