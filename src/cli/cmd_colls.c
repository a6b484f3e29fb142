/* commdebug colls: every collective of every rank, one line each. */
#include "cli.h"

int cmd_colls(int argc, char **argv)
{
	struct cd_cli cli = {.cmd = "colls"};
	int rc = cd_cli_parse(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_COLLS;
	return cd_cli_run(&cli);
}
