/* commdebug ranks: match collectives across the ranks of a job (summaries.c). */
#include "cli.h"

int cmd_ranks(int argc, char **argv)
{
	static const struct cd_cmd cmd = {"ranks", CD_C_RANKS, NULL, NULL, NULL};
	struct cd_cli cli = {0};
	int rc = cd_cli_parse(&cli, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	cli.kind = CD_R_RANKS;
	return cd_cli_run(&cli);
}
