/* Unit tests of the NCCL join (nccl.h): NCCL calls tagged (pg, pseq) serve
 * the Python collective with that pg and seq; a completion carries the GPU
 * time of the call with the same comm and seq; what no call serves, and
 * calls no collective asked for, stay apart; a collective's calls are
 * charged to the module that issued it. */
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "nccl.h"
#include "parse.h"
#include "replay.h"

static struct cd_parser ps;

/* The event's strings point into this line: it lives until the next parse. */
static struct cd_event parse(const char *fmt, ...)
{
	static char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	struct cd_event e;
	struct cd_err err = {0};
	if (cd_parse_fast(&ps, line, strlen(line), &e, &err)) {
		fprintf(stderr, "bad test event %s: %s\n", line, err.msg);
		abort();
	}
	return e;
}

static void nccl(struct cd_nccl *n, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	struct cd_event e = parse("%s", text);
	struct cd_err err = {0};
	CHECK(cd_nccl_event(n, &e, &err) == CD_OK);
}

static struct cd_str S(const char *s)
{
	return (struct cd_str){s, (uint32_t)strlen(s)};
}

/* pg "1": seq 1 one AllReduce of 4096 bytes, completed in 2048 ns;
 * seq 2 two calls (coalesced) of 1000 and 24 bytes, one completed only;
 * seq 3 nothing; an untagged call; a completion of a call not in the trace. */
static void calls(struct cd_nccl *n)
{
	nccl(n, "{\"ev\":\"nccl\",\"func\":\"AllReduce\",\"bytes\":4096,\"comm\":\"0xa\","
		"\"nranks\":2,\"seq\":1,\"pg\":\"1\",\"pseq\":1,\"state\":\"enqueued\",\"t\":1000}");
	nccl(n, "{\"ev\":\"nccl\",\"func\":\"AllGather\",\"bytes\":1000,\"comm\":\"0xa\","
		"\"nranks\":2,\"seq\":2,\"pg\":\"1\",\"pseq\":2,\"state\":\"enqueued\",\"t\":2000}");
	nccl(n, "{\"ev\":\"nccl\",\"func\":\"AllGather\",\"bytes\":24,\"comm\":\"0xa\","
		"\"nranks\":2,\"seq\":3,\"pg\":\"1\",\"pseq\":2,\"state\":\"enqueued\",\"t\":2100}");
	nccl(n, "{\"ev\":\"nccl\",\"func\":\"Broadcast\",\"bytes\":8,\"comm\":\"0xa\","
		"\"nranks\":2,\"seq\":4,\"state\":\"enqueued\",\"t\":2200}");
	nccl(n, "{\"ev\":\"nccl\",\"state\":\"completed\",\"comm\":\"0xa\",\"seq\":1,\"dur\":2048,"
		"\"t\":3100}");
	nccl(n, "{\"ev\":\"nccl\",\"state\":\"completed\",\"comm\":\"0xa\",\"seq\":2,\"dur\":500,"
		"\"t\":3200}");
	nccl(n, "{\"ev\":\"nccl\",\"state\":\"completed\",\"comm\":\"0xb\",\"seq\":9,\"dur\":1,"
		"\"t\":3300}");
}

static void test_join(void)
{
	struct cd_nccl n = {0};
	uint32_t k;
	int64_t bytes, dur;
	calls(&n);
	CHECK(cd_nccl_any(&n));
	CHECK(n.calls.n == 4);
	/* (1, 1): one call, its bytes and GPU time */
	cd_nccl_served(&n, S("1"), 1, &k, &bytes, &dur);
	CHECK(k == 1 && bytes == 4096 && dur == 2048);
	/* (1, 2): two calls, bytes summed; GPU time unknown (one not completed) */
	cd_nccl_served(&n, S("1"), 2, &k, &bytes, &dur);
	CHECK(k == 2 && bytes == 1024 && dur == -1);
	/* (1, 3) and another group: no call */
	cd_nccl_served(&n, S("1"), 3, &k, &bytes, &dur);
	CHECK(k == 0);
	cd_nccl_served(&n, S("2"), 1, &k, &bytes, &dur);
	CHECK(k == 0);
	/* the completion of a call not in the trace */
	CHECK(n.orphan_done == 1);
	cd_nccl_free(&n);
}

struct ctx {
	struct cd_nccl *n;
};

static void on_coll(void *ud, const struct cd_replay *r, const struct cd_event *e, uint32_t coll)
{
	struct cd_err err = {0};
	(void)coll;
	CHECK(cd_nccl_charge(((struct ctx *)ud)->n, r, e, &err) == CD_OK);
}

static enum cd_status on_region(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	(void)ud, (void)r, (void)err;
	return CD_OK;
}

static void ev(struct cd_replay *r, const char *line)
{
	struct cd_event e = parse("%s", line);
	struct cd_err err = {0};
	if (cd_replay_event(r, &e, &err))
		abort();
}

static void test_charge_modules(void)
{
	/* Net.lin all-reduces (pg 1 seq 1) forward: the charge names Net.lin
	 * (and Net, open around it); seq 3 is served by no call: unserved */
	struct cd_nccl n = {0};
	struct ctx c = {&n};
	struct cd_replay r;
	struct cd_err err = {0};
	struct cd_replay_opts o = {.on_collective = on_coll, .region_done = on_region, .ud = &c};
	calls(&n);
	if (cd_replay_init(&r, &o, &err))
		abort();
	ev(&r, "{\"ev\":\"region_enter\",\"region\":1}");
	ev(&r, "{\"ev\":\"fw_pre\",\"mod\":\"Net\",\"type\":\"N\"}");
	ev(&r, "{\"ev\":\"fw_pre\",\"mod\":\"Net.lin\",\"type\":\"L\"}");
	ev(&r, "{\"ev\":\"op\",\"name\":\"_c10d_functional.all_reduce.default\",\"pg\":\"1\","
	       "\"seq\":1,\"bytes\":4096}");
	ev(&r, "{\"ev\":\"op\",\"name\":\"_c10d_functional.all_reduce.default\",\"pg\":\"1\","
	       "\"seq\":3,\"bytes\":4}");
	ev(&r, "{\"ev\":\"fw_post\",\"mod\":\"Net.lin\"}");
	ev(&r, "{\"ev\":\"fw_done\",\"mod\":\"Net.lin\"}");
	ev(&r, "{\"ev\":\"fw_post\",\"mod\":\"Net\"}");
	ev(&r, "{\"ev\":\"fw_done\",\"mod\":\"Net\"}");
	ev(&r, "{\"ev\":\"region_exit\",\"region\":1}");
	CHECK(cd_replay_finish(&r, &err) == CD_OK);
	CHECK(n.charges.n == 1);
	if (n.charges.n == 1) {
		const struct cd_ncharge *ch = &n.charges.v[0];
		CHECK(!ch->bw);
		uint32_t lin = cd_intern_find(&r.mods, "Net.lin", 7);
		bool has_lin = false;
		for (uint32_t k = 0; k < ch->nmods; k++)
			has_lin |= n.mods.v[ch->mods + 2 * k] == lin;
		CHECK(lin != CD_NOID && has_lin);
	}
	CHECK(n.unserved == 1);
	/* the report: Net.lin's bytes, the calls no collective asked for */
	FILE *f = tmpfile();
	struct cd_out out;
	cd_out_init(&out, f);
	CHECK(cd_nccl_report(&out, &n, &r.mods, "t.nccl.jsonl", true, &err) == CD_OK);
	CHECK(cd_out_flush(&out, &err) == CD_OK);
	long len = ftell(f);
	char *buf = calloc(1, (size_t)len + 1);
	rewind(f);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len)
		abort();
	CHECK(strstr(buf, "\"Net.lin\"") != NULL);
	CHECK(strstr(buf, "4096") != NULL);
	free(buf);
	fclose(f);
	cd_out_free(&out);
	cd_replay_free(&r);
	cd_nccl_free(&n);
}

int main(void)
{
	TEST(test_join);
	TEST(test_charge_modules);
	cd_parser_free(&ps);
	return check_done();
}
