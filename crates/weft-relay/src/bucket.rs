//! Token buckets for `BandwidthRate` / `BandwidthBurst`, as C Tor keeps
//! them (token_bucket.c): a read bucket and a write bucket, refilled every
//! `TokenBucketRefillInterval` (default 100 ms) by rate × interval, capped
//! at the burst, starting full. A relay that reads and writes in these steps
//! queues cells inside itself between refills, where circuit priority
//! decides their order.
//!
//! Each worker owns a pair with its share of the relay's rate; the
//! controller sets the shares (no atomics on the byte path). Sans-IO: the
//! caller passes `now`.

use std::time::{Duration, Instant};

/// One bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    tokens: i64,
    interval: Duration,
    last: Instant,
    /// Times a consume took the last token (C Tor's "global rate limit
    /// reached" for this bucket).
    emptied: u64,
}

impl TokenBucket {
    /// A full bucket with `rate` bytes/s and `burst` bytes, refilled every
    /// `interval`.
    pub fn new(rate: u64, burst: u64, interval: Duration, now: Instant) -> Self {
        TokenBucket {
            rate,
            burst: burst.max(1),
            tokens: burst.max(1).min(i64::MAX as u64) as i64,
            interval: interval.max(Duration::from_millis(1)),
            last: now,
            emptied: 0,
        }
    }

    /// Change rate and burst (a new share); tokens are capped at the burst.
    pub fn set(&mut self, rate: u64, burst: u64) {
        self.rate = rate;
        self.burst = burst.max(1);
        self.tokens = self.tokens.min(self.burst as i64);
    }

    /// Add what the whole intervals since the last refill earned; true if
    /// any did.
    pub fn refill(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        let k = (elapsed.as_nanos() / self.interval.as_nanos()) as u32;
        if k == 0 {
            return false;
        }
        self.last += self.interval * k;
        let add = (self.rate as f64 * self.interval.as_secs_f64() * f64::from(k)) as i64;
        self.tokens = self.tokens.saturating_add(add).min(self.burst as i64);
        true
    }

    /// Bytes that may move now.
    pub fn available(&self) -> u64 {
        self.tokens.max(0) as u64
    }

    /// `n` bytes moved (may go below zero: the next refills pay it back).
    pub fn consume(&mut self, n: u64) {
        let before = self.tokens;
        self.tokens = self.tokens.saturating_sub(n.min(i64::MAX as u64) as i64);
        if before > 0 && self.tokens <= 0 {
            self.emptied += 1;
        }
    }

    /// Times the bucket ran empty since it was made.
    pub fn times_emptied(&self) -> u64 {
        self.emptied
    }

    /// When the next refill is due.
    pub fn next_refill(&self) -> Instant {
        self.last + self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_in_steps_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 300, Duration::from_millis(100), t0);
        assert_eq!(b.available(), 300, "starts full");
        b.consume(350);
        assert_eq!(b.available(), 0);
        assert_eq!(b.times_emptied(), 1);
        assert!(
            !b.refill(t0 + Duration::from_millis(99)),
            "not a whole interval yet"
        );
        assert!(b.refill(t0 + Duration::from_millis(150)));
        assert_eq!(b.available(), 50, "-50 + 100");
        assert!(b.refill(t0 + Duration::from_secs(10)));
        assert_eq!(b.available(), 300, "capped at the burst");
        assert_eq!(
            b.next_refill(),
            t0 + Duration::from_secs(10) + Duration::from_millis(100)
        );
        b.set(10, 20);
        assert_eq!(b.available(), 20);
    }

    #[test]
    fn running_empty_is_counted_once_per_emptying() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, Duration::from_millis(100), t0);
        b.consume(60);
        assert_eq!(b.times_emptied(), 0);
        b.consume(40);
        b.consume(10);
        assert_eq!(
            b.times_emptied(),
            1,
            "counted when it runs empty, not while empty"
        );
        b.refill(t0 + Duration::from_millis(100));
        b.consume(100);
        assert_eq!(b.times_emptied(), 2);
    }
}
