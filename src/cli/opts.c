/* The options of every command: one table, a bit per command in each
 * option's mask.  The table drives parsing (getopt_long's list, the
 * refusal of another command's option) and --help; every value is checked
 * and every usage error worded here, once. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../replay/trace.h"
#include "cli.h"
#include "paths.h"

#ifndef CD_VERSION
#define CD_VERSION "0.0"
#endif

enum {
	O_COLOR = 256, O_PARSER, O_STATS, O_EACH, O_JOBS, O_NCCL, O_NO_NCCL, O_MAX_MEM, O_LATE,
	O_PERFETTO, O_JUNIT, O_RANK, O_MAX_OPS, O_CAP, O_FIRST_CAP, O_JSON_REGIONS, O_SHARD,
};

enum {
	C_MAIN = CD_C_MAIN,
	C_RUNS = CD_C_ANALYZE | CD_C_RANKS | CD_C_COLLS | CD_C_REPORT | CD_C_EXPORT | CD_C_CHECK |
		 CD_C_BUCKETS | CD_C_SUMMARIZE,
	C_NCCL = CD_C_ANALYZE | CD_C_REPORT | CD_C_EXPORT,
	C_LATE = CD_C_ANALYZE | CD_C_RANKS | CD_C_REPORT | CD_C_EXPORT,
	C_STATS = CD_C_ALL,
};

struct opt {
	const char *name;
	int key;            /* its short letter, or O_* */
	const char *arg;    /* the value's name in --help, NULL: none */
	unsigned cmds;      /* the commands that take it */
	const char *help;   /* NULL: not listed (an alias); lines after the first
			     * are indented under it */
};

/* In --help's order. */
static const struct opt opts[] = {
	{"write", 'w', NULL, CD_C_CHECK,
	 "write EXPECT.yaml: what the traces do today\n(- for standard output)"},
	{"perfetto", O_PERFETTO, NULL, CD_C_EXPORT,
	 "Chrome trace-event JSON (the default and only format)"},
	{"noise", 'n', "N", CD_C_ANALYZE, "detail level 0-3 (analyze; default 0)"},
	{"json", 'j', NULL, C_MAIN | CD_C_CHECK | CD_C_BUCKETS, "JSON instead of a table"},
	{"json-regions", O_JSON_REGIONS, NULL, CD_C_ANALYZE | CD_C_COUNTS | CD_C_SHARDING,
	 "JSON, each region's document wrapped as {\"region\",\n\"label\", \"rank\", "
	 "\"trace\", \"dump\"}"},
	{"junit", O_JUNIT, "FILE", CD_C_CHECK, "also write the result as JUnit XML to FILE"},
	{"color", O_COLOR, "WHEN", CD_C_ANALYZE,
	 "colour the table: auto, always or never (default auto)"},
	{"colour", O_COLOR, "WHEN", CD_C_ANALYZE, NULL},
	{"region", 'r', "N", CD_C_ANALYZE | CD_C_COUNTS | CD_C_SHARDING | CD_C_REPORT | CD_C_BUCKETS,
	 "only the region numbered N (default: every region)"},
	{"rank", O_RANK, "N", CD_C_REPORT,
	 "with several traces: the tree of rank N (default: the\nlowest rank)"},
	{"max-ops", O_MAX_OPS, "N", CD_C_REPORT,
	 "at most N operations in each op list of a module\n(default 100; 0: every operation)"},
	{"cap", O_CAP, "BYTES", CD_C_BUCKETS, "plan with this bucket cap (default: DDP's)"},
	{"first-cap", O_FIRST_CAP, "BYTES", CD_C_BUCKETS,
	 "plan with this first-bucket cap (default: DDPOptimizer's)"},
	{"shard", O_SHARD, "K/N", CD_C_SUMMARIZE,
	 "only the traces whose rank is K modulo N; auto: K and N\nfrom the launcher "
	 "(SLURM_PROCID/SLURM_NTASKS,\nOMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE)"},
	{"each", O_EACH, NULL, CD_C_ANALYZE,
	 "analyze --json with several traces: each trace's\ndocuments before the comparison "
	 "(tables: always)"},
	{"jobs", O_JOBS, "N", C_RUNS,
	 "threads reading traces (ranks, colls, analyze; default:\ncores)"},
	{"late", O_LATE, "SECONDS", C_LATE,
	 "ranks: a rank reaching a collective this much after\nthe others is a straggler "
	 "(default 5)"},
	{"nccl", O_NCCL, "FILE", C_NCCL,
	 "analyze: the NCCL-side trace of TRACE (default: the\nTRACE.nccl.zst next to it, if "
	 "there is one)"},
	{"no-nccl", O_NO_NCCL, NULL, C_NCCL | CD_C_BUCKETS, "analyze: leave out the NCCL calls"},
	{"output", 'o', "FILE", CD_C_ALL, "write to FILE instead of standard output"},
	{"parser", O_PARSER, "KIND", CD_C_ALL,
	 "line parser: fast (default) or general (cJSON, slower)"},
	{"stats", O_STATS, NULL, C_STATS, "print reading statistics to standard error"},
	{"max-mem", O_MAX_MEM, "SIZE", CD_C_ALL,
	 "stop with an error when memory use passes SIZE\n(bytes, or with K, M, G or T: 512M, 4G)"},
	{"help", 'h', NULL, CD_C_ALL, "show this help and exit"},
	{"version", 'V', NULL, C_MAIN, "show the version and exit"},
};
#define NOPTS (sizeof opts / sizeof opts[0])

/* An option's help where a command says it in its own words. */
static const struct {
	int key;
	unsigned cmds;
	const char *help;
} help_for[] = {
	{'j', CD_C_CHECK | CD_C_BUCKETS, "the result as JSON"},
	{'r', CD_C_REPORT, "the tree and counts of region N (default: the last\nregion that "
			   "ended with region_exit)"},
	{'r', CD_C_BUCKETS, "observed all-reduces of region N only"},
	{O_JOBS, CD_C_REPORT | CD_C_CHECK | CD_C_BUCKETS | CD_C_SUMMARIZE,
	 "threads reading traces (default: cores)"},
	{O_JOBS, CD_C_EXPORT, "threads reading traces, then writing ranks\n(default: cores)"},
	{O_LATE, CD_C_REPORT | CD_C_EXPORT,
	 "a rank reaching a collective this much after the\nothers is a straggler (default 5)"},
	{O_NCCL, CD_C_REPORT, "the NCCL-side trace of TRACE (default: the\nTRACE.nccl.zst next "
			      "to it, if there is one)"},
	{O_NCCL, CD_C_EXPORT, "the NCCL-side trace of TRACE (one trace only; default:\nthe "
			      "TRACE.nccl.zst next to each trace, if there is one)"},
	{O_NO_NCCL, CD_C_REPORT | CD_C_BUCKETS, "leave out the NCCL calls"},
	{O_NO_NCCL, CD_C_EXPORT, "leave out the NCCL-side traces"},
	{'o', CD_C_REPORT, "the page to write (- for standard output); required"},
	{'o', CD_C_EXPORT, "write to FILE (- for standard output); required"},
	{'o', CD_C_CHECK, "write the result to FILE instead of standard output"},
	{'o', CD_C_SUMMARIZE, "the summary file to write (- for standard output);\nrequired"},
	{O_PARSER, CD_C_CHECK | CD_C_REPORT | CD_C_BUCKETS | CD_C_EXPORT | CD_C_SUMMARIZE,
	 "line parser: fast (default) or general"},
};

static const char *help_of(const struct opt *o, unsigned bit)
{
	for (size_t i = 0; i < sizeof help_for / sizeof help_for[0]; i++)
		if (help_for[i].key == o->key && (help_for[i].cmds & bit))
			return help_for[i].help;
	return o->help;
}

/* "  -o, --output=FILE    write ..." for every option of the commands in
 * mask (bit: whose words). */
static void print_options(FILE *f, unsigned mask, unsigned bit)
{
	fprintf(f, "Options:\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *h = help_of(o, bit), *nl;
		char lead[64];
		if (!(o->cmds & mask) || !o->help)
			continue;
		if (o->key < 256)
			snprintf(lead, sizeof lead, "  -%c, --%s%s%s", o->key, o->name,
				 o->arg ? "=" : "", o->arg ? o->arg : "");
		else
			snprintf(lead, sizeof lead, "      --%s%s%s", o->name, o->arg ? "=" : "",
				 o->arg ? o->arg : "");
		fprintf(f, "%-21s  ", lead);
		for (; (nl = strchr(h, '\n')); h = nl + 1)
			fprintf(f, "%.*s\n%23s", (int)(nl - h), h, "");
		fprintf(f, "%s\n", h);
	}
}

static const struct {
	const char *name, *summary;
} command_list[] = {
	{"analyze", "module tree with collective counts, as CommDebugMode prints it"},
	{"counts", "total and per-collective counts"},
	{"sharding", "parameter and sharding info"},
	{"ranks", "post-mortem across ranks: desyncs, stragglers, hangs, the culprit"},
	{"colls", "every collective of every rank, one per line"},
	{"check", "check traces against expectations in YAML (a CI gate)"},
	{"report", "one self-contained HTML page: post-mortem, counts, module tree"},
	{"buckets", "DDP's gradient buckets: observed, DDPOptimizer's plan, compared"},
	{"export", "a job's traces as Chrome trace-event JSON (Perfetto)"},
	{"summarize", "a share of a job's traces into one small file for ranks"},
};

void cd_cli_usage(FILE *f)
{
	fprintf(f,
		"Usage: commdebug COMMAND [OPTIONS] TRACE...\n"
		"Replay commdebug traces the way PyTorch's CommDebugMode sees a run.\n"
		"\n"
		"Commands:\n");
	for (size_t i = 0; i < sizeof command_list / sizeof command_list[0]; i++)
		fprintf(f, "  %-10s %s\n", command_list[i].name, command_list[i].summary);
	fprintf(f, "\n");
	print_options(f, C_MAIN, C_MAIN);
	fprintf(f,
		"\n"
		"TRACE is a .zst or plain JSON Lines trace, - for standard input, or a\n"
		"directory (its *.zst, *.jsonl and *.json files; a NAME.nccl.zst goes with\n"
		"NAME.zst).  With several traces, analyze prints each trace's tables,\n"
		"headed by its rank, then compares the ranks like the ranks command.\n"
		"Exit status: 0 ok, 1 bad or unreadable trace, 2 usage error,\n"
		"3 trace cut short (what was read was analyzed), 4 ranks disagree,\n"
		"5 an expectation does not hold (check).\n"
		"'commdebug check --help', 'report --help', 'buckets --help', 'export\n"
		"--help' and 'summarize --help' list the options of those commands.\n"
		"See commdebug(1), commdebug-trace(5) and commdebug-expect(5).\n");
}

static void usage_of(FILE *f, const struct cd_cmd *cmd)
{
	if (!cmd->help_head) {
		cd_cli_usage(f);
		return;
	}
	fputs(cmd->help_head, f);
	print_options(f, cmd->bit, cmd->bit);
	fputs(cmd->help_tail, f);
}

int cd_cli_usage_error(const char *cmd, const char *msg)
{
	fprintf(stderr, "commdebug %s: %s\n"
			"Try 'commdebug %s --help' for more information.\n", cmd, msg, cmd);
	return CD_EXIT_USAGE;
}

/* "MSG, not 'ARG'" as a usage error. */
static int bad_value(const char *cmd, const char *msg, const char *arg)
{
	char buf[768];
	snprintf(buf, sizeof buf, "%s, not '%s'", msg, arg);
	return cd_cli_usage_error(cmd, buf);
}

/* A whole decimal integer within lo..hi. */
static bool int_arg(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9') {
		if (!(*s == '-' && lo < 0))
			return false;
	}
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* --late: seconds, at least a nanosecond and at most 10^6 s, as whole
 * nanoseconds (rounded to the nearest; a value that would round to 0 is
 * refused, never taken for the default). */
static bool seconds_arg(const char *s, int64_t *ns)
{
	char *end;
	errno = 0;
	double sec = strtod(s, &end);
	if (errno || end == s || *end || !(sec >= 1e-9) || sec > 1e6)
		return false;
	*ns = (int64_t)(sec * 1e9 + 0.5);
	return *ns > 0;
}

/* A size: digits and an optional K, M, G or T (powers of 1024), as in
 * 512M, 4G or 4GiB; plain digits are bytes. */
static bool size_arg(const char *s, uint64_t *out)
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

/* --shard: K/N with 0 <= K < N <= 2^24, or auto. */
static bool shard_arg(const char *s, struct cd_cli *cli)
{
	char k[32];
	const char *slash = strchr(s, '/');
	if (strcmp(s, "auto") == 0) {
		cli->shard_auto = true;
		return true;
	}
	cli->shard_auto = false;   /* the last --shard counts */
	if (!slash || (size_t)(slash - s) >= sizeof k)
		return false;
	memcpy(k, s, (size_t)(slash - s));
	k[slash - s] = '\0';
	return int_arg(k, 0, (1 << 24) - 1, &cli->shard_k) &&
	       int_arg(slash + 1, 1, 1 << 24, &cli->shard_n) && cli->shard_k < cli->shard_n;
}

/* One option's value into cli.  Returns -1 to go on, or an exit code. */
static int take(struct cd_cli *cli, const struct cd_cmd *cmd, int c, const char *arg,
		const char **color)
{
	const char *n = cmd->name;
	int64_t v;
	uint64_t size;

	switch (c) {
	case 'w': cli->write = true; break;
	case O_PERFETTO: break;
	case 'j': cli->json = true; break;
	case O_JSON_REGIONS: cli->json = cli->json_wrap = true; break;
	case O_EACH: cli->each = true; break;
	case O_NO_NCCL: cli->no_nccl = true; break;
	case O_STATS: cli->stats = true; break;
	case 'n':
		if (!int_arg(arg, 0, 3, &v))
			return bad_value(n, "--noise takes 0, 1, 2 or 3", arg);
		cli->noise = (int)v;
		break;
	case O_COLOR:
		if (strcmp(arg, "auto") && strcmp(arg, "always") && strcmp(arg, "never"))
			return bad_value(n, "--color takes auto, always or never", arg);
		*color = arg;
		break;
	case 'r':
		if (!int_arg(arg, 0, INT32_MAX, &v))
			return bad_value(n, "--region takes a region number", arg);
		cli->select = true;
		cli->region = v;
		break;
	case O_RANK:
		if (!int_arg(arg, 0, INT32_MAX, &v))
			return bad_value(n, "--rank takes a rank number", arg);
		cli->has_rank = true;
		cli->rank = v;
		break;
	case O_MAX_OPS:
		if (!int_arg(arg, 0, INT32_MAX, &v))
			return bad_value(n, "--max-ops takes a number (0: every operation)", arg);
		cli->max_ops = (uint64_t)v;
		break;
	case O_CAP:
		if (!int_arg(arg, 1, 9007199254740991LL, &cli->cap))
			return bad_value(n, "--cap takes a number of bytes above 0", arg);
		break;
	case O_FIRST_CAP:
		if (!int_arg(arg, 0, 9007199254740991LL, &cli->first_cap))
			return bad_value(n, "--first-cap takes a number of bytes (0 or more)", arg);
		break;
	case O_SHARD:
		if (!shard_arg(arg, cli))
			return bad_value(n, "--shard takes K/N (0 <= K < N) or auto", arg);
		cli->shard = true;
		break;
	case O_JOBS:
		if (!int_arg(arg, 1, 256, &v))
			return bad_value(n, "--jobs takes a number from 1 to 256", arg);
		cli->jobs = (int)v;
		break;
	case O_LATE:
		if (!seconds_arg(arg, &cli->late_ns))
			return bad_value(n, "--late takes seconds from 1e-9 (a nanosecond) to 1e6", arg);
		break;
	case O_PARSER:
		if (strcmp(arg, "fast") && strcmp(arg, "general"))
			return bad_value(n, "--parser takes fast or general", arg);
		cli->general_parser = strcmp(arg, "general") == 0;
		break;
	case O_MAX_MEM:
		if (!size_arg(arg, &size))
			return bad_value(n, "--max-mem takes a size such as 512M or 4G", arg);
		cd_trace_set_mem_limit(size);
		break;
	case O_NCCL:
	case 'o':
	case O_JUNIT:
		if (!*arg) {
			char buf[64];
			snprintf(buf, sizeof buf, "--%s needs a file name",
				 c == 'o' ? "output" : c == O_NCCL ? "nccl" : "junit");
			return cd_cli_usage_error(n, buf);
		}
		*(c == 'o' ? &cli->out_path : c == O_NCCL ? &cli->nccl_path : &cli->junit_path) = arg;
		break;
	default:
		return -1;
	}
	return -1;
}

/* After the options: the command's own checks, the shared ones, the
 * directories.  Returns -1 to go on, or an exit code. */
static int finish(struct cd_cli *cli, const struct cd_cmd *cmd, const char *color)
{
	struct cd_paths p;
	struct cd_err err = {0};
	const char *bad = NULL, *msg;

	if (cmd->check && (msg = cmd->check(cli)))
		return cd_cli_usage_error(cmd->name, msg);
	if (cli->ntraces == 0)
		return cd_cli_usage_error(cmd->name, "no trace given");
	if (cli->nccl_path && cli->no_nccl)
		return cd_cli_usage_error(cmd->name, "--nccl and --no-nccl exclude each other");
	if (!cd_paths_expand(cli->traces, cli->ntraces, &p, cd_cli_skip_note, NULL, &bad, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", bad, err.msg);
		return CD_EXIT_DATA;
	}
	cli->owned = p.v;
	cli->traces = p.v;
	cli->ntraces = p.n;
	if (cli->nccl_path && cli->ntraces > 1) {
		cd_cli_free(cli);
		return cd_cli_usage_error(cmd->name, "--nccl goes with one trace only");
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

int cd_cli_parse(struct cd_cli *cli, const struct cd_cmd *cmd, int argc, char **argv)
{
	struct option lo[NOPTS + 1];
	char shorts[2 * NOPTS + 2], *sp = shorts;
	const char *color = "auto";
	char buf[160];
	int c, rc;

	cli->cmd = cmd->name;
	cli->bit = cmd->bit;
	cli->max_ops = 100;
	cli->cap = cli->first_cap = -1;
	*sp++ = ':';
	for (size_t i = 0; i < NOPTS; i++) {
		lo[i] = (struct option){opts[i].name, opts[i].arg ? required_argument : no_argument,
					NULL, opts[i].key};
		/* every command's short options: another's is refused by name */
		if (opts[i].key < 256 && opts[i].help) {
			*sp++ = (char)opts[i].key;
			if (opts[i].arg)
				*sp++ = ':';
		}
	}
	*sp = '\0';
	memset(&lo[NOPTS], 0, sizeof lo[NOPTS]);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		/* another command's option */
		for (size_t i = 0; i < NOPTS; i++)
			if (opts[i].key == c && !(opts[i].cmds & cmd->bit)) {
				snprintf(buf, sizeof buf, "option --%s does not apply to '%s'",
					 opts[i].name, cmd->name);
				return cd_cli_usage_error(cmd->name, buf);
			}
		if (c == 'h') {
			usage_of(stdout, cmd);
			return CD_EXIT_OK;
		} else if (c == 'V') {
			cd_cli_version();
			return CD_EXIT_OK;
		} else if (c == ':') {
			snprintf(buf, sizeof buf, "option '%s' needs a value", argv[optind - 1]);
			return cd_cli_usage_error(cmd->name, buf);
		} else if (c == '?') {
			snprintf(buf, sizeof buf, "unknown option '%s'", argv[optind - 1]);
			return cd_cli_usage_error(cmd->name, buf);
		}
		if ((rc = take(cli, cmd, c, optarg, &color)) >= 0)
			return rc;
	}
	cli->traces = argv + optind;
	cli->ntraces = argc - optind;
	return finish(cli, cmd, color);
}

void cd_cli_free(struct cd_cli *cli)
{
	struct cd_paths p = {.v = cli->owned, .n = cli->owned ? cli->ntraces : 0};
	cd_paths_free(&p);
	cli->owned = NULL;
}

int cd_cli_refuse_inputs(const struct cd_cli *cli, const char *out, bool siblings)
{
	const char *in;
	int rc = CD_EXIT_OK;

	if (!out || strcmp(out, "-") == 0)
		return CD_EXIT_OK;
	if ((in = cd_paths_is_input(out, cli->traces, cli->ntraces)) ||
	    (siblings && cli->nccl_path &&
	     (in = cd_paths_is_input(out, (char *const *)&cli->nccl_path, 1))))
		return cd_cli_refuse_output(out, in);
	for (int i = 0; siblings && rc == CD_EXIT_OK && i < cli->ntraces; i++) {
		char *sib = cd_paths_nccl_name(cli->traces[i]);
		if (sib && cd_paths_is_input(out, &sib, 1))
			rc = cd_cli_refuse_output(out, sib);
		free(sib);
	}
	return rc;
}

int cd_cli_open_output(const struct cd_cli *cli, FILE **f)
{
	struct cd_err err = {0};
	char *which = NULL;

	switch (cd_paths_open_report(cli->out_path, cli->traces, cli->ntraces, cli->nccl_path, f,
				     &which, &err)) {
	case CD_OUT_OPENED:
		return CD_EXIT_OK;
	case CD_OUT_IS_INPUT:
		cd_cli_refuse_output(cli->out_path, which);
		free(which);
		return CD_EXIT_USAGE;
	case CD_OUT_CANNOT:
		break;
	}
	fprintf(stderr, "commdebug: %s: %s\n", cli->out_path, err.msg);
	return CD_EXIT_DATA;
}

void cd_cli_version(void)
{
	printf("commdebug %s (trace format version 1)\n", CD_VERSION);
}
