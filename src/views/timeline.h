/* A trace's timeline: what commdebug export draws of it (export.h), kept
 * in a compact form while the trace is read once for its summary, and
 * drawn when the post-mortem of every rank is known.
 *
 * cd_tl_summarize reads a trace as cd_rank_summarize does (the same
 * summary, from the same replay: cd_rank_summarize_with) and, beside it,
 * records the events the export shows: meta, regions, module hooks (the
 * spans' ends), collectives, NCCL calls and their GPU times, as records
 * of a few bytes with the trace's own times (ns from its t0) and strings
 * by id (each string is written once, in a record of its own before the
 * first record that uses it).  A collective's facts are the summary's: its
 * record holds where the summary keeps them (an index in s->colls) and
 * what the summary does not (its time, its op's name).  Then it reads the
 * NCCL-side trace, when
 * there is one, into the same timeline.  What depends on the
 * other ranks (the process id, the job's start, the findings, the Flight
 * Recorder dump joined later) is left to the drawing: the export applies
 * the records in order (cd_tl_next) as it applied the events when it read
 * the trace itself, and writes the same bytes.
 *
 * Records are not ops: a trace's timeline is a small part of it (on the
 * real GPT-2 trace of the README, 241,202 records in 1.6 MiB, 1/80 of the
 * trace's JSON Lines).  They go to a log of a spool (spool.h): in memory
 * while the spool's budget allows, then in its temporary file.  Beyond the
 * log, a timeline holds a few hundred bytes; reading a trace holds its
 * strings (a table of its distinct module names and types, groups,
 * labels, NCCL names), and so does drawing it (cd_tl_rd).
 *
 * Ownership: the summary owns its timeline (s->extra, freed with it); the
 * timeline borrows the spool, which must outlive it.  Library code:
 * prints nothing. */
#ifndef CD_TIMELINE_H
#define CD_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "../read/event.h"
#include "../util/intern.h"
#include "../postmortem/ranks.h"
#include "../util/spool.h"
#include "../util/status.h"

enum cd_tl_kind {
	CD_TL_META = 1,     /* meta event: host (name), t0 */
	CD_TL_REGION_ENTER, /* region, label (name) */
	CD_TL_REGION_EXIT,
	CD_TL_OPEN,         /* fw_pre, bw_enter: phase, module (name), type */
	CD_TL_CLOSE,        /* fw_post, bw_exit: phase, module (name) */
	CD_TL_BW_END,
	CD_TL_COLL,         /* a collective the replay counted (the trace, not its NCCL side):
			     * s->colls.v[coll], op */
	CD_TL_NCCL,         /* an NCCL call not completed (enqueued) */
	CD_TL_GPU,          /* a completed NCCL call with its GPU time */
	CD_TL_NCCL_LOST,
	CD_TL_FINISH,       /* the end of the trace: t is its largest t, -1: none */
	CD_TL_SIBLING,      /* the NCCL-side trace's records follow */
	CD_TL_KINDS
};

/* The phases of module spans (CD_TL_OPEN, CD_TL_CLOSE). */
enum { CD_TL_FW, CD_TL_RC, CD_TL_BW };

/* One record.  Strings are ids in the reader's names (cd_tl_rd; CD_NOID:
 * absent in the event); which fields a kind has is in timeline.c (the
 * others are 0).  Times are the event's "t" (ns on the trace's own
 * clock). */
struct cd_tl_rec {
	uint32_t kind;
	uint32_t have;          /* the event's CD_F_* bits of the fields below it has */
	uint32_t phase;         /* OPEN, CLOSE: CD_TL_FW/RC/BW */
	int64_t t;
	int64_t t0;             /* META */
	uint32_t name;          /* META: host; REGION_ENTER: label; OPEN, CLOSE: module;
				 * NCCL: func */
	uint32_t type;          /* OPEN: module type */
	uint32_t coll;          /* COLL: its record in the summary, s->colls.v[coll] */
	uint32_t op;            /* COLL: the op's name */
	uint32_t pg, dtype;     /* NCCL */
	uint32_t comm;          /* NCCL, GPU */
	uint32_t redop, stream, state;   /* NCCL */
	int64_t region;         /* REGION_ENTER */
	int64_t seq;            /* NCCL, GPU */
	int64_t bytes, count, dur, root, peer, nranks, pseq;   /* NCCL; GPU: dur;
								* NCCL_LOST: count */
};

struct cd_tl {
	struct cd_slog log;       /* the records, and the strings they use */
	uint64_t records;
	/* what reading met */
	enum cd_status st;        /* the trace's replay (err: its error) */
	struct cd_err err;
	bool cut;
	bool sibling;             /* the NCCL-side trace was read ... */
	char *sib_path;           /* ... from here */
	enum cd_status sib_st;    /* its replay (sib_err) */
	struct cd_err sib_err;
	bool sib_cut;
	bool sib_refused;         /* its meta names another rank: not recorded */
	bool oom;                 /* a string or the recorder's state did not fit */
	uint64_t events;          /* events read, both traces */
	uint64_t untimed;         /* events the export would show left out: no "t" */
};

/* Read the trace at path into *s (zeroed by the caller) as
 * cd_rank_summarize does, and its timeline into s->extra (a struct cd_tl,
 * NULL when out of memory or when the trace holds no event), with its
 * NCCL-side trace nccl_path (NULL: none; read when the trace was read
 * without error) in the same timeline; sp: where the records go.  Its
 * collectives are indexes in s->colls: the timeline is drawn with s. */
void cd_tl_summarize(const char *path, const char *nccl_path, bool general_parser,
		     struct cd_spool *sp, struct cd_rank_summary *s);

/* The timeline's records in order, and their strings. */
struct cd_tl_rd {
	const struct cd_tl *tl;
	struct cd_intern names;   /* the strings met so far: the records' ids */
	struct cd_slog_rd rd;
	const char *p, *e;        /* the rest of the chunk */
	int64_t prev_t;
	char *str;                /* a string written in several records ... */
	uint32_t str_n, str_have; /* ... of str_n bytes, str_have of them read */
};

void cd_tl_rd_init(struct cd_tl_rd *rd, const struct cd_tl *tl);
/* The next record: CD_OK, CD_END after the last, or an error (err). */
enum cd_status cd_tl_next(struct cd_tl_rd *rd, struct cd_tl_rec *rec, struct cd_err *err);
void cd_tl_rd_free(struct cd_tl_rd *rd);

/* Free a timeline (s->free_extra). */
void cd_tl_free(void *tl);

#endif
