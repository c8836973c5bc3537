//! The feeding worker's sleep ([`super::super::feed_sleep_ns`]): how long a
//! worker that mostly reads for others may leave its sockets unread.

use std::time::Duration;

use super::super::feed_sleep_ns;

const MS: u64 = 1_000_000;
const KIST: Duration = Duration::from_millis(2);

#[test]
fn wakes_before_the_fed_peers_run_in_whole_milliseconds() {
    // Peer runs 1.9 ms from now: read at 1 ms (1.9 − 0.3, rounded down).
    let now = 10 * MS;
    assert_eq!(
        feed_sleep_ns(now, KIST, [Some(now + 1_900_000)].into_iter()),
        Some(MS)
    );
    // Exactly 2 ms away (a full interval): 1.7 ms → 1 ms.
    assert_eq!(
        feed_sleep_ns(now, KIST, [Some(now + 2 * MS)].into_iter()),
        Some(MS)
    );
}

#[test]
fn a_run_too_close_to_feed_is_replaced_by_the_one_after_it() {
    // 0.5 ms away: this run is lost to us; the peer's next is at 2.5 ms,
    // read at 2 ms.
    let now = 10 * MS;
    assert_eq!(
        feed_sleep_ns(now, KIST, [Some(now + MS / 2)].into_iter()),
        Some(2 * MS)
    );
    // A run that is already due counts as too close as well.
    assert_eq!(feed_sleep_ns(now, KIST, [Some(now)].into_iter()), Some(MS));
}

#[test]
fn the_earliest_of_several_fed_peers_wins() {
    let now = 10 * MS;
    let runs = [Some(now + 1_900_000), Some(now + MS / 2)];
    assert_eq!(feed_sleep_ns(now, KIST, runs.into_iter()), Some(MS));
}

#[test]
fn no_quiet_sleep_without_a_sleeping_peer_waiting_for_its_run() {
    let now = 10 * MS;
    // No peer fed last round.
    assert_eq!(feed_sleep_ns(now, KIST, std::iter::empty()), None);
    // A fed peer is awake: it may take the cells now.
    assert_eq!(
        feed_sleep_ns(now, KIST, [Some(now + MS), None].into_iter()),
        None
    );
    // A fed peer sleeps past its next run (nothing of its own to write):
    // the hand-off wakes it, so reading late would only delay cells.
    assert_eq!(
        feed_sleep_ns(now, KIST, [Some(now + 50 * MS)].into_iter()),
        None
    );
    // KIST off: every round writes; nothing to wait for.
    assert_eq!(
        feed_sleep_ns(now, Duration::ZERO, [Some(now + MS)].into_iter()),
        None
    );
    // An interval too short to feed the run after a close one.
    let tiny = Duration::from_micros(500);
    assert_eq!(
        feed_sleep_ns(now, tiny, [Some(now + 400_000)].into_iter()),
        None
    );
}
