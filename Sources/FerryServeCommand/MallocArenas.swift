import CMallocArenas
import Foundation

/// The allocator's arenas, for the `ferry` executables on Linux. glibc keeps up to eight malloc
/// arenas per core, and each holds on to the large buffers freed in it: attachment chunks (8 MiB)
/// freed on many threads left the process tens of megabytes above what it uses. One arena per
/// core keeps peak memory at the working set at the same speed (BENCHMARKS.md, "Attachments").
/// `MALLOC_ARENA_MAX` in the environment still decides when set.
public enum MallocArenas {
    /// Call first in `main`, before other threads allocate.
    public static func limitToCores() {
        guard ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil else { return }
        _ = ferry_limit_malloc_arenas(Int32(clamping: ProcessInfo.processInfo.activeProcessorCount))
    }
}
