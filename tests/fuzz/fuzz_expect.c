/* libFuzzer target: the expectations reader (YAML -> struct cd_expect) and
 * the scope and bound helpers over what it accepted. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "expect.h"
#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cd_expect x;
	struct cd_err err = {0};
	char buf[96];

	if (cd_expect_parse((const char *)data, size, &x, &err) != CD_OK)
		return 0;
	for (uint32_t i = 0; i < x.sections.n; i++) {
		const struct cd_exp_section *s = &x.sections.v[i];
		(void)cd_scope_has(&s->scope, true, 0, 1, "step 1");
		(void)cd_scope_has(&s->scope, false, 0, 2, NULL);
		if (s->total.set)
			cd_bound_text(&s->total, buf, sizeof buf);
		for (uint32_t k = 0; k < s->colls.n; k++)
			cd_bound_text(&s->colls.v[k].b, buf, sizeof buf);
	}
	cd_expect_free(&x);
	return 0;
}
