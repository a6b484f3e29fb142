/* A safe reader of plain-data pickles and of JSON, into one value tree.
 *
 * Made for PyTorch's Flight Recorder dumps (frdump.h), which hold only
 * dict, list, tuple, str, bytes, int, float, bool and None.  The pickle
 * reader is not Python's unpickler: it never imports, calls or builds an
 * object.  It knows the opcodes that build those plain values (protocols
 * 2 to 5, as Python's C pickler writes them) and rejects every other one
 * (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT*,
 * PERSID, BINPERSID, sets, bytearray, out-of-band buffers and protocol 0/1
 * text opcodes) with an error naming the opcode and its byte offset.
 *
 * Opcodes read: PROTO FRAME STOP MARK POP POP_MARK DUP
 *   EMPTY_DICT DICT SETITEM SETITEMS  EMPTY_LIST LIST APPEND APPENDS
 *   EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3
 *   NONE NEWTRUE NEWFALSE  BININT BININT1 BININT2 LONG1 LONG4 (up to 64 bits)
 *   BINFLOAT  SHORT_BINUNICODE BINUNICODE BINUNICODE8
 *   SHORT_BINBYTES BINBYTES BINBYTES8
 *   BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET
 * (torch 2.14's dumps use PROTO 2, MARK, EMPTY_DICT, SETITEMS, EMPTY_LIST,
 * APPENDS, TUPLE2, NONE, NEWTRUE, NEWFALSE, BININT1, BININT2, BININT, LONG1,
 * BINUNICODE, BINPUT, BINGET, STOP.)
 *
 * Bounds: input size (CD_PV_MAX_INPUT), nesting depth (CD_PV_MAX_DEPTH),
 * memo index (CD_PV_MAX_MEMO), items of one container (CD_PV_MAX_ITEMS)
 * and the values of the tree counted as a tree, every shared one as often as
 * it is reached (CD_PV_MAX_NODES), so a walk of the result is bounded too.
 * A container is frozen once it is placed in another one (Python's pickler
 * fills each before it uses it), so the result holds no cycle; values
 * reached through the memo may be shared (the tree is a DAG).
 *
 * Ownership: a struct cd_pv_doc owns every value of its tree (one arena);
 * cd_pv_doc_free releases them all.  Strings are NUL-terminated copies
 * (they may hold NULs: use len).
 *
 * Layering: bytes in, values out; reads no file, prints nothing. */
#ifndef CD_PICKLE_H
#define CD_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"

#define CD_PV_MAX_INPUT (256u << 20)
#define CD_PV_MAX_DEPTH 64
#define CD_PV_MAX_MEMO (1u << 22)
#define CD_PV_MAX_ITEMS (1u << 24)
#define CD_PV_MAX_NODES (1u << 24)

enum cd_pv_kind {
	CD_PV_NONE, CD_PV_BOOL, CD_PV_INT, CD_PV_FLOAT, CD_PV_STR, CD_PV_BYTES,
	CD_PV_LIST, CD_PV_TUPLE, CD_PV_DICT,
};
extern const char *const cd_pv_kind_names[];

struct cd_pv {
	enum cd_pv_kind kind;
	bool frozen;        /* placed in a container: no longer changes */
	uint32_t depth;     /* 1 for a scalar, 1 + the deepest item for a container */
	uint64_t weight;    /* values in it counted as a tree, itself included */
	union {
		bool b;
		int64_t i;
		double f;
		struct { char *p; size_t len; } s;             /* STR, BYTES */
		struct { struct cd_pv **v; size_t n, cap; } c; /* LIST, TUPLE: n items;
								 * DICT: n/2 pairs, key then value */
	} u;
};

struct cd_pv_arena;
struct cd_pv_doc {
	struct cd_pv *root;
	struct cd_pv_arena *arena;
	int proto;          /* pickle protocol (PROTO), 0 for JSON */
};

/* Read the pickle data[0..len) into *doc.  Returns CD_OK, or
 * CD_ERR_FORMAT / CD_ERR_LIMIT / CD_ERR_NOMEM with err saying what and at
 * which byte offset ("offset 182: opcode 0x63 'c' (GLOBAL) is not allowed:
 * ...").  On error *doc holds nothing (no need to free). */
enum cd_status cd_pickle_parse(const uint8_t *data, size_t len, struct cd_pv_doc *doc,
			       struct cd_err *err);

/* Read the JSON text data[0..len) into *doc (objects as DICT with STR keys,
 * arrays as LIST, integers that fit in 64 bits as INT, other numbers as
 * FLOAT), with the same bounds.  Errors as cd_pickle_parse's, by offset. */
enum cd_status cd_pvjson_parse(const uint8_t *data, size_t len, struct cd_pv_doc *doc,
			       struct cd_err *err);

void cd_pv_doc_free(struct cd_pv_doc *doc);

/* The value of key (a STR key of len bytes) in dict d, or NULL (also when
 * d is NULL or not a dict). */
const struct cd_pv *cd_pv_get(const struct cd_pv *d, const char *key);

/* Accessors that tolerate NULL and the wrong kind. */
bool cd_pv_is(const struct cd_pv *v, enum cd_pv_kind k);
/* INT (or BOOL) into *out; false otherwise. */
bool cd_pv_int(const struct cd_pv *v, int64_t *out);
/* STR's text, or NULL. */
const char *cd_pv_str(const struct cd_pv *v);
/* LIST or TUPLE: its items and count (0 otherwise). */
size_t cd_pv_seq(const struct cd_pv *v, struct cd_pv *const **items);

#endif
