#include "out.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#define FLUSH_AT (1u << 20)

void cd_out_init(struct cd_out *o, FILE *f)
{
	memset(o, 0, sizeof *o);
	o->f = f;
}

void cd_out_free(struct cd_out *o)
{
	if (o->spill)
		fclose(o->spill);
	free(o->buf);
	free(o->stack);
	memset(o, 0, sizeof *o);
}

static void drain(struct cd_out *o)
{
	if (o->len && !o->failed && fwrite(o->buf, 1, o->len, o->f) != o->len) {
		o->failed = true;
		o->err_no = errno;
	}
	o->len = 0;
}

/* Held bytes past spill_at: into the temporary file. */
static void spill(struct cd_out *o)
{
	if (!o->spill && !(o->spill = cd_scratch_file())) {
		o->spill_at = 0;   /* no file to be had: hold on in memory */
		return;
	}
	if (o->len && !o->failed && fwrite(o->buf, 1, o->len, o->spill) != o->len) {
		o->failed = true;
		o->err_no = errno;
	}
	o->len = 0;
}

void cd_out_grow_(struct cd_out *o, size_t n)
{
	if (!o->hold && o->len >= FLUSH_AT / 2) {
		drain(o);
		if (o->cap - o->len >= n)
			return;
	}
	if (o->hold && o->spill_at && o->len >= o->spill_at) {
		spill(o);
		if (o->cap - o->len >= n)
			return;
	}
	size_t cap = o->cap ? o->cap : FLUSH_AT;
	while (cap - o->len < n)
		cap *= 2;
	char *nb = realloc(o->buf, cap);
	if (!nb) {
		o->failed = true;
		o->err_no = ENOMEM;
		return;
	}
	o->buf = nb;
	o->cap = cap;
}

enum cd_status cd_out_flush(struct cd_out *o, struct cd_err *err)
{
	drain(o);
	if (!o->failed && fflush(o->f) != 0) {
		o->failed = true;
		o->err_no = errno;
	}
	if (o->failed)
		return cd_fail(err, CD_ERR_IO, "cannot write the output: %s", strerror(o->err_no));
	return CD_OK;
}

void cd_out_discard(struct cd_out *o)
{
	o->len = 0;
	if (o->spill) {
		fclose(o->spill);
		o->spill = NULL;
	}
}

FILE *cd_scratch_file(void)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/tmp";
	size_t n = strlen(dir) + sizeof "/commdebug-XXXXXX";
	char *path = malloc(n);
	if (!path) {
		errno = ENOMEM;
		return NULL;
	}
	snprintf(path, n, "%s/commdebug-XXXXXX", dir);
	int fd = mkstemp(path);
	int e = errno;
	if (fd >= 0)
		unlink(path);   /* gone with the last descriptor, even on a crash */
	free(path);
	if (fd < 0) {
		errno = e;
		return NULL;
	}
	FILE *f = fdopen(fd, "w+b");
	if (!f) {
		e = errno;
		close(fd);
		errno = e;
	}
	return f;
}

void cd_out_spill_at(struct cd_out *o, size_t at)
{
	o->spill_at = at;
}

void cd_out_append(struct cd_out *dst, struct cd_out *src, size_t skip)
{
	if (src->failed && !dst->failed) {
		dst->failed = true;
		dst->err_no = src->err_no;
	}
	if (src->spill) {
		char buf[1 << 16];
		size_t got;
		if (fflush(src->spill) != 0 || fseek(src->spill, 0, SEEK_SET) != 0) {
			dst->failed = true;
			dst->err_no = errno;
		}
		while (!dst->failed && (got = fread(buf, 1, sizeof buf, src->spill)) > 0) {
			size_t k = skip < got ? skip : got;
			skip -= k;
			cd_out_write(dst, buf + k, got - k);
		}
		if (ferror(src->spill)) {
			dst->failed = true;
			dst->err_no = EIO;
		}
		fclose(src->spill);
		src->spill = NULL;
	}
	if (skip < src->len)
		cd_out_write(dst, src->buf + skip, src->len - skip);
	src->len = 0;
}

void cd_out_printf(struct cd_out *o, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof tmp) {
		cd_out_write(o, tmp, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		o->failed = true;
		o->err_no = ENOMEM;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	cd_out_write(o, big, (size_t)n);
	free(big);
}

void cd_out_i64(struct cd_out *o, int64_t v)
{
	char tmp[24];
	char *e = tmp + sizeof tmp, *p = e;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	cd_out_write(o, p, (size_t)(e - p));
}

/* ---- Python json layout ---- */

static void item(struct cd_out *o)
{
	if (!o->depth)
		return;
	if (o->stack[o->depth - 1].count++)
		cd_out_write(o, ",", 1);
	cd_out_write(o, "\n", 1);
	cd_out_spaces(o, 4 * (size_t)o->depth);
}

/* After a key the value follows directly; mark that with count's high bit. */
#define AFTER_KEY 0x80000000u

static void value_prefix(struct cd_out *o)
{
	if (o->depth && (o->stack[o->depth - 1].count & AFTER_KEY)) {
		o->stack[o->depth - 1].count &= ~AFTER_KEY;
		return;
	}
	item(o);
}

static void begin(struct cd_out *o, char open, char close)
{
	value_prefix(o);
	if (o->depth == o->stack_cap) {
		uint32_t cap = o->stack_cap ? o->stack_cap * 2 : 32;
		void *ns = realloc(o->stack, cap * sizeof *o->stack);
		if (!ns) {
			o->failed = true;
			o->err_no = ENOMEM;
			return;
		}
		o->stack = ns;
		o->stack_cap = cap;
	}
	o->stack[o->depth].count = 0;
	o->stack[o->depth].close = close;
	o->depth++;
	cd_out_write(o, &open, 1);
}

void cd_pj_prime(struct cd_out *o, uint32_t depth)
{
	for (uint32_t i = 0; i < depth; i++) {
		begin(o, '[', ']');
		if (o->depth)
			o->stack[o->depth - 1].count = 1;
	}
	o->len = 0;
}

void cd_pj_begin_obj(struct cd_out *o)
{
	begin(o, '{', '}');
}

void cd_pj_begin_arr(struct cd_out *o)
{
	begin(o, '[', ']');
}

void cd_pj_end(struct cd_out *o)
{
	if (!o->depth)
		return;
	o->depth--;
	if (o->stack[o->depth].count) {
		cd_out_write(o, "\n", 1);
		cd_out_spaces(o, 4 * (size_t)o->depth);
	}
	cd_out_write(o, &o->stack[o->depth].close, 1);
}

void cd_pj_key(struct cd_out *o, const char *key)
{
	item(o);
	cd_pj_escape(o, key, strlen(key));
	cd_out_write(o, ": ", 2);
	if (o->depth)
		o->stack[o->depth - 1].count |= AFTER_KEY;
}

void cd_pj_str(struct cd_out *o, const char *s, size_t n)
{
	value_prefix(o);
	cd_pj_escape(o, s, n);
}

void cd_pj_cstr(struct cd_out *o, const char *s)
{
	cd_pj_str(o, s, strlen(s));
}

void cd_pj_int(struct cd_out *o, int64_t v)
{
	value_prefix(o);
	cd_out_i64(o, v);
}

void cd_pj_bool(struct cd_out *o, bool v)
{
	value_prefix(o);
	if (v)
		cd_out_write(o, "true", 4);
	else
		cd_out_write(o, "false", 5);
}

void cd_pj_raw(struct cd_out *o, const char *s, size_t n)
{
	value_prefix(o);
	cd_out_write(o, s, n);
}

void cd_pj_raw_n(struct cd_out *o, const char *s, size_t n, uint64_t count)
{
	if (!count)
		return;
	cd_pj_raw(o, s, n);
	if (--count == 0 || !o->depth)
		return;
	/* the rest: ",\n", the indent, the text, as item() and cd_pj_raw write
	 * them (the container holds an item now) */
	size_t indent = 4 * (size_t)o->depth, one = 2 + indent + n;
	while (count && !o->failed) {
		uint64_t k = count;
		if (k > (FLUSH_AT + one - 1) / one)
			k = (FLUSH_AT + one - 1) / one;   /* a buffer's worth at a time */
		if (o->cap - o->len < k * one)
			cd_out_grow_(o, k * one);
		if (o->cap - o->len < k * one)
			return;   /* out of memory: failed is set */
		char *d = o->buf + o->len;
		for (uint64_t i = 0; i < k; i++) {
			d[0] = ',';
			d[1] = '\n';
			memset(d + 2, ' ', indent);
			memcpy(d + 2 + indent, s, n);
			d += one;
		}
		o->len += k * one;
		o->stack[o->depth - 1].count += (uint32_t)k;
		count -= k;
	}
}

static void u_escape(struct cd_out *o, unsigned v)
{
	static const char hex[] = "0123456789abcdef";
	char b[6] = {'\\', 'u', hex[(v >> 12) & 15], hex[(v >> 8) & 15], hex[(v >> 4) & 15],
		     hex[v & 15]};
	cd_out_write(o, b, 6);
}

/* Decode one UTF-8 character; invalid bytes decode as U+FFFD. */
static unsigned utf8_next(const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp;
	unsigned c = *p;
	int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
	if (n == 1 || end - p < n) {
		*pp = p + 1;
		return 0xFFFD;
	}
	unsigned cp = c & (0x7F >> n);
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80) {
			*pp = p + 1;
			return 0xFFFD;
		}
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	*pp = p + n;
	return cp;
}

/* Are the 8 bytes at s all printable ASCII other than '"' and '\\' (none
 * to escape)?  Word operations: a byte below 0x20 borrows into its high
 * bit, '"', '\\' and 0x7F are zero bytes after an xor, and bytes from 0x80
 * have it set already (they also spoil the borrow tests, but the answer is
 * no then anyway). */
static inline bool plain8(const char *s)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t w, q, b, d;
	memcpy(&w, s, 8);
	q = w ^ (ones * '"');
	b = w ^ (ones * '\\');
	d = w ^ (ones * 0x7F);
	return !((((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) |
		  ((d - ones) & ~d) | w) & high);
}

void cd_pj_escape(struct cd_out *o, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	/* most strings need no escape: the quotes and the bytes in one go */
	size_t plain = 0;
	while (plain + 8 <= n && plain8(s + plain))
		plain += 8;
	while (plain < n && p[plain] >= 0x20 && p[plain] < 0x7F && p[plain] != '"' &&
	       p[plain] != '\\')
		plain++;
	if (plain == n) {
		if (o->cap - o->len < n + 2)
			cd_out_grow_(o, n + 2);
		if (o->cap - o->len < n + 2)
			return;
		o->buf[o->len] = '"';
		memcpy(o->buf + o->len + 1, s, n);
		o->buf[o->len + 1 + n] = '"';
		o->len += n + 2;
		return;
	}
	cd_out_write(o, "\"", 1);
	cd_out_write(o, s, plain);   /* what the scan above found plain */
	p += plain;
	while (p < end) {
		const unsigned char *run = p;
		while (p < end && *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\')
			p++;
		if (p > run)
			cd_out_write(o, (const char *)run, (size_t)(p - run));
		if (p >= end)
			break;
		unsigned c = *p;
		switch (c) {
		case '"': cd_out_write(o, "\\\"", 2); p++; continue;
		case '\\': cd_out_write(o, "\\\\", 2); p++; continue;
		case '\n': cd_out_write(o, "\\n", 2); p++; continue;
		case '\r': cd_out_write(o, "\\r", 2); p++; continue;
		case '\t': cd_out_write(o, "\\t", 2); p++; continue;
		case '\b': cd_out_write(o, "\\b", 2); p++; continue;
		case '\f': cd_out_write(o, "\\f", 2); p++; continue;
		default: break;
		}
		if (c < 0x80) {
			u_escape(o, c);
			p++;
			continue;
		}
		unsigned cp = utf8_next(&p, end);
		if (cp >= 0x10000) {
			cp -= 0x10000;
			u_escape(o, 0xD800 | (cp >> 10));
			u_escape(o, 0xDC00 | (cp & 0x3FF));
		} else {
			u_escape(o, cp);
		}
	}
	cd_out_write(o, "\"", 1);
}
