/* commdebug export --perfetto: a job's traces as Chrome trace-event JSON
 * for Perfetto and chrome://tracing (the layout is in export.h).
 *
 * Two passes: every trace is summarized (in parallel, as `ranks` does) and
 * the post-mortem's findings are computed; then each trace is read again,
 * in rank order, and written as it is read.  The output goes to a
 * temporary file next to FILE, renamed over FILE when all went well. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../export.h"
#include "../findings.h"
#include "../ranks.h"
#include "paths.h"

struct export_opts {
	const char *out_path;
	const char *nccl_path;   /* --nccl: the NCCL-side trace of the one trace */
	bool general_parser, no_nccl;
	int jobs;
	int64_t late_ns;
	char **traces;
	int ntraces;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: commdebug export --perfetto -o FILE [OPTIONS] TRACE...|DIR\n"
		"Write a job's traces as one Chrome trace-event JSON file for Perfetto\n"
		"(ui.perfetto.dev) and chrome://tracing: a process per rank with its\n"
		"regions, module spans (forward, backward, recompute), collectives, NCCL\n"
		"calls with their GPU time, and the post-mortem's findings.\n"
		"\n"
		"Options:\n"
		"      --perfetto       Chrome trace-event JSON (the default and only format)\n"
		"  -o, --output=FILE    write to FILE (- for standard output); required\n"
		"      --late=SECONDS   a rank reaching a collective this much after the\n"
		"                       others is a straggler (default 5)\n"
		"      --nccl=FILE      the NCCL-side trace of TRACE (one trace only; default:\n"
		"                       the TRACE.nccl.zst next to each trace, if there is one)\n"
		"      --no-nccl        leave out the NCCL-side traces\n"
		"      --jobs=N         threads reading traces in the first pass (default:\n"
		"                       cores)\n"
		"      --parser=KIND    line parser: fast (default) or general\n"
		"  -h, --help           show this help and exit\n"
		"\n"
		"Events without a time (\"t\") cannot be placed: they are left out and\n"
		"counted in otherData.  Exit status: 0 written, 1 bad or unreadable trace\n"
		"(FILE is not written), 2 usage error, 3 a trace was cut short (what was\n"
		"read was written).\n");
}

static int usage_error(const char *msg, const char *arg)
{
	return cd_cli_usage_error("export", msg, arg);
}

static int parse(struct export_opts *o, int argc, char **argv)
{
	enum { OPT_PERFETTO = 256, OPT_LATE, OPT_NCCL, OPT_NO_NCCL, OPT_JOBS, OPT_PARSER };
	static const struct option longs[] = {
		{"perfetto", no_argument, NULL, OPT_PERFETTO},
		{"output", required_argument, NULL, 'o'},
		{"late", required_argument, NULL, OPT_LATE},
		{"nccl", required_argument, NULL, OPT_NCCL},
		{"no-nccl", no_argument, NULL, OPT_NO_NCCL},
		{"jobs", required_argument, NULL, OPT_JOBS},
		{"parser", required_argument, NULL, OPT_PARSER},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":o:h", longs, NULL)) != -1) {
		switch (c) {
		case OPT_PERFETTO:
			break;
		case 'o':
			if (!*optarg)
				return usage_error("empty file name for --output", NULL);
			o->out_path = optarg;
			break;
		case OPT_LATE:
			if (!cd_cli_seconds_arg(optarg, &o->late_ns))
				return usage_error("--late takes seconds above 0", optarg);
			break;
		case OPT_NCCL:
			if (!*optarg)
				return usage_error("empty file name for --nccl", NULL);
			o->nccl_path = optarg;
			break;
		case OPT_NO_NCCL:
			o->no_nccl = true;
			break;
		case OPT_JOBS: {
			int64_t v;
			if (!cd_cli_int_arg(optarg, 1, 256, &v))
				return usage_error("--jobs takes a number from 1 to 256", optarg);
			o->jobs = (int)v;
			break;
		}
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
	if (!o->out_path)
		return usage_error("no output file given (-o FILE)", NULL);
	if (argc - optind < 1)
		return usage_error("no trace given", NULL);
	if (o->nccl_path && o->no_nccl)
		return usage_error("--nccl and --no-nccl together", NULL);
	if (o->nccl_path && argc - optind != 1)
		return usage_error("--nccl names the NCCL-side trace of one trace; give one", NULL);
	o->traces = argv + optind;
	o->ntraces = argc - optind;
	for (int i = 0; i < o->ntraces; i++)
		if (strcmp(o->traces[i], "-") == 0)
			return usage_error("standard input cannot be exported: export reads each "
					   "trace twice", NULL);
	return -1;
}

/* ---- pass one: the summaries, in parallel ---- */

struct pool {
	const struct export_opts *o;
	struct cd_rank_summary *sums;
	atomic_int next;
};

static void *summarize_worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->o->ntraces)
			return NULL;
		cd_rank_summarize(p->o->traces[i], p->o->general_parser, &p->sums[i]);
	}
}

static void summarize_all(const struct export_opts *o, struct cd_rank_summary *sums)
{
	struct pool p = {.o = o, .sums = sums};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = o->jobs ? o->jobs : (int)(cores > 0 ? cores : 1), started = 0;
	pthread_t th[256];

	if (jobs > o->ntraces)
		jobs = o->ntraces;
	atomic_init(&p.next, 0);
	for (int i = 1; i < jobs && i < 256; i++)
		if (pthread_create(&th[started], NULL, summarize_worker, &p) == 0)
			started++;
	summarize_worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* What pass one found wrong with a trace: an error (returns false) or a
 * warning (printed, returns true). */
static bool check_summary(const struct cd_rank_summary *s)
{
	if (s->end == CD_END_EMPTY) {
		cd_cli_print_warning(s->path, 0, s->cut_first
			? "the trace is cut before its first line is complete; exported as an "
			  "empty rank"
			: "empty trace: no event; exported as an empty rank");
		return true;
	}
	if (s->error) {  /* "LINE:COL: message" or a message without position */
		fprintf(stderr, "commdebug: %s:%s%s\n", s->path,
			s->error[0] >= '0' && s->error[0] <= '9' ? "" : " ", s->error);
		return false;
	}
	if (s->cut)
		cd_cli_print_warning(s->path, 0, "the trace is cut; exported what it holds");
	else if (!s->has_rank)
		cd_cli_print_warning(s->path, 0, "its meta event has no rank; exported as a "
						 "process of its own");
	return true;
}

/* ---- pass two ---- */

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool in_list(struct cd_rank_summary *const *v, int n, const struct cd_rank_summary *s)
{
	for (int i = 0; i < n; i++)
		if (v[i] == s)
			return true;
	return false;
}

/* The process id of trace i (pm->all[i]): its rank, when it is the trace
 * compared for that rank or an empty trace named after a rank no other
 * trace has; else CD_EXPORT_PID_OTHER + i. */
static int64_t pid_of(const struct cd_pm *pm, const struct cd_rank_summary *s, int i)
{
	if (in_list(pm->r, pm->n, s))
		return s->rank;
	if (s->end == CD_END_EMPTY && s->rank_from_name) {
		for (int k = 0; k < pm->n; k++)
			if (pm->r[k]->rank == s->rank)
				return CD_EXPORT_PID_OTHER + i;
		for (int k = 0; k < i; k++)
			if (pm->all[k]->end == CD_END_EMPTY && pm->all[k]->rank_from_name &&
			    pm->all[k]->rank == s->rank)
				return CD_EXPORT_PID_OTHER + i;
		return s->rank;
	}
	return CD_EXPORT_PID_OTHER + i;
}

/* Write every trace to f; returns the exit code. */
static int write_all(const struct export_opts *o, const struct cd_pm *pm, FILE *f,
		     const char *out_name)
{
	struct cd_out out;
	struct cd_export x;
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	cd_out_init(&out, f);
	cd_export_begin(&x, &out, pm, o->general_parser, o->no_nccl);
	for (int i = 0; i < pm->nall; i++) {
		const struct cd_rank_summary *s = pm->all[i];
		struct cd_export_rank_res res;
		int64_t pid = pid_of(pm, s, i);
		char *sib = o->no_nccl ? NULL : o->nccl_path ? strdup(o->nccl_path)
					  : cd_paths_nccl_name(s->path);

		if (sib && !o->nccl_path && !is_file(sib)) {
			free(sib);
			sib = NULL;
		}
		if (cd_export_rank(&x, s, pid, sib, &res, &err)) {
			cd_cli_print_error(res.nccl_failed ? sib : s->path, &err);
			rc = CD_EXIT_DATA;
			free(sib);
			break;
		}
		if (res.nccl_refused)
			cd_cli_print_warning(sib, 0, "its meta names another rank; not joined");
		if (res.nccl_cut)
			cd_cli_print_warning(sib, 0, "the trace is cut; exported what it holds");
		if ((res.cut || res.nccl_cut) && rc == CD_EXIT_OK)
			rc = CD_EXIT_CUT;
		free(sib);
	}
	cd_export_end(&x);
	if (cd_out_flush(&out, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", out_name, err.msg);
		rc = CD_EXIT_DATA;
	}
	cd_out_free(&out);
	if (rc != CD_EXIT_DATA && x.st.untimed)
		fprintf(stderr, "commdebug: warning: %" PRIu64 " event%s without a time (\"t\") "
				"left out (counted in otherData)\n", x.st.untimed,
			x.st.untimed == 1 ? "" : "s");
	return rc;
}

static void skip_note(void *ud, const char *path, const char *why)
{
	(void)ud;
	cd_cli_print_warning(path, 0, why);
}

/* The output may be none of the traces nor their NCCL-side traces. */
static int refuse_inputs(const struct export_opts *o)
{
	if (strcmp(o->out_path, "-") == 0)
		return CD_EXIT_OK;
	const char *in = cd_paths_is_input(o->out_path, o->traces, o->ntraces);
	if (!in && o->nccl_path)
		in = cd_paths_is_input(o->out_path, (char *const *)&o->nccl_path, 1);
	for (int i = 0; !in && i < o->ntraces; i++) {
		char *sib = cd_paths_nccl_name(o->traces[i]);
		if (sib && cd_paths_is_input(o->out_path, &sib, 1)) {
			fprintf(stderr, "commdebug: %s: the output is the same file as the input %s; "
					"refusing to overwrite it\n", o->out_path, sib);
			free(sib);
			return CD_EXIT_USAGE;
		}
		free(sib);
	}
	if (in) {
		fprintf(stderr, "commdebug: %s: the output is the same file as the input %s; "
				"refusing to overwrite it\n", o->out_path, in);
		return CD_EXIT_USAGE;
	}
	return CD_EXIT_OK;
}

int cmd_export(int argc, char **argv)
{
	struct export_opts o = {0};
	struct cd_paths paths = {0};
	struct cd_rank_summary *sums = NULL, **ptrs = NULL;
	struct cd_pm pm;
	struct cd_err err = {0};
	bool have_pm = false;
	const char *bad = NULL;
	int rc = parse(&o, argc, argv);

	if (rc >= 0)
		return rc;
	if (!cd_paths_expand(o.traces, o.ntraces, &paths, skip_note, NULL, &bad, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", bad, err.msg);
		rc = CD_EXIT_DATA;
		goto out;
	}
	o.traces = paths.v;
	o.ntraces = paths.n;
	if ((rc = refuse_inputs(&o)) != CD_EXIT_OK)
		goto out;
	sums = calloc((size_t)o.ntraces, sizeof *sums);
	ptrs = calloc((size_t)o.ntraces, sizeof *ptrs);
	if (!sums || !ptrs)
		goto nomem;
	summarize_all(&o, sums);
	rc = CD_EXIT_OK;
	for (int i = 0; i < o.ntraces; i++) {
		ptrs[i] = &sums[i];
		if (!check_summary(&sums[i]))
			rc = CD_EXIT_DATA;
	}
	if (rc != CD_EXIT_OK)
		goto out;
	if (!cd_pm_build(&pm, ptrs, o.ntraces, o.late_ns)) {
		cd_pm_free(&pm);
		goto nomem;
	}
	have_pm = true;
	if (strcmp(o.out_path, "-") == 0) {
		rc = write_all(&o, &pm, stdout, "standard output");
		goto out;
	}
	struct cd_tmpfile t;
	if (!cd_paths_tmp_open(&t, o.out_path)) {
		rc = CD_EXIT_DATA;
		goto out;
	}
	rc = write_all(&o, &pm, t.f, t.tmp);
	if (!cd_paths_tmp_commit(&t, rc != CD_EXIT_DATA))
		rc = CD_EXIT_DATA;
	goto out;
nomem:
	fprintf(stderr, "commdebug: out of memory\n");
	rc = CD_EXIT_DATA;
out:
	if (have_pm)
		cd_pm_free(&pm);
	for (int i = 0; sums && i < o.ntraces; i++)
		cd_rank_summary_free(&sums[i]);
	free(sums);
	free(ptrs);
	cd_paths_free(&paths);
	return rc;
}
