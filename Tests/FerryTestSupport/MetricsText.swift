import FerryServer
import Prometheus

/// Reads counters from Prometheus text (what `GET /metrics` serves), for tests that measure
/// what crossed the wire.
public enum MetricsText {
    /// The value of the counter `name` whose labels are `labels` (as written, `direction="sent"`);
    /// 0 before it was first counted.
    public static func counter(_ name: String, labels: String = "", in text: String) -> Int {
        let prefix = labels.isEmpty ? name + " " : name + "{" + labels + "} "
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else { return 0 }
        return Int(Double(line.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces)) ?? 0)
    }

    /// The counter's value in `metrics`, an in-process server's.
    public static func counter(_ name: String, labels: String = "", in metrics: ServerMetrics) -> Int {
        counter(name, labels: labels, in: String(decoding: metrics.registry.emitToBuffer(), as: UTF8.self))
    }
}
