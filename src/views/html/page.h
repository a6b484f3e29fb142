/* The self-contained HTML report (commdebug report): one page with its
 * style, its script and its data inline, so that it opens from file://
 * without a network.
 *
 * The data are JSON documents made by the other reports (the JSON dump,
 * the counts, the post-mortem, the NCCL traffic), each embedded as it is in
 * a <script type="application/json" id="cd-ID"> block, with the whitespace
 * between tokens dropped and every character that could end the block or
 * confuse the HTML parser escaped ('<', '>', '&', U+2028, U+2029).  The
 * script (report.js, beside this file) builds the page from them in the browser.
 *
 * Like every report this writes to a struct cd_out and never prints,
 * reads files or exits. */
#ifndef CD_HTML_PAGE_H
#define CD_HTML_PAGE_H

#include <stddef.h>

#include "../../util/out.h"

/* One JSON document of the page.  The caller owns the strings. */
struct cd_html_part {
	const char *id;     /* the block's id is "cd-" id: [a-z0-9-] only */
	const char *json;   /* JSON text, any layout */
	size_t len;
};

/* The page: title (any text; escaped) and the JSON documents, in order. */
void cd_html_page(struct cd_out *o, const char *title, const struct cd_html_part *parts,
		  size_t nparts);

/* JSON text as it may stand inside a <script> block: the same JSON value
 * without whitespace between tokens, '<', '>' and '&' written as \u003c,
 * \u003e and \u0026, and U+2028 and U+2029 (in UTF-8) as \u2028 and \u2029.
 * Text that is not JSON is copied with the same escapes, so that it can
 * never end the block either. */
void cd_html_json(struct cd_out *o, const char *json, size_t len);

/* Text as HTML character data or attribute value: & < > " ' escaped. */
void cd_html_text(struct cd_out *o, const char *s);

#endif
