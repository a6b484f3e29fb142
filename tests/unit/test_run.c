/* Unit tests of the runner's work in order (cd_run_ordered) and of held
 * output spilled to a file (cd_out_spill_at, cd_out_append). */
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "out.h"
#include "run.h"

struct ctx {
	int n;
	int stop_at;          /* done returns false for this item (-1: never) */
	atomic_int worked;
	int done_next;        /* the next item done must be this one */
	bool out_of_order;
	int dropped;
	int held;             /* results worked and neither done nor dropped */
	int max_held;
};

static void work(void *c, int i, void *res)
{
	struct ctx *x = c;
	/* later items finish first now and then */
	if (i % 3 == 0)
		usleep(2000);
	*(int *)res = i * 7;
	atomic_fetch_add(&x->worked, 1);
}

static bool done(void *c, int i, void *res)
{
	struct ctx *x = c;
	if (i != x->done_next || *(int *)res != i * 7)
		x->out_of_order = true;
	x->done_next++;
	return i != x->stop_at;
}

static void drop(void *c, int i, void *res)
{
	struct ctx *x = c;
	if (*(int *)res != i * 7)
		x->out_of_order = true;
	x->dropped++;
}

static void test_in_order(void)
{
	for (int jobs = 1; jobs <= 4; jobs++) {
		struct ctx x = {.n = 50, .stop_at = -1};
		struct cd_err err = {0};
		CHECK(cd_run_ordered(x.n, sizeof(int), jobs, 0, work, done, drop, &x, &err) == CD_OK);
		CHECK(!x.out_of_order);
		CHECK(x.done_next == x.n);
		CHECK(atomic_load(&x.worked) == x.n);
		CHECK(x.dropped == 0);
	}
}

static void test_stop(void)
{
	for (int jobs = 1; jobs <= 4; jobs++) {
		struct ctx x = {.n = 50, .stop_at = 20};
		struct cd_err err = {0};
		CHECK(cd_run_ordered(x.n, sizeof(int), jobs, 3, work, done, drop, &x, &err) == CD_OK);
		CHECK(!x.out_of_order);
		CHECK(x.done_next == 21);
		/* what was worked ahead of the stop is dropped, within the window */
		CHECK(atomic_load(&x.worked) == 21 + x.dropped);
		CHECK(x.dropped <= (jobs > 3 ? jobs : 3));
	}
}

static void test_spill(void)
{
	struct cd_out part, all;
	char line[100];
	cd_out_init(&part, NULL);
	part.hold = true;
	cd_out_spill_at(&part, 1000);
	cd_out_init(&all, NULL);
	all.hold = true;
	for (int i = 0; i < 300000; i++) {
		int n = snprintf(line, sizeof line, ",%d", i);
		cd_out_write(&part, line, (size_t)n);
	}
	CHECK(part.spill != NULL);   /* the full buffer went to the file */
	cd_out_write(&all, "[", 1);
	cd_out_append(&all, &part, 1);
	cd_out_write(&all, "]", 1);
	CHECK(!all.failed);
	CHECK(part.len == 0 && part.spill == NULL);
	/* the same bytes as written straight */
	struct cd_out want;
	cd_out_init(&want, NULL);
	want.hold = true;
	cd_out_write(&want, "[", 1);
	for (int i = 0; i < 300000; i++) {
		int n = snprintf(line, sizeof line, i ? ",%d" : "%d", i);
		cd_out_write(&want, line, (size_t)n);
	}
	cd_out_write(&want, "]", 1);
	CHECK(all.len == want.len && memcmp(all.buf, want.buf, all.len) == 0);
	cd_out_free(&part);
	cd_out_free(&all);
	cd_out_free(&want);
}

int main(void)
{
	TEST(test_in_order);
	TEST(test_stop);
	TEST(test_spill);
	return check_done();
}
