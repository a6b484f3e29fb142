/* A Flight Recorder dump joined with the trace of its rank (frdump.h,
 * cd_fr_join).
 *
 * Which of the dump's records is which of the trace's collectives?  The
 * trace numbers the collectives of a group that the recorder saw: those in
 * its regions, from its start.  The dump numbers every one the group ran
 * (op_id).  The two agree only when the recorder saw them all; a job that
 * built DistributedDataParallel before its first region, or reduced a
 * metric between two, ran collectives the trace does not have, and its seq
 * then names an earlier record.  So each collective is matched with the
 * record at its seq plus its group's shift (0 at first) only when that
 * record is of the same kind (family) and size and was created at the same
 * moment (same_record); else the shift moves on to the later record that
 * matches the collective and the most of the JOIN_WINDOW collectives after
 * it (realign).  A collective with no such record stays unjoined: a record
 * is joined only where kind and size agree, and times where both sides
 * have them.
 */
#include "frdump.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Collectives after the one being realigned that must match too, at most. */
#define JOIN_WINDOW 4
/* A record is created within this much of the trace's time of its
 * collective (both unix ns), after the clocks' difference measured at the
 * group's last match: the recorder takes its time just before the call
 * that makes the record, in the same thread. */
#define JOIN_TOL_NS 100000000LL
/* ... and within this much it is taken as the record on its own. */
#define JOIN_TIGHT_NS 5000000LL
/* Records looked at for one collective at most, where times do not bound
 * the search (a trace or dump without them). */
#define JOIN_SCAN 65536u

/* The family of a collective's name, to compare a trace's operator with a
 * dump's profiling name: its last part (after '.' or ':', not "default"),
 * without "_base", "_into_tensor", "_coalesced", "_single", "_tensor" and
 * without underscores.  "c10d._allgather_base_", "nccl:all_gather" and
 * "c10d_functional.all_gather_into_tensor" are all "allgather";
 * "c10d.alltoall_base_" and "gloo:all_to_all" "alltoall". */
static void family(const char *name, char *out, size_t cap)
{
	static const char *const drop[] = {"_base", "_into_tensor", "_coalesced", "_single",
					   "_tensor"};
	const char *p = name, *end = name + strlen(name);
	if (end - name > 8 && strcmp(end - 8, ".default") == 0)
		end -= 8;
	for (const char *q = name; q < end; q++)
		if (*q == '.' || *q == ':')
			p = q + 1;
	size_t n = 0;
	while (p < end && n + 1 < cap) {
		size_t k = 0;
		for (; k < sizeof drop / sizeof drop[0]; k++) {
			size_t l = strlen(drop[k]);
			if ((size_t)(end - p) >= l && memcmp(p, drop[k], l) == 0 &&
			    (p + l == end || p[l] == '_'))
				break;
		}
		if (k < sizeof drop / sizeof drop[0]) {
			p += strlen(drop[k]);
			continue;
		}
		if (*p != '_')
			out[n++] = *p;
		p++;
	}
	out[n] = '\0';
}

/* One group's collectives on both sides and where the matching stands. */
struct align {
	const struct cd_rank_summary *t, *d;
	const uint32_t *tc;    /* the trace's collectives of the group, in order */
	uint32_t nt;
	const uint32_t *dc;    /* the dump's records of the group, by key */
	uint32_t nd;
	uint32_t next;         /* records before this one are taken or passed */
	int64_t shift;         /* record key = trace seq + shift */
	int64_t skew;          /* record time - trace time at the last match */
	bool have_skew;
};

static int64_t key_of(const struct cd_rank_summary *d, uint32_t k)
{
	return d->fr.v[k].op_id > 0 ? d->fr.v[k].op_id : d->colls.v[k].seq;
}

/* Record k's time less trace collective i's, less the skew at the last
 * match, in *diff; false when either time is unknown. */
static bool time_diff(const struct align *a, uint32_t i, uint32_t k, int64_t *diff)
{
	const struct cd_crec *c = &a->t->colls.v[i], *e = &a->d->colls.v[k];
	if (c->time < 0 || e->time <= 0)
		return false;
	*diff = e->time - c->time - (a->have_skew ? a->skew : 0);
	return true;
}

/* Is dump record k the trace's collective i? */
static bool same_record(const struct align *a, uint32_t i, uint32_t k)
{
	const struct cd_crec *c = &a->t->colls.v[i], *e = &a->d->colls.v[k];
	int64_t diff;
	if (c->has_bytes && e->has_bytes && c->bytes != e->bytes)
		return false;
	if (time_diff(a, i, k, &diff) && (diff > JOIN_TOL_NS || diff < -JOIN_TOL_NS))
		return false;
	char fc[64], fe[64];
	family(cd_rank_str(a->t, c->coll), fc, sizeof fc);
	family(cd_rank_str(a->d, e->coll), fe, sizeof fe);
	return strcmp(fc, fe) == 0;
}

/* The position in a->dc, at or after a->next, of the record with key, or
 * UINT32_MAX. */
static uint32_t find_key(const struct align *a, int64_t key)
{
	uint32_t lo = a->next, hi = a->nd;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (key_of(a->d, a->dc[mid]) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < a->nd && key_of(a->d, a->dc[lo]) == key ? lo : UINT32_MAX;
}

/* How many of collectives x .. x+JOIN_WINDOW match with shift (x itself
 * at dump position p). */
static int run_from(struct align *a, uint32_t x, uint32_t p, int64_t shift)
{
	int run = 1;
	uint32_t saved = a->next;
	a->next = p + 1;
	for (uint32_t y = x + 1; y < a->nt && y <= x + JOIN_WINDOW; y++) {
		uint32_t q = find_key(a, a->t->colls.v[a->tc[y]].seq + shift);
		if (q == UINT32_MAX || !same_record(a, a->tc[y], a->dc[q]))
			break;
		run++;
		a->next = q + 1;
	}
	a->next = saved;
	return run;
}

/* The dump position of collective x's record, found by moving the shift
 * on, or UINT32_MAX.  Of the later records that match it, the one whose
 * shift the most collectives after it agree with (then the one closest in
 * time); taken when at least one collective after x agrees too, or x is
 * the last, or its record was made within JOIN_TIGHT_NS of it: a lone
 * match of kind and size proves little (a ring that dropped a group's
 * first records, repeated collectives of one size).  Without times, several
 * records alike leave x unjoined: nothing tells which is its. */
static uint32_t realign(struct align *a, uint32_t x)
{
	uint32_t best = UINT32_MAX, ties = 0;
	int best_run = 0, want = (int)(a->nt - x > JOIN_WINDOW ? JOIN_WINDOW + 1 : a->nt - x);
	int64_t best_off = INT64_MAX;
	for (uint32_t p = a->next, scanned = 0; p < a->nd && scanned < JOIN_SCAN; p++, scanned++) {
		int64_t diff, off = INT64_MAX;   /* |diff|, INT64_MAX: no times */
		if (time_diff(a, a->tc[x], a->dc[p], &diff)) {
			if (diff > JOIN_TOL_NS)
				break;   /* records come in time order: the rest are later still */
			off = diff < 0 ? -diff : diff;
		}
		if (!same_record(a, a->tc[x], a->dc[p]))
			continue;
		int64_t shift = key_of(a->d, a->dc[p]) - a->t->colls.v[a->tc[x]].seq;
		int run = run_from(a, x, p, shift);
		if (run > best_run || (run == best_run && off < best_off)) {
			best_run = run;
			best_off = off;
			best = p;
			ties = 1;
		} else if (run == best_run && off == best_off) {
			ties++;
		}
		if (ties > 1 && best_run == want && best_off == INT64_MAX)
			break;   /* no time to tell them apart, and none can do better */
	}
	if (best == UINT32_MAX || (ties > 1 && best_off == INT64_MAX))
		return UINT32_MAX;   /* none, or several alike (repeated collectives, no times) */
	if (best_run < 2 && x + 1 < a->nt && best_off > JOIN_TIGHT_NS)
		return UINT32_MAX;
	return best;
}

/* match[i] for each of the group's trace collectives: its dump index or
 * UINT32_MAX. */
static void align_group(struct align *a, uint32_t *match)
{
	for (uint32_t x = 0; x < a->nt; x++) {
		uint32_t i = a->tc[x];
		int64_t seq = a->t->colls.v[i].seq;
		uint32_t p = find_key(a, seq + a->shift);
		if (p == UINT32_MAX || !same_record(a, i, a->dc[p]))
			p = realign(a, x);
		if (p == UINT32_MAX)
			continue;
		uint32_t k = a->dc[p];
		match[i] = k;
		a->shift = key_of(a->d, k) - seq;
		a->next = p + 1;
		int64_t diff;
		if (time_diff(a, i, k, &diff)) {
			a->skew += diff;   /* diff is against the skew before: now the skew itself */
			a->have_skew = true;
		}
	}
}

struct keyed {
	int64_t key;
	uint32_t k;
};

static int by_key(const void *x, const void *y)
{
	const struct keyed *a = x, *b = y;
	if (a->key != b->key)
		return (a->key > b->key) - (a->key < b->key);
	return (a->k > b->k) - (a->k < b->k);
}

/* match[i]: the dump index of trace collective i's record, or UINT32_MAX;
 * group by group.  False when out of memory. */
static bool match_records(const struct cd_rank_summary *t, const struct cd_rank_summary *d,
			  uint32_t *match)
{
	uint32_t *tc = malloc(((size_t)t->colls.n + 1) * sizeof *tc);
	uint32_t *dc = malloc(((size_t)d->colls.n + 1) * sizeof *dc);
	struct keyed *kd = malloc(((size_t)d->colls.n + 1) * sizeof *kd);
	bool *done = calloc((size_t)t->colls.n + 1, sizeof *done);
	if (!tc || !dc || !kd || !done) {
		free(tc), free(dc), free(kd), free(done);
		return false;
	}
	for (uint32_t i = 0; i < t->colls.n; i++)
		match[i] = UINT32_MAX;
	for (uint32_t i = 0; i < t->colls.n; i++) {
		if (done[i])
			continue;
		const char *pg = cd_rank_str(t, t->colls.v[i].pg);
		struct align a = {.t = t, .d = d, .tc = tc, .dc = dc};
		for (uint32_t j = i; j < t->colls.n; j++)
			if (!done[j] && strcmp(cd_rank_str(t, t->colls.v[j].pg), pg) == 0) {
				done[j] = true;
				tc[a.nt++] = j;
			}
		for (uint32_t k = 0; k < d->colls.n; k++)
			if (strcmp(cd_rank_str(d, d->colls.v[k].pg), pg) == 0)
				kd[a.nd++] = (struct keyed){key_of(d, k), k};
		qsort(kd, a.nd, sizeof *kd, by_key);
		for (uint32_t k = 0; k < a.nd; k++)
			dc[k] = kd[k].k;
		align_group(&a, match);
	}
	free(tc), free(dc), free(kd), free(done);
	return true;
}

static bool join_one(struct cd_rank_summary *t, struct cd_rank_summary *d)
{
	CD_VEC(struct cd_fr_crec) fr = {0};
	CD_VEC(struct cd_sframe) frames = {0};
	CD_VEC(struct cd_pgstat) pgs = {0};
	uint32_t matched = 0;
	uint32_t *match = malloc(((size_t)t->colls.n + 1) * sizeof *match);

	if (!match || !match_records(t, d, match))
		goto nomem;
	for (uint32_t i = 0; i < t->colls.n; i++) {
		struct cd_fr_crec fc = {.record_id = -1, .op_id = -1, .t_started = -1, .t_completed = -1,
					.out_bytes = -1, .user_frame = UINT32_MAX,
					.state = CD_FR_STATE_OTHER, .retired = -1};
		uint32_t k = match[i];
		if (k != UINT32_MAX) {
			/* the dump's record, its frames among the trace's strings */
			fc = d->fr.v[k];
			fc.frames_off = frames.n;
			fc.user_frame = UINT32_MAX;
			for (uint32_t j = 0; j < d->fr.v[k].frames_n; j++) {
				const struct cd_sframe *sf = &d->frames.v[d->fr.v[k].frames_off + j];
				const char *fn = cd_rank_str(d, sf->fn), *file = cd_rank_str(d, sf->file);
				struct cd_sframe nf = {cd_intern(&t->s, fn, (uint32_t)strlen(fn)),
						       cd_intern(&t->s, file, (uint32_t)strlen(file)),
						       sf->line};
				if (nf.fn == CD_NOID || nf.file == CD_NOID || !cd_vec_push(&frames, nf))
					goto nomem;
				if (d->fr.v[k].user_frame == d->fr.v[k].frames_off + j)
					fc.user_frame = frames.n - 1;
			}
			matched++;
		}
		if (!cd_vec_push(&fr, fc))
			goto nomem;
	}
	for (uint32_t k = 0; k < d->pg_status.n; k++) {
		struct cd_pgstat p = d->pg_status.v[k];
		const char *pg = cd_rank_str(d, p.pg);
		p.pg = cd_intern(&t->s, pg, (uint32_t)strlen(pg));
		if (p.pg == CD_NOID || !cd_vec_push(&pgs, p))
			goto nomem;
	}
	if (!(t->fr_path = strdup(d->path)))
		goto nomem;
	free(match);
	cd_vec_free(&t->fr);
	cd_vec_free(&t->frames);
	cd_vec_free(&t->pg_status);
	t->fr.v = fr.v, t->fr.n = fr.n, t->fr.cap = fr.cap;
	t->frames.v = frames.v, t->frames.n = frames.n, t->frames.cap = frames.cap;
	t->pg_status.v = pgs.v, t->pg_status.n = pgs.n, t->pg_status.cap = pgs.cap;
	t->fr_states = d->fr_states;
	t->fr_matched = d->fr_matched = matched;
	d->fr_joined = true;
	return true;
nomem:
	free(match);
	cd_vec_free(&fr);
	cd_vec_free(&frames);
	cd_vec_free(&pgs);
	return false;
}

bool cd_fr_join(struct cd_rank_summary *sums, int n)
{
	for (int i = 0; i < n; i++) {
		struct cd_rank_summary *d = &sums[i], *t = NULL;
		int traces = 0, dumps = 0;
		if (d->source == CD_SRC_TRACE || d->error || !d->has_rank || d->fr.n != d->colls.n)
			continue;
		for (int k = 0; k < n; k++) {
			struct cd_rank_summary *s = &sums[k];
			if (!s->has_rank || s->rank != d->rank)
				continue;
			if (s->source == CD_SRC_TRACE) {
				traces++;
				t = s;
			} else {
				dumps++;
			}
		}
		if (traces != 1 || dumps != 1 || t->fr_path || t->end == CD_END_EMPTY)
			continue;
		if (!join_one(t, d))
			return false;
	}
	return true;
}
