/* Status codes and error context shared by every library function.
 *
 * Library code never prints or exits: a function that fails fills a
 * struct cd_err with one sentence (no file name, no trailing newline) and
 * returns a status.  The CLI adds the file and line and prints it once. */
#ifndef CD_STATUS_H
#define CD_STATUS_H

#include <stdarg.h>
#include <stddef.h>

enum cd_status {
	CD_OK = 0,
	CD_END,         /* end of input reached, no more data */
	CD_ERR_IO,      /* open/read failed */
	CD_ERR_FORMAT,  /* malformed data: JSON syntax, zstd corruption */
	CD_ERR_TRACE,   /* well-formed but wrong: missing field, bad version */
	CD_ERR_LIMIT,   /* a size limit was exceeded */
	CD_ERR_NOMEM,
};

struct cd_err {
	char msg[512];
	long long line;   /* 1-based line the error is about, 0 if none */
	long long column; /* 1-based byte column in that line, 0 if none */
};

/* Fill err->msg (printf style) and return st. err may be NULL. */
enum cd_status cd_fail(struct cd_err *err, enum cd_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
