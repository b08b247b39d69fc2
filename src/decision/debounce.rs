//! The `time_boundary` debounce: the party counts as stable once it has gone `boundary` without a change, and every
//! change restarts the wait (where kazoo's fixed windows need between one and two boundaries of quiet).
//!
//! Every member sees a change at about the same moment, so without more they would all start allocating in the same
//! millisecond: a burst of every member's requests at once. Each wait is lengthened by a random jitter below a tenth
//! of the boundary (at most [`MAX_JITTER`]), drawn per change from the member's own random seed.

use std::time::{Duration, Instant};

/// The longest jitter added to a wait.
pub(crate) const MAX_JITTER: Duration = Duration::from_millis(250);

/// When the party last changed, and whether it has been quiet long enough since. Pure: time and randomness are passed
/// in.
#[derive(Debug, Clone)]
pub(crate) struct Debounce {
    boundary: Duration,
    last_change: Instant,
    /// This wait's jitter.
    jitter: Duration,
    /// The jitter's random state (xorshift64*).
    random: u64,
}

impl Debounce {
    /// A debounce that starts waiting at `now`; `seed` makes this member's jitter its own.
    pub fn new(boundary: Duration, now: Instant, seed: u64) -> Self {
        let mut debounce = Debounce { boundary, last_change: now, jitter: Duration::ZERO, random: seed | 1 };
        debounce.draw_jitter();
        debounce
    }

    /// Something changed at `now`: the quiet period starts again.
    pub fn changed(&mut self, now: Instant) {
        if now > self.last_change {
            self.last_change = now;
            self.draw_jitter();
        }
    }

    /// When the current quiet period will have lasted `boundary` (and this wait's jitter).
    pub fn ready_at(&self) -> Instant {
        self.last_change + self.boundary + self.jitter
    }

    /// When the current quiet period began: identifies it.
    pub fn last_change(&self) -> Instant {
        self.last_change
    }

    /// When the current quiet period will have lasted a quarter of `boundary`: time to call
    /// [`PartitionFn::prepare`](crate::PartitionFn::prepare).
    pub fn prepare_at(&self) -> Instant {
        self.last_change + self.boundary / 4
    }

    fn draw_jitter(&mut self) {
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        let spread = (self.boundary / 10).min(MAX_JITTER).as_micros() as u64;
        let draw = self.random.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        self.jitter = Duration::from_micros(if spread == 0 { 0 } else { draw % spread });
    }

    /// Whether the quiet period has lasted `boundary` at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        now >= self.ready_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_restarts_the_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::new(ms(100), t0, 7);
        let jitter = debounce.jitter;
        assert!(jitter < ms(10), "jitter below a tenth of the boundary");
        assert!(!debounce.ready(t0 + ms(99)));
        assert!(debounce.ready(t0 + ms(100) + jitter));
        debounce.changed(t0 + ms(90));
        assert!(!debounce.ready(t0 + ms(100)));
        assert_eq!(debounce.ready_at(), t0 + ms(190) + debounce.jitter);
        // A stale timestamp never moves the wait backwards.
        let ready = debounce.ready_at();
        debounce.changed(t0 + ms(10));
        assert_eq!(debounce.ready_at(), ready);
    }

    #[test]
    fn members_spread_their_starts() {
        let t0 = Instant::now();
        let boundary = Duration::from_secs(2);
        let mut jitters: Vec<Duration> =
            (0..100u64).map(|seed| Debounce::new(boundary, t0, seed * 0x9e37_79b9).jitter).collect();
        jitters.sort();
        assert!(jitters[99] < Duration::from_millis(200), "at most a tenth of the boundary");
        // spread over the interval, not bunched: the middle half covers at least a third of it
        assert!(jitters[75] - jitters[25] > Duration::from_millis(66), "{:?}", jitters);
        // long boundaries are capped
        assert!(Debounce::new(Duration::from_secs(60), t0, 3).jitter < MAX_JITTER);
    }
}
