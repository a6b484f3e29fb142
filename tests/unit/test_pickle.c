/* The safe pickle and JSON reader (pickle.h): plain values read, every
 * other opcode refused by name and offset, truncation at every offset and
 * the bounds give errors, never a crash.  argv[1]: testdata/fr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pickle.h"

static const char *dir;

static enum cd_status pk(const char *d, size_t n, struct cd_err *err)
{
	struct cd_pv_doc doc;
	enum cd_status st = cd_pickle_parse((const uint8_t *)d, n, &doc, err);
	if (st == CD_OK)
		cd_pv_doc_free(&doc);
	return st;
}

static void test_plain(void)
{
	/* pickle.dumps({'a': [1, -2, 3.5, None, True, b'x', ('t', 70000)], 'b': 2**40}, 3)
	 * (protocol 2 writes bytes as GLOBAL _codecs.encode: refused) */
	static const char p[] =
		"\x80\x03\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xfe\xff\xff\xff\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x4e\x88\x43\x01\x78\x71\x03\x58\x01\x00\x00\x00\x74\x71\x04\x4a\x70\x11\x01\x00\x86\x71\x05\x65\x58\x01\x00\x00\x00\x62\x71\x06\x8a\x06\x00\x00\x00\x00\x00\x01\x75\x2e";
	struct cd_pv_doc doc;
	struct cd_err err = {0};
	CHECK(cd_pickle_parse((const uint8_t *)p, sizeof p - 1, &doc, &err) == CD_OK);
	if (!doc.root)
		fprintf(stderr, "  %s\n", err.msg);
	if (!doc.root)
		return;
	struct cd_pv *const *it;
	size_t n = cd_pv_seq(cd_pv_get(doc.root, "a"), &it);
	CHECK(n == 7);
	int64_t i;
	CHECK(cd_pv_int(it[0], &i) && i == 1);
	CHECK(cd_pv_int(it[1], &i) && i == -2);
	CHECK(cd_pv_is(it[2], CD_PV_FLOAT) && it[2]->u.f == 3.5);
	CHECK(cd_pv_is(it[3], CD_PV_NONE) && cd_pv_is(it[4], CD_PV_BOOL) && it[4]->u.b);
	CHECK(cd_pv_is(it[5], CD_PV_BYTES) && it[5]->u.s.len == 1);
	CHECK(cd_pv_is(it[6], CD_PV_TUPLE) && it[6]->u.c.n == 2);
	CHECK(cd_pv_int(it[6]->u.c.v[1], &i) && i == 70000);
	CHECK(cd_pv_int(cd_pv_get(doc.root, "b"), &i) && i == (int64_t)1 << 40);
	CHECK(doc.proto == 3);
	cd_pv_doc_free(&doc);

	const char *j = "{\"t\": 1795579663999493389, \"f\": -1.5e3, \"s\": \"\\u00e9\\ud83d\\ude00\", "
			"\"l\": [true, false, null], \"big\": 99999999999999999999}";
	CHECK(cd_pvjson_parse((const uint8_t *)j, strlen(j), &doc, &err) == CD_OK);
	CHECK(cd_pv_int(cd_pv_get(doc.root, "t"), &i) && i == 1795579663999493389LL);
	CHECK(cd_pv_get(doc.root, "f")->u.f == -1500.0);
	CHECK_STR(cd_pv_str(cd_pv_get(doc.root, "s")), "\xc3\xa9\xf0\x9f\x98\x80");
	CHECK(cd_pv_is(cd_pv_get(doc.root, "big"), CD_PV_FLOAT));
	cd_pv_doc_free(&doc);
}

/* Every opcode that builds or calls something, alone after PROTO 2, is
 * refused with its name and offset 2. */
static void test_disallowed(void)
{
	static const struct { unsigned char op; const char *name; } ops[] = {
		{'c', "GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"}, {'i', "INST"}, {'o', "OBJ"},
		{0x93, "STACK_GLOBAL"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"}, {0x82, "EXT1"},
		{0x83, "EXT2"}, {0x84, "EXT4"}, {'P', "PERSID"}, {'Q', "BINPERSID"},
		{0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x96, "BYTEARRAY8"},
		{0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}, {'I', "INT"}, {'L', "LONG"},
		{'F', "FLOAT"}, {'S', "STRING"}, {'V', "UNICODE"}, {'g', "GET"}, {'p', "PUT"},
		{'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
	};
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
		char d[32] = "\x80\x02";
		struct cd_err err = {0};
		d[2] = (char)ops[k].op;
		memcpy(d + 3, "os\nsystem\n", 10);
		CHECK(pk(d, 13, &err) == CD_ERR_FORMAT);
		char want[64];
		snprintf(want, sizeof want, "(%s) is not allowed", ops[k].name);
		if (!strstr(err.msg, want) || strncmp(err.msg, "offset 2:", 9) != 0) {
			fprintf(stderr, "  %s: %s\n", ops[k].name, err.msg);
			CHECK(0);
		}
	}
	/* the classic payload: cos\nsystem\n(S'id'\ntR. in protocol 0, and in 2 */
	struct cd_err err = {0};
	CHECK(pk("cos\nsystem\n(S'id'\ntR.", 21, &err) == CD_ERR_FORMAT);
	CHECK(strstr(err.msg, "offset 0") && strstr(err.msg, "PROTO"));
	CHECK(pk("\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x8c\x02\x6f\x73\x8c\x06\x73\x79\x73\x74\x65\x6d\x93\x75\x2e", 27, &err) ==
	      CD_ERR_FORMAT);
	CHECK(strstr(err.msg, "offset 24") && strstr(err.msg, "STACK_GLOBAL"));
	CHECK(pk("\x80\x06N.", 4, &err) == CD_ERR_FORMAT);
	CHECK(pk("\x80\x02\xff.", 4, &err) == CD_ERR_FORMAT && strstr(err.msg, "not a pickle opcode"));
}

static void test_structure(void)
{
	struct cd_err err = {0};
	/* a list appended to itself: EMPTY_LIST BINPUT 0 BINGET 0 APPEND */
	CHECK(pk("\x80\x02]q\x00h\x00" "a.", 8, &err) == CD_ERR_LIMIT);
	CHECK(strstr(err.msg, "inside itself") != NULL);
	/* a list changed after it was placed in another */
	CHECK(pk("\x80\x02]q\x00]q\x01h\x00" "ah\x01K\x01" "a0.", 17, &err) != CD_OK);
	CHECK(pk("\x80\x02h\x05.", 5, &err) == CD_ERR_FORMAT && strstr(err.msg, "never stored"));
	CHECK(pk("\x80\x02r\xff\xff\xff\xff.", 8, &err) != CD_OK);
	CHECK(pk("\x80\x02K\x01K\x02.", 7, &err) == CD_ERR_FORMAT);   /* two values at STOP */
	CHECK(pk("\x80\x02u.", 4, &err) == CD_ERR_FORMAT);           /* SETITEMS without MARK */
	CHECK(pk("\x80\x02}]K\x01s.", 8, &err) == CD_ERR_FORMAT);     /* a list as a key */
	CHECK(pk("\x80\x02X\xff\xff\xff\x7f", 7, &err) == CD_ERR_FORMAT);   /* huge length */
	CHECK(strstr(err.msg, "runs past the end") != NULL);
	CHECK(pk("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff", 11, &err) == CD_ERR_FORMAT);
	CHECK(pk("\x80\x02\x8b\x09\x00\x00\x00" "123456789.", 17, &err) == CD_ERR_LIMIT);

	/* nesting: 64 lists deep is refused, 63 read */
	for (int depth = 63; depth <= 70; depth += 7) {
		size_t n = 0;
		char *d = malloc(4 + (size_t)depth * 3);
		d[n++] = '\x80';
		d[n++] = 2;
		for (int i = 0; i < depth; i++)
			d[n++] = ']';
		for (int i = 1; i < depth; i++)
			d[n++] = 'a';
		d[n++] = '.';
		enum cd_status st = pk(d, n, &err);
		CHECK(depth == 63 ? st == CD_OK : st == CD_ERR_LIMIT);
		free(d);
	}
	/* the shared-value bomb: (x, x) 40 times over is 2^40 values as a tree */
	{
		char d[512];
		size_t n = 0;
		d[n++] = '\x80'; d[n++] = 2; d[n++] = 'N';
		for (int i = 0; i < 40; i++) {
			d[n++] = '2';
			d[n++] = '\x86';
		}
		d[n++] = '.';
		CHECK(pk(d, n, &err) == CD_ERR_LIMIT);
	}
	/* JSON: deep nesting and bad text */
	char deep[300];
	memset(deep, '[', 200);
	memset(deep + 200, ']', 100);
	struct cd_pv_doc doc;
	CHECK(cd_pvjson_parse((const uint8_t *)deep, 300, &doc, &err) == CD_ERR_LIMIT);
	CHECK(cd_pvjson_parse((const uint8_t *)"{\"a\": 1,}", 9, &doc, &err) == CD_ERR_FORMAT);
	CHECK(cd_pvjson_parse((const uint8_t *)"{\"a\": 1} x", 10, &doc, &err) == CD_ERR_FORMAT);
	CHECK(strstr(err.msg, "offset 9") != NULL);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(*len + 1);
	if (buf && fread(buf, 1, *len, f) != *len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

/* A real dump cut at every offset: an error every time (no crash), and
 * whole it reads. */
static void test_truncation(void)
{
	static const char *const files[] = {"skip/inflight/fr_rank0", "skip/inflight-json/fr_rank0",
					    "nccl-hand/pickle/nccl_trace_rank_2"};
	for (size_t k = 0; k < 3; k++) {
		char path[4096];
		size_t len = 0;
		snprintf(path, sizeof path, "%s/%s", dir, files[k]);
		char *d = slurp(path, &len);
		CHECK(d != NULL);
		if (!d)
			continue;
		bool json = d[0] == '{';
		struct cd_pv_doc doc;
		struct cd_err err = {0};
		enum cd_status st = json ? cd_pvjson_parse((const uint8_t *)d, len, &doc, &err)
					 : cd_pickle_parse((const uint8_t *)d, len, &doc, &err);
		CHECK(st == CD_OK);
		if (st == CD_OK)
			cd_pv_doc_free(&doc);
		int bad = 0;
		for (size_t cut = 0; cut < len; cut++) {
			char *c = malloc(cut ? cut : 1);
			memcpy(c, d, cut);
			st = json ? cd_pvjson_parse((const uint8_t *)c, cut, &doc, &err)
				  : cd_pickle_parse((const uint8_t *)c, cut, &doc, &err);
			if (st == CD_OK) {
				cd_pv_doc_free(&doc);
				bad++;
			} else if (strncmp(err.msg, "offset ", 7) != 0 && cut) {
				bad++;
			}
			free(c);
		}
		CHECK(bad == 0);
		free(d);
	}
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : "testdata/fr";
	TEST(test_plain);
	TEST(test_disallowed);
	TEST(test_structure);
	TEST(test_truncation);
	return check_done();
}
