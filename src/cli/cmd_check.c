/* commdebug check: traces against a YAML file of communication expectations
 * (commdebug-expect(5)); check --write: the file the traces meet today. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../views/check.h"
#include "../views/expect.h"
#include "../util/out.h"
#include "paths.h"
#include "../postmortem/ranks.h"
#include "../postmortem/run.h"
#include "../replay/trace.h"

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
	int threads = 0, nsums = 0;
	int rc = cd_cli_summaries(o, &sums, &nsums, &read_s, &threads);

	if (rc != CD_EXIT_OK)
		return rc;
	if (!(ptrs = cd_run_ptrs(sums, nsums))) {
		cd_run_free(sums, nsums);
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	if (o->stats)
		cd_cli_print_run_stats(sums, nsums, threads, read_s);
	cd_out_init(&out, NULL);
	out.hold = true;
	struct cd_ranks_opts ro = {.json = false};
	int prc = cd_ranks_report(&out, ptrs, nsums, &ro);
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
	cd_run_free(sums, nsums);
	free(ptrs);
	return rc;
}

/* No file check writes may be one of the traces (nor the expectations
 * file, with --write: that one it reads otherwise). */
static int check_outputs(const struct cd_cli *o)
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
	if ((rc = check_outputs(&o)) != CD_EXIT_OK)
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
		cd_check_report_json(&out, &c, &x, o.expect_path);
	else
		cd_check_report_text(&out, &c, &x, o.expect_path);
	rc = cd_paths_save(o.out_path ? o.out_path : "-", &out);
	if (rc == CD_EXIT_OK && o.junit_path) {
		struct cd_out ju;
		cd_out_init(&ju, NULL);
		ju.hold = true;
		cd_check_report_junit(&ju, &c, &x, o.expect_path);
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
