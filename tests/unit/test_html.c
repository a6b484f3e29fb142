/* Unit tests of the HTML report's page writer (src/views/html/page.c): JSON made safe
 * for a <script> block, text made safe for HTML, and the page's shape. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "check.h"
#include "html/page.h"

/* cd_html_json of s, as a NUL-terminated string (static buffer). */
static const char *js(const char *s, size_t n)
{
	static char buf[4096];
	struct cd_out o;
	cd_out_init(&o, NULL);
	o.hold = true;
	cd_html_json(&o, s, n);
	snprintf(buf, sizeof buf, "%.*s", (int)o.len, o.buf);
	cd_out_free(&o);
	return buf;
}
#define JS(lit) js(lit, sizeof lit - 1)

/* the escaped text means the same JSON value as the original */
static bool same_value(const char *a, const char *b)
{
	cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
	bool same = x && y && cJSON_Compare(x, y, true);
	cJSON_Delete(x);
	cJSON_Delete(y);
	return same;
}

static void test_script_end_in_a_string(void)
{
	const char *in = "{\"fqn\": \"</script><script>alert(1)</script>\"}";
	const char *out = JS("{\"fqn\": \"</script><script>alert(1)</script>\"}");
	CHECK_STR(out, "{\"fqn\":\"\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\"}");
	CHECK(!strchr(out, '<') && !strchr(out, '>'));
	CHECK(same_value(in, out));
}

static void test_comment_and_ampersand(void)
{
	/* "<!--" would switch the script parser into its escaped state */
	const char *out = JS("[\"<!-- a && b -->\"]");
	CHECK_STR(out, "[\"\\u003c!-- a \\u0026\\u0026 b --\\u003e\"]");
	CHECK(same_value("[\"<!-- a && b -->\"]", out));
}

static void test_line_separators(void)
{
	/* U+2028 and U+2029 in UTF-8: line ends to old JavaScript parsers */
	const char in[] = "[\"a\xE2\x80\xA8" "b\xE2\x80\xA9" "c\xE2\x80\xAA\"]";
	const char *out = js(in, sizeof in - 1);
	CHECK_STR(out, "[\"a\\u2028b\\u2029c\xE2\x80\xAA\"]");
	CHECK(same_value(in, out));
}

static void test_whitespace(void)
{
	/* dropped between tokens, kept in strings, also after an escaped quote */
	const char *in = "{\n    \"a b\": [\n        1,\n\t2\r\n    ],\n    \"q\": \"x\\\"  y \\\\\",\n    \"z\": \" \"\n}\n";
	const char *out = js(in, strlen(in));
	CHECK_STR(out, "{\"a b\":[1,2],\"q\":\"x\\\"  y \\\\\",\"z\":\" \"}");
	CHECK(same_value(in, out));
}

static void test_not_json(void)
{
	/* not JSON (an unterminated string): still no way out of the block */
	const char *out = JS("\"</script");
	CHECK_STR(out, "\"\\u003c/script");
	CHECK(!strchr(out, '<'));
}

static void test_text(void)
{
	struct cd_out o;
	cd_out_init(&o, NULL);
	o.hold = true;
	cd_html_text(&o, "a<b>&\"c'");
	cd_out_write(&o, "", 1);
	CHECK_STR(o.buf, "a&lt;b&gt;&amp;&quot;c&#39;");
	cd_out_free(&o);
}

static void test_page(void)
{
	struct cd_out o;
	const char data[] = "{\"x\": \"</script>\"}";
	struct cd_html_part parts[] = {{"tree", data, sizeof data - 1}};
	cd_out_init(&o, NULL);
	o.hold = true;
	cd_html_page(&o, "t</title>", parts, 1);
	cd_out_write(&o, "", 1);
	CHECK(strncmp(o.buf, "<!DOCTYPE html>", 15) == 0);
	CHECK(strstr(o.buf, "<title>t&lt;/title&gt;</title>") != NULL);
	CHECK(strstr(o.buf, "<script type=\"application/json\" id=\"cd-tree\">"
			    "{\"x\":\"\\u003c/script\\u003e\"}</script>") != NULL);
	CHECK(strstr(o.buf, "Content-Security-Policy") != NULL);
	/* the only closing script tags: the data block's and the script's */
	int n = 0;
	for (const char *p = o.buf; (p = strstr(p, "</script>")); p++)
		n++;
	CHECK(n == 2);
	/* nothing is fetched: no src= or href= to anything but data: */
	CHECK(strstr(o.buf, "src=") == NULL);
	CHECK(strstr(o.buf, "http://") == NULL && strstr(o.buf, "https://") == NULL);
	cd_out_free(&o);
}

int main(void)
{
	TEST(test_script_end_in_a_string);
	TEST(test_comment_and_ampersand);
	TEST(test_line_separators);
	TEST(test_whitespace);
	TEST(test_not_json);
	TEST(test_text);
	TEST(test_page);
	return check_done();
}
