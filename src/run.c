/* The runner: inputs read on N threads into rank summaries.  See run.h. */
#include "run.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void trace_summarize(const char *path, const struct cd_run_opts *o,
			    struct cd_rank_summary *s)
{
	cd_rank_summarize(path, o->general_parser, s);
}

const struct cd_run_reader cd_run_trace_reader = {"trace", trace_summarize};

struct pool {
	char *const *paths;
	int n;
	const struct cd_run_opts *o;
	const struct cd_run_reader *rd;
	struct cd_rank_summary *sums;
	atomic_int next;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			return NULL;
		p->rd->summarize(p->paths[i], p->o, &p->sums[i]);
	}
}

enum cd_status cd_run_summaries(char *const *paths, int n, struct cd_run_opts *o,
				struct cd_rank_summary **sums, struct cd_err *err)
{
	struct pool p = {.paths = paths, .n = n, .o = o,
			 .rd = o->reader ? o->reader : &cd_run_trace_reader};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = o->jobs > 0 ? o->jobs : (int)(cores > 0 ? cores : 1), started = 0;
	pthread_t th[CD_RUN_MAX_JOBS];

	*sums = NULL;
	if (!(p.sums = calloc((size_t)(n ? n : 1), sizeof *p.sums)))
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	if (jobs > n)
		jobs = n;
	if (jobs > CD_RUN_MAX_JOBS)
		jobs = CD_RUN_MAX_JOBS;
	double t0 = now();
	atomic_init(&p.next, 0);
	for (int i = 1; i < jobs; i++)
		if (pthread_create(&th[started], NULL, worker, &p) == 0)
			started++;
	worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	o->threads = started + 1;
	o->read_s = now() - t0;
	o->bytes = 0;
	for (int i = 0; i < n; i++)
		o->bytes += cd_rank_summary_bytes(&p.sums[i]);
	*sums = p.sums;
	return CD_OK;
}

void cd_run_free(struct cd_rank_summary *sums, int n)
{
	for (int i = 0; sums && i < n; i++)
		cd_rank_summary_free(&sums[i]);
	free(sums);
}

struct cd_rank_summary **cd_run_ptrs(struct cd_rank_summary *sums, int n)
{
	struct cd_rank_summary **v = malloc((size_t)(n ? n : 1) * sizeof *v);
	for (int i = 0; v && i < n; i++)
		v[i] = &sums[i];
	return v;
}
