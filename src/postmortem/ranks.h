/* Post-mortem across ranks.
 *
 * cd_rank_summarize reads one rank's trace into a compact summary: its
 * collectives (process group, sequence number, name, bytes, dtype, the
 * module and phase that issued it, its region and time), its regions with
 * their labels and times, the per-module collective counts, and how and
 * where the trace ended (closed, ended abruptly inside a region, cut, empty).
 * Summaries are independent of each other, so they can be built in parallel.
 *
 * cd_ranks_report merges summaries into findings (see findings.h for the
 * rules) and prints them; cd_colls_report lists every collective of every
 * rank, one per line. */
#ifndef CD_RANKS_H
#define CD_RANKS_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/intern.h"
#include "../util/out.h"
#include "../util/status.h"
#include "../util/vec.h"

struct cd_event;
struct cd_replay;

enum cd_phase { CD_PH_FORWARD, CD_PH_BACKWARD, CD_PH_RECOMPUTE };
extern const char *const cd_phase_names[];

/* One collective as one rank issued it.  Strings are ids in the summary's
 * own table. */
struct cd_crec {
	uint32_t pg, coll, dtype, module;   /* dtype: CD_NOID when absent */
	uint8_t phase;
	bool has_bytes;
	int64_t seq, bytes;
	int64_t region;  /* the region it was issued in */
	int64_t time;    /* t0 + t (unix ns) when both are known, else -1 */
};

/* One region of a rank's trace. */
struct cd_rregion {
	int64_t region;
	uint32_t label;            /* CD_NOID: none */
	bool done;                 /* ended with region_exit */
	uint32_t colls;            /* collectives issued in it */
	int64_t t_enter, t_exit;   /* unix ns, -1 when unknown */
};

/* Collective count of a module in one region that ended with region_exit
 * (cut regions are left out, so a rank killed mid-step compares fairly). */
struct cd_modcount {
	int64_t region;
	uint32_t module, coll;
	uint8_t bw;
	uint64_t n;
};

struct cd_frame {
	uint32_t module;
	uint8_t phase;
};

/* Members of a process group, kept as runs: first, first + step, ...
 * (n ranks), so that a group of every rank of a 100,000-rank job costs one
 * run on each rank, not 100,000 numbers. */
struct cd_rrun {
	int64_t first, step;
	uint32_t n;
};

/* How a trace ended.  A trace whose meta says "ends" (its recorder writes
 * an end event when the process ends) is judged by its end event: closed
 * (a normal exit), exception, exited (a non-zero status), signal, other (an
 * end event of a kind this reader does not know), or, without one, killed
 * (whole lines) or cut.  Other traces are closed or abrupt by whether the
 * last region exited. */
enum cd_rank_end {
	CD_END_CLOSED,   /* whole lines, the last region exited; or an end event of a normal exit */
	CD_END_ABRUPT,   /* whole lines, but inside a region: no region_exit (no "ends" in meta) */
	CD_END_CUT,      /* a partial line or zstd frame at the end */
	CD_END_EMPTY,    /* no event at all (an empty file, or cut before its first line) */
	CD_END_ERROR,    /* unreadable (error) */
	CD_END_EXCEPTION,   /* end event: an uncaught exception ended the process */
	CD_END_EXITED,      /* end event: sys.exit with a non-zero status */
	CD_END_SIGNAL,      /* end event: a signal the recorder saw ended it */
	CD_END_OTHER,       /* end event with a "how" this reader does not know */
	CD_END_KILLED,      /* "ends" in meta, whole lines, but no end event: cut off */
};
extern const char *const cd_end_names[];

/* Where a summary came from: a commdebug trace, or a PyTorch Flight
 * Recorder dump (frdump.h). */
enum cd_source { CD_SRC_TRACE, CD_SRC_FR_PICKLE, CD_SRC_FR_JSON };

/* What a Flight Recorder dump says of one collective beyond its struct
 * cd_crec: s->fr.v[i] goes with s->colls.v[i] (dumps only; traces keep
 * none, so their summaries do not grow). */
struct cd_fr_crec {
	int64_t record_id;
	int64_t op_id;                    /* the pg's count of every op, p2p included
					   * (-1: none in the dump) */
	int64_t t_started, t_completed;   /* unix ns, -1: unknown */
	int64_t out_bytes;                /* -1: unknown */
	uint32_t frames_off, frames_n;    /* its stack in s->frames, innermost first */
	uint32_t user_frame;              /* index in s->frames of the innermost frame
					   * outside torch/, UINT32_MAX: none */
	uint8_t state;                    /* enum cd_fr_state */
	int8_t retired;                   /* 1: Flight Recorder retired it (its work
					   * ended, by completion or by an error), 0: not
					   * yet when the dump was taken, -1: not in the dump */
};

/* A Python stack frame of a dump (ids in s). */
struct cd_sframe {
	uint32_t fn, file;
	int64_t line;
};

/* pg_status of a dump: the last collective (seq) each group had enqueued,
 * started and completed; -1: none. */
struct cd_pgstat {
	uint32_t pg;
	int64_t enqueued, started, completed;
};

struct cd_rank_summary {
	char *path;
	char *error;            /* set when the trace could not be read whole */
	bool cut;
	bool cut_first;         /* cut before its first line was complete */
	enum cd_rank_end end;
	bool in_region;         /* the trace ends inside region open_region */
	int64_t open_region;
	bool has_rank, has_world;
	bool rank_from_name;    /* no meta: rank taken from the file name (rankN...) */
	int64_t rank, world_size;
	int64_t t0;             /* meta t0 (unix ns), 0 when absent */
	bool ends;              /* meta "ends": the recorder writes an end event */
	bool has_end;           /* the trace holds its end event ... */
	int64_t end_line;       /* ... on this line */
	int64_t end_time;       /* its time (unix ns), -1: unknown */
	bool has_code;
	int64_t end_code;       /* exit: sys.exit's status */
	int64_t end_signal;     /* signal: its number, 0 when absent */
	uint32_t end_how, end_exc, end_msg, end_signame;   /* ids in s (CD_NOID: absent);
							     * end_msg: the first line,
							     * shortened */
	int64_t last_time;      /* unix ns of the last event with a time, -1: none */
	uint64_t events, regions;
	struct cd_intern s;     /* every string of this summary */
	CD_VEC(struct cd_crec) colls;
	CD_VEC(struct cd_modcount) mods;
	CD_VEC(struct cd_rregion) rgn;   /* regions in trace order */
	bool rgn_sorted;                 /* ... which is by increasing region id */
	CD_VEC(struct cd_frame) stack;   /* open modules at the end, outermost first */
	CD_VEC(uint32_t) pg_names;       /* pg events: names ... */
	CD_VEC(uint32_t) pg_runs_off;    /* ... their members, as runs: from pg_runs.v[off] ... */
	CD_VEC(uint32_t) pg_runs_n;      /* ... this many runs */
	CD_VEC(struct cd_rrun) pg_runs;
	/* a bounded trace (trim events): regions up to trim_region were dropped,
	 * and of group trim_pg[k] the collectives up to trim_seq[k] */
	int64_t trim_region;             /* 0: none */
	CD_VEC(uint32_t) trim_pg;
	CD_VEC(int64_t) trim_seq;
	bool has_last_op;
	uint32_t last_op, last_op_module;
	/* Flight Recorder dumps (source != CD_SRC_TRACE) */
	uint8_t source;                  /* enum cd_source */
	uint32_t fr_version;             /* the dump's version string (id in s) */
	bool pg_conf_broken;             /* pg_config keyed by "" (gloo, torch 2.14):
					  * member lists unknown */
	uint32_t fr_p2p;                 /* p2p entries (not compared) */
	bool fr_states;                  /* the dump tracks states (some entry started or
					  * completed; gloo's stay "scheduled") */
	bool fr_has_world_pg;            /* the dump names its world group: an entry's */
	uint32_t fr_world_pg;            /* process_group desc "default_pg" (id in s) */
	CD_VEC(struct cd_fr_crec) fr;    /* per collective, parallel to colls */
	CD_VEC(struct cd_sframe) frames;
	CD_VEC(struct cd_pgstat) pg_status;
	/* a trace and a dump of the same rank, joined by group, kind, size
	 * and time (cd_fr_join): the dump is left out of the comparison (fr_joined); the
	 * trace keeps s->fr (record_id -1 where the dump has no such
	 * collective), the dump's frames and pg_status, and its path */
	bool fr_joined;
	char *fr_path;                   /* the trace: its dump's path */
	uint32_t fr_matched;             /* collectives found in both */
	/* read from a summary file (summary.h): no trace to replay again */
	bool from_summary;
	/* a summary file holds many ranks: its reader gives the first as the
	 * result and the others here, and cd_run_summaries makes them
	 * summaries of their own in its array */
	struct cd_rank_summary *set;
	uint32_t nset;
	bool no_rank;   /* ... or none at all (then this result is no rank either) */
	/* mods.v belongs to another summary of the same summary file (ranks
	 * that did the same things share their counts; never changed) */
	bool mods_borrowed;
	/* what a command kept of the trace beside its summary, read in the
	 * same pass (export's timeline: export.h); s owns it:
	 * cd_rank_summary_free calls free_extra(extra) when set */
	void *extra;
	void (*free_extra)(void *extra);
};

/* The dump's record of collective c of s (NULL for a trace). */
static inline const struct cd_fr_crec *cd_rank_fr(const struct cd_rank_summary *s,
						   const struct cd_crec *c)
{
	if (!c || !s->colls.n || s->fr.n != s->colls.n || c < s->colls.v ||
	    c >= s->colls.v + s->colls.n)
		return NULL;
	return &s->fr.v[c - s->colls.v];
}

/* Read the trace at path into *s (zeroed by the caller).  Never fails
 * outright: a read or format error is kept in s->error with what was read
 * before it.  general_parser: use the cJSON line parser.
 * Ownership: s owns everything it points to; free with cd_rank_summary_free. */
void cd_rank_summarize(const char *path, bool general_parser, struct cd_rank_summary *s);

/* The replay's callbacks, for a caller that reads more of the trace than
 * the summary in the same pass: called (when set) after the summary's own
 * for every event and every collective, with ud.  The replay and the
 * event are the summary's: read them only. */
struct cd_rank_hooks {
	void (*after_event)(void *ud, const struct cd_event *e, const struct cd_replay *r);
	void (*on_collective)(void *ud, const struct cd_replay *r, const struct cd_event *e,
			      uint32_t coll);
	void *ud;
};

/* cd_rank_summarize, with the caller's hooks h (NULL: none).  Returns
 * the replay's status, and its error in *err (may be NULL): what
 * s->error was made from, when it was (s->error also tells events after
 * the end event, which the replay takes). */
enum cd_status cd_rank_summarize_with(const char *path, bool general_parser,
				      const struct cd_rank_hooks *h, struct cd_rank_summary *s,
				      struct cd_err *err);

void cd_rank_summary_free(struct cd_rank_summary *s);
/* Free what s->extra holds now (done by cd_rank_summary_free too). */
void cd_rank_summary_free_extra(struct cd_rank_summary *s);

/* The rank a file's name gives (the directories before it aside), by the
 * rules in how:
 *   CD_RANK_NAME_WORD: the digits right after the first "rank" in it
 *     ("rank3.jsonl", "job-rank12-x.zst"), as a trace's;
 *   CD_RANK_NAME_TAIL: the digits that end it before its extension (.zst,
 *     .jsonl, .json, .pkl, .pickle, .cdsum, .nccl.zst, .nccl.jsonl), as a
 *     Flight Recorder dump's ("<prefix><rank>": "nccl_trace_rank_3");
 * the first that gives one, with 1 to 9 digits.  Returns whether one did
 * (*rank set). */
enum { CD_RANK_NAME_WORD = 1, CD_RANK_NAME_TAIL = 2 };
bool cd_rank_from_name(const char *path, unsigned how, int64_t *rank);

/* Add group name (an id in s) with its n members (in the order given) to
 * s->pg_names and its runs.  Returns false when out of memory. */
bool cd_rank_add_pg(struct cd_rank_summary *s, uint32_t name, const int64_t *ranks, uint32_t n);

/* Members of the k-th group of s (the sum of its runs' n). */
uint64_t cd_rank_pg_size(const struct cd_rank_summary *s, uint32_t k);

/* Did the process behind a trace die (every end but a normal one, for the
 * traces that can tell)?  Legacy traces (no "ends") die only by their
 * end event. */
bool cd_rank_died(const struct cd_rank_summary *s);

/* Bytes held by a summary (for the scale estimate). */
uint64_t cd_rank_summary_bytes(const struct cd_rank_summary *s);

/* The string of id in s ("" for CD_NOID). */
const char *cd_rank_str(const struct cd_rank_summary *s, uint32_t id);

/* The label of region in s, or NULL. */
const char *cd_rank_label(const struct cd_rank_summary *s, int64_t region);

/* Outcome of the merge. */
enum { CD_RANKS_AGREE = 0, CD_RANKS_CUT = 1, CD_RANKS_DIFFER = 2, CD_RANKS_BAD = 3 };

struct cd_ranks_opts {
	bool json;
	/* a rank that reaches a collective more than late_ns after the others
	 * is a straggler (0: CD_LATE_DEFAULT_NS) */
	int64_t late_ns;
	/* out, for --stats: rank positions visited while matching (the work of
	 * the merge: at most the sum of the ranks' collectives, plus one per
	 * rank and position it is absent from) */
	uint64_t visits;
};
#define CD_LATE_DEFAULT_NS 5000000000LL

/* Merge n summaries (in any order) and write the report; returns one of
 * the CD_RANKS_* outcomes (the worst that applies). */
int cd_ranks_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n,
		    struct cd_ranks_opts *opts);

/* Every collective of every summary, one per line (or one JSON document
 * per line), by rank then in trace order. */
void cd_colls_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n, bool json);

#endif
