/* The general line parser: cJSON builds a tree, we walk it and store the
 * known fields through the same field table as the fast scanner.  Slower,
 * but written from a different angle, so the two check each other. */
#include "parse.h"
#include "fields.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cd_parse_general_release(struct cd_parser *ps);

void cd_parse_general_release(struct cd_parser *ps)
{
	if (ps->tree) {
		cJSON_Delete(ps->tree);
		ps->tree = NULL;
	}
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that comes twice among obj's members (the rule of both parsers). */
static enum cd_status no_dup_keys(struct cd_parser *ps, const cJSON *obj, const char *where,
				  struct cd_err *err)
{
	int n = cJSON_GetArraySize(obj);
	if (n < 2)
		return CD_OK;
	const char **keys = cd_arena_alloc(&ps->arena, (size_t)n * sizeof *keys);
	if (!keys)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	int i = 0;
	const cJSON *j;
	cJSON_ArrayForEach(j, obj)
		keys[i++] = j->string;
	qsort(keys, (size_t)n, sizeof *keys, key_cmp);
	for (i = 1; i < n; i++)
		if (strcmp(keys[i], keys[i - 1]) == 0)
			return cd_fail(err, CD_ERR_TRACE, "duplicate key \"%.64s\" in %s", keys[i],
				       where);
	return CD_OK;
}

static struct cd_str cstr(const cJSON *j)
{
	struct cd_str s = {j->valuestring, (uint32_t)strlen(j->valuestring)};
	return s;
}

static enum cd_status get_int(const cJSON *j, const char *key, int64_t *v, struct cd_err *err)
{
	if (!cJSON_IsNumber(j))
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be an integer", key);
	double d = j->valuedouble;
	if (!isfinite(d) || d != floor(d))
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be an integer", key);
	if (d > (double)CD_T0_MAX || d < -(double)CD_T0_MAX) /* each field checks its own range */
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" is out of range", key);
	*v = (int64_t)d;
	return CD_OK;
}

static enum cd_status get_ints(struct cd_parser *ps, const cJSON *j, const char *key,
			       uint32_t max, const int64_t **out, uint32_t *n, struct cd_err *err)
{
	enum cd_status st;
	int cnt = cJSON_GetArraySize(j);

	if (!cJSON_IsArray(j))
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be a list of integers", key);
	if ((uint32_t)cnt > max)
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" has too many entries", key);
	int64_t *buf = cd_arena_alloc(&ps->arena, (size_t)(cnt ? cnt : 1) * sizeof *buf);
	if (!buf)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, j) {
		if ((st = get_int(it, key, &buf[i], err)))
			return st;
		i++;
	}
	*out = buf;
	*n = (uint32_t)cnt;
	return CD_OK;
}

static enum cd_status get_objs(struct cd_parser *ps, const cJSON *j, const char *key,
			       char kind, void **out, uint32_t *n, struct cd_err *err)
{
	enum cd_status st;
	size_t elem = kind == 'a' ? sizeof(struct cd_arg) : sizeof(struct cd_param);
	int cnt = cJSON_GetArraySize(j);

	if (!cJSON_IsArray(j))
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be a list of objects", key);
	if (cnt > CD_LIST_MAX)
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" has too many entries", key);
	unsigned char *buf = cd_arena_alloc(&ps->arena, (size_t)(cnt ? cnt : 1) * elem);
	if (!buf)
		return cd_fail(err, CD_ERR_NOMEM, "out of memory");
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, j) {
		unsigned char *slot = buf + (size_t)i * elem;
		struct cd_arg *a = (struct cd_arg *)slot;
		struct cd_param *p = (struct cd_param *)slot;
		memset(slot, 0, elem);
		if (kind == 'p')
			p->nbytes = -1;
		if (!cJSON_IsObject(it))
			return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be a list of objects", key);
		if ((st = no_dup_keys(ps, it, kind == 'a' ? "an args entry" : "a params entry", err)))
			return st;
		const cJSON *f;
		cJSON_ArrayForEach(f, it) {
			enum cd_sub sub = cd_subfield_lookup(f->string, (uint32_t)strlen(f->string));
			if (sub == CD_SUB_NONE || cJSON_IsNull(f))
				continue;
			if (kind == 'a' && sub != CD_SUB_SHAPE && sub != CD_SUB_PLACEMENTS &&
			    sub != CD_SUB_MESH)
				continue;
			switch (sub) {
			case CD_SUB_SHAPE:
				if (kind == 'a') {
					if ((st = get_ints(ps, f, "shape", CD_LIST_MAX, &a->shape, &a->ndim, err)))
						return st;
					a->has_shape = true;
				} else {
					if ((st = get_ints(ps, f, "shape", CD_LIST_MAX, &p->shape, &p->ndim, err)))
						return st;
					p->has_shape = true;
				}
				break;
			case CD_SUB_PLACEMENTS:
			case CD_SUB_MESH:
			case CD_SUB_NAME:
			case CD_SUB_DTYPE: {
				static const char *const names[] = {
					[CD_SUB_PLACEMENTS] = "placements", [CD_SUB_MESH] = "mesh",
					[CD_SUB_NAME] = "name", [CD_SUB_DTYPE] = "dtype"};
				if (!cJSON_IsString(f))
					return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be a string",
						       names[sub]);
				struct cd_str v = cstr(f);
				if (sub == CD_SUB_PLACEMENTS)
					*(kind == 'a' ? &a->placements : &p->placements) = v;
				else if (sub == CD_SUB_MESH)
					*(kind == 'a' ? &a->mesh : &p->mesh) = v;
				else if (sub == CD_SUB_NAME)
					p->name = v;
				else
					p->dtype = v;
				break;
			}
			case CD_SUB_NBYTES:
				if ((st = get_int(f, "nbytes", &p->nbytes, err)))
					return st;
				break;
			case CD_SUB_REQUIRES_GRAD:
				if (!cJSON_IsBool(f))
					return cd_fail(err, CD_ERR_TRACE,
						       "field \"requires_grad\" must be true or false");
				p->requires_grad = cJSON_IsTrue(f);
				break;
			case CD_SUB_NONE:
				break;
			}
		}
		i++;
	}
	*out = buf;
	*n = (uint32_t)cnt;
	return CD_OK;
}

enum cd_status cd_parse_general(struct cd_parser *ps, const char *line, size_t n,
				struct cd_event *e, struct cd_err *err)
{
	const char *end = NULL;
	enum cd_status st;

	cd_parse_general_release(ps);
	cd_arena_reset(&ps->arena);
	cd_event_clear(e);
	if (err)
		err->column = 0;
	cJSON *root = cJSON_ParseWithLengthOpts(line, n, &end, 0);
	if (!root) {
		/* where it failed: end (cJSON_GetErrorPtr is one for the whole
		 * process, and other threads parse too) */
		const char *at = end;
		if (err && at && at >= line && at <= line + n)
			err->column = (long long)(at - line) + 1;
		return cd_fail(err, CD_ERR_FORMAT, "invalid JSON");
	}
	ps->tree = root;
	while (end && end < line + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
		end++;
	if (end && end < line + n) {
		if (err)
			err->column = (long long)(end - line) + 1;
		return cd_fail(err, CD_ERR_FORMAT, "invalid JSON: text after the end of the object");
	}
	if (!cJSON_IsObject(root))
		return cd_fail(err, CD_ERR_FORMAT, "invalid JSON: a line must hold one JSON object");
	if ((st = no_dup_keys(ps, root, "the event", err)))
		return st;

	const cJSON *j;
	cJSON_ArrayForEach(j, root) {
		const struct cd_field *f = cd_field_lookup(j->string, (uint32_t)strlen(j->string));
		if (!f || cJSON_IsNull(j))
			continue;
		switch (f->type) {
		case CD_FT_STR:
			if (!cJSON_IsString(j))
				return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be a string", f->key);
			if ((st = cd_field_set_str(e, f, cstr(j), err)))
				return st;
			break;
		case CD_FT_INT: {
			int64_t v;
			if ((st = get_int(j, f->key, &v, err)))
				return st;
			if ((st = cd_field_set_int(e, f, v, err)))
				return st;
			break;
		}
		case CD_FT_BOOL:
			if (!cJSON_IsBool(j))
				return cd_fail(err, CD_ERR_TRACE, "field \"%s\" must be true or false",
					       f->key);
			cd_field_set_bool(e, f, cJSON_IsTrue(j));
			break;
		case CD_FT_INTLIST:
			if (f->id == CD_FI_SHAPE) {
				e->have |= CD_F_SHAPE;
				st = get_ints(ps, j, f->key, CD_LIST_MAX, &e->shape, &e->nshape, err);
			} else {
				e->have |= CD_F_RANKS;
				st = get_ints(ps, j, f->key, CD_RANKS_MAX, &e->ranks, &e->nranks_list, err);
			}
			if (st)
				return st;
			break;
		case CD_FT_ARGS:
			if (ps->skip_detail)
				break; /* as the fast parser: not read, not checked */
			e->have |= CD_F_ARGS;
			if ((st = get_objs(ps, j, f->key, 'a', (void **)&e->args, &e->nargs, err)))
				return st;
			break;
		case CD_FT_PARAMS:
			if (ps->skip_detail)
				break;
			e->have |= CD_F_PARAMS;
			if ((st = get_objs(ps, j, f->key, 'p', (void **)&e->params, &e->nparams, err)))
				return st;
			break;
		}
	}
	return cd_event_validate(e, err);
}
