#!/bin/sh
# `commdebug summarize --shard auto` run the way a cluster runs it: one
# process per task, started by a launcher that sets its task number, then
# one `commdebug ranks` over the summaries.  Stand-in launchers set the
# variables of srun (SLURM_PROCID, SLURM_NTASKS), Open MPI and PMI for each
# of N processes started at once; when Open MPI's mpirun is installed it
# runs the tasks itself (Debian's openmpi-bin; else that part is skipped).
# Each way, the merged report must equal `ranks` on the traces byte for
# byte, and every trace must be in exactly one shard.
# usage: launcher.sh COMMDEBUG
set -u
CD=$1
case $CD in /*) ;; *) CD=$(pwd)/$CD ;; esac
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d) || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
fail=0
pass=0

# a 16-rank job in 4 node directories, tensor-parallel pairs, two faults
mkdir gen job
(cd gen && awk -v W=16 -v P=1 -v E=1 -v F="size:9:2:1 skip:12:3:0:bw" \
	-f "$here/cases/ranks-1024/gen.awk") || exit 2
for r in $(seq 0 15); do
	mkdir -p "job/node$((r / 4))"
	mv "gen/rank$r.jsonl" "job/node$((r / 4))/rank$r.jsonl"
done
"$CD" ranks job >direct.txt 2>direct.err
[ $? = 4 ] || { echo "launcher: ranks on the traces did not exit 4"; exit 1; }

# check NAME DIR: the summaries in DIR merge to the direct report, each
# trace in one shard only
check() {
	if ! "$CD" ranks "$2" >merged.txt 2>merged.err; then :; fi
	n=$("$CD" colls "$2" 2>/dev/null | awk 'NR > 1 { print $1 }' | sort -u | wc -l)
	dup=$("$CD" ranks "$2" 2>/dev/null | grep -c '^duplicate rank')
	if cmp -s direct.txt merged.txt && [ "$n" = 16 ] && [ "$dup" = 0 ]; then
		echo "ok   $1"
		pass=$((pass + 1))
	else
		echo "FAIL $1 ($n ranks, $dup duplicates)"
		diff direct.txt merged.txt | head -n 10
		fail=$((fail + 1))
	fi
}

# stand-in launchers: NTASKS processes at once, each with its variables
for l in slurm ompi pmi; do
	rm -rf sums && mkdir sums
	pids=""
	for k in 0 1 2 3 4; do
		case $l in
		slurm) set -- SLURM_PROCID=$k SLURM_NTASKS=5 ;;
		ompi) set -- OMPI_COMM_WORLD_RANK=$k OMPI_COMM_WORLD_SIZE=5 ;;
		pmi) set -- PMI_RANK=$k PMI_SIZE=5 ;;
		esac
		env -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE \
			-u PMI_RANK -u PMI_SIZE "$@" \
			"$CD" summarize --shard auto -o "sums/task$k.cdsum" job 2>/dev/null &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p"; done
	check "$l: 5 tasks" sums
done

# one task a node, each summarizing its own node's directory (node-local
# disks), no --shard
rm -rf sums && mkdir sums
for node in job/node*; do
	"$CD" summarize -o "sums/$(basename "$node").cdsum" "$node" 2>/dev/null &
done
wait
check "a task per node directory" sums

if command -v mpirun >/dev/null 2>&1; then
	rm -rf sums && mkdir sums
	if timeout 120 mpirun --oversubscribe --allow-run-as-root -np 4 \
		sh -c '"$0" summarize --shard auto -o "sums/mpi$OMPI_COMM_WORLD_RANK.cdsum" job 2>/dev/null; [ $? -le 4 ]' \
		"$CD" >mpirun.log 2>&1; then
		check "mpirun -np 4" sums
	else
		echo "FAIL mpirun -np 4 (mpirun failed)"
		tail -n 5 mpirun.log
		fail=$((fail + 1))
	fi
else
	echo "skip mpirun: not installed (Debian: openmpi-bin)"
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
