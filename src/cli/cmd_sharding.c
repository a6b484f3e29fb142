/* commdebug sharding: get_parameter_info() and get_sharding_info(). */
#include "cli.h"

int cmd_sharding(int argc, char **argv)
{
	struct cd_cli cli = {.cmd = "sharding"};
	int rc = cd_cli_parse(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_SHARDING;
	return cd_cli_run(&cli);
}
