/* The LD_PRELOAD interposer: wrappers with the names and signatures of
 * NCCL's public collective, point-to-point and communicator-creation calls.
 * Each wrapper records the call (rec.h) and then calls the real function.
 *
 * The real function is found with dlsym(RTLD_NEXT) when libnccl is in the
 * global scope, else in the already loaded libnccl (COMMDEBUG_NCCL_LIB,
 * default libnccl.so.2), preferring NCCL's strong pnccl* aliases.  A
 * static NCCL linked into another library does not go through the dynamic
 * linker and is not seen (say so in the man page).
 *
 * What an interposer can know: the arguments and the time of the call.
 * It cannot know when the GPU finished the work (no completion records),
 * nor NCCL's algorithm, protocol or channels. */
#include "rec.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CD_EXPORT __attribute__((visibility("default")))

/* Our own spelling of the public types: only their ABI matters. */
typedef int cd_nccl_result;               /* ncclResult_t */
typedef void *cd_nccl_comm;               /* ncclComm_t */
typedef void *cd_cuda_stream;             /* cudaStream_t */
struct cd_nccl_uid {                      /* ncclUniqueId */
	char internal[128];
};

enum { CD_NCCL_SUCCESS = 0, CD_NCCL_SYSTEM_ERROR = 2 };

/* ------------------------------------------------------------ resolution */

static _Atomic int passive = -1;           /* -1: not decided */

/* The commdebug profiler plugin records the same calls; recording twice
 * would write two traces to one file. */
static bool is_passive(void)
{
	int p = atomic_load_explicit(&passive, memory_order_relaxed);
	if (p < 0) {
		const char *plugin = getenv("NCCL_PROFILER_PLUGIN");
		p = plugin && strstr(plugin, "commdebug") != NULL;
		if (p)
			fprintf(stderr, "commdebug-nccl: NCCL_PROFILER_PLUGIN=%s records the calls; "
					"the interposer only passes them on\n", plugin);
		atomic_store(&passive, p);
	}
	return p;
}

static void *resolve(const char *name, void *self)
{
	void *p = dlsym(RTLD_NEXT, name);
	char pname[64];

	if (p && p != self)
		return p;
	const char *lib = getenv("COMMDEBUG_NCCL_LIB");
	void *h = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		h = dlopen(lib && *lib ? lib : "libnccl.so", RTLD_LAZY | RTLD_NOLOAD);
	if (h) {
		snprintf(pname, sizeof pname, "p%s", name);
		p = dlsym(h, pname);
		if (!p || p == self)
			p = dlsym(h, name);
	}
	if (!p || p == self) {
		fprintf(stderr, "commdebug-nccl: %s: the real NCCL function is not found "
				"(is libnccl loaded? set COMMDEBUG_NCCL_LIB)\n", name);
		return NULL;
	}
	return p;
}

/* fn_real: the real function of wrapper fn (same type), resolved on first
 * use; a failure to find it makes the wrapper return ncclSystemError. */
#define REAL(fn)                                                                \
	static _Atomic(__typeof__(&fn)) real_##fn;                              \
	__typeof__(&fn) fn##_real = atomic_load_explicit(&real_##fn, memory_order_acquire); \
	if (!fn##_real) {                                                       \
		fn##_real = (__typeof__(&fn))resolve(#fn, (void *)fn);          \
		if (!fn##_real)                                                 \
			return CD_NCCL_SYSTEM_ERROR;                            \
		atomic_store_explicit(&real_##fn, fn##_real, memory_order_release); \
	}

/* ------------------------------------------------------------- recording */

/* NCCL calls of this thread in progress.  NCCL calls itself through its
 * exported symbols (ncclBcast calls ncclBroadcast), and the preloaded
 * wrapper catches those calls too: only the outermost call of a thread is
 * recorded. */
static __thread int depth __attribute__((tls_model("initial-exec")));


/* ncclSuccess, or ncclInProgress (7): a non-blocking communicator accepted
 * the call (or is being created; its handle is valid already). */
static bool started(cd_nccl_result res)
{
	return res == CD_NCCL_SUCCESS || res == 7;
}

typedef cd_nccl_result (*cd_count_fn)(const cd_nccl_comm, int *);

/* Ask NCCL for a communicator's size and rank; false if it cannot say. */
static bool comm_query(cd_nccl_comm comm, int32_t *nranks, int32_t *rank)
{
	static _Atomic(cd_count_fn) count_fn, rank_fn;
	cd_count_fn cf, rf;
	int n = -1, r = -1;

	cf = atomic_load(&count_fn);
	rf = atomic_load(&rank_fn);
	if (!cf) {
		cf = (cd_count_fn)resolve("ncclCommCount", NULL);
		atomic_store(&count_fn, cf);
	}
	if (!rf) {
		rf = (cd_count_fn)resolve("ncclCommUserRank", NULL);
		atomic_store(&rank_fn, rf);
	}
	if (cf && rf && cf(comm, &n) == CD_NCCL_SUCCESS && rf(comm, &r) == CD_NCCL_SUCCESS && n > 0) {
		*nranks = n;
		*rank = r;
		return true;
	}
	*nranks = *rank = -1;
	return false;
}

/* A communicator's size and rank: remembered from its creation, else asked
 * of NCCL once (one made before the interposer saw it). */
static void comm_info(cd_nccl_comm comm, int32_t *nranks, int32_t *rank)
{
	if (cd_rec_comm_get((uint64_t)(uintptr_t)comm, nranks, rank))
		return;
	if (comm_query(comm, nranks, rank))
		cd_rec_comm_set((uint64_t)(uintptr_t)comm, *nranks, *rank, false);
}

/* Record a call NCCL accepted (res: what it returned; t: when it was
 * called).  A call NCCL refused is not recorded and takes no number. */
static void record(cd_nccl_result res, uint64_t t, enum cd_nfunc func, size_t count, int dtype,
		   int redop, int root, int peer, cd_nccl_comm comm, cd_cuda_stream stream)
{
	struct cd_rec r;
	struct cd_rec_call *c = &r.u.call;

	if (!started(res) || is_passive())
		return;
	r.kind = CD_RK_CALL;
	c->t = t;
	c->dur = 0;
	c->count = count;
	c->comm = (uint64_t)(uintptr_t)comm;
	c->stream = (uint64_t)(uintptr_t)stream;
	comm_info(comm, &c->nranks, &c->rank);
	c->seq = cd_rec_next_seq(c->comm);
	cd_rec_tag(&c->pg, &c->pseq);
	c->root = root;
	c->peer = peer;
	c->dtype = (int16_t)(dtype >= 0 && dtype < 64 ? dtype : -1);
	c->redop = (int16_t)(redop >= 0 && redop < 32767 ? redop : -1);
	c->func = (uint8_t)func;
	c->state = CD_NS_ENQUEUED;
	c->algo = c->proto = NULL;
	c->nchannels = -1;
	cd_rec_push(&r);
}

static void record_comm(cd_nccl_comm comm, int nranks, int rank)
{
	struct cd_rec r;

	if (is_passive() || !comm)
		return;
	cd_rec_comm_set((uint64_t)(uintptr_t)comm, nranks, rank, true);
	memset(&r, 0, sizeof r);
	r.kind = CD_RK_COMM;
	r.u.comm.comm = (uint64_t)(uintptr_t)comm;
	r.u.comm.nranks = nranks;
	r.u.comm.rank = rank;
	r.u.comm.t = cd_rec_now();
	cd_rec_push(&r);
}

/* --------------------------------------------------------- collectives */

#define NONE CD_REC_NONE

CD_EXPORT cd_nccl_result ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				       int dtype, int op, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclAllReduce);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclAllReduce_real(sendbuff, recvbuff, count, dtype, op, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_ALL_REDUCE, count, dtype, op, NONE, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				       int dtype, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclAllGather);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclAllGather_real(sendbuff, recvbuff, sendcount, dtype, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_ALL_GATHER, sendcount, dtype, NONE, NONE, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					   int dtype, int op, cd_nccl_comm comm,
					   cd_cuda_stream stream)
{
	REAL(ncclReduceScatter);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclReduceScatter_real(sendbuff, recvbuff, recvcount, dtype, op, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_REDUCE_SCATTER, recvcount, dtype, op, NONE, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				       int dtype, int root, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclBroadcast);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclBroadcast_real(sendbuff, recvbuff, count, dtype, root, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_BROADCAST, count, dtype, NONE, root, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclBcast(void *buff, size_t count, int dtype, int root,
				   cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclBcast);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclBcast_real(buff, count, dtype, root, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_BROADCAST, count, dtype, NONE, root, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int dtype,
				    int op, int root, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclReduce);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclReduce_real(sendbuff, recvbuff, count, dtype, op, root, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_REDUCE, count, dtype, op, root, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
				      int dtype, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclAlltoAll);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclAlltoAll_real(sendbuff, recvbuff, count, dtype, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_ALL_TO_ALL, count, dtype, NONE, NONE, NONE, comm, stream);
	return res;
}

/* RCCL and NCCLX spelling */
CD_EXPORT cd_nccl_result ncclAllToAll(const void *sendbuff, void *recvbuff, size_t count,
				      int dtype, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclAllToAll);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclAllToAll_real(sendbuff, recvbuff, count, dtype, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_ALL_TO_ALL, count, dtype, NONE, NONE, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclGather(const void *sendbuff, void *recvbuff, size_t count, int dtype,
				    int root, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclGather);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclGather_real(sendbuff, recvbuff, count, dtype, root, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_GATHER, count, dtype, NONE, root, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclScatter(const void *sendbuff, void *recvbuff, size_t count, int dtype,
				     int root, cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclScatter);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclScatter_real(sendbuff, recvbuff, count, dtype, root, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_SCATTER, count, dtype, NONE, root, NONE, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclSend(const void *sendbuff, size_t count, int dtype, int peer,
				  cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclSend);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclSend_real(sendbuff, count, dtype, peer, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_SEND, count, dtype, NONE, NONE, peer, comm, stream);
	return res;
}

CD_EXPORT cd_nccl_result ncclRecv(void *recvbuff, size_t count, int dtype, int peer,
				  cd_nccl_comm comm, cd_cuda_stream stream)
{
	REAL(ncclRecv);
	bool outer = depth++ == 0;
	uint64_t t = outer ? cd_rec_now() : 0;
	cd_nccl_result res = ncclRecv_real(recvbuff, count, dtype, peer, comm, stream);

	depth--;
	if (outer)
		record(res, t, CD_NF_RECV, count, dtype, NONE, NONE, peer, comm, stream);
	return res;
}

/* -------------------------------------------------------- communicators */


CD_EXPORT cd_nccl_result ncclCommInitRank(cd_nccl_comm *comm, int nranks, struct cd_nccl_uid id,
					  int rank)
{
	cd_nccl_result res;
	bool outer;

	REAL(ncclCommInitRank);
	if (!is_passive())
		cd_rec_start();
	outer = depth++ == 0;
	res = ncclCommInitRank_real(comm, nranks, id, rank);
	depth--;
	if (!outer)
		return res;
	if (started(res) && comm)
		record_comm(*comm, nranks, rank);
	return res;
}

CD_EXPORT cd_nccl_result ncclCommInitRankConfig(cd_nccl_comm *comm, int nranks,
						struct cd_nccl_uid id, int rank, void *config)
{
	cd_nccl_result res;
	bool outer;

	REAL(ncclCommInitRankConfig);
	if (!is_passive())
		cd_rec_start();
	outer = depth++ == 0;
	res = ncclCommInitRankConfig_real(comm, nranks, id, rank, config);
	depth--;
	if (!outer)
		return res;
	if (started(res) && comm)
		record_comm(*comm, nranks, rank);
	return res;
}

CD_EXPORT cd_nccl_result ncclCommInitRankScalable(cd_nccl_comm *comm, int nranks, int myrank,
						  int nid, struct cd_nccl_uid *ids, void *config)
{
	cd_nccl_result res;
	bool outer;

	REAL(ncclCommInitRankScalable);
	if (!is_passive())
		cd_rec_start();
	outer = depth++ == 0;
	res = ncclCommInitRankScalable_real(comm, nranks, myrank, nid, ids, config);
	depth--;
	if (!outer)
		return res;
	if (started(res) && comm)
		record_comm(*comm, nranks, myrank);
	return res;
}

CD_EXPORT cd_nccl_result ncclCommInitAll(cd_nccl_comm *comms, int ndev, const int *devlist)
{
	cd_nccl_result res;
	bool outer;

	REAL(ncclCommInitAll);
	if (!is_passive())
		cd_rec_start();
	outer = depth++ == 0;
	res = ncclCommInitAll_real(comms, ndev, devlist);
	depth--;
	if (!outer)
		return res;
	if (res == CD_NCCL_SUCCESS && comms)
		for (int i = 0; i < ndev; i++)
			record_comm(comms[i], ndev, i);
	return res;
}

CD_EXPORT cd_nccl_result ncclCommSplit(cd_nccl_comm comm, int color, int key,
				       cd_nccl_comm *newcomm, void *config)
{
	cd_nccl_result res;
	int32_t n, r;
	bool outer;

	REAL(ncclCommSplit);
	if (!is_passive())
		cd_rec_start();
	outer = depth++ == 0;
	res = ncclCommSplit_real(comm, color, key, newcomm, config);
	depth--;
	if (!outer)
		return res;
	/* ask NCCL: the address may be a destroyed communicator's */
	if (started(res) && newcomm && *newcomm && comm_query(*newcomm, &n, &r))
		record_comm(*newcomm, n, r);
	return res;
}

/* A communicator going away: what we know of its address is forgotten
 * before NCCL may give the address to a new one. */
CD_EXPORT cd_nccl_result ncclCommDestroy(cd_nccl_comm comm)
{
	REAL(ncclCommDestroy);
	cd_rec_comm_set((uint64_t)(uintptr_t)comm, 0, 0, true);
	return ncclCommDestroy_real(comm);
}

CD_EXPORT cd_nccl_result ncclCommAbort(cd_nccl_comm comm)
{
	REAL(ncclCommAbort);
	cd_rec_comm_set((uint64_t)(uintptr_t)comm, 0, 0, true);
	return ncclCommAbort_real(comm);
}
