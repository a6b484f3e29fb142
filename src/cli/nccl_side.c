/* The NCCL side of one trace's analysis.  See nccl_side.h. */
#include "nccl_side.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../read/parse.h"
#include "../read/reader.h"
#include "../replay/trace.h"
#include "paths.h"

void cd_nside_find(struct cd_nside *ns, const struct cd_nside_opts *o, const char *path)
{
	struct stat st;
	char *s;

	if (o->nccl_path) {
		ns->sibling = strdup(o->nccl_path);
		ns->from_option = true;
		return;
	}
	/* standard input has no place beside it; an NCCL-side trace has none */
	if (!(s = cd_paths_nccl_name(path)))
		return;
	if (stat(s, &st) != 0 || !S_ISREG(st.st_mode)) {
		ns->looked = s;
		return;
	}
	ns->sibling = s;
}

/* The meta event of the trace at path (a file), copied into *e (host:
 * into host); false when it cannot be read here (the replay then says
 * why). */
static bool peek_meta(const char *path, struct cd_event *out, char *host, size_t hostsz)
{
	struct cd_reader *rd = NULL;
	struct cd_parser ps = {.skip_detail = true};
	struct cd_err err = {0};
	struct cd_event e;
	const char *buf;
	size_t len;
	bool ok = false;

	if (cd_reader_open(path, &rd, &err))
		return false;
	while (!ok && cd_reader_next(rd, &buf, &len, &err) == CD_OK) {
		const char *p = buf, *end = buf + len;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl ? nl : end, *q = p;
			while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
				q++;
			if (q < le) {
				if (cd_parse_fast(&ps, p, (size_t)(le - p), &e, &err) == CD_OK &&
				    e.ev == CD_EV_META) {
					*out = e;
					snprintf(host, hostsz, "%.*s", e.host.p ? (int)e.host.n : 0,
						 e.host.p ? e.host.p : "");
					ok = true;
				}
				goto done;
			}
			p = le + 1;
		}
	}
done:
	cd_reader_close(rd);
	cd_parser_free(&ps);
	return ok;
}

/* Describe whose trace a meta says it is ("rank 1's", "process 42 on
 * node7's") into buf. */
static void whose(char *buf, size_t n, bool by_rank, int64_t rank, int64_t pid, const char *host)
{
	if (by_rank)
		snprintf(buf, n, "rank %" PRId64 "'s", rank);
	else
		snprintf(buf, n, "process %" PRId64 " on %s's", pid, host);
}

/* Compare the trace's meta (has_rank, rank, pid, host) with the NCCL-side
 * trace's.  Returns true when they may be one process's; else prints why
 * not (an error with --nccl, else a warning) and marks ns refused. */
static bool same_process(struct cd_nside *ns, const char *path, bool has_rank, int64_t rank,
			 int64_t pid, const char *host)
{
	char a[300], b[300];
	bool by_rank = ns->sib_has_rank && has_rank;

	if (!ns->sib_meta)
		return true;
	if (by_rank) {
		if (ns->sib_rank == rank)
			return true;
	} else if (ns->sib_pid <= 0 || pid <= 0 || !ns->sib_host[0] || !host[0] ||
		   (ns->sib_pid == pid && strcmp(ns->sib_host, host) == 0)) {
		return true;
	}
	whose(a, sizeof a, by_rank, ns->sib_rank, ns->sib_pid, ns->sib_host);
	whose(b, sizeof b, by_rank, rank, pid, host);
	ns->refused = true;
	if (ns->from_option)
		fprintf(stderr, "commdebug: %s: the NCCL-side trace is %s but %s is %s: not joined "
				"(--nccl takes the NCCL-side trace of the same process)\n",
			ns->sibling, a, path, b);
	else
		fprintf(stderr, "commdebug: %s: warning: this NCCL-side trace is %s but %s is %s: "
				"not joined\n", ns->sibling, a, path, b);
	return false;
}

/* Forget the NCCL-side trace's calls (it is not joined). */
static void drop_sibling(struct cd_nside *ns)
{
	cd_nccl_free(&ns->nccl);
	memset(&ns->nccl, 0, sizeof ns->nccl);
	free(ns->sibling);
	ns->sibling = NULL;
}

static void sib_warn(void *ud, const char *msg)
{
	struct cd_nside *ns = ud;
	cd_cli_print_warning(ns->sibling, ns->sib_tr ? ns->sib_tr->line : 0, msg);
}

static void sib_event(void *ud, const struct cd_event *e, const struct cd_replay *r)
{
	struct cd_nside *ns = ud;
	(void)r;
	if (e->ev == CD_EV_META && !ns->sib_meta) {
		ns->sib_meta = true;
		ns->sib_has_rank = (e->have & CD_F_RANK) != 0;
		ns->sib_rank = e->rank;
		ns->sib_pid = e->pid;
		snprintf(ns->sib_host, sizeof ns->sib_host, "%.*s", e->host.p ? (int)e->host.n : 0,
			 e->host.p ? e->host.p : "");
	}
	cd_nside_event(ns, e, ns->sib_tr->line);
}

int cd_nside_load(struct cd_nside *ns, const struct cd_nside_opts *o, const char *path)
{
	struct cd_replay rp;
	struct cd_replay_opts ro = {.warn = sib_warn, .ud = ns};
	struct cd_trace_run tr = {.general_parser = o->general_parser, .skip_detail = true,
				  .after_event = sib_event, .ud = ns};
	struct cd_err err = {0};
	struct cd_event me;
	char host[256];
	int rc = CD_EXIT_OK;

	if (!ns->sibling)
		return CD_EXIT_OK;
	if (cd_replay_init(&rp, &ro, &err)) {
		cd_cli_print_error(ns->sibling, &err);
		return CD_EXIT_DATA;
	}
	ns->sib_tr = &tr;
	if (cd_trace_replay(ns->sibling, &rp, &tr, &err)) {
		cd_cli_print_error(ns->sibling, &err);
		rc = CD_EXIT_DATA;
	} else if (ns->err.msg[0]) {
		cd_cli_print_error(ns->sibling, &ns->err);
		rc = CD_EXIT_DATA;
	} else if (tr.cut) {
		fprintf(stderr, "commdebug: %s: warning: the trace is cut (%s); read up to line %lld, "
				"the last complete line\n", ns->sibling, tr.cut_why, tr.last_good);
		rc = CD_EXIT_CUT;
	}
	cd_replay_free(&rp);
	ns->sib_tr = NULL;
	if (rc == CD_EXIT_DATA)
		return rc;
	/* whose calls these are: checked before anything is reported; standard
	 * input is checked when its meta line comes */
	if (strcmp(path, "-") == 0) {
		ns->check_meta = ns->sib_meta;
	} else if (peek_meta(path, &me, host, sizeof host) &&
		   !same_process(ns, path, (me.have & CD_F_RANK) != 0, me.rank, me.pid, host)) {
		if (ns->from_option)
			return CD_EXIT_DATA;
		drop_sibling(ns);
		return rc;
	}
	if (!cd_nccl_any(&ns->nccl))
		fprintf(stderr, "commdebug: %s: warning: no NCCL calls in this trace\n", ns->sibling);
	return rc;
}

void cd_nside_event(struct cd_nside *ns, const struct cd_event *e, long long line)
{
	if (e->ev == CD_EV_META && ns->check_meta) {
		char host[256];
		ns->check_meta = false;
		snprintf(host, sizeof host, "%.*s", e->host.p ? (int)e->host.n : 0,
			 e->host.p ? e->host.p : "");
		if (!same_process(ns, "<stdin>", (e->have & CD_F_RANK) != 0, e->rank, e->pid, host)) {
			/* the report goes on without the NCCL calls; exit 1 at the end */
			drop_sibling(ns);
			ns->failed = true;
		}
		return;
	}
	if (e->ev == CD_EV_PG && e->backend.p && !ns->used_nccl) {
		char b[64];
		snprintf(b, sizeof b, "%.*s", (int)(e->backend.n < 63 ? e->backend.n : 63),
			 e->backend.p);
		ns->used_nccl = strcasestr(b, "nccl") != NULL;
		return;
	}
	if ((e->ev == CD_EV_NCCL || e->ev == CD_EV_NCCL_LOST) && !ns->err.msg[0] &&
	    cd_nccl_event(&ns->nccl, e, &ns->err))
		ns->err.line = line;
}

void cd_nside_charge(struct cd_nside *ns, const struct cd_replay *r, const struct cd_event *e)
{
	if (!ns->err.msg[0] && ns->sibling)
		cd_nccl_charge(&ns->nccl, r, e, &ns->err);
}

bool cd_nside_reports(const struct cd_nside *ns)
{
	return !ns->err.msg[0] && !ns->failed && cd_nccl_any(&ns->nccl);
}

int cd_nside_finish(struct cd_nside *ns, struct cd_out *o, const struct cd_intern *mods,
		    const char *path, bool json, bool regions)
{
	struct cd_err err = {0};
	const char *src = ns->sibling ? ns->sibling : path;

	if (ns->err.msg[0]) {
		cd_cli_print_error(path, &ns->err);
		return CD_EXIT_DATA;
	}
	if (ns->failed)
		return CD_EXIT_DATA;
	if (cd_nccl_any(&ns->nccl)) {
		if (regions && !json)
			cd_out_str(o, "\n");
		if (cd_nccl_report(o, &ns->nccl, mods, src, json, &err)) {
			cd_cli_print_error(path, &err);
			return CD_EXIT_DATA;
		}
	}
	if (ns->nccl.lost)
		fprintf(stderr, "commdebug: %s: warning: the NCCL recorder could not record %" PRIu64
				" call(s) (its queue was full, or its trace was not open yet); the NCCL "
				"numbers leave them out\n",
			src, ns->nccl.lost);
	if (ns->nccl.orphan_done)
		fprintf(stderr, "commdebug: %s: warning: %" PRIu64 " completion event(s) name NCCL "
				"calls that are not in the trace (no comm/seq match); ignored\n",
			src, ns->nccl.orphan_done);
	if (!ns->sibling && !ns->refused && ns->looked && ns->used_nccl && !cd_nccl_any(&ns->nccl))
		fprintf(stderr, "commdebug: %s: note: the program used NCCL but no NCCL-side trace "
				"was found (looked for %s); see commdebug-nccl(7), or --no-nccl\n",
			path, ns->looked);
	return CD_EXIT_OK;
}

void cd_nside_free(struct cd_nside *ns)
{
	cd_nccl_free(&ns->nccl);
	free(ns->sibling);
	free(ns->looked);
	ns->sibling = ns->looked = NULL;
}
