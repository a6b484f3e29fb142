/* The per-region runner of analyze, counts and sharding: each trace replayed
 * region by region and reported as it goes; with several traces (ranks,
 * colls, analyze) the cross-rank report of summaries.c. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../replay/nccl.h"
#include "../read/reader.h"
#include "../replay/replay.h"
#include "../views/tables.h"
#include "../replay/trace.h"
#include "paths.h"
#include "nccl_side.h"

/* ---- the driver ---- */

/* Progress on standard error, only when it is a terminal: at most four
 * redraws a second, the line cleared at the end. */
struct progress {
	bool on, drawn;
	uint64_t size;
	double next;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void progress_start(struct progress *pg, const char *path)
{
	struct stat st;
	memset(pg, 0, sizeof *pg);
	/* not while results go to the same terminal */
	if (!isatty(STDERR_FILENO) || isatty(STDOUT_FILENO) || strcmp(path, "-") == 0 ||
	    stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	pg->on = true;
	pg->size = (uint64_t)st.st_size;
	pg->next = now() + 0.5; /* quiet for short runs */
}

static void progress_tick(struct progress *pg, const char *name, const struct cd_reader *rd)
{
	double t = now();
	if (t < pg->next)
		return;
	pg->next = t + 0.25;
	uint64_t done = cd_reader_file_bytes(rd);
	fprintf(stderr, "\rcommdebug: %s: %3.0f%% (%llu MiB)\033[K", name,
		pg->size ? 100.0 * (double)done / (double)pg->size : 0.0,
		(unsigned long long)(cd_reader_data_bytes(rd) >> 20));
	pg->drawn = true;
}

static void progress_end(struct progress *pg)
{
	if (pg->drawn)
		fprintf(stderr, "\r\033[K");
	pg->drawn = false;
}


struct run {
	struct cd_cli *cli;
	const char *path;
	struct cd_trace_run *tr; /* the read in progress (its line, for warnings) */
	struct cd_out *out;
	uint64_t reported;
	bool json_like;
	struct cd_report_cache cache;
	struct progress pg;
	struct cd_nside ns;      /* NCCL calls of the trace and its NCCL-side trace */
	bool want_nccl;
	const char *head;        /* "==> rank R: PATH <==" still to print before the
				  * trace's first output (several traces), or NULL */
	bool head_first;         /* ... as the first output (no blank line before) */
};

/* The head of one of several traces: its rank when its meta event gave one. */
static void trace_head(struct run *run)
{
	if (!run->head)
		return;
	cd_out_str(run->out, run->head_first ? "==> " : "\n==> ");
	if (run->tr && run->tr->has_rank)
		cd_out_printf(run->out, "rank %" PRId64 ": ", run->tr->rank);
	cd_out_printf(run->out, "%s <==\n", run->head);
	run->head = NULL;
}

/* --json-regions: what goes before a document, and after it (its last
 * newline taken back, so that the dump stays the document as it is). */
static void wrap_begin(struct run *run, struct cd_out *o, int64_t region, const char *label)
{
	cd_out_str(o, "{\"region\": ");
	if (region >= 0)
		cd_out_i64(o, region);
	else
		cd_out_str(o, "null");
	cd_out_str(o, ", \"label\": ");
	if (label)
		cd_pj_cstr(o, label);
	else
		cd_out_str(o, "null");
	cd_out_str(o, ", \"rank\": ");
	if (run->tr && run->tr->has_rank)
		cd_out_i64(o, run->tr->rank);
	else
		cd_out_str(o, "null");
	cd_out_str(o, ", \"trace\": ");
	cd_pj_cstr(o, run->path);
	cd_out_str(o, ", \"dump\": ");
}

static void wrap_end(struct cd_out *o)
{
	if (o->len && o->buf[o->len - 1] == '\n')
		o->len--;
	cd_out_str(o, "}\n");
}

static void warn_cb(void *ud, const char *msg)
{
	struct run *run = ud;
	long long line = run->tr ? run->tr->line : 0;
	progress_end(&run->pg);
	cd_cli_print_warning(run->path, line, msg);
}

/* A light trace (meta "light") has no op events but collectives: noise 1-3
 * would show empty operation lists as if the program ran none.  Said once
 * per trace: in the table itself, or on stderr beside JSON. */
static void light_note(struct run *run)
{
	static const char what[] =
		"recorded light: no operators were recorded, only modules and collectives, so "
		"noise levels 1-3 list no operations (record without --light for them)";
	if (run->json_like)
		fprintf(stderr, "commdebug: %s: %s\n", run->path, what);
	else
		cd_out_printf(run->out, "# %s\n", what);
}

static void region_header(struct cd_out *o, int64_t region, const char *label, bool has_label)
{
	cd_out_printf(o, "# region %" PRId64, region);
	if (has_label)
		cd_out_printf(o, ": %s", label);
	cd_out_write(o, "\n", 1);
}

static void render(struct run *run, struct cd_out *o, const struct cd_replay *r)
{
	struct cd_report_opts ro = {.noise = run->cli->noise, .color = run->cli->color,
				    .cache = &run->cache, .warn = warn_cb, .ud = run};
	switch (run->cli->kind) {
	case CD_R_TABLE:
		cd_report_table(o, r, &ro);
		break;
	case CD_R_JSON:
		cd_report_json(o, r, &ro);
		break;
	case CD_R_COUNTS:
		cd_report_counts(o, r, run->cli->json);
		break;
	case CD_R_SHARDING:
		cd_report_sharding(o, r, run->cli->json);
		break;
	case CD_R_RANKS:
	case CD_R_COLLS:
		break;
	}
}

static enum cd_status region_done(void *ud, const struct cd_replay *r, struct cd_err *err)
{
	struct run *run = ud;

	run->reported++;
	trace_head(run);
	if (run->reported == 1 && run->tr && run->tr->light && run->cli->noise >= 1 &&
	    (run->cli->kind == CD_R_TABLE || run->cli->kind == CD_R_JSON))
		light_note(run);
	/* the table of several regions: a header before each (the replay
	 * defers this call until it knows whether another region follows) */
	if (!run->json_like && !run->cli->select && (run->reported > 1 || r->more_regions))
		region_header(run->out, r->region,
			      r->label == CD_NOID ? "" : cd_intern_str(&r->strs, r->label),
			      r->label != CD_NOID);
	if (run->cli->json_wrap) {
		wrap_begin(run, run->out, r->region,
			   r->label == CD_NOID ? NULL : cd_intern_str(&r->strs, r->label));
		render(run, run->out, r);
		wrap_end(run->out);
	} else {
		render(run, run->out, r);
	}
	if (run->out->failed)
		return cd_out_flush(run->out, err);
	return CD_OK;
}

static void report_error(const struct run *run, const struct cd_err *err)
{
	cd_cli_print_error(run->path, err);
}

static void tick_cb(void *ud, const struct cd_reader *rd)
{
	struct run *run = ud;
	if (run->pg.on)
		progress_tick(&run->pg, run->path, rd);
}

/* The NCCL side (nccl_side.c): the replay's hooks. */
static void nccl_event_cb(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct run *run = ud;
	(void)r;
	cd_nside_event(&run->ns, e, run->tr ? run->tr->line : 0);
}

static void nccl_charge_cb(void *ud, const struct cd_replay *r, const struct cd_event *e,
			   uint32_t coll)
{
	struct run *run = ud;
	(void)coll;
	cd_nside_charge(&run->ns, r, e);
}

/* Replay one trace and report it to out; head: the trace's head line
 * (several traces), first: the first output.  Returns the exit code. */
static int run_trace(struct cd_cli *cli, const char *path, struct cd_out *out, const char *head,
		     bool first)
{
	struct run run = {.cli = cli, .path = strcmp(path, "-") == 0 ? "<stdin>" : path, .out = out,
			  .head = head, .head_first = first};
	struct cd_replay rp;
	struct cd_err err = {0};
	enum cd_status st;
	int rc = CD_EXIT_OK;
	bool replay_ok = false;

	run.json_like = cli->json;
	run.want_nccl = (cli->kind == CD_R_TABLE || cli->kind == CD_R_JSON) && !cli->no_nccl;
	struct cd_nside_opts no = {.nccl_path = cli->nccl_path,
				   .general_parser = cli->general_parser};
	if (run.want_nccl)
		cd_nside_find(&run.ns, &no, path);
	const char *sibling = run.ns.sibling;
	bool lists = cli->kind == CD_R_TABLE || cli->kind == CD_R_JSON;
	struct cd_replay_opts ro = {
		.retain_ops = lists && cli->noise >= 1,
		.want_tree = cli->kind == CD_R_JSON,
		.want_params = (lists && cli->noise >= 1) || cli->kind == CD_R_SHARDING,
		.select = cli->select,
		.region = cli->region,
		.region_done = region_done,
		.defer_done = !run.json_like && !cli->select,
		/* charging needs the NCCL calls first: those of the NCCL-side
		 * trace; nccl events inside this trace are only summarized */
		.on_collective = sibling ? nccl_charge_cb : NULL,
		.warn = warn_cb,
		.ud = &run,
	};
	struct cd_trace_run tr = {
		.after_event = run.want_nccl ? nccl_event_cb : NULL,
		.after_kinds = CD_NSIDE_EVENTS,
		.general_parser = cli->general_parser,
		/* args and params feed only the op lists and parameter info */
		.skip_detail = !ro.retain_ops && !ro.want_params,
		.tick = tick_cb,
		.ud = &run,
	};
	run.tr = &tr;
	if ((st = cd_replay_init(&rp, &ro, &err))) {
		report_error(&run, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	replay_ok = true;
	if (sibling && (rc = cd_nside_load(&run.ns, &no, path)) == CD_EXIT_DATA)
		goto out;
	progress_start(&run.pg, path);
	st = cd_trace_replay(path, &rp, &tr, &err);
	progress_end(&run.pg);
	trace_head(&run);
	if (st) {
		report_error(&run, &err);
		rc = tr.cut && !tr.seen_meta ? CD_EXIT_CUT : CD_EXIT_DATA;
		goto out;
	}
	if (tr.cut) {
		fprintf(stderr,
			"commdebug: %s: warning: the trace is cut (%s); analyzed up to line %lld, "
			"the last complete line\n",
			run.path, tr.cut_why, tr.last_good);
		rc = CD_EXIT_CUT;
	}
	if ((st = cd_replay_finish(&rp, &err))) {
		report_error(&run, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	if (run.want_nccl && cli->json_wrap && cd_nside_reports(&run.ns)) {
		/* the NCCL calls' document, wrapped as the regions' are */
		wrap_begin(&run, out, -1, NULL);
		rc = cd_nside_finish(&run.ns, out, &rp.mods, run.path, true, rp.regions != 0);
		wrap_end(out);
		if (rc) {
			rc = CD_EXIT_DATA;
			goto out;
		}
	} else if (run.want_nccl &&
	    cd_nside_finish(&run.ns, out, &rp.mods, run.path, cli->json, rp.regions != 0)) {
		rc = CD_EXIT_DATA;
		goto out;
	}
	if (rp.regions == 0 && run.want_nccl && cd_nccl_any(&run.ns.nccl)) {
		/* an NCCL-side trace on its own: the calls are the analysis */
	} else if (rp.regions == 0) {
		fprintf(stderr, "commdebug: %s: no recording region in the trace (no region_enter "
				"event)\n", run.path);
		if (rc == CD_EXIT_OK)
			rc = CD_EXIT_DATA;
	} else if (cli->select && run.reported == 0) {
		fprintf(stderr, "commdebug: %s: no region %" PRId64 " in the trace\n", run.path,
			cli->region);
		if (rc == CD_EXIT_OK)
			rc = CD_EXIT_DATA;
	}
	if (cli->stats)
		cd_cli_print_stats(run.path, &tr, &rp);
out:
	if (replay_ok) {
		/* an error after a region ended: still show that region */
		struct cd_err ferr = {0};
		cd_replay_flush(&rp, &ferr);
		cd_replay_free(&rp);
	}
	cd_report_cache_free(&run.cache);
	cd_nside_free(&run.ns);
	return rc;
}


int cd_cli_run(struct cd_cli *cli)
{
	FILE *f = stdout;
	struct cd_out out;
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	if (cli->out_path && (rc = cd_cli_open_output(cli, &f)) != CD_EXIT_OK) {
		cd_cli_free(cli);
		return rc;
	}
	cd_out_init(&out, f);
	bool analyze = cli->kind == CD_R_TABLE || cli->kind == CD_R_JSON;
	bool several = cli->kind == CD_R_RANKS || cli->kind == CD_R_COLLS;
	/* analyze with several traces compares them, as ranks does (not
	 * with --json-regions: a stream of wrapped region documents) */
	bool compare = several || (analyze && cli->ntraces > 1 && !cli->json_wrap);
	/* each trace on its own: counts, sharding, the tables of analyze, and
	 * its JSON on request */
	bool each = !compare || cli->each || !cli->json;
	for (int i = 0; each && !several && i < cli->ntraces; i++) {
		bool head = cli->ntraces > 1 && !cli->json;
		int r = run_trace(cli, cli->traces[i], &out, head ? cli->traces[i] : NULL, i == 0);
		/* the worst outcome wins: data error over cut over ok */
		if (r == CD_EXIT_DATA || (r == CD_EXIT_CUT && rc == CD_EXIT_OK))
			rc = r;
		if (cd_out_flush(&out, &err)) {
			fprintf(stderr, "commdebug: %s\n", err.msg);
			rc = CD_EXIT_DATA;
			break;
		}
	}
	if (compare) {
		if (each && !several && !cli->json)
			cd_out_str(&out, "\n==> all ranks <==\n");
		int r = cd_cli_run_ranks(cli, &out);
		if (r == CD_EXIT_DATA || rc == CD_EXIT_OK ||
		    (r == CD_EXIT_DIFFER && rc != CD_EXIT_DATA))
			rc = r;
		if (cd_out_flush(&out, &err)) {
			fprintf(stderr, "commdebug: %s\n", err.msg);
			rc = CD_EXIT_DATA;
		}
	}
	cd_out_free(&out);
	cd_cli_free(cli);
	if (f != stdout && fclose(f) != 0) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", cli->out_path, strerror(errno));
		rc = CD_EXIT_DATA;
	}
	return rc;
}
