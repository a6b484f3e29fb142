/* A safe reader of plain-data pickles and JSON (pickle.h). */
#include "pickle.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cd_pv_kind_names[] = {
	"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict",
};

/* ---- the arena: values in blocks; their strings and item arrays malloc'd */

#define BLOCK_VALUES 1024
struct cd_pv_block {
	struct cd_pv_block *next;
	size_t used;
	struct cd_pv v[BLOCK_VALUES];
};
struct cd_pv_arena {
	struct cd_pv_block *head;
	uint64_t values;
};

static struct cd_pv *pv_new(struct cd_pv_arena *a, enum cd_pv_kind k)
{
	if (!a->head || a->head->used == BLOCK_VALUES) {
		struct cd_pv_block *b = malloc(sizeof *b);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		a->head = b;
	}
	struct cd_pv *v = &a->head->v[a->head->used++];
	memset(v, 0, sizeof *v);
	v->kind = k;
	v->depth = 1;
	v->weight = 1;
	a->values++;
	return v;
}

static void arena_free(struct cd_pv_arena *a)
{
	if (!a)
		return;
	struct cd_pv_block *b = a->head;
	while (b) {
		struct cd_pv_block *next = b->next;
		for (size_t i = 0; i < b->used; i++) {
			struct cd_pv *v = &b->v[i];
			if (v->kind == CD_PV_STR || v->kind == CD_PV_BYTES)
				free(v->u.s.p);
			else if (v->kind >= CD_PV_LIST)
				free(v->u.c.v);
		}
		free(b);
		b = next;
	}
	free(a);
}

void cd_pv_doc_free(struct cd_pv_doc *doc)
{
	if (!doc)
		return;
	arena_free(doc->arena);
	doc->arena = NULL;
	doc->root = NULL;
}

/* Place child in parent (a container not yet frozen): the checks that keep
 * the tree acyclic and bounded.  Returns NULL or a reason. */
static const char *place(struct cd_pv *parent, struct cd_pv *child)
{
	if (parent->frozen)
		return "changes a container already placed in another (a recursive structure)";
	if (child == parent)
		return "places a container inside itself";
	if (parent->u.c.n >= CD_PV_MAX_ITEMS)
		return "makes a container of more than " "16777216 items";
	if (child->depth + 1 > CD_PV_MAX_DEPTH)
		return "nests values more than 64 deep";
	if (parent->weight + child->weight > CD_PV_MAX_NODES)
		return "makes a tree of more than 16777216 values (shared ones counted each time)";
	if (parent->u.c.n == parent->u.c.cap) {
		size_t cap = parent->u.c.cap ? parent->u.c.cap * 2 : 4;
		struct cd_pv **nv = realloc(parent->u.c.v, cap * sizeof *nv);
		if (!nv)
			return "runs out of memory";
		parent->u.c.v = nv;
		parent->u.c.cap = cap;
	}
	parent->u.c.v[parent->u.c.n++] = child;
	child->frozen = true;
	if (child->depth + 1 > parent->depth)
		parent->depth = child->depth + 1;
	parent->weight += child->weight;
	return NULL;
}

static bool hashable(const struct cd_pv *k)
{
	if (k->kind == CD_PV_LIST || k->kind == CD_PV_DICT)
		return false;
	if (k->kind == CD_PV_TUPLE)
		for (size_t i = 0; i < k->u.c.n; i++)
			if (!hashable(k->u.c.v[i]))
				return false;
	return true;
}

/* ---- pickle */

static const char *op_name(uint8_t op)
{
	switch (op) {
	case '(': return "MARK";
	case '.': return "STOP";
	case '0': return "POP";
	case '1': return "POP_MARK";
	case '2': return "DUP";
	case 'F': return "FLOAT";
	case 'I': return "INT";
	case 'J': return "BININT";
	case 'K': return "BININT1";
	case 'L': return "LONG";
	case 'M': return "BININT2";
	case 'N': return "NONE";
	case 'P': return "PERSID";
	case 'Q': return "BINPERSID";
	case 'R': return "REDUCE";
	case 'S': return "STRING";
	case 'T': return "BINSTRING";
	case 'U': return "SHORT_BINSTRING";
	case 'V': return "UNICODE";
	case 'X': return "BINUNICODE";
	case 'a': return "APPEND";
	case 'b': return "BUILD";
	case 'c': return "GLOBAL";
	case 'd': return "DICT";
	case '}': return "EMPTY_DICT";
	case 'e': return "APPENDS";
	case 'g': return "GET";
	case 'h': return "BINGET";
	case 'i': return "INST";
	case 'j': return "LONG_BINGET";
	case 'l': return "LIST";
	case ']': return "EMPTY_LIST";
	case 'o': return "OBJ";
	case 'p': return "PUT";
	case 'q': return "BINPUT";
	case 'r': return "LONG_BINPUT";
	case 's': return "SETITEM";
	case 't': return "TUPLE";
	case ')': return "EMPTY_TUPLE";
	case 'u': return "SETITEMS";
	case 'G': return "BINFLOAT";
	case 'B': return "BINBYTES";
	case 'C': return "SHORT_BINBYTES";
	case 0x80: return "PROTO";
	case 0x81: return "NEWOBJ";
	case 0x82: return "EXT1";
	case 0x83: return "EXT2";
	case 0x84: return "EXT4";
	case 0x85: return "TUPLE1";
	case 0x86: return "TUPLE2";
	case 0x87: return "TUPLE3";
	case 0x88: return "NEWTRUE";
	case 0x89: return "NEWFALSE";
	case 0x8a: return "LONG1";
	case 0x8b: return "LONG4";
	case 0x8c: return "SHORT_BINUNICODE";
	case 0x8d: return "BINUNICODE8";
	case 0x8e: return "BINBYTES8";
	case 0x8f: return "EMPTY_SET";
	case 0x90: return "ADDITEMS";
	case 0x91: return "FROZENSET";
	case 0x92: return "NEWOBJ_EX";
	case 0x93: return "STACK_GLOBAL";
	case 0x94: return "MEMOIZE";
	case 0x95: return "FRAME";
	case 0x96: return "BYTEARRAY8";
	case 0x97: return "NEXT_BUFFER";
	case 0x98: return "READONLY_BUFFER";
	default: return NULL;
	}
}

struct pk {
	const uint8_t *d;
	size_t len, pos, op_at;
	uint8_t op;
	struct cd_pv_arena *a;
	struct cd_pv **st;
	size_t n, cap;
	size_t *marks;
	size_t nmarks, capmarks;
	struct cd_pv **memo;
	size_t nmemo, capmemo;
	struct cd_err *err;
};

static enum cd_status pk_fail(struct pk *p, enum cd_status st, const char *what)
{
	const char *name = op_name(p->op);
	char ch[8] = "";
	if (p->op >= 0x20 && p->op < 0x7f)
		snprintf(ch, sizeof ch, " '%c'", p->op);
	return cd_fail(p->err, st, "offset %zu: opcode 0x%02x%s (%s) %s", p->op_at, p->op, ch,
		       name ? name : "unknown", what);
}

static bool need(struct pk *p, size_t k)
{
	return p->len - p->pos >= k;
}

static uint64_t le(const uint8_t *b, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static enum cd_status push(struct pk *p, struct cd_pv *v)
{
	if (!v)
		return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
	if (p->n == p->cap) {
		if (p->cap >= CD_PV_MAX_ITEMS)
			return pk_fail(p, CD_ERR_LIMIT, "leaves more than 16777216 values on the stack");
		size_t cap = p->cap ? p->cap * 2 : 64;
		struct cd_pv **ns = realloc(p->st, cap * sizeof *ns);
		if (!ns)
			return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
		p->st = ns;
		p->cap = cap;
	}
	p->st[p->n++] = v;
	return CD_OK;
}

/* The index of the stack where the values above the top mark start. */
static size_t fence(const struct pk *p)
{
	return p->nmarks ? p->marks[p->nmarks - 1] : 0;
}

static enum cd_status pop_mark(struct pk *p, size_t *at)
{
	if (!p->nmarks)
		return pk_fail(p, CD_ERR_FORMAT, "has no MARK before it");
	*at = p->marks[--p->nmarks];
	return CD_OK;
}

static enum cd_status put_memo(struct pk *p, uint64_t idx)
{
	if (p->n == fence(p))
		return pk_fail(p, CD_ERR_FORMAT, "stores an empty stack in the memo");
	if (idx >= CD_PV_MAX_MEMO)
		return pk_fail(p, CD_ERR_LIMIT, "uses a memo index over 4194303");
	if (idx >= p->capmemo) {
		size_t cap = p->capmemo ? p->capmemo : 64;
		while (cap <= idx)
			cap *= 2;
		struct cd_pv **nm = realloc(p->memo, cap * sizeof *nm);
		if (!nm)
			return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
		memset(nm + p->capmemo, 0, (cap - p->capmemo) * sizeof *nm);
		p->memo = nm;
		p->capmemo = cap;
	}
	p->memo[idx] = p->st[p->n - 1];
	if (idx >= p->nmemo)
		p->nmemo = idx + 1;
	return CD_OK;
}

static enum cd_status seq_from(struct pk *p, size_t from, enum cd_pv_kind k)
{
	struct cd_pv *t = pv_new(p->a, k);
	if (!t)
		return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
	for (size_t i = from; i < p->n; i++) {
		const char *why = place(t, p->st[i]);
		if (why)
			return pk_fail(p, CD_ERR_LIMIT, why);
	}
	p->n = from;
	return push(p, t);
}

static enum cd_status add_items(struct pk *p, struct cd_pv *c, size_t from, bool pairs)
{
	if (c->kind != (pairs ? CD_PV_DICT : CD_PV_LIST))
		return pk_fail(p, CD_ERR_FORMAT, pairs ? "sets items of something not a dict"
						       : "appends to something not a list");
	if (pairs && (p->n - from) % 2)
		return pk_fail(p, CD_ERR_FORMAT, "has a key without a value");
	for (size_t i = from; i < p->n; i++) {
		if (pairs && (i - from) % 2 == 0 && !hashable(p->st[i]))
			return pk_fail(p, CD_ERR_FORMAT, "uses an unhashable key");
		const char *why = place(c, p->st[i]);
		if (why)
			return pk_fail(p, c->frozen ? CD_ERR_FORMAT : CD_ERR_LIMIT, why);
	}
	p->n = from;
	return CD_OK;
}

static enum cd_status bytes_val(struct pk *p, uint64_t n, enum cd_pv_kind k)
{
	if (!need(p, n))
		return pk_fail(p, CD_ERR_FORMAT, "is cut: its length runs past the end of the data");
	struct cd_pv *v = pv_new(p->a, k);
	if (!v)
		return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
	v->u.s.p = malloc(n + 1);
	if (!v->u.s.p)
		return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
	memcpy(v->u.s.p, p->d + p->pos, n);
	v->u.s.p[n] = 0;
	v->u.s.len = n;
	p->pos += n;
	return push(p, v);
}

static enum cd_status int_val(struct pk *p, int64_t i)
{
	struct cd_pv *v = pv_new(p->a, CD_PV_INT);
	if (v)
		v->u.i = i;
	return push(p, v);
}

/* Bytes of the argument each opcode takes before any length it names. */
static int arg_len(uint8_t op)
{
	switch (op) {
	case 0x80: case 'K': case 'h': case 'q': case 'C': case 0x8c: case 0x8a: return 1;
	case 'M': return 2;
	case 'J': case 'j': case 'r': case 'X': case 'B': case 0x8b: return 4;
	case 'G': case 0x8d: case 0x8e: case 0x95: return 8;
	default: return 0;
	}
}

static enum cd_status step(struct pk *p, bool *stop)
{
	enum cd_status st = CD_OK;
	size_t at = 0;
	p->op_at = p->pos;
	p->op = p->d[p->pos++];
	int al = arg_len(p->op);
	if (!need(p, (size_t)al))
		return pk_fail(p, CD_ERR_FORMAT, "is cut: its argument runs past the end of the data");
	const uint8_t *a = p->d + p->pos;
	p->pos += (size_t)al;
	if (p->op_at == 0 && p->op != 0x80)
		return pk_fail(p, CD_ERR_FORMAT, "starts the data: a pickle of protocol 2 to 5 starts with PROTO");
	switch (p->op) {
	case 0x80:
		if (p->op_at != 0)
			return pk_fail(p, CD_ERR_FORMAT, "is not at the start");
		if (a[0] < 2 || a[0] > 5)
			return pk_fail(p, CD_ERR_FORMAT, "names a protocol other than 2 to 5");
		return CD_OK;
	case 0x95: /* FRAME: the data is read whole; the frame needs only to fit */
		if (le(a, 8) > p->len - p->pos)
			return pk_fail(p, CD_ERR_FORMAT, "is cut: its frame runs past the end of the data");
		return CD_OK;
	case '.':
		if (p->nmarks || p->n != 1)
			return pk_fail(p, CD_ERR_FORMAT, "does not leave exactly one value");
		*stop = true;
		return CD_OK;
	case '(':
		if (p->nmarks == p->capmarks) {
			if (p->capmarks >= CD_PV_MAX_DEPTH * 4)
				return pk_fail(p, CD_ERR_LIMIT, "opens more than 256 marks");
			size_t cap = p->capmarks ? p->capmarks * 2 : 16;
			size_t *nm = realloc(p->marks, cap * sizeof *nm);
			if (!nm)
				return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
			p->marks = nm;
			p->capmarks = cap;
		}
		p->marks[p->nmarks++] = p->n;
		return CD_OK;
	case '0':
		if (p->n > fence(p))
			p->n--;
		else if (p->nmarks)
			p->nmarks--;
		else
			return pk_fail(p, CD_ERR_FORMAT, "pops an empty stack");
		return CD_OK;
	case '1':
		if ((st = pop_mark(p, &at)))
			return st;
		p->n = at;
		return CD_OK;
	case '2':
		if (p->n == fence(p))
			return pk_fail(p, CD_ERR_FORMAT, "copies from an empty stack");
		return push(p, p->st[p->n - 1]);
	case 'N': return push(p, pv_new(p->a, CD_PV_NONE));
	case 0x88: case 0x89: {
		struct cd_pv *v = pv_new(p->a, CD_PV_BOOL);
		if (v)
			v->u.b = p->op == 0x88;
		return push(p, v);
	}
	case 'K': return int_val(p, a[0]);
	case 'M': return int_val(p, (int64_t)le(a, 2));
	case 'J': return int_val(p, (int32_t)(uint32_t)le(a, 4));
	case 0x8a: case 0x8b: {
		uint64_t n = p->op == 0x8a ? a[0] : le(a, 4);
		if (!need(p, n))
			return pk_fail(p, CD_ERR_FORMAT, "is cut: its length runs past the end of the data");
		if (n > 8)
			return pk_fail(p, CD_ERR_LIMIT, "holds an integer wider than 64 bits");
		uint64_t v = le(p->d + p->pos, (int)n);
		if (n && n < 8 && (p->d[p->pos + n - 1] & 0x80))
			v |= ~(uint64_t)0 << (8 * n);
		p->pos += n;
		return int_val(p, (int64_t)v);
	}
	case 'G': {
		uint64_t bits = 0;
		for (int i = 0; i < 8; i++)
			bits = bits << 8 | a[i];
		struct cd_pv *v = pv_new(p->a, CD_PV_FLOAT);
		if (v)
			memcpy(&v->u.f, &bits, sizeof v->u.f);
		return push(p, v);
	}
	case 0x8c: return bytes_val(p, a[0], CD_PV_STR);
	case 'X': return bytes_val(p, le(a, 4), CD_PV_STR);
	case 0x8d: return bytes_val(p, le(a, 8), CD_PV_STR);
	case 'C': return bytes_val(p, a[0], CD_PV_BYTES);
	case 'B': return bytes_val(p, le(a, 4), CD_PV_BYTES);
	case 0x8e: return bytes_val(p, le(a, 8), CD_PV_BYTES);
	case '}': return push(p, pv_new(p->a, CD_PV_DICT));
	case ']': return push(p, pv_new(p->a, CD_PV_LIST));
	case ')': return push(p, pv_new(p->a, CD_PV_TUPLE));
	case 0x85: case 0x86: case 0x87: {
		size_t k = (size_t)(p->op - 0x84);
		if (p->n - fence(p) < k)
			return pk_fail(p, CD_ERR_FORMAT, "needs more values than the stack holds");
		return seq_from(p, p->n - k, CD_PV_TUPLE);
	}
	case 't': case 'l': case 'd':
		if ((st = pop_mark(p, &at)))
			return st;
		if (p->op != 'd')
			return seq_from(p, at, p->op == 't' ? CD_PV_TUPLE : CD_PV_LIST);
		{
			struct cd_pv *dct = pv_new(p->a, CD_PV_DICT);
			if (!dct)
				return pk_fail(p, CD_ERR_NOMEM, "runs out of memory");
			if ((st = add_items(p, dct, at, true)))
				return st;
			return push(p, dct);
		}
	case 'a': case 's': {
		size_t k = p->op == 'a' ? 1 : 2;
		if (p->n - fence(p) < k + 1)
			return pk_fail(p, CD_ERR_FORMAT, "needs more values than the stack holds");
		return add_items(p, p->st[p->n - k - 1], p->n - k, p->op == 's');
	}
	case 'e': case 'u':
		if ((st = pop_mark(p, &at)))
			return st;
		if (at == fence(p))
			return pk_fail(p, CD_ERR_FORMAT, "has no container below its MARK");
		return add_items(p, p->st[at - 1], at, p->op == 'u');
	case 'q': return put_memo(p, a[0]);
	case 'r': return put_memo(p, le(a, 4));
	case 0x94: return put_memo(p, p->nmemo);
	case 'h': case 'j': {
		uint64_t idx = p->op == 'h' ? a[0] : le(a, 4);
		if (idx >= p->nmemo || !p->memo[idx])
			return pk_fail(p, CD_ERR_FORMAT, "reads a memo entry never stored");
		return push(p, p->memo[idx]);
	}
	default:
		if (op_name(p->op))
			return pk_fail(p, CD_ERR_FORMAT,
				       "is not allowed: only plain data (dict, list, tuple, str, bytes, "
				       "int, float, bool, None) is read, nothing is built or called");
		return pk_fail(p, CD_ERR_FORMAT, "is not a pickle opcode");
	}
}

enum cd_status cd_pickle_parse(const uint8_t *data, size_t len, struct cd_pv_doc *doc,
			       struct cd_err *err)
{
	struct pk p = {.d = data, .len = len, .err = err};
	enum cd_status st = CD_OK;
	bool stop = false;

	memset(doc, 0, sizeof *doc);
	if (len > CD_PV_MAX_INPUT)
		return cd_fail(err, CD_ERR_LIMIT, "the pickle is larger than 256 MiB");
	p.a = calloc(1, sizeof *p.a);
	if (!p.a)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	while (!stop) {
		if (p.pos >= len) {
			st = cd_fail(err, CD_ERR_FORMAT, "offset %zu: the pickle is cut: no STOP opcode", len);
			goto out;
		}
		if ((st = step(&p, &stop)))
			goto out;
	}
	if (p.st[0]->weight > CD_PV_MAX_NODES) {
		st = cd_fail(err, CD_ERR_LIMIT, "the pickle makes a tree of too many values");
		goto out;
	}
	doc->root = p.st[0];
	doc->arena = p.a;
	doc->proto = data[1];
	p.a = NULL;
out:
	arena_free(p.a);
	free(p.st);
	free(p.marks);
	free(p.memo);
	return st;
}

/* ---- JSON */

struct js {
	const uint8_t *d;
	size_t len, pos;
	struct cd_pv_arena *a;
	struct cd_err *err;
};

static enum cd_status js_fail(struct js *j, enum cd_status st, const char *what)
{
	return cd_fail(j->err, st, "offset %zu: %s", j->pos, what);
}

static void ws(struct js *j)
{
	while (j->pos < j->len && (j->d[j->pos] == ' ' || j->d[j->pos] == '\t' ||
				   j->d[j->pos] == '\n' || j->d[j->pos] == '\r'))
		j->pos++;
}

static int hex4(const uint8_t *s)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		int c = s[i], h;
		if (c >= '0' && c <= '9')
			h = c - '0';
		else if (c >= 'a' && c <= 'f')
			h = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			h = c - 'A' + 10;
		else
			return -1;
		v = v << 4 | h;
	}
	return v;
}

static size_t utf8(char *o, uint32_t c)
{
	if (c < 0x80) { o[0] = (char)c; return 1; }
	if (c < 0x800) { o[0] = (char)(0xc0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | c >> 12); o[1] = (char)(0x80 | (c >> 6 & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f)); return 3;
	}
	o[0] = (char)(0xf0 | c >> 18); o[1] = (char)(0x80 | (c >> 12 & 0x3f));
	o[2] = (char)(0x80 | (c >> 6 & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

static enum cd_status js_string(struct js *j, struct cd_pv **out)
{
	size_t start = ++j->pos, n = 0;
	/* the decoded text is never longer than the escaped one */
	size_t end = start;
	while (end < j->len && j->d[end] != '"') {
		if (j->d[end] == '\\')
			end++;
		end++;
	}
	if (end >= j->len)
		return js_fail(j, CD_ERR_FORMAT, "a string is cut: no closing quote");
	struct cd_pv *v = pv_new(j->a, CD_PV_STR);
	if (!v || !(v->u.s.p = malloc(end - start + 1)))
		return js_fail(j, CD_ERR_NOMEM, "out of memory");
	char *o = v->u.s.p;
	while (j->pos < end) {
		uint8_t c = j->d[j->pos];
		if (c < 0x20)
			return js_fail(j, CD_ERR_FORMAT, "a control character in a string");
		if (c != '\\') {
			o[n++] = (char)c;
			j->pos++;
			continue;
		}
		uint8_t e = j->d[j->pos + 1];
		j->pos += 2;
		switch (e) {
		case '"': o[n++] = '"'; break;
		case '\\': o[n++] = '\\'; break;
		case '/': o[n++] = '/'; break;
		case 'b': o[n++] = '\b'; break;
		case 'f': o[n++] = '\f'; break;
		case 'n': o[n++] = '\n'; break;
		case 'r': o[n++] = '\r'; break;
		case 't': o[n++] = '\t'; break;
		case 'u': {
			int h = j->pos + 4 <= end ? hex4(j->d + j->pos) : -1;
			if (h < 0)
				return js_fail(j, CD_ERR_FORMAT, "a bad \\u escape");
			j->pos += 4;
			uint32_t cp = (uint32_t)h;
			if (cp >= 0xd800 && cp < 0xdc00 && j->pos + 6 <= end && j->d[j->pos] == '\\' &&
			    j->d[j->pos + 1] == 'u') {
				int lo = hex4(j->d + j->pos + 2);
				if (lo >= 0xdc00 && lo < 0xe000) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
					j->pos += 6;
				}
			}
			n += utf8(o + n, cp);
			break;
		}
		default:
			return js_fail(j, CD_ERR_FORMAT, "a bad escape in a string");
		}
	}
	o[n] = 0;
	v->u.s.len = n;
	j->pos = end + 1;
	*out = v;
	return CD_OK;
}

static bool lit(struct js *j, const char *w)
{
	size_t n = strlen(w);
	if (j->len - j->pos >= n && memcmp(j->d + j->pos, w, n) == 0) {
		j->pos += n;
		return true;
	}
	return false;
}

static enum cd_status js_value(struct js *j, int depth, struct cd_pv **out);

static enum cd_status js_container(struct js *j, int depth, struct cd_pv **out)
{
	bool obj = j->d[j->pos] == '{';
	char close = obj ? '}' : ']';
	enum cd_status st;
	struct cd_pv *c = pv_new(j->a, obj ? CD_PV_DICT : CD_PV_LIST);
	if (!c)
		return js_fail(j, CD_ERR_NOMEM, "out of memory");
	j->pos++;
	ws(j);
	if (j->pos < j->len && j->d[j->pos] == close) {
		j->pos++;
		*out = c;
		return CD_OK;
	}
	for (;;) {
		struct cd_pv *v;
		const char *why;
		ws(j);
		if (obj) {
			if (j->pos >= j->len || j->d[j->pos] != '"')
				return js_fail(j, CD_ERR_FORMAT, "an object key is not a string");
			if ((st = js_string(j, &v)))
				return st;
			if ((why = place(c, v)))
				return js_fail(j, CD_ERR_LIMIT, why);
			ws(j);
			if (j->pos >= j->len || j->d[j->pos] != ':')
				return js_fail(j, CD_ERR_FORMAT, "no ':' after an object key");
			j->pos++;
		}
		if ((st = js_value(j, depth + 1, &v)))
			return st;
		if ((why = place(c, v)))
			return js_fail(j, CD_ERR_LIMIT, why);
		ws(j);
		if (j->pos >= j->len)
			return js_fail(j, CD_ERR_FORMAT, "the JSON text is cut");
		if (j->d[j->pos] == ',') {
			j->pos++;
			continue;
		}
		if (j->d[j->pos] == close) {
			j->pos++;
			*out = c;
			return CD_OK;
		}
		return js_fail(j, CD_ERR_FORMAT, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static enum cd_status js_number(struct js *j, struct cd_pv **out)
{
	size_t s = j->pos;
	bool flt = false;
	char buf[64];
	if (j->pos < j->len && j->d[j->pos] == '-')
		j->pos++;
	if (lit(j, "Infinity")) {
		flt = true;
	} else {
		size_t digits = j->pos;
		while (j->pos < j->len && ((j->d[j->pos] >= '0' && j->d[j->pos] <= '9') ||
					   j->d[j->pos] == '.' || j->d[j->pos] == 'e' ||
					   j->d[j->pos] == 'E' || j->d[j->pos] == '+' || j->d[j->pos] == '-')) {
			if (j->d[j->pos] == '.' || j->d[j->pos] == 'e' || j->d[j->pos] == 'E')
				flt = true;
			j->pos++;
		}
		if (j->pos == digits)
			return js_fail(j, CD_ERR_FORMAT, "not a JSON value");
	}
	if (j->pos - s >= sizeof buf)
		return js_fail(j, CD_ERR_FORMAT, "a number of more than 63 characters");
	memcpy(buf, j->d + s, j->pos - s);
	buf[j->pos - s] = 0;
	char *end;
	struct cd_pv *v = NULL;
	if (!flt) {
		errno = 0;
		long long i = strtoll(buf, &end, 10);
		if (!errno && *end == 0) {
			if (!(v = pv_new(j->a, CD_PV_INT)))
				return js_fail(j, CD_ERR_NOMEM, "out of memory");
			v->u.i = i;
		}
	}
	if (!v) {
		double f = strtod(buf, &end);
		if (*end != 0) {
			j->pos = s;
			return js_fail(j, CD_ERR_FORMAT, "a malformed number");
		}
		if (!(v = pv_new(j->a, CD_PV_FLOAT)))
			return js_fail(j, CD_ERR_NOMEM, "out of memory");
		v->u.f = f;
	}
	*out = v;
	return CD_OK;
}

static enum cd_status js_value(struct js *j, int depth, struct cd_pv **out)
{
	struct cd_pv *v;
	ws(j);
	if (depth > CD_PV_MAX_DEPTH)
		return js_fail(j, CD_ERR_LIMIT, "values nested more than 64 deep");
	if (j->pos >= j->len)
		return js_fail(j, CD_ERR_FORMAT, "the JSON text is cut");
	switch (j->d[j->pos]) {
	case '{': case '[': return js_container(j, depth, out);
	case '"': return js_string(j, out);
	case 't': case 'f':
		if (!lit(j, "true") && !lit(j, "false"))
			return js_fail(j, CD_ERR_FORMAT, "not a JSON value");
		if (!(v = pv_new(j->a, CD_PV_BOOL)))
			return js_fail(j, CD_ERR_NOMEM, "out of memory");
		v->u.b = j->d[j->pos - 1] == 'e' && j->d[j->pos - 2] == 'u';
		*out = v;
		return CD_OK;
	case 'n':
		if (!lit(j, "null"))
			return js_fail(j, CD_ERR_FORMAT, "not a JSON value");
		if (!(*out = pv_new(j->a, CD_PV_NONE)))
			return js_fail(j, CD_ERR_NOMEM, "out of memory");
		return CD_OK;
	case 'N':
		if (!lit(j, "NaN"))
			return js_fail(j, CD_ERR_FORMAT, "not a JSON value");
		if (!(v = pv_new(j->a, CD_PV_FLOAT)))
			return js_fail(j, CD_ERR_NOMEM, "out of memory");
		v->u.f = NAN;
		*out = v;
		return CD_OK;
	default:
		return js_number(j, out);
	}
}

enum cd_status cd_pvjson_parse(const uint8_t *data, size_t len, struct cd_pv_doc *doc,
			       struct cd_err *err)
{
	struct js j = {.d = data, .len = len, .err = err};
	struct cd_pv *root = NULL;
	enum cd_status st;

	memset(doc, 0, sizeof *doc);
	if (len > CD_PV_MAX_INPUT)
		return cd_fail(err, CD_ERR_LIMIT, "the JSON text is larger than 256 MiB");
	j.a = calloc(1, sizeof *j.a);
	if (!j.a)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	if ((st = js_value(&j, 1, &root)))
		goto out;
	ws(&j);
	if (j.pos != len) {
		st = js_fail(&j, CD_ERR_FORMAT, "text after the JSON value");
		goto out;
	}
	doc->root = root;
	doc->arena = j.a;
	j.a = NULL;
out:
	arena_free(j.a);
	return st;
}

/* ---- access */

const struct cd_pv *cd_pv_get(const struct cd_pv *d, const char *key)
{
	if (!d || d->kind != CD_PV_DICT)
		return NULL;
	size_t kl = strlen(key);
	for (size_t i = d->u.c.n; i >= 2; i -= 2) {   /* the last one wins, as in Python */
		const struct cd_pv *k = d->u.c.v[i - 2];
		if (k->kind == CD_PV_STR && k->u.s.len == kl && memcmp(k->u.s.p, key, kl) == 0)
			return d->u.c.v[i - 1];
	}
	return NULL;
}

bool cd_pv_is(const struct cd_pv *v, enum cd_pv_kind k)
{
	return v && v->kind == k;
}

bool cd_pv_int(const struct cd_pv *v, int64_t *out)
{
	if (v && v->kind == CD_PV_INT) {
		*out = v->u.i;
		return true;
	}
	if (v && v->kind == CD_PV_BOOL) {
		*out = v->u.b;
		return true;
	}
	return false;
}

const char *cd_pv_str(const struct cd_pv *v)
{
	return v && v->kind == CD_PV_STR ? v->u.s.p : NULL;
}

size_t cd_pv_seq(const struct cd_pv *v, struct cd_pv *const **items)
{
	if (v && (v->kind == CD_PV_LIST || v->kind == CD_PV_TUPLE)) {
		*items = v->u.c.v;
		return v->u.c.n;
	}
	*items = NULL;
	return 0;
}
