/*
 * AsyncWrite(): the trace writer's frames written by a thread of their own,
 * one that never takes the interpreter's lock, so that the frame a full
 * recorder writes at each region exit costs the training thread a hand-over
 * instead of a write(2) (55 us for a 38 KB frame right after a step, on the
 * 2-core machine of the README's figures).
 *
 * submit(fd, data, at, items) queues data (a bytes object, held until it is
 * written) to be written at offset at of fd; the thread writes the queue in
 * order, at once.  Everything else that touches the file first waits for
 * the queue to be written (wait()), so frames reach the file in the order
 * the writer made them.  After a failed write the rest of the queue is
 * dropped, and wait() says so: (errno, items dropped, ...), the first error
 * kept.
 * A forked child has no such thread: its queue is dropped unwritten.
 *
 * compress_with(owner, cctx, compress2, bound, iserror) gives it libzstd's
 * ZSTD_compress2, ZSTD_compressBound and ZSTD_isError (their addresses, as
 * the ctypes library the writer loaded has them) and a compression context
 * of its own (owner: the object holding it, kept while the thread may use
 * it).  submit(..., True) then queues lines to be written as one compressed
 * frame, compressed by the thread: the caller cannot know that frame's
 * length, and wait() says how many bytes and frames such jobs wrote.
 *
 * submit_lines(fd, linebuf, at) is submit(fd, linebuf.take()[0], at, items,
 * True) without the bytes object: the LineBuf's buffer itself goes to the
 * job, and the LineBuf gets the buffer of a job written before (one is kept
 * spare), so that a region's end copies nothing and allocates nothing.
 * sync_lines(fd, linebuf, end) is a region end's wait(0) and submit_lines in
 * one call.  While the frame before is still being written, it queues the
 * lines after it (up to MAX_QUEUED jobs): such a job is written where the
 * one before it ended, which only the thread knows.
 */
#include "_speedups.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/*
 * Waking a sleeping thread costs the waker a cross-CPU wake-up (30 us on the
 * README's virtual machine, where the write it saves costs 55): after a job
 * the thread looks at the queue every POLL_NS for POLLS times, and submit
 * wakes it only once it sleeps for good.  A frame handed over while it polls
 * starts to be written within POLL_NS.  Each look is a wake-up of its own
 * (about 20 us of CPU there, taken from whatever runs on that CPU), so the
 * looks start only shortly before the next job is due, one gap between the
 * last two jobs after the last (POLL_NS before, at least POLL_NS from now),
 * and not at all where that gap is longer than the looks would last: a job
 * a step, steps of 2.5 ms to 100 ms, is taken on a look or two, and a job
 * that comes before the looks start wakes the thread.  Where
 * frames come only from a thread that can afford to wake it (light mode's
 * writer thread, every 0.1 s), set_polls(0) has it sleep after each job.
 */
#define POLL_NS 1000000
#define POLLS 100
/* Jobs queued or being written, at most, for sync_lines to queue one more. */
#define MAX_QUEUED 4

typedef struct Job {
	struct Job *next;
	PyObject *data;         /* the bytes (released with the interpreter's lock), or NULL: */
	char *raw;              /* a buffer of its own (submit_lines; PyMem_RawMalloc'd) */
	size_t rawn, rawcap;
	int fd;
	long long at;           /* its offset, or -1: where the job before it ended */
	Py_ssize_t items;       /* the lines it holds, for what a failure drops */
	int compress;           /* data: lines, to be written as a compressed frame */
} Job;

typedef size_t (*zcompress2_fn)(void *, void *, size_t, const void *, size_t);
typedef size_t (*zbound_fn)(size_t);
typedef unsigned (*ziserror_fn)(size_t);

typedef struct {
	PyObject_HEAD
	pthread_mutex_t mu;
	pthread_cond_t work;    /* a job queued, or stop */
	pthread_cond_t idle;    /* the queue written */
	Job *head, *tail;       /* queued, in order */
	int queued;             /* jobs queued or being written */
	long long next_at;      /* where the last job written ended (the thread's) */
	Job *done;              /* written or dropped: their data to release */
	int busy;               /* the thread is writing a job */
	int err;                /* errno of the first failed write, 0 */
	Py_ssize_t dropped;     /* items of the jobs dropped after it */
	int stop, started;
	int sleeping;           /* submit must signal: the thread sleeps, or waits past POLL_NS */
	int polls;              /* looks at the queue after a job before sleeping (set_polls) */
	long long last_in;      /* when the newest job was queued (CLOCK_MONOTONIC ns), 0 */
	long long gap;          /* the time between the last two jobs' queueing, 0: unknown */
	unsigned long forks;    /* forks when it was made: the thread is this process's */
	pthread_t thread;
	PyObject *zowner;       /* holds cctx (compress_with) */
	void *cctx;
	zcompress2_fn zcompress2;
	zbound_fn zbound;
	ziserror_fn ziserror;
	char *spare;            /* a written job's raw buffer, for the next submit_lines */
	size_t spare_cap;
	char *zbuf;             /* the thread's output buffer */
	size_t zcap;
	long long zbytes;       /* bytes of compressed frames written, since wait() said */
	Py_ssize_t zframes;     /* and how many frames */
} AsyncWrite;

/* data[0:n] at offset at of fd: 0, or an errno. */
static int write_at(int fd, const char *p, size_t n, long long at)
{
	while (n) {
		ssize_t k = pwrite(fd, p, n, (off_t)at);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (k == 0)
			return EIO;
		p += k;
		n -= (size_t)k;
		at += k;
	}
	return 0;
}

/* A job's bytes as they go to the file: its data, or (compress) a frame
 * made of it in w->zbuf.  0, or an errno. */
static int job_bytes(AsyncWrite *w, Job *j, const char **p, size_t *n)
{
	*p = j->data ? PyBytes_AS_STRING(j->data) : j->raw;
	*n = j->data ? (size_t)PyBytes_GET_SIZE(j->data) : j->rawn;
	if (!j->compress)
		return 0;
	size_t cap = w->zbound(*n);
	if (w->ziserror(cap))
		return EOVERFLOW;
	if (cap > w->zcap) {
		char *b = realloc(w->zbuf, cap);
		if (!b)
			return ENOMEM;
		w->zbuf = b;
		w->zcap = cap;
	}
	size_t r = w->zcompress2(w->cctx, w->zbuf, w->zcap, *p, *n);
	if (w->ziserror(r))
		return EIO;
	*p = w->zbuf;
	*n = r;
	return 0;
}

static long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* How long the thread waits for its next look at the queue, looks looks
 * after the last job (w->mu held): POLL_NS, or longer for the first, up to
 * POLL_NS before the next job is due; -1 where the looks would end before
 * that job (sleep until submit's signal). */
static long long look_wait(const AsyncWrite *w, int looks)
{
	if (looks >= w->polls)
		return -1;
	if (looks > 0 || w->gap <= 0)
		return POLL_NS;
	if (w->gap > (long long)w->polls * POLL_NS)
		return -1;
	long long wait = w->last_in + w->gap - POLL_NS - mono_ns();
	return wait > POLL_NS ? wait : POLL_NS;
}

static void *run(void *arg)
{
	AsyncWrite *w = arg;
	int looks = 0;           /* since the last job */
#ifdef __linux__
	pthread_setname_np(pthread_self(), "commdebug-aw");     /* (top -H, /proc: comm) */
#endif
	pthread_mutex_lock(&w->mu);
	for (;;) {
		if (!w->head && !w->stop) {
			long long wait = look_wait(w, looks);
			if (wait >= 0) {
				struct timespec until;
				clock_gettime(CLOCK_REALTIME, &until);
				until.tv_sec += (time_t)(wait / 1000000000);
				until.tv_nsec += (long)(wait % 1000000000);
				if (until.tv_nsec >= 1000000000) {
					until.tv_sec++;
					until.tv_nsec -= 1000000000;
				}
				/* (a job queued before a wait longer than a look ends
				 * wakes the thread: none waits longer than POLL_NS) */
				w->sleeping = wait > POLL_NS;
				if (pthread_cond_timedwait(&w->work, &w->mu, &until) == ETIMEDOUT)
					looks++;
				w->sleeping = 0;
			} else {
				w->sleeping = 1;
				while (!w->head && !w->stop)
					pthread_cond_wait(&w->work, &w->mu);
				w->sleeping = 0;
			}
			continue;
		}
		if (!w->head)
			break;
		looks = 0;
		Job *j = w->head;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		w->busy = 1;
		int failed = w->err;
		pthread_mutex_unlock(&w->mu);
		/* (the bytes object is immutable and held, a raw buffer the
		 * job's own: either is read without the interpreter's lock) */
		const char *p = NULL;
		size_t n = 0;
		int e = failed ? 0 : job_bytes(w, j, &p, &n);
		long long at = j->at < 0 ? w->next_at : j->at;
		if (!failed && !e)
			e = write_at(j->fd, p, n, at);
		w->next_at = at + (long long)n;
		pthread_mutex_lock(&w->mu);
		w->busy = 0;
		w->queued--;
		if (!failed && !e && j->compress) {
			w->zbytes += (long long)n;
			w->zframes++;
		}
		if (failed || e) {
			if (!w->err)
				w->err = e;
			w->dropped += j->items;
		}
		j->next = w->done;
		w->done = j;
		if (!w->head)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* The written jobs' data released (the caller holds the interpreter's lock,
 * not mu). */
static void reap(AsyncWrite *w)
{
	pthread_mutex_lock(&w->mu);
	Job *j = w->done;
	w->done = NULL;
	pthread_mutex_unlock(&w->mu);
	while (j) {
		Job *next = j->next;
		Py_XDECREF(j->data);
		if (j->raw && !w->spare) {
			w->spare = j->raw;
			w->spare_cap = j->rawcap;
		} else {
			PyMem_RawFree(j->raw);
		}
		PyMem_RawFree(j);
		j = next;
	}
}

/* Forks so far in this process's line (a child's handler counts one):
 * getpid() is a system call, 1.5 us on the README's machine. */
static unsigned long forks;

static void count_fork(void)
{
	forks++;
}

/* In a forked child: the queue dropped, unwritten (there is no thread). */
static int forked(AsyncWrite *w)
{
	if (w->forks == forks)
		return 0;
	Job *j = w->head;
	w->head = w->tail = NULL;
	w->busy = 0;
	w->queued = 0;
	w->started = 0;
	while (j) {
		Job *next = j->next;
		j->next = w->done;
		w->done = j;
		j = next;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	w->forks = forks;
	w->stop = 1;            /* (nothing is written from a child) */
	return 1;
}

/* Whether a job can be queued (no write failed, not stopped, the thread
 * started): 1, 0.  Written jobs reaped first. */
static int can_queue(AsyncWrite *w)
{
	forked(w);
	reap(w);
	if (w->stop || w->err)
		return 0;
	if (!w->started) {
		if (pthread_create(&w->thread, NULL, run, w) != 0)
			return 0;
		w->started = 1;
	}
	return 1;
}

/* A job's fd and offset from their arguments: 0, or -1 with an error set
 * (who: the method, for the message). */
static int fd_and_offset(PyObject *fdo, PyObject *ato, int *fd, long long *at, const char *who)
{
	long fdl = PyLong_AsLong(fdo);
	*at = PyLong_AsLongLong(ato);
	if (PyErr_Occurred())
		return -1;
	if (fdl < 0 || fdl > INT32_MAX || *at < 0) {
		PyErr_Format(PyExc_ValueError, "%s: a negative fd or offset, or an fd past 32 bits",
			     who);
		return -1;
	}
	*fd = (int)fdl;
	return 0;
}

/* j at the queue's end, the thread woken where it sleeps. */
static void enqueue(AsyncWrite *w, Job *j)
{
	j->next = NULL;
	long long now = mono_ns();
	pthread_mutex_lock(&w->mu);
	w->gap = w->last_in ? now - w->last_in : 0;
	w->last_in = now;
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	w->queued++;
	if (w->sleeping)
		pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
}

static PyObject *AsyncWrite_submit(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs < 4 || nargs > 5 || !PyLong_Check(args[0]) || !PyBytes_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError,
				"submit(fd: int, data: bytes, at: int, items: int[, compress: bool])");
		return NULL;
	}
	int compress = nargs == 5 ? PyObject_IsTrue(args[4]) : 0;
	if (compress < 0)
		return NULL;
	if (compress && !w->cctx) {
		PyErr_SetString(PyExc_ValueError, "submit: compress without compress_with()");
		return NULL;
	}
	int fd;
	long long at;
	if (fd_and_offset(args[0], args[2], &fd, &at, "submit") < 0)
		return NULL;
	Py_ssize_t items = PyLong_AsSsize_t(args[3]);
	if (items < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "submit: a negative count");
		return NULL;
	}
	if (!can_queue(w))
		Py_RETURN_FALSE;
	Job *j = PyMem_RawCalloc(1, sizeof *j);
	if (!j)
		return PyErr_NoMemory();
	j->data = Py_NewRef(args[1]);
	j->fd = fd;
	j->at = at;
	j->items = items;
	j->compress = compress;
	enqueue(w, j);
	Py_RETURN_TRUE;
}

/* The LineBuf's lines queued as one compressed frame at offset at of fd (-1:
 * where the job before it ends), its buffer itself (submit_lines,
 * sync_lines): (marks, items, bytes), or None where no job can be queued
 * (nothing taken), NULL on error. */
static PyObject *queue_lines(AsyncWrite *w, int fd, long long at, PyObject *linebuf)
{
	if (!can_queue(w))
		Py_RETURN_NONE;
	Job *j = PyMem_RawCalloc(1, sizeof *j);
	if (!j)
		return PyErr_NoMemory();
	PyObject *marks;
	if (cd_lines_steal(linebuf, &j->raw, &j->rawn, &j->rawcap, &marks, &j->items, w->spare,
			   w->spare_cap) < 0) {
		PyMem_RawFree(j);
		return NULL;
	}
	w->spare = NULL;
	w->spare_cap = 0;
	j->fd = fd;
	j->at = at;
	j->compress = 1;
	Py_ssize_t items = j->items;
	size_t n = j->rawn;
	enqueue(w, j);
	return Py_BuildValue("(Nnn)", marks, items, (Py_ssize_t)n);
}

/* The arguments of submit_lines and sync_lines (fd, linebuf, at): 0, or -1
 * with an error set (who: the method's signature, for the message). */
static int lines_args(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs, int *fd,
		      long long *at, const char *who)
{
	if (nargs != 3 || !PyLong_Check(args[0]) || !PyObject_TypeCheck(args[1], &cd_LineBufType) ||
	    !PyLong_Check(args[2])) {
		PyErr_Format(PyExc_TypeError, "%s(fd: int, linebuf: LineBuf, at: int)", who);
		return -1;
	}
	if (!w->cctx) {
		PyErr_Format(PyExc_ValueError, "%s: without compress_with()", who);
		return -1;
	}
	return fd_and_offset(args[0], args[2], fd, at, who);
}

/* submit_lines(fd, linebuf, at) -> (marks, items, bytes), or None: as
 * submit(fd, data, at, items, True) of what linebuf.take() would give, the
 * LineBuf's own buffer queued (see the head comment); None where submit
 * would say False (nothing taken from the LineBuf). */
static PyObject *AsyncWrite_submit_lines(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs)
{
	int fd;
	long long at;
	if (lines_args(w, args, nargs, &fd, &at, "submit_lines") < 0)
		return NULL;
	return queue_lines(w, fd, at, args[1]);
}

/* What wait() answers of the jobs written since its last answer. */
typedef struct {
	int err;
	Py_ssize_t dropped, zframes;
	long long zbytes;
} Settled;

/* Those facts, taken (counted from zero again; the first error kept). */
static Settled settled(AsyncWrite *w)
{
	pthread_mutex_lock(&w->mu);
	Settled st = {w->err, w->dropped, w->zframes, w->zbytes};
	w->dropped = 0;
	w->zbytes = 0;
	w->zframes = 0;
	pthread_mutex_unlock(&w->mu);
	return st;
}

/* Facts taken by settled() given back, for an answer that could not be made. */
static void unsettle(AsyncWrite *w, const Settled *st)
{
	pthread_mutex_lock(&w->mu);
	w->dropped += st->dropped;
	w->zbytes += st->zbytes;
	w->zframes += st->zframes;
	pthread_mutex_unlock(&w->mu);
}

/* wait([timeout]) -> (errno, items dropped, bytes and frames of compressed
 * jobs written since the last such answer), or None when timeout seconds
 * passed first (the queue still being written). */
static PyObject *AsyncWrite_wait(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs)
{
	double timeout = -1;
	if (nargs > 1 || (nargs == 1 && args[0] != Py_None &&
			  (timeout = PyFloat_AsDouble(args[0])) == -1 && PyErr_Occurred())) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "wait([timeout])");
		return NULL;
	}
	int done = 1, child = forked(w);
	pthread_mutex_lock(&w->mu);
	int pending = w->head || w->busy;
	pthread_mutex_unlock(&w->mu);
	/* (the interpreter's lock is let go only to wait: letting it go lets
	 * the writer thread in, and the caller waits for it back) */
	if (pending && timeout == 0)
		done = 0;
	else if (pending && !child && w->started) {
		struct timespec until;
		if (timeout >= 0) {
			clock_gettime(CLOCK_REALTIME, &until);
			double s = (double)until.tv_sec + until.tv_nsec / 1e9 + timeout;
			until.tv_sec = (time_t)s;
			until.tv_nsec = (long)((s - (double)until.tv_sec) * 1e9);
		}
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&w->mu);
		while (done && (w->head || w->busy)) {
			if (timeout < 0)
				pthread_cond_wait(&w->idle, &w->mu);
			else if (pthread_cond_timedwait(&w->idle, &w->mu, &until) == ETIMEDOUT)
				done = !(w->head || w->busy);
		}
		pthread_mutex_unlock(&w->mu);
		Py_END_ALLOW_THREADS
	}
	reap(w);
	if (!done)
		Py_RETURN_NONE;
	Settled st = settled(w);
	return Py_BuildValue("(inLn)", st.err, st.dropped, st.zbytes, st.zframes);
}

/* sync_lines(fd, linebuf, end) -> (errno, items dropped, compressed bytes,
 * compressed frames, (marks, items, bytes)), or None: a region end's
 * wait(0) and submit_lines in one call.  wait(0)'s answer (of the jobs
 * written since the last answer), followed by what submit_lines(fd,
 * linebuf, end + compressed bytes) answers where no write failed and the
 * LineBuf holds lines, else by (None, 0, 0).  While jobs are still being
 * written, the lines are queued to be written where the last of them ends
 * (end is then not used), or, with MAX_QUEUED jobs waiting, nothing is done
 * and the answer is None. */
static PyObject *AsyncWrite_sync_lines(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs)
{
	int fd;
	long long end;
	if (lines_args(w, args, nargs, &fd, &end, "sync_lines") < 0)
		return NULL;
	forked(w);
	pthread_mutex_lock(&w->mu);
	int pending = w->head || w->busy, full = w->queued >= MAX_QUEUED;
	pthread_mutex_unlock(&w->mu);
	if (full)
		Py_RETURN_NONE;
	reap(w);
	Settled st = settled(w);
	PyObject *q = NULL;
	if (!st.err && cd_lines_count(args[1]) > 0) {
		/* (nothing pending: every job's bytes are in st, and end + them
		 * is the file's end; else only the thread knows it) */
		if (!(q = queue_lines(w, fd, pending ? -1 : end + st.zbytes, args[1]))) {
			/* (wait's answer is kept for the next call: nothing is lost) */
			unsettle(w, &st);
			return NULL;
		}
	}
	PyObject *r;
	if (q && q != Py_None)
		r = Py_BuildValue("(inLnO)", st.err, st.dropped, st.zbytes, st.zframes, q);
	else
		r = Py_BuildValue("(inLn(Onn))", st.err, st.dropped, st.zbytes, st.zframes, Py_None,
				  (Py_ssize_t)0, (Py_ssize_t)0);
	Py_XDECREF(q);
	if (!r)
		unsettle(w, &st);
	return r;
}

/* set_polls(n): how many times the thread looks at the queue (POLL_NS
 * apart, see look_wait) after a job before it sleeps until a submit wakes
 * it; from its next look on. */
static PyObject *AsyncWrite_set_polls(AsyncWrite *w, PyObject *arg)
{
	long n = PyLong_AsLong(arg);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n < 0 || n > 100000) {
		PyErr_Format(PyExc_ValueError, "set_polls: %ld is not in 0..100000", n);
		return NULL;
	}
	pthread_mutex_lock(&w->mu);
	w->polls = (int)n;
	pthread_mutex_unlock(&w->mu);
	Py_RETURN_NONE;
}

/* close(): the queue written, the thread ended. */
static PyObject *AsyncWrite_close(AsyncWrite *w, PyObject *unused)
{
	(void)unused;
	PyObject *r = AsyncWrite_wait(w, NULL, 0);
	if (!r)
		return NULL;
	if (w->started && !forked(w)) {
		pthread_mutex_lock(&w->mu);
		w->stop = 1;
		pthread_cond_signal(&w->work);
		pthread_mutex_unlock(&w->mu);
		Py_BEGIN_ALLOW_THREADS
		pthread_join(w->thread, NULL);
		Py_END_ALLOW_THREADS
		w->started = 0;
	}
	w->stop = 1;
	reap(w);
	return r;
}

/* compress_with(owner, cctx, compress2, bound, iserror): see the head
 * comment; only before the first submit. */
static PyObject *AsyncWrite_compress_with(AsyncWrite *w, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError,
				"compress_with(owner, cctx, compress2, bound, iserror)");
		return NULL;
	}
	void *ptr[4];
	for (int i = 0; i < 4; i++) {
		ptr[i] = PyLong_AsVoidPtr(args[i + 1]);
		if (PyErr_Occurred())
			return NULL;
		if (!ptr[i]) {
			PyErr_SetString(PyExc_ValueError, "compress_with: a null address");
			return NULL;
		}
	}
	if (w->started || w->cctx) {
		PyErr_SetString(PyExc_RuntimeError, "compress_with: only once, before submit");
		return NULL;
	}
	w->zowner = Py_NewRef(args[0]);
	w->cctx = ptr[0];
	w->zcompress2 = (zcompress2_fn)ptr[1];
	w->zbound = (zbound_fn)ptr[2];
	w->ziserror = (ziserror_fn)ptr[3];
	Py_RETURN_NONE;
}

static PyObject *AsyncWrite_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
		PyErr_SetString(PyExc_TypeError, "AsyncWrite() takes no arguments");
		return NULL;
	}
	AsyncWrite *w = (AsyncWrite *)type->tp_alloc(type, 0);
	if (!w)
		return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	static int hooked;
	if (!hooked) {
		pthread_atfork(NULL, NULL, count_fork);
		hooked = 1;
	}
	w->forks = forks;
	w->polls = POLLS;
	return (PyObject *)w;
}

static void AsyncWrite_dealloc(AsyncWrite *w)
{
	PyObject *r = AsyncWrite_close(w, NULL);
	if (!r)
		PyErr_Clear();
	Py_XDECREF(r);
	if (!w->started) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->work);
		pthread_cond_destroy(&w->idle);
	}
	free(w->zbuf);
	PyMem_RawFree(w->spare);
	Py_CLEAR(w->zowner);
	Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef AsyncWrite_methods[] = {
	{"submit", (PyCFunction)(void (*)(void))AsyncWrite_submit, METH_FASTCALL,
	 "submit(fd, data, at, items[, compress]) -> bool: data queued for offset at, as it is "
	 "or (compress) as a compressed frame of it (False: an earlier write failed, or none "
	 "can be made; nothing queued)"},
	{"submit_lines", (PyCFunction)(void (*)(void))AsyncWrite_submit_lines, METH_FASTCALL,
	 "submit_lines(fd, linebuf, at) -> (marks, items, bytes), or None: the LineBuf's lines "
	 "queued to be written at offset at as one compressed frame, its buffer itself (None: "
	 "as submit's False, nothing taken)"},
	{"sync_lines", (PyCFunction)(void (*)(void))AsyncWrite_sync_lines, METH_FASTCALL,
	 "sync_lines(fd, linebuf, end) -> (errno, items dropped, compressed bytes, compressed "
	 "frames, (marks, items, bytes)), or None: wait(0)'s answer, then submit_lines(fd, "
	 "linebuf, end + compressed bytes) where no write failed and lines wait ((None, 0, 0) "
	 "where none was queued); while jobs are written, queued after them (None: too many)"},
	{"wait", (PyCFunction)(void (*)(void))AsyncWrite_wait, METH_FASTCALL,
	 "wait([timeout]) -> (errno, items dropped, compressed bytes, compressed frames), or "
	 "None: timeout seconds passed first"},
	{"compress_with", (PyCFunction)(void (*)(void))AsyncWrite_compress_with, METH_FASTCALL,
	 "compress_with(owner, cctx, compress2, bound, iserror): libzstd's entry points and a "
	 "context of its own, for submit(..., compress=True)"},
	{"set_polls", (PyCFunction)AsyncWrite_set_polls, METH_O,
	 "set_polls(n): after each job the thread looks at the queue up to n times, 1 ms "
	 "apart from when the next job is due, before it sleeps until a submit wakes it (100 "
	 "unless set; 0: it sleeps at once)"},
	{"close", (PyCFunction)AsyncWrite_close, METH_NOARGS,
	 "close() -> (errno, items dropped): the queue written, the thread ended"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject cd_AsyncWriteType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "commdebug._speedups.AsyncWrite",
	.tp_basicsize = sizeof(AsyncWrite),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The trace writer's frames written by a thread without the interpreter's "
		  "lock (see the source's head comment)",
	.tp_new = AsyncWrite_new,
	.tp_dealloc = (destructor)AsyncWrite_dealloc,
	.tp_methods = AsyncWrite_methods,
};
