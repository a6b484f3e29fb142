/* Directory arguments and the output file (see paths.h). */
#include "paths.h"

#include "cli.h"
#include "../util/out.h"
#include "../postmortem/frdump.h"
#include "../postmortem/run.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cd_paths_free(struct cd_paths *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
	memset(p, 0, sizeof *p);
}

static bool push(struct cd_paths *p, char *s)
{
	if (!s)
		return false;
	if (p->n == p->cap) {
		int cap = p->cap ? p->cap * 2 : 16;
		char **nv = realloc(p->v, (size_t)cap * sizeof *nv);
		if (!nv) {
			free(s);
			return false;
		}
		p->v = nv;
		p->cap = cap;
	}
	p->v[p->n++] = s;
	return true;
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && strcmp(s + n - k, suf) == 0;
}

bool cd_paths_trace_name(const char *s)
{
	if (s[0] == '.')
		return false;
	/* an NCCL-side trace goes with its rank's trace */
	if (has_suffix(s, ".nccl.zst") || has_suffix(s, ".nccl.jsonl"))
		return false;
	return has_suffix(s, ".zst") || has_suffix(s, ".jsonl") || has_suffix(s, ".json");
}

/* A trace by its name, or a name a Flight Recorder dump or a summary file
 * may have (not hidden, not an NCCL-side trace): the latter is kept only
 * if its content says it is one (input_by_content). */
static int trace_entry(const struct dirent *d)
{
	const char *s = d->d_name;
	return cd_paths_trace_name(s) || (s[0] != '.' && !has_suffix(s, ".nccl.zst") &&
					  !has_suffix(s, ".nccl.jsonl"));
}

/* A trace the Python recorder keeps under a hidden name until its process
 * learns its rank (.rank-pending-PID.zst): never expanded, but named. */
static int pending_entry(const struct dirent *d)
{
	return d->d_name[0] == '.' && strstr(d->d_name, "-pending-") &&
	       cd_paths_trace_name(d->d_name + 1);
}

/* Name the pending traces of directory a: as a note beside other traces,
 * or in the error when there is nothing else.  Returns how many there are. */
static int pending_traces(const char *a, const char *sep, bool alone,
			  void (*note)(void *ud, const char *path, const char *why), void *ud,
			  struct cd_err *err)
{
	static const char why[] = "a trace still waiting for its rank: its process was "
				  "killed or died before it learned one (from a launcher "
				  "variable or init_process_group)";
	struct dirent **ents;
	int k = scandir(a, &ents, pending_entry, alphasort);

	if (k <= 0)
		return 0;
	if (alone)
		cd_fail(err, CD_ERR_TRACE, "no traces (*.zst, *.jsonl, *.json) in this directory, "
			"only %s, %s; give it by name to read it", ents[0]->d_name, why);
	for (int j = 0; j < k; j++) {
		if (!alone && note) {
			char path[4096], msg[sizeof why + 16];
			snprintf(path, sizeof path, "%s%s%s", a, sep, ents[j]->d_name);
			snprintf(msg, sizeof msg, "%s; skipped", why);
			note(ud, path, msg);
		}
		free(ents[j]);
	}
	free(ents);
	return k;
}

static const char *kind(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISDIR(m) ? "a directory"
	       : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* A regular file's content that makes it an input whatever its name: a
 * Flight Recorder dump (<prefix><rank>, *.pkl) or a summary file, told
 * from one read of its first bytes. */
static bool input_by_content(const char *path)
{
	return cd_run_input_kind(path) != CD_IN_TRACE;
}

static void note_kind(const char *p, mode_t m,
		      void (*note)(void *ud, const char *path, const char *why), void *ud)
{
	char why[128];
	if (!note)
		return;
	snprintf(why, sizeof why, "%s, not a regular file; skipped", kind(m));
	note(ud, p, why);
}

/* The traces of directory a, appended to out (*added: how many); its
 * subdirectories (the node directories of a job) appended to subdirs when
 * given, else noted and skipped.  Returns CD_OK, or why not (err says):
 * CD_ERR_IO (unreadable), CD_ERR_TRACE (only pending traces),
 * CD_ERR_NOMEM. */
static enum cd_status expand_files(const char *a, struct cd_paths *out, struct cd_paths *subdirs,
				   void (*note)(void *ud, const char *path, const char *why),
				   void *ud, int *added, struct cd_err *err)
{
	struct dirent **ents;
	int k = scandir(a, &ents, trace_entry, alphasort);
	enum cd_status st = CD_OK;

	*added = 0;
	if (k < 0)
		return cd_fail(err, CD_ERR_IO, "cannot read the directory: %s", strerror(errno));
	size_t al = strlen(a);
	const char *sep = al && a[al - 1] == '/' ? "" : "/";
	for (int j = 0; j < k; j++) {
		size_t len = al + strlen(ents[j]->d_name) + 2;
		char *p = st == CD_OK ? malloc(len) : NULL;
		struct stat sb;
		if (p)
			snprintf(p, len, "%s%s%s", a, sep, ents[j]->d_name);
		free(ents[j]);
		if (!p) {
			if (st == CD_OK)
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
			continue;
		}
		/* one stat for both questions: a name that cannot be stat'ed is
		 * kept, and its open fails */
		bool known = stat(p, &sb) == 0;
		bool is_dir = known && S_ISDIR(sb.st_mode);
		if (is_dir && subdirs) {
			if (!push(subdirs, p))
				st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
			continue;
		}
		if (is_dir) {   /* two levels down: told when named like a trace */
			if (cd_paths_trace_name(p + al + strlen(sep)))
				note_kind(p, sb.st_mode, note, ud);
			free(p);
			continue;
		}
		/* a name no trace has: kept when its content says what it is */
		if (!cd_paths_trace_name(p + al + strlen(sep)) && !input_by_content(p)) {
			free(p);
			continue;
		}
		/* never open what is not a regular file: a FIFO would block */
		if (known && !S_ISREG(sb.st_mode)) {
			note_kind(p, sb.st_mode, note, ud);
			free(p);
			continue;
		}
		if (!push(out, p)) {
			st = cd_fail(err, CD_ERR_NOMEM, "out of memory");
			continue;
		}
		(*added)++;
	}
	free(ents);
	if (st != CD_OK)
		return st;
	bool alone = *added == 0 && (!subdirs || !subdirs->n);
	if (pending_traces(a, sep, alone, note, ud, err) > 0 && alone)
		return CD_ERR_TRACE;
	return CD_OK;
}

/* The traces of directory a, appended to out: its own, or, when it has
 * none, those of its subdirectories (one level down: a job's node
 * directories; a subdirectory without traces is noted and skipped). */
static bool expand_one(const char *a, struct cd_paths *out,
		       void (*note)(void *ud, const char *path, const char *why), void *ud,
		       struct cd_err *err)
{
	struct cd_paths subdirs = {0};
	int before = out->n, added;
	bool ok = expand_files(a, out, &subdirs, note, ud, &added, err) == CD_OK;

	for (int i = 0; ok && i < subdirs.n; i++) {
		if (added > 0) {
			/* beside traces: one named like a trace is told */
			const char *base = strrchr(subdirs.v[i], '/');
			if (cd_paths_trace_name(base ? base + 1 : subdirs.v[i]))
				note_kind(subdirs.v[i], S_IFDIR, note, ud);
			continue;
		}
		struct cd_err sub = {0};
		int n;
		enum cd_status st = expand_files(subdirs.v[i], out, NULL, note, ud, &n, &sub);
		if (st == CD_ERR_NOMEM) {
			*err = sub;
			ok = false;
		} else if ((st != CD_OK || n == 0) && note) {
			char why[600];
			snprintf(why, sizeof why, "%s; skipped",
				 st != CD_OK ? sub.msg
					     : "no traces (*.zst, *.jsonl, *.json) in this directory");
			note(ud, subdirs.v[i], why);
		}
	}
	bool from_subdirs = added == 0 && subdirs.n > 0;
	cd_paths_free(&subdirs);
	if (ok && out->n == before) {
		cd_fail(err, CD_ERR_TRACE, from_subdirs
			? "no traces (*.zst, *.jsonl, *.json) in this directory or in its "
			  "subdirectories"
			: "no traces (*.zst, *.jsonl, *.json) in this directory");
		return false;
	}
	return ok;
}

bool cd_paths_expand(char *const *args, int nargs, struct cd_paths *out,
		     void (*note)(void *ud, const char *path, const char *why), void *ud,
		     const char **bad, struct cd_err *err)
{
	memset(out, 0, sizeof *out);
	for (int i = 0; i < nargs; i++) {
		const char *a = args[i];
		struct stat st;
		if (strcmp(a, "-") != 0 && stat(a, &st) == 0 && S_ISDIR(st.st_mode)) {
			if (!expand_one(a, out, note, ud, err)) {
				*bad = a;
				cd_paths_free(out);
				return false;
			}
		} else if (!push(out, strdup(a))) {
			*bad = a;
			cd_fail(err, CD_ERR_NOMEM, "out of memory");
			cd_paths_free(out);
			return false;
		}
	}
	return true;
}

char *cd_paths_nccl_name(const char *path)
{
	static const char *const exts[] = {".zst", ".jsonl", ".json"};
	size_t n = strlen(path), base = n;
	char *s;

	if (strcmp(path, "-") == 0 || has_suffix(path, ".nccl.zst") ||
	    has_suffix(path, ".nccl.jsonl"))
		return NULL;
	for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
		if (has_suffix(path, exts[i])) {
			base = n - strlen(exts[i]);
			break;
		}
	if (!(s = malloc(base + sizeof ".nccl.zst")))
		return NULL;
	memcpy(s, path, base);
	memcpy(s + base, ".nccl.zst", sizeof ".nccl.zst");
	return s;
}

/* The input that is the file o, or NULL. */
static const char *same_as_input(const struct stat *o, char *const *inputs, int n)
{
	struct stat st;
	for (int i = 0; i < n; i++) {
		int r = strcmp(inputs[i], "-") == 0 ? fstat(STDIN_FILENO, &st) : stat(inputs[i], &st);
		if (r == 0 && st.st_dev == o->st_dev && st.st_ino == o->st_ino)
			return inputs[i];
	}
	return NULL;
}

const char *cd_paths_is_input(const char *path, char *const *inputs, int n)
{
	struct stat o;
	if (stat(path, &o) != 0)
		return NULL; /* not there yet: it cannot be an input */
	return same_as_input(&o, inputs, n);
}

enum cd_open_out cd_paths_open_output(const char *path, char *const *inputs, int n, FILE **f,
				      const char **which, struct cd_err *err)
{
	struct stat ost;
	int fd;

	/* an existing output first by name, so that an input FIFO is not
	 * opened; then the opened file (no O_TRUNC: nothing is changed before
	 * the comparison) */
	if (stat(path, &ost) == 0 && (*which = same_as_input(&ost, inputs, n)))
		return CD_OUT_IS_INPUT;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd < 0) {
		cd_fail(err, CD_ERR_IO, "cannot create: %s", strerror(errno));
		return CD_OUT_CANNOT;
	}
	if (fstat(fd, &ost) != 0) {
		cd_fail(err, CD_ERR_IO, "cannot create: %s", strerror(errno));
		close(fd);
		return CD_OUT_CANNOT;
	}
	if ((*which = same_as_input(&ost, inputs, n))) {
		close(fd);
		return CD_OUT_IS_INPUT;
	}
	if (S_ISREG(ost.st_mode) && ftruncate(fd, 0) != 0) {
		cd_fail(err, CD_ERR_IO, "cannot truncate: %s", strerror(errno));
		close(fd);
		return CD_OUT_CANNOT;
	}
	*f = fdopen(fd, "w");
	if (!*f) {
		cd_fail(err, CD_ERR_IO, "cannot create: %s", strerror(errno));
		close(fd);
		return CD_OUT_CANNOT;
	}
	return CD_OUT_OPENED;
}

enum cd_open_out cd_paths_open_report(const char *path, char *const *traces, int n,
				      const char *nccl, FILE **f, char **which, struct cd_err *err)
{
	/* the traces, the NCCL-side trace each may have, --nccl's */
	char **in = calloc(2 * (size_t)n + 1, sizeof *in);
	char **own = calloc((size_t)n + 1, sizeof *own);
	const char *w = NULL;
	enum cd_open_out rc = CD_OUT_CANNOT;
	int k = 0;

	*which = NULL;
	if (!in || !own) {
		cd_fail(err, CD_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		in[k++] = traces[i];
		if ((own[i] = cd_paths_nccl_name(traces[i])))
			in[k++] = own[i];
	}
	if (nccl)
		in[k++] = (char *)nccl;
	rc = cd_paths_open_output(path, in, k, f, &w, err);
	if (rc == CD_OUT_IS_INPUT && !(*which = strdup(w))) {
		rc = CD_OUT_CANNOT;
		cd_fail(err, CD_ERR_NOMEM, "out of memory");
	}
out:
	for (int i = 0; own && i < n; i++)
		free(own[i]);
	free(own);
	free(in);
	return rc;
}

bool cd_paths_tmp_open(struct cd_tmpfile *t, const char *path)
{
	size_t n = strlen(path) + sizeof ".XXXXXX";
	int fd;
	t->f = NULL;
	t->path = path;
	if (!(t->tmp = malloc(n))) {
		fprintf(stderr, "commdebug: out of memory\n");
		return false;
	}
	snprintf(t->tmp, n, "%s.XXXXXX", path);
	if ((fd = mkstemp(t->tmp)) < 0) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", path, strerror(errno));
		free(t->tmp);
		t->tmp = NULL;
		return false;
	}
	mode_t mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) != 0 || !(t->f = fdopen(fd, "wb"))) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", t->tmp, strerror(errno));
		close(fd);
		unlink(t->tmp);
		free(t->tmp);
		t->tmp = NULL;
		return false;
	}
	return true;
}

bool cd_paths_tmp_commit(struct cd_tmpfile *t, bool ok)
{
	if (!t->tmp)
		return false;
	if (ok && (ferror(t->f) || fflush(t->f) != 0)) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", t->tmp, strerror(errno));
		ok = false;
	}
	if (fclose(t->f) != 0 && ok) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", t->tmp, strerror(errno));
		ok = false;
	}
	if (ok && rename(t->tmp, t->path) != 0) {
		fprintf(stderr, "commdebug: %s: cannot write: %s\n", t->path, strerror(errno));
		ok = false;
	}
	if (!ok)
		unlink(t->tmp);
	free(t->tmp);
	t->tmp = NULL;
	t->f = NULL;
	return ok;
}

int cd_paths_save(const char *path, const struct cd_out *o)
{
	struct cd_tmpfile t;
	if (strcmp(path, "-") == 0) {
		if (fwrite(o->buf, 1, o->len, stdout) != o->len || fflush(stdout) != 0) {
			fprintf(stderr, "commdebug: standard output: %s\n", strerror(errno));
			return CD_EXIT_DATA;
		}
		return CD_EXIT_OK;
	}
	if (!cd_paths_tmp_open(&t, path))
		return CD_EXIT_DATA;
	bool ok = fwrite(o->buf, 1, o->len, t.f) == o->len;
	return cd_paths_tmp_commit(&t, ok) ? CD_EXIT_OK : CD_EXIT_DATA;
}
