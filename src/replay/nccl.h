/* NCCL calls in a trace (`nccl` events from the NCCL-side recorder) and
 * their join with the Python-level collectives the replay counted.
 *
 * Matching: the PyTorch-side recorder tags the thread with the collective's
 * process group and per-group sequence number while the collective runs;
 * the NCCL-side recorder writes that tag into every NCCL call made
 * meanwhile ("pg", "pseq").  A Python `op` event with "pg" P and "seq" S is
 * therefore served by the NCCL calls tagged (P, S): none (a gloo group, a
 * trace without NCCL events), one, or several (coalesced or decomposed
 * collectives).  Their bytes and time are charged to the module that
 * issued the collective and to every module its count went to, under the
 * direction (forward / backward) of the count.
 *
 * A `nccl` event with "state":"completed" carries the GPU time of the
 * enqueued call with the same "comm" and "seq".
 *
 * Memory: a few dozen bytes per NCCL call and per Python collective. */
#ifndef CD_NCCL_H
#define CD_NCCL_H

#include <stdbool.h>
#include <stdint.h>

#include "../read/event.h"
#include "../util/intern.h"
#include "../util/out.h"
#include "replay.h"
#include "../util/status.h"
#include "../util/vec.h"

struct cd_ncall {
	uint32_t func;      /* names id */
	uint32_t pg;        /* names id, CD_NOID: untagged */
	int64_t pseq;
	int64_t bytes;      /* -1: unknown */
	int64_t dur;        /* ns, -1: no completion seen */
	int32_t nranks;     /* -1: unknown */
	uint32_t next;      /* next call with the same tag, CD_NOID at the end */
	bool charged;       /* served a collective of a reported region */
};

struct cd_ncharge {         /* one Python collective of a reported region */
	uint32_t region;    /* index in regions */
	uint32_t tag;       /* tags id */
	uint32_t mods;      /* offset in mods: (module id, depth) pairs */
	uint32_t nmods;
	bool bw;
};

struct cd_nregion {
	int64_t region;
	char *label;        /* NULL: none */
	uint32_t gen;       /* the replay's generation of the region */
};

struct cd_nccl {
	struct cd_intern names;  /* function names, communicator ids, group names */
	struct cd_intern calls_by_key;  /* (comm, seq) -> index in calls */
	struct cd_intern tags;   /* (pg, pseq) -> tag id */
	CD_VEC(uint32_t) tag_head;      /* per tag: first call, CD_NOID */
	CD_VEC(struct cd_ncall) calls;
	CD_VEC(struct cd_ncharge) charges;
	CD_VEC(uint32_t) mods;
	CD_VEC(struct cd_nregion) regions;
	uint64_t lost;           /* calls the recorder could not queue */
	uint64_t orphan_done;    /* completions of calls not in the trace */
	uint64_t unserved;       /* collectives of reported regions no NCCL call served */
};

/* Zero-initialise; free with cd_nccl_free(). */
void cd_nccl_free(struct cd_nccl *n);

/* Take one event (only nccl and nccl_lost events are looked at). */
enum cd_status cd_nccl_event(struct cd_nccl *n, const struct cd_event *e, struct cd_err *err);

/* The replay just counted collective e (an op event): remember what it was
 * charged to, if it names its group and sequence number and NCCL calls
 * carry that tag.  So the NCCL calls must be taken (cd_nccl_event) before
 * the collectives they served are charged. */
enum cd_status cd_nccl_charge(struct cd_nccl *n, const struct cd_replay *r,
			      const struct cd_event *e, struct cd_err *err);

/* The NCCL calls tagged with group pg and sequence number seq (the calls
 * that served the collective with that pg and seq): how many, their bytes
 * (-1 if one has none) and GPU time in ns (-1 unless every one has it). */
void cd_nccl_served(const struct cd_nccl *n, struct cd_str pg, int64_t seq, uint32_t *ncalls,
		    int64_t *bytes, int64_t *dur);

/* True when the trace(s) held NCCL calls. */
static inline bool cd_nccl_any(const struct cd_nccl *n)
{
	return n->calls.n > 0 || n->lost > 0;
}

/* Reports: the per-collective summary and the per-module traffic, as
 * tables, or as one JSON document {"nccl": {...}} plus a newline.  mods
 * names the module ids (the replay's module table); source names where the
 * calls came from.  Fails only when out of memory (nothing written then). */
enum cd_status cd_nccl_report(struct cd_out *o, struct cd_nccl *n, const struct cd_intern *mods,
			      const char *source, bool json, struct cd_err *err);

/* The bus-bandwidth factor of an NCCL function for n ranks (nccl-tests). */
double cd_nccl_bus_factor(const char *func, int64_t nranks);

#endif
