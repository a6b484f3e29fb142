/* A growable array: struct { T *v; uint32_t n, cap; }.  cd_vec_push returns
 * false when out of memory (and leaves the vector as it was). */
#ifndef CD_VEC_H
#define CD_VEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define CD_VEC(T) struct { T *v; uint32_t n, cap; }

static inline bool cd_vec_grow_(void **v, uint32_t *cap, size_t elem, uint32_t need)
{
	if (need <= *cap)
		return true;
	uint32_t nc = *cap ? *cap : 4;
	while (nc < need) {
		if (nc > UINT32_MAX / 2)
			return false;
		nc *= 2;
	}
	void *nv = realloc(*v, (size_t)nc * elem);
	if (!nv)
		return false;
	*v = nv;
	*cap = nc;
	return true;
}

#define cd_vec_reserve(vec, need) \
	cd_vec_grow_((void **)&(vec)->v, &(vec)->cap, sizeof(*(vec)->v), (need))
#define cd_vec_push(vec, x) \
	(cd_vec_reserve((vec), (vec)->n + 1) ? ((vec)->v[(vec)->n++] = (x), true) : false)
#define cd_vec_free(vec) (free((vec)->v), (vec)->v = NULL, (vec)->n = (vec)->cap = 0)

#endif
