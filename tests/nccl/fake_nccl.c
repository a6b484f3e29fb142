/* A stand-in for libnccl in the tests: the public calls the interposer
 * wraps, with NCCL's signatures, doing nothing but checking their
 * communicator and counting the calls (fake_nccl_calls); ncclBcast calls
 * ncclBroadcast the way NCCL does. */
#include <stdatomic.h>
#include <stdlib.h>
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

struct fake_comm {
	int nranks, rank;
};
struct fake_uid {
	char internal[128];
};

static _Atomic long calls;   /* called from several threads ("many") */

EXPORT long fake_nccl_calls(void)
{
	return calls;
}

/* A communicator made behind the interposer's back (as if created before
 * it was loaded). */
EXPORT void *fake_nccl_make_comm(int nranks, int rank)
{
	struct fake_comm *c = malloc(sizeof *c);
	if (c) {
		c->nranks = nranks;
		c->rank = rank;
	}
	return c;
}

static int call(void *comm)
{
	calls++;
	return comm ? 0 : 4;   /* ncclInvalidArgument */
}

EXPORT int ncclCommInitRank(void **comm, int nranks, struct fake_uid id, int rank)
{
	(void)id;
	*comm = fake_nccl_make_comm(nranks, rank);
	return *comm ? 0 : 2;
}

EXPORT int ncclCommInitRankConfig(void **comm, int nranks, struct fake_uid id, int rank, void *cfg)
{
	(void)cfg;
	return ncclCommInitRank(comm, nranks, id, rank);
}

EXPORT int ncclCommSplit(void *comm, int color, int key, void **newcomm, void *cfg)
{
	struct fake_comm *c = comm;
	(void)cfg;
	(void)color;
	*newcomm = fake_nccl_make_comm(c->nranks / 2, key);
	return *newcomm ? 0 : 2;
}

EXPORT int ncclCommDestroy(void *comm)
{
	free(comm);
	return 0;
}

EXPORT int ncclCommAbort(void *comm)
{
	free(comm);
	return 0;
}

EXPORT int ncclCommCount(const void *comm, int *n)
{
	*n = ((const struct fake_comm *)comm)->nranks;
	return 0;
}

EXPORT int ncclCommUserRank(const void *comm, int *r)
{
	*r = ((const struct fake_comm *)comm)->rank;
	return 0;
}

EXPORT int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)op, (void)st;
	return call(comm);
}

EXPORT int ncclAllGather(const void *s, void *r, size_t n, int t, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)st;
	return call(comm);
}

EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)op, (void)st;
	return call(comm);
}

EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)root, (void)st;
	return call(comm);
}

/* As NCCL does (src/collectives.cc): the in-place form calls the other
 * through its exported, interposable symbol, so a preloaded ncclBroadcast
 * sees this call too (built -fPIC, default visibility: through the PLT). */
EXPORT int ncclBcast(void *b, size_t n, int t, int root, void *comm, void *st)
{
	return ncclBroadcast(b, b, n, t, root, comm, st);
}

EXPORT int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)op, (void)root, (void)st;
	return call(comm);
}

EXPORT int ncclAlltoAll(const void *s, void *r, size_t n, int t, void *comm, void *st)
{
	(void)s, (void)r, (void)n, (void)t, (void)st;
	return call(comm);
}

EXPORT int ncclSend(const void *s, size_t n, int t, int peer, void *comm, void *st)
{
	(void)s, (void)n, (void)t, (void)peer, (void)st;
	return call(comm);
}

EXPORT int ncclRecv(void *r, size_t n, int t, int peer, void *comm, void *st)
{
	(void)r, (void)n, (void)t, (void)peer, (void)st;
	return call(comm);
}
