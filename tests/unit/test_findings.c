/* Unit tests of the post-mortem's findings (findings.h) on rank summaries
 * built by hand.  Each expected finding is worked out from the rules in
 * findings.h and commdebug(1) (ranks: matching, ties, one fault one
 * finding, time, findings), in the comments next to it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "findings.h"
#include "ranks.h"

#define SEC 1000000000LL
#define T0 1700000000000000000LL

static struct cd_rank_summary sums[8];
static int nsums;

static uint32_t str(struct cd_rank_summary *s, const char *p)
{
	return p ? cd_intern(&s->s, p, (uint32_t)strlen(p)) : CD_NOID;
}

/* A rank that exited normally (legacy trace: no "ends"). */
static struct cd_rank_summary *rank(int64_t r, int64_t world)
{
	struct cd_rank_summary *s = &sums[nsums++];
	char path[32];
	memset(s, 0, sizeof *s);
	snprintf(path, sizeof path, "rank%lld.jsonl", (long long)r);
	s->path = strdup(path);
	s->has_rank = true;
	s->rank = r;
	s->has_world = world > 0;
	s->world_size = world;
	s->t0 = T0;
	s->end = CD_END_CLOSED;
	s->end_time = -1;
	s->last_time = -1;
	s->rgn_sorted = true;
	s->end_how = s->end_exc = s->end_msg = s->end_signame = CD_NOID;
	return s;
}

/* One collective: pg name, seq, collective, bytes (-1: none), module,
 * region, time (seconds after T0, -1: unknown). */
static void coll(struct cd_rank_summary *s, const char *pg, int64_t seq, const char *name,
		 int64_t bytes, const char *module, int64_t region, int64_t t)
{
	struct cd_crec c = {.pg = str(s, pg), .coll = str(s, name), .dtype = str(s, "torch.float32"),
			    .module = str(s, module), .phase = CD_PH_FORWARD,
			    .has_bytes = bytes >= 0, .seq = seq, .bytes = bytes,
			    .region = region, .time = t >= 0 ? T0 + t * SEC : -1};
	cd_vec_push(&s->colls, c);
	if (c.time > s->last_time)
		s->last_time = c.time;
}

static void region(struct cd_rank_summary *s, int64_t rg, bool done, uint32_t colls)
{
	struct cd_rregion r = {.region = rg, .label = CD_NOID, .done = done, .colls = colls,
			       .t_enter = -1, .t_exit = -1};
	cd_vec_push(&s->rgn, r);
}

static void build(struct cd_pm *pm, int64_t late_ns)
{
	struct cd_rank_summary *p[8];
	for (int i = 0; i < nsums; i++)
		p[i] = &sums[i];
	CHECK(cd_pm_build(pm, p, nsums, late_ns));
}

static void done(struct cd_pm *pm)
{
	cd_pm_free(pm);
	for (int i = 0; i < nsums; i++)
		cd_rank_summary_free(&sums[i]);
	nsums = 0;
}

static bool has_int(const int *v, uint32_t n, int x)
{
	for (uint32_t k = 0; k < n; k++)
		if (v[k] == x)
			return true;
	return false;
}

/* The same four collectives on every rank (pg 0, seq 0-3). */
static void same4(struct cd_rank_summary *s)
{
	coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, 1);
	coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, 2);
	coll(s, "0", 2, "c10d.allgather_", 512, "Net.c", 1, 3);
	coll(s, "0", 3, "c10d.allreduce_", 256, "Net.d", 1, 4);
	region(s, 1, true, 4);
}

static void test_agree(void)
{
	/* three ranks, the same collectives at the same times: no finding,
	 * nobody missing, one uniform step line */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++)
		same4(rank(r, 3));
	build(&pm, 0);
	CHECK(pm.n == 3);
	CHECK(pm.f.n == 0);
	CHECK(pm.missing.n == 0);
	CHECK(pm.dups.n == 0);
	CHECK(!pm.bad && !pm.cut);
	CHECK(pm.rows.n == 0);
	done(&pm);
}

static void test_uneven_sizes_agree(void)
{
	/* all-to-all payloads may differ between ranks: only the dtype is
	 * compared, so 128 against 256 bytes is no finding */
	struct cd_pm pm;
	for (int r = 0; r < 2; r++) {
		struct cd_rank_summary *s = rank(r, 2);
		coll(s, "0", 0, "c10d.alltoall_base_", r ? 256 : 128, "Net.a", 1, 1);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 0);
	done(&pm);
}

static void test_type_mismatch(void)
{
	/* rank 1 issues all_gather where ranks 0 and 2 issue all_reduce at seq 1,
	 * then agrees again from seq 2: realigned with k = 1 "agrees again",
	 * one type_mismatch at seq 1 (seq_end 1), decided by the majority */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, 1);
		coll(s, "0", 1, r == 1 ? "c10d.allgather_" : "c10d.allreduce_", 256, "Net.b", 1, 2);
		coll(s, "0", 2, "c10d.allreduce_", 256, "Net.c", 1, 3);
		coll(s, "0", 3, "c10d.allreduce_", 256, "Net.d", 1, 4);
		region(s, 1, true, 4);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_TYPE);
		CHECK_STR(cd_fkind_names[f->kind], "type_mismatch");
		CHECK_STR(f->pg_name, "0");
		CHECK(f->seq == 1 && f->seq_end == 1);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 1);
		CHECK(f->others.n == 2 && has_int(f->others.v, f->others.n, 0) &&
		      has_int(f->others.v, f->others.n, 2));
		CHECK(f->basis == CD_BY_POS);
		CHECK(f->ref == 0 || f->ref == 2);
		CHECK(f->odd_rec.n == 1 && f->odd_rec.v[0] &&
		      strcmp(cd_rank_str(&sums[1], f->odd_rec.v[0]->coll), "c10d.allgather_") == 0);
		/* arrivals at seq 1: every rank at T0 + 2 s */
		CHECK(f->time == T0 + 2 * SEC);
	}
	done(&pm);
}

static void test_size_mismatch(void)
{
	/* rank 2 of four sends 512 bytes where the others send 256, at seq 0
	 * only: size_mismatch (the collective and dtype are the same) */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++) {
		struct cd_rank_summary *s = rank(r, 4);
		coll(s, "0", 0, "c10d.allreduce_", r == 2 ? 512 : 256, "Net.a", 1, 1);
		coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, 2);
		region(s, 1, true, 2);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_SIZE);
		CHECK(f->seq == 0 && f->seq_end == 0);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 2);
		CHECK(f->others.n == 3);
		CHECK(f->ref_rec && f->ref_rec->bytes == 256);
		CHECK(f->odd_rec.n == 1 && f->odd_rec.v[0]->bytes == 512);
	}
	done(&pm);
}

static void test_skip(void)
{
	/* ranks 0 and 2 issue a b c d e (seq 0-4); rank 1 issues a c d e
	 * (seq 0-3): at seq 1 it has c where the others have b.  Realign k = 1:
	 * "agrees again from +1" (its d against their c) fails, "skipped 1"
	 * (its c d e against their c d e) holds: one skip of 1 at seq 1, and
	 * nothing after it (rank 1 is compared shifted) */
	static const char *mods[] = {"Net.a", "Net.b", "Net.c", "Net.d", "Net.e"};
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		int64_t seq = 0;
		for (int k = 0; k < 5; k++) {
			if (r == 1 && k == 1)
				continue;
			coll(s, "0", seq++, "c10d.allreduce_", 256, mods[k], 1, 1 + k);
		}
		region(s, 1, true, (uint32_t)seq);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_SKIP);
		CHECK(f->count == 1);
		CHECK(f->seq == 1 && f->seq_end == 1);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 1);
		CHECK(f->ref_rec &&
		      strcmp(cd_rank_str(&sums[f->ref], f->ref_rec->module), "Net.b") == 0);
	}
	done(&pm);
}

static void test_straggler(void)
{
	/* rank 2 reaches seq 0 and seq 1 8 s after ranks 0-1 (late 5 s): one
	 * straggler at seq 0, delay 8 s; at seq 1 its delay is the same (within
	 * late of the reported one): not reported again.  Rank 1 is 3 s late
	 * at seq 2: below late, nothing. */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, r == 2 ? 18 : 10);
		coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, r == 2 ? 28 : 20);
		coll(s, "0", 2, "c10d.allreduce_", 256, "Net.c", 1, r == 1 ? 33 : 30);
		region(s, 1, true, 3);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_STRAGGLER);
		CHECK(f->seq == 0);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 2);
		CHECK(f->others.n == 2 && f->others.v[0] == 0 && f->others.v[1] == 1);
		CHECK(f->delay == 8 * SEC);
		CHECK(f->time == T0 + 10 * SEC && f->t_last == T0 + 18 * SEC);
		CHECK(f->last_rank == 2);
	}
	done(&pm);

	/* the same with late 2 s: rank 1's 3 s at seq 2 is a straggler too */
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, r == 2 ? 18 : 10);
		coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, r == 2 ? 28 : 20);
		coll(s, "0", 2, "c10d.allreduce_", 256, "Net.c", 1, r == 1 ? 33 : 30);
		region(s, 1, true, 3);
	}
	build(&pm, 2 * SEC);
	CHECK(pm.f.n == 2);
	if (pm.f.n == 2) {
		CHECK(pm.f.v[1].kind == CD_FK_STRAGGLER && pm.f.v[1].seq == 2);
		CHECK(pm.f.v[1].odd.n == 1 && pm.f.v[1].odd.v[0] == 1);
		CHECK(pm.f.v[1].delay == 3 * SEC);
	}
	done(&pm);
}

static void test_hang(void)
{
	/* rank 2's trace ends after seq 1; ranks 0 and 1 reached seq 2 at 5 s,
	 * and their traces end at 13 s and 10 s: rank 2 hangs at seq 2, the
	 * longest wait 13 - 5 = 8 s */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, 1);
		coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, 3);
		if (r < 2)
			coll(s, "0", 2, "c10d.allreduce_", 256, "Net.c", 1, 5);
		region(s, 1, false, r < 2 ? 3 : 2);
		s->end = CD_END_ABRUPT;
		s->last_time = T0 + (r == 0 ? 13 : r == 1 ? 10 : 3) * SEC;
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_HANG);
		CHECK(f->seq == 2);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 2);
		CHECK(f->odd_rec.n == 1 && f->odd_rec.v[0] == NULL);
		CHECK(f->others.n == 2);
		CHECK(f->delay == 8 * SEC);
	}
	done(&pm);
}

static void test_missing_rank(void)
{
	/* world 5: traces of ranks 0, 1, 3 and an empty trace named rank4:
	 * rank 2 is missing, rank 4 is not (its empty trace stands for it) but
	 * is an empty_trace finding; a second trace of rank 1 is a duplicate */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++)
		if (r != 2)
			same4(rank(r, 5));
	struct cd_rank_summary *e = rank(4, 0);
	e->has_rank = false;
	e->rank_from_name = true;
	e->end = CD_END_EMPTY;
	struct cd_rank_summary *d = rank(1, 5);
	free(d->path);
	d->path = strdup("rank1.again.jsonl");
	same4(d);
	build(&pm, 0);
	CHECK(pm.world == 5);
	CHECK(pm.n == 3);
	CHECK(pm.missing.n == 1 && pm.missing.v[0] == 2);
	CHECK(pm.dups.n == 1);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		CHECK(pm.f.v[0].kind == CD_FK_EMPTY);
		CHECK(pm.f.v[0].trace == e);
	}
	done(&pm);
}

static void test_died(void)
{
	/* four ranks agree on every collective, then: rank 0 ended by an
	 * exception (at 20 s), ranks 1 and 3 exited with status 1 (at 30 s, 25 s),
	 * rank 2 was killed (no end event, last event at 10 s).  Three ways of
	 * dying, three died findings, earliest first: killed (10 s), exception
	 * (20 s), exit 1 (ranks 1 and 3, earliest 25 s). */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++) {
		struct cd_rank_summary *s = rank(r, 4);
		same4(s);
		s->ends = true;
	}
	sums[0].end = CD_END_EXCEPTION;
	sums[0].has_end = true;
	sums[0].end_time = T0 + 20 * SEC;
	sums[0].end_how = str(&sums[0], "exception");
	sums[0].end_exc = str(&sums[0], "RuntimeError");
	sums[0].end_msg = str(&sums[0], "Connection closed by peer");
	for (int r = 1; r < 4; r += 2) {
		sums[r].end = CD_END_EXITED;
		sums[r].has_end = true;
		sums[r].end_how = str(&sums[r], "exit");
		sums[r].has_code = true;
		sums[r].end_code = 1;
		sums[r].end_time = T0 + (r == 1 ? 30 : 25) * SEC;
	}
	sums[2].end = CD_END_KILLED;
	sums[2].last_time = T0 + 10 * SEC;
	build(&pm, 0);
	CHECK(pm.f.n == 3);
	if (pm.f.n == 3) {
		for (int k = 0; k < 3; k++)
			CHECK(pm.f.v[k].kind == CD_FK_DIED);
		CHECK(pm.f.v[0].odd.n == 1 && pm.f.v[0].odd.v[0] == 2);
		CHECK(pm.f.v[0].time == T0 + 10 * SEC);
		CHECK(pm.f.v[1].odd.n == 1 && pm.f.v[1].odd.v[0] == 0);
		CHECK(pm.f.v[2].odd.n == 2 && pm.f.v[2].odd.v[0] == 1 && pm.f.v[2].odd.v[1] == 3);
		CHECK(pm.f.v[2].time == T0 + 25 * SEC && pm.f.v[2].t_last == T0 + 30 * SEC);
		CHECK(pm.f.v[2].last_rank == 1);
	}
	done(&pm);
}

static void test_died_ends(void)
{
	/* which ends are deaths (cd_rank_died): a cut trace only when its
	 * recorder writes end events and it has none; a legacy abrupt trace
	 * is not a death (the hang or nothing tells); exit status 1 and 2 are
	 * two ways of dying */
	struct cd_rank_summary *s = rank(0, 1);
	s->end = CD_END_CUT;
	CHECK(!cd_rank_died(s));
	s->ends = true;
	CHECK(cd_rank_died(s));
	s->has_end = true;
	CHECK(!cd_rank_died(s));
	s->end = CD_END_ABRUPT;
	CHECK(!cd_rank_died(s));
	s->end = CD_END_SIGNAL;
	CHECK(cd_rank_died(s));
	s->end = CD_END_CLOSED;
	CHECK(!cd_rank_died(s));
	cd_rank_summary_free(s);
	nsums = 0;

	struct cd_pm pm;
	for (int r = 0; r < 2; r++) {
		struct cd_rank_summary *x = rank(r, 2);
		same4(x);
		x->ends = x->has_end = true;
		x->end = CD_END_EXITED;
		x->has_code = true;
		x->end_code = 1 + r;
	}
	build(&pm, 0);
	CHECK(pm.f.n == 2);
	for (uint32_t k = 0; k < pm.f.n; k++)
		CHECK(pm.f.v[k].kind == CD_FK_DIED && pm.f.v[k].odd.n == 1);
	done(&pm);
}

static void test_died_after_collective_finding(void)
{
	/* a size mismatch (timed) comes before a death, even an earlier one */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = rank(r, 3);
		coll(s, "0", 0, "c10d.allreduce_", r == 1 ? 64 : 256, "Net.a", 1, 50);
		region(s, 1, true, 1);
	}
	sums[2].ends = true;
	sums[2].end = CD_END_KILLED;
	sums[2].last_time = T0 + SEC;
	build(&pm, 0);
	CHECK(pm.f.n == 2);
	if (pm.f.n == 2) {
		CHECK(pm.f.v[0].kind == CD_FK_SIZE);
		CHECK(pm.f.v[1].kind == CD_FK_DIED && pm.f.v[1].odd.v[0] == 2);
	}
	done(&pm);
}

/* Two ranks, two regions in pg 0: region 1 (finished) a then b on both;
 * region 2: a, then b on rank `good`, c (another collective) on the other. */
static void tie_own_steps(int good)
{
	struct cd_pm pm;
	for (int r = 0; r < 2; r++) {
		struct cd_rank_summary *s = rank(r, 2);
		coll(s, "0", 0, "c10d.allreduce_", 256, "Net.a", 1, 1);
		coll(s, "0", 1, "c10d.allreduce_", 256, "Net.b", 1, 2);
		coll(s, "0", 2, "c10d.allreduce_", 256, "Net.a", 2, 3);
		if (r == good)
			coll(s, "0", 3, "c10d.allreduce_", 256, "Net.b", 2, 4);
		else
			coll(s, "0", 3, "c10d.broadcast_", 256, "Net.b", 2, 4);
		region(s, 1, true, 2);
		region(s, 2, false, 2);
	}
	/* at seq 3 one rank against one: a tie.  Rank `good`'s own region 1
	 * issued b after a (a vote for its side), the other's issued b where
	 * it now issues c (against): own steps decide, `good` is the
	 * reference whatever its number */
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_TYPE);
		CHECK(f->seq == 3);
		CHECK(f->basis == CD_BY_OWN_STEPS);
		CHECK_STR(cd_basis_names[f->basis], "own_steps");
		CHECK(f->ref == good);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 1 - good);
		CHECK(f->basis_rank == good);
		CHECK(f->basis_region == 1);
		CHECK(f->basis_votes[0] + f->basis_votes[1] == 1);
	}
	done(&pm);
}

static void test_tie_own_steps(void)
{
	tie_own_steps(0);
	tie_own_steps(1);
}

static void test_tie_sibling(void)
{
	/* tensor-parallel pairs: pg "tp0" ranks 0-1, pg "tp1" ranks 2-3, one
	 * region, no history.  tp1 issues x then y; in tp0 rank 1 issues x y,
	 * rank 0 x z.  At tp0 seq 1 a tie with no own steps: the sibling group
	 * tp1 issued x then y, so rank 1's side is the reference (not the
	 * lowest rank's), decided by sibling_group tp1 with 2 votes */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++) {
		struct cd_rank_summary *s = rank(r, 4);
		const char *pg = r < 2 ? "tp0" : "tp1";
		coll(s, pg, 0, "c10d.allreduce_", 256, "Net.x", 1, 1);
		coll(s, pg, 1, "c10d.allreduce_", 256, r == 0 ? "Net.z" : "Net.y", 1, 2);
		region(s, 1, true, 2);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_DESYNC);
		CHECK_STR(f->pg_name, "tp0");
		CHECK(f->seq == 1);
		CHECK(f->basis == CD_BY_SIBLING);
		CHECK_STR(cd_pm_str(&pm, f->basis_pg), "tp1");
		CHECK(f->ref == 1);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 0);
		CHECK((f->basis_votes[0] == 0 && f->basis_votes[1] == 2) ||
		      (f->basis_votes[0] == 2 && f->basis_votes[1] == 0));
	}
	done(&pm);
}

static void test_tie_lowest(void)
{
	/* two ranks, one region, no sibling: nothing decides; the lowest
	 * rank's side (rank 0) is the reference, rank 1 is odd */
	struct cd_pm pm;
	for (int r = 0; r < 2; r++) {
		struct cd_rank_summary *s = rank(1 - r, 2);   /* given in reverse order */
		coll(s, "0", 0, r == 0 ? "c10d.allgather_" : "c10d.allreduce_", 256, "Net.a", 1, 1);
		region(s, 1, true, 1);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_TYPE);
		CHECK(f->basis == CD_BY_LOWEST);
		CHECK(pm.r[0]->rank == 0 && pm.r[1]->rank == 1);
		CHECK(f->ref == 0);
		CHECK(f->odd.n == 1 && f->odd.v[0] == 1);
		CHECK(f->ref_rec &&
		      strcmp(cd_rank_str(pm.r[0], f->ref_rec->coll), "c10d.allreduce_") == 0);
	}
	done(&pm);
}

/* ---- Flight Recorder dumps: records without regions, their states ---- */

#define FRMOD "(no module: Flight Recorder)"

/* A rank's Flight Recorder dump as cd_fr_summarize makes one: states
 * tracked (NCCL) or not (gloo); world: the pg whose entries' desc is
 * "default_pg" (NULL: none). */
static struct cd_rank_summary *dump(int64_t r, int64_t world, bool states, const char *world_pg)
{
	struct cd_rank_summary *s = rank(r, world);
	s->source = CD_SRC_FR_PICKLE;
	s->fr_states = states;
	if (world_pg) {
		s->fr_has_world_pg = true;
		s->fr_world_pg = str(s, world_pg);
	}
	return s;
}

/* One collective of a dump (no region), with what the dump says of it:
 * retired (1, 0, -1: not in the dump) and state (0 scheduled, 1 started,
 * 2 completed). */
static void frcoll(struct cd_rank_summary *s, const char *pg, int64_t seq, const char *name,
		   int64_t bytes, int64_t t, int retired, int state)
{
	coll(s, pg, seq, name, bytes, FRMOD, -1, t);
	struct cd_fr_crec fc = {.record_id = s->colls.n - 1, .op_id = -1, .t_started = -1,
				.t_completed = -1, .out_bytes = bytes, .user_frame = UINT32_MAX,
				.state = (uint8_t)state, .retired = (int8_t)retired};
	cd_vec_push(&s->fr, fc);
}

/* The real skip job's shape (testdata/fr/skip): per step a world
 * all_reduce of 64 bytes and a broadcast of 32; rank `odd` issues `last`
 * at seq 5 where the others all_reduce, and every rank stops there. */
static void gloo_job(int odd, const char *last, int nranks)
{
	for (int r = 0; r < nranks; r++) {
		struct cd_rank_summary *s = dump(r, nranks, false, "0");
		for (int64_t q = 1; q <= 4; q++)
			frcoll(s, "0", q, q % 2 ? "all_reduce" : "broadcast", q % 2 ? 64 : 32, q, 1, 0);
		if (r == odd)
			frcoll(s, "0", 5, last, strcmp(last, "broadcast") == 0 ? 32 : 64, 5, 0, 0);
		else
			frcoll(s, "0", 5, "all_reduce", 64, 5, 0, 0);
	}
}

static void test_pattern_skip(void)
{
	/* rank 1 broadcasts at seq 5 where ranks 0,2,3 all_reduce, and every
	 * rank stops there (nothing to realign against).  A dump has no
	 * regions, so no earlier step to take as the template; rank 1's own
	 * collectives of pg 0 (seq 1-4: all_reduce broadcast all_reduce
	 * broadcast) repeat every 2, and one period back (seq 3) it issued the
	 * all_reduce the others issued here, then (1 later) the broadcast it
	 * issued here: a skip of 1, told by its pattern */
	struct cd_pm pm;
	gloo_job(1, "broadcast", 4);
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_SKIP && f->count == 1);
		CHECK(f->seq == 5 && f->seq_end == 5);
		CHECK(f->odd.n == 1 && pm.r[f->odd.v[0]]->rank == 1);
		CHECK(f->others.n == 3);
		CHECK(f->basis == CD_BY_PATTERN && pm.r[f->basis_rank]->rank == 1);
		CHECK(f->basis_period == 2 && f->basis_from == 1 && f->basis_to == 4);
		CHECK(f->basis_at == 3);
		CHECK(f->ref_rec && strcmp(cd_rank_str(pm.r[f->ref], f->ref_rec->coll), "all_reduce") == 0);
	}
	done(&pm);
}

static void test_pattern_other_coll(void)
{
	/* rank 1 all_gathers at seq 5 instead: its pattern held the all_reduce
	 * one period back, but not the all_gather 1 later (a broadcast): no
	 * skip, a type_mismatch decided at the position */
	struct cd_pm pm;
	gloo_job(1, "all_gather", 4);
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		CHECK(pm.f.v[0].kind == CD_FK_TYPE && pm.f.v[0].basis == CD_BY_POS);
		CHECK(pm.f.v[0].odd.n == 1 && pm.r[pm.f.v[0].odd.v[0]]->rank == 1);
	}
	done(&pm);
}

static void test_pattern_needs_two_periods(void)
{
	/* seq 1 all_reduce, seq 2 broadcast, then rank 1 broadcasts at seq 3
	 * where ranks 0 and 2 all_reduce: a period of 2 seen once is no
	 * pattern (it must repeat: 2 periods), so a type_mismatch */
	struct cd_pm pm;
	for (int r = 0; r < 3; r++) {
		struct cd_rank_summary *s = dump(r, 3, false, "0");
		frcoll(s, "0", 1, "all_reduce", 64, 1, 1, 0);
		frcoll(s, "0", 2, "broadcast", 32, 2, 1, 0);
		frcoll(s, "0", 3, r == 1 ? "broadcast" : "all_reduce", r == 1 ? 32 : 64, 3, 0, 0);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1 && pm.f.v[0].kind == CD_FK_TYPE);
	done(&pm);
}

/* Ranks 0,1,3 of 4 (rank 2 left no dump): pg 0 seq 1-3 retired, seq 4
 * as `last_retired` says. */
static void absent_job(bool states, int last_retired, int last_state, const char *world_pg)
{
	for (int r = 0; r < 4; r++) {
		if (r == 2)
			continue;
		struct cd_rank_summary *s = dump(r, 4, states, world_pg);
		for (int64_t q = 1; q <= 3; q++)
			frcoll(s, "0", q, "all_reduce", 64, q, 1, states ? 2 : 0);
		frcoll(s, "0", 4, "all_reduce", 64, 4, last_retired, last_state);
	}
}

static void test_hang_absent(void)
{
	/* gloo (no states): ranks 0,1,3 wait in pg 0 seq 4, not retired in
	 * their dumps; rank 2 left nothing and is a member of pg 0 (the world
	 * group, by the entries' desc): it hangs there, the only finding */
	struct cd_pm pm;
	absent_job(false, 0, 0, "0");
	build(&pm, 0);
	CHECK(pm.missing.n == 1 && pm.missing.v[0] == 2);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_HANG && f->seq == 4);
		CHECK(f->odd.n == 0);
		CHECK(f->absent.n == 1 && f->absent.v[0] == 2);
		CHECK(f->others.n == 3);
		CHECK(f->flight_by == CD_FLBY_RETIRED);
		CHECK(f->delay == -1);   /* a dump does not say when it was taken */
		CHECK(cd_pm_world_pg(&pm, f->pg));
	}
	done(&pm);
}

static void test_hang_absent_ended(void)
{
	/* the same, but seq 4 retired (ended: perhaps by an error): nobody is
	 * shown waiting, so no hang; rank 2 is only missing */
	struct cd_pm pm;
	absent_job(false, 1, 0, "0");
	build(&pm, 0);
	CHECK(pm.missing.n == 1 && pm.f.n == 0);
	done(&pm);
}

static void test_hang_absent_not_member(void)
{
	/* in flight, but no dump names pg 0 the world group and no member list
	 * names rank 2: it is not known to be a member, so no hang */
	struct cd_pm pm;
	absent_job(false, 0, 0, NULL);
	build(&pm, 0);
	CHECK(pm.missing.n == 1 && pm.f.n == 0);
	done(&pm);
}

static void test_hang_absent_states(void)
{
	/* NCCL-shaped: states tracked, pg 0's members [0, 1, 2, 3] from
	 * pg_config; seq 4 "started" on ranks 0,1,3: rank 2 hangs, told by the
	 * state */
	struct cd_pm pm;
	absent_job(true, 0, 1, NULL);
	for (int i = 0; i < nsums; i++) {
		struct cd_rank_summary *s = &sums[i];
		static const int64_t members[] = {0, 1, 2, 3};
		cd_rank_add_pg(s, str(s, "0"), members, 4);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		CHECK(pm.f.v[0].kind == CD_FK_HANG && pm.f.v[0].seq == 4);
		CHECK(pm.f.v[0].absent.n == 1 && pm.f.v[0].absent.v[0] == 2);
		CHECK(pm.f.v[0].flight_by == CD_FLBY_STATE);
	}
	done(&pm);
}

static void test_hang_absent_pg_status(void)
{
	/* a dump without "retired" or states: pg_status says seq 4 was
	 * enqueued (4) but not completed (3) */
	struct cd_pm pm;
	absent_job(false, -1, 0, "0");
	for (int i = 0; i < nsums; i++) {
		struct cd_pgstat p = {str(&sums[i], "0"), 4, -1, 3};
		for (uint32_t k = 0; k < sums[i].fr.n; k++)
			sums[i].fr.v[k].retired = -1;
		cd_vec_push(&sums[i].pg_status, p);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		CHECK(pm.f.v[0].kind == CD_FK_HANG && pm.f.v[0].seq == 4);
		CHECK(pm.f.v[0].absent.n == 1 && pm.f.v[0].flight_by == CD_FLBY_PG_STATUS);
	}
	done(&pm);
}

static void test_hang_absent_traces(void)
{
	/* traces (no dump facts) with a missing rank: nothing shows anyone
	 * waiting, so as before no finding */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++)
		if (r != 2)
			same4(rank(r, 4));
	build(&pm, 0);
	CHECK(pm.missing.n == 1 && pm.f.n == 0);
	done(&pm);
}

static void test_hang_dump_behind(void)
{
	/* every rank has a dump; rank 3's ends after seq 3 while ranks 0-2 wait
	 * in seq 4 (not retired): rank 3 hangs there, told by "retired" */
	struct cd_pm pm;
	for (int r = 0; r < 4; r++) {
		struct cd_rank_summary *s = dump(r, 4, false, "0");
		for (int64_t q = 1; q <= 3; q++)
			frcoll(s, "0", q, "all_reduce", 64, q, 1, 0);
		if (r != 3)
			frcoll(s, "0", 4, "all_reduce", 64, 4, 0, 0);
	}
	build(&pm, 0);
	CHECK(pm.f.n == 1);
	if (pm.f.n == 1) {
		const struct cd_finding *f = &pm.f.v[0];
		CHECK(f->kind == CD_FK_HANG && f->seq == 4);
		CHECK(f->odd.n == 1 && pm.r[f->odd.v[0]]->rank == 3 && f->absent.n == 0);
		CHECK(f->flight_by == CD_FLBY_RETIRED && f->delay == -1);
	}
	done(&pm);
}

int main(void)
{
	TEST(test_agree);
	TEST(test_uneven_sizes_agree);
	TEST(test_type_mismatch);
	TEST(test_size_mismatch);
	TEST(test_skip);
	TEST(test_straggler);
	TEST(test_hang);
	TEST(test_missing_rank);
	TEST(test_died);
	TEST(test_died_ends);
	TEST(test_died_after_collective_finding);
	TEST(test_tie_own_steps);
	TEST(test_tie_sibling);
	TEST(test_tie_lowest);
	TEST(test_pattern_skip);
	TEST(test_pattern_other_coll);
	TEST(test_pattern_needs_two_periods);
	TEST(test_hang_absent);
	TEST(test_hang_absent_ended);
	TEST(test_hang_absent_not_member);
	TEST(test_hang_absent_states);
	TEST(test_hang_absent_pg_status);
	TEST(test_hang_absent_traces);
	TEST(test_hang_dump_behind);
	return check_done();
}
