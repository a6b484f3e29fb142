/* The results of `commdebug check` (check.c's failures and counts) as
 * text, JSON and JUnit XML.  Only prints: nothing here checks. */
#include "check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "ranks 0-3,5" */
static void rank_list(struct cd_out *o, const int64_t *v, uint32_t n)
{
	cd_out_str(o, n == 1 ? "rank " : "ranks ");
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i;
		while (j + 1 < n && v[j + 1] == v[j] + 1)
			j++;
		cd_out_printf(o, i ? ",%" PRId64 : "%" PRId64, v[i]);
		if (j > i)
			cd_out_printf(o, "-%" PRId64, v[j]);
		i = j + 1;
	}
}

static void where_text(struct cd_out *o, const struct cd_check *c, const struct cd_check_fail *f,
		       const int64_t *ranks, uint32_t nranks)
{
	if (f->trace == CD_CHECK_NO_TRACE)
		cd_out_str(o, "all traces");
	else if (nranks)
		rank_list(o, ranks, nranks);
	else
		cd_out_str(o, c->traces.v[f->trace].path);
	if (f->region >= 0) {
		cd_out_printf(o, ", region %" PRId64, f->region);
		if (f->label)
			cd_out_printf(o, " \"%s\"", f->label);
	}
}

static bool same_str(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* Failures that say the same of other ranks: printed once, with the ranks. */
static bool same_failure(const struct cd_check_fail *a, const struct cd_check_fail *b)
{
	return a->id == b->id && a->region == b->region && a->has_rank && b->has_rank &&
	       a->trace != CD_CHECK_NO_TRACE && b->trace != CD_CHECK_NO_TRACE &&
	       same_str(a->label, b->label) && strcmp(a->what, b->what) == 0 &&
	       strcmp(a->expected, b->expected) == 0 && strcmp(a->got, b->got) == 0;
}

static void count_items(const struct cd_check *c, const struct cd_expect *x, uint64_t *checked,
			uint64_t *failed)
{
	*checked = *failed = 0;
	for (uint32_t i = 0; i < x->nids; i++) {
		if (c->items[i].held || c->items[i].failed)
			(*checked)++;
		if (c->items[i].failed)
			(*failed)++;
	}
}

static uint64_t region_count(const struct cd_check *c)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < c->traces.n; i++)
		n += c->traces.v[i].regions.n;
	return n;
}

void cd_check_report_text(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			  const char *xpath)
{
	uint64_t checked, failed;
	bool *shown = calloc(c->fails.n ? c->fails.n : 1, sizeof *shown);
	int64_t *ranks = malloc((c->fails.n ? c->fails.n : 1) * sizeof *ranks);

	for (uint32_t i = 0; shown && ranks && i < c->fails.n; i++) {
		const struct cd_check_fail *f = &c->fails.v[i];
		uint32_t nr = 0;
		if (shown[i])
			continue;
		if (f->has_rank && f->trace != CD_CHECK_NO_TRACE) {
			for (uint32_t k = i; k < c->fails.n; k++)
				if (!shown[k] && same_failure(f, &c->fails.v[k])) {
					shown[k] = true;
					ranks[nr++] = c->fails.v[k].rank;
				}
		}
		cd_out_printf(o, "%s:%" PRIu32 ":%" PRIu32 ": ", xpath, f->at.line, f->at.column);
		where_text(o, c, f, ranks, nr);
		cd_out_printf(o, ": %s: expected %s, got %s\n", f->what, f->expected, f->got);
	}
	free(shown);
	free(ranks);
	if (c->nfails > c->fails.n)
		cd_out_printf(o, "... and %" PRIu64 " more\n", c->nfails - c->fails.n);
	count_items(c, x, &checked, &failed);
	if (!failed)
		cd_out_printf(o, checked == 1 ? "check: the %" PRIu64 " expectation holds"
					      : "check: all %" PRIu64 " expectations hold", checked);
	else
		cd_out_printf(o, "check: %" PRIu64 " of %" PRIu64 " expectation%s not hold", failed,
			      checked, checked == 1 ? " does" : "s do");
	cd_out_printf(o, " (%" PRIu32 " trace%s, %" PRIu64 " region%s)\n", c->traces.n,
		      c->traces.n == 1 ? "" : "s", region_count(c), region_count(c) == 1 ? "" : "s");
}

void cd_check_report_json(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			  const char *xpath)
{
	uint64_t checked, failed;
	count_items(c, x, &checked, &failed);
	cd_pj_begin_obj(o);
	cd_pj_key(o, "expectations");
	cd_pj_int(o, (int64_t)checked);
	cd_pj_key(o, "failed");
	cd_pj_int(o, (int64_t)failed);
	cd_pj_key(o, "traces");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < c->traces.n; i++)
		cd_pj_cstr(o, c->traces.v[i].path);
	cd_pj_end(o);
	cd_pj_key(o, "failures");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < c->fails.n; i++) {
		const struct cd_check_fail *f = &c->fails.v[i];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "file");
		cd_pj_cstr(o, xpath);
		cd_pj_key(o, "line");
		cd_pj_int(o, f->at.line);
		cd_pj_key(o, "column");
		cd_pj_int(o, f->at.column);
		cd_pj_key(o, "check");
		cd_pj_cstr(o, f->what);
		cd_pj_key(o, "expected");
		cd_pj_cstr(o, f->expected);
		cd_pj_key(o, "got");
		cd_pj_cstr(o, f->got);
		cd_pj_key(o, "trace");
		if (f->trace == CD_CHECK_NO_TRACE)
			cd_pj_raw(o, "null", 4);
		else
			cd_pj_cstr(o, c->traces.v[f->trace].path);
		cd_pj_key(o, "rank");
		if (f->has_rank)
			cd_pj_int(o, f->rank);
		else
			cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "region");
		if (f->region >= 0)
			cd_pj_int(o, f->region);
		else
			cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "label");
		if (f->label)
			cd_pj_cstr(o, f->label);
		else
			cd_pj_raw(o, "null", 4);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "more_failures");
	cd_pj_int(o, (int64_t)(c->nfails - c->fails.n));
	cd_pj_end(o);
	cd_out_write(o, "\n", 1);
}

static void xml_text(struct cd_out *o, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': cd_out_str(o, "&lt;"); break;
		case '>': cd_out_str(o, "&gt;"); break;
		case '&': cd_out_str(o, "&amp;"); break;
		case '"': cd_out_str(o, "&quot;"); break;
		default:
			if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
				cd_out_str(o, "?");
			else
				cd_out_write(o, s, 1);
		}
	}
}

/* One test case per expectation (its file line), failures listed in it. */
void cd_check_report_junit(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			   const char *xpath)
{
	uint64_t checked, failed;
	char buf[64];
	count_items(c, x, &checked, &failed);
	cd_out_printf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			 "<testsuite name=\"commdebug check\" tests=\"%" PRIu64 "\" failures=\"%" PRIu64
			 "\">\n", checked, failed);
	for (uint32_t i = 0; i < x->nids; i++) {
		const struct cd_check_item *it = &c->items[i];
		if (!it->held && !it->failed)
			continue;
		cd_out_str(o, "  <testcase classname=\"");
		xml_text(o, xpath);
		snprintf(buf, sizeof buf, ":%" PRIu32 ":%" PRIu32 " ", it->at.line, it->at.column);
		cd_out_str(o, "\" name=\"");
		xml_text(o, buf + 1);
		xml_text(o, it->what);
		if (!it->failed) {
			cd_out_str(o, "\"/>\n");
			continue;
		}
		cd_out_printf(o, "\">\n    <failure message=\"failed in %" PRIu64 " of %" PRIu64
				 " places\">", it->failed, it->failed + it->held);
		for (uint32_t k = 0; k < c->fails.n; k++) {
			const struct cd_check_fail *f = &c->fails.v[k];
			if (f->id != i)
				continue;
			struct cd_out line;
			cd_out_init(&line, NULL);
			line.hold = true;
			int64_t one = f->rank;
			where_text(&line, c, f, &one, f->has_rank ? 1 : 0);
			cd_out_printf(&line, ": %s: expected %s, got %s\n", f->what, f->expected,
				      f->got);
			cd_out_write(&line, "", 1);
			if (line.buf)
				xml_text(o, line.buf);
			cd_out_free(&line);
		}
		cd_out_str(o, "</failure>\n  </testcase>\n");
	}
	cd_out_str(o, "</testsuite>\n");
}
