/* Replay: trace events -> the state of PyTorch's CommDebugMode and its
 * module tracker, one recording region at a time.
 *
 * The state machine in replay.c follows the reference semantics (see
 * man/commdebug-trace.5 and the reference notes): the tracker's `parents`
 * set and module names persist across regions; everything else (module
 * table, counts, op lists, parameter and sharding info) is per region.
 *
 * Memory: per-module state only, indexed by dense module ids.  Op lists are
 * kept only when opts.retain_ops, the parent->children lists only when
 * opts.want_tree; without them the memory does not grow with the trace. */
#ifndef CD_REPLAY_H
#define CD_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "../read/event.h"
#include "../util/intern.h"
#include "../util/status.h"
#include "../util/vec.h"

/* Deepest module nesting accepted (real models stay below 100); deeper
 * traces are refused as absurd rather than printed with megabyte indents. */
#define CD_MAX_DEPTH 4096

/* One collective count, in first-counted order. */
struct cd_count {
	uint32_t coll;  /* id in replay->colls (legacy packet name) */
	uint32_t n;
};
typedef CD_VEC(struct cd_count) cd_countv;

/* One distinct retained op: what an op list entry stands for. */
enum { CD_OP_BW = 1, CD_OP_AC = 2 };
struct cd_oprec {
	uint32_t op;      /* id in replay->ops */
	uint32_t argset;  /* id in replay->argsets, or CD_NOID: no DTensor args */
	uint32_t flags;
};

/* A module's op list: 4 bytes per op, less when ops repeat.  Each entry is
 * an id in replay->oprecs (repeated ops share one cd_oprec), or, with
 * CD_OPS_RUN set, the number of further times the entry before it is
 * repeated.  Walk it with cd_ops_next(). */
#define CD_OPS_RUN 0x80000000u
typedef CD_VEC(uint32_t) cd_opv;

/* The next run of equal ops from *i: its oprec id and length. */
static inline bool cd_ops_next(const cd_opv *v, uint32_t *i, uint32_t *rec, uint64_t *count)
{
	if (*i >= v->n)
		return false;
	*rec = v->v[(*i)++];
	*count = 1;
	while (*i < v->n && (v->v[*i] & CD_OPS_RUN))
		*count += v->v[(*i)++] & ~CD_OPS_RUN;
	return true;
}

/* Per-op-name facts, computed once. */
struct cd_opinfo {
	uint32_t coll;    /* id in replay->colls if a registered collective, else CD_NOID */
	bool trivial;
};

/* The DTensor arguments of an op, decoded once per distinct set. */
struct cd_argset {
	uint32_t nargs;
	uint32_t *shape;  /* ids in replay->strs: "torch.Size([16, 10])" */
	uint32_t *plc;    /* ids in replay->strs: "(Shard(dim=0),)" */
	uint32_t mesh;    /* id in replay->strs: str of the last DTensor arg's mesh */
};

/* A parameter seen in a module's forward pre-hook. */
struct cd_pinfo {
	uint32_t name;        /* strs */
	uint32_t dtype;       /* strs, CD_NOID if absent */
	uint32_t shape;       /* strs: "[16, 10]" JSON-style list text, CD_NOID if absent */
	uint32_t placements;  /* strs, CD_NOID unless a DTensor */
	uint32_t mesh;        /* strs, CD_NOID unless given */
	int64_t nbytes;       /* -1 if absent */
	bool requires_grad;
	bool dtensor_ever;    /* listed in the module's helper "parameters" */
};

/* Per-module state of the current region (valid when gen == replay->gen). */
struct cd_rmod {
	uint32_t gen;
	bool in_helper;       /* in module_helper_dict */
	bool hooked;          /* its per-module forward hook is registered */
	bool has_parents;     /* in module_parents_dict */
	bool has_counts;      /* in comm_module_counts */
	bool warned;          /* "backward without forward" said once */
	uint32_t type;        /* strs id of the class path, CD_NOID for Global */
	uint32_t depth;
	uint32_t more;        /* index in replay->more, CD_NOID until needed */
	CD_VEC(uint32_t) parents;   /* module_parents_dict snapshot (module ids) */
	cd_countv fw, bw;
	cd_opv ops;
};

/* The per-module lists few modules have (most are leaves without DTensor
 * parameters), kept apart so that a module without them costs 4 bytes for
 * them, not 48.  Read them with cd_replay_more(). */
struct cd_rmod_more {
	CD_VEC(uint32_t) children;  /* parent_dict (module ids, repeats kept) */
	CD_VEC(struct cd_pinfo) params;
	CD_VEC(uint32_t) hparams;   /* indexes into params: helper "parameters" order */
};

/* Sharding info entry, in insertion order: module id + param index. */
struct cd_shard_ref {
	uint32_t mod;
	uint32_t param;
};

struct cd_replay;
struct cd_replay_cache;

struct cd_replay_opts {
	bool retain_ops;         /* keep op lists (noise >= 1) */
	bool want_tree;          /* keep parent->children lists (JSON dump) */
	bool want_params;        /* keep parameter info (noise >= 1, sharding) */
	bool select;             /* only report the region with id `region` */
	int64_t region;
	/* Called when a region ends (region_exit, a new region_enter, or end of
	 * trace); a non-OK status stops the replay and is returned. */
	enum cd_status (*region_done)(void *ud, const struct cd_replay *r, struct cd_err *err);
	/* Called for each collective counted (a registered collective op that is
	 * not a DTensor op), after the counts are updated; coll is its id in
	 * r->colls.  May be NULL. */
	void (*on_collective)(void *ud, const struct cd_replay *r, const struct cd_event *e,
			      uint32_t coll);
	/* Call region_done for a region when the next region begins or at the
	 * end (cd_replay_finish, cd_replay_flush) instead of at its
	 * region_exit, so that it knows whether more regions follow
	 * (replay->more_regions); the state is unchanged until then. */
	bool defer_done;
	/* Called with one sentence for each oddity worth telling the user. */
	void (*warn)(void *ud, const char *msg);
	void *ud;
};

struct cd_replay {
	struct cd_replay_opts opts;

	struct cd_intern mods;    /* module names; id 0 is "Global" */
	struct cd_intern ops;     /* op overload names */
	struct cd_intern colls;   /* collective packet names as reported */
	struct cd_intern strs;    /* types, placements, meshes, shapes, dtypes */
	struct cd_intern argkeys; /* serialized DTensor argument lists */
	CD_VEC(struct cd_opinfo) opinfo;
	CD_VEC(struct cd_argset) argsets;
	struct cd_intern opkeys;  /* distinct retained ops, as struct cd_oprec bytes */
	CD_VEC(struct cd_oprec) oprecs;  /* by opkeys id */
	struct cd_oprec last_rec; /* the last op retained, and its oprecs id */
	uint32_t last_rec_id;
	/* Small direct-mapped caches in front of ops and opkeys (each entry
	 * is checked in full before it is used); NULL until the first op. */
	struct cd_replay_cache *cache;
	char *scratch;
	size_t scratch_cap;

	/* ModTracker state: persists across regions */
	CD_VEC(uint32_t) pcnt;    /* per module: count in `parents` */
	CD_VEC(uint32_t) ppos;    /* per module: index in pmembers */
	CD_VEC(uint32_t) pfw;     /* per module: how many of its pcnt came from a forward
	                           * outside backward (fw_pre with bw false) */
	CD_VEC(uint32_t) pmembers;

	bool light;               /* the meta event says the trace was recorded light */

	/* current region */
	bool in_region;
	bool reporting;           /* this region is reported */
	int64_t region;
	uint32_t label;           /* strs id or CD_NOID */
	bool region_cut;          /* ended by end of trace, not region_exit */
	bool done_pending;        /* defer_done: region_done not called yet */
	bool more_regions;        /* in region_done: another region follows */
	uint32_t gen;
	CD_VEC(struct cd_rmod) rm;      /* indexed by module id */
	CD_VEC(struct cd_rmod_more) more;
	CD_VEC(uint32_t) helper;        /* module_helper_dict order */
	CD_VEC(uint32_t) parent_list;
	CD_VEC(struct cd_shard_ref) sharding;
	cd_countv comm;                 /* comm_counts */
	cd_countv outside;              /* coll events: not seen by the dispatcher */
	CD_VEC(uint32_t) outside_src;   /* strs id of each outside entry's src */
	uint32_t cur;                   /* current module name (tracker.name) */
	uint32_t last_op, last_op_mod;  /* the last op replayed in a region, and its module
					 * (CD_NOID before any) */
	bool ac;                        /* activation_checkpointing flag */

	/* statistics */
	uint64_t events;
	uint64_t regions;
	uint64_t ops_retained;          /* in the current region */
	uint64_t max_ops_retained;      /* largest region */
	uint64_t max_op_bytes;
	uint32_t mods_in_region;        /* modules touched in this region */
};

/* Ownership: the replay owns everything it points to; free with
 * cd_replay_free().  opts is copied. */
enum cd_status cd_replay_init(struct cd_replay *r, const struct cd_replay_opts *opts,
			      struct cd_err *err);
void cd_replay_free(struct cd_replay *r);

/* Feed one event (as returned by a parser, validated). */
enum cd_status cd_replay_event(struct cd_replay *r, const struct cd_event *e,
			       struct cd_err *err);

/* The modules a collective counted now is charged to besides r->cur (which
 * the list may hold too): its parent snapshot, or the running modules when
 * its forward ran outside the region.  Valid until the next event. */
void cd_replay_charge_list(const struct cd_replay *r, const uint32_t **v, uint32_t *n);

/* End of trace: closes an open region (reporting it as cut). */
enum cd_status cd_replay_finish(struct cd_replay *r, struct cd_err *err);

/* defer_done: call region_done for an ended region not reported yet (after
 * an error, to show what was complete); no-op otherwise. */
enum cd_status cd_replay_flush(struct cd_replay *r, struct cd_err *err);

/* The per-module state of module id in the current region, or NULL when the
 * module has none there. */
const struct cd_rmod *cd_replay_mod(const struct cd_replay *r, uint32_t id);

/* The children, parameters and helper parameters of a module in the
 * current region (empty lists when it has none). */
const struct cd_rmod_more *cd_replay_more(const struct cd_replay *r, const struct cd_rmod *m);

/* Bytes held for retained ops in the current region. */
uint64_t cd_replay_op_bytes(const struct cd_replay *r);

#endif
