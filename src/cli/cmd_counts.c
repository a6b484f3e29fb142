/* commdebug counts: get_total_counts() and get_comm_counts(), as CommDebugMode counts them. */
#include "cli.h"

int cmd_counts(int argc, char **argv)
{
	static const struct cd_cmd cmd = {"counts", CD_C_COUNTS, NULL, NULL, NULL};
	struct cd_cli cli = {0};
	int rc = cd_cli_parse(&cli, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_COUNTS;
	return cd_cli_run(&cli);
}
