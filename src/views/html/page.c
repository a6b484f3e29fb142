/* The HTML report page: see page.h. */
#include "page.h"

#include <stdbool.h>

#include "report_assets.h"   /* cd_report_css, cd_report_js (report.css, report.js; embed.py) */

void cd_html_text(struct cd_out *o, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': cd_out_str(o, "&amp;"); break;
		case '<': cd_out_str(o, "&lt;"); break;
		case '>': cd_out_str(o, "&gt;"); break;
		case '"': cd_out_str(o, "&quot;"); break;
		case '\'': cd_out_str(o, "&#39;"); break;
		default: cd_out_write(o, s, 1);
		}
	}
}

void cd_html_json(struct cd_out *o, const char *json, size_t len)
{
	bool in_str = false, esc = false;
	size_t run = 0; /* start of bytes not written yet */

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)json[i];
		const char *rep = NULL;
		size_t skip = 1;

		if (c == '<')
			rep = "\\u003c";
		else if (c == '>')
			rep = "\\u003e";
		else if (c == '&')
			rep = "\\u0026";
		else if (c == 0xE2 && i + 2 < len && (unsigned char)json[i + 1] == 0x80 &&
			 ((unsigned char)json[i + 2] == 0xA8 || (unsigned char)json[i + 2] == 0xA9)) {
			rep = (unsigned char)json[i + 2] == 0xA8 ? "\\u2028" : "\\u2029";
			skip = 3;
		} else if (in_str) {
			if (esc)
				esc = false;
			else if (c == '\\')
				esc = true;
			else if (c == '"')
				in_str = false;
			continue;
		} else if (c == '"') {
			in_str = true;
			continue;
		} else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			rep = "";
		} else {
			continue;
		}
		/* an escape inside a string ends a pending backslash escape: the
		 * bytes replaced here are never the letter after a backslash */
		esc = false;
		cd_out_write(o, json + run, i - run);
		cd_out_str(o, rep);
		i += skip - 1;
		run = i + 1;
	}
	cd_out_write(o, json + run, len - run);
}

void cd_html_page(struct cd_out *o, const char *title, const struct cd_html_part *parts,
		  size_t nparts)
{
	cd_out_str(o, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
		      /* nothing is fetched: no network, whatever the data hold */
		      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
		      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
		      "<meta name=\"generator\" content=\"commdebug " CD_VERSION "\">\n<title>");
	cd_html_text(o, title);
	cd_out_str(o, "</title>\n<style>\n");
	cd_out_str(o, cd_report_css);
	cd_out_str(o, "</style>\n</head>\n<body>\n"
		      "<noscript><p>This report is drawn by its inline script: open it in a browser "
		      "with JavaScript on.</p></noscript>\n<main id=\"app\"></main>\n");
	for (size_t i = 0; i < nparts; i++) {
		cd_out_str(o, "<script type=\"application/json\" id=\"cd-");
		cd_html_text(o, parts[i].id);
		cd_out_str(o, "\">");
		cd_html_json(o, parts[i].json, parts[i].len);
		cd_out_str(o, "</script>\n");
	}
	cd_out_str(o, "<script>\n");
	cd_out_str(o, cd_report_js);
	cd_out_str(o, "</script>\n</body>\n</html>\n");
}
