#ifndef FERRY_C_MALLOC_ARENAS_H
#define FERRY_C_MALLOC_ARENAS_H

#if defined(__linux__)
#include <malloc.h>
#endif

/// Caps glibc's malloc arenas (mallopt M_ARENA_MAX); 0 where there is no glibc (nothing to cap).
#if defined(M_ARENA_MAX)
static inline int ferry_limit_malloc_arenas(int count) { return mallopt(M_ARENA_MAX, count); }
#else
static inline int ferry_limit_malloc_arenas(int count) { (void)count; return 0; }
#endif

/// Fixes glibc's mmap threshold (mallopt M_MMAP_THRESHOLD): blocks this large or larger are
/// mapped on their own and given back to the system when freed; 0 where there is no glibc.
#if defined(M_MMAP_THRESHOLD)
static inline int ferry_fix_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
#else
static inline int ferry_fix_mmap_threshold(int bytes) { (void)bytes; return 0; }
#endif

#endif
