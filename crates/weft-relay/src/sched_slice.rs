//! A worker thread's request to the kernel's scheduler for a longer time
//! slice (`WorkerSchedSlice`).
//!
//! When more runnable threads than cores share a core (more workers than
//! cores, or other busy processes beside the relay), the kernel alternates
//! them every base slice (1.4 ms on the 2-CPU benchmark VM; it grows
//! slowly with the CPU count). Each switch costs a
//! worker its warm caches: its pool slots, circuit maps and EWMA heaps are
//! evicted by the other thread's. Linux ≥ 6.12 (EEVDF) lets a
//! `SCHED_OTHER` thread ask for its own slice (0.1–100 ms) through
//! `sched_setattr(2)`'s `sched_runtime`; a worker asks for a few
//! milliseconds, so it runs in longer stretches when it must share. A
//! worker alone on its core is never preempted by a sibling, so there the
//! request changes nothing. See docs/perf.md ("Two workers on one core").
//!
//! The request keeps the thread's policy, nice value and flags (it reads
//! them first), touches only fair-class threads, and is verified by reading
//! the slice back: an older kernel accepts and ignores it.

use std::time::Duration;

/// The kernel's `struct sched_attr` (`SCHED_ATTR_SIZE_VER1`, 56 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Shortest and longest slice the kernel accepts for a fair thread.
pub const SLICE_RANGE: (Duration, Duration) =
    (Duration::from_micros(100), Duration::from_millis(100));

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceOutcome {
    /// The kernel now gives this thread the requested slice.
    Set,
    /// The thread is not in the fair class (real-time or deadline policy,
    /// set by the operator); left alone.
    NotFairClass,
    /// The kernel accepted the call but reports another slice: it has no
    /// per-thread slices (Linux before 6.12).
    Unsupported,
}

/// `sched_getattr(2)` for thread `tid` (0 = the calling thread).
fn get_attr_of(tid: libc::pid_t) -> std::io::Result<SchedAttr> {
    let mut a = SchedAttr::default();
    // SAFETY: `a` is a live, writable `sched_attr` of the size we pass; the
    // kernel writes at most `size` bytes into it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut a as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(a)
}

/// `sched_getattr(2)` for the calling thread.
fn get_attr() -> std::io::Result<SchedAttr> {
    get_attr_of(0)
}

/// `sched_setattr(2)` for the calling thread.
fn set_attr(a: &SchedAttr) -> std::io::Result<()> {
    // SAFETY: `a` is a valid `sched_attr` whose `size` field names its
    // length; the kernel only reads it. pid 0 = calling thread.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, a as *const SchedAttr, 0u32) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Thread `tid`'s current slice as the kernel reports it (0 = the calling
/// thread). Zero when the kernel has no per-thread slices or the thread is
/// not fair-class.
pub fn slice_of(tid: libc::pid_t) -> std::io::Result<Duration> {
    Ok(Duration::from_nanos(get_attr_of(tid)?.sched_runtime))
}

/// Ask for `slice` (clamped to [`SLICE_RANGE`]) on the calling thread.
pub fn request(slice: Duration) -> std::io::Result<SliceOutcome> {
    let slice = slice.clamp(SLICE_RANGE.0, SLICE_RANGE.1);
    let mut a = get_attr()?;
    if a.sched_policy != libc::SCHED_OTHER as u32 && a.sched_policy != libc::SCHED_BATCH as u32 {
        return Ok(SliceOutcome::NotFairClass);
    }
    a.size = std::mem::size_of::<SchedAttr>() as u32;
    a.sched_runtime = slice.as_nanos() as u64;
    a.sched_deadline = 0;
    a.sched_period = 0;
    set_attr(&a)?;
    Ok(if get_attr()?.sched_runtime == a.sched_runtime {
        SliceOutcome::Set
    } else {
        SliceOutcome::Unsupported
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_has_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 56);
    }

    /// Exercises both syscalls on a scratch thread: the request keeps the
    /// nice value, and on a kernel with per-thread slices it reads back.
    #[test]
    fn request_sets_the_slice_and_keeps_nice() {
        std::thread::spawn(|| {
            let nice = (get_attr().expect("sched_getattr").sched_nice + 1).min(19);
            // SAFETY: plain syscall on the calling thread (who 0 with
            // PRIO_PROCESS on Linux = this thread); no memory involved.
            let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
            assert_eq!(r, 0);
            let before = get_attr().expect("sched_getattr");
            assert_eq!(before.sched_nice, nice);
            let out = request(Duration::from_millis(7)).expect("sched_setattr");
            let after = get_attr().expect("sched_getattr");
            assert_eq!(after.sched_nice, nice, "nice value kept");
            assert_eq!(after.sched_policy, before.sched_policy, "policy kept");
            match out {
                SliceOutcome::Set => {
                    assert_eq!(slice_of(0).unwrap(), Duration::from_millis(7));
                    // Out-of-range requests are clamped, not refused.
                    assert_eq!(request(Duration::from_secs(5)).unwrap(), SliceOutcome::Set);
                    assert_eq!(slice_of(0).unwrap(), SLICE_RANGE.1);
                }
                SliceOutcome::Unsupported => {
                    eprintln!("kernel has no per-thread slices (Linux < 6.12)")
                }
                SliceOutcome::NotFairClass => panic!("test thread is not fair-class"),
            }
        })
        .join()
        .unwrap();
    }
}
