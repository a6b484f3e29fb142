/*
 * Instruction counts for tests/bench/recorder.py --only instr: loaded with
 * ctypes by a benchmark child that runs under valgrind's callgrind with
 * --instr-atstart=no, it counts the instructions of the steps between
 * cd_cg_start() and cd_cg_stop() only (every thread's; the interpreter's
 * start-up, imports and warm-up steps run uninstrumented).  Outside
 * valgrind the requests do nothing.
 */
#include <valgrind/callgrind.h>

void cd_cg_start(void)
{
	CALLGRIND_ZERO_STATS;
	CALLGRIND_START_INSTRUMENTATION;
}

void cd_cg_stop(void)
{
	CALLGRIND_STOP_INSTRUMENTATION;
	CALLGRIND_DUMP_STATS_AT("commdebug bench");
}
