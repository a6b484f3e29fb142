/* Spools: append-only logs of records, held in memory up to a budget that
 * all the logs of a spool share, and past it in one temporary file.
 *
 * A log (struct cd_slog) is written by one thread at a time, record by
 * record: cd_slog_reserve gives room for a record of at most
 * CD_SLOG_RECORD_MAX bytes inside one chunk of CD_SLOG_CHUNK bytes,
 * cd_slog_commit keeps what was written there; cd_slog_end when done.  A
 * full chunk stays in memory while the spool's logs hold less than its
 * budget, else it is written to the spool's temporary file (one file for
 * every log, made on the first such chunk; written with pwrite at offsets
 * taken atomically, so logs on several threads share it).  A reader
 * (struct cd_slog_rd) gets the chunks back in order, each holding whole
 * records.
 *
 * Memory: the chunks kept (at most the budget, plus one partial chunk
 * per log, shrunk to its size), and one chunk per log being written or
 * read.
 *
 * Ownership: the caller owns the spool and the logs; a log borrows its
 * spool, which must outlive it.  Errors (out of memory, a write or read
 * error of the file) are kept in the log as an errno value and said by
 * its reader.  Library code: prints nothing. */
#ifndef CD_SPOOL_H
#define CD_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "vec.h"

#define CD_SLOG_CHUNK (64u << 10)
#define CD_SLOG_RECORD_MAX 1024u

struct cd_spool;

/* A new spool whose logs keep at most budget bytes in memory together
 * (0: every full chunk goes to the file); NULL when out of memory. */
struct cd_spool *cd_spool_new(uint64_t budget);
/* Close the temporary file and free sp (NULL: nothing).  Its logs must
 * be freed first. */
void cd_spool_free(struct cd_spool *sp);
/* Bytes of the chunks written to the temporary file so far. */
uint64_t cd_spool_spilled(const struct cd_spool *sp);

struct cd_slog_chunk {
	char *mem;          /* in memory, or NULL: in the file at off */
	uint64_t off;
	uint32_t len;
};

struct cd_slog {
	struct cd_spool *sp;
	CD_VEC(struct cd_slog_chunk) chunks;   /* the chunks done, in order */
	char *cur;                             /* the chunk being written (CD_SLOG_CHUNK) */
	uint32_t len;                          /* ... bytes in it */
	uint64_t bytes;                        /* bytes of every record committed */
	int err_no;                            /* the first failure, 0: none */
};

void cd_slog_init(struct cd_slog *l, struct cd_spool *sp);
char *cd_slog_reserve_(struct cd_slog *l);

/* Room for a record of at most CD_SLOG_RECORD_MAX bytes, or NULL when the
 * log failed (l->err_no). */
static inline char *cd_slog_reserve(struct cd_slog *l)
{
	if (l->cur && CD_SLOG_CHUNK - l->len >= CD_SLOG_RECORD_MAX)
		return l->cur + l->len;
	return cd_slog_reserve_(l);
}

/* Keep the n bytes written at the last cd_slog_reserve's room. */
static inline void cd_slog_commit(struct cd_slog *l, size_t n)
{
	l->len += (uint32_t)n;
	l->bytes += n;
}

/* No more records: the last chunk is done (kept or written to the file). */
void cd_slog_end(struct cd_slog *l);
/* Free what l holds. */
void cd_slog_free(struct cd_slog *l);

/* Reading a log that ended (cd_slog_end), chunk by chunk. */
struct cd_slog_rd {
	const struct cd_slog *l;
	uint32_t next;      /* the next chunk */
	char *buf;          /* a chunk read from the file */
};

void cd_slog_rd_init(struct cd_slog_rd *rd, const struct cd_slog *l);
/* The next chunk's bytes (*p, *n): CD_OK, CD_END after the last, or an
 * error (the log's own failure, or a read error of the file) in err. */
enum cd_status cd_slog_rd_next(struct cd_slog_rd *rd, const char **p, size_t *n,
			       struct cd_err *err);
void cd_slog_rd_free(struct cd_slog_rd *rd);

#endif
