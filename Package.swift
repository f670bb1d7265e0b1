// swift-tools-version: 6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "klarna-reconciler",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "klarna-reconciler", targets: ["klarna-reconciler"]),
        .executable(name: "klarna-sandbox", targets: ["klarna-sandbox"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.0.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.0.0", traits: [.defaults, "YAML"]),
        // Already in the graph through swift-configuration's YAML trait; used directly to name unknown keys.
        .package(url: "https://github.com/jpsim/Yams", "5.4.0"..<"7.0.0"),
        // Counters and histograms where things happen (swift-metrics); exposed as /metrics by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
        // The shared store for several daemons (issue 11): connection pool, TLS, prepared statements, LISTEN/NOTIFY.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
    ],
    targets: [
        // C at the edge: thin system-library targets; shim.h wraps the variadic APIs Swift cannot call.
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // The commit the binary was built from (scripts/stamp-commit.sh).
        .target(name: "CBuildInfo"),

        // Domain: no I/O, no C. Retry policy, rate budget, clocks.
        .target(name: "ReconcilerCore", swiftSettings: strict),

        // Counters and timers by MetricName (swift-metrics), handles made once.
        .target(
            name: "Telemetry",
            dependencies: ["ReconcilerCore", .product(name: "Metrics", package: "swift-metrics")],
            swiftSettings: strict),

        // Typed Klarna API (HPP, KP, OM, Klarna Network) over an HTTP transport; the libcurl transport lives here.
        .target(
            name: "KlarnaAPI",
            dependencies: [
                "CCurl", "CBuildInfo", "ReconcilerCore", "Telemetry",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // Small HTTP/1.1 server on SwiftNIO (TCP or unix socket), used by the sandbox and by ingest.
        .target(
            name: "HTTPServer",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // The Klarna API simulator used by tests, the demo and the benchmarks.
        .target(
            name: "KlarnaSandbox",
            dependencies: [
                "HTTPServer", "ReconcilerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // notify, watchdog, socket activation, the journald log handler.
        .target(
            name: "SystemdSupport",
            dependencies: [
                "CSystemd", "ReconcilerCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // The store seam: one narrow protocol per role (work, ingest, outcomes, operators, reloads, retention) and
        // the values that cross it. Nothing above it knows which store it talks to.
        .target(name: "ReconcilerStore", dependencies: ["ReconcilerCore"], swiftSettings: strict),

        // The embedded store for one host: one SQLite file (WAL, group commit, versioned migrations).
        .target(
            name: "SQLiteBackend",
            dependencies: ["CSQLite", "ReconcilerCore", "ReconcilerStore", "Telemetry"],
            swiftSettings: strict),

        // The shared store for several daemons: PostgreSQL over postgres-nio.
        .target(
            name: "PostgresBackend",
            dependencies: [
                "ReconcilerCore", "ReconcilerStore", "Telemetry",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),

        // The daemon's work: scheduler, workers, intents against Klarna, outbox and notifications.
        .target(
            name: "Engine",
            dependencies: [
                "KlarnaAPI", "ReconcilerCore", "ReconcilerStore", "Telemetry",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // How the outside world reaches the daemon: webhook parsing and verification (callback tokens, Klarna
        // Network signatures).
        .target(
            name: "Ingest",
            dependencies: [
                "ReconcilerCore", "ReconcilerStore", "HTTPServer", "Engine", "Telemetry",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // config.yaml + environment overrides + credentials, validated into one value.
        .target(
            name: "Settings",
            dependencies: [
                "ReconcilerCore", "KlarnaAPI", "Engine", "PostgresBackend",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // The daemon, assembled from the modules above: a library type a test starts in-process.
        .target(
            name: "Daemon",
            dependencies: [
                "KlarnaAPI", "HTTPServer", "ReconcilerCore", "SystemdSupport", "ReconcilerStore", "SQLiteBackend", "PostgresBackend",
                "Engine", "Settings", "Ingest",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: strict
        ),

        // The daemon's executable: argument parsing, the operators' commands, and `run` calling the assembly.
        .executableTarget(
            name: "klarna-reconciler",
            dependencies: [
                "Daemon", "KlarnaAPI", "ReconcilerCore", "SystemdSupport", "ReconcilerStore", "SQLiteBackend", "PostgresBackend", "Engine",
                "Settings", "Ingest",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // The Klarna sandbox's executable (serve, demo); never shipped in the daemon's package.
        .executableTarget(
            name: "klarna-sandbox",
            dependencies: [
                "KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend", "SystemdSupport", "ChildProcess",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        .executableTarget(
            name: "klarna-bench",
            dependencies: ["KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore"],
            path: "Benchmarks/ClientBench",
            swiftSettings: strict
        ),

        .executableTarget(
            name: "klarna-engine-bench",
            dependencies: [
                "KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend", "PostgresBackend",
                "ChildProcess",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/EngineBench",
            swiftSettings: strict
        ),

        .executableTarget(
            name: "klarna-settlement-bench",
            dependencies: ["ReconcilerCore", "ReconcilerStore", "SQLiteBackend"],
            path: "Benchmarks/SettlementBench",
            swiftSettings: strict
        ),

        // Helpers every test target shares (waiting on a condition with a deadline).
        .target(
            name: "TestSupport",
            dependencies: ["ChildProcess", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport",
            swiftSettings: strict),

        // Child processes by posix_spawn, without Foundation.Process (see ChildProcess.swift for why).
        .target(name: "CSpawn"),
        .target(name: "ChildProcess", dependencies: ["CSpawn"], swiftSettings: strict),

        .executableTarget(
            name: "klarna-sim-bench",
            dependencies: [
                "Engine", "KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/SimulationBench",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "klarna-renewal-bench",
            dependencies: [
                "Engine", "KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/RenewalBench",
            swiftSettings: strict
        ),

        .testTarget(name: "ReconcilerCoreTests", dependencies: ["ReconcilerCore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "KlarnaAPITests", dependencies: ["KlarnaAPI"], swiftSettings: strict),
        .testTarget(
            name: "SystemdSupportTests",
            dependencies: ["SystemdSupport", "ReconcilerCore", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "EngineTests",
            dependencies: [
                "Engine", "Ingest", "ReconcilerStore", "SQLiteBackend", "PostgresBackend", "Settings", "KlarnaAPI", "KlarnaSandbox", "HTTPServer",
                "ReconcilerCore", "TestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // One suite, every test run against both stores: SQLite in a temporary file, PostgreSQL on a server the
        // tests start themselves.
        .testTarget(
            name: "StoreConformanceTests",
            dependencies: ["ReconcilerCore", "ReconcilerStore", "SQLiteBackend", "PostgresBackend", "TestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "KlarnaAPI", "KlarnaSandbox", "HTTPServer", "ReconcilerCore", "ReconcilerStore", "SQLiteBackend", "PostgresBackend", "TestSupport",
                "ChildProcess", "Daemon", "Engine",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
    ]
)
