/* The fast line parser: a strict, single-pass JSON object scanner that
 * stores known fields as it meets them and skips (while validating) the
 * rest.  No allocation per value: strings are slices of the line unless
 * they hold escapes, lists go to the parser's arena. */
#include "parse.h"
#include "fields.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct scan {
	const char *p, *start, *end;
	struct cd_parser *ps;
	struct cd_err *err;
};

static enum cd_status bad(struct scan *s, const char *what)
{
	if (s->err)
		s->err->column = (long long)(s->p - s->start) + 1;
	if (s->p >= s->end)
		return cd_fail(s->err, CD_ERR_FORMAT, "invalid JSON: %s, line ends early", what);
	return cd_fail(s->err, CD_ERR_FORMAT, "invalid JSON: %s", what);
}

static enum cd_status bad_field(struct scan *s, const char *key, const char *what)
{
	if (s->err)
		s->err->column = (long long)(s->p - s->start) + 1;
	return cd_fail(s->err, CD_ERR_TRACE, "field \"%s\" %s", key, what);
}

/* The keys met in one object, to refuse a key that comes twice: known keys
 * as bits, other keys in a list checked when the object ends. */
struct kpos {
	const char *p;
	uint32_t n;
	uint32_t at;   /* byte offset of the key's opening quote in the line */
};
struct keys {
	uint64_t known;
	struct kpos *v;
	uint32_t n, cap;
	const char *where;  /* "the event", "an args entry", ... */
};

static enum cd_status dup_key(struct scan *s, const char *p, uint32_t n, uint32_t at,
			      const char *where)
{
	if (s->err)
		s->err->column = (long long)at + 1;
	return cd_fail(s->err, CD_ERR_TRACE, "duplicate key \"%.*s\" in %s", (int)(n > 64 ? 64 : n),
		       p, where);
}

/* A key that is not known, starting at `at`: kept to be checked for
 * repeats when the object ends. */
static enum cd_status other_key_seen(struct scan *s, struct keys *k, struct cd_str key,
				     const char *at)
{
	if (k->n == k->cap) {
		uint32_t cap = k->cap ? 2 * k->cap : 8;
		struct kpos *nv = cd_arena_alloc(&s->ps->arena, cap * sizeof *nv);
		if (!nv)
			return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
		if (k->n)
			memcpy(nv, k->v, k->n * sizeof *nv);
		k->v = nv;
		k->cap = cap;
	}
	k->v[k->n++] = (struct kpos){key.p, key.n, (uint32_t)(at - s->start)};
	return CD_OK;
}

/* A known key (bit < 64) or another one (bit < 0), starting at `at`. */
static inline enum cd_status key_seen(struct scan *s, struct keys *k, int bit, struct cd_str key,
				      const char *at)
{
	if (bit < 0)
		return other_key_seen(s, k, key, at);
	if (k->known & (1ull << bit))
		return dup_key(s, key.p, key.n, (uint32_t)(at - s->start), k->where);
	k->known |= 1ull << bit;
	return CD_OK;
}

static int kpos_cmp(const void *a, const void *b)
{
	const struct kpos *x = a, *y = b;
	uint32_t n = x->n < y->n ? x->n : y->n;
	int c = n ? memcmp(x->p, y->p, n) : 0;
	if (c)
		return c;
	if (x->n != y->n)
		return x->n < y->n ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* At the end of an object: the first repeat of a key that is not known. */
static enum cd_status keys_done(struct scan *s, struct keys *k)
{
	if (k->n < 2)
		return CD_OK;
	qsort(k->v, k->n, sizeof *k->v, kpos_cmp);
	const struct kpos *first = NULL;
	for (uint32_t i = 1; i < k->n; i++)
		if (k->v[i].n == k->v[i - 1].n && memcmp(k->v[i].p, k->v[i - 1].p, k->v[i].n) == 0 &&
		    (!first || k->v[i].at < first->at))
			first = &k->v[i];
	return first ? dup_key(s, first->p, first->n, first->at, k->where) : CD_OK;
}

static inline void ws(struct scan *s)
{
	/* most calls find no whitespace at all */
	if (s->p < s->end && (unsigned char)*s->p > ' ')
		return;
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
		s->p++;
}

/* Bytes that end the fast string scan: '"', '\\', controls, non-ASCII. */
static const unsigned char str_stop[256] = {
	[0 ... 0x1F] = 1, ['"'] = 1, ['\\'] = 1, [0x80 ... 0xFF] = 1,
};

static inline bool lit(struct scan *s, const char *w, size_t n)
{
	if ((size_t)(s->end - s->p) >= n && memcmp(s->p, w, n) == 0) {
		s->p += n;
		return true;
	}
	return false;
}

/* Length of a valid UTF-8 sequence at p (first byte >= 0x80), 0 if invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned c = p[0];
	int n;
	unsigned min;
	unsigned cp;

	if (c >= 0xC2 && c <= 0xDF) {
		n = 2; min = 0x80; cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3; min = 0x800; cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4; min = 0x10000; cp = c & 0x07;
	} else {
		return 0;
	}
	if (end - p < n)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

static int hex4(const char *p)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

static char *put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		*o++ = (char)cp;
	} else if (cp < 0x800) {
		*o++ = (char)(0xC0 | (cp >> 6));
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*o++ = (char)(0xE0 | (cp >> 12));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else {
		*o++ = (char)(0xF0 | (cp >> 18));
		*o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	}
	return o;
}

/* Slow part of string scanning: the string holds an escape.  Decode it
 * into the arena.  s->p is at the opening quote's successor. */
static enum cd_status string_escaped(struct scan *s, struct cd_str *out)
{
	const char *q = s->p;
	char *buf = cd_arena_alloc(&s->ps->arena, (size_t)(s->end - q) + 1);
	char *o = buf;

	if (!buf)
		return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
	while (q < s->end) {
		unsigned char c = (unsigned char)*q;
		if (c == '"') {
			s->p = q + 1;
			out->p = buf;
			out->n = (uint32_t)(o - buf);
			return CD_OK;
		}
		if (c < 0x20) {
			s->p = q;
			return bad(s, "control character in string");
		}
		if (c >= 0x80) {
			int n = utf8_len((const unsigned char *)q, (const unsigned char *)s->end);
			if (!n) {
				s->p = q;
				return bad(s, "invalid UTF-8 in string");
			}
			memcpy(o, q, (size_t)n);
			o += n;
			q += n;
			continue;
		}
		if (c != '\\') {
			*o++ = (char)c;
			q++;
			continue;
		}
		if (s->end - q < 2) {
			s->p = s->end;
			return bad(s, "unterminated string");
		}
		switch (q[1]) {
		case '"': *o++ = '"'; q += 2; break;
		case '\\': *o++ = '\\'; q += 2; break;
		case '/': *o++ = '/'; q += 2; break;
		case 'b': *o++ = '\b'; q += 2; break;
		case 'f': *o++ = '\f'; q += 2; break;
		case 'n': *o++ = '\n'; q += 2; break;
		case 'r': *o++ = '\r'; q += 2; break;
		case 't': *o++ = '\t'; q += 2; break;
		case 'u': {
			int cp = s->end - q >= 6 ? hex4(q + 2) : -1;
			if (cp < 0) {
				s->p = q;
				return bad(s, "bad \\u escape");
			}
			q += 6;
			if (cp >= 0xDC00 && cp <= 0xDFFF) {
				s->p = q - 6;
				return bad(s, "lone low surrogate in \\u escape");
			}
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				int lo = (s->end - q >= 6 && q[0] == '\\' && q[1] == 'u') ? hex4(q + 2) : -1;
				if (lo < 0xDC00 || lo > 0xDFFF) {
					s->p = q - 6;
					return bad(s, "unpaired surrogate in \\u escape");
				}
				q += 6;
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			if (cp == 0) {
				s->p = q - 6;
				return bad(s, "NUL character in string");
			}
			o = put_utf8(o, (unsigned)cp);
			break;
		}
		default:
			s->p = q;
			return bad(s, "bad escape in string");
		}
	}
	s->p = s->end;
	return bad(s, "unterminated string");
}

/* The first byte from q on that ends a plain string ('"', '\\', a control
 * character or a non-ASCII byte), or end. */
static inline const char *plain_run(const char *q, const char *end)
{
#if defined(__SSE2__)
	/* 16 bytes at a time: a signed compare below 0x20 also catches 0x80-0xFF */
	const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
		      space = _mm_set1_epi8(0x20);
	while (end - q >= 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
		__m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote),
						      _mm_cmpeq_epi8(x, bslash)),
					 _mm_cmplt_epi8(x, space));
		unsigned bits = (unsigned)_mm_movemask_epi8(m);
		if (bits)
			return q + __builtin_ctz(bits);
		q += 16;
	}
#else
	while (end - q >= 4 && !(str_stop[(unsigned char)q[0]] | str_stop[(unsigned char)q[1]] |
				 str_stop[(unsigned char)q[2]] | str_stop[(unsigned char)q[3]]))
		q += 4;
#endif
	while (q < end && !str_stop[(unsigned char)*q])
		q++;
	return q;
}

/* s->p at '"'. */
static inline enum cd_status string(struct scan *s, struct cd_str *out)
{
	const char *q = plain_run(++s->p, s->end);

	/* fast path: plain ASCII, no escapes */
	if (q < s->end && *q == '"') {
		out->p = s->p;
		out->n = (uint32_t)(q - s->p);
		s->p = q + 1;
		return CD_OK;
	}
	return string_escaped(s, out);
}

/* Validate a JSON number at s->p; on success *is_int says whether it had
 * neither fraction nor exponent and, when *fits (its magnitude is at most
 * CD_T0_MAX; each field checks its own range), *v holds its value. */
static inline enum cd_status number(struct scan *s, bool *is_int, int64_t *v, bool *fits)
{
	const char *q = s->p;
	bool neg = false;
	uint64_t acc = 0;

	if (q < s->end && *q == '-') {
		neg = true;
		q++;
	}
	if (q >= s->end || (unsigned)(*q - '0') > 9) {
		s->p = q;
		return bad(s, "bad number");
	}
	const char *digits = q;
	if (*q == '0')
		q++;
	else
		/* 19 digits cannot wrap a uint64_t; more are out of range anyway */
		for (; q < s->end && (unsigned)(*q - '0') <= 9; q++)
			acc = acc * 10 + (unsigned)(*q - '0');
	*is_int = true;
	if (q < s->end && (*q == '.' || *q == 'e' || *q == 'E')) {
		if (*q == '.') {
			q++;
			if (q >= s->end || (unsigned)(*q - '0') > 9) {
				s->p = q;
				return bad(s, "bad number");
			}
			while (q < s->end && (unsigned)(*q - '0') <= 9)
				q++;
		}
		if (q < s->end && (*q == 'e' || *q == 'E')) {
			q++;
			if (q < s->end && (*q == '+' || *q == '-'))
				q++;
			if (q >= s->end || (unsigned)(*q - '0') > 9) {
				s->p = q;
				return bad(s, "bad number");
			}
			while (q < s->end && (unsigned)(*q - '0') <= 9)
				q++;
		}
		*is_int = false;
	}
	*fits = q - digits <= 19 && acc <= (uint64_t)CD_T0_MAX;
	*v = !*fits ? 0 : neg ? -(int64_t)acc : (int64_t)acc;
	s->p = q;
	return CD_OK;
}

/* Skip any JSON value, validating it.  Iterative, depth-limited. */
static enum cd_status skip_value(struct scan *s)
{
	char stack[128];
	int depth = 0;
	enum cd_status st;

	for (;;) {
		ws(s);
		if (s->p >= s->end)
			return bad(s, "value expected");
		char c = *s->p;
		if (c == '{' || c == '[') {
			if (depth == (int)sizeof stack) {
				return bad(s, "nesting deeper than 128 levels");
			}
			stack[depth++] = c;
			s->p++;
			ws(s);
			if (s->p < s->end && *s->p == (c == '{' ? '}' : ']')) {
				s->p++;
				depth--;
				goto after_value;
			}
			if (c == '{') {
				if (s->p >= s->end || *s->p != '"')
					return bad(s, "object key expected");
				struct cd_str k;
				if ((st = string(s, &k)))
					return st;
				ws(s);
				if (s->p >= s->end || *s->p != ':')
					return bad(s, "':' expected");
				s->p++;
			}
			continue;
		} else if (c == '"') {
			struct cd_str tmp;
			if ((st = string(s, &tmp)))
				return st;
		} else if (c == 't') {
			if (!lit(s, "true", 4))
				return bad(s, "bad literal");
		} else if (c == 'f') {
			if (!lit(s, "false", 5))
				return bad(s, "bad literal");
		} else if (c == 'n') {
			if (!lit(s, "null", 4))
				return bad(s, "bad literal");
		} else {
			bool is_int = false, fits = false;
			int64_t v;
			if ((st = number(s, &is_int, &v, &fits)))
				return st;
		}
after_value:
		for (;;) {
			if (depth == 0)
				return CD_OK;
			ws(s);
			if (s->p >= s->end)
				return bad(s, "',' or closing bracket expected");
			char top = stack[depth - 1];
			if (*s->p == ',') {
				s->p++;
				if (top == '{') {
					ws(s);
					if (s->p >= s->end || *s->p != '"')
						return bad(s, "object key expected");
					struct cd_str k;
					if ((st = string(s, &k)))
						return st;
					ws(s);
					if (s->p >= s->end || *s->p != ':')
						return bad(s, "':' expected");
					s->p++;
				}
				break;
			}
			if (*s->p == (top == '{' ? '}' : ']')) {
				s->p++;
				depth--;
				continue;
			}
			return bad(s, "',' or closing bracket expected");
		}
	}
}

static enum cd_status int_value(struct scan *s, const char *key, int64_t *v)
{
	bool is_int = false, fits = false;
	enum cd_status st;

	if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9')))
		return bad_field(s, key, "must be an integer");
	if ((st = number(s, &is_int, v, &fits)))
		return st;
	if (!is_int)
		return bad_field(s, key, "must be an integer");
	if (!fits)
		return bad_field(s, key, "is out of range");
	return CD_OK;
}

/* A list of integers into the arena. */
static enum cd_status int_list(struct scan *s, const char *key, uint32_t max, const int64_t **out,
			       uint32_t *n)
{
	enum cd_status st;
	uint32_t cap = 8, cnt = 0;
	int64_t *buf;

	if (s->p >= s->end || *s->p != '[')
		return bad_field(s, key, "must be a list of integers");
	s->p++;
	buf = cd_arena_alloc(&s->ps->arena, cap * sizeof *buf);
	if (!buf)
		return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
	ws(s);
	if (s->p < s->end && *s->p == ']') {
		s->p++;
		*out = buf;
		*n = 0;
		return CD_OK;
	}
	for (;;) {
		int64_t v;
		ws(s);
		if ((st = int_value(s, key, &v)))
			return st;
		if (cnt == max)
			return bad_field(s, key, "has too many entries");
		if (cnt == cap) {
			int64_t *nb = cd_arena_alloc(&s->ps->arena, 2 * cap * sizeof *nb);
			if (!nb)
				return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
			memcpy(nb, buf, cap * sizeof *nb);
			buf = nb;
			cap *= 2;
		}
		buf[cnt++] = v;
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == ']') {
			s->p++;
			break;
		}
		return bad(s, "',' or ']' expected");
	}
	*out = buf;
	*n = cnt;
	return CD_OK;
}

static enum cd_status str_value(struct scan *s, const char *key, struct cd_str *out)
{
	if (s->p >= s->end || *s->p != '"')
		return bad_field(s, key, "must be a string");
	return string(s, out);
}

static enum cd_status bool_value(struct scan *s, const char *key, bool *out)
{
	if (lit(s, "true", 4))
		*out = true;
	else if (lit(s, "false", 5))
		*out = false;
	else
		return bad_field(s, key, "must be true or false");
	return CD_OK;
}

static inline bool is_null(struct scan *s)
{
	return s->p < s->end && *s->p == 'n' && lit(s, "null", 4);
}

/* One object of an args or params list.  kind: 'a' or 'p'. */
static enum cd_status sub_object(struct scan *s, const char *key, char kind, struct cd_arg *a,
				 struct cd_param *p)
{
	enum cd_status st;
	struct keys seen = {.where = kind == 'a' ? "an args entry" : "a params entry"};

	if (s->p >= s->end || *s->p != '{')
		return bad_field(s, key, "must be a list of objects");
	s->p++;
	ws(s);
	if (s->p < s->end && *s->p == '}') {
		s->p++;
		return CD_OK;
	}
	for (;;) {
		struct cd_str k;
		ws(s);
		if (s->p >= s->end || *s->p != '"')
			return bad(s, "object key expected");
		const char *kat = s->p;
		if ((st = string(s, &k)))
			return st;
		enum cd_sub sub = cd_subfield_lookup(k.p, k.n);
		if ((st = key_seen(s, &seen, sub == CD_SUB_NONE ? -1 : (int)sub, k, kat)))
			return st;
		ws(s);
		if (s->p >= s->end || *s->p != ':')
			return bad(s, "':' expected");
		s->p++;
		ws(s);
		if (sub != CD_SUB_NONE && is_null(s))
			sub = CD_SUB_NONE; /* null: treated as absent */
		else if (sub == CD_SUB_NONE) {
			if ((st = skip_value(s)))
				return st;
		}
		switch (sub) {
		case CD_SUB_NONE:
			break;
		case CD_SUB_SHAPE:
			if (kind == 'a') {
				if ((st = int_list(s, "shape", CD_LIST_MAX, &a->shape, &a->ndim)))
					return st;
				a->has_shape = true;
			} else {
				if ((st = int_list(s, "shape", CD_LIST_MAX, &p->shape, &p->ndim)))
					return st;
				p->has_shape = true;
			}
			break;
		case CD_SUB_PLACEMENTS:
			if ((st = str_value(s, "placements", kind == 'a' ? &a->placements : &p->placements)))
				return st;
			break;
		case CD_SUB_MESH:
			if ((st = str_value(s, "mesh", kind == 'a' ? &a->mesh : &p->mesh)))
				return st;
			break;
		case CD_SUB_NAME:
		case CD_SUB_DTYPE:
		case CD_SUB_NBYTES:
		case CD_SUB_REQUIRES_GRAD:
			if (kind == 'a') {
				if ((st = skip_value(s)))
					return st;
			} else if (sub == CD_SUB_NAME) {
				if ((st = str_value(s, "name", &p->name)))
					return st;
			} else if (sub == CD_SUB_DTYPE) {
				if ((st = str_value(s, "dtype", &p->dtype)))
					return st;
			} else if (sub == CD_SUB_NBYTES) {
				if ((st = int_value(s, "nbytes", &p->nbytes)))
					return st;
			} else {
				if ((st = bool_value(s, "requires_grad", &p->requires_grad)))
					return st;
			}
			break;
		}
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			return keys_done(s, &seen);
		}
		return bad(s, "',' or '}' expected");
	}
}

static enum cd_status obj_list(struct scan *s, const char *key, char kind, void **out,
			       uint32_t *n)
{
	enum cd_status st;
	size_t elem = kind == 'a' ? sizeof(struct cd_arg) : sizeof(struct cd_param);
	uint32_t cap = 4, cnt = 0;
	unsigned char *buf;

	if (s->p >= s->end || *s->p != '[')
		return bad_field(s, key, "must be a list of objects");
	s->p++;
	buf = cd_arena_alloc(&s->ps->arena, cap * elem);
	if (!buf)
		return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
	ws(s);
	if (s->p < s->end && *s->p == ']') {
		s->p++;
		*out = buf;
		*n = 0;
		return CD_OK;
	}
	for (;;) {
		ws(s);
		if (cnt == CD_LIST_MAX)
			return bad_field(s, key, "has too many entries");
		if (cnt == cap) {
			unsigned char *nb = cd_arena_alloc(&s->ps->arena, 2 * cap * elem);
			if (!nb)
				return cd_fail(s->err, CD_ERR_NOMEM, "out of memory");
			memcpy(nb, buf, cap * elem);
			buf = nb;
			cap *= 2;
		}
		unsigned char *slot = buf + cnt * elem;
		memset(slot, 0, elem);
		if (kind == 'p')
			((struct cd_param *)slot)->nbytes = -1;
		if ((st = sub_object(s, key, kind, (struct cd_arg *)slot, (struct cd_param *)slot)))
			return st;
		cnt++;
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == ']') {
			s->p++;
			break;
		}
		return bad(s, "',' or ']' expected");
	}
	*out = buf;
	*n = cnt;
	return CD_OK;
}

/* ---- the lists met before ----
 * A DTensor op's args list repeats (the same ops on the same shapes, step
 * after step), and so does a module's params list.  Each such list read
 * whole is kept by its text (and, when it was decoded, its entries), up to
 * LC_MAX lists of at most LC_TEXT bytes and LC_BYTES in all: flat in the
 * trace's length.  A list whose text is byte for byte a kept one's is that
 * list, already checked and decoded: a JSON array ends at its own closing
 * bracket, so no other value can begin with all of its bytes. */
#define LC_BUCKETS 1024
#define LC_MAX 4096
#define LC_TEXT 4096
#define LC_BYTES (8u << 20)
#define LC_PREFIX 96

/* What a kept list is: only checked (skip_detail), or decoded as args or
 * as params. */
enum { LC_CHECKED, LC_ARGS, LC_PARAMS, LC_KINDS };

struct lc_entry {
	struct lc_entry *next;
	const char *text;
	uint32_t len;
	uint32_t n;          /* entries (decoded kinds) */
	const void *v;       /* struct cd_arg or struct cd_param [n] */
};

struct cd_list_cache {
	struct lc_entry *bucket[LC_KINDS][LC_BUCKETS];
	uint32_t count;
	size_t bytes;
};

/* The empty list (every op of a run without DTensors). */
static const struct cd_arg no_args[1];

static uint32_t lc_hash(const char *p, const char *end)
{
	size_t n = (size_t)(end - p) < LC_PREFIX ? (size_t)(end - p) : LC_PREFIX;
	/* only bytes of the list: the first ']' after its '[' is inside it
	 * (what follows the list, such as the event's time, changes per line) */
	const char *rb = memchr(p, ']', n);
	if (rb)
		n = (size_t)(rb - p) + 1;
	uint64_t h = 0x9E3779B97F4A7C15ull;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0xFF51AFD7ED558CCDull;
	}
	for (; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001B3ull;
	return (uint32_t)(h >> 40) & (LC_BUCKETS - 1);
}

/* The kept list of that kind whose text the bytes at p begin with, or NULL. */
static const struct lc_entry *lc_find(const struct cd_list_cache *c, int kind, const char *p,
				      const char *end, uint32_t h)
{
	for (const struct lc_entry *x = c->bucket[kind][h]; x; x = x->next)
		if (x->len <= (size_t)(end - p) && memcmp(x->text, p, x->len) == 0)
			return x;
	return NULL;
}

/* Bytes the strings of a decoded list need, and their copy (an absent
 * string, p NULL, stays absent). */
static size_t str_bytes(const struct cd_str *const *str, int k)
{
	size_t n = 0;
	for (int i = 0; i < k; i++)
		n += str[i]->n;
	return n;
}

static char *str_copy(struct cd_str *const *str, int k, char *bytes)
{
	for (int i = 0; i < k; i++) {
		if (!str[i]->p)
			continue;
		if (str[i]->n)
			memcpy(bytes, str[i]->p, str[i]->n);
		str[i]->p = bytes;
		bytes += str[i]->n;
	}
	return bytes;
}

/* The size of a kept copy of n entries at v of that kind (text apart). */
static size_t lc_size(int kind, const void *v, uint32_t n)
{
	size_t size = 0;
	for (uint32_t i = 0; kind == LC_ARGS && i < n; i++) {
		const struct cd_arg *a = (const struct cd_arg *)v + i;
		const struct cd_str *str[] = {&a->placements, &a->mesh};
		size += sizeof *a + a->ndim * sizeof *a->shape + str_bytes(str, 2);
	}
	for (uint32_t i = 0; kind == LC_PARAMS && i < n; i++) {
		const struct cd_param *p = (const struct cd_param *)v + i;
		const struct cd_str *str[] = {&p->name, &p->dtype, &p->placements, &p->mesh};
		size += sizeof *p + p->ndim * sizeof *p->shape + str_bytes(str, 4);
	}
	return size;
}

/* Keep the list text[0..len) (of that kind: its n decoded entries at v),
 * with a copy of everything it points to; quietly not when full or out of
 * memory (the cache only saves work). */
static void lc_add(struct cd_list_cache *c, int kind, uint32_t h, const char *text, size_t len,
		   const void *v, uint32_t n)
{
	if (!c || c->count >= LC_MAX || len > LC_TEXT)
		return;
	size_t size = sizeof(struct lc_entry) + len + lc_size(kind, v, n);
	if (c->bytes + size > LC_BYTES)
		return;
	struct lc_entry *x = malloc(size);
	if (!x)
		return;
	/* the entry, its entries, their shapes, then the bytes: text and strings */
	size_t elem = kind == LC_ARGS ? sizeof(struct cd_arg) : sizeof(struct cd_param);
	char *ents = (char *)(x + 1);
	int64_t *dims = (int64_t *)(void *)(ents + (kind == LC_CHECKED ? 0 : n * elem));
	for (uint32_t i = 0; kind != LC_CHECKED && i < n; i++)
		dims += kind == LC_ARGS ? ((const struct cd_arg *)v)[i].ndim
					: ((const struct cd_param *)v)[i].ndim;
	char *bytes = (char *)dims;
	dims = (int64_t *)(void *)(ents + (kind == LC_CHECKED ? 0 : n * elem));
	memcpy(bytes, text, len);
	x->text = bytes;
	x->len = (uint32_t)len;
	x->n = kind == LC_CHECKED ? 0 : n;
	x->v = ents;
	bytes += len;
	for (uint32_t i = 0; kind == LC_ARGS && i < n; i++) {
		struct cd_arg *a = (struct cd_arg *)(void *)ents + i;
		*a = ((const struct cd_arg *)v)[i];
		if (a->ndim)
			memcpy(dims, a->shape, a->ndim * sizeof *dims);
		a->shape = dims;
		dims += a->ndim;
		struct cd_str *str[] = {&a->placements, &a->mesh};
		bytes = str_copy(str, 2, bytes);
	}
	for (uint32_t i = 0; kind == LC_PARAMS && i < n; i++) {
		struct cd_param *p = (struct cd_param *)(void *)ents + i;
		*p = ((const struct cd_param *)v)[i];
		if (p->ndim)
			memcpy(dims, p->shape, p->ndim * sizeof *dims);
		p->shape = dims;
		dims += p->ndim;
		struct cd_str *str[] = {&p->name, &p->dtype, &p->placements, &p->mesh};
		bytes = str_copy(str, 4, bytes);
	}
	x->next = c->bucket[kind][h];
	c->bucket[kind][h] = x;
	c->count++;
	c->bytes += size;
}

/* The value of "args" (kind 'a') or "params" ('p') at s->p: from the kept
 * lists when it is one. */
static enum cd_status list_value(struct scan *s, const char *key, char kind, const void **v,
				 uint32_t *n)
{
	struct cd_parser *ps = s->ps;
	bool skip = ps->skip_detail;
	int lk = skip ? LC_CHECKED : kind == 'a' ? LC_ARGS : LC_PARAMS;
	enum cd_status st;

	if (s->p >= s->end || *s->p != '[') {
		/* not a list: read (and refused, unless skipped) the usual way */
		if (skip)
			return skip_value(s);
		void *got = NULL;
		st = obj_list(s, key, kind, &got, n);
		*v = got;
		return st;
	}
	if (s->end - s->p >= 2 && s->p[1] == ']') {
		s->p += 2;   /* the empty list: no lookup */
		if (!skip) {
			*v = no_args;
			*n = 0;
		}
		return CD_OK;
	}
	if (!ps->lcache)
		ps->lcache = calloc(1, sizeof *ps->lcache);
	uint32_t h = lc_hash(s->p, s->end);
	const struct lc_entry *x = ps->lcache ? lc_find(ps->lcache, lk, s->p, s->end, h) : NULL;
	if (x) {
		s->p += x->len;
		if (!skip) {
			*v = x->v;
			*n = x->n;
		}
		return CD_OK;
	}
	const char *start = s->p;
	void *got = NULL;
	uint32_t cnt = 0;
	st = skip ? skip_value(s) : obj_list(s, key, kind, &got, &cnt);
	if (!skip) {
		*v = got;
		*n = cnt;
	}
	if (!st)
		lc_add(ps->lcache, lk, h, start, (size_t)(s->p - start), got, cnt);
	return st;
}

/* "args" and "params" into the event (unless skipped). */
static enum cd_status args_value(struct scan *s, struct cd_event *e, const char *key)
{
	const void *v = NULL;
	uint32_t n = 0;
	enum cd_status st = list_value(s, key, 'a', &v, &n);
	if (!s->ps->skip_detail) {
		e->have |= CD_F_ARGS;
		e->args = v;
		e->nargs = n;
	}
	return st;
}

static enum cd_status params_value(struct scan *s, struct cd_event *e, const char *key)
{
	const void *v = NULL;
	uint32_t n = 0;
	enum cd_status st = list_value(s, key, 'p', &v, &n);
	if (!s->ps->skip_detail) {
		e->have |= CD_F_PARAMS;
		e->params = v;
		e->nparams = n;
	}
	return st;
}

static void lc_free(struct cd_list_cache *c)
{
	if (!c)
		return;
	for (int k = 0; k < LC_KINDS; k++)
		for (int i = 0; i < LC_BUCKETS; i++)
			for (struct lc_entry *x = c->bucket[k][i], *next; x; x = next) {
				next = x->next;
				free(x);
			}
	free(c);
}

static enum cd_status field_value(struct scan *s, struct cd_event *e, const struct cd_field *f)
{
	enum cd_status st;

	if (is_null(s))
		return CD_OK; /* null: treated as absent */
	switch (f->type) {
	case CD_FT_STR: {
		struct cd_str v;
		if ((st = str_value(s, f->key, &v)))
			return st;
		return cd_field_set_str(e, f, v, s->err);
	}
	case CD_FT_INT: {
		int64_t v;
		if ((st = int_value(s, f->key, &v)))
			return st;
		return cd_field_set_int(e, f, v, s->err);
	}
	case CD_FT_BOOL: {
		bool v;
		if ((st = bool_value(s, f->key, &v)))
			return st;
		cd_field_set_bool(e, f, v);
		return CD_OK;
	}
	case CD_FT_INTLIST:
		if (f->id == CD_FI_SHAPE) {
			e->have |= CD_F_SHAPE;
			return int_list(s, f->key, CD_LIST_MAX, &e->shape, &e->nshape);
		}
		e->have |= CD_F_RANKS;
		return int_list(s, f->key, CD_RANKS_MAX, &e->ranks, &e->nranks_list);
	case CD_FT_ARGS:
		return args_value(s, e, f->key);
	case CD_FT_PARAMS:
		return params_value(s, e, f->key);
	}
	return CD_OK;
}

/* A key at s->p written as the recorder writes it, quotes and colon
 * included ("bw":), for the keys of the frequent events: its field, with
 * s->p after the colon; NULL (s->p unchanged) for any other key, or one
 * written otherwise, which the general path reads. */
static inline const struct cd_field *hot_key(struct scan *s)
{
	const char *p = s->p;
	size_t left = (size_t)(s->end - p);
#define HOT(text, id)                                                                     \
	do {                                                                               \
		if (left > sizeof text - 1 && memcmp(p, text, sizeof text - 1) == 0) {     \
			s->p += sizeof text - 1;                                           \
			return cd_field_at(id);                                            \
		}                                                                          \
	} while (0)

	if (left < 4)
		return NULL;
	switch (p[1]) {
	case 't':
		HOT("\"t\":", CD_FI_T);
		HOT("\"type\":", CD_FI_TYPE);
		break;
	case 'b':
		HOT("\"bw\":", CD_FI_BW);
		HOT("\"bytes\":", CD_FI_BYTES);
		break;
	case 'd':
		HOT("\"dt\":", CD_FI_DT);
		HOT("\"dtype\":", CD_FI_DTYPE);
		break;
	case 'a':
		HOT("\"args\":", CD_FI_ARGS);
		break;
	case 'f':
		HOT("\"fake\":", CD_FI_FAKE);
		break;
	case 'm':
		HOT("\"mod\":", CD_FI_MOD);
		break;
	case 'p':
		HOT("\"params\":", CD_FI_PARAMS);
		HOT("\"pg\":", CD_FI_PG);
		break;
	case 's':
		HOT("\"seq\":", CD_FI_SEQ);
		HOT("\"shape\":", CD_FI_SHAPE);
		break;
	case 'g':
		HOT("\"grad_out\":", CD_FI_GRAD_OUT);
		HOT("\"grad_in\":", CD_FI_GRAD_IN);
		break;
	case 'e':
		HOT("\"ev\":", CD_FI_EV);
		break;
	case 'n':
		HOT("\"name\":", CD_FI_NAME);
		break;
	default:
		break;
	}
	return NULL;
#undef HOT
}

/* The members of the event object from s->p, which is just after its '{'
 * or a ',' (after_value false) or just after a member's value (true), to
 * the closing '}'. */
static enum cd_status members(struct scan *s, struct cd_event *e, struct keys *seen,
			      bool after_value)
{
	enum cd_status st;

	for (;;) {
		if (!after_value) {
			struct cd_str k;
			ws(s);
			if (s->p >= s->end || *s->p != '"')
				return bad(s, "object key expected");
			const char *kat = s->p;
			const struct cd_field *f = hot_key(s);
			bool colon = f != NULL;   /* hot_key took it */
			if (f) {
				k.p = kat + 1;
				k.n = f->len;
			} else {
				if ((st = string(s, &k)))
					return st;
				f = cd_field_lookup(k.p, k.n);
			}
			if ((st = key_seen(s, seen, f ? (int)f->id : -1, k, kat)))
				return st;
			if (!colon) {
				ws(s);
				if (s->p >= s->end || *s->p != ':')
					return bad(s, "':' expected");
				s->p++;
			}
			ws(s);
			if ((st = f ? field_value(s, e, f) : skip_value(s)))
				return st;
		}
		after_value = false;
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			return CD_OK;
		}
		return bad(s, "',' or '}' expected");
	}
}

/* The value of the 8 decimal digits at p, or -1 when they are not all
 * digits: a few word operations instead of a loop. */
static inline int64_t eight_digits(const char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t w;
	memcpy(&w, p, 8);
	/* every byte in '0'..'9': its high nibble is 3 and adding 6 keeps it so */
	if ((w & 0xF0F0F0F0F0F0F0F0ull) != 0x3030303030303030ull ||
	    ((w + 0x0606060606060606ull) & 0xF0F0F0F0F0F0F0F0ull) != 0x3030303030303030ull)
		return -1;
	w -= 0x3030303030303030ull;
	/* the first digit is the lowest byte: pairs, then fours, then eight */
	w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFull;
	w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFull;
	return (int64_t)((w & 0xFFFFFFFFull) * 10000 + (w >> 32));
#else
	int64_t v = 0;
	for (int i = 0; i < 8; i++) {
		if ((unsigned)(p[i] - '0') > 9)
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v;
#endif
}

/* "true" or "false" at p: 1 or 0, -1 for anything else. */
static inline int lit_bool(const char *p, const char *end)
{
	if (end - p >= 4 && memcmp(p, "true", 4) == 0)
		return 1;
	if (end - p >= 5 && memcmp(p, "false", 5) == 0)
		return 0;
	return -1;
}

/* A "t" of at most 15 digits (always in range) at *p, stored; false, *p
 * unchanged, for anything else (the general path reads it). */
static inline bool tail_time(const char **p, const char *end, struct cd_event *e)
{
	const char *q = *p, *digits = q;
	const char *lim = end - q > 16 ? q + 16 : end;
	int64_t v = 0, eight;
	if (q >= end || (unsigned)(*q - '0') > 9)
		return false;
	if (*q == '0') {
		q++;
	} else {
		if (lim - q >= 8 && (eight = eight_digits(q)) >= 0) {
			v = eight;
			q += 8;
		}
		for (; q < lim && (unsigned)(*q - '0') <= 9; q++)
			v = v * 10 + (*q - '0');
	}
	if (q - digits > 15 || q == end || (*q != ',' && *q != '}'))
		return false;
	e->t = v;
	e->have |= CD_F_T;
	*p = q;
	return true;
}

/* The value of tail key k at s->p (just after its colon), as the general
 * path would read it, stored; *taken false (s->p unchanged) when it is
 * written otherwise (null, another type, a long number): the general path
 * reads it then. */
/* (always inlined: each call site's id is a constant, its switch goes away) */
static inline __attribute__((always_inline)) enum cd_status
tail_value(struct scan *s, struct cd_event *e, enum cd_fid id, bool *taken)
{
	const char *end = s->end;
	int b;
	bool *flag;

	*taken = true;
	switch (id) {
	case CD_FI_MOD:
	case CD_FI_TYPE:
		if (s->p >= end || *s->p != '"')
			break;
		e->have |= id == CD_FI_MOD ? CD_F_MOD : CD_F_TYPE;
		return string(s, id == CD_FI_MOD ? &e->mod : &e->type);
	case CD_FI_ARGS:
	case CD_FI_PARAMS:
		if (s->p >= end || *s->p != '[')
			break;
		return id == CD_FI_ARGS ? args_value(s, e, "args") : params_value(s, e, "params");
	case CD_FI_T:
		if (tail_time(&s->p, end, e))
			return CD_OK;
		break;
	default:   /* the booleans */
		flag = id == CD_FI_BW ? &e->bw : id == CD_FI_DT ? &e->dt : id == CD_FI_FAKE ? &e->fake
		     : id == CD_FI_GRAD_IN ? &e->grad_in : &e->grad_out;
		if ((b = lit_bool(s->p, end)) < 0)
			break;
		*flag = b;
		s->p += b ? 4 : 5;
		return CD_OK;
	}
	*taken = false;
	return CD_OK;
}

/* Tail key id at s->p, its comma, quotes and colon n bytes of text: its
 * value taken (*stop false), or s->p left at its comma (*stop true) when
 * the value is written otherwise. */
static inline __attribute__((always_inline)) enum cd_status
tail_take(struct scan *s, struct cd_event *e, struct keys *seen, size_t n, enum cd_fid id,
	  bool *stop)
{
	const char *at = s->p;
	bool taken;
	enum cd_status st;

	s->p += n;
	seen->known |= 1ull << id;
	if ((st = tail_value(s, e, id, &taken)))
		return st;
	if (!taken) {
		/* back to its comma: the general loop reads it */
		seen->known &= ~(1ull << id);
		s->p = at;
		*stop = true;
	}
	return CD_OK;
}

/* The rest of a line from s->p, just after its first value(s), as the
 * recorder writes it: these members, each optional, none before one
 * above it, with commas, quotes and colons and no spaces.  Stops at the
 * first thing written otherwise, with s->p just after the last value
 * taken: the general loop (members) reads the rest.  *done: the line ended
 * there with its '}'. */
static enum cd_status tail(struct scan *s, struct cd_event *e, struct keys *seen, bool *done)
{
	enum cd_status st;
	bool stop = false;

	*done = false;
#define TAIL(text, id)                                                                     \
	if ((size_t)(s->end - s->p) > sizeof text - 1 &&                                    \
	    memcmp(s->p, text, sizeof text - 1) == 0) {                                    \
		if ((st = tail_take(s, e, seen, sizeof text - 1, id, &stop)))              \
			return st;                                                         \
		if (stop)                                                                  \
			return CD_OK;                                                      \
	}
	TAIL(",\"mod\":", CD_FI_MOD)
	TAIL(",\"type\":", CD_FI_TYPE)
	TAIL(",\"bw\":", CD_FI_BW)
	TAIL(",\"dt\":", CD_FI_DT)
	TAIL(",\"args\":", CD_FI_ARGS)
	TAIL(",\"params\":", CD_FI_PARAMS)
	TAIL(",\"fake\":", CD_FI_FAKE)
	TAIL(",\"grad_in\":", CD_FI_GRAD_IN)
	TAIL(",\"grad_out\":", CD_FI_GRAD_OUT)
	TAIL(",\"t\":", CD_FI_T)
#undef TAIL
	if (s->end - s->p == 1 && *s->p == '}') {
		s->p++;
		*done = true;
	}
	return CD_OK;
}

/* One line into e, which the caller cleared; seen: the fields set (also
 * on error). */
static enum cd_status scan_line(struct cd_parser *ps, const char *line, size_t n,
				struct cd_event *e, struct keys *seen, struct cd_err *err)
{
	struct scan s = {line, line, line + n, ps, err};
	enum cd_status st;

	if (ps->arena.used_in_head)   /* else nothing was taken since the last reset */
		cd_arena_reset(&ps->arena);
	if (err)
		err->column = 0;
	ws(&s);
	if (s.p >= s.end || *s.p != '{')
		return bad(&s, "a line must hold one JSON object");
	/* The hot shapes: an event as the recorder writes it starts with
	 * {"ev":"op","name":"...", or {"ev":"...", then its members in the
	 * order of tail_keys -- taken without key lookups; at the first thing
	 * written otherwise the general loop reads on from there. */
	static const char op_head[] = "{\"ev\":\"op\",\"name\":";
	static const char ev_head[] = "{\"ev\":";
	bool done;
	if ((size_t)(s.end - s.p) > sizeof op_head && memcmp(s.p, op_head, sizeof op_head - 1) == 0 &&
	    s.p[sizeof op_head - 1] == '"') {
		s.p += sizeof op_head - 1;
		seen->known = 1ull << CD_FI_EV | 1ull << CD_FI_NAME;
		e->ev = CD_EV_OP;
		e->have |= CD_F_EV | CD_F_NAME;
		if ((st = string(&s, &e->name)))
			return st;
	} else if ((size_t)(s.end - s.p) > sizeof ev_head &&
		   memcmp(s.p, ev_head, sizeof ev_head - 1) == 0 && s.p[sizeof ev_head - 1] == '"') {
		struct cd_str ev;
		s.p += sizeof ev_head - 1;
		seen->known = 1ull << CD_FI_EV;
		if ((st = string(&s, &ev)))
			return st;
		e->ev = cd_ev_from_str(ev.p, ev.n);
		e->have |= CD_F_EV;
	} else {
		s.p++;
		ws(&s);
		if (s.p < s.end && *s.p == '}')
			s.p++, st = CD_OK;
		else
			st = members(&s, e, seen, false);
		goto after;
	}
	if ((st = tail(&s, e, seen, &done)))
		return st;
	if (done)
		return cd_event_validate(e, err);
	st = members(&s, e, seen, true);
after:
	if (st)
		return st;
	ws(&s);
	if (s.p != s.end)
		return bad(&s, "text after the end of the object");
	if ((st = keys_done(&s, seen)))
		return st;
	return cd_event_validate(e, err);
}

enum cd_status cd_parse_fast(struct cd_parser *ps, const char *line, size_t n,
			     struct cd_event *e, struct cd_err *err)
{
	struct keys seen = {.where = "the event"};
	cd_event_clear(e);
	return scan_line(ps, line, n, e, &seen, err);
}

enum cd_status cd_parse_line(struct cd_parser *ps, const char *line, size_t n,
			     const struct cd_event **e, struct cd_err *err)
{
	enum cd_status st;

	*e = &ps->ev;
	if (ps->general) {
		st = cd_parse_general(ps, line, n, &ps->ev, err);
		ps->dirty = ~0ull;
		return st;
	}
	struct keys seen = {.where = "the event"};
	cd_event_clear_fields(&ps->ev, ps->dirty);
	st = scan_line(ps, line, n, &ps->ev, &seen, err);
	ps->dirty = seen.known;
	return st;
}

void cd_parser_free(struct cd_parser *ps)
{
	extern void cd_parse_general_release(struct cd_parser *ps);
	cd_parse_general_release(ps);
	cd_arena_free(&ps->arena);
	lc_free(ps->lcache);
	ps->lcache = NULL;
}
