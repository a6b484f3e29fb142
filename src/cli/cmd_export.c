/* commdebug export --perfetto: a job's traces as Chrome trace-event JSON
 * for Perfetto and chrome://tracing (the layout is in export.h).
 *
 * One read: every trace is read once by the runner (src/postmortem/run.c) into its
 * summary and, beside it, its timeline (cd_tl_summarize, with its NCCL-side
 * trace); the post-mortem's findings are computed from the summaries; then
 * each rank is written from its timeline, in rank order (on --jobs threads,
 * each into a part of its own, joined in order).  The output goes to a
 * temporary file next to FILE, renamed over FILE when all went well. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../views/export.h"
#include "../postmortem/findings.h"
#include "../postmortem/ranks.h"
#include "../postmortem/run.h"
#include "../util/spool.h"
#include "../views/timeline.h"
#include "paths.h"

/* The timelines of all the traces are held in memory up to this, and in a
 * temporary file beyond (spool.h); a build with -DCD_EXPORT_MEM=0 sends
 * every full chunk to the file (to test that path on any input). */
#ifndef CD_EXPORT_MEM
#define CD_EXPORT_MEM (64u << 20)
#endif

static const char *check_args(struct cd_cli *cli)
{
	if (!cli->out_path)
		return "no output file given (-o FILE)";
	return NULL;
}

static const struct cd_cmd cmd = {
	"export", CD_C_EXPORT,
	"Usage: commdebug export --perfetto -o FILE [OPTIONS] TRACE...|DIR\n"
	"Write a job's traces as one Chrome trace-event JSON file for Perfetto\n"
	"(ui.perfetto.dev) and chrome://tracing: a process per rank with its\n"
	"regions, module spans (forward, backward, recompute), collectives, NCCL\n"
	"calls with their GPU time, and the post-mortem's findings.\n"
	"\n",
	"\n"
	"Events without a time (\"t\") cannot be placed: they are left out and\n"
	"counted in otherData.  Exit status: 0 written, no finding, 1 bad or\n"
	"unreadable trace (FILE is not written), 2 usage error, 3 a trace was\n"
	"cut short (what was read was written), 4 written, with findings (marked\n"
	"in FILE; as 'commdebug ranks' exits).\n",
	check_args,
};

/* What pass one found wrong with a trace: an error (returns false) or a
 * warning (printed, returns true). */
static bool check_summary(const struct cd_rank_summary *s)
{
	if (s->end == CD_END_EMPTY) {
		cd_cli_print_warning(s->path, 0, s->cut_first
			? "the trace is cut before its first line is complete; exported as an "
			  "empty rank"
			: "empty trace: no event; exported as an empty rank");
		return true;
	}
	if (s->error) {
		cd_cli_print_summary_error(s->path, s->error);
		return false;
	}
	if (s->cut)
		cd_cli_print_warning(s->path, 0, "the trace is cut; exported what it holds");
	else if (!s->has_rank)
		cd_cli_print_warning(s->path, 0, "its meta event has no rank; exported as a "
						 "process of its own");
	return true;
}

/* ---- reading ---- */

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

struct reading {
	const struct cd_cli *o;
	struct cd_spool *sp;
};

/* The runner's reader of a commdebug trace (run.h's read_trace): its
 * summary and its timeline, with its NCCL-side trace (--nccl's, or
 * name.nccl.zst when there is one; none with --no-nccl). */
static void read_trace(const char *path, const struct cd_run_opts *ro, struct cd_rank_summary *s)
{
	const struct reading *rd = ro->read_ctx;
	const struct cd_cli *o = rd->o;
	char *sib = o->no_nccl ? NULL
		    : o->nccl_path ? strdup(o->nccl_path) : cd_paths_nccl_name(path);

	if (sib && !o->nccl_path && !is_file(sib)) {
		free(sib);
		sib = NULL;
	}
	cd_tl_summarize(path, sib, ro->general_parser, rd->sp, s);
	free(sib);
}

/* --stats: what the timelines hold. */
static void print_timeline_stats(const struct cd_rank_summary *sums, int n, const struct cd_spool *sp)
{
	uint64_t records = 0, bytes = 0;
	for (int i = 0; i < n; i++) {
		const struct cd_tl *tl = sums[i].extra;
		if (sums[i].free_extra != cd_tl_free || !tl)
			continue;
		records += tl->records;
		bytes += tl->log.bytes;
	}
	fprintf(stderr, "commdebug: stats: timeline_records=%" PRIu64 " timeline_bytes=%" PRIu64
			" timeline_spilled_bytes=%" PRIu64 "\n",
		records, bytes, cd_spool_spilled(sp));
}

/* ---- writing ---- */

static bool in_list(struct cd_rank_summary *const *v, int n, const struct cd_rank_summary *s)
{
	for (int i = 0; i < n; i++)
		if (v[i] == s)
			return true;
	return false;
}

/* The process id of trace i (pm->all[i]): its rank, when it is the trace
 * compared for that rank or an empty trace named after a rank no other
 * trace has; else CD_EXPORT_PID_OTHER + i. */
static int64_t pid_of(const struct cd_pm *pm, const struct cd_rank_summary *s, int i)
{
	if (in_list(pm->r, pm->n, s))
		return s->rank;
	if (s->end == CD_END_EMPTY && s->rank_from_name) {
		for (int k = 0; k < pm->n; k++)
			if (pm->r[k]->rank == s->rank)
				return CD_EXPORT_PID_OTHER + i;
		for (int k = 0; k < i; k++)
			if (pm->all[k]->end == CD_END_EMPTY && pm->all[k]->rank_from_name &&
			    pm->all[k]->rank == s->rank)
				return CD_EXPORT_PID_OTHER + i;
		return s->rank;
	}
	return CD_EXPORT_PID_OTHER + i;
}

/* One rank: what to write, and what came of it. */
struct rank_job {
	struct cd_rank_summary *s;
	int64_t pid;
	/* out */
	struct cd_export part;     /* on threads: the part it was written to */
	struct cd_out part_out;
	struct cd_export_rank_res res;
	struct cd_err err;
	enum cd_status st;
};

struct writing {
	const struct cd_cli *o;
	const struct cd_pm *pm;
	struct cd_export *x;
	struct rank_job *job;      /* the ranks written */
	int njob;
	int rc;
};

/* What rank i's writing said: errors and warnings, in the ranks' order;
 * false to stop. */
static bool job_report(struct writing *p, struct rank_job *j)
{
	if (j->st) {
		if (j->res.tl_failed)   /* the trace is not at fault */
			fprintf(stderr, "commdebug: the export's temporary file (the timeline of %s): "
					"%s\n", j->s->path, j->err.msg);
		else
			cd_cli_print_error(j->res.nccl_failed ? j->res.nccl_path : j->s->path,
					   &j->err);
		p->rc = CD_EXIT_DATA;
		return false;
	}
	if (j->res.nccl_refused)
		cd_cli_print_warning(j->res.nccl_path, 0, "its meta names another rank; not joined");
	if (j->res.nccl_cut)
		cd_cli_print_warning(j->res.nccl_path, 0, "the trace is cut; exported what it holds");
	if ((j->res.cut || j->res.nccl_cut) && p->rc == CD_EXIT_OK)
		p->rc = CD_EXIT_CUT;
	return true;
}

/* Rank i is written and reported: its timeline goes. */
static void job_release(struct rank_job *j)
{
	cd_rank_summary_free_extra(j->s);
}

/* On a thread: rank i into a part of its own. */
static void job_work(void *ctx, int i, void *res)
{
	struct writing *p = ctx;
	struct rank_job *j = &p->job[i];
	(void)res;
	cd_export_part(p->x, &j->part, &j->part_out);
	j->st = cd_export_rank(&j->part, j->s, j->pid, &j->res, &j->err);
}

/* In order: rank i's part joins the document. */
static bool job_done(void *ctx, int i, void *res)
{
	struct writing *p = ctx;
	struct rank_job *j = &p->job[i];
	(void)res;
	cd_export_join(p->x, &j->part);
	cd_out_free(&j->part_out);
	bool go_on = job_report(p, j);
	job_release(j);
	return go_on;
}

static void job_drop(void *ctx, int i, void *res)
{
	struct writing *p = ctx;
	(void)res;
	cd_out_free(&p->job[i].part_out);
}

/* Write every rank to f; returns the exit code.  Several ranks are
 * written side by side on --jobs threads, each into a part of its own,
 * joined in order: the same bytes as one after the other. */
static int write_all(const struct cd_cli *o, const struct cd_pm *pm, FILE *f,
		     const char *out_name)
{
	struct cd_out out;
	struct cd_export x;
	struct cd_err err = {0};
	struct writing p = {.o = o, .pm = pm, .x = &x, .rc = CD_EXIT_OK};

	cd_out_init(&out, f);
	cd_export_begin(&x, &out, pm);
	if (!(p.job = calloc((size_t)(pm->nall ? pm->nall : 1), sizeof *p.job))) {
		fprintf(stderr, "commdebug: out of memory\n");
		p.rc = CD_EXIT_DATA;
		goto out;
	}
	for (int i = 0; i < pm->nall; i++) {
		/* a dump joined with its rank's trace is drawn on that trace's
		 * collectives (cd_export_rank), not as a process of its own */
		if (pm->all[i]->fr_joined)
			continue;
		p.job[p.njob].s = pm->all[i];
		p.job[p.njob++].pid = pid_of(pm, pm->all[i], i);
	}
	if (p.njob > 1 && o->jobs != 1) {
		if (cd_run_ordered(p.njob, 0, o->jobs, 0, job_work, job_done, job_drop, &p, &err)) {
			fprintf(stderr, "commdebug: %s\n", err.msg);
			p.rc = CD_EXIT_DATA;
		}
	} else {
		/* one at a time, straight into the output */
		for (int i = 0; i < p.njob; i++) {
			struct rank_job *j = &p.job[i];
			j->st = cd_export_rank(&x, j->s, j->pid, &j->res, &j->err);
			bool go_on = job_report(&p, j);
			job_release(j);
			if (!go_on)
				break;
		}
	}
	free(p.job);
out:
	cd_export_end(&x);
	if (cd_out_flush(&out, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", out_name, err.msg);
		p.rc = CD_EXIT_DATA;
	}
	cd_out_free(&out);
	if (p.rc != CD_EXIT_DATA && x.st.untimed)
		fprintf(stderr, "commdebug: warning: %" PRIu64 " event%s without a time (\"t\") "
				"left out (counted in otherData)\n", x.st.untimed,
			x.st.untimed == 1 ? "" : "s");
	return p.rc;
}

int cmd_export(int argc, char **argv)
{
	struct cd_cli o = {0};
	struct cd_rank_summary *sums = NULL, **ptrs = NULL;
	struct cd_pm pm;
	struct reading rd = {.o = &o};
	struct cd_run_opts with = {.read_trace = read_trace, .read_ctx = &rd};
	bool have_pm = false;
	double read_s = 0;
	int threads = 0, n = 0;
	int rc = cd_cli_parse(&o, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	if ((rc = cd_cli_refuse_inputs(&o, o.out_path, true)) != CD_EXIT_OK)
		goto out;
	if (!(rd.sp = cd_spool_new(CD_EXPORT_MEM)))
		goto nomem;
	if ((rc = cd_cli_summaries_with(&o, &with, &sums, &n, &read_s, &threads)) != CD_EXIT_OK)
		goto out;
	if (!(ptrs = cd_run_ptrs(sums, n)))
		goto nomem;
	if (o.stats) {
		cd_cli_print_run_stats(sums, n, threads, read_s);
		print_timeline_stats(sums, n, rd.sp);
	}
	for (int i = 0; i < n; i++)
		if (!check_summary(&sums[i]))
			rc = CD_EXIT_DATA;
	if (rc != CD_EXIT_OK)
		goto out;
	if (!cd_pm_build(&pm, ptrs, n, o.late_ns)) {
		cd_pm_free(&pm);
		goto nomem;
	}
	have_pm = true;
	if (strcmp(o.out_path, "-") == 0) {
		rc = write_all(&o, &pm, stdout, "standard output");
		goto findings;
	}
	struct cd_tmpfile t;
	if (!cd_paths_tmp_open(&t, o.out_path)) {
		rc = CD_EXIT_DATA;
		goto out;
	}
	rc = write_all(&o, &pm, t.f, t.tmp);
	if (!cd_paths_tmp_commit(&t, rc != CD_EXIT_DATA))
		rc = CD_EXIT_DATA;
	goto findings;
findings:
	/* findings (marked in the file) exit 4 as in ranks, over a cut; a
	 * rank with no trace at all is not one (a job exported in part) */
	if (rc != CD_EXIT_DATA && pm.f.n)
		rc = CD_EXIT_DIFFER;
	goto out;
nomem:
	fprintf(stderr, "commdebug: out of memory\n");
	rc = CD_EXIT_DATA;
out:
	if (have_pm)
		cd_pm_free(&pm);
	cd_run_free(sums, n);   /* the timelines, then their spool */
	cd_spool_free(rd.sp);
	free(ptrs);
	cd_cli_free(&o);
	return rc;
}
