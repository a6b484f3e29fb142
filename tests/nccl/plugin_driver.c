/* Drives libnccl-profiler-commdebug the way NCCL does, without NCCL or a GPU.
 *
 *   plugin_driver PLUGIN.so VERSION [stress | bench N]
 *
 * dlopens PLUGIN.so, takes ncclProfiler_vVERSION (1..6) and replays a fixed
 * scenario through it with NCCL's order of calls and threads (from NCCL
 * 2.23..2.30 src/plugin/profiler.cc, src/enqueue.cc, src/transport/profiler.cc):
 *
 *   - init once per communicator (A: 4 ranks, rank 1; B: 2 ranks, rank 0,
 *     with COMMDEBUG_NCCL_EVENT_POOL=2);
 *   - per call, on the calling thread: v5+ GroupApi and CollApi / P2pApi
 *     start and stop; then at launch Group start, the tasks' Coll / P2p
 *     starts (parentObj: the Group handle before v5, the CollApi / P2pApi
 *     handle from v5), their stops, Group stop.  Like NCCL, the task of an
 *     AllGather or a Broadcast counts bytes of ncclInt8;
 *   - on a second thread, like the proxy thread: KernelCh start per channel
 *     (parentObj: the task's handle; v4+ with the GPU start time), then
 *     recordEventState(KernelChStop, stop time) and stopEvent; NULL handles
 *     are skipped as NCCL skips them;
 *   - finalize; B is finalized while one of its kernels is still running.
 *
 * The Python tag ("1", 7) is set around the AllReduce; ("1", 8) only around
 * the calls of the AllGather + ReduceScatter group, not its launch, so only
 * v5+ (which reads the tag at the call) tags those two.
 *
 * "stress" then hammers two communicators from four threads (tasks launched
 * on one, kernels finished on another) for the sanitizers.
 *
 * "onerank" (instead of the scenario) inits three one-rank communicators:
 * 0x1 without calls, finalized; 0x2 with one AllReduce, finalized; 0x3
 * without calls, never finalized (as when a job exits without destroying
 * its process groups).
 *
 * "settrace PATH" (instead of the scenario): one AllReduce, a flush (the
 * trace is open at COMMDEBUG_NCCL_TRACE), commdebug_nccl_set_trace(PATH),
 * another AllReduce, finalize.
 *
 * Exit 0 when every entry point answered as expected, else one line on
 * stderr and exit 1. */
#include "nccl_profiler.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A call as the user makes it, and what NCCL makes of it. */
struct call {
	int type;               /* CD_NP_COLL or CD_NP_P2P */
	const char *func;       /* NCCL's name */
	int fcode;              /* v1: ncclFunc_t */
	size_t count;           /* the user's count */
	const char *dtype;      /* the user's type */
	int dcode, esize;
	int root, peer;
	unsigned op;            /* ncclRedOp_t (v1 only) */
	const char *algo, *proto;
	int acode, pcode;
	int nch;                /* channels the task runs on */
	void *stream;
	uint64_t t0[2], t1[2];  /* GPU start / stop per channel */
	/* filled while running */
	void *api, *task;
	int late;               /* stress: channel 1 finishes at the very end */
};

struct comm {
	const char *name;
	uint64_t hash;
	int nranks, rank;
	void *ctx;
};

static int ver;
static void *tab;
static int (*tag)(const char *, uint64_t);
static void (*untag)(void);
static void (*flush)(void);
static int want_timing;

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "plugin_driver: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

static void check(int rc, const char *what)
{
	if (rc != 0)
		fail("v%d %s returned %d, not ncclSuccess", ver, what, rc);
}

/* ------------------------------------------------------- entry points */

#define T(n) ((struct cd_np_v##n *)tab)

static void p_init(struct comm *cm)
{
	int mask = 0, want;

	switch (ver) {
	case 1: check(T(1)->init(&cm->ctx, &mask), "init"); break;
	case 2: check(T(2)->init(&cm->ctx, &mask), "init"); break;
	case 3: check(T(3)->init(&cm->ctx, &mask), "init"); break;
	case 4:
		check(T(4)->init(&cm->ctx, &mask, cm->name, cm->hash, 1, cm->nranks, cm->rank, NULL),
		      "init");
		break;
	case 5:
		check(T(5)->init(&cm->ctx, cm->hash, &mask, cm->name, 1, cm->nranks, cm->rank, NULL),
		      "init");
		break;
	default:
		check(T(6)->init(&cm->ctx, cm->hash, &mask, cm->name, 1, cm->nranks, cm->rank, NULL),
		      "init");
		break;
	}
	if (!cm->ctx)
		fail("v%d init gave no context", ver);
	want = CD_NP_COLL | CD_NP_P2P | (want_timing ? CD_NP_KERNEL_CH : 0) |
	       (ver >= 6 ? CD_NP_CE_COLL : 0);
	if (mask != want)
		fail("v%d init set the event mask to 0x%x, not 0x%x", ver, mask, want);
}

static int p_stop(void *h)
{
	switch (ver) {
	case 1: return T(1)->stopEvent(h);
	case 2: return T(2)->stopEvent(h);
	case 3: return T(3)->stopEvent(h);
	case 4: return T(4)->stopEvent(h);
	case 5: return T(5)->stopEvent(h);
	default: return T(6)->stopEvent(h);
	}
}

static void stop(void *h)
{
	if (h)  /* NCCL never stops a NULL handle */
		check(p_stop(h), "stopEvent");
}

/* A Group (plan) event; NCCL <= 2.27 starts no task under a NULL one. */
static void *group_start(struct comm *cm)
{
	void *h = NULL;
	struct cd_np_v1_descr d1 = {.type = CD_NP_GROUP};
	struct cd_np_v2_descr d2 = {.type = CD_NP_GROUP};
	struct cd_np_v3_descr d3 = {.type = CD_NP_GROUP};
	struct cd_np_v4_descr d4 = {.type = CD_NP_GROUP};
	struct cd_np_v5_descr d5 = {.type = CD_NP_GROUP};
	struct cd_np_v6_descr d6 = {.type = CD_NP_GROUP};

	switch (ver) {
	case 1: check(T(1)->startEvent(cm->ctx, &h, &d1), "startEvent(Group)"); break;
	case 2: check(T(2)->startEvent(cm->ctx, &h, &d2), "startEvent(Group)"); break;
	case 3: check(T(3)->startEvent(cm->ctx, &h, &d3), "startEvent(Group)"); break;
	case 4: check(T(4)->startEvent(cm->ctx, &h, &d4), "startEvent(Group)"); break;
	case 5: check(T(5)->startEvent(cm->ctx, &h, &d5), "startEvent(Group)"); break;
	default: check(T(6)->startEvent(cm->ctx, &h, &d6), "startEvent(Group)"); break;
	}
	if (!h)
		fail("v%d Group handle is NULL: NCCL <= 2.27 would start no Coll under it", ver);
	return h;
}

/* v5+: ncclAllReduce (...) itself: GroupApi, CollApi / P2pApi start, stop. */
static void api_call(struct comm *cm, struct call *c)
{
	struct cd_np_v6_descr d6;
	struct cd_np_v5_descr d5;
	void *g = NULL;
	int rc;

	c->api = NULL;
	if (ver < 5)
		return;
	memset(&d5, 0, sizeof d5);
	memset(&d6, 0, sizeof d6);
	d5.type = d6.type = CD_NP_GROUP_API;
	d5.u.groupApi.groupDepth = d6.u.groupApi.groupDepth = 1;
	rc = ver == 5 ? T(5)->startEvent(cm->ctx, &g, &d5) : T(6)->startEvent(cm->ctx, &g, &d6);
	check(rc, "startEvent(GroupApi)");
	memset(&d5, 0, sizeof d5);
	memset(&d6, 0, sizeof d6);
	d5.parentObj = d6.parentObj = g;
	if (c->type == CD_NP_COLL) {
		d5.type = d6.type = CD_NP_COLL_API;
		d5.u.collApi = d6.u.collApi = (struct cd_np_v5_coll_api){
			.func = c->func, .count = c->count, .datatype = c->dtype, .root = c->root,
			.stream = c->stream,
		};
	} else {
		d5.type = d6.type = CD_NP_P2P_API;
		d5.u.p2pApi = d6.u.p2pApi = (struct cd_np_v5_p2p_api){
			.func = c->func, .count = c->count, .datatype = c->dtype, .stream = c->stream,
		};
	}
	rc = ver == 5 ? T(5)->startEvent(cm->ctx, &c->api, &d5)
		      : T(6)->startEvent(cm->ctx, &c->api, &d6);
	check(rc, "startEvent(CollApi)");
	if (!c->api)
		fail("v%d CollApi / P2pApi handle is NULL", ver);
	stop(c->api);  /* NCCL stops it before the task starts */
	stop(g);
}

/* The task at launch. */
static void task_start(struct comm *cm, struct call *c, void *group)
{
	int bytes = !strcmp(c->func, "AllGather") || !strcmp(c->func, "Broadcast");
	size_t count = bytes ? c->count * (size_t)c->esize : c->count;
	const char *dt = bytes ? "ncclInt8" : c->dtype;
	int dc = bytes ? 0 : c->dcode;
	void *h = NULL;
	int rc = 0;

	if (ver == 1) {
		struct cd_np_v1_descr d = {.type = (uint8_t)c->type, .parentObj = group, .rank = cm->rank};
		if (c->type == CD_NP_COLL)
			d.u.coll = (struct cd_np_v1_coll){
				.name = cm->name, .commHash = cm->hash, .func = (uint8_t)c->fcode,
				.count = count, .root = c->root, .datatype = (uint8_t)dc, .op = c->op,
				.nMaxChannels = (uint8_t)c->nch, .algo = (uint8_t)c->acode,
				.proto = (uint8_t)c->pcode,
			};
		else
			d.u.p2p = (struct cd_np_v1_p2p){
				.name = cm->name, .commHash = cm->hash, .func = (uint8_t)c->fcode,
				.datatype = (uint8_t)dc, .count = count, .peer = c->peer,
			};
		rc = T(1)->startEvent(cm->ctx, &h, &d);
	} else if (ver == 2 || ver == 3) {
		struct cd_np_v2_descr d2 = {.type = (uint8_t)c->type, .parentObj = group, .rank = cm->rank};
		struct cd_np_v3_descr d3 = {.type = (uint8_t)c->type, .parentObj = group, .rank = cm->rank};
		struct cd_np_v2_p2p p = {
			.name = cm->name, .commHash = cm->hash, .func = c->func, .datatype = dt,
			.count = count, .peer = c->peer,
		};
		if (c->type == CD_NP_COLL) {
			d2.u.coll = (struct cd_np_v2_coll){
				.name = cm->name, .commHash = cm->hash, .func = c->func, .count = count,
				.root = c->root, .datatype = dt, .nMaxChannels = (uint8_t)c->nch,
				.algo = c->algo, .proto = c->proto,
			};
			d3.u.coll = (struct cd_np_v3_coll){
				.name = cm->name, .commHash = cm->hash, .func = c->func, .count = count,
				.root = c->root, .datatype = dt, .nMaxChannels = (uint8_t)c->nch,
				.algo = c->algo, .proto = c->proto,
			};
		} else {
			d2.u.p2p = d3.u.p2p = p;
		}
		rc = ver == 2 ? T(2)->startEvent(cm->ctx, &h, &d2) : T(3)->startEvent(cm->ctx, &h, &d3);
	} else if (ver == 4) {
		struct cd_np_v4_descr d = {.type = (uint8_t)c->type, .parentObj = group, .rank = cm->rank};
		if (c->type == CD_NP_COLL)
			d.u.coll = (struct cd_np_v4_coll){
				.func = c->func, .count = count, .root = c->root, .datatype = dt,
				.nChannels = (uint8_t)c->nch, .algo = c->algo, .proto = c->proto,
			};
		else
			d.u.p2p = (struct cd_np_v4_p2p){
				.func = c->func, .datatype = dt, .count = count, .peer = c->peer,
				.nChannels = (uint8_t)c->nch,
			};
		rc = T(4)->startEvent(cm->ctx, &h, &d);
	} else {
		struct cd_np_v5_descr d5 = {.type = (uint64_t)c->type, .parentObj = c->api, .rank = cm->rank};
		struct cd_np_v6_descr d6 = {.type = (uint64_t)c->type, .parentObj = c->api, .rank = cm->rank};
		if (c->type == CD_NP_COLL)
			d5.u.coll = d6.u.coll = (struct cd_np_v5_coll){
				.func = c->func, .count = count, .root = c->root, .datatype = dt,
				.nChannels = (uint8_t)c->nch, .algo = c->algo, .proto = c->proto,
				.parentGroup = group,
			};
		else
			d5.u.p2p = d6.u.p2p = (struct cd_np_v5_p2p){
				.func = c->func, .datatype = dt, .count = count, .peer = c->peer,
				.nChannels = (uint8_t)c->nch, .parentGroup = group,
			};
		rc = ver == 5 ? T(5)->startEvent(cm->ctx, &h, &d5) : T(6)->startEvent(cm->ctx, &h, &d6);
	}
	check(rc, "startEvent(Coll/P2p)");
	c->task = h;
}

/* KernelCh of channel ch of task parent (the proxy thread). */
static void *kch_start(struct comm *cm, void *parent, int ch, uint64_t t)
{
	void *h = NULL;
	int rc;

	if (!want_timing)
		return NULL;  /* not in the event mask: NCCL raises no KernelCh */
	if (ver == 4) {
		struct cd_np_v4_descr d = {.type = CD_NP_KERNEL_CH, .parentObj = parent};
		d.u.kernelCh = (struct cd_np_kernel_ch){.channelId = (uint8_t)ch, .pTimer = t};
		rc = T(4)->startEvent(cm->ctx, &h, &d);
	} else if (ver == 5) {
		struct cd_np_v5_descr d = {.type = CD_NP_KERNEL_CH, .parentObj = parent};
		d.u.kernelCh = (struct cd_np_kernel_ch){.channelId = (uint8_t)ch, .pTimer = t};
		rc = T(5)->startEvent(cm->ctx, &h, &d);
	} else if (ver == 6) {
		struct cd_np_v6_descr d = {.type = CD_NP_KERNEL_CH, .parentObj = parent};
		d.u.kernelCh = (struct cd_np_kernel_ch){.channelId = (uint8_t)ch, .pTimer = t};
		rc = T(6)->startEvent(cm->ctx, &h, &d);
	} else {
		return NULL;
	}
	check(rc, "startEvent(KernelCh)");
	return h;
}

static void kch_stop(void *h, uint64_t t)
{
	union cd_np_v4_state_args a = {.kernelCh.pTimer = t};
	int rc = 0;

	if (!h)
		return;
	switch (ver) {
	case 4: rc = T(4)->recordEventState(h, CD_NP_KERNEL_CH_STOP, &a); break;
	case 5: rc = T(5)->recordEventState(h, CD_NP_KERNEL_CH_STOP, &a); break;
	case 6: rc = T(6)->recordEventState(h, CD_NP_KERNEL_CH_STOP, &a); break;
	default: break;  /* v3 has no stop time */
	}
	check(rc, "recordEventState(KernelChStop)");
	stop(h);
}

static void p_finalize(struct comm *cm)
{
	switch (ver) {
	case 1: check(T(1)->finalize(cm->ctx), "finalize"); break;
	case 2: check(T(2)->finalize(cm->ctx), "finalize"); break;
	case 3: check(T(3)->finalize(cm->ctx), "finalize"); break;
	case 4: check(T(4)->finalize(cm->ctx), "finalize"); break;
	case 5: check(T(5)->finalize(cm->ctx), "finalize"); break;
	default: check(T(6)->finalize(cm->ctx), "finalize"); break;
	}
}

/* ------------------------------------------------------ proxy thread */

struct kjob {
	struct comm *cm;
	struct call *c;
	int from, to;      /* channels */
	int start, finish; /* what to do on them */
	void *h[2];
};

static void *kernel_thread(void *arg)
{
	struct kjob *j = arg;

	/* NCCL starts KernelCh under a NULL task handle too */
	for (int ch = j->from; ch < j->to; ch++)
		if (j->start)
			j->h[ch] = kch_start(j->cm, j->c->task, ch, j->c->t0[ch]);
	for (int ch = j->from; ch < j->to; ch++)
		if (j->finish)
			kch_stop(j->h[ch], j->c->t1[ch]);
	return NULL;
}

/* Run a kernel job on a thread of its own, to its end. */
static void on_proxy(struct kjob *j)
{
	pthread_t t;

	if (pthread_create(&t, NULL, kernel_thread, j) != 0 || pthread_join(t, NULL) != 0)
		fail("cannot run the proxy thread");
}

static void kernel(struct comm *cm, struct call *c)
{
	struct kjob j = {.cm = cm, .c = c, .from = 0, .to = c->nch, .start = 1, .finish = 1};

	on_proxy(&j);
}

static void expect_task(const struct call *c, int tracked, const char *what)
{
	if (tracked && !c->task)
		fail("v%d %s: no handle for a task whose completion is tracked", ver, what);
	if (!tracked && c->task)
		fail("v%d %s: a handle where none was expected", ver, what);
}

/* ---------------------------------------------------------- scenario */

#define S_COLL ((void *)(uintptr_t)0x1000a0)
#define S_P2P ((void *)(uintptr_t)0x2000b0)
#define S_B ((void *)(uintptr_t)0x3000c0)

static void scenario(void)
{
	struct comm a = {"cd-test-A", 0x1111aaaa2222bbbbull, 4, 1, NULL};
	struct comm b = {"cd-test-B", 0x3333cccc4444ddddull, 2, 0, NULL};
	struct call ar = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 1024,
			  .dtype = "ncclFloat32", .dcode = 7, .esize = 4, .peer = -1, .op = 0,
			  .algo = "RING", .proto = "SIMPLE", .acode = 1, .pcode = 2, .nch = 2,
			  .stream = S_COLL, .t0 = {1000000, 1000100}, .t1 = {1005000, 1006100}};
	struct call ag = {.type = CD_NP_COLL, .func = "AllGather", .fcode = 2, .count = 256,
			  .dtype = "ncclBfloat16", .dcode = 9, .esize = 2, .peer = -1,
			  .algo = "RING", .proto = "LL", .acode = 1, .pcode = 0, .nch = 1,
			  .stream = S_COLL, .t0 = {2000000}, .t1 = {2003000}};
	struct call rs = {.type = CD_NP_COLL, .func = "ReduceScatter", .fcode = 3, .count = 256,
			  .dtype = "ncclFloat32", .dcode = 7, .esize = 4, .peer = -1, .op = 0,
			  .algo = "RING", .proto = "SIMPLE", .acode = 1, .pcode = 2, .nch = 2,
			  .stream = S_COLL, .t0 = {2100000, 2100050}, .t1 = {2104000, 2104500}};
	struct call bc = {.type = CD_NP_COLL, .func = "Broadcast", .fcode = 0, .count = 4096,
			  .dtype = "ncclFloat32", .dcode = 7, .esize = 4, .root = 2, .peer = -1,
			  .algo = "RING", .proto = "LL128", .acode = 1, .pcode = 1, .nch = 1,
			  .stream = S_COLL, .t0 = {3000000}, .t1 = {3002500}};
	struct call sd = {.type = CD_NP_P2P, .func = "Send", .fcode = 6, .count = 1000,
			  .dtype = "ncclInt32", .dcode = 2, .esize = 4, .peer = 3, .nch = 1,
			  .stream = S_P2P, .t0 = {4000000}, .t1 = {4001000}};
	struct call rv = {.type = CD_NP_P2P, .func = "Recv", .fcode = 7, .count = 1000,
			  .dtype = "ncclInt32", .dcode = 2, .esize = 4, .peer = 3, .nch = 1,
			  .stream = S_P2P, .t0 = {0, 4000200}, .t1 = {0, 4001700}};
	struct call b1 = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 64,
			  .dtype = "ncclFloat64", .dcode = 8, .esize = 8, .peer = -1, .op = 2,
			  .algo = "TREE", .proto = "LL", .acode = 0, .pcode = 0, .nch = 1,
			  .stream = S_B, .t0 = {0}, .t1 = {0}};
	struct call b2 = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 128,
			  .dtype = "ncclFloat64", .dcode = 8, .esize = 8, .peer = -1, .op = 0,
			  .algo = "TREE", .proto = "LL", .acode = 0, .pcode = 0, .nch = 1,
			  .stream = S_B, .t0 = {5000000}, .t1 = {5000800}};
	struct call b3 = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 256,
			  .dtype = "ncclFloat64", .dcode = 8, .esize = 8, .peer = -1, .op = 0,
			  .algo = "RING", .proto = "LL", .acode = 1, .pcode = 0, .nch = 1,
			  .stream = S_B, .t0 = {5100000}, .t1 = {5100900}};
	struct kjob early, late, fin;
	void *g;

	unsetenv("COMMDEBUG_NCCL_EVENT_POOL");
	p_init(&a);
	setenv("COMMDEBUG_NCCL_EVENT_POOL", "2", 1);
	p_init(&b);
	unsetenv("COMMDEBUG_NCCL_EVENT_POOL");

	/* A: AllReduce, tagged; channel 0 starts before the task stops */
	if (tag("1", 7) != 0)
		fail("commdebug_nccl_tag failed");
	api_call(&a, &ar);
	g = group_start(&a);
	task_start(&a, &ar, g);
	expect_task(&ar, want_timing, "AllReduce");
	early = (struct kjob){.cm = &a, .c = &ar, .from = 0, .to = 1, .start = 1};
	on_proxy(&early);
	stop(ar.task);
	stop(g);
	untag();
	late = (struct kjob){.cm = &a, .c = &ar, .from = 1, .to = 2, .start = 1};
	on_proxy(&late);
	fin = (struct kjob){.cm = &a, .c = &ar, .from = 0, .to = 2, .finish = 1,
			    .h = {early.h[0], late.h[1]}};
	on_proxy(&fin);

	/* A: ncclGroupStart; AllGather; ReduceScatter; ncclGroupEnd, the tag
	 * set around the two calls only */
	tag("1", 8);
	api_call(&a, &ag);
	api_call(&a, &rs);
	untag();
	g = group_start(&a);
	task_start(&a, &ag, g);
	task_start(&a, &rs, g);
	stop(ag.task);
	stop(rs.task);
	stop(g);
	kernel(&a, &ag);
	kernel(&a, &rs);

	/* A: Broadcast root 2 (its Coll follows, as with NCCL_ALLGATHERV_ENABLE=0
	 * on 2.29+) */
	api_call(&a, &bc);
	g = group_start(&a);
	task_start(&a, &bc, g);
	stop(bc.task);
	stop(g);
	kernel(&a, &bc);

	/* A: ncclGroupStart; Send; Recv; ncclGroupEnd with peer 3 */
	api_call(&a, &sd);
	api_call(&a, &rv);
	g = group_start(&a);
	task_start(&a, &sd, g);
	task_start(&a, &rv, g);
	stop(sd.task);
	stop(rv.task);
	stop(g);
	{	/* the receive runs on channel 1 */
		struct kjob s = {.cm = &a, .c = &sd, .from = 0, .to = 1, .start = 1, .finish = 1};
		struct kjob r = {.cm = &a, .c = &rv, .from = 1, .to = 2, .start = 1, .finish = 1};
		on_proxy(&s);
		on_proxy(&r);
	}

	/* B (2 events): three AllReduces launched before any kernel runs; the
	 * third finds the pool empty; the first has zero GPU timestamps */
	for (struct call *c = &b1; c; c = c == &b1 ? &b2 : c == &b2 ? &b3 : NULL) {
		api_call(&b, c);
		g = group_start(&b);
		task_start(&b, c, g);
		stop(c->task);
		stop(g);
	}
	expect_task(&b1, want_timing, "B AllReduce 1");
	expect_task(&b2, want_timing, "B AllReduce 2");
	expect_task(&b3, 0, "B AllReduce 3 (pool empty)");
	kernel(&b, &b1);
	kernel(&b, &b3);

	p_finalize(&a);
	/* B goes while its second AllReduce still runs */
	p_finalize(&b);
	kernel(&b, &b2);
	flush();
}

/* ------------------------------------------------------------ stress */

#define STRESS_N 20000

struct sq {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct call *q[64];
	unsigned head, tail;
	int done;
};

struct sarg {
	struct comm *cm;
	struct sq *q;
	int who;
};

static void *stress_user(void *arg)
{
	struct sarg *s = arg;
	static const struct call proto = {
		.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 1024,
		.dtype = "ncclFloat32", .dcode = 7, .esize = 4, .peer = -1, .algo = "RING",
		.proto = "SIMPLE", .acode = 1, .pcode = 2, .nch = 2, .stream = S_COLL,
		.t0 = {100, 110}, .t1 = {200, 230}};

	for (int i = 0; i < STRESS_N; i++) {
		struct call *c = malloc(sizeof *c);
		void *g, *task;

		if (!c)
			fail("out of memory");
		*c = proto;
		c->nch = 1 + i % 2;
		if (i % 7 == 0)
			c->t0[0] = 0;  /* zero timer */
		c->late = c->nch == 2 && i % 11 == 1;
		if (i % 3 == 0)
			tag("stress", (uint64_t)i + 1);
		api_call(s->cm, c);
		g = group_start(s->cm);
		task_start(s->cm, c, g);
		task = c->task;  /* c belongs to the proxy side once queued */
		if (i % 2)
			stop(task);
		pthread_mutex_lock(&s->q->mu);
		while (s->q->head - s->q->tail == 64)
			pthread_cond_wait(&s->q->cv, &s->q->mu);
		s->q->q[s->q->head++ % 64] = c;
		pthread_cond_broadcast(&s->q->cv);
		pthread_mutex_unlock(&s->q->mu);
		if (!(i % 2))
			stop(task);  /* after the proxy may have run its kernels */
		stop(g);
		untag();
	}
	pthread_mutex_lock(&s->q->mu);
	s->q->done = 1;
	pthread_cond_broadcast(&s->q->cv);
	pthread_mutex_unlock(&s->q->mu);
	return NULL;
}

/* The proxy side: runs each task's channels; a "late" task's channel 1
 * only after all others, by which time the pool may have reclaimed it. */
static void *stress_proxy(void *arg)
{
	struct sarg *s = arg;
	static struct call *deferred[2][STRESS_N];
	int nd = 0;

	for (;;) {
		struct call *c;
		struct kjob j;

		pthread_mutex_lock(&s->q->mu);
		while (s->q->head == s->q->tail && !s->q->done)
			pthread_cond_wait(&s->q->cv, &s->q->mu);
		if (s->q->head == s->q->tail) {
			pthread_mutex_unlock(&s->q->mu);
			break;
		}
		c = s->q->q[s->q->tail++ % 64];
		pthread_cond_broadcast(&s->q->cv);
		pthread_mutex_unlock(&s->q->mu);
		j = (struct kjob){.cm = s->cm, .c = c, .from = 0, .to = c->late ? 1 : c->nch,
				  .start = 1, .finish = 1};
		kernel_thread(&j);
		if (c->late)
			deferred[s->who][nd++] = c;
		else
			free(c);
	}
	for (int i = 0; i < nd; i++) {
		struct call *c = deferred[s->who][i];
		struct kjob j = {.cm = s->cm, .c = c, .from = 1, .to = 2, .start = 1, .finish = 1};

		kernel_thread(&j);
		free(c);
	}
	return NULL;
}

static void stress(void)
{
	struct comm cms[2] = {
		{"stress-0", 0x5555000000000001ull, 8, 3, NULL},
		{"stress-1", 0x5555000000000002ull, 8, 3, NULL},
	};
	struct sq qs[2];
	struct sarg args[4];
	pthread_t th[4];

	setenv("COMMDEBUG_NCCL_EVENT_POOL", "8", 1);
	for (int i = 0; i < 2; i++) {
		p_init(&cms[i]);
		memset(&qs[i], 0, sizeof qs[i]);
		pthread_mutex_init(&qs[i].mu, NULL);
		pthread_cond_init(&qs[i].cv, NULL);
	}
	unsetenv("COMMDEBUG_NCCL_EVENT_POOL");
	for (int i = 0; i < 4; i++) {
		args[i] = (struct sarg){&cms[i / 2], &qs[i / 2], i / 2};
		if (pthread_create(&th[i], NULL, i % 2 ? stress_proxy : stress_user, &args[i]) != 0)
			fail("cannot start a thread");
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++) {
		p_finalize(&cms[i]);
		pthread_mutex_destroy(&qs[i].mu);
		pthread_cond_destroy(&qs[i].cv);
	}
	flush();
}

/* ------------------------------------------------------------- bench */

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* n AllReduces through every event NCCL raises for one (the API call on
 * v5+, Group, the task's start and stop, and, with kernel timing, one
 * channel's KernelCh start, stop state and stop), on one thread; prints
 * the plugin's time per call in ns.  Measures the plugin only: NCCL's own
 * work around these callbacks is not there. */
static void bench(long n)
{
	struct comm cm = {"cd-bench", 0x7777000000000001ull, 8, 0, NULL};
	struct call c = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 1 << 20,
			 .dtype = "ncclFloat32", .dcode = 7, .esize = 4, .peer = -1,
			 .algo = "RING", .proto = "SIMPLE", .acode = 1, .pcode = 2, .nch = 1,
			 .stream = S_COLL};
	double t;

	p_init(&cm);
	t = now_ns();
	for (long i = 0; i < n; i++) {
		void *g, *k;
		api_call(&cm, &c);
		g = group_start(&cm);
		task_start(&cm, &c, g);
		stop(c.task);
		stop(g);
		k = kch_start(&cm, c.task, 0, 1000 + (uint64_t)i * 10);
		kch_stop(k, 1005 + (uint64_t)i * 10);
	}
	t = now_ns() - t;
	printf("%.1f\n", t / (double)n);
	p_finalize(&cm);
	flush();
}

static void one_call(struct comm *cm)
{
	struct call c = {.type = CD_NP_COLL, .func = "AllReduce", .fcode = 4, .count = 64,
			 .dtype = "ncclFloat32", .dcode = 7, .esize = 4, .peer = -1,
			 .algo = "RING", .proto = "SIMPLE", .acode = 1, .pcode = 2, .nch = 1,
			 .stream = S_COLL};
	void *g, *k;

	api_call(cm, &c);
	g = group_start(cm);
	task_start(cm, &c, g);
	stop(c.task);
	stop(g);
	if (c.task) {
		k = kch_start(cm, c.task, 0, 1000);
		kch_stop(k, 1500);
	}
}

static void onerank(void)
{
	struct comm x = {"one-x", 0x1, 1, 0, NULL};
	struct comm y = {"one-y", 0x2, 1, 0, NULL};
	/* never finalized: static, so that its context stays reachable (LSan) */
	static struct comm z = {"one-z", 0x3, 1, 0, NULL};

	p_init(&x);
	p_init(&y);
	p_init(&z);
	one_call(&y);
	p_finalize(&x);
	p_finalize(&y);
	flush();
}

static void settrace(void *lib, const char *path)
{
	struct comm a = {"st", 0x5555, 4, 1, NULL};
	int (*set)(const char *) = (int (*)(const char *))dlsym(lib, "commdebug_nccl_set_trace");

	if (!set)
		fail("the plugin lacks commdebug_nccl_set_trace");
	p_init(&a);
	one_call(&a);
	flush();
	if (set(path) != 0)
		fail("commdebug_nccl_set_trace(%s) failed: %s", path, strerror(errno));
	one_call(&a);
	p_finalize(&a);
	flush();
}

int main(int argc, char **argv)
{
	char sym[32];
	const char *kt = getenv("COMMDEBUG_NCCL_KERNEL_TIMING");
	void *lib;

	if (argc < 3 || argc > 5 ||
	    (argc == 4 && strcmp(argv[3], "stress") != 0 && strcmp(argv[3], "onerank") != 0) ||
	    (argc == 5 && strcmp(argv[3], "bench") != 0 && strcmp(argv[3], "settrace") != 0)) {
		fprintf(stderr, "usage: plugin_driver PLUGIN.so VERSION "
				"[stress | onerank | bench N | settrace PATH]\n");
		return 2;
	}
	ver = atoi(argv[2]);
	if (ver < 1 || ver > 6)
		fail("version %s is not 1..6", argv[2]);
	want_timing = ver >= 4 && !(kt && !strcmp(kt, "0"));
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		fail("cannot load %s: %s", argv[1], dlerror());
	snprintf(sym, sizeof sym, "ncclProfiler_v%d", ver);
	tab = dlsym(lib, sym);
	*(void **)&tag = dlsym(lib, "commdebug_nccl_tag");
	*(void **)&untag = dlsym(lib, "commdebug_nccl_untag");
	*(void **)&flush = dlsym(lib, "commdebug_nccl_flush");
	if (!tab || !tag || !untag || !flush)
		fail("%s lacks %s or commdebug_nccl_tag / _untag / _flush", argv[1], sym);
	if (strcmp(((struct cd_np_v1 *)tab)->name, "commdebug") != 0)
		fail("%s is named \"%s\", not \"commdebug\"", sym, ((struct cd_np_v1 *)tab)->name);
	if (argc == 5 && strcmp(argv[3], "settrace") == 0) {
		settrace(lib, argv[4]);
		return 0;
	}
	if (argc == 5) {
		bench(atol(argv[4]));
		return 0;
	}
	if (argc == 4 && strcmp(argv[3], "onerank") == 0) {
		onerank();
		return 0;
	}
	scenario();
	if (argc == 4)
		stress();
	/* as NCCL does after the last communicator: the library stays loaded
	 * (it pins itself) and finishes its trace at exit */
	dlclose(lib);
	return 0;
}
