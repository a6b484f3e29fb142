#include "intern.h"

#include <stdlib.h>
#include <string.h>

struct cd_intern_block {
	struct cd_intern_block *next;
	size_t size;
	char data[];
};

static inline uint64_t load8(const char *p)
{
	uint64_t w;
	memcpy(&w, p, 8);
	return w;
}

/* The n < 8 bytes at p in a word, every one of them (the tail of a longer
 * string is loaded as its last 8 bytes instead: fixed-size loads only). */
static inline uint64_t load_short(const char *p, uint32_t n)
{
	if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		return (uint64_t)b << 32 | a;
	}
	if (!n)
		return 0;
	return (uint64_t)(unsigned char)p[0] | (uint64_t)(unsigned char)p[n / 2] << 8 |
	       (uint64_t)(unsigned char)p[n - 1] << 16;
}

static uint32_t hash(const char *p, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
	if (n < 8) {
		h ^= load_short(p, n);
	} else {
		const char *last = p + n - 8;   /* the last word, which may overlap the one before */
		for (; p < last; p += 8) {
			h = (h ^ load8(p)) * 0xFF51AFD7ED558CCDull;
			h ^= h >> 32;
		}
		h ^= load8(last);
	}
	h *= 0xC4CEB9FE1A85EC53ull;
	h ^= h >> 29;
	return (uint32_t)h;
}

/* Equal bytes?  Inline word compares: interned strings are short and a
 * libc call per probe costs more than the compare. */
static inline bool same(const char *a, const char *b, uint32_t n)
{
	if (n < 8)   /* load_short takes every byte of a short string */
		return load_short(a, n) == load_short(b, n);
	for (uint32_t i = 0; i + 8 < n; i += 8)
		if (load8(a + i) != load8(b + i))
			return false;
	return load8(a + n - 8) == load8(b + n - 8);
}

/* The id of (p, n), whose hash is h, or CD_NOID. */
static uint32_t find_h(const struct cd_intern *t, const char *p, uint32_t n, uint32_t h)
{
	if (!t->nslots)
		return CD_NOID;
	for (uint32_t i = h & (t->nslots - 1);; i = (i + 1) & (t->nslots - 1)) {
		uint32_t v = t->slots[i];
		if (!v)
			return CD_NOID;
		const __typeof__(t->items[0]) *it = &t->items[v - 1];
		if (it->hash == h && it->n == n && same(it->p, p, n))
			return v - 1;
	}
}

uint32_t cd_intern_find(const struct cd_intern *t, const char *p, uint32_t n)
{
	return t->nslots ? find_h(t, p, n, hash(p, n)) : CD_NOID;
}

static bool rehash(struct cd_intern *t, uint32_t nslots)
{
	uint32_t *ns = calloc(nslots, sizeof *ns);
	if (!ns)
		return false;
	for (uint32_t id = 0; id < t->count; id++) {
		uint32_t i = t->items[id].hash & (nslots - 1);
		while (ns[i])
			i = (i + 1) & (nslots - 1);
		ns[i] = id + 1;
	}
	t->bytes += (size_t)(nslots - t->nslots) * sizeof *ns;
	free(t->slots);
	t->slots = ns;
	t->nslots = nslots;
	return true;
}

static char *pool_copy(struct cd_intern *t, const char *p, uint32_t n)
{
	if (!t->pool || t->pool_used + n + 1 > t->pool->size) {
		/* blocks double from 512 bytes to 64 KiB: a table of a few
		 * names (a rank's summary, thousands of them) stays small */
		size_t size = t->pool ? t->pool->size * 2 : 512;
		if (size > 65536)
			size = 65536;
		if (size < (size_t)n + 1)
			size = (size_t)n + 1;
		struct cd_intern_block *b = malloc(sizeof *b + size);
		if (!b)
			return NULL;
		b->next = t->pool;
		b->size = size;
		t->pool = b;
		t->pool_used = 0;
		t->bytes += sizeof *b + size;
	}
	char *d = t->pool->data + t->pool_used;
	if (n)
		memcpy(d, p, n);
	d[n] = '\0';
	t->pool_used += n + 1;
	return d;
}

/* (p, n), whose hash is h, added if new. */
static uint32_t intern_h(struct cd_intern *t, const char *p, uint32_t n, uint32_t h)
{
	uint32_t id = find_h(t, p, n, h);
	if (id != CD_NOID)
		return id;
	if ((t->count + 1) * 2 > t->nslots && !rehash(t, t->nslots ? t->nslots * 2 : 64))
		return CD_NOID;
	if (t->count == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 32;
		void *ni = realloc(t->items, cap * sizeof *t->items);
		if (!ni)
			return CD_NOID;
		t->bytes += (size_t)(cap - t->cap) * sizeof *t->items;
		t->items = ni;
		t->cap = cap;
	}
	char *d = pool_copy(t, p, n);
	if (!d)
		return CD_NOID;
	id = t->count++;
	t->items[id].p = d;
	t->items[id].n = n;
	t->items[id].hash = h;
	uint32_t i = h & (t->nslots - 1);
	while (t->slots[i])
		i = (i + 1) & (t->nslots - 1);
	t->slots[i] = id + 1;
	return id;
}

uint32_t cd_intern(struct cd_intern *t, const char *p, uint32_t n)
{
	return intern_h(t, p, n, hash(p, n));
}

uint32_t cd_intern_from(struct cd_intern *t, const struct cd_intern *from, uint32_t id)
{
	return intern_h(t, from->items[id].p, from->items[id].n, from->items[id].hash);
}

void cd_intern_free(struct cd_intern *t)
{
	struct cd_intern_block *b = t->pool;
	while (b) {
		struct cd_intern_block *next = b->next;
		free(b);
		b = next;
	}
	free(t->slots);
	free(t->items);
	memset(t, 0, sizeof *t);
}
