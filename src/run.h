/* The runner: a set of inputs read on N threads into rank summaries
 * (ranks.h), handed back to the caller.
 *
 * Every command that works on whole ranks (ranks, colls, analyze with
 * several traces, report, export, check's ranks_agree) reads its inputs
 * here; the per-region replay commands (analyze, counts, sharding) replay
 * each trace themselves.
 *
 * Readers.  What turns one input into one summary is a reader: today the
 * trace reader (cd_rank_summarize).  Another input kind (a Flight Recorder
 * dump, a stored summary) is one more struct cd_run_reader whose summarize
 * fills the same struct cd_rank_summary; nothing after the runner changes.
 *
 * Layering: reads files through the reader only; prints nothing.
 * Ownership: cd_run_summaries allocates the array and every summary in it;
 * the caller frees both with cd_run_free. */
#ifndef CD_RUN_H
#define CD_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "ranks.h"
#include "status.h"

/* At most this many threads read at once (--jobs). */
#define CD_RUN_MAX_JOBS 256

struct cd_run_opts;

struct cd_run_reader {
	const char *name;   /* "trace" */
	/* Read the input at path into *s (zeroed).  Never fails outright: an
	 * error is kept in s->error with what was read before it.  Called from
	 * several threads at once, each with its own s. */
	void (*summarize)(const char *path, const struct cd_run_opts *o, struct cd_rank_summary *s);
};

/* commdebug traces (commdebug-trace(5)), by cd_rank_summarize. */
extern const struct cd_run_reader cd_run_trace_reader;

struct cd_run_opts {
	const struct cd_run_reader *reader;  /* NULL: cd_run_trace_reader */
	int jobs;                  /* threads; 0: one per core (at most CD_RUN_MAX_JOBS) */
	bool general_parser;       /* the trace reader: the cJSON line parser */
	/* out, for --stats */
	int threads;               /* threads that read */
	double read_s;             /* wall-clock seconds the reading took */
	uint64_t bytes;            /* bytes held by the summaries */
};

/* Read the n inputs into *sums, a new array of n summaries in the order
 * of paths.  Returns CD_OK, or CD_ERR_NOMEM (err says so; *sums NULL). */
enum cd_status cd_run_summaries(char *const *paths, int n, struct cd_run_opts *o,
				struct cd_rank_summary **sums, struct cd_err *err);

/* Free the n summaries of cd_run_summaries and their array (NULL: none). */
void cd_run_free(struct cd_rank_summary *sums, int n);

/* Pointers to the n summaries, as cd_ranks_report and cd_pm_build take
 * them: a new array (free()) or NULL when out of memory. */
struct cd_rank_summary **cd_run_ptrs(struct cd_rank_summary *sums, int n);

#endif
