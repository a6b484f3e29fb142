/* Reading one trace through the replay: reader -> parser -> replay, with
 * the rules every command shares (meta first, blank lines tolerated, a cut
 * last line or zstd frame is reported, not an error). */
#ifndef CD_TRACE_H
#define CD_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "../read/event.h"
#include "../read/reader.h"
#include "replay.h"
#include "../util/status.h"

struct cd_trace_run {
	/* in */
	bool general_parser;     /* cJSON path instead of the fast scanner */
	bool skip_detail;        /* do not decode args/params (see struct cd_parser) */
	/* called once per chunk read (progress); may be NULL */
	void (*tick)(void *ud, const struct cd_reader *rd);
	/* called after each event was replayed; may be NULL */
	void (*after_event)(void *ud, const struct cd_event *e, const struct cd_replay *r);
	/* the kinds of event after_event is called for (bits 1 << enum cd_ev);
	 * 0: every kind */
	uint32_t after_kinds;
	void *ud;

	/* out */
	const char *text;        /* in after_event: the event's line (not NUL-terminated) */
	size_t text_n;
	long long line;          /* the line being processed; 0 once reading ended */
	long long last_good;     /* last line read whole and replayed */
	bool seen_meta;
	bool cut;                /* the trace ends early; what was read was replayed */
	const char *cut_why;
	bool has_rank, has_world;
	bool light;              /* the meta event says the trace was recorded light */
	int64_t rank, world_size, t0;
	uint64_t file_bytes, data_bytes;
	uint64_t frames;            /* zstd frames met */
	uint64_t unchecked_frames;  /* of which without a content checksum */
};

/* A bound on the memory of the whole process (bytes of peak resident set,
 * 0: none), checked by every cd_trace_replay in any thread every few
 * thousand lines: past it, the replay stops with CD_ERR_LIMIT and a
 * message that gives the figure, instead of growing until the system kills
 * the process.  Set it before starting any replay. */
void cd_trace_set_mem_limit(uint64_t bytes);

/* Replay the trace at path ("-": standard input) into rp, which the caller
 * set up; the caller calls cd_replay_finish afterwards (a region still open
 * at the end of a cut trace is reported then).
 * On error err->msg says what and err->line/err->column where (0 when the
 * message itself says it, e.g. for zstd corruption). */
enum cd_status cd_trace_replay(const char *path, struct cd_replay *rp, struct cd_trace_run *run,
			       struct cd_err *err);

#endif
