/* Summary files: the rank summaries of a share of a job (struct
 * cd_rank_summary, ranks.h), written by `commdebug summarize` where the
 * traces are and merged later by `commdebug ranks`, which reads them back
 * into the very summaries it would have built from the traces, so the
 * findings and their text are the same.
 *
 * Layout (commdebug-trace(5), SUMMARY FILES).  The magic line
 * CD_SUMMARY_MAGIC, then one zstd stream (content checksums on) of
 * records, each a tag byte, a varint length and that many bytes:
 *   'H' header: format version, shard K and N (0 0: not sharded), the
 *       writer's version;
 *   'C' a class: the collectives (without their times) and per-module
 *       counts of a rank, its strings numbered in order of first use, so
 *       that ranks doing the same thing (in other groups too) share one;
 *   'R' a rank: its strings, its class, its collectives' times (deltas),
 *       its regions, how its trace ended, its groups (runs of ranks),
 *       Flight Recorder facts;
 *   'E' the end: how many ranks and classes came before (a file without
 *       it is cut).
 * Integers are LEB128 varints, signed ones zigzag-encoded.  Unknown tags
 * are skipped, so later versions may add records.
 *
 * Limits: a record at most CD_SUMMARY_RECORD_MAX bytes; every count in a
 * record is checked against the bytes left in it; ids are checked against
 * their tables, ranks and world sizes against a trace's limits.  What the
 * summaries read from one file hold is counted as it is allocated (before,
 * for what a count in the file sizes): past CD_SUMMARY_MEM_RATIO bytes a
 * byte of the decompressed records read so far, plus CD_SUMMARY_MEM_FLOOR,
 * the file is refused.  (A rank holds its own copy of its class's
 * collectives, 56 bytes each, for a time of at least one byte in its
 * record: what summarize writes stays below the bound.  The bound is on
 * the decompressed records: zstd can make those far larger than the file.)
 *
 * Layering: reads and writes files; prints nothing. */
#ifndef CD_SUMMARY_H
#define CD_SUMMARY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ranks.h"
#include "../util/status.h"

#define CD_SUMMARY_MAGIC "commdebug summary\n"
#define CD_SUMMARY_MAGIC_LEN 18
#define CD_SUMMARY_VERSION 1
#define CD_SUMMARY_RECORD_MAX (256u << 20)
/* The memory bound of reading one file (see Limits above). */
#define CD_SUMMARY_MEM_RATIO 64u
#define CD_SUMMARY_MEM_FLOOR (64u << 20)

struct cd_summary_info {
	int64_t shard_k, shard_n;   /* --shard K/N; 0 0: every trace given */
	uint64_t ranks, classes;    /* out (write and read): records of each kind */
	uint64_t bytes;             /* out: bytes written (write) */
};

/* Is this the start of a summary file? */
bool cd_summary_sniff(const void *p, size_t n);

/* Write the n summaries to f as one summary file.  info: the shard (in),
 * the counts (out).  Returns CD_OK or an error (err says which). */
enum cd_status cd_summary_write(FILE *f, struct cd_rank_summary *const *sums, int n,
				struct cd_summary_info *info, struct cd_err *err);

/* Read the summary file at path into *sums, a new array of *n summaries
 * (free each with cd_rank_summary_free, then the array).  Each is marked
 * from_summary.  On error *sums is NULL and err names the byte offset (in
 * the decompressed records) where that helps. */
enum cd_status cd_summary_read(const char *path, struct cd_rank_summary **sums, uint32_t *n,
			       struct cd_summary_info *info, struct cd_err *err);

/* cd_summary_read on the records themselves (the file's bytes after its
 * magic line, decompressed): for tests and the fuzzer. */
enum cd_status cd_summary_parse(const void *p, size_t size, struct cd_rank_summary **sums,
				uint32_t *n, struct cd_summary_info *info, struct cd_err *err);

#endif
