/* The runner's summaries on the command line (src/postmortem/run.c): read with the
 * command's --jobs and --parser, what is said about them, and the
 * cross-rank report of ranks, colls and analyze with several traces. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../postmortem/frdump.h"
#include "../postmortem/ranks.h"
#include "../postmortem/run.h"
#include "cli.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cd_cli_summaries(const struct cd_cli *cli, struct cd_rank_summary **sums, int *n,
		     double *read_s, int *threads)
{
	return cd_cli_summaries_with(cli, NULL, sums, n, read_s, threads);
}

int cd_cli_summaries_with(const struct cd_cli *cli, const struct cd_run_opts *with,
			  struct cd_rank_summary **sums, int *n, double *read_s, int *threads)
{
	struct cd_run_opts ro = {.jobs = cli->jobs, .general_parser = cli->general_parser};
	struct cd_err err = {0};

	if (with) {
		ro.read_trace = with->read_trace;
		ro.read_ctx = with->read_ctx;
	}
	if (cd_run_summaries(cli->traces, cli->ntraces, &ro, sums, n, &err)) {
		fprintf(stderr, "commdebug: %s\n", err.msg);
		return CD_EXIT_DATA;
	}
	/* every command but summarize needs a rank; summarize writes a shard
	 * that holds none as a summary file of no rank, which merges with the
	 * others */
	if (*n == 0 && cli->bit != CD_C_SUMMARIZE) {
		fprintf(stderr, "commdebug: no rank to read: the summary files given hold none "
				"(each was written by a shard that had no trace)\n");
		cd_run_free(*sums, 0);
		*sums = NULL;
		return CD_EXIT_DATA;
	}
	if (!cd_fr_join(*sums, *n)) {
		fprintf(stderr, "commdebug: out of memory\n");
		cd_run_free(*sums, *n);
		*sums = NULL;
		*n = 0;
		return CD_EXIT_DATA;
	}
	if (read_s)
		*read_s = ro.read_s;
	if (threads)
		*threads = ro.threads;
	return CD_EXIT_OK;
}

void cd_cli_print_run_stats(const struct cd_rank_summary *sums, int n, int threads, double read_s)
{
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++)
		bytes += cd_rank_summary_bytes(&sums[i]);
	fprintf(stderr, "commdebug: stats: ranks=%d summary_bytes=%" PRIu64
			" summary_bytes_per_rank=%" PRIu64 " threads=%d read_s=%.3f\n",
		n, bytes, n ? bytes / (uint64_t)n : 0, threads, read_s);
}

static void cut_warning(const char *path, const char *done)
{
	char msg[128];
	snprintf(msg, sizeof msg, "the trace is cut; %s", done);
	cd_cli_print_warning(path, 0, msg);
}

/* One line on standard error per trace that is not whole; of a cut one,
 * "the trace is cut; " and done. */
static void warn_trace(const struct cd_rank_summary *s, const char *done)
{
	if (s->end == CD_END_EMPTY)
		fprintf(stderr, "commdebug: %s: warning: %s; reported as a finding about its rank\n",
			s->path, s->cut_first ? "the trace is cut before its first line is complete"
					      : "empty trace: no event");
	else if (s->error)
		cd_cli_print_summary_error(s->path, s->error);
	else if (s->cut)
		cut_warning(s->path, done);
	else if (!s->has_rank)
		cd_cli_print_warning(s->path, 0, "its meta event has no rank; left out");
}

/* colls: ok, cut (3) or an unreadable trace (1). */
static int colls_rc(const struct cd_rank_summary *sums, int n)
{
	int rc = CD_EXIT_OK;
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = &sums[i];
		if (s->error && s->end != CD_END_EMPTY)
			rc = CD_EXIT_DATA;
		else if ((s->cut || s->cut_first) && rc == CD_EXIT_OK)
			rc = CD_EXIT_CUT;
	}
	return rc;
}

int cd_cli_read_rc(const struct cd_rank_summary *sums, int n, const char *done)
{
	for (int i = 0; done && i < n; i++)
		warn_trace(&sums[i], done);
	return colls_rc(sums, n);
}

int cd_cli_ranks_report(enum cd_report_kind kind, bool json, int64_t late_ns,
			struct cd_rank_summary *sums, int n, struct cd_out *out, uint64_t *visits)
{
	int rc;
	struct cd_rank_summary **ptrs = cd_run_ptrs(sums, n);
	struct cd_ranks_opts ro = {.json = json, .late_ns = late_ns};

	if (!ptrs) {
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	for (int i = 0; i < n; i++)
		warn_trace(&sums[i], "compared what it holds");
	if (kind == CD_R_COLLS) {
		cd_colls_report(out, ptrs, n, json);
		rc = colls_rc(sums, n);
	} else {
		switch (cd_ranks_report(out, ptrs, n, &ro)) {
		case CD_RANKS_AGREE: rc = CD_EXIT_OK; break;
		case CD_RANKS_CUT: rc = CD_EXIT_CUT; break;
		case CD_RANKS_DIFFER: rc = CD_EXIT_DIFFER; break;
		default: rc = CD_EXIT_DATA; break;
		}
	}
	if (visits)
		*visits = ro.visits;
	free(ptrs);
	return rc;
}

int cd_cli_run_ranks(const struct cd_cli *cli, struct cd_out *out)
{
	struct cd_rank_summary *sums = NULL;
	uint64_t visits = 0;
	double read_s = 0;
	int threads = 0, n = 0, rc;

	if ((rc = cd_cli_summaries(cli, &sums, &n, &read_s, &threads)) != CD_EXIT_OK)
		return rc;
	double t_merge = now();
	rc = cd_cli_ranks_report(cli->kind, cli->json, cli->late_ns, sums, n, out, &visits);
	double t_end = now();
	if (cli->stats) {
		uint64_t bytes = 0;
		for (int i = 0; i < n; i++)
			bytes += cd_rank_summary_bytes(&sums[i]);
		fprintf(stderr, "commdebug: stats: ranks=%d summary_bytes=%" PRIu64
				" summary_bytes_per_rank=%" PRIu64 " threads=%d read_s=%.3f"
				" merge_s=%.3f merge_visits=%" PRIu64 "\n",
			n, bytes, n ? bytes / (uint64_t)n : 0, threads, read_s, t_end - t_merge,
			visits);
	}
	cd_run_free(sums, n);
	return rc;
}
