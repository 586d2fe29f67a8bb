import Foundation

#if !canImport(UIKit) && !canImport(AppKit)
    extension IndexPath {
        /// An index path to `item` in `section`, as UIKit and AppKit spell it.
        public init(item: Int, section: Int) { self.init(indexes: [section, item]) }
        /// An index path to `row` in `section`, as UIKit spells it.
        public init(row: Int, section: Int) { self.init(indexes: [section, row]) }
        /// The section (the first index).
        public var section: Int { self[0] }
        /// The item within the section (the second index).
        public var item: Int { self[1] }
        /// The row within the section (the second index).
        public var row: Int { self[1] }
    }
#endif

extension IndexPath {
    /// The index path of a wire `[section, item]` pair.
    init?(wire: [Int]?) {
        guard let wire, wire.count == 2 else { return nil }
        self.init(indexes: wire)
    }
}
