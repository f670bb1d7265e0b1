import Metrics
import ReconcilerCore
import Synchronization

/// Counting and timing by ``MetricName``, with each handle made once per name and labels: making one goes through
/// the metrics factory's lock and lookup, which on the hot path (several per Klarna call and per commit) costs more
/// than the count itself. The daemon bootstraps the factory (swift-prometheus) before anything counts; elsewhere
/// (the command line, tests) the handles count into nothing.
public enum Telemetry {
    struct Key: Hashable {
        let name: MetricName
        let labels: [String]
    }

    private static let counters = Mutex<[Key: Counter]>([:])
    private static let timers = Mutex<[Key: Metrics.Timer]>([:])

    public static func count(_ name: MetricName, _ labels: (String, String)...) {
        handle(counters, name, labels) { Counter(label: name.rawValue, dimensions: labels) }.increment()
    }

    public static func time(_ name: MetricName, _ duration: Duration, _ labels: (String, String)...) {
        handle(timers, name, labels) { Metrics.Timer(label: name.rawValue, dimensions: labels) }.record(duration: duration)
    }

    private static func handle<H>(_ table: borrowing Mutex<[Key: H]>, _ name: MetricName, _ labels: [(String, String)], make: () -> H) -> H {
        let key = Key(name: name, labels: labels.flatMap { [$0.0, $0.1] })
        return table.withLock { table in
            if let known = table[key] { return known }
            let made = make()
            table[key] = made
            return made
        }
    }
}
