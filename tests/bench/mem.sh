#!/usr/bin/env bash
# Memory per kept operator and per module name (the figures of commdebug(1),
# NOTES, Memory): peak RSS of `commdebug analyze` on generated one-region
# traces.  Never pass/fail: it prints the figures.
#
# usage: tests/bench/mem.sh [BUILD_DIR] [OPS] [MODULES]
#        (defaults: build, 40000000 ops, 2000000 module names)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
ops=${2:-40000000}
mods=${3:-2000000}
bin=$build/commdebug
[ -x "$bin" ] || { echo "mem.sh: $bin not built" >&2; exit 1; }
command -v zstd >/dev/null && [ -x /usr/bin/time ] || { echo "mem.sh: needs zstd and /usr/bin/time" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

head='{"ev":"meta","format":"commdebug-trace","version":1}
{"ev":"region_enter","region":1}
{"ev":"fw_pre","mod":"m","type":"T"}'
tail='{"ev":"fw_post","mod":"m"}
{"ev":"fw_done","mod":"m"}
{"ev":"region_exit","region":1}'
{ echo "$head"; yes '{"ev":"op","name":"aten.mm.default"}' | head -n "$ops"; echo "$tail"; } |
	zstd -q -3 >"$tmp/same.zst"
{ echo "$head"; yes '{"ev":"op","name":"aten.mm.default"}
{"ev":"op","name":"aten.add.Tensor"}' | head -n "$ops"; echo "$tail"; } | zstd -q -3 >"$tmp/alt.zst"
{ echo '{"ev":"meta","format":"commdebug-trace","version":1}'; echo '{"ev":"region_enter","region":1}'
  seq 1 "$mods" | awk '{ printf "{\"ev\":\"fw_pre\",\"mod\":\"layer.%d\",\"type\":\"T\"}\n" \
	"{\"ev\":\"op\",\"name\":\"aten.mm.default\"}\n{\"ev\":\"fw_post\",\"mod\":\"layer.%d\"}\n" \
	"{\"ev\":\"fw_done\",\"mod\":\"layer.%d\"}\n", $1, $1, $1 }'
  echo '{"ev":"region_exit","region":1}'; } | zstd -q -3 >"$tmp/mods.zst"

# peak KiB of one run
peak() {
	/usr/bin/time -f %M -o "$tmp/t" "$bin" "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo 0; return; }
	cat "$tmp/t"
}
base=$(peak counts "$tmp/same.zst")
echo "commdebug memory (peak RSS); counts of the same trace: $((base / 1024)) MiB"
for t in same alt; do
	for mode in "" --json; do
		k=$(peak analyze --noise 2 $mode "$tmp/$t.zst")
		printf '  %-4s %8d ops, analyze -n 2 %-6s %7.1f MiB  %5.2f B/op over counts\n' "$t" "$ops" \
			"$mode" "$(awk -v k="$k" 'BEGIN { print k / 1024 }')" \
			"$(awk -v k="$k" -v b="$base" -v n="$ops" 'BEGIN { print (k - b) * 1024 / n }')"
	done
done
for args in "analyze" "analyze --noise 2" "analyze --noise 2 --json"; do
	# shellcheck disable=SC2086
	k=$(peak $args "$tmp/mods.zst")
	printf '  %d modules, %-26s %7.1f MiB  %5.0f B/module\n' "$mods" "$args" \
		"$(awk -v k="$k" 'BEGIN { print k / 1024 }')" \
		"$(awk -v k="$k" -v b="$base" -v n="$mods" 'BEGIN { print (k - b) * 1024 / n }')"
done
