//! The core's timers, in one table: what each is for and when it is due. The driver sleeps until the earliest
//! ([`Core::poll_timeout`]); [`Core::handle_timeout`] fires what is due. Some timers are stored (armed and cleared
//! by the transitions that own them); the others are read from the state they belong to. Every delay derived from
//! `time_boundary` is here too ([`Delays`]), so that what a change of `time_boundary` changes is read in one place.

use std::time::{Duration, Instant};

use super::Core;

/// The longest jitter a large party adds to a quiet period (see `debounce`).
pub const MAX_JITTER: Duration = Duration::from_millis(250);

/// Every delay the core derives from `time_boundary`, named for what it waits for: the one place they are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delays {
    time_boundary: Duration,
}

impl Delays {
    pub fn new(time_boundary: Duration) -> Self {
        Delays { time_boundary }
    }

    /// How long the party must go without a change to count as stable (kazoo's `time_boundary`), before jitter.
    pub fn quiet_period(self) -> Duration {
        self.time_boundary
    }

    /// The quiet period after a change of the shared set alone, under Incremental: it only batches a stream of
    /// versions (see `Debounce::set_changed`).
    pub fn set_change_wait(self) -> Duration {
        self.time_boundary / 4
    }

    /// How far into a quiet period the partition function may work ahead ([`Timer::Prepare`]).
    pub fn prepare_after(self) -> Duration {
        self.time_boundary / 4
    }

    /// The longest jitter a large party adds to a quiet period: a tenth of it, at most [`MAX_JITTER`].
    pub fn max_jitter(self) -> Duration {
        (self.time_boundary / 10).min(MAX_JITTER)
    }

    /// Between two reads of the other members' announcements while one is reported on another version, and after a
    /// failed read while one is catching up ([`Timer::Announcements`]).
    pub fn announcements_reread(self) -> Duration {
        self.time_boundary
    }

    /// How long a member may announce another version of the shared set, or another assignment, before that is a
    /// disagreement: the time it needs to follow a change (its quiet period, its worker's release, the allocation)
    /// with room to spare.
    pub fn catch_up(self) -> Duration {
        self.time_boundary * 2 + Duration::from_secs(2)
    }

    /// Before a failed recovery of the shared set is tried again ([`Timer::Recovery`]).
    pub fn recovery_retry(self) -> Duration {
        self.time_boundary
    }

    /// Between two reads of our items' lineage ([`Timer::ClosedRead`]).
    pub fn closed_reread(self) -> Duration {
        self.time_boundary
    }

    /// How long the lock work must be quiet before held locks' watches are asked for ([`Timer::HeldWatches`]).
    pub fn held_watch_quiet(self) -> Duration {
        self.time_boundary
    }

    /// How long after a lock is taken its watch is asked for at the latest, quiet or not.
    pub fn held_watch_latest(self) -> Duration {
        self.time_boundary * 2
    }
}

/// Every reason the core wakes up by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// `max_allocation_time` runs out: `Failure`. Runs from entering `Allocating` (or, incremental, from the party
    /// change) to `Acquired`, paused while `Release` waits for the worker. Stored.
    Allocation,
    /// A party read, join or lock directory listing was lost with the connection: none is sent again before this.
    /// Stored.
    Backoff,
    /// Every other member's announcement is read again: `time_boundary` after we followed a new version of the shared
    /// set (the others should have too by then), and again while one is on another version. Stored.
    Announcements,
    /// After a recovery of the shared set that failed (say, a member allowed to read the set but not to write it):
    /// the set is read and the recovery tried again (not at once: a failure that persists would have the member
    /// spin). Stored.
    Recovery,
    /// The quiet period ends: the assignment is decided.
    Settled,
    /// A quarter into the quiet period: the partition function may work ahead.
    Prepare,
    /// The first lock request lost with the connection is retried.
    LockRetry,
    /// Held locks' watches are asked for.
    HeldWatches,
    /// Our items' lineage is read again (whether a change closed one).
    ClosedRead,
}

impl Timer {
    const ALL: [Timer; 9] = [
        Timer::Settled,
        Timer::Prepare,
        Timer::LockRetry,
        Timer::HeldWatches,
        Timer::Announcements,
        Timer::Recovery,
        Timer::Allocation,
        Timer::Backoff,
        Timer::ClosedRead,
    ];

    fn slot(self) -> Option<usize> {
        match self {
            Timer::Allocation => Some(0),
            Timer::Backoff => Some(1),
            Timer::Announcements => Some(2),
            Timer::Recovery => Some(3),
            Timer::Settled | Timer::Prepare | Timer::LockRetry | Timer::HeldWatches | Timer::ClosedRead => None,
        }
    }
}

/// The stored timers' deadlines.
#[derive(Debug, Default)]
pub(super) struct Timers([Option<Instant>; 4]);

impl Timers {
    /// When a stored timer is due (`None`: not armed; always `None` for a timer read from the state).
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        timer.slot().and_then(|slot| self.0[slot])
    }

    pub fn is_armed(&self, timer: Timer) -> bool {
        self.get(timer).is_some()
    }

    /// Whether a stored timer is armed and due at `now`.
    pub fn is_due(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// Arms a stored timer (or clears it, given `None`). A timer read from the state has nothing to arm.
    pub fn set(&mut self, timer: Timer, at: Option<Instant>) {
        debug_assert!(timer.slot().is_some(), "{timer:?} is read from the state, not stored");
        if let Some(slot) = timer.slot() {
            self.0[slot] = at;
        }
    }

    pub fn clear(&mut self, timer: Timer) {
        self.set(timer, None);
    }
}

impl Core {
    /// The delays derived from `time_boundary`.
    pub(super) fn delays(&self) -> Delays {
        Delays::new(self.cfg.time_boundary)
    }

    /// When `timer` is next due, if it is armed.
    fn due_at(&self, timer: Timer) -> Option<Instant> {
        // A timer read from the state that has passed is not due again: the next event decides (a deadline in the
        // past would have the driver spin). The stored ones fire until their transition clears them.
        let ahead = |at: Option<Instant>| at.filter(|&at| at > self.now);
        match timer {
            Timer::Allocation | Timer::Backoff => self.timers.get(timer),
            Timer::Announcements | Timer::Recovery => ahead(self.timers.get(timer)),
            Timer::Settled => {
                let settling = self.target_due() && self.party.fresh() && self.set.fresh() && self.session.connected();
                ahead(settling.then(|| self.party.quiet_at()))
            }
            Timer::Prepare => ahead(self.prepare_due()),
            Timer::LockRetry => self.locks.next_retry().map(|(at, _)| at),
            Timer::HeldWatches => ahead(self.held_watches_due()),
            Timer::ClosedRead => ahead(self.closed_read_due()),
        }
    }

    /// When [`handle_timeout`](Core::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.out.stopped || self.ending.is_some() {
            return None;
        }
        Timer::ALL.into_iter().filter_map(|timer| self.due_at(timer)).min()
    }

    /// (Re)starts the allocation clock: `Failure` unless `Acquired` comes within `max_allocation_time`.
    pub(super) fn start_allocation_clock(&mut self) {
        let at = self.cfg.max_allocation_time.map(|limit| self.now + limit);
        self.timers.set(Timer::Allocation, at);
    }

    /// Starts the allocation clock unless it is already running.
    pub(super) fn start_allocation_clock_unless_running(&mut self) {
        if !self.timers.is_armed(Timer::Allocation) {
            self.start_allocation_clock();
        }
    }

    /// Stops the allocation clock: `Acquired` was reached, or the worker is being waited for.
    pub(super) fn stop_allocation_clock(&mut self) {
        self.timers.clear(Timer::Allocation);
    }
}
