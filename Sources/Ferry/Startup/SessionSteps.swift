extension StartupStep {
    /// Blocking: pauses the pipeline until a user is signed in to `session`.
    public static func signedIn(_ session: SyncSession, name: String = "Signing in", weight: Double = 1) -> StartupStep {
        .blocking(name, weight: weight) { context in
            await context.report("Waiting for sign-in")
            let engine = try await session.signedInEngine()
            await context.report("Signed in as \(engine.userID)", fraction: 1)
        }
    }

    /// Optional: the signed-in user's initial full sync, through their scheduler, so it
    /// joins the launch run rather than adding one. The step's message follows the sync's
    /// progress ("Synced 2,500 of 5,000 (50%)").
    public static func initialSync(
        _ session: SyncSession,
        name: String = "Syncing",
        weight: Double = 1,
        timeout: Duration? = nil
    )
        -> StartupStep
    {
        .optional(name, weight: weight, timeout: timeout) { context in
            let engine = try await session.signedInEngine()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await status in await engine.client.statusUpdates() {
                        var fraction: Double?
                        if case .uploading(let done, let total) = status.phase, total > 0 { fraction = Double(done) / Double(total) }
                        await context.report(status.progressText, fraction: fraction)
                    }
                }
                try await engine.scheduler.initialSync()
                group.cancelAll()
            }
        }
    }
}
