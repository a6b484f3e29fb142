/* DDP gradient buckets: what DDP did (its `ddp` events and the reducer's
 * bucket all-reduces), what DDPOptimizer would plan on the recorded model,
 * and where the two differ (commdebug buckets).
 *
 * Layers: cd_buckets_collect reads one trace (trace -> replay) and keeps
 * per DDP module its parameters, its bucket sets (initial and rebuilt), the
 * bucket all-reduces of every region and the first-forward order of the
 * modules, then plans and compares; cd_buckets_report prints
 * one or several traces (ranks); cd_bk_reader reads traces on the
 * runner's threads (run.h) into struct cd_bk_rank.  The planner and the
 * simple_grid table are exposed for the unit tests.
 *
 * Ownership: a struct cd_bk_trace owns every string and list it points to;
 * free it with cd_bk_trace_free().  Nothing here prints or exits. */
#ifndef CD_BUCKETS_H
#define CD_BUCKETS_H

#include <stdbool.h>
#include <stdint.h>

#include "../replay/nccl.h"
#include "../util/out.h"
#include "../util/status.h"
#include "../util/vec.h"

/* DDP's default first-bucket cap (dist._DEFAULT_FIRST_BUCKET_BYTES). */
#define CD_BK_FIRST_CAP_DEFAULT 1048576

struct cd_bk_param {
	char *name;          /* module-tree name: "DistributedDataParallel.module.0.weight" */
	char *dtype;         /* NULL when absent */
	int64_t nbytes;
	bool requires_grad;
};

/* One of DDP's buckets: indices into the module's params. */
struct cd_bk_bucket {
	uint32_t *p;
	uint32_t n;
	int64_t size;        /* DDP's own byte count ("sizes"), -1 when not given */
};

/* DDP's buckets as one ddp event gave them. */
struct cd_bk_set {
	bool present;
	bool members;        /* "buckets" was given (else sizes only) */
	long long line;      /* the event's line */
	int64_t from_region; /* "rebuilt_region": in force from this region on; -1: from
			      * the event on */
	CD_VEC(struct cd_bk_bucket) b;
	CD_VEC(uint32_t) unbucketed;  /* params (requires_grad) in none of b (members) */
};
enum { CD_BK_INITIAL = 0, CD_BK_REBUILT = 1, CD_BK_NOSET = 2 };
enum { CD_BK_FC_DDP = 0, CD_BK_FC_DEFAULT = 1, CD_BK_FC_OPTION = 2 };

/* One bucket all-reduce of DDP's reducer (a coll event). */
struct cd_bk_fire {
	int64_t index;       /* DDP's bucket index ("bucket"), -1 when absent */
	int64_t bytes;       /* -1 when absent */
	int64_t seq;         /* -1 when absent */
	char *dtype;         /* NULL when absent */
	char *mod;           /* the module whose backward was running */
	uint32_t set;        /* CD_BK_INITIAL, CD_BK_REBUILT or CD_BK_NOSET: in force
			      * (while reading: the set of the latest ddp event) */
	uint32_t pass;       /* backward pass of the region, from 1 */
	uint32_t gpass;      /* backward pass of the trace, from 1 (0: before any) */
	int64_t t;           /* -1 when absent */
	uint64_t op_no;      /* ops of the pass before it */
	double left;         /* fraction of the pass's time left after it; < 0: n/a */
	int64_t ops_left;    /* ops of the pass after it; -1: n/a (no bw_end) */
	uint32_t ncalls;     /* NCCL calls that served it */
	int64_t nccl_bytes, nccl_dur;  /* -1: unknown */
};

/* The all-reduces of one region. */
struct cd_bk_step {
	int64_t region;
	char *label;         /* NULL when none */
	uint32_t gen;
	uint32_t passes;
	CD_VEC(struct cd_bk_fire) fires;
};

/* DDPOptimizer's plan. */
struct cd_bk_pbucket {
	int64_t size;
	uint32_t first, n;   /* its parameters: plan.order[first .. first+n) */
	uint32_t extra_ops;  /* opcount_increased_to_capture_external_output */
	int64_t extra_size;  /* size - paramsize_before_opcount_increase */
};
struct cd_bk_plan {
	int64_t cap, first_cap;
	/* where first_cap is from: CD_BK_FC_OPTION (--first-cap), CD_BK_FC_DEFAULT
	 * (the event's default_first_cap: DDPOptimizer's own) or CD_BK_FC_DDP (the
	 * event's first_cap, for traces without default_first_cap) */
	int first_cap_from;
	CD_VEC(struct cd_bk_pbucket) b;  /* index order: 0 all-reduces first */
	CD_VEC(uint32_t) order;          /* parameter indices, bucket by bucket */
};

/* One module of the model: its parameters, in registration order, are
 * param indices [first, first + n) of the list handed to the planner. */
struct cd_bk_node {
	uint32_t first, n;
};

/* Plan buckets over nodes (in forward order) as DDPOptimizer does over
 * its graph walked in reverse; sizes[i]: bytes of parameter i.  Replaces
 * what plan held. */
enum cd_status cd_bk_plan_build(struct cd_bk_plan *plan, const struct cd_bk_node *nodes,
				uint32_t nnodes, const uint32_t *params, const int64_t *sizes,
				int64_t cap, int64_t first_cap, struct cd_err *err);
void cd_bk_plan_free(struct cd_bk_plan *plan);

struct cd_bk_diff {
	char *kind;          /* "count", "sizes", "members", "order", "ddp-sizes", ... */
	const char *buckets; /* compared: "initial" or "rebuilt" (DDP's set); else NULL */
	char *text;
};

struct cd_bk_ddp {
	char *mod, *pg;
	int64_t cap, first_cap;
	/* dist._DEFAULT_FIRST_BUCKET_BYTES ("default_first_cap"): the first cap
	 * of DDPOptimizer as torch.compile builds it; -1 when the event has none */
	int64_t default_first_cap;
	int8_t find_unused, static_graph, grad_as_view;  /* -1 unknown */
	char *note;
	bool params_from_fw_pre;  /* the ddp event listed none: fw_pre's were used */
	CD_VEC(struct cd_bk_param) params;
	struct cd_bk_set sets[2];  /* CD_BK_INITIAL, CD_BK_REBUILT */
	uint32_t in_force;         /* the set of the latest event */
	CD_VEC(struct cd_bk_step) steps;
	/* planned by cd_buckets_collect */
	struct cd_bk_plan plan;
	CD_VEC(uint32_t) unplanned;   /* params whose module never ran forward */
	/* parameters (requires_grad) of its modules that DDP does not manage
	 * (parameters_to_ignore), from fw_pre; they point into the trace's records */
	CD_VEC(const char *) ignored;
	CD_VEC(struct cd_bk_diff) compared;
	CD_VEC(struct cd_bk_diff) notes;  /* observed all-reduces that do not fit */
};

struct cd_bk_mod;  /* first forward of a module (internal) */

struct cd_bk_trace {
	char *path;
	bool has_rank;
	int64_t rank;
	bool cut;
	CD_VEC(struct cd_bk_ddp) ddp;
	uint64_t ddp_colls;         /* coll events from ddp_reducer */
	uint64_t unmatched;         /* ... that no DDP module's pg took */
	uint64_t outside;           /* ... outside every region */
	bool saw_ddp_module;        /* a fw_pre of type ...DistributedDataParallel */
	/* the note of a ddp event without pg or cap (the recorder could not
	 * read DDP's buckets) whose module has no other ddp event; NULL: none */
	char *unread;
	/* model: modules in first-forward order (internal) */
	struct cd_intern mods;
	CD_VEC(struct cd_bk_mod) mrec;
};

struct cd_bk_opts {
	bool general_parser;
	bool select;          /* only the region numbered region (observed) */
	int64_t region;
	int64_t cap, first_cap;  /* the plan's caps; -1: the ones DDP used */
	/* NCCL calls of the NCCL-side trace, read beforehand, or NULL; the
	 * trace's own nccl events are added to it (or to a table of its own) */
	struct cd_nccl *nccl;
	/* called with each oddity the replay tells */
	void (*warn)(void *ud, const char *msg);
	void *ud;
};

/* Read the trace at path into t (zeroed by the caller), then plan and
 * compare.  On error err names the line; t holds what was read and must
 * still be freed.  A trace without any ddp event is CD_ERR_TRACE. */
enum cd_status cd_buckets_collect(const char *path, const struct cd_bk_opts *o,
				  struct cd_bk_trace *t, struct cd_err *err);
void cd_bk_trace_free(struct cd_bk_trace *t);

/* One rank's buckets as the runner reads them (run.h): cd_buckets_collect
 * of one trace, with what it would have said kept for the caller to say. */
struct cd_bk_rank {
	struct cd_bk_trace t;
	enum cd_status st;       /* cd_buckets_collect's */
	struct cd_err err;       /* when st */
	CD_VEC(char *) warnings; /* the replay's oddities (cd_bk_opts.warn's), in order */
};
void cd_bk_rank_free(struct cd_bk_rank *r);

/* The runner's reader of buckets: results are struct cd_bk_rank; ctx is a
 * const struct cd_bk_opts whose nccl, warn and ud are not used (each
 * trace's own nccl events only; warnings go to the result). */
struct cd_run_reader;
extern const struct cd_run_reader cd_bk_reader;

/* Print traces (one per rank) as text or as one JSON document.  Sets
 * *differ when the ranks' buckets differ.  Fails only when out of memory. */
/* The bytes of bucket b: the sum of its members' nbytes, or DDP's own count
 * when the set has sizes only (members false). */
int64_t cd_bk_set_size(const struct cd_bk_ddp *d, const struct cd_bk_bucket *b, bool members);

enum cd_status cd_buckets_report(struct cd_out *o, struct cd_bk_trace *const *t, uint32_t n,
				 bool json, bool *differ, struct cd_err *err);

/* tabulate(rows, headers, tablefmt="simple_grid") of tabulate 0.9: cells
 * are strings, NULL for None; numeric[c]: column c holds integers (right
 * aligned, header too), else text (left aligned).  rows is row-major. */
void cd_bk_simple_grid(struct cd_out *o, const char *const *headers, const bool *numeric,
		       uint32_t ncols, const char *const *rows, uint32_t nrows);

#endif
