/* Unit tests of the bucket planner (DDPOptimizer's algorithm on modules)
 * and of the simple_grid table.  Every expected plan below is worked out
 * by hand from the sizes, step by step, in the comments; the tables from
 * tabulate 0.9's rules (Debian's tabulate 0.8.9 has no simple_grid). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buckets.h"
#include "check.h"
#include "run.h"

/* Plan nnodes modules, module k owning counts[k] parameters (taken in
 * order from sizes), and render the plan as "size:p,p|size:p|..." with
 * "+E/X" after a bucket DDPOptimizer extended by E ops and X bytes. */
static const char *plan(const uint32_t *counts, uint32_t nnodes, const int64_t *sizes,
			int64_t cap, int64_t first_cap)
{
	static char buf[512];
	struct cd_bk_node nodes[32];
	uint32_t params[64], np = 0;
	struct cd_bk_plan pl = {0};
	struct cd_err err = {0};
	size_t len = 0;

	for (uint32_t k = 0; k < nnodes; k++) {
		nodes[k].first = np;
		nodes[k].n = counts[k];
		for (uint32_t i = 0; i < counts[k]; i++, np++)
			params[np] = np;
	}
	if (cd_bk_plan_build(&pl, nodes, nnodes, params, sizes, cap, first_cap, &err))
		return "error";
	buf[0] = 0;
	for (uint32_t i = 0; i < pl.b.n; i++) {
		const struct cd_bk_pbucket *b = &pl.b.v[i];
		len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%lld:", i ? "|" : "",
					(long long)b->size);
		for (uint32_t j = 0; j < b->n; j++)
			len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%u", j ? "," : "",
						pl.order.v[b->first + j]);
		if (b->extra_ops)
			len += (size_t)snprintf(buf + len, sizeof buf - len, "+%u/%lld", b->extra_ops,
						(long long)b->extra_size);
	}
	cd_bk_plan_free(&pl);
	return buf;
}

/* The model of testdata/ddp: DDP, DDP.module, Linear(4,8), ReLU,
 * Linear(8,8), ReLU, Linear(8,2); params 0.w 128, 0.b 32, 2.w 256, 2.b 32,
 * 4.w 64, 4.b 8 (indices 0-5). */
static const uint32_t mlp_counts[] = {0, 0, 2, 0, 2, 0, 2};
static const int64_t mlp_sizes[] = {128, 32, 256, 32, 64, 8};

static void test_plan_mlp(void)
{
	/* cap 300, first cap 100; nodes in reverse:
	 *   module.4: one bucket, size 0 < 100 -> add 64 + 8 = 72
	 *   module.3: 72 < 100 -> nothing to add
	 *   module.2: 72 < 100 -> add 256 + 32 = 360
	 *   module.1: one bucket, 360 >= 100 -> new bucket; nothing to add
	 *   module.0: 0 < 300 -> add 128 + 32 = 160
	 *   module, DDP: 160 < 300 -> nothing to add
	 * bucket 0 = [4.w, 4.b, 2.w, 2.b] 360, bucket 1 = [0.w, 0.b] 160 */
	CHECK_STR(plan(mlp_counts, 7, mlp_sizes, 300, 100), "360:4,5,2,3|160:0,1");
	/* the default first cap (1 MiB) above everything: one bucket of 520 */
	CHECK_STR(plan(mlp_counts, 7, mlp_sizes, 26214400, 1048576), "520:4,5,2,3,0,1");
	/* cap 72 = first cap: the first bucket is full at exactly 72 (>=) */
	CHECK_STR(plan(mlp_counts, 7, mlp_sizes, 72, 72), "72:4,5|288:2,3|160:0,1");
}

static void test_plan_first_cap(void)
{
	/* four modules of 100, 100, 100, 50 bytes; cap 250, first cap 60:
	 *   D: 0 < 60 -> 50;  C: 50 < 60 -> 150;
	 *   B: one bucket, 150 >= 60 -> new;  B -> 100;  A: 100 < 250 -> 200 */
	static const uint32_t c[] = {1, 1, 1, 1};
	static const int64_t s[] = {100, 100, 100, 50};
	CHECK_STR(plan(c, 4, s, 250, 60), "150:3,2|200:1,0");
	/* first cap above cap: the cap closes the first bucket first (the
	 * first-cap test only adds closures) */
	CHECK_STR(plan(c, 4, s, 150, 1000), "150:3,2|200:1,0");
	/* only the cap: 50, 150 >= 150 -> new; 100, 200 */
	CHECK_STR(plan(c, 4, s, 150, 150), "150:3,2|200:1,0");
	/* a module with two params stays whole: no split inside a module */
	static const uint32_t c2[] = {1, 2};
	static const int64_t s2[] = {10, 40, 40};
	CHECK_STR(plan(c2, 2, s2, 50, 50), "80:1,2|10:0");
}

/* Issue 20's model: DDP, DDP.module, six Linear(512, 512): weight 1048576
 * and bias 2048 bytes each (params 0-11).  torch 2.14's DDPOptimizer, built
 * as torch.compile builds it (cap 1572864 = bucket_cap_mb 1.5, first cap
 * dist._DEFAULT_FIRST_BUCKET_BYTES = 1048576), logged 4 buckets of
 * 1050624, 2101248, 2101248, 1050624 bytes for it
 * (tests/recorder/test_ddp_optimizer.py; testdata/ddp/torch2-ddpoptimizer.txt). */
static void test_plan_torch2(void)
{
	static const uint32_t c[] = {0, 0, 2, 2, 2, 2, 2, 2};
	static const int64_t s[] = {1048576, 2048, 1048576, 2048, 1048576, 2048,
				    1048576, 2048, 1048576, 2048, 1048576, 2048};
	/* 5: 1050624 >= first cap 1048576 -> new;  4: 1050624 < cap -> 3 joins
	 * (2101248) -> new;  2, 1 likewise;  0 alone;  module, DDP: 0 added */
	CHECK_STR(plan(c, 8, s, 1572864, 1048576),
		  "1050624:10,11|2101248:8,9,6,7|2101248:4,5,2,3|1050624:0,1");
	/* with DDP's own first cap on 2.x (its bucket cap): 3 buckets of two */
	CHECK_STR(plan(c, 8, s, 1572864, 1572864),
		  "2101248:10,11,8,9|2101248:6,7,4,5|2101248:2,3,0,1");
}

static void test_plan_fold_and_extend(void)
{
	/* two parameter-free modules first in forward, then A of 100, cap 50:
	 *   A: 0 -> 100;  Y: 100 >= 50 -> new bucket (A's has a module), Y
	 *   adds 0;  X: 0 < 50 -> adds 0.  The last bucket has size 0 and is
	 *   folded into the one before: one bucket. */
	static const uint32_t c[] = {0, 0, 1};
	static const int64_t s[] = {100};
	CHECK_STR(plan(c, 3, s, 50, 50), "100:0");
	/* first cap 0: before the first module the empty bucket is "full" but
	 * has no output, so it is extended (1 op, the module's 100 bytes) */
	CHECK_STR(plan(c, 3, s, 50, 0), "100:0+1/100");
	/* cap 1, first cap 0 on the MLP:
	 *   4: extend bucket 0, 72;  3: 72 >= 1 -> new, adds 0;
	 *   2: bucket 1 at 0 < 1 (and not the only one) -> 288;
	 *   1: new, 0;  0: 0 < 1 -> 160;  module: 160 >= 1 -> new, 0;  DDP: 0.
	 *   The last (size 0) is folded: 3 buckets. */
	CHECK_STR(plan(mlp_counts, 7, mlp_sizes, 1, 0), "72:4,5+1/72|288:2,3|160:0,1");
	/* no modules at all: one empty bucket (nothing captured) */
	CHECK_STR(plan(NULL, 0, NULL, 10, 10), "0:");
	/* a zero-byte parameter is still a member: its bucket (size 0) is not
	 * folded away (DDPOptimizer's fold would stop at its assertion that a
	 * bucket of size 0 has no parameters) */
	static const uint32_t c3[] = {1, 1};
	static const int64_t s3[] = {0, 5};
	CHECK_STR(plan(c3, 2, s3, 5, 5), "5:1|0:0");
}

static const char *grid(const char *const *h, const bool *num, uint32_t ncols,
			const char *const *rows, uint32_t nrows)
{
	static char buf[4096];
	struct cd_out o;
	cd_out_init(&o, NULL);
	o.hold = true;
	cd_bk_simple_grid(&o, h, num, ncols, rows, nrows);
	snprintf(buf, sizeof buf, "%.*s", (int)o.len, o.buf);
	cd_out_free(&o);
	return buf;
}

static void test_simple_grid(void)
{
	static const char *const h[] = {"Index", "Size (b)", "Param Names"};
	static const bool num[] = {true, true, false};
	/* widths: Index = len("Index") + MIN_PADDING 2 = 7 (cells are 1 wide);
	 * Size (b) = 8 + 2 = 10 ("360" is 3); Param Names = 11 + 2 = 13
	 * ("4_weight" is 8).  Each cell has 1 space of padding each side, so
	 * the rules are 9, 12 and 15 "─" wide.  Numbers and their headers are
	 * right-aligned, text and its header left-aligned; None is empty. */
	static const char *const rows[] = {"0", "360", "4_weight", NULL, NULL, "4_bias",
					   "1", "160", "0_weight"};
	CHECK_STR(grid(h, num, 3, rows, 3),
		  "┌─────────┬────────────┬───────────────┐\n"
		  "│   Index │   Size (b) │ Param Names   │\n"
		  "├─────────┼────────────┼───────────────┤\n"
		  "│       0 │        360 │ 4_weight      │\n"
		  "├─────────┼────────────┼───────────────┤\n"
		  "│         │            │ 4_bias        │\n"
		  "├─────────┼────────────┼───────────────┤\n"
		  "│       1 │        160 │ 0_weight      │\n"
		  "└─────────┴────────────┴───────────────┘\n");
	/* cells wider than header + 2: Size (b) column 11 wide for
	 * "12345678901" (the header padded left to 11), names 16 wide for
	 * "layers.0_weight" (15) ... "é" counts as one character (len()):
	 * "é_layer.1_weight" is 16 */
	static const char *const rows2[] = {"12", "12345678901", "layers.0_weight",
					    NULL, NULL, "\xc3\xa9_layer.1_weight"};
	CHECK_STR(grid(h, num, 3, rows2, 2),
		  "┌─────────┬─────────────┬──────────────────┐\n"
		  "│   Index │    Size (b) │ Param Names      │\n"
		  "├─────────┼─────────────┼──────────────────┤\n"
		  "│      12 │ 12345678901 │ layers.0_weight  │\n"
		  "├─────────┼─────────────┼──────────────────┤\n"
		  "│         │             │ \xc3\xa9_layer.1_weight │\n"
		  "└─────────┴─────────────┴──────────────────┘\n");
	/* the extended-bucket table: three integer columns; widths 7, 9 + 2 =
	 * 11, 20 + 2 = 22, all right-aligned */
	static const char *const h3[] = {"Index", "Extra Ops", "Extra Param Size (b)"};
	static const bool num3[] = {true, true, true};
	static const char *const rows3[] = {"0", "1", "72"};
	CHECK_STR(grid(h3, num3, 3, rows3, 1),
		  "┌─────────┬─────────────┬────────────────────────┐\n"
		  "│   Index │   Extra Ops │   Extra Param Size (b) │\n"
		  "├─────────┼─────────────┼────────────────────────┤\n"
		  "│       0 │           1 │                     72 │\n"
		  "└─────────┴─────────────┴────────────────────────┘\n");
}

/* Write lines (NULL-terminated) to a new temporary file; its name in
 * name (unlink it). */
static void write_trace(char *name, const char *const *lines)
{
	int fd = mkstemp(name);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	CHECK(f != NULL);
	for (; f && *lines; lines++)
		fprintf(f, "%s\n", *lines);
	if (f)
		fclose(f);
}

/* The runner with buckets' reader: results in the order of the inputs,
 * whatever thread read them; the replay's warnings and the error kept in
 * each result, nothing printed. */
static void test_reader(void)
{
	static const char *const good[] = {
		"{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":0}",
		"{\"ev\":\"region_enter\",\"region\":1}",
		"{\"ev\":\"ddp\",\"mod\":\"DDP\",\"pg\":\"0\",\"cap\":300,\"first_cap\":100,"
		"\"rebuilt\":false,\"params\":[{\"name\":\"DDP.module.w\",\"nbytes\":64},"
		"{\"name\":\"DDP.module.b\",\"nbytes\":8}],\"buckets\":[[1,0]],\"sizes\":[72]}",
		"{\"ev\":\"region_exit\",\"region\":1}",
		NULL,
	};
	static const char *const open_region[] = {
		"{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":1}",
		"{\"ev\":\"region_enter\",\"region\":1}",
		"{\"ev\":\"ddp\",\"mod\":\"DDP\",\"pg\":\"0\",\"cap\":300,\"first_cap\":100,"
		"\"rebuilt\":false,\"params\":[{\"name\":\"DDP.module.w\",\"nbytes\":64},"
		"{\"name\":\"DDP.module.b\",\"nbytes\":8}],\"buckets\":[[1,0]],\"sizes\":[72]}",
		NULL,
	};
	static const char *const no_ddp[] = {
		"{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":2}",
		NULL,
	};
	char names[3][32];
	char *paths[7];
	const char *const *which[3] = {good, open_region, no_ddp};
	struct cd_bk_opts bo = {.cap = -1, .first_cap = -1};
	struct cd_err err = {0};

	for (int k = 0; k < 3; k++) {
		strcpy(names[k], "/tmp/cd-bk-XXXXXX");
		write_trace(names[k], which[k]);
	}
	/* good, open, no ddp, good, open, no ddp, good */
	for (int i = 0; i < 7; i++)
		paths[i] = names[i % 3];
	for (int jobs = 1; jobs <= 4; jobs += 3) {
		struct cd_run_opts ro = {.jobs = jobs};
		void *res = NULL;
		CHECK(cd_run(paths, 7, &cd_bk_reader, &bo, &ro, &res, &err) == CD_OK);
		CHECK(ro.threads == jobs);
		struct cd_bk_rank *r = res;
		for (int i = 0; r && i < 7; i++) {
			CHECK_STR(r[i].t.path, paths[i]);
			CHECK(r[i].t.has_rank && r[i].t.rank == i % 3);
			switch (i % 3) {
			case 0:
				CHECK(r[i].st == CD_OK && r[i].warnings.n == 0 && r[i].t.ddp.n == 1);
				break;
			case 1:
				CHECK(r[i].st == CD_OK && r[i].t.ddp.n == 1);
				CHECK(r[i].warnings.n == 1);
				if (r[i].warnings.n)
					CHECK(strstr(r[i].warnings.v[0], "no region_exit") != NULL);
				break;
			case 2:
				CHECK(r[i].st == CD_ERR_TRACE);
				CHECK(strstr(r[i].err.msg, "no ddp event") != NULL);
				break;
			}
		}
		cd_run_results_free(&cd_bk_reader, res, 7);
	}
	for (int k = 0; k < 3; k++)
		unlink(names[k]);
}

int main(void)
{
	TEST(test_plan_mlp);
	TEST(test_plan_first_cap);
	TEST(test_plan_torch2);
	TEST(test_plan_fold_and_extend);
	TEST(test_simple_grid);
	TEST(test_reader);
	return check_done();
}
