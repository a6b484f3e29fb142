/* commdebug export --perfetto: a job's traces as Chrome trace-event JSON
 * for Perfetto and chrome://tracing (the layout is in export.h).
 *
 * Two passes: every trace is summarized (by the runner, src/run.c) and
 * the post-mortem's findings are computed; then each trace is read again,
 * in rank order, and written as it is read.  The output goes to a
 * temporary file next to FILE, renamed over FILE when all went well. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../export.h"
#include "../findings.h"
#include "../ranks.h"
#include "../run.h"
#include "paths.h"

static const char *check_args(struct cd_cli *cli)
{
	if (!cli->out_path)
		return "no output file given (-o FILE)";
	for (int i = 0; i < cli->ntraces; i++)
		if (strcmp(cli->traces[i], "-") == 0)
			return "standard input cannot be exported: export reads each trace twice";
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

/* ---- pass two ---- */

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

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

/* One rank of pass two: what to write, and what came of it. */
struct rank_job {
	const struct cd_rank_summary *s;
	int64_t pid;
	char *sib;                 /* its NCCL-side trace, or NULL */
	/* out */
	struct cd_export part;     /* on threads: the part it was written to */
	struct cd_out part_out;
	struct cd_export_rank_res res;
	struct cd_err err;
	enum cd_status st;
};

struct pass2 {
	const struct cd_cli *o;
	const struct cd_pm *pm;
	struct cd_export *x;
	struct rank_job *job;      /* pm->nall */
	int rc;
};

/* What rank i is, before it is written (NULL sib: none). */
static void job_setup(struct pass2 *p, int i)
{
	const struct cd_cli *o = p->o;
	struct rank_job *j = &p->job[i];
	j->s = p->pm->all[i];
	j->pid = pid_of(p->pm, j->s, i);
	/* a rank read from a summary file: its trace is elsewhere */
	j->sib = o->no_nccl || j->s->from_summary ? NULL
		 : o->nccl_path ? strdup(o->nccl_path) : cd_paths_nccl_name(j->s->path);
	if (j->sib && !o->nccl_path && !is_file(j->sib)) {
		free(j->sib);
		j->sib = NULL;
	}
}

/* What rank i's writing said: errors and warnings, in the ranks' order;
 * false to stop. */
static bool job_report(struct pass2 *p, struct rank_job *j)
{
	if (j->st) {
		cd_cli_print_error(j->res.nccl_failed ? j->sib : j->s->path, &j->err);
		p->rc = CD_EXIT_DATA;
		return false;
	}
	if (j->res.nccl_refused)
		cd_cli_print_warning(j->sib, 0, "its meta names another rank; not joined");
	if (j->res.nccl_cut)
		cd_cli_print_warning(j->sib, 0, "the trace is cut; exported what it holds");
	if ((j->res.cut || j->res.nccl_cut) && p->rc == CD_EXIT_OK)
		p->rc = CD_EXIT_CUT;
	return true;
}

/* On a thread: rank i into a part of its own. */
static void job_work(void *ctx, int i, void *res)
{
	struct pass2 *p = ctx;
	struct rank_job *j = &p->job[i];
	(void)res;
	if (j->s->fr_joined)
		return;
	cd_export_part(p->x, &j->part, &j->part_out);
	j->st = cd_export_rank(&j->part, j->s, j->pid, j->sib, &j->res, &j->err);
}

/* In order: rank i's part joins the document. */
static bool job_done(void *ctx, int i, void *res)
{
	struct pass2 *p = ctx;
	struct rank_job *j = &p->job[i];
	(void)res;
	if (j->s->fr_joined)
		return true;
	cd_export_join(p->x, &j->part);
	cd_out_free(&j->part_out);
	return job_report(p, j);
}

static void job_drop(void *ctx, int i, void *res)
{
	struct pass2 *p = ctx;
	(void)res;
	if (!p->job[i].s->fr_joined)
		cd_out_free(&p->job[i].part_out);
}

/* Write every trace to f; returns the exit code.  Several traces are
 * written side by side on --jobs threads, each into a part of its own,
 * joined in order: the same bytes as one after the other. */
static int write_all(const struct cd_cli *o, const struct cd_pm *pm, FILE *f,
		     const char *out_name)
{
	struct cd_out out;
	struct cd_export x;
	struct cd_err err = {0};
	struct pass2 p = {.o = o, .pm = pm, .x = &x, .rc = CD_EXIT_OK};

	cd_out_init(&out, f);
	cd_export_begin(&x, &out, pm, o->general_parser, o->no_nccl);
	if (!(p.job = calloc((size_t)(pm->nall ? pm->nall : 1), sizeof *p.job))) {
		fprintf(stderr, "commdebug: out of memory\n");
		p.rc = CD_EXIT_DATA;
		goto out;
	}
	for (int i = 0; i < pm->nall; i++)
		job_setup(&p, i);
	if (pm->nall > 1 && o->jobs != 1) {
		if (cd_run_ordered(pm->nall, 0, o->jobs, 0, job_work, job_done, job_drop, &p, &err)) {
			fprintf(stderr, "commdebug: %s\n", err.msg);
			p.rc = CD_EXIT_DATA;
		}
	} else {
		/* one at a time, straight into the output */
		for (int i = 0; i < pm->nall; i++) {
			struct rank_job *j = &p.job[i];
			if (j->s->fr_joined)
				continue;   /* a dump joined with its rank's trace: on that trace's
					     * collectives (cd_export_rank), not a process of its own */
			j->st = cd_export_rank(&x, j->s, j->pid, j->sib, &j->res, &j->err);
			if (!job_report(&p, j))
				break;
		}
	}
	for (int i = 0; i < pm->nall; i++)
		free(p.job[i].sib);
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
	bool have_pm = false;
	double read_s = 0;
	int threads = 0, n = 0;
	int rc = cd_cli_parse(&o, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	if ((rc = cd_cli_refuse_inputs(&o, o.out_path, true)) != CD_EXIT_OK)
		goto out;
	if ((rc = cd_cli_summaries(&o, &sums, &n, &read_s, &threads)) != CD_EXIT_OK)
		goto out;
	if (!(ptrs = cd_run_ptrs(sums, n)))
		goto nomem;
	if (o.stats)
		cd_cli_print_run_stats(sums, n, threads, read_s);
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
	cd_run_free(sums, n);
	free(ptrs);
	cd_cli_free(&o);
	return rc;
}
