/* commdebug counts: get_total_counts() and get_comm_counts(). */
#include "cli.h"

int cmd_counts(int argc, char **argv)
{
	struct cd_cli cli = {.cmd = "counts"};
	int rc = cd_cli_parse(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_COUNTS;
	return cd_cli_run(&cli);
}
