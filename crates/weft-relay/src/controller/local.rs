//! `ConnectionThreads 0`: the one worker runs on the main thread, driven by
//! the controller's tokio runtime through its epoll descriptor.

use std::time::Duration;

use tracing::error;

use crate::worker::Worker;

/// The raw epoll descriptor of a worker, for tokio's reactor.
struct PollFd(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for PollFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// `ConnectionThreads 0`: run the worker on the main thread, inside the
/// controller's runtime. Its epoll descriptor is readable whenever it has
/// events (sockets, or a wake-up from another thread), so the runtime
/// watches that descriptor and runs a round of the worker when it fires, or
/// at once while the worker has work, or when its housekeeping is due.
pub(super) async fn drive_local_worker(mut w: Worker) {
    // SAFETY: the descriptor is the worker's epoll instance, owned by `w`,
    // which stays alive (and never replaces its Poll) for as long as `fd`:
    // `fd` is a local of this function and is dropped before the parameter
    // `w`. Exercised by every ConnectionThreads 0 test (stock_network.rs
    // connection_threads_0, bad_input.rs).
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            PollFd(w.poll_fd()),
            tokio::io::Interest::READABLE,
        )
    };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            error!("cannot watch the worker's event loop: {e}");
            return;
        }
    };
    while !w.stopped() {
        if let Err(e) = w.turn(Some(Duration::ZERO)) {
            w.failed(&e);
            break;
        }
        match w.sleep_time() {
            Some(d) if d.is_zero() => tokio::task::yield_now().await,
            d => {
                tokio::select! {
                    g = fd.readable() => {
                        if let Ok(mut g) = g {
                            g.clear_ready();
                        }
                    }
                    _ = tokio::time::sleep(d.unwrap_or(Duration::from_secs(1))) => {}
                }
            }
        }
    }
}
