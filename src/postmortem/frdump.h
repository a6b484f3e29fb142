/* PyTorch Flight Recorder dumps (issue 23): one rank's dump into a plain C
 * model, and into a struct cd_rank_summary for the post-mortem.
 *
 * Formats, told apart by content: the pickle that the watchdog and
 * torch._C._distributed_c10d._dump_fr_trace() write (protocol 2; read by
 * pickle.h's safe reader, never by an unpickler), and the JSON of
 * _dump_fr_trace_json() (which has no stack frames and writes 0 for times
 * it does not know).
 *
 * Versions.  The dump's "version" is "MAJOR.MINOR".  Supported: major 2,
 * any minor (PyTorch 2.x writes 2.0 .. 2.10; torch 2.14 writes "2.10",
 * the only version seen in real dumps here; the hand-built NCCL-shaped ones
 * say "2.10" too).  Fields are read by name where present, so older minors
 * that lack some (pg_status before 2.4, frames when stack traces are off)
 * read with those left empty.  Any other major is rejected.
 *
 * What is read.  Top level: version, pg_config (name -> {name, desc,
 * ranks}; gloo in torch 2.14 keys one entry by "" and keeps only the last
 * group made: kept as it is), pg_status (pg name -> last enqueued,
 * started, completed collective), rank (when present; else from the file
 * name: the digits that end it, as fr_trace infers it), nccl_comm_state
 * (only whether it is there).  Each entry: record_id, pg_id, process_group
 * (name, desc), collective_seq_id, p2p_seq_id, op_id, profiling_name,
 * is_p2p, input/output sizes and dtypes, state, time_created_ns,
 * time_discovered_started_ns / _completed_ns, timeout_ms, retired, frames
 * (name, filename, line).  Unknown fields are ignored.
 *
 * Ownership: a struct cd_fr_dump owns its value tree and arrays; the
 * strings of its entries point into that tree.  Free with cd_fr_dump_free.
 * Layering: bytes in (cd_fr_parse) or one file (cd_fr_read); prints
 * nothing. */
#ifndef CD_FRDUMP_H
#define CD_FRDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../read/pickle.h"
#include "ranks.h"
#include "run.h"
#include "../util/status.h"

enum cd_fr_format { CD_FR_PICKLE, CD_FR_JSON };
enum cd_fr_state { CD_FR_SCHEDULED, CD_FR_STARTED, CD_FR_COMPLETED, CD_FR_STATE_OTHER };
extern const char *const cd_fr_state_names[];

struct cd_fr_frame {
	const char *name, *file;   /* function, file name */
	int64_t line;
};

struct cd_fr_tensor {
	int64_t numel;       /* product of its sizes */
	uint32_t ndim;
	const char *dtype;   /* c10's name ("Float"); NULL when the list is short */
};

struct cd_fr_entry {
	int64_t record_id, pg_id, op_id, seq, p2p_seq;   /* seq: collective_seq_id */
	const char *pg_name, *pg_desc;   /* process_group; "" when absent */
	const char *profiling_name;      /* "gloo:all_reduce", "nccl:send 0->1" */
	const char *coll;                /* profiling_name after "backend:" */
	bool is_p2p, retired;
	bool has_retired;                /* the entry says whether it is retired */
	enum cd_fr_state state;
	const char *state_text;          /* as written */
	int64_t time_created_ns;         /* -1: absent */
	int64_t time_started_ns, time_completed_ns;   /* -1: absent, None or 0 */
	int64_t timeout_ms;              /* -1: absent */
	struct cd_fr_tensor *in, *out;
	uint32_t n_in, n_out;
	int64_t in_numel, out_numel;     /* summed over the tensors */
	struct cd_fr_frame *frames;      /* innermost first, as in the dump */
	uint32_t n_frames;
};

struct cd_fr_pgconf {
	const char *key, *name, *desc;
	int64_t *ranks;    /* from "ranks" ("[0, 1]" or a list) */
	uint32_t n_ranks;
};

struct cd_fr_pgstatus {
	const char *pg;    /* its key: the pg name */
	int64_t last_enqueued, last_started, last_completed;   /* -1: none / absent */
};

/* One process group's entries in seq order. */
struct cd_fr_pg {
	const char *name, *desc;
	uint32_t *colls, n_colls;   /* indexes in entries, collectives by seq */
	uint32_t *p2p, n_p2p;       /* p2p ones by p2p_seq */
	const struct cd_fr_pgconf *conf;     /* by name, NULL */
	const struct cd_fr_pgstatus *status; /* by name, NULL */
};

struct cd_fr_dump {
	struct cd_pv_doc doc;
	enum cd_fr_format format;
	const char *version;
	int major, minor;
	bool has_rank;
	int64_t rank;
	bool rank_from_name;
	bool has_comm_state;      /* nccl_comm_state present */
	const char *comm_lib_version;
	struct cd_fr_entry *entries;   /* by record_id */
	uint32_t n_entries;
	struct cd_fr_pgconf *conf;
	uint32_t n_conf;
	struct cd_fr_pgstatus *status;
	uint32_t n_status;
	struct cd_fr_pg *pgs;          /* in order of first appearance */
	uint32_t n_pgs;
};

/* Is data the start of a Flight Recorder dump (a pickle that starts with
 * PROTO and an empty dict, or JSON text whose first key is one FR writes)?
 * A guess for directory scans; cd_fr_parse decides. */
bool cd_fr_sniff(const uint8_t *data, size_t len);

/* cd_fr_sniff on the first bytes of the regular file at path; false for
 * "-", a FIFO or anything else that is not a regular file (never read
 * from, so that it can still be read as a trace), or one that cannot be
 * opened (its reader says why). */
bool cd_fr_sniff_file(const char *path);

/* Parse a dump held in data[0..len) (name: the file name, for the rank
 * when the dump has none; may be NULL).  Returns CD_OK or an error with err
 * saying what ("offset N: ..." for a bad pickle or JSON, "entries[3]:
 * ..." for a bad field, "version 3.0 is not supported ...").  Its "rank"
 * and the ranks of its pg_config are held to a trace's limits: each 0 to
 * CD_INT_MAX, at most CD_RANKS_MAX in a group (read/event.h).
 * On error *d holds nothing. */
enum cd_status cd_fr_parse(const uint8_t *data, size_t len, const char *name,
			   struct cd_fr_dump *d, struct cd_err *err);

/* Read the file at path (at most CD_PV_MAX_INPUT bytes) and parse it. */
enum cd_status cd_fr_read(const char *path, struct cd_fr_dump *d, struct cd_err *err);

void cd_fr_dump_free(struct cd_fr_dump *d);

/* Fill *s (zeroed) from the dump at path, as cd_rank_summarize does from a
 * trace: never fails outright (an error goes to s->error).
 *
 * Mapping: every non-p2p entry is a struct cd_crec (pg: process_group's
 * name; seq: collective_seq_id; coll: profiling_name after "backend:";
 * dtype: the first input's as torch names it ("torch.float32"); bytes:
 * input elements x element size, when every dtype is known; module: the
 * string "(no module: Flight Recorder)"; phase forward; region -1; time:
 * time_created_ns), in record order, each with a struct cd_fr_crec in
 * s->fr (record id, state, started/completed times, output bytes, its
 * frames in s->frames and the innermost one outside torch/).  p2p entries
 * are only counted (s->fr_p2p: FR numbers them apart).  retired goes to
 * fc.retired (-1 where the entry lacks it); the group whose entries'
 * process_group desc is "default_pg" to s->fr_world_pg (gloo's pg_config
 * does not say, its entries do).  pg_status goes to
 * s->pg_status; s->fr_states says whether any entry left "scheduled"
 * (gloo's never do).  pg_config gives the pg member lists; a "" key (gloo,
 * torch 2.14) sets s->pg_conf_broken.  World size: default_pg's members
 * (when it has some, the dump's rank among them), else at least every rank
 * pg_config names and the dump's own, when that is at most CD_RANKS_MAX
 * (else none), as a trace's meta event may have it.  t0: the
 * first entry's time_created_ns.  The rank comes from the
 * dump or the file name (rank_from_name).  The end is CD_END_CLOSED: a dump
 * is a snapshot, not a log that can be cut. */
void cd_fr_summarize(const char *path, struct cd_rank_summary *s);

/* Join each dump among the n summaries with the trace of the same rank,
 * if there is one (frjoin.c): each of the trace's collectives gets the
 * dump's record of the same process group (by name), kind, size and time,
 * found at its seq plus the group's shift, which moves on over records the
 * trace lacks (the dump's op_id counts every op of the pg, as the trace's
 * seq does, but the trace has only what the recorder saw) (s->fr, frames,
 * pg_status, fr_path, fr_matched); the dump is marked fr_joined and left
 * out of the post-mortem.  Unreadable ones and ranks with several traces or
 * dumps are left as they are.  False when out of memory (the summaries are
 * then as they were, or joined in part, but consistent). */
bool cd_fr_join(struct cd_rank_summary *sums, int n);

/* cd_fr_summarize as a runner reader (results: struct cd_rank_summary). */
extern const struct cd_run_reader cd_run_fr_reader;

/* Element size in bytes of a c10 dtype name ("Float": 4), 0 if unknown;
 * torch's name for it ("torch.float32") or NULL. */
int cd_fr_dtype_size(const char *c10);
const char *cd_fr_dtype_torch(const char *c10);

#endif
