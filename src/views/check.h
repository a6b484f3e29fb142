/* commdebug check: replayed regions measured against expectations
 * (struct cd_expect), and the snapshot of what a trace does today
 * (`check --write`).
 *
 * Use: cd_check_init; per trace cd_check_trace_begin, then replay the trace
 * with cd_check_on_collective and cd_check_region_done as its struct
 * cd_replay_opts callbacks (and cd_check_meta on its meta event),
 * then cd_check_trace_end; then print the results (cd_check_report_*,
 * check_report.c) or cd_check_write_yaml;
 * cd_check_free.  The check keeps a pointer to the expectations (not owned);
 * everything else it owns.  Nothing here reads files or prints. */
#ifndef CD_CHECK_H
#define CD_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "expect.h"
#include "../util/out.h"
#include "../replay/replay.h"
#include "../util/vec.h"

/* One expectation that did not hold, in one rank and region. */
struct cd_check_fail {
	uint32_t id;              /* expectation id (cd_bound.id and the like) */
	struct cd_where at;
	char *what;               /* "Net.blocks.1 forward c10d.allreduce_" */
	char *expected;           /* "1", "at most 2", "2..4", "a module matching it" */
	char *got;                /* "3", "none" */
	uint32_t trace;           /* index of the trace, in cd_check_trace_begin order,
				   * or CD_CHECK_NO_TRACE (about all traces) */
	bool has_rank;
	int64_t rank;
	int64_t region;           /* -1: not about one region */
	char *label;              /* the region's label or NULL */
};

/* Per expectation: how often it was checked and held. */
struct cd_check_item {
	struct cd_where at;
	char *what;               /* set when first checked */
	uint64_t held, failed;
};

struct cd_check_trace {
	char *path;
	bool has_rank;
	int64_t rank;
	bool cut;
	CD_VEC(int64_t) regions;  /* seen, in order */
};

/* A region's snapshot text (check --write). */
struct cd_check_snap {
	uint32_t trace;
	int64_t region;
	char *label;
	char *body;               /* YAML of one expect entry, without its scope */
};

#define CD_CHECK_NO_TRACE UINT32_MAX

/* Failures kept for printing; the count beyond this is still exact. */
#define CD_CHECK_MAX_FAILS 10000

struct cd_check_acc;

struct cd_check {
	const struct cd_expect *x;     /* NULL with write */
	bool write;                    /* collect snapshots instead of checking */
	struct cd_check_item *items;   /* x->nids */
	CD_VEC(struct cd_check_fail) fails;
	uint64_t nfails;
	CD_VEC(struct cd_check_trace) traces;
	CD_VEC(struct cd_check_snap) snaps;
	bool *label_matched;           /* per section: its label pattern matched a region */
	/* per-region accumulators (what CommDebugMode does not count) */
	CD_VEC(struct cd_check_acc) acc;  /* indexed by module id */
	uint32_t gen;                  /* replay generation the region data belongs to */
	CD_VEC(int64_t) coll_bytes;    /* indexed by collective id */
	uint64_t colls_in_region, colls_with_bytes;
	struct cd_out scratch;         /* text building */
	struct cd_out name;            /* a parameter's fully qualified name */
};

/* x may be NULL when write is true. */
enum cd_status cd_check_init(struct cd_check *c, const struct cd_expect *x, bool write,
			     struct cd_err *err);
void cd_check_free(struct cd_check *c);

enum cd_status cd_check_trace_begin(struct cd_check *c, const char *path, struct cd_err *err);
/* The trace's meta event said its rank. */
void cd_check_meta(struct cd_check *c, int64_t rank);
/* After the replay; cut: the trace ended early.  Checks what needs the whole
 * trace (regions named in the file but absent). */
enum cd_status cd_check_trace_end(struct cd_check *c, bool cut, struct cd_err *err);
/* After every trace: label patterns and module globs that matched nothing. */
enum cd_status cd_check_finish(struct cd_check *c, struct cd_err *err);

/* Callbacks for struct cd_replay_opts (ud = the check). */
void cd_check_on_collective(void *ud, const struct cd_replay *r, const struct cd_event *e,
			    uint32_t coll);
enum cd_status cd_check_region_done(void *ud, const struct cd_replay *r, struct cd_err *err);

/* A failure of `ranks: agree` (from the post-mortem), recorded like others. */
enum cd_status cd_check_ranks(struct cd_check *c, bool agree, const char *finding,
			      struct cd_err *err);

/* check --write: the expectations file that the traces meet, identical
 * regions (and ranks) folded into one entry. */
void cd_check_write_yaml(struct cd_check *c, struct cd_out *o, bool ranks_agree);

/* ---- the results, printed (check_report.c) ----
 * xpath names the expectations file in each failure's line. */

/* One line per failure ("FILE:LINE:COL: ranks 0-1, region 2 "step 2":
 * WHAT: expected E, got G"; failures that say the same of several ranks
 * once), then "check: ..." with the counts. */
void cd_check_report_text(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			  const char *xpath);
/* The same as one JSON object (expectations, failed, traces, failures,
 * more_failures) and a newline. */
void cd_check_report_json(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			  const char *xpath);
/* JUnit XML: one test case per expectation checked, its failures in it. */
void cd_check_report_junit(struct cd_out *o, const struct cd_check *c, const struct cd_expect *x,
			   const char *xpath);

/* How an expectation's bound reads: "3", "at least 2", "at most 4", "2..4". */
void cd_bound_text(const struct cd_bound *b, char *buf, size_t n);

#endif
