/* The NCCL side of one trace's analysis (commdebug analyze): which
 * NCCL-side trace goes with it, reading that trace's calls before the
 * trace is replayed, charging them to the collectives the replay counts,
 * and what is said about them afterwards.
 *
 * Which NCCL-side trace: --nccl FILE, else TRACE's sibling (rank0.zst ->
 * rank0.nccl.zst) if there is one.  A trace of another process is not
 * joined: when both metas give a rank and they differ, or (a rank missing
 * on either side) both give host and pid and these differ.  With --nccl
 * that is an error; a sibling found by name is left out with a warning.
 * When none is found and the trace shows that the program used NCCL (a
 * process group whose backend names nccl), one note says where commdebug
 * looked.
 *
 * Ownership: struct cd_nside owns its paths and NCCL tables; free it with
 * cd_nside_free(). */
#ifndef CD_NCCL_SIDE_H
#define CD_NCCL_SIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "../read/event.h"
#include "../replay/nccl.h"
#include "../util/out.h"
#include "../replay/replay.h"
#include "../replay/trace.h"
#include "cli.h"

/* What the NCCL side takes from the command line. */
struct cd_nside_opts {
	const char *nccl_path;   /* --nccl, or NULL: the sibling by name */
	bool general_parser;     /* --parser general */
};

struct cd_nside {
	struct cd_nccl nccl;     /* NCCL calls of the trace and its NCCL-side trace */
	struct cd_err err;       /* first failure while collecting them */
	char *sibling;           /* the NCCL-side trace joined, or NULL */
	char *looked;            /* where one was looked for and not found, or NULL */
	bool from_option;        /* sibling is --nccl's */
	bool used_nccl;          /* the trace has a process group on NCCL */
	bool refused;            /* the NCCL-side trace is another process's: not joined */
	bool failed;             /* ... and that is an error (said already) */
	bool check_meta;         /* compare the trace's meta when it comes (standard input) */
	bool sib_meta;           /* the NCCL-side trace's meta was read: */
	bool sib_has_rank;
	int64_t sib_rank, sib_pid;
	char sib_host[256];
	const struct cd_trace_run *sib_tr;  /* the NCCL-side trace's read, while it runs */
};

/* Find the NCCL-side trace of path (--nccl, or the sibling by name). */
void cd_nside_find(struct cd_nside *ns, const struct cd_nside_opts *o, const char *path);

/* Read the NCCL-side trace's calls (before path is replayed) and check
 * that it is path's process's.  Prints its own errors and warnings.
 * Returns CD_EXIT_OK, CD_EXIT_CUT (read, but cut) or CD_EXIT_DATA (an
 * error: nothing is joined and the analysis stops). */
int cd_nside_load(struct cd_nside *ns, const struct cd_nside_opts *o, const char *path);

/* The replay hooks: every event of the trace (after it was replayed), and
 * every collective it counted.  line: the event's line in the trace. */
void cd_nside_event(struct cd_nside *ns, const struct cd_event *e, long long line);
/* The kinds of event cd_nside_event reads (struct cd_trace_run's after_kinds). */
#define CD_NSIDE_EVENTS \
	(1u << CD_EV_META | 1u << CD_EV_PG | 1u << CD_EV_NCCL | 1u << CD_EV_NCCL_LOST)
void cd_nside_charge(struct cd_nside *ns, const struct cd_replay *r, const struct cd_event *e);

/* Whether cd_nside_finish will write a report (no error so far, calls). */
bool cd_nside_reports(const struct cd_nside *ns);
/* After the replay: print the NCCL report (tables or JSON) to o and the
 * warnings and notes about the NCCL calls to stderr.  path names the trace
 * in messages; regions: the replay reported some.  Returns CD_EXIT_OK or
 * CD_EXIT_DATA (an error was printed). */
int cd_nside_finish(struct cd_nside *ns, struct cd_out *o, const struct cd_intern *mods,
		    const char *path, bool json, bool regions);

void cd_nside_free(struct cd_nside *ns);

#endif
