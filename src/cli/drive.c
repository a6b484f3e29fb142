/* Option parsing and the trace driver shared by the analysis commands. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../nccl.h"
#include "../reader.h"
#include "../replay.h"
#include "../report.h"
#include "../trace.h"
#include "paths.h"
#include "nccl_side.h"

/* ---- options ---- */

enum { C_ANALYZE = 1, C_COUNTS = 2, C_SHARDING = 4, C_RANKS = 8, C_COLLS = 16, C_ALL = 31 };
enum { O_COLOR = 256, O_PARSER, O_STATS, O_EACH, O_JOBS, O_NCCL, O_NO_NCCL, O_MAX_MEM, O_LATE };

struct opt {
	struct option lo;
	unsigned cmds;  /* commands the option applies to */
};

static const struct opt opts[] = {
	{{"noise", required_argument, NULL, 'n'}, C_ANALYZE},
	{{"json", no_argument, NULL, 'j'}, C_ALL},
	{{"color", required_argument, NULL, O_COLOR}, C_ANALYZE},
	{{"colour", required_argument, NULL, O_COLOR}, C_ANALYZE},
	{{"region", required_argument, NULL, 'r'}, C_ANALYZE | C_COUNTS | C_SHARDING},
	{{"each", no_argument, NULL, O_EACH}, C_ANALYZE},
	{{"jobs", required_argument, NULL, O_JOBS}, C_ANALYZE | C_RANKS | C_COLLS},
	{{"late", required_argument, NULL, O_LATE}, C_ANALYZE | C_RANKS},
	{{"nccl", required_argument, NULL, O_NCCL}, C_ANALYZE},
	{{"no-nccl", no_argument, NULL, O_NO_NCCL}, C_ANALYZE},
	{{"output", required_argument, NULL, 'o'}, C_ALL},
	{{"parser", required_argument, NULL, O_PARSER}, C_ALL},
	{{"stats", no_argument, NULL, O_STATS}, C_ALL},
	{{"max-mem", required_argument, NULL, O_MAX_MEM}, C_ALL},
	{{"help", no_argument, NULL, 'h'}, C_ALL},
	{{"version", no_argument, NULL, 'V'}, C_ALL},
};
#define NOPTS (sizeof opts / sizeof opts[0])

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "commdebug: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'commdebug --help' for more information.\n");
	return CD_EXIT_USAGE;
}

/* A size: digits and an optional K, M, G or T (powers of 1024), as in
 * 512M, 4G or 4GiB; plain digits are bytes. */
static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return false;
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	case '\0': break;
	default: return false;
	}
	if (shift) {
		end++;
		if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
			end += strlen(end);
	}
	if (*end || v == 0 || v > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

static void skip_note(void *ud, const char *path, const char *why)
{
	(void)ud;
	cd_cli_print_warning(path, 0, why);
}

static void free_owned(struct cd_cli *cli)
{
	struct cd_paths p = {.v = cli->owned, .n = cli->owned ? cli->ntraces : 0};
	cd_paths_free(&p);
	cli->owned = NULL;
}

/* Replace each directory argument by the traces in it, sorted by name.
 * Returns -1 to go on, or an exit code. */
static int expand_dirs(struct cd_cli *cli)
{
	struct cd_paths p;
	struct cd_err err = {0};
	const char *bad = NULL;

	if (!cd_paths_expand(cli->traces, cli->ntraces, &p, skip_note, NULL, &bad, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", bad, err.msg);
		return CD_EXIT_DATA;
	}
	cli->owned = p.v;
	cli->traces = p.v;
	cli->ntraces = p.n;
	return -1;
}

int cd_cli_parse(struct cd_cli *cli, int argc, char **argv)
{
	struct option lo[NOPTS + 1];
	unsigned mask = strcmp(cli->cmd, "analyze") == 0 ? C_ANALYZE
		      : strcmp(cli->cmd, "counts") == 0 ? C_COUNTS
		      : strcmp(cli->cmd, "ranks") == 0 ? C_RANKS
		      : strcmp(cli->cmd, "colls") == 0 ? C_COLLS : C_SHARDING;
	const char *color = "auto";
	int c, idx;

	for (size_t i = 0; i < NOPTS; i++)
		lo[i] = opts[i].lo;
	memset(&lo[NOPTS], 0, sizeof lo[NOPTS]);
	cli->prog = "commdebug";
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:jr:o:hV", lo, &idx)) != -1) {
		/* reject options of other commands */
		for (size_t i = 0; i < NOPTS; i++)
			if (opts[i].lo.val == c && !(opts[i].cmds & mask)) {
				fprintf(stderr, "commdebug: option --%s does not apply to '%s'\n"
						"Try 'commdebug --help' for more information.\n",
					opts[i].lo.name, cli->cmd);
				return CD_EXIT_USAGE;
			}
		int64_t v;
		switch (c) {
		case 'n':
			if (!cd_cli_int_arg(optarg, 0, 3, &v))
				return usage_error("--noise takes 0, 1, 2 or 3, not '%s'", optarg);
			cli->noise = (int)v;
			break;
		case 'j':
			cli->json = true;
			break;
		case O_COLOR:
			if (strcmp(optarg, "auto") && strcmp(optarg, "always") && strcmp(optarg, "never"))
				return usage_error("--color takes auto, always or never, not '%s'", optarg);
			color = optarg;
			break;
		case 'r':
			if (!cd_cli_int_arg(optarg, 0, INT32_MAX, &v))
				return usage_error("--region takes a region number, not '%s'", optarg);
			cli->select = true;
			cli->region = v;
			break;
		case 'o':
			if (!*optarg)
				return usage_error("%s", "--output needs a file name");
			cli->out_path = optarg;
			break;
		case O_PARSER:
			if (strcmp(optarg, "fast") == 0)
				cli->general_parser = false;
			else if (strcmp(optarg, "general") == 0)
				cli->general_parser = true;
			else
				return usage_error("--parser takes fast or general, not '%s'", optarg);
			break;
		case O_STATS:
			cli->stats = true;
			break;
		case O_MAX_MEM: {
			uint64_t size;
			if (!parse_size(optarg, &size))
				return usage_error("--max-mem takes a size such as 512M or 4G, not '%s'",
						   optarg);
			cd_trace_set_mem_limit(size);
			break;
		}
		case O_EACH:
			cli->each = true;
			break;
		case O_NCCL:
			cli->nccl_path = optarg;
			break;
		case O_NO_NCCL:
			cli->no_nccl = true;
			break;
		case O_JOBS:
			if (!cd_cli_int_arg(optarg, 1, 256, &v))
				return usage_error("--jobs takes a number from 1 to 256, not '%s'", optarg);
			cli->jobs = (int)v;
			break;
		case O_LATE:
			if (!cd_cli_seconds_arg(optarg, &cli->late_ns))
				return usage_error("--late takes seconds above 0, not '%s'", optarg);
			break;
		case 'h':
			cd_cli_usage(stdout);
			return CD_EXIT_OK;
		case 'V':
			printf("commdebug %s (trace format version 1)\n", CD_VERSION);
			return CD_EXIT_OK;
		case ':':
			return usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	cli->traces = argv + optind;
	cli->ntraces = argc - optind;
	if (cli->ntraces == 0)
		return usage_error("%s: no trace file given", cli->cmd);
	if ((c = expand_dirs(cli)) >= 0)
		return c;
	if (cli->nccl_path && (cli->ntraces > 1 || cli->no_nccl)) {
		free_owned(cli);
		return usage_error("%s", cli->no_nccl ? "--nccl and --no-nccl exclude each other"
						     : "--nccl goes with one trace only");
	}

	/* colour: only for a terminal unless asked, and never with NO_COLOR */
	if (strcmp(color, "always") == 0) {
		cli->color = true;
	} else if (strcmp(color, "auto") == 0) {
		const char *nc = getenv("NO_COLOR");
		cli->color = !cli->out_path && isatty(STDOUT_FILENO) && !(nc && *nc);
	}
	return -1;
}

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
};

static void warn_cb(void *ud, const char *msg)
{
	struct run *run = ud;
	long long line = run->tr ? run->tr->line : 0;
	progress_end(&run->pg);
	cd_cli_print_warning(run->path, line, msg);
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
	/* the table of several regions: a header before each (the replay
	 * defers this call until it knows whether another region follows) */
	if (!run->json_like && !run->cli->select && (run->reported > 1 || r->more_regions))
		region_header(run->out, r->region,
			      r->label == CD_NOID ? "" : cd_intern_str(&r->strs, r->label),
			      r->label != CD_NOID);
	render(run, run->out, r);
	if (run->out->failed)
		return cd_out_flush(run->out, err);
	return CD_OK;
}

void cd_cli_print_error(const char *path, const struct cd_err *err)
{
	if (err->line > 0 && err->column > 0)
		fprintf(stderr, "commdebug: %s:%lld:%lld: %s\n", path, err->line, err->column,
			err->msg);
	else if (err->line > 0)
		fprintf(stderr, "commdebug: %s:%lld: %s\n", path, err->line, err->msg);
	else
		fprintf(stderr, "commdebug: %s: %s\n", path, err->msg);
}

void cd_cli_print_warning(const char *path, long long line, const char *msg)
{
	if (line > 0)
		fprintf(stderr, "commdebug: %s:%lld: warning: %s\n", path, line, msg);
	else
		fprintf(stderr, "commdebug: %s: warning: %s\n", path, msg);
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

static int run_trace(struct cd_cli *cli, const char *path, struct cd_out *out)
{
	struct run run = {.cli = cli, .path = strcmp(path, "-") == 0 ? "<stdin>" : path, .out = out};
	struct cd_replay rp;
	struct cd_err err = {0};
	enum cd_status st;
	int rc = CD_EXIT_OK;
	bool replay_ok = false;

	run.json_like = cli->json;
	run.want_nccl = (cli->kind == CD_R_TABLE || cli->kind == CD_R_JSON) && !cli->no_nccl;
	if (run.want_nccl)
		cd_nside_find(&run.ns, cli, path);
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
	if (sibling && (rc = cd_nside_load(&run.ns, cli, path)) == CD_EXIT_DATA)
		goto out;
	progress_start(&run.pg, path);
	st = cd_trace_replay(path, &rp, &tr, &err);
	progress_end(&run.pg);
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
	if (run.want_nccl &&
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
		fprintf(stderr,
			"commdebug: stats: %s: lines=%lld events=%" PRIu64 " regions=%" PRIu64
			" file_bytes=%" PRIu64 " data_bytes=%" PRIu64 " ops_retained=%" PRIu64
			" op_bytes=%" PRIu64 " modules=%u zstd_frames=%" PRIu64
			" unchecked_frames=%" PRIu64 "\n",
			run.path, tr.last_good, rp.events, rp.regions, tr.file_bytes, tr.data_bytes,
			rp.max_ops_retained, rp.max_op_bytes, rp.mods.count, tr.frames,
			tr.unchecked_frames);
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

/* Open -o's file, unless it is a file the command reads. */
static int open_output(struct cd_cli *cli, FILE **f)
{
	struct cd_err err = {0};
	char *which = NULL;

	switch (cd_paths_open_report(cli->out_path, cli->traces, cli->ntraces, cli->nccl_path, f,
				     &which, &err)) {
	case CD_OUT_OPENED:
		return CD_EXIT_OK;
	case CD_OUT_IS_INPUT:
		fprintf(stderr, "commdebug: %s: the output is the same file as %s%s; refusing to "
				"overwrite it\n", cli->out_path, strcmp(which, "-") ? "the input " : "",
			strcmp(which, "-") ? which : "standard input");
		free(which);
		return CD_EXIT_USAGE;
	case CD_OUT_CANNOT:
		break;
	}
	fprintf(stderr, "commdebug: %s: %s\n", cli->out_path, err.msg);
	return CD_EXIT_DATA;
}

int cd_cli_run(struct cd_cli *cli)
{
	FILE *f = stdout;
	struct cd_out out;
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	if (cli->out_path && (rc = open_output(cli, &f)) != CD_EXIT_OK) {
		free_owned(cli);
		return rc;
	}
	cd_out_init(&out, f);
	bool analyze = cli->kind == CD_R_TABLE || cli->kind == CD_R_JSON;
	bool several = cli->kind == CD_R_RANKS || cli->kind == CD_R_COLLS;
	bool compare = several || (analyze && cli->ntraces > 1);
	/* each trace on its own: counts and sharding always, analyze on request */
	for (int i = 0; (!compare || cli->each) && !several && i < cli->ntraces; i++) {
		if (cli->ntraces > 1 && !cli->json)
			cd_out_printf(&out, "%s==> %s <==\n", i ? "\n" : "", cli->traces[i]);
		int r = run_trace(cli, cli->traces[i], &out);
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
		if (cli->each && !cli->json)
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
	free_owned(cli);
	if (f != stdout && fclose(f) != 0) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", cli->out_path, strerror(errno));
		rc = CD_EXIT_DATA;
	}
	return rc;
}
