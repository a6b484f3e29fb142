#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#define NSLOTS 3
#define CHUNK (1u << 18)

enum slot_state { SLOT_FREE, SLOT_READY };

struct slot {
	char *buf;
	size_t cap, len;
	enum slot_state state;
	enum cd_status status;  /* CD_OK data, CD_END, or an error */
	char msg[sizeof(((struct cd_err *)0)->msg)];
};

struct cd_reader {
	FILE *f;
	bool own_file;
	bool zstd;
	bool frame_cut;
	_Atomic bool stop;
	_Atomic uint64_t file_bytes, data_bytes;

	pthread_t thread;
	bool thread_started;
	bool inline_mode;       /* no thread: cd_reader_next decompresses (cd_reader_set_inline) */
	bool produced_all;      /* inline: the end or an error is published */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct slot slots[NSLOTS];
	unsigned prod, cons;    /* next slot to fill / to hand out */
	bool holding;           /* the consumer holds slot cons-1 */

	/* producer-only state */
	char *carry;
	size_t carry_len, carry_cap;
	ZSTD_DCtx *dctx;
	unsigned char *in;
	size_t in_cap, in_pos, in_len;
	bool in_eof;
	unsigned char peek[4];
	size_t peek_len;
	char msg[sizeof(((struct cd_err *)0)->msg)];

	/* zstd frames: where the current one starts in the file, its first
	 * five bytes (magic number and frame header descriptor, which holds
	 * the checksum flag), and counts for cd_reader_frames() */
	uint64_t frame_at;
	unsigned char fhdr[5];
	unsigned fhdr_len;
	bool fhdr_seen;
	_Atomic uint64_t frames, unchecked;
};

/* ---- producer ---- */

static struct slot *wait_free(struct cd_reader *r)
{
	struct slot *s = &r->slots[r->prod % NSLOTS];
	pthread_mutex_lock(&r->mu);
	while (s->state != SLOT_FREE && !r->stop)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	return r->stop ? NULL : s;
}

static void publish(struct cd_reader *r, struct slot *s)
{
	pthread_mutex_lock(&r->mu);
	s->state = SLOT_READY;
	r->prod++;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void publish_status(struct cd_reader *r, enum cd_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void publish_status(struct cd_reader *r, enum cd_status st, const char *fmt, ...)
{
	struct slot *s = wait_free(r);
	if (!s)
		return;
	s->len = 0;
	s->status = st;
	s->msg[0] = '\0';
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->msg, sizeof s->msg, fmt, ap);
		va_end(ap);
	}
	publish(r, s);
}

/* Raw bytes from the file into r->in; returns false on read error. */
static bool fill_input(struct cd_reader *r)
{
	r->in_pos = 0;
	r->in_len = 0;
	if (r->peek_len) {
		memcpy(r->in, r->peek, r->peek_len);
		r->in_len = r->peek_len;
		r->peek_len = 0;
	}
	size_t got = fread(r->in + r->in_len, 1, r->in_cap - r->in_len, r->f);
	r->in_len += got;
	atomic_fetch_add(&r->file_bytes, got);
	if (got == 0 || r->in_len < r->in_cap) {
		if (ferror(r->f))
			return false;
		if (feof(r->f))
			r->in_eof = true;
	}
	return true;
}

/* A read of the file failed: the message, with how far it got. */
static enum cd_status read_error(struct cd_reader *r)
{
	snprintf(r->msg, sizeof r->msg, "read error after %llu bytes: %s",
		 (unsigned long long)r->file_bytes, strerror(errno));
	return CD_ERR_IO;
}

/* Note the first five bytes of the current zstd frame as they come by
 * (base: the file offset of r->in[0]); once they are all there, count the
 * frame, and whether it carries a content checksum (bit 2 of the frame
 * header descriptor; skippable frames have none to carry). */
static void frame_header(struct cd_reader *r, uint64_t base)
{
	while (r->fhdr_len < sizeof r->fhdr && r->frame_at + r->fhdr_len >= base &&
	       r->frame_at + r->fhdr_len < base + r->in_len) {
		uint64_t at = r->frame_at + r->fhdr_len - base;
		r->fhdr[r->fhdr_len++] = r->in[at];
	}
	if (r->fhdr_seen || r->fhdr_len < sizeof r->fhdr)
		return;
	r->fhdr_seen = true;
	if (r->fhdr[0] == 0x28 && r->fhdr[1] == 0xB5 && r->fhdr[2] == 0x2F && r->fhdr[3] == 0xFD) {
		atomic_fetch_add(&r->frames, 1);
		if (!(r->fhdr[4] & 0x04))
			atomic_fetch_add(&r->unchecked, 1);
	}
}

/* Make room for at least `need` more bytes in slot s. */
static bool grow(struct slot *s, size_t need)
{
	if (s->cap - s->len >= need)
		return true;
	size_t cap = s->cap ? s->cap : CHUNK;
	while (cap - s->len < need)
		cap *= 2;
	char *nb = realloc(s->buf, cap);
	if (!nb)
		return false;
	s->buf = nb;
	s->cap = cap;
	return true;
}

/* Produce bytes into s until it holds at least `target` bytes or input
 * ends.  Returns CD_OK, CD_END (input finished) or an error with r->msg. */
static enum cd_status produce_bytes(struct cd_reader *r, struct slot *s, size_t target)
{
	while (s->len < target) {
		if (!r->zstd) {
			/* plain text: straight into the slot, the peeked bytes first */
			if (r->peek_len) {
				if (!grow(s, r->peek_len))
					goto nomem;
				memcpy(s->buf + s->len, r->peek, r->peek_len);
				s->len += r->peek_len;
				r->peek_len = 0;
				continue;
			}
			if (r->in_eof)
				return CD_END;
			if (!grow(s, CHUNK / 4))
				goto nomem;
			size_t room = s->cap - s->len;
			if (room > target - s->len)
				room = target - s->len;
			size_t got = fread(s->buf + s->len, 1, room, r->f);
			s->len += got;
			atomic_fetch_add(&r->file_bytes, got);
			if (got < room) {
				if (ferror(r->f)) {
					return read_error(r);
				}
				r->in_eof = feof(r->f);
			}
			continue;
		}
		if (r->in_pos == r->in_len) {
			if (r->in_eof)
				return CD_END;
			if (!fill_input(r)) {
				return read_error(r);
			}
			if (r->in_len == 0 && r->in_eof)
				return CD_END;
		}
		if (!grow(s, CHUNK / 4))
			goto nomem;
		/* at most up to target per call, so that one call never adds
		 * more than a chunk to a slot (the line limit relies on it) */
		size_t room = s->cap - s->len;
		if (room > target - s->len)
			room = target - s->len;
		uint64_t base = r->file_bytes - r->in_len; /* file offset of r->in[0] */
		frame_header(r, base);
		size_t from = r->in_pos;
		ZSTD_inBuffer in = {r->in, r->in_len, r->in_pos};
		ZSTD_outBuffer out = {s->buf + s->len, room, 0};
		size_t ret = ZSTD_decompressStream(r->dctx, &out, &in);
		if (ZSTD_isError(ret)) {
			unsigned long long at = (unsigned long long)r->frame_at;
			if (ZSTD_getErrorCode(ret) == ZSTD_error_checksum_wrong)
				snprintf(r->msg, sizeof r->msg,
					 "checksum mismatch in the zstd frame that starts at byte %llu "
					 "of the file: its data is corrupt", at);
			else
				snprintf(r->msg, sizeof r->msg,
					 "corrupt zstd data in the frame that starts at byte %llu of "
					 "the file (%s)", at, ZSTD_getErrorName(ret));
			return CD_ERR_FORMAT;
		}
		r->in_pos = in.pos;
		s->len += out.pos;
		r->frame_cut = ret != 0;
		if (ret == 0 && (in.pos > from || out.pos > 0)) {
			/* a frame ended: the next one starts here */
			r->frame_at = base + in.pos;
			r->fhdr_len = 0;
			r->fhdr_seen = false;
		}
	}
	return CD_OK;
nomem:
	snprintf(r->msg, sizeof r->msg, "out of memory");
	return CD_ERR_NOMEM;
}

static const char *last_newline(const struct slot *s, size_t from)
{
	for (size_t i = s->len; i > from; i--)
		if (s->buf[i - 1] == '\n')
			return &s->buf[i - 1];
	return NULL;
}

/* The line at byte `at` of the slot being filled is over the limit.  Its
 * offset counts the bytes before it that were handed out (all whole lines):
 * decompressed bytes for zstd input, file bytes for plain text. */
static void too_long(struct cd_reader *r, size_t at)
{
	publish_status(r, CD_ERR_LIMIT,
		       "line longer than %u MiB (it starts at byte %llu of the %s)",
		       CD_MAX_LINE >> 20, (unsigned long long)(r->data_bytes + at),
		       r->zstd ? "decompressed data" : "file");
}

/* Fill the next slot with whole lines and publish it; false when there is
 * nothing more to do (the end or an error was published, or stop). */
static bool produce_slot(struct cd_reader *r)
{
	struct slot *s = wait_free(r);
	if (!s)
		return false;
	s->len = 0;
	s->status = CD_OK;
	if (r->carry_len) {
		if (!grow(s, r->carry_len)) {
			publish_status(r, CD_ERR_NOMEM, "out of memory");
			return false;
		}
		memcpy(s->buf, r->carry, r->carry_len);
		s->len = r->carry_len;
		r->carry_len = 0;
	}
	/* The slot starts with a line (carry holds no newline); each
	 * produce_bytes call adds at most about a chunk.  So a line
	 * longer than the limit is the slot's first line or, at the
	 * end of input, its last one. */
	size_t carried = s->len;
	size_t scan_from = s->len;
	size_t target = s->len + CHUNK;
	enum cd_status st;
	const char *nl;
	for (;;) {
		st = produce_bytes(r, s, target);
		nl = last_newline(s, scan_from);
		if (nl || st != CD_OK)
			break;
		/* one line longer than a chunk: keep reading into this slot */
		if (s->len > CD_MAX_LINE) {
			too_long(r, 0);
			return false;
		}
		scan_from = s->len;
		target = s->len + CHUNK;
	}
	if (st == CD_OK || st == CD_END) {
		size_t first = s->len;  /* end of the first line */
		if (nl && s->len > CD_MAX_LINE) {
			const char *f = memchr(s->buf + carried, '\n', s->len - carried);
			first = (size_t)(f - s->buf);
		}
		size_t last = nl ? (size_t)(nl - s->buf) + 1 : 0; /* start of the last */
		if (first > CD_MAX_LINE) {
			too_long(r, 0);
			return false;
		}
		if (st == CD_END && s->len - last > CD_MAX_LINE) {
			too_long(r, last);
			return false;
		}
	}
	/* hand out whole lines; at the end of input, everything */
	if (st != CD_END && nl) {
		size_t keep = (size_t)(nl - s->buf) + 1;
		size_t tail = s->len - keep;
		if (tail) {
			if (r->carry_cap < tail) {
				char *nc = realloc(r->carry, tail);
				if (!nc) {
					publish_status(r, CD_ERR_NOMEM, "out of memory");
					return false;
				}
				r->carry = nc;
				r->carry_cap = tail;
			}
			memcpy(r->carry, s->buf + keep, tail);
			r->carry_len = tail;
		}
		s->len = keep;
	} else if (st != CD_END && st != CD_OK) {
		s->len = 0; /* error before any complete line */
	}
	atomic_fetch_add(&r->data_bytes, s->len);
	if (s->len)
		publish(r, s);
	if (st == CD_END) {
		publish_status(r, CD_END, NULL);
		return false;
	}
	if (st != CD_OK) {
		publish_status(r, st, "%s", r->msg);
		return false;
	}
	return true;
}

static void *producer(void *arg)
{
	struct cd_reader *r = arg;
	while (produce_slot(r))
		;
	return NULL;
}

/* ---- consumer ---- */

static _Thread_local bool inline_here;

void cd_reader_set_inline(bool on)
{
	inline_here = on;
}

enum cd_status cd_reader_open(const char *path, struct cd_reader **out, struct cd_err *err)
{
	struct cd_reader *r = calloc(1, sizeof *r);
	enum cd_status st = CD_OK;

	if (!r)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (strcmp(path, "-") == 0) {
		r->f = stdin;
	} else {
		r->f = fopen(path, "rb");
		if (!r->f) {
			st = cd_fail(err, CD_ERR_IO, "cannot open: %s", strerror(errno));
			goto fail;
		}
		r->own_file = true;
	}
	/* peek the magic number */
	r->peek_len = fread(r->peek, 1, sizeof r->peek, r->f);
	atomic_store(&r->file_bytes, r->peek_len);
	if (r->peek_len < sizeof r->peek && ferror(r->f)) {
		st = cd_fail(err, CD_ERR_IO, "read error: %s", strerror(errno));
		goto fail;
	}
	if (r->peek_len < sizeof r->peek)
		r->in_eof = feof(r->f);
	/* zstd frame 28 B5 2F FD, or a skippable frame 5? 2A 4D 18 */
	if (r->peek_len == 4 &&
	    ((r->peek[0] == 0x28 && r->peek[1] == 0xB5 && r->peek[2] == 0x2F && r->peek[3] == 0xFD) ||
	     ((r->peek[0] & 0xF0) == 0x50 && r->peek[1] == 0x2A && r->peek[2] == 0x4D &&
	      r->peek[3] == 0x18))) {
		r->zstd = true;
		r->dctx = ZSTD_createDCtx();
		/* compressed input is read into r->in (plain text straight into
		 * the slots) */
		r->in_cap = ZSTD_DStreamInSize();
		if (r->in_cap < (1u << 17))
			r->in_cap = 1u << 17;
		r->in = malloc(r->in_cap);
		if (!r->dctx || !r->in) {
			st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
			goto fail;
		}
	}
	r->inline_mode = inline_here;
	if (!r->inline_mode) {
		if (pthread_create(&r->thread, NULL, producer, r) != 0) {
			st = cd_fail(err, CD_ERR_NOMEM, "cannot start the reader thread");
			goto fail;
		}
		r->thread_started = true;
	}
	*out = r;
	return CD_OK;
fail:
	cd_reader_close(r);
	return st;
}

enum cd_status cd_reader_next(struct cd_reader *r, const char **buf, size_t *len,
			      struct cd_err *err)
{
	pthread_mutex_lock(&r->mu);
	if (r->holding) {
		struct slot *prev = &r->slots[(r->cons - 1) % NSLOTS];
		if (prev->status != CD_OK) {
			/* END and errors are sticky */
			enum cd_status st = prev->status;
			pthread_mutex_unlock(&r->mu);
			if (st != CD_END)
				cd_fail(err, st, "%s", prev->msg);
			return st;
		}
		prev->state = SLOT_FREE;
		r->holding = false;
		pthread_cond_broadcast(&r->cv);
	}
	struct slot *s = &r->slots[r->cons % NSLOTS];
	if (r->inline_mode && s->state != SLOT_READY && !r->produced_all) {
		/* the held slot is free again: fill the next one here */
		pthread_mutex_unlock(&r->mu);
		r->produced_all = !produce_slot(r);
		pthread_mutex_lock(&r->mu);
	}
	while (s->state != SLOT_READY)
		pthread_cond_wait(&r->cv, &r->mu);
	r->cons++;
	r->holding = true;
	pthread_mutex_unlock(&r->mu);
	if (s->status != CD_OK) {
		if (s->status != CD_END)
			cd_fail(err, s->status, "%s", s->msg);
		return s->status;
	}
	*buf = s->buf;
	*len = s->len;
	return CD_OK;
}

bool cd_reader_frame_cut(const struct cd_reader *r)
{
	return r->frame_cut;
}

void cd_reader_frames(const struct cd_reader *r, uint64_t *frames, uint64_t *unchecked)
{
	struct cd_reader *w = (struct cd_reader *)r;
	*frames = atomic_load(&w->frames);
	*unchecked = atomic_load(&w->unchecked);
}

bool cd_reader_is_zstd(const struct cd_reader *r)
{
	return r->zstd;
}

uint64_t cd_reader_file_bytes(const struct cd_reader *r)
{
	return atomic_load(&((struct cd_reader *)r)->file_bytes);
}

uint64_t cd_reader_data_bytes(const struct cd_reader *r)
{
	return atomic_load(&((struct cd_reader *)r)->data_bytes);
}

void cd_reader_close(struct cd_reader *r)
{
	if (!r)
		return;
	if (r->thread_started) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	for (int i = 0; i < NSLOTS; i++)
		free(r->slots[i].buf);
	free(r->carry);
	free(r->in);
	ZSTD_freeDCtx(r->dctx);
	if (r->own_file && r->f)
		fclose(r->f);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
}

long cd_reader_peek_file(const char *path, void *buf, size_t n)
{
	struct stat st;
	long got = -1;

	if (strcmp(path, "-") == 0)
		return -1;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		got = (long)read(fd, buf, n);
	close(fd);
	return got;
}
