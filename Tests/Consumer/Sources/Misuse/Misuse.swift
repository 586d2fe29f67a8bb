// Must not compile: a delegate that is not main-actor isolated, attached from
// a nonisolated context (make test-consumer checks the diagnostic).
import DepotClient

nonisolated final class BackgroundLog: FetchedResultsControllerDelegate {
    var changes = 0
    func controllerDidChangeContent(_ controller: any FetchedResultsControlling) { changes += 1 }
}

func attach(_ controller: FetchedResultsController<DepotObject>, _ log: BackgroundLog) {
    controller.delegate = log
}
