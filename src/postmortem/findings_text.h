/* The findings in words (findings_text.c): the one-line sentence of a
 * finding, as `ranks` prints it and `export` marks it on the timeline, and
 * the pieces it is made of, which the post-mortem's printer
 * (ranks_report.c) uses for its other lines.  Each writes to o; none
 * ends a line unless it says so. */
#ifndef CD_FINDINGS_TEXT_H
#define CD_FINDINGS_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "findings.h"
#include "../util/out.h"
#include "ranks.h"

/* "rank 3" or "ranks 0-2,4-7": idx[0..n) index pm->r. */
void cd_text_ranks(struct cd_out *o, const struct cd_pm *pm, const int *idx, uint32_t n);
/* Rank numbers v[0..n) (ascending) without "ranks ": "0-2,4", or "2-8186
 * by 8 except 1234" for four or more evenly spaced ones. */
void cd_text_rank_list(struct cd_out *o, const int64_t *v, uint32_t n);
/* "region 3 "step 3"" (the label from s), or "outside any region" (region < 0). */
void cd_text_region(struct cd_out *o, const struct cd_rank_summary *s, int64_t region);
/* "c10d.allreduce_ of 4096 bytes torch.float32" */
void cd_text_payload(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c);
/* Where each enum cd_source comes from, in words ("Flight Recorder dump
 * (pickle)"). */
extern const char *cd_source_names[];
/* "train_step at /job/train.py:110": frame k of s->frames. */
void cd_text_frame(struct cd_out *o, const struct cd_rank_summary *s, uint32_t k);
/* A dump's state of a collective in words, NULL when the dump tracks no
 * states (gloo's entries stay "scheduled"). */
const char *cd_text_fr_state(const struct cd_rank_summary *s, const struct cd_fr_crec *fc);
/* "from Net.blocks.1 (forward, region 3 "step 3")" */
void cd_text_where(struct cd_out *o, const struct cd_rank_summary *s, const struct cd_crec *c);
/* " after region 3 "step 3"", " inside region 4 "step 4"" or " before its
 * first region": where a process stood when it ended. */
void cd_text_where_end(struct cd_out *o, const struct cd_rank_summary *s);
/* How the process ended, from its end event (or its absence), with where
 * it stood when where: "ended by an exception inside region 2 "step 2":
 * RuntimeError: boom". */
void cd_text_death(struct cd_out *o, const struct cd_rank_summary *s, bool where);
/* The sentence that names finding f's culprit (its kind, rank(s), module,
 * step and what decided it), with a newline. */
void cd_finding_headline(struct cd_out *o, const struct cd_pm *pm, const struct cd_finding *f);

#endif
