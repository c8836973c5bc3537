//! The process's memory allocator, chosen at start-up by the environment
//! variable `WEFT_ALLOCATOR` (`system`, the default; `mimalloc`;
//! `jemalloc`), so one binary can be measured with each (weft-bench
//! compare). Engler's thesis found the allocator mattered once cells cross
//! threads; weft's hot path is meant not to allocate at all, and this switch
//! is how that claim is checked.
//!
//! Every allocation also bumps a per-thread counter ([`thread_allocations`]),
//! which workers report as `weft_worker_allocations_total`.
//!
//! The choice is made once, at the first allocation, by reading the
//! environment with `getenv` (which does not allocate); every later call goes
//! to the same allocator, so memory is always freed by the allocator that
//! made it.
//!
//! With the system allocator on glibc, weft fixes the mmap threshold at
//! start ([`SwitchableAllocator::return_large_blocks_to_os`]), so link
//! buffers and cell pools go back to the kernel when they are freed instead
//! of staying in malloc's arenas at their high-water mark.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

thread_local! {
    /// Allocations (alloc, alloc_zeroed, realloc) made on this thread. A
    /// const-initialised Cell: reading or bumping it never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Heap allocations made on the calling thread so far. Workers report it on
/// the MetricsPort; the hot path is meant to keep it flat.
pub fn thread_allocations() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

#[inline]
fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;
const JEMALLOC: u8 = 3;

/// The dispatching allocator installed as `#[global_allocator]`.
pub struct SwitchableAllocator {
    choice: AtomicU8,
}

impl SwitchableAllocator {
    /// Undecided until the first allocation.
    pub const fn new() -> Self {
        SwitchableAllocator {
            choice: AtomicU8::new(UNDECIDED),
        }
    }

    #[inline]
    fn choice(&self) -> u8 {
        let c = self.choice.load(Ordering::Relaxed);
        if c != UNDECIDED {
            return c;
        }
        // SAFETY: getenv with a NUL-terminated name; the returned pointer is
        // read only while no thread can be changing the environment (the
        // first allocation happens before main runs user code), and only up
        // to its NUL.
        let v = unsafe {
            let p = libc::getenv(c"WEFT_ALLOCATOR".as_ptr());
            if p.is_null() {
                SYSTEM
            } else {
                match std::ffi::CStr::from_ptr(p).to_bytes() {
                    b"mimalloc" => MIMALLOC,
                    b"jemalloc" => JEMALLOC,
                    _ => SYSTEM,
                }
            }
        };
        // The first caller wins; everyone uses its answer.
        match self
            .choice
            .compare_exchange(UNDECIDED, v, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => v,
            Err(existing) => existing,
        }
    }

    /// The allocator in use, by name.
    pub fn name(&self) -> &'static str {
        match self.choice() {
            MIMALLOC => "mimalloc",
            JEMALLOC => "jemalloc",
            _ => "system",
        }
    }
}

/// Blocks at least this large get their own mapping from the system
/// allocator and go back to the kernel when freed: a link's read buffer
/// (132 KiB), grown write buffers, the worker cell pools.
pub const MMAP_THRESHOLD: usize = 128 * 1024;

impl SwitchableAllocator {
    /// With the system allocator on glibc, fix its mmap threshold at
    /// [`MMAP_THRESHOLD`]. glibc's default threshold is dynamic: the first
    /// large block freed raises it to that block's size (up to 32 MiB), and
    /// from then on large buffers come from the heap arenas, which keep them
    /// after they are freed. A relay's link buffers and cell pools would
    /// then hold their high-water mark for the life of the process, even
    /// after the connections that needed them closed. Returns whether the
    /// threshold was set (false with mimalloc or jemalloc, which return
    /// memory on their own, and off glibc).
    pub fn return_large_blocks_to_os(&self) -> bool {
        if self.choice() != SYSTEM {
            return false;
        }
        set_mmap_threshold()
    }
}

impl SwitchableAllocator {
    /// With the system allocator on glibc, give the free pages inside
    /// malloc's heap arenas back to the kernel (`malloc_trim(0)`: free
    /// chunks' whole pages are `MADV_DONTNEED`ed, the top of each heap
    /// unmapped). glibc gives back only the top of a heap by itself, so
    /// the blocks of a thousand links that went idle (each its write
    /// buffer, its read buffer, OpenSSL's two record buffers) would stay
    /// resident between the blocks still in use. The relay's workers call
    /// it after idle links gave their buffers back (at most once a second
    /// each); it walks every arena's free lists under that arena's lock.
    /// Returns whether memory was given back (false with mimalloc or
    /// jemalloc, which return memory on their own, and off glibc).
    pub fn trim(&self) -> bool {
        if self.choice() != SYSTEM {
            return false;
        }
        malloc_trim()
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_trim() -> bool {
    // SAFETY: malloc_trim takes each arena's lock itself and only returns
    // pages of free chunks (and the top of each heap) to the kernel; live
    // blocks are untouched, so it may run at any time on any thread.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_mmap_threshold() -> bool {
    // SAFETY: mallopt only changes glibc's malloc parameters (under its own
    // lock); M_MMAP_THRESHOLD with a value below its 32 MiB maximum is
    // valid at any time, and blocks already allocated are unaffected.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold() -> bool {
    false
}

impl Default for SwitchableAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to one of three allocators that implement
// GlobalAlloc correctly, and the choice never changes after the first call,
// so a block is always freed/reallocated by the allocator that made it.
unsafe impl GlobalAlloc for SwitchableAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match self.choice() {
                MIMALLOC => mimalloc::MiMalloc.alloc(layout),
                JEMALLOC => tikv_jemallocator::Jemalloc.alloc(layout),
                _ => System.alloc(layout),
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match self.choice() {
                MIMALLOC => mimalloc::MiMalloc.dealloc(ptr, layout),
                JEMALLOC => tikv_jemallocator::Jemalloc.dealloc(ptr, layout),
                _ => System.dealloc(ptr, layout),
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match self.choice() {
                MIMALLOC => mimalloc::MiMalloc.alloc_zeroed(layout),
                JEMALLOC => tikv_jemallocator::Jemalloc.alloc_zeroed(layout),
                _ => System.alloc_zeroed(layout),
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match self.choice() {
                MIMALLOC => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                JEMALLOC => tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size),
                _ => System.realloc(ptr, layout, new_size),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_allocator_round_trips() {
        for c in [SYSTEM, MIMALLOC, JEMALLOC] {
            let a = SwitchableAllocator {
                choice: AtomicU8::new(c),
            };
            let layout = Layout::from_size_align(4096, 64).unwrap();
            // SAFETY: non-zero layout; the block is freed by the same
            // allocator with the same layout after use.
            let before = thread_allocations();
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(*p.add(4095), 0);
                *p = 7;
                let q = a.realloc(p, layout, 8192);
                assert_eq!(*q, 7);
                a.dealloc(q, Layout::from_size_align(8192, 64).unwrap());
            }
            assert_eq!(
                thread_allocations() - before,
                2,
                "alloc_zeroed + realloc counted"
            );
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn large_blocks_freed_go_back_to_the_kernel() {
        let a = SwitchableAllocator {
            choice: AtomicU8::new(SYSTEM),
        };
        assert!(a.return_large_blocks_to_os());
        let mapped = || {
            // SAFETY: mallinfo2 only reads glibc's statistics.
            unsafe { libc::mallinfo2().hblkhd }
        };
        let big = Layout::from_size_align(4 << 20, 64).unwrap();
        let buf = Layout::from_size_align(MMAP_THRESHOLD + 4096, 64).unwrap();
        // SAFETY: non-zero layouts; each block is freed by the allocator
        // that made it, with its layout.
        unsafe {
            // Freeing a large block is what raises glibc's dynamic threshold.
            let p = a.alloc(big);
            assert!(!p.is_null());
            a.dealloc(p, big);
            let before = mapped();
            let q = a.alloc(buf);
            assert!(!q.is_null());
            let during = mapped();
            a.dealloc(q, buf);
            assert!(
                during >= before + buf.size(),
                "a {} byte block is its own mapping ({before} -> {during})",
                buf.size()
            );
            assert!(mapped() < during, "and is unmapped when freed");
        }
        let other = SwitchableAllocator {
            choice: AtomicU8::new(JEMALLOC),
        };
        assert!(!other.return_large_blocks_to_os());
    }

    /// Resident bytes of this process (/proc/self/statm).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss() -> usize {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// Blocks freed between blocks still in use stay resident in glibc's
    /// arena until `trim` gives their pages back.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_gives_back_free_pages_between_live_blocks() {
        let a = SwitchableAllocator {
            choice: AtomicU8::new(SYSTEM),
        };
        // A thread of its own, like a worker: its own arena.
        std::thread::spawn(move || {
            let layout = Layout::from_size_align(16 * 1024, 16).unwrap();
            // SAFETY: non-zero layout; every block is written within its
            // size and freed once, with its layout, by the same allocator.
            let blocks: Vec<*mut u8> = (0..2048)
                .map(|_| unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    std::ptr::write_bytes(p, 1, layout.size());
                    p
                })
                .collect();
            // Free seven of every eight: 28 MiB free, none of it at the top.
            for (i, &p) in blocks.iter().enumerate() {
                if i % 8 != 7 {
                    // SAFETY: allocated above with `layout`, freed once.
                    unsafe { a.dealloc(p, layout) };
                }
            }
            let before = rss();
            assert!(a.trim());
            let after = rss();
            assert!(
                after + (16 << 20) < before,
                "trim gave back {} KiB",
                (before.saturating_sub(after)) >> 10
            );
            for (i, &p) in blocks.iter().enumerate() {
                if i % 8 == 7 {
                    // SAFETY: the blocks kept above, freed once each.
                    unsafe { a.dealloc(p, layout) };
                }
            }
            let other = SwitchableAllocator {
                choice: AtomicU8::new(JEMALLOC),
            };
            assert!(!other.trim());
        })
        .join()
        .unwrap();
    }
}
