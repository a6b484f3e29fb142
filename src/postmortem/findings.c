#include "findings.h"

#include <stdlib.h>
#include <string.h>

const char *const cd_fkind_names[] = {"empty_trace", "type_mismatch", "dtype_mismatch",
				      "size_mismatch", "desync", "skip", "extra", "hang",
				      "straggler", "gap", "died"};
const char *const cd_basis_names[] = {"position", "own_steps_history", "own_steps", "sibling_group",
				      "lowest_rank", "own_pattern"};
const char *const cd_flight_by_names[] = {"none", "state", "retired", "pg_status"};

#define REALIGN_WINDOW 8
#define REALIGN_MAX_SHIFT 4
#define REALIGN_MAX_TIMES 16

/* ---- step 1: group ranks (sort, drop duplicates, find the missing) ---- */

static int by_rank(const void *a, const void *b)
{
	const struct cd_rank_summary *x = *(const struct cd_rank_summary *const *)a;
	const struct cd_rank_summary *y = *(const struct cd_rank_summary *const *)b;
	bool kx = x->has_rank || x->rank_from_name, ky = y->has_rank || y->rank_from_name;
	int64_t rx = kx ? x->rank : INT64_MAX, ry = ky ? y->rank : INT64_MAX;
	if (rx != ry)
		return rx < ry ? -1 : 1;
	return strcmp(x->path, y->path);
}

void cd_pm_sort(struct cd_rank_summary **v, int n)
{
	qsort(v, (size_t)n, sizeof *v, by_rank);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* A Flight Recorder dump that could not be read, its rank from its file name
 * (cd_fr_summarize). */
static bool unread_dump(const struct cd_rank_summary *s)
{
	return s->source != CD_SRC_TRACE && s->end == CD_END_ERROR && s->rank_from_name &&
	       !s->colls.n;
}

static bool group_ranks(struct cd_pm *pm, struct cd_rank_summary *const *sums, int n)
{
	pm->all = malloc((size_t)(n ? n : 1) * sizeof *pm->all);
	pm->r = malloc((size_t)(n ? n : 1) * sizeof *pm->r);
	if (!pm->all || !pm->r)
		return false;
	memcpy(pm->all, sums, (size_t)n * sizeof *pm->all);
	pm->nall = n;
	qsort(pm->all, (size_t)n, sizeof *pm->all, by_rank);
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = pm->all[i];
		if (s->fr_joined)
			continue;   /* its facts are in its rank's trace (cd_fr_join) */
		if (s->end == CD_END_EMPTY) {
			if (s->cut_first)
				pm->cut = true;
			continue;
		}
		if (s->error)
			pm->bad = true;
		if (unread_dump(s))
			continue;   /* nothing to compare; its rank is not missing (below) */
		if (s->cut)
			pm->cut = true;
		if (s->has_world && s->world_size > pm->world)
			pm->world = s->world_size;
		if (s->t0 > 0 && (pm->start == 0 || s->t0 < pm->start))
			pm->start = s->t0;
		if (!s->has_rank) {
			pm->bad = true;
			continue;
		}
		if (pm->n && pm->r[pm->n - 1]->rank == s->rank) {
			cd_vec_push(&pm->dups, i);
			continue;
		}
		pm->r[pm->n++] = pm->all[i];
	}
	/* an empty trace named after a rank stands for that rank: not missing */
	for (int64_t rk = 0, k = 0, e = 0; rk < pm->world; rk++) {
		while (k < pm->n && pm->r[k]->rank < rk)
			k++;
		bool have = k < pm->n && pm->r[k]->rank == rk;
		for (; !have && e < pm->nall; e++) {
			const struct cd_rank_summary *s = pm->all[e];
			if ((s->end != CD_END_EMPTY && !unread_dump(s)) || !s->rank_from_name ||
			    s->rank < rk)
				continue;
			if (s->rank == rk)
				have = true;
			break;
		}
		if (!have)
			cd_vec_push(&pm->missing, rk);
	}
	/* one string table for all ranks */
	pm->tr = calloc((size_t)(pm->n ? pm->n : 1), sizeof *pm->tr);
	if (!pm->tr)
		return false;
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		pm->tr[i] = malloc((s->s.count ? s->s.count : 1) * sizeof **pm->tr);
		if (!pm->tr[i])
			return false;
		for (uint32_t k = 0; k < s->s.count; k++)
			pm->tr[i][k] = cd_intern_from(&pm->g, &s->s, k);
	}
	return true;
}

/* ---- step 2: find findings ---- */

/* Collectives whose input payload may differ between ranks. */
static bool sizes_may_differ(const char *coll)
{
	static const char *const v[] = {"c10d.alltoall_", "c10d.alltoall_base_", "c10d.gather_",
					"c10d.scatter_", "c10d_functional.all_to_all_single"};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		if (strcmp(v[i], coll) == 0)
			return true;
	return false;
}

struct key {
	uint32_t coll, dtype, module;
	uint8_t phase;
	int64_t bytes;   /* -1: not compared */
	int64_t region;
};

/* Per rank state while matching one process group. */
struct lane {
	const struct cd_crec **rec;   /* its records of this group, by seq */
	uint32_t n, c;     /* records, the next one */
	int64_t shift;     /* position = seq + shift */
	int64_t resume;    /* not compared before this position */
	bool dead;         /* left out of the rest of the group */
	bool late;         /* reported as a straggler ... */
	int64_t late_by;   /* ... by this much */
	uint32_t realigned;
	bool tainted;      /* odd in a finding of this group and realigned since */
};

struct matcher {
	struct cd_pm *pm;
	int64_t *absent;   /* members of this group without any trace or dump ... */
	int nabsent;
	bool absent_told;  /* ... already in a hang finding */
	uint8_t *uneven;   /* per id in g: sizes may differ */
	struct lane *ln;
	uint32_t pg;
	int64_t next;      /* positions below were matched */
	int *act;          /* the ranks taking part in this group */
	int nact;
	/* what decided the reference at the current position (a tie) */
	uint8_t basis;
	int basis_rank;
	int64_t basis_region;
	uint32_t basis_pg;
	uint32_t basis_votes[2];
};

static struct key key_of(const struct matcher *mt, int i, const struct cd_crec *c)
{
	struct key k = {cd_pm_gid(mt->pm, i, c->coll), cd_pm_gid(mt->pm, i, c->dtype),
			cd_pm_gid(mt->pm, i, c->module), c->phase, c->has_bytes ? c->bytes : -1,
			c->region};
	if (k.coll != CD_NOID && mt->uneven[k.coll])
		k.bytes = -1;
	return k;
}

/* 0: same; else the finding kind of the first difference */
static enum cd_fkind key_diff(const struct key *a, const struct key *b)
{
	if (a->coll != b->coll)
		return CD_FK_TYPE;
	if (a->dtype != b->dtype && a->dtype != CD_NOID && b->dtype != CD_NOID)
		return CD_FK_DTYPE;
	if (a->bytes != b->bytes && a->bytes >= 0 && b->bytes >= 0)
		return CD_FK_SIZE;
	if (a->module != b->module || a->phase != b->phase || a->region != b->region)
		return CD_FK_DESYNC;
	return CD_FK_EMPTY;
}

static const struct cd_crec *rec_of(const struct matcher *mt, int i, uint32_t k)
{
	return mt->ln[i].rec[k];
}

/* The index in rank i's lane of its record at pos, or -1. */
static int64_t lane_index(const struct matcher *mt, int i, int64_t pos)
{
	const struct lane *l = &mt->ln[i];
	int64_t seq = pos - l->shift;
	uint32_t lo = 0, hi = l->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (rec_of(mt, i, mid)->seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < l->n && rec_of(mt, i, lo)->seq == seq ? (int64_t)lo : -1;
}

/* The record of rank i at position pos, or NULL. */
static const struct cd_crec *rec_at(const struct matcher *mt, int i, int64_t pos)
{
	int64_t k = lane_index(mt, i, pos);
	return k < 0 ? NULL : rec_of(mt, i, (uint32_t)k);
}

/* Do rank i from position a and rank j from position b agree (at least one
 * position compared, until either runs out or REALIGN_WINDOW)? */
static bool agree_from(const struct matcher *mt, int i, int64_t a, int j, int64_t b)
{
	int compared = 0;
	for (int x = 0; x < REALIGN_WINDOW; x++) {
		const struct cd_crec *ci = rec_at(mt, i, a + x), *cj = rec_at(mt, j, b + x);
		if (!ci || !cj)
			break;
		struct key ki = key_of(mt, i, ci), kj = key_of(mt, j, cj);
		if (key_diff(&ki, &kj) != CD_FK_EMPTY)
			return false;
		compared++;
	}
	return compared > 0;
}

enum realign { RA_NONE, RA_AGAIN, RA_SKIP, RA_EXTRA };

static enum realign realign(const struct matcher *mt, int i, int ref, int64_t pos, int64_t *k)
{
	for (*k = 1; *k <= REALIGN_MAX_SHIFT; (*k)++) {
		if (agree_from(mt, i, pos + *k, ref, pos + *k))
			return RA_AGAIN;
		if (agree_from(mt, i, pos, ref, pos + *k))
			return RA_SKIP;
		if (agree_from(mt, i, pos + *k, ref, pos))
			return RA_EXTRA;
	}
	return RA_NONE;
}

static struct cd_finding *new_finding(struct cd_pm *pm, enum cd_fkind kind, uint32_t pg,
				      int64_t seq)
{
	struct cd_finding f = {.kind = kind, .pg = pg, .pg_name = cd_pm_str(pm, pg), .seq = seq,
			       .seq_end = seq, .ref = -1, .time = -1, .t_last = -1,
			       .last_rank = -1, .delay = -1, .basis_rank = -1,
			       .basis_region = -1, .basis_pg = CD_NOID};
	if (!cd_vec_push(&pm->f, f))
		return NULL;
	return &pm->f.v[pm->f.n - 1];
}

/* Arrival times at pos among the ranks with a record there. */
static void arrivals(const struct matcher *mt, const int *has, int nhas,
		     const struct cd_crec *const *at, struct cd_finding *f)
{
	for (int h = 0; h < nhas; h++) {
		int64_t t = at[has[h]]->time;
		if (t < 0)
			continue;
		if (f->time < 0 || t < f->time)
			f->time = t;
		if (t >= f->t_last) {
			f->t_last = t;
			f->last_rank = has[h];
		}
	}
	(void)mt;
}

struct tr { int64_t t; int i; };

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return x < y ? -1 : x > y;
}

static int cmp_tr(const void *a, const void *b)
{
	const struct tr *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->i - y->i;
}

static void straggler(struct matcher *mt, int64_t pos, const int *has, int nhas,
		      const struct cd_crec *const *at, const struct cd_crec *ref_rec, int ref,
		      struct tr *scratch)
{
	struct cd_pm *pm = mt->pm;
	int64_t lo = -1, hi = -1;
	int nt = 0;
	for (int h = 0; h < nhas; h++) {
		int64_t t = at[has[h]]->time;
		if (t < 0)
			continue;
		if (lo < 0 || t < lo)
			lo = t;
		if (t > hi)
			hi = t;
		scratch[nt].t = t;
		scratch[nt++].i = has[h];
	}
	if (nt < 2 || hi - lo <= pm->late_ns)
		return;
	qsort(scratch, (size_t)nt, sizeof *scratch, cmp_tr);
	int cut = -1;
	int64_t best = 0;
	for (int k = 1; k < nt; k++)
		if (scratch[k].t - scratch[k - 1].t > best) {
			best = scratch[k].t - scratch[k - 1].t;
			cut = k;
		}
	if (cut < 0 || best <= pm->late_ns)
		return;
	bool fresh = false;
	for (int k = cut; k < nt; k++) {
		struct lane *l = &mt->ln[scratch[k].i];
		int64_t d = scratch[k].t - scratch[cut - 1].t;
		if (!l->late || d - l->late_by > pm->late_ns || l->late_by - d > pm->late_ns)
			fresh = true;
	}
	if (!fresh)
		return;
	struct cd_finding *f = new_finding(pm, CD_FK_STRAGGLER, mt->pg, pos);
	if (!f)
		return;
	f->ref = ref;
	f->ref_rec = ref_rec;
	f->time = scratch[0].t;
	f->t_last = scratch[nt - 1].t;
	f->last_rank = scratch[nt - 1].i;
	f->delay = best;
	for (int k = 0; k < cut; k++)
		cd_vec_push(&f->others, scratch[k].i);
	for (int k = cut; k < nt; k++) {
		struct lane *l = &mt->ln[scratch[k].i];
		l->late = true;
		l->late_by = scratch[k].t - scratch[cut - 1].t;
		cd_vec_push(&f->odd, scratch[k].i);
	}
	/* by rank */
	if (f->others.n)
		qsort(f->others.v, f->others.n, sizeof *f->others.v, cmp_int);
	if (f->odd.n)
		qsort(f->odd.v, f->odd.n, sizeof *f->odd.v, cmp_int);
	for (uint32_t k = 0; k < f->odd.n; k++)
		cd_vec_push(&f->odd_rec, at[f->odd.v[k]]);
}

/* A record's sort key: (group, seq, index). */
struct pgseq {
	uint32_t pg, idx;
	int64_t seq;
};

static int cmp_pgseq(const void *a, const void *b)
{
	const struct pgseq *x = a, *y = b;
	if (x->pg != y->pg)
		return x->pg < y->pg ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The next position to compare: the smallest one any live rank has left at
 * or after both mt->next and its own resume point (INT64_MAX: none left). */
static int64_t next_pos(struct matcher *mt)
{
	int64_t pos = INT64_MAX;
	for (int k = 0; k < mt->nact; k++) {
		int i = mt->act[k];
		struct lane *l = &mt->ln[i];
		if (l->dead)
			continue;
		int64_t from = l->resume > mt->next ? l->resume : mt->next;
		while (l->c < l->n && rec_of(mt, i, l->c)->seq + l->shift < from)
			l->c++;
		if (l->c < l->n && rec_of(mt, i, l->c)->seq + l->shift < pos)
			pos = rec_of(mt, i, l->c)->seq + l->shift;
	}
	return pos;
}

/* A gap: rank i's trace lacks pos..next-1 but goes on at next.  It joins the
 * gap finding of the same span already made at pos, else a new one. */
static void record_gap(struct matcher *mt, int i, int64_t pos, int64_t next)
{
	struct cd_pm *pm = mt->pm;
	struct cd_finding *f = NULL;
	for (uint32_t k = pm->f.n; k-- > 0;) {
		struct cd_finding *g = &pm->f.v[k];
		if (g->pg != mt->pg || g->seq != pos)
			break;
		if (g->kind == CD_FK_GAP && g->seq_end == next - 1) {
			f = g;
			break;
		}
	}
	if (!f && (f = new_finding(pm, CD_FK_GAP, mt->pg, pos))) {
		f->seq_end = next - 1;
		f->count = next - pos;
	}
	if (f) {
		cd_vec_push(&f->odd, i);
		cd_vec_push(&f->odd_rec, NULL);
	}
}

/* Who takes part at pos: the ranks with a record there go to has (their
 * record in at[i]; every other at[i] is NULL), those whose traces ended
 * before pos to the front of list (*nend of them); a rank with a gap at pos
 * is reported and resumes where its trace goes on.  Returns how many have. */
static int ranks_at(struct matcher *mt, int64_t pos, const struct cd_crec **at, int *has,
		    int *list, int *nend)
{
	int n = mt->nact;
	int nhas = 0;
	*nend = 0;
	mt->pm->visits += (uint64_t)n;
	for (int k = 0; k < n; k++) {
		int i = mt->act[k];
		struct lane *l = &mt->ln[i];
		at[i] = NULL;
		if (l->dead || l->resume > pos)
			continue;
		if (l->c < l->n && rec_of(mt, i, l->c)->seq + l->shift == pos) {
			at[i] = rec_of(mt, i, l->c);
			has[nhas++] = i;
		} else if (l->c < l->n) {
			int64_t next = rec_of(mt, i, l->c)->seq + l->shift;
			record_gap(mt, i, pos, next);
			l->resume = next;
		} else {
			list[(*nend)++] = i;  /* its trace ended before pos */
		}
	}
	return nhas;
}

/* ---- evidence beyond the position: a rank's own earlier steps, sibling
 * groups ---- */

/* How many earlier regions of a rank are tried as the template of a step. */
#define HISTORY_REGIONS 4
/* How many ranks of other groups are looked at to decide a tie. */
#define SIBLING_RANKS 256

/* Same collective, dtype, payload, module and phase (the region left out:
 * the same place in another step). */
static bool same_sig(const struct matcher *mt, int i, const struct cd_crec *a, int j,
		     const struct cd_crec *b)
{
	struct key ka = key_of(mt, i, a), kb = key_of(mt, j, b);
	ka.region = kb.region = 0;
	return key_diff(&ka, &kb) == CD_FK_EMPTY;
}


/* Rank i's own template of the step it is in at lane index x: the start
 * (lane index) of its latest earlier region, finished, in which its first
 * *off collectives of this group are those it issued in this step before x
 * (*off of them), and which holds at least *off + 1.  Returns -1 when none;
 * *region: that region. */
static int64_t own_template(const struct matcher *mt, int i, int64_t x, int64_t *off,
			    int64_t *region)
{
	int64_t g = rec_of(mt, i, (uint32_t)x)->region, a = x;
	while (a > 0 && rec_of(mt, i, (uint32_t)(a - 1))->region == g)
		a--;
	*off = x - a;
	int tried = 0;
	for (int64_t e = a; e > 0 && tried < HISTORY_REGIONS; tried++) {
		int64_t h = rec_of(mt, i, (uint32_t)(e - 1))->region, hs = e - 1;
		while (hs > 0 && rec_of(mt, i, (uint32_t)(hs - 1))->region == h)
			hs--;
		bool done = false;
		int64_t ok = h >= 0 && h != g && cd_pm_rank_region(mt->pm, i, h, &done) >= 0 && done &&
			     e - hs > *off;
		for (int64_t k = 0; ok && k < *off; k++)
			ok = same_sig(mt, i, rec_of(mt, i, (uint32_t)(hs + k)), i,
				      rec_of(mt, i, (uint32_t)(a + k)));
		if (ok) {
			*region = h;
			return hs;
		}
		e = hs;
	}
	return -1;
}

/* Does rank i's own earlier step agree with what it issued at pos?  1: its
 * template issued the same there, -1: something else, 0: no template. */
static int own_steps_vote(const struct matcher *mt, int i, int64_t pos, int64_t *region)
{
	int64_t x = lane_index(mt, i, pos), off;
	if (x < 0)
		return 0;
	int64_t hs = own_template(mt, i, x, &off, region);
	if (hs < 0)
		return 0;
	return same_sig(mt, i, rec_of(mt, i, (uint32_t)(hs + off)), i, rec_of(mt, i, (uint32_t)x))
		       ? 1 : -1;
}

/* A sibling group's vote: rank j (not in this group) issued, in another
 * group, in region `region`, first the n collectives of pre (rank i's), then
 * one more: it, else NULL; *pg: that group (id in g). */
static const struct cd_crec *sibling_at(const struct matcher *mt, int j, int i,
					const struct cd_crec *const *pre, int64_t n,
					int64_t region, uint32_t *pg)
{
	const struct cd_rank_summary *s = mt->pm->r[j];
	uint32_t other[4];
	int nother = 0;
	for (uint32_t k = 0; k < s->colls.n; k++) {
		const struct cd_crec *c = &s->colls.v[k];
		uint32_t g = cd_pm_gid(mt->pm, j, c->pg);
		if (c->region != region || g == mt->pg)
			continue;
		int o;
		for (o = 0; o < nother && other[o] != g; o++)
			;
		if (o < nother || nother == 4)
			continue;
		other[nother++] = g;
		/* this group's collectives of that region, from c on, in trace order */
		int64_t m = 0;
		uint32_t q;
		for (q = k; q < s->colls.n && m <= n; q++) {
			const struct cd_crec *d = &s->colls.v[q];
			if (d->region != region || cd_pm_gid(mt->pm, j, d->pg) != g)
				continue;
			if (m == n) {
				*pg = g;
				return d;
			}
			if (!same_sig(mt, j, d, i, pre[m]))
				break;
			m++;
		}
	}
	return NULL;
}

/* A tie between the candidates' keys at pos: who is the reference?  Each
 * tied rank's own earlier steps first, then sibling groups, else the lowest
 * rank's (the order of cand).  Sets mt->basis and the rest; returns the
 * winning candidate's index. */
struct cand { struct key k; int votes, first; };

static int decide_tie(struct matcher *mt, const struct cd_crec *const *at, const int *has,
		      int nhas, const struct cand *cand, int ncand, int best, int64_t pos)
{
	struct cd_pm *pm = mt->pm;
	int score[8] = {0}, good[8] = {0}, tied[8] = {0}, ntied = 0;
	int64_t region[8];
	for (int c = 0; c < ncand; c++)
		if (cand[c].votes == cand[best].votes)
			tied[ntied++] = c;
	/* 1: own steps */
	for (int h = 0; h < nhas; h++) {
		int i = has[h];
		struct key k = key_of(mt, i, at[i]);
		for (int t = 0; t < ntied; t++) {
			int c = tied[t];
			if (key_diff(&cand[c].k, &k) != CD_FK_EMPTY)
				continue;
			int64_t rg = -1;
			int v = own_steps_vote(mt, i, pos, &rg);
			score[c] += v;
			if (v > 0) {
				good[c]++;
				region[c] = rg;
			}
		}
	}
	int win = -1;
	for (int t = 0; t < ntied; t++) {
		int c = tied[t], more = 1;
		for (int u = 0; u < ntied; u++)
			if (u != t && score[tied[u]] >= score[c])
				more = 0;
		if (more)
			win = c;
	}
	if (win >= 0) {
		mt->basis = CD_BY_OWN_STEPS;
		mt->basis_rank = cand[win].first;
		mt->basis_region = region[win];
		for (int t = 0; t < ntied && t < 2; t++)
			mt->basis_votes[t] = (uint32_t)good[tied[t]];
		return win;
	}
	/* 2: sibling groups at the same place of the same region */
	int i0 = cand[tied[0]].first;
	int64_t x0 = lane_index(mt, i0, pos), a = x0;
	int64_t g = at[i0]->region;
	while (a > 0 && rec_of(mt, i0, (uint32_t)(a - 1))->region == g)
		a--;
	const struct cd_crec **pre = malloc((size_t)(x0 - a + 1) * sizeof *pre);
	int sib[8] = {0}, seen = 0;
	uint32_t spg = CD_NOID;
	for (int64_t k = a; pre && k < x0; k++)
		pre[k - a] = rec_of(mt, i0, (uint32_t)k);
	for (int j = 0; pre && g >= 0 && j < pm->n && seen < SIBLING_RANKS; j++) {
		bool in = false;
		for (int h = 0; h < nhas && !in; h++)
			in = has[h] == j;
		if (in)
			continue;
		seen++;
		uint32_t pg = CD_NOID;
		const struct cd_crec *c = sibling_at(mt, j, i0, pre, x0 - a, g, &pg);
		if (!c)
			continue;
		for (int t = 0; t < ntied; t++) {
			int f = cand[tied[t]].first;
			if (same_sig(mt, j, c, f, at[f])) {
				sib[t]++;
				spg = pg;
			}
		}
	}
	free(pre);
	for (int t = 0; t < ntied; t++) {
		int more = sib[t] > 0;
		for (int u = 0; u < ntied; u++)
			if (u != t && sib[u] >= sib[t])
				more = 0;
		if (more)
			win = tied[t];
	}
	if (win >= 0) {
		mt->basis = CD_BY_SIBLING;
		mt->basis_rank = -1;
		mt->basis_pg = spg;
		for (int t = 0; t < ntied && t < 2; t++)
			mt->basis_votes[t] = (uint32_t)sib[t];
		return win;
	}
	mt->basis = CD_BY_LOWEST;
	return best;
}

/* The reference rank at pos: the one that issued the majority's record
 * (ties: see decide_tie); its key goes to *refk.  Few distinct keys, so
 * count per distinct key, eight at most. */
static int pick_ref(struct matcher *mt, const struct cd_crec *const *at, const int *has,
		    int nhas, struct key *refk, int64_t pos)
{
	struct cand cand[8];
	int ncand = 0, best = 0;
	mt->basis = CD_BY_POS;
	mt->basis_rank = -1;
	mt->basis_region = -1;
	mt->basis_pg = CD_NOID;
	mt->basis_votes[0] = mt->basis_votes[1] = 0;
	for (int h = 0; h < nhas; h++) {
		struct key k = key_of(mt, has[h], at[has[h]]);
		int c;
		for (c = 0; c < ncand; c++)
			if (key_diff(&cand[c].k, &k) == CD_FK_EMPTY)
				break;
		if (c == ncand) {
			if (ncand == 8)
				continue;
			cand[c].k = k;
			cand[c].votes = 0;
			cand[c].first = has[h];
			ncand++;
		}
		cand[c].votes++;
	}
	for (int c = 1; c < ncand; c++)
		if (cand[c].votes > cand[best].votes)
			best = c;
	for (int c = 0; c < ncand; c++)
		if (c != best && cand[c].votes == cand[best].votes) {
			best = decide_tie(mt, at, has, nhas, cand, ncand, best, pos);
			break;
		}
	*refk = cand[best].k;
	return cand[best].first;
}

/* Where an odd rank's lane goes on after realign() said ra (by positions):
 * RA_NONE leaves it out of the group; the others resume it past the odd
 * records, shifting its positions when it skipped or added records. */
static void move_lane(struct lane *l, enum realign ra, int64_t pos, int64_t by)
{
	l->c++;
	l->realigned++;
	l->tainted = true;
	switch (ra) {
	case RA_NONE:
		l->dead = true;
		break;
	case RA_AGAIN:
		l->resume = pos + by;
		break;
	case RA_SKIP:
		l->shift += by;
		l->c--;               /* its record is the others' pos + by */
		l->resume = pos + by;
		break;
	case RA_EXTRA:
		l->shift -= by;
		l->resume = pos + 1;
		break;
	}
}

/* How far back (records) and up to which period a rank's own repeating
 * pattern is looked for. */
#define PATTERN_SPAN 1024
#define PATTERN_MAX 256

/* Rank i's own pattern before lane index x, for records without regions
 * (Flight Recorder dumps: no steps to take as the template): the period p
 * under which its latest records of this group repeat over the longest
 * stretch, at least twice (2p records), ties to the shorter period; *len:
 * that stretch (lane indexes x - *len .. x - 1).  0 when none. */
static int64_t own_period(const struct matcher *mt, int i, int64_t x, int64_t *len)
{
	int64_t span = x < PATTERN_SPAN ? x : PATTERN_SPAN, best = 0;
	*len = 0;
	for (int64_t p = 1; p <= PATTERN_MAX && 2 * p <= span; p++) {
		int64_t m = 0;   /* records that equal the one p before them */
		while (m < span - p &&
		       same_sig(mt, i, rec_of(mt, i, (uint32_t)(x - 1 - m)), i,
				rec_of(mt, i, (uint32_t)(x - 1 - m - p))))
			m++;
		if (m >= p && m + p > *len) {
			best = p;
			*len = m + p;
			if (*len == span)
				break;   /* all it looked at repeats: no longer period does better */
		}
	}
	return best;
}

/* The template of a history skip: where rank i issued before what it was
 * expected to issue at lane index x (own_template's region, or the period
 * of its own pattern). */
struct tmpl {
	int64_t at;       /* lane index of the record at this place in the template */
	int64_t region;   /* its region (steps), -1 */
	int64_t period;   /* its period (pattern), 0 */
	int64_t len;      /* pattern: records that repeat, ending at x - 1 */
};

/* Every rank stopped at pos (nothing after it to realign against): did
 * rank i skip?  Its own template of this step (own_template; for records
 * without regions, its own repeating pattern: own_period) must hold, at
 * this place, what the others issued at pos, and k places on what rank i
 * issued at pos, and its later records then too.  *k: how many; *tp: the
 * template. */
static bool history_skip(const struct matcher *mt, int i, int ref, int64_t pos, int64_t *k,
			 struct tmpl *tp)
{
	int64_t x = lane_index(mt, i, pos), off;
	const struct cd_crec *rc = rec_at(mt, ref, pos);
	*tp = (struct tmpl){.at = -1, .region = -1};
	if (x < 0 || !rc || rec_at(mt, ref, pos + 1))
		return false;
	int64_t hs = own_template(mt, i, x, &off, &tp->region);
	if (hs < 0 && rec_of(mt, i, (uint32_t)x)->region < 0 &&
	    (tp->period = own_period(mt, i, x, &tp->len)) > 0) {
		hs = x - tp->period;   /* one period back */
		off = 0;
	}
	if (hs < 0 || !same_sig(mt, i, rec_of(mt, i, (uint32_t)(hs + off)), ref, rc))
		return false;
	tp->at = hs + off;
	for (*k = 1; *k <= REALIGN_MAX_SHIFT; (*k)++) {
		bool ok = true;
		int compared = 0;
		for (int64_t j = 0; ok && x + j < mt->ln[i].n && hs + off + *k + j < x; j++) {
			ok = same_sig(mt, i, rec_of(mt, i, (uint32_t)(hs + off + *k + j)), i,
				      rec_of(mt, i, (uint32_t)(x + j)));
			compared++;
		}
		if (ok && compared)
			return true;
	}
	return false;
}

/* Rank i issued at pos a record with key *k that differs from the reference's
 * as kind says.  Realigning it with ref tells whether it skipped records
 * (SKIP), issued extra ones (EXTRA) or differs at pos only (AGAIN, kind
 * kept); the rank joins the finding made at pos since first_f with the same
 * kind, shift and key, else a new one, and its lane moves on. */
static void odd_rank(struct matcher *mt, int i, const struct key *k, enum cd_fkind kind,
		     const struct cd_crec *const *at, int64_t pos, int ref, uint32_t first_f)
{
	struct cd_pm *pm = mt->pm;
	struct lane *l = &mt->ln[i];
	int64_t by = 0;
	enum realign ra = l->realigned < REALIGN_MAX_TIMES
				  ? realign(mt, i, ref, pos, &by) : RA_NONE;
	struct tmpl tp;
	bool hist = ra == RA_NONE && history_skip(mt, i, ref, pos, &by, &tp);
	if (hist)
		ra = RA_SKIP;
	if (ra == RA_SKIP)
		kind = CD_FK_SKIP;
	else if (ra == RA_EXTRA)
		kind = CD_FK_EXTRA;
	struct cd_finding *f = NULL;
	for (uint32_t g = first_f; g < pm->f.n; g++) {
		struct cd_finding *x = &pm->f.v[g];
		struct key xk = key_of(mt, x->odd.v[0], x->odd_rec.v[0]);
		if (x->kind == kind && x->count == (ra == RA_NONE ? 0 : by) &&
		    key_diff(&xk, k) == CD_FK_EMPTY) {
			f = x;
			break;
		}
	}
	if (!f && (f = new_finding(pm, kind, mt->pg, pos))) {
		f->ref = ref;
		f->ref_rec = at[ref];
		f->basis = mt->basis;
		f->basis_rank = mt->basis_rank;
		f->basis_region = mt->basis_region;
		f->basis_pg = mt->basis_pg;
		f->basis_votes[0] = mt->basis_votes[0];
		f->basis_votes[1] = mt->basis_votes[1];
		if (hist) {
			f->basis = tp.period ? CD_BY_PATTERN : CD_BY_HISTORY;
			f->basis_rank = i;
			f->basis_region = tp.region;
		}
		if (hist && tp.period) {
			int64_t x = lane_index(mt, i, pos);
			f->basis_period = tp.period;
			f->basis_from = rec_of(mt, i, (uint32_t)(x - tp.len))->seq;
			f->basis_to = rec_of(mt, i, (uint32_t)(x - 1))->seq;
			f->basis_at = rec_of(mt, i, (uint32_t)tp.at)->seq;
		}
		f->count = ra == RA_NONE ? 0 : by;
		if (ra == RA_AGAIN)
			f->seq_end = pos + by - 1;
		if (ra == RA_SKIP)
			f->seq_end = pos + by - 1;
		if (ra == RA_EXTRA)
			f->count = by;
	}
	if (f) {
		cd_vec_push(&f->odd, i);
		cd_vec_push(&f->odd_rec, at[i]);
	}
	move_lane(l, ra, pos, by);
}

/* Each rank at pos against the reference key *refk: the majority go to the
 * end of list (*nsame of them), the odd ranks to odd_rank(); the findings
 * made at pos list the majority as others, with the arrival times.
 * Returns how many ranks were odd. */
static int classify_pos(struct matcher *mt, const struct cd_crec *const *at, const int *has,
			int nhas, int *list, int64_t pos, int ref, const struct key *refk,
			int *nsame)
{
	struct cd_pm *pm = mt->pm;
	int n = mt->nact;
	uint32_t first_f = pm->f.n;
	int nodd = 0;
	*nsame = 0;
	for (int h = 0; h < nhas; h++) {
		int i = has[h];
		struct key k = key_of(mt, i, at[i]);
		enum cd_fkind kind = key_diff(refk, &k);
		if (kind == CD_FK_EMPTY) {
			list[n - 1 - (*nsame)++] = i;   /* the majority, from the end of list */
			continue;
		}
		nodd++;
		odd_rank(mt, i, &k, kind, at, pos, ref, first_f);
	}
	for (uint32_t g = first_f; g < pm->f.n; g++) {
		struct cd_finding *f = &pm->f.v[g];
		for (int s = 0; s < *nsame; s++)
			cd_vec_push(&f->others, list[n - 1 - s]);
		arrivals(mt, has, nhas, at, f);
	}
	return nodd;
}

static bool cd_pm_member(const struct cd_pm *pm, uint32_t pg, int64_t rank);

bool cd_pm_world_pg(const struct cd_pm *pm, uint32_t pg)
{
	for (int i = 0; pg != CD_NOID && i < pm->n; i++)
		if (pm->r[i]->fr_has_world_pg && cd_pm_gid(pm, i, pm->r[i]->fr_world_pg) == pg)
			return true;
	return false;
}

/* The missing ranks (pm->missing) that are members of group pg: by its
 * member list, or all of them in the world group a dump names. */
static int absent_members(const struct cd_pm *pm, uint32_t pg, int64_t *out)
{
	int n = 0;
	bool world = pm->missing.n && cd_pm_world_pg(pm, pg);
	for (uint32_t k = 0; k < pm->missing.n; k++)
		if (world || cd_pm_member(pm, pg, pm->missing.v[k]))
			out[n++] = pm->missing.v[k];
	return n;
}

enum cd_flight cd_fr_flight(const struct cd_rank_summary *s, const struct cd_crec *c,
			    uint8_t *by)
{
	const struct cd_fr_crec *fc = cd_rank_fr(s, c);
	*by = CD_FLBY_NONE;
	if (!fc || fc->record_id < 0)
		return CD_FL_UNKNOWN;
	if (s->fr_states) {
		*by = CD_FLBY_STATE;
		if (fc->state == 2 /* CD_FR_COMPLETED */ || fc->t_completed >= 0)
			return CD_FL_ENDED;
		if (fc->retired > 0) {
			*by = CD_FLBY_RETIRED;   /* ended without completing: an error */
			return CD_FL_ENDED;
		}
		return CD_FL_IN_FLIGHT;
	}
	if (fc->retired >= 0) {
		*by = CD_FLBY_RETIRED;
		return fc->retired ? CD_FL_ENDED : CD_FL_IN_FLIGHT;
	}
	/* pg_status counts what op_id counts where the dump has it */
	int64_t op = fc->op_id > 0 ? fc->op_id : c->seq;
	const char *pg = cd_rank_str(s, c->pg);
	for (uint32_t k = 0; k < s->pg_status.n; k++) {
		const struct cd_pgstat *p = &s->pg_status.v[k];
		if (strcmp(cd_rank_str(s, p->pg), pg) != 0)
			continue;
		*by = CD_FLBY_PG_STATUS;
		if (p->completed >= op)
			return CD_FL_ENDED;
		if (p->enqueued >= op)
			return CD_FL_IN_FLIGHT;
		break;
	}
	*by = CD_FLBY_NONE;
	return CD_FL_UNKNOWN;
}

/* Were the ranks at pos still in their collective there, by their dumps?
 * What told it when every rank whose dump can tell says in flight (one at
 * least); CD_FLBY_NONE when none can tell or one says it ended. */
static uint8_t waiting_by(const struct matcher *mt, const struct cd_crec *const *at,
			  const int *has, int nhas)
{
	uint8_t by = CD_FLBY_NONE, b;
	for (int h = 0; h < nhas; h++) {
		enum cd_flight fl = cd_fr_flight(mt->pm->r[has[h]], at[has[h]], &b);
		if (fl == CD_FL_ENDED)
			return CD_FLBY_NONE;
		if (fl == CD_FL_IN_FLIGHT && by == CD_FLBY_NONE)
			by = b;
	}
	return by;
}

/* A hang finding at pos: the ranks at pos wait (others; the longest wait
 * of those read from traces is its delay: a dump does not say when it was
 * taken). */
static struct cd_finding *new_hang(struct matcher *mt, const struct cd_crec *const *at,
				   const int *has, int nhas, int64_t pos, int ref)
{
	struct cd_pm *pm = mt->pm;
	struct cd_finding *f = new_finding(pm, CD_FK_HANG, mt->pg, pos);
	if (!f)
		return NULL;
	f->ref = ref;
	f->ref_rec = at[ref];
	for (int h = 0; h < nhas; h++) {
		int i = has[h];
		cd_vec_push(&f->others, i);
		int64_t w = pm->r[i]->last_time - at[i]->time;
		if (pm->r[i]->source == CD_SRC_TRACE && at[i]->time >= 0 &&
		    pm->r[i]->last_time >= 0 && w > f->delay)
			f->delay = w;
	}
	arrivals(mt, has, nhas, at, f);
	f->flight_by = waiting_by(mt, at, has, nhas);
	return f;
}

/* The ranks whose traces end before pos (list[0..nend)) leave the group.
 * They hang there (a finding, with the longest wait of the ranks at pos as
 * its delay) unless only ranks that already departed from the others
 * reached pos (they ran on alone).  Members without any trace or dump
 * hang at the first position where no rank was odd (nodd) and the dumps of
 * the ranks there show it still in flight (findings.h). */
static void record_hang(struct matcher *mt, const struct cd_crec *const *at, const int *has,
			int nhas, const int *list, int nend, int64_t pos, int ref, int nodd)
{
	bool clean = false;
	struct cd_finding *f = NULL;
	for (int h = 0; h < nhas && !clean; h++)
		clean = !mt->ln[has[h]].tainted;
	if (nend && clean && (f = new_hang(mt, at, has, nhas, pos, ref))) {
		for (int e = 0; e < nend; e++) {
			cd_vec_push(&f->odd, list[e]);
			cd_vec_push(&f->odd_rec, NULL);
		}
	}
	for (int e = 0; e < nend; e++)
		mt->ln[list[e]].dead = true;
	if (!clean || nodd || !mt->nabsent || mt->absent_told ||
	    waiting_by(mt, at, has, nhas) == CD_FLBY_NONE)
		return;
	if (!f && !(f = new_hang(mt, at, has, nhas, pos, ref)))
		return;
	for (int a = 0; a < mt->nabsent; a++)
		cd_vec_push(&f->absent, mt->absent[a]);
	mt->absent_told = true;
}

/* Match one process group position by position: who is at it, the
 * reference record, the odd ranks, the hangs, else a straggler. */
static void match_pg(struct matcher *mt, const struct cd_crec **at, int *has, int *list,
		     struct tr *scratch)
{
	int n = mt->nact;
	int64_t pos;

	while ((pos = next_pos(mt)) != INT64_MAX) {
		int nend, nsame;
		int nhas = ranks_at(mt, pos, at, has, list, &nend);
		if (!nhas) {
			mt->next = pos + 1;
			continue;
		}
		struct key refk;
		int ref = pick_ref(mt, at, has, nhas, &refk, pos);
		const struct cd_crec *ref_rec = at[ref];
		int nodd = classify_pos(mt, at, has, nhas, list, pos, ref, &refk, &nsame);
		record_hang(mt, at, has, nhas, list, nend, pos, ref, nodd);
		if (!nodd)
			straggler(mt, pos, has, nhas, at, ref_rec, ref, scratch);
		for (int s = 0; s < nsame; s++)
			mt->ln[list[n - 1 - s]].c++;
		mt->next = pos + 1;
	}
}

/* Is rank a member of group pg?  Unknown groups (no trace declares them)
 * count only the ranks that issued collectives in them. */
static bool cd_pm_member(const struct cd_pm *pm, uint32_t pg, int64_t rank)
{
	/* a group declared with no members may leave pg_runs empty (v NULL) */
	if (pg >= pm->pg_n.n || pm->pg_n.v[pg] == UINT32_MAX || !pm->pg_n.v[pg])
		return false;
	const struct cd_rrun *r = pm->pg_runs.v + pm->pg_off.v[pg];
	for (uint32_t k = 0; k < pm->pg_n.v[pg]; k++, r++) {
		if (rank == r->first)
			return true;
		if (r->step > 0 && rank > r->first && (rank - r->first) % r->step == 0 &&
		    (rank - r->first) / r->step < r->n)
			return true;
	}
	return false;
}

/* The members of every group, from the first trace that declares it, as
 * its runs (never expanded: a run stands for up to CD_RANKS_MAX ranks). */
static bool group_members(struct cd_pm *pm)
{
	if (!cd_vec_reserve(&pm->pg_n, pm->g.count) || !cd_vec_reserve(&pm->pg_off, pm->g.count))
		return false;
	pm->pg_n.n = pm->pg_off.n = pm->g.count;
	for (uint32_t k = 0; k < pm->g.count; k++)
		pm->pg_n.v[k] = UINT32_MAX;
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		for (uint32_t k = 0; k < s->pg_names.n; k++) {
			uint32_t g = cd_pm_gid(pm, i, s->pg_names.v[k]);
			if (g == CD_NOID || pm->pg_n.v[g] != UINT32_MAX)
				continue;
			uint32_t off = pm->pg_runs.n, cnt = s->pg_runs_n.v[k];
			if (cnt > UINT32_MAX - off || !cd_vec_reserve(&pm->pg_runs, off + cnt))
				return false;
			if (cnt)
				memcpy(pm->pg_runs.v + off, s->pg_runs.v + s->pg_runs_off.v[k],
				       cnt * sizeof *pm->pg_runs.v);
			pm->pg_runs.n = off + cnt;
			pm->pg_off.v[g] = off;
			pm->pg_n.v[g] = cnt;
		}
	}
	return true;
}

/* Rank i's collectives by (group, seq, index) into ord.  A rank uses a few
 * groups, each in seq order in its trace as a rule: its records are put
 * group by group in trace order, and only a group found out of order is
 * sorted (the same order a sort of them all gives, at a fraction of it). */
static bool order_rank(const struct cd_pm *pm, int i, const struct cd_crec **ord)
{
	const struct cd_rank_summary *s = pm->r[i];
	uint32_t g[16], cnt[16], ng = 0, n = s->colls.n;
	struct pgseq *ks = malloc((n ? n : 1) * sizeof *ks);

	if (!ks)
		return false;
	for (uint32_t k = 0; k < n; k++)
		ks[k] = (struct pgseq){pm->tr[i][s->colls.v[k].pg], k, s->colls.v[k].seq};
	for (uint32_t k = 0; k < n && ng <= 16; k++) {
		uint32_t j = 0;
		while (j < ng && g[j] != ks[k].pg)
			j++;
		if (j == ng && ng < 16) {
			g[ng] = ks[k].pg;
			cnt[ng++] = 0;
		} else if (j == ng) {
			ng = 17;   /* many groups: sort them all */
			break;
		}
		cnt[j]++;
	}
	if (ng > 16) {
		qsort(ks, n, sizeof *ks, cmp_pgseq);
		for (uint32_t k = 0; k < n; k++)
			ord[k] = &s->colls.v[ks[k].idx];
		free(ks);
		return true;
	}
	/* the groups by id, then each one's records in trace order */
	for (uint32_t a = 1; a < ng; a++)
		for (uint32_t b = a; b > 0 && g[b - 1] > g[b]; b--) {
			uint32_t t = g[b]; g[b] = g[b - 1]; g[b - 1] = t;
			t = cnt[b]; cnt[b] = cnt[b - 1]; cnt[b - 1] = t;
		}
	uint32_t at[16];
	for (uint32_t j = 0, o = 0; j < ng; o += cnt[j++])
		at[j] = o;
	struct pgseq *sorted = malloc((n ? n : 1) * sizeof *sorted);
	if (!sorted) {
		free(ks);
		return false;
	}
	for (uint32_t k = 0; k < n; k++) {
		uint32_t j = 0;
		while (g[j] != ks[k].pg)
			j++;
		sorted[at[j]++] = ks[k];
	}
	for (uint32_t j = 0, o = 0; j < ng; o += cnt[j++]) {
		bool in_order = true;
		for (uint32_t k = o + 1; k < o + cnt[j] && in_order; k++)
			in_order = sorted[k - 1].seq <= sorted[k].seq;
		if (!in_order)
			qsort(sorted + o, cnt[j], sizeof *sorted, cmp_pgseq);
	}
	for (uint32_t k = 0; k < n; k++)
		ord[k] = &s->colls.v[sorted[k].idx];
	free(sorted);
	free(ks);
	return true;
}

/* One rank's collectives of one group: ord[i][start .. start + n), its
 * records in (group, seq) order. */
struct seg {
	uint32_t pg, start, n;
	int i;
};

/* Every rank's segments (ord[i] is by group, then seq), by group and
 * within a group by rank: *first (g.count + 1 entries) gives where each
 * group's begin.  NULL when out of memory. */
static struct seg *group_segments(const struct cd_pm *pm, const struct cd_crec *const *const *ord,
				  uint32_t *nsegs,
				  uint32_t **first)
{
	CD_VEC(struct seg) v = {0};
	struct seg *out = NULL;
	uint32_t *at = NULL;

	*first = calloc((size_t)pm->g.count + 1, sizeof **first);
	if (!*first)
		return NULL;
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		for (uint32_t a = 0, b; a < s->colls.n; a = b) {
			uint32_t pg = pm->tr[i][ord[i][a]->pg];
			for (b = a + 1; b < s->colls.n && pm->tr[i][ord[i][b]->pg] == pg; b++)
				;
			struct seg g = {pg, a, b - a, i};
			if (pg >= pm->g.count || !cd_vec_push(&v, g))
				goto out;
			(*first)[pg + 1]++;
		}
	}
	for (uint32_t k = 0; k < pm->g.count; k++)
		(*first)[k + 1] += (*first)[k];
	out = malloc((v.n ? v.n : 1) * sizeof *out);
	at = malloc(((size_t)pm->g.count + 1) * sizeof *at);
	if (!out || !at) {
		free(out);
		out = NULL;
		goto out;
	}
	memcpy(at, *first, ((size_t)pm->g.count + 1) * sizeof *at);
	for (uint32_t k = 0; k < v.n; k++)   /* stable: ranks stay in order */
		out[at[v.v[k].pg]++] = v.v[k];
	*nsegs = v.n;
out:
	free(at);
	cd_vec_free(&v);
	if (!out) {
		free(*first);
		*first = NULL;
	}
	return out;
}

/* The ranks compared that are members of group pg (its runs) but issued
 * nothing in it: each gets an empty lane in mt->act.  Returns whether it
 * added any (mt->act is then out of order). */
static bool member_lanes(struct matcher *mt, uint32_t pg, const struct cd_crec **const *ord,
			 uint32_t *stamp)
{
	const struct cd_pm *pm = mt->pm;
	bool added = false;

	if (pg >= pm->pg_n.n || pm->pg_n.v[pg] == UINT32_MAX)
		return false;
	for (uint32_t k = 0; k < pm->pg_n.v[pg]; k++) {
		const struct cd_rrun *r = &pm->pg_runs.v[pm->pg_off.v[pg] + k];
		int64_t last = r->n > 1 && r->step > 0 ? r->first + (int64_t)(r->n - 1) * r->step
						       : r->first;
		int lo = 0, hi = pm->n;   /* the first rank at or above r->first */
		while (lo < hi) {
			int mid = lo + (hi - lo) / 2;
			if (pm->r[mid]->rank < r->first)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (int i = lo; i < pm->n && pm->r[i]->rank <= last; i++) {
			int64_t d = pm->r[i]->rank - r->first;
			if ((r->step > 0 ? d % r->step : d) != 0 || stamp[i] == pg + 1)
				continue;
			stamp[i] = pg + 1;
			mt->ln[i] = (struct lane){.rec = ord[i], .n = 0, .resume = INT64_MIN};
			mt->act[mt->nact++] = i;
			added = true;
		}
	}
	return added;
}

static bool find_findings(struct cd_pm *pm)
{
	int n = pm->n;
	bool ok = false;
	struct matcher mt = {.pm = pm};
	const struct cd_crec ***ord = calloc((size_t)(n ? n : 1), sizeof *ord);
	struct seg *segs = NULL;
	uint32_t nsegs = 0, *first = NULL, *stamp = NULL;
	int64_t *trim_next = NULL;   /* by group: the first position every rank holds */
	const struct cd_crec **at = calloc((size_t)(n ? n : 1), sizeof *at);
	int *has = calloc((size_t)(n ? n : 1), sizeof *has);
	int *list = calloc((size_t)(n ? n : 1), sizeof *list);
	struct tr *scratch = calloc((size_t)(n ? n : 1), sizeof *scratch);
	mt.ln = calloc((size_t)(n ? n : 1), sizeof *mt.ln);
	mt.act = calloc((size_t)(n ? n : 1), sizeof *mt.act);
	mt.uneven = calloc(pm->g.count ? pm->g.count : 1, 1);
	mt.absent = calloc(pm->missing.n ? pm->missing.n : 1, sizeof *mt.absent);
	if (!ord || !at || !has || !list || !scratch || !mt.ln || !mt.uneven || !mt.act ||
	    !mt.absent)
		goto out;
	for (uint32_t k = 0; k < pm->g.count; k++)
		mt.uneven[k] = sizes_may_differ(cd_intern_str(&pm->g, k));
	/* a bounded trace dropped its group's collectives up to trim_seq */
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		for (uint32_t k = 0; k < s->trim_pg.n; k++) {
			uint32_t g = cd_pm_gid(pm, i, s->trim_pg.v[k]);
			if (g >= pm->g.count)
				continue;
			if (!trim_next) {
				if (!(trim_next = malloc(pm->g.count * sizeof *trim_next)))
					goto out;
				for (uint32_t j = 0; j < pm->g.count; j++)
					trim_next[j] = INT64_MIN;
			}
			if (s->trim_seq.v[k] >= trim_next[g])
				trim_next[g] = s->trim_seq.v[k] + 1;
		}
	}
	/* each rank's collectives by (group, seq) */
	for (int i = 0; i < n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		ord[i] = malloc((s->colls.n ? s->colls.n : 1) * sizeof **ord);
		if (!ord[i])
			goto out;
		if (!order_rank(pm, i, ord[i]))
			goto out;
	}
	/* each rank's collectives of one group are one segment of ord[i];
	 * the segments by group (then rank), so that a group costs its own
	 * ranks, not the job's */
	if (!(segs = group_segments(pm, (const struct cd_crec *const *const *)ord, &nsegs,
				    &first)) ||
	    !(stamp = calloc((size_t)(n ? n : 1), sizeof *stamp)))
		goto out;
	/* group by group, in the order of their global ids */
	for (uint32_t pg = 0; pg < pm->g.count; pg++) {
		if (first[pg] == first[pg + 1])
			continue;   /* no rank issued a collective in it */
		mt.pg = pg;
		/* bounded traces: compare only what every rank still holds */
		mt.next = trim_next ? trim_next[pg] : INT64_MIN;
		mt.nact = 0;
		for (uint32_t k = first[pg]; k < first[pg + 1]; k++) {
			const struct seg *g = &segs[k];
			mt.ln[g->i] = (struct lane){.rec = ord[g->i] + g->start, .n = g->n,
						    .resume = INT64_MIN};
			stamp[g->i] = pg + 1;
			mt.act[mt.nact++] = g->i;
		}
		/* a rank that is a member but issued nothing in this group hangs at
		 * its first collective; a rank that is not a member is left out */
		if (member_lanes(&mt, pg, ord, stamp))
			qsort(mt.act, (size_t)mt.nact, sizeof *mt.act, cmp_int);
		mt.nabsent = absent_members(pm, pg, mt.absent);
		mt.absent_told = false;
		match_pg(&mt, at, has, list, scratch);
		for (int k = 0; k < mt.nact; k++)
			mt.ln[mt.act[k]] = (struct lane){0};
	}
	ok = true;
out:
	free(segs);
	free(first);
	free(stamp);
	free(trim_next);
	for (int i = 0; ord && i < n; i++)
		free((void *)ord[i]);
	free(ord);
	free(at);
	free(has);
	free(list);
	free(scratch);
	free(mt.ln);
	free(mt.act);
	free(mt.uneven);
	free(mt.absent);
	return ok;
}

/* An empty trace is a finding about its rank. */
static void empty_findings(struct cd_pm *pm)
{
	for (int i = 0; i < pm->nall; i++)
		if (pm->all[i]->end == CD_END_EMPTY) {
			struct cd_finding *f = new_finding(pm, CD_FK_EMPTY, CD_NOID, -1);
			if (f)
				f->trace = pm->all[i];
		}
}

/* Ranks whose process died, one finding per way of dying (the same end,
 * exception, message, status or signal), in rank order. */
struct death { int end; uint32_t how, exc, msg, signame; int64_t code, signal; bool has_code; };

static struct death death_of(const struct cd_pm *pm, int i)
{
	const struct cd_rank_summary *s = pm->r[i];
	return (struct death){s->end, cd_pm_gid(pm, i, s->end_how), cd_pm_gid(pm, i, s->end_exc),
			      cd_pm_gid(pm, i, s->end_msg), cd_pm_gid(pm, i, s->end_signame),
			      s->has_code ? s->end_code : 0, s->end_signal, s->has_code};
}

static bool same_death(const struct death *a, const struct death *b)
{
	return a->end == b->end && a->how == b->how && a->exc == b->exc && a->msg == b->msg &&
	       a->signame == b->signame && a->code == b->code && a->signal == b->signal &&
	       a->has_code == b->has_code;
}

/* When rank i died: its end event, else its last event (-1: unknown). */
static int64_t death_time(const struct cd_rank_summary *s)
{
	return s->has_end && s->end_time >= 0 ? s->end_time : s->last_time;
}

static void died_findings(struct cd_pm *pm)
{
	uint32_t first = pm->f.n;
	for (int i = 0; i < pm->n; i++) {
		if (!cd_rank_died(pm->r[i]))
			continue;
		struct death d = death_of(pm, i);
		struct cd_finding *f = NULL;
		for (uint32_t k = first; k < pm->f.n && !f; k++) {
			struct death e = death_of(pm, pm->f.v[k].odd.v[0]);
			if (same_death(&d, &e))
				f = &pm->f.v[k];
		}
		if (!f && (f = new_finding(pm, CD_FK_DIED, CD_NOID, -1)))
			f->trace = pm->r[i];
		if (!f)
			continue;
		cd_vec_push(&f->odd, i);
		cd_vec_push(&f->odd_rec, NULL);
		int64_t t = death_time(pm->r[i]);
		if (t >= 0 && (f->time < 0 || t < f->time))
			f->time = t;
		if (t >= 0 && t >= f->t_last) {
			f->t_last = t;
			f->last_rank = i;
		}
	}
}

/* ---- step 3: order them ---- */

static int finding_class(const struct cd_finding *f)
{
	if (f->kind == CD_FK_EMPTY)
		return 0;          /* a rank that left nothing: the clearest evidence */
	if (f->kind == CD_FK_GAP)
		return 4;          /* lost events, not a fault of the job */
	if (f->kind == CD_FK_DIED)
		return 3;          /* after what the collectives show, by time */
	return f->time >= 0 ? 1 : 2;
}

static int cmp_finding(const void *a, const void *b)
{
	const struct cd_finding *x = a, *y = b;
	int cx = finding_class(x), cy = finding_class(y);
	if (cx != cy)
		return cx < cy ? -1 : 1;
	if (cx == 0) {
		int64_t rx = x->trace->rank_from_name ? x->trace->rank : INT64_MAX;
		int64_t ry = y->trace->rank_from_name ? y->trace->rank : INT64_MAX;
		if (rx != ry)
			return rx < ry ? -1 : 1;
		return strcmp(x->trace->path, y->trace->path);
	}
	if ((cx == 1 || cx == 3) && x->time != y->time) {
		if (x->time < 0 || y->time < 0)
			return x->time < 0 ? 1 : -1;   /* untimed deaths last */
		return x->time < y->time ? -1 : 1;
	}
	if (cx == 3)
		return x->odd.v[0] - y->odd.v[0];
	if (x->pg != y->pg) {
		int c = strcmp(x->pg_name, y->pg_name);
		if (c)
			return c;
	}
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->odd.n && y->odd.n ? x->odd.v[0] - y->odd.v[0] : 0;
}

/* Whether rank i, whose trace ends short, stopped at finding f: its last
 * collective at f's position (at), or in f's group (at false: a hang it
 * never reached there). */
static bool stopped_at(const struct cd_pm *pm, int i, const struct cd_finding *f, bool at)
{
	const struct cd_rank_summary *s = pm->r[i];
	if (!s->colls.n || (s->end == CD_END_CLOSED && !s->in_region))
		return false;       /* (one that went on to its trace's end stopped nowhere) */
	const struct cd_crec *lc = &s->colls.v[s->colls.n - 1];
	return cd_pm_gid(pm, i, lc->pg) == f->pg &&
	       (!at || (lc->seq >= f->seq && lc->seq <= f->seq_end));
}

/* Where each rank stopped (stop[i], -1: nowhere known): the finding at
 * whose position its last collective lies, with the rank on either side;
 * else a hang in which it never reached the position after its last
 * collective, in that collective's group.  The first such in f's order. */
static void stop_findings(const struct cd_pm *pm, int *stop)
{
	for (int i = 0; i < pm->n; i++)
		stop[i] = -1;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t k = 0; k < pm->f.n; k++) {
			const struct cd_finding *f = &pm->f.v[k];
			int c = finding_class(f);
			if ((c != 1 && c != 2) || (pass == 1 && f->kind != CD_FK_HANG))
				continue;
			for (uint32_t j = 0; j < f->odd.n + (pass ? 0 : f->others.n); j++) {
				int i = j < f->odd.n ? f->odd.v[j] : f->others.v[j - f->odd.n];
				if (stop[i] < 0 && stopped_at(pm, i, f, pass == 0))
					stop[i] = (int)k;
			}
		}
}

/* The finding that explains hang h (-1: none): one, other than h, where
 * every rank that never reached h's position had stopped (the first of
 * them in f's order). */
static int hang_cause(const struct cd_pm *pm, const int *stop, uint32_t h)
{
	const struct cd_finding *f = &pm->f.v[h];
	int cause = -1;
	if (f->kind != CD_FK_HANG || !f->odd.n)
		return -1;
	for (uint32_t j = 0; j < f->odd.n; j++) {
		int k = stop[f->odd.v[j]];
		if (k < 0 || (uint32_t)k == h)
			return -1;
		if (cause < 0 || k < cause)
			cause = k;
	}
	return cause;
}

/* A finding's place: after its chain's first cause (root), depth links on. */
struct fpos { uint32_t root, depth, at; };

static int cmp_fpos(const void *a, const void *b)
{
	const struct fpos *x = a, *y = b;
	if (x->root != y->root)
		return x->root < y->root ? -1 : 1;
	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Every finding's root and depth along its causes, each link followed
 * once; a finding in (or leading into) a cycle keeps its own place. */
static void chain_places(const int *cause, uint32_t n, struct fpos *pos, uint32_t *path)
{
	for (uint32_t k = 0; k < n; k++)
		pos[k] = (struct fpos){UINT32_MAX, 0, k};    /* root UINT32_MAX: not yet */
	for (uint32_t k = 0; k < n; k++) {
		uint32_t len = 0, at = k;
		/* up the chain to a known place, the first cause, or a cycle
		 * (at most n links: one past that repeats one) */
		while (pos[at].root == UINT32_MAX && cause[at] >= 0 && len < n) {
			path[len++] = at;
			pos[at].root = UINT32_MAX - 1;       /* on the path */
			at = (uint32_t)cause[at];
		}
		struct fpos base;
		if (pos[at].root == UINT32_MAX - 1 || len == n) {
			base = (struct fpos){UINT32_MAX, 0, 0};          /* a cycle */
		} else {
			if (pos[at].root == UINT32_MAX)
				pos[at].root = at;                       /* a first cause */
			base = pos[at];
		}
		while (len--) {
			uint32_t p = path[len];
			if (base.root == UINT32_MAX)
				pos[p].root = p, pos[p].depth = 0;
			else
				pos[p].root = base.root, pos[p].depth = ++base.depth;
		}
	}
}

/* A hang that another finding explains (the ranks it names had stopped
 * there: cut off by a mismatch, or waiting in another group's hang) goes
 * right after that finding, whatever the times say: the ranks of another
 * group may reach their next collective before the culprit's group's
 * ranks reach theirs. */
static bool after_causes(struct cd_pm *pm)
{
	uint32_t n = pm->f.n;
	int *stop = malloc(((size_t)pm->n + 1) * sizeof *stop);
	int *cause = malloc((size_t)n * sizeof *cause);
	uint32_t *path = malloc((size_t)n * sizeof *path);
	struct fpos *pos = malloc((size_t)n * sizeof *pos);
	struct cd_finding *tmp = malloc((size_t)n * sizeof *tmp);
	bool ok = stop && cause && path && pos && tmp;
	if (ok) {
		stop_findings(pm, stop);
		for (uint32_t k = 0; k < n; k++)
			cause[k] = hang_cause(pm, stop, k);
		chain_places(cause, n, pos, path);
		qsort(pos, n, sizeof *pos, cmp_fpos);
		for (uint32_t k = 0; k < n; k++) {
			tmp[k] = pm->f.v[pos[k].at];
			path[pos[k].at] = k;            /* (path: now each one's new index) */
		}
		/* (a cycle's findings, each at depth 0, follow from none) */
		for (uint32_t k = 0; k < n; k++) {
			int c = cause[pos[k].at];
			tmp[k].follows = c >= 0 && pos[k].depth ? (int32_t)path[c] : -1;
		}
		memcpy(pm->f.v, tmp, (size_t)n * sizeof *tmp);
	}
	free(stop);
	free(cause);
	free(path);
	free(pos);
	free(tmp);
	return ok;
}

static bool order_findings(struct cd_pm *pm)
{
	for (uint32_t k = 0; k < pm->f.n; k++)
		pm->f.v[k].follows = -1;
	if (pm->f.n < 2)
		return true;
	qsort(pm->f.v, pm->f.n, sizeof *pm->f.v, cmp_finding);
	return after_causes(pm);
}

/* ---- the per-module count table ---- */

int64_t cd_pm_rank_region(const struct cd_pm *pm, int i, int64_t region, bool *done)
{
	const struct cd_rank_summary *s = pm->r[i];
	*done = false;
	if (s->rgn_sorted) {
		uint32_t lo = 0, hi = s->rgn.n;
		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;
			if (s->rgn.v[mid].region < region)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* the last of equal ids, as the search below finds it */
		while (lo + 1 < s->rgn.n && s->rgn.v[lo + 1].region == region)
			lo++;
		if (lo < s->rgn.n && s->rgn.v[lo].region == region) {
			*done = s->rgn.v[lo].done;
			return s->rgn.v[lo].colls;
		}
		return -1;
	}
	for (uint32_t k = s->rgn.n; k-- > 0;)
		if (s->rgn.v[k].region == region) {
			*done = s->rgn.v[k].done;
			return s->rgn.v[k].colls;
		}
	return -1;
}

typedef CD_VEC(int64_t) i64vec;

/* The regions every rank finished, sorted. */
static bool common_regions(const struct cd_pm *pm, i64vec *common)
{
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		int64_t *d = malloc((s->rgn.n ? s->rgn.n : 1) * sizeof *d);
		uint32_t nd = 0;
		if (!d)
			return false;
		for (uint32_t k = 0; k < s->rgn.n; k++)
			if (s->rgn.v[k].done)
				d[nd++] = s->rgn.v[k].region;
		qsort(d, nd, sizeof *d, cmp_i64);
		if (i == 0) {
			for (uint32_t k = 0; k < nd; k++)
				if (!k || d[k] != d[k - 1])
					cd_vec_push(common, d[k]);
		} else {
			uint32_t w = 0;
			for (uint32_t k = 0; k < common->n; k++)
				if (bsearch(&common->v[k], d, nd, sizeof *d, cmp_i64))
					common->v[w++] = common->v[k];
			common->n = w;
		}
		free(d);
	}
	return true;
}

struct rowhit { uint32_t row; int64_t region; int rank; uint64_t n; };

static int cmp_rowhit(const void *a, const void *b)
{
	const struct rowhit *x = a, *y = b;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	if (x->region != y->region)
		return x->region < y->region ? -1 : 1;
	return x->rank - y->rank;
}

static void module_rows(struct cd_pm *pm)
{
	struct cd_intern keys = {0};
	i64vec common = {0};
	CD_VEC(struct rowhit) hits = {0};
	CD_VEC(uint32_t) keep = {0};   /* per key: row index + 1 when differing */
	char buf[64];

	if (!common_regions(pm, &common) || !common.n)
		goto out;
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		for (uint32_t k = 0; k < s->mods.n; k++) {
			const struct cd_modcount *mc = &s->mods.v[k];
			if (!bsearch(&mc->region, common.v, common.n, sizeof *common.v, cmp_i64))
				continue;
			uint32_t key[3] = {cd_pm_gid(pm, i, mc->module), cd_pm_gid(pm, i, mc->coll),
					   mc->bw};
			memcpy(buf, key, sizeof key);
			uint32_t before = keys.count;
			uint32_t id = cd_intern(&keys, buf, sizeof key);
			if (id == CD_NOID)
				continue;
			if (id >= before) {
				struct cd_modrow row = {key[0], key[1], mc->bw != 0,
							calloc((size_t)pm->n, sizeof(uint64_t)), -1};
				if (!row.counts || !cd_vec_push(&pm->rows, row)) {
					free(row.counts);
					continue;
				}
			}
			if (id < pm->rows.n)
				pm->rows.v[id].counts[i] += mc->n;
		}
	}
	/* keep the rows where ranks differ */
	if (!cd_vec_reserve(&keep, pm->rows.n + 1))
		goto out;
	uint32_t w = 0;
	for (uint32_t i = 0; i < pm->rows.n; i++) {
		bool differ = false;
		for (int k = 1; k < pm->n && !differ; k++)
			differ = pm->rows.v[i].counts[k] != pm->rows.v[i].counts[0];
		keep.v[i] = differ ? w + 1 : 0;
		if (differ)
			pm->rows.v[w++] = pm->rows.v[i];
		else
			free(pm->rows.v[i].counts);
	}
	uint32_t nkeys = pm->rows.n;
	pm->rows.n = w;
	if (!w)
		goto out;
	/* the first region where each kept row differs */
	for (int i = 0; i < pm->n; i++) {
		const struct cd_rank_summary *s = pm->r[i];
		for (uint32_t k = 0; k < s->mods.n; k++) {
			const struct cd_modcount *mc = &s->mods.v[k];
			uint32_t key[3] = {cd_pm_gid(pm, i, mc->module), cd_pm_gid(pm, i, mc->coll),
					   mc->bw};
			uint32_t id = cd_intern_find(&keys, (const char *)key, sizeof key);
			if (id == CD_NOID || id >= nkeys || !keep.v[id])
				continue;
			if (!bsearch(&mc->region, common.v, common.n, sizeof *common.v, cmp_i64))
				continue;
			struct rowhit h = {keep.v[id] - 1, mc->region, i, mc->n};
			cd_vec_push(&hits, h);
		}
	}
	if (hits.n)
		qsort(hits.v, hits.n, sizeof *hits.v, cmp_rowhit);
	for (uint32_t a = 0, b; a < hits.n; a = b) {
		for (b = a; b < hits.n && hits.v[b].row == hits.v[a].row &&
			    hits.v[b].region == hits.v[a].region; b++)
			;
		struct cd_modrow *row = &pm->rows.v[hits.v[a].row];
		if (row->region >= 0)
			continue;
		bool differ = (int)(b - a) != pm->n;
		for (uint32_t k = a + 1; k < b && !differ; k++)
			differ = hits.v[k].n != hits.v[a].n;
		if (differ)
			row->region = hits.v[a].region;
	}
out:
	cd_vec_free(&common);
	cd_vec_free(&hits);
	cd_vec_free(&keep);
	cd_intern_free(&keys);
}

/* ---- the step summary: runs of regions where every rank finished with
 * the same count, and each region where the ranks differ ---- */

static void step_lines(struct cd_pm *pm)
{
	CD_VEC(int64_t) ids = {0};
	uint32_t *cur = calloc((size_t)(pm->n ? pm->n : 1), sizeof *cur);
	if (!cur)
		return;
	for (int i = 0; i < pm->n; i++)
		for (uint32_t k = 0; k < pm->r[i]->rgn.n; k++)
			if (!cd_vec_push(&ids, pm->r[i]->rgn.v[k].region))
				goto out;
	if (!ids.n)
		goto out;
	qsort(ids.v, ids.n, sizeof *ids.v, cmp_i64);
	for (uint32_t a = 0; a < ids.n;) {
		int64_t region = ids.v[a];
		while (a < ids.n && ids.v[a] == region)
			a++;
		bool uniform = true;
		int64_t colls = -1;
		for (int i = 0; i < pm->n && uniform; i++) {
			/* regions come in trace order: a cursor per rank, a search
			 * only when a trace numbers them out of order */
			const struct cd_rank_summary *s = pm->r[i];
			while (cur[i] < s->rgn.n && s->rgn.v[cur[i]].region < region)
				cur[i]++;
			bool done = false;
			int64_t c = -1;
			if (cur[i] < s->rgn.n && s->rgn.v[cur[i]].region == region) {
				done = s->rgn.v[cur[i]].done;
				c = s->rgn.v[cur[i]].colls;
			} else if (cur[i] < s->rgn.n) {
				c = cd_pm_rank_region(pm, i, region, &done);
			}
			if (c < 0 || !done || (colls >= 0 && c != colls))
				uniform = false;
			colls = c;
		}
		struct cd_stepline *last = pm->steps.n ? &pm->steps.v[pm->steps.n - 1] : NULL;
		if (uniform && last && last->uniform && last->colls == (uint32_t)colls) {
			last->last = region;
			last->nregions++;
			continue;
		}
		struct cd_stepline l = {region, region, 1, uniform, uniform ? (uint32_t)colls : 0};
		cd_vec_push(&pm->steps, l);
	}
out:
	free(cur);
	cd_vec_free(&ids);
}

bool cd_pm_build(struct cd_pm *pm, struct cd_rank_summary *const *sums, int n, int64_t late_ns)
{
	memset(pm, 0, sizeof *pm);
	pm->late_ns = late_ns > 0 ? late_ns : CD_LATE_DEFAULT_NS;
	if (!group_ranks(pm, sums, n) || !group_members(pm))
		return false;
	empty_findings(pm);
	if (!find_findings(pm))
		return false;
	died_findings(pm);
	if (!order_findings(pm))
		return false;
	module_rows(pm);
	step_lines(pm);
	return true;
}

bool cd_pm_differ(const struct cd_pm *pm)
{
	return pm->f.n || pm->dups.n || pm->missing.n || pm->rows.n;
}

void cd_pm_free(struct cd_pm *pm)
{
	for (uint32_t k = 0; k < pm->f.n; k++) {
		cd_vec_free(&pm->f.v[k].odd);
		cd_vec_free(&pm->f.v[k].odd_rec);
		cd_vec_free(&pm->f.v[k].others);
		cd_vec_free(&pm->f.v[k].absent);
	}
	cd_vec_free(&pm->f);
	for (uint32_t k = 0; k < pm->rows.n; k++)
		free(pm->rows.v[k].counts);
	cd_vec_free(&pm->rows);
	cd_vec_free(&pm->steps);
	for (int i = 0; pm->tr && i < pm->n; i++)
		free(pm->tr[i]);
	free(pm->tr);
	cd_intern_free(&pm->g);
	cd_vec_free(&pm->dups);
	cd_vec_free(&pm->missing);
	cd_vec_free(&pm->pg_n);
	cd_vec_free(&pm->pg_off);
	cd_vec_free(&pm->pg_runs);
	free(pm->all);
	free(pm->r);
	memset(pm, 0, sizeof *pm);
}
