import Glibc

/// Makes glibc give buffers of 256 KiB and more straight back to the kernel when they are freed.
///
/// A request body is one allocation of up to `ingest.max_body_bytes`. glibc serves an allocation that large with its
/// own mapping, but after the first such block is freed it raises its threshold (the "dynamic mmap threshold") and
/// serves the next ones from its per-thread arenas, which keep what is freed: after a storm of 1 MiB hostile bodies the
/// daemon stayed 76 MiB above idle (`make bench`, `scripts/bench-hostile.py`). A fixed threshold turns that off:
/// 41 MiB above idle in the same run, at the cost of one mapping per large body. The Swift Glibc module does not export
/// `mallopt`, so it is looked up by name.
enum LargeBufferRelease {
    static let threshold: Int32 = 256 << 10

    static func apply() {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        // M_MMAP_THRESHOLD in glibc's <malloc.h>.
        let mmapThreshold: Int32 = -3
        guard let program = dlopen(nil, RTLD_NOW), let symbol = dlsym(program, "mallopt") else { return }
        _ = unsafeBitCast(symbol, to: Mallopt.self)(mmapThreshold, threshold)
    }
}
