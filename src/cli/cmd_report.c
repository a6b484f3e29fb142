/* commdebug report: one self-contained HTML page (html/page.h) of a run: the
 * post-mortem across ranks first when there are several traces, then the
 * collective counts and the module tree of one region of one rank, and the
 * NCCL traffic where the trace has an NCCL side.
 *
 * The page's numbers are the JSON of the other commands, made by the same
 * code: ranks --json (cd_cli_ranks_report over src/postmortem/run.c's summaries), counts --json (cd_report_counts),
 * analyze --json -n 3 (cd_report_json, op lists capped by --max-ops) and
 * its NCCL part (cd_nside_finish).
 *
 * Which region: --region N, else the last region of the trace that ended
 * with region_exit, else (none did) the last region.  It is found in one
 * pass: with deferred region reports the replay says whether another region
 * follows, and only the final region is rendered; when that one is cut, the
 * trace is read a second time for the last complete one.
 *
 * The file is written through a temporary file in the same directory and
 * renamed: a failed run leaves no half-written page, and no page at all
 * when a trace is unreadable (exit 1). */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../postmortem/findings.h"
#include "../views/html/page.h"
#include "../postmortem/ranks.h"
#include "../replay/replay.h"
#include "../postmortem/run.h"
#include "../postmortem/summary.h"
#include "../views/tables.h"
#include "../replay/trace.h"
#include "nccl_side.h"
#include "paths.h"

static const char *check_args(struct cd_cli *cli)
{
	if (!cli->out_path)
		return "no output file given (-o FILE.html)";
	if (cli->ntraces == 0)
		return "no trace given";
	for (int i = 0; i < cli->ntraces; i++)
		if (strcmp(cli->traces[i], "-") == 0)
			return "a trace is read up to twice; standard input cannot be";
	if (cli->nccl_path && cli->no_nccl)
		return "--nccl and --no-nccl exclude each other";
	if (cli->nccl_path && cli->ntraces > 1)
		return "--nccl goes with one trace only";
	if (cli->has_rank && cli->ntraces < 2)
		return "--rank chooses among several traces; one was given";
	return NULL;
}

static const struct cd_cmd cmd = {
	"report", CD_C_REPORT,
	"Usage: commdebug report -o FILE.html [OPTIONS] TRACE...\n"
	"Write one self-contained HTML page (no network needed) about the traces:\n"
	"the post-mortem across ranks first when there are several, then the\n"
	"collective counts and module tree of one region, each module expandable to\n"
	"its operations, and NCCL bytes and bandwidth where the trace has them.\n"
	"\n",
	"\n"
	"TRACE is a .zst or plain JSON Lines trace, or a directory of them.\n"
	"Exit status: 0 ok, 1 bad or unreadable trace (no page written), 2 usage\n"
	"error, 3 a trace was cut short (the page shows what was read), 4 the ranks\n"
	"disagree (the page shows the findings).\n",
	check_args,
};

/* ---- one trace: counts, tree and NCCL traffic of one region ---- */

#define REGS_KEPT 10

struct pass {
	const struct cd_cli *o;
	const char *path;
	struct cd_nside ns;
	struct cd_trace_run *tr;
	struct cd_report_cache cache;
	bool want_nccl;
	bool select;                       /* this read: only region sel_region */
	int64_t sel_region;
	/* out */
	struct cd_out tree, counts, nccl;  /* JSON documents (held) */
	bool rendered;
	int64_t region;
	char *label;
	bool region_cut;
	int64_t last_complete;             /* -1: none yet */
	bool again;                        /* the final region is cut: read again */
	bool quiet;                        /* the second read: its warnings were said */
	/* the trace's regions, for the page's list (the first and the last
	 * REGS_KEPT; none with --region, which reads only that one) */
	struct preg { int64_t region; char *label; bool cut; } head[REGS_KEPT], tail[REGS_KEPT];
	uint64_t nregs;
};

static void pass_warn(void *ud, const char *msg)
{
	struct pass *p = ud;
	if (!p->quiet)
		cd_cli_print_warning(p->path, p->tr ? p->tr->line : 0, msg);
}

static enum cd_status pass_region(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	struct pass *p = ud;
	(void)err;
	if (!r->region_cut)
		p->last_complete = r->region;
	if (!p->quiet && !p->select) {
		struct preg *g = p->nregs < REGS_KEPT ? &p->head[p->nregs]
						      : &p->tail[(p->nregs - REGS_KEPT) % REGS_KEPT];
		free(g->label);
		g->region = r->region;
		g->label = r->label == CD_NOID ? NULL : strdup(cd_intern_str(&r->strs, r->label));
		g->cut = r->region_cut;
		p->nregs++;
	}
	/* only the final region is shown (or the one asked for); a cut final
	 * region gives way to the last complete one when there is one */
	if (!p->select && r->more_regions)
		return CD_OK;
	if (!p->select && r->region_cut && p->last_complete >= 0) {
		p->again = true;
		return CD_OK;
	}
	struct cd_report_opts ro = {.noise = 3, .cache = &p->cache, .warn = pass_warn, .ud = p,
				    .max_ops = p->o->max_ops};
	cd_out_discard(&p->tree);
	cd_out_discard(&p->counts);
	cd_report_json(&p->tree, r, &ro);
	cd_report_counts(&p->counts, r, true);
	free(p->label);
	p->label = r->label == CD_NOID ? NULL : strdup(cd_intern_str(&r->strs, r->label));
	p->region = r->region;
	p->region_cut = r->region_cut;
	p->rendered = true;
	return CD_OK;
}

static void pass_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct pass *p = ud;
	(void)r;
	cd_nside_event(&p->ns, e, p->tr ? p->tr->line : 0);
}

static void pass_charge(void *ud, const struct cd_replay *r, const struct cd_event *e,
			uint32_t coll)
{
	struct pass *p = ud;
	(void)coll;
	cd_nside_charge(&p->ns, r, e);
}

static void pass_free(struct pass *p)
{
	cd_out_free(&p->tree);
	cd_out_free(&p->counts);
	cd_out_free(&p->nccl);
	cd_report_cache_free(&p->cache);
	cd_nside_free(&p->ns);
	free(p->label);
	p->label = NULL;
	for (int i = 0; i < REGS_KEPT; i++) {
		free(p->head[i].label);
		free(p->tail[i].label);
		p->head[i].label = p->tail[i].label = NULL;
	}
}

/* One region of the page's list. */
static void preg_json(struct cd_out *o, const struct preg *g)
{
	cd_pj_begin_obj(o);
	cd_pj_key(o, "region");
	cd_pj_int(o, g->region);
	cd_pj_key(o, "label");
	if (g->label)
		cd_pj_cstr(o, g->label);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "complete");
	cd_pj_bool(o, !g->cut);
	cd_pj_end(o);
}

/* Replay path into p (set up by the caller: o, path, held outs); region:
 * the one to render, or -1 for the rule above.  Returns an exit code
 * (0, 1 or 3); errors are printed. */
static int run_pass(struct pass *p, int64_t region)
{
	struct cd_nside_opts no = {.nccl_path = p->o->nccl_path,
				   .general_parser = p->o->general_parser};
	struct cd_replay rp;
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;
	bool replay_ok = false;

	p->select = region >= 0 || p->o->select;
	p->sel_region = region >= 0 ? region : p->o->region;
	p->last_complete = -1;
	p->want_nccl = !p->o->no_nccl;
	if (p->want_nccl)
		cd_nside_find(&p->ns, &no, p->path);
	bool sibling = p->ns.sibling != NULL;
	struct cd_replay_opts ro = {
		.retain_ops = true, .want_tree = true, .want_params = true,
		.select = p->select, .region = p->sel_region,
		.region_done = pass_region, .defer_done = true,
		.on_collective = sibling ? pass_charge : NULL,
		.warn = pass_warn, .ud = p,
	};
	struct cd_trace_run tr = {.after_event = p->want_nccl ? pass_event : NULL,
				  .after_kinds = CD_NSIDE_EVENTS,
				  .general_parser = p->o->general_parser, .ud = p};
	p->tr = &tr;
	if (cd_replay_init(&rp, &ro, &err)) {
		cd_cli_print_error(p->path, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	replay_ok = true;
	if (sibling && (rc = cd_nside_load(&p->ns, &no, p->path)) == CD_EXIT_DATA)
		goto out;
	if (cd_trace_replay(p->path, &rp, &tr, &err)) {
		cd_cli_print_error(p->path, &err);
		rc = tr.cut && !tr.seen_meta ? CD_EXIT_CUT : CD_EXIT_DATA;
		goto out;
	}
	if (tr.cut && !p->quiet)
		fprintf(stderr, "commdebug: %s: warning: the trace is cut (%s); analyzed up to line %lld, "
				"the last complete line\n", p->path, tr.cut_why, tr.last_good);
	if (tr.cut)
		rc = CD_EXIT_CUT;
	if (cd_replay_finish(&rp, &err)) {
		cd_cli_print_error(p->path, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	if (p->again)
		goto out;
	if (p->want_nccl &&
	    cd_nside_finish(&p->ns, &p->nccl, &rp.mods, p->path, true, rp.regions != 0)) {
		rc = CD_EXIT_DATA;
		goto out;
	}
	if (rp.regions == 0) {
		fprintf(stderr, "commdebug: %s: no recording region in the trace (no region_enter "
				"event)\n", p->path);
		rc = CD_EXIT_DATA;
	} else if (!p->rendered) {
		fprintf(stderr, "commdebug: %s: no region %" PRId64 " in the trace\n", p->path,
			p->sel_region);
		rc = CD_EXIT_DATA;
	}
	if (p->tree.failed || p->counts.failed || p->nccl.failed) {
		fprintf(stderr, "commdebug: %s: out of memory\n", p->path);
		rc = CD_EXIT_DATA;
	}
out:
	if (replay_ok)
		cd_replay_free(&rp);
	p->tr = NULL;
	return rc;
}

/* The page's tree, counts and NCCL traffic of path.  Returns an exit code. */
static int tree_of(const struct cd_cli *o, const char *path, struct pass *p)
{
	memset(p, 0, sizeof *p);
	p->path = path;
	cd_out_init(&p->tree, NULL);
	cd_out_init(&p->counts, NULL);
	cd_out_init(&p->nccl, NULL);
	p->tree.hold = p->counts.hold = p->nccl.hold = true;
	p->o = o;
	int rc = run_pass(p, -1);
	if (rc == CD_EXIT_DATA || !p->again)
		return rc;
	/* the final region is cut: the last complete one, from a second read */
	int64_t region = p->last_complete;
	cd_nside_free(&p->ns);
	memset(&p->ns, 0, sizeof p->ns);
	cd_report_cache_free(&p->cache);
	cd_out_discard(&p->nccl);
	p->again = p->rendered = false;
	p->quiet = true;
	p->o = o;
	int rc2 = run_pass(p, region);
	/* the second read's exit code counts only when it fails: the cut was
	 * said already */
	return rc2 == CD_EXIT_DATA ? rc2 : rc;
}

/* ---- the page ---- */

/* The NCCL document with the module rows of the shown region only (the
 * trace's other regions would make the page grow with the run). */
static char *nccl_of_region(const struct cd_out *nccl, int64_t region)
{
	cJSON *doc = cJSON_ParseWithLength(nccl->buf, nccl->len);
	cJSON *regions = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "nccl"), "regions");
	char *s;

	if (!doc)
		return NULL;
	for (cJSON *r = regions ? regions->child : NULL, *next; r; r = next) {
		next = r->next;
		cJSON *id = cJSON_GetObjectItem(r, "region");
		if (!cJSON_IsNumber(id) || (int64_t)id->valuedouble != region)
			cJSON_Delete(cJSON_DetachItemViaPointer(regions, r));
	}
	s = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	return s;
}

/* Ops left out of the tree's lists by --max-ops (the "..._omitted" keys). */
static uint64_t omitted_ops(const cJSON *m)
{
	uint64_t n = 0;
	for (const cJSON *k = m ? m->child : NULL; k; k = k->next) {
		size_t len = k->string ? strlen(k->string) : 0;
		if (len > 8 && strcmp(k->string + len - 8, "_omitted") == 0 && cJSON_IsNumber(k))
			n += (uint64_t)k->valuedouble;
	}
	const cJSON *kids = cJSON_GetObjectItem(m, "children");
	for (const cJSON *c = kids ? kids->child : NULL; c; c = c->next)
		n += omitted_ops(c);
	return n;
}

static void meta_json(struct cd_out *o, const struct cd_cli *opts, const struct pass *p,
		      const char *path, bool has_rank, int64_t rank)
{
	cJSON *tree = cJSON_ParseWithLength(p->tree.buf, p->tree.len);

	cd_pj_begin_obj(o);
	cd_pj_key(o, "generator");
	cd_pj_cstr(o, "commdebug " CD_VERSION);
	cd_pj_key(o, "traces");
	cd_pj_begin_arr(o);
	for (int i = 0; i < opts->ntraces; i++)
		cd_pj_cstr(o, opts->traces[i]);
	cd_pj_end(o);
	cd_pj_key(o, "shown");
	cd_pj_begin_obj(o);
	cd_pj_key(o, "path");
	cd_pj_cstr(o, path);
	cd_pj_key(o, "rank");
	if (has_rank)
		cd_pj_int(o, rank);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_end(o);
	cd_pj_key(o, "region");
	cd_pj_int(o, p->region);
	cd_pj_key(o, "label");
	if (p->label)
		cd_pj_cstr(o, p->label);
	else
		cd_pj_raw(o, "null", 4);
	cd_pj_key(o, "region_complete");
	cd_pj_bool(o, !p->region_cut);
	cd_pj_key(o, "region_rule");
	cd_pj_cstr(o, opts->select ? "chosen with --region"
		      : p->region_cut ? "the last region (no region of the trace is complete)"
				      : "the last complete region of the trace");
	/* the trace's regions (null with --region): the first and the last
	 * REGS_KEPT, and how many there are */
	cd_pj_key(o, "regions");
	if (opts->select) {
		cd_pj_raw(o, "null", 4);
	} else {
		uint64_t nt = p->nregs > REGS_KEPT ? p->nregs - REGS_KEPT : 0;
		if (nt > REGS_KEPT)
			nt = REGS_KEPT;
		cd_pj_begin_obj(o);
		cd_pj_key(o, "count");
		cd_pj_int(o, (int64_t)p->nregs);
		cd_pj_key(o, "list");
		cd_pj_begin_arr(o);
		for (uint64_t i = 0; i < p->nregs && i < REGS_KEPT; i++)
			preg_json(o, &p->head[i]);
		for (uint64_t i = p->nregs - nt; i < p->nregs; i++)
			preg_json(o, &p->tail[(i - REGS_KEPT) % REGS_KEPT]);
		cd_pj_end(o);
		cd_pj_end(o);
	}
	cd_pj_key(o, "max_ops");
	cd_pj_int(o, (int64_t)opts->max_ops);
	cd_pj_key(o, "omitted_ops");
	cd_pj_int(o, (int64_t)omitted_ops(tree));
	cd_pj_end(o);
	cJSON_Delete(tree);
}

/* The page (metadata, post-mortem, counts, tree, NCCL traffic), written to
 * -o's file.  Returns an exit code. */
static int write_page(const struct cd_cli *o, const struct pass *p, const struct cd_out *ranks,
		      const char *path, bool has_rank, int64_t rank)
{
	struct cd_out meta, page;
	struct cd_html_part parts[5];
	size_t n = 0;
	char title[512];
	int rc;

	cd_out_init(&meta, NULL);
	cd_out_init(&page, NULL);
	meta.hold = page.hold = true;
	meta_json(&meta, o, p, path, has_rank, rank);
	char *nccl = p->nccl.len ? nccl_of_region(&p->nccl, p->region) : NULL;
	parts[n++] = (struct cd_html_part){"meta", meta.buf, meta.len};
	if (ranks->len)
		parts[n++] = (struct cd_html_part){"ranks", ranks->buf, ranks->len};
	parts[n++] = (struct cd_html_part){"counts", p->counts.buf, p->counts.len};
	parts[n++] = (struct cd_html_part){"tree", p->tree.buf, p->tree.len};
	if (nccl)
		parts[n++] = (struct cd_html_part){"nccl", nccl, strlen(nccl)};
	snprintf(title, sizeof title, "commdebug report: %s%s, region %" PRId64, path,
		 o->ntraces > 1 ? " and other ranks" : "", p->region);
	cd_html_page(&page, title, parts, n);
	if (meta.failed || page.failed || (p->nccl.len && !nccl)) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
	} else {
		rc = cd_paths_save(o->out_path, &page);
	}
	free(nccl);
	cd_out_free(&meta);
	cd_out_free(&page);
	return rc;
}

/* Flight Recorder dumps or summary files only: a page of the post-mortem
 * alone (no module tree or counts: a dump has no modules, a summary keeps
 * none). */
static int write_postmortem_page(const struct cd_cli *o, const struct cd_out *ranks)
{
	bool summaries = cd_run_input_kind(o->traces[0]) == CD_IN_SUMMARY;
	struct cd_out meta, page;
	struct cd_html_part parts[2];
	char title[512];
	int rc;

	cd_out_init(&meta, NULL);
	cd_out_init(&page, NULL);
	meta.hold = page.hold = true;
	cd_pj_begin_obj(&meta);
	cd_pj_key(&meta, "generator");
	cd_pj_cstr(&meta, "commdebug " CD_VERSION);
	cd_pj_key(&meta, "traces");
	cd_pj_begin_arr(&meta);
	for (int i = 0; i < o->ntraces; i++)
		cd_pj_cstr(&meta, o->traces[i]);
	cd_pj_end(&meta);
	cd_pj_key(&meta, summaries ? "summaries_only" : "flight_recorder_only");
	cd_pj_bool(&meta, true);
	cd_pj_end(&meta);
	parts[0] = (struct cd_html_part){"meta", meta.buf, meta.len};
	parts[1] = (struct cd_html_part){"ranks", ranks->buf, ranks->len};
	snprintf(title, sizeof title, "commdebug report: %s%s (%s)", o->traces[0],
		 o->ntraces > 1 ? " and other ranks" : "", summaries ? "summaries" : "Flight Recorder");
	cd_html_page(&page, title, parts, 2);
	if (meta.failed || page.failed) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
	} else {
		rc = cd_paths_save(o->out_path, &page);
	}
	cd_out_free(&meta);
	cd_out_free(&page);
	return rc;
}

/* Several traces: the post-mortem (ranks --json) into out, and which trace
 * the tree is drawn from (*path, *rank): the first, by rank then path, with
 * a rank and events (or --rank's).  Returns an exit code. */
static int postmortem(const struct cd_cli *o, struct cd_out *out, const char **path,
		      bool *has_rank, int64_t *rank)
{
	struct cd_rank_summary *sums = NULL, **order = NULL;
	double read_s = 0;
	int threads = 0, n = 0;
	int rc = cd_cli_summaries(o, &sums, &n, &read_s, &threads);

	if (rc != CD_EXIT_OK)
		return rc;
	if (o->stats)
		cd_cli_print_run_stats(sums, n, threads, read_s);
	rc = cd_cli_ranks_report(CD_R_RANKS, true, o->late_ns, sums, n, out, NULL);
	if (rc == CD_EXIT_DATA)
		goto out;
	if (out->failed || !(order = cd_run_ptrs(sums, n))) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
		goto out;
	}
	cd_pm_sort(order, n);
	*path = NULL;
	for (int k = 0; k < n && !*path; k++) {
		const struct cd_rank_summary *s = order[k];
		if (!(s->has_rank || s->rank_from_name) || s->source != CD_SRC_TRACE ||
		    s->from_summary)
			continue;
		if (o->has_rank ? s->rank != o->rank
				: s->end == CD_END_EMPTY || s->end == CD_END_ERROR)
			continue;
		for (int i = 0; i < o->ntraces && !*path; i++)
			if (strcmp(o->traces[i], s->path) == 0)
				*path = o->traces[i];
		if (!*path)
			continue;
		*has_rank = true;
		*rank = s->rank;
	}
	bool fr = false;
	for (int k = 0; k < n; k++)
		fr |= sums[k].source != CD_SRC_TRACE || sums[k].from_summary;
	if (!*path && fr && !o->has_rank) {
		/* dumps or summary files (and no trace to draw a tree from): the
		 * post-mortem alone */
	} else if (!*path) {
		if (o->has_rank)
			fprintf(stderr, "commdebug: no trace of rank %" PRId64 " among the %d traces\n",
				o->rank, n);
		else
			fprintf(stderr, "commdebug: no trace with a rank and events among the %d "
					"traces: nothing to draw a module tree from\n", n);
		rc = CD_EXIT_DATA;
	}
out:
	free(order);
	cd_run_free(sums, n);
	return rc;
}

int cmd_report(int argc, char **argv)
{
	struct cd_cli o = {0};
	struct cd_out ranks;
	struct pass p = {0};
	bool have_pass = false;
	const char *path;
	bool has_rank = false;
	int64_t rank = 0;
	int rc = cd_cli_parse(&o, &cmd, argc, argv), prc = CD_EXIT_OK, src;

	if (rc >= 0)
		return rc;
	cd_out_init(&ranks, NULL);
	ranks.hold = true;
	if ((rc = cd_cli_refuse_inputs(&o, o.out_path, true)) != CD_EXIT_OK)
		goto done;
	path = o.traces[0];
	if ((o.ntraces > 1 || cd_run_input_kind(path) != CD_IN_TRACE) &&
	    (prc = postmortem(&o, &ranks, &path, &has_rank, &rank)) == CD_EXIT_DATA) {
		rc = prc;
		goto done;
	}
	if (!path) {
		/* Flight Recorder dumps or summary files only */
		rc = write_postmortem_page(&o, &ranks);
		if (rc == CD_EXIT_OK && (prc == CD_EXIT_DIFFER || prc == CD_EXIT_CUT))
			rc = prc;
		goto done;
	}
	have_pass = true;
	if ((rc = tree_of(&o, path, &p)) == CD_EXIT_DATA)
		goto done;
	if (!p.rendered) { /* cut before its first line: said already, nothing to show */
		fprintf(stderr, "commdebug: %s: no page written: nothing of the trace could be read\n",
			o.out_path);
		goto done;
	}
	if ((src = write_page(&o, &p, &ranks, path, has_rank, rank)) != CD_EXIT_OK)
		rc = src;
	else if (prc == CD_EXIT_DIFFER || (prc == CD_EXIT_CUT && rc == CD_EXIT_OK))
		rc = prc;
done:
	if (have_pass)
		pass_free(&p);
	cd_out_free(&ranks);
	cd_cli_free(&o);
	return rc;
}
