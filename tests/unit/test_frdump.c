/* Flight Recorder dumps (frdump.h): every real and hand-built dump under
 * testdata/fr reads to what Python's pickle and json modules read
 * (testdata/fr/expected.txt, made by tests/fr/expect.py), and into the
 * summary the post-mortem takes.  argv[1]: testdata/fr. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frdump.h"

static const char *dir;

static void print_dump(const struct cd_fr_dump *d, char *buf, size_t cap)
{
	size_t n = 0;
	n += (size_t)snprintf(buf + n, cap - n, "dump %s %u %u %u %d\n", d->version, d->n_entries,
			      d->n_conf, d->n_status, d->has_comm_state);
	for (uint32_t i = 0; i < d->n_entries && n < cap; i++) {
		const struct cd_fr_entry *e = &d->entries[i];
		char f0[256] = "-", pn[256];
		if (e->n_frames > 1)
			snprintf(f0, sizeof f0, "%s:%" PRId64, e->frames[1].name, e->frames[1].line);
		snprintf(pn, sizeof pn, "%s", e->profiling_name);
		for (char *p = pn; *p; p++)
			if (*p == ' ')
				*p = '_';
		n += (size_t)snprintf(buf + n, cap - n,
				      "e %" PRId64 " %s %" PRId64 " %" PRId64 " %s %s %" PRId64 " %" PRId64
				      " %" PRId64 " %s %d %" PRId64 " %u %s\n",
				      e->record_id, *e->pg_name ? e->pg_name : "''", e->seq, e->p2p_seq, pn,
				      e->state_text, e->time_created_ns, e->in_numel, e->out_numel,
				      e->n_in && e->in[0].dtype ? e->in[0].dtype : "-", e->is_p2p,
				      e->time_completed_ns, e->n_frames, f0);
	}
	for (uint32_t i = 0; i < d->n_status && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "s %s %" PRId64 " %" PRId64 " %" PRId64 "\n",
				      d->status[i].pg, d->status[i].last_enqueued,
				      d->status[i].last_started, d->status[i].last_completed);
}

/* Every file of expected.txt against the reader. */
static void test_expected(void)
{
	char path[4096], *text = NULL;
	size_t len = 0;
	snprintf(path, sizeof path, "%s/expected.txt", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (!f)
		return;
	FILE *m = open_memstream(&text, &len);
	char line[4096];
	while (fgets(line, sizeof line, f))
		fputs(line, m);
	fclose(m);
	fclose(f);
	int files = 0;
	char *p = text;
	static char got[1 << 20];
	while ((p = strstr(p, "file ")) != NULL) {
		char *nl = strchr(p, '\n'), *next = strstr(nl, "\nfile ");
		size_t want_len = next ? (size_t)(next + 1 - (nl + 1)) : strlen(nl + 1);
		char name[1024];
		snprintf(name, sizeof name, "%.*s", (int)(nl - p - 5), p + 5);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		struct cd_fr_dump d;
		struct cd_err err = {0};
		if (cd_fr_read(path, &d, &err) != CD_OK) {
			fprintf(stderr, "  %s: %s\n", name, err.msg);
			CHECK(0);
		} else {
			print_dump(&d, got, sizeof got);
			if (strlen(got) != want_len || memcmp(got, nl + 1, want_len) != 0) {
				fprintf(stderr, "  %s: got\n%s  want\n%.*s", name, got, (int)want_len, nl + 1);
				CHECK(0);
			}
			cd_fr_dump_free(&d);
		}
		files++;
		p = nl;
	}
	CHECK(files >= 50);
	free(text);
}

/* The rank from the file name, the groups, and the gloo pg_config quirk. */
static void test_gloo_skip(void)
{
	char path[4096];
	struct cd_fr_dump d;
	struct cd_err err = {0};
	snprintf(path, sizeof path, "%s/skip/exit/fr_rank1", dir);
	CHECK(cd_fr_read(path, &d, &err) == CD_OK);
	CHECK(d.format == CD_FR_PICKLE && d.major == 2 && d.minor == 10);
	CHECK(d.has_rank && d.rank_from_name && d.rank == 1);
	CHECK(d.n_conf == 1 && strcmp(d.conf[0].key, "") == 0 && d.conf[0].n_ranks == 2);
	CHECK(d.n_pgs == 2);
	CHECK_STR(d.pgs[0].name, "0");
	CHECK(d.pgs[0].n_colls == 5 && d.pgs[0].status && d.pgs[0].status->last_enqueued == 6);
	/* rank 1 skipped the world all_reduce of step 2: its seq 5 is a broadcast */
	CHECK_STR(d.entries[d.pgs[0].colls[4]].coll, "broadcast");
	CHECK(d.entries[0].n_frames == 7);
	CHECK_STR(d.entries[0].frames[0].name, "all_reduce");
	cd_fr_dump_free(&d);

	snprintf(path, sizeof path, "%s/skip/exit-json/fr_rank1", dir);
	CHECK(cd_fr_read(path, &d, &err) == CD_OK);
	CHECK(d.format == CD_FR_JSON && d.rank == 1 && d.n_entries == 7 && d.entries[0].n_frames == 0);
	CHECK(d.entries[0].time_created_ns == 1795579663999493389LL);   /* exact past 2^53 */
	cd_fr_dump_free(&d);
}

static void test_summary(void)
{
	char path[4096];
	struct cd_rank_summary s;
	snprintf(path, sizeof path, "%s/nccl-hand/pickle/nccl_trace_rank_2", dir);
	memset(&s, 0, sizeof s);
	cd_fr_summarize(path, &s);
	CHECK(s.error == NULL);
	CHECK(s.has_rank && s.rank == 2 && s.rank_from_name);
	CHECK(s.has_world && s.world_size == 4);
	CHECK(s.colls.n == 4);   /* the p2p ones are left out */
	if (s.colls.n == 4) {
		CHECK_STR(cd_rank_str(&s, s.colls.v[3].coll), "_allgather_base");
		CHECK_STR(cd_rank_str(&s, s.colls.v[3].pg), "0");
		CHECK(s.colls.v[3].seq == 3 && s.colls.v[3].bytes == 4096 && s.colls.v[3].has_bytes);
		CHECK_STR(cd_rank_str(&s, s.colls.v[1].dtype), "torch.bfloat16");
		CHECK(s.colls.v[1].bytes == 512);
		CHECK_STR(cd_rank_str(&s, s.colls.v[0].module), "(no module: Flight Recorder)");
	}
	CHECK(s.pg_names.n == 2);
	cd_rank_summary_free(&s);

	/* gloo, dumped while rank 2 slept: every entry "scheduled", but the
	 * world all_reduce it waits in (record 6) is not retired, the earlier
	 * ones are; the world group is told by the entries' desc, as pg_config
	 * is keyed by "" */
	memset(&s, 0, sizeof s);
	snprintf(path, sizeof path, "%s/sleep/inflight/fr_rank0", dir);
	cd_fr_summarize(path, &s);
	CHECK(s.error == NULL && !s.fr_states && s.pg_conf_broken);
	CHECK(s.colls.n == 7 && s.fr.n == 7);
	for (uint32_t k = 0; k < s.fr.n && k < 7; k++)
		CHECK(s.fr.v[k].retired == (k == 6 ? 0 : 1));
	CHECK(s.fr_has_world_pg && strcmp(cd_rank_str(&s, s.fr_world_pg), "0") == 0);
	cd_rank_summary_free(&s);

	/* NCCL-shaped: retired but the last, which is "started" */
	memset(&s, 0, sizeof s);
	snprintf(path, sizeof path, "%s/nccl-hand/pickle/nccl_trace_rank_2", dir);
	cd_fr_summarize(path, &s);
	CHECK(s.fr.n == 4 && s.fr.v[3].retired == 0 && s.fr.v[0].retired == 1);
	cd_rank_summary_free(&s);

	memset(&s, 0, sizeof s);
	snprintf(path, sizeof path, "%s/expected.txt", dir);
	cd_fr_summarize(path, &s);
	CHECK(s.error != NULL && s.end == CD_END_ERROR);
	cd_rank_summary_free(&s);
}

static void test_sniff_version(void)
{
	struct cd_fr_dump d;
	struct cd_err err = {0};
	const char *j3 = "{\"version\": \"3.0\", \"entries\": []}";
	CHECK(cd_fr_sniff((const uint8_t *)j3, strlen(j3)));
	CHECK(cd_fr_parse((const uint8_t *)j3, strlen(j3), "x0", &d, &err) == CD_ERR_TRACE);
	CHECK(strstr(err.msg, "not supported") != NULL);
	const char *j = "{\"version\": \"2.4\", \"entries\": [{\"profiling_name\": \"nccl:all_reduce\", "
			"\"collective_seq_id\": 1, \"process_group\": [\"0\", \"default_pg\"]}], \"rank\": 7}";
	CHECK(cd_fr_parse((const uint8_t *)j, strlen(j), "fr_rank3", &d, &err) == CD_OK);
	CHECK(d.rank == 7 && !d.rank_from_name && d.n_entries == 1 && d.entries[0].time_created_ns == -1);
	CHECK(!d.entries[0].has_retired && !d.entries[0].retired);   /* absent: unknown */
	cd_fr_dump_free(&d);
	const char *bad = "{\"version\": \"2.10\", \"entries\": [1]}";
	CHECK(cd_fr_parse((const uint8_t *)bad, strlen(bad), NULL, &d, &err) == CD_ERR_TRACE);
	CHECK(strstr(err.msg, "entries[0]") != NULL);
	CHECK(!cd_fr_sniff((const uint8_t *)"{\"meta\": 1}", 11));
}

/* The rank of a file's name, by the trace rule, the dump rule, or both
 * (summarize --shard). */
static void test_rank_from_name(void)
{
	int64_t r = -1;
	CHECK(cd_rank_from_name("d/rank12.jsonl", CD_RANK_NAME_WORD, &r) && r == 12);
	CHECK(cd_rank_from_name("job-rank3-x.zst", CD_RANK_NAME_WORD, &r) && r == 3);
	CHECK(!cd_rank_from_name("d/trace7.jsonl", CD_RANK_NAME_WORD, &r));
	CHECK(!cd_rank_from_name("rank1234567890.jsonl", CD_RANK_NAME_WORD, &r));
	CHECK(!cd_rank_from_name("rank/x0.jsonl", CD_RANK_NAME_WORD, &r));   /* the name only */
	CHECK(cd_rank_from_name("a/nccl_trace_rank_2", CD_RANK_NAME_TAIL, &r) && r == 2);
	CHECK(cd_rank_from_name("fr_rank1.pkl", CD_RANK_NAME_TAIL, &r) && r == 1);
	CHECK(cd_rank_from_name("fr_7.pickle", CD_RANK_NAME_TAIL, &r) && r == 7);
	CHECK(cd_rank_from_name("s3.cdsum", CD_RANK_NAME_TAIL, &r) && r == 3);
	CHECK(!cd_rank_from_name("fr_1234567890", CD_RANK_NAME_TAIL, &r));
	CHECK(!cd_rank_from_name(".pkl", CD_RANK_NAME_TAIL, &r));
	CHECK(!cd_rank_from_name(NULL, CD_RANK_NAME_TAIL, &r));
	/* both: "rank" first, else the digits at the end */
	CHECK(cd_rank_from_name("rank4_copy9.jsonl", CD_RANK_NAME_WORD | CD_RANK_NAME_TAIL, &r) &&
	      r == 4);
	CHECK(cd_rank_from_name("nccl_trace_rank_5", CD_RANK_NAME_WORD | CD_RANK_NAME_TAIL, &r) &&
	      r == 5);
	CHECK(!cd_rank_from_name("notes.txt", CD_RANK_NAME_WORD | CD_RANK_NAME_TAIL, &r));
}

/* pg_config ranks and the dump's rank held to a trace's limits. */
static void test_bad_ranks(void)
{
	static const char *const bad[] = {
		"{\"version\": \"2.4\", \"pg_config\": {\"0\": {\"ranks\": [-5, 0, 1]}}}",
		"{\"version\": \"2.4\", \"pg_config\": {\"0\": {\"ranks\": \"[0, -5]\"}}}",
		"{\"version\": \"2.4\", \"pg_config\": {\"0\": {\"ranks\": \"[99999999999999999999]\"}}}",
		"{\"version\": \"2.4\", \"pg_config\": {\"0\": {\"ranks\": [9007199254740992]}}}",
		"{\"version\": \"2.4\", \"rank\": -1}",
	};
	struct cd_fr_dump d;
	struct cd_err err = {0};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK(cd_fr_parse((const uint8_t *)bad[i], strlen(bad[i]), "x0", &d, &err) ==
		      CD_ERR_TRACE);
		CHECK(strstr(err.msg, "rank") != NULL);
	}
	const char *ok = "{\"version\": \"2.4\", \"pg_config\": {\"0\": {\"ranks\": \"[0, 9007199254740991]\"}}}";
	CHECK(cd_fr_parse((const uint8_t *)ok, strlen(ok), "x0", &d, &err) == CD_OK);
	CHECK(d.n_conf == 1 && d.conf[0].n_ranks == 2 && d.conf[0].ranks[1] == 9007199254740991LL);
	cd_fr_dump_free(&d);
}

/* ---- the join of a dump with its rank's trace (frjoin.c), on summaries
 * made here: a trace and a dump of rank 0, one group "0".  Times in ms. */

static uint32_t str(struct cd_rank_summary *s, const char *p)
{
	return cd_intern(&s->s, p, (uint32_t)strlen(p));
}

static void add_coll(struct cd_rank_summary *s, const char *name, int64_t seq, int64_t bytes,
		     int64_t ms, int64_t op_id)
{
	struct cd_crec c = {.pg = str(s, "0"), .coll = str(s, name), .dtype = CD_NOID,
			    .module = CD_NOID, .has_bytes = bytes >= 0, .seq = seq,
			    .bytes = bytes < 0 ? 0 : bytes, .region = 1,
			    .time = ms < 0 ? -1 : 1800000000000000000 + ms * 1000000};
	CHECK(cd_vec_push(&s->colls, c));
	if (s->source != CD_SRC_TRACE) {
		/* a dump: record_id from 0 */
		struct cd_fr_crec f = {.record_id = (int64_t)s->fr.n, .op_id = op_id, .t_started = -1,
				       .t_completed = -1, .out_bytes = -1,
				       .user_frame = UINT32_MAX, .state = CD_FR_COMPLETED,
				       .retired = 1};
		CHECK(cd_vec_push(&s->fr, f));
	}
}

/* The record ids the trace's collectives got, as "3 4 - 7". */
static void joined_ids(const struct cd_rank_summary *t, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (uint32_t i = 0; i < t->fr.n && n + 24 < cap; i++) {
		if (t->fr.v[i].record_id < 0)
			n += (size_t)snprintf(buf + n, cap - n, "%s-", i ? " " : "");
		else
			n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? " " : "",
					      t->fr.v[i].record_id);
	}
}

struct jcase {
	const char *what;
	/* the dump's records, then the trace's collectives, as (name, bytes, ms)
	 * with seq from 1 in each (op_id from first_op + 1); ms -1: no time */
	struct { const char *name; int64_t bytes, ms; } dump[12], trace[8];
	const char *want;
	int first_op;
};

static void test_join(void)
{
	static const struct jcase cases[] = {
		{"the recorder saw them all: seq is op_id",
		 {{"nccl:all_reduce", 64, 10}, {"nccl:broadcast", 8, 20}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 10}, {"c10d.broadcast_", 8, 20}, {NULL, 0, 0}},
		 "0 1", 0},
		{"DDP's construction before the first region: the shift is 3",
		 {{"nccl:all_gather", 8, 0}, {"nccl:broadcast", 96, 1}, {"nccl:broadcast", 96, 2},
		  {"nccl:all_reduce", 64, 500}, {"nccl:all_reduce", 512, 510}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 500}, {"c10d.allreduce_", 512, 510}, {NULL, 0, 0}},
		 "3 4", 0},
		{"the same all-reduce outside the regions, told apart by time",
		 {{"nccl:all_reduce", 64, 0}, {"nccl:all_reduce", 64, 10}, {"nccl:all_reduce", 64, 400},
		  {"nccl:all_reduce", 64, 800}, {"nccl:all_reduce", 64, 810}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 0}, {"c10d.allreduce_", 64, 10}, {"c10d.allreduce_", 64, 800},
		  {"c10d.allreduce_", 64, 810}, {NULL, 0, 0}},
		 "0 1 3 4", 0},
		{"a gap without times: kinds and sizes decide",
		 {{"gloo:all_reduce", 64, -1}, {"gloo:all_gather", 32, -1}, {"gloo:broadcast", 4, -1},
		  {"gloo:all_to_all", 128, -1}, {"gloo:all_reduce", 64, -1}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, -1}, {"c10d.alltoall_base_", 128, -1},
		  {"c10d_functional.all_reduce", 64, -1}, {NULL, 0, 0}},
		 "0 3 4", 0},
		{"the dump's ring dropped the first records: the early ones stay unjoined",
		 {{"nccl:_reduce_scatter_base", 256, 30}, {"nccl:all_reduce", 64, 40}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 10}, {"c10d.allreduce_", 64, 20},
		  {"c10d._reduce_scatter_base_", 256, 30}, {"c10d.allreduce_", 64, 40}, {NULL, 0, 0}},
		 "- - 0 1", 2},
		{"a lone match after a gap, made at the same moment: joined",
		 {{"nccl:all_reduce", 64, 10}, {"nccl:all_reduce", 64, 300}, {"nccl:all_reduce", 64, 600},
		  {"nccl:all_reduce", 64, 900}, {"nccl:all_reduce", 64, 1200}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 10}, {"c10d.allreduce_", 64, 600}, {"c10d.allreduce_", 64, 1200},
		  {NULL, 0, 0}},
		 "0 2 4", 0},
		{"a collective the dump lacks, of another kind: unjoined, the rest joined",
		 {{"nccl:all_reduce", 64, 10}, {"nccl:all_reduce", 64, 30}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 10}, {"c10d.broadcast_", 8, 20}, {"c10d.allreduce_", 64, 30},
		  {NULL, 0, 0}},
		 "0 - 1", 0},
		{"repeated collectives, a shift and no times: nothing tells which, unjoined",
		 {{"nccl:all_reduce", 64, -1}, {"nccl:all_reduce", 64, -1}, {"nccl:all_reduce", 64, -1},
		  {"nccl:all_reduce", 64, -1}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, -1}, {"c10d.allreduce_", 64, -1}, {NULL, 0, 0}},
		 "- -", 3},
		{"a size that differs is not the same record",
		 {{"nccl:all_reduce", 64, 10}, {"nccl:all_reduce", 128, 20}, {NULL, 0, 0}},
		 {{"c10d.allreduce_", 64, 10}, {"c10d.allreduce_", 256, 20}, {NULL, 0, 0}},
		 "0 -", 0},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct cd_rank_summary two[2];
		memset(two, 0, sizeof two);
		struct cd_rank_summary *t = &two[0], *d = &two[1];
		t->source = CD_SRC_TRACE;
		d->source = CD_SRC_FR_PICKLE;
		t->has_rank = d->has_rank = true;
		t->end = d->end = CD_END_CLOSED;
		t->path = strdup("rank0.zst");
		d->path = strdup("fr_rank0");
		for (int k = 0; cases[c].dump[k].name; k++)
			add_coll(d, cases[c].dump[k].name, k + 1, cases[c].dump[k].bytes,
				 cases[c].dump[k].ms, cases[c].first_op + k + 1);
		for (int k = 0; cases[c].trace[k].name; k++)
			add_coll(t, cases[c].trace[k].name, k + 1, cases[c].trace[k].bytes,
				 cases[c].trace[k].ms, -1);
		CHECK(cd_fr_join(two, 2));
		char got[256];
		joined_ids(t, got, sizeof got);
		if (strcmp(got, cases[c].want) != 0)
			fprintf(stderr, "join: %s: got \"%s\", want \"%s\"\n", cases[c].what, got,
				cases[c].want);
		CHECK_STR(got, cases[c].want);
		CHECK(d->fr_joined && t->fr_path && strcmp(t->fr_path, "fr_rank0") == 0);
		cd_rank_summary_free(t);
		cd_rank_summary_free(d);
	}
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : "testdata/fr";
	TEST(test_expected);
	TEST(test_gloo_skip);
	TEST(test_summary);
	TEST(test_sniff_version);
	TEST(test_rank_from_name);
	TEST(test_bad_ranks);
	TEST(test_join);
	return check_done();
}
