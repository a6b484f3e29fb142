/* commdebug check: traces against a YAML file of communication expectations
 * (commdebug-expect(5)); check --write: the file the traces meet today. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "expect.h"
#include "out.h"
#include "paths.h"
#include "ranks.h"
#include "run.h"
#include "trace.h"

static const char *check_args(struct cd_cli *cli)
{
	if (cli->ntraces < 2)
		return cli->ntraces < 1 ? "no expectations file given" : "no trace given";
	if (cli->write && (cli->json || cli->junit_path || cli->out_path))
		return "--write writes the expectations file; it takes no --json, --junit or "
		       "--output";
	cli->expect_path = cli->traces[0];
	cli->traces++;
	cli->ntraces--;
	return NULL;
}

static const struct cd_cmd cmd = {
	"check", CD_C_CHECK,
	"Usage: commdebug check [OPTIONS] EXPECT.yaml TRACE...\n"
	"       commdebug check --write [OPTIONS] EXPECT.yaml TRACE...\n"
	"Check traces against communication expectations (commdebug-expect(5)).\n"
	"\n",
	"\n"
	"Exit status: 0 every expectation holds (or --write wrote the file),\n"
	"1 bad or unreadable trace, 2 usage error or bad expectations file,\n"
	"3 a trace was cut short (and everything read held), 5 an expectation\n"
	"does not hold.\n",
	check_args,
};

struct trace_ctx {
	struct cd_check *check;
	const char *path;
	struct cd_trace_run *run;
};

static void on_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct trace_ctx *t = ud;
	(void)r;
	if (e->ev == CD_EV_META && (e->have & CD_F_RANK))
		cd_check_meta(t->check, e->rank);
}

static void on_warn(void *ud, const char *msg)
{
	struct trace_ctx *t = ud;
	cd_cli_print_warning(t->path, t->run ? t->run->line : 0, msg);
}

static enum cd_status on_region(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	return cd_check_region_done(((struct trace_ctx *)ud)->check, r, err);
}

static void on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			  uint32_t coll)
{
	cd_check_on_collective(((struct trace_ctx *)ud)->check, r, e, coll);
}

/* Replay one trace into the check; returns an exit code (0, 1 or 3). */
static int run_trace(struct cd_check *check, const char *path, const struct cd_cli *o)
{
	struct trace_ctx ctx = {check, path, NULL};
	struct cd_replay_opts ro = {
		.want_params = true,
		.region_done = on_region,
		.on_collective = on_collective,
		.warn = on_warn,
		.ud = &ctx,
	};
	struct cd_trace_run run = {.general_parser = o->general_parser, .after_event = on_event,
				   .ud = &ctx};
	struct cd_replay rp;
	struct cd_err err = {0};
	enum cd_status st;

	ctx.run = &run;
	if ((st = cd_check_trace_begin(check, path, &err))) {
		cd_cli_print_error(path, &err);
		return CD_EXIT_DATA;
	}
	if ((st = cd_replay_init(&rp, &ro, &err))) {
		cd_cli_print_error(path, &err);
		return CD_EXIT_DATA;
	}
	st = cd_trace_replay(path, &rp, &run, &err);
	if (!st)
		st = cd_replay_finish(&rp, &err);
	if (!st && o->stats)
		cd_cli_print_stats(path, &run, &rp);
	cd_replay_free(&rp);
	if (st) {
		cd_cli_print_error(path, &err);
		if (!run.cut || run.seen_meta)
			return CD_EXIT_DATA;
		/* cut before its first line: nothing to check, as under analyze */
		cd_check_trace_end(check, true, &err);
		return CD_EXIT_CUT;
	}
	if (run.cut)
		fprintf(stderr, "commdebug: %s: trace cut short (%s); what was read was checked\n",
			path, run.cut_why ? run.cut_why : "it ends early");
	if ((st = cd_check_trace_end(check, run.cut, &err))) {
		cd_cli_print_error(path, &err);
		return CD_EXIT_DATA;
	}
	return run.cut ? CD_EXIT_CUT : CD_EXIT_OK;
}

/* The post-mortem over all traces: does every rank agree?  finding: the
 * first line of its report when not. */
static int ranks_agree(const struct cd_cli *o, bool *agree, char *finding, size_t n)
{
	struct cd_rank_summary *sums = NULL, **ptrs = NULL;
	struct cd_out out;
	double read_s = 0;
	int threads = 0;
	int rc = cd_cli_summaries(o, &sums, &read_s, &threads);

	if (rc != CD_EXIT_OK)
		return rc;
	if (!(ptrs = cd_run_ptrs(sums, o->ntraces))) {
		cd_run_free(sums, o->ntraces);
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	if (o->stats)
		cd_cli_print_run_stats(sums, o->ntraces, threads, read_s);
	cd_out_init(&out, NULL);
	out.hold = true;
	struct cd_ranks_opts ro = {.json = false};
	int prc = cd_ranks_report(&out, ptrs, o->ntraces, &ro);
	/* a cut trace is reported by its own replay (exit 3) */
	*agree = prc == CD_RANKS_AGREE || prc == CD_RANKS_CUT;
	if (prc == CD_RANKS_BAD)
		rc = CD_EXIT_DATA;
	finding[0] = '\0';
	if (!*agree) {
		/* the report's first finding ("1. ..."), else its line on missing or
		 * duplicate ranks */
		for (int pass = 0; pass < 2 && !finding[0]; pass++) {
			const char *p = out.buf, *end = out.buf + out.len;
			while (p && p < end && !finding[0]) {
				const char *nl = memchr(p, '\n', (size_t)(end - p));
				int len = (int)(nl ? nl - p : end - p);
				if (pass == 0 && len > 3 && strncmp(p, "1. ", 3) == 0)
					snprintf(finding, n, "%.*s", len - 3, p + 3);
				else if (pass == 1 && len > 9 && (strncmp(p, "missing ", 8) == 0 ||
								  strncmp(p, "duplicate", 9) == 0))
					snprintf(finding, n, "%.*s", len, p);
				p = nl ? nl + 1 : NULL;
			}
		}
		if (!finding[0])
			snprintf(finding, n, "the ranks disagree (see commdebug ranks)");
	}
	cd_out_free(&out);
	cd_run_free(sums, o->ntraces);
	free(ptrs);
	return rc;
}

/* ---- results ---- */

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

static void write_text(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
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

static void write_json(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
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
static void write_junit(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
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

/* No file check writes may be one of the traces (nor the expectations
 * file, with --write: that one it reads otherwise). */
static int refuse_inputs(const struct cd_cli *o)
{
	const char *outs[3] = {o->write ? o->expect_path : NULL, o->out_path, o->junit_path};
	for (int i = 0; i < 3; i++)
		if (cd_cli_refuse_inputs(o, outs[i], false) != CD_EXIT_OK)
			return CD_EXIT_USAGE;
	if (!o->write && cd_paths_is_input(o->expect_path, o->traces, o->ntraces)) {
		char buf[600];
		snprintf(buf, sizeof buf, "the expectations file is also given as a trace: %s",
			 o->expect_path);
		return cd_cli_usage_error("check", buf);
	}
	return CD_EXIT_OK;
}

int cmd_check(int argc, char **argv)
{
	struct cd_cli o = {0};
	struct cd_expect x = {0};
	struct cd_check c = {0};
	struct cd_out out;
	struct cd_err err = {0};
	bool loaded = false, inited = false;
	int rc = cd_cli_parse(&o, &cmd, argc, argv), worst = CD_EXIT_OK;

	if (rc >= 0)
		return rc;
	cd_out_init(&out, NULL);
	out.hold = true;
	if ((rc = refuse_inputs(&o)) != CD_EXIT_OK)
		goto done;
	if (!o.write) {
		if (cd_expect_load(o.expect_path, &x, &err)) {
			cd_cli_print_error(o.expect_path, &err);
			rc = CD_EXIT_USAGE;
			goto done;
		}
		loaded = true;
	}
	if (cd_check_init(&c, loaded ? &x : NULL, o.write, &err)) {
		cd_cli_print_error(o.expect_path, &err);
		rc = CD_EXIT_DATA;
		goto done;
	}
	inited = true;
	for (int i = 0; i < o.ntraces; i++) {
		int trc = run_trace(&c, o.traces[i], &o);
		if (trc == CD_EXIT_DATA) {
			rc = trc;
			goto done;
		}
		if (trc > worst)
			worst = trc;
	}
	bool agree = true;
	char finding[512] = "";
	if (o.ntraces > 1 && (o.write || x.ranks_agree)) {
		if ((rc = ranks_agree(&o, &agree, finding, sizeof finding)) != CD_EXIT_OK)
			goto done;
	}
	if (o.write) {
		cd_check_write_yaml(&c, &out, o.ntraces > 1 && agree);
		rc = cd_paths_save(o.expect_path, &out);
		if (rc == CD_EXIT_OK)
			rc = worst;
		goto done;
	}
	if (x.ranks_agree) {
		if (o.ntraces < 2)
			snprintf(finding, sizeof finding, "only one trace given");
		cd_check_ranks(&c, o.ntraces > 1 && agree, finding, &err);
	}
	cd_check_finish(&c, &err);
	if (o.json)
		write_json(&out, &c, &x, o.expect_path);
	else
		write_text(&out, &c, &x, o.expect_path);
	rc = cd_paths_save(o.out_path ? o.out_path : "-", &out);
	if (rc == CD_EXIT_OK && o.junit_path) {
		struct cd_out ju;
		cd_out_init(&ju, NULL);
		ju.hold = true;
		write_junit(&ju, &c, &x, o.expect_path);
		rc = cd_paths_save(o.junit_path, &ju);
		cd_out_free(&ju);
	}
	if (rc == CD_EXIT_OK)
		rc = c.nfails ? CD_EXIT_EXPECT : worst;
done:
	cd_out_free(&out);
	if (inited)
		cd_check_free(&c);
	if (loaded)
		cd_expect_free(&x);
	cd_cli_free(&o);
	return rc;
}
