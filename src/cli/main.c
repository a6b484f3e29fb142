/* commdebug: the command table and dispatch. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* The dispatch; what each command is for is said in --help (opts.c). */
static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{"analyze", cmd_analyze},
	{"counts", cmd_counts},
	{"sharding", cmd_sharding},
	{"ranks", cmd_ranks},
	{"colls", cmd_colls},
	{"check", cmd_check},
	{"report", cmd_report},
	{"buckets", cmd_buckets},
	{"export", cmd_export},
	{"summarize", cmd_summarize},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "commdebug: no command given\n"
				"Try 'commdebug --help' for more information.\n");
		return CD_EXIT_USAGE;
	}
	const char *c = argv[1];
	if (strcmp(c, "-h") == 0 || strcmp(c, "--help") == 0 || strcmp(c, "help") == 0) {
		cd_cli_usage(stdout);
		return CD_EXIT_OK;
	}
	if (strcmp(c, "-V") == 0 || strcmp(c, "--version") == 0 || strcmp(c, "version") == 0) {
		cd_cli_version();
		return CD_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(c, commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "commdebug: unknown command '%s'\n"
			"Try 'commdebug --help' for more information.\n", c);
	return CD_EXIT_USAGE;
}
