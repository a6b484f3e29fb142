/* The command-line front end: shared option handling and the trace driver
 * that every analysis command uses (read -> parse -> replay -> report). */
#ifndef CD_CLI_H
#define CD_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes (documented in commdebug(1)). */
enum {
	CD_EXIT_OK = 0,
	CD_EXIT_DATA = 1,   /* bad trace, I/O error, nothing to analyze */
	CD_EXIT_USAGE = 2,
	CD_EXIT_CUT = 3,    /* the trace was cut; what was read was analyzed */
	CD_EXIT_DIFFER = 4, /* ranks disagree (ranks, analyze with several traces) */
	CD_EXIT_EXPECT = 5, /* check: an expectation does not hold */
};

enum cd_report_kind { CD_R_TABLE, CD_R_JSON, CD_R_COUNTS, CD_R_SHARDING, CD_R_RANKS, CD_R_COLLS };

struct cd_cli {
	const char *prog;        /* "commdebug" */
	const char *cmd;         /* "analyze", ... */
	enum cd_report_kind kind;
	int noise;
	bool json;
	bool color;
	bool stats;
	bool general_parser;
	bool select;
	int64_t region;
	bool each;               /* analyze with several traces: each rank's tree too */
	int jobs;                /* threads reading traces (ranks); 0 = one per core */
	int64_t late_ns;         /* --late: straggler threshold (ranks); 0 = default */
	const char *nccl_path;   /* --nccl: the NCCL-side trace of the one trace */
	bool no_nccl;            /* --no-nccl: CommDebugMode's output only */
	const char *out_path;
	char **traces;
	int ntraces;
	char **owned;            /* traces found in directories (freed by cd_cli_run) */
};

/* Parse argv (after the command word) into cli; prints usage errors.
 * Returns -1 to go on, or an exit code. */
int cd_cli_parse(struct cd_cli *cli, int argc, char **argv);

/* Run the analysis described by cli; returns the exit code. */
int cd_cli_run(struct cd_cli *cli);

void cd_cli_usage(FILE *f);

/* One error line on stderr: "commdebug: PATH[:LINE[:COLUMN]]: message". */
struct cd_err;
void cd_cli_print_error(const char *path, const struct cd_err *err);
/* "commdebug: PATH[:LINE]: warning: message" (line 0: none). */
void cd_cli_print_warning(const char *path, long long line, const char *msg);

struct cd_out;
/* Summarize every trace of cli in parallel and print the cross-rank report
 * (ranks, analyze with several traces) or the collective listing (colls)
 * to out; returns the exit code (cmd_ranks.c). */
int cd_cli_run_ranks(struct cd_cli *cli, struct cd_out *out);

/* Shared by the commands' own option parsers (opts.c). */
/* "commdebug CMD: MSG[: ARG]" and the --help hint on stderr; CD_EXIT_USAGE. */
int cd_cli_usage_error(const char *cmd, const char *msg, const char *arg);
/* A whole decimal integer within lo..hi. */
bool cd_cli_int_arg(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* --late: seconds above 0 (at most 10^6), as nanoseconds. */
bool cd_cli_seconds_arg(const char *s, int64_t *ns);
/* --parser: fast or general. */
bool cd_cli_parser_arg(const char *s, bool *general);

int cmd_analyze(int argc, char **argv);
int cmd_counts(int argc, char **argv);
int cmd_sharding(int argc, char **argv);
int cmd_ranks(int argc, char **argv);
int cmd_colls(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_buckets(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
