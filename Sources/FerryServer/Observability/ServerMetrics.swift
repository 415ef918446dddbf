import CoreMetrics
import FerryProtocol
import Prometheus

/// The server's metrics, recorded through swift-metrics into a Prometheus registry
/// owned by this server instance (no global bootstrap, so several servers can live
/// in one process, as they do in tests).
public final class ServerMetrics: Sendable {
    /// The registry every metric is recorded in; `GET /metrics` serves its text exposition.
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory

    /// Metrics recorded into `registry`, by default a new one of this instance's own.
    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        self.factory = PrometheusMetricsFactory(registry: registry)
    }

    func recordRequest(endpoint: String, status: Int, duration: Duration) {
        Counter(label: "ferry_http_requests_total", dimensions: [("endpoint", endpoint), ("status", "\(status)")], factory: factory)
            .increment()
        Timer(label: "ferry_http_request_duration_seconds", dimensions: [("endpoint", endpoint)], factory: factory)
            .recordNanoseconds(Int64(duration.seconds * 1e9))
    }

    func recordMutations(_ results: [PushResult]) {
        var counts: [MutationStatus: Int] = [:]
        for result in results { counts[result.status, default: 0] += 1 }
        for (status, count) in counts {
            Counter(label: "ferry_mutations_total", dimensions: [("status", status.rawValue)], factory: factory)
                .increment(by: count)
        }
    }

    /// Counts a refused token by why it was refused (`missing_header`, `bad_signature`, ...).
    func recordAuthenticationFailure(_ failure: AuthFailure) {
        Counter(label: "ferry_auth_failures_total", dimensions: [("reason", failure.metricLabel)], factory: factory).increment()
    }

    /// Counts a request refused with `429`: `quota` when the user's quota was spent, `concurrency`
    /// when too many of the user's requests were already in progress.
    func recordRateLimited(reason: String = "quota") {
        Counter(label: "ferry_rate_limited_total", dimensions: [("reason", reason)], factory: factory).increment()
    }

    /// Counts what a purge forgot (`RetentionService`).
    func recordPurge(_ report: PurgeReport) {
        Counter(label: "ferry_purged_tombstones_total", factory: factory).increment(by: report.tombstones)
        Counter(label: "ferry_purged_clients_total", factory: factory).increment(by: report.clients)
        Counter(label: "ferry_purges_total", factory: factory).increment()
    }

    /// A side effect delivered, or a delivery that failed (tried again later).
    func recordSideEffect(delivered: Bool, kind: String) {
        Counter(
            label: delivered ? "ferry_side_effects_delivered_total" : "ferry_side_effects_failed_total",
            dimensions: [("kind", kind)],
            factory: factory
        )
        .increment()
    }

    /// How many side effects wait for delivery.
    func recordPendingSideEffects(_ count: Int) {
        Gauge(label: "ferry_side_effects_pending", factory: factory).record(count)
    }

    /// Counts the attachments a sweep purged (`AttachmentJanitor`).
    func recordPurgedAttachments(_ count: Int) {
        Counter(label: "ferry_purged_attachments_total", factory: factory).increment(by: count)
    }

    /// Counts an attachment whose stored bytes did not hash to its digest, taken aside.
    func recordQuarantinedAttachment() {
        Counter(label: "ferry_quarantined_attachments_total", factory: factory).increment()
    }

    /// Counts attachment bytes on the wire: `received` in upload bodies (kept or not, so a
    /// client that sends bytes twice shows), `sent` in downloads.
    func recordAttachmentBytes(_ count: Int, direction: String) {
        Counter(label: "ferry_attachment_bytes_total", dimensions: [("direction", direction)], factory: factory).increment(by: count)
    }

    /// The Prometheus text exposition of every metric.
    func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }
}
