/* commdebug: the command table and dispatch. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#ifndef CD_VERSION
#define CD_VERSION "0.0"
#endif

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{"analyze", cmd_analyze, "module tree with collective counts, as CommDebugMode prints it"},
	{"counts", cmd_counts, "total and per-collective counts"},
	{"sharding", cmd_sharding, "parameter and sharding info"},
	{"ranks", cmd_ranks, "post-mortem across ranks: desyncs, stragglers, hangs, the culprit"},
	{"colls", cmd_colls, "every collective of every rank, one per line"},
	{"check", cmd_check, "check traces against expectations in YAML (a CI gate)"},
	{"report", cmd_report, "one self-contained HTML page: post-mortem, counts, module tree"},
	{"buckets", cmd_buckets, "DDP's gradient buckets: observed, DDPOptimizer's plan, compared"},
	{"export", cmd_export, "a job's traces as Chrome trace-event JSON (Perfetto)"},
};

void cd_cli_usage(FILE *f)
{
	fprintf(f,
		"Usage: commdebug COMMAND [OPTIONS] TRACE...\n"
		"Replay commdebug traces the way PyTorch's CommDebugMode sees a run.\n"
		"\n"
		"Commands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\n"
		"Options:\n"
		"  -n, --noise=N        detail level 0-3 (analyze; default 0)\n"
		"  -j, --json           JSON instead of a table\n"
		"      --color=WHEN     colour the table: auto, always or never (default auto)\n"
		"  -r, --region=N       only the region numbered N (default: every region)\n"
		"      --each           analyze with several traces: each rank's own tree too\n"
		"      --jobs=N         threads reading traces (ranks, colls, analyze; default:\n"
		"                       cores)\n"
		"      --late=SECONDS   ranks: a rank reaching a collective this much after\n"
		"                       the others is a straggler (default 5)\n"
		"      --nccl=FILE      analyze: the NCCL-side trace of TRACE (default: the\n"
		"                       TRACE.nccl.zst next to it, if there is one)\n"
		"      --no-nccl        analyze: leave out the NCCL calls\n"
		"  -o, --output=FILE    write to FILE instead of standard output\n"
		"      --parser=KIND    line parser: fast (default) or general (cJSON, slower)\n"
		"      --stats          print reading statistics to standard error\n"
		"      --max-mem=SIZE   stop with an error when memory use passes SIZE\n"
		"                       (bytes, or with K, M, G or T: 512M, 4G)\n"
		"  -h, --help           show this help and exit\n"
		"  -V, --version        show the version and exit\n"
		"\n"
		"TRACE is a .zst or plain JSON Lines trace, - for standard input, or a\n"
		"directory (its *.zst, *.jsonl and *.json files; a NAME.nccl.zst goes with\n"
		"NAME.zst).  With several traces, analyze compares the ranks like the\n"
		"ranks command.\n"
		"Exit status: 0 ok, 1 bad or unreadable trace, 2 usage error,\n"
		"3 trace cut short (what was read was analyzed), 4 ranks disagree,\n"
		"5 an expectation does not hold (check).\n"
		"'commdebug check --help', 'report --help', 'buckets --help' and 'export\n"
		"--help' list the options of check, report, buckets and export.\n"
		"See commdebug(1), commdebug-trace(5) and commdebug-expect(5).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "commdebug: no command given\n"
				"Try 'commdebug --help' for more information.\n");
		return CD_EXIT_USAGE;
	}
	const char *c = argv[1];
	if (strcmp(c, "-h") == 0 || strcmp(c, "--help") == 0 || strcmp(c, "help") == 0) {
		cd_cli_usage(stdout);
		return CD_EXIT_OK;
	}
	if (strcmp(c, "-V") == 0 || strcmp(c, "--version") == 0 || strcmp(c, "version") == 0) {
		printf("commdebug %s (trace format version 1)\n", CD_VERSION);
		return CD_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(c, commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "commdebug: unknown command '%s'\n"
			"Try 'commdebug --help' for more information.\n", c);
	return CD_EXIT_USAGE;
}
