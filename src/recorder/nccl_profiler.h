/* The NCCL profiler plugin ABI, versions 1 to 6, declared for commdebug.
 *
 * NCCL loads libnccl-profiler-<name>.so (NCCL_PROFILER_PLUGIN) and looks up
 * the symbols ncclProfiler_v6, ncclProfiler_v5, ... ncclProfiler_v1, newest
 * first, taking the newest it knows.  Each symbol is a table of five entry
 * points: init, startEvent, stopEvent, recordEventState, finalize.
 *
 * These are our own declarations of the structures NCCL passes, written
 * from the NCCL sources (2.23.4 .. 2.30.7); the member names are NCCL's so
 * that the code reads alongside NCCL's documentation, and the field order
 * and types are an ABI: they must not change.  ncclResult_t and the event
 * state are C enums (int); pid_t is int on Linux; NCCL's C++ bool is C's
 * _Bool.  The _Static_asserts at the end pin the x86-64 / aarch64 (LP64)
 * layout.
 *
 * Releases and the version they resolve (the newest the release knows):
 *   v1  NCCL 2.23
 *   v2  NCCL 2.24, 2.25
 *   v3  NCCL 2.26
 *   v4  NCCL 2.27
 *   v5  NCCL 2.28
 *   v6  NCCL 2.29, 2.30 (releases after 2.30.7 add v7, which we do not
 *       declare; they still take v6) */
#ifndef CD_NCCL_PROFILER_H
#define CD_NCCL_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ncclResult_t values the plugin returns. */
enum {
	CD_NP_SUCCESS = 0,
	CD_NP_SYSTEM_ERROR = 2,
	CD_NP_INTERNAL_ERROR = 3,
};

/* Event types: the descriptor's type, and the bits of *eActivationMask. */
enum cd_np_type {
	CD_NP_GROUP = 1 << 0,          /* a kernel plan (v1..v4: parent of Coll/P2p) */
	CD_NP_COLL = 1 << 1,           /* one collective task of a plan */
	CD_NP_P2P = 1 << 2,            /* one send or receive task */
	CD_NP_PROXY_OP = 1 << 3,
	CD_NP_PROXY_STEP = 1 << 4,
	CD_NP_PROXY_CTRL = 1 << 5,
	CD_NP_KERNEL_CH = 1 << 6,      /* v3+: one channel of a task's kernel */
	CD_NP_NET_PLUGIN = 1 << 7,     /* v3+ */
	CD_NP_GROUP_API = 1 << 8,      /* v5+: ncclGroupStart .. ncclGroupEnd */
	CD_NP_COLL_API = 1 << 9,       /* v5+: the ncclAllReduce (...) call itself */
	CD_NP_P2P_API = 1 << 10,       /* v5+: the ncclSend / ncclRecv call */
	CD_NP_KERNEL_LAUNCH = 1 << 11, /* v5+ */
	CD_NP_CE_COLL = 1 << 12,       /* v6: a collective run by copy engines */
	CD_NP_CE_SYNC = 1 << 13,       /* v6 */
	CD_NP_CE_BATCH = 1 << 14,      /* v6 */
};

/* recordEventState states (ncclProfilerEventState_t; one enum for all
 * versions, values fixed since v4; v1..v3 knew 0..18 only). */
enum cd_np_state {
	CD_NP_PROXY_OP_IN_PROGRESS_V4 = 19,
	CD_NP_PROXY_STEP_SEND_GPU_WAIT = 8,
	CD_NP_PROXY_STEP_SEND_PEER_WAIT_V4 = 20,
	CD_NP_PROXY_STEP_SEND_WAIT = 9,
	CD_NP_PROXY_STEP_RECV_WAIT = 10,
	CD_NP_PROXY_STEP_RECV_FLUSH_WAIT = 11,
	CD_NP_PROXY_STEP_RECV_GPU_WAIT = 12,
	CD_NP_PROXY_CTRL_IDLE = 13,
	CD_NP_PROXY_CTRL_APPEND_END = 18,
	CD_NP_NET_PLUGIN_UPDATE = 21,
	CD_NP_KERNEL_CH_STOP = 22,     /* v4+: args->kernelCh.pTimer is the stop time */
	CD_NP_GROUP_START_API_STOP = 23,
	CD_NP_GROUP_END_API_START = 24,
	CD_NP_CE_COLL_START = 25,
	CD_NP_CE_BATCH_COMPLETE = 30,
};

/* NCCL's logger (ncclDebugLogger_t); level is an enum. */
typedef void (*cd_np_logfn)(int level, unsigned long flags, const char *file, int line,
			    const char *fmt, ...);

/* Descriptor members shared by every version. */
struct cd_np_proxy_op {
	int pid;                 /* pid_t of the process that posted the op */
	uint8_t channelId;
	int peer;
	int nSteps;
	int chunkSize;
	int isSend;
};

struct cd_np_proxy_step {
	int step;
};

struct cd_np_kernel_ch_v3 {
	uint8_t channelId;
};

struct cd_np_kernel_ch {         /* v4+ */
	uint8_t channelId;
	uint64_t pTimer;         /* GPU globaltimer (ns) when the channel started */
};

struct cd_np_net_plugin {
	int64_t id;
	void *data;
};

/* ------------------------------------------------------------------ v1 */
/* NCCL 2.23.  func, datatype, algo and proto are NCCL's enum values:
 * ncclFunc_t (Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3,
 * AllReduce 4, SendRecv 5, Send 6, Recv 7), ncclDataType_t, NCCL_ALGO_*
 * (Tree 0, Ring 1, CollNetDirect 2, CollNetChain 3, NVLS 4, NVLSTree 5,
 * PAT 6), NCCL_PROTO_* (LL 0, LL128 1, Simple 2); op is ncclRedOp_t. */
struct cd_np_v1_coll {
	const char *name;        /* communicator name */
	uint64_t commHash;
	uint64_t seqNumber;
	uint8_t func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	uint8_t datatype;
	uint32_t op;
	size_t trafficBytes;
	uint8_t nMaxChannels;
	uint8_t nWarps;
	uint8_t algo;
	uint8_t proto;
	int isCollnet;
	int isNvls;
};

struct cd_np_v1_p2p {
	const char *name;
	uint64_t commHash;
	uint8_t func;
	void *buff;
	uint8_t datatype;
	size_t count;
	int peer;
};

struct cd_np_v1_descr {
	uint8_t type;            /* enum cd_np_type */
	void *parentObj;         /* handle of the parent event (Coll, P2p: the Group) */
	int rank;
	union {
		struct cd_np_v1_coll coll;
		struct cd_np_v1_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
	} u;
};

/* State arguments of v1..v3. */
union cd_np_v1_state_args {
	struct {
		size_t transSize;
		int steps;
	} proxyOp;
	struct {
		int appendedProxyOps;
	} proxyCtrl;
};

struct cd_np_v1 {
	const char *name;
	int (*init)(void **context, int *eActivationMask);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v1_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v1_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------------ v2 */
/* NCCL 2.24 and 2.25.  Names become NCCL's static strings ("AllReduce",
 * "ncclFloat32", "RING", "SIMPLE"); op, isCollnet and isNvls are gone. */
struct cd_np_v2_coll {
	const char *name;
	uint64_t commHash;
	uint64_t seqNumber;
	const char *func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	const char *datatype;
	size_t trafficBytes;
	uint8_t nMaxChannels;
	uint8_t nWarps;
	const char *algo;
	const char *proto;
};

struct cd_np_v2_p2p {
	const char *name;
	uint64_t commHash;
	const char *func;
	void *buff;
	const char *datatype;
	size_t count;
	int peer;
};

struct cd_np_v2_descr {
	uint8_t type;
	void *parentObj;
	int rank;
	union {
		struct cd_np_v2_coll coll;
		struct cd_np_v2_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
	} u;
};

struct cd_np_v2 {
	const char *name;
	int (*init)(void **context, int *eActivationMask);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v2_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v1_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------------ v3 */
/* NCCL 2.26.  trafficBytes is gone; KernelCh (no timestamp) and NetPlugin
 * events are new.  The p2p member is v2's. */
struct cd_np_v3_coll {
	const char *name;
	uint64_t commHash;
	uint64_t seqNumber;
	const char *func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	const char *datatype;
	uint8_t nMaxChannels;
	uint8_t nWarps;
	const char *algo;
	const char *proto;
};

struct cd_np_v3_descr {
	uint8_t type;
	void *parentObj;
	int rank;
	union {
		struct cd_np_v3_coll coll;
		struct cd_np_v2_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
		struct cd_np_kernel_ch_v3 kernelCh;
		struct cd_np_net_plugin netPlugin;
	} u;
};

struct cd_np_v3 {
	const char *name;
	int (*init)(void **context, int *eActivationMask);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v3_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v1_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------------ v4 */
/* NCCL 2.27.  init receives the communicator (name, commHash, nNodes,
 * nranks, rank); name and commHash leave the descriptors; nMaxChannels
 * becomes the channels actually used (nChannels), P2p gains nChannels and
 * KernelCh a GPU start timestamp. */
struct cd_np_v4_coll {
	uint64_t seqNumber;
	const char *func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	const char *datatype;
	uint8_t nChannels;
	uint8_t nWarps;
	const char *algo;
	const char *proto;
};

struct cd_np_v4_p2p {
	const char *func;
	void *buff;
	const char *datatype;
	size_t count;
	int peer;
	uint8_t nChannels;
};

struct cd_np_v4_descr {
	uint8_t type;
	void *parentObj;
	int rank;
	union {
		struct cd_np_v4_coll coll;
		struct cd_np_v4_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
		struct cd_np_kernel_ch kernelCh;
		struct cd_np_net_plugin netPlugin;
	} u;
};

/* State arguments of v4..v6. */
union cd_np_v4_state_args {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		int appendedProxyOps;
	} proxyCtrl;
	struct {
		void *data;
	} netPlugin;
	struct {
		uint64_t pTimer;  /* GPU globaltimer (ns) when the channel finished */
	} kernelCh;
};

struct cd_np_v4 {
	const char *name;
	int (*init)(void **context, int *eActivationMask, const char *commName, uint64_t commHash,
		    int nNodes, int nranks, int rank, cd_np_logfn logfn);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v4_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v4_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------------ v5 */
/* NCCL 2.28.  init takes the commId (NCCL passes comm->commHash) first;
 * type widens to 64 bits; API events describe the user's call (with its
 * stream); Coll and P2p hang under the CollApi / P2pApi event (parentObj)
 * and keep the plan's Group event in parentGroup. */
struct cd_np_v5_group_api {
	bool graphCaptured;
	int groupDepth;
};

struct cd_np_v5_coll_api {
	const char *func;
	size_t count;
	const char *datatype;
	int root;
	void *stream;            /* cudaStream_t */
	bool graphCaptured;
};

struct cd_np_v5_p2p_api {
	const char *func;
	size_t count;
	const char *datatype;
	void *stream;
	bool graphCaptured;
};

struct cd_np_v5_kernel_launch {
	void *stream;
};

struct cd_np_v5_coll {
	uint64_t seqNumber;
	const char *func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	const char *datatype;
	uint8_t nChannels;
	uint8_t nWarps;
	const char *algo;
	const char *proto;
	void *parentGroup;
};

struct cd_np_v5_p2p {
	const char *func;
	void *buff;
	const char *datatype;
	size_t count;
	int peer;
	uint8_t nChannels;
	void *parentGroup;
};

struct cd_np_v5_descr {
	uint64_t type;
	void *parentObj;
	int rank;
	union {
		struct cd_np_v5_group_api groupApi;
		struct cd_np_v5_coll_api collApi;
		struct cd_np_v5_p2p_api p2pApi;
		struct cd_np_v5_kernel_launch kernelLaunch;
		struct cd_np_v5_coll coll;
		struct cd_np_v5_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
		struct cd_np_kernel_ch kernelCh;
		struct cd_np_net_plugin netPlugin;
	} u;
};

struct cd_np_v5 {
	const char *name;
	int (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
		    int nNodes, int nranks, int rank, cd_np_logfn logfn);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v5_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v4_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------------ v6 */
/* NCCL 2.29 and 2.30: v5 plus the copy-engine collective events.  init and
 * the state arguments are v5's. */
struct cd_np_v6_ce_coll {
	uint64_t seqNumber;
	const char *func;
	const void *sendBuff;
	void *recvBuff;
	size_t count;
	int root;
	const char *datatype;
	const char *syncStrategy;
	bool intraBatchSync;
	uint32_t batchSize;
	uint32_t numBatches;
	uint32_t ceSeqNum;
	void *stream;
};

struct cd_np_v6_ce_sync {
	bool isComplete;
	int nRanks;
};

struct cd_np_v6_ce_batch {
	int numOps;
	size_t totalBytes;
	bool useIntraSync;
};

struct cd_np_v6_descr {
	uint64_t type;
	void *parentObj;
	int rank;
	union {
		struct cd_np_v5_group_api groupApi;
		struct cd_np_v5_coll_api collApi;
		struct cd_np_v5_p2p_api p2pApi;
		struct cd_np_v5_kernel_launch kernelLaunch;
		struct cd_np_v5_coll coll;
		struct cd_np_v5_p2p p2p;
		struct cd_np_proxy_op proxyOp;
		struct cd_np_proxy_step proxyStep;
		struct cd_np_kernel_ch kernelCh;
		struct cd_np_net_plugin netPlugin;
		struct cd_np_v6_ce_coll ceColl;
		struct cd_np_v6_ce_sync ceCollSync;
		struct cd_np_v6_ce_batch ceCollBatch;
	} u;
};

struct cd_np_v6 {
	const char *name;
	int (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
		    int nNodes, int nranks, int rank, cd_np_logfn logfn);
	int (*startEvent)(void *context, void **eHandle, struct cd_np_v6_descr *eDescr);
	int (*stopEvent)(void *eHandle);
	int (*recordEventState)(void *eHandle, int eState, union cd_np_v4_state_args *eStateArgs);
	int (*finalize)(void *context);
};

/* ------------------------------------------------------------- layout */
/* LP64 (x86-64, aarch64), checked against NCCL's own headers compiled as
 * C++.  The union always starts at 24. */
#if defined(__LP64__)
#define CD_NP_AT(t, m, off) _Static_assert(offsetof(t, m) == (off), #t "." #m " moved")
#define CD_NP_SIZE(t, n) _Static_assert(sizeof(t) == (n), #t " changed size")

CD_NP_SIZE(struct cd_np_proxy_op, 24);
CD_NP_AT(struct cd_np_kernel_ch, pTimer, 8);

CD_NP_AT(struct cd_np_v1_descr, parentObj, 8);
CD_NP_AT(struct cd_np_v1_descr, rank, 16);
CD_NP_AT(struct cd_np_v1_descr, u, 24);
CD_NP_AT(struct cd_np_v1_coll, func, 24);
CD_NP_AT(struct cd_np_v1_coll, count, 48);
CD_NP_AT(struct cd_np_v1_coll, datatype, 60);
CD_NP_AT(struct cd_np_v1_coll, op, 64);
CD_NP_AT(struct cd_np_v1_coll, nMaxChannels, 80);
CD_NP_AT(struct cd_np_v1_coll, proto, 83);
CD_NP_AT(struct cd_np_v1_coll, isNvls, 88);
CD_NP_AT(struct cd_np_v1_p2p, datatype, 32);
CD_NP_AT(struct cd_np_v1_p2p, peer, 48);
CD_NP_SIZE(struct cd_np_v1_descr, 120);
CD_NP_SIZE(union cd_np_v1_state_args, 16);

CD_NP_AT(struct cd_np_v2_coll, datatype, 64);
CD_NP_AT(struct cd_np_v2_coll, nMaxChannels, 80);
CD_NP_AT(struct cd_np_v2_coll, proto, 96);
CD_NP_AT(struct cd_np_v2_p2p, peer, 48);
CD_NP_SIZE(struct cd_np_v2_descr, 128);

CD_NP_AT(struct cd_np_v3_coll, nMaxChannels, 72);
CD_NP_AT(struct cd_np_v3_coll, proto, 88);
CD_NP_SIZE(struct cd_np_v3_descr, 120);

CD_NP_AT(struct cd_np_v4_descr, u, 24);
CD_NP_AT(struct cd_np_v4_coll, count, 32);
CD_NP_AT(struct cd_np_v4_coll, root, 40);
CD_NP_AT(struct cd_np_v4_coll, nChannels, 56);
CD_NP_AT(struct cd_np_v4_coll, proto, 72);
CD_NP_AT(struct cd_np_v4_p2p, peer, 32);
CD_NP_AT(struct cd_np_v4_p2p, nChannels, 36);
CD_NP_SIZE(struct cd_np_v4_descr, 104);
CD_NP_SIZE(union cd_np_v4_state_args, 8);

CD_NP_AT(struct cd_np_v5_descr, parentObj, 8);
CD_NP_AT(struct cd_np_v5_descr, u, 24);
CD_NP_AT(struct cd_np_v5_coll_api, root, 24);
CD_NP_AT(struct cd_np_v5_coll_api, stream, 32);
CD_NP_AT(struct cd_np_v5_p2p_api, stream, 24);
CD_NP_AT(struct cd_np_v5_coll, parentGroup, 80);
CD_NP_AT(struct cd_np_v5_p2p, parentGroup, 40);
CD_NP_SIZE(struct cd_np_v5_descr, 112);

CD_NP_AT(struct cd_np_v6_ce_coll, syncStrategy, 56);
CD_NP_AT(struct cd_np_v6_ce_coll, batchSize, 68);
CD_NP_AT(struct cd_np_v6_ce_coll, stream, 80);
CD_NP_SIZE(struct cd_np_v6_descr, 112);

CD_NP_SIZE(struct cd_np_v1, 48);
CD_NP_SIZE(struct cd_np_v6, 48);

#undef CD_NP_AT
#undef CD_NP_SIZE
#endif

#endif
