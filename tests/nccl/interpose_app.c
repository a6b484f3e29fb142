/* A program that uses NCCL (the stand-in, fake_nccl.c) the way a training
 * job does; run under LD_PRELOAD=libcommdebug-nccl-preload.so.
 *
 *   interpose_app scenario     fixed calls (tests/nccl/expected/interpose.jsonl)
 *   interpose_app kill         some calls, waits for a flush, SIGKILLs itself
 *   interpose_app reuse        a call NCCL refuses; a communicator destroyed and
 *                              another created (maybe at its address)
 *   interpose_app many N       N all-reduces from 4 threads
 *   interpose_app bench N      N all-reduces, prints ns per call */

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct uid {
	char internal[128];
};

int ncclCommInitRank(void **comm, int nranks, struct uid id, int rank);
int ncclCommDestroy(void *comm);
int ncclCommSplit(void *comm, int color, int key, void **newcomm, void *cfg);
int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *comm, void *st);
int ncclAllGather(const void *s, void *r, size_t n, int t, void *comm, void *st);
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *comm, void *st);
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *comm, void *st);
int ncclBcast(void *b, size_t n, int t, int root, void *comm, void *st);
int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *comm, void *st);
int ncclAlltoAll(const void *s, void *r, size_t n, int t, void *comm, void *st);
int ncclSend(const void *s, size_t n, int t, int peer, void *comm, void *st);
int ncclRecv(void *r, size_t n, int t, int peer, void *comm, void *st);
long fake_nccl_calls(void);
void *fake_nccl_make_comm(int nranks, int rank);

/* ncclDataType_t and ncclRedOp_t values */
enum { U8 = 1, I32 = 2, I64 = 4, F16 = 6, F32 = 7, F64 = 8, BF16 = 9 };
enum { SUM = 0, MAX = 2, AVG = 4 };

#define S1 ((void *)0x10)
#define S2 ((void *)0x20)

static int fails;

static void ok(int res, const char *what)
{
	if (res != 0) {
		fprintf(stderr, "interpose_app: %s returned %d\n", what, res);
		fails++;
	}
}

/* commdebug_nccl_tag/untag from the preloaded library, if there */
static void tag(const char *pg, uint64_t seq)
{
	int (*f)(const char *, uint64_t) = (int (*)(const char *, uint64_t))dlsym(RTLD_DEFAULT,
										  "commdebug_nccl_tag");
	if (f)
		f(pg, seq);
}

static void untag(void)
{
	void (*f)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "commdebug_nccl_untag");
	if (f)
		f();
}

static void scenario(void)
{
	struct uid id;
	void *c1, *c2, *c3, *c4;

	memset(&id, 0, sizeof id);
	ok(ncclCommInitRank(&c1, 4, id, 1), "ncclCommInitRank");
	ok(ncclCommInitRank(&c2, 2, id, 0), "ncclCommInitRank");
	ok(ncclAllReduce(NULL, NULL, 1024, F32, SUM, c1, S1), "ncclAllReduce");
	tag("1", 7);
	ok(ncclAllGather(NULL, NULL, 256, BF16, c1, S1), "ncclAllGather");
	ok(ncclAllGather(NULL, NULL, 256, BF16, c1, S1), "ncclAllGather");
	untag();
	ok(ncclReduceScatter(NULL, NULL, 128, F16, MAX, c2, S2), "ncclReduceScatter");
	ok(ncclBroadcast(NULL, NULL, 64, I64, 2, c1, NULL), "ncclBroadcast");
	ok(ncclSend(NULL, 32, U8, 3, c1, S1), "ncclSend");
	ok(ncclRecv(NULL, 32, U8, 3, c1, S1), "ncclRecv");
	ok(ncclReduce(NULL, NULL, 10, F64, AVG, 0, c2, S2), "ncclReduce");
	ok(ncclBcast(NULL, 5, I32, 1, c2, S2), "ncclBcast");
	ok(ncclAlltoAll(NULL, NULL, 16, F32, c1, S1), "ncclAlltoAll");
	ok(ncclCommSplit(c1, 0, 1, &c3, NULL), "ncclCommSplit");
	ok(ncclAllReduce(NULL, NULL, 8, F32, 5, c3, S1), "ncclAllReduce");
	c4 = fake_nccl_make_comm(8, 5);
	ok(ncclAllReduce(NULL, NULL, 2, F32, SUM, c4, S1), "ncclAllReduce");
	ok(ncclAllReduce(NULL, NULL, 3, F32, SUM, c1, S1), "ncclAllReduce");
	if (fake_nccl_calls() != 13) {
		fprintf(stderr, "interpose_app: NCCL saw %ld calls, not 13\n", fake_nccl_calls());
		fails++;
	}
	ok(ncclCommDestroy(c1), "ncclCommDestroy");
	ok(ncclCommDestroy(c2), "ncclCommDestroy");
	ok(ncclCommDestroy(c3), "ncclCommDestroy");
	ok(ncclCommDestroy(c4), "ncclCommDestroy");
}

static long many_n;
static void *comm_many;

static void *many_thread(void *arg)
{
	(void)arg;
	for (long i = 0; i < many_n; i++)
		ncclAllReduce(NULL, NULL, 1, F32, SUM, comm_many, S1);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	struct uid id;

	memset(&id, 0, sizeof id);
	if (argc >= 2 && strcmp(argv[1], "scenario") == 0) {
		scenario();
	} else if (argc >= 2 && strcmp(argv[1], "reuse") == 0) {
		void *c, *d;
		ok(ncclCommInitRank(&c, 4, id, 1), "ncclCommInitRank");
		ok(ncclAllReduce(NULL, NULL, 1, F32, SUM, c, S1), "ncclAllReduce");
		ok(ncclAllReduce(NULL, NULL, 1, F32, SUM, c, S1), "ncclAllReduce");
		if (ncclAllReduce(NULL, NULL, 1, F32, SUM, NULL, S1) == 0) {
			fprintf(stderr, "interpose_app: the stand-in took a NULL communicator\n");
			fails++;
		}
		ok(ncclCommDestroy(c), "ncclCommDestroy");
		ok(ncclCommInitRank(&d, 8, id, 3), "ncclCommInitRank");
		ok(ncclAllReduce(NULL, NULL, 2, F32, SUM, d, S1), "ncclAllReduce");
		ok(ncclCommDestroy(d), "ncclCommDestroy");
	} else if (argc >= 2 && strcmp(argv[1], "kill") == 0) {
		void *c;
		ok(ncclCommInitRank(&c, 2, id, 1), "ncclCommInitRank");
		for (int i = 0; i < 5; i++)
			ok(ncclAllReduce(NULL, NULL, 100, F32, SUM, c, S1), "ncclAllReduce");
		usleep(300 * 1000);   /* several flush intervals (COMMDEBUG_NCCL_FLUSH_MS=20) */
		kill(getpid(), SIGKILL);
	} else if (argc >= 3 && strcmp(argv[1], "many") == 0) {
		pthread_t th[4];
		many_n = atol(argv[2]);
		ok(ncclCommInitRank(&comm_many, 2, id, 0), "ncclCommInitRank");
		for (int i = 0; i < 4; i++)
			pthread_create(&th[i], NULL, many_thread, NULL);
		for (int i = 0; i < 4; i++)
			pthread_join(th[i], NULL);
	} else if (argc >= 3 && strcmp(argv[1], "bench") == 0) {
		void *c;
		long n = atol(argv[2]);
		double t;
		ok(ncclCommInitRank(&c, 8, id, 0), "ncclCommInitRank");
		ncclAllReduce(NULL, NULL, 1, F32, SUM, c, S1);   /* first call: resolution */
		t = now_s();
		for (long i = 0; i < n; i++)
			ncclAllReduce(NULL, NULL, 1024, F32, SUM, c, S1);
		t = now_s() - t;
		printf("%.1f\n", t * 1e9 / (double)n);
		ncclCommDestroy(c);
	} else {
		fprintf(stderr, "usage: interpose_app scenario|kill|many N|bench N\n");
		return 2;
	}
	return fails ? 1 : 0;
}
