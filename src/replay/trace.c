#include "trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "../read/parse.h"
#include "../read/sniff.h"

/* after_kinds holds one bit per kind */
_Static_assert(CD_EV__COUNT <= 32, "too many event kinds for after_kinds");

static _Atomic uint64_t mem_limit;

void cd_trace_set_mem_limit(uint64_t bytes)
{
	atomic_store(&mem_limit, bytes);
}

/* Lines between two looks at the memory in use. */
#define MEM_EVERY 4096

/* Past the bound?  Then err says so. */
static bool mem_over(struct cd_err *err)
{
	uint64_t limit = atomic_load(&mem_limit);
	struct rusage ru;
	if (!limit || getrusage(RUSAGE_SELF, &ru) != 0)
		return false;
	uint64_t used = (uint64_t)ru.ru_maxrss * 1024; /* KiB on Linux */
	if (used <= limit)
		return false;
	cd_fail(err, CD_ERR_LIMIT, "memory use reached %.1f MiB, over the bound of %.1f MiB "
		"(--max-mem); stopped", (double)used / 1048576.0, (double)limit / 1048576.0);
	return true;
}

/* The first line did not parse: if the input is something else said in
 * words (sniff.h), that replaces the parser's message. */
static enum cd_status not_a_trace(const char *p, size_t n, enum cd_status st, struct cd_err *err)
{
	const char *what = cd_sniff(p, n, CD_SNIFF_WANT_TRACE);
	if (!what)
		return st;
	err->column = 0;
	return cd_fail(err, st, "not a commdebug trace: %s", what);
}

enum cd_status cd_trace_replay(const char *path, struct cd_replay *rp, struct cd_trace_run *run,
			       struct cd_err *err)
{
	struct cd_reader *rd = NULL;
	struct cd_parser ps = {.skip_detail = run->skip_detail, .general = run->general_parser};
	const struct cd_event *ev;
	enum cd_status st;

	run->line = run->last_good = 0;
	err->line = err->column = 0;
	if ((st = cd_reader_open(path, &rd, err)))
		goto out;
	for (;;) {
		const char *buf;
		size_t len;
		if (run->tick)
			run->tick(run->ud, rd);
		if (mem_over(err)) {
			st = CD_ERR_LIMIT;
			err->line = run->line;
			goto out;
		}
		st = cd_reader_next(rd, &buf, &len, err);
		if (st == CD_END)
			break;
		if (st == CD_ERR_LIMIT) {
			/* every line before it was handed out and counted */
			err->line = run->line + 1;
			goto out;
		}
		if (st) {
			size_t n = strlen(err->msg);
			if (run->last_good)
				snprintf(err->msg + n, sizeof err->msg - n, " (after line %lld)",
					 run->last_good);
			else
				snprintf(err->msg + n, sizeof err->msg - n, " (before the first line)");
			goto out;
		}
		const char *p = buf, *end = buf + len;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl ? nl : end;
			if (++run->line % MEM_EVERY == 0 && mem_over(err)) {
				st = CD_ERR_LIMIT;
				err->line = run->line;
				goto out;
			}
			/* blank lines are tolerated */
			const char *q = p;
			while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
				q++;
			if (q == le) {
				p = le + 1;
				run->last_good = run->line;
				continue;
			}
			st = cd_parse_line(&ps, p, (size_t)(le - p), &ev, err);
			if (st && !nl && run->seen_meta) {
				/* the input ends inside this line */
				run->cut = true;
				run->cut_why = "its last line is incomplete";
				st = CD_OK;
				break;
			}
			if (st) {
				err->line = run->line;
				if (!run->seen_meta && st != CD_ERR_NOMEM && st != CD_ERR_LIMIT)
					st = not_a_trace(p, (size_t)(end - p), st, err);
				goto out;
			}
			if (!run->seen_meta) {
				if (ev->ev != CD_EV_META) {
					err->line = run->line;
					err->column = 0;
					st = cd_fail(err, CD_ERR_TRACE,
						     "not a commdebug trace: the first event must be "
						     "\"meta\", not \"%s\"", cd_ev_name(ev->ev));
					goto out;
				}
				run->seen_meta = true;
				run->has_rank = (ev->have & CD_F_RANK) != 0;
				run->has_world = (ev->have & CD_F_WORLD) != 0;
				run->rank = ev->rank;
				run->world_size = ev->world_size;
				run->t0 = ev->t0;
				run->light = ev->light;
			}
			if ((st = cd_replay_event(rp, ev, err))) {
				err->line = run->line;
				err->column = 0;
				goto out;
			}
			if (run->after_event && (!run->after_kinds ||
						  (run->after_kinds >> ev->ev & 1))) {
				run->text = p;
				run->text_n = (size_t)(le - p);
				run->after_event(run->ud, ev, rp);
			}
			run->last_good = run->line;
			p = le + 1;
		}
	}
	if (cd_reader_frame_cut(rd)) {
		run->cut = true;
		run->cut_why = "it ends inside a zstd frame";
	}
	run->line = 0;
	if (!run->seen_meta) {
		st = cd_fail(err, run->cut ? CD_ERR_FORMAT : CD_ERR_TRACE, "%s",
			     run->cut ? "the trace is cut before its first line is complete"
				      : "empty trace: no meta line");
		goto out;
	}
	st = CD_OK;
out:
	if (rd) {
		run->file_bytes = cd_reader_file_bytes(rd);
		run->data_bytes = cd_reader_data_bytes(rd);
		cd_reader_frames(rd, &run->frames, &run->unchecked_frames);
	}
	cd_reader_close(rd);
	cd_parser_free(&ps);
	return st;
}
