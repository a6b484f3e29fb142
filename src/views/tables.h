/* The tables of analyze, counts and sharding: the state of one replayed
 * region -> CommDebugMode's text or JSON (commdebug report's page embeds
 * their JSON; the page itself is cmd_report.c and html/page.c).
 * A report reads the replay state and writes to a struct cd_out; it never
 * reads files and never prints diagnostics (warnings go to warn()). */
#ifndef CD_TABLES_H
#define CD_TABLES_H

#include <stdbool.h>

#include "../util/out.h"
#include "../replay/replay.h"

/* Rendered JSON op objects, reused across modules and regions of one
 * replay (ops repeat a lot).  Zero-initialise; free with
 * cd_report_cache_free(). */
struct cd_report_cache {
	struct cd_cache_slot *slots;
	uint32_t nslots, count;
	char *text;
	size_t len, cap;
};
void cd_report_cache_free(struct cd_report_cache *c);

struct cd_report_opts {
	int noise;      /* 0..3 */
	bool color;     /* ANSI escapes as CommDebugMode prints them */
	struct cd_report_cache *cache;  /* may be NULL */
	/* JSON dump: at most this many ops in each op list (0: every op); a list
	 * cut short is followed by "<its key>_omitted": the number left out */
	uint64_t max_ops;
	void (*warn)(void *ud, const char *msg);
	void *ud;
};

/* generate_comm_debug_tracing_table(noise_level); without colour it equals
 * log_comm_debug_tracing_table_to_file's text. */
void cd_report_table(struct cd_out *o, const struct cd_replay *r, const struct cd_report_opts *ro);

/* generate_json_dump(noise_level), plus a newline.  Needs want_tree. */
void cd_report_json(struct cd_out *o, const struct cd_replay *r, const struct cd_report_opts *ro);

/* get_total_counts / get_comm_counts, and the collectives seen outside
 * the dispatcher. */
void cd_report_counts(struct cd_out *o, const struct cd_replay *r, bool json);

/* get_parameter_info / get_sharding_info.  Needs want_params. */
void cd_report_sharding(struct cd_out *o, const struct cd_replay *r, bool json);

#endif
