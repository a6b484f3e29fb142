/* What the commands' option parsers share: the usage error line and the
 * values several commands take (numbers, --late seconds, --parser). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cd_cli_usage_error(const char *cmd, const char *msg, const char *arg)
{
	fprintf(stderr, "commdebug %s: %s%s%s\n"
			"Try 'commdebug %s --help' for more information.\n",
		cmd, msg, arg ? ": " : "", arg ? arg : "", cmd);
	return CD_EXIT_USAGE;
}

bool cd_cli_int_arg(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool cd_cli_seconds_arg(const char *s, int64_t *ns)
{
	char *end;
	errno = 0;
	double sec = strtod(s, &end);
	if (errno || end == s || *end || !(sec > 0) || sec > 1e6)
		return false;
	*ns = (int64_t)(sec * 1e9);
	return true;
}

bool cd_cli_parser_arg(const char *s, bool *general)
{
	if (strcmp(s, "fast") != 0 && strcmp(s, "general") != 0)
		return false;
	*general = strcmp(s, "general") == 0;
	return true;
}
