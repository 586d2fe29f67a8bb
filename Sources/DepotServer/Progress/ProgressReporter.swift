import DepotProtocol
import Foundation

/// Sends work-done `$/progress` for one request: `begin`, throttled `report`s, `end`.
///
/// Used by the one worker thread running the request. Reports come at most
/// every 50 ms (about 20 a second); `end` is always sent.
final class ProgressReporter: @unchecked Sendable {
    private let token: JSONValue
    private let routingID: [UInt8]
    private let notifier: any Notifier
    private var lastReport = ContinuousClock.now - .seconds(1)
    private var total: Int64?
    static let interval: Duration = .milliseconds(50)

    /// A reporter for the request of `routingID` that carried `token`, sending through `notifier`.
    init(token: JSONValue, routingID: [UInt8], notifier: any Notifier) {
        self.token = token
        self.routingID = routingID
        self.notifier = notifier
    }

    private func send(_ value: WorkDoneProgress) {
        notifier.notify(ProgressNotification.self, .init(token: token, value: value.json), to: routingID)
    }

    /// Starts the progress.
    func begin(title: String, total: Int64?) {
        self.total = total
        send(WorkDoneProgress(kind: .begin, title: title, total: total))
    }

    /// Sets the total once it is known.
    func setTotal(_ total: Int64) { self.total = total }

    /// Reports `completed` units, unless a report went out less than 50 ms ago.
    func report(completed: Int64, message: String? = nil, force: Bool = false) {
        let now = ContinuousClock.now
        guard force || now - lastReport >= Self.interval else { return }
        lastReport = now
        send(
            WorkDoneProgress(
                kind: .report, total: total, completed: completed, percentage: percentage(completed), message: message))
    }

    /// Ends the progress.
    func end(completed: Int64, cancelled: Bool, message: String? = nil) {
        send(
            WorkDoneProgress(
                kind: .end, total: total, completed: completed, percentage: percentage(completed), message: message,
                cancelled: cancelled))
    }

    private func percentage(_ completed: Int64) -> Double? {
        guard let total, total > 0 else { return total == 0 ? 100 : nil }
        return min(100, Double(completed) * 100 / Double(total))
    }
}
