/* The field table: which keys the reader knows and what JSON type each
 * must have.  Both line parsers look keys up here and store values through
 * cd_field_set_*, so the syntax layer is the only thing they do not share. */
#ifndef CD_FIELDS_H
#define CD_FIELDS_H

#include "event.h"

enum cd_ftype {
	CD_FT_STR,
	CD_FT_INT,
	CD_FT_BOOL,
	CD_FT_INTLIST,   /* list of integers */
	CD_FT_ARGS,      /* list of {shape, placements, mesh} */
	CD_FT_PARAMS,    /* list of {name, shape, dtype, nbytes, requires_grad, placements, mesh} */
};

enum cd_fid {
	CD_FI_EV, CD_FI_T, CD_FI_MOD, CD_FI_TYPE, CD_FI_NAME, CD_FI_LABEL,
	CD_FI_REGION, CD_FI_BW, CD_FI_DT, CD_FI_FAKE, CD_FI_GRAD_IN, CD_FI_GRAD_OUT,
	CD_FI_FORMAT, CD_FI_VERSION, CD_FI_RANK, CD_FI_WORLD, CD_FI_HOST, CD_FI_PID,
	CD_FI_T0, CD_FI_TORCH, CD_FI_RECORDER, CD_FI_ARGS, CD_FI_PARAMS, CD_FI_PG,
	CD_FI_SEQ, CD_FI_BYTES, CD_FI_DTYPE, CD_FI_SHAPE, CD_FI_DESC, CD_FI_RANKS,
	CD_FI_BACKEND, CD_FI_SRC, CD_FI_FUNC, CD_FI_COUNT, CD_FI_REDOP, CD_FI_ROOT,
	CD_FI_PEER, CD_FI_COMM, CD_FI_NRANKS, CD_FI_STREAM, CD_FI_DUR, CD_FI_STATE, CD_FI_PSEQ,
	CD_FI_BUCKET, CD_FI_HOW, CD_FI_EXC, CD_FI_MSG, CD_FI_SIGNAL, CD_FI_CODE, CD_FI_ENDS,
	CD_FI_LIGHT,
	CD_FI__COUNT
};
/* the parsers keep the fields met in one event as bits of a uint64_t */
_Static_assert(CD_FI__COUNT <= 64, "too many fields for a 64-bit set");

struct cd_field {
	const char *key;
	uint32_t len;   /* strlen(key) */
	enum cd_fid id;
	enum cd_ftype type;
};

/* Known top-level field for key (p, n), or NULL. */
const struct cd_field *cd_field_lookup(const char *p, uint32_t n);
/* The field with that id (for tests), or NULL. */
const struct cd_field *cd_field_at(enum cd_fid id);

/* Store a value.  The setters check ranges and fail with a sentence. */
enum cd_status cd_field_set_str(struct cd_event *e, const struct cd_field *f,
				 struct cd_str s, struct cd_err *err);
enum cd_status cd_field_set_int(struct cd_event *e, const struct cd_field *f,
				 int64_t v, struct cd_err *err);
void cd_field_set_bool(struct cd_event *e, const struct cd_field *f, bool v);

/* Keys inside an args entry and a params entry. */
enum cd_sub { CD_SUB_NONE, CD_SUB_SHAPE, CD_SUB_PLACEMENTS, CD_SUB_MESH, CD_SUB_NAME,
	      CD_SUB_DTYPE, CD_SUB_NBYTES, CD_SUB_REQUIRES_GRAD };
enum cd_sub cd_subfield_lookup(const char *p, uint32_t n);

/* Reset an event to "nothing present". */
void cd_event_clear(struct cd_event *e);
/* The same for an event in which only the fields in fids (bits 1 << enum
 * cd_fid) may be set: clears those, ev and have. */
void cd_event_clear_fields(struct cd_event *e, uint64_t fids);

#endif
