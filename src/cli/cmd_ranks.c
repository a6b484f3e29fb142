/* commdebug ranks: match collectives across the ranks of a job. */
#include "cli.h"

int cmd_ranks(int argc, char **argv)
{
	struct cd_cli cli = {.cmd = "ranks"};
	int rc = cd_cli_parse(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_RANKS;
	return cd_cli_run(&cli);
}
