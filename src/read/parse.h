/* Line parsers: one JSON Lines line -> struct cd_event.
 *
 * cd_parse_fast is the hand-written scanner used for every line; it never
 * allocates per value and keeps strings as slices of the line.
 * cd_parse_general builds a cJSON tree and walks it; it is the reference
 * the fast path is checked against (tests, fuzzer, --parser=general).
 * Both accept the same events and store them through the same field table;
 * the fast scanner is at least as strict (it also rejects invalid UTF-8,
 * NUL characters in strings, and fractions in integer fields). */
#ifndef CD_PARSE_H
#define CD_PARSE_H

#include <stddef.h>

#include "event.h"

struct cd_list_cache;

struct cd_parser {
	struct cd_arena arena;
	void *tree;   /* general path: the cJSON tree of the last line */
	/* Skip (while still checking the JSON syntax of) the "args" and
	 * "params" lists, for reports that do not use them: their types and
	 * keys are then not checked, by either parser. */
	bool skip_detail;
	/* cd_parse_line: the cJSON parser instead of the fast scanner */
	bool general;
	/* cd_parse_line's event, and the fields (bits 1 << enum cd_fid) its
	 * last parse may have set: only those are cleared for the next line.
	 * A zeroed parser is ready. */
	struct cd_event ev;
	uint64_t dirty;
	/* the fast path: args and params lists met before (parse_fast.c) */
	struct cd_list_cache *lcache;
};

/* line need not be NUL-terminated and excludes the newline.  On error
 * err->column is the 1-based byte column where parsing stopped (0 if not
 * meaningful).  The event (and err) is valid until the next call. */
enum cd_status cd_parse_fast(struct cd_parser *ps, const char *line, size_t n,
			     struct cd_event *e, struct cd_err *err);
enum cd_status cd_parse_general(struct cd_parser *ps, const char *line, size_t n,
				struct cd_event *e, struct cd_err *err);

/* A stream of lines: the next one into the parser's own event, which *e
 * points to (also on error; valid until the next call with ps).  The same
 * result as cd_parse_fast (cd_parse_general when ps->general), without
 * clearing the whole event for every line. */
enum cd_status cd_parse_line(struct cd_parser *ps, const char *line, size_t n,
			     const struct cd_event **e, struct cd_err *err);

void cd_parser_free(struct cd_parser *ps);

#endif
