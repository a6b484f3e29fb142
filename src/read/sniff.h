/* What a file that is not what a command expected looks like: the wrong
 * file given by mistake (a Python script for a trace, a trace for the
 * expectations, arguments swapped, a gzip file, the HTML page `report`
 * wrote) said in words, instead of the parser's first complaint.
 *
 * Called only once reading failed at the start of the input (the trace's
 * first line did not parse, the expectations file did not load): a valid
 * input is never sniffed.  It recognizes positively or says nothing: plain
 * text, or a trace cut inside its first line, gets NULL and the reader's
 * own message stands.
 *
 * Pure: no I/O, no allocation, no printing; looks at most CD_SNIFF_BYTES. */
#ifndef CD_SNIFF_H
#define CD_SNIFF_H

#include <stddef.h>

#define CD_SNIFF_BYTES 4096

/* What the input should have been: it is never reported as that. */
enum cd_sniff_want {
	CD_SNIFF_WANT_TRACE,    /* a commdebug trace (JSON Lines, plain or zstd) */
	CD_SNIFF_WANT_YAML,     /* an expectations file (YAML) */
};

/* The first n bytes of the input (from its start, or from its first
 * non-blank line).  Returns a static clause that follows "not a commdebug
 * trace: " or "not an expectations file: " ("it looks like Python source",
 * "it is gzip-compressed data (...)"), or NULL when it cannot tell. */
const char *cd_sniff(const void *data, size_t n, enum cd_sniff_want want);

#endif
