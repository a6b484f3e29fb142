#include "sniff.h"

#include <stdbool.h>
#include <string.h>

#define SWAPPED "check takes the expectations file first: commdebug check EXPECT.yaml TRACE..."
#define DECOMPRESS "commdebug reads JSON Lines, plain or zstd-compressed"

/* Magic numbers at the very start.  for_trace: reported when a trace is
 * wanted too (zstd is how traces are compressed: only the YAML side refuses
 * it, the trace side leaves it to the reader). */
static const struct magic {
	const char *bytes;
	size_t n;
	bool for_trace;
	const char *what;
} magics[] = {
	{"\x1f\x8b", 2, true, "it is gzip-compressed data (" DECOMPRESS ": gunzip it first)"},
	{"BZh", 3, true, "it is bzip2-compressed data (" DECOMPRESS ": bunzip2 it first)"},
	{"\xfd" "7zXZ\0", 6, true, "it is xz-compressed data (" DECOMPRESS ": unxz it first)"},
	{"\x28\xb5\x2f\xfd", 4, false,
	 "it is zstd-compressed data, a commdebug trace? (" SWAPPED ")"},
	{"commdebug summary\n", 18, true,
	 "it is a commdebug summary file (`commdebug summarize`): ranks, colls, export and "
	 "report read it; the other commands need the traces"},
	{"\x89PNG\r\n\x1a\n", 8, true, "it is a PNG image"},
	{"\xff\xd8\xff", 3, true, "it is a JPEG image"},
	{"GIF8", 4, true, "it is a GIF image"},
	{"%PDF-", 5, true, "it is a PDF document"},
	{"\x7f" "ELF", 4, true, "it is an ELF executable or library"},
	{"PK\x03\x04", 4, true, "it is a zip archive"},
	{"PK\x05\x06", 4, true, "it is a zip archive (empty)"},
};

static bool starts(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);
	return (size_t)(end - p) >= n && memcmp(p, s, n) == 0;
}

static bool starts_nocase(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);
	if ((size_t)(end - p) < n)
		return false;
	for (size_t k = 0; k < n; k++) {
		char c = p[k];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != s[k])
			return false;
	}
	return true;
}

static bool is_ident(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* An identifier at p: its end, or p when none. */
static const char *ident(const char *p, const char *end)
{
	const char *q = p;
	if (q < end && is_ident(*q, true))
		for (q++; q < end && (is_ident(*q, false) || *q == '.'); q++)
			;
	return q;
}

static bool contains(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);
	for (; (size_t)(end - p) >= n; p++)
		if (memcmp(p, s, n) == 0)
			return true;
	return false;
}

static const char *const PYTHON = "it looks like Python source";
static const char *const SHELL = "it looks like a shell script";
static const char *const C_SRC = "it looks like C source";
static const char *const YAML =
	"it looks like YAML, an expectations file? (" SWAPPED ")";

/* The first line that says something: comments and blank lines are
 * passed over (C comment blocks too); NULL when it says nothing known. */
static const char *by_lines(const char *p, const char *end, enum cd_sniff_want want)
{
	bool in_block = false;
	for (int lines = 0; p < end && lines < 64; lines++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end, *next = nl ? nl + 1 : end;
		if (le > p && le[-1] == '\r')
			le--;
		const char *s = p;
		while (s < le && (*s == ' ' || *s == '\t'))
			s++;
		if (lines == 0 && starts(p, le, "#!")) {
			if (contains(p, le, "python"))
				return PYTHON;
			if (contains(p, le, "sh"))
				return SHELL;
			return "it is a script (its first line starts with #!)";
		}
		if (in_block) {
			if (contains(s, le, "*/"))
				in_block = false;
			p = next;
			continue;
		}
		if (s == le) {
			p = next;
			continue;
		}
		if (*s == '#') {
			static const char *const dirs[] = {"#include", "#define", "#ifndef", "#ifdef",
							   "#pragma", "#if ", "#undef"};
			for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++)
				if (starts(s, le, dirs[k]))
					return C_SRC;
			p = next;   /* a comment (Python, shell, YAML) */
			continue;
		}
		if (starts(s, le, "//")) {
			p = next;
			continue;
		}
		if (starts(s, le, "/*")) {
			in_block = !contains(s + 2, le, "*/");
			p = next;
			continue;
		}
		/* Python */
		if (starts(s, le, "\"\"\"") || starts(s, le, "'''"))
			return PYTHON;
		if (starts(s, le, "import ") && ident(s + 7, le) > s + 7)
			return PYTHON;
		if (starts(s, le, "from ")) {
			const char *q = ident(s + 5, le);
			if (q > s + 5 && starts(q, le, " import "))
				return PYTHON;
		}
		if (starts(s, le, "async def ") || starts(s, le, "if __name__"))
			return PYTHON;
		if (starts(s, le, "def ") && ident(s + 4, le) > s + 4)
			return PYTHON;
		if (starts(s, le, "class ")) {
			const char *q = ident(s + 6, le);
			if (q > s + 6 && q < le && (*q == '(' || *q == ':'))
				return PYTHON;
		}
		if (*s == '@' && ident(s + 1, le) > s + 1)
			return PYTHON;
		/* shell */
		static const char *const sh[] = {"set -", "export ", "echo ", "source ", "exec ",
						 "if [ ", "if [[ ", "unset "};
		for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++)
			if (starts(s, le, sh[k]))
				return SHELL;
		const char *q = ident(s, le);
		if (q > s && q < le && *q == '=' && (q + 1 == le || q[1] != '=') && !memchr(s, '.', (size_t)(q - s)))
			return SHELL;   /* NAME=value */
		/* C */
		static const char *const c[] = {"int main(", "static ", "struct ", "typedef ",
						"void ", "extern ", "const ", "enum ", "union "};
		for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
			if (starts(s, le, c[k]))
				return C_SRC;
		/* YAML: a document start, "key:", "- item" */
		bool yaml = (starts(s, le, "---") && (s + 3 == le || s[3] == ' ')) ||
			    starts(s, le, "- ") ||
			    (q > s && q < le && *q == ':' && (q + 1 == le || q[1] == ' '));
		if (yaml)
			return want == CD_SNIFF_WANT_YAML ? NULL : YAML;
		return NULL;
	}
	return NULL;
}

const char *cd_sniff(const void *data, size_t n, enum cd_sniff_want want)
{
	const char *b = data;
	if (!b || !n)
		return NULL;
	if (n > CD_SNIFF_BYTES)
		n = CD_SNIFF_BYTES;
	const char *end = b + n;

	for (size_t k = 0; k < sizeof magics / sizeof magics[0]; k++)
		if (n >= magics[k].n && memcmp(b, magics[k].bytes, magics[k].n) == 0)
			return magics[k].for_trace || want != CD_SNIFF_WANT_TRACE ? magics[k].what
										    : NULL;

	/* binary: a NUL, or many control bytes */
	size_t ctl = 0;
	for (const char *p = b; p < end; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == 0)
			return "it holds binary data";
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1b)
			ctl++;
	}
	if (ctl * 10 > n)
		return "it holds binary data";

	const char *p = b;
	if (starts(p, end, "\xef\xbb\xbf"))
		p += 3;
	const char *s = p;
	while (s < end && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'))
		s++;
	if (s == end)
		return NULL;
	if (*s == '{') {
		const char *k = s + 1;
		while (k < end && (*k == ' ' || *k == '\t' || *k == '\r' || *k == '\n'))
			k++;
		if (starts(k, end, "\"traceEvents\""))
			return "it is Chrome trace-event JSON, as commdebug export writes it "
			       "(open it in Perfetto)";
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		if (want == CD_SNIFF_WANT_YAML && contains(s, nl ? nl : end, "\"ev\""))
			return "it is a commdebug trace (" SWAPPED ")";
		return NULL;   /* a commdebug trace's first line, cut or damaged */
	}
	if (*s == '[') {
		if (contains(s, end, "\"ph\""))
			return "it is Chrome trace-event JSON, an array of events (open it in "
			       "Perfetto)";
		return want == CD_SNIFF_WANT_TRACE ? "it is a JSON array (a commdebug trace holds "
						     "one JSON object per line)" : NULL;
	}
	if (*s == '<') {
		if (starts_nocase(s, end, "<!doctype html") || starts_nocase(s, end, "<html"))
			return "it is an HTML page, as commdebug report writes it (open it in a "
			       "browser)";
		if (starts(s, end, "<?xml"))
			return "it is an XML document";
		return NULL;
	}
	return by_lines(p, end, want);
}
