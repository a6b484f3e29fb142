/* Unit tests of the wrong-file sniffer (sniff.h): each kind it names, and
 * what it must leave alone (a commdebug trace, however damaged, plain text,
 * the expectations file when YAML is wanted). */
#include <stdbool.h>

#include "check.h"
#include "sniff.h"

#define T CD_SNIFF_WANT_TRACE
#define Y CD_SNIFF_WANT_YAML

/* sizeof - 1: the literal's bytes, NULs included */
#define SNIFF(lit, want) cd_sniff(lit, sizeof(lit) - 1, want)

static bool has(const char *got, const char *part)
{
	return got && strstr(got, part) != NULL;
}

static void test_source(void)
{
	CHECK_STR(SNIFF("import torch\n", T), "it looks like Python source");
	CHECK_STR(SNIFF("# Copyright\n\n\"\"\"Train.\"\"\"\nimport os\n", T),
		  "it looks like Python source");
	CHECK_STR(SNIFF("from torch import nn\n", T), "it looks like Python source");
	CHECK_STR(SNIFF("def main():\n    pass\n", T), "it looks like Python source");
	CHECK_STR(SNIFF("class Net(nn.Module):\n", T), "it looks like Python source");
	CHECK_STR(SNIFF("#!/usr/bin/env python3\nprint(1)\n", T), "it looks like Python source");
	CHECK_STR(SNIFF("#!/bin/bash\ntorchrun x.py\n", T), "it looks like a shell script");
	CHECK_STR(SNIFF("# run it\nset -eu\n", T), "it looks like a shell script");
	CHECK_STR(SNIFF("NCCL_DEBUG=INFO torchrun x.py\n", T), "it looks like a shell script");
	CHECK_STR(SNIFF("#!/usr/bin/perl\n", T), "it is a script (its first line starts with #!)");
	CHECK_STR(SNIFF("/* a\n * C file\n */\n#include <stdio.h>\n", T), "it looks like C source");
	CHECK_STR(SNIFF("// x\nstatic int f(void);\n", T), "it looks like C source");
	CHECK_STR(SNIFF("#define X 1\n", T), "it looks like C source");
	/* the same when YAML is wanted */
	CHECK_STR(SNIFF("import torch\n", Y), "it looks like Python source");
}

static void test_yaml(void)
{
	CHECK(has(SNIFF("# expectations\nversion: 1\nexpect:\n", T), "it looks like YAML"));
	CHECK(has(SNIFF("---\nversion: 1\n", T), "it looks like YAML"));
	CHECK(has(SNIFF("- total: 1\n", T), "check takes the expectations file first"));
	/* YAML is what the expectations loader wants: never reported there */
	CHECK(SNIFF("version: 1\nexpect: [\n", Y) == NULL);
	CHECK(SNIFF("---\n- a\n", Y) == NULL);
	/* "from: 3" and "class: x" are YAML keys, not Python */
	CHECK(has(SNIFF("from: 3\n", T), "YAML"));
	CHECK(has(SNIFF("class: x\n", T), "YAML"));
}

static void test_magic(void)
{
	CHECK(has(SNIFF("\x1f\x8b\x08\x00\x00\x00", T), "gzip-compressed"));
	CHECK(has(SNIFF("BZh91AY&SY", T), "bzip2-compressed"));
	CHECK(has(SNIFF("\xfd" "7zXZ\0\0", T), "xz-compressed"));
	CHECK_STR(SNIFF("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", T), "it is a PNG image");
	CHECK_STR(SNIFF("\xff\xd8\xff\xe0", T), "it is a JPEG image");
	CHECK_STR(SNIFF("%PDF-1.7\n", T), "it is a PDF document");
	CHECK_STR(SNIFF("\x7f" "ELF\2\1\1", T), "it is an ELF executable or library");
	CHECK_STR(SNIFF("PK\x03\x04\x14\0", T), "it is a zip archive");
	/* zstd is how traces come: refused only where YAML is wanted */
	CHECK(SNIFF("\x28\xb5\x2f\xfd\x04\x58", T) == NULL);
	CHECK(has(SNIFF("\x28\xb5\x2f\xfd\x04\x58", Y), "zstd-compressed data, a commdebug trace?"));
	CHECK(has(SNIFF("\x1f\x8b\x08", Y), "gzip"));
	/* a magic number must be whole */
	CHECK(SNIFF("\x89PN", T) == NULL);
}

static void test_binary(void)
{
	CHECK_STR(SNIFF("\0\0\0\0\0\0\0\0", T), "it holds binary data");
	CHECK_STR(SNIFF("ab\0cd\n", T), "it holds binary data");
	CHECK_STR(SNIFF("\x01\x02\x03\x04\x05\x06xyz\n", T), "it holds binary data");
	/* tabs, CR, escape sequences: text */
	CHECK(SNIFF("hello\tworld\r\n\x1b[1m\n", T) == NULL);
}

static void test_json(void)
{
	CHECK(has(SNIFF("{\"traceEvents\":[\n{\"ph\":\"M\"}\n", T), "Chrome trace-event JSON"));
	CHECK(has(SNIFF("{ \"traceEvents\" : []}", T), "commdebug export"));
	CHECK(has(SNIFF("[{\"name\":\"x\",\"ph\":\"X\",\"ts\":0}]\n", T), "an array of events"));
	CHECK(has(SNIFF("[1, 2, 3]\n", T), "a JSON array"));
	CHECK(SNIFF("[1, 2, 3]\n", Y) == NULL);
	CHECK(has(SNIFF("{\"traceEvents\":[", Y), "Chrome trace-event JSON"));
	/* a commdebug trace, where YAML is wanted: the arguments swapped */
	CHECK(has(SNIFF("{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1}\n"
			"{\"ev\":\"region_enter\"}\n", Y), "it is a commdebug trace"));
}

static void test_html(void)
{
	CHECK(has(SNIFF("<!DOCTYPE html>\n<html lang=\"en\">\n", T), "an HTML page"));
	CHECK(has(SNIFF("\n  <html>\n", Y), "commdebug report"));
	CHECK(has(SNIFF("<!doctype HTML>", T), "HTML"));
	CHECK_STR(SNIFF("<?xml version=\"1.0\"?>\n", T), "it is an XML document");
	CHECK(SNIFF("<foo>\n", T) == NULL);
}

static void test_leaves_alone(void)
{
	/* a commdebug trace's first line, cut or damaged: the reader's message */
	CHECK(SNIFF("{\"ev\":\"meta\",\"form", T) == NULL);
	CHECK(SNIFF("{\"ev\":\"meta\",,}\n", T) == NULL);
	CHECK(SNIFF("{\"ev\":\"region_enter\",\"region\":1}\n", T) == NULL);
	/* plain text, nothing known */
	CHECK(SNIFF("hello world\n", T) == NULL);
	CHECK(SNIFF("garbage\n", T) == NULL);
	CHECK(SNIFF("", T) == NULL);
	CHECK(cd_sniff(NULL, 0, T) == NULL);
	CHECK(SNIFF("\n\n   \n", T) == NULL);
	CHECK(SNIFF("# only a comment\n", T) == NULL);
	/* BOM, then YAML */
	CHECK(has(SNIFF("\xef\xbb\xbfversion: 1\n", T), "YAML"));
	/* only the first CD_SNIFF_BYTES are looked at: a NUL past them is not seen */
	static char big[CD_SNIFF_BYTES + 16];
	memset(big, 'a', sizeof big);
	big[0] = 'x';
	big[1] = ' ';
	big[CD_SNIFF_BYTES + 4] = 0;
	CHECK(cd_sniff(big, sizeof big, T) == NULL);
	big[CD_SNIFF_BYTES - 1] = 0;
	CHECK_STR(cd_sniff(big, sizeof big, T), "it holds binary data");
}

int main(void)
{
	TEST(test_source);
	TEST(test_yaml);
	TEST(test_magic);
	TEST(test_binary);
	TEST(test_json);
	TEST(test_html);
	TEST(test_leaves_alone);
	return check_done();
}
