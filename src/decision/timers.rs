//! The core's timers, in one table: what each is for and when it is due. The driver sleeps until the earliest
//! ([`Core::poll_timeout`]); [`Core::handle_timeout`] fires what is due. Some timers are stored (armed and cleared
//! by the transitions that own them); the others are read from the state they belong to.

use std::time::Instant;

use super::Core;

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
    /// When `timer` is next due, if it is armed.
    fn due_at(&self, timer: Timer) -> Option<Instant> {
        // A timer read from the state that has passed is not due again: the next event decides (a deadline in the
        // past would have the driver spin). The stored ones fire until their transition clears them.
        let ahead = |at: Option<Instant>| at.filter(|&at| at > self.now);
        match timer {
            Timer::Allocation | Timer::Backoff => self.timers.get(timer),
            Timer::Announcements | Timer::Recovery => ahead(self.timers.get(timer)),
            Timer::Settled => {
                let settling = self.target_due() && self.party_fresh && self.set_fresh && self.connected;
                ahead(settling.then(|| self.debounce.ready_at()))
            }
            Timer::Prepare => ahead(self.prepare_due()),
            Timer::LockRetry => self.locks.delayed.first().map(|&(at, _)| at),
            Timer::HeldWatches => ahead(self.held_watches_due()),
            Timer::ClosedRead => ahead(self.closed_read_due()),
        }
    }

    /// When [`handle_timeout`](Core::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped || self.ending.is_some() {
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
