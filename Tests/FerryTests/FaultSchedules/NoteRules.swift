import FerryRules

/// The rule the fault schedules' server runs over notes, by the last character of a body (its
/// write's counter): `3` refused, `5` rewritten (the server appends `!`), `1` asks for a side
/// effect named by the note and its body (a store copied while the change was queued, which
/// sends it again as its own write, asks for no second one), `7` for an unnamed one (that write's
/// own). Bodies too big to send never reach it.
struct NoteRules: WriteRule {
    let entities: Set<String> = ["notes"]

    static func refuses(_ body: String) -> Bool { body.hasSuffix("3") }
    static func rewrites(_ body: String) -> Bool { body.hasSuffix("5") }
    static func asksEffect(_ body: String) -> Bool { namesEffect(body) || body.hasSuffix("7") }
    static func namesEffect(_ body: String) -> Bool { body.hasSuffix("1") }

    func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
        guard let body = write.data?["body"]?.stringValue else { return .accept }
        if Self.refuses(body) { return .reject(code: "no_threes", message: "A note may not end in 3.", details: ["body": .string(body)]) }
        if Self.rewrites(body) { return .rewrite(["body": .string(body + "!")]) }
        return .accept
    }

    func effects(of write: ProposedWrite) -> [SideEffect] {
        guard let body = write.data?["body"]?.stringValue, Self.asksEffect(body) else { return [] }
        let payload: JSONObject = ["note": .string(write.entityID), "body": .string(body)]
        return [SideEffect(kind: "note.effect", payload: payload, key: Self.namesEffect(body) ? "\(write.entityID)/\(body)" : nil)]
    }
}
