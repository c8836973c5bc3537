//! The controller's once-a-second tick as a Linux timerfd in tokio's
//! reactor: one wake-up a second. tokio's own `interval` wakes the thread
//! twice a second for it (its timer wheel parks until the start of the
//! 64 ms slot that holds a deadline a second away, then again for the
//! deadline), which was a third of an idle controller's context switches
//! (issue 53). Falls back to tokio's interval where no timerfd can be made.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

/// Ticks once a second from creation, the first at once (as
/// `tokio::time::interval`); ticks missed while the controller was busy
/// come one after another (tokio's default, `MissedTickBehavior::Burst`).
pub(super) struct SecondTimer {
    source: Source,
    /// Expirations read but not yet handed out.
    pending: u64,
}

enum Source {
    Fd(AsyncFd<OwnedFd>),
    Tokio(tokio::time::Interval),
}

impl SecondTimer {
    /// A timer with period `period` (a second in the controller).
    pub(super) fn new(period: Duration) -> SecondTimer {
        let registered = timerfd(period).and_then(|fd| {
            // SAFETY: the AsyncFd owns `fd` (an OwnedFd), which stays open
            // and returns the same descriptor until the AsyncFd drops it.
            // Tested by `ticks_once_a_period`.
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)
        });
        let source = match registered {
            Ok(fd) => Source::Fd(fd),
            Err(e) => {
                tracing::debug!("no timerfd ({e}): the controller's tick is tokio's interval");
                Source::Tokio(tokio::time::interval(period))
            }
        };
        SecondTimer { source, pending: 0 }
    }

    /// The next tick. Cancel-safe: an expiration read is kept until handed
    /// out.
    pub(super) async fn tick(&mut self) {
        if self.pending > 0 {
            self.pending -= 1;
            return;
        }
        let fd = match &mut self.source {
            Source::Tokio(i) => {
                i.tick().await;
                return;
            }
            Source::Fd(fd) => fd,
        };
        loop {
            let Ok(mut ready) = fd.readable().await else {
                // The reactor is gone (shutdown): never tick again.
                return std::future::pending().await;
            };
            match ready.try_io(|fd| read_expirations(fd.get_ref())) {
                Ok(Ok(n)) => {
                    self.pending = n.saturating_sub(1);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!("reading the controller's timerfd: {e}");
                    return std::future::pending().await;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

/// A non-blocking timerfd on the monotonic clock, due at once and then
/// every `period`.
fn timerfd(period: Duration) -> io::Result<OwnedFd> {
    // SAFETY: timerfd_create takes only integer flags and returns a new
    // descriptor or -1; tested by `ticks_once_a_period`.
    let raw = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just created and own alone.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let spec = libc::itimerspec {
        it_interval: timespec(period),
        // The first expiration at once (a zero value would disarm it).
        it_value: libc::timespec {
            tv_sec: 0,
            tv_nsec: 1,
        },
    };
    // SAFETY: `fd` is a valid timerfd; `spec` lives across the call and the
    // old value pointer may be null.
    let r = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// The expirations since the last read (WouldBlock if none).
fn read_expirations(fd: &OwnedFd) -> io::Result<u64> {
    let mut n: u64 = 0;
    // SAFETY: reads at most 8 bytes into `n`, which we own and which is
    // 8 bytes long; a timerfd read is exactly 8 bytes or fails.
    let r = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut n as *mut u64).cast::<libc::c_void>(),
            std::mem::size_of::<u64>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn ticks_once_a_period() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut t = SecondTimer::new(Duration::from_millis(50));
            assert!(matches!(t.source, Source::Fd(_)), "a timerfd on Linux");
            let t0 = Instant::now();
            // The first tick at once, then one per period.
            t.tick().await;
            assert!(t0.elapsed() < Duration::from_millis(40));
            for _ in 0..3 {
                t.tick().await;
            }
            let took = t0.elapsed();
            assert!(
                took >= Duration::from_millis(145) && took < Duration::from_secs(2),
                "{took:?}"
            );
            // Missed ticks come one after another.
            std::thread::sleep(Duration::from_millis(180));
            let t1 = Instant::now();
            for _ in 0..3 {
                t.tick().await;
            }
            assert!(
                t1.elapsed() < Duration::from_millis(40),
                "{:?}",
                t1.elapsed()
            );
        });
    }

    #[test]
    fn a_cancelled_tick_loses_no_expiration() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut t = SecondTimer::new(Duration::from_millis(30));
            t.tick().await;
            // A select that another branch wins drops the tick's future.
            tokio::select! {
                biased;
                _ = std::future::ready(()) => {}
                _ = t.tick() => panic!("not yet"),
            }
            std::thread::sleep(Duration::from_millis(70));
            let t0 = Instant::now();
            t.tick().await;
            t.tick().await;
            assert!(
                t0.elapsed() < Duration::from_millis(25),
                "{:?}",
                t0.elapsed()
            );
        });
    }
}
