/* Unit tests of the two line parsers: values, errors, and agreement. */
#include <stdlib.h>

#include "check.h"
#include "fields.h"
#include "parse.h"

static struct cd_parser pf, pg;
/* cd_parse_line's streams, fed every line the tests parse: each line must
 * give what a fresh parse gives, whatever came before it; and with
 * skip_detail, fresh fast and general parsers to compare them with */
static struct cd_parser pl, pls = {.skip_detail = true};
static struct cd_parser pfs = {.skip_detail = true}, pgs = {.skip_detail = true};

/* The line through the streams agrees with the fresh parsers. */
static bool stream_agrees(const char *line)
{
	struct cd_event a, b;
	const struct cd_event *l;
	struct cd_err ea = {0}, eb = {0}, el = {0};
	size_t n = strlen(line);
	pl.skip_detail = pf.skip_detail;
	enum cd_status sa = cd_parse_fast(&pf, line, n, &a, &ea);
	enum cd_status sl = cd_parse_line(&pl, line, n, &l, &el);
	if (sa != sl || strcmp(ea.msg, el.msg) != 0 || ea.column != el.column ||
	    (sa == CD_OK && !cd_event_equal(&a, l))) {
		fprintf(stderr, "  %s\n  fresh: %d %s / stream: %d %s\n", line, sa, ea.msg, sl, el.msg);
		return false;
	}
	/* skipping args and params: fast and general agree, the stream too */
	sa = cd_parse_fast(&pfs, line, n, &a, &ea);
	enum cd_status sb = cd_parse_general(&pgs, line, n, &b, &eb);
	sl = cd_parse_line(&pls, line, n, &l, &el);
	if (sa != sl || strcmp(ea.msg, el.msg) != 0 || (sa == CD_OK && !cd_event_equal(&a, l)) ||
	    (sa == CD_OK && (sb != CD_OK || !cd_event_equal(&a, &b)))) {
		fprintf(stderr, "  %s\n  skipping: fresh %d %s / stream %d %s / general %d %s\n", line,
			sa, ea.msg, sl, el.msg, sb, eb.msg);
		return false;
	}
	return true;
}

static enum cd_status fast(const char *line, struct cd_event *e, struct cd_err *err)
{
	CHECK(stream_agrees(line));
	return cd_parse_fast(&pf, line, strlen(line), e, err);
}

static enum cd_status general(const char *line, struct cd_event *e, struct cd_err *err)
{
	return cd_parse_general(&pg, line, strlen(line), e, err);
}

static bool streq(struct cd_str s, const char *want)
{
	return s.p && s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

/* Both parsers accept the line and produce the same event. */
static bool agree(const char *line)
{
	struct cd_event a, b;
	struct cd_err ea = {0}, eb = {0};
	enum cd_status sa = fast(line, &a, &ea);
	enum cd_status sb = general(line, &b, &eb);
	if (sa || sb) {
		fprintf(stderr, "  %s\n  fast: %d %s / general: %d %s\n", line, sa, ea.msg, sb, eb.msg);
		return false;
	}
	return cd_event_equal(&a, &b);
}

/* Both parsers reject the line; the fast one's message contains want. */
static bool reject(const char *line, const char *want)
{
	struct cd_event a, b;
	struct cd_err ea = {0}, eb = {0};
	enum cd_status sa = fast(line, &a, &ea);
	enum cd_status sb = general(line, &b, &eb);
	if (!sa || !sb || !strstr(ea.msg, want)) {
		fprintf(stderr, "  %s\n  fast: %d \"%s\" / general: %d \"%s\" (want \"%s\")\n", line, sa,
			ea.msg, sb, eb.msg, want);
		return false;
	}
	return true;
}

static void test_op_fields(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	CHECK(fast("{\"ev\":\"op\",\"name\":\"aten.mm.default\",\"bw\":true,\"dt\":false,\"t\":12}", &e,
		   &err) == CD_OK);
	CHECK(e.ev == CD_EV_OP);
	CHECK(streq(e.name, "aten.mm.default"));
	CHECK(e.bw && !e.dt && !e.fake);
	CHECK(e.t == 12 && (e.have & CD_F_T));
}

static void test_dtensor_args(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	const char *l = "{\"ev\":\"op\",\"name\":\"aten.mm.default\",\"dt\":true,\"args\":["
			"{\"shape\":[4,8],\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"},"
			"{\"shape\":[],\"placements\":\"(Replicate(),)\",\"extra\":{\"a\":[1,{}]}}]}";
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK(e.nargs == 2);
	CHECK(e.args[0].ndim == 2 && e.args[0].shape[0] == 4 && e.args[0].shape[1] == 8);
	CHECK(streq(e.args[0].placements, "(Shard(dim=0),)"));
	CHECK(streq(e.args[0].mesh, "M"));
	CHECK(e.args[1].has_shape && e.args[1].ndim == 0);
	CHECK(e.args[1].mesh.p == NULL);
	CHECK(agree(l));
}

static void test_params(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	const char *l = "{\"ev\":\"fw_pre\",\"mod\":\"M.net1\",\"type\":\"torch.nn.Linear\",\"bw\":false,"
			"\"params\":[{\"name\":\"weight\",\"shape\":[16,10],\"dtype\":\"torch.float32\","
			"\"nbytes\":640,\"requires_grad\":true,\"placements\":\"(Shard(dim=0),)\"},"
			"{\"name\":\"bias\",\"shape\":[16]}],\"grad_in\":true}";
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK(e.nparams == 2);
	CHECK(streq(e.params[0].name, "weight") && e.params[0].nbytes == 640);
	CHECK(e.params[0].requires_grad);
	CHECK(e.params[1].nbytes == -1 && e.params[1].placements.p == NULL);
	CHECK(e.grad_in);
	CHECK(agree(l));
}

static void test_escapes_and_unicode(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	const char *l = "{\"ev\":\"fw_pre\",\"mod\":\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00/\\n\",\"type\":\"T\"}";
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK(streq(e.mod, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80/\n"));
	CHECK(agree(l));
	CHECK(agree("{\"ev\":\"fw_pre\",\"mod\":\"\xc3\xa9t\xc3\xa9\",\"type\":\"T\"}"));
}

static void test_null_and_unknown(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	const char *l = "{\"future\":[1,2,{\"x\":null}],\"ev\":\"region_enter\",\"region\":3,"
			"\"label\":null, \"t\" : 5 }";
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK(e.ev == CD_EV_REGION_ENTER && e.region == 3 && !(e.have & CD_F_LABEL));
	CHECK(agree(l));
	/* unknown event types are kept as unknown, not rejected */
	CHECK(fast("{\"ev\":\"from_the_future\",\"x\":1}", &e, &err) == CD_OK);
	CHECK(e.ev == CD_EV_UNKNOWN);
}

static void test_meta(void)
{
	CHECK(agree("{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":3,"
		    "\"world_size\":4,\"host\":\"n0\",\"pid\":7,\"t0\":1700000000000000000}"));
	CHECK(reject("{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":2}",
		     "unsupported trace version 2"));
	CHECK(reject("{\"ev\":\"meta\",\"format\":\"other\",\"version\":1}", "not a commdebug trace"));
	CHECK(reject("{\"ev\":\"meta\",\"format\":\"commdebug-trace\"}", "missing field \"version\""));
	CHECK(reject("{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":4,"
		     "\"world_size\":4}", "rank 4 is not below world_size 4"));
}

static void test_errors(void)
{
	struct cd_event e;
	struct cd_err err = {0};

	CHECK(reject("{\"ev\":\"fw_pre\",\"type\":\"T\"}", "missing field \"mod\" in fw_pre event"));
	CHECK(reject("{\"ev\":\"op\"}", "missing field \"name\" in op event"));
	CHECK(reject("{\"name\":\"x\"}", "missing field \"ev\""));
	CHECK(reject("{\"ev\":\"region_enter\",\"region\":\"1\"}", "field \"region\" must be an integer"));
	CHECK(reject("{\"ev\":\"region_enter\",\"region\":-1}", "out of range"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"bw\":1}", "must be true or false"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"t\":99999999999999999999}", "out of range"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"t\":-5}", "negative time"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"dt\":true,\"args\":[{\"shape\":[-1]}]}",
		     "negative value"));
	CHECK(reject("[1,2]", "JSON"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\"} trailing", "JSON"));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\"", "JSON"));
	CHECK(reject("", "JSON"));
	/* the column points at the problem */
	CHECK(fast("{\"ev\":\"op\" \"name\":\"x\"}", &e, &err) != CD_OK);
	CHECK(err.column == 12);
	/* the fast parser is the stricter one */
	CHECK(fast("{\"ev\":\"op\",\"name\":\"\xff\"}", &e, &err) != CD_OK);
	CHECK(strstr(err.msg, "UTF-8") != NULL);
	CHECK(fast("{\"ev\":\"op\",\"name\":\"a\\u0000\"}", &e, &err) != CD_OK);
	CHECK(fast("{\"ev\":\"region_enter\",\"region\":1.5}", &e, &err) != CD_OK);
}

static void test_limits(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	/* nesting deeper than the limit in an unknown field */
	char *deep = malloc(1000);
	strcpy(deep, "{\"ev\":\"op\",\"name\":\"x\",\"u\":");
	size_t n = strlen(deep);
	for (int i = 0; i < 200; i++)
		deep[n++] = '[';
	for (int i = 0; i < 200; i++)
		deep[n++] = ']';
	deep[n++] = '}';
	deep[n] = '\0';
	CHECK(fast(deep, &e, &err) != CD_OK && strstr(err.msg, "nesting"));
	free(deep);
	/* a list longer than CD_LIST_MAX */
	size_t cap = 16 * (CD_LIST_MAX + 10);
	char *big = malloc(cap);
	n = (size_t)sprintf(big, "{\"ev\":\"op\",\"name\":\"x\",\"shape\":[");
	for (int i = 0; i < CD_LIST_MAX + 1; i++)
		n += (size_t)sprintf(big + n, i ? ",%d" : "%d", i);
	strcpy(big + n, "]}");
	CHECK(reject(big, "too many entries"));
	free(big);
}

/* A key twice in one object: a repeated "ev" must not change the event's
 * type, and no other repeat is taken either (known or not, top level or
 * inside an args/params entry). */
static void test_duplicate_keys(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"ev\":\"meta\"}", "duplicate key \"ev\" in the event"));
	CHECK(reject("{\"ev\":\"meta\",\"ev\":\"op\",\"name\":\"x\"}", "duplicate key \"ev\""));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"name\":\"y\"}", "duplicate key \"name\""));
	/* null counts as present for this rule */
	CHECK(reject("{\"ev\":\"fw_pre\",\"mod\":\"a\",\"type\":\"T\",\"mod\":null}",
		     "duplicate key \"mod\""));
	/* the same key written with an escape is the same key */
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"n\\u0061me\":\"y\"}", "duplicate key \"name\""));
	/* keys this reader does not know */
	CHECK(reject("{\"ev\":\"op\",\"zz\":1,\"name\":\"x\",\"a\":2,\"zz\":3}", "duplicate key \"zz\""));
	CHECK(reject("{\"ev\":\"op\",\"name\":\"x\",\"dt\":true,\"args\":[{\"shape\":[1],\"shape\":[2]}]}",
		     "duplicate key \"shape\" in an args entry"));
	CHECK(reject("{\"ev\":\"fw_pre\",\"mod\":\"a\",\"type\":\"T\",\"params\":[{\"name\":\"w\",\"q\":1,\"q\":2}]}",
		     "duplicate key \"q\" in a params entry"));
	/* the column is that of the repeated key */
	CHECK(fast("{\"ev\":\"op\",\"name\":\"x\",\"ev\":\"op\"}", &e, &err) != CD_OK);
	CHECK(err.column == 23);
	CHECK(fast("{\"ev\":\"op\",\"k\":1,\"name\":\"x\",\"k\":2}", &e, &err) != CD_OK);
	CHECK(err.column == 29);
	/* distinct keys, prefixes of each other, are fine; so are repeats
	 * inside a value this reader skips */
	CHECK(agree("{\"ev\":\"op\",\"name\":\"x\",\"na\":1,\"nam\":2,\"u\":{\"a\":1}}"));
	/* args skipped unread (skip_detail): neither parser looks inside */
	pf.skip_detail = pg.skip_detail = true;
	CHECK(agree("{\"ev\":\"op\",\"name\":\"x\",\"dt\":true,\"args\":[{\"shape\":[1],\"shape\":2}]}"));
	pf.skip_detail = pg.skip_detail = false;
}

/* "Global" is the root of the module tree: no event may name a module so. */
/* The ddp event and the coll event's bucket index: both parsers agree; the
 * rest of a ddp event (caps, buckets) is buckets.c's to check. */
static void test_ddp(void)
{
	struct cd_event e;
	struct cd_err err = {0};
	const char *l = "{\"ev\":\"ddp\",\"mod\":\"DDP\",\"pg\":\"0\",\"cap\":300,"
			"\"first_cap\":100,\"rebuilt\":false,\"params\":[{\"name\":\"DDP.module.w\","
			"\"nbytes\":64,\"dtype\":\"torch.float32\",\"shape\":[4,4],"
			"\"requires_grad\":true}],\"buckets\":[[0]],\"sizes\":[64]}";
	CHECK(agree(l));
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK(e.ev == CD_EV_DDP);
	CHECK(streq(e.mod, "DDP") && streq(e.pg, "0"));
	CHECK(e.nparams == 1 && e.params[0].nbytes == 64 && streq(e.params[0].name, "DDP.module.w"));
	CHECK(reject("{\"ev\":\"ddp\",\"pg\":\"0\"}", "missing field \"mod\""));
	CHECK(reject("{\"ev\":\"ddp\",\"mod\":\"D\",\"params\":[{\"nbytes\":1}]}",
		     "has no \"name\""));
	CHECK(reject("{\"ev\":\"ddp\",\"mod\":\"D\",\"params\":[{\"name\":\"w\",\"nbytes\":-4}]}",
		     "negative nbytes"));
	l = "{\"ev\":\"coll\",\"name\":\"c10d.allreduce_\",\"src\":\"ddp_reducer\",\"bucket\":3}";
	CHECK(agree(l));
	CHECK(fast(l, &e, &err) == CD_OK);
	CHECK((e.have & CD_F_BUCKET) && e.bucket == 3);
	CHECK(reject("{\"ev\":\"coll\",\"name\":\"x\",\"bucket\":-1}", "negative bucket"));
	CHECK(reject("{\"ev\":\"coll\",\"name\":\"x\",\"bucket\":\"1\"}", "bucket"));
	CHECK(reject("{\"ev\":\"coll\",\"name\":\"x\",\"bucket\":1.5}", "bucket"));
}

static void test_global_reserved(void)
{
	CHECK(reject("{\"ev\":\"fw_pre\",\"mod\":\"Global\",\"type\":\"T\"}", "reserved"));
	CHECK(reject("{\"ev\":\"bw_enter\",\"mod\":\"Global\"}", "reserved"));
	CHECK(reject("{\"ev\":\"fw_post\",\"mod\":\"Glob\\u0061l\"}", "reserved"));
	CHECK(agree("{\"ev\":\"fw_pre\",\"mod\":\"Global.x\",\"type\":\"T\"}"));
	CHECK(agree("{\"ev\":\"fw_pre\",\"mod\":\"global\",\"type\":\"T\"}"));
}

/* Every field is found by its key, in both parsers' lookup. */
static void test_field_table(void)
{
	for (int id = 0; id < CD_FI__COUNT; id++) {
		const struct cd_field *f = cd_field_at((enum cd_fid)id);
		CHECK(f && (int)f->id == id && f->len == strlen(f->key));
		CHECK(f && cd_field_lookup(f->key, f->len) == f);
	}
	CHECK(!cd_field_lookup("tt", 2));
	CHECK(!cd_field_lookup("world_siz", 9));
}

/* The op lines' shortcut: each way of leaving it reads on as usual. */
static void test_op_shapes(void)
{
	static const char *const ok[] = {
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":true,\"dt\":true,\"args\":[],\"fake\":true,\"t\":0}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}],\"t\":7}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":123456789012345}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":12345678}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":98765432}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":100000009}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":1234567}",

		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":1234567890123456}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5 }",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5,\"x\":1}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false, \"dt\":false,\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"dt\":false,\"bw\":false,\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":null,\"dt\":false,\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"args\":null,\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"fake\":false}",
		"{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"bw\":false,\"dt\":false,"
		"\"pg\":\"0\",\"seq\":1,\"bytes\":4,\"dtype\":\"f\",\"shape\":[1],\"t\":5}",
		"{\"ev\":\"op\",\"name\":\"a.b\"}",
		/* args lists kept by their text: the same, one longer, one with an
		 * escape, one with a null mesh, one with a shape that differs at the end */
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"},{\"shape\":[],\"placements\":\"P\"}],\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}],\"fake\":false,\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\\u00e9\",\"mesh\":\"M\\n\"}],\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":null}],\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,4],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}],\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"dt\":true,\"args\":[{\"shape\":[2,3],"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}] ,\"t\":8}",
		"{\"ev\":\"op\",\"name\":\"a.b\",\"dt\":true,\"args\":[ ]}",
		/* params lists, kept the same way */
		"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"bw\":false,\"params\":[{\"name\":\"w\","
		"\"shape\":[4,2],\"dtype\":\"torch.float32\",\"nbytes\":32,\"requires_grad\":true,"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"},{\"name\":\"b\"}],\"grad_in\":false,\"t\":9}",
		"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"bw\":false,\"params\":[{\"name\":\"w\","
		"\"shape\":[4,2],\"dtype\":\"torch.float32\",\"nbytes\":32,\"requires_grad\":true,"
		"\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"},{\"name\":\"b\"}],\"grad_in\":true,\"t\":10}",
		"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"params\":[{\"name\":\"w\\u00e9\","
		"\"shape\":[4,2],\"dtype\":null,\"nbytes\":32}],\"t\":10}",
		"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"params\":[],\"t\":10}",
	};
	static const char *const bad[][2] = {
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":-5}", "negative"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5.5}", "integer"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":99999999999999999}",
		 "out of range"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5}x", "after the end"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":1234567:}", "expected"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":12345678/}", "expected"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5", "expected"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"bw\":false,\"t\":5}", "duplicate"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5,\"t\":5}", "duplicate"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":fals,\"dt\":false,\"t\":5}", "true or false"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"args\":[{]}", "key expected"},
		{"{\"ev\":\"op\",\"name\":\"\",\"bw\":false,\"dt\":false,\"t\":5}", "empty"},
		/* a kept list's text followed by more of a list is not that list */
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		 "\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}],{}],\"t\":8}", "key expected"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,-3],"
		 "\"placements\":\"(Shard(dim=0),)\",\"mesh\":\"M\"}],\"t\":8}", "negative"},
		{"{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":true,\"args\":[{\"shape\":[2,3],"
		 "\"placements\":5}],\"t\":8}", "must be a string"},
		{"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"params\":[{\"name\":\"w\","
		 "\"nbytes\":-32}],\"t\":10}", "negative nbytes"},
		{"{\"ev\":\"fw_pre\",\"mod\":\"m\",\"type\":\"T\",\"params\":[{\"shape\":[1]}],\"t\":10}",
		 "has no \"name\""},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		CHECK(agree(ok[i]));
	/* cJSON takes these; the fast parser, stricter, does not */
	CHECK(stream_agrees("{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":05}"));
	CHECK(stream_agrees("{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":1e3}"));
	CHECK(stream_agrees("{\"ev\":\"op\",\"name\":\"a.b\",\"bw\":false,\"dt\":false,\"t\":5.0}"));
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(reject(bad[i][0], bad[i][1]));
	/* and the streams after each kind of line */
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
			CHECK(stream_agrees(ok[i]));
			CHECK(stream_agrees(bad[k][0]));
			CHECK(stream_agrees("{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,"
					    "\"rank\":1,\"world_size\":2,\"host\":\"h\",\"t0\":5}"));
		}
}

int main(void)
{
	TEST(test_op_fields);
	TEST(test_dtensor_args);
	TEST(test_params);
	TEST(test_escapes_and_unicode);
	TEST(test_null_and_unknown);
	TEST(test_meta);
	TEST(test_errors);
	TEST(test_limits);
	TEST(test_duplicate_keys);
	TEST(test_global_reserved);
	TEST(test_ddp);
	TEST(test_field_table);
	TEST(test_op_shapes);
	cd_parser_free(&pf);
	cd_parser_free(&pg);
	cd_parser_free(&pl);
	cd_parser_free(&pls);
	cd_parser_free(&pfs);
	cd_parser_free(&pgs);
	return check_done();
}
