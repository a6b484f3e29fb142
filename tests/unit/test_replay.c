/* Unit tests of the replay state machine: feed events, inspect the tracker
 * state (parents, parent_list, current module, AC flag, counts) directly.
 * Each expectation is derived from the reference hooks step by step in the
 * comments. */
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "parse.h"
#include "replay.h"

static struct cd_parser ps;
static char warned[4096];

static void warn(void *ud, const char *msg)
{
	(void)ud;
	strncat(warned, msg, sizeof warned - strlen(warned) - 2);
	strcat(warned, "\n");
}

static void init(struct cd_replay *r, bool ops)
{
	struct cd_replay_opts o = {.retain_ops = ops, .want_tree = true, .want_params = true,
				   .warn = warn};
	struct cd_err err = {0};
	warned[0] = '\0';
	if (cd_replay_init(r, &o, &err))
		abort();
}

/* Feed one event written as JSON. */
static void ev(struct cd_replay *r, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	struct cd_event e;
	struct cd_err err = {0};
	if (cd_parse_fast(&ps, line, strlen(line), &e, &err) || cd_replay_event(r, &e, &err)) {
		fprintf(stderr, "bad test event %s: %s\n", line, err.msg);
		abort();
	}
}

#define PRE(r, m) ev(r, "{\"ev\":\"fw_pre\",\"mod\":\"%s\",\"type\":\"T\"}", m)
#define PRE_BW(r, m) ev(r, "{\"ev\":\"fw_pre\",\"mod\":\"%s\",\"type\":\"T\",\"bw\":true}", m)
#define POST(r, m) ev(r, "{\"ev\":\"fw_post\",\"mod\":\"%s\"}", m)
#define POST_BW(r, m) ev(r, "{\"ev\":\"fw_post\",\"mod\":\"%s\",\"bw\":true}", m)
#define DONE(r, m) ev(r, "{\"ev\":\"fw_done\",\"mod\":\"%s\"}", m)
#define DONE_BW(r, m) ev(r, "{\"ev\":\"fw_done\",\"mod\":\"%s\",\"bw\":true}", m)
#define OP(r, n) ev(r, "{\"ev\":\"op\",\"name\":\"%s\"}", n)
#define OP_BW(r, n) ev(r, "{\"ev\":\"op\",\"name\":\"%s\",\"bw\":true}", n)
#define AR "_c10d_functional.all_reduce.default"

static uint32_t id(struct cd_replay *r, const char *m)
{
	return cd_intern_find(&r->mods, m, (uint32_t)strlen(m));
}

static const char *cur(struct cd_replay *r)
{
	return cd_intern_str(&r->mods, r->cur);
}

/* Count of a collective in a module's forward or backward list. */
static uint32_t count(struct cd_replay *r, const char *m, bool bw, const char *coll)
{
	const struct cd_rmod *rm = cd_replay_mod(r, id(r, m));
	if (!rm)
		return 0;
	const cd_countv *v = bw ? &rm->bw : &rm->fw;
	for (uint32_t i = 0; i < v->n; i++)
		if (strcmp(cd_intern_str(&r->colls, v->v[i].coll), coll) == 0)
			return v->v[i].n;
	return 0;
}

static bool in_parents(struct cd_replay *r, const char *m)
{
	uint32_t i = id(r, m);
	return i != CD_NOID && r->pcnt.v[i] > 0;
}

static void begin(struct cd_replay *r, int region)
{
	ev(r, "{\"ev\":\"region_enter\",\"region\":%d}", region);
}

static void test_nesting_and_depth(void)
{
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	PRE(&r, "M");          /* parents {Global, M}: depth 1 */
	PRE(&r, "M.a");        /* parents {Global, M, M.a}: depth 2 */
	CHECK(cd_replay_mod(&r, id(&r, "M"))->depth == 1);
	CHECK(cd_replay_mod(&r, id(&r, "M.a"))->depth == 2);
	CHECK(r.parent_list.n == 3);
	CHECK_STR(cur(&r), "M.a");
	POST(&r, "M.a");       /* ModTracker pops M.a from parents */
	CHECK(!in_parents(&r, "M.a"));
	CHECK_STR(cur(&r), "M.a"); /* the current module moves only at fw_done */
	DONE(&r, "M.a");       /* parent_list pops, current = M */
	CHECK_STR(cur(&r), "M");
	POST(&r, "M");
	DONE(&r, "M");
	CHECK_STR(cur(&r), "Global");
	CHECK(r.parent_list.n == 1);
	cd_replay_free(&r);
}

static void test_collective_in_local_hook_after_post(void)
{
	/* An all_reduce between fw_post and fw_done (a TP output hook) still
	 * belongs to the module: current = M.b, parents snapshot {Global, M, M.b}. */
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	PRE(&r, "M");
	PRE(&r, "M.b");
	POST(&r, "M.b");
	OP(&r, AR);
	DONE(&r, "M.b");
	POST(&r, "M");
	DONE(&r, "M");
	CHECK(count(&r, "M.b", false, "c10d_functional.all_reduce") == 1);
	CHECK(count(&r, "M", false, "c10d_functional.all_reduce") == 1);
	CHECK(count(&r, "Global", false, "c10d_functional.all_reduce") == 1);
	cd_replay_free(&r);
}

static void test_run_twice(void)
{
	/* Run twice: the helper row stays one, the children list repeats it,
	 * and with one hook per module each fw_done pops once. */
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	for (int i = 0; i < 2; i++) {
		PRE(&r, "L");
		OP(&r, AR);
		POST(&r, "L");
		DONE(&r, "L");
	}
	CHECK(r.helper.n == 2); /* Global, L */
	CHECK(cd_replay_more(&r, cd_replay_mod(&r, 0))->children.n == 2);
	CHECK(count(&r, "L", false, "c10d_functional.all_reduce") == 2);
	CHECK(count(&r, "Global", false, "c10d_functional.all_reduce") == 2);
	CHECK(r.parent_list.n == 1);
	CHECK(warned[0] == '\0');
	cd_replay_free(&r);
}

static void test_shared_module_parents_first_call(void)
{
	/* A shared module S under A and then B: module_parents_dict[S] is set
	 * on its first call only ({Global, A, S}), so a collective in S during
	 * B's call counts for A, not B (as the reference does). */
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	PRE(&r, "A");
	PRE(&r, "S");
	POST(&r, "S");
	DONE(&r, "S");
	POST(&r, "A");
	DONE(&r, "A");
	PRE(&r, "B");
	PRE(&r, "S");
	OP(&r, AR);
	POST(&r, "S");
	DONE(&r, "S");
	POST(&r, "B");
	DONE(&r, "B");
	CHECK(count(&r, "S", false, "c10d_functional.all_reduce") == 1);
	CHECK(count(&r, "A", false, "c10d_functional.all_reduce") == 1);
	CHECK(count(&r, "B", false, "c10d_functional.all_reduce") == 0);
	/* depth is from the latest call: {Global, B, S} -> 2 */
	CHECK(cd_replay_mod(&r, id(&r, "S"))->depth == 2);
	cd_replay_free(&r);
}

static void test_activation_checkpointing(void)
{
	struct cd_replay r;
	init(&r, true);
	begin(&r, 1);
	PRE(&r, "M");
	PRE(&r, "M.c");
	POST(&r, "M.c");
	DONE(&r, "M.c");
	POST(&r, "M");
	DONE(&r, "M");
	ev(&r, "{\"ev\":\"bw_pre\",\"mod\":\"M\"}");
	CHECK(!r.ac);
	ev(&r, "{\"ev\":\"bw_pre\",\"mod\":\"M.c\"}");
	/* recompute: fw hooks fire in backward -> AC set, parent_list untouched */
	uint32_t before = r.parent_list.n;
	PRE_BW(&r, "M.c");
	CHECK(r.ac);
	CHECK_STR(cur(&r), "M.c");
	OP_BW(&r, "aten.mm.default");
	POST_BW(&r, "M.c");
	DONE_BW(&r, "M.c");
	CHECK(r.ac);
	CHECK(r.parent_list.n == before);
	/* the op after the recompute is still labelled checkpointing */
	OP_BW(&r, "aten.mul.default");
	const struct cd_rmod *c = cd_replay_mod(&r, id(&r, "M.c"));
	CHECK(c->ops.n == 2);
	CHECK(r.oprecs.v[c->ops.v[0]].flags == (CD_OP_BW | CD_OP_AC));
	CHECK(r.oprecs.v[c->ops.v[1]].flags == (CD_OP_BW | CD_OP_AC));
	/* the next backward pre-hook clears it */
	ev(&r, "{\"ev\":\"bw_pre\",\"mod\":\"M\"}");
	CHECK(!r.ac);
	OP_BW(&r, "aten.add.Tensor");
	CHECK(r.oprecs.v[cd_replay_mod(&r, id(&r, "M"))->ops.v[0]].flags == CD_OP_BW);
	cd_replay_free(&r);
}

static void test_bw_parents_and_end(void)
{
	/* bw_enter/bw_exit move `parents`; bw_end resets it to {Global}, and
	 * depth counts lingering backward parents. */
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	ev(&r, "{\"ev\":\"bw_enter\",\"mod\":\"X\"}");
	CHECK(in_parents(&r, "X"));
	PRE(&r, "Y"); /* parents {Global, X, Y}: depth 2 */
	CHECK(cd_replay_mod(&r, id(&r, "Y"))->depth == 2);
	POST(&r, "Y");
	DONE(&r, "Y");
	ev(&r, "{\"ev\":\"bw_end\"}");
	CHECK(!in_parents(&r, "X"));
	CHECK(r.pmembers.n == 1);
	/* bw_exit of a module not in parents is ignored */
	ev(&r, "{\"ev\":\"bw_exit\",\"mod\":\"Z\"}");
	CHECK(r.pmembers.n == 1);
	cd_replay_free(&r);
}

static void test_backward_without_forward(void)
{
	/* Region entered after the forward: M has no module_parents_dict entry.
	 * The reference raises KeyError; we count for M and the modules in
	 * `parents` at that time, and warn once. */
	struct cd_replay r;
	init(&r, false);
	ev(&r, "{\"ev\":\"bw_enter\",\"mod\":\"Outer\"}");
	begin(&r, 1);
	ev(&r, "{\"ev\":\"bw_pre\",\"mod\":\"M\"}");
	OP_BW(&r, AR);
	OP_BW(&r, AR);
	CHECK(count(&r, "M", true, "c10d_functional.all_reduce") == 2);
	CHECK(count(&r, "Outer", true, "c10d_functional.all_reduce") == 2);
	CHECK(count(&r, "Global", true, "c10d_functional.all_reduce") == 2);
	CHECK(strstr(warned, "forward ran outside the region") != NULL);
	CHECK(strchr(warned, '\n') == warned + strlen(warned) - 1); /* once */
	cd_replay_free(&r);
}

static void test_fw_done_without_hook(void)
{
	/* fw_done of a module whose forward began before the region: no hook was
	 * registered in this region, so nothing moves. */
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	PRE(&r, "Outer");
	ev(&r, "{\"ev\":\"region_exit\",\"region\":1}");
	begin(&r, 2);
	PRE(&r, "In");
	POST(&r, "In");
	DONE(&r, "In");
	POST(&r, "Outer");
	DONE(&r, "Outer");
	CHECK(r.parent_list.n == 1);
	CHECK_STR(cur(&r), "Global");
	CHECK(warned[0] == '\0');
	cd_replay_free(&r);
}

static void test_regions_reset_counts_not_parents(void)
{
	struct cd_replay r;
	init(&r, false);
	begin(&r, 1);
	PRE(&r, "M");
	OP(&r, AR);
	POST(&r, "M");
	DONE(&r, "M");
	ev(&r, "{\"ev\":\"bw_enter\",\"mod\":\"M\"}");
	ev(&r, "{\"ev\":\"region_exit\",\"region\":1}");
	begin(&r, 2);
	CHECK(r.comm.n == 0);
	CHECK(count(&r, "M", false, "c10d_functional.all_reduce") == 0);
	CHECK(in_parents(&r, "M")); /* parents persist */
	PRE(&r, "N");                /* so N's depth is 2 */
	CHECK(cd_replay_mod(&r, id(&r, "N"))->depth == 2);
	cd_replay_free(&r);
}

static void test_op_kinds(void)
{
	struct cd_replay r;
	init(&r, true);
	begin(&r, 1);
	/* DTensor op: recorded with args, never counted */
	ev(&r, "{\"ev\":\"op\",\"name\":\"" AR "\",\"dt\":true,\"args\":[{\"shape\":[2],"
	       "\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}]}");
	CHECK(r.comm.n == 0);
	/* fake op: counted, not recorded */
	ev(&r, "{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"fake\":true}");
	CHECK(r.comm.n == 1);
	/* not collectives */
	OP(&r, "_c10d_functional.wait_tensor.default");
	OP(&r, "c10d.send.default");
	CHECK(r.comm.n == 1);
	/* every native name maps to its legacy name */
	OP(&r, "_c10d_functional_autograd.all_to_all_single.default");
	OP(&r, "_c10d_functional.reduce_scatter_tensor_coalesced.default");
	OP(&r, "_dtensor.shard_dim_alltoall.default");
	CHECK(count(&r, "Global", false, "c10d_functional.all_to_all_single") == 1);
	CHECK(count(&r, "Global", false, "c10d_functional.reduce_scatter_tensor_coalesced") == 1);
	CHECK(count(&r, "Global", false, "_dtensor.shard_dim_alltoall") == 1);
	CHECK(count(&r, "Global", false, "c10d.allreduce_") == 1);
	const struct cd_rmod *g = cd_replay_mod(&r, 0);
	CHECK(g->ops.n == 6); /* all but the fake one */
	CHECK(r.oprecs.v[g->ops.v[0]].argset != CD_NOID);
	const struct cd_argset *as = &r.argsets.v[r.oprecs.v[g->ops.v[0]].argset];
	CHECK_STR(cd_intern_str(&r.strs, as->shape[0]), "torch.Size([2])");
	CHECK_STR(cd_intern_str(&r.strs, as->mesh), "M");
	cd_replay_free(&r);
}

/* The op list as "name*count" runs, e.g. "mm*3 add*1". */
static void runs_text(const struct cd_replay *r, const struct cd_rmod *m, char *out, size_t n)
{
	uint32_t i = 0, rec;
	uint64_t count;
	size_t o = 0;
	out[0] = '\0';
	while (cd_ops_next(&m->ops, &i, &rec, &count) && o < n)
		o += (size_t)snprintf(out + o, n - o, "%s%s*%llu%s", o ? " " : "",
				      cd_intern_str(&r->ops, r->oprecs.v[rec].op),
				      (unsigned long long)count,
				      r->oprecs.v[rec].flags & CD_OP_BW ? "(bw)" : "");
}

/* Repeated ops share one record and one run entry; the list still yields
 * every op, in order. */
static void test_op_runs(void)
{
	struct cd_replay r;
	char text[256];
	init(&r, true);
	begin(&r, 1);
	for (int i = 0; i < 1000; i++)
		OP(&r, "mm");
	OP(&r, "add");
	OP(&r, "mm");
	OP(&r, "mm");
	OP_BW(&r, "mm");
	for (int i = 0; i < 3; i++) {
		OP(&r, "a");
		OP(&r, "b");
	}
	const struct cd_rmod *g = cd_replay_mod(&r, 0);
	runs_text(&r, g, text, sizeof text);
	CHECK_STR(text, "mm*1000 add*1 mm*2 mm*1(bw) a*1 b*1 a*1 b*1 a*1 b*1");
	/* 1000 repeats: two entries; alternation: one entry per op */
	CHECK(g->ops.n == 2 + 1 + 2 + 1 + 6);
	CHECK(r.oprecs.n == 5); /* mm, add, mm(bw), a, b */
	CHECK(r.ops_retained == 1010);
	cd_replay_free(&r);
}

static int done_calls;
static bool done_more[8];
static int64_t done_region[8];

static enum cd_status on_done(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	(void)ud;
	(void)err;
	if (done_calls < 8) {
		done_more[done_calls] = r->more_regions;
		done_region[done_calls] = r->region;
	}
	done_calls++;
	return CD_OK;
}

/* defer_done: a region is reported when the next begins or at the end,
 * knowing whether more follow, with its state as it was at its exit. */
static void test_defer_done(void)
{
	struct cd_replay r;
	struct cd_replay_opts o = {.retain_ops = true, .defer_done = true, .region_done = on_done};
	struct cd_err err = {0};
	done_calls = 0;
	CHECK(cd_replay_init(&r, &o, &err) == CD_OK);
	begin(&r, 7);
	OP(&r, "mm");
	ev(&r, "{\"ev\":\"region_exit\",\"region\":7}");
	CHECK(done_calls == 0);
	ev(&r, "{\"ev\":\"bw_enter\",\"mod\":\"X\"}"); /* between regions */
	begin(&r, 8);
	CHECK(done_calls == 1 && done_more[0] && done_region[0] == 7);
	ev(&r, "{\"ev\":\"region_exit\",\"region\":8}");
	CHECK(done_calls == 1);
	CHECK(cd_replay_finish(&r, &err) == CD_OK);
	CHECK(done_calls == 2 && !done_more[1] && done_region[1] == 8);
	CHECK(cd_replay_flush(&r, &err) == CD_OK && done_calls == 2);
	cd_replay_free(&r);
	/* flush after an error between regions reports the ended one */
	done_calls = 0;
	CHECK(cd_replay_init(&r, &o, &err) == CD_OK);
	begin(&r, 1);
	ev(&r, "{\"ev\":\"region_exit\",\"region\":1}");
	CHECK(cd_replay_flush(&r, &err) == CD_OK);
	CHECK(done_calls == 1 && !done_more[0]);
	cd_replay_free(&r);
}

int main(void)
{
	TEST(test_nesting_and_depth);
	TEST(test_op_runs);
	TEST(test_defer_done);
	TEST(test_collective_in_local_hook_after_post);
	TEST(test_run_twice);
	TEST(test_shared_module_parents_first_call);
	TEST(test_activation_checkpointing);
	TEST(test_bw_parents_and_end);
	TEST(test_backward_without_forward);
	TEST(test_fw_done_without_hook);
	TEST(test_regions_reset_counts_not_parents);
	TEST(test_op_kinds);
	cd_parser_free(&ps);
	return check_done();
}
