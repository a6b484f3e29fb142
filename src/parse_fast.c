/* The fast line parser: a strict, single-pass JSON object scanner that
 * stores known fields as it meets them and skips (while validating) the
 * rest.  No allocation per value: strings are slices of the line unless
 * they hold escapes, lists go to the parser's arena. */
#include "parse.h"
#include "fields.h"

#include <stdlib.h>
#include <string.h>

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

/* A known key (bit < 64) or another one (bit < 0), starting at `at`. */
static enum cd_status key_seen(struct scan *s, struct keys *k, int bit, struct cd_str key,
			       const char *at)
{
	if (bit >= 0) {
		if (k->known & (1ull << bit))
			return dup_key(s, key.p, key.n, (uint32_t)(at - s->start), k->where);
		k->known |= 1ull << bit;
		return CD_OK;
	}
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

/* s->p at '"'. */
static inline enum cd_status string(struct scan *s, struct cd_str *out)
{
	const char *q = ++s->p;

	/* fast path: plain ASCII, no escapes */
	while (q + 4 <= s->end && !(str_stop[(unsigned char)q[0]] | str_stop[(unsigned char)q[1]] |
				    str_stop[(unsigned char)q[2]] | str_stop[(unsigned char)q[3]]))
		q += 4;
	while (q < s->end && !str_stop[(unsigned char)*q])
		q++;
	if (q < s->end && *q == '"') {
		out->p = s->p;
		out->n = (uint32_t)(q - s->p);
		s->p = q + 1;
		return CD_OK;
	}
	return string_escaped(s, out);
}

/* Validate a JSON number at s->p; on success *is_int says whether it had
 * neither fraction nor exponent and *v holds its value if it fits. */
static enum cd_status number(struct scan *s, bool *is_int, int64_t *v, bool *fits)
{
	const char *q = s->p;
	bool neg = false;
	uint64_t acc = 0;
	bool ovf = false;

	if (q < s->end && *q == '-') {
		neg = true;
		q++;
	}
	if (q >= s->end || *q < '0' || *q > '9') {
		s->p = q;
		return bad(s, "bad number");
	}
	if (*q == '0') {
		q++;
	} else {
		while (q < s->end && *q >= '0' && *q <= '9') {
			uint64_t d = (uint64_t)(*q - '0');
			/* past CD_T0_MAX is out of range: stop before acc * 10 wraps */
			if (ovf || acc > ((uint64_t)CD_T0_MAX - d) / 10)
				ovf = true;
			else
				acc = acc * 10 + d;
			q++;
		}
	}
	*is_int = true;
	if (q < s->end && *q == '.') {
		q++;
		if (q >= s->end || *q < '0' || *q > '9') {
			s->p = q;
			return bad(s, "bad number");
		}
		while (q < s->end && *q >= '0' && *q <= '9')
			q++;
		*is_int = false;
	}
	if (q < s->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < s->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= s->end || *q < '0' || *q > '9') {
			s->p = q;
			return bad(s, "bad number");
		}
		while (q < s->end && *q >= '0' && *q <= '9')
			q++;
		*is_int = false;
	}
	s->p = q;
	*fits = !ovf && acc <= (uint64_t)CD_T0_MAX; /* each field checks its own range */
	*v = neg ? -(int64_t)acc : (int64_t)acc;
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
			bool is_int, fits;
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
	bool is_int, fits;
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

static bool is_null(struct scan *s)
{
	return lit(s, "null", 4);
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
		if (s->ps->skip_detail)
			return skip_value(s);
		e->have |= CD_F_ARGS;
		return obj_list(s, f->key, 'a', (void **)&e->args, &e->nargs);
	case CD_FT_PARAMS:
		if (s->ps->skip_detail)
			return skip_value(s);
		e->have |= CD_F_PARAMS;
		return obj_list(s, f->key, 'p', (void **)&e->params, &e->nparams);
	}
	return CD_OK;
}

enum cd_status cd_parse_fast(struct cd_parser *ps, const char *line, size_t n,
			     struct cd_event *e, struct cd_err *err)
{
	struct scan s = {line, line, line + n, ps, err};
	struct keys seen = {.where = "the event"};
	enum cd_status st;

	cd_arena_reset(&ps->arena);
	cd_event_clear(e);
	if (err)
		err->column = 0;
	ws(&s);
	if (s.p >= s.end || *s.p != '{')
		return bad(&s, "a line must hold one JSON object");
	/* The hot shape: an op event as the recorder writes it starts with
	 * {"ev":"op","name":" -- take those two fields without key lookups;
	 * the general loop below then handles the rest of the line. */
	static const char op_head[] = "{\"ev\":\"op\",\"name\":";
	if ((size_t)(s.end - s.p) > sizeof op_head && memcmp(s.p, op_head, sizeof op_head - 1) == 0 &&
	    s.p[sizeof op_head - 1] == '"') {
		struct cd_str name;
		s.p += sizeof op_head - 1;
		if ((st = string(&s, &name)))
			return st;
		e->ev = CD_EV_OP;
		e->name = name;
		e->have |= CD_F_EV | CD_F_NAME;
		seen.known = 1ull << CD_FI_EV | 1ull << CD_FI_NAME;
		ws(&s);
		if (s.p < s.end && *s.p == ',') {
			s.p++;
			goto members;
		}
		if (s.p < s.end && *s.p == '}') {
			s.p++;
			goto done;
		}
		return bad(&s, "',' or '}' expected");
	}
	s.p++;
	ws(&s);
	if (s.p < s.end && *s.p == '}') {
		s.p++;
	} else {
members:
		for (;;) {
			struct cd_str k;
			ws(&s);
			if (s.p >= s.end || *s.p != '"')
				return bad(&s, "object key expected");
			const char *kat = s.p;
			if ((st = string(&s, &k)))
				return st;
			const struct cd_field *f = cd_field_lookup(k.p, k.n);
			if ((st = key_seen(&s, &seen, f ? (int)f->id : -1, k, kat)))
				return st;
			ws(&s);
			if (s.p >= s.end || *s.p != ':')
				return bad(&s, "':' expected");
			s.p++;
			ws(&s);
			if (f)
				st = field_value(&s, e, f);
			else
				st = skip_value(&s);
			if (st)
				return st;
			ws(&s);
			if (s.p < s.end && *s.p == ',') {
				s.p++;
				continue;
			}
			if (s.p < s.end && *s.p == '}') {
				s.p++;
				break;
			}
			return bad(&s, "',' or '}' expected");
		}
	}
done:
	ws(&s);
	if (s.p != s.end)
		return bad(&s, "text after the end of the object");
	if ((st = keys_done(&s, &seen)))
		return st;
	return cd_event_validate(e, err);
}

void cd_parser_free(struct cd_parser *ps)
{
	extern void cd_parse_general_release(struct cd_parser *ps);
	cd_parse_general_release(ps);
	cd_arena_free(&ps->arena);
}
