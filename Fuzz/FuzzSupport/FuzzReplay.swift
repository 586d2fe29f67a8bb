import Foundation

/// Runs a fuzz target over files and directories of files (the corpus, crash reproducers).
public enum FuzzReplay {
    /// Calls `body` with the bytes of every file named or under a directory named; returns how many.
    public static func each(_ paths: some Sequence<String>, _ body: ([UInt8]) -> Void) -> Int {
        var count = 0
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
            let files =
                isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                body(Array(data))
                count += 1
            }
        }
        return count
    }
}
