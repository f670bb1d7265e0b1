import Synchronization

/// Uniform randomness in `[0, 1)`, injected so jitter is reproducible in tests.
public protocol RandomSource: Sendable {
    func nextUnit() -> Double
}

public struct SystemRandomSource: RandomSource {
    public init() {}
    public func nextUnit() -> Double { Double.random(in: 0..<1) }
}

/// SplitMix64: small, fast and deterministic for a given seed. Used by tests and by the sandbox's probabilistic faults.
public final class SeededRandomSource: RandomSource {
    private let state: Mutex<UInt64>

    public init(seed: UInt64) { state = Mutex(seed) }

    public func nextUnit() -> Double {
        let value = state.withLock { state -> UInt64 in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        return Double(value >> 11) / Double(UInt64(1) << 53)
    }
}
