/* The NCCL-side recorder's core, shared by the profiler plugin (plugin.c)
 * and the LD_PRELOAD interposer (interpose.c).
 *
 * The calling thread (inside an NCCL call) only fills a fixed-size record
 * on its stack and pushes it into a bounded lock-free queue: no allocation,
 * no lock, no I/O.  One background thread (started by the first push) pops
 * the records, formats them as `nccl` trace events, compresses them with
 * zstd and writes the trace, ending a zstd frame at least every
 * COMMDEBUG_NCCL_FLUSH_MS milliseconds (default 500) and at exit, so a
 * killed process leaves a readable prefix.
 *
 * Nothing here prints to stdout; the one-line notes about the trace file go
 * to stderr.  Nothing here exits the process. */
#ifndef CD_REC_H
#define CD_REC_H

#include <stdbool.h>
#include <stdint.h>

/* NCCL calls the recorder knows.  Values are ours, not NCCL's. */
enum cd_nfunc {
	CD_NF_ALL_REDUCE,
	CD_NF_ALL_GATHER,
	CD_NF_REDUCE_SCATTER,
	CD_NF_BROADCAST,
	CD_NF_REDUCE,
	CD_NF_ALL_TO_ALL,
	CD_NF_GATHER,
	CD_NF_SCATTER,
	CD_NF_SEND,
	CD_NF_RECV,
	CD_NF__COUNT
};

/* What a record says about its call. */
enum cd_nstate {
	CD_NS_ENQUEUED,   /* the call was made / enqueued on its stream (t = that time) */
	CD_NS_COMPLETED,  /* the call's GPU work finished: only comm, seq, t and dur are used */
};

/* Record kinds. */
enum cd_rkind {
	CD_RK_CALL,       /* one NCCL call (struct cd_rec_call) */
	CD_RK_COMM,       /* a communicator came up (struct cd_rec_comm) */
};

#define CD_REC_NONE (-1)

struct cd_rec_call {
	uint64_t t;        /* cd_rec_now() when the call was made (enqueued) or completed */
	uint64_t dur;      /* ns of GPU (or, where said, CPU) time; 0: unknown */
	uint64_t count;    /* element count as the API takes it (sendcount, recvcount, ...) */
	uint64_t comm;     /* communicator id (see cd_rec_comm.comm) */
	uint64_t stream;   /* cudaStream_t value; 0: unknown or the legacy default stream */
	uint64_t seq;      /* per-communicator call number from cd_rec_next_seq(), 1-based */
	uint64_t pseq;     /* Python tag: the process group's collective number, 0: none */
	int32_t root;      /* root rank of rooted collectives, CD_REC_NONE otherwise */
	int32_t peer;      /* peer of Send/Recv, CD_REC_NONE otherwise */
	int32_t nranks;    /* communicator size, -1: unknown */
	int32_t rank;      /* rank in the communicator, -1: unknown */
	int16_t dtype;     /* ncclDataType_t value (0..11), -1: unknown */
	int16_t redop;     /* ncclRedOp_t value (>= 5: a PreMulSum op), -1: none */
	uint16_t pg;       /* Python tag: cd_rec_pg_name() index, 0: none */
	uint8_t func;      /* enum cd_nfunc */
	uint8_t state;     /* enum cd_nstate */
	const char *algo;  /* NCCL's static algorithm / protocol names, or NULL */
	const char *proto;
	int32_t nchannels; /* -1: unknown */
};

struct cd_rec_comm {
	uint64_t comm;     /* id used by the call records of this communicator */
	uint64_t hash;     /* NCCL's commHash / commId, 0: unknown */
	uint64_t t;        /* cd_rec_now() when it came up; 0: when the writer sees it */
	int32_t nranks, rank;
	char name[64];     /* commName, NUL-terminated, "" if none */
};

struct cd_rec {
	uint8_t kind;      /* enum cd_rkind */
	union {
		struct cd_rec_call call;
		struct cd_rec_comm comm;
	} u;
};

/* Which side of NCCL the library sits on, for the trace's meta event; set
 * once by the plugin's init or the interposer's first call, before the
 * first push.  mode is a static string such as "profiler plugin v5". */
void cd_rec_set_mode(const char *mode);

/* Monotonic clock in ns (the trace's "t" is this minus the value at start). */
uint64_t cd_rec_now(void);

/* Push a record.  Lock-free and allocation-free; starts the writer on the
 * first call of the process.  Returns false when the record was not queued
 * (queue full, recording off, or after shutdown); the writer then writes
 * how many were lost. */
bool cd_rec_push(const struct cd_rec *r);

/* Next per-communicator call number for comm (1, 2, ...).  Lock-free; a
 * fixed table of communicators, past whose size seq is 0 (unknown). */
uint64_t cd_rec_next_seq(uint64_t comm);

/* Remember a communicator's size and this rank in it (nranks <= 0:
 * unknown); fresh: it was just created or destroyed, so its call numbers
 * start again at 1 (a new communicator may get a destroyed one's address).
 * Look them up with cd_rec_comm_get; false if unknown.  Lock-free. */
void cd_rec_comm_set(uint64_t comm, int32_t nranks, int32_t rank, bool fresh);
bool cd_rec_comm_get(uint64_t comm, int32_t *nranks, int32_t *rank);

/* Start the writer if it is not running yet (init paths call this so that
 * the first NCCL call does not pay for it).  Idempotent. */
void cd_rec_start(void);

/* The calling thread's Python tag (process group index and sequence number
 * set by commdebug_nccl_tag()), or 0/0. */
void cd_rec_tag(uint16_t *pg, uint64_t *pseq);

/* Ask the writer to write everything queued so far and end a zstd frame;
 * waits for it (at most about a second).  For finalize and exit. */
void cd_rec_flush(void);

/* Map NCCL's function name ("AllReduce", "Send", ...) to enum cd_nfunc;
 * CD_NF__COUNT if unknown. */
enum cd_nfunc cd_rec_func_from_name(const char *name);

#endif
