/* The post-mortem report of `ranks` (text and JSON) and the flat listing
 * of `colls`.  The analysis is in findings.c and each finding's sentence in
 * findings_text.c; this file only prints. */
#include "../postmortem/ranks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../postmortem/findings.h"
#include "../postmortem/findings_text.h"

/* Text output lists this many findings and unequal steps at most (JSON all). */
#define TEXT_MAX_FINDINGS 20
#define TEXT_MAX_STEPS 12

/* ---- small pieces ---- */

static double secs(const struct cd_pm *pm, int64_t t)
{
	return (double)(t - pm->start) / 1e9;
}

static bool timed(const struct cd_pm *pm, int64_t t)
{
	return pm->start > 0 && t >= 0;
}

static const struct cd_rank_summary *fsum(const struct cd_pm *pm, int i)
{
	return pm->r[i];
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return x < y ? -1 : x > y;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void json_ranks(struct cd_out *o, const struct cd_pm *pm, const int *idx, uint32_t n)
{
	int *v = malloc((n ? n : 1) * sizeof *v);
	cd_pj_begin_arr(o);
	if (v && n) {
		memcpy(v, idx, n * sizeof *v);
		qsort(v, n, sizeof *v, cmp_int);
		for (uint32_t k = 0; k < n; k++)
			cd_pj_int(o, pm->r[v[k]]->rank);
	}
	cd_pj_end(o);
	free(v);
}

static void json_secs(struct cd_out *o, const struct cd_pm *pm, int64_t t)
{
	char buf[48];
	if (!timed(pm, t)) {
		cd_pj_raw(o, "null", 4);
		return;
	}
	int len = snprintf(buf, sizeof buf, "%.6f", secs(pm, t));
	cd_pj_raw(o, buf, (size_t)len);
}

static void json_dur(struct cd_out *o, int64_t ns)
{
	char buf[48];
	if (ns < 0) {
		cd_pj_raw(o, "null", 4);
		return;
	}
	int len = snprintf(buf, sizeof buf, "%.6f", (double)ns / 1e9);
	cd_pj_raw(o, buf, (size_t)len);
}

static void json_region(struct cd_out *o, const struct cd_rank_summary *s, int64_t region)
{
	const char *l = region >= 0 ? cd_rank_label(s, region) : NULL;
	cd_pj_key(o, "region");
	if (region >= 0)
		cd_pj_int(o, region);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "label");
	if (l)
		cd_pj_cstr(o, l);
	else
		cd_pj_raw(o, "null", 4);
}

/* The label of a step: from the first rank that reached the region (a
 * rank whose trace ends before it has none), or NULL. */
static const char *step_label(const struct cd_pm *pm, int64_t region)
{
	for (int i = 0; i < pm->n; i++) {
		const char *l = cd_rank_label(pm->r[i], region);
		if (l)
			return l;
	}
	return NULL;
}

static const char *const fr_state_keys[] = {"scheduled", "started", "completed", "other"};

static const char *const source_keys[] = {"trace", "flight_recorder_pickle",
					   "flight_recorder_json"};

/* A dump's own facts of a collective (nothing for a trace's). */
static void json_fr_fields(struct cd_out *o, const struct cd_rank_summary *s,
			   const struct cd_crec *c)
{
	const struct cd_fr_crec *fc = cd_rank_fr(s, c);
	if (!fc)
		return;
	if (s->source == CD_SRC_TRACE) {
		/* a trace joined with its dump: the dump's facts apart */
		if (fc->record_id < 0)
			return;
		/* module, phase, region: the trace's; what is under
		 * "flight_recorder": the dump's */
		cd_pj_key(o, "source");
		cd_pj_cstr(o, source_keys[CD_SRC_TRACE]);
		cd_pj_key(o, "flight_recorder");
		cd_pj_begin_obj(o);
		cd_pj_key(o, "path");
		cd_pj_cstr(o, s->fr_path ? s->fr_path : "");
		cd_pj_key(o, "op_id");
		cd_pj_int(o, fc->op_id);
	} else {
		cd_pj_key(o, "source");
		cd_pj_cstr(o, source_keys[s->source]);
	}
	cd_pj_key(o, "record_id");
	cd_pj_int(o, fc->record_id);
	cd_pj_key(o, "state");
	if (s->fr_states)
		cd_pj_cstr(o, fr_state_keys[fc->state < 4 ? fc->state : 3]);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "output_bytes");
	if (fc->out_bytes >= 0)
		cd_pj_int(o, fc->out_bytes);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "frames");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < fc->frames_n; k++) {
		const struct cd_sframe *f = &s->frames.v[fc->frames_off + k];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "function");
		cd_pj_cstr(o, cd_rank_str(s, f->fn));
		cd_pj_key(o, "file");
		cd_pj_cstr(o, cd_rank_str(s, f->file));
		cd_pj_key(o, "line");
		cd_pj_int(o, f->line);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	if (s->source == CD_SRC_TRACE)
		cd_pj_end(o);
}

/* pg_status of a dump, as "pg_status": [...] (nothing for a trace). */
static void json_pg_status(struct cd_out *o, const struct cd_rank_summary *s)
{
	if (s->source == CD_SRC_TRACE && !s->fr_path)
		return;
	if (s->fr_path) {
		cd_pj_key(o, "flight_recorder");
		cd_pj_cstr(o, s->fr_path);
	} else {
		cd_pj_key(o, "source");
		cd_pj_cstr(o, source_keys[s->source]);
	}
	cd_pj_key(o, "pg_status");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < s->pg_status.n; k++) {
		const struct cd_pgstat *p = &s->pg_status.v[k];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "pg");
		cd_pj_cstr(o, cd_rank_str(s, p->pg));
		cd_pj_key(o, "last_enqueued");
		cd_pj_int(o, p->enqueued);
		cd_pj_key(o, "last_started");
		cd_pj_int(o, p->started);
		cd_pj_key(o, "last_completed");
		cd_pj_int(o, p->completed);
		cd_pj_end(o);
	}
	cd_pj_end(o);
}

/* The fields of a collective record, with its rank, region and label. */
static void json_crec_fields(struct cd_out *o, const struct cd_rank_summary *s,
			     const struct cd_crec *c, const struct cd_pm *pm)
{
	cd_pj_key(o, "rank");
	cd_pj_int(o, s->rank);
	cd_pj_key(o, "pg");
	cd_pj_cstr(o, cd_rank_str(s, c->pg));
	cd_pj_key(o, "seq");
	cd_pj_int(o, c->seq);
	cd_pj_key(o, "collective");
	cd_pj_cstr(o, cd_rank_str(s, c->coll));
	cd_pj_key(o, "bytes");
	if (c->has_bytes)
		cd_pj_int(o, c->bytes);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "dtype");
	if (c->dtype != CD_NOID)
		cd_pj_cstr(o, cd_rank_str(s, c->dtype));
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "module");
	if (s->source != CD_SRC_TRACE)
		cd_pj_raw(o, "null", 4);
	else
		cd_pj_cstr(o, cd_rank_str(s, c->module));
	cd_pj_key(o, "phase");
	cd_pj_cstr(o, cd_phase_names[c->phase]);
	json_fr_fields(o, s, c);
	json_region(o, s, c->region);
	cd_pj_key(o, "time_s");
	if (pm)
		json_secs(o, pm, c->time);
	else
		cd_pj_raw(o, "null", 4);
}

static const struct cd_crec *last_coll(const struct cd_rank_summary *s)
{
	return s->colls.n ? &s->colls.v[s->colls.n - 1] : NULL;
}

/* How a trace ended, in words (no times: those are shown per group). */
static void text_end(struct cd_out *o, const struct cd_rank_summary *s)
{
	switch (s->end) {
	case CD_END_CLOSED:
		cd_out_str(o, "closed");
		if (s->has_end && s->in_region)
			cd_text_where_end(o, s);
		break;
	case CD_END_ABRUPT:
		cd_out_str(o, "ended abruptly inside ");
		cd_text_region(o, s, s->open_region);
		break;
	case CD_END_CUT:
		cd_out_str(o, "cut (a partial line or frame at its end)");
		if (s->in_region) {
			cd_out_str(o, " inside ");
			cd_text_region(o, s, s->open_region);
		}
		if (s->ends)
			cd_out_str(o, ", no end event: killed while writing");
		break;
	case CD_END_EMPTY:
		cd_out_str(o, s->cut_first ? "empty: cut before its first line" : "empty");
		break;
	case CD_END_ERROR:
		cd_out_printf(o, "error: %s", s->error ? s->error : "unreadable");
		break;
	case CD_END_EXCEPTION:
	case CD_END_EXITED:
	case CD_END_SIGNAL:
	case CD_END_OTHER:
	case CD_END_KILLED:
		cd_text_death(o, s, true);
		break;
	}
}

/* Where a rank was when its trace ends (no times), and how it ended
 * unless its finding says that already (died). */
/* pg_status in words: "pg 0 last enqueued 6, started -, completed 4". */
static void text_pg_status(struct cd_out *o, const struct cd_rank_summary *s)
{
	for (uint32_t k = 0; k < s->pg_status.n; k++) {
		const struct cd_pgstat *p = &s->pg_status.v[k];
		const int64_t v[3] = {p->enqueued, p->started, p->completed};
		static const char *const w[3] = {"last enqueued ", ", started ", ", completed "};
		cd_out_printf(o, "%spg %s ", k ? "; " : "", cd_rank_str(s, p->pg));
		for (int j = 0; j < 3; j++) {
			cd_out_str(o, w[j]);
			if (v[j] >= 0)
				cd_out_printf(o, "%" PRId64, v[j]);
			else
				cd_out_str(o, "-");
		}
	}
}

/* Where a rank's Flight Recorder dump leaves it: its last collective and
 * pg_status. */
static void state_fr(struct cd_out *o, const struct cd_rank_summary *s)
{
	const struct cd_crec *lc = last_coll(s);
	if (s->pg_status.n) {
		cd_out_str(o, "pg_status ");
		text_pg_status(o, s);
		cd_out_str(o, "; ");
	}
	if (lc) {
		cd_out_printf(o, "last in its Flight Recorder dump: pg %s seq %" PRId64 " %s ",
			      cd_rank_str(s, lc->pg), lc->seq, cd_rank_str(s, lc->coll));
		cd_text_where(o, s, lc);
	} else {
		cd_out_str(o, "no collective in its Flight Recorder dump");
	}
}

static void state(struct cd_out *o, const struct cd_rank_summary *s, bool how)
{
	if (s->source != CD_SRC_TRACE && s->end != CD_END_ERROR) {
		state_fr(o, s);
		return;
	}
	if (s->end == CD_END_CLOSED && !s->in_region) {
		cd_out_str(o, "went on to the end of its trace (closed)");
		return;
	}
	cd_out_str(o, "stopped in ");
	if (!s->stack.n)
		cd_out_str(o, "no module");
	for (uint32_t k = 0; k < s->stack.n; k++)
		cd_out_printf(o, "%s%s (%s)", k ? " > " : "", cd_rank_str(s, s->stack.v[k].module),
			      cd_phase_names[s->stack.v[k].phase]);
	const struct cd_crec *lc = last_coll(s);
	if (lc) {
		cd_out_printf(o, "; last collective pg %s seq %" PRId64 " %s ",
			      cd_rank_str(s, lc->pg), lc->seq, cd_rank_str(s, lc->coll));
		cd_text_where(o, s, lc);
	} else {
		cd_out_str(o, "; no collective");
	}
	if (s->has_last_op)
		cd_out_printf(o, "; last op %s in %s", cd_rank_str(s, s->last_op),
			      cd_rank_str(s, s->last_op_module));
	if (s->fr_path && s->pg_status.n) {
		cd_out_str(o, "; per its Flight Recorder dump, pg_status ");
		text_pg_status(o, s);
	}
	if (how) {
		cd_out_str(o, "; trace ");
		text_end(o, s);
	}
}

static void text_state(struct cd_out *o, const struct cd_rank_summary *s)
{
	state(o, s, true);
}

static void text_state_died(struct cd_out *o, const struct cd_rank_summary *s)
{
	state(o, s, false);
}

/* Print ranks grouped by the text fn gives each; times: the range of
 * their last events.  prefix goes before each group line. */
static void text_groups(struct cd_out *o, const struct cd_pm *pm, const int *idx, uint32_t n,
			void (*fn)(struct cd_out *, const struct cd_rank_summary *),
			const char *prefix)
{
	struct cd_intern keys = {0};
	struct grp { CD_VEC(int) r; int64_t lo, hi; } *g = calloc(n ? n : 1, sizeof *g);
	uint32_t ng = 0;
	struct cd_out tmp;

	cd_out_init(&tmp, NULL);
	tmp.hold = true;
	if (!g)
		goto out;
	for (uint32_t k = 0; k < n; k++) {
		const struct cd_rank_summary *s = pm->r[idx[k]];
		tmp.len = 0;
		fn(&tmp, s);
		uint32_t id = cd_intern(&keys, tmp.buf ? tmp.buf : "", (uint32_t)tmp.len);
		if (id == CD_NOID)
			continue;
		if (id >= ng) {
			ng = id + 1;
			g[id].lo = g[id].hi = -1;
		}
		cd_vec_push(&g[id].r, idx[k]);
		if (s->last_time >= 0) {
			if (g[id].lo < 0 || s->last_time < g[id].lo)
				g[id].lo = s->last_time;
			if (s->last_time > g[id].hi)
				g[id].hi = s->last_time;
		}
	}
	for (uint32_t id = 0; id < ng; id++) {
		cd_out_str(o, prefix);
		cd_text_ranks(o, pm, g[id].r.v, g[id].r.n);
		if (g[id].r.n == 1 && pm->n > 8)
			cd_out_printf(o, " (%s)", pm->r[g[id].r.v[0]]->path);
		cd_out_str(o, ": ");
		cd_out_write(o, cd_intern_str(&keys, id), cd_intern_len(&keys, id));
		if (timed(pm, g[id].lo)) {
			if (g[id].lo == g[id].hi)
				cd_out_printf(o, " at %.3f s", secs(pm, g[id].lo));
			else
				cd_out_printf(o, " at %.3f-%.3f s", secs(pm, g[id].lo), secs(pm, g[id].hi));
		}
		cd_out_str(o, "\n");
		cd_vec_free(&g[id].r);
	}
out:
	free(g);
	cd_out_free(&tmp);
	cd_intern_free(&keys);
}

/* ---- the trace list ---- */

/* A dump in the trace list: " PATH: Flight Recorder dump (pickle, version
 * 2.10): 7 collectives, 1 p2p (not compared); ...". */
static void text_fr_line(struct cd_out *o, const struct cd_rank_summary *s)
{
	if (s->end == CD_END_ERROR) {
		cd_out_printf(o, " %s: Flight Recorder dump; error: %s", s->path,
			      s->error ? s->error : "unreadable");
		return;
	}
	cd_out_printf(o, " %s: Flight Recorder dump (%s, version %s): %u collective%s", s->path,
		      s->source == CD_SRC_FR_JSON ? "JSON" : "pickle", cd_rank_str(s, s->fr_version),
		      s->colls.n, s->colls.n == 1 ? "" : "s");
	if (s->fr_p2p)
		cd_out_printf(o, ", %u p2p (not compared)", s->fr_p2p);
	if (!s->fr_states && s->colls.n)
		cd_out_str(o, "; no states (every entry \"scheduled\", as gloo writes them)");
	if (s->pg_conf_broken)
		cd_out_str(o, "; pg_config keyed by \"\" (gloo): group members unknown");
	if (s->rank_from_name)
		cd_out_str(o, "; rank from its file name");
}

static void text_traces(struct cd_out *o, const struct cd_pm *pm)
{
	cd_out_printf(o, "%d trace%s, world size %" PRId64, pm->nall, pm->nall == 1 ? "" : "s",
		      pm->world);
	if (pm->start > 0) {
		time_t t = (time_t)(pm->start / 1000000000);
		struct tm tm;
		char buf[64];
		if (gmtime_r(&t, &tm) && strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm))
			cd_out_printf(o, "; times are seconds from the job's start, %s", buf);
	}
	cd_out_str(o, "\n");
	if (pm->nall <= 8) {
		/* a few: one line each */
		for (int i = 0; i < pm->nall; i++) {
			const struct cd_rank_summary *s = pm->all[i];
			if (s->has_rank)
				cd_out_printf(o, "  rank %-4" PRId64, s->rank);
			else
				cd_out_str(o, "  rank ?   ");
			if (s->fr_joined) {
				cd_out_printf(o, " %s: Flight Recorder dump, joined with this rank's trace "
					      "by group, kind, size and time (%u of its %u collective%s found there)\n",
					      s->path, s->fr_matched, s->colls.n, s->colls.n == 1 ? "" : "s");
				continue;
			}
			if (s->source != CD_SRC_TRACE) {
				text_fr_line(o, s);
				cd_out_str(o, "\n");
				continue;
			}
			cd_out_printf(o, " %s: %" PRIu64 " event%s, %" PRIu64 " region%s, %u collective%s; ",
				      s->path, s->events, s->events == 1 ? "" : "s", s->regions,
				      s->regions == 1 ? "" : "s", s->colls.n, s->colls.n == 1 ? "" : "s");
			text_end(o, s);
			if (s->trim_region > 0)
				cd_out_printf(o, "; bounded: regions up to %" PRId64 " dropped",
					      s->trim_region);
			if (!s->has_rank && s->end != CD_END_EMPTY && s->end != CD_END_ERROR)
				cd_out_str(o, "; no rank in its meta event: left out");
			if (s->end != CD_END_CLOSED && timed(pm, s->last_time))
				cd_out_printf(o, "; last event at %.3f s", secs(pm, s->last_time));
			cd_out_str(o, "\n");
		}
	} else {
		int *idx = malloc((size_t)(pm->n ? pm->n : 1) * sizeof *idx);
		if (idx) {
			for (int i = 0; i < pm->n; i++)
				idx[i] = i;
			text_groups(o, pm, idx, (uint32_t)pm->n, text_end, "  ");
			free(idx);
		}
		for (int i = 0; i < pm->nall; i++) {
			const struct cd_rank_summary *s = pm->all[i];
			if (s->has_rank)
				continue;
			cd_out_str(o, "  rank ?    ");
			cd_out_printf(o, "%s: ", s->path);
			text_end(o, s);
			cd_out_str(o, "\n");
		}
	}
	if (pm->missing.n) {
		cd_out_str(o, "missing ranks: ");
		cd_text_rank_list(o, pm->missing.v, pm->missing.n);
		cd_out_str(o, "\n");
	}
	for (uint32_t i = 0; i < pm->dups.n; i++)
		cd_out_printf(o, "duplicate rank %" PRId64 ": %s (left out)\n",
			      pm->all[pm->dups.v[i]]->rank, pm->all[pm->dups.v[i]]->path);
}

/* ---- findings: what decided them (JSON), the lines under each headline ---- */

static void json_basis(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f)
{
	if (f->basis == CD_BY_POS)
		return;
	const struct cd_rank_summary *bs = f->basis_rank >= 0 ? fsum(pm, f->basis_rank) : NULL;
	cd_pj_key(o, "decided_by");
	cd_pj_begin_obj(o);
	cd_pj_key(o, "basis");
	cd_pj_cstr(o, cd_basis_names[f->basis]);
	cd_pj_key(o, "rank");
	if (bs)
		cd_pj_int(o, bs->rank);
	else
		cd_pj_raw(o, "null", 4);
	if (bs && f->basis_region >= 0) {
		json_region(o, bs, f->basis_region);
	} else {
		cd_pj_key(o, "region");
		cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "label");
		cd_pj_raw(o, "null", 4);
	}
	cd_pj_key(o, "pg");
	if (f->basis_pg != CD_NOID)
		cd_pj_cstr(o, cd_pm_str(pm, f->basis_pg));
	else
		cd_pj_raw(o, "null", 4);
	if (f->basis == CD_BY_OWN_STEPS || f->basis == CD_BY_SIBLING) {
		cd_pj_key(o, "votes");
		cd_pj_begin_arr(o);
		cd_pj_int(o, f->basis_votes[0]);
		cd_pj_int(o, f->basis_votes[1]);
		cd_pj_end(o);
	}
	if (f->basis == CD_BY_PATTERN) {
		cd_pj_key(o, "period");
		cd_pj_int(o, f->basis_period);
		cd_pj_key(o, "seqs");
		cd_pj_begin_arr(o);
		cd_pj_int(o, f->basis_from);
		cd_pj_int(o, f->basis_to);
		cd_pj_end(o);
		cd_pj_key(o, "seq_before");
		cd_pj_int(o, f->basis_at);
	}
	cd_pj_end(o);
}

static void text_finding(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f,
			 uint32_t num)
{
	cd_out_printf(o, "%u. ", num);
	cd_finding_headline(o, pm, f);
	if (f->kind == CD_FK_EMPTY || f->kind == CD_FK_GAP)
		return;
	if (f->others.n && timed(pm, f->time)) {
		cd_out_str(o, "     ");
		cd_text_ranks(o, pm, f->others.v, f->others.n);
		if (f->kind == CD_FK_HANG && f->delay >= 0)
			cd_out_printf(o, ": reached it from %.3f s and waited up to %.3f s, until "
					 "their traces end\n", secs(pm, f->time), (double)f->delay / 1e9);
		else
			cd_out_printf(o, ": reached it from %.3f s\n", secs(pm, f->time));
	}
	if (f->follows >= 0)
		cd_out_printf(o, "     follows from finding %d: the ranks it waits for stopped "
				 "there\n", f->follows + 1);
	if (f->last_rank >= 0 && f->kind != CD_FK_HANG && f->kind != CD_FK_DIED &&
	    timed(pm, f->t_last))
		cd_out_printf(o, "     arrived last: rank %" PRId64 " at %.3f s\n",
			      pm->r[f->last_rank]->rank, secs(pm, f->t_last));
	text_groups(o, pm, f->odd.v, f->odd.n,
		    f->kind == CD_FK_DIED ? text_state_died : text_state, "     ");
	if (f->absent.n) {
		cd_out_str(o, "     ");
		cd_out_str(o, f->absent.n == 1 ? "rank " : "ranks ");
		cd_text_rank_list(o, f->absent.v, f->absent.n);
		cd_out_str(o, ": no trace or dump to read\n");
	}
}

/* ---- findings, as JSON ---- */

static void json_str_or_null(struct cd_out *o, const struct cd_rank_summary *s, uint32_t id)
{
	if (id != CD_NOID)
		cd_pj_cstr(o, cd_rank_str(s, id));
	else
		cd_pj_raw(o, "null", 4);
}

/* "end_event": what the trace's end event said (null: none), and
 * "end_text", the sentence; only for traces that can tell (meta "ends" or
 * an end event), so older reports keep their keys. */
static void json_end_event(struct cd_out *o, const struct cd_pm *pm,
			   const struct cd_rank_summary *s)
{
	if (!s->ends && !s->has_end)
		return;
	cd_pj_key(o, "ends");
	cd_pj_bool(o, s->ends);
	cd_pj_key(o, "died");
	cd_pj_bool(o, cd_rank_died(s));
	cd_pj_key(o, "end_text");
	struct cd_out tmp;
	cd_out_init(&tmp, NULL);
	tmp.hold = true;
	text_end(&tmp, s);
	cd_pj_str(o, tmp.buf ? tmp.buf : "", tmp.len);
	cd_out_free(&tmp);
	cd_pj_key(o, "end_event");
	if (!s->has_end) {
		cd_pj_raw(o, "null", 4);
		return;
	}
	cd_pj_begin_obj(o);
	cd_pj_key(o, "how");
	json_str_or_null(o, s, s->end_how);
	cd_pj_key(o, "exc");
	json_str_or_null(o, s, s->end_exc);
	cd_pj_key(o, "msg");
	json_str_or_null(o, s, s->end_msg);
	cd_pj_key(o, "code");
	if (s->has_code)
		cd_pj_int(o, s->end_code);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "signal");
	if (s->end_signal)
		cd_pj_int(o, s->end_signal);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "signal_name");
	json_str_or_null(o, s, s->end_signame);
	cd_pj_key(o, "line");
	cd_pj_int(o, s->end_line);
	cd_pj_key(o, "time_s");
	json_secs(o, pm, s->end_time);
	cd_pj_end(o);
}

static void json_state(struct cd_out *o, const struct cd_pm *pm, const struct cd_rank_summary *s)
{
	cd_pj_begin_obj(o);
	cd_pj_key(o, "rank");
	cd_pj_int(o, s->rank);
	cd_pj_key(o, "end");
	cd_pj_cstr(o, cd_end_names[s->end]);
	cd_pj_key(o, "last_event_s");
	json_secs(o, pm, s->last_time);
	json_end_event(o, pm, s);
	json_region(o, s, s->in_region ? s->open_region : -1);
	json_pg_status(o, s);
	cd_pj_key(o, "stack");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < s->stack.n; k++) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "module");
		cd_pj_cstr(o, cd_rank_str(s, s->stack.v[k].module));
		cd_pj_key(o, "phase");
		cd_pj_cstr(o, cd_phase_names[s->stack.v[k].phase]);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "last_collective");
	const struct cd_crec *lc = last_coll(s);
	if (lc) {
		cd_pj_begin_obj(o);
		json_crec_fields(o, s, lc, pm);
		cd_pj_end(o);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	cd_pj_key(o, "last_op");
	if (s->has_last_op) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "name");
		cd_pj_cstr(o, cd_rank_str(s, s->last_op));
		cd_pj_key(o, "module");
		cd_pj_cstr(o, cd_rank_str(s, s->last_op_module));
		cd_pj_end(o);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	cd_pj_end(o);
}

static void json_finding(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f)
{
	struct cd_out tmp;
	cd_pj_begin_obj(o);
	cd_pj_key(o, "kind");
	cd_pj_cstr(o, cd_fkind_names[f->kind]);
	cd_pj_key(o, "text");
	cd_out_init(&tmp, NULL);
	tmp.hold = true;
	cd_finding_headline(&tmp, pm, f);
	cd_pj_str(o, tmp.buf ? tmp.buf : "", tmp.len ? tmp.len - 1 : 0);
	cd_out_free(&tmp);
	cd_pj_key(o, "ranks");
	if (f->kind == CD_FK_EMPTY) {
		cd_pj_begin_arr(o);
		if (f->trace->rank_from_name)
			cd_pj_int(o, f->trace->rank);
		cd_pj_end(o);
		cd_pj_key(o, "path");
		cd_pj_cstr(o, f->trace->path);
		cd_pj_key(o, "cut");
		cd_pj_bool(o, f->trace->cut_first);
		cd_pj_end(o);
		return;
	}
	if (f->kind == CD_FK_DIED) {
		json_ranks(o, pm, f->odd.v, f->odd.n);
		cd_pj_key(o, "end");
		cd_pj_cstr(o, cd_end_names[f->trace->end]);
		cd_pj_key(o, "times");
		cd_pj_begin_obj(o);
		cd_pj_key(o, "first_death_s");
		json_secs(o, pm, f->time);
		cd_pj_key(o, "last_death_s");
		json_secs(o, pm, f->t_last);
		cd_pj_end(o);
		cd_pj_key(o, "states");
		cd_pj_begin_arr(o);
		for (uint32_t k = 0; k < f->odd.n; k++)
			json_state(o, pm, fsum(pm, f->odd.v[k]));
		cd_pj_end(o);
		cd_pj_end(o);
		return;
	}
	if (f->absent.n) {
		/* the ranks with a trace and those without any, by rank */
		int64_t *v = malloc((f->odd.n + f->absent.n) * sizeof *v);
		uint32_t nv = 0;
		for (uint32_t k = 0; v && k < f->odd.n; k++)
			v[nv++] = pm->r[f->odd.v[k]]->rank;
		for (uint32_t k = 0; v && k < f->absent.n; k++)
			v[nv++] = f->absent.v[k];
		if (v)
			qsort(v, nv, sizeof *v, cmp_i64);
		cd_pj_begin_arr(o);
		for (uint32_t k = 0; k < nv; k++)
			cd_pj_int(o, v[k]);
		cd_pj_end(o);
		free(v);
		cd_pj_key(o, "absent");
		cd_pj_begin_arr(o);
		for (uint32_t k = 0; k < f->absent.n; k++)
			cd_pj_int(o, f->absent.v[k]);
		cd_pj_end(o);
	} else {
		json_ranks(o, pm, f->odd.v, f->odd.n);
	}
	cd_pj_key(o, "others");
	json_ranks(o, pm, f->others.v, f->others.n);
	if (f->kind == CD_FK_HANG && f->flight_by != CD_FLBY_NONE) {
		cd_pj_key(o, "in_flight_by");
		cd_pj_cstr(o, cd_flight_by_names[f->flight_by]);
	}
	if (f->follows >= 0) {
		cd_pj_key(o, "follows");
		cd_pj_int(o, f->follows + 1);
	}
	cd_pj_key(o, "pg");
	cd_pj_cstr(o, cd_pm_str(pm, f->pg));
	cd_pj_key(o, "seq");
	cd_pj_int(o, f->seq);
	cd_pj_key(o, "seq_end");
	cd_pj_int(o, f->seq_end);
	if (f->kind == CD_FK_SKIP || f->kind == CD_FK_EXTRA || f->kind == CD_FK_GAP) {
		cd_pj_key(o, "count");
		cd_pj_int(o, f->count);
	}
	json_basis(o, pm, f);
	/* the step: where the other side issued it (or the odd rank, alone) */
	const struct cd_rank_summary *ss = NULL;
	const struct cd_crec *sc = NULL;
	if (f->ref >= 0 && f->ref_rec) {
		ss = fsum(pm, f->ref);
		sc = f->ref_rec;
	} else if (f->odd.n && f->odd_rec.v[0]) {
		ss = fsum(pm, f->odd.v[0]);
		sc = f->odd_rec.v[0];
	}
	cd_pj_key(o, "step");
	if (sc) {
		cd_pj_begin_obj(o);
		json_region(o, ss, sc->region);
		cd_pj_end(o);
	} else {
		cd_pj_raw(o, "null", 4);
	}
	/* what each side issued there */
	cd_pj_key(o, "modules");
	cd_pj_begin_arr(o);
	if (f->kind != CD_FK_GAP && f->ref >= 0 && f->ref_rec) {
		cd_pj_begin_obj(o);
		cd_pj_key(o, "side");
		cd_pj_cstr(o, "others");
		json_crec_fields(o, fsum(pm, f->ref), f->ref_rec, pm);
		cd_pj_end(o);
	}
	for (uint32_t k = 0; k < f->odd.n; k++)
		if (f->odd_rec.v[k]) {
			cd_pj_begin_obj(o);
			cd_pj_key(o, "side");
			cd_pj_cstr(o, "odd");
			json_crec_fields(o, fsum(pm, f->odd.v[k]), f->odd_rec.v[k], pm);
			cd_pj_end(o);
		}
	cd_pj_end(o);
	cd_pj_key(o, "times");
	cd_pj_begin_obj(o);
	cd_pj_key(o, "first_arrival_s");
	json_secs(o, pm, f->time);
	cd_pj_key(o, "last_arrival_s");
	json_secs(o, pm, f->t_last);
	cd_pj_key(o, "last_rank");
	if (f->last_rank >= 0)
		cd_pj_int(o, pm->r[f->last_rank]->rank);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, f->kind == CD_FK_HANG ? "waited_s" : "delay_s");
	json_dur(o, f->kind == CD_FK_HANG || f->kind == CD_FK_STRAGGLER ? f->delay : -1);
	cd_pj_end(o);
	cd_pj_key(o, "states");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < f->odd.n; k++)
		json_state(o, pm, fsum(pm, f->odd.v[k]));
	cd_pj_end(o);
	cd_pj_end(o);
}

/* ---- steps and modules ---- */

struct rv { int64_t v; int i; };

static int cmp_rv(const void *a, const void *b)
{
	const struct rv *x = a, *y = b;
	if (x->v != y->v)
		return x->v < y->v ? -1 : 1;
	return x->i - y->i;
}

/* a group of equal values: where it starts in the sorted array, and its
 * lowest rank (its first entry) */
struct grpstart { int start, first; };

static int cmp_start(const void *a, const void *b)
{
	const struct grpstart *x = a, *y = b;
	return x->first - y->first;
}

/* Ranks grouped by value: "ranks 0,2-3: V; rank 1: W" or JSON groups. */
static void groups_by_value(struct cd_out *o, const struct cd_pm *pm, struct rv *v, bool json,
			    void (*val)(struct cd_out *, int64_t, bool))
{
	int n = pm->n;
	int *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
	if (!idx)
		return;
	struct grpstart *start = malloc((size_t)(n + 1) * sizeof *start);
	int ng = 0;
	if (!start) {
		free(idx);
		return;
	}
	qsort(v, (size_t)n, sizeof *v, cmp_rv);
	/* groups in the order of their lowest rank */
	for (int a = 0; a < n; a++)
		if (!a || v[a].v != v[a - 1].v)
			start[ng++] = (struct grpstart){a, v[a].i};
	if (ng > 1)
		qsort(start, (size_t)ng, sizeof *start, cmp_start);
	if (json)
		cd_pj_begin_arr(o);
	for (int gi = 0; gi < ng; gi++) {
		int a = start[gi].start, b;
		for (b = a; b < n && v[b].v == v[a].v; b++)
			idx[b - a] = v[b].i;
		if (json) {
			cd_pj_begin_obj(o);
			cd_pj_key(o, "ranks");
			json_ranks(o, pm, idx, (uint32_t)(b - a));
			val(o, v[a].v, true);
			cd_pj_end(o);
		} else {
			cd_out_str(o, gi ? "; " : "");
			cd_text_ranks(o, pm, idx, (uint32_t)(b - a));
			cd_out_str(o, ": ");
			val(o, v[a].v, false);
		}
	}
	if (json)
		cd_pj_end(o);
	free(idx);
	free(start);
}

static void val_count(struct cd_out *o, int64_t v, bool json)
{
	if (json) {
		cd_pj_key(o, "count");
		cd_pj_int(o, v);
	} else {
		cd_out_printf(o, "%" PRId64, v);
	}
}

/* value: -1 absent, else collectives * 2 + done */
static void val_step(struct cd_out *o, int64_t v, bool json)
{
	const char *state = v < 0 ? "absent" : (v & 1) ? "finished" : "open";
	if (json) {
		cd_pj_key(o, "state");
		cd_pj_cstr(o, state);
		cd_pj_key(o, "collectives");
		cd_pj_int(o, v < 0 ? 0 : v / 2);
	} else if (v < 0) {
		cd_out_str(o, "not in their traces");
	} else {
		cd_out_printf(o, "%s, %" PRId64 " collective%s", (v & 1) ? "finished" : "ended inside it",
			      v / 2, v / 2 == 1 ? "" : "s");
	}
}

static void step_values(const struct cd_pm *pm, int64_t region, struct rv *v)
{
	for (int i = 0; i < pm->n; i++) {
		bool done;
		int64_t c = cd_pm_rank_region(pm, i, region, &done);
		v[i].i = i;
		v[i].v = c < 0 ? -1 : c * 2 + done;
	}
}

static void text_steps(struct cd_out *o, const struct cd_pm *pm, struct rv *v)
{
	uint32_t shown = 0, odd = 0;
	if (!pm->steps.n || !pm->n)
		return;
	cd_out_str(o, "\nSTEPS\n");
	for (uint32_t k = 0; k < pm->steps.n; k++) {
		const struct cd_stepline *l = &pm->steps.v[k];
		if (!l->uniform && ++odd > TEXT_MAX_STEPS)
			continue;
		shown++;
		cd_out_str(o, "  ");
		if (l->nregions > 1) {
			cd_out_printf(o, "regions %" PRId64 "-%" PRId64 " (%u)", l->first, l->last,
				      l->nregions);
		} else {
			const char *lb = step_label(pm, l->first);
			cd_out_printf(o, "region %" PRId64, l->first);
			if (lb)
				cd_out_printf(o, " \"%s\"", lb);
		}
		if (l->uniform) {
			cd_out_printf(o, ": every rank finished, %u collective%s each\n", l->colls,
				      l->colls == 1 ? "" : "s");
			continue;
		}
		cd_out_str(o, ": ");
		step_values(pm, l->first, v);
		groups_by_value(o, pm, v, false, val_step);
		cd_out_str(o, "\n");
	}
	if (odd > TEXT_MAX_STEPS)
		cd_out_printf(o, "  ... %u more region%s where ranks differ (see --json)\n",
			      odd - TEXT_MAX_STEPS, odd - TEXT_MAX_STEPS == 1 ? "" : "s");
}

static void text_modules(struct cd_out *o, const struct cd_pm *pm, struct rv *v)
{
	if (!pm->rows.n)
		return;
	cd_out_str(o, "\nMODULES WHERE RANKS DIFFER (collective counts over the regions every rank "
		      "finished)\n");
	for (uint32_t r = 0; r < pm->rows.n; r++) {
		const struct cd_modrow *row = &pm->rows.v[r];
		cd_out_printf(o, "  %s %s %s", cd_pm_str(pm, row->module),
			      row->bw ? "backward" : "forward", cd_pm_str(pm, row->coll));
		if (row->region >= 0) {
			cd_out_str(o, " (first differs in ");
			cd_text_region(o, pm->r[0], row->region);
			cd_out_str(o, ")");
		}
		cd_out_str(o, ": ");
		for (int i = 0; i < pm->n; i++) {
			v[i].i = i;
			v[i].v = (int64_t)row->counts[i];
		}
		groups_by_value(o, pm, v, false, val_count);
		cd_out_str(o, "\n");
	}
}

static void json_report(struct cd_out *o, const struct cd_pm *pm, bool agree, struct rv *v)
{
	cd_pj_begin_obj(o);
	cd_pj_key(o, "world_size");
	cd_pj_int(o, pm->world);
	cd_pj_key(o, "job_start_ns");
	cd_pj_int(o, pm->start);
	cd_pj_key(o, "late_s");
	json_dur(o, pm->late_ns);
	cd_pj_key(o, "traces");
	cd_pj_begin_arr(o);
	for (int i = 0; i < pm->nall; i++) {
		const struct cd_rank_summary *s = pm->all[i];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "rank");
		if (s->has_rank || s->rank_from_name)
			cd_pj_int(o, s->rank);
		else
			cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "path");
		cd_pj_cstr(o, s->path);
		cd_pj_key(o, "end");
		cd_pj_cstr(o, cd_end_names[s->end]);
		cd_pj_key(o, "last_event_s");
		json_secs(o, pm, s->last_time);
		cd_pj_key(o, "cut");
		cd_pj_bool(o, s->cut);
		if (s->error) {
			cd_pj_key(o, "error");
			cd_pj_cstr(o, s->error);
		}
		cd_pj_key(o, "events");
		cd_pj_int(o, (int64_t)s->events);
		cd_pj_key(o, "regions");
		cd_pj_int(o, (int64_t)s->regions);
		cd_pj_key(o, "collectives");
		cd_pj_int(o, s->colls.n);
		json_pg_status(o, s);
		json_end_event(o, pm, s);
		json_region(o, s, s->in_region ? s->open_region : -1);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "missing_ranks");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < pm->missing.n; i++)
		cd_pj_int(o, pm->missing.v[i]);
	cd_pj_end(o);
	cd_pj_key(o, "duplicate_ranks");
	cd_pj_begin_arr(o);
	for (uint32_t i = 0; i < pm->dups.n; i++) {
		const struct cd_rank_summary *s = pm->all[pm->dups.v[i]];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "rank");
		cd_pj_int(o, s->rank);
		cd_pj_key(o, "paths");
		cd_pj_begin_arr(o);
		for (int k = 0; k < pm->n; k++)
			if (pm->r[k]->rank == s->rank)
				cd_pj_cstr(o, pm->r[k]->path);   /* the one used */
		cd_pj_cstr(o, s->path);                          /* the one left out */
		cd_pj_end(o);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "agree");
	cd_pj_bool(o, agree);
	cd_pj_key(o, "findings");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < pm->f.n; k++)
		json_finding(o, pm, &pm->f.v[k]);
	cd_pj_end(o);
	cd_pj_key(o, "steps");
	cd_pj_begin_arr(o);
	for (uint32_t k = 0; k < pm->steps.n; k++) {
		const struct cd_stepline *l = &pm->steps.v[k];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "first_region");
		cd_pj_int(o, l->first);
		cd_pj_key(o, "last_region");
		cd_pj_int(o, l->last);
		cd_pj_key(o, "regions");
		cd_pj_int(o, l->nregions);
		cd_pj_key(o, "label");
		const char *lb = l->nregions == 1 ? step_label(pm, l->first) : NULL;
		if (lb)
			cd_pj_cstr(o, lb);
		else
			cd_pj_raw(o, "null", 4);
		cd_pj_key(o, "uniform");
		cd_pj_bool(o, l->uniform);
		cd_pj_key(o, "groups");
		if (l->uniform) {
			cd_pj_begin_arr(o);
			cd_pj_begin_obj(o);
			cd_pj_key(o, "ranks");
			cd_pj_begin_arr(o);
			for (int i = 0; i < pm->n; i++)
				cd_pj_int(o, pm->r[i]->rank);
			cd_pj_end(o);
			val_step(o, (int64_t)l->colls * 2 + 1, true);
			cd_pj_end(o);
			cd_pj_end(o);
		} else {
			step_values(pm, l->first, v);
			groups_by_value(o, pm, v, true, val_step);
		}
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_key(o, "modules");
	cd_pj_begin_arr(o);
	for (uint32_t r = 0; r < pm->rows.n; r++) {
		const struct cd_modrow *row = &pm->rows.v[r];
		cd_pj_begin_obj(o);
		cd_pj_key(o, "module");
		cd_pj_cstr(o, cd_pm_str(pm, row->module));
		cd_pj_key(o, "direction");
		cd_pj_cstr(o, row->bw ? "backward" : "forward");
		cd_pj_key(o, "collective");
		cd_pj_cstr(o, cd_pm_str(pm, row->coll));
		json_region(o, pm->r[0], row->region);
		cd_pj_key(o, "counts");
		cd_pj_begin_obj(o);
		for (int k = 0; k < pm->n; k++) {
			char key[24];
			snprintf(key, sizeof key, "%" PRId64, pm->r[k]->rank);
			cd_pj_key(o, key);
			cd_pj_int(o, (int64_t)row->counts[k]);
		}
		cd_pj_end(o);
		cd_pj_key(o, "groups");
		for (int i = 0; i < pm->n; i++) {
			v[i].i = i;
			v[i].v = (int64_t)row->counts[i];
		}
		groups_by_value(o, pm, v, true, val_count);
		cd_pj_end(o);
	}
	cd_pj_end(o);
	cd_pj_end(o);
	cd_out_write(o, "\n", 1);
}

int cd_ranks_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n,
		    struct cd_ranks_opts *opts)
{
	struct cd_pm pm;
	int outcome;
	struct rv *v = NULL;

	if (!cd_pm_build(&pm, sums, n, opts->late_ns) ||
	    !(v = malloc((size_t)(pm.n ? pm.n : 1) * sizeof *v))) {
		cd_pm_free(&pm);
		return CD_RANKS_BAD;
	}
	bool differ = cd_pm_differ(&pm);
	/* empty traces alone: nothing to compare */
	if (pm.n == 0 && !pm.bad)
		outcome = pm.cut ? CD_RANKS_CUT : CD_RANKS_BAD;
	else
		outcome = pm.bad ? CD_RANKS_BAD : differ ? CD_RANKS_DIFFER
				  : pm.cut ? CD_RANKS_CUT : CD_RANKS_AGREE;
	bool agree = !differ && !pm.bad;
	if (opts->json) {
		json_report(o, &pm, agree, v);
	} else {
		text_traces(o, &pm);
		if (pm.f.n) {
			cd_out_printf(o, "\nFINDINGS: %u (the first is the likeliest cause)\n", pm.f.n);
			for (uint32_t k = 0; k < pm.f.n && k < TEXT_MAX_FINDINGS; k++)
				text_finding(o, &pm, &pm.f.v[k], k + 1);
			if (pm.f.n > TEXT_MAX_FINDINGS)
				cd_out_printf(o, "... %u more finding%s (see --json)\n",
					      pm.f.n - TEXT_MAX_FINDINGS,
					      pm.f.n - TEXT_MAX_FINDINGS == 1 ? "" : "s");
		}
		text_steps(o, &pm, v);
		text_modules(o, &pm, v);
		if (agree)
			cd_out_printf(o, "\nall ranks agree%s\n",
				      pm.cut ? " on what their traces hold (some are cut)" : "");
	}
	free(v);
	opts->visits = pm.visits;
	cd_pm_free(&pm);
	return outcome;
}

/* ---- colls: every collective, one per line ---- */

/* The members of a JSON object in Python's layout (p[0..n)), compact and
 * without its braces. */
static void colls_compact(struct cd_out *o, const char *p, size_t n)
{
	bool in = false, esc = false;
	while (n && (p[n - 1] == '\n' || p[n - 1] == ' '))
		n--;
	if (n < 2)
		return;
	for (size_t i = 1; i + 1 < n; i++) {
		char c = p[i];
		if (in) {
			if (esc)
				esc = false;
			else if (c == '\\')
				esc = true;
			else if (c == '"')
				in = false;
		} else if (c == '"') {
			in = true;
		} else if (c == ' ' || c == '\n') {
			continue;
		}
		cd_out_write(o, &c, 1);
	}
}

void cd_colls_report(struct cd_out *o, struct cd_rank_summary *const *sums, int n, bool json)
{
	struct cd_pm pm;
	if (!cd_pm_build(&pm, sums, n, 0)) {
		cd_pm_free(&pm);
		return;
	}
	if (!json)
		cd_out_str(o, "rank pg seq collective bytes dtype module phase region label time_s\n");
	for (int i = 0; i < pm.n; i++) {
		const struct cd_rank_summary *s = pm.r[i];
		for (uint32_t k = 0; k < s->colls.n; k++) {
			const struct cd_crec *c = &s->colls.v[k];
			const struct cd_fr_crec *fr_rec = cd_rank_fr(s, c);
			if (json) {
				/* one compact document per line, for jq */
				cd_out_printf(o, "{\"rank\":%" PRId64 ",\"pg\":", s->rank);
				cd_pj_escape(o, cd_rank_str(s, c->pg), strlen(cd_rank_str(s, c->pg)));
				cd_out_printf(o, ",\"seq\":%" PRId64 ",\"collective\":", c->seq);
				cd_pj_escape(o, cd_rank_str(s, c->coll), strlen(cd_rank_str(s, c->coll)));
				if (c->has_bytes)
					cd_out_printf(o, ",\"bytes\":%" PRId64, c->bytes);
				else
					cd_out_str(o, ",\"bytes\":null");
				cd_out_str(o, ",\"dtype\":");
				if (c->dtype != CD_NOID)
					cd_pj_escape(o, cd_rank_str(s, c->dtype),
						     strlen(cd_rank_str(s, c->dtype)));
				else
					cd_out_str(o, "null");
				cd_out_str(o, ",\"module\":");
				if (s->source != CD_SRC_TRACE)
					cd_out_str(o, "null");
				else
					cd_pj_escape(o, cd_rank_str(s, c->module),
						     strlen(cd_rank_str(s, c->module)));
				cd_out_printf(o, ",\"phase\":\"%s\",\"region\":", cd_phase_names[c->phase]);
				const char *l = c->region >= 0 ? cd_rank_label(s, c->region) : NULL;
				if (c->region >= 0)
					cd_out_printf(o, "%" PRId64, c->region);
				else
					cd_out_str(o, "null");
				cd_out_str(o, ",\"label\":");
				if (l)
					cd_pj_escape(o, l, strlen(l));
				else
					cd_out_str(o, "null");
				if (timed(&pm, c->time))
					cd_out_printf(o, ",\"time_s\":%.6f", secs(&pm, c->time));
				else
					cd_out_str(o, ",\"time_s\":null");
				if (fr_rec && (s->source != CD_SRC_TRACE || fr_rec->record_id >= 0)) {
					struct cd_out t;
					cd_out_init(&t, NULL);
					t.hold = true;
					cd_pj_begin_obj(&t);
					json_fr_fields(&t, s, c);
					cd_pj_end(&t);
					/* the same keys, compact: {"source": ...} -> ,"source":... */
					cd_out_str(o, ",");
					colls_compact(o, t.buf, t.len);
					cd_out_free(&t);
				}
				cd_out_str(o, "}\n");
				continue;
			}
			const char *l = c->region >= 0 ? cd_rank_label(s, c->region) : NULL;
			cd_out_printf(o, "%" PRId64 " %s %" PRId64 " %s ", s->rank, cd_rank_str(s, c->pg),
				      c->seq, cd_rank_str(s, c->coll));
			if (c->has_bytes)
				cd_out_printf(o, "%" PRId64, c->bytes);
			else
				cd_out_str(o, "-");
			cd_out_printf(o, " %s %s %s ", c->dtype != CD_NOID ? cd_rank_str(s, c->dtype) : "-",
				      s->source != CD_SRC_TRACE ? "-" : cd_rank_str(s, c->module), cd_phase_names[c->phase]);
			if (c->region >= 0)
				cd_out_printf(o, "%" PRId64, c->region);
			else
				cd_out_str(o, "-");
			if (l) {
				cd_out_str(o, " ");
				cd_pj_escape(o, l, strlen(l));
			} else {
				cd_out_str(o, " -");
			}
			if (timed(&pm, c->time))
				cd_out_printf(o, " %.6f\n", secs(&pm, c->time));
			else
				cd_out_str(o, " -\n");
		}
	}
	cd_pm_free(&pm);
}

