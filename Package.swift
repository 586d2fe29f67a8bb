// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Depot",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "depotd", targets: ["depotd"]),
        .executable(name: "depot", targets: ["depot"]),
        .library(name: "DepotClient", targets: ["DepotClient"]),
        .library(name: "DepotProtocol", targets: ["DepotProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
    ],
    targets: [
        // libzmq from libzmq3-dev (`make setup-system`); the module map links it. No pkgConfig:
        // Debian's libzmq.pc adds `-isystem /usr/include/mit-krb5`, which SwiftPM prohibits with a
        // warning on every build (and in every package that depends on DepotClient).
        .systemLibrary(name: "CZeroMQ"),
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        // SQLite's session extension (changesets), which carries a write to the other replicas of a cluster.
        .systemLibrary(name: "CSQLiteSession"),
        .target(name: "DepotProtocol"),
        .target(
            name: "DepotStore",
            dependencies: [
                "DepotProtocol", "CSQLiteSession", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        .target(
            name: "DepotServer",
            dependencies: [
                "DepotStore", "DepotProtocol", "ZeroMQ",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // GRDB for the client's own replica file (DESIGN section 9); never DepotStore.
        .target(
            name: "DepotClient",
            dependencies: ["DepotProtocol", "ZeroMQ", .product(name: "GRDB", package: "GRDB.swift")]),
        // The cluster change log of DESIGN section 11 (docs/cluster.md), on PostgreSQL, and the store's
        // tables there (predicates compiled by DepotStore in its PostgreSQL dialect run on them).
        .target(
            name: "DepotPostgres",
            dependencies: [
                "DepotProtocol", "DepotStore", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"), .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .executableTarget(
            name: "depotd",
            dependencies: [
                "DepotServer", "DepotStore", "DepotPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "DepotStudio",
            dependencies: [
                "DepotClient", "DepotProtocol",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Site")]
        ),
        .executableTarget(
            name: "depot",
            dependencies: [
                "DepotClient", "DepotStudio",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "WorldCupExample",
            dependencies: ["DepotClient", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/WorldCup"
        ),
        .executableTarget(
            name: "OfflineExample",
            dependencies: ["DepotClient", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/Offline"
        ),
        .executableTarget(
            name: "DepotBenchmarks",
            dependencies: [
                "DepotClient", "DepotProtocol", "DepotStore", "DepotTestSupport", "DepotPostgres", "ZeroMQ", "CZeroMQ",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/DepotBenchmarks"
        ),
        // Fuzz targets: Fuzz/run.sh builds them with -sanitize=fuzzer (libFuzzer); a plain build replays files.
        // FuzzSupport: their shared main (libFuzzer's driver, or the replay of files).
        .target(name: "FuzzSupport", path: "Fuzz/FuzzSupport"),
        .executableTarget(name: "FuzzJSON", dependencies: ["DepotProtocol", "FuzzSupport"], path: "Fuzz/FuzzJSON"),
        .executableTarget(
            name: "FuzzPredicate", dependencies: ["DepotStore", "DepotProtocol", "DepotTestSupport", "FuzzSupport"],
            path: "Fuzz/FuzzPredicate"),
        .executableTarget(
            name: "FuzzDispatch",
            dependencies: [
                "DepotServer", "DepotProtocol", "FuzzSupport", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Fuzz/FuzzDispatch"),
        // What the test targets share: the daemon launcher (DepotBenchmarks starts its daemons with it too),
        // the seeded generator, the fixtures (FuzzPredicate's model too). Not a product.
        .target(
            name: "DepotTestSupport",
            dependencies: [
                "DepotClient", "DepotProtocol", "DepotServer", "DepotStore",
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Tests/DepotTestSupport"),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "DepotProtocolTests", dependencies: ["DepotProtocol"]),
        .testTarget(
            name: "DepotStoreTests",
            dependencies: ["DepotStore", "DepotTestSupport", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(name: "DepotServerTests", dependencies: ["DepotServer", "DepotTestSupport", "ZeroMQ"]),
        .testTarget(name: "DepotStudioTests", dependencies: ["DepotStudio"]),
        .testTarget(name: "DepotClientTests", dependencies: ["DepotClient", "DepotTestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["DepotClient", "DepotTestSupport", "ZeroMQ"]),
        .testTarget(
            name: "DepotPostgresTests",
            dependencies: [
                "DepotPostgres", "DepotStore", "DepotTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
    ]
)
