/* commdebug buckets: DDP's gradient buckets, observed in the traces, planned
 * as DDPOptimizer plans them, and compared (buckets.h does the work).
 *
 * The traces are read by the runner (src/postmortem/run.c) on --jobs threads with
 * buckets' reader (cd_bk_reader), which keeps what it would say; it is
 * said here afterwards, trace by trace in the order given, up to the
 * first trace that cannot be read, as reading them one after another
 * would say it.  A trace with an NCCL-side trace beside it is read here,
 * on this thread, in its turn: its NCCL side (nccl_side.c) says what it
 * says as it reads. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../views/buckets.h"
#include "../util/out.h"
#include "../postmortem/run.h"
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

/* The runner's reader here: buckets' own, except that a trace with an
 * NCCL-side trace is left for read_one. */
struct res {
	struct cd_bk_rank r;
	bool alone;              /* has an NCCL-side trace: read_one reads it */
};
struct ctx {
	struct cd_bk_opts bo;
	bool no_nccl;
};

static void res_read(const char *path, const void *ctx, void *res)
{
	const struct ctx *c = ctx;
	struct res *r = res;

	if (!c->no_nccl) {
		struct cd_nside_opts no = {.general_parser = c->bo.general_parser};
		struct cd_nside ns = {0};
		cd_nside_find(&ns, &no, path);
		r->alone = ns.sibling != NULL;
		cd_nside_free(&ns);
		if (r->alone)
			return;
	}
	cd_bk_reader.read(path, &c->bo, &r->r);
}

static void res_free(void *res)
{
	cd_bk_reader.free(&((struct res *)res)->r);
}

static const struct cd_run_reader reader = {"buckets", sizeof(struct res), res_read, res_free,
					    NULL};

/* What the reader kept about one trace, said; or the trace read now
 * (read_one).  Returns read_one's exit code. */
static int say_one(const struct cd_cli *o, const char *path, struct res *r)
{
	if (r->alone)
		return read_one(o, path, &r->r.t);
	for (uint32_t i = 0; i < r->r.warnings.n; i++)
		cd_cli_print_warning(path, 0, r->r.warnings.v[i]);
	if (r->r.st) {
		cd_cli_print_error(path, &r->r.err);
		return CD_EXIT_DATA;
	}
	if (r->r.t.cut) {
		cd_cli_print_warning(path, 0, "the trace is cut; what was read was analyzed");
		return CD_EXIT_CUT;
	}
	return CD_EXIT_OK;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
	int rc;
	if (o->out_path && (rc = cd_cli_open_output(o, &f)) != CD_EXIT_OK)
		return rc;
	rc = CD_EXIT_OK;
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
	struct res *rs = NULL;
	struct cd_bk_trace **tp = NULL;
	struct cd_out out;
	struct cd_err err = {0};
	struct cd_run_opts ro = {0};
	int rc = cd_cli_parse(&o, &cmd, argc, argv), worst = CD_EXIT_OK, n = 0, alone = 0;
	double t0 = now(), read_s = 0;

	cd_out_init(&out, NULL);
	out.hold = true;
	if (rc >= 0)
		return rc;
	struct ctx c = {.bo = {.general_parser = o.general_parser, .select = o.select,
			       .region = o.region, .cap = o.cap, .first_cap = o.first_cap},
			.no_nccl = o.no_nccl};
	ro.jobs = o.jobs;
	void *res = NULL;
	if (cd_run(o.traces, o.ntraces, &reader, &c, &ro, &res, &err)) {
		fprintf(stderr, "commdebug: %s\n", err.msg);
		rc = CD_EXIT_DATA;
		goto done;
	}
	rs = res;
	n = o.ntraces;
	if (!(tp = calloc((size_t)n + 1, sizeof *tp))) {
		fprintf(stderr, "commdebug: out of memory\n");
		rc = CD_EXIT_DATA;
		goto done;
	}
	for (int i = 0; i < n; i++) {
		int trc = say_one(&o, o.traces[i], &rs[i]);
		alone += rs[i].alone;
		tp[i] = &rs[i].r.t;
		if (trc == CD_EXIT_DATA) {
			rc = trc;
			goto done;
		}
		if (trc > worst)
			worst = trc;
	}
	read_s = now() - t0;
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
	if (o.stats && rs) {
		if (read_s == 0)
			read_s = now() - t0;
		fprintf(stderr, "commdebug: stats: ranks=%d threads=%d read_s=%.3f read_alone=%d\n",
			n, ro.threads, read_s, alone);
	}
	cd_run_results_free(&reader, rs, n);
	free(tp);
	cd_out_free(&out);
	cd_cli_free(&o);
	return rc;
}
