/* The NCCL-side recorder's core: the lock-free queue, the communicator and
 * process-group tables, and the writer thread.  See rec.h.
 *
 * Queue: a bounded multi-producer queue in the style of Dmitry Vyukov's
 * bounded MPMC queue, with one consumer (the writer).  Each slot carries a
 * sequence number; a producer claims position pos when the slot's sequence
 * equals pos (compare-and-swap on the enqueue counter), copies its record
 * and publishes it by storing pos + 1.  The writer reads slot pos when its
 * sequence is pos + 1 and frees it by storing pos + capacity.  A full queue
 * makes the producer give up at once (the call is counted as lost): NCCL is
 * never made to wait for the recorder. */
#include "rec.h"
#include "../../include/commdebug/nccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#define CD_EXPORT __attribute__((visibility("default")))

#ifndef CD_VERSION
#define CD_VERSION "0"
#endif

/* ------------------------------------------------------------------ state */

struct cd_slot {
	_Atomic uint64_t seq;
	struct cd_rec rec;
};

enum cd_run { CD_OFF, CD_IDLE, CD_RUNNING, CD_STOPPED };

static struct {
	_Atomic int run;             /* enum cd_run */
	pthread_once_t once;
	pthread_mutex_t lock;        /* start/stop, flush handshake, pg names */
	pthread_cond_t wake, flushed;
	pthread_t thread;
	struct cd_slot *slots;
	uint64_t mask;
	_Atomic uint64_t head;       /* next position to claim (producers) */
	uint64_t tail;               /* next position to read (writer only) */
	_Atomic uint64_t lost;       /* records not queued */
	uint64_t lost_written;
	_Atomic uint64_t flush_req;  /* flush requests made ... */
	uint64_t flush_done;         /* ... and served (under lock) */
	bool stop;
	bool writer_started;         /* the writer thread was created (under lock) ... */
	bool writer_exited;          /* ... and has returned (under lock) */
	char *req_path;              /* commdebug_nccl_set_trace's latest path, not taken yet */
	uint64_t move_req, move_done;/* set_trace requests made / served (under lock) */
	int move_err;                /* errno of the latest served request, 0: done */
	_Atomic uint64_t busy_since; /* cd_rec_now() when the writer entered open/write, 0: not in it */
	_Atomic bool off_open;       /* recording is off because the trace could not be opened */
	bool forked;                 /* this is a child forked after the writer started */
	const char *mode;
	uint64_t mono0, t0;          /* monotonic and unix ns at start */
	long flush_ms;
	long exit_ms;                /* longest wait for the writer at exit */
	int level;
} g = {
	.run = CD_IDLE,
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.flushed = PTHREAD_COND_INITIALIZER,
	.mode = "interposer",
};

/* Communicators: open addressing, keys never removed. */
#define CD_NCOMM 4096
static struct {
	_Atomic uint64_t key;        /* comm id + 1 (0: empty) */
	_Atomic uint64_t seq;
	_Atomic int64_t info;        /* (nranks << 32) | rank, -1: unknown */
} comms[CD_NCOMM];

/* Process-group names for tags: index 1.. (0: none).  Appended under
 * g.lock; readers load npg (acquire) and read the entries below it. */
#define CD_NPG 4096
static char pgnames[CD_NPG][64];
static _Atomic uint32_t npg = 1;

static __thread uint16_t tag_pg;
static __thread uint64_t tag_seq;

uint64_t cd_rec_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cd_rec_set_mode(const char *mode)
{
	g.mode = mode;
}

static long env_long(const char *name, long dflt, long lo, long hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "commdebug-nccl: %s=%s is not a number from %ld to %ld; using %ld\n",
			name, s, lo, hi, dflt);
		return dflt;
	}
	return v;
}

/* --------------------------------------------------------------- tables */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* The table slot of comm, inserting it; NULL when the table is full. */
static unsigned comm_slot(uint64_t comm, bool insert)
{
	uint64_t key = comm + 1 ? comm + 1 : 1;

	for (unsigned i = 0, h = (unsigned)mix(key); i < CD_NCOMM; i++, h++) {
		unsigned s = h & (CD_NCOMM - 1);
		uint64_t k = atomic_load_explicit(&comms[s].key, memory_order_acquire);
		if (k == key)
			return s;
		if (k == 0) {
			if (!insert)
				return CD_NCOMM;
			uint64_t empty = 0;
			/* info 0 means unknown (no communicator has 0 ranks) */
			if (atomic_compare_exchange_strong(&comms[s].key, &empty, key))
				return s;
			if (empty == key)
				return s;
		}
	}
	return CD_NCOMM;
}

uint64_t cd_rec_next_seq(uint64_t comm)
{
	unsigned s = comm_slot(comm, true);
	if (s == CD_NCOMM)
		return 0;
	return atomic_fetch_add_explicit(&comms[s].seq, 1, memory_order_relaxed) + 1;
}

void cd_rec_comm_set(uint64_t comm, int32_t nranks, int32_t rank, bool fresh)
{
	unsigned s = comm_slot(comm, true);
	if (s == CD_NCOMM)
		return;
	if (fresh)
		atomic_store(&comms[s].seq, 0);
	atomic_store(&comms[s].info, nranks > 0 ? ((int64_t)nranks << 32) | (uint32_t)rank : 0);
}

bool cd_rec_comm_get(uint64_t comm, int32_t *nranks, int32_t *rank)
{
	unsigned s = comm_slot(comm, false);
	int64_t v;

	if (s == CD_NCOMM)
		return false;
	v = atomic_load(&comms[s].info);
	if (v <= 0)
		return false;
	*nranks = (int32_t)(v >> 32);
	*rank = (int32_t)(uint32_t)v;
	return true;
}

void cd_rec_tag(uint16_t *pg, uint64_t *pseq)
{
	*pg = tag_pg;
	*pseq = tag_seq;
}

CD_EXPORT int commdebug_nccl_tag(const char *pg, uint64_t seq)
{
	uint32_t n, i;
	size_t len;

	if (!pg || (len = strnlen(pg, 64)) > 63)
		return -1;   /* NULL, or longer than we keep: not tagged */
	n = atomic_load_explicit(&npg, memory_order_acquire);
	/* the thread's last group first: one comparison in the usual case */
	if (tag_pg && strncmp(pgnames[tag_pg], pg, 63) == 0 && pgnames[tag_pg][len] == 0) {
		tag_seq = seq;
		return 0;
	}
	for (i = 1; i < n; i++)
		if (strncmp(pgnames[i], pg, 63) == 0 && pgnames[i][len] == 0)
			goto found;
	pthread_mutex_lock(&g.lock);
	n = atomic_load(&npg);
	for (i = 1; i < n; i++)
		if (strncmp(pgnames[i], pg, 63) == 0 && pgnames[i][len] == 0)
			break;
	if (i == n) {
		if (n == CD_NPG) {
			pthread_mutex_unlock(&g.lock);
			return -1;
		}
		memcpy(pgnames[n], pg, len);
		pgnames[n][len] = 0;
		atomic_store_explicit(&npg, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&g.lock);
found:
	tag_pg = (uint16_t)i;
	tag_seq = seq;
	return 0;
}

CD_EXPORT void commdebug_nccl_untag(void)
{
	tag_pg = 0;
	tag_seq = 0;
}

/* ----------------------------------------------------------------- names */

static const char *const func_names[CD_NF__COUNT] = {
	[CD_NF_ALL_REDUCE] = "AllReduce",
	[CD_NF_ALL_GATHER] = "AllGather",
	[CD_NF_REDUCE_SCATTER] = "ReduceScatter",
	[CD_NF_BROADCAST] = "Broadcast",
	[CD_NF_REDUCE] = "Reduce",
	[CD_NF_ALL_TO_ALL] = "AllToAll",
	[CD_NF_GATHER] = "Gather",
	[CD_NF_SCATTER] = "Scatter",
	[CD_NF_SEND] = "Send",
	[CD_NF_RECV] = "Recv",
};

enum cd_nfunc cd_rec_func_from_name(const char *name)
{
	if (!name)
		return CD_NF__COUNT;
	for (int i = 0; i < CD_NF__COUNT; i++)
		if (strcmp(name, func_names[i]) == 0)
			return (enum cd_nfunc)i;
	/* other spellings seen in NCCL and its forks */
	if (strcmp(name, "AlltoAll") == 0)
		return CD_NF_ALL_TO_ALL;
	return CD_NF__COUNT;
}

/* ncclDataType_t values 0..11 */
static const struct {
	const char *name;
	unsigned size;
} dtypes[] = {
	{"int8", 1}, {"uint8", 1}, {"int32", 4}, {"uint32", 4}, {"int64", 8}, {"uint64", 8},
	{"float16", 2}, {"float32", 4}, {"float64", 8}, {"bfloat16", 2},
	{"float8e4m3", 1}, {"float8e5m2", 1},
};
#define CD_NDTYPE ((int)(sizeof dtypes / sizeof dtypes[0]))

static const char *const redops[] = {"sum", "prod", "max", "min", "avg"};

/* The operation size as nccl-tests counts it (the larger of the send and
 * the receive buffer) into *bytes; false when it is not known (data type,
 * or communicator size where it counts, unknown). */
static bool call_bytes(const struct cd_rec_call *c, uint64_t *bytes)
{
	uint64_t es;

	if (c->dtype < 0 || c->dtype >= CD_NDTYPE)
		return false;
	es = dtypes[c->dtype].size;
	switch (c->func) {
	case CD_NF_ALL_GATHER:
	case CD_NF_REDUCE_SCATTER:
	case CD_NF_ALL_TO_ALL:
	case CD_NF_GATHER:
	case CD_NF_SCATTER:
		if (c->nranks <= 0)
			return false;
		*bytes = c->count * (uint64_t)c->nranks * es;
		return true;
	default:
		*bytes = c->count * es;
		return true;
	}
}

/* ---------------------------------------------------------------- queue */

bool cd_rec_push(const struct cd_rec *r)
{
	uint64_t pos;
	struct cd_slot *s;

	if (atomic_load_explicit(&g.run, memory_order_acquire) != CD_RUNNING) {
		cd_rec_start();
		if (atomic_load_explicit(&g.run, memory_order_acquire) != CD_RUNNING) {
			atomic_fetch_add_explicit(&g.lost, 1, memory_order_relaxed);
			return false;
		}
	}
	pos = atomic_load_explicit(&g.head, memory_order_relaxed);
	for (;;) {
		s = &g.slots[pos & g.mask];
		uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&g.head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (dif < 0) {
			atomic_fetch_add_explicit(&g.lost, 1, memory_order_relaxed);
			return false;
		} else {
			pos = atomic_load_explicit(&g.head, memory_order_relaxed);
		}
	}
	s->rec = *r;
	atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
	return true;
}

/* Pop one record into *out; false if none is ready. */
static bool pop(struct cd_rec *out)
{
	struct cd_slot *s = &g.slots[g.tail & g.mask];

	if (atomic_load_explicit(&s->seq, memory_order_acquire) != g.tail + 1)
		return false;
	*out = s->rec;
	atomic_store_explicit(&s->seq, g.tail + g.mask + 1, memory_order_release);
	g.tail++;
	return true;
}

/* --------------------------------------------------------------- writer */

struct cd_out {
	int fd;
	char *path;
	ZSTD_CCtx *z;
	char *txt;              /* JSON text not compressed yet */
	size_t ntxt, cap;
	char *zbuf;
	size_t zcap;
	bool open_failed;
	bool pending;           /* data in the current zstd frame */
	bool dead;              /* a write failed: stop writing */
	char *want;             /* set_trace's path for the next open, or NULL */
	int64_t rank, world;
};

#define CD_TXT_CAP (1u << 20)

static void put(struct cd_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct cd_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->txt + o->ntxt, o->cap - o->ntxt, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < o->cap - o->ntxt)
		o->ntxt += (size_t)n;
}

/* Length of the valid UTF-8 sequence (2 to 4 bytes) at s, or 0. */
static size_t utf8_len(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc2 && u[0] < 0xe0 ? 2 : 0;
	uint32_t cp;

	if (!n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((u[i] & 0xc0) != 0x80)
			return 0;
	cp = n == 2 ? (u[0] & 0x1fu) << 6 | (u[1] & 0x3fu)
	   : n == 3 ? (u[0] & 0x0fu) << 12 | (u[1] & 0x3fu) << 6 | (u[2] & 0x3fu)
		    : (u[0] & 0x07u) << 18 | (u[1] & 0x3fu) << 12 | (u[2] & 0x3fu) << 6 | (u[3] & 0x3fu);
	if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return n;
}

/* Append s as a JSON string body (quotes included). */
static void put_str(struct cd_out *o, const char *s)
{
	size_t room = o->cap - o->ntxt;
	char *p = o->txt + o->ntxt;
	size_t i = 0;

	if (room < 3)
		return;
	p[i++] = '"';
	for (; *s && i + 8 < room; s++) {
		unsigned char c = (unsigned char)*s;
		size_t k = c >= 0x80 ? utf8_len(s) : 0;
		if (k) {
			/* a whole valid UTF-8 sequence goes through as it is */
			memcpy(p + i, s, k);
			i += k;
			s += k - 1;
		} else if (c >= 0x80) {
			i += (size_t)snprintf(p + i, room - i, "\\ufffd");
		} else if (c == '"' || c == '\\') {
			p[i++] = '\\';
			p[i++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			i += (size_t)snprintf(p + i, room - i, "\\u%04x", c);
		} else {
			p[i++] = (char)c;
		}
	}
	p[i++] = '"';
	o->ntxt += i;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Compress the pending text; end the frame if end. */
static void compress(struct cd_out *o, bool end)
{
	ZSTD_inBuffer in = {o->txt, o->ntxt, 0};
	ZSTD_EndDirective mode = end ? ZSTD_e_end : ZSTD_e_continue;

	if (o->dead || o->fd < 0) {
		o->ntxt = 0;
		return;
	}
	if (o->ntxt)
		o->pending = true;
	if (!o->pending) {
		o->ntxt = 0;
		return;
	}
	for (;;) {
		ZSTD_outBuffer out = {o->zbuf, o->zcap, 0};
		size_t left = ZSTD_compressStream2(o->z, &out, &in, mode);
		if (ZSTD_isError(left)) {
			fprintf(stderr, "commdebug-nccl: %s: zstd: %s; recording stops\n", o->path,
				ZSTD_getErrorName(left));
			o->dead = true;
			break;
		}
		if (out.pos) {
			int rc;
			atomic_store(&g.busy_since, cd_rec_now());
			rc = write_all(o->fd, o->zbuf, out.pos);
			atomic_store(&g.busy_since, 0);
			if (rc < 0) {
				fprintf(stderr, "commdebug-nccl: %s: %s; recording stops\n", o->path,
					strerror(errno));
				o->dead = true;
				break;
			}
		}
		if (end ? left == 0 : in.pos == in.size)
			break;
	}
	o->ntxt = 0;
	if (end)
		o->pending = false;
	if (o->dead)
		atomic_store(&g.run, CD_OFF);
}

/* COMMDEBUG_NCCL_TRACE with %r (rank), %p (pid), %h (host), %% expanded. */
static char *trace_path(int64_t rank)
{
	const char *tpl = getenv("COMMDEBUG_NCCL_TRACE");
	char buf[4096], host[256];
	size_t n = 0;

	if (!tpl || !*tpl)
		tpl = "commdebug-rank%r.nccl.zst";
	if (gethostname(host, sizeof host) != 0)
		strcpy(host, "unknown");
	host[sizeof host - 1] = 0;
	for (const char *s = tpl; *s && n + 1 < sizeof buf; s++) {
		int w = 0;
		if (s[0] == '%' && s[1] == 'r' && rank >= 0)
			w = snprintf(buf + n, sizeof buf - n, "%lld", (long long)rank);
		else if (s[0] == '%' && s[1] == 'r')
			w = snprintf(buf + n, sizeof buf - n, "pid%ld", (long)getpid());
		else if (s[0] == '%' && s[1] == 'p')
			w = snprintf(buf + n, sizeof buf - n, "%ld", (long)getpid());
		else if (s[0] == '%' && s[1] == 'h')
			w = snprintf(buf + n, sizeof buf - n, "%s", host);
		else if (s[0] == '%' && s[1] == '%')
			w = snprintf(buf + n, sizeof buf - n, "%%");
		else {
			buf[n++] = *s;
			continue;
		}
		s++;
		if (w < 0 || (size_t)w >= sizeof buf - n)
			break;
		n += (size_t)w;
	}
	buf[n] = 0;
	return strdup(buf);
}

/* path made absolute (the process may change its directory before the
 * trace is moved); takes path, returns a malloc'd string or NULL. */
static char *absolute(char *path)
{
	char cwd[PATH_MAX], *r;
	size_t n, m;

	if (!path || path[0] == '/' || !getcwd(cwd, sizeof cwd))
		return path;
	n = strlen(cwd);
	m = strlen(path);
	r = malloc(n + m + 2);
	if (r) {
		memcpy(r, cwd, n);
		r[n] = '/';
		memcpy(r + n + 1, path, m + 1);
	}
	free(path);
	return r;
}

/* Open path for writing, holding an exclusive flock(2) on it for as long as
 * the descriptor lives, and only then empty it: a second process given the
 * same path (two launches with one COMMDEBUG_NCCL_TRACE, a process forked
 * before it started recording) finds the lock taken and never truncates or
 * interleaves with the first one's frames.  -1 with errno EBUSY when another
 * process holds it; a file system without flock is used without the check. */
static int open_trace(const char *path)
{
	struct stat st;
	int fd, e;

	atomic_store(&g.busy_since, cd_rec_now());  /* a FIFO blocks here until read */
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	atomic_store(&g.busy_since, 0);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
		close(fd);
		errno = EBUSY;
		return -1;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* True when another process holds the trace lock on path. */
static bool locked_by_other(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	bool held;

	if (fd < 0)
		return false;
	held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);   /* drops the lock if we took it */
	return held;
}

/* X.nccl.zst -> X.pid<PID>.nccl.zst (else X.pid<PID>): the name this
 * process writes when another one holds X. */
static char *separate_path(const char *path)
{
	size_t n = strlen(path), base = n;
	const char *ext = "";
	char *r;

	if (n > 9 && strcmp(path + n - 9, ".nccl.zst") == 0) {
		base = n - 9;
		ext = ".nccl.zst";
	}
	r = malloc(n + 32);
	if (r)
		snprintf(r, n + 32, "%.*s.pid%ld%s", (int)base, path, (long)getpid(), ext);
	return r;
}

/* Open the trace when the first record arrives. */
static bool out_open(struct cd_out *o, const struct cd_rec *first)
{
	char host[256];

	if (o->fd >= 0 || o->open_failed)
		return o->fd >= 0;
	/* the global rank from the launcher (torchrun, Open MPI, PMI, Slurm);
	 * not from a communicator, which may be a sub-group */
	(void)first;
	static const char *const rank_env[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
					       "SLURM_PROCID"};
	static const char *const world_env[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
						"SLURM_NTASKS"};
	o->rank = o->world = -1;
	for (size_t i = 0; i < 4 && o->rank < 0; i++)
		if (getenv(rank_env[i])) {
			o->rank = env_long(rank_env[i], -1, 0, 1 << 24);
			o->world = env_long(world_env[i], -1, 1, 1 << 24);
		}
	/* what is not known is left out of the meta event; an unknown rank
	 * names the file by process id */
	if (o->world <= o->rank)
		o->world = -1;
	free(o->path);
	o->path = absolute(o->want ? o->want : trace_path(o->rank));
	o->want = NULL;
	o->fd = o->path ? open_trace(o->path) : -1;
	if (o->fd < 0 && o->path && errno == EBUSY) {
		char *alt = separate_path(o->path);
		if (alt) {
			fprintf(stderr, "commdebug-nccl: %s is being written by another process; "
					"this one (pid %ld) writes %s\n", o->path, (long)getpid(), alt);
			free(o->path);
			o->path = alt;
			o->fd = open_trace(alt);
		}
	}
	if (o->fd < 0) {
		fprintf(stderr, "commdebug-nccl: cannot write %s: %s; NCCL calls are not recorded\n",
			o->path ? o->path : "the trace", strerror(errno));
		o->open_failed = true;
		atomic_store(&g.off_open, true);
		atomic_store(&g.run, CD_OFF);
		return false;
	}
	if (gethostname(host, sizeof host) != 0)
		strcpy(host, "unknown");
	host[sizeof host - 1] = 0;
	put(o, "{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1");
	if (o->rank >= 0)
		put(o, ",\"rank\":%lld", (long long)o->rank);
	if (o->world > 0)
		put(o, ",\"world_size\":%lld", (long long)o->world);
	put(o, ",\"host\":");
	put_str(o, host);
	put(o, ",\"pid\":%ld,\"t0\":%llu,\"recorder\":", (long)getpid(),
	    (unsigned long long)g.t0);
	{
		char rec[128];
		snprintf(rec, sizeof rec, "commdebug-nccl %s (%s)", CD_VERSION, g.mode);
		put_str(o, rec);
	}
	put(o, "}\n");
	return true;
}

static void put_call(struct cd_out *o, const struct cd_rec_call *c)
{
	uint64_t t = c->t > g.mono0 ? c->t - g.mono0 : 0, bytes;

	if (c->state == CD_NS_COMPLETED) {
		put(o, "{\"ev\":\"nccl\",\"state\":\"completed\",\"comm\":\"0x%llx\",\"seq\":%llu,"
		       "\"dur\":%llu,\"t\":%llu}\n", (unsigned long long)c->comm,
		    (unsigned long long)c->seq, (unsigned long long)c->dur, (unsigned long long)t);
		return;
	}
	put(o, "{\"ev\":\"nccl\",\"func\":\"%s\",\"count\":%llu",
	    c->func < CD_NF__COUNT ? func_names[c->func] : "Unknown",
	    (unsigned long long)c->count);
	if (c->dtype >= 0 && c->dtype < CD_NDTYPE)
		put(o, ",\"dtype\":\"%s\"", dtypes[c->dtype].name);
	if (call_bytes(c, &bytes))
		put(o, ",\"bytes\":%llu", (unsigned long long)bytes);
	if (c->redop >= 0)
		put(o, ",\"redop\":\"%s\"", c->redop < 5 ? redops[c->redop] : "premulsum");
	if (c->root >= 0)
		put(o, ",\"root\":%d", c->root);
	if (c->peer >= 0)
		put(o, ",\"peer\":%d", c->peer);
	put(o, ",\"comm\":\"0x%llx\"", (unsigned long long)c->comm);
	if (c->nranks > 0)
		put(o, ",\"nranks\":%d,\"rank\":%d", c->nranks, c->rank);
	if (c->seq)
		put(o, ",\"seq\":%llu", (unsigned long long)c->seq);
	put(o, ",\"stream\":\"0x%llx\"", (unsigned long long)c->stream);
	if (c->algo)
		put(o, ",\"algo\":\"%s\"", c->algo);
	if (c->proto)
		put(o, ",\"proto\":\"%s\"", c->proto);
	if (c->nchannels >= 0)
		put(o, ",\"nchannels\":%d", c->nchannels);
	if (c->pg && c->pg < atomic_load_explicit(&npg, memory_order_acquire)) {
		put(o, ",\"pg\":");
		put_str(o, pgnames[c->pg]);
		put(o, ",\"pseq\":%llu", (unsigned long long)c->pseq);
	}
	if (c->dur)
		put(o, ",\"dur\":%llu", (unsigned long long)c->dur);
	put(o, ",\"state\":\"enqueued\",\"t\":%llu}\n", (unsigned long long)t);
}

static void put_comm(struct cd_out *o, const struct cd_rec_comm *c, uint64_t now)
{
	put(o, "{\"ev\":\"nccl_comm\",\"comm\":\"0x%llx\"", (unsigned long long)c->comm);
	if (c->hash)
		put(o, ",\"hash\":\"0x%llx\"", (unsigned long long)c->hash);
	if (c->nranks > 0)
		put(o, ",\"nranks\":%d,\"rank\":%d", c->nranks, c->rank);
	if (c->name[0]) {
		put(o, ",\"name\":");
		put_str(o, c->name);
	}
	if (c->t)
		now = c->t;
	put(o, ",\"t\":%llu}\n", (unsigned long long)(now > g.mono0 ? now - g.mono0 : 0));
}

static void put_lost(struct cd_out *o)
{
	uint64_t lost = atomic_load(&g.lost);

	if (lost == g.lost_written || o->fd < 0)
		return;
	put(o, "{\"ev\":\"nccl_lost\",\"count\":%llu,\"t\":%llu}\n",
	    (unsigned long long)(lost - g.lost_written),
	    (unsigned long long)(cd_rec_now() - g.mono0));
	g.lost_written = lost;
}

/* Drain the queue into o, at most one queue's worth (so that a steady
 * stream of calls still lets the writer end frames on time); true if
 * anything was read. */
static bool drain(struct cd_out *o)
{
	struct cd_rec r;
	bool any = false;

	for (uint64_t n = 0; n <= g.mask && pop(&r); n++) {
		any = true;
		if (!out_open(o, &r)) {
			/* no trace (yet): counted, in case set_trace gives one */
			atomic_fetch_add_explicit(&g.lost, 1, memory_order_relaxed);
			continue;
		}
		if (r.kind == CD_RK_COMM)
			put_comm(o, &r.u.comm, cd_rec_now());
		else
			put_call(o, &r.u.call);
		if (o->ntxt > CD_TXT_CAP / 2)
			compress(o, false);
	}
	return any;
}

/* Copy the frames written to from (from offset 0) into to. */
static int copy_frames(int from, int to)
{
	char buf[1 << 16];
	off_t off = 0;

	for (;;) {
		ssize_t n = pread(from, buf, sizeof buf, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		if (write_all(to, buf, (size_t)n) < 0)
			return -1;
		off += n;
	}
}

/* commdebug_nccl_set_trace(path), in the writer: make path the trace.
 * Nothing written yet: path is where the first record opens it (and a
 * trace that could not be opened is tried again there).  Else the frame
 * in progress is ended and the file renamed to path; across file systems
 * the frames written so far are copied into path, writing goes on there and
 * the old file is removed: path then holds the whole trace, one file of
 * whole zstd frames.  Returns 0 or an errno value. */
static int out_move(struct cd_out *o, const char *path)
{
	struct stat a, b;
	char *abs;
	int fd, e;

	if (o->fd < 0) {
		free(o->want);
		if (!(o->want = strdup(path)))
			return ENOMEM;
		if (o->open_failed && !o->dead) {
			o->open_failed = false;
			int off = CD_OFF;
			if (atomic_exchange(&g.off_open, false))
				atomic_compare_exchange_strong(&g.run, &off, CD_RUNNING);
		}
		return 0;
	}
	if (o->dead)
		return EIO;
	if (!(abs = absolute(strdup(path))))
		return ENOMEM;
	if (fstat(o->fd, &a) == 0 && stat(abs, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino) {
		free(o->path);
		o->path = abs;
		return 0;
	}
	if (locked_by_other(abs)) {
		free(abs);
		return EBUSY;
	}
	compress(o, true);  /* the file ends with a whole frame */
	if (o->dead) {
		free(abs);
		return EIO;
	}
	if (rename(o->path, abs) == 0) {
		free(o->path);
		o->path = abs;
		return 0;
	}
	if (errno != EXDEV) {
		e = errno;
		free(abs);
		return e;
	}
	if ((fd = open_trace(abs)) < 0) {
		e = errno;
		free(abs);
		return e;
	}
	/* the trace is open for writing only: read it through its name */
	int rfd = open(o->path, O_RDONLY | O_CLOEXEC);
	atomic_store(&g.busy_since, cd_rec_now());
	e = rfd < 0 || copy_frames(rfd, fd) < 0 ? errno : 0;
	atomic_store(&g.busy_since, 0);
	if (rfd >= 0)
		close(rfd);
	if (e) {
		close(fd);
		unlink(abs);
		free(abs);
		return e;
	}
	close(o->fd);
	unlink(o->path);
	free(o->path);
	o->fd = fd;
	o->path = abs;
	return 0;
}

/* Serve a set_trace request, if one is waiting. */
static void serve_moves(struct cd_out *o)
{
	uint64_t want;
	char *path;
	int err;

	pthread_mutex_lock(&g.lock);
	want = g.move_req;
	path = g.req_path;
	g.req_path = NULL;
	pthread_mutex_unlock(&g.lock);
	if (want == g.move_done)
		return;
	err = path ? out_move(o, path) : 0;
	free(path);
	pthread_mutex_lock(&g.lock);
	g.move_done = want;
	g.move_err = err;
	pthread_cond_broadcast(&g.flushed);
	pthread_mutex_unlock(&g.lock);
}

/* The writer's output.  Static rather than on the writer's stack: a child
 * forked after the writer started has no writer thread, and its buffers
 * must stay reachable there (for leak checkers). */
static struct cd_out wout = {.fd = -1, .cap = CD_TXT_CAP};

static void *writer(void *arg)
{
	struct cd_out *o = &wout;
	uint64_t last_end = cd_rec_now();
	uint64_t served;

	(void)arg;
	o->txt = malloc(o->cap);
	o->zcap = ZSTD_CStreamOutSize();
	o->zbuf = malloc(o->zcap);
	o->z = ZSTD_createCCtx();
	if (!o->txt || !o->zbuf || !o->z) {
		fprintf(stderr, "commdebug-nccl: out of memory; NCCL calls are not recorded\n");
		atomic_store(&g.run, CD_OFF);
		goto out;
	}
	ZSTD_CCtx_setParameter(o->z, ZSTD_c_compressionLevel, g.level);
	/* a checksum per frame: commdebug rejects a frame whose bytes changed */
	ZSTD_CCtx_setParameter(o->z, ZSTD_c_checksumFlag, 1);
	for (;;) {
		bool stop;
		struct timespec ts;

		serve_moves(o);
		drain(o);
		pthread_mutex_lock(&g.lock);
		served = atomic_load(&g.flush_req);
		stop = g.stop;
		pthread_mutex_unlock(&g.lock);
		if (stop || served != g.flush_done ||
		    cd_rec_now() - last_end >= (uint64_t)g.flush_ms * 1000000u) {
			drain(o);
			if (stop) {
				while (drain(o))
					;
				/* claimed but not published when recording stopped */
				uint64_t h = atomic_load(&g.head);
				if (h > g.tail)
					atomic_fetch_add(&g.lost, h - g.tail);
			}
			put_lost(o);
			compress(o, true);
			last_end = cd_rec_now();
			pthread_mutex_lock(&g.lock);
			g.flush_done = served;
			pthread_cond_broadcast(&g.flushed);
			pthread_mutex_unlock(&g.lock);
			if (stop)
				break;
		} else if (o->ntxt > CD_TXT_CAP / 2) {
			compress(o, false);
		}
		pthread_mutex_lock(&g.lock);
		if (!g.stop && atomic_load(&g.flush_req) == g.flush_done &&
		    g.move_req == g.move_done) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += 5 * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&g.wake, &g.lock, &ts);
		}
		pthread_mutex_unlock(&g.lock);
	}
out:
	if (o->fd >= 0)
		close(o->fd);
	ZSTD_freeCCtx(o->z);
	free(o->txt);
	free(o->zbuf);
	free(o->path);
	free(o->want);
	pthread_mutex_lock(&g.lock);
	g.writer_exited = true;
	pthread_cond_broadcast(&g.flushed);
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static void after_fork_child(void)
{
	/* The writer thread does not exist in the child.  Recording there
	 * would need a file of its own; forked children (data loader workers)
	 * do not call NCCL, so the child simply does not record. */
	atomic_store(&g.run, CD_OFF);
	pthread_mutex_init(&g.lock, NULL);
	g.forked = true;
}

static void start_once(void)
{
	long qsize;

	if (getenv("COMMDEBUG_NCCL_DISABLE") && strcmp(getenv("COMMDEBUG_NCCL_DISABLE"), "0")) {
		atomic_store(&g.run, CD_OFF);
		return;
	}
	qsize = env_long("COMMDEBUG_NCCL_QUEUE", 16384, 16, 1L << 24);
	g.flush_ms = env_long("COMMDEBUG_NCCL_FLUSH_MS", 500, 1, 3600000);
	g.level = (int)env_long("COMMDEBUG_NCCL_ZSTD_LEVEL", 3, 1, 19);
	g.exit_ms = env_long("COMMDEBUG_NCCL_EXIT_MS", 2000, 0, 3600000);
	for (g.mask = 1; (long)g.mask < qsize; g.mask <<= 1)
		;
	g.slots = calloc(g.mask, sizeof *g.slots);
	if (!g.slots) {
		fprintf(stderr, "commdebug-nccl: out of memory; NCCL calls are not recorded\n");
		atomic_store(&g.run, CD_OFF);
		return;
	}
	for (uint64_t i = 0; i < g.mask; i++)
		atomic_init(&g.slots[i].seq, i);
	g.mask--;
	{
		/* waits measured on the monotonic clock: a clock step must not
		 * stall the writer */
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_destroy(&g.wake);
		pthread_cond_destroy(&g.flushed);
		pthread_cond_init(&g.wake, &ca);
		pthread_cond_init(&g.flushed, &ca);
		pthread_condattr_destroy(&ca);
	}
	g.mono0 = cd_rec_now();
	g.t0 = unix_ns();
	{
		/* never unloaded: NCCL dlcloses its profiler plugin when the last
		 * communicator goes, and a writer still blocked in write() at
		 * that point (see cd_rec_shutdown) must not lose its code */
		Dl_info di;
		if (dladdr((void *)&cd_rec_start, &di) && di.dli_fname)
			(void)dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
	}
	pthread_atfork(NULL, NULL, after_fork_child);
	if (pthread_create(&g.thread, NULL, writer, NULL) != 0) {
		fprintf(stderr, "commdebug-nccl: cannot start the writer thread; "
				"NCCL calls are not recorded\n");
		atomic_store(&g.run, CD_OFF);
		return;
	}
	pthread_mutex_lock(&g.lock);
	g.writer_started = true;
	pthread_mutex_unlock(&g.lock);
	atomic_store_explicit(&g.run, CD_RUNNING, memory_order_release);
}

void cd_rec_start(void)
{
	pthread_once(&g.once, start_once);
}

/* The writer has been inside one open() or write() for over 100 ms: a
 * pipe nobody reads, a hung network file system.  Nobody waits for it then. */
static bool writer_stalled(void)
{
	uint64_t b = atomic_load(&g.busy_since);

	return b && cd_rec_now() - b > 100 * 1000000ull;
}

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

void cd_rec_flush(void)
{
	struct timespec ts;
	uint64_t want;

	if (atomic_load(&g.run) != CD_RUNNING || writer_stalled())
		return;
	pthread_mutex_lock(&g.lock);
	want = atomic_fetch_add(&g.flush_req, 1) + 1;
	pthread_cond_signal(&g.wake);
	deadline_in(&ts, 1000);
	while (g.flush_done < want && !g.stop)
		if (pthread_cond_timedwait(&g.flushed, &g.lock, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&g.lock);
}

CD_EXPORT void commdebug_nccl_flush(void)
{
	cd_rec_flush();
}

CD_EXPORT int commdebug_nccl_set_trace(const char *path)
{
	struct timespec ts;
	uint64_t want;
	char *copy;
	int err = 0;

	if (!path || !*path) {
		errno = EINVAL;
		return -1;
	}
	if (g.forked) {
		errno = ENOTSUP;   /* forked after recording started: nothing recorded here */
		return -1;
	}
	if (!(copy = strdup(path)))
		return -1;
	pthread_mutex_lock(&g.lock);
	free(g.req_path);
	g.req_path = copy;
	want = ++g.move_req;
	if (!g.writer_started || g.writer_exited) {
		/* no writer (yet): taken when it starts, if ever */
		pthread_mutex_unlock(&g.lock);
		return 0;
	}
	pthread_cond_signal(&g.wake);
	deadline_in(&ts, g.exit_ms > 2000 ? g.exit_ms : 2000);
	while (g.move_done < want && !g.writer_exited)
		if (pthread_cond_timedwait(&g.flushed, &g.lock, &ts) == ETIMEDOUT) {
			err = ETIMEDOUT;
			break;
		}
	if (!err && g.move_done >= want)
		err = g.move_err;
	pthread_mutex_unlock(&g.lock);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* At exit (or dlclose): write what is queued, end the frame, close.  The
 * queue itself stays allocated: a thread still inside NCCL may push, and
 * its push then just finds recording stopped.  The writer gets
 * COMMDEBUG_NCCL_EXIT_MS (2 s) to finish; one blocked in open() or write()
 * longer is left behind (the process's exit ends it), with one line on
 * stderr. */
__attribute__((destructor)) static void cd_rec_shutdown(void)
{
	int was = CD_RUNNING;
	struct timespec ts;
	bool done;

	if (!atomic_compare_exchange_strong(&g.run, &was, CD_STOPPED)) {
		/* off (no trace could be opened, a write failed): the writer
		 * may still sit in a loop or a blocked call; never wait */
		return;
	}
	pthread_mutex_lock(&g.lock);
	g.stop = true;
	pthread_cond_signal(&g.wake);
	deadline_in(&ts, g.exit_ms);
	while (!g.writer_exited)
		if (pthread_cond_timedwait(&g.flushed, &g.lock, &ts) == ETIMEDOUT)
			break;
	done = g.writer_exited;
	pthread_mutex_unlock(&g.lock);
	if (done)
		pthread_join(g.thread, NULL);
	else
		fprintf(stderr, "commdebug-nccl: the trace writer is blocked in %s (a pipe nobody "
				"reads? a stalled file system?); exiting without waiting longer than "
				"%ld ms (COMMDEBUG_NCCL_EXIT_MS): the trace may lack its end\n",
			atomic_load(&g.busy_since) ? "open() or write()" : "its work", g.exit_ms);
}
