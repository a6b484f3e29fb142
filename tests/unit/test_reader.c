/* Unit tests of the reader: plain and zstd input, concatenated frames,
 * lines across chunk boundaries, cut and corrupt input. */
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include "check.h"
#include "reader.h"

static char dir[] = "/tmp/cd-reader-XXXXXX";

static char *path_of(const char *name)
{
	static char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return p;
}

static void write_file(const char *name, const void *data, size_t n)
{
	FILE *f = fopen(path_of(name), "wb");
	fwrite(data, 1, n, f);
	fclose(f);
}

/* Write data as zstd, split into frames of frame_size bytes. */
static size_t write_zstd(const char *name, const char *data, size_t n, size_t frame_size,
			 size_t cut)
{
	size_t cap = ZSTD_compressBound(n) + 64 * (n / frame_size + 1);
	char *out = malloc(cap);
	size_t o = 0;
	for (size_t off = 0; off < n; off += frame_size) {
		size_t len = n - off < frame_size ? n - off : frame_size;
		o += ZSTD_compress(out + o, cap - o, data + off, len, 3);
	}
	if (cut)
		o -= cut;
	write_file(name, out, o);
	free(out);
	return o;
}

/* Read everything back; returns status of the final call. */
static enum cd_status read_all(const char *name, char **data, size_t *n, bool *frame_cut,
			       struct cd_err *err)
{
	struct cd_reader *r;
	enum cd_status st = cd_reader_open(path_of(name), &r, err);
	*data = NULL;
	*n = 0;
	if (st)
		return st;
	for (;;) {
		const char *buf;
		size_t len;
		st = cd_reader_next(r, &buf, &len, err);
		if (st)
			break;
		/* every chunk but the last ends with a newline */
		*data = realloc(*data, *n + len + 1);
		memcpy(*data + *n, buf, len);
		*n += len;
	}
	*frame_cut = cd_reader_frame_cut(r);
	cd_reader_close(r);
	return st;
}

static char *make_lines(size_t count, size_t *n)
{
	char *d = malloc(count * 80);
	size_t o = 0;
	for (size_t i = 0; i < count; i++)
		o += (size_t)sprintf(d + o, "{\"ev\":\"op\",\"name\":\"aten.mm.default\",\"t\":%zu}\n", i);
	*n = o;
	return d;
}

static void test_plain_roundtrip(void)
{
	size_t n;
	char *d = make_lines(60000, &n); /* a few MiB: several chunks */
	write_file("plain.jsonl", d, n);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	CHECK(read_all("plain.jsonl", &got, &gn, &cut, &err) == CD_END);
	CHECK(gn == n && memcmp(got, d, n) == 0);
	CHECK(!cut);
	free(got);
	free(d);
}

static void test_zstd_frames(void)
{
	size_t n;
	char *d = make_lines(60000, &n);
	/* frames that split lines in the middle */
	write_zstd("frames.zst", d, n, 100003, 0);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	CHECK(read_all("frames.zst", &got, &gn, &cut, &err) == CD_END);
	CHECK(gn == n && memcmp(got, d, n) == 0);
	CHECK(!cut);
	free(got);
	free(d);
}

static void test_zstd_cut(void)
{
	size_t n;
	char *d = make_lines(20000, &n);
	write_zstd("cut.zst", d, n, 50000, 100);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	CHECK(read_all("cut.zst", &got, &gn, &cut, &err) == CD_END);
	CHECK(cut);
	CHECK(gn < n && memcmp(got, d, gn) == 0);
	free(got);
	free(d);
}

static void test_long_line(void)
{
	/* one 3 MiB line between two short ones, no final newline */
	size_t big = 3u << 20;
	char *d = malloc(big + 100);
	size_t o = (size_t)sprintf(d, "{\"a\":1}\n{\"s\":\"");
	memset(d + o, 'x', big);
	o += big;
	o += (size_t)sprintf(d + o, "\"}\n{\"b\":2}");
	write_file("long.jsonl", d, o);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	CHECK(read_all("long.jsonl", &got, &gn, &cut, &err) == CD_END);
	CHECK(gn == o && memcmp(got, d, o) == 0);
	free(got);
	free(d);
}

static void test_corrupt(void)
{
	size_t n;
	char *d = make_lines(20000, &n);
	size_t zn = write_zstd("bad.zst", d, n, 1u << 30, 0);
	FILE *f = fopen(path_of("bad.zst"), "r+b");
	fseek(f, (long)(zn / 2), SEEK_SET);
	for (int i = 0; i < 64; i++)
		fputc(0xAA, f);
	fclose(f);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	CHECK(read_all("bad.zst", &got, &gn, &cut, &err) == CD_ERR_FORMAT);
	CHECK(strstr(err.msg, "corrupt zstd data in the frame that starts at byte 0 of the file") !=
	      NULL);
	free(got);
	free(d);
}

/* Frames with a content checksum, each starting at off[i]. */
static size_t write_zstd_checked(const char *name, const char *data, size_t n, size_t frame_size,
				 int checksum, size_t *off, size_t maxoff)
{
	size_t cap = ZSTD_compressBound(n) + 64 * (n / frame_size + 1);
	char *out = malloc(cap);
	size_t o = 0, k = 0;
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum);
	for (size_t at = 0; at < n; at += frame_size) {
		size_t len = n - at < frame_size ? n - at : frame_size;
		if (k < maxoff)
			off[k++] = o;
		o += ZSTD_compress2(c, out + o, cap - o, data + at, len);
	}
	ZSTD_freeCCtx(c);
	write_file(name, out, o);
	free(out);
	return o;
}

static void test_checksum(void)
{
	size_t n, off[8];
	char *d = make_lines(20000, &n);
	size_t zn = write_zstd_checked("sum.zst", d, n, n / 3 + 1, 1, off, 8);
	struct cd_reader *r;
	struct cd_err err = {0};
	char *got;
	size_t gn;
	bool cut;
	uint64_t frames, unchecked;

	/* intact: read, three frames, all checked */
	CHECK(cd_reader_open(path_of("sum.zst"), &r, &err) == CD_OK);
	const char *buf;
	size_t len;
	while (cd_reader_next(r, &buf, &len, &err) == CD_OK)
		;
	cd_reader_frames(r, &frames, &unchecked);
	CHECK(frames == 3 && unchecked == 0);
	cd_reader_close(r);

	/* one flipped bit in the second frame's checksum (its last 4 bytes) */
	FILE *f = fopen(path_of("sum.zst"), "r+b");
	fseek(f, (long)(off[2] - 2), SEEK_SET);
	int c = fgetc(f);
	fseek(f, (long)(off[2] - 2), SEEK_SET);
	fputc(c ^ 0x10, f);
	fclose(f);
	CHECK(read_all("sum.zst", &got, &gn, &cut, &err) == CD_ERR_FORMAT);
	char want[128];
	snprintf(want, sizeof want, "checksum mismatch in the zstd frame that starts at byte %zu ",
		 off[1]);
	CHECK(strstr(err.msg, want) != NULL);
	free(got);
	(void)zn;

	/* without checksums: read as before, and counted */
	write_zstd_checked("nosum.zst", d, n, n / 3 + 1, 0, off, 8);
	CHECK(cd_reader_open(path_of("nosum.zst"), &r, &err) == CD_OK);
	while (cd_reader_next(r, &buf, &len, &err) == CD_OK)
		;
	cd_reader_frames(r, &frames, &unchecked);
	CHECK(frames == 3 && unchecked == 3);
	cd_reader_close(r);
	free(d);
}

/* One limit, CD_MAX_LINE bytes without the newline, for plain and zstd
 * input, with the offset of the line's start in the message. */
static void line_limit_case(const char *name, size_t before, size_t line, bool final_newline,
			    bool zstd, size_t frame)
{
	size_t n;
	char *head = make_lines(before, &n);
	size_t total = n + line + 4;
	char *d = malloc(total);
	memcpy(d, head, n);
	memset(d + n, 'x', line);
	size_t o = n + line;
	if (final_newline) {
		memcpy(d + o, "\nx\n", 3);
		o += 3;
	}
	if (zstd)
		write_zstd(name, d, o, frame, 0);
	else
		write_file(name, d, o);
	char *got;
	size_t gn;
	bool cut;
	struct cd_err err = {0};
	enum cd_status st = read_all(name, &got, &gn, &cut, &err);
	if (line <= CD_MAX_LINE) {
		CHECK(st == CD_END);
		CHECK(gn == o && memcmp(got, d, o) == 0);
	} else {
		char want[160];
		snprintf(want, sizeof want, "line longer than 64 MiB (it starts at byte %zu of the %s)",
			 n, zstd ? "decompressed data" : "file");
		CHECK(st == CD_ERR_LIMIT);
		if (!strstr(err.msg, want))
			fprintf(stderr, "  %s: got \"%s\", want \"%s\"\n", name, err.msg, want);
		CHECK(strstr(err.msg, want) != NULL);
	}
	free(got);
	free(d);
	free(head);
}

static void test_line_limit(void)
{
	for (int z = 0; z <= 1; z++) {
		/* at the limit: read */
		line_limit_case("lim0", 3, CD_MAX_LINE, true, z, 1u << 30);
		/* one byte over: refused, as the first line of a slot, after
		 * some chunks of short lines, and as the last line of the input */
		line_limit_case("lim1", 0, CD_MAX_LINE + 1, true, z, 1u << 30);
		line_limit_case("lim2", 40000, CD_MAX_LINE + 1, true, z, 3u << 20);
		line_limit_case("lim3", 5, CD_MAX_LINE + 1, false, z, 1u << 30);
		/* far over, in one zstd frame (used to pass inside zstd) */
		line_limit_case("lim4", 5, 2 * CD_MAX_LINE, true, z, 1u << 30);
	}
}

static void test_missing_and_empty(void)
{
	struct cd_reader *r;
	struct cd_err err = {0};
	CHECK(cd_reader_open(path_of("nope"), &r, &err) == CD_ERR_IO);
	CHECK(strstr(err.msg, "cannot open") != NULL);
	write_file("empty", "", 0);
	char *got;
	size_t gn;
	bool cut;
	CHECK(read_all("empty", &got, &gn, &cut, &err) == CD_END);
	CHECK(gn == 0);
	free(got);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 2;
	/* every test twice: with a reader thread, then with none
	 * (cd_reader_set_inline) */
	for (int inl = 0; inl < 2; inl++) {
		cd_reader_set_inline(inl);
		TEST(test_plain_roundtrip);
		TEST(test_zstd_frames);
		TEST(test_zstd_cut);
		TEST(test_long_line);
		TEST(test_corrupt);
		TEST(test_checksum);
		TEST(test_line_limit);
		TEST(test_missing_and_empty);
	}
	cd_reader_set_inline(false);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 2;
	return check_done();
}
