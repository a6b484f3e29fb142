# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034  # $tmp, $runs, $name come from the caller; med_s, med_kib, last_rc go back to it
# Shared by the benchmark scripts (sourced): timing with peak memory, medians,
# and groups of commands run in alternation with their ratios to a baseline.
# The caller sets $tmp (a scratch directory), $runs and $name (for messages).

# timed CMD...: run once, stdout to /dev/null, stderr to $tmp/err; writes
# "WALL_SECONDS PEAK_RSS_KIB RC CPU_SECONDS" to $tmp/time (wall time from
# bash's clock around GNU time, whose %e has 10 ms steps; RSS from its %M;
# CPU: user + system, %U + %S).
timed() {
	local t0 t1 rc e k u s
	if [ -x /usr/bin/time ]; then
		t0=${EPOCHREALTIME/,/.}
		/usr/bin/time -f '%e %M %U %S' -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err"
		rc=$?
		t1=${EPOCHREALTIME/,/.}
		# GNU time puts "Command exited with non-zero status N" first
		read -r e k u s < <(tail -n 1 "$tmp/time") || { e=0; k=0; u=0; s=0; }
		[ -n "$t0" ] && [ -n "$t1" ] && e=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		echo "$e $k $rc $(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')" >"$tmp/time"
	else
		python3 - "$tmp/time" "$@" >/dev/null 2>"$tmp/err" <<'EOF'
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[2:])
wall = time.monotonic() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write("%.3f %d %d %.2f\n" % (wall, ru.ru_maxrss, rc, ru.ru_utime + ru.ru_stime))
EOF
	fi
}

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

# measure OKRCS CMD...: run $runs times; sets med_s, med_kib (medians) and
# last_rc; exits when the command's status is not one of OKRCS ("0 3 4").
measure() {
	local ok=$1 i s k rc cpu all_s="" all_k=""
	shift
	for ((i = 0; i < runs; i++)); do
		timed "$@"
		read -r s k rc cpu <"$tmp/time"
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
	med_s=$(printf '%s' "$all_s" | median)
	med_kib=$(printf '%s' "$all_k" | median)
}

# ---- alternating groups ----
# alt_reset; alt_add NAME OKRCS CMD...; ...; alt_run: $runs rounds, each
# runs every command once, in the order added and in reverse every other
# round, so that a change in the machine's load (builds, tests of other
# sessions) falls on every command alike.  Then:
#   alt_get NAME        sets med_s, med_cpu, med_kib (medians) and last_rc
#   alt_ratio NAME BASE sets ratio (median of the rounds' NAME/BASE wall
#                       time ratios), ratio_lo and ratio_hi (their range),
#                       and cpu_ratio (median CPU time over BASE's)
declare -A alt_cmd alt_ok alt_s alt_cpu alt_kib alt_rc
alt_names=()

alt_reset() {
	alt_cmd=() alt_ok=() alt_s=() alt_cpu=() alt_kib=() alt_rc=()
	alt_names=()
}

alt_add() {
	local n=$1 ok=$2
	shift 2
	alt_names+=("$n")
	alt_cmd[$n]=$(printf '%q ' "$@")
	alt_ok[$n]=$ok
	alt_s[$n]="" alt_cpu[$n]="" alt_kib[$n]=""
}

alt_run() {
	local i j n s k rc cpu order
	for ((i = 0; i < runs; i++)); do
		order=()
		for ((j = 0; j < ${#alt_names[@]}; j++)); do
			if ((i % 2)); then
				order+=("${alt_names[${#alt_names[@]} - 1 - j]}")
			else
				order+=("${alt_names[j]}")
			fi
		done
		for n in "${order[@]}"; do
			eval "timed ${alt_cmd[$n]}"
			read -r s k rc cpu <"$tmp/time"
			case " ${alt_ok[$n]} " in
			*" $rc "*) ;;
			*)
				echo "$name: command failed (exit $rc): ${alt_cmd[$n]}" >&2
				tail -n 20 "$tmp/err" >&2
				exit 1
				;;
			esac
			alt_rc[$n]=$rc
			alt_s[$n]+="$s "
			alt_cpu[$n]+="$cpu "
			alt_kib[$n]+="$k "
		done
	done
}

alt_get() {
	med_s=$(printf '%s\n' ${alt_s[$1]} | median)
	med_cpu=$(printf '%s\n' ${alt_cpu[$1]} | median)
	med_kib=$(printf '%s\n' ${alt_kib[$1]} | median)
	last_rc=${alt_rc[$1]}
}

alt_ratio() {
	local r
	r=$(paste -d' ' <(printf '%s\n' ${alt_s[$1]}) <(printf '%s\n' ${alt_s[$2]}) |
		awk '{ b = $2 < 0.001 ? 0.001 : $2; printf "%.2f\n", $1 / b }' | sort -g)
	ratio=$(printf '%s\n' "$r" | median)
	ratio_lo=$(printf '%s\n' "$r" | head -n 1)
	ratio_hi=$(printf '%s\n' "$r" | tail -n 1)
	local c b
	c=$(printf '%s\n' ${alt_cpu[$1]} | median)
	b=$(printf '%s\n' ${alt_cpu[$2]} | median)
	cpu_ratio=$(awk -v a="$c" -v b="$b" 'BEGIN { if (b < 0.01) b = 0.01; printf "%.2f", a / b }')
}

# The spread of NAME's wall times: (slowest - fastest) / median, in percent
# (how noisy the machine was while the group ran).
alt_spread() {
	printf '%s\n' ${alt_s[$1]} | sort -g |
		awk '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]; if (m < 0.001) m = 0.001;
			printf "%.0f", (v[NR] - v[1]) / m * 100 }'
}

# What else ran on the machine: the load average over the last minute and
# the processor count, for the report's head.
machine_load() {
	printf '%s cores, load average %s' "$(nproc 2>/dev/null || echo '?')" \
		"$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')"
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b < 0.001) b = 0.001; printf "%.2f", a / b }'; }
# verdict VALUE LIMIT: "met" when VALUE <= LIMIT
verdict() { awk -v v="$1" -v l="$2" 'BEGIN { print (v <= l) ? "met" : "NOT MET" }'; }
