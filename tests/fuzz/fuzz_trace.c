/* libFuzzer target: the whole read path on arbitrary bytes.
 *
 * The input becomes a file (memfd) read by the real reader (so zstd input
 * is fuzzed too when it starts with the magic number); every line goes
 * through both parsers, which must agree whenever the fast one accepts, and
 * through cd_parse_line's streams (with and without skip_detail), which
 * must give what a fresh parse gives;
 * accepted events are replayed and every report is rendered; NCCL calls
 * are joined to the replayed collectives and their report rendered; the
 * trace is also summarized as a rank (with each parser, and with the
 * export's timeline: the same summary as cd_rank_summarize's) and the two
 * merged, and the two are exported as a job (export --perfetto, the second
 * with the trace itself as its NCCL-side trace, its timeline spilled to a
 * file), which must always be valid JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buckets.h"
#include "export.h"
#include "findings.h"
#include "nccl.h"
#include "out.h"
#include "parse.h"
#include "ranks.h"
#include "reader.h"
#include "replay.h"
#include "spool.h"
#include "tables.h"
#include "timeline.h"

struct ctx {
	struct cd_report_cache cache;
	struct cd_nccl nccl;
	bool nccl_failed;
};

static enum cd_status render_all(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	struct cd_report_cache *cache = &((struct ctx *)ud)->cache;
	struct cd_out o;
	(void)err;
	cd_out_init(&o, NULL);
	o.hold = true;
	for (int noise = 0; noise <= 3; noise++) {
		struct cd_report_opts ro = {.noise = noise, .color = noise & 1, .cache = cache};
		cd_report_table(&o, r, &ro);
		cd_report_json(&o, r, &ro);
		o.len = 0;
	}
	cd_report_counts(&o, r, false);
	cd_report_counts(&o, r, true);
	cd_report_sharding(&o, r, false);
	cd_report_sharding(&o, r, true);
	cd_out_free(&o);
	return CD_OK;
}

static void charge(void *ud, const struct cd_replay *r, const struct cd_event *e, uint32_t coll)
{
	struct ctx *c = ud;
	struct cd_err err = {0};
	(void)coll;
	if (!c->nccl_failed && cd_nccl_charge(&c->nccl, r, e, &err))
		c->nccl_failed = true;
}

/* The line through the stream sl gives what the fresh parser fresh gives
 * (status, message, column, event); and, with gen, what the general parser
 * gives whenever the fast one accepts. */
static void stream_check(struct cd_parser *sl, struct cd_parser *fresh, struct cd_parser *gen,
			 const char *p, size_t n)
{
	struct cd_event a, b;
	const struct cd_event *l;
	struct cd_err ea = {0}, el = {0}, eb = {0};
	enum cd_status sa = cd_parse_fast(fresh, p, n, &a, &ea);
	enum cd_status sl_st = cd_parse_line(sl, p, n, &l, &el);
	if (sa != sl_st || strcmp(ea.msg, el.msg) != 0 || ea.column != el.column ||
	    (sa == CD_OK && !cd_event_equal(&a, l))) {
		fprintf(stderr, "stream and fresh parse differ on: %.*s\n", (int)n, p);
		abort();
	}
	if (gen && sa == CD_OK &&
	    (cd_parse_general(gen, p, n, &b, &eb) != CD_OK || !cd_event_equal(&a, &b))) {
		fprintf(stderr, "parsers disagree (skip_detail) on: %.*s\n", (int)n, p);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("trace", 0);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

	struct ctx ctx = {0};
	struct cd_replay_opts ro = {.retain_ops = true, .want_tree = true, .want_params = true,
				    .region_done = render_all, .on_collective = charge, .ud = &ctx};
	struct cd_replay rp;
	struct cd_parser pf = {0}, pg = {0}, pl = {0}, pls = {.skip_detail = true};
	/* fresh parsers of their own for the streams' comparisons: an event is
	 * valid only until its parser reads the next line */
	struct cd_parser pfl = {0}, pfs = {.skip_detail = true}, pgs = {.skip_detail = true};
	struct cd_reader *rd = NULL;
	struct cd_err err = {0};
	if (cd_replay_init(&rp, &ro, &err) || cd_reader_open(path, &rd, &err))
		abort();
	for (;;) {
		const char *buf;
		size_t len;
		if (cd_reader_next(rd, &buf, &len, &err) != CD_OK)
			break;
		const char *p = buf, *end = buf + len;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl ? nl : end;
			struct cd_event a, b;
			struct cd_err ea = {0}, eb = {0};
			enum cd_status sa = cd_parse_fast(&pf, p, (size_t)(le - p), &a, &ea);
			enum cd_status sb = cd_parse_general(&pg, p, (size_t)(le - p), &b, &eb);
			stream_check(&pl, &pfl, NULL, p, (size_t)(le - p));
			stream_check(&pls, &pfs, &pgs, p, (size_t)(le - p));
			if (sa == CD_OK) {
				/* the fast parser never accepts what the general one rejects */
				if (sb != CD_OK || !cd_event_equal(&a, &b)) {
					fprintf(stderr, "parsers disagree on: %.*s\n", (int)(le - p), p);
					abort();
				}
				if (cd_replay_event(&rp, &a, &err) != CD_OK)
					break;
				struct cd_err en = {0};
				if (!ctx.nccl_failed && cd_nccl_event(&ctx.nccl, &a, &en))
					ctx.nccl_failed = true;
			}
			p = le + 1;
		}
	}
	cd_replay_finish(&rp, &err);
	cd_reader_close(rd);
	if (!ctx.nccl_failed) {
		struct cd_out no;
		cd_out_init(&no, NULL);
		no.hold = true;
		cd_nccl_report(&no, &ctx.nccl, &rp.mods, "fuzz", false, &err);
		cd_nccl_report(&no, &ctx.nccl, &rp.mods, "fuzz", true, &err);
		cd_out_free(&no);
	}
	cd_nccl_free(&ctx.nccl);

	/* commdebug buckets: the trace as one rank and as two, with DDP's caps
	 * and with a first cap of 0 (DDPOptimizer's extended buckets) */
	for (int k = 0; k < 2; k++) {
		struct cd_bk_trace bt = {0};
		struct cd_bk_opts bo = {.general_parser = k, .cap = -1, .first_cap = k ? 0 : -1};
		struct cd_err be = {0};
		if (cd_buckets_collect(path, &bo, &bt, &be) == CD_OK) {
			struct cd_bk_trace *tp[2] = {&bt, &bt};
			struct cd_out bo2;
			bool differ;
			cd_out_init(&bo2, NULL);
			bo2.hold = true;
			for (uint32_t n = 1; n <= 2; n++) {
				cd_buckets_report(&bo2, tp, n, false, &differ, &be);
				cd_buckets_report(&bo2, tp, n, true, &differ, &be);
				bo2.len = 0;
			}
			cd_out_free(&bo2);
		}
		cd_bk_trace_free(&bt);
	}

	/* the post-mortem path: the same trace as two ranks, merged; read with
	 * the export's timelines (one in memory, one in the spool's file) */
	struct cd_spool *sp_mem = cd_spool_new(1u << 20), *sp_file = cd_spool_new(0);
	if (!sp_mem || !sp_file)
		abort();
	struct cd_rank_summary a = {0}, b = {0}, a0 = {0};
	cd_tl_summarize(path, NULL, false, sp_mem, &a);
	cd_tl_summarize(path, path, true, sp_file, &b);
	cd_rank_summarize(path, false, &a0);
	struct cd_rank_summary *both[2] = {&a, &b};
	struct cd_out o, o0;
	cd_out_init(&o, NULL);
	cd_out_init(&o0, NULL);
	o.hold = o0.hold = true;
	cd_ranks_report(&o, both, 2, &(struct cd_ranks_opts){.json = false});
	cd_ranks_report(&o, both, 2, &(struct cd_ranks_opts){.json = true});
	o.len = 0;
	/* the timeline's read summarizes as cd_rank_summarize does */
	struct cd_rank_summary *one[1] = {&a}, *one0[1] = {&a0};
	cd_ranks_report(&o, one, 1, &(struct cd_ranks_opts){.json = true});
	cd_colls_report(&o, one, 1, true);
	cd_ranks_report(&o0, one0, 1, &(struct cd_ranks_opts){.json = true});
	cd_colls_report(&o0, one0, 1, true);
	if (!o.failed && !o0.failed &&
	    (o.len != o0.len || (o.len && memcmp(o.buf, o0.buf, o.len) != 0))) {
		fprintf(stderr, "the timeline's summary differs from cd_rank_summarize's:\n%.*s\n---\n%.*s\n",
			(int)o.len, o.buf, (int)o0.len, o0.buf);
		abort();
	}
	cd_out_free(&o);
	cd_out_free(&o0);
	cd_rank_summary_free(&a0);
	struct cd_pm pm;
	if (cd_pm_build(&pm, both, 2, 0)) {
		struct cd_export x;
		cd_out_init(&o, NULL);
		o.hold = true;
		cd_export_begin(&x, &o, &pm);
		for (int i = 0; i < pm.nall; i++) {
			struct cd_export_rank_res res;
			struct cd_err ee = {0};
			if (cd_export_rank(&x, pm.all[i], i, &res, &ee) != CD_OK)
				break;
		}
		cd_export_end(&x);
		if (!o.failed) {
			cJSON *j = cJSON_ParseWithLength(o.buf, o.len);
			if (!j) {
				fprintf(stderr, "export wrote invalid JSON:\n%.*s\n", (int)o.len, o.buf);
				abort();
			}
			cJSON_Delete(j);
		}
		cd_out_free(&o);
	}
	cd_pm_free(&pm);
	cd_rank_summary_free(&a);
	cd_rank_summary_free(&b);
	cd_spool_free(sp_mem);
	cd_spool_free(sp_file);
	cd_parser_free(&pf);
	cd_parser_free(&pg);
	cd_parser_free(&pl);
	cd_parser_free(&pls);
	cd_parser_free(&pfl);
	cd_parser_free(&pfs);
	cd_parser_free(&pgs);
	cd_replay_free(&rp);
	cd_report_cache_free(&ctx.cache);
	close(fd);
	return 0;
}
