/* commdebug analyze: the module tree with per-module collective counts and op lists. */
#include "cli.h"

int cmd_analyze(int argc, char **argv)
{
	static const struct cd_cmd cmd = {"analyze", CD_C_ANALYZE, NULL, NULL, NULL};
	struct cd_cli cli = {0};
	int rc = cd_cli_parse(&cli, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = cli.json ? CD_R_JSON : CD_R_TABLE;
	return cd_cli_run(&cli);
}
