/* commdebug buckets: DDP's gradient buckets, observed in the traces, planned
 * as DDPOptimizer plans them, and compared (buckets.h does the work). */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../buckets.h"
#include "../out.h"
#include "nccl_side.h"
#include "paths.h"

static const struct cd_cmd cmd = {
	"buckets", CD_C_BUCKETS,
	"Usage: commdebug buckets [OPTIONS] TRACE...\n"
	"DDP's gradient buckets: the bucket all-reduces each step, DDPOptimizer's\n"
	"plan for the recorded model, and where the two differ.\n"
	"\n",
	"\n"
	"TRACE is a trace file, - for standard input, or a directory of traces\n"
	"(one per rank).  Exit status: 0 ok, 1 bad trace or no ddp event in it,\n"
	"2 usage error, 3 a trace was cut short, 4 the ranks' buckets differ.\n",
	NULL,
};

static void warn_cb(void *ud, const char *msg)
{
	cd_cli_print_warning(ud, 0, msg);
}

/* Read one trace (and its NCCL-side trace); prints its errors. */
static int read_one(const struct cd_cli *o, const char *path, struct cd_bk_trace *t)
{
	struct cd_nside_opts no = {.general_parser = o->general_parser};
	struct cd_nside ns = {0};
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	if (!o->no_nccl) {
		cd_nside_find(&ns, &no, path);
		if (ns.sibling && (rc = cd_nside_load(&ns, &no, path)) == CD_EXIT_DATA)
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

static int write_out(const struct cd_cli *o, const struct cd_out *out)
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
			cd_cli_refuse_output(o->out_path, which);
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
	struct cd_cli o = {0};
	struct cd_bk_trace *ts = NULL, **tp = NULL;
	struct cd_out out;
	struct cd_err err = {0};
	int rc = cd_cli_parse(&o, &cmd, argc, argv), worst = CD_EXIT_OK, n = 0;

	cd_out_init(&out, NULL);
	out.hold = true;
	if (rc >= 0)
		return rc;
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
	cd_cli_free(&o);
	return rc;
}
