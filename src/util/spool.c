/* Spools: record logs in memory to a shared budget, then in one temporary
 * file.  See spool.h. */
#include "spool.h"
#include "out.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cd_spool {
	uint64_t budget;
	atomic_uint_fast64_t held;    /* bytes of the chunks kept in memory */
	atomic_uint_fast64_t end;     /* bytes written to the file (the next offset) */
	pthread_mutex_t mu;           /* the file's making */
	FILE *f;                      /* NULL: none yet */
	int err_no;                   /* it could not be made (under mu) */
};

struct cd_spool *cd_spool_new(uint64_t budget)
{
	struct cd_spool *sp = calloc(1, sizeof *sp);
	if (!sp)
		return NULL;
	sp->budget = budget;
	atomic_init(&sp->held, 0);
	atomic_init(&sp->end, 0);
	pthread_mutex_init(&sp->mu, NULL);
	return sp;
}

void cd_spool_free(struct cd_spool *sp)
{
	if (!sp)
		return;
	if (sp->f)
		fclose(sp->f);
	pthread_mutex_destroy(&sp->mu);
	free(sp);
}

uint64_t cd_spool_spilled(const struct cd_spool *sp)
{
	return atomic_load(&((struct cd_spool *)sp)->end);
}

/* The file's descriptor, made on the first call; -1 and *err_no when it
 * cannot be made. */
static int spool_fd(struct cd_spool *sp, int *err_no)
{
	int fd = -1;
	pthread_mutex_lock(&sp->mu);
	if (!sp->f && !sp->err_no && !(sp->f = cd_scratch_file()))
		sp->err_no = errno ? errno : EIO;
	if (sp->f)
		fd = fileno(sp->f);
	else
		*err_no = sp->err_no;
	pthread_mutex_unlock(&sp->mu);
	return fd;
}

/* Write n bytes of p at a new offset of the file (*off); 0 or an errno. */
static int spool_write(struct cd_spool *sp, const char *p, uint32_t n, uint64_t *off)
{
	int err_no = 0;
	int fd = spool_fd(sp, &err_no);
	if (fd < 0)
		return err_no;
	*off = atomic_fetch_add(&sp->end, n);
	for (uint32_t done = 0; done < n;) {
		ssize_t w = pwrite(fd, p + done, n - done, (off_t)(*off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : EIO;
		done += (uint32_t)w;
	}
	return 0;
}

/* Is there room in sp's budget for n more bytes in memory?  (Taken when
 * there is.) */
static bool spool_take(struct cd_spool *sp, uint64_t n)
{
	uint64_t held = atomic_load(&sp->held);
	do {
		if (held + n > sp->budget)
			return false;
	} while (!atomic_compare_exchange_weak(&sp->held, &held, held + n));
	return true;
}

void cd_slog_init(struct cd_slog *l, struct cd_spool *sp)
{
	memset(l, 0, sizeof *l);
	l->sp = sp;
}

static void fail(struct cd_slog *l, int err_no)
{
	if (!l->err_no)
		l->err_no = err_no;
}

/* The chunk being written is done: kept in memory (last: shrunk to its
 * size) or written to the file.  Returns its buffer when it can be written
 * again (the chunk went to the file), else NULL. */
static char *seal(struct cd_slog *l, bool last)
{
	struct cd_slog_chunk c = {NULL, 0, l->len};
	char *reuse = NULL;

	if (!l->len)
		return l->cur;
	if (!cd_vec_reserve(&l->chunks, l->chunks.n + 1)) {
		fail(l, ENOMEM);
		return l->cur;
	}
	if (spool_take(l->sp, l->len)) {
		c.mem = l->cur;
		if (last && l->len < CD_SLOG_CHUNK) {
			char *m = realloc(l->cur, l->len);
			if (m)
				c.mem = m;
		}
	} else {
		int e = spool_write(l->sp, l->cur, l->len, &c.off);
		if (e) {
			fail(l, e);
			return l->cur;
		}
		reuse = l->cur;
	}
	l->chunks.v[l->chunks.n++] = c;
	l->len = 0;
	return reuse;
}

char *cd_slog_reserve_(struct cd_slog *l)
{
	if (l->err_no)
		return NULL;
	if (l->cur) {
		char *reuse = seal(l, false);
		if (l->err_no)
			return NULL;
		l->cur = reuse;
	}
	if (!l->cur && !(l->cur = malloc(CD_SLOG_CHUNK))) {
		fail(l, ENOMEM);
		return NULL;
	}
	return l->cur;
}

void cd_slog_end(struct cd_slog *l)
{
	if (l->cur && !l->err_no) {
		char *reuse = seal(l, true);
		free(reuse);
	} else {
		free(l->cur);
	}
	l->cur = NULL;
	l->len = 0;
}

void cd_slog_free(struct cd_slog *l)
{
	uint64_t held = 0;
	for (uint32_t i = 0; i < l->chunks.n; i++)
		if (l->chunks.v[i].mem) {
			held += l->chunks.v[i].len;
			free(l->chunks.v[i].mem);
		}
	if (held)
		atomic_fetch_sub(&l->sp->held, held);
	cd_vec_free(&l->chunks);
	free(l->cur);
	memset(l, 0, sizeof *l);
}

void cd_slog_rd_init(struct cd_slog_rd *rd, const struct cd_slog *l)
{
	memset(rd, 0, sizeof *rd);
	rd->l = l;
}

static enum cd_status io_fail(struct cd_err *err, int err_no, const char *what)
{
	if (err_no == ENOMEM)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	return cd_fail(err, CD_ERR_IO, "%s a temporary file: %s", what, strerror(err_no));
}

enum cd_status cd_slog_rd_next(struct cd_slog_rd *rd, const char **p, size_t *n,
			       struct cd_err *err)
{
	const struct cd_slog *l = rd->l;
	if (l->err_no)
		return io_fail(err, l->err_no, "cannot write");
	if (rd->next >= l->chunks.n)
		return CD_END;
	const struct cd_slog_chunk *c = &l->chunks.v[rd->next++];
	if (c->mem) {
		*p = c->mem;
		*n = c->len;
		return CD_OK;
	}
	if (!rd->buf && !(rd->buf = malloc(CD_SLOG_CHUNK)))
		return io_fail(err, ENOMEM, "");
	int e = 0, fd = spool_fd(l->sp, &e);
	if (fd < 0)
		return io_fail(err, e, "cannot read");
	for (uint32_t done = 0; done < c->len;) {
		ssize_t r = pread(fd, rd->buf + done, c->len - done, (off_t)(c->off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return io_fail(err, r < 0 ? errno : EIO, "cannot read");
		done += (uint32_t)r;
	}
	*p = rd->buf;
	*n = c->len;
	return CD_OK;
}

void cd_slog_rd_free(struct cd_slog_rd *rd)
{
	free(rd->buf);
	rd->buf = NULL;
}
