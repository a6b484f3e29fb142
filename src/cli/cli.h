/* The command-line front end: exit codes, the options of every command
 * (one table in opts.c, a bit per command), the printers of diagnostics
 * (print.c) and the runners the commands share.
 *
 * Layers inside src/cli (each file only calls the ones below it; checked
 * by tests/cli/check-layers.py):
 *   main.c -> cmd_<name>.c -> drive.c (the per-region replay of analyze,
 *   counts, sharding) and summaries.c (the ranks report over src/postmortem/run.c's
 *   summaries) -> nccl_side.c -> paths.c -> opts.c, print.c. */
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

/* The commands, one bit each: an option's mask says which take it. */
enum {
	CD_C_ANALYZE = 1 << 0,
	CD_C_COUNTS = 1 << 1,
	CD_C_SHARDING = 1 << 2,
	CD_C_RANKS = 1 << 3,
	CD_C_COLLS = 1 << 4,
	CD_C_CHECK = 1 << 5,
	CD_C_REPORT = 1 << 6,
	CD_C_BUCKETS = 1 << 7,
	CD_C_EXPORT = 1 << 8,
	CD_C_SUMMARIZE = 1 << 9,
	/* the commands whose help is commdebug --help */
	CD_C_MAIN = CD_C_ANALYZE | CD_C_COUNTS | CD_C_SHARDING | CD_C_RANKS | CD_C_COLLS,
	CD_C_ALL = (1 << 10) - 1,
};

enum cd_report_kind { CD_R_TABLE, CD_R_JSON, CD_R_COUNTS, CD_R_SHARDING, CD_R_RANKS, CD_R_COLLS };

/* Every option of every command, as parsed (only the command's own are
 * ever set), and the traces it names (directories expanded). */
struct cd_cli {
	const char *cmd;         /* "analyze", ... */
	unsigned bit;            /* its CD_C_* */
	enum cd_report_kind kind;
	int noise;
	bool json;
	bool json_wrap;          /* --json-regions: each document wrapped with its region */
	bool color;
	bool stats;
	bool general_parser;
	bool select;             /* --region */
	int64_t region;
	bool each;               /* analyze --json with several traces: each rank's documents too */
	int jobs;                /* threads reading traces; 0 = one per core */
	int64_t late_ns;         /* --late: straggler threshold; 0 = default */
	const char *nccl_path;   /* --nccl: the NCCL-side trace of the one trace */
	bool no_nccl;            /* --no-nccl: CommDebugMode's output only */
	const char *out_path;    /* -o */
	bool write;              /* check --write */
	const char *junit_path;  /* check --junit */
	const char *expect_path; /* check: the first argument */
	bool has_rank;           /* report --rank */
	int64_t rank;
	uint64_t max_ops;        /* report --max-ops */
	int64_t cap, first_cap;  /* buckets --cap, --first-cap; -1: DDP's */
	bool shard;              /* summarize --shard: K of N (auto: from the launcher) */
	bool shard_auto;
	int64_t shard_k, shard_n;
	char **traces;
	int ntraces;
	char **owned;            /* traces found in directories (cd_cli_free) */
};

/* A command as the option parser sees it. */
struct cd_cmd {
	const char *name;
	unsigned bit;            /* CD_C_* */
	const char *help_head;   /* its --help before "Options:" (NULL: commdebug --help) */
	const char *help_tail;   /* ... and after the options */
	/* Checks of the arguments before directories are expanded (may be
	 * NULL): returns NULL, or a usage error's sentence. */
	const char *(*check)(struct cd_cli *cli);
};

/* Parse argv (after the command word) into cli (zeroed by the caller) by
 * the option table: reject options of other commands, check every value,
 * expand directories.  Prints usage errors and --help.  Returns -1 to go
 * on (free cli with cd_cli_free), or an exit code. */
int cd_cli_parse(struct cd_cli *cli, const struct cd_cmd *cmd, int argc, char **argv);
void cd_cli_free(struct cd_cli *cli);

/* commdebug --help. */
void cd_cli_usage(FILE *f);
/* commdebug --version, on standard output. */
void cd_cli_version(void);
/* "commdebug CMD: MSG" and the --help hint on stderr; CD_EXIT_USAGE. */
int cd_cli_usage_error(const char *cmd, const char *msg);

/* ---- printers (print.c): one line each on stderr ---- */

struct cd_err;
/* "commdebug: PATH[:LINE[:COLUMN]]: message". */
void cd_cli_print_error(const char *path, const struct cd_err *err);
/* "commdebug: PATH[:LINE]: warning: message" (line 0: none). */
void cd_cli_print_warning(const char *path, long long line, const char *msg);
/* A directory entry skipped (cd_paths_expand's note). */
void cd_cli_skip_note(void *ud, const char *path, const char *why);
/* "commdebug: OUT: the output is the same file as the input IN; refusing
 * to overwrite it" ("-": standard input); CD_EXIT_USAGE. */
int cd_cli_refuse_output(const char *out, const char *in);
/* A summary's read error ("LINE:COL: message" or a message). */
void cd_cli_print_summary_error(const char *path, const char *error);
struct cd_trace_run;
struct cd_replay;
/* --stats of one replayed trace. */
void cd_cli_print_stats(const char *path, const struct cd_trace_run *tr,
			const struct cd_replay *rp);

/* ---- the runners ---- */

/* analyze, counts, sharding (and ranks, colls, analyze with several
 * traces through cd_cli_run_ranks): run what cli describes; returns the
 * exit code; frees cli (drive.c). */
int cd_cli_run(struct cd_cli *cli);

/* The output must be none of the inputs: the traces, their NCCL-side
 * traces and --nccl's (-o and, for check, its other outputs).  Returns
 * CD_EXIT_OK or CD_EXIT_USAGE (said). */
int cd_cli_refuse_inputs(const struct cd_cli *cli, const char *out, bool siblings);
/* Open -o's file (cli->out_path, not NULL) into *f, unless it is a file
 * the command reads (a trace, its NCCL-side trace, --nccl's): returns
 * CD_EXIT_OK, or CD_EXIT_USAGE / CD_EXIT_DATA (said). */
int cd_cli_open_output(const struct cd_cli *cli, FILE **f);

struct cd_out;
struct cd_rank_summary;
struct cd_run_opts;
/* The runner's summaries of cli's traces (src/postmortem/run.c), with cli's --jobs
 * and --parser: *n of them (a summary file gives one per rank it holds).
 * *sums: free with cd_run_free.  Returns CD_EXIT_OK or CD_EXIT_DATA
 * (said). */
int cd_cli_summaries(const struct cd_cli *cli, struct cd_rank_summary **sums, int *n,
		     double *read_s, int *threads);
/* cd_cli_summaries, the traces read by with's read_trace and read_ctx
 * (run.h; NULL: cd_rank_summarize). */
int cd_cli_summaries_with(const struct cd_cli *cli, const struct cd_run_opts *with,
			  struct cd_rank_summary **sums, int *n, double *read_s, int *threads);
/* The warnings about summaries whose trace was not whole (unless done is
 * NULL; a cut one's says "the trace is cut; DONE") and the exit code of
 * their reading: ok, 3 cut, 1 unreadable (summarize). */
int cd_cli_read_rc(const struct cd_rank_summary *sums, int n, const char *done);
/* --stats of the summaries' reading (export, report, check). */
void cd_cli_print_run_stats(const struct cd_rank_summary *sums, int n, int threads,
			    double read_s);
/* The cross-rank report (ranks, analyze with several traces) or the
 * collective listing (colls) of the summaries to out; returns the exit
 * code; *visits (may be NULL): the merge's work, for --stats (summaries.c). */
int cd_cli_ranks_report(enum cd_report_kind kind, bool json, int64_t late_ns,
			struct cd_rank_summary *sums, int n, struct cd_out *out, uint64_t *visits);
/* cd_cli_summaries, then cd_cli_ranks_report. */
int cd_cli_run_ranks(const struct cd_cli *cli, struct cd_out *out);

int cmd_analyze(int argc, char **argv);
int cmd_counts(int argc, char **argv);
int cmd_sharding(int argc, char **argv);
int cmd_ranks(int argc, char **argv);
int cmd_colls(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_buckets(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_summarize(int argc, char **argv);

#endif
