#if canImport(Glibc)
    /// glibc's `malloc_trim`, which the Glibc module does not export: returns
    /// freed heap pages to the system after a large, short-lived allocation.
    @_silgen_name("malloc_trim")
    private func glibcMallocTrim(_ pad: Int) -> Int32

    /// Hands freed heap memory back to the system.
    func trimFreedMemory() { _ = glibcMallocTrim(0) }
#else
    /// Nothing to do where `malloc_trim` does not exist.
    func trimFreedMemory() {}
#endif
