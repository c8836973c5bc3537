//! Bandwidth accounting and hibernation (`AccountingMax`,
//! `AccountingStart`, `AccountingRule`), as C Tor's hibernate.c: the
//! accounting interval (a day, week or month from a start time), the bytes
//! counted in it, the expected usage that places the wake-up time, and the
//! states — live, low bandwidth (the soft limit: no new connections,
//! circuits or streams; open ones go on) and dormant (the hard limit, or
//! before the wake-up time: every relay connection closed) until the
//! interval ends or the wake-up time comes. Sans-IO: the controller feeds
//! it bytes and the clock each second and acts on the transitions; times
//! are Unix seconds, in UTC (C Tor uses local time).

use std::fmt::Write;

/// `AccountingRule`: which bytes count against `AccountingMax`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rule {
    /// The larger of bytes read and bytes written (C's default).
    #[default]
    Max,
    /// Read plus written.
    Sum,
    /// Bytes read.
    In,
    /// Bytes written.
    Out,
}

/// `AccountingStart`'s unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Every day at hour:minute.
    Day,
    /// Every week on `day` (1 Monday … 7 Sunday).
    Week,
    /// Every month on `day` (1…28).
    Month,
}

/// `AccountingStart unit [day] HH:MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountingStart {
    /// Day, week or month.
    pub unit: Unit,
    /// Day of the week or month (0 for days).
    pub day: u8,
    /// Hour, 0…23.
    pub hour: u8,
    /// Minute, 0…59.
    pub minute: u8,
}

impl Default for AccountingStart {
    /// C's default: `month 1 0:00`.
    fn default() -> Self {
        AccountingStart {
            unit: Unit::Month,
            day: 1,
            hour: 0,
            minute: 0,
        }
    }
}

/// The accounting options (present only when `AccountingMax` is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountingConfig {
    /// `AccountingMax`, bytes per interval.
    pub max: u64,
    /// `AccountingRule`.
    pub rule: Rule,
    /// `AccountingStart`.
    pub start: AccountingStart,
}

/// Parse `AccountingRule`. [C relay_config.c]
pub fn parse_rule(v: &str) -> Result<Rule, String> {
    Ok(match v.trim() {
        "max" => Rule::Max,
        "sum" => Rule::Sum,
        "in" => Rule::In,
        "out" => Rule::Out,
        _ => return Err("AccountingRule must be 'sum', 'max', 'in', or 'out'".into()),
    })
}

/// Parse `AccountingStart`. [C hibernate.c accounting_parse_options()]
pub fn parse_start(v: &str) -> Result<AccountingStart, String> {
    let items: Vec<&str> = v.split_whitespace().collect();
    if items.len() < 2 {
        return Err("too few arguments to AccountingStart".into());
    }
    let unit = match items[0].to_ascii_lowercase().as_str() {
        "month" => Unit::Month,
        "week" => Unit::Week,
        "day" => Unit::Day,
        u => {
            return Err(format!(
                "unrecognized accounting unit '{u}': only 'month', 'week', and 'day' are supported"
            ))
        }
    };
    let day_in = |lo: u8, hi: u8, what: &str| -> Result<u8, String> {
        items[1]
            .parse::<u8>()
            .ok()
            .filter(|d| (lo..=hi).contains(d))
            .ok_or_else(|| format!("{what} accounting must begin on a day between {lo} and {hi}"))
    };
    let (day, idx) = match unit {
        Unit::Week => (day_in(1, 7, "weekly")?, 2),
        Unit::Month => (day_in(1, 28, "monthly")?, 2),
        Unit::Day => (0, 1),
    };
    if items.len() != idx + 1 {
        return Err(format!(
            "accounting unit '{}' requires {idx} argument{}",
            items[0],
            if idx > 1 { "s" } else { "" }
        ));
    }
    let (h, m) = items[idx]
        .split_once(':')
        .ok_or("accounting start time not parseable: not in HH:MM format")?;
    let hour = h
        .parse::<u8>()
        .ok()
        .filter(|h| *h <= 23)
        .ok_or("accounting start time not parseable: bad hour")?;
    let minute = m
        .parse::<u8>()
        .ok()
        .filter(|m| *m <= 59)
        .ok_or("accounting start time not parseable: bad minute")?;
    Ok(AccountingStart {
        unit,
        day,
        hour,
        minute,
    })
}

/// Julian day number of 1970-01-01.
const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;

/// The calendar date of a day number (days since 1970-01-01, UTC).
fn date_of_day(day: i64) -> Option<time::Date> {
    i32::try_from(day + UNIX_EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|j| time::Date::from_julian_day(j).ok())
}

/// The day number of a calendar date.
fn day_of_date(d: time::Date) -> i64 {
    i64::from(d.to_julian_day()) - UNIX_EPOCH_JULIAN_DAY
}

impl AccountingStart {
    /// The start of the accounting period containing `now`, and the start
    /// of the next. [C edge_of_accounting_period_containing()]
    pub fn period_containing(&self, now: u64) -> (u64, u64) {
        let now = now as i64;
        let day = now.div_euclid(86400);
        let secs = now.rem_euclid(86400);
        let at = i64::from(self.hour) * 3600 + i64::from(self.minute) * 60;
        let before = secs < at;
        let (start_day, end_day) = match self.unit {
            Unit::Day => {
                let s = if before { day - 1 } else { day };
                (s, s + 1)
            }
            Unit::Week => {
                // tm_wday: 0 Sunday; 1970-01-01 was a Thursday.
                let wday = (day + 4).rem_euclid(7);
                let target = i64::from(self.day) % 7;
                let mut delta = (7 + wday - target) % 7;
                if delta == 0 && before {
                    delta = 7;
                }
                (day - delta, day - delta + 7)
            }
            Unit::Month => {
                // Days 1…28 exist in every month; a date out of the
                // calendar's range (a bogus clock) falls back to one day.
                let month_start = |y: i32, m: time::Month| {
                    time::Date::from_calendar_date(y, m, self.day)
                        .ok()
                        .map(day_of_date)
                };
                let span = date_of_day(day).and_then(|date| {
                    let (mut y, mut m) = (date.year(), date.month());
                    let d = date.day();
                    if d < self.day || (d == self.day && before) {
                        m = m.previous();
                        if m == time::Month::December {
                            y -= 1;
                        }
                    }
                    let (ny, nm) = match m {
                        time::Month::December => (y + 1, time::Month::January),
                        _ => (y, m.next()),
                    };
                    Some((month_start(y, m)?, month_start(ny, nm)?))
                });
                span.unwrap_or((day, day + 1))
            }
        };
        (
            (start_day * 86400 + at) as u64,
            (end_day * 86400 + at) as u64,
        )
    }
}

/// Where hibernation stands. [C hibernate_state_t]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hibernation {
    /// Relaying.
    Awake,
    /// Soft limit: no new connections, circuits or streams.
    Soft,
    /// Hard limit or before the wake-up time: relay connections closed.
    Hard,
}

impl Hibernation {
    /// As `GETINFO accounting/hibernating` says it.
    pub fn name(self) -> &'static str {
        match self {
            Hibernation::Awake => "awake",
            Hibernation::Soft => "soft",
            Hibernation::Hard => "hard",
        }
    }
}

/// Wait this long into an interval before trusting its rate. [C]
const MIN_TIME_FOR_MEASUREMENT: u64 = 1800;

/// The accounting state.
#[derive(Debug, Clone)]
pub struct Accounting {
    cfg: AccountingConfig,
    /// Bytes per second the relay may move (BandwidthRate or
    /// RelayBandwidthRate): caps the expected usage.
    rate: u64,
    /// Seeds the wake-up time (C: the identity digest).
    seed: [u8; 20],
    /// The interval.
    pub interval_start: u64,
    /// Its end (the next one's start).
    pub interval_end: u64,
    /// When we wake up in it.
    pub wakeup: u64,
    /// Bytes read in the interval.
    pub read: u64,
    /// Bytes written in the interval.
    pub written: u64,
    seconds_active: u64,
    /// Expected bytes per minute (0: unknown).
    expected_per_min: u64,
    soft_hit_at: u64,
    bytes_at_soft: u64,
    secs_to_soft: u64,
    state: Hibernation,
    /// Dormant until then.
    hibernate_end: u64,
}

impl Accounting {
    /// Start accounting at `now`, continuing the interval recorded in
    /// `saved` (the state file's `Accounting*` lines) if it is the current
    /// one. [C configure_accounting()]
    pub fn new(cfg: AccountingConfig, rate: u64, seed: [u8; 20], saved: &str, now: u64) -> Self {
        let mut a = Accounting {
            cfg,
            rate,
            seed,
            interval_start: 0,
            interval_end: 0,
            wakeup: 0,
            read: 0,
            written: 0,
            seconds_active: 0,
            expected_per_min: 0,
            soft_hit_at: 0,
            bytes_at_soft: 0,
            secs_to_soft: 0,
            state: Hibernation::Awake,
            hibernate_end: 0,
        };
        a.load(saved, now);
        a.configure(now);
        a
    }

    /// New options on reload: the bytes counted so far stay.
    pub fn set_config(&mut self, cfg: AccountingConfig, rate: u64, now: u64) {
        let period_changed = cfg.start != self.cfg.start;
        self.cfg = cfg;
        self.rate = rate;
        if period_changed {
            self.configure(now);
        }
    }

    /// The options in force.
    pub fn config(&self) -> AccountingConfig {
        self.cfg
    }

    fn load(&mut self, text: &str, now: u64) {
        for l in text.lines() {
            let mut t = l.split_whitespace();
            let (Some(k), Some(v)) = (t.next(), t.next()) else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            match k {
                "AccountingBytesReadInInterval" => self.read = v,
                "AccountingBytesWrittenInInterval" => self.written = v,
                "AccountingExpectedUsage" => self.expected_per_min = v,
                // A start in the future (a bad or foreign file) is ignored:
                // a fresh interval begins.
                "AccountingIntervalStart" if v <= now => self.interval_start = v,
                "AccountingSecondsActive" => self.seconds_active = v,
                "AccountingSecondsToReachSoftLimit" => self.secs_to_soft = v,
                "AccountingSoftLimitHitAt" => self.soft_hit_at = v,
                "AccountingBytesAtSoftLimit" => self.bytes_at_soft = v,
                _ => {}
            }
        }
    }

    /// The state file's `Accounting*` lines (times as Unix seconds).
    pub fn to_state(&self) -> String {
        let mut s = String::new();
        for (k, v) in [
            ("AccountingBytesReadInInterval", self.read),
            ("AccountingBytesWrittenInInterval", self.written),
            ("AccountingExpectedUsage", self.expected_per_min),
            ("AccountingIntervalStart", self.interval_start),
            ("AccountingSecondsActive", self.seconds_active),
            ("AccountingSecondsToReachSoftLimit", self.secs_to_soft),
            ("AccountingSoftLimitHitAt", self.soft_hit_at),
            ("AccountingBytesAtSoftLimit", self.bytes_at_soft),
        ] {
            let _ = writeln!(s, "{k} {v}");
        }
        s
    }

    fn configure(&mut self, now: u64) {
        let (s_now, end) = self.cfg.start.period_containing(now);
        if self.interval_start == 0 {
            self.reset(now);
        } else if s_now == self.interval_start {
            self.interval_end = end;
        } else {
            let (old_start, old_end) = self.cfg.start.period_containing(self.interval_start);
            let duration = old_end.saturating_sub(old_start).max(1) as f64;
            let delta = (s_now as f64 - self.interval_start as f64) / duration;
            if (-0.5..=0.5).contains(&delta) {
                self.interval_end = end;
            } else {
                if delta < 0.99 {
                    tracing::warn!(
                        "mismatched accounting interval: moved by {:.2}%; starting a fresh one",
                        delta * 100.0
                    );
                }
                self.reset(now);
            }
        }
        self.set_wakeup();
    }

    fn reset(&mut self, now: u64) {
        self.update_expected();
        let (s, e) = self.cfg.start.period_containing(now);
        self.interval_start = s;
        self.interval_end = e;
        self.read = 0;
        self.written = 0;
        self.seconds_active = 0;
    }

    /// [C update_expected_bandwidth()]
    fn update_expected(&mut self) {
        let mut max_configured = self.rate.saturating_mul(60);
        if self.cfg.rule == Rule::Sum {
            max_configured = max_configured.saturating_mul(2);
        }
        let expected = if self.soft_hit_at > self.interval_start
            && self.bytes_at_soft > 0
            && self.soft_hit_at - self.interval_start > MIN_TIME_FOR_MEASUREMENT
        {
            self.bytes_at_soft / (self.soft_hit_at - self.interval_start) / 60
        } else if self.seconds_active >= MIN_TIME_FOR_MEASUREMENT {
            self.bytes() / (self.seconds_active / 60)
        } else {
            0
        };
        self.expected_per_min = expected.min(max_configured);
    }

    /// [C accounting_set_wakeup_time()]
    fn set_wakeup(&mut self) {
        if self.expected_per_min == 0 {
            self.wakeup = self.interval_start;
            return;
        }
        let to_exhaust = (self.cfg.max / self.expected_per_min).saturating_mul(60);
        let length = self.interval_end.saturating_sub(self.interval_start);
        if to_exhaust >= length {
            self.wakeup = self.interval_start;
            return;
        }
        let consider = length - to_exhaust;
        // C hashes the interval's start with the identity digest: the same
        // relay picks the same time after a restart, others pick others.
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.interval_start, self.seed).hash(&mut h);
        self.wakeup = self.interval_start + h.finish() % consider;
    }

    /// The bytes that count. [C get_accounting_bytes()]
    pub fn bytes(&self) -> u64 {
        match self.cfg.rule {
            Rule::Sum => self.read.saturating_add(self.written),
            Rule::In => self.read,
            Rule::Out => self.written,
            Rule::Max => self.read.max(self.written),
        }
    }

    /// `GETINFO accounting/bytes-left`: read and write left.
    pub fn bytes_left(&self) -> (u64, u64) {
        let limit = self.cfg.max;
        let left = |n: u64| limit.saturating_sub(n);
        match self.cfg.rule {
            Rule::Sum => {
                let l = left(self.bytes());
                (l, l)
            }
            Rule::In => (left(self.read), limit),
            Rule::Out => (limit, left(self.written)),
            Rule::Max => (left(self.read), left(self.written)),
        }
    }

    fn soft_limit(&self) -> u64 {
        const SOFT_LIM_BYTES: u64 = 500 * 1024 * 1024;
        let max = self.cfg.max;
        let mut soft = (max as f64 * 0.95) as u64;
        if max > SOFT_LIM_BYTES && max - SOFT_LIM_BYTES > soft {
            soft = max - SOFT_LIM_BYTES;
        }
        let expected = self.expected_per_min.saturating_mul(180);
        if expected > 0 && max > expected && max - expected > soft {
            soft = max - expected;
        }
        soft
    }

    fn soft_limit_reached(&self) -> bool {
        let soft = self.soft_limit();
        soft > 0 && self.bytes() >= soft
    }

    /// Where hibernation stands.
    pub fn state(&self) -> Hibernation {
        self.state
    }

    /// One second (or `seconds`) of relaying: count the bytes, move to a
    /// new interval when this one ended, and decide the state. Returns the
    /// new state when it changed, with C Tor's notice for the log.
    /// [C accounting_add_bytes(), accounting_run_housekeeping(),
    /// consider_hibernation()]
    pub fn tick(
        &mut self,
        now: u64,
        read: u64,
        written: u64,
        seconds: u64,
    ) -> Option<(Hibernation, Vec<String>)> {
        self.read = self.read.saturating_add(read);
        self.written = self.written.saturating_add(written);
        if seconds < 10 {
            self.seconds_active += seconds;
        }
        let before = self.state;
        let mut why = Vec::new();
        if now >= self.interval_end {
            self.configure(now);
        }
        // [C hibernate_end_time_elapsed()]
        if self.state != Hibernation::Awake && now >= self.hibernate_end {
            if self.wakeup <= now {
                self.state = Hibernation::Awake;
                why.push("Hibernation period ended. Resuming normal activity.".into());
            } else {
                self.state = Hibernation::Hard;
                self.hibernate_end = self.wakeup;
                why.push(format!(
                    "Accounting period ended. Commencing hibernation until {} UTC",
                    iso_time(self.wakeup)
                ));
            }
        }
        if self.state == Hibernation::Awake {
            if self.soft_limit_reached() {
                self.state = Hibernation::Soft;
                self.soft_hit_at = now;
                self.secs_to_soft = self.seconds_active;
                self.bytes_at_soft = self.bytes();
                self.hibernate_end = self.interval_end;
                why.push("Bandwidth soft limit reached; commencing hibernation. No new connections will be accepted".into());
            } else if now < self.wakeup {
                self.state = Hibernation::Hard;
                self.hibernate_end = self.wakeup;
                why.push(format!(
                    "Commencing hibernation. We will wake up at {} UTC.",
                    iso_time(self.wakeup)
                ));
            }
        }
        if self.state == Hibernation::Soft && self.bytes() >= self.cfg.max {
            self.state = Hibernation::Hard;
            self.hibernate_end = if now < self.wakeup {
                self.wakeup
            } else {
                self.interval_end
            };
            why.push("Going dormant. Blowing away remaining connections.".into());
        }
        (self.state != before).then_some((self.state, why))
    }

    /// `GETINFO accounting/<key>` (C's answers; times in ISO format).
    pub fn getinfo(&self, key: &str) -> Option<String> {
        Some(match key {
            "enabled" => "1".into(),
            "hibernating" => self.state.name().into(),
            "bytes" => format!("{} {}", self.read, self.written),
            "bytes-left" => {
                let (r, w) = self.bytes_left();
                format!("{r} {w}")
            }
            "interval-start" => iso_time(self.interval_start),
            "interval-wake" => iso_time(self.wakeup),
            "interval-end" => iso_time(self.interval_end),
            _ => return None,
        })
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC), as C's `format_iso_time`.
pub fn iso_time(t: u64) -> String {
    weft_dir::descriptor::format_time(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t))
        .unwrap_or_else(|_| "1970-01-01 00:00:00".into())
}

#[cfg(test)]
mod tests;
