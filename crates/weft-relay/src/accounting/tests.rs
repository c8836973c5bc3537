//! Tests of [`super`]: option parsing and interval edges as C Tor's,
//! the states through an interval, the saved state, the wake-up time.

use super::*;

/// Unix time of a UTC date and time.
fn t(y: i32, mo: u8, d: u8, h: u64, mi: u64) -> u64 {
    let date = time::Date::from_calendar_date(y, time::Month::try_from(mo).unwrap(), d).unwrap();
    day_of_date(date) as u64 * 86400 + h * 3600 + mi * 60
}

#[test]
fn options_parse_as_c_tor() {
    assert_eq!(
        parse_start("month 1 0:00").unwrap(),
        AccountingStart::default()
    );
    let w = parse_start("week 7 23:59").unwrap();
    assert_eq!((w.unit, w.day, w.hour, w.minute), (Unit::Week, 7, 23, 59));
    let d = parse_start("day 3:30").unwrap();
    assert_eq!((d.unit, d.day, d.hour, d.minute), (Unit::Day, 0, 3, 30));
    for bad in [
        "month 29 0:00",
        "week 0 1:00",
        "week 8 1:00",
        "day 1 3:30",
        "year 1 0:00",
        "day 24:00",
        "day 3:60",
        "day 3",
        "month",
        "month 1",
        "month 1 0:00 extra",
    ] {
        assert!(parse_start(bad).is_err(), "{bad:?} was accepted");
    }
    assert_eq!(parse_rule("sum").unwrap(), Rule::Sum);
    assert!(parse_rule("both").is_err());
}

#[test]
fn periods_begin_where_c_tor_begins_them() {
    // 2026-11-26 is a Thursday.
    let now = t(2026, 11, 26, 2, 0);
    let day = parse_start("day 3:30").unwrap();
    assert_eq!(
        day.period_containing(now),
        (t(2026, 11, 25, 3, 30), t(2026, 11, 26, 3, 30))
    );
    let month = AccountingStart::default();
    assert_eq!(
        month.period_containing(now),
        (t(2026, 11, 1, 0, 0), t(2026, 12, 1, 0, 0))
    );
    let late = parse_start("month 28 12:00").unwrap();
    assert_eq!(
        late.period_containing(t(2026, 1, 10, 0, 0)),
        (t(2025, 12, 28, 12, 0), t(2026, 1, 28, 12, 0))
    );
    assert_eq!(
        late.period_containing(t(2026, 12, 28, 13, 0)),
        (t(2026, 12, 28, 12, 0), t(2027, 1, 28, 12, 0))
    );
    let monday = parse_start("week 1 0:00").unwrap();
    assert_eq!(
        monday.period_containing(now),
        (t(2026, 11, 23, 0, 0), t(2026, 11, 30, 0, 0))
    );
    // On the day, before the time: the week before.
    let thursday = parse_start("week 4 3:00").unwrap();
    assert_eq!(
        thursday.period_containing(now),
        (t(2026, 11, 19, 3, 0), t(2026, 11, 26, 3, 0))
    );
    assert_eq!(iso_time(t(2026, 2, 28, 23, 59) + 7), "2026-02-28 23:59:07");
}

fn config(max: u64, start: &str) -> AccountingConfig {
    AccountingConfig {
        max,
        rule: Rule::Max,
        start: parse_start(start).unwrap(),
    }
}

#[test]
fn soft_then_hard_then_awake_in_the_next_interval() {
    let now = t(2026, 11, 26, 12, 0);
    let mut a = Accounting::new(config(1000, "day 0:00"), 1 << 20, [7; 20], "", now);
    assert_eq!(a.state(), Hibernation::Awake);
    assert_eq!(
        a.wakeup, a.interval_start,
        "no estimate: awake from the start"
    );
    assert_eq!(a.tick(now + 1, 900, 100, 1), None);
    let (s, why) = a.tick(now + 2, 60, 0, 1).unwrap();
    assert_eq!(s, Hibernation::Soft);
    assert!(why.join(" ").contains("soft limit"), "{why:?}");
    assert_eq!(a.getinfo("hibernating").unwrap(), "soft");
    assert_eq!(a.getinfo("bytes").unwrap(), "960 100");
    assert_eq!(a.getinfo("bytes-left").unwrap(), "40 900");
    let (s, why) = a.tick(now + 3, 40, 0, 1).unwrap();
    assert_eq!(why.len(), 1);
    assert_eq!(s, Hibernation::Hard);
    assert!(why.join(" ").contains("dormant"), "{why:?}");
    assert_eq!(a.tick(now + 4, 0, 0, 1), None);
    // The next day's interval: awake again, with nothing counted.
    // Both limits in one second: both of C's notices.
    let mut b = Accounting::new(config(1000, "day 0:00"), 1 << 20, [7; 20], "", now);
    let (s, why) = b.tick(now + 1, 1000, 0, 1).unwrap();
    assert_eq!(s, Hibernation::Hard);
    assert!(
        why[0].contains("soft limit") && why[1].contains("dormant"),
        "{why:?}"
    );
    let next = t(2026, 11, 27, 0, 0);
    let (s, why) = a.tick(next, 0, 0, 1).unwrap();
    assert_eq!(s, Hibernation::Awake);
    assert!(why.join(" ").contains("Resuming"), "{why:?}");
    assert_eq!(a.getinfo("bytes").unwrap(), "0 0");
    assert_eq!(a.getinfo("interval-start").unwrap(), "2026-11-27 00:00:00");
    assert_eq!(a.getinfo("interval-end").unwrap(), "2026-11-28 00:00:00");
}

#[test]
fn rules_count_their_bytes() {
    let now = t(2026, 11, 26, 12, 0);
    for (rule, bytes, left) in [
        (Rule::Max, 300, (700, 800)),
        (Rule::Sum, 500, (500, 500)),
        (Rule::In, 300, (700, 1000)),
        (Rule::Out, 200, (1000, 800)),
    ] {
        let cfg = AccountingConfig {
            rule,
            ..config(1000, "day 0:00")
        };
        let mut a = Accounting::new(cfg, 1 << 20, [7; 20], "", now);
        a.tick(now + 1, 300, 200, 1);
        assert_eq!((a.bytes(), a.bytes_left()), (bytes, left), "{rule:?}");
    }
}

#[test]
fn a_restart_continues_the_interval_and_an_estimate_places_the_wakeup() {
    let now = t(2026, 11, 26, 12, 0);
    let mut a = Accounting::new(config(1_000_000, "day 0:00"), 1 << 20, [7; 20], "", now);
    a.tick(now + 1, 5000, 7000, 1);
    let saved = a.to_state();
    let b = Accounting::new(
        config(1_000_000, "day 0:00"),
        1 << 20,
        [7; 20],
        &saved,
        now + 60,
    );
    assert_eq!((b.read, b.written), (5000, 7000));
    assert_eq!(b.interval_start, a.interval_start);

    // Last interval moved 600 KB a minute for an hour: 1 MB lasts under
    // two minutes, so the wake-up is somewhere in today's interval, the
    // same after a restart, and weft is dormant until then.
    let yesterday = t(2026, 11, 25, 0, 0);
    let saved = format!(
        "AccountingIntervalStart {yesterday}\nAccountingSecondsActive 3600\nAccountingBytesReadInInterval 36000000\n"
    );
    let early = t(2026, 11, 26, 0, 0) + 10;
    let mut c = Accounting::new(
        config(1_000_000, "day 0:00"),
        1 << 20,
        [7; 20],
        &saved,
        early,
    );
    let again = Accounting::new(
        config(1_000_000, "day 0:00"),
        1 << 20,
        [7; 20],
        &saved,
        early,
    );
    assert_eq!(c.wakeup, again.wakeup);
    assert!(
        c.wakeup > early && c.wakeup < c.interval_end,
        "{}",
        c.wakeup
    );
    assert_eq!(c.getinfo("bytes").unwrap(), "0 0");
    let (s, why) = c.tick(early, 0, 0, 1).unwrap();
    assert_eq!(s, Hibernation::Hard);
    assert!(why.join(" ").contains("wake up at"), "{why:?}");
    assert_eq!(c.tick(c.wakeup - 1, 0, 0, 1), None);
    let (s, _) = c.tick(c.wakeup, 0, 0, 1).unwrap();
    assert_eq!(s, Hibernation::Awake);
    // The expected usage is capped by the configured rate.
    let slow = Accounting::new(config(1_000_000, "day 0:00"), 100, [7; 20], &saved, now);
    assert_eq!(slow.expected_per_min, 6000);
}

#[test]
fn a_bad_state_file_starts_a_fresh_interval() {
    let now = t(2026, 11, 26, 12, 0);
    for saved in [
        "AccountingIntervalStart 18446744073709551615\nAccountingBytesReadInInterval 5\n",
        "AccountingIntervalStart 99999999999\n",
        "AccountingIntervalStart x\nAccountingSecondsActive -3\ngarbage\n",
    ] {
        let a = Accounting::new(config(1000, "day 0:00"), 1 << 20, [7; 20], saved, now);
        assert_eq!(a.interval_start, t(2026, 11, 26, 0, 0), "{saved:?}");
        assert_eq!(a.state(), Hibernation::Awake);
    }
}
