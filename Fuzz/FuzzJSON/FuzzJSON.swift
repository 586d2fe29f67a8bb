import DepotProtocol
import Foundation
import FuzzSupport

/// Fuzz target: the JSON parser, the JSON-RPC envelope and the params decoders.
///
/// Whatever the bytes, parsing either fails with a typed error or yields a
/// value that writes back to JSON that parses to the same value; decoding a
/// message never crashes. Built with `-sanitize=fuzzer` (`Fuzz/run.sh`) it is a
/// libFuzzer target; built normally it replays files given as arguments.
enum FuzzJSON {
    static func run(_ bytes: [UInt8]) {
        guard let value = try? JSONParser.parse(bytes) else { return }
        let written = JSONWriter.encode(value)
        guard let again = try? JSONParser.parse(written) else {
            fatalError("JSONWriter wrote text its parser refuses: \(String(decoding: written, as: UTF8.self))")
        }
        guard again == value else { fatalError("round trip changed \(value) into \(again)") }
        if let message = try? Message.decode(value), case .request(_, _, let params?) = message {
            _ = try? JSONCoding.decode(FetchRequest.self, from: params)
            _ = try? JSONCoding.decode(StoreSave.Parameters.self, from: params)
            _ = try? JSONCoding.decode(ModelDefine.Parameters.self, from: params)
            _ = try? JSONCoding.decode(ResultsSubscribe.Parameters.self, from: params)
            _ = try? JSONCoding.decode(BatchInsert.Parameters.self, from: params)
        }
    }
}

/// libFuzzer's entry point: one input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzJSON.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// `FuzzJSON Fuzz/corpus/json` replays the committed corpus; `Fuzz/run.sh` fuzzes (see ``FuzzDriver``).
@main
enum FuzzMain {
    static func main() { FuzzDriver.main("FuzzJSON", fuzzerTestOneInput) }
}
