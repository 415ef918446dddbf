import FerryProtocol
import FerryRules
import Logging

/// The app's rules over writes (`WriteRule`), as a server is given them
/// (``ServerConfiguration/rules``): each write of an entity goes through that entity's rules,
/// in the order given, inside the push's transaction, on every storage engine alike.
public struct ServerRules: Sendable {
    private let byEntity: [String: [any WriteRule]]
    /// Where a rule that fails (throws anything but ``RuleUnavailable``) is reported to the operator.
    let logger: Logger

    /// The rules; none by default (every write the protocol allows is stored).
    public init(_ rules: [any WriteRule] = [], logger: Logger = Logger(label: "ferry.rules")) {
        var byEntity: [String: [any WriteRule]] = [:]
        for rule in rules {
            for entity in rule.entities { byEntity[entity, default: []].append(rule) }
        }
        self.byEntity = byEntity
        self.logger = logger
    }

    /// Whether no rule is given: a push then reads nothing more.
    public var isEmpty: Bool { byEntity.isEmpty }

    /// The rules of `entity`'s writes, in order.
    func rules(for entity: String) -> [any WriteRule] { byEntity[entity] ?? [] }
}
