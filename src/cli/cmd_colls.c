/* commdebug colls: every collective of every rank, one per line (summaries.c). */
#include "cli.h"

int cmd_colls(int argc, char **argv)
{
	static const struct cd_cmd cmd = {"colls", CD_C_COLLS, NULL, NULL, NULL};
	struct cd_cli cli = {0};
	int rc = cd_cli_parse(&cli, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_COLLS;
	return cd_cli_run(&cli);
}
