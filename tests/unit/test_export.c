/* Unit tests of export's nesting rules (export.h): a small trace written
 * to a temporary file, exported, the document parsed with cJSON and
 * checked: spans that overlap without nesting go to a further thread of
 * their phase, every thread's B and E balance and its times never go
 * back, and a span left open is closed by the exporter (args.unclosed);
 * a collective's args are its summary record's. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export.h"
#include "ranks.h"
#include "spool.h"
#include "timeline.h"

/* The trace text in a new temporary file; its path (free()). */
static char *trace_file(const char *text)
{
	char *path = strdup("/tmp/cd-test-export-XXXXXX");
	int fd = path ? mkstemp(path) : -1;
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		abort();
	close(fd);
	return path;
}

/* Export the trace at path (no t0: ts = t / 1000) with a spool of budget
 * bytes in memory; the document (free()), its statistics, and the bytes
 * the timeline spilled to the spool's file. */
static char *export_doc(const char *path, uint64_t budget, struct cd_export_stats *st,
			uint64_t *spilled)
{
	struct cd_spool *sp = cd_spool_new(budget);
	CHECK(sp != NULL);
	struct cd_rank_summary s = {0};
	cd_tl_summarize(path, NULL, false, sp, &s);
	CHECK(s.extra != NULL);
	FILE *f = tmpfile();
	struct cd_out o;
	cd_out_init(&o, f);
	struct cd_export x;
	struct cd_export_rank_res res = {0};
	struct cd_err err = {0};
	cd_export_begin(&x, &o, NULL);
	CHECK(cd_export_rank(&x, &s, 0, &res, &err) == CD_OK);
	cd_export_end(&x);
	CHECK(cd_out_flush(&o, &err) == CD_OK);
	*st = x.st;
	long n = ftell(f);
	char *buf = malloc((size_t)n + 1);
	rewind(f);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		abort();
	buf[n] = 0;
	fclose(f);
	cd_out_free(&o);
	if (spilled)
		*spilled = cd_spool_spilled(sp);
	cd_rank_summary_free(&s);   /* its timeline, then the spool */
	cd_spool_free(sp);
	return buf;
}

/* The document of trace text, parsed. */
static cJSON *export_text(const char *text, struct cd_export_stats *st)
{
	char *path = trace_file(text);
	char *buf = export_doc(path, 1u << 20, st, NULL);
	cJSON *doc = cJSON_Parse(buf);
	CHECK(doc != NULL);
	free(buf);
	unlink(path);
	free(path);
	return doc;
}

static const char *str_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The tid of the first B event named name, -1: none. */
static int tid_of(const cJSON *evs, const char *name)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, evs)
		if (strcmp(str_of(e, "ph"), "B") == 0 && strcmp(str_of(e, "name"), name) == 0)
			return (int)num_of(e, "tid");
	return -1;
}

/* Every thread: B and E balance, properly nested by name, and ts never
 * goes back (in document order). */
static void check_threads(const cJSON *evs)
{
	struct thread { int tid; int depth; double last; const char *open[16]; } th[32];
	int nth = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, evs) {
		const char *ph = str_of(e, "ph");
		if (strcmp(ph, "B") && strcmp(ph, "E") && strcmp(ph, "X") && strcmp(ph, "i"))
			continue;
		int tid = (int)num_of(e, "tid"), k;
		for (k = 0; k < nth && th[k].tid != tid; k++)
			;
		if (k == nth) {
			if (nth == 32)
				continue;
			th[nth++] = (struct thread){.tid = tid, .last = -1};
		}
		double ts = num_of(e, "ts");
		CHECK(ts >= th[k].last);
		th[k].last = ts;
		if (ph[0] == 'B') {
			CHECK(th[k].depth < 16);
			if (th[k].depth < 16)
				th[k].open[th[k].depth++] = str_of(e, "name");
		} else if (ph[0] == 'E') {
			CHECK(th[k].depth > 0);
			if (th[k].depth > 0) {
				th[k].depth--;
				const char *nm = str_of(e, "name");
				/* an E names its span, when it has a name */
				CHECK(!*nm || strcmp(nm, th[k].open[th[k].depth]) == 0);
			}
		}
	}
	for (int k = 0; k < nth; k++)
		CHECK(th[k].depth == 0);
}

#define META "{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":0," \
	     "\"world_size\":1}\n"

static void test_overlap_goes_to_another_thread(void)
{
	/* backward: X [10, 12] us and Y [11, 13] us overlap without nesting:
	 * they cannot share a thread; X keeps backward (tid 3000), Y goes to
	 * "backward 2" (tid 3001).  Z [14, 15] nests in nothing and overlaps
	 * nothing: back on the first backward thread. */
	const char *t = META
		"{\"ev\":\"region_enter\",\"region\":1,\"t\":1000}\n"
		"{\"ev\":\"bw_enter\",\"mod\":\"X\",\"t\":10000}\n"
		"{\"ev\":\"bw_enter\",\"mod\":\"Y\",\"t\":11000}\n"
		"{\"ev\":\"bw_exit\",\"mod\":\"X\",\"t\":12000}\n"
		"{\"ev\":\"bw_exit\",\"mod\":\"Y\",\"t\":13000}\n"
		"{\"ev\":\"bw_enter\",\"mod\":\"Z\",\"t\":14000}\n"
		"{\"ev\":\"bw_exit\",\"mod\":\"Z\",\"t\":15000}\n"
		"{\"ev\":\"bw_end\",\"t\":16000}\n"
		"{\"ev\":\"region_exit\",\"region\":1,\"t\":17000}\n";
	struct cd_export_stats st;
	cJSON *doc = export_text(t, &st);
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	CHECK(cJSON_IsArray(evs));
	int tx = tid_of(evs, "X"), ty = tid_of(evs, "Y"), tz = tid_of(evs, "Z");
	CHECK(tx >= 3000 && tx < 4000);
	CHECK(ty >= 3000 && ty < 4000);
	CHECK(tx != ty);
	CHECK(tz == tx);
	CHECK(st.unclosed == 0);
	check_threads(evs);
	/* X's slice: B at 10, E at 12 on its thread */
	const cJSON *e;
	double xb = -1, xe = -1;
	cJSON_ArrayForEach(e, evs) {
		if ((int)num_of(e, "tid") != tx)
			continue;
		if (strcmp(str_of(e, "ph"), "B") == 0 && strcmp(str_of(e, "name"), "X") == 0)
			xb = num_of(e, "ts");
		if (strcmp(str_of(e, "ph"), "E") == 0 && xb >= 0 && xe < 0)
			xe = num_of(e, "ts");
	}
	CHECK(xb == 10 && xe == 12);
	cJSON_Delete(doc);
}

static void test_nested_share_a_thread(void)
{
	/* forward: A [2, 9] holds A.b [3, 4] and A.c [5, 8]: properly nested,
	 * one thread (tid 1000) */
	const char *t = META
		"{\"ev\":\"region_enter\",\"region\":1,\"t\":1000}\n"
		"{\"ev\":\"fw_pre\",\"mod\":\"A\",\"type\":\"T\",\"t\":2000}\n"
		"{\"ev\":\"fw_pre\",\"mod\":\"A.b\",\"type\":\"T\",\"t\":3000}\n"
		"{\"ev\":\"fw_post\",\"mod\":\"A.b\",\"t\":4000}\n"
		"{\"ev\":\"fw_done\",\"mod\":\"A.b\",\"t\":4000}\n"
		"{\"ev\":\"fw_pre\",\"mod\":\"A.c\",\"type\":\"T\",\"t\":5000}\n"
		"{\"ev\":\"fw_post\",\"mod\":\"A.c\",\"t\":8000}\n"
		"{\"ev\":\"fw_done\",\"mod\":\"A.c\",\"t\":8000}\n"
		"{\"ev\":\"fw_post\",\"mod\":\"A\",\"t\":9000}\n"
		"{\"ev\":\"fw_done\",\"mod\":\"A\",\"t\":9000}\n"
		"{\"ev\":\"region_exit\",\"region\":1,\"t\":10000}\n";
	struct cd_export_stats st;
	cJSON *doc = export_text(t, &st);
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	int ta = tid_of(evs, "A");
	CHECK(ta == 1000);
	CHECK(tid_of(evs, "A.b") == ta && tid_of(evs, "A.c") == ta);
	/* the region slice on tid 2 */
	const cJSON *e;
	int regions = 0;
	cJSON_ArrayForEach(e, evs)
		regions += (int)num_of(e, "tid") == 2 && strcmp(str_of(e, "ph"), "B") == 0;
	CHECK(regions == 1);
	CHECK(st.spans == 3);
	check_threads(evs);
	cJSON_Delete(doc);
}

static void test_unclosed(void)
{
	/* C opens at 20 us and is never closed: the exporter closes it at the
	 * end of the trace (its last time, 30 us) with args.unclosed = true,
	 * and counts it; the region too is left open (no region_exit) */
	const char *t = META
		"{\"ev\":\"region_enter\",\"region\":1,\"t\":1000}\n"
		"{\"ev\":\"fw_pre\",\"mod\":\"C\",\"type\":\"T\",\"t\":20000}\n"
		"{\"ev\":\"op\",\"name\":\"aten.mm.default\",\"t\":30000}\n";
	struct cd_export_stats st;
	cJSON *doc = export_text(t, &st);
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	int tc = tid_of(evs, "C");
	CHECK(tc == 1000);
	const cJSON *e, *beg = NULL, *end = NULL;
	cJSON_ArrayForEach(e, evs) {
		if ((int)num_of(e, "tid") != tc)
			continue;
		if (strcmp(str_of(e, "ph"), "B") == 0)
			beg = e;
		if (strcmp(str_of(e, "ph"), "E") == 0)
			end = e;
	}
	CHECK(beg != NULL && end != NULL);
	if (beg && end) {
		/* the span (its B, where args go) says the exporter closed it */
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(beg, "args");
		CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "unclosed")));
		CHECK(num_of(beg, "ts") == 20);
		CHECK(num_of(end, "ts") == 30);
	}
	CHECK(st.unclosed == 1);
	check_threads(evs);
	cJSON_Delete(doc);
}

/* The args of the collective instants (cat "collective") in order, at most
 * n; their count. */
static int colls_of(const cJSON *evs, const cJSON **args, double *ts, const char **name, int n)
{
	const cJSON *e;
	int k = 0;
	cJSON_ArrayForEach(e, evs) {
		if (strcmp(str_of(e, "cat"), "collective") != 0)
			continue;
		if (k < n) {
			args[k] = cJSON_GetObjectItemCaseSensitive(e, "args");
			ts[k] = num_of(e, "ts");
			name[k] = str_of(e, "name");
		}
		k++;
	}
	return k;
}

static void test_collectives(void)
{
	/* a collective's facts come from the summary's record (the group's
	 * count when the event has no seq, an untimed one counted but not
	 * drawn), its time and op from the timeline */
	const char *t = META
		"{\"ev\":\"region_enter\",\"region\":1,\"t\":1000}\n"
		"{\"ev\":\"fw_pre\",\"mod\":\"M\",\"type\":\"T\",\"t\":2000}\n"
		"{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"pg\":\"0\",\"bytes\":64,"
		"\"dtype\":\"torch.float32\",\"t\":3000}\n"
		"{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"pg\":\"0\"}\n"
		"{\"ev\":\"op\",\"name\":\"c10d.broadcast_.default\",\"pg\":\"0\",\"t\":4000}\n"
		"{\"ev\":\"fw_post\",\"mod\":\"M\",\"t\":5000}\n"
		"{\"ev\":\"region_exit\",\"region\":1,\"t\":6000}\n"
		"{\"ev\":\"region_enter\",\"region\":2,\"t\":6200}\n"
		"{\"ev\":\"bw_enter\",\"mod\":\"M\",\"t\":6500}\n"
		"{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"pg\":\"1\",\"seq\":7,"
		"\"bytes\":8,\"dtype\":\"\",\"bw\":true,\"t\":7000}\n"
		"{\"ev\":\"bw_exit\",\"mod\":\"M\",\"t\":7500}\n"
		"{\"ev\":\"region_exit\",\"region\":2,\"t\":8000}\n";
	struct cd_export_stats st;
	cJSON *doc = export_text(t, &st);
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	const cJSON *a[3];
	double ts[3];
	const char *name[3];
	CHECK(colls_of(evs, a, ts, name, 3) == 3);
	CHECK(st.collectives == 3 && st.untimed == 1);
	/* the first: in M, forward, in region 1 */
	CHECK(ts[0] == 3 && strcmp(name[0], "c10d.allreduce_") == 0);
	CHECK(strcmp(str_of(a[0], "op"), "c10d.allreduce_.default") == 0);
	CHECK(strcmp(str_of(a[0], "pg"), "0") == 0 && num_of(a[0], "seq") == 1);
	CHECK(num_of(a[0], "bytes") == 64 && strcmp(str_of(a[0], "dtype"), "torch.float32") == 0);
	CHECK(strcmp(str_of(a[0], "module"), "M") == 0);
	CHECK(strcmp(str_of(a[0], "phase"), "forward") == 0 && num_of(a[0], "region") == 1);
	/* the second: seq 3 (the untimed one was the group's second), no
	 * bytes, no dtype */
	CHECK(ts[1] == 4 && strcmp(name[1], "c10d.broadcast_") == 0);
	CHECK(num_of(a[1], "seq") == 3);
	CHECK(!cJSON_HasObjectItem(a[1], "bytes") && !cJSON_HasObjectItem(a[1], "dtype"));
	/* the third: its own seq, an empty dtype, backward, in region 2 */
	CHECK(ts[2] == 7 && strcmp(str_of(a[2], "pg"), "1") == 0 && num_of(a[2], "seq") == 7);
	CHECK(cJSON_HasObjectItem(a[2], "dtype") && strcmp(str_of(a[2], "dtype"), "") == 0);
	CHECK(strcmp(str_of(a[2], "phase"), "backward") == 0 && num_of(a[2], "region") == 2);
	CHECK(!cJSON_HasObjectItem(a[2], "flight_recorder"));
	check_threads(evs);
	cJSON_Delete(doc);
}

static void test_spilled_timeline(void)
{
	/* a timeline of many chunks: written to the spool's file when its
	 * budget is 0, kept in memory with room; the same document */
	size_t cap = 1u << 23, len = 0;
	char *t = malloc(cap);
	CHECK(t != NULL);
	if (!t)
		return;
	len += (size_t)snprintf(t + len, cap - len, "%s{\"ev\":\"region_enter\",\"region\":1,"
				"\"t\":0}\n", META);
	for (int i = 0; i < 20000; i++)
		len += (size_t)snprintf(t + len, cap - len,
			"{\"ev\":\"fw_pre\",\"mod\":\"m%d\",\"type\":\"T\",\"t\":%d}\n"
			"{\"ev\":\"nccl\",\"func\":\"AllReduce\",\"comm\":\"c%d\",\"seq\":%d,"
			"\"bytes\":%d,\"t\":%d}\n"
			"{\"ev\":\"nccl\",\"comm\":\"c%d\",\"seq\":%d,\"state\":\"completed\","
			"\"dur\":500,\"t\":%d}\n"
			"{\"ev\":\"op\",\"name\":\"c10d.allreduce_.default\",\"pg\":\"%d\","
			"\"bytes\":%d,\"t\":%d}\n"
			"{\"ev\":\"fw_post\",\"mod\":\"m%d\",\"t\":%d}\n"
			"{\"ev\":\"fw_done\",\"mod\":\"m%d\",\"t\":%d}\n",
			i % 50, i * 1000, i % 3, i, 4 * i, i * 1000 + 100, i % 3, i, i * 1000 + 900,
			i % 2, i, i * 1000 + 950, i % 50, i * 1000 + 999, i % 50, i * 1000 + 999);
	CHECK(len < cap);
	struct cd_export_stats a, b;
	uint64_t spilled_a = 0, spilled_b = 0;
	char *path = trace_file(t);
	char *kept = export_doc(path, 1u << 30, &a, &spilled_a);
	char *spilled = export_doc(path, 0, &b, &spilled_b);
	CHECK(spilled_a == 0);
	CHECK(spilled_b > 2 * CD_SLOG_CHUNK);
	CHECK(strcmp(kept, spilled) == 0);
	CHECK(a.spans == 20000 && a.nccl_calls == 20000 && a.gpu_slices == 20000);
	CHECK(a.collectives == 20000 && b.collectives == 20000);
	cJSON *doc = cJSON_Parse(spilled);
	CHECK(doc != NULL);
	cJSON_Delete(doc);
	free(kept);
	free(spilled);
	free(t);
	unlink(path);
	free(path);
}

static void test_long_names(void)
{
	/* a module name and a region label longer than a record: the
	 * timeline writes them in several records; the document has them
	 * whole */
	char mod[5001], label[2501], *t = malloc(16384);
	CHECK(t != NULL);
	if (!t)
		return;
	for (int i = 0; i < 5000; i++)
		mod[i] = (char)('a' + i % 26);
	mod[5000] = 0;
	for (int i = 0; i < 2500; i++)
		label[i] = (char)('A' + i % 26);
	label[2500] = 0;
	snprintf(t, 16384, "%s"
		 "{\"ev\":\"region_enter\",\"region\":1,\"label\":\"%s\",\"t\":1000}\n"
		 "{\"ev\":\"fw_pre\",\"mod\":\"%s\",\"type\":\"\",\"t\":2000}\n"
		 "{\"ev\":\"fw_post\",\"mod\":\"%s\",\"t\":3000}\n"
		 "{\"ev\":\"region_exit\",\"region\":1,\"t\":4000}\n", META, label, mod, mod);
	struct cd_export_stats st;
	cJSON *doc = export_text(t, &st);
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	CHECK(tid_of(evs, mod) == 1000);
	CHECK(tid_of(evs, label) == 2);
	CHECK(st.spans == 1);
	const cJSON *e;
	cJSON_ArrayForEach(e, evs)
		if (tid_of(evs, mod) == (int)num_of(e, "tid") && strcmp(str_of(e, "ph"), "B") == 0) {
			const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
			CHECK(strcmp(str_of(args, "type"), "") == 0);
		}
	cJSON_Delete(doc);
	free(t);
}

int main(void)
{
	TEST(test_overlap_goes_to_another_thread);
	TEST(test_nested_share_a_thread);
	TEST(test_unclosed);
	TEST(test_collectives);
	TEST(test_spilled_timeline);
	TEST(test_long_names);
	return check_done();
}
