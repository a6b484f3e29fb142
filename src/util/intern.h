/* String interning: each distinct byte string gets a dense id 0, 1, 2, ...
 * The table owns copies of the strings; they live until cd_intern_free(). */
#ifndef CD_INTERN_H
#define CD_INTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CD_NOID UINT32_MAX

struct cd_intern {
	uint32_t *slots;      /* hash -> id+1, 0 = empty */
	uint32_t nslots;      /* power of two */
	uint32_t count;
	uint32_t cap;
	struct { const char *p; uint32_t n; uint32_t hash; } *items;
	struct cd_intern_block *pool;
	size_t pool_used;
	size_t bytes;         /* memory held, for --stats */
};

/* Id of (p, n), adding it if new; CD_NOID when out of memory. */
uint32_t cd_intern(struct cd_intern *t, const char *p, uint32_t n);
/* Id in t of string id of table from (added if new), without hashing it
 * again; CD_NOID when out of memory. */
uint32_t cd_intern_from(struct cd_intern *t, const struct cd_intern *from, uint32_t id);
/* Id of (p, n) or CD_NOID when absent. */
uint32_t cd_intern_find(const struct cd_intern *t, const char *p, uint32_t n);

static inline const char *cd_intern_str(const struct cd_intern *t, uint32_t id)
{
	return t->items[id].p;
}
static inline uint32_t cd_intern_len(const struct cd_intern *t, uint32_t id)
{
	return t->items[id].n;
}

void cd_intern_free(struct cd_intern *t);

#endif
