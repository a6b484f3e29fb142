/* A minimal test harness: CHECK records failures, TEST runs one function,
 * and check_done() prints "N passed, M failed" and returns the exit code. */
#ifndef CD_TEST_CHECK_H
#define CD_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures_in_test;
static int check_passed, check_failed;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			check_failures_in_test++;                                    \
		}                                                                    \
	} while (0)

#define CHECK_STR(got, want)                                                         \
	do {                                                                         \
		const char *g_ = (got), *w_ = (want);                                \
		if (!g_ || strcmp(g_, w_) != 0) {                                    \
			fprintf(stderr, "  %s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, \
				g_ ? g_ : "(null)", w_);                             \
			check_failures_in_test++;                                    \
		}                                                                    \
	} while (0)

#define TEST(fn)                                                                     \
	do {                                                                         \
		check_failures_in_test = 0;                                          \
		fn();                                                                \
		printf("%s %s\n", check_failures_in_test ? "FAIL" : "ok  ", #fn);    \
		if (check_failures_in_test)                                          \
			check_failed++;                                              \
		else                                                                 \
			check_passed++;                                              \
	} while (0)

static inline int check_done(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif
