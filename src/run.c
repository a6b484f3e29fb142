/* The runner: inputs read on N threads by a reader into per-rank results.
 * See run.h. */
#include "run.h"

#include "frdump.h"
#include "summary.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A summary file: its first rank in s, the others in s->set; an
 * unreadable one is one summary with its error. */
static void summary_read(const char *path, struct cd_rank_summary *s)
{
	struct cd_rank_summary *v;
	struct cd_summary_info info;
	struct cd_err err = {0};
	uint32_t n;

	if (cd_summary_read(path, &v, &n, &info, &err)) {
		s->path = strdup(path);
		s->error = strdup(err.msg);
		s->end = CD_END_ERROR;
		s->last_time = s->end_time = -1;
		s->end_how = s->end_exc = s->end_msg = s->end_signame = CD_NOID;
		s->from_summary = true;
		return;
	}
	if (n == 0) {   /* a shard that had no trace: adds no rank */
		free(v);
		s->path = strdup(path);
		s->from_summary = true;
		s->no_rank = true;
		return;
	}
	*s = v[0];
	if (n > 1) {
		memmove(v, v + 1, (size_t)(n - 1) * sizeof *v);
		s->set = v;
		s->nset = n - 1;
	} else {
		free(v);
	}
}

static void trace_read(const char *path, const void *ctx, void *res)
{
	const struct cd_run_opts *o = ctx;
	if (cd_summary_sniff_file(path))
		summary_read(path, res);
	else if (cd_fr_sniff_file(path))
		cd_fr_summarize(path, res);
	else
		cd_rank_summarize(path, o->general_parser, res);
}

static void trace_free(void *res)
{
	cd_rank_summary_free(res);
}

static uint64_t trace_bytes(const void *res)
{
	return cd_rank_summary_bytes(res);
}

const struct cd_run_reader cd_run_trace_reader = {
	"trace", sizeof(struct cd_rank_summary), trace_read, trace_free, trace_bytes,
};

struct pool {
	char *const *paths;
	int n;
	const struct cd_run_reader *rd;
	const void *ctx;
	char *res;
	atomic_int next;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool is_stdin(const char *path)
{
	return strcmp(path, "-") == 0;
}

static void read_one(struct pool *p, int i)
{
	p->rd->read(p->paths[i], p->ctx, p->res + (size_t)i * p->rd->size);
}

/* Every input but standard input (the calling thread's). */
static void *worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			return NULL;
		if (!is_stdin(p->paths[i]))
			read_one(p, i);
	}
}

enum cd_status cd_run(char *const *paths, int n, const struct cd_run_reader *rd, const void *ctx,
		      struct cd_run_opts *o, void **res, struct cd_err *err)
{
	struct pool p = {.paths = paths, .n = n, .rd = rd, .ctx = ctx};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = o->jobs > 0 ? o->jobs : (int)(cores > 0 ? cores : 1), started = 0;
	pthread_t th[CD_RUN_MAX_JOBS];

	*res = NULL;
	if (!(p.res = calloc((size_t)(n ? n : 1), rd->size)))
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
	/* standard input, named once or more: read here, in the order given
	 * (the first takes it all, as when read one after another) */
	for (int i = 0; i < n; i++)
		if (is_stdin(paths[i]))
			read_one(&p, i);
	worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	o->threads = started + 1;
	o->read_s = now() - t0;
	o->bytes = 0;
	for (int i = 0; rd->bytes && i < n; i++)
		o->bytes += rd->bytes(p.res + (size_t)i * rd->size);
	*res = p.res;
	return CD_OK;
}

void cd_run_results_free(const struct cd_run_reader *rd, void *res, int n)
{
	for (int i = 0; res && rd->free && i < n; i++)
		rd->free((char *)res + (size_t)i * rd->size);
	free(res);
}

/* The ranks of summary files (s->set) as summaries of their own, after
 * the one each file gave: v grows to *n plus theirs. */
static enum cd_status flatten(struct cd_rank_summary **v, int *n, struct cd_err *err)
{
	uint64_t total = 0;
	bool none = false;
	for (int i = 0; i < *n; i++) {
		total += !(*v)[i].no_rank + (uint64_t)(*v)[i].nset;
		none |= (*v)[i].no_rank;
	}
	if (total == (uint64_t)*n && !none)
		return CD_OK;
	if (total > INT32_MAX)
		return cd_fail(err, CD_ERR_LIMIT, "more than %d ranks", INT32_MAX);
	struct cd_rank_summary *nv = calloc((size_t)(total ? total : 1), sizeof *nv);
	if (!nv)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	size_t k = 0;
	for (int i = 0; i < *n; i++) {
		struct cd_rank_summary *s = &(*v)[i], *set = s->set;
		uint32_t nset = s->nset;
		s->set = NULL;
		s->nset = 0;
		if (s->no_rank)
			cd_rank_summary_free(s);
		else
			nv[k++] = *s;
		for (uint32_t j = 0; j < nset; j++)
			nv[k++] = set[j];
		free(set);
	}
	free(*v);
	*v = nv;
	*n = (int)total;
	return CD_OK;
}

enum cd_status cd_run_summaries(char *const *paths, int n, struct cd_run_opts *o,
				struct cd_rank_summary **sums, int *nsums, struct cd_err *err)
{
	void *res;
	enum cd_status st = cd_run(paths, n, o->reader ? o->reader : &cd_run_trace_reader, o, o,
				   &res, err);
	*sums = res;
	*nsums = st ? 0 : n;
	if (!st && (st = flatten(sums, nsums, err))) {
		cd_run_free(*sums, n);
		*sums = NULL;
		*nsums = 0;
	}
	return st;
}

void cd_run_free(struct cd_rank_summary *sums, int n)
{
	cd_run_results_free(&cd_run_trace_reader, sums, n);
}

struct cd_rank_summary **cd_run_ptrs(struct cd_rank_summary *sums, int n)
{
	struct cd_rank_summary **v = malloc((size_t)(n ? n : 1) * sizeof *v);
	for (int i = 0; v && i < n; i++)
		v[i] = &sums[i];
	return v;
}
