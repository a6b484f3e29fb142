/* Post-mortem across ranks.
 *
 * cd_rank_summarize reads one rank's trace into a compact summary: its
 * collectives per process group (name, sequence, bytes, dtype, the module
 * and phase that issued it), the per-module collective counts, and where
 * the rank was when its trace ends (open modules, last collective, last op).
 * cd_ranks_report merges summaries: it matches collectives per process group
 * by sequence number and reports type, size and dtype mismatches, ranks that
 * never reached a collective others issued, missing and duplicate ranks, and
 * modules whose counts differ.  Summaries are independent of each other, so
 * they can be built in parallel (and, at scale, where the traces are). */
#ifndef CD_RANKS_H
#define CD_RANKS_H

#include <stdbool.h>
#include <stdint.h>

#include "intern.h"
#include "out.h"
#include "status.h"
#include "vec.h"

enum cd_phase { CD_PH_FORWARD, CD_PH_BACKWARD, CD_PH_RECOMPUTE };

/* One collective as one rank issued it.  Strings are ids in the summary's
 * own table. */
struct cd_crec {
	uint32_t pg, coll, dtype, module;
	uint8_t phase;
	bool has_bytes;
	int64_t seq, bytes;
	int64_t time;   /* t0 + t when both are known, else -1 */
};

/* Collective count of a module in one region that ended with region_exit
 * (cut regions are left out, so a rank killed mid-step compares fairly). */
struct cd_modcount {
	int64_t region;
	uint32_t module, coll;
	uint8_t bw;
	uint64_t n;
};

struct cd_frame {
	uint32_t module;
	uint8_t phase;
};

struct cd_rank_summary {
	char *path;
	char *error;            /* set when the trace could not be read whole */
	bool cut;
	bool in_region;         /* the trace ends inside region open_region */
	int64_t open_region;
	bool has_rank, has_world;
	int64_t rank, world_size;
	uint64_t events, regions;
	struct cd_intern s;     /* every string of this summary */
	CD_VEC(struct cd_crec) colls;
	CD_VEC(struct cd_modcount) mods;
	CD_VEC(int64_t) done_regions;    /* regions that ended with region_exit */
	CD_VEC(struct cd_frame) stack;   /* open modules at the end, outermost first */
	CD_VEC(uint32_t) pg_names;       /* pg events: names ... */
	CD_VEC(uint32_t) pg_ranks_off;   /* ... their member lists in pg_ranks */
	CD_VEC(int64_t) pg_ranks;
	CD_VEC(uint32_t) pg_ranks_n;
	bool has_last_op;
	uint32_t last_op, last_op_module;
};

/* Read the trace at path into *s (zeroed by the caller).  Never fails
 * outright: a read or format error is kept in s->error with what was read
 * before it.  general_parser: use the cJSON line parser. */
void cd_rank_summarize(const char *path, bool general_parser, struct cd_rank_summary *s);
void cd_rank_summary_free(struct cd_rank_summary *s);

/* Bytes held by a summary (for the scale estimate). */
uint64_t cd_rank_summary_bytes(const struct cd_rank_summary *s);

/* Outcome of the merge. */
enum { CD_RANKS_AGREE = 0, CD_RANKS_CUT = 1, CD_RANKS_DIFFER = 2, CD_RANKS_BAD = 3 };

/* Merge n summaries (in any order) and write the report; returns one of
 * the CD_RANKS_* outcomes (the worst that applies). */
int cd_ranks_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n, bool json);

#endif
