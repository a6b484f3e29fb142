/* Export of a job's traces as Chrome trace-event JSON (the format Perfetto
 * and chrome://tracing open): commdebug export --perfetto.
 *
 * Layout.  One process per trace: pid is the rank (a trace without a rank,
 * or a second trace of a rank, gets CD_EXPORT_PID_OTHER + its index), named
 * "rank N (host)" and sorted by rank.  Its threads:
 *   tid 1     findings      instants: the post-mortem's findings about this rank
 *   tid 2     regions       B/E slices: region_enter .. region_exit (steps)
 *   tid 1000+ forward       B/E slices: fw_pre .. fw_post (bw false)
 *   tid 2000+ recompute     B/E slices: fw_pre .. fw_post (bw true)
 *   tid 3000+ backward      B/E slices: bw_enter .. bw_exit
 *   tid 3     collectives   instants: every collective the replay counts, with
 *                           pg, seq, bytes, dtype, module, phase, region in args
 *   tid 4     NCCL calls    instants: nccl events (enqueued), nccl_lost
 *   tid 4000+ NCCL GPU      X slices: a completed call's GPU time [t-dur, t]
 * (thread_name and thread_sort_index metadata name and order them.)
 * Module spans of one phase that do not nest (a backward module whose
 * bw_exit comes after a later module's bw_enter and before its bw_exit) go
 * to further threads of the phase ("backward 2", ...): the spans of a phase
 * are collected while any of them is open (one forward pass, one backward
 * pass), then laid out so that the slices of every thread nest properly
 * and written in order.  GPU slices go to the first NCCL GPU thread where
 * they overlap nothing.  A span still open at bw_end (backward), at the end
 * of the trace, or when CD_EXPORT_SPAN_MAX spans are pending is closed
 * there with args.unclosed = true.
 *
 * Time.  ts = (t0 + t - start) / 1000 microseconds, where t0 is the meta
 * event's unix time of the trace (or of the NCCL-side trace) and start is
 * the job's start, the earliest t0 of the ranks (as the post-mortem aligns
 * ranks: see findings.h).  A trace without t0 is placed at t / 1000.
 * Events without "t" cannot be placed: they are left out and counted
 * (otherData.untimed_events_left_out); a closing event without "t" leaves its span open
 * until one that closes it or an outer span.
 *
 * One read.  Each trace is read once (cd_tl_summarize, timeline.h): its
 * summary for the post-mortem, and beside it its timeline, the events
 * drawn here in a compact form (a few bytes each, in memory up to a budget
 * for the whole job and in a temporary file beyond).  Once the post-mortem
 * is built, cd_export_rank draws each rank from its timeline: the records
 * are applied in the order of the trace's events, so the document is the
 * one a second read of the trace would give.  What is held while drawing a
 * rank: the timeline's strings, the open and pending spans of one pass,
 * the NCCL calls waiting for completion.
 *
 * Ownership: struct cd_export borrows the output and the post-mortem; it
 * owns nothing else.  Library code: prints nothing. */
#ifndef CD_EXPORT_H
#define CD_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "../postmortem/findings.h"
#include "../util/out.h"
#include "../postmortem/ranks.h"
#include "../util/status.h"

#define CD_EXPORT_PID_OTHER 1000000
/* Spans of one phase held at most before they are closed and written. */
#define CD_EXPORT_SPAN_MAX (1u << 18)
/* Threads of one kind (module phase, NCCL GPU) at most; a span that would
 * need more is left out and counted. */
#define CD_EXPORT_LANE_MAX 256

struct cd_export_stats {
	uint64_t ranks;
	uint64_t events;         /* events read (every trace, NCCL-side included) */
	uint64_t written;        /* trace events written (metadata included) */
	uint64_t untimed;        /* events left out: no "t" */
	uint64_t unmatched;      /* closing events with no open span of that module */
	uint64_t unclosed;       /* spans closed by the exporter (args.unclosed) */
	uint64_t dropped;        /* spans left out: too many threads needed */
	uint64_t collectives;
	uint64_t spans;
	uint64_t nccl_calls;
	uint64_t gpu_slices;
	uint64_t findings;       /* finding events written (one per culprit rank) */
	uint64_t findings_untimed;  /* ... of which placed at 0: no time known */
};

struct cd_export {
	struct cd_out *o;
	const struct cd_pm *pm;  /* findings; may be NULL */
	int64_t start;           /* job start (unix ns), 0: unknown */
	bool any;                /* an event was written (separator) */
	struct cd_export_stats st;
};

/* Start the document on o: {"traceEvents":[ ...  pm (may be NULL) gives
 * the findings and the job's start. */
void cd_export_begin(struct cd_export *x, struct cd_out *o, const struct cd_pm *pm);

/* What cd_export_rank met. */
struct cd_export_rank_res {
	bool cut;                /* the trace is cut; what was read was written */
	bool nccl_cut;           /* the NCCL-side trace is cut */
	bool nccl_failed;        /* the error (return value) is in the NCCL-side trace */
	bool nccl_refused;       /* the NCCL-side trace names another rank: not joined */
	bool tl_failed;          /* the error (return value) is in reading back the
				  * timeline (its temporary file: spool.h), not in a trace */
	const char *nccl_path;   /* the NCCL-side trace read, or NULL (s's, while it
				  * keeps its timeline) */
};

/* Write rank s (pid as in the layout above): a trace read by
 * cd_tl_summarize, from its timeline (s->extra) with its NCCL-side trace's,
 * or a Flight Recorder dump or summary file (the collectives of its
 * summary).  The events read before an error (of either trace) are
 * written and closed properly, so the document stays valid; err tells
 * what and where (err->line), res in which trace. */
enum cd_status cd_export_rank(struct cd_export *x, const struct cd_rank_summary *s, int64_t pid,
			      struct cd_export_rank_res *res, struct cd_err *err);

/* End the document: ], "displayTimeUnit", "otherData" (the statistics)
 * and a newline. */
void cd_export_end(struct cd_export *x);

/* Ranks written side by side (on threads): cd_export_part makes part an
 * export like x that writes to out, an output of its own (held in memory,
 * spilled to a temporary file past a few MiB); cd_export_rank(part, ...);
 * then cd_export_join(x, part) appends what part wrote to x's output as if
 * x had written it there, and adds its statistics.  Call cd_export_join
 * in the order of the ranks.  out is the caller's (cd_out_free). */
void cd_export_part(const struct cd_export *x, struct cd_export *part, struct cd_out *out);
void cd_export_join(struct cd_export *x, struct cd_export *part);

#endif
