/* libFuzzer target: summary files (summary.h).  The input is the records
 * of a summary file (its bytes after the magic line, decompressed); what
 * the reader accepts is merged as `commdebug ranks` merges it (findings,
 * text and JSON) and written back, which must read again to the same
 * number of ranks.  Seeds: tests/fuzz/corpus-summary. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "out.h"
#include "ranks.h"
#include "summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cd_rank_summary *sums;
	struct cd_summary_info info;
	struct cd_err err = {0};
	uint32_t n;

	if (cd_summary_parse(data, size, &sums, &n, &info, &err) != CD_OK)
		return 0;
	struct cd_rank_summary **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
	if (ptrs) {
		for (uint32_t i = 0; i < n; i++)
			ptrs[i] = &sums[i];
		for (int json = 0; json < 2; json++) {
			struct cd_out o;
			struct cd_ranks_opts ro = {.json = json};
			cd_out_init(&o, NULL);
			o.hold = true;
			cd_ranks_report(&o, ptrs, (int)n, &ro);
			cd_colls_report(&o, ptrs, (int)n, json);
			cd_out_free(&o);
		}
		/* written back, it reads again */
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		struct cd_summary_info wi = {0};
		if (f && cd_summary_write(f, ptrs, (int)n, &wi, &err) == CD_OK && fclose(f) == 0) {
			if (wi.ranks != n)
				abort();
		} else if (f) {
			fclose(f);
		}
		free(buf);
		free(ptrs);
	}
	for (uint32_t i = 0; i < n; i++)
		cd_rank_summary_free(&sums[i]);
	free(sums);
	return 0;
}
