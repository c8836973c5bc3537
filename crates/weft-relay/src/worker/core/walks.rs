//! Counting the core's walks over whole tables (every connection, every
//! half, every stream or conflux set), for the tests only: issue 37's
//! rule is that no per-round or per-cell path walks them, so that a
//! worker with 100,000 idle circuits spends on a cell what it spends with
//! ten. Each walk calls [`visit`] with the size of the table it walks;
//! the scale tests ([`crate::worker::core::tests`]) read the count back
//! with [`take`] around the paths they drive. Outside the tests this
//! compiles to nothing.

#[cfg(test)]
thread_local! {
    static VISITED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A walk over a whole table of `entries` entries begins.
#[inline(always)]
pub(crate) fn visit(entries: usize) {
    #[cfg(test)]
    VISITED.with(|v| v.set(v.get() + entries as u64));
    #[cfg(not(test))]
    let _ = entries;
}

/// Entries visited on this thread since the last call.
#[cfg(test)]
pub(crate) fn take() -> u64 {
    VISITED.with(|v| v.replace(0))
}
