/* The printers of diagnostics: every line the commands write to standard
 * error about a file goes through here, worded once. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../replay/replay.h"
#include "../util/status.h"
#include "../replay/trace.h"
#include "cli.h"

void cd_cli_print_error(const char *path, const struct cd_err *err)
{
	if (err->line > 0 && err->column > 0)
		fprintf(stderr, "commdebug: %s:%lld:%lld: %s\n", path, err->line, err->column,
			err->msg);
	else if (err->line > 0)
		fprintf(stderr, "commdebug: %s:%lld: %s\n", path, err->line, err->msg);
	else
		fprintf(stderr, "commdebug: %s: %s\n", path, err->msg);
}

void cd_cli_print_warning(const char *path, long long line, const char *msg)
{
	if (line > 0)
		fprintf(stderr, "commdebug: %s:%lld: warning: %s\n", path, line, msg);
	else
		fprintf(stderr, "commdebug: %s: warning: %s\n", path, msg);
}

void cd_cli_skip_note(void *ud, const char *path, const char *why)
{
	(void)ud;
	cd_cli_print_warning(path, 0, why);
}

int cd_cli_refuse_output(const char *out, const char *in)
{
	bool std_in = strcmp(in, "-") == 0;
	fprintf(stderr, "commdebug: %s: the output is the same file as %s%s; refusing to "
			"overwrite it\n", out, std_in ? "" : "the input ", std_in ? "standard input" : in);
	return CD_EXIT_USAGE;
}

void cd_cli_print_summary_error(const char *path, const char *error)
{
	/* "LINE:COL: message" or a message without position */
	fprintf(stderr, "commdebug: %s:%s%s\n", path, error[0] >= '0' && error[0] <= '9' ? "" : " ",
		error);
}

void cd_cli_print_stats(const char *path, const struct cd_trace_run *tr,
			const struct cd_replay *rp)
{
	fprintf(stderr,
		"commdebug: stats: %s: lines=%lld events=%" PRIu64 " regions=%" PRIu64
		" file_bytes=%" PRIu64 " data_bytes=%" PRIu64 " ops_retained=%" PRIu64
		" op_bytes=%" PRIu64 " modules=%u zstd_frames=%" PRIu64
		" unchecked_frames=%" PRIu64 "\n",
		path, tr->last_good, rp->events, rp->regions, tr->file_bytes, tr->data_bytes,
		rp->max_ops_retained, rp->max_op_bytes, rp->mods.count, tr->frames,
		tr->unchecked_frames);
}
