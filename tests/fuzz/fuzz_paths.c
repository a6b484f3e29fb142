/* libFuzzer target: the command line's directory expansion, the output
 * check, and merges of several ranks.
 *
 * The input describes a scratch directory: a list of entries, each a kind
 * (regular file, FIFO, directory, symbolic link, hard link), a name and, for
 * files, contents taken from the input.  cd_paths_expand runs over it and
 * must return exactly the regular trace files and the regular files of
 * other names that are Flight Recorder dumps by content, sorted, never a FIFO or
 * anything else that could block; the output check must refuse each of them
 * (and leave it as it was) and accept a new file.  Every trace found is then
 * summarized as a rank and all of them merged, as `commdebug ranks DIR`
 * does. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/paths.h"
#include "frdump.h"
#include "out.h"
#include "ranks.h"
#include "summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ENTRIES 12

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];
	while (d && (e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(p);
		else
			unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Read n bytes of the input, or fewer at its end. */
static size_t take(const uint8_t **p, const uint8_t *end, size_t n)
{
	size_t k = (size_t)(end - *p) < n ? (size_t)(end - *p) : n;
	*p += k;
	return k;
}

static void note(void *ud, const char *path, const char *why)
{
	(void)path;
	(void)why;
	++*(int *)ud;
}

static bool file_equals(const char *path, const uint8_t *d, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	uint8_t *buf = malloc(n + 1);
	size_t got = fread(buf, 1, n + 1, f);
	fclose(f);
	bool same = got == n && (n == 0 || memcmp(buf, d, n) == 0);
	free(buf);
	return same;
}

static bool ends(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && strcmp(s + n - k, suf) == 0;
}

/* A regular file whose first bytes are a Flight Recorder dump's or a
 * summary file's (the oracle for inputs of names no trace has: read here,
 * not by paths.c). */
static bool by_content(const char *path)
{
	uint8_t buf[64];
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	size_t k = fread(buf, 1, sizeof buf, f);
	fclose(f);
	return k > 0 && (cd_fr_sniff(buf, k) || cd_summary_sniff(buf, k));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char dir[] = "/tmp/cd-fuzz-paths-XXXXXX";
	if (!mkdtemp(dir))
		abort();
	const uint8_t *p = data, *end = data + size;
	char names[MAX_ENTRIES][40];
	int kinds[MAX_ENTRIES];
	const uint8_t *content[MAX_ENTRIES];
	size_t clen[MAX_ENTRIES];
	int n = 0;
	char path[256];

	/* entries: kind, name length, name, 2-byte content length, content */
	while (p < end && n < MAX_ENTRIES) {
		int kind = *p++ % 5;
		size_t nl = p < end ? 1 + *p++ % 24 : 1;
		const uint8_t *np = p;
		nl = take(&p, end, nl);
		char *nm = names[n];
		size_t o = 0;
		for (size_t i = 0; i < nl; i++) {
			/* names of trace-like endings more often than not */
			char c = (char)np[i];
			nm[o++] = c == '/' || c == '\0' ? '_' : c;
		}
		static const char *const ext[] = {".zst", ".jsonl", ".json", ".nccl.zst", ""};
		const char *x = ext[nl ? np[0] % 5 : 0];
		memcpy(nm + o, x, strlen(x) + 1);
		if (!strcmp(nm, ".") || !strcmp(nm, "..") || !nm[0])
			continue;
		bool dup = false;
		for (int i = 0; i < n; i++)
			dup |= strcmp(names[i], nm) == 0;
		if (dup)
			continue;
		size_t cl = 0;
		if (end - p >= 2) {
			cl = (size_t)(p[0] | p[1] << 8) % 2048;
			p += 2;
		}
		content[n] = p;
		clen[n] = take(&p, end, cl);
		kinds[n] = kind;
		snprintf(path, sizeof path, "%s/%s", dir, nm);
		switch (kind) {
		case 0: {
			int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0 || write(fd, content[n], clen[n]) != (ssize_t)clen[n])
				abort();
			close(fd);
			break;
		}
		case 1:
			if (mkfifo(path, 0600))
				abort();
			break;
		case 2:
			if (mkdir(path, 0700))
				abort();
			break;
		case 3: /* to an earlier entry, or to nothing */
			if (symlink(n ? names[clen[n] % (size_t)n] : "nowhere", path))
				abort();
			break;
		case 4: { /* a hard link to an earlier regular file, else a file */
			int t = -1;
			for (int i = 0; i < n; i++)
				if (kinds[i] == 0)
					t = i;
			char tp[256];
			if (t >= 0) {
				snprintf(tp, sizeof tp, "%s/%s", dir, names[t]);
				if (link(tp, path))
					abort();
				content[n] = content[t];
				clen[n] = clen[t];
			} else {
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
				if (fd < 0)
					abort();
				close(fd);
				clen[n] = 0;
			}
			kinds[n] = 0;
			break;
		}
		}
		n++;
	}

	struct cd_paths got;
	struct cd_err err = {0};
	const char *bad = NULL;
	int notes = 0;
	char *args[2] = {dir, (char *)"-"};
	bool ok = cd_paths_expand(args, 2, &got, note, &notes, &bad, &err);

	/* what it must find: regular files with trace names (symlinks to them
	 * too; a dangling one is kept for its open to fail) */
	int want = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (!cd_paths_trace_name(names[i])) {
			if (names[i][0] != '.' && !ends(names[i], ".nccl.zst") &&
			    !ends(names[i], ".nccl.jsonl") && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
			    by_content(path))
				want++;
			continue;
		}
		if (stat(path, &st) != 0 || S_ISREG(st.st_mode))
			want++;
	}
	if (!ok) {
		if (want != 0 || bad != dir)
			abort();
	} else {
		if (got.n != want + 1 || strcmp(got.v[got.n - 1], "-") != 0)
			abort();
		size_t dl = strlen(dir);
		for (int i = 0; i < got.n - 1; i++) {
			struct stat st;
			const char *g = got.v[i];
			if (strncmp(g, dir, dl) != 0 || g[dl] != '/' || (!cd_paths_trace_name(g + dl + 1) && !by_content(g)))
				abort();
			if (stat(g, &st) == 0 && !S_ISREG(st.st_mode))
				abort(); /* never a FIFO, a directory... */
			if (i && strcmp(got.v[i - 1], g) >= 0)
				abort(); /* sorted, no repeats (C locale) */
		}

		/* the output check: each trace found is refused and left as it
		 * was; a new file is accepted */
		for (int i = 0; i < got.n - 1; i++) {
			FILE *f = NULL;
			const char *which = NULL;
			struct stat st;
			if (stat(got.v[i], &st) != 0)
				continue;
			const char *base = strrchr(got.v[i], '/') + 1;
			int k = 0;
			while (k < n && strcmp(names[k], base) != 0)
				k++;
			if (cd_paths_open_output(got.v[i], got.v, got.n - 1, &f, &which, &err) !=
			    CD_OUT_IS_INPUT)
				abort();
			if (k < n && kinds[k] == 0 && !file_equals(got.v[i], content[k], clen[k]))
				abort();
		}
		FILE *f = NULL;
		const char *which = NULL;
		/* longer than any generated name */
		snprintf(path, sizeof path, "%s/.a-new-output-file-with-a-long-name", dir);
		if (cd_paths_open_output(path, got.v, got.n - 1, &f, &which, &err) != CD_OUT_OPENED)
			abort();
		fclose(f);

		/* several ranks merged */
		int nr = got.n - 1;
		struct cd_rank_summary *sums = calloc((size_t)nr + 1, sizeof *sums);
		struct cd_rank_summary **ptrs = calloc((size_t)nr + 1, sizeof *ptrs);
		for (int i = 0; i < nr; i++) {
			if (cd_fr_sniff_file(got.v[i]))
				cd_fr_summarize(got.v[i], &sums[i]);
			else
				cd_rank_summarize(got.v[i], i & 1, &sums[i]);
			ptrs[i] = &sums[i];
		}
		if (nr) {
			struct cd_out o;
			cd_out_init(&o, NULL);
			o.hold = true;
			cd_ranks_report(&o, ptrs, nr, &(struct cd_ranks_opts){.json = false});
			o.len = 0;
			cd_ranks_report(&o, ptrs, nr, &(struct cd_ranks_opts){.json = true});
			cd_out_free(&o);
		}
		for (int i = 0; i < nr; i++)
			cd_rank_summary_free(&sums[i]);
		free(sums);
		free(ptrs);
		cd_paths_free(&got);
	}
	rm_tree(dir);
	return 0;
}
