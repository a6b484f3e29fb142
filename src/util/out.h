/* Buffered output with Python-json-compatible writing.
 *
 * struct cd_out collects bytes in memory and writes them to its FILE when
 * the buffer fills, unless `hold` is set (then everything stays in memory
 * until cd_out_flush).  Write errors are remembered and reported by
 * cd_out_flush. */
#ifndef CD_OUT_H
#define CD_OUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

struct cd_out {
	FILE *f;
	char *buf;
	size_t len, cap;
	bool hold;
	bool failed;
	int err_no;
	/* held output past spill_at bytes (0: never) goes to spill, a
	 * temporary file (cd_out_spill_at, cd_out_append) */
	size_t spill_at;
	FILE *spill;
	/* pyjson state */
	struct { uint32_t count; char close; } *stack;
	uint32_t depth, stack_cap;
};

void cd_out_init(struct cd_out *o, FILE *f);
void cd_out_free(struct cd_out *o);
/* Write buffered bytes to the FILE (and fflush it). */
enum cd_status cd_out_flush(struct cd_out *o, struct cd_err *err);
/* Drop buffered bytes (held output that will not be shown), spilled ones too. */
void cd_out_discard(struct cd_out *o);
/* A temporary file in $TMPDIR (else /tmp), already unlinked: gone when
 * closed or when the process ends; NULL and errno when it cannot be made.
 * (tmpfile(3) ignores TMPDIR: on cluster nodes /tmp is often small.) */
FILE *cd_scratch_file(void);

void cd_out_grow_(struct cd_out *o, size_t n);

/* A held output (hold set) whose buffer is full with at least `at` bytes
 * moves them to a temporary file and goes on, so that it does not stay in
 * memory (the buffer starts at 1 MiB). */
void cd_out_spill_at(struct cd_out *o, size_t at);
/* Write what src holds (in its temporary file, then in memory) to dst,
 * leaving out its first `skip` bytes; src is left empty.  A read error of
 * the temporary file makes dst failed. */
void cd_out_append(struct cd_out *dst, struct cd_out *src, size_t skip);

static inline void cd_out_write(struct cd_out *o, const char *p, size_t n)
{
	if (o->cap - o->len < n)
		cd_out_grow_(o, n);
	if (o->cap - o->len < n || n == 0)
		return; /* nothing, or out of memory (failed is set) */
	memcpy(o->buf + o->len, p, n);
	o->len += n;
}

static inline void cd_out_str(struct cd_out *o, const char *s)
{
	cd_out_write(o, s, strlen(s));
}

static inline void cd_out_spaces(struct cd_out *o, size_t n)
{
	static const char sp[] = "                                                                ";
	while (n > 64) {
		cd_out_write(o, sp, 64);
		n -= 64;
	}
	cd_out_write(o, sp, n);
}

void cd_out_printf(struct cd_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cd_out_i64(struct cd_out *o, int64_t v);

/* ---- JSON in the layout of Python's json.dump(obj, indent=4) ----
 * ensure_ascii escaping, ",", ": " separators, no trailing newline. */
void cd_pj_begin_obj(struct cd_out *o);
void cd_pj_begin_arr(struct cd_out *o);
void cd_pj_end(struct cd_out *o);
void cd_pj_key(struct cd_out *o, const char *key);
void cd_pj_str(struct cd_out *o, const char *s, size_t n);
void cd_pj_cstr(struct cd_out *o, const char *s);
void cd_pj_int(struct cd_out *o, int64_t v);
void cd_pj_bool(struct cd_out *o, bool v);
/* Pretend to be inside `depth` containers that already hold items, so that
 * the next value is written as it would be at that depth (for rendering
 * fragments to cache).  Only on an empty, fresh cd_out. */
void cd_pj_prime(struct cd_out *o, uint32_t depth);
/* Current nesting depth. */
static inline uint32_t cd_pj_depth(const struct cd_out *o)
{
	return o->depth;
}
/* A value written by the caller as raw JSON text (already escaped). */
void cd_pj_raw(struct cd_out *o, const char *s, size_t n);
/* count values, each the raw JSON text s: what count calls of cd_pj_raw
 * write, with one reservation and one copy each. */
void cd_pj_raw_n(struct cd_out *o, const char *s, size_t n, uint64_t count);
/* Escape s as a JSON string the way Python's json module does. */
void cd_pj_escape(struct cd_out *o, const char *s, size_t n);

#endif
