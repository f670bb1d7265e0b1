import Prometheus
import ReconcilerCore

/// `/metrics`: the registry's exposition with a `# HELP` line before each family's `# TYPE` line. swift-metrics hands
/// the registry no help text, and the registry refuses two texts for one name, so the help is added here, from
/// ``MetricName/help``.
enum MetricsExposition {
    static func text(of registry: PrometheusCollectorRegistry) -> String {
        var lines: [Substring] = []
        for line in registry.emitToString().split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("# TYPE "), let name = line.dropFirst("# TYPE ".count).split(separator: " ").first,
                let metric = MetricName(rawValue: String(name))
            {
                lines.append("# HELP \(name) \(metric.help)")
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}
