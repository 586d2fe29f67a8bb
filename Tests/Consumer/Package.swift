// swift-tools-version: 6.1
// A user's package: depends on Depot by path and compiles every Swift block of
// README.md and docs/swift-client.md verbatim (make test-consumer extracts them
// into Sources/Consumer/Snippets first). `Misuse` must NOT compile: it attaches
// a delegate that is not main-actor isolated.
import PackageDescription

let package = Package(
    name: "Consumer",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Depot", path: "../..")],
    targets: [
        .target(name: "Consumer", dependencies: [.product(name: "DepotClient", package: "Depot")]),
        .target(name: "Misuse", dependencies: [.product(name: "DepotClient", package: "Depot")]),
    ]
)
