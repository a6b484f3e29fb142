/* commdebug report: one self-contained HTML page (html.h) of a run: the
 * post-mortem across ranks first when there are several traces, then the
 * collective counts and the module tree of one region of one rank, and the
 * NCCL traffic where the trace has an NCCL side.
 *
 * The page's numbers are the JSON of the other commands, made by the same
 * code: ranks --json (cd_cli_run_ranks), counts --json (cd_report_counts),
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
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../html.h"
#include "../replay.h"
#include "../report.h"
#include "../trace.h"
#include "nccl_side.h"
#include "paths.h"

#define MAX_OPS_DEFAULT 100

struct report_opts {
	const char *out_path;
	bool select;
	int64_t region;
	bool has_rank;
	int64_t rank;
	uint64_t max_ops;
	const char *nccl_path;
	bool no_nccl;
	bool general_parser;
	int jobs;
	int64_t late_ns;
	char **traces;
	int ntraces;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: commdebug report -o FILE.html [OPTIONS] TRACE...\n"
		"Write one self-contained HTML page (no network needed) about the traces:\n"
		"the post-mortem across ranks first when there are several, then the\n"
		"collective counts and module tree of one region, each module expandable to\n"
		"its operations, and NCCL bytes and bandwidth where the trace has them.\n"
		"\n"
		"Options:\n"
		"  -o, --output=FILE    the page to write (- for standard output); required\n"
		"  -r, --region=N       the tree and counts of region N (default: the last\n"
		"                       region that ended with region_exit)\n"
		"      --rank=N         with several traces: the tree of rank N (default: the\n"
		"                       lowest rank)\n"
		"      --max-ops=N      at most N operations in each op list of a module\n"
		"                       (default %d; 0: every operation)\n"
		"      --nccl=FILE      the NCCL-side trace of TRACE (default: the\n"
		"                       TRACE.nccl.zst next to it, if there is one)\n"
		"      --no-nccl        leave out the NCCL calls\n"
		"      --late=SECONDS   a rank reaching a collective this much after the\n"
		"                       others is a straggler (default 5)\n"
		"      --jobs=N         threads reading traces (default: cores)\n"
		"      --parser=KIND    line parser: fast (default) or general\n"
		"  -h, --help           show this help and exit\n"
		"\n"
		"TRACE is a .zst or plain JSON Lines trace, or a directory of them.\n"
		"Exit status: 0 ok, 1 bad or unreadable trace (no page written), 2 usage\n"
		"error, 3 a trace was cut short (the page shows what was read), 4 the ranks\n"
		"disagree (the page shows the findings).\n",
		MAX_OPS_DEFAULT);
}

static int usage_error(const char *msg, const char *arg)
{
	return cd_cli_usage_error("report", msg, arg);
}

static int parse(struct report_opts *o, int argc, char **argv)
{
	enum { OPT_RANK = 256, OPT_MAX_OPS, OPT_NCCL, OPT_NO_NCCL, OPT_LATE, OPT_JOBS, OPT_PARSER };
	static const struct option longs[] = {
		{"output", required_argument, NULL, 'o'},
		{"region", required_argument, NULL, 'r'},
		{"rank", required_argument, NULL, OPT_RANK},
		{"max-ops", required_argument, NULL, OPT_MAX_OPS},
		{"nccl", required_argument, NULL, OPT_NCCL},
		{"no-nccl", no_argument, NULL, OPT_NO_NCCL},
		{"late", required_argument, NULL, OPT_LATE},
		{"jobs", required_argument, NULL, OPT_JOBS},
		{"parser", required_argument, NULL, OPT_PARSER},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	int64_t v;

	o->max_ops = MAX_OPS_DEFAULT;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":o:r:h", longs, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (!*optarg)
				return usage_error("empty file name for --output", NULL);
			o->out_path = optarg;
			break;
		case 'r':
			if (!cd_cli_int_arg(optarg, 0, INT32_MAX, &v))
				return usage_error("--region takes a region number", optarg);
			o->select = true;
			o->region = v;
			break;
		case OPT_RANK:
			if (!cd_cli_int_arg(optarg, 0, INT32_MAX, &v))
				return usage_error("--rank takes a rank number", optarg);
			o->has_rank = true;
			o->rank = v;
			break;
		case OPT_MAX_OPS:
			if (!cd_cli_int_arg(optarg, 0, INT32_MAX, &v))
				return usage_error("--max-ops takes a number (0: every operation)", optarg);
			o->max_ops = (uint64_t)v;
			break;
		case OPT_NCCL:
			if (!*optarg)
				return usage_error("empty file name for --nccl", NULL);
			o->nccl_path = optarg;
			break;
		case OPT_NO_NCCL:
			o->no_nccl = true;
			break;
		case OPT_LATE:
			if (!cd_cli_seconds_arg(optarg, &o->late_ns))
				return usage_error("--late takes seconds above 0", optarg);
			break;
		case OPT_JOBS:
			if (!cd_cli_int_arg(optarg, 1, 256, &v))
				return usage_error("--jobs takes a number from 1 to 256", optarg);
			o->jobs = (int)v;
			break;
		case OPT_PARSER:
			if (!cd_cli_parser_arg(optarg, &o->general_parser))
				return usage_error("--parser takes fast or general", optarg);
			break;
		case 'h':
			usage(stdout);
			return CD_EXIT_OK;
		case ':':
			return usage_error("option needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option", argv[optind - 1]);
		}
	}
	o->traces = argv + optind;
	o->ntraces = argc - optind;
	if (!o->out_path)
		return usage_error("no output file given (-o FILE.html)", NULL);
	if (o->ntraces == 0)
		return usage_error("no trace given", NULL);
	for (int i = 0; i < o->ntraces; i++)
		if (strcmp(o->traces[i], "-") == 0)
			return usage_error("a trace is read up to twice; standard input cannot be", NULL);
	if (o->nccl_path && o->no_nccl)
		return usage_error("--nccl and --no-nccl exclude each other", NULL);
	if (o->nccl_path && o->ntraces > 1)
		return usage_error("--nccl goes with one trace only", NULL);
	if (o->has_rank && o->ntraces < 2)
		return usage_error("--rank chooses among several traces; one was given", NULL);
	return -1;
}

/* ---- one trace: counts, tree and NCCL traffic of one region ---- */

struct pass {
	const struct report_opts *o;
	const char *path;
	struct cd_nside ns;
	struct cd_trace_run *tr;
	struct cd_report_cache cache;
	bool want_nccl;
	/* out */
	struct cd_out tree, counts, nccl;  /* JSON documents (held) */
	bool rendered;
	int64_t region;
	char *label;
	bool region_cut;
	int64_t last_complete;             /* -1: none yet */
	bool again;                        /* the final region is cut: read again */
	bool quiet;                        /* the second read: its warnings were said */
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
	/* only the final region is shown (or the one asked for); a cut final
	 * region gives way to the last complete one when there is one */
	if (!p->o->select && r->more_regions)
		return CD_OK;
	if (!p->o->select && r->region_cut && p->last_complete >= 0) {
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
}

/* Replay path into p (set up by the caller: o, path, held outs); region:
 * the one to render, or -1 for the rule above.  Returns an exit code
 * (0, 1 or 3); errors are printed. */
static int run_pass(struct pass *p, int64_t region)
{
	struct cd_cli cli = {.cmd = "report", .nccl_path = p->o->nccl_path,
			     .no_nccl = p->o->no_nccl, .general_parser = p->o->general_parser,
			     .kind = CD_R_JSON, .json = true};
	struct cd_replay rp;
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;
	bool replay_ok = false;
	struct report_opts sel = *p->o;

	if (region >= 0) {
		sel.select = true;
		sel.region = region;
	}
	p->o = &sel;
	p->last_complete = -1;
	p->want_nccl = !sel.no_nccl;
	if (p->want_nccl)
		cd_nside_find(&p->ns, &cli, p->path);
	bool sibling = p->ns.sibling != NULL;
	struct cd_replay_opts ro = {
		.retain_ops = true, .want_tree = true, .want_params = true,
		.select = sel.select, .region = sel.region,
		.region_done = pass_region, .defer_done = true,
		.on_collective = sibling ? pass_charge : NULL,
		.warn = pass_warn, .ud = p,
	};
	struct cd_trace_run tr = {.after_event = p->want_nccl ? pass_event : NULL,
				  .general_parser = sel.general_parser, .ud = p};
	p->tr = &tr;
	if (cd_replay_init(&rp, &ro, &err)) {
		cd_cli_print_error(p->path, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	replay_ok = true;
	if (sibling && (rc = cd_nside_load(&p->ns, &cli, p->path)) == CD_EXIT_DATA)
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
			sel.region);
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
	p->o = NULL;
	return rc;
}

/* The page's tree, counts and NCCL traffic of path.  Returns an exit code. */
static int tree_of(const struct report_opts *o, const char *path, struct pass *p)
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

static void meta_json(struct cd_out *o, const struct report_opts *opts, const struct pass *p,
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
	cd_pj_key(o, "max_ops");
	cd_pj_int(o, (int64_t)opts->max_ops);
	cd_pj_key(o, "omitted_ops");
	cd_pj_int(o, (int64_t)omitted_ops(tree));
	cd_pj_end(o);
	cJSON_Delete(tree);
}

/* The page (metadata, post-mortem, counts, tree, NCCL traffic), written to
 * -o's file.  Returns an exit code. */
static int write_page(const struct report_opts *o, const struct pass *p, const struct cd_out *ranks,
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

/* The output must be none of the inputs: the traces, their NCCL-side
 * traces and --nccl's. */
static int refuse_inputs(const struct report_opts *o)
{
	const char *in;
	if (strcmp(o->out_path, "-") == 0)
		return CD_EXIT_OK;
	if ((in = cd_paths_is_input(o->out_path, o->traces, o->ntraces)) ||
	    (o->nccl_path && (in = cd_paths_is_input(o->out_path, (char **)&o->nccl_path, 1)))) {
		fprintf(stderr, "commdebug: %s: the output is the same file as the input %s; "
				"refusing to overwrite it\n", o->out_path, in);
		return CD_EXIT_USAGE;
	}
	for (int i = 0; i < o->ntraces; i++) {
		char *sib = cd_paths_nccl_name(o->traces[i]);
		bool same = sib && cd_paths_is_input(o->out_path, &sib, 1);
		if (same)
			fprintf(stderr, "commdebug: %s: the output is the same file as the input %s; "
					"refusing to overwrite it\n", o->out_path, sib);
		free(sib);
		if (same)
			return CD_EXIT_USAGE;
	}
	return CD_EXIT_OK;
}

/* Several traces: the post-mortem (ranks --json) into out, and which trace
 * the tree is drawn from (*path, *rank).  Returns an exit code. */
static int postmortem(const struct report_opts *o, struct cd_out *out, const char **path,
		      bool *has_rank, int64_t *rank)
{
	struct cd_cli cli = {.cmd = "report", .kind = CD_R_RANKS, .json = true, .jobs = o->jobs,
			     .late_ns = o->late_ns, .general_parser = o->general_parser,
			     .traces = o->traces, .ntraces = o->ntraces};
	int rc = cd_cli_run_ranks(&cli, out);
	if (rc == CD_EXIT_DATA)
		return rc;
	if (out->failed) {
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	cJSON *doc = cJSON_ParseWithLength(out->buf, out->len);
	const cJSON *traces = cJSON_GetObjectItem(doc, "traces");
	*path = NULL;
	for (const cJSON *t = traces ? traces->child : NULL; t && !*path; t = t->next) {
		const cJSON *r = cJSON_GetObjectItem(t, "rank"), *end = cJSON_GetObjectItem(t, "end");
		const cJSON *p = cJSON_GetObjectItem(t, "path");
		if (!cJSON_IsNumber(r) || !cJSON_IsString(p) || !cJSON_IsString(end))
			continue;
		if (o->has_rank ? (int64_t)r->valuedouble != o->rank
				: strcmp(end->valuestring, "empty") == 0 ||
					  strcmp(end->valuestring, "error") == 0)
			continue;
		/* the path as given (the ranks report keeps it) */
		for (int i = 0; i < o->ntraces; i++)
			if (strcmp(o->traces[i], p->valuestring) == 0)
				*path = o->traces[i];
		*has_rank = true;
		*rank = (int64_t)r->valuedouble;
	}
	cJSON_Delete(doc);
	if (!*path) {
		if (o->has_rank)
			fprintf(stderr, "commdebug: no trace of rank %" PRId64 " among the %d traces\n",
				o->rank, o->ntraces);
		else
			fprintf(stderr, "commdebug: no trace with a rank and events among the %d "
					"traces: nothing to draw a module tree from\n", o->ntraces);
		return CD_EXIT_DATA;
	}
	return rc;
}

static void skip_note(void *ud, const char *path, const char *why)
{
	(void)ud;
	cd_cli_print_warning(path, 0, why);
}

int cmd_report(int argc, char **argv)
{
	struct report_opts o = {0};
	struct cd_paths paths = {0};
	struct cd_out ranks;
	struct cd_err err = {0};
	struct pass p = {0};
	bool have_pass = false;
	const char *path, *bad = NULL;
	bool has_rank = false;
	int64_t rank = 0;
	int rc = parse(&o, argc, argv), prc = CD_EXIT_OK, src;

	cd_out_init(&ranks, NULL);
	ranks.hold = true;
	if (rc >= 0)
		goto done;
	if (!cd_paths_expand(o.traces, o.ntraces, &paths, skip_note, NULL, &bad, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", bad, err.msg);
		rc = CD_EXIT_DATA;
		goto done;
	}
	o.traces = paths.v;
	o.ntraces = paths.n;
	if ((rc = refuse_inputs(&o)) != CD_EXIT_OK)
		goto done;
	path = o.traces[0];
	if (o.ntraces > 1 && (prc = postmortem(&o, &ranks, &path, &has_rank, &rank)) == CD_EXIT_DATA) {
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
	cd_paths_free(&paths);
	return rc;
}
