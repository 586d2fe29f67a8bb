import CZeroMQ
import DepotProtocol
import Foundation

/// One save fanned out to many client processes: each of `processes` child
/// processes holds one subscription to the same request (one shared result
/// set), and the figure is, per save, the time until the last process has its
/// `results/didChange`. The baseline, in the same run, is a raw ZeroMQ PUB
/// socket sending a message of the same size to as many SUB processes.
/// Target (issue 12): p50 ≤ 1.2× the PUB fan-out's, p99 < 10 ms.
///
/// The children are this executable again (`--fan-out-child`), so both sides
/// pay the same process scheduling; receive times are CLOCK_MONOTONIC, which
/// every process on the machine shares.
struct FanOutBenchmark: Benchmark {
    static let name = "fan-out"
    static let summary =
        "one save → last results/didChange in 100 client processes vs a raw PUB to 100 SUB processes (p50 ≤ 1.2×, p99 < 10 ms)"

    static let model = """
        {"entities":[{"name":"Item","attributes":[
          {"name":"name","type":"string"},{"name":"score","type":"integer","indexed":true}]}]}
        """

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let processes = quick ? 20 : 100
        let saves = quick ? 30 : 200
        ProcessLimits.raiseDescriptorLimit()

        // Depot: one daemon, `processes` subscribers of one shared request.
        let daemon = try DaemonProcess(
            executable: suite.options.depotd, dataDirectory: suite.directory.appendingPathComponent("fan-out"),
            transport: .ipc, extraArguments: suite.options.daemonArguments + ["--max-sessions", "5000"])
        defer { daemon.stop() }
        let writer = try RawRPCClient(endpoint: daemon.endpoint)
        try writer.initialize()
        _ = try writer.call("model/define", params: Self.model)
        _ = try writer.call("store/save", params: #"{"inserted":[{"entity":"Item","values":{"name":"a","score":0}}]}"#)
        let depotChildren = try FanOutChildren(count: processes, arguments: ["depot", daemon.endpoint, String(saves)])
        let cpuBefore = CPUTime.process(daemon.pid) ?? 0
        let sent = try Self.saveOneAtATime(saves, through: writer, pause: 15_000)
        let daemonCPU = (CPUTime.process(daemon.pid) ?? 0) - cpuBefore
        let depot = try depotChildren.lastArrivals(sentAt: sent)

        // Baseline: PUB → SUB processes, a message of a didChange's size.
        let endpoint = "ipc://" + suite.directory.appendingPathComponent("fan-out-pub.sock").path
        guard let context = zmq_ctx_new(), let publisher = zmq_socket(context, ZMQ_PUB) else {
            throw BenchmarkError("cannot make a PUB socket")
        }
        defer {
            zmq_close(publisher)
            zmq_ctx_term(context)
        }
        var highWaterMark: Int32 = 0
        zmq_setsockopt(publisher, ZMQ_SNDHWM, &highWaterMark, MemoryLayout<Int32>.size)
        guard zmq_bind(publisher, endpoint) == 0 else { throw BenchmarkError("cannot bind \(endpoint)") }
        let pubChildren = try FanOutChildren(count: processes, arguments: ["pub", endpoint, String(saves)])
        usleep(500_000)  // SUB subscriptions reach the PUB asynchronously
        var published: [Int64: UInt64] = [:]
        let padding = String(repeating: "x", count: 280)
        for index in 1...saves {
            let start = FanOutChildren.now()
            let message = Array("\(index) \(padding)".utf8)
            _ = message.withUnsafeBytes { zmq_send(publisher, $0.baseAddress, $0.count, 0) }
            published[Int64(index)] = start
            usleep(15_000)
        }
        let pub = try pubChildren.lastArrivals(sentAt: published)

        func percentile(_ values: [Double], _ p: Double) -> Double {
            let sorted = values.sorted()
            return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        }
        let depotP50 = percentile(depot, 0.5)
        let depotP99 = percentile(depot, 0.99)
        let pubP50 = percentile(pub, 0.5)
        suite.check(
            "fan-out.\(processes).p50-ratio", depotP50 / pubP50, target: 1.2, .atMost,
            of: "last didChange p50", over: "raw PUB p50")
        suite.check(
            "fan-out.\(processes).p99-ms", depotP99, target: 10, .atMost, of: "last didChange p99 (ms)", over: "1 ms")
        suite.note(
            "fan-out.\(processes)",
            [
                "depotP50Ms": .double(depotP50), "depotP99Ms": .double(depotP99), "pubP50Ms": .double(pubP50),
                "pubP99Ms": .double(percentile(pub, 0.99)), "saves": .int(Int64(depot.count)),
                "daemonCPUMicrosPerSessionPerSave": .double(daemonCPU * 1e6 / Double(saves * processes)),
            ])
    }

    /// `count` saves of Item/1's score through `writer`, `pause` µs apart (one fan-out at a time:
    /// latency, not a queue); when each was sent, by its transaction.
    static func saveOneAtATime(_ count: Int, through writer: RawRPCClient, pause: UInt32) throws -> [Int64: UInt64] {
        var sent: [Int64: UInt64] = [:]
        for index in 1...count {
            let start = FanOutChildren.now()
            let result = try writer.call(
                "store/save", params: #"{"updated":[{"id":"Item/1","values":{"score":\#(index)}}]}"#)
            sent[result["transaction"]?.intValue ?? -1] = start
            usleep(pause)
        }
        return sent
    }

    /// `--fan-out-child depot ENDPOINT COUNT` or `pub ENDPOINT COUNT`: receives COUNT
    /// messages, then prints `<transaction or number> <CLOCK_MONOTONIC ns>` for each.
    static func runChild(_ arguments: [String]) throws {
        guard arguments.count == 3, let count = Int(arguments[2]) else {
            throw BenchmarkError("--fan-out-child takes: depot|pub ENDPOINT COUNT")
        }
        var arrivals: [(Int64, UInt64)] = []
        if arguments[0] == "depot" {
            let client = try RawRPCClient(endpoint: arguments[1])
            try client.initialize(name: "fan-out child")
            _ = try client.call(
                "results/subscribe",
                params: #"{"request":{"entity":"Item","sort":[{"key":"score"}]},"include":"none"}"#)
            FileHandle.standardOutput.write(Data("ready\n".utf8))
            while arrivals.count < count {
                let bytes = try client.dealer.receive()
                let now = FanOutChildren.now()
                let json = try JSONParser.parse(bytes)
                guard json["method"] == "results/didChange", let transaction = json["params"]?["transaction"]?.intValue
                else { continue }
                arrivals.append((transaction, now))
            }
        } else {
            guard let context = zmq_ctx_new(), let subscriber = zmq_socket(context, ZMQ_SUB) else {
                throw BenchmarkError("cannot make a SUB socket")
            }
            zmq_setsockopt(subscriber, ZMQ_SUBSCRIBE, "", 0)
            guard zmq_connect(subscriber, arguments[1]) == 0 else { throw BenchmarkError("cannot connect") }
            FileHandle.standardOutput.write(Data("ready\n".utf8))
            var buffer = [UInt8](repeating: 0, count: 4096)
            while arrivals.count < count {
                let size = zmq_recv(subscriber, &buffer, buffer.count, 0)
                let now = FanOutChildren.now()
                guard size > 0 else { continue }
                let text = String(decoding: buffer.prefix(Int(size)).prefix { $0 != 32 }, as: UTF8.self)
                arrivals.append((Int64(text) ?? -1, now))
            }
        }
        FileHandle.standardOutput.write(Data(arrivals.map { "\($0.0) \($0.1)\n" }.joined().utf8))
    }
}

/// The child processes of one side, started and waited for (the cluster benchmark uses them too).
struct FanOutChildren {
    let processes: [(Process, Pipe)]

    /// Starts `count` children and waits until each says it is ready.
    init(count: Int, arguments: [String]) throws {
        var processes: [(Process, Pipe)] = []
        for _ in 0..<count {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
            if !FileManager.default.isExecutableFile(atPath: process.executableURL!.path) {
                process.executableURL = Bundle.main.executableURL
            }
            process.arguments = ["--fan-out-child"] + arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            processes.append((process, pipe))
        }
        self.processes = processes
        for (_, pipe) in processes {
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = pipe.fileHandleForReading.availableData
                guard !chunk.isEmpty else { throw BenchmarkError("a fan-out child ended before it was ready") }
                line += chunk
            }
        }
    }

    /// For each message sent at `sentAt[key]`, milliseconds until the last child had it.
    func lastArrivals(sentAt: [Int64: UInt64]) throws -> [Double] {
        Array(try arrivals(sentAt: sentAt).values)
    }

    /// For each message sent at `sentAt[key]`, by key, milliseconds until the last child had it.
    func arrivals(sentAt: [Int64: UInt64]) throws -> [Int64: Double] {
        var last: [Int64: UInt64] = [:]
        for (process, pipe) in processes {
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            for line in output.split(separator: "\n") where line != "ready" {
                let fields = line.split(separator: " ")
                guard fields.count == 2, let key = Int64(fields[0]), let time = UInt64(fields[1]) else { continue }
                last[key] = max(last[key] ?? 0, time)
            }
        }
        var result: [Int64: Double] = [:]
        for (key, start) in sentAt { result[key] = last[key].map { Double($0 &- start) / 1e6 } }
        return result
    }

    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
