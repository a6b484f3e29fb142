/* A program that uses NCCL (the stand-in, fake_nccl.c) the way a training
 * job does; run under LD_PRELOAD=libcommdebug-nccl-preload.so.
 *
 *   interpose_app scenario     fixed calls (tests/nccl/expected/interpose.jsonl)
 *   interpose_app kill         some calls, waits for a flush, SIGKILLs itself
 *   interpose_app reuse        a call NCCL refuses; a communicator destroyed and
 *                              another created (maybe at its address)
 *   interpose_app many N       N all-reduces from 4 threads
 *   interpose_app bench N      N all-reduces, prints ns per call
 *   interpose_app settrace P   2 calls, a flush (the trace is open where
 *                              COMMDEBUG_NCCL_TRACE says), commdebug_nccl_set_trace(P),
 *                              2 more calls; prints set_trace's errno name (or OK)
 *   interpose_app settrace-first P   the same, set_trace before any NCCL call
 *   interpose_app fork early|late    early: fork before any NCCL call, parent and child
 *                              each make 3 calls (child: a 2-rank communicator, parent:
 *                              4 ranks) and wait for each other with their traces open;
 *                              late: 1 call, fork, the child makes 3 calls, the parent 1
 *   interpose_app hold F       1 call and a flush, then waits (at most 30 s) until the
 *                              file F exists, 1 more call */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
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

/* commdebug_nccl_set_trace / _flush from the preloaded library */
static int set_trace(const char *path)
{
	int (*f)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT,
							       "commdebug_nccl_set_trace");
	if (!f) {
		fprintf(stderr, "interpose_app: commdebug_nccl_set_trace is not loaded\n");
		exit(1);
	}
	return f(path);
}

static void flush(void)
{
	void (*f)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "commdebug_nccl_flush");
	if (f)
		f();
}

static void calls(void *c, int n)
{
	for (int i = 0; i < n; i++)
		ok(ncclAllReduce(NULL, NULL, 16, F32, SUM, c, S1), "ncclAllReduce");
}

static void settrace(const char *path, bool first)
{
	struct uid id;
	void *c;
	int rc = 0;

	memset(&id, 0, sizeof id);
	if (first)
		rc = set_trace(path);
	ok(ncclCommInitRank(&c, 4, id, 1), "ncclCommInitRank");
	calls(c, 2);
	if (!first) {
		flush();
		rc = set_trace(path);
	}
	printf("%s\n", rc == 0 ? "OK" : errno == EBUSY ? "EBUSY" : strerror(errno));
	calls(c, 2);
	ncclCommDestroy(c);
}

static void forked(bool early)
{
	struct uid id;
	void *c;
	int p2c[2], c2p[2];
	char b = 0;
	pid_t pid;

	memset(&id, 0, sizeof id);
	if (pipe(p2c) || pipe(c2p))
		exit(1);
	if (!early) {
		ok(ncclCommInitRank(&c, 4, id, 1), "ncclCommInitRank");
		calls(c, 1);
		flush();
	}
	pid = fork();
	if (pid < 0)
		exit(1);
	if (pid == 0) {
		void *d;
		ok(ncclCommInitRank(&d, 2, id, 0), "ncclCommInitRank");
		calls(d, 2);
		flush();
		if (write(c2p[1], &b, 1) != 1 || read(p2c[0], &b, 1) != 1)
			_exit(1);
		calls(d, 1);
		exit(fails ? 1 : 0);   /* exit(): the child's own recorder ends its trace */
	}
	if (early) {
		ok(ncclCommInitRank(&c, 4, id, 1), "ncclCommInitRank");
		calls(c, 2);
		flush();
	}
	if (read(c2p[0], &b, 1) != 1 || write(p2c[1], &b, 1) != 1)
		exit(1);
	if (early)
		calls(c, 1);
	{
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "interpose_app: the child failed\n");
			fails++;
		}
	}
}

static void hold(const char *file)
{
	struct uid id;
	void *c;

	memset(&id, 0, sizeof id);
	ok(ncclCommInitRank(&c, 4, id, 1), "ncclCommInitRank");
	calls(c, 1);
	flush();
	for (int i = 0; i < 3000 && access(file, F_OK) != 0; i++)
		usleep(10000);
	calls(c, 1);
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
	} else if (argc >= 3 && strcmp(argv[1], "settrace") == 0) {
		settrace(argv[2], false);
	} else if (argc >= 3 && strcmp(argv[1], "settrace-first") == 0) {
		settrace(argv[2], true);
	} else if (argc >= 3 && strcmp(argv[1], "fork") == 0) {
		forked(strcmp(argv[2], "early") == 0);
	} else if (argc >= 3 && strcmp(argv[1], "hold") == 0) {
		hold(argv[2]);
	} else {
		fprintf(stderr, "usage: interpose_app scenario|kill|many N|bench N|settrace P|"
				"settrace-first P|fork early|late|hold F\n");
		return 2;
	}
	return fails ? 1 : 0;
}
