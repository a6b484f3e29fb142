/* The findings in words: the sentence of each finding and the pieces it
 * is made of (ranks, regions, collectives, how a process ended), shared by
 * the post-mortem's printer (ranks_report.c) and the timeline (export.c). */
#include "findings_text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Four or more ranks evenly spaced by a step above 1 but for a few holes
 * (a data-parallel group of a 2-D mesh, one rank of it odd):
 * "2-8186 by 8 except 1234".  Returns false when v[0..n) is not so. */
static bool text_strided(struct cd_out *o, const int64_t *v, uint32_t n)
{
	int64_t g = 0;
	if (n < 4)
		return false;
	for (uint32_t i = 1; i < n; i++)
		g = gcd64(v[i] - v[i - 1], g);
	if (g <= 1)
		return false;
	int64_t holes = (v[n - 1] - v[0]) / g + 1 - (int64_t)n;
	if (holes > 8 || holes * 4 > (int64_t)n)
		return false;
	cd_out_printf(o, "%" PRId64 "-%" PRId64 " by %" PRId64, v[0], v[n - 1], g);
	for (uint32_t i = 1, k = 0; i < n; i++)
		for (int64_t r = v[i - 1] + g; r < v[i]; r += g)
			cd_out_printf(o, "%s%" PRId64, k++ ? "," : " except ", r);
	return true;
}

void cd_text_rank_list(struct cd_out *o, const int64_t *v, uint32_t n)
{
	if (text_strided(o, v, n))
		return;
	for (uint32_t a = 0, b; a < n; a = b + 1) {
		for (b = a; b + 1 < n && v[b + 1] == v[b] + 1; b++)
			;
		cd_out_printf(o, "%s%" PRId64, a ? "," : "", v[a]);
		if (b > a)
			cd_out_printf(o, "-%" PRId64, v[b]);
	}
}

/* "rank 3" or "ranks 0-2,4-7" from indexes into pm->r (sorted by rank). */
void cd_text_ranks(struct cd_out *o, const struct cd_pm *pm, const int *idx, uint32_t n)
{
	int64_t *v = malloc((n ? n : 1) * sizeof *v);
	if (!v)
		return;
	for (uint32_t k = 0; k < n; k++)
		v[k] = pm->r[idx[k]]->rank;
	qsort(v, n, sizeof *v, cmp_i64);
	cd_out_str(o, n == 1 ? "rank " : "ranks ");
	cd_text_rank_list(o, v, n);
	free(v);
}

/* region 3 "step 3" */
void cd_text_region(struct cd_out *o, const struct cd_rank_summary *s, int64_t region)
{
	const char *l = cd_rank_label(s, region);
	if (region < 0) {
		cd_out_str(o, "outside any region");
		return;
	}
	cd_out_printf(o, "region %" PRId64, region);
	if (l)
		cd_out_printf(o, " \"%s\"", l);
}

/* c10d.allreduce_ of 4096 bytes torch.float32 */
void cd_text_payload(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c)
{
	cd_out_str(o, cd_rank_str(s, c->coll));
	if (c->has_bytes)
		cd_out_printf(o, " of %" PRId64 " bytes", c->bytes);
	if (c->dtype != CD_NOID)
		cd_out_printf(o, " %s", cd_rank_str(s, c->dtype));
}

const char *cd_source_names[] = {"trace", "Flight Recorder dump (pickle)",
				  "Flight Recorder dump (JSON)"};

void cd_text_frame(struct cd_out *o, const struct cd_rank_summary *s, uint32_t k)
{
	const struct cd_sframe *f = &s->frames.v[k];
	cd_out_printf(o, "%s at %s:%" PRId64, cd_rank_str(s, f->fn), cd_rank_str(s, f->file),
		      f->line);
}

/* A dump's state of a collective: "completed", "started, not completed",
 * "scheduled, never started"; NULL when the dump tracks none (gloo). */
const char *cd_text_fr_state(const struct cd_rank_summary *s, const struct cd_fr_crec *fc)
{
	if (!s->fr_states)
		return NULL;
	switch (fc->state) {
	case 0: return fc->t_started >= 0 ? "started, not completed" : "scheduled, never started";
	case 1: return "started, not completed";
	case 2: return "completed";
	default: return "in a state this reader does not know";
	}
}

/* Flight Recorder record 6, started, not completed; called from
 * train_step at /job/train.py:110 */
static void fr_facts(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_fr_crec *fc,
		     bool joined)
{
	const char *st = cd_text_fr_state(s, fc);
	cd_out_printf(o, joined ? "its Flight Recorder dump: record %" PRId64
				: "Flight Recorder record %" PRId64, fc->record_id);
	if (st)
		cd_out_printf(o, ", %s", st);
	if (fc->user_frame != UINT32_MAX) {
		cd_out_str(o, "; called from ");
		cd_text_frame(o, s, fc->user_frame);
	}
}

/* from Net.blocks.1 (forward, region 3 "step 3"); for a dump: (Flight
 * Recorder record 6, started, not completed; called from train_step at
 * /job/train.py:110) */
void cd_text_where(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c)
{
	const struct cd_fr_crec *fc = cd_rank_fr(s, c);
	bool joined = s->source == CD_SRC_TRACE;   /* a trace with its dump (cd_fr_join) */
	if (fc && !joined) {
		cd_out_str(o, "(");
		fr_facts(o, s, fc, false);
		cd_out_str(o, ")");
		return;
	}
	cd_out_printf(o, "from %s (%s, ", cd_rank_str(s, c->module), cd_phase_names[c->phase]);
	cd_text_region(o, s, c->region);
	if (fc && fc->record_id >= 0) {
		cd_out_str(o, "; ");
		fr_facts(o, s, fc, true);
	}
	cd_out_str(o, ")");
}

/* "after region 3 "step 3"" or "inside region 4 "step 4"" or nothing:
 * where a process stood when it ended. */
void cd_text_where_end(struct cd_out *o, const struct cd_rank_summary *s)
{
	if (s->in_region) {
		cd_out_str(o, " inside ");
		cd_text_region(o, s, s->open_region);
	} else if (s->rgn.n) {
		cd_out_str(o, " after ");
		cd_text_region(o, s, s->rgn.v[s->rgn.n - 1].region);
	} else {
		cd_out_str(o, " before its first region");
	}
}

/* How the process ended, from its end event (or its absence), with where
 * it stood: "ended by an exception inside region 2 "step 2": RuntimeError:
 * boom". */
void cd_text_death(struct cd_out *o, const struct cd_rank_summary *s, bool where)
{
	switch (s->end) {
	case CD_END_EXCEPTION:
		cd_out_str(o, "ended by an exception");
		if (where)
			cd_text_where_end(o, s);
		cd_out_printf(o, ": %s", cd_rank_str(s, s->end_exc));
		if (s->end_msg != CD_NOID && *cd_rank_str(s, s->end_msg))
			cd_out_printf(o, ": %s", cd_rank_str(s, s->end_msg));
		break;
	case CD_END_EXITED:
		cd_out_printf(o, "exited with status %" PRId64, s->end_code);
		if (where)
			cd_text_where_end(o, s);
		break;
	case CD_END_SIGNAL:
		cd_out_printf(o, "ended by signal %" PRId64, s->end_signal);
		if (s->end_signame != CD_NOID)
			cd_out_printf(o, " (%s)", cd_rank_str(s, s->end_signame));
		if (where)
			cd_text_where_end(o, s);
		break;
	case CD_END_OTHER:
		cd_out_str(o, "ended");
		if (where)
			cd_text_where_end(o, s);
		cd_out_printf(o, ", its end event says how: \"%s\"", cd_rank_str(s, s->end_how));
		break;
	case CD_END_KILLED:
		cd_out_str(o, "cut off");
		if (where)
			cd_text_where_end(o, s);
		cd_out_str(o, ": no end event (killed by a signal it could not see, such as "
			      "SIGKILL, or died in C)");
		break;
	case CD_END_CUT:
		cd_out_str(o, "cut off");
		if (where)
			cd_text_where_end(o, s);
		cd_out_str(o, ": its trace is cut and has no end event (killed while writing)");
		break;
	default:
		cd_out_str(o, cd_end_names[s->end]);
		break;
	}
}

static const struct cd_rank_summary *fsum(const struct cd_pm *pm, int i)
{
	return pm->r[i];
}

static void text_pos(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f)
{
	cd_out_printf(o, "pg %s seq %" PRId64, cd_pm_str(pm, f->pg), f->seq);
	if (f->seq_end > f->seq)
		cd_out_printf(o, "-%" PRId64, f->seq_end);
}

/* What decided a finding the position alone could not (findings.h). */
static void text_basis(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f)
{
	const struct cd_rank_summary *bs = f->basis_rank >= 0 ? fsum(pm, f->basis_rank) : NULL;
	switch (f->basis) {
	case CD_BY_HISTORY:
		cd_out_printf(o, " (every rank stopped there; rank %" PRId64 "'s own ", bs->rank);
		cd_text_region(o, bs, f->basis_region);
		cd_out_printf(o, " issued that collective at this place in the step and, %" PRId64
			      " later, what it issued here)", f->count);
		break;
	case CD_BY_OWN_STEPS:
		cd_out_printf(o, "; a tie, decided by the ranks' own earlier steps: rank %" PRId64
			      " issued the same at this place in ", bs->rank);
		cd_text_region(o, bs, f->basis_region);
		cd_out_str(o, f->odd.n == 1 ? ", the other side did not" : ", the others did not");
		break;
	case CD_BY_SIBLING:
		cd_out_printf(o, "; a tie, decided by process group %s, which ran the same collectives "
			      "up to this place in this step and then issued what ",
			      cd_pm_str(pm, f->basis_pg));
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		cd_out_str(o, " issued");
		break;
	case CD_BY_LOWEST:
		cd_out_str(o, "; a tie that no earlier step or sibling group decides: the side of the "
			      "lowest rank is taken as the reference");
		break;
	case CD_BY_PATTERN:
		cd_out_printf(o, " (every rank stopped there; rank %" PRId64 "'s own collectives of pg "
			      "%s repeat every %" PRId64 " over seq %" PRId64 "-%" PRId64 ", and at seq %"
			      PRId64 " it issued that collective and, %" PRId64 " later, what it issued "
			      "here)", bs->rank, cd_pm_str(pm, f->pg), f->basis_period, f->basis_from,
			      f->basis_to, f->basis_at, f->count);
		break;
	default:
		break;
	}
}

/* "rank 2" or "ranks 2,5": members without any trace or dump */
static void text_absent(struct cd_out *o, const struct cd_finding *f)
{
	cd_out_str(o, f->absent.n == 1 ? "rank " : "ranks ");
	cd_text_rank_list(o, f->absent.v, f->absent.n);
}

/* How the waiting ranks' dumps show them still in the collective. */
static void text_flight(struct cd_out *o, const struct cd_finding *f)
{
	switch (f->flight_by) {
	case CD_FLBY_STATE:
		cd_out_str(o, " (not completed in their dumps)");
		break;
	case CD_FLBY_RETIRED:
		cd_out_str(o, " (not retired in their dumps: gloo keeps no states, but Flight "
			      "Recorder retires an entry when its work ends)");
		break;
	case CD_FLBY_PG_STATUS:
		cd_out_str(o, " (enqueued, not completed, by their dumps' pg_status)");
		break;
	default:
		break;
	}
}

/* The sentence that names the culprit: its rank(s), module and step. */
void cd_finding_headline(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f)
{
	const struct cd_rank_summary *rs = f->ref >= 0 ? fsum(pm, f->ref) : NULL;
	const struct cd_crec *rc = f->ref_rec;
	const struct cd_rank_summary *os = f->odd.n ? fsum(pm, f->odd.v[0]) : NULL;
	const struct cd_crec *oc = f->odd_rec.n ? f->odd_rec.v[0] : NULL;

	cd_out_printf(o, "%s: ", cd_fkind_names[f->kind]);
	switch (f->kind) {
	case CD_FK_EMPTY:
		if (f->trace->rank_from_name)
			cd_out_printf(o, "rank %" PRId64 " (by its file name)", f->trace->rank);
		else
			cd_out_str(o, "a rank");
		cd_out_printf(o, " left no event: its trace %s is %s", f->trace->path,
			      f->trace->cut_first ? "cut before its first line"
						  : "empty");
		break;
	case CD_FK_TYPE:
	case CD_FK_DTYPE:
	case CD_FK_SIZE:
	case CD_FK_DESYNC:
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_str(o, " issued ");
		cd_text_payload(o, os, oc);
		cd_out_str(o, " ");
		cd_text_where(o, os, oc);
		cd_out_str(o, " at ");
		text_pos(o, pm, f);
		if (f->seq_end > f->seq)
			cd_out_str(o, " (first of them)");
		cd_out_str(o, ", where ");
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		cd_out_str(o, " issued ");
		cd_text_payload(o, rs, rc);
		cd_out_str(o, " ");
		cd_text_where(o, rs, rc);
		text_basis(o, pm, f);
		break;
	case CD_FK_SKIP:
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_printf(o, " skipped %" PRId64 " collective%s at ", f->count,
			      f->count == 1 ? "" : "s");
		text_pos(o, pm, f);
		cd_out_str(o, ": ");
		cd_text_payload(o, rs, rc);
		cd_out_str(o, " ");
		cd_text_where(o, rs, rc);
		cd_out_str(o, ", which ");
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		cd_out_printf(o, " issued; its later collectives are shifted by %" PRId64, f->count);
		text_basis(o, pm, f);
		break;
	case CD_FK_EXTRA:
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_printf(o, " issued %" PRId64 " collective%s the others did not at ", f->count,
			      f->count == 1 ? "" : "s");
		text_pos(o, pm, f);
		cd_out_str(o, ": ");
		cd_text_payload(o, os, oc);
		cd_out_str(o, " ");
		cd_text_where(o, os, oc);
		cd_out_str(o, ", before what ");
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		cd_out_str(o, " issued there");
		text_basis(o, pm, f);
		break;
	case CD_FK_HANG:
		if (f->odd.n)
			cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		if (f->odd.n && f->absent.n)
			cd_out_str(o, " and ");
		if (f->absent.n)
			text_absent(o, f);
		cd_out_str(o, " never reached ");
		text_pos(o, pm, f);
		cd_out_str(o, " ");
		cd_text_payload(o, rs, rc);
		cd_out_str(o, " ");
		cd_text_where(o, rs, rc);
		cd_out_str(o, ", which ");
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		cd_out_str(o, f->others.n == 1 ? " was" : " were");
		cd_out_str(o, " waiting in");
		text_flight(o, f);
		if (f->absent.n) {
			cd_out_str(o, "; ");
			text_absent(o, f);
			cd_out_printf(o, ", a member of pg %s%s, left no trace or dump", cd_pm_str(pm, f->pg),
				      cd_pm_world_pg(pm, f->pg) ? " (the world group: desc default_pg)"
								: "");
		}
		break;
	case CD_FK_STRAGGLER:
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_str(o, " reached ");
		text_pos(o, pm, f);
		cd_out_str(o, " ");
		cd_text_payload(o, rs, rc);
		cd_out_str(o, " ");
		cd_text_where(o, rs, rc);
		cd_out_printf(o, " %.1f s after ", (double)f->delay / 1e9);
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		break;
	case CD_FK_DIED:
		/* where each of several stood is in its state line */
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_str(o, " ");
		cd_text_death(o, f->trace, f->odd.n == 1);
		break;
	case CD_FK_GAP:
		cd_out_str(o, "the trace of ");
		cd_text_ranks(o, pm, f->odd.v, f->odd.n);
		cd_out_str(o, " lacks ");
		text_pos(o, pm, f);
		cd_out_str(o, " but holds later ones (events lost; compared without them)");
		break;
	case CD_FK__COUNT:
		break;
	}
	cd_out_str(o, "\n");
}
