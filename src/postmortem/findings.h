/* Findings of a post-mortem across ranks (the analysis behind `ranks`).
 *
 * Matching.  Collectives are matched per process group by sequence number.
 * At each position the ranks' records are compared on collective, dtype,
 * bytes (not for collectives whose payload may differ between ranks),
 * issuing module, phase (forward, backward, recompute) and region; the
 * majority (ties: the lowest rank) is the reference, the others are odd.
 *
 * Propagation: one fault, one finding.  A rank found odd at a position is
 * realigned against a reference rank over the next 8 positions, trying, for
 * k = 1..4 in turn: it agrees again from position +k on (a swap or a
 * one-off: positions up to +k-1 belong to the finding, nothing shifts); it
 * skipped k collectives (its later ones are the others' +k: a `skip`
 * finding, and the rank is compared shifted from then on); it issued k
 * extra collectives (`extra`).  A rank that realigns no way is left out of
 * the rest of that group: everything after its fault is a consequence.
 * A rank whose trace lacks seq N but holds a later one has a `gap`; a rank
 * whose trace ends before a position the others reached `hang`s there.
 * Where every rank stopped at a position (nothing to realign against), a
 * rank's own earlier collectives tell a skip: its previous step
 * (CD_BY_HISTORY) or, for records without regions (Flight Recorder dumps),
 * the period its collectives of the group repeat with (CD_BY_PATTERN).
 *
 * Dumps.  A rank that left no trace or dump at all (pm->missing) and is a
 * member of a group (its member list, or the world group a dump names by
 * desc "default_pg") `hang`s at the first position whose ranks' dumps all
 * show it still in flight (cd_fr_flight), none ended, and no rank odd.
 *
 * Time.  Event times are t0 (the host's wall clock at the recorder's start,
 * unix ns) + t, so hosts are aligned by their clocks: a skew below late_ns
 * is tolerated.  A rank reaching a collective more than late_ns after every
 * other member is a `straggler` (reported once while its delay stays within
 * late_ns of the reported one).
 *
 * Layering: reads summaries only (ranks.h), prints nothing. */
#ifndef CD_FINDINGS_H
#define CD_FINDINGS_H

#include "../util/intern.h"
#include "ranks.h"
#include "../util/vec.h"

enum cd_fkind {
	CD_FK_EMPTY,       /* a rank's trace holds no event */
	CD_FK_TYPE,        /* another collective at the same position */
	CD_FK_DTYPE,
	CD_FK_SIZE,
	CD_FK_DESYNC,      /* same collective and payload, another module, phase or region */
	CD_FK_SKIP,        /* the rank skipped collectives: its later ones are shifted */
	CD_FK_EXTRA,       /* the rank issued collectives the others did not */
	CD_FK_HANG,        /* the rank's trace ends before a collective the others reached */
	CD_FK_STRAGGLER,   /* the rank reached a collective late */
	CD_FK_GAP,         /* the rank's trace lacks sequence numbers */
	CD_FK_DIED,        /* the rank's process died (cd_rank_died): ranks with the same end */
	CD_FK__COUNT,
};
extern const char *const cd_fkind_names[];

struct cd_finding {
	enum cd_fkind kind;
	uint32_t pg;                  /* id in pm->g */
	const char *pg_name;          /* its name (in pm->g) */
	int64_t seq, seq_end;         /* positions [seq, seq_end] */
	int ref;                      /* a rank of the other side (index in pm->r), -1: none */
	const struct cd_crec *ref_rec;   /* its record at seq, or NULL */
	CD_VEC(int) odd;              /* the ranks the finding is about (indexes in pm->r) */
	CD_VEC(const struct cd_crec *) odd_rec;   /* what each issued at seq (NULL: nothing) */
	CD_VEC(int) others;           /* the ranks of the other side */
	int64_t time;                 /* earliest arrival at seq (unix ns), -1: unknown */
	int64_t t_last;               /* latest arrival, -1: unknown */
	int last_rank;                /* who arrived last (index in pm->r), -1 */
	int64_t delay;                /* straggler: how late; hang: longest wait; -1 */
	int64_t count;                /* skip, extra, gap: how many positions */
	const struct cd_rank_summary *trace;   /* empty: the trace; died: the first rank's */
	/* what decided the finding where the ranks at its position alone could
	 * not: CD_BY_POS (they could), else see enum cd_basis */
	uint8_t basis;
	int basis_rank;               /* the rank whose own steps (or group) decided, -1 */
	int64_t basis_region;         /* history: the region of that rank's that showed it */
	uint32_t basis_pg;            /* sibling: the group that showed it (id in pm->g) */
	uint32_t basis_votes[2];      /* tie: the evidence for each side (sides' ranks' history) */
	int64_t basis_period;         /* pattern: basis_rank's collectives of the group repeat
				       * every this many ... */
	int64_t basis_from, basis_to; /* ... over its seqs [from, to] ... */
	int64_t basis_at;             /* ... and one period before seq it issued, at basis_at,
				       * what the others issued at seq */
	CD_VEC(int64_t) absent;       /* hang: members that left no trace or dump at all
				       * (rank numbers, from pm->missing) */
	uint8_t flight_by;            /* hang: what showed the waiting ranks still in the
				       * collective (enum cd_flight_by) */
	int32_t follows;              /* hang: the finding that explains it (index in pm->f,
				       * before it: the ranks it waits for stopped there),
				       * -1: none */
};

/* What decided a finding (cd_finding.basis). */
enum cd_basis {
	CD_BY_POS,          /* the majority at the position */
	CD_BY_HISTORY,      /* skip: the odd rank's own earlier step issued what was skipped,
			     * then what it issued instead (every rank stopped there) */
	CD_BY_OWN_STEPS,    /* tie: the ranks' own earlier steps at the same place in the step */
	CD_BY_SIBLING,      /* tie: another group running the same modules at that position */
	CD_BY_LOWEST,       /* tie with no evidence: the lowest rank's side is the reference */
	CD_BY_PATTERN,      /* skip, records without regions (Flight Recorder dumps): the
			     * odd rank's own collectives of the group repeat with a period
			     * that held what was skipped, then what it issued instead
			     * (every rank stopped there) */
};
extern const char *const cd_basis_names[];

/* Was collective c of s still in flight when its Flight Recorder dump was
 * taken?  Told by, in this order: the entry's state where the dump tracks
 * states (NCCL: completed or not); else its "retired" (gloo keeps no
 * states, but Flight Recorder retires an entry when its work ends, by
 * completion or by an error); else the group's pg_status (enqueued but not
 * completed; gloo's completion marks can lag).  Unknown for a collective
 * no dump holds (a trace). */
enum cd_flight { CD_FL_UNKNOWN, CD_FL_IN_FLIGHT, CD_FL_ENDED };
enum cd_flight_by { CD_FLBY_NONE, CD_FLBY_STATE, CD_FLBY_RETIRED, CD_FLBY_PG_STATUS };
extern const char *const cd_flight_by_names[];
enum cd_flight cd_fr_flight(const struct cd_rank_summary *s, const struct cd_crec *c,
			    uint8_t *by);

/* A row of the per-module count table: a (module, direction, collective)
 * whose count differs between ranks over the regions every rank finished. */
struct cd_modrow {
	uint32_t module, coll;        /* ids in pm->g */
	bool bw;
	uint64_t *counts;             /* per rank (index in pm->r) */
	int64_t region;               /* the first region where counts differ, -1 */
};

/* One line of the step summary: regions [first, last] in which the ranks
 * are in the same state, or one region where they differ. */
struct cd_stepline {
	int64_t first, last;
	uint32_t nregions;
	bool uniform;                 /* every rank finished each with the same count */
	uint32_t colls;               /* uniform: collectives per region and rank */
};

struct cd_pm {
	struct cd_rank_summary **all; /* every summary, by rank then path */
	int nall;
	struct cd_rank_summary **r;   /* the ranks compared (a rank each) */
	int n;
	CD_VEC(int) dups;             /* indexes in all of traces left out as duplicates */
	CD_VEC(int64_t) missing;      /* ranks below world_size without any trace */
	int64_t world;
	int64_t start;                /* job start: the earliest t0 (unix ns), 0 unknown */
	int64_t late_ns;
	bool bad, cut;
	CD_VEC(uint32_t) pg_n;        /* per id in g: the runs of that group's members,
				       * UINT32_MAX: unknown */
	CD_VEC(uint32_t) pg_off;      /* ... their offset in pg_runs */
	CD_VEC(struct cd_rrun) pg_runs;
	struct cd_intern g;           /* strings of every rank */
	uint32_t **tr;                /* per rank: summary string id -> id in g */
	CD_VEC(struct cd_finding) f;  /* in report order: the first is the likeliest cause */
	CD_VEC(struct cd_modrow) rows;
	CD_VEC(struct cd_stepline) steps;
	uint64_t visits;              /* rank records looked at while matching (work done) */
};

/* Sort n summaries as pm->all is: by rank (traces without one last), then
 * path. */
void cd_pm_sort(struct cd_rank_summary **v, int n);

/* Build the post-mortem of n summaries (they must outlive pm).  Returns
 * false when out of memory (pm is then still safe to free). */
bool cd_pm_build(struct cd_pm *pm, struct cd_rank_summary *const *sums, int n, int64_t late_ns);
void cd_pm_free(struct cd_pm *pm);
/* Whether the ranks differ: a finding, a duplicate or missing rank, or
 * per-module counts that differ (ranks and export exit 4). */
bool cd_pm_differ(const struct cd_pm *pm);

/* Is group pg (id in g) the world group by some dump (its entries' desc
 * "default_pg")? */
bool cd_pm_world_pg(const struct cd_pm *pm, uint32_t pg);

/* Global id of summary string id of rank i. */
static inline uint32_t cd_pm_gid(const struct cd_pm *pm, int i, uint32_t id)
{
	return id == CD_NOID || id >= pm->r[i]->s.count ? CD_NOID : pm->tr[i][id];
}
static inline const char *cd_pm_str(const struct cd_pm *pm, uint32_t gid)
{
	return gid == CD_NOID ? "" : cd_intern_str(&pm->g, gid);
}

/* Ranks per step state of region `region` for rank i: -1 absent, else the
 * collectives it issued there; *done: it finished the region. */
int64_t cd_pm_rank_region(const struct cd_pm *pm, int i, int64_t region, bool *done);

#endif
