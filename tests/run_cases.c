/* Runs the data-driven cases of tests/cases/NAME.yaml (format: tests/cases/README.md).
 *
 * usage: run_cases COMMDEBUG CASEFILE|DIR...  (a DIR means every .yaml in it)
 * Each YAML document is one case: the trace goes to a temporary file, the
 * command runs with the case's args and that file, and stdout (text, or
 * JSON compared by meaning with cJSON), stderr and the exit status are
 * checked.  Prints one line per case and "N passed, M failed" at the end. */
#include <dirent.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

struct buf {
	char *p;
	size_t n;
};

static struct buf slurp(const char *path)
{
	struct buf b = {NULL, 0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return b;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b.p = malloc((size_t)n + 1);
	b.n = fread(b.p, 1, (size_t)n, f);
	b.p[b.n] = '\0';
	fclose(f);
	return b;
}

static yaml_node_t *get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && strcmp((char *)k->data.scalar.value, key) == 0)
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

static const char *scalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static size_t scalar_len(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? n->data.scalar.length : 0;
}

/* Show where two texts first differ. */
static void show_diff(const char *what, const char *want, size_t wn, const char *got, size_t gn)
{
	size_t i = 0, line = 1, col = 1;
	while (i < wn && i < gn && want[i] == got[i]) {
		if (want[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
		i++;
	}
	fprintf(stderr, "    %s differs at line %zu column %zu\n", what, line, col);
	fprintf(stderr, "    --- expected ---\n%.*s\n    --- got ---\n%.*s\n    ---\n", (int)wn, want,
		(int)gn, got);
}

static int run_case(const char *prog, yaml_document_t *d, yaml_node_t *c, const char *file,
		    const char *tmpdir, int index)
{
	const char *name = scalar(get(d, c, "name"));
	yaml_node_t *trace = get(d, c, "trace");
	yaml_node_t *args = get(d, c, "args");
	const char *exit_s = scalar(get(d, c, "exit"));
	yaml_node_t *out = get(d, c, "stdout");
	yaml_node_t *outj = get(d, c, "stdout_json");
	const char *errc = scalar(get(d, c, "stderr_contains"));
	int want_exit = exit_s ? atoi(exit_s) : 0;
	char tpath[4096], opath[4096], epath[4096];
	char *argv[64];
	int argc = 0;

	if (!name) {
		fprintf(stderr, "%s: document %d has no name\n", file, index);
		return 1;
	}
	snprintf(tpath, sizeof tpath, "%s/trace.jsonl", tmpdir);
	snprintf(opath, sizeof opath, "%s/stdout", tmpdir);
	snprintf(epath, sizeof epath, "%s/stderr", tmpdir);
	FILE *tf = fopen(tpath, "wb");
	if (!tf)
		return 1;
	if (scalar(trace))
		fwrite(scalar(trace), 1, scalar_len(trace), tf);
	fclose(tf);

	argv[argc++] = (char *)prog;
	if (args && args->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = args->data.sequence.items.start;
		     it < args->data.sequence.items.top && argc < 60; it++)
			argv[argc++] = (char *)scalar(yaml_document_get_node(d, *it));
	} else {
		argv[argc++] = "analyze";
	}
	argv[argc++] = tpath;
	argv[argc] = NULL;

	pid_t pid = fork();
	if (pid == 0) {
		int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(o, 1);
		dup2(e, 2);
		unsetenv("NO_COLOR");
		execv(prog, argv);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	int got_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	struct buf so = slurp(opath), se = slurp(epath);
	bool ok = true;

	if (got_exit != want_exit) {
		fprintf(stderr, "    exit status %d, expected %d\n", got_exit, want_exit);
		ok = false;
	}
	if (out && (so.n != scalar_len(out) || memcmp(so.p, scalar(out), so.n) != 0)) {
		show_diff("stdout", scalar(out), scalar_len(out), so.p, so.n);
		ok = false;
	}
	if (outj) {
		cJSON *w = cJSON_Parse(scalar(outj)), *g = cJSON_Parse(so.p ? so.p : "");
		if (!w) {
			fprintf(stderr, "    the case's stdout_json is not JSON\n");
			ok = false;
		} else if (!g || !cJSON_Compare(w, g, 1)) {
			show_diff("stdout (JSON)", scalar(outj), scalar_len(outj), so.p, so.n);
			ok = false;
		}
		cJSON_Delete(w);
		cJSON_Delete(g);
	}
	if (errc && (!se.p || !strstr(se.p, errc))) {
		fprintf(stderr, "    stderr lacks \"%s\"; it was:\n%s\n", errc, se.p ? se.p : "");
		ok = false;
	}
	if (!ok)
		fprintf(stderr, "    stderr: %s", se.p ? se.p : "");
	printf("%s %s: %s\n", ok ? "ok  " : "FAIL", file, name);
	free(so.p);
	free(se.p);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0;
	char tmpl[] = "/tmp/commdebug-cases-XXXXXX";

	if (argc < 3) {
		fprintf(stderr, "usage: run_cases COMMDEBUG CASEFILE...\n");
		return 2;
	}
	const char *tmpdir = mkdtemp(tmpl);
	if (!tmpdir) {
		perror("mkdtemp");
		return 2;
	}
	/* expand directories into their .yaml files, sorted */
	char **files = NULL;
	int nfiles = 0;
	for (int i = 2; i < argc; i++) {
		struct dirent **ents;
		int n = scandir(argv[i], &ents, NULL, alphasort);
		if (n < 0) {
			files = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
			files[nfiles++] = strdup(argv[i]);
			continue;
		}
		for (int k = 0; k < n; k++) {
			size_t l = strlen(ents[k]->d_name);
			if (l > 5 && strcmp(ents[k]->d_name + l - 5, ".yaml") == 0) {
				files = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
				if (asprintf(&files[nfiles], "%s/%s", argv[i], ents[k]->d_name) < 0)
					return 2;
				nfiles++;
			}
			free(ents[k]);
		}
		free(ents);
	}
	for (int fi = 0; fi < nfiles; fi++) {
		char *path = files[fi];
		FILE *f = fopen(path, "rb");
		if (!f) {
			fprintf(stderr, "%s: %s\n", path, strerror(errno));
			failed++;
			continue;
		}
		yaml_parser_t parser;
		yaml_parser_initialize(&parser);
		yaml_parser_set_input_file(&parser, f);
		for (int doc = 1;; doc++) {
			yaml_document_t d;
			if (!yaml_parser_load(&parser, &d)) {
				fprintf(stderr, "%s: YAML error at line %zu: %s\n", path,
					parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
				failed++;
				break;
			}
			yaml_node_t *root = yaml_document_get_root_node(&d);
			if (!root) {
				yaml_document_delete(&d);
				break;
			}
			if (run_case(argv[1], &d, root, path, tmpdir, doc))
				failed++;
			else
				passed++;
			yaml_document_delete(&d);
		}
		yaml_parser_delete(&parser);
		fclose(f);
		free(path);
	}
	free(files);
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
