/* libnccl-profiler-commdebug: the NCCL profiler plugin side of the NCCL
 * recorder.  NCCL_PROFILER_PLUGIN=commdebug (or a path) makes NCCL load
 * this library and resolve the newest of ncclProfiler_v6 .. _v1 it knows
 * (see nccl_profiler.h for which release takes which).
 *
 * What it records, per NCCL call:
 *   - an "enqueued" record when NCCL starts the call's Coll or P2p event,
 *     that is when the task is launched (at ncclGroupEnd, or at the end of
 *     an ungrouped call), pushed at once so that a hang still shows it;
 *   - v4+: a "completed" record once the task's kernel has finished on
 *     every channel it used, with the GPU duration (latest channel stop -
 *     earliest channel start, NCCL's globaltimer stamps).
 *
 * What each version knows:
 *   v1..v3  the task at launch: function, count, type, root/peer, algorithm
 *           and protocol (v1: enum codes), the communicator's hash and name
 *           in every descriptor, but neither nranks nor the stream.  v3 has
 *           KernelCh events without timestamps or a channel count, raised
 *           when the proxy thread notices a channel start or finish: no
 *           honest completion time, so v3 does not ask for them.
 *   v4      init names the communicator (hash, nranks, rank); the task's
 *           actual channel count; KernelCh carries GPU start/stop stamps.
 *   v5, v6  the user's call itself (CollApi / P2pApi): its stream, and its
 *           count and type as the user gave them (the task of an AllGather
 *           or a Broadcast counts bytes of ncclInt8).  The Coll / P2p event's
 *           parentObj is the handle we returned for that call.
 *
 * Events and threads (NCCL 2.23 .. 2.30):
 *   init, finalize           the thread creating / destroying the comm
 *   GroupApi, CollApi, P2pApi the thread calling ncclAllReduce (...)
 *   Group, Coll, P2p         the thread launching the plan: the caller (at
 *                            ncclGroupEnd or its implicit end), NCCL's group
 *                            thread (non-blocking comms), or a CUDA host
 *                            callback thread (graph replays); start and stop
 *                            on the same thread, back to back
 *   KernelCh                 the comm's proxy progress thread (shared by the
 *                            comms that share resources), any time after the
 *                            Coll started, before or after its stop
 * so a context is used by several threads at once.
 *
 * Handles.  NCCL treats a handle as opaque: it stores it, hands it back to
 * stopEvent / recordEventState, passes a Coll's handle as its KernelCh
 * children's parentObj, and skips the stop of a NULL handle (checked in
 * src/plugin/profiler.cc).  Ours are tagged pointers: the low 3 bits say
 * what it is, bits 48..63 hold a generation, so that a late child of an
 * event whose object has been reused is recognised and ignored.  Nothing
 * on the startEvent / stopEvent / recordEventState paths allocates, locks
 * or does I/O beyond cd_rec_push().
 *
 * Completion.  A Coll / P2p whose completion we wait for gets an event
 * object from the context's preallocated pool (a lock-free stack).  Its
 * state word holds the generation, a WAIT flag (cleared when as many
 * KernelCh children as the task's nChannels have stopped) and a count of
 * holds (one until the Coll / P2p stops, plus one per call in progress on
 * it).  Whoever clears the last of them pushes the completed record and
 * returns the object.  An object still waiting for children that never
 * come may be reclaimed when the pool runs dry (LINGER_NS idle, no child in
 * flight).  The context itself is freed by finalize, or by the release of
 * its last event if some were still outstanding then. */
#include "nccl_profiler.h"
#include "rec.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CD_EXPORT __attribute__((visibility("default")))

#define CD_NP_POOL 1024                       /* events per communicator */
#define CD_NP_NAPI 1024                       /* API call slots (v5+), a power of 2 */
#ifndef CD_NP_LINGER_NS                       /* (overridable for tests) */
#define CD_NP_LINGER_NS (10ull * 1000000000)  /* idle time before an event may be reclaimed */
#endif
#ifndef CD_NP_SCAN_NS
#define CD_NP_SCAN_NS (100ull * 1000000)      /* at most one reclaim scan per this */
#endif

/* Handles: pointer | generation << 48 | kind. */
enum cd_np_hkind {
	CD_NP_H_EVENT = 1,   /* a Coll / P2p event object */
	CD_NP_H_KCH = 2,     /* a KernelCh child of an event object */
	CD_NP_H_API = 3,     /* a CollApi / P2pApi call slot */
	CD_NP_H_IGNORE = 4,  /* Group events: non-NULL, nothing behind it */
};
#define CD_NP_H_KIND 7ull
#define CD_NP_H_PTR 0x0000fffffffffff8ull
#define CD_NP_H_GEN_SHIFT 48
#define CD_NP_IGNORED ((void *)(uintptr_t)CD_NP_H_IGNORE)

/* Event state word: generation << 32 | CD_NP_WAIT | holds. */
#define CD_NP_WAIT (1ull << 16)
#define CD_NP_LIVE 0xffffffffull

struct cd_np_ctx;

struct cd_np_ev {
	_Atomic uint64_t st;
	_Atomic uint32_t next;     /* free stack: index + 1 of the next free event, 0: none */
	_Atomic uint32_t started;  /* KernelCh children started ... */
	_Atomic uint32_t stopped;  /* ... and stopped */
	_Atomic uint32_t bad;      /* a child's GPU timestamp was 0 (NCCL #1961, #1973) */
	_Atomic uint64_t tmin;     /* earliest channel start, GPU ns */
	_Atomic uint64_t tmax;     /* latest channel stop */
	_Atomic uint64_t last;     /* cd_rec_now() of the latest activity */
	uint32_t expected;         /* channels to wait for; set before the event is published */
	uint64_t comm, seq;
	struct cd_np_ctx *ctx;
};

/* One CollApi / P2pApi call, read by its Coll / P2p later, possibly on
 * another thread: a seqlock whose sequence is the call's ticket (tk is 0
 * while the slot is written). */
struct cd_np_api {
	_Atomic uint64_t tk;
	_Atomic uint64_t claim;    /* tk while the enqueued record pushed at the call awaits its task */
	_Atomic uint64_t stream, count, pseq, seq;
	_Atomic int32_t root, dtype;
	_Atomic uint32_t func, pg;
};

struct cd_np_ctx {
	int version;
	bool timing;               /* KernelCh asked for and completions tracked */
	int32_t nranks, rank;      /* -1: unknown */
	_Atomic uint64_t comm;     /* id of the records; v1..v3: set by the first task */
	_Atomic uint64_t refs;     /* 1 until finalize, + 1 per event object in use */
	_Atomic uint64_t free_top; /* ABA counter << 32 | index + 1 of the top free event */
	_Atomic uint64_t next_scan;
	_Atomic uint64_t lost;     /* tasks recorded without their completion */
	_Atomic bool silent;       /* one rank and no call event yet (see np_saw_call) */
	uint32_t nev;
	struct cd_np_ev *ev;       /* nev events, or NULL */
	_Atomic uint64_t api_next;
	struct cd_np_api *api;     /* CD_NP_NAPI slots (v5+), or NULL */
};

/* What a record says about a task. */
struct cd_np_call {
	enum cd_nfunc func;
	uint64_t count, stream, pseq;
	int16_t dtype, redop;
	uint16_t pg;
	int32_t root, peer, nranks, rank, nchannels;
	const char *algo, *proto;
};

/* A call slot as read back. */
struct cd_np_apiv {
	struct cd_np_api *slot;
	uint64_t tk, stream, count, pseq, seq;
	int32_t root, dtype;
	uint32_t func, pg;
};

static _Atomic int np_mode_set;

/* One-rank communicators that have had no call event yet.  NCCL 2.28.9
 * gives the plugin no call events at all on a communicator of one rank
 * (it reports the communicator only): such a communicator is reported on
 * stderr at its finalize, or at exit if it is never finalized. */
static _Atomic int np_silent_live;

/* ------------------------------------------------------------- mapping */

static int16_t np_dtype(const char *s)
{
	static const char *const names[] = {
		"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
		"ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16",
		"ncclFloat8e4m3", "ncclFloat8e5m2",
	};

	if (!s)
		return -1;
	for (int16_t i = 0; i < (int16_t)(sizeof names / sizeof names[0]); i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;  /* NCCL spells ncclUint8 "Unknown" */
}

/* ncclFunc_t of NCCL 2.23 (v1). */
static enum cd_nfunc np_func_v1(uint8_t f)
{
	switch (f) {
	case 0: return CD_NF_BROADCAST;
	case 1: return CD_NF_REDUCE;
	case 2: return CD_NF_ALL_GATHER;
	case 3: return CD_NF_REDUCE_SCATTER;
	case 4: return CD_NF_ALL_REDUCE;
	case 6: return CD_NF_SEND;
	case 7: return CD_NF_RECV;
	default: return CD_NF__COUNT;
	}
}

static const char *np_algo_v1(uint8_t a)
{
	static const char *const names[] = {
		"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT",
	};
	return a < sizeof names / sizeof names[0] ? names[a] : NULL;
}

static const char *np_proto_v1(uint8_t p)
{
	static const char *const names[] = {"LL", "LL128", "SIMPLE"};
	return p < sizeof names / sizeof names[0] ? names[p] : NULL;
}

static bool np_rooted(enum cd_nfunc f)
{
	return f == CD_NF_BROADCAST || f == CD_NF_REDUCE || f == CD_NF_GATHER || f == CD_NF_SCATTER;
}

static struct cd_np_call np_call_init(struct cd_np_ctx *c)
{
	return (struct cd_np_call){
		.func = CD_NF__COUNT, .dtype = -1, .redop = -1,
		.root = CD_REC_NONE, .peer = CD_REC_NONE,
		.nranks = c->nranks, .rank = c->rank, .nchannels = -1,
	};
}

/* ------------------------------------------------------------- records */

static void np_saw_call(struct cd_np_ctx *c)
{
	if (atomic_load_explicit(&c->silent, memory_order_relaxed) &&
	    atomic_exchange(&c->silent, false))
		atomic_fetch_sub(&np_silent_live, 1);
}

static void np_warn_silent(uint64_t comm, int n)
{
	if (comm)
		fprintf(stderr, "commdebug-nccl: communicator 0x%llx has one rank and NCCL reported "
				"no call on it: NCCL (2.28.9 at least) gives a profiler plugin no call "
				"events on a one-rank communicator, so its calls are not in the trace; "
				"the interposer records them (commdebug-nccl(7))\n",
			(unsigned long long)comm);
	else
		fprintf(stderr, "commdebug-nccl: %d one-rank communicator(s) had no call reported: "
				"NCCL (2.28.9 at least) gives a profiler plugin no call events on a "
				"one-rank communicator, so their calls are not in the trace; the "
				"interposer records them (commdebug-nccl(7))\n", n);
}

__attribute__((destructor)) static void np_exit(void)
{
	int n = atomic_load(&np_silent_live);

	if (n > 0)
		np_warn_silent(0, n);
}

static void np_push_call(const struct cd_np_call *k, uint64_t comm, uint64_t seq, uint64_t t)
{
	struct cd_rec r;

	memset(&r, 0, sizeof r);
	r.kind = CD_RK_CALL;
	r.u.call = (struct cd_rec_call){
		.t = t, .count = k->count, .comm = comm, .stream = k->stream, .seq = seq,
		.pseq = k->pseq, .root = np_rooted(k->func) ? k->root : CD_REC_NONE,
		.peer = k->peer, .nranks = k->nranks, .rank = k->rank, .dtype = k->dtype,
		.redop = k->redop, .pg = k->pg, .func = (uint8_t)k->func, .state = CD_NS_ENQUEUED,
		.algo = k->algo, .proto = k->proto, .nchannels = k->nchannels,
	};
	cd_rec_push(&r);
}

static void np_push_done(uint64_t comm, uint64_t seq, uint64_t dur)
{
	struct cd_rec r;

	memset(&r, 0, sizeof r);
	r.kind = CD_RK_CALL;
	r.u.call = (struct cd_rec_call){
		.t = cd_rec_now(), .dur = dur, .comm = comm, .seq = seq,
		.root = CD_REC_NONE, .peer = CD_REC_NONE, .nranks = -1, .rank = -1,
		.dtype = -1, .redop = -1, .func = CD_NF__COUNT, .state = CD_NS_COMPLETED,
		.nchannels = -1,
	};
	cd_rec_push(&r);
}

static void np_push_comm(uint64_t id, uint64_t hash, int32_t nranks, int32_t rank, const char *name)
{
	struct cd_rec r;

	memset(&r, 0, sizeof r);
	r.kind = CD_RK_COMM;
	r.u.comm.comm = id;
	r.u.comm.hash = hash;
	r.u.comm.nranks = nranks;
	r.u.comm.rank = rank;
	r.u.comm.t = cd_rec_now();
	if (name)
		snprintf(r.u.comm.name, sizeof r.u.comm.name, "%s", name);
	cd_rec_push(&r);
}

/* v1..v3: the communicator is named by the first task's descriptor. */
static uint64_t np_comm_v3(struct cd_np_ctx *c, uint64_t hash, const char *name, int rank)
{
	uint64_t id = atomic_load_explicit(&c->comm, memory_order_acquire), none = 0;

	if (id)
		return id;
	/* NCCL 2.27+ passes 0 to a v3 plugin (it would take our v4 instead) */
	id = hash ? hash : (uint64_t)(uintptr_t)c;
	if (!atomic_compare_exchange_strong(&c->comm, &none, id))
		return none;
	np_push_comm(id, hash, -1, rank, name);
	return id;
}

/* ------------------------------------------------------------- handles */

static void *np_handle(const void *p, uint64_t gen, enum cd_np_hkind kind)
{
	return (void *)((uintptr_t)p | (uintptr_t)((gen & 0xffff) << CD_NP_H_GEN_SHIFT) | kind);
}

static enum cd_np_hkind np_kind(const void *h)
{
	return (enum cd_np_hkind)((uintptr_t)h & CD_NP_H_KIND);
}

static void *np_ptr(const void *h)
{
	return (void *)((uintptr_t)h & CD_NP_H_PTR);
}

static uint32_t np_gen(const void *h)
{
	return (uint32_t)((uintptr_t)h >> CD_NP_H_GEN_SHIFT);
}

/* The event object of c behind handle h of kind kind, or NULL. */
static struct cd_np_ev *np_ev_of(struct cd_np_ctx *c, const void *h, enum cd_np_hkind kind)
{
	uintptr_t p = (uintptr_t)np_ptr(h), base = (uintptr_t)c->ev;

	if (!h || np_kind(h) != kind || !c->ev || p < base ||
	    p >= base + (uintptr_t)c->nev * sizeof *c->ev || (p - base) % sizeof *c->ev)
		return NULL;
	return (struct cd_np_ev *)p;
}

/* ------------------------------------------------------------- context */

static void np_ctx_free(struct cd_np_ctx *c)
{
	free(c->api);
	free(c->ev);
	free(c);
}

static void np_ctx_unref(struct cd_np_ctx *c)
{
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
		np_ctx_free(c);
}

/* --------------------------------------------------------------- events */

static void np_ev_push(struct cd_np_ctx *c, struct cd_np_ev *e)
{
	uint64_t top = atomic_load_explicit(&c->free_top, memory_order_relaxed), n;
	uint32_t idx = (uint32_t)(e - c->ev) + 1;

	do {
		atomic_store_explicit(&e->next, (uint32_t)top, memory_order_relaxed);
		n = (((top >> 32) + 1) << 32) | idx;
	} while (!atomic_compare_exchange_weak_explicit(&c->free_top, &top, n,
							memory_order_release, memory_order_relaxed));
}

static struct cd_np_ev *np_ev_pop(struct cd_np_ctx *c)
{
	uint64_t top = atomic_load_explicit(&c->free_top, memory_order_acquire), n;
	struct cd_np_ev *e;

	do {
		if (!(uint32_t)top)
			return NULL;
		e = &c->ev[(uint32_t)top - 1];
		/* e may be popped and pushed meanwhile: the counter catches it */
		n = (((top >> 32) + 1) << 32) | atomic_load_explicit(&e->next, memory_order_relaxed);
	} while (!atomic_compare_exchange_weak_explicit(&c->free_top, &top, n,
							memory_order_acquire, memory_order_acquire));
	return e;
}

/* Reclaim the events that have waited too long for children that do not
 * come (task stopped, no child between start and stop, idle LINGER_NS):
 * their late children fail the generation check.  Returns one of them dead,
 * still counted in c->refs, and puts the others back on the free stack; or
 * NULL.  Runs when the stack is empty, at most once per SCAN_NS. */
static struct cd_np_ev *np_ev_reclaim(struct cd_np_ctx *c, uint64_t now)
{
	uint64_t next = atomic_load_explicit(&c->next_scan, memory_order_relaxed);
	struct cd_np_ev *got = NULL;

	if (now < next || !atomic_compare_exchange_strong(&c->next_scan, &next, now + CD_NP_SCAN_NS))
		return NULL;
	for (uint32_t i = 0; i < c->nev; i++) {
		struct cd_np_ev *e = &c->ev[i];
		uint64_t s = atomic_load_explicit(&e->st, memory_order_acquire);
		uint64_t last = atomic_load_explicit(&e->last, memory_order_relaxed);

		if ((s & CD_NP_LIVE) != CD_NP_WAIT || last > now || now - last < CD_NP_LINGER_NS ||
		    atomic_load(&e->started) != atomic_load(&e->stopped))
			continue;
		if (!atomic_compare_exchange_strong(&e->st, &s, ((s >> 32) + 1) << 32))
			continue;
		atomic_fetch_add_explicit(&c->lost, 1, memory_order_relaxed);
		if (!got) {
			got = e;
		} else {
			/* never the last reference: NCCL still holds c (we are in startEvent) */
			np_ev_push(c, e);
			np_ctx_unref(c);
		}
	}
	return got;
}

/* A hold on e if it is still generation gen (16 bits) and alive. */
static bool np_ev_hold(struct cd_np_ev *e, uint32_t gen)
{
	uint64_t s = atomic_load_explicit(&e->st, memory_order_relaxed);

	do {
		if (((s >> 32) & 0xffff) != gen || !(s & CD_NP_LIVE))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&e->st, &s, s + 1, memory_order_acquire,
							memory_order_relaxed));
	return true;
}

/* The last hold or the WAIT flag went: the task is complete. */
static void np_ev_finish(struct cd_np_ev *e, uint64_t s)
{
	struct cd_np_ctx *c = e->ctx;
	uint64_t t0 = atomic_load_explicit(&e->tmin, memory_order_relaxed);
	uint64_t t1 = atomic_load_explicit(&e->tmax, memory_order_relaxed);

	if (!atomic_load_explicit(&e->bad, memory_order_relaxed) && t0 != UINT64_MAX && t1 >= t0)
		np_push_done(e->comm, e->seq, t1 - t0);
	atomic_store_explicit(&e->st, ((s >> 32) + 1) << 32, memory_order_release);
	np_ev_push(c, e);
	np_ctx_unref(c);
}

/* Drop one hold (what = 1) or the WAIT flag (what = CD_NP_WAIT). */
static void np_ev_drop(struct cd_np_ev *e, uint64_t what)
{
	uint64_t s = atomic_fetch_sub_explicit(&e->st, what, memory_order_acq_rel) - what;

	if (!(s & CD_NP_LIVE))
		np_ev_finish(e, s);
}

static void np_atomic_min(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t o = atomic_load_explicit(a, memory_order_relaxed);

	while (v < o && !atomic_compare_exchange_weak_explicit(a, &o, v, memory_order_relaxed,
							       memory_order_relaxed))
		;
}

static void np_atomic_max(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t o = atomic_load_explicit(a, memory_order_relaxed);

	while (v > o && !atomic_compare_exchange_weak_explicit(a, &o, v, memory_order_relaxed,
							       memory_order_relaxed))
		;
}

/* An event waiting for nch children of the task (comm, seq), or NULL when
 * the pool is empty.  Published with one hold (the task's) and WAIT. */
static void *np_ev_start(struct cd_np_ctx *c, uint64_t comm, uint64_t seq, uint32_t nch, uint64_t now)
{
	struct cd_np_ev *e = np_ev_pop(c);
	uint64_t s;

	if (e)
		atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	else if (!(e = np_ev_reclaim(c, now))) {
		atomic_fetch_add_explicit(&c->lost, 1, memory_order_relaxed);
		return NULL;
	}
	s = atomic_load_explicit(&e->st, memory_order_relaxed);
	e->comm = comm;
	e->seq = seq;
	e->expected = nch;
	atomic_store_explicit(&e->started, 0, memory_order_relaxed);
	atomic_store_explicit(&e->stopped, 0, memory_order_relaxed);
	atomic_store_explicit(&e->bad, 0, memory_order_relaxed);
	atomic_store_explicit(&e->tmin, UINT64_MAX, memory_order_relaxed);
	atomic_store_explicit(&e->tmax, 0, memory_order_relaxed);
	atomic_store_explicit(&e->last, now, memory_order_relaxed);
	atomic_store_explicit(&e->st, (s & ~CD_NP_LIVE) | CD_NP_WAIT | 1, memory_order_release);
	return np_handle(e, s >> 32, CD_NP_H_EVENT);
}

/* ------------------------------------------------------------ API slots */

/* Describe a CollApi / P2pApi call (v5+; the calling thread, which also
 * carries the call's tag).  With push, the enqueued record is pushed now
 * (a v6 Broadcast, whose task NCCL 2.29+ runs as an AllGatherV without a
 * Coll event) and its task, if one comes, claims it. */
static void *np_api_start(struct cd_np_ctx *c, const struct cd_np_call *k, bool push)
{
	uint64_t tk, comm, seq = 0;
	struct cd_np_api *s;
	uint16_t pg;
	uint64_t pseq;

	if (!c->api || k->func >= CD_NF__COUNT)
		return NULL;
	np_saw_call(c);
	tk = atomic_fetch_add_explicit(&c->api_next, 1, memory_order_relaxed) + 1;
	s = &c->api[tk & (CD_NP_NAPI - 1)];
	cd_rec_tag(&pg, &pseq);
	comm = atomic_load_explicit(&c->comm, memory_order_relaxed);
	if (push) {
		struct cd_np_call r = *k;
		r.pg = pg;
		r.pseq = pseq;
		seq = cd_rec_next_seq(comm);
		np_push_call(&r, comm, seq, cd_rec_now());
	}
	atomic_store_explicit(&s->tk, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->stream, k->stream, memory_order_relaxed);
	atomic_store_explicit(&s->count, k->count, memory_order_relaxed);
	atomic_store_explicit(&s->pseq, pseq, memory_order_relaxed);
	atomic_store_explicit(&s->seq, seq, memory_order_relaxed);
	atomic_store_explicit(&s->root, k->root, memory_order_relaxed);
	atomic_store_explicit(&s->dtype, k->dtype, memory_order_relaxed);
	atomic_store_explicit(&s->func, (uint32_t)k->func, memory_order_relaxed);
	atomic_store_explicit(&s->pg, pg, memory_order_relaxed);
	atomic_store_explicit(&s->claim, push && seq ? tk : 0, memory_order_relaxed);
	atomic_store_explicit(&s->tk, tk, memory_order_release);
	return np_handle(s, tk, CD_NP_H_API);
}

/* Read the call slot behind handle h (a task's parentObj); false if h is
 * not one of c's slots or the slot has been reused. */
static bool np_api_read(struct cd_np_ctx *c, const void *h, struct cd_np_apiv *v)
{
	uintptr_t p = (uintptr_t)np_ptr(h), base = (uintptr_t)c->api;
	struct cd_np_api *s;
	uint64_t tk;

	if (!c->api || !h || np_kind(h) != CD_NP_H_API || p < base ||
	    p >= base + CD_NP_NAPI * sizeof *c->api || (p - base) % sizeof *c->api)
		return false;
	s = (struct cd_np_api *)p;
	tk = atomic_load_explicit(&s->tk, memory_order_acquire);
	if (!tk || (tk & 0xffff) != np_gen(h))
		return false;
	v->slot = s;
	v->tk = tk;
	v->stream = atomic_load_explicit(&s->stream, memory_order_relaxed);
	v->count = atomic_load_explicit(&s->count, memory_order_relaxed);
	v->pseq = atomic_load_explicit(&s->pseq, memory_order_relaxed);
	v->seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
	v->root = atomic_load_explicit(&s->root, memory_order_relaxed);
	v->dtype = atomic_load_explicit(&s->dtype, memory_order_relaxed);
	v->func = atomic_load_explicit(&s->func, memory_order_relaxed);
	v->pg = atomic_load_explicit(&s->pg, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&s->tk, memory_order_relaxed) == tk;
}

/* True once per call whose enqueued record was pushed at the call. */
static bool np_api_claim(const struct cd_np_apiv *v)
{
	uint64_t want = v->tk;

	return atomic_compare_exchange_strong(&v->slot->claim, &want, 0);
}

/* ---------------------------------------------------------------- tasks */

/* A Coll or P2p task starts.  parent: its CollApi / P2pApi handle (v5+);
 * nch: channels it runs on (v4+), 0 if unknown.  Pushes the enqueued record
 * (unless its call did) and returns the handle for its completion, or
 * NULL. */
static void *np_task(struct cd_np_ctx *c, struct cd_np_call *k, const void *parent, uint32_t nch)
{
	uint64_t now = cd_rec_now(), comm = atomic_load_explicit(&c->comm, memory_order_relaxed);
	uint64_t seq = 0;
	struct cd_np_apiv v;

	if (k->func >= CD_NF__COUNT)
		return NULL;
	np_saw_call(c);
	if (np_api_read(c, parent, &v) && v.func == (uint32_t)k->func) {
		/* the call's own count and type, stream and tag */
		k->stream = v.stream;
		k->count = v.count;
		k->dtype = (int16_t)v.dtype;
		k->pg = (uint16_t)v.pg;
		k->pseq = v.pseq;
		if (np_api_claim(&v))
			seq = v.seq;
	} else {
		cd_rec_tag(&k->pg, &k->pseq);
	}
	if (!seq) {
		seq = cd_rec_next_seq(comm);
		np_push_call(k, comm, seq, now);
	}
	if (!c->timing || !nch || !k->count || !seq)
		return NULL;
	return np_ev_start(c, comm, seq, nch, now);
}

/* A KernelCh child of the event behind parent starts, at GPU time t. */
static void *np_kch_start(struct cd_np_ctx *c, const void *parent, uint64_t t)
{
	struct cd_np_ev *e = np_ev_of(c, parent, CD_NP_H_EVENT);
	uint32_t gen = np_gen(parent);

	if (!e || !np_ev_hold(e, gen))
		return NULL;
	if (t)
		np_atomic_min(&e->tmin, t);
	else
		atomic_store_explicit(&e->bad, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->started, 1, memory_order_relaxed);
	atomic_store_explicit(&e->last, cd_rec_now(), memory_order_relaxed);
	np_ev_drop(e, 1);
	return np_handle(e, gen, CD_NP_H_KCH);
}

/* v6: a collective run by the copy engines (no Coll event follows). */
static void np_ce_start(struct cd_np_ctx *c, struct cd_np_call *k, const void *parent)
{
	uint64_t comm = atomic_load_explicit(&c->comm, memory_order_relaxed);
	struct cd_np_apiv v;

	if (k->func >= CD_NF__COUNT)
		return;
	np_saw_call(c);
	if (np_api_read(c, parent, &v) && v.func == (uint32_t)k->func) {
		if (np_api_claim(&v))
			return;
		k->stream = v.stream;
		k->count = v.count;
		k->dtype = (int16_t)v.dtype;
		k->pg = (uint16_t)v.pg;
		k->pseq = v.pseq;
	} else {
		cd_rec_tag(&k->pg, &k->pseq);
	}
	np_push_call(k, comm, cd_rec_next_seq(comm), cd_rec_now());
}

/* ------------------------------------------------------- stop and state */

static int np_stop(void *h)
{
	struct cd_np_ev *e = np_ptr(h);
	uint32_t n;

	switch (np_kind(h)) {
	case CD_NP_H_EVENT:
		/* the task's own hold: e is alive until this drop */
		atomic_store_explicit(&e->last, cd_rec_now(), memory_order_relaxed);
		np_ev_drop(e, 1);
		break;
	case CD_NP_H_KCH:
		if (!np_ev_hold(e, np_gen(h)))
			break;
		n = atomic_fetch_add_explicit(&e->stopped, 1, memory_order_relaxed) + 1;
		atomic_store_explicit(&e->last, cd_rec_now(), memory_order_relaxed);
		if (n == e->expected)
			np_ev_drop(e, CD_NP_WAIT);
		np_ev_drop(e, 1);
		break;
	default:
		break;
	}
	return CD_NP_SUCCESS;
}

/* v1..v3: nothing we use. */
static int np_record_v1(void *h, int state, union cd_np_v1_state_args *args)
{
	(void)h;
	(void)state;
	(void)args;
	return CD_NP_SUCCESS;
}

/* v4..v6: a channel's GPU stop time, just before its stopEvent. */
static int np_record_v4(void *h, int state, union cd_np_v4_state_args *args)
{
	struct cd_np_ev *e = np_ptr(h);

	if (state != CD_NP_KERNEL_CH_STOP || np_kind(h) != CD_NP_H_KCH || !args ||
	    !np_ev_hold(e, np_gen(h)))
		return CD_NP_SUCCESS;
	if (args->kernelCh.pTimer)
		np_atomic_max(&e->tmax, args->kernelCh.pTimer);
	else
		atomic_store_explicit(&e->bad, 1, memory_order_relaxed);
	np_ev_drop(e, 1);
	return CD_NP_SUCCESS;
}

/* ------------------------------------------------------ init, finalize */

static bool np_env_off(const char *name)
{
	const char *s = getenv(name);

	return s && strcmp(s, "0") == 0;
}

static bool np_addr_ok(const void *p, size_t n)
{
	return ((uintptr_t)p + n) < (1ull << CD_NP_H_GEN_SHIFT);
}

/* comm: the record id (v4+: commHash / commId), 0 for v1..v3. */
static int np_init(void **context, int version, int *mask, uint64_t comm, const char *name,
		   int nranks, int rank)
{
	static const char *const modes[] = {
		"profiler plugin", "profiler plugin v1", "profiler plugin v2", "profiler plugin v3",
		"profiler plugin v4", "profiler plugin v5", "profiler plugin v6",
	};
	struct cd_np_ctx *c;
	int ret = CD_NP_SUCCESS;

	*context = NULL;
	if (!atomic_exchange(&np_mode_set, 1))
		cd_rec_set_mode(modes[version]);
	c = calloc(1, sizeof *c);
	if (!c) {
		ret = CD_NP_SYSTEM_ERROR;
		goto out;
	}
	c->version = version;
	c->nranks = version >= 4 ? nranks : -1;
	c->rank = version >= 4 ? rank : -1;
	atomic_init(&c->comm, comm);
	atomic_init(&c->refs, 1);
	c->timing = version >= 4 && !np_env_off("COMMDEBUG_NCCL_KERNEL_TIMING");
	if (c->timing) {
		const char *s = getenv("COMMDEBUG_NCCL_EVENT_POOL");
		unsigned long n = s ? strtoul(s, NULL, 10) : CD_NP_POOL;

		c->nev = n >= 1 && n <= 65536 ? (uint32_t)n : CD_NP_POOL;
		c->ev = calloc(c->nev, sizeof *c->ev);
		if (!c->ev || !np_addr_ok(c->ev, c->nev * sizeof *c->ev)) {
			/* no pool: enqueued records only */
			free(c->ev);
			c->ev = NULL;
			c->timing = false;
		}
		for (uint32_t i = 0; c->ev && i < c->nev; i++) {
			c->ev[i].ctx = c;
			atomic_init(&c->ev[i].st, 1ull << 32);
		}
		/* pushed last to first: taken first to last */
		for (uint32_t i = c->nev; c->ev && i > 0; i--)
			np_ev_push(c, &c->ev[i - 1]);
	}
	if (version >= 5) {
		c->api = calloc(CD_NP_NAPI, sizeof *c->api);
		if (c->api && !np_addr_ok(c->api, CD_NP_NAPI * sizeof *c->api)) {
			free(c->api);
			c->api = NULL;
		}
	}
	*mask = CD_NP_COLL | CD_NP_P2P | (c->timing ? CD_NP_KERNEL_CH : 0) |
		(version >= 6 ? CD_NP_CE_COLL : 0);
	if (version >= 4)
		np_push_comm(comm, comm, nranks, rank, name);
	if (version >= 4 && nranks == 1) {
		atomic_store(&c->silent, true);
		atomic_fetch_add(&np_silent_live, 1);
	}
	*context = c;
out:
	return ret;
}

static int np_finalize(void *context)
{
	struct cd_np_ctx *c = context;
	uint64_t lost;

	if (!c)
		return CD_NP_SUCCESS;
	if (atomic_exchange(&c->silent, false)) {
		atomic_fetch_sub(&np_silent_live, 1);
		np_warn_silent(atomic_load(&c->comm), 1);
	}
	lost = atomic_load(&c->lost);
	if (lost)
		fprintf(stderr, "commdebug-nccl: communicator 0x%llx: %llu NCCL calls recorded without "
			"their completion (%u events per communicator; COMMDEBUG_NCCL_EVENT_POOL)\n",
			(unsigned long long)atomic_load(&c->comm), (unsigned long long)lost, c->nev);
	cd_rec_flush();
	/* events still waiting for their kernels keep the context until they end */
	np_ctx_unref(c);
	return CD_NP_SUCCESS;
}

/* ------------------------------------------------------------ versions */

static int np_init_v1(void **context, int *mask)
{
	return np_init(context, 1, mask, 0, NULL, -1, -1);
}

static int np_init_v2(void **context, int *mask)
{
	return np_init(context, 2, mask, 0, NULL, -1, -1);
}

static int np_init_v3(void **context, int *mask)
{
	return np_init(context, 3, mask, 0, NULL, -1, -1);
}

static int np_init_v4(void **context, int *mask, const char *name, uint64_t hash, int nnodes,
		      int nranks, int rank, cd_np_logfn logfn)
{
	(void)nnodes;
	(void)logfn;
	return np_init(context, 4, mask, hash, name, nranks, rank);
}

static int np_init_v5(void **context, uint64_t id, int *mask, const char *name, int nnodes,
		      int nranks, int rank, cd_np_logfn logfn)
{
	(void)nnodes;
	(void)logfn;
	return np_init(context, 5, mask, id, name, nranks, rank);
}

static int np_init_v6(void **context, uint64_t id, int *mask, const char *name, int nnodes,
		      int nranks, int rank, cd_np_logfn logfn)
{
	(void)nnodes;
	(void)logfn;
	return np_init(context, 6, mask, id, name, nranks, rank);
}

static int np_start_v1(void *context, void **eh, struct cd_np_v1_descr *d)
{
	struct cd_np_ctx *c = context;
	struct cd_np_call k;

	*eh = NULL;
	if (!c)
		return CD_NP_SUCCESS;
	k = np_call_init(c);
	k.rank = d->rank;
	switch (d->type) {
	case CD_NP_GROUP:
		*eh = CD_NP_IGNORED;  /* NCCL <= 2.27 starts no Coll / P2p under a NULL Group */
		break;
	case CD_NP_COLL:
		np_comm_v3(c, d->u.coll.commHash, d->u.coll.name, d->rank);
		k.func = np_func_v1(d->u.coll.func);
		k.count = d->u.coll.count;
		k.root = d->u.coll.root;
		k.dtype = d->u.coll.datatype < 12 ? d->u.coll.datatype : -1;
		if (k.func == CD_NF_ALL_REDUCE || k.func == CD_NF_REDUCE ||
		    k.func == CD_NF_REDUCE_SCATTER)
			k.redop = d->u.coll.op < 0x8000 ? (int16_t)d->u.coll.op : -1;
		k.algo = np_algo_v1(d->u.coll.algo);
		k.proto = np_proto_v1(d->u.coll.proto);
		*eh = np_task(c, &k, NULL, 0);
		break;
	case CD_NP_P2P:
		np_comm_v3(c, d->u.p2p.commHash, d->u.p2p.name, d->rank);
		k.func = np_func_v1(d->u.p2p.func);
		k.count = d->u.p2p.count;
		k.peer = d->u.p2p.peer;
		k.dtype = d->u.p2p.datatype < 12 ? d->u.p2p.datatype : -1;
		*eh = np_task(c, &k, NULL, 0);
		break;
	default:
		break;
	}
	return CD_NP_SUCCESS;
}

/* v2 and v3 differ in the Coll member only (trafficBytes). */
static void np_start_v23(struct cd_np_ctx *c, void **eh, int type, int rank, const char *name,
			 uint64_t hash, const char *func, size_t count, int root, int peer,
			 const char *dtype, const char *algo, const char *proto)
{
	struct cd_np_call k = np_call_init(c);

	k.rank = rank;
	switch (type) {
	case CD_NP_GROUP:
		*eh = CD_NP_IGNORED;
		break;
	case CD_NP_COLL:
	case CD_NP_P2P:
		np_comm_v3(c, hash, name, rank);
		k.func = cd_rec_func_from_name(func);
		k.count = count;
		k.dtype = np_dtype(dtype);
		if (type == CD_NP_COLL) {
			k.root = root;
			k.algo = algo;
			k.proto = proto;
		} else {
			k.peer = peer;
		}
		*eh = np_task(c, &k, NULL, 0);
		break;
	default:
		break;
	}
}

static int np_start_v2(void *context, void **eh, struct cd_np_v2_descr *d)
{
	*eh = NULL;
	if (!context)
		return CD_NP_SUCCESS;
	if (d->type == CD_NP_P2P)
		np_start_v23(context, eh, d->type, d->rank, d->u.p2p.name, d->u.p2p.commHash,
			     d->u.p2p.func, d->u.p2p.count, 0, d->u.p2p.peer, d->u.p2p.datatype,
			     NULL, NULL);
	else
		np_start_v23(context, eh, d->type, d->rank, d->u.coll.name, d->u.coll.commHash,
			     d->u.coll.func, d->u.coll.count, d->u.coll.root, 0, d->u.coll.datatype,
			     d->u.coll.algo, d->u.coll.proto);
	return CD_NP_SUCCESS;
}

static int np_start_v3(void *context, void **eh, struct cd_np_v3_descr *d)
{
	*eh = NULL;
	if (!context)
		return CD_NP_SUCCESS;
	if (d->type == CD_NP_P2P)
		np_start_v23(context, eh, d->type, d->rank, d->u.p2p.name, d->u.p2p.commHash,
			     d->u.p2p.func, d->u.p2p.count, 0, d->u.p2p.peer, d->u.p2p.datatype,
			     NULL, NULL);
	else
		np_start_v23(context, eh, d->type, d->rank, d->u.coll.name, d->u.coll.commHash,
			     d->u.coll.func, d->u.coll.count, d->u.coll.root, 0, d->u.coll.datatype,
			     d->u.coll.algo, d->u.coll.proto);
	return CD_NP_SUCCESS;
}

static int np_start_v4(void *context, void **eh, struct cd_np_v4_descr *d)
{
	struct cd_np_ctx *c = context;
	struct cd_np_call k;

	*eh = NULL;
	if (!c)
		return CD_NP_SUCCESS;
	k = np_call_init(c);
	switch (d->type) {
	case CD_NP_GROUP:
		*eh = CD_NP_IGNORED;
		break;
	case CD_NP_COLL:
		k.func = cd_rec_func_from_name(d->u.coll.func);
		k.count = d->u.coll.count;
		k.root = d->u.coll.root;
		k.dtype = np_dtype(d->u.coll.datatype);
		k.algo = d->u.coll.algo;
		k.proto = d->u.coll.proto;
		k.nchannels = d->u.coll.nChannels;
		*eh = np_task(c, &k, NULL, d->u.coll.nChannels);
		break;
	case CD_NP_P2P:
		k.func = cd_rec_func_from_name(d->u.p2p.func);
		k.count = d->u.p2p.count;
		k.peer = d->u.p2p.peer;
		k.dtype = np_dtype(d->u.p2p.datatype);
		k.nchannels = d->u.p2p.nChannels;
		*eh = np_task(c, &k, NULL, d->u.p2p.nChannels);
		break;
	case CD_NP_KERNEL_CH:
		*eh = np_kch_start(c, d->parentObj, d->u.kernelCh.pTimer);
		break;
	default:
		break;
	}
	return CD_NP_SUCCESS;
}

/* v5 and v6 share these members (the same types at the same offsets). */
static void np_start_v56(struct cd_np_ctx *c, void **eh, uint64_t type, void *parent,
			 const struct cd_np_v5_coll_api *ca, const struct cd_np_v5_p2p_api *pa,
			 const struct cd_np_v5_coll *co, const struct cd_np_v5_p2p *pp,
			 const struct cd_np_kernel_ch *kc)
{
	struct cd_np_call k = np_call_init(c);

	switch (type) {
	case CD_NP_GROUP:
		*eh = CD_NP_IGNORED;
		break;
	case CD_NP_COLL_API:
		k.func = cd_rec_func_from_name(ca->func);
		k.count = ca->count;
		k.dtype = np_dtype(ca->datatype);
		k.root = ca->root;
		k.stream = (uint64_t)(uintptr_t)ca->stream;
		*eh = np_api_start(c, &k, c->version >= 6 && k.func == CD_NF_BROADCAST);
		break;
	case CD_NP_P2P_API:
		k.func = cd_rec_func_from_name(pa->func);
		k.count = pa->count;
		k.dtype = np_dtype(pa->datatype);
		k.stream = (uint64_t)(uintptr_t)pa->stream;
		*eh = np_api_start(c, &k, false);
		break;
	case CD_NP_COLL:
		k.func = cd_rec_func_from_name(co->func);
		k.count = co->count;
		k.root = co->root;
		k.dtype = np_dtype(co->datatype);
		k.algo = co->algo;
		k.proto = co->proto;
		k.nchannels = co->nChannels;
		*eh = np_task(c, &k, parent, co->nChannels);
		break;
	case CD_NP_P2P:
		k.func = cd_rec_func_from_name(pp->func);
		k.count = pp->count;
		k.peer = pp->peer;
		k.dtype = np_dtype(pp->datatype);
		k.nchannels = pp->nChannels;
		*eh = np_task(c, &k, parent, pp->nChannels);
		break;
	case CD_NP_KERNEL_CH:
		*eh = np_kch_start(c, parent, kc->pTimer);
		break;
	default:
		/* GroupApi, KernelLaunch, ...: not needed, NULL */
		break;
	}
}

static int np_start_v5(void *context, void **eh, struct cd_np_v5_descr *d)
{
	*eh = NULL;
	if (context)
		np_start_v56(context, eh, d->type, d->parentObj, &d->u.collApi, &d->u.p2pApi,
			     &d->u.coll, &d->u.p2p, &d->u.kernelCh);
	return CD_NP_SUCCESS;
}

static int np_start_v6(void *context, void **eh, struct cd_np_v6_descr *d)
{
	struct cd_np_ctx *c = context;

	*eh = NULL;
	if (!c)
		return CD_NP_SUCCESS;
	if (d->type == CD_NP_CE_COLL) {
		struct cd_np_call k = np_call_init(c);

		k.func = cd_rec_func_from_name(d->u.ceColl.func);
		k.count = d->u.ceColl.count;
		k.root = d->u.ceColl.root;
		k.dtype = np_dtype(d->u.ceColl.datatype);
		k.stream = (uint64_t)(uintptr_t)d->u.ceColl.stream;
		np_ce_start(c, &k, d->parentObj);
		return CD_NP_SUCCESS;
	}
	np_start_v56(c, eh, d->type, d->parentObj, &d->u.collApi, &d->u.p2pApi, &d->u.coll,
		     &d->u.p2p, &d->u.kernelCh);
	return CD_NP_SUCCESS;
}

/* The tables NCCL looks up (not const: NCCL's own examples are not, and
 * NCCL 2.29+ uses the v6 table in place). */
CD_EXPORT struct cd_np_v6 ncclProfiler_v6 = {
	"commdebug", np_init_v6, np_start_v6, np_stop, np_record_v4, np_finalize,
};
CD_EXPORT struct cd_np_v5 ncclProfiler_v5 = {
	"commdebug", np_init_v5, np_start_v5, np_stop, np_record_v4, np_finalize,
};
CD_EXPORT struct cd_np_v4 ncclProfiler_v4 = {
	"commdebug", np_init_v4, np_start_v4, np_stop, np_record_v4, np_finalize,
};
CD_EXPORT struct cd_np_v3 ncclProfiler_v3 = {
	"commdebug", np_init_v3, np_start_v3, np_stop, np_record_v1, np_finalize,
};
CD_EXPORT struct cd_np_v2 ncclProfiler_v2 = {
	"commdebug", np_init_v2, np_start_v2, np_stop, np_record_v1, np_finalize,
};
CD_EXPORT struct cd_np_v1 ncclProfiler_v1 = {
	"commdebug", np_init_v1, np_start_v1, np_stop, np_record_v1, np_finalize,
};
