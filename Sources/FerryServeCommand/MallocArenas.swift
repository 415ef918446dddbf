import CMallocArenas
import Foundation

/// The allocator's arenas, for the `ferry` executables on Linux. glibc keeps up to eight malloc
/// arenas per core, and each holds on to the large buffers freed in it: attachment chunks (8 MiB)
/// freed on many threads left the process tens of megabytes above what it uses. One arena per
/// core keeps peak memory at the working set at the same speed (BENCHMARKS.md, "Attachments").
/// `MALLOC_ARENA_MAX` in the environment still decides when set.
public enum MallocArenas {
    /// Call first in `main`, before other threads allocate. Also fixes the mmap threshold at
    /// 1 MiB: glibc raises it after each large block freed (up to 32 MiB), after which 8 MiB
    /// chunks stay on the heap; fixed, each chunk is mapped alone and returned when freed
    /// (`ferry client sync` of 1 GiB: 101 MB at peak, 69 MB with it; BENCHMARKS.md, issue 50).
    /// `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the environment still decide when set.
    public static func limitToCores() {
        let environment = ProcessInfo.processInfo.environment
        if environment["MALLOC_ARENA_MAX"] == nil {
            _ = ferry_limit_malloc_arenas(Int32(clamping: ProcessInfo.processInfo.activeProcessorCount))
        }
        if environment["MALLOC_MMAP_THRESHOLD_"] == nil { _ = ferry_fix_mmap_threshold(1 << 20) }
    }
}
