/* The command line's paths: directory arguments expanded into the traces
 * they hold, and the output file opened only when it is none of the inputs.
 * Nothing here prints: diagnostics come back as sentences (err) and notes
 * (the note callback), for the caller to print with the path. */
#ifndef CD_CLI_PATHS_H
#define CD_CLI_PATHS_H

#include <stdbool.h>
#include <stdio.h>

#include "../util/status.h"

/* A list of malloc'd paths. */
struct cd_paths {
	char **v;
	int n, cap;
};

void cd_paths_free(struct cd_paths *p);

/* Is this directory entry name a trace of its own?  (*.zst, *.jsonl,
 * *.json, not hidden, not an NCCL-side *.nccl.zst / *.nccl.jsonl.) */
bool cd_paths_trace_name(const char *name);

/* Replace each directory in args by the traces in it, sorted by name, and
 * the Flight Recorder dumps and summary files among files of other names
 * (by their first bytes, read once: cd_run_input_kind);
 * other arguments ("-", files, FIFOs, missing paths) are kept as they are.
 * An entry that is not a regular file (a FIFO, a socket, a directory, a
 * device) is skipped with note(ud, path, why).  On failure (a directory
 * that cannot be read or holds no trace) returns false with err->msg and
 * *bad the argument it is about. */
bool cd_paths_expand(char *const *args, int nargs, struct cd_paths *out,
		     void (*note)(void *ud, const char *path, const char *why), void *ud,
		     const char **bad, struct cd_err *err);

/* The file name an NCCL-side trace of path would have (name.zst ->
 * name.nccl.zst), malloc'd; NULL for "-" and NCCL-side traces. */
char *cd_paths_nccl_name(const char *path);

/* The input among the n inputs that the existing file at path is (same
 * device and inode; "-" is standard input), or NULL. */
const char *cd_paths_is_input(const char *path, char *const *inputs, int n);

/* Outcome of cd_paths_open_output. */
enum cd_open_out { CD_OUT_OPENED, CD_OUT_CANNOT, CD_OUT_IS_INPUT };

/* Open path for writing.  It is created if missing and truncated only after
 * it was found to be none of the n files in inputs (compared by device and
 * inode, so a symbolic or hard link to an input counts as the input; "-"
 * stands for standard input; paths that do not exist are ignored).
 * CD_OUT_OPENED: *f is set.  CD_OUT_CANNOT: err->msg says why.
 * CD_OUT_IS_INPUT: *which is the input it is; nothing was changed. */
enum cd_open_out cd_paths_open_output(const char *path, char *const *inputs, int n, FILE **f,
				      const char **which, struct cd_err *err);

/* cd_paths_open_output for a report: the inputs are the n traces, the
 * NCCL-side trace each may have next to it (cd_paths_nccl_name) and nccl
 * (--nccl; may be NULL).  CD_OUT_IS_INPUT: *which is a malloc'd copy of the
 * input's name, for the caller to free. */
enum cd_open_out cd_paths_open_report(const char *path, char *const *traces, int n,
				      const char *nccl, FILE **f, char **which, struct cd_err *err);

/* A file written whole or not at all: a temporary beside path (with the
 * mode a new file gets under the umask), renamed over path only when the
 * writing succeeded.  Both functions print a one-line error on failure. */
struct cd_tmpfile {
	FILE *f;
	char *tmp;
	const char *path;
};
bool cd_paths_tmp_open(struct cd_tmpfile *t, const char *path);
/* Close t; rename it over its path when ok and every write succeeded, else
 * remove it.  Returns whether path now holds the new file. */
bool cd_paths_tmp_commit(struct cd_tmpfile *t, bool ok);

struct cd_out;
/* Write o's text to path ("-": standard output) through cd_tmpfile;
 * returns an exit code. */
int cd_paths_save(const char *path, const struct cd_out *o);

#endif
