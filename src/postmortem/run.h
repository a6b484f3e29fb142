/* The runner: a set of inputs read on N threads, each by a reader into one
 * per-rank result, handed back to the caller in the order of the inputs.
 *
 * Every command that works on whole ranks (ranks, colls, analyze with
 * several traces, report, export, check's ranks_agree, buckets) reads its
 * inputs here; the per-region replay commands (analyze, counts, sharding)
 * replay each trace themselves.
 *
 * Readers.  What turns one input into one result is a struct
 * cd_run_reader: its read fills a result of its own type (size bytes).
 * The trace reader (cd_rank_summarize) gives a struct cd_rank_summary
 * (cd_run_summaries); buckets' reader (buckets.h) gives a struct
 * cd_bk_rank.  Another input kind (a Flight Recorder dump, a stored
 * summary) is one more reader; the thread pool is the same.
 *
 * Standard input ("-", named once or more) is read on the calling thread,
 * in the order given, while the other threads read the rest.
 *
 * Layering: reads files through the reader only; prints nothing.
 * Ownership: cd_run allocates the array of results and the reader fills
 * each; the caller frees both with cd_run_results_free (cd_run_free for
 * cd_run_summaries'). */
#ifndef CD_RUN_H
#define CD_RUN_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "ranks.h"
#include "../util/status.h"

/* At most this many threads read at once (--jobs). */
#define CD_RUN_MAX_JOBS 256

struct cd_run_reader {
	const char *name;   /* "trace", "buckets" */
	size_t size;        /* bytes of one result */
	/* Read the input at path into res (size bytes, zeroed).  Never fails
	 * outright: an error is kept in res with what was read before it.
	 * Called from several threads at once, each with its own res; ctx is
	 * cd_run's, shared (read it only). */
	void (*read)(const char *path, const void *ctx, void *res);
	/* Free what res holds (not res itself); NULL: nothing to free. */
	void (*free)(void *res);
	/* Bytes held by res, for --stats; NULL: not counted. */
	uint64_t (*bytes)(const void *res);
};

struct cd_run_opts {
	/* cd_run_summaries only: the reader of summaries (its results are
	 * struct cd_rank_summary; its ctx is these opts); NULL:
	 * cd_run_trace_reader */
	const struct cd_run_reader *reader;
	int jobs;                  /* threads; 0: one per core (at most CD_RUN_MAX_JOBS) */
	bool general_parser;       /* the trace reader: the cJSON line parser */
	/* the trace reader: how a commdebug trace (not a dump or a summary
	 * file) is read into its summary, with read_ctx; NULL:
	 * cd_rank_summarize (export reads its timeline in the same pass) */
	void (*read_trace)(const char *path, const struct cd_run_opts *o,
			   struct cd_rank_summary *s);
	const void *read_ctx;
	/* out, for --stats */
	int threads;               /* threads that read */
	double read_s;             /* wall-clock seconds the reading took */
	uint64_t bytes;            /* bytes held by the results (the reader's bytes) */
};

/* Read the n inputs with rd on o->jobs threads into *res, a new array of
 * n results (rd->size bytes each) in the order of paths.  ctx goes to
 * every rd->read.  Returns CD_OK, or CD_ERR_NOMEM (err says so; *res
 * NULL). */
enum cd_status cd_run(char *const *paths, int n, const struct cd_run_reader *rd, const void *ctx,
		      struct cd_run_opts *o, void **res, struct cd_err *err);

/* Free the n results of cd_run (rd->free on each) and their array (NULL:
 * none). */
void cd_run_results_free(const struct cd_run_reader *rd, void *res, int n);

/* Work in order: work(ctx, i, res) for every i in [0, n) on `jobs` threads
 * (0: one per core), and done(ctx, i, res) on the calling thread for each
 * i in increasing order, as soon as work i is finished, with at most
 * `window` items (0: twice the threads) worked on ahead of the one done
 * next (what bounds the results held).  res: size bytes, zeroed before work, owned by the caller
 * through done (which frees what it holds).  done returns false to stop:
 * the items not started are skipped, done is called for none after, and
 * drop(ctx, i, res) (NULL: nothing to free) for each one worked but not
 * handed to done.
 * With one thread or one item, everything runs on the calling thread, in
 * order.  Each worker reads with inline readers when there are more items
 * than threads and a thread per core (reader.h).  Returns CD_OK, or CD_ERR_NOMEM (nothing ran). */
enum cd_status cd_run_ordered(int n, size_t size, int jobs, int window,
			      void (*work)(void *ctx, int i, void *res),
			      bool (*done)(void *ctx, int i, void *res),
			      void (*drop)(void *ctx, int i, void *res), void *ctx,
			      struct cd_err *err);

/* What an input is, by its first bytes. */
enum cd_run_input { CD_IN_TRACE, CD_IN_SUMMARY, CD_IN_FR_DUMP };

/* The kind of the input at path, from one read of its first bytes
 * (cd_reader_peek_file): a summary file (cd_summary_sniff), a PyTorch
 * Flight Recorder dump (cd_fr_sniff), else a trace (so is what is not a
 * regular file or cannot be read: reading it tells why). */
enum cd_run_input cd_run_input_kind(const char *path);

/* commdebug traces (commdebug-trace(5)) into struct cd_rank_summary, by
 * cd_rank_summarize; PyTorch Flight Recorder dumps (cd_run_input_kind) by
 * cd_fr_summarize; summary files (summary.h, told by their magic line;
 * cd_run_input_kind), each into the summaries of its ranks (the
 * first, and the others in its set); ctx: the struct cd_run_opts (its
 * general_parser). */
extern const struct cd_run_reader cd_run_trace_reader;

/* cd_run with o->reader (NULL: cd_run_trace_reader) and o as its ctx:
 * the n inputs into *sums, a new array of *nsums summaries: one per input
 * in the order of paths, except that a summary file gives one per rank it
 * holds, in its order.  Returns CD_OK, or an error (err says so; *sums
 * NULL). */
enum cd_status cd_run_summaries(char *const *paths, int n, struct cd_run_opts *o,
				struct cd_rank_summary **sums, int *nsums, struct cd_err *err);

/* Free the n summaries of cd_run_summaries and their array (NULL: none). */
void cd_run_free(struct cd_rank_summary *sums, int n);

/* Pointers to the n summaries, as cd_ranks_report and cd_pm_build take
 * them: a new array (free()) or NULL when out of memory. */
struct cd_rank_summary **cd_run_ptrs(struct cd_rank_summary *sums, int n);

#endif
