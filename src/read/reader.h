/* Trace input: a file or standard input, zstd (detected by magic number,
 * any number of concatenated frames) or plain JSON Lines.  A background
 * thread reads and decompresses while the caller parses, and hands over
 * chunks that hold only whole lines (the last chunk may end without a
 * newline when the input does). */
#ifndef CD_READER_H
#define CD_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"

/* Longest line accepted, in bytes without its newline; the same for plain
 * and zstd input.  A longer line is a CD_ERR_LIMIT error whose message
 * gives the byte offset where it starts (in the decompressed data for
 * zstd input). */
#define CD_MAX_LINE (64u << 20)

struct cd_reader;

/* Open path ("-" for standard input) and start the reader thread (none in
 * inline mode, below).  On success *out must be released with
 * cd_reader_close(). */
enum cd_status cd_reader_open(const char *path, struct cd_reader **out, struct cd_err *err);

/* The next chunk: CD_OK with *buf and *len set (valid until the next call),
 * CD_END at the end of input, or an error (err filled; its message names the
 * byte offset in the file where that helps). */
enum cd_status cd_reader_next(struct cd_reader *r, const char **buf, size_t *len,
			      struct cd_err *err);

/* zstd input: frames met so far, and how many of them carry no content
 * checksum (their data cannot be verified).  A frame whose checksum does
 * not match is a CD_ERR_FORMAT error naming the byte where it starts. */
void cd_reader_frames(const struct cd_reader *r, uint64_t *frames, uint64_t *unchecked);

/* After CD_END: did the input stop inside a zstd frame? */
bool cd_reader_frame_cut(const struct cd_reader *r);
bool cd_reader_is_zstd(const struct cd_reader *r);
/* Bytes read from the file so far (compressed bytes for zstd). */
uint64_t cd_reader_file_bytes(const struct cd_reader *r);
/* Decompressed bytes handed out so far. */
uint64_t cd_reader_data_bytes(const struct cd_reader *r);

void cd_reader_close(struct cd_reader *r);

/* Inline mode for the readers the calling thread opens from now on: no
 * thread of their own, cd_reader_next reads and decompresses the next
 * chunk itself.  For a thread that is one of several reading inputs side by
 * side (the runner, run.c, with more inputs than threads), where the
 * handing over of chunks between two threads only costs. */
void cd_reader_set_inline(bool on);

/* Up to n of the first bytes of the regular file at path into buf, without
 * blocking (a FIFO, a device, "-" are not read): how many, or -1 when it is
 * not a regular file or cannot be read.  For telling inputs by their
 * content. */
long cd_reader_peek_file(const char *path, void *buf, size_t n);

#endif
