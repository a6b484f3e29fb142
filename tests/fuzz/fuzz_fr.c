/* libFuzzer target: Flight Recorder dumps (frdump.h) through both readers:
 * the safe pickle reader and the JSON one (pickle.h), then the dump model
 * over what they accepted.  Seeds: testdata/fr (pickle and JSON dumps). */
#include <stddef.h>
#include <stdint.h>

#include "frdump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cd_pv_doc doc;
	struct cd_fr_dump d;
	struct cd_err err = {0};

	if (cd_pickle_parse(data, size, &doc, &err) == CD_OK)
		cd_pv_doc_free(&doc);
	if (cd_pvjson_parse(data, size, &doc, &err) == CD_OK)
		cd_pv_doc_free(&doc);
	(void)cd_fr_sniff(data, size);
	if (cd_fr_parse(data, size, "fr_rank3", &d, &err) == CD_OK) {
		uint64_t n = 0;
		for (uint32_t g = 0; g < d.n_pgs; g++)
			for (uint32_t k = 0; k < d.pgs[g].n_colls; k++)
				n += (uint64_t)d.entries[d.pgs[g].colls[k]].in_numel;
		(void)n;
		cd_fr_dump_free(&d);
	}
	return 0;
}
