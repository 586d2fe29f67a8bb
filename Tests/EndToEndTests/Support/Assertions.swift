import DepotClient
import DepotProtocol
import XCTest

/// Asserts that `body` fails with a server error of `code`; returns the error.
@discardableResult
func assertServerError<T>(
    _ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> T
) async -> RPCError? {
    do {
        _ = try await body()
        XCTFail("expected server error \(code.rawValue)", file: file, line: line)
    } catch let error as DepotClientError {
        guard case .server(let rpcError) = error else {
            XCTFail("expected server error \(code.rawValue), got \(error)", file: file, line: line)
            return nil
        }
        XCTAssertEqual(rpcError.code, code, rpcError.message, file: file, line: line)
        return rpcError
    } catch {
        XCTFail("unexpected \(error)", file: file, line: line)
    }
    return nil
}
