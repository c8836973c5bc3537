//! KIST socket scheduling (Jansen et al., "Never Been KIST", USENIX Security
//! 2014; C Tor's scheduler_kist.c): before writing to a connection, ask the
//! kernel how much it can send now and write at most that, so that cells
//! wait in the relay's own circuit queues — where EWMA priority still
//! applies — rather than in the socket's send buffer.
//!
//! The limit for one connection, as C Tor computes it:
//!
//! ```text
//! tcp_space   = (cwnd − unacked) · mss          (TCP_INFO)
//! extra_space = cwnd · mss · KISTSockBufSizeFactor − notsent   (SIOCOUTQNSD)
//! limit       = tcp_space + extra_space   (≥ 0)
//! ```
//!
//! Where TCP_INFO is not available the limit is "a full write batch" (the
//! plain fallback, like C Tor's KISTLite). Scheduling runs every
//! `KISTSchedRunInterval` milliseconds (torrc, else the consensus, else
//! weft's default of 2 ms; C Tor's built-in default is 10 ms, param-spec;
//! 0 turns KIST off and writes every round).
//!
//! [`sleeps_to_run`] is the cadence's rule for a worker's sleep: while runs
//! keep finding cells, the worker sleeps to its next run and lets socket
//! readiness wait for it.

use std::time::{Duration, Instant};

/// What the kernel said about one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketState {
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Segments sent, not yet acknowledged.
    pub unacked: u32,
    /// Maximum segment size, bytes.
    pub mss: u32,
    /// Bytes in the send queue not yet sent (SIOCOUTQNSD).
    pub notsent: u32,
    /// Bytes in the send queue in all (SIOCOUTQ).
    pub outq: u32,
}

/// C Tor's KIST limit for a socket in `state`, in bytes.
pub fn limit(state: &SocketState, sock_buf_factor: f64) -> u64 {
    let tcp_space = i64::from(state.cwnd.saturating_sub(state.unacked)) * i64::from(state.mss);
    let extra = (f64::from(state.cwnd) * f64::from(state.mss) * sock_buf_factor) as i64
        - i64::from(state.notsent);
    (tcp_space + extra).max(0) as u64
}

/// Ask the kernel about socket `fd` (Linux: TCP_INFO, SIOCOUTQ,
/// SIOCOUTQNSD). `None` where that is not available.
pub fn socket_state(fd: std::os::fd::RawFd) -> Option<SocketState> {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes
    // into it and sets `len`; fd is a socket the caller owns for the call.
    let info = unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        if r != 0 || (len as usize) < std::mem::offset_of!(libc::tcp_info, tcpi_snd_cwnd) + 4 {
            return None;
        }
        info
    };
    let mut notsent: libc::c_int = 0;
    let mut outq: libc::c_int = 0;
    // SAFETY: both ioctls write one int into the variable we pass.
    let ok = unsafe {
        libc::ioctl(fd, libc::SIOCOUTQNSD as _, &mut notsent) == 0
            && libc::ioctl(fd, libc::TIOCOUTQ as _, &mut outq) == 0
    };
    if !ok {
        return None;
    }
    Some(SocketState {
        cwnd: info.tcpi_snd_cwnd,
        unacked: info.tcpi_unacked,
        mss: info.tcpi_snd_mss,
        notsent: notsent.max(0) as u32,
        outq: outq.max(0) as u32,
    })
}

/// Where a worker stands before it sleeps, for [`sleeps_to_run`].
#[derive(Debug, Clone, Copy)]
pub struct SleepPlan {
    /// `KISTSchedRunInterval` (zero: KIST off).
    pub interval: Duration,
    /// The sleep's length (None: no deadline).
    pub timeout: Option<Duration>,
    /// When the sleep starts.
    pub now: Instant,
    /// The next KIST run on the fixed cadence (set by the last run that
    /// had cells to write).
    pub next_run: Instant,
    /// When the worker can next write cells it holds (None: it holds none
    /// it can write).
    pub next_write: Option<Instant>,
    /// The worker's next housekeeping.
    pub next_housekeeping: Instant,
}

/// The next run after a run at `now` that was due at `due`: one interval
/// after `due`, so that a run that starts late (the poll timeout is rounded
/// up to whole milliseconds) does not push the cadence, or one interval
/// from `now` if that is already past (the cadence had lapsed).
pub fn next_run_after(due: Instant, interval: Duration, now: Instant) -> Instant {
    let next = due + interval;
    if next > now {
        next
    } else {
        now + interval
    }
}

/// True while the cadence is live at `now`: the last run wrote cells less
/// than one interval ago, so the next one is due within the interval.
pub fn cadence_live(interval: Duration, next_run: Instant, now: Instant) -> bool {
    !interval.is_zero() && next_run > now
}

/// True if the coming sleep ends at the next KIST run and socket readiness
/// may wait for that run (the worker's quiet sleep): cells read earlier
/// would wait in the relay's queue for the same run. That holds when the
/// worker holds cells for the run, and also while the cadence is live and
/// it holds none (it wrote everything at its last run): under load a
/// worker then wakes once per interval, not once per socket event and
/// again for the run. Once a run finds nothing to write the cadence lapses
/// and the first cell after a pause is read and written at once.
pub fn sleeps_to_run(p: &SleepPlan) -> bool {
    let short = p.timeout.is_some_and(|t| !t.is_zero() && t <= p.interval);
    if p.interval.is_zero() || !short || p.next_run > p.next_housekeeping {
        return false;
    }
    match p.next_write {
        Some(t) => t == p.next_run,
        None => cadence_live(p.interval, p.next_run, p.now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(now: Instant) -> SleepPlan {
        let ms = Duration::from_millis(1);
        SleepPlan {
            interval: 2 * ms,
            timeout: Some(ms),
            now,
            next_run: now + ms,
            next_write: Some(now + ms),
            next_housekeeping: now + 500 * ms,
        }
    }

    /// A late run keeps the cadence; a lapsed one starts it again from now.
    #[test]
    fn the_cadence_is_fixed_unless_it_lapsed() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        assert_eq!(next_run_after(t, 2 * ms, t), t + 2 * ms);
        assert_eq!(
            next_run_after(t, 2 * ms, t + ms),
            t + 2 * ms,
            "late by 1 ms"
        );
        assert_eq!(next_run_after(t, 2 * ms, t + 5 * ms), t + 7 * ms, "lapsed");
    }

    /// Cells waiting for the run: quiet, as before; also with none held
    /// while the cadence is live; not once it lapsed, not past
    /// housekeeping, not without KIST, not when the write bucket and not
    /// the run sets the wake-up.
    #[test]
    fn the_quiet_sleep_follows_the_cadence() {
        let now = Instant::now();
        let ms = Duration::from_millis(1);
        assert!(sleeps_to_run(&plan(now)));
        let idle = SleepPlan {
            next_write: None,
            ..plan(now)
        };
        assert!(sleeps_to_run(&idle), "live cadence, nothing held");
        // The run was due 1 ms ago and found nothing to write: a short
        // sleep (to housekeeping, say) is not quiet.
        let lapsed = SleepPlan {
            now: now + 2 * ms,
            next_run: now + ms,
            ..idle
        };
        assert!(!cadence_live(lapsed.interval, lapsed.next_run, lapsed.now));
        assert!(
            !sleeps_to_run(&lapsed),
            "a lapsed cadence wakes for sockets"
        );
        let housekeeping_first = SleepPlan {
            next_housekeeping: now + ms / 2,
            timeout: Some(ms / 2),
            ..idle
        };
        assert!(!sleeps_to_run(&housekeeping_first));
        let no_kist = SleepPlan {
            interval: Duration::ZERO,
            ..plan(now)
        };
        assert!(!sleeps_to_run(&no_kist));
        let bucket = SleepPlan {
            next_write: Some(now + 3 * ms),
            timeout: Some(ms),
            ..plan(now)
        };
        assert!(!sleeps_to_run(&bucket), "the write bucket sets the wake-up");
        let zero = SleepPlan {
            timeout: Some(Duration::ZERO),
            ..plan(now)
        };
        assert!(!sleeps_to_run(&zero), "work waiting: no sleep at all");
    }
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn limit_is_c_tors_formula() {
        let s = SocketState {
            cwnd: 10,
            unacked: 4,
            mss: 1000,
            notsent: 3000,
            outq: 7000,
        };
        // tcp_space = 6·1000; extra = 10·1000·1.0 − 3000 = 7000.
        assert_eq!(limit(&s, 1.0), 13_000);
        // A full send buffer gives nothing.
        let full = SocketState {
            notsent: 50_000,
            unacked: 10,
            ..s
        };
        assert_eq!(limit(&full, 1.0), 0);
        assert_eq!(limit(&s, 0.0), 3_000);
    }

    /// On a real loopback TCP socket the kernel answers, and unsent bytes
    /// show up once the peer stops reading.
    #[test]
    fn real_socket_reports_its_queue() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap();
        let s = socket_state(c.as_raw_fd()).expect("TCP_INFO on Linux");
        assert!(s.cwnd > 0 && s.mss > 0, "{s:?}");
        assert_eq!(s.outq, 0);
        c.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let mut sent = 0usize;
        while sent < 64 << 20 {
            match c.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        let s = socket_state(c.as_raw_fd()).unwrap();
        assert!(
            s.outq > 0,
            "the peer does not read: bytes wait in the send queue ({s:?})"
        );
        assert!(limit(&s, 1.0) < sent as u64);
    }
}
