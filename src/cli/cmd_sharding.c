/* commdebug sharding: get_parameter_info() and get_sharding_info(). */
#include "cli.h"

int cmd_sharding(int argc, char **argv)
{
	static const struct cd_cmd cmd = {"sharding", CD_C_SHARDING, NULL, NULL, NULL};
	struct cd_cli cli = {0};
	int rc = cd_cli_parse(&cli, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_SHARDING;
	return cd_cli_run(&cli);
}
