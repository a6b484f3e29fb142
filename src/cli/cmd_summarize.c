/* commdebug summarize: a share of a job's traces into one summary file
 * (summary.h), run where the traces are; `commdebug ranks` merges the
 * files into the same findings as on the traces. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../postmortem/run.h"
#include "../postmortem/summary.h"
#include "cli.h"
#include "paths.h"

static const char *check_args(struct cd_cli *cli)
{
	if (!cli->out_path)
		return "no output file given (-o FILE)";
	return NULL;
}

static const struct cd_cmd cmd = {
	"summarize", CD_C_SUMMARIZE,
	"Usage: commdebug summarize -o FILE [--shard K/N|auto] [OPTIONS] TRACE...|DIR...\n"
	"Read a share of a job's traces (or Flight Recorder dumps, or other summary\n"
	"files) where they are, and write what the post-mortem needs of each rank\n"
	"into one small file.  'commdebug ranks' on the summary files of every\n"
	"share gives the findings it gives on the traces themselves.\n"
	"\n",
	"\n"
	"A file's rank for --shard is the number after \"rank\" in its name, else the\n"
	"digits that end its name (a Flight Recorder dump's); a file with neither\n"
	"goes by its place among those files, so every share must be given the same\n"
	"files.  Exit status: 0 written, 1 an unreadable trace (written, recorded as\n"
	"unreadable) or a write error (FILE is not written), 2 usage error, 3 a\n"
	"trace was cut short (written, recorded as cut).\n",
	check_args,
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --shard auto: K and N from the launcher's variables.  Returns NULL, or
 * what is missing. */
static const char *shard_from_env(struct cd_cli *cli)
{
	static const char *const vars[][2] = {
		{"SLURM_PROCID", "SLURM_NTASKS"},
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"PMI_RANK", "PMI_SIZE"},
	};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *k = getenv(vars[i][0]), *n = getenv(vars[i][1]);
		if (!k || !n)
			continue;
		char *e1, *e2;
		long long kv = strtoll(k, &e1, 10), nv = strtoll(n, &e2, 10);
		if (!*k || !*n || *e1 || *e2 || kv < 0 || nv < 1 || kv >= nv || nv > (1 << 24))
			return "the launcher's variables do not hold a task number below the "
			       "number of tasks";
		cli->shard_k = kv;
		cli->shard_n = nv;
		return NULL;
	}
	return "--shard auto needs a launcher's variables: SLURM_PROCID and SLURM_NTASKS "
	       "(srun), OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), "
	       "or PMI_RANK and PMI_SIZE";
}

/* Move the traces of this shard to the front of cli->traces (in their
 * order); returns how many there are. */
static int select_shard(struct cd_cli *cli)
{
	int kept = 0, unnamed = 0;
	if (!cli->shard)
		return cli->ntraces;
	for (int i = 0; i < cli->ntraces; i++) {
		int64_t key;
		if (!cd_rank_from_name(cli->traces[i], CD_RANK_NAME_WORD | CD_RANK_NAME_TAIL, &key))
			key = unnamed++;
		if (key % cli->shard_n != cli->shard_k)
			continue;
		/* keep the order: rotate the kept one down to its place */
		char *t = cli->traces[i];
		memmove(cli->traces + kept + 1, cli->traces + kept,
			(size_t)(i - kept) * sizeof *cli->traces);
		cli->traces[kept++] = t;
	}
	return kept;
}

static uint64_t input_bytes(char *const *paths, int n)
{
	uint64_t b = 0;
	struct stat st;
	for (int i = 0; i < n; i++)
		if (stat(paths[i], &st) == 0 && S_ISREG(st.st_mode))
			b += (uint64_t)st.st_size;
	return b;
}

/* Write the summaries to o->out_path ("-": standard output, not a
 * terminal); returns an exit code. */
static int write_file(const struct cd_cli *o, struct cd_rank_summary *sums, int n,
		      struct cd_summary_info *info)
{
	struct cd_rank_summary **ptrs = cd_run_ptrs(sums, n);
	struct cd_err err = {0};
	int rc = CD_EXIT_OK;

	if (!ptrs) {
		fprintf(stderr, "commdebug: out of memory\n");
		return CD_EXIT_DATA;
	}
	if (strcmp(o->out_path, "-") == 0) {
		if (cd_summary_write(stdout, ptrs, n, info, &err)) {
			fprintf(stderr, "commdebug: standard output: %s\n", err.msg);
			rc = CD_EXIT_DATA;
		}
	} else {
		struct cd_tmpfile t;
		if (!cd_paths_tmp_open(&t, o->out_path)) {
			rc = CD_EXIT_DATA;
		} else {
			bool ok = cd_summary_write(t.f, ptrs, n, info, &err) == CD_OK;
			if (!ok)
				fprintf(stderr, "commdebug: %s: %s\n", o->out_path, err.msg);
			if (!cd_paths_tmp_commit(&t, ok))
				rc = CD_EXIT_DATA;
		}
	}
	free(ptrs);
	return rc;
}

int cmd_summarize(int argc, char **argv)
{
	struct cd_cli o = {0};
	struct cd_rank_summary *sums = NULL;
	struct cd_summary_info info = {0};
	double read_s = 0, t0 = now();
	int threads = 0, n = 0, total;
	const char *why;
	int rc = cd_cli_parse(&o, &cmd, argc, argv);

	if (rc >= 0)
		return rc;
	total = o.ntraces;
	if (o.shard_auto && (why = shard_from_env(&o))) {
		rc = cd_cli_usage_error(cmd.name, why);
		goto out;
	}
	if (strcmp(o.out_path, "-") == 0 && isatty(STDOUT_FILENO)) {
		rc = cd_cli_usage_error(cmd.name, "a summary file is binary: give -o FILE, or "
						  "send standard output to a file or a pipe");
		goto out;
	}
	if ((rc = cd_cli_refuse_inputs(&o, o.out_path, false)) != CD_EXIT_OK)
		goto out;
	o.ntraces = select_shard(&o);
	if (o.ntraces == 0)
		fprintf(stderr, "commdebug: note: shard %" PRId64 "/%" PRId64 " holds none of the "
				"%d traces; the summary holds no rank\n", o.shard_k, o.shard_n, total);
	if ((rc = cd_cli_summaries(&o, &sums, &n, &read_s, &threads)) != CD_EXIT_OK)
		goto out;
	rc = cd_cli_read_rc(sums, n, "summarized what it holds");
	info.shard_k = o.shard ? o.shard_k : 0;
	info.shard_n = o.shard ? o.shard_n : 0;
	int wrc = write_file(&o, sums, n, &info);
	if (wrc != CD_EXIT_OK)
		rc = wrc;
	if (o.stats && wrc == CD_EXIT_OK) {
		uint64_t in = input_bytes(o.traces, o.ntraces);
		fprintf(stderr, "commdebug: stats: inputs=%d ranks=%" PRIu64 " classes=%" PRIu64
				" input_bytes=%" PRIu64 " summary_bytes=%" PRIu64
				" share=%.5f threads=%d read_s=%.3f total_s=%.3f\n",
			o.ntraces, info.ranks, info.classes, in, info.bytes,
			in ? (double)info.bytes / (double)in : 0.0, threads, read_s, now() - t0);
	}
out:
	cd_run_free(sums, n);
	o.ntraces = total;
	cd_cli_free(&o);
	return rc;
}
