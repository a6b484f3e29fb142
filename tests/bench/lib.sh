# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034  # $tmp, $runs, $name come from the caller; med_s, med_kib, last_rc go back to it
# Shared by the benchmark scripts (sourced): timing with peak memory, medians.
# The caller sets $tmp (a scratch directory), $runs and $name (for messages).

# timed CMD...: run once, stdout to /dev/null, stderr to $tmp/err; writes
# "WALL_SECONDS PEAK_RSS_KIB RC" to $tmp/time (wall time from bash's clock
# around GNU time, whose %e has 10 ms steps; RSS from its %M).
timed() {
	local t0 t1 rc e k
	if [ -x /usr/bin/time ]; then
		t0=${EPOCHREALTIME/,/.}
		/usr/bin/time -f '%e %M' -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err"
		rc=$?
		t1=${EPOCHREALTIME/,/.}
		# GNU time puts "Command exited with non-zero status N" first
		read -r e k < <(tail -n 1 "$tmp/time") || { e=0; k=0; }
		[ -n "$t0" ] && [ -n "$t1" ] && e=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		echo "$e $k $rc" >"$tmp/time"
	else
		python3 - "$tmp/time" "$@" >/dev/null 2>"$tmp/err" <<'EOF'
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[2:])
wall = time.monotonic() - t
with open(sys.argv[1], "w") as f:
    f.write("%.3f %d %d\n" % (wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc))
EOF
	fi
}

# measure OKRCS CMD...: run $runs times; sets med_s, med_kib (medians) and
# last_rc; exits when the command's status is not one of OKRCS ("0 3 4").
measure() {
	local ok=$1 i s k rc all_s="" all_k=""
	shift
	for ((i = 0; i < runs; i++)); do
		timed "$@"
		read -r s k rc <"$tmp/time"
		case " $ok " in
		*" $rc "*) ;;
		*)
			echo "$name: command failed (exit $rc): $*" >&2
			tail -n 20 "$tmp/err" >&2
			exit 1
			;;
		esac
		last_rc=$rc
		all_s="$all_s$s"$'\n'
		all_k="$all_k$k"$'\n'
	done
	med_s=$(printf '%s' "$all_s" | sort -g | sed -n "$(((runs + 1) / 2))p")
	med_kib=$(printf '%s' "$all_k" | sort -g | sed -n "$(((runs + 1) / 2))p")
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b < 0.001) b = 0.001; printf "%.2f", a / b }'; }
