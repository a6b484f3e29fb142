#include "event.h"
#include "fields.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const ev_names[CD_EV__COUNT] = {
	[CD_EV_UNKNOWN] = "unknown",
	[CD_EV_META] = "meta",
	[CD_EV_PG] = "pg",
	[CD_EV_REGION_ENTER] = "region_enter",
	[CD_EV_REGION_EXIT] = "region_exit",
	[CD_EV_FW_PRE] = "fw_pre",
	[CD_EV_FW_POST] = "fw_post",
	[CD_EV_FW_DONE] = "fw_done",
	[CD_EV_BW_PRE] = "bw_pre",
	[CD_EV_BW_ENTER] = "bw_enter",
	[CD_EV_BW_EXIT] = "bw_exit",
	[CD_EV_BW_END] = "bw_end",
	[CD_EV_OP] = "op",
	[CD_EV_COLL] = "coll",
	[CD_EV_NCCL] = "nccl",
	[CD_EV_NCCL_LOST] = "nccl_lost",
	[CD_EV_DDP] = "ddp",
	[CD_EV_END] = "end",
	[CD_EV_TRIM] = "trim",
};

const char *cd_ev_name(enum cd_ev ev)
{
	return (unsigned)ev < CD_EV__COUNT ? ev_names[ev] : "unknown";
}

enum cd_ev cd_ev_from_str(const char *p, uint32_t n)
{
	/* "op" is by far the most frequent, then the module hooks */
	if (n == 2 && p[0] == 'o' && p[1] == 'p')
		return CD_EV_OP;
	if (n < 2 || n > 12)
		return CD_EV_UNKNOWN;
	for (int i = 1; i < CD_EV__COUNT; i++)
		if (ev_names[i][0] == p[0] && strlen(ev_names[i]) == n &&
		    memcmp(ev_names[i], p, n) == 0)
			return (enum cd_ev)i;
	return CD_EV_UNKNOWN;
}

static const struct cd_field fields[CD_FI__COUNT] = {
	[CD_FI_EV] = {"ev", 2, CD_FI_EV, CD_FT_STR},
	[CD_FI_T] = {"t", 1, CD_FI_T, CD_FT_INT},
	[CD_FI_MOD] = {"mod", 3, CD_FI_MOD, CD_FT_STR},
	[CD_FI_TYPE] = {"type", 4, CD_FI_TYPE, CD_FT_STR},
	[CD_FI_NAME] = {"name", 4, CD_FI_NAME, CD_FT_STR},
	[CD_FI_LABEL] = {"label", 5, CD_FI_LABEL, CD_FT_STR},
	[CD_FI_REGION] = {"region", 6, CD_FI_REGION, CD_FT_INT},
	[CD_FI_BW] = {"bw", 2, CD_FI_BW, CD_FT_BOOL},
	[CD_FI_DT] = {"dt", 2, CD_FI_DT, CD_FT_BOOL},
	[CD_FI_FAKE] = {"fake", 4, CD_FI_FAKE, CD_FT_BOOL},
	[CD_FI_GRAD_IN] = {"grad_in", 7, CD_FI_GRAD_IN, CD_FT_BOOL},
	[CD_FI_GRAD_OUT] = {"grad_out", 8, CD_FI_GRAD_OUT, CD_FT_BOOL},
	[CD_FI_FORMAT] = {"format", 6, CD_FI_FORMAT, CD_FT_STR},
	[CD_FI_VERSION] = {"version", 7, CD_FI_VERSION, CD_FT_INT},
	[CD_FI_RANK] = {"rank", 4, CD_FI_RANK, CD_FT_INT},
	[CD_FI_WORLD] = {"world_size", 10, CD_FI_WORLD, CD_FT_INT},
	[CD_FI_HOST] = {"host", 4, CD_FI_HOST, CD_FT_STR},
	[CD_FI_PID] = {"pid", 3, CD_FI_PID, CD_FT_INT},
	[CD_FI_T0] = {"t0", 2, CD_FI_T0, CD_FT_INT},
	[CD_FI_TORCH] = {"torch", 5, CD_FI_TORCH, CD_FT_STR},
	[CD_FI_RECORDER] = {"recorder", 8, CD_FI_RECORDER, CD_FT_STR},
	[CD_FI_ARGS] = {"args", 4, CD_FI_ARGS, CD_FT_ARGS},
	[CD_FI_PARAMS] = {"params", 6, CD_FI_PARAMS, CD_FT_PARAMS},
	[CD_FI_PG] = {"pg", 2, CD_FI_PG, CD_FT_STR},
	[CD_FI_SEQ] = {"seq", 3, CD_FI_SEQ, CD_FT_INT},
	[CD_FI_BYTES] = {"bytes", 5, CD_FI_BYTES, CD_FT_INT},
	[CD_FI_DTYPE] = {"dtype", 5, CD_FI_DTYPE, CD_FT_STR},
	[CD_FI_SHAPE] = {"shape", 5, CD_FI_SHAPE, CD_FT_INTLIST},
	[CD_FI_DESC] = {"desc", 4, CD_FI_DESC, CD_FT_STR},
	[CD_FI_RANKS] = {"ranks", 5, CD_FI_RANKS, CD_FT_INTLIST},
	[CD_FI_BACKEND] = {"backend", 7, CD_FI_BACKEND, CD_FT_STR},
	[CD_FI_SRC] = {"src", 3, CD_FI_SRC, CD_FT_STR},
	[CD_FI_FUNC] = {"func", 4, CD_FI_FUNC, CD_FT_STR},
	[CD_FI_COUNT] = {"count", 5, CD_FI_COUNT, CD_FT_INT},
	[CD_FI_REDOP] = {"redop", 5, CD_FI_REDOP, CD_FT_STR},
	[CD_FI_ROOT] = {"root", 4, CD_FI_ROOT, CD_FT_INT},
	[CD_FI_PEER] = {"peer", 4, CD_FI_PEER, CD_FT_INT},
	[CD_FI_COMM] = {"comm", 4, CD_FI_COMM, CD_FT_STR},
	[CD_FI_NRANKS] = {"nranks", 6, CD_FI_NRANKS, CD_FT_INT},
	[CD_FI_STREAM] = {"stream", 6, CD_FI_STREAM, CD_FT_STR},
	[CD_FI_DUR] = {"dur", 3, CD_FI_DUR, CD_FT_INT},
	[CD_FI_STATE] = {"state", 5, CD_FI_STATE, CD_FT_STR},
	[CD_FI_PSEQ] = {"pseq", 4, CD_FI_PSEQ, CD_FT_INT},
	[CD_FI_BUCKET] = {"bucket", 6, CD_FI_BUCKET, CD_FT_INT},
	[CD_FI_HOW] = {"how", 3, CD_FI_HOW, CD_FT_STR},
	[CD_FI_EXC] = {"exc", 3, CD_FI_EXC, CD_FT_STR},
	[CD_FI_MSG] = {"msg", 3, CD_FI_MSG, CD_FT_STR},
	[CD_FI_SIGNAL] = {"signal", 6, CD_FI_SIGNAL, CD_FT_INT},
	[CD_FI_CODE] = {"code", 4, CD_FI_CODE, CD_FT_INT},
	[CD_FI_ENDS] = {"ends", 4, CD_FI_ENDS, CD_FT_BOOL},
	[CD_FI_LIGHT] = {"light", 5, CD_FI_LIGHT, CD_FT_BOOL},
};

/* Where each field is stored in struct cd_event, to clear only the fields
 * a parse wrote (cd_event_clear_fields). */
#define AT(m) {offsetof(struct cd_event, m), sizeof(((struct cd_event *)0)->m)}
#define SPAN(a, b) {offsetof(struct cd_event, a), \
		    offsetof(struct cd_event, b) + sizeof(((struct cd_event *)0)->b) - \
			    offsetof(struct cd_event, a)}
static const struct { uint16_t off, size; } storage[CD_FI__COUNT] = {
	[CD_FI_EV] = AT(ev), [CD_FI_T] = AT(t), [CD_FI_MOD] = AT(mod), [CD_FI_TYPE] = AT(type),
	[CD_FI_NAME] = AT(name), [CD_FI_LABEL] = AT(label), [CD_FI_REGION] = AT(region),
	[CD_FI_BW] = AT(bw), [CD_FI_DT] = AT(dt), [CD_FI_FAKE] = AT(fake),
	[CD_FI_GRAD_IN] = AT(grad_in), [CD_FI_GRAD_OUT] = AT(grad_out), [CD_FI_FORMAT] = AT(format),
	[CD_FI_VERSION] = AT(version), [CD_FI_RANK] = AT(rank), [CD_FI_WORLD] = AT(world_size),
	[CD_FI_HOST] = AT(host), [CD_FI_PID] = AT(pid), [CD_FI_T0] = AT(t0),
	[CD_FI_TORCH] = AT(torch), [CD_FI_RECORDER] = AT(recorder), [CD_FI_ARGS] = SPAN(args, nargs),
	[CD_FI_PARAMS] = SPAN(params, nparams), [CD_FI_PG] = AT(pg), [CD_FI_SEQ] = AT(seq),
	[CD_FI_BYTES] = AT(bytes), [CD_FI_DTYPE] = AT(dtype), [CD_FI_SHAPE] = SPAN(shape, nshape),
	[CD_FI_DESC] = AT(desc), [CD_FI_RANKS] = SPAN(ranks, nranks_list),
	[CD_FI_BACKEND] = AT(backend), [CD_FI_SRC] = AT(src), [CD_FI_FUNC] = AT(func),
	[CD_FI_COUNT] = AT(count), [CD_FI_REDOP] = AT(redop), [CD_FI_ROOT] = AT(root),
	[CD_FI_PEER] = AT(peer), [CD_FI_COMM] = AT(comm), [CD_FI_NRANKS] = AT(nranks),
	[CD_FI_STREAM] = AT(stream), [CD_FI_DUR] = AT(dur), [CD_FI_STATE] = AT(state),
	[CD_FI_PSEQ] = AT(pseq), [CD_FI_BUCKET] = AT(bucket), [CD_FI_HOW] = AT(how),
	[CD_FI_EXC] = AT(exc), [CD_FI_MSG] = AT(msg), [CD_FI_SIGNAL] = AT(signal),
	[CD_FI_CODE] = AT(code), [CD_FI_ENDS] = AT(ends), [CD_FI_LIGHT] = AT(light),
};
#undef AT
#undef SPAN

/* Field ids + 1 by key length, 0-terminated; the hot keys of op events
 * first in their length.  Every key is here: test_parse checks it. */
static const uint8_t by_len[][16] = {
#define F(id) (CD_FI_##id + 1)
	[1] = {F(T)},
	[2] = {F(EV), F(BW), F(DT), F(PG), F(T0)},
	[3] = {F(MOD), F(SEQ), F(PID), F(SRC), F(DUR), F(HOW), F(EXC), F(MSG)},
	[4] = {F(NAME), F(ARGS), F(FAKE), F(TYPE), F(RANK), F(HOST), F(DESC), F(FUNC), F(ROOT),
	       F(PEER), F(COMM), F(PSEQ), F(CODE), F(ENDS)},
	[5] = {F(BYTES), F(DTYPE), F(SHAPE), F(LABEL), F(TORCH), F(RANKS), F(COUNT), F(REDOP),
	       F(STATE), F(LIGHT)},
	[6] = {F(REGION), F(PARAMS), F(FORMAT), F(NRANKS), F(STREAM), F(BUCKET), F(SIGNAL)},
	[7] = {F(GRAD_IN), F(VERSION), F(BACKEND)},
	[8] = {F(GRAD_OUT), F(RECORDER)},
	[10] = {F(WORLD)},
#undef F
};

const struct cd_field *cd_field_at(enum cd_fid id)
{
	return (unsigned)id < CD_FI__COUNT ? &fields[id] : NULL;
}

const struct cd_field *cd_field_lookup(const char *p, uint32_t n)
{
	/* A short list per key length, first bytes compared first: keys are
	 * short and the table small, so this beats hashing. */
	if (n >= sizeof by_len / sizeof by_len[0])
		return NULL;
	for (const uint8_t *id = by_len[n]; *id; id++) {
		const struct cd_field *f = &fields[*id - 1];
		if (f->key[0] == p[0] && f->key[n - 1] == p[n - 1] && memcmp(f->key, p, n) == 0)
			return f;
	}
	return NULL;
}

enum cd_sub cd_subfield_lookup(const char *p, uint32_t n)
{
#define SUB(k, s) {k, sizeof k - 1, s}
	static const struct { const char *k; uint32_t n; enum cd_sub s; } subs[] = {
		SUB("shape", CD_SUB_SHAPE), SUB("placements", CD_SUB_PLACEMENTS),
		SUB("mesh", CD_SUB_MESH), SUB("name", CD_SUB_NAME), SUB("dtype", CD_SUB_DTYPE),
		SUB("nbytes", CD_SUB_NBYTES), SUB("requires_grad", CD_SUB_REQUIRES_GRAD),
	};
#undef SUB
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (subs[i].n == n && memcmp(subs[i].k, p, n) == 0)
			return subs[i].s;
	return CD_SUB_NONE;
}

void cd_event_clear(struct cd_event *e)
{
	memset(e, 0, sizeof *e);
}

void cd_event_clear_fields(struct cd_event *e, uint64_t fids)
{
	/* what the recorder writes for ops and module hooks, in a few stores */
	const uint64_t hot = 1ull << CD_FI_EV | 1ull << CD_FI_NAME | 1ull << CD_FI_MOD |
			     1ull << CD_FI_TYPE | 1ull << CD_FI_BW | 1ull << CD_FI_DT |
			     1ull << CD_FI_ARGS | 1ull << CD_FI_PARAMS | 1ull << CD_FI_FAKE |
			     1ull << CD_FI_GRAD_IN | 1ull << CD_FI_GRAD_OUT | 1ull << CD_FI_T;
	e->ev = CD_EV_UNKNOWN;
	e->have = 0;
	if (!(fids & ~hot)) {
		e->name = e->mod = e->type = (struct cd_str){NULL, 0};
		e->bw = e->dt = e->fake = e->grad_in = e->grad_out = false;
		e->args = NULL;
		e->nargs = 0;
		e->params = NULL;
		e->nparams = 0;
		e->t = 0;
		return;
	}
	while (fids) {
		int id = __builtin_ctzll(fids);
		fids &= fids - 1;
		char *at = (char *)e + storage[id < CD_FI__COUNT ? id : 0].off;
		/* one store each, not a call: a line sets a handful of fields */
		switch (id < CD_FI__COUNT ? storage[id].size : 0) {
		case 1:
			*at = 0;
			break;
		case 4:
			memset(at, 0, 4);
			break;
		case 8:
			memset(at, 0, 8);
			break;
		case 12:
			memset(at, 0, 12);
			break;
		case 16:
			memset(at, 0, 16);
			break;
		default:
			memset(e, 0, sizeof *e);   /* a field without a place above */
			return;
		}
	}
}

enum cd_status cd_field_set_str(struct cd_event *e, const struct cd_field *f,
				 struct cd_str s, struct cd_err *err)
{
	struct cd_str *dst = NULL;
	uint32_t bit = 0;

	switch (f->id) {
	case CD_FI_EV:
		e->ev = cd_ev_from_str(s.p, s.n);
		bit = CD_F_EV;
		break;
	case CD_FI_MOD: dst = &e->mod; bit = CD_F_MOD; break;
	case CD_FI_TYPE: dst = &e->type; bit = CD_F_TYPE; break;
	case CD_FI_NAME: dst = &e->name; bit = CD_F_NAME; break;
	case CD_FI_LABEL: dst = &e->label; bit = CD_F_LABEL; break;
	case CD_FI_FORMAT: dst = &e->format; bit = CD_F_FORMAT; break;
	case CD_FI_HOST: dst = &e->host; break;
	case CD_FI_TORCH: dst = &e->torch; break;
	case CD_FI_RECORDER: dst = &e->recorder; break;
	case CD_FI_PG: dst = &e->pg; bit = CD_F_PG; break;
	case CD_FI_DTYPE: dst = &e->dtype; break;
	case CD_FI_DESC: dst = &e->desc; break;
	case CD_FI_BACKEND: dst = &e->backend; break;
	case CD_FI_SRC: dst = &e->src; break;
	case CD_FI_FUNC: dst = &e->func; break;
	case CD_FI_REDOP: dst = &e->redop; break;
	case CD_FI_COMM: dst = &e->comm; break;
	case CD_FI_STREAM: dst = &e->stream; break;
	case CD_FI_STATE: dst = &e->state; break;
	case CD_FI_HOW: dst = &e->how; bit = CD_F_HOW; break;
	case CD_FI_EXC: dst = &e->exc; bit = CD_F_EXC; break;
	case CD_FI_MSG: dst = &e->msg; bit = CD_F_MSG; break;
	default:
		return cd_fail(err, CD_ERR_TRACE, "internal: field \"%s\" is not a string", f->key);
	}
	if (dst)
		*dst = s;
	e->have |= bit;
	return CD_OK;
}

enum cd_status cd_field_set_int(struct cd_event *e, const struct cd_field *f,
				 int64_t v, struct cd_err *err)
{
	int64_t max = f->id == CD_FI_T0 ? CD_T0_MAX : CD_INT_MAX;
	if (v > max || v < -max)
		return cd_fail(err, CD_ERR_TRACE, "field \"%s\" is out of range", f->key);
	switch (f->id) {
	case CD_FI_T: e->t = v; e->have |= CD_F_T; break;
	case CD_FI_REGION: e->region = v; e->have |= CD_F_REGION; break;
	case CD_FI_VERSION: e->version = v; e->have |= CD_F_VERSION; break;
	case CD_FI_RANK: e->rank = v; e->have |= CD_F_RANK; break;
	case CD_FI_WORLD: e->world_size = v; e->have |= CD_F_WORLD; break;
	case CD_FI_PID: e->pid = v; break;
	case CD_FI_T0: e->t0 = v; break;
	case CD_FI_SEQ: e->seq = v; e->have |= CD_F_SEQ; break;
	case CD_FI_BYTES: e->bytes = v; e->have |= CD_F_BYTES; break;
	case CD_FI_COUNT: e->count = v; e->have |= CD_F_COUNT; break;
	case CD_FI_ROOT: e->root = v; e->have |= CD_F_ROOT; break;
	case CD_FI_PEER: e->peer = v; e->have |= CD_F_PEER; break;
	case CD_FI_NRANKS: e->nranks = v; e->have |= CD_F_NRANKS; break;
	case CD_FI_DUR: e->dur = v; e->have |= CD_F_DUR; break;
	case CD_FI_PSEQ: e->pseq = v; e->have |= CD_F_PSEQ; break;
	case CD_FI_BUCKET: e->bucket = v; e->have |= CD_F_BUCKET; break;
	case CD_FI_SIGNAL: e->signal = v; e->have |= CD_F_SIGNAL; break;
	case CD_FI_CODE: e->code = v; e->have |= CD_F_CODE; break;
	default:
		return cd_fail(err, CD_ERR_TRACE, "internal: field \"%s\" is not an integer", f->key);
	}
	return CD_OK;
}

void cd_field_set_bool(struct cd_event *e, const struct cd_field *f, bool v)
{
	switch (f->id) {
	case CD_FI_BW: e->bw = v; break;
	case CD_FI_DT: e->dt = v; break;
	case CD_FI_FAKE: e->fake = v; break;
	case CD_FI_GRAD_IN: e->grad_in = v; break;
	case CD_FI_GRAD_OUT: e->grad_out = v; break;
	case CD_FI_ENDS: e->ends = v; break;
	case CD_FI_LIGHT: e->light = v; break;
	default: break;
	}
}

static enum cd_status need(const struct cd_event *e, uint32_t bit, const char *field,
			   struct cd_err *err)
{
	if (e->have & bit)
		return CD_OK;
	return cd_fail(err, CD_ERR_TRACE, "missing field \"%s\" in %s event", field,
		       cd_ev_name(e->ev));
}

static enum cd_status nonempty(struct cd_str s, const char *field, const struct cd_event *e,
			       struct cd_err *err)
{
	if (s.n > 0)
		return CD_OK;
	return cd_fail(err, CD_ERR_TRACE, "empty \"%s\" in %s event", field, cd_ev_name(e->ev));
}

static enum cd_status check_dims(const int64_t *d, uint32_t n, const char *what,
				 struct cd_err *err)
{
	for (uint32_t i = 0; i < n; i++) {
		if (d[i] < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative value %lld in %s",
				       (long long)d[i], what);
		if (d[i] > CD_INT_MAX)
			return cd_fail(err, CD_ERR_TRACE, "value out of range in %s", what);
	}
	return CD_OK;
}

static enum cd_status check_params(const struct cd_event *e, struct cd_err *err)
{
	enum cd_status st;
	for (uint32_t i = 0; i < e->nparams; i++) {
		const struct cd_param *p = &e->params[i];
		if (!p->name.p || p->name.n == 0)
			return cd_fail(err, CD_ERR_TRACE, "params entry %u has no \"name\"", i + 1);
		if ((st = check_dims(p->shape, p->ndim, "a parameter shape", err)))
			return st;
		if (p->nbytes > CD_INT_MAX)
			return cd_fail(err, CD_ERR_TRACE, "nbytes out of range in params entry %u",
				       i + 1);
		if (p->nbytes < -1)
			return cd_fail(err, CD_ERR_TRACE, "negative nbytes in params entry %u", i + 1);
	}
	return CD_OK;
}

enum cd_status cd_event_validate(const struct cd_event *e, struct cd_err *err)
{
	enum cd_status st = CD_OK;

	/* an op with a name, maybe a time and DTensor args, nothing else: the
	 * checks below that can fail for it, in short */
	if (e->ev == CD_EV_OP && e->name.n &&
	    !(e->have & ~(uint32_t)(CD_F_EV | CD_F_NAME | CD_F_T | CD_F_ARGS)) && e->t >= 0) {
		for (uint32_t i = 0; i < e->nargs; i++)
			if ((st = check_dims(e->args[i].shape, e->args[i].ndim, "an op argument shape",
					     err)))
				return st;
		return CD_OK;
	}

	if (!(e->have & CD_F_EV))
		return cd_fail(err, CD_ERR_TRACE, "missing field \"ev\"");
	if ((st = check_dims(e->shape, e->nshape, "\"shape\"", err)) ||
	    (st = check_dims(e->ranks, e->nranks_list, "\"ranks\"", err)))
		return st;
	if ((e->have & CD_F_T) && e->t < 0)
		return cd_fail(err, CD_ERR_TRACE, "negative time \"t\" in %s event", cd_ev_name(e->ev));
	/* the root of the module tree has that name: no module may take it */
	if ((e->have & CD_F_MOD) && e->mod.n == 6 && memcmp(e->mod.p, "Global", 6) == 0)
		return cd_fail(err, CD_ERR_TRACE, "\"mod\" is \"Global\", the reserved name of the "
			       "module tree's root, in %s event", cd_ev_name(e->ev));

	switch (e->ev) {
	case CD_EV_META:
		if ((st = need(e, CD_F_FORMAT, "format", err)))
			return st;
		if (e->format.n != 15 || memcmp(e->format.p, "commdebug-trace", 15) != 0)
			return cd_fail(err, CD_ERR_TRACE,
				       "not a commdebug trace: meta format is \"%.*s\"",
				       (int)(e->format.n > 64 ? 64 : e->format.n), e->format.p);
		if ((st = need(e, CD_F_VERSION, "version", err)))
			return st;
		if (e->version != 1)
			return cd_fail(err, CD_ERR_TRACE,
				       "unsupported trace version %lld (this commdebug reads version 1)",
				       (long long)e->version);
		if ((e->have & CD_F_WORLD) && (e->world_size < 1 || e->world_size > (1 << 24)))
			return cd_fail(err, CD_ERR_TRACE, "world_size %lld is out of range",
				       (long long)e->world_size);
		if ((e->have & CD_F_RANK) && e->rank < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative rank %lld", (long long)e->rank);
		if ((e->have & CD_F_RANK) && (e->have & CD_F_WORLD) && e->rank >= e->world_size)
			return cd_fail(err, CD_ERR_TRACE, "rank %lld is not below world_size %lld",
				       (long long)e->rank, (long long)e->world_size);
		break;
	case CD_EV_PG:
		return need(e, CD_F_NAME, "name", err);
	case CD_EV_REGION_ENTER:
	case CD_EV_REGION_EXIT:
		if ((st = need(e, CD_F_REGION, "region", err)))
			return st;
		if (e->region < 0 || e->region > INT32_MAX)
			return cd_fail(err, CD_ERR_TRACE, "region %lld is out of range",
				       (long long)e->region);
		break;
	case CD_EV_FW_PRE:
		if ((st = need(e, CD_F_TYPE, "type", err)))
			return st;
		__attribute__((fallthrough));
	case CD_EV_DDP:
		/* the rest of a ddp event (buckets, caps) is checked by buckets.c */
		if ((st = check_params(e, err)))
			return st;
		/* fw_pre and ddp need mod too */
		__attribute__((fallthrough));
	case CD_EV_FW_POST:
	case CD_EV_FW_DONE:
	case CD_EV_BW_PRE:
	case CD_EV_BW_ENTER:
	case CD_EV_BW_EXIT:
		if ((st = need(e, CD_F_MOD, "mod", err)))
			return st;
		return nonempty(e->mod, "mod", e, err);
	case CD_EV_OP:
	case CD_EV_COLL:
		if ((st = need(e, CD_F_NAME, "name", err)))
			return st;
		if ((st = nonempty(e->name, "name", e, err)))
			return st;
		for (uint32_t i = 0; i < e->nargs; i++)
			if ((st = check_dims(e->args[i].shape, e->args[i].ndim, "an op argument shape",
					     err)))
				return st;
		if ((e->have & CD_F_BYTES) && e->bytes < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative bytes in %s event",
				       cd_ev_name(e->ev));
		if ((e->have & CD_F_BUCKET) && e->bucket < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative bucket in %s event",
				       cd_ev_name(e->ev));
		break;
	case CD_EV_NCCL:
		if ((e->have & CD_F_BYTES) && e->bytes < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative bytes in nccl event");
		if ((e->have & CD_F_COUNT) && e->count < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative count in nccl event");
		if ((e->have & CD_F_DUR) && e->dur < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative dur in nccl event");
		if ((e->have & CD_F_NRANKS) && (e->nranks < 1 || e->nranks > (1 << 24)))
			return cd_fail(err, CD_ERR_TRACE, "nranks %lld is out of range",
				       (long long)e->nranks);
		break;
	case CD_EV_TRIM:
		/* regions up to region dropped; with pg, that group's collectives
		 * up to seq were in them */
		if ((st = need(e, CD_F_REGION, "region", err)))
			return st;
		if ((e->have & CD_F_SEQ) && e->seq < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative seq in trim event");
		break;
	case CD_EV_END:
		/* how the process ended (an unknown "how" is kept: ranks reports it
		 * as such, so a newer recorder's traces still read) */
		if ((st = need(e, CD_F_HOW, "how", err)) || (st = nonempty(e->how, "how", e, err)))
			return st;
		if (e->how.n == 9 && memcmp(e->how.p, "exception", 9) == 0 &&
		    (st = need(e, CD_F_EXC, "exc", err)))
			return st;
		if (e->how.n == 6 && memcmp(e->how.p, "signal", 6) == 0 &&
		    (st = need(e, CD_F_SIGNAL, "signal", err)))
			return st;
		if ((e->have & CD_F_SIGNAL) && (e->signal < 1 || e->signal > 255))
			return cd_fail(err, CD_ERR_TRACE, "signal %lld is out of range in end event",
				       (long long)e->signal);
		break;
	case CD_EV_NCCL_LOST:
		if ((st = need(e, CD_F_COUNT, "count", err)))
			return st;
		if (e->count < 0)
			return cd_fail(err, CD_ERR_TRACE, "negative count in nccl_lost event");
		break;
	default:
		break;
	}
	return st;
}

static bool str_eq(struct cd_str a, struct cd_str b)
{
	if (!a.p || !b.p)
		return !a.p && !b.p;
	return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

static bool dims_eq(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb)
{
	return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

bool cd_event_equal(const struct cd_event *a, const struct cd_event *b)
{
	if (a->ev != b->ev || a->have != b->have || a->bw != b->bw || a->dt != b->dt ||
	    a->fake != b->fake || a->grad_in != b->grad_in || a->grad_out != b->grad_out ||
	    a->ends != b->ends || a->light != b->light || a->signal != b->signal ||
	    a->code != b->code)
		return false;
	if (a->t != b->t || a->region != b->region || a->version != b->version ||
	    a->rank != b->rank || a->world_size != b->world_size || a->pid != b->pid ||
	    (a->t0 > b->t0 ? a->t0 - b->t0 : b->t0 - a->t0) > 4096 /* a double's precision */ || a->seq != b->seq || a->bytes != b->bytes || a->count != b->count ||
	    a->dur != b->dur || a->nranks != b->nranks || a->root != b->root || a->peer != b->peer ||
	    a->pseq != b->pseq || a->bucket != b->bucket)
		return false;
	const struct cd_str *sa[] = {&a->mod, &a->type, &a->name, &a->label, &a->format, &a->host,
				     &a->torch, &a->recorder, &a->pg, &a->desc, &a->backend,
				     &a->dtype, &a->src, &a->func, &a->comm, &a->redop, &a->state,
				     &a->stream, &a->how, &a->exc, &a->msg};
	const struct cd_str *sb[] = {&b->mod, &b->type, &b->name, &b->label, &b->format, &b->host,
				     &b->torch, &b->recorder, &b->pg, &b->desc, &b->backend,
				     &b->dtype, &b->src, &b->func, &b->comm, &b->redop, &b->state,
				     &b->stream, &b->how, &b->exc, &b->msg};
	for (size_t i = 0; i < sizeof sa / sizeof sa[0]; i++)
		if (!str_eq(*sa[i], *sb[i]))
			return false;
	if (!dims_eq(a->shape, a->nshape, b->shape, b->nshape) ||
	    !dims_eq(a->ranks, a->nranks_list, b->ranks, b->nranks_list))
		return false;
	if (a->nargs != b->nargs || a->nparams != b->nparams)
		return false;
	for (uint32_t i = 0; i < a->nargs; i++) {
		const struct cd_arg *x = &a->args[i], *y = &b->args[i];
		if (x->has_shape != y->has_shape || !dims_eq(x->shape, x->ndim, y->shape, y->ndim) ||
		    !str_eq(x->placements, y->placements) || !str_eq(x->mesh, y->mesh))
			return false;
	}
	for (uint32_t i = 0; i < a->nparams; i++) {
		const struct cd_param *x = &a->params[i], *y = &b->params[i];
		if (x->has_shape != y->has_shape || !dims_eq(x->shape, x->ndim, y->shape, y->ndim) ||
		    !str_eq(x->name, y->name) || !str_eq(x->dtype, y->dtype) ||
		    !str_eq(x->placements, y->placements) || !str_eq(x->mesh, y->mesh) ||
		    x->nbytes != y->nbytes || x->requires_grad != y->requires_grad)
			return false;
	}
	return true;
}

/* ---- arena ---- */

struct cd_arena_block {
	struct cd_arena_block *next;
	size_t size;
	_Alignas(16) unsigned char data[];
};

void *cd_arena_alloc(struct cd_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!a->head || a->used_in_head + n > a->head->size) {
		size_t size = 64 * 1024;
		if (a->head && a->head->size * 2 > size)
			size = a->head->size * 2;
		if (size < n)
			size = n;
		struct cd_arena_block *b = malloc(sizeof *b + size);
		if (!b)
			return NULL;
		b->next = a->head;
		b->size = size;
		a->head = b;
		a->used_in_head = 0;
	}
	void *p = a->head->data + a->used_in_head;
	a->used_in_head += n;
	return p;
}

/* The largest block an arena keeps across lines. */
#define CD_ARENA_KEEP_MAX (4u << 20)

void cd_arena_reset(struct cd_arena *a)
{
	/* keep only the newest (largest) block, unless one huge line made it
	 * huge: then none (the next line starts small again) */
	if (!a->head)
		return;
	if (a->head->size > CD_ARENA_KEEP_MAX) {
		struct cd_arena_block *all = a->head;
		while (all) {
			struct cd_arena_block *next = all->next;
			free(all);
			all = next;
		}
		a->head = NULL;
		a->used_in_head = 0;
		return;
	}
	struct cd_arena_block *b = a->head->next;
	while (b) {
		struct cd_arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->head->next = NULL;
	a->used_in_head = 0;
}

void cd_arena_free(struct cd_arena *a)
{
	cd_arena_reset(a);
	free(a->head);
	a->head = NULL;
	a->used_in_head = 0;
}
