// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "FerryProtocol", targets: ["FerryProtocol"]),
        .library(name: "Ferry", targets: ["Ferry"]),
        // What a support screen or a terminal shows (the journal's HTML timeline): apart, so an
        // app that links Ferry does not carry an HTML and SVG renderer.
        .library(name: "FerryDiagnostics", targets: ["FerryDiagnostics"]),
        .library(name: "FerryServer", targets: ["FerryServer"]),
        // The app's rules over writes, with no server dependency: a server runs them, and an app may too.
        .library(name: "FerryRules", targets: ["FerryRules"]),
        .library(name: "FerryTesting", targets: ["FerryTesting"]),
        .executable(name: "ferry", targets: ["FerryCLI"]),
        .executable(name: "ferry-server", targets: ["FerryServerMain"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/pointfreeco/swift-clocks.git", from: "1.1.1"),
        .package(url: "https://github.com/pointfreeco/swift-concurrency-extras.git", from: "1.4.3"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/CoreOffice/XMLCoder.git", from: "0.18.2"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        .target(name: "FerryProtocol"),
        .target(name: "FerryRules", dependencies: ["FerryProtocol"]),
        // Opening and migrating a SQLite file other processes share, for the store and the server.
        .target(name: "FerrySQLite", dependencies: [.product(name: "GRDB", package: "GRDB.swift")]),
        .target(
            name: "Ferry",
            dependencies: [
                "FerryProtocol",
                "FerryRules",
                "FerrySQLite",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                // SHA-256 for store file names: CryptoKit on Apple platforms, swift-crypto elsewhere.
                .product(name: "Crypto", package: "swift-crypto", condition: .when(platforms: [.linux, .android, .windows, .wasi, .openbsd])),
            ]
        ),
        .target(
            name: "FerryServer",
            dependencies: [
                "FerrySQLite",
                "FerryProtocol",
                "FerryRules",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "XMLCoder", package: "XMLCoder"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(name: "FerryDiagnostics", dependencies: ["Ferry"]),
        .target(
            name: "FerryTesting",
            dependencies: [
                "Ferry",
                "FerryProtocol",
                "FerryServer",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // `ferry serve`'s command, shared by the developer's `ferry` and the deployed `ferry-server`.
        .target(
            name: "FerryServeCommand",
            dependencies: [
                "CMallocArenas",
                "FerryProtocol",
                "FerryServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // What is deployed: the server and its command, no test doubles.
        // glibc's mallopt, which Swift's Glibc module does not export, for the executables.
        .target(name: "CMallocArenas"),
        .executableTarget(
            name: "FerryServerMain",
            dependencies: ["FerryServeCommand", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "FerryCLI",
            dependencies: [
                "FerryRules",
                "Ferry",
                "FerryDiagnostics",
                "FerryProtocol",
                "FerryServeCommand",
                "FerryServer",
                "FerryTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The README's example app (scripts/run-example.sh runs it against a real server).
        .executableTarget(name: "FerryExample", dependencies: ["Ferry"], path: "Examples/FerryExample"),
        // The DocC article "Sharing data with spaces" as a running app (scripts/run-example.sh runs it too).
        .executableTarget(name: "FerrySpacesExample", dependencies: ["Ferry"], path: "Examples/FerrySpacesExample"),
        // A company's own server with its rules, and its app: Examples/FieldService, run by scripts/run-example.sh.
        .target(name: "FieldServiceRules", dependencies: ["FerryRules"], path: "Examples/FieldService/Rules"),
        .executableTarget(
            name: "FieldServiceServer",
            dependencies: [
                "FerryServer", "FieldServiceRules", .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/FieldService/Server"
        ),
        .executableTarget(name: "FieldServiceApp", dependencies: ["Ferry", "FerryRules", "FieldServiceRules"], path: "Examples/FieldService/App"),
        .target(
            name: "FerryTestSupport",
            dependencies: [
                "FerryProtocol",
                "FerryServer",
                "FerryTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/FerryTestSupport"
        ),
        .testTarget(
            name: "FerryTests",
            dependencies: [
                "Ferry",
                "FerryDiagnostics",
                "FerryProtocol",
                "FerryRules",
                "FerryServer",
                "FerryTestSupport",
                "FerryTesting",
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "ConcurrencyExtras", package: "swift-concurrency-extras"),
            ]
        ),
        .testTarget(name: "FerryProtocolTests", dependencies: ["FerryProtocol"]),
        .testTarget(
            name: "FerryTestingTests",
            dependencies: ["Ferry", "FerryTesting"]
        ),
        .testTarget(
            name: "FerryCLITests",
            dependencies: ["Ferry", "FerryProtocol", "FerryServer", "FerryTestSupport"]
        ),
        .testTarget(
            name: "FerryServerTests",
            dependencies: [
                "FerryProtocol",
                "FerryRules",
                "FerryServer",
                "FerryTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "ConcurrencyExtras", package: "swift-concurrency-extras"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
