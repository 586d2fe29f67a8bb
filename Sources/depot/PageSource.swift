import DepotProtocol
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Where `depot import` reads pages of `{"number_of_pages": N, "result": [...]}` from.
enum PageSource: CustomStringConvertible {
    /// One file: a single page.
    case file(URL)
    /// A directory of `page-1.json`, `page-2.json`, ….
    case directory(URL)
    /// An `http://127.0.0.1:PORT/…{page}…` template on the loopback interface.
    case urlTemplate(String)
    /// JSON Lines (one object per line, as `depot export` writes): a `.jsonl` or
    /// `.ndjson` file, or standard input (`-`); one page.
    case lines(name: String, Data)

    /// Why a page could not be read.
    enum Failure: Error, CustomStringConvertible {
        /// The page does not exist (no file, HTTP 404).
        case missing(String)
        /// The page could not be read or is not a page.
        case malformed(String)

        var description: String {
            switch self {
            case .missing(let text), .malformed(let text): text
            }
        }
    }

    /// Reads the source argument: a URL template, a directory or a file.
    init(_ argument: String) throws {
        if argument == "-" {
            self = .lines(name: "standard input", FileHandle.standardInput.readDataToEndOfFile())
            return
        }
        if argument.hasSuffix(".jsonl") || argument.hasSuffix(".ndjson") {
            guard let data = FileManager.default.contents(atPath: argument) else {
                throw CLIError("source '\(argument)' does not exist or cannot be read")
            }
            self = .lines(name: argument, data)
            return
        }
        if argument.hasPrefix("http://") || argument.hasPrefix("https://") {
            guard argument.contains("{page}") else {
                throw CLIError(
                    "URL '\(argument)' needs a {page} placeholder, e.g. http://127.0.0.1:8000/page-{page}.json")
            }
            let host = URLComponents(string: argument.replacingOccurrences(of: "{page}", with: "1"))?.host ?? ""
            guard ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host) else {
                throw CLIError(
                    "URL '\(argument)' is not on the loopback interface (127.0.0.1, localhost or ::1); only local sources are imported"
                )
            }
            self = .urlTemplate(argument)
            return
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
            throw CLIError(
                "source '\(argument)' does not exist (give a page file, a directory of page-N.json, or an http://127.0.0.1 URL with {page})"
            )
        }
        let url = URL(fileURLWithPath: argument)
        self = isDirectory.boolValue ? .directory(url) : .file(url)
    }

    var description: String {
        switch self {
        case .file(let url): url.path
        case .directory(let url): url.appendingPathComponent("page-N.json").path
        case .urlTemplate(let template): template
        case .lines(let name, _): name
        }
    }

    /// Whether the source has one page only.
    var isSinglePage: Bool {
        switch self {
        case .file, .lines: true
        case .directory, .urlTemplate: false
        }
    }

    /// Page `number`'s rows and the `number_of_pages` it announces.
    func load(page number: Int) async throws(Failure) -> (rows: [JSONValue], pageCount: Int?) {
        if case .lines(_, let data) = self {
            // A line that is not JSON becomes a row the import reports (with its index) and skips.
            let rows = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
                .filter { !$0.allSatisfy(\.isWhitespace) }
                .map { line in (try? JSONParser.parse(String(line))) ?? .string("not JSON: \(line.prefix(60))") }
            return (rows, 1)
        }
        let data = try await read(page: number)
        let json: JSONValue
        do {
            json = try JSONParser.parse(data)
        } catch {
            throw .malformed("page \(number) is not valid JSON (\(error))")
        }
        guard let rows = json["result"]?.arrayValue else {
            throw .malformed("page \(number) has no \"result\" array (got \(json.excerpt(limit: 60)))")
        }
        let count = json["number_of_pages"]?.intValue.map { Int($0) }
        return (rows, count)
    }

    private func read(page number: Int) async throws(Failure) -> Data {
        switch self {
        case .lines(_, let data):
            return data
        case .file(let url):
            guard let data = FileManager.default.contents(atPath: url.path) else {
                throw .missing("page file \(url.path) cannot be read")
            }
            return data
        case .directory(let directory):
            let url = directory.appendingPathComponent("page-\(number).json")
            guard FileManager.default.fileExists(atPath: url.path) else {
                throw .missing("page \(number) is missing: \(url.path) does not exist")
            }
            guard let data = FileManager.default.contents(atPath: url.path) else {
                throw .malformed("page \(number): \(url.path) cannot be read")
            }
            return data
        case .urlTemplate(let template):
            let text = template.replacingOccurrences(of: "{page}", with: String(number))
            guard let url = URL(string: text) else { throw .malformed("page \(number): '\(text)' is not a URL") }
            do {
                let (data, response) = try await URLSession.shared.data(from: url)
                let status = (response as? HTTPURLResponse)?.statusCode ?? 200
                if status == 404 || status == 410 {
                    throw Failure.missing("page \(number) is missing: \(text) answered HTTP \(status)")
                }
                guard (200..<300).contains(status) else {
                    throw Failure.malformed("page \(number): \(text) answered HTTP \(status)")
                }
                return data
            } catch let failure as Failure {
                throw failure
            } catch {
                throw .malformed("page \(number): cannot fetch \(text): \(error.localizedDescription)")
            }
        }
    }
}
