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
	CHECK(strstr(err.msg, "corrupt zstd data near byte") != NULL);
	free(got);
	free(d);
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
	TEST(test_plain_roundtrip);
	TEST(test_zstd_frames);
	TEST(test_zstd_cut);
	TEST(test_long_line);
	TEST(test_corrupt);
	TEST(test_missing_and_empty);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 2;
	return check_done();
}
