/* Communication expectations: the YAML file `commdebug check` reads
 * (commdebug-expect(5)), parsed and validated into plain structures.
 *
 * Ownership: cd_expect_load fills a struct cd_expect that owns every string
 * and array in it; cd_expect_free releases them.  Nothing here reads traces. */
#ifndef CD_EXPECT_H
#define CD_EXPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"
#include "../util/vec.h"

/* Where in the YAML file a thing was written (1-based). */
struct cd_where {
	uint32_t line, column;
};

typedef CD_VEC(int64_t) cd_i64v;

/* A count or byte bound: exact (min == max) or a range.  Every checkable
 * thing has an id, dense over the file (cd_expect.nids), in file order. */
struct cd_bound {
	bool set;
	int64_t min, max;    /* max INT64_MAX: no upper bound */
	struct cd_where at;
	uint32_t id;
};

/* "name: bound" in a collectives, bytes or phase map. */
struct cd_exp_count {
	char *name;
	struct cd_bound b;
};
typedef CD_VEC(struct cd_exp_count) cd_exp_countv;

enum { CD_EXP_FORWARD, CD_EXP_BACKWARD, CD_EXP_CHECKPOINTING, CD_EXP_NPHASES };

struct cd_exp_phase {
	bool set;
	struct cd_bound total;      /* collectives of any kind in this phase */
	cd_exp_countv colls;
	struct cd_where at;
};

struct cd_exp_module {
	char *glob;                 /* fnmatch pattern over module names */
	struct cd_where at;
	bool none;                  /* no collectives in any phase */
	struct cd_exp_phase phase[CD_EXP_NPHASES];
	struct cd_bound bytes;      /* collective bytes charged to it, all phases */
	uint32_t id;                /* "matches a module" (and none) */
};

struct cd_exp_param {
	char *name;                 /* fully qualified: Module.sub.weight */
	char *placements;           /* "(Shard(dim=0),)" */
	struct cd_where at;
	uint32_t id;
};

/* Which regions and ranks a section applies to. */
struct cd_scope {
	bool all_regions;
	cd_i64v regions;            /* numbers */
	int64_t from, to;           /* {from, to}: to INT64_MAX when open */
	bool range;
	char *label;                /* fnmatch pattern over region labels, or NULL */
	bool all_ranks;
	cd_i64v ranks;
	struct cd_where at, rank_at;
	uint32_t id;                /* "the regions named are in the trace" */
};

struct cd_exp_section {
	struct cd_where at;
	struct cd_scope scope;
	struct cd_bound total;
	cd_exp_countv colls;
	struct cd_bound bytes_total;
	cd_exp_countv bytes;
	CD_VEC(struct cd_exp_module) modules;
	CD_VEC(struct cd_exp_param) params;
};

struct cd_expect {
	bool ranks_agree;           /* ranks: agree */
	struct cd_where ranks_at;
	uint32_t ranks_id;
	CD_VEC(struct cd_exp_section) sections;
	uint32_t nids;
};

/* Largest expectations file read (they are written by people). */
#define CD_EXPECT_MAX_BYTES (16u << 20)

/* Read and validate the file at path.  On error err says what, with
 * err->line/column where (0 when not about a place). */
enum cd_status cd_expect_load(const char *path, struct cd_expect *x, struct cd_err *err);

/* The same from memory (the fuzz target). */
enum cd_status cd_expect_parse(const char *buf, size_t n, struct cd_expect *x,
			       struct cd_err *err);

void cd_expect_free(struct cd_expect *x);

/* Whether a section applies to this rank (has_rank false: rank unknown)
 * and region. */
bool cd_scope_has(const struct cd_scope *s, bool has_rank, int64_t rank, int64_t region,
		  const char *label);

#endif
