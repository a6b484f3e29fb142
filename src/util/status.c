#include "status.h"

#include <stdio.h>

enum cd_status cd_fail(struct cd_err *err, enum cd_status st, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return st;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return st;
}
