/* The runner: inputs read on N threads by a reader into per-rank results.
 * See run.h. */
#include "run.h"

#include "frdump.h"
#include "../read/reader.h"
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

enum cd_run_input cd_run_input_kind(const char *path)
{
	/* enough for both: the summary magic, a dump's first key */
	uint8_t buf[64];
	long n = cd_reader_peek_file(path, buf, sizeof buf);
	if (n <= 0)
		return CD_IN_TRACE;
	if (cd_summary_sniff(buf, (size_t)n))
		return CD_IN_SUMMARY;
	return cd_fr_sniff(buf, (size_t)n) ? CD_IN_FR_DUMP : CD_IN_TRACE;
}

static void trace_read(const char *path, const void *ctx, void *res)
{
	const struct cd_run_opts *o = ctx;
	enum cd_run_input kind = cd_run_input_kind(path);
	if (kind == CD_IN_SUMMARY)
		summary_read(path, res);
	else if (kind == CD_IN_FR_DUMP)
		cd_fr_summarize(path, res);
	else if (o->read_trace)
		o->read_trace(path, o, res);
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
	bool inline_read;   /* readers without a thread of their own (reader.h) */
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
	/* more inputs than threads, a thread per core: the threads keep the
	 * cores busy, and a reader thread per input would only hand chunks over */
	cd_reader_set_inline(p->inline_read);
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
	/* readers without their own thread when the threads already keep every
	 * core busy: more inputs than threads, and a thread per core */
	p.inline_read = n > jobs && jobs >= cores;
	for (int i = 1; i < jobs; i++)
		if (pthread_create(&th[started], NULL, worker, &p) == 0)
			started++;
	/* standard input, named once or more: read here, in the order given
	 * (the first takes it all, as when read one after another) */
	for (int i = 0; i < n; i++)
		if (is_stdin(paths[i]))
			read_one(&p, i);
	worker(&p);
	cd_reader_set_inline(false);
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

/* ---- work in order ---- */

enum { ITEM_WAITING, ITEM_RUNNING, ITEM_DONE };

struct ordered {
	int n, window;
	size_t size;
	void (*work)(void *ctx, int i, void *res);
	void *ctx;
	char *res;             /* window slots of size bytes: item i in slot i % window */
	unsigned char *state;  /* per slot */
	int next_work;         /* the next item to start */
	int next_done;         /* the next item to hand to done */
	bool stop;
	bool inline_read;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void *ordered_worker(void *arg)
{
	struct ordered *q = arg;
	cd_reader_set_inline(q->inline_read);
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (!q->stop && q->next_work < q->n && q->next_work >= q->next_done + q->window)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->stop || q->next_work >= q->n)
			break;
		int i = q->next_work++;
		char *res = q->res + (size_t)(i % q->window) * q->size;
		q->state[i % q->window] = ITEM_RUNNING;
		pthread_mutex_unlock(&q->mu);
		memset(res, 0, q->size);
		q->work(q->ctx, i, res);
		pthread_mutex_lock(&q->mu);
		q->state[i % q->window] = ITEM_DONE;
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

enum cd_status cd_run_ordered(int n, size_t size, int jobs, int window,
			      void (*work)(void *ctx, int i, void *res),
			      bool (*done)(void *ctx, int i, void *res),
			      void (*drop)(void *ctx, int i, void *res), void *ctx,
			      struct cd_err *err)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	struct ordered q = {.n = n, .size = size, .work = work, .ctx = ctx};
	pthread_t th[CD_RUN_MAX_JOBS];
	int started = 0;

	if (jobs <= 0)
		jobs = (int)(cores > 0 ? cores : 1);
	if (jobs > CD_RUN_MAX_JOBS)
		jobs = CD_RUN_MAX_JOBS;
	if (jobs > n)
		jobs = n;
	q.window = window > 0 ? window : 2 * jobs;
	if (q.window < jobs)
		q.window = jobs;
	if (!(q.res = malloc((size_t)q.window * (size ? size : 1))) ||
	    !(q.state = calloc((size_t)q.window, 1))) {
		free(q.res);
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	}
	if (jobs <= 1) {
		/* one thread: each item done as soon as it is worked */
		for (int i = 0; i < n; i++) {
			memset(q.res, 0, size);
			work(ctx, i, q.res);
			if (!done(ctx, i, q.res))
				break;
		}
		goto out;
	}
	q.inline_read = n > jobs && jobs >= cores;
	pthread_mutex_init(&q.mu, NULL);
	pthread_cond_init(&q.cv, NULL);
	for (int i = 0; i < jobs; i++)
		if (pthread_create(&th[started], NULL, ordered_worker, &q) == 0)
			started++;
	if (!started) {
		/* no thread to be had: here, in order */
		q.stop = true;
		for (int i = 0; i < n; i++) {
			memset(q.res, 0, size);
			work(ctx, i, q.res);
			if (!done(ctx, i, q.res))
				break;
		}
	}
	pthread_mutex_lock(&q.mu);
	while (!q.stop && q.next_done < n) {
		int slot = q.next_done % q.window;
		while (q.state[slot] != ITEM_DONE)
			pthread_cond_wait(&q.cv, &q.mu);
		pthread_mutex_unlock(&q.mu);
		bool go_on = done(ctx, q.next_done, q.res + (size_t)slot * size);
		pthread_mutex_lock(&q.mu);
		q.state[slot] = ITEM_WAITING;
		q.next_done++;
		if (!go_on)
			q.stop = true;
		pthread_cond_broadcast(&q.cv);
	}
	pthread_mutex_unlock(&q.mu);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	/* stopped: what was worked ahead and not handed over */
	for (int i = q.next_done; drop && i < q.next_work; i++)
		drop(ctx, i, q.res + (size_t)(i % q.window) * size);
	pthread_mutex_destroy(&q.mu);
	pthread_cond_destroy(&q.cv);
out:
	free(q.res);
	free(q.state);
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
