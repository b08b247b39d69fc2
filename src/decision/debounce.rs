//! The `time_boundary` debounce: the party counts as stable once it has gone `boundary` without a change, and every
//! change restarts the wait (where kazoo's fixed windows need between one and two boundaries of quiet).

use std::time::{Duration, Instant};

/// When the party last changed, and whether it has been quiet long enough since. Pure: time is passed in.
#[derive(Debug, Clone)]
pub(crate) struct Debounce {
    boundary: Duration,
    last_change: Instant,
}

impl Debounce {
    /// A debounce that starts waiting at `now`.
    pub fn new(boundary: Duration, now: Instant) -> Self {
        Debounce { boundary, last_change: now }
    }

    /// Something changed at `now`: the quiet period starts again.
    pub fn changed(&mut self, now: Instant) {
        self.last_change = self.last_change.max(now);
    }

    /// When the current quiet period will have lasted `boundary`.
    pub fn ready_at(&self) -> Instant {
        self.last_change + self.boundary
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
        let mut debounce = Debounce::new(ms(100), t0);
        assert!(!debounce.ready(t0 + ms(99)));
        assert!(debounce.ready(t0 + ms(100)));
        debounce.changed(t0 + ms(90));
        assert!(!debounce.ready(t0 + ms(100)));
        assert_eq!(debounce.ready_at(), t0 + ms(190));
        // A stale timestamp never moves the wait backwards.
        debounce.changed(t0 + ms(10));
        assert_eq!(debounce.ready_at(), t0 + ms(190));
    }
}
