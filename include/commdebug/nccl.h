/* commdebug's NCCL-side recorder: the calls a program (the PyTorch-side
 * recorder, through ctypes) may make into the loaded library
 * (libnccl-profiler-commdebug.so or libcommdebug-nccl-preload.so).
 *
 * Tagging ties NCCL calls to the Python-level collective that issued them:
 * the PyTorch-side recorder tags the thread with the process group's name
 * and the collective's per-group sequence number just before the
 * collective runs, and untags it after; every NCCL call the thread makes
 * meanwhile carries the tag ("pg" and "pseq" in its trace event), which is
 * how `commdebug analyze` charges NCCL bytes and time to modules. */
#ifndef COMMDEBUG_NCCL_H
#define COMMDEBUG_NCCL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tag the calling thread's next NCCL calls with process group pg (a
 * NUL-terminated name, copied; at most 63 bytes are kept) and sequence
 * number seq (> 0).  Returns 0, or -1 if the library holds too many
 * distinct group names (4095) or pg is NULL. */
int commdebug_nccl_tag(const char *pg, uint64_t seq);

/* Remove the calling thread's tag. */
void commdebug_nccl_untag(void);

/* Write everything recorded so far to the trace and end a zstd frame.
 * Waits at most about a second, and not at all while the writer is blocked
 * in open() or write(). */
void commdebug_nccl_flush(void);

/* Make path (used as given: no %r / %p expansion; a relative path is taken
 * from the current directory now) the NCCL-side trace of this process,
 * whatever happened before:
 *   - nothing written yet: the trace is opened at path when the first NCCL
 *     record comes (never otherwise: a process without NCCL calls leaves no
 *     file); a trace that could not be opened earlier is tried again there
 *     and recording resumes;
 *   - a trace already written elsewhere (NCCL was used before the caller
 *     knew where its trace goes): the zstd frame in progress is ended and
 *     the file is renamed to path; across file systems the frames written
 *     so far are copied into path, writing goes on there and the old file
 *     is removed.  Either way path ends up holding the whole trace, one meta
 *     line first, and nothing is lost meanwhile (NCCL calls made during the
 *     move wait in the queue).
 * A file already at path is replaced, unless another live recorder holds
 * it.  Waits for the writer at most COMMDEBUG_NCCL_EXIT_MS (at least 2 s).
 * Returns 0, or -1 with errno: EINVAL (path NULL or empty), EBUSY (another
 * process writes path), ETIMEDOUT (the writer is blocked in a write; the
 * move is made when it can), ENOTSUP (a child forked after recording
 * started: it records nothing), or what rename(2), open(2) or write(2) said
 * (the trace stays where it was then). */
int commdebug_nccl_set_trace(const char *path);

#ifdef __cplusplus
}
#endif

#endif
