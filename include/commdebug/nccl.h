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

/* Write everything recorded so far to the trace and end a zstd frame. */
void commdebug_nccl_flush(void);

#ifdef __cplusplus
}
#endif

#endif
