/* commdebug buckets: DDP's gradient buckets, observed in the traces, planned
 * as DDPOptimizer plans them, and compared (buckets.h does the work). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../buckets.h"
#include "../out.h"
#include "nccl_side.h"
#include "paths.h"

struct bk_opts {
	bool json, general_parser, no_nccl;
	bool select;
	int64_t region;
	int64_t cap, first_cap;   /* -1: DDP's */
	const char *out_path;
	char **traces;
	int ntraces;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: commdebug buckets [OPTIONS] TRACE...\n"
		"DDP's gradient buckets: the bucket all-reduces each step, DDPOptimizer's\n"
		"plan for the recorded model, and where the two differ.\n"
		"\n"
		"Options:\n"
		"  -r, --region=N       observed all-reduces of region N only\n"
		"      --cap=BYTES      plan with this bucket cap (default: DDP's)\n"
		"      --first-cap=BYTES  plan with this first-bucket cap (default: DDPOptimizer's)\n"
		"  -j, --json           the result as JSON\n"
		"  -o, --output=FILE    write to FILE instead of standard output\n"
		"      --no-nccl        leave out the NCCL calls\n"
		"      --parser=KIND    line parser: fast (default) or general\n"
		"  -h, --help           show this help and exit\n"
		"\n"
		"TRACE is a trace file, - for standard input, or a directory of traces\n"
		"(one per rank).  Exit status: 0 ok, 1 bad trace or no ddp event in it,\n"
		"2 usage error, 3 a trace was cut short, 4 the ranks' buckets differ.\n");
}

static int usage_error(const char *msg, const char *arg)
{
	return cd_cli_usage_error("buckets", msg, arg);
}

/* A byte count: digits only, within min .. 2^53-1. */
static bool parse_bytes(const char *s, int64_t min, int64_t *v)
{
	char *end;
	if (!*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (errno || *end || x < min || x > 9007199254740991LL)
		return false;
	*v = x;
	return true;
}

static int parse(struct bk_opts *o, int argc, char **argv)
{
	enum { OPT_CAP = 256, OPT_FIRST_CAP, OPT_PARSER, OPT_NO_NCCL };
	static const struct option longs[] = {
		{"region", required_argument, NULL, 'r'},
		{"cap", required_argument, NULL, OPT_CAP},
		{"first-cap", required_argument, NULL, OPT_FIRST_CAP},
		{"json", no_argument, NULL, 'j'},
		{"output", required_argument, NULL, 'o'},
		{"no-nccl", no_argument, NULL, OPT_NO_NCCL},
		{"parser", required_argument, NULL, OPT_PARSER},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	o->cap = o->first_cap = -1;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":r:jo:h", longs, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (!parse_bytes(optarg, 0, &o->region) || o->region > INT32_MAX)
				return usage_error("--region takes a region number", optarg);
			o->select = true;
			break;
		case OPT_CAP:
			if (!parse_bytes(optarg, 1, &o->cap))
				return usage_error("--cap takes a number of bytes above 0", optarg);
			break;
		case OPT_FIRST_CAP:
			if (!parse_bytes(optarg, 0, &o->first_cap))
				return usage_error("--first-cap takes a number of bytes (0 or more)",
						   optarg);
			break;
		case 'j':
			o->json = true;
			break;
		case 'o':
			if (!*optarg)
				return usage_error("empty file name for --output", NULL);
			o->out_path = optarg;
			break;
		case OPT_NO_NCCL:
			o->no_nccl = true;
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
	if (optind >= argc)
		return usage_error("no trace given", NULL);
	o->traces = argv + optind;
	o->ntraces = argc - optind;
	return -1;
}

static void skip_note(void *ud, const char *path, const char *why)
{
	(void)ud;
	cd_cli_print_warning(path, 0, why);
}

static void warn_cb(void *ud, const char *msg)
{
	cd_cli_print_warning(ud, 0, msg);
}

/* Read one trace (and its NCCL-side trace); prints its errors. */
static int read_one(const struct bk_opts *o, const char *path, struct cd_bk_trace *t)
{
	struct cd_cli cli = {.prog = "commdebug", .cmd = "buckets",
			     .general_parser = o->general_parser, .no_nccl = o->no_nccl};
	struct cd_nside ns = {0};
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	if (!o->no_nccl) {
		cd_nside_find(&ns, &cli, path);
		if (ns.sibling && (rc = cd_nside_load(&ns, &cli, path)) == CD_EXIT_DATA)
			goto out;
	}
	struct cd_bk_opts bo = {.general_parser = o->general_parser, .select = o->select,
				.region = o->region, .cap = o->cap, .first_cap = o->first_cap,
				.nccl = &ns.nccl, .warn = warn_cb, .ud = (void *)path};
	if (cd_buckets_collect(path, &bo, t, &err)) {
		cd_cli_print_error(path, &err);
		rc = CD_EXIT_DATA;
		goto out;
	}
	if (t->cut) {
		cd_cli_print_warning(path, 0, "the trace is cut; what was read was analyzed");
		rc = CD_EXIT_CUT;
	}
out:
	cd_nside_free(&ns);
	return rc;
}

static int by_rank(const void *a, const void *b)
{
	const struct cd_bk_trace *x = *(struct cd_bk_trace *const *)a;
	const struct cd_bk_trace *y = *(struct cd_bk_trace *const *)b;
	if (x->has_rank != y->has_rank)
		return x->has_rank ? -1 : 1;
	if (x->has_rank && x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->path, y->path);
}

static int write_out(const struct bk_opts *o, const struct cd_out *out)
{
	FILE *f = stdout;
	struct cd_err err = {0};
	char *which = NULL;

	if (o->out_path) {
		switch (cd_paths_open_report(o->out_path, o->traces, o->ntraces, NULL, &f, &which,
					     &err)) {
		case CD_OUT_OPENED:
			break;
		case CD_OUT_IS_INPUT:
			fprintf(stderr, "commdebug: %s: the output is the same file as %s%s; "
					"refusing to overwrite it\n", o->out_path,
				strcmp(which, "-") ? "the input " : "",
				strcmp(which, "-") ? which : "standard input");
			free(which);
			return CD_EXIT_USAGE;
		case CD_OUT_CANNOT:
			fprintf(stderr, "commdebug: %s: %s\n", o->out_path, err.msg);
			return CD_EXIT_DATA;
		}
	}
	int rc = CD_EXIT_OK;
	if (fwrite(out->buf, 1, out->len, f) != out->len || fflush(f) != 0) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n",
			o->out_path ? o->out_path : "standard output", strerror(errno));
		rc = CD_EXIT_DATA;
	}
	if (f != stdout && fclose(f) != 0 && rc == CD_EXIT_OK) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", o->out_path, strerror(errno));
		rc = CD_EXIT_DATA;
	}
	return rc;
}

int cmd_buckets(int argc, char **argv)
{
	struct bk_opts o = {0};
	struct cd_paths paths = {0};
	struct cd_bk_trace *ts = NULL, **tp = NULL;
	struct cd_out out;
	struct cd_err err = {0};
	int rc = parse(&o, argc, argv), worst = CD_EXIT_OK, n = 0;
	const char *bad = NULL;

	cd_out_init(&out, NULL);
	out.hold = true;
	if (rc >= 0)
		goto done;
	if (!cd_paths_expand(o.traces, o.ntraces, &paths, skip_note, NULL, &bad, &err)) {
		fprintf(stderr, "commdebug: %s: %s\n", bad, err.msg);
		rc = CD_EXIT_DATA;
		goto done;
	}
	o.traces = paths.v;
	o.ntraces = paths.n;
	ts = calloc((size_t)o.ntraces + 1, sizeof *ts);
	tp = calloc((size_t)o.ntraces + 1, sizeof *tp);
	if (!ts || !tp) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
		goto done;
	}
	for (; n < o.ntraces; n++) {
		int trc = read_one(&o, o.traces[n], &ts[n]);
		tp[n] = &ts[n];
		if (trc == CD_EXIT_DATA) {
			rc = trc;
			n++;
			goto done;
		}
		if (trc > worst)
			worst = trc;
	}
	qsort(tp, (size_t)n, sizeof *tp, by_rank);
	bool differ = false;
	if (cd_buckets_report(&out, tp, (uint32_t)n, o.json, &differ, &err)) {
		fprintf(stderr, "commdebug: %s\n", err.msg);
		rc = CD_EXIT_DATA;
		goto done;
	}
	if (out.failed) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
		goto done;
	}
	rc = write_out(&o, &out);
	if (rc == CD_EXIT_OK)
		rc = differ ? CD_EXIT_DIFFER : worst;
done:
	for (int i = 0; i < n; i++)
		cd_bk_trace_free(&ts[i]);
	free(ts);
	free(tp);
	cd_out_free(&out);
	cd_paths_free(&paths);
	return rc;
}
