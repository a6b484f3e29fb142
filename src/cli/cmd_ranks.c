/* commdebug ranks: match collectives across the ranks of a job, and the
 * rank runner it shares with colls and analyze (several traces): every trace
 * summarized in parallel, then one report over all of them. */
#include "cli.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../ranks.h"

int cmd_ranks(int argc, char **argv)
{
	struct cd_cli cli = {.cmd = "ranks"};
	int rc = cd_cli_parse(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_RANKS;
	return cd_cli_run(&cli);
}

struct pool {
	struct cd_cli *cli;
	struct cd_rank_summary *sums;
	atomic_int next;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *summarize_worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->cli->ntraces)
			return NULL;
		cd_rank_summarize(p->cli->traces[i], p->cli->general_parser, &p->sums[i]);
	}
}

/* One line on standard error per trace that is not whole. */
static void warn_trace(const struct cd_rank_summary *s)
{
	if (s->end == CD_END_EMPTY)
		fprintf(stderr, "commdebug: %s: warning: %s; reported as a finding about its rank\n",
			s->path, s->cut_first ? "the trace is cut before its first line is complete"
					      : "empty trace: no event");
	else if (s->error) /* "LINE:COL: message" or a message without position */
		fprintf(stderr, "commdebug: %s:%s%s\n", s->path,
			s->error[0] >= '0' && s->error[0] <= '9' ? "" : " ", s->error);
	else if (s->cut)
		fprintf(stderr, "commdebug: %s: warning: the trace is cut; compared what it holds\n",
			s->path);
	else if (!s->has_rank)
		fprintf(stderr, "commdebug: %s: warning: its meta event has no rank; left out\n",
			s->path);
}

int cd_cli_run_ranks(struct cd_cli *cli, struct cd_out *out)
{
	int n = cli->ntraces, rc;
	struct pool p = {.cli = cli};
	struct cd_rank_summary **ptrs = NULL;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = cli->jobs ? cli->jobs : (int)(cores > 0 ? cores : 1);
	pthread_t th[256];
	int started = 0;

	if (jobs > n)
		jobs = n;
	p.sums = calloc((size_t)n, sizeof *p.sums);
	ptrs = calloc((size_t)n, sizeof *ptrs);
	if (!p.sums || !ptrs) {
		free(p.sums);
		free(ptrs);
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	double t_read = now();
	atomic_init(&p.next, 0);
	for (int i = 1; i < jobs && i < 256; i++)
		if (pthread_create(&th[started], NULL, summarize_worker, &p) == 0)
			started++;
	summarize_worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	double t_merge = now();
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		ptrs[i] = &p.sums[i];
		bytes += cd_rank_summary_bytes(&p.sums[i]);
		warn_trace(&p.sums[i]);
	}
	struct cd_ranks_opts ro = {.json = cli->json, .late_ns = cli->late_ns};
	if (cli->kind == CD_R_COLLS) {
		cd_colls_report(out, ptrs, n, cli->json);
		rc = CD_EXIT_OK;
		for (int i = 0; i < n; i++) {
			const struct cd_rank_summary *s = &p.sums[i];
			if (s->error && s->end != CD_END_EMPTY)
				rc = CD_EXIT_DATA;
			else if ((s->cut || s->cut_first) && rc == CD_EXIT_OK)
				rc = CD_EXIT_CUT;
		}
	} else {
		switch (cd_ranks_report(out, ptrs, n, &ro)) {
		case CD_RANKS_AGREE: rc = CD_EXIT_OK; break;
		case CD_RANKS_CUT: rc = CD_EXIT_CUT; break;
		case CD_RANKS_DIFFER: rc = CD_EXIT_DIFFER; break;
		default: rc = CD_EXIT_DATA; break;
		}
	}
	double t_end = now();
	if (cli->stats)
		fprintf(stderr, "commdebug: stats: ranks=%d summary_bytes=%" PRIu64
				" summary_bytes_per_rank=%" PRIu64 " threads=%d read_s=%.3f"
				" merge_s=%.3f merge_visits=%" PRIu64 "\n",
			n, bytes, n ? bytes / (uint64_t)n : 0, started + 1, t_merge - t_read,
			t_end - t_merge, ro.visits);
	for (int i = 0; i < n; i++)
		cd_rank_summary_free(&p.sums[i]);
	free(p.sums);
	free(ptrs);
	return rc;
}
