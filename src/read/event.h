/* One trace event, as produced by either line parser (fast or general).
 *
 * Ownership: every pointer in a struct cd_event points into the line that
 * was parsed, into the parser's scratch arena, or into the args lists the
 * fast parser keeps (until cd_parser_free).  Count on them until the next
 * call that parses a line with the same parser; copy what you keep. */
#ifndef CD_EVENT_H
#define CD_EVENT_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/status.h"

/* Largest magnitude accepted for an integer field: 2^53 - 1, so that every
 * value is exact in a double and both parsers agree.  The one exception is
 * meta's t0 (unix nanoseconds, about 2^60), allowed up to CD_T0_MAX. */
#define CD_INT_MAX 9007199254740991LL
#define CD_T0_MAX 9000000000000000000LL

/* Lists inside one event (params, args, shape dims) are capped, so hostile
 * input cannot make a single line expensive. */
#define CD_LIST_MAX 4096
/* A pg event's member list is the one list that grows with the job: a
 * process group may hold every rank of a 100,000-rank job.  It is capped
 * where memory is at stake (8 bytes a rank while the line is parsed; the
 * summary keeps runs, not ranks); a 64 MiB line holds fewer anyway. */
#define CD_RANKS_MAX (1u << 24)

struct cd_str {
	const char *p;
	uint32_t n;
};

enum cd_ev {
	CD_EV_UNKNOWN = 0, /* an event type this reader does not know: ignored */
	CD_EV_META,
	CD_EV_PG,
	CD_EV_REGION_ENTER,
	CD_EV_REGION_EXIT,
	CD_EV_FW_PRE,
	CD_EV_FW_POST,
	CD_EV_FW_DONE,
	CD_EV_BW_PRE,
	CD_EV_BW_ENTER,
	CD_EV_BW_EXIT,
	CD_EV_BW_END,
	CD_EV_OP,
	CD_EV_COLL,        /* collective seen outside the dispatcher (DDP reducer) */
	CD_EV_NCCL,
	CD_EV_NCCL_LOST,   /* NCCL calls the recorder could not queue */
	CD_EV_DDP,         /* a DDP module's buckets (read whole by buckets.c) */
	CD_EV_END,         /* how the recording process ended (read by ranks.c) */
	CD_EV_TRIM,        /* regions a bounded trace dropped (read by ranks.c) */
	CD_EV__COUNT,
};

/* One DTensor argument of an op. */
struct cd_arg {
	const int64_t *shape;
	uint32_t ndim;
	bool has_shape;
	struct cd_str placements;
	struct cd_str mesh;
};

/* One entry of fw_pre's params list. */
struct cd_param {
	struct cd_str name;
	struct cd_str dtype;
	struct cd_str placements; /* .p == NULL when absent (not a DTensor) */
	struct cd_str mesh;
	const int64_t *shape;
	uint32_t ndim;
	bool has_shape;
	int64_t nbytes;           /* -1 when absent */
	bool requires_grad;
};

/* Field presence bits (struct cd_event.have). */
enum {
	CD_F_EV = 1u << 0,
	CD_F_T = 1u << 1,
	CD_F_MOD = 1u << 2,
	CD_F_TYPE = 1u << 3,
	CD_F_NAME = 1u << 4,
	CD_F_REGION = 1u << 5,
	CD_F_FORMAT = 1u << 6,
	CD_F_VERSION = 1u << 7,
	CD_F_RANK = 1u << 8,
	CD_F_WORLD = 1u << 9,
	CD_F_ARGS = 1u << 10,
	CD_F_PARAMS = 1u << 11,
	CD_F_SEQ = 1u << 12,
	CD_F_BYTES = 1u << 13,
	CD_F_PG = 1u << 14,
	CD_F_LABEL = 1u << 15,
	CD_F_SHAPE = 1u << 16,
	CD_F_RANKS = 1u << 17,
	CD_F_COUNT = 1u << 18,
	CD_F_DUR = 1u << 19,
	CD_F_NRANKS = 1u << 20,
	CD_F_ROOT = 1u << 21,
	CD_F_PEER = 1u << 22,
	CD_F_PSEQ = 1u << 23,
	CD_F_BUCKET = 1u << 24,
	CD_F_HOW = 1u << 25,
	CD_F_EXC = 1u << 26,
	CD_F_MSG = 1u << 27,
	CD_F_SIGNAL = 1u << 28,
	CD_F_CODE = 1u << 29,
};

struct cd_event {
	enum cd_ev ev;
	uint32_t have;

	/* flags; false when absent */
	bool bw, dt, fake, grad_in, grad_out;
	bool ends;              /* meta: this recorder ends its traces with an end event */
	bool light;             /* meta: recorded light (no op events but collectives) */

	int64_t t;
	int64_t region;
	int64_t version, rank, world_size, pid, t0;
	int64_t seq, bytes, count, dur, nranks, root, peer, pseq;
	int64_t bucket;         /* coll: DDP's bucket index */
	int64_t signal, code;   /* end: the signal that ended the process; sys.exit's status */

	struct cd_str mod, type, name, label;
	struct cd_str format, host, torch, recorder;
	struct cd_str pg, desc, backend, dtype, src, func, comm, redop, state, stream;
	struct cd_str how, exc, msg;   /* end: "exit", "exception", "signal"; the exception */

	const struct cd_arg *args;
	uint32_t nargs;
	const struct cd_param *params;
	uint32_t nparams;
	const int64_t *shape;   /* op's collective shape */
	uint32_t nshape;
	const int64_t *ranks;   /* pg's ranks */
	uint32_t nranks_list;
};

/* The event name as written in traces ("fw_pre"), or "unknown". */
const char *cd_ev_name(enum cd_ev ev);

/* Map an "ev" string to its kind; CD_EV_UNKNOWN if not known. */
enum cd_ev cd_ev_from_str(const char *p, uint32_t n);

/* Check the fields an event of this kind must have, and value ranges.
 * Shared by both parsers so that they accept exactly the same events. */
enum cd_status cd_event_validate(const struct cd_event *e, struct cd_err *err);

/* Compare two events field by field (for the parser cross-check). */
bool cd_event_equal(const struct cd_event *a, const struct cd_event *b);

/* Scratch memory for one parsed line.  Blocks never move, so pointers
 * handed out stay valid until cd_arena_reset(). */
struct cd_arena_block;
struct cd_arena {
	struct cd_arena_block *head;
	size_t used_in_head;
};

void *cd_arena_alloc(struct cd_arena *a, size_t n);
void cd_arena_reset(struct cd_arena *a);
void cd_arena_free(struct cd_arena *a);

#endif
