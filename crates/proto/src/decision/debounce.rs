//! The `time_boundary` debounce: the party counts as stable once it has gone `boundary` without a change, and every
//! change restarts the wait (where kazoo's fixed windows need between one and two boundaries of quiet). A change of
//! the shared set restarts it only when no wait is under way (the core's `on_inputs_changed` decides); under
//! Incremental rebalancing such a wait is a quarter of the boundary ([`Debounce::set_changed`]), and a party change
//! during it makes it a full one.
//!
//! Every member sees a change at about the same moment, so without more they would all start allocating in the same
//! millisecond: a burst of every member's requests at once. In a large party each wait is lengthened by a random
//! jitter below a tenth of the boundary (at most [`MAX_JITTER`](super::timers::MAX_JITTER)), drawn per change from
//! the member's own random seed.
//! A small party's burst is a few windows of requests, which the server absorbs in about a millisecond, so there the
//! jitter would only be latency added to every allocation: none up to [`QUIET_PARTY`] members, the full spread from
//! [`FULL_PARTY`], in proportion between.

use std::time::{Duration, Instant};

use super::timers::Delays;

/// Up to this many members, no jitter.
pub const QUIET_PARTY: usize = 8;
/// From this many members, the full jitter (a tenth of the boundary, at most
/// [`MAX_JITTER`](super::timers::MAX_JITTER)).
pub const FULL_PARTY: usize = 48;

/// The party sizes up to which members wait without a jitter (`quiet`) and from which they jitter fully (`full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitterParties {
    pub quiet: usize,
    pub full: usize,
}

impl JitterParties {
    /// The full jitter at any size: the simulation's small parties, timed as a large one's members are.
    #[cfg(any(test, feature = "sim"))]
    pub const ALWAYS: JitterParties = JitterParties { quiet: 0, full: 1 };

    /// The share of the full spread that a party of `members` jitters by, in `[0, 1]`, as a fraction.
    fn share(self, members: usize) -> (u64, u64) {
        let span = self.full.saturating_sub(self.quiet).max(1);
        ((members.clamp(self.quiet, self.quiet + span) - self.quiet) as u64, span as u64)
    }
}

impl Default for JitterParties {
    fn default() -> Self {
        JitterParties { quiet: QUIET_PARTY, full: FULL_PARTY }
    }
}

/// When the party last changed, and whether it has been quiet long enough since. Pure: time and randomness are passed
/// in.
#[derive(Debug, Clone)]
pub struct Debounce {
    delays: Delays,
    last_change: Instant,
    /// This wait's jitter.
    jitter: Duration,
    /// This wait was started by a set change alone: it lasts a quarter of `boundary`, without jitter.
    short: bool,
    /// The party's size as of the latest change: how many members may start at once.
    party: usize,
    parties: JitterParties,
    /// The jitter's random state (xorshift64*).
    random: u64,
}

impl Debounce {
    /// A debounce that starts waiting at `now`; `seed` makes this member's jitter its own.
    pub fn new(delays: Delays, parties: JitterParties, now: Instant, seed: u64) -> Self {
        let mut debounce = Debounce {
            delays,
            last_change: now,
            jitter: Duration::ZERO,
            short: false,
            party: 1,
            parties,
            random: seed | 1,
        };
        debounce.draw_jitter();
        debounce
    }

    /// Something changed at `now`, in a party of `party` members: the quiet period starts again.
    pub fn changed(&mut self, now: Instant, party: usize) {
        self.short = false;
        if now > self.last_change {
            self.last_change = now;
            self.party = party;
            self.draw_jitter();
        }
    }

    /// Only the shared set changed at `now` (under Incremental, with no wait under way): a quiet period of a quarter
    /// of `boundary` starts. The members keep everything they hold meanwhile, so the wait only batches a stream of
    /// versions (one per finish or split) into one new assignment; a full boundary would be latency added to every
    /// split shard's children.
    pub fn set_changed(&mut self, now: Instant) {
        // A full wait under way (a party change's) is neither shortened nor restarted.
        if !self.short && now < self.ready_at() {
            return;
        }
        if now > self.last_change {
            self.last_change = now;
            self.short = true;
        }
    }

    /// When the current quiet period will have lasted `boundary` (and this wait's jitter), or a quarter of it after a
    /// set change ([`set_changed`](Debounce::set_changed)).
    pub fn ready_at(&self) -> Instant {
        match self.short {
            true => self.last_change + self.delays.set_change_wait(),
            false => self.last_change + self.delays.quiet_period() + self.jitter,
        }
    }

    /// When the current quiet period began: identifies it.
    pub fn last_change(&self) -> Instant {
        self.last_change
    }

    /// When the current quiet period will have lasted a quarter of `boundary`: time to call
    /// [`PartitionFn::prepare`](crate::PartitionFn::prepare).
    pub fn prepare_at(&self) -> Instant {
        self.last_change + self.delays.prepare_after()
    }

    fn draw_jitter(&mut self) {
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        let full = self.delays.max_jitter().as_micros() as u64;
        let (share, of) = self.parties.share(self.party);
        let spread = full * share / of;
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
    use crate::decision::timers::MAX_JITTER;

    #[test]
    fn a_set_change_waits_a_quarter_and_never_shortens_a_party_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::new(Delays::new(ms(100)), JitterParties::default(), t0, 7);
        // The first wait (the start) is a full one: a set change within it leaves it alone.
        debounce.set_changed(t0 + ms(50));
        assert_eq!(debounce.ready_at(), t0 + ms(100) + debounce.jitter);
        // Once it is over, a set change waits a quarter of the boundary, without jitter.
        debounce.set_changed(t0 + ms(200));
        assert_eq!(debounce.ready_at(), t0 + ms(225));
        // A party change within it makes it a full wait from then.
        debounce.changed(t0 + ms(210), 100);
        assert_eq!(debounce.ready_at(), t0 + ms(310) + debounce.jitter);
        debounce.set_changed(t0 + ms(300));
        assert_eq!(debounce.ready_at(), t0 + ms(310) + debounce.jitter, "a party's wait cut short");
    }

    #[test]
    fn every_change_restarts_the_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut debounce = Debounce::new(Delays::new(ms(100)), JitterParties::default(), t0, 7);
        debounce.changed(t0 + ms(1), 100);
        let jitter = debounce.jitter;
        assert!(jitter < ms(10), "jitter below a tenth of the boundary");
        assert!(!debounce.ready(t0 + ms(100)));
        assert!(debounce.ready(t0 + ms(101) + jitter));
        debounce.changed(t0 + ms(90), 100);
        assert!(!debounce.ready(t0 + ms(100)));
        assert_eq!(debounce.ready_at(), t0 + ms(190) + debounce.jitter);
        // A stale timestamp never moves the wait backwards.
        let ready = debounce.ready_at();
        debounce.changed(t0 + ms(10), 100);
        assert_eq!(debounce.ready_at(), ready);
    }

    /// The jitters of `members` members, each with its own seed, after a change in a party of that size.
    fn jitters(boundary: Duration, members: usize) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut jitters: Vec<Duration> = (0..members as u64)
            .map(|seed| {
                let mut debounce =
                    Debounce::new(Delays::new(boundary), JitterParties::default(), t0, seed * 0x9e37_79b9);
                debounce.changed(t0 + Duration::from_millis(1), members);
                debounce.jitter
            })
            .collect();
        jitters.sort();
        jitters
    }

    #[test]
    fn a_large_party_spreads_its_starts() {
        let jitters = jitters(Duration::from_secs(2), 100);
        assert!(jitters[99] < Duration::from_millis(200), "at most a tenth of the boundary");
        // spread over the interval, not bunched: the middle half covers at least a third of it
        assert!(jitters[75] - jitters[25] > Duration::from_millis(66), "{:?}", jitters);
        // long boundaries are capped
        assert!(self::jitters(Duration::from_secs(60), 100).iter().all(|&j| j < MAX_JITTER));
        // between a small party and a full one, in proportion
        let middle = self::jitters(Duration::from_secs(2), (QUIET_PARTY + FULL_PARTY) / 2);
        assert!(middle.iter().all(|&j| j < Duration::from_millis(100)), "{middle:?}");
        assert!(middle.iter().any(|&j| j > Duration::from_millis(50)), "{middle:?}");
    }

    #[test]
    fn a_lone_member_or_a_small_party_waits_the_boundary_alone() {
        let t0 = Instant::now();
        assert_eq!(
            Debounce::new(Delays::new(Duration::from_secs(2)), JitterParties::default(), t0, 7).ready_at(),
            t0 + Duration::from_secs(2)
        );
        for members in [1, 2, 5, QUIET_PARTY] {
            assert!(jitters(Duration::from_secs(2), members).iter().all(|j| j.is_zero()), "{members} members");
        }
        // The simulation's small parties can be timed as a large one's members are.
        let always = Debounce::new(Delays::new(Duration::from_secs(2)), JitterParties::ALWAYS, t0, 7);
        assert!(always.jitter > Duration::ZERO && always.jitter < Duration::from_millis(200));
    }
}
