import Foundation

/// libFuzzer's test function for one input (`LLVMFuzzerTestOneInput`): the bytes and their count; returns 0.
public typealias FuzzTestOneInput = @convention(c) (UnsafePointer<UInt8>, Int) -> CInt

#if FUZZING
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
        _ callback: FuzzTestOneInput
    ) -> CInt
#endif

/// The `main` of every fuzz target.
public enum FuzzDriver {
    /// Runs a fuzz target and exits.
    ///
    /// Built with `-sanitize=fuzzer -DFUZZING` (`Fuzz/run.sh`): libFuzzer's driver on `testOneInput`, with
    /// its usual options. Built plainly: replays the files (or directories of files) named on the command
    /// line, e.g. `FuzzJSON Fuzz/corpus/json` (the committed corpus as a regression test), and prints
    /// `NAME: replayed N inputs`.
    ///
    /// - Parameters:
    ///   - name: The target's name, for the replay's summary.
    ///   - testOneInput: The target's `LLVMFuzzerTestOneInput`.
    public static func main(_ name: String, _ testOneInput: FuzzTestOneInput) -> Never {
        #if FUZZING
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            exit(runFuzzerDriver(&argc, &argv, testOneInput))
        #else
            let count = FuzzReplay.each(CommandLine.arguments.dropFirst()) { bytes in
                bytes.withUnsafeBufferPointer {
                    _ = testOneInput($0.baseAddress ?? UnsafePointer(bitPattern: 1)!, $0.count)
                }
            }
            print("\(name): replayed \(count) inputs")
            exit(0)
        #endif
    }
}
