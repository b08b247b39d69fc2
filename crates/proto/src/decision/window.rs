//! How many lock operations a member keeps in flight, a window that follows ZooKeeper's latency, and how many it
//! puts in one request.
//!
//! When a hundred members rebalance at once, each sending its full share, one server queues a hundred thousand
//! operations. So each member paces itself the way TCP's delay-based senders do (Vegas, LEDBAT): a reply that took
//! longer than the fastest one seen plus [`QUEUE_DELAY`] means the server is queueing, and the window halves (once
//! per round trip: the replies of requests sent before the cut carry no news); quick replies grow it again by
//! [`GROWTH`] per round trip, up to the configured maximum. Members that share a server thus share it: each backs off
//! as the common queue grows.
//!
//! The window never goes below one full batch: ZooKeeper's cost is mostly per request (a `multi` of 100 creates is
//! one transaction), so shrinking the batches would make the server do more work for the same locks, which is what
//! a first version did (measured: a 100-member eager join's allocation went from 7 s to 9 s).
//!
//! Pure: times are passed in, so the simulation replays it exactly.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::ReqId;

/// Queueing delay tolerated above the fastest reply before the window shrinks: 100 ms, LEDBAT's target.
const QUEUE_DELAY: Duration = Duration::from_millis(100);
/// How much the window grows per round trip after slow start.
const GROWTH: usize = 100;

/// Lock operations per `multi` request: `small` while the set has at most `small_set` items, `large` above. A `multi`
/// is one request and one transaction, so fewer, larger ones cost the server less per lock; but ZooKeeper keeps its
/// last 500 write transactions in memory whole (see `zk-partitioner`'s `lock_requests::WRITE_BATCH`), which bounds the large batch
/// where a rebalance writes hundreds of thousands of lock nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub small: usize,
    pub small_set: usize,
    pub large: usize,
}

impl Batch {
    /// The same batch whatever the set's size.
    #[cfg(any(test, feature = "sim"))]
    pub const fn fixed(ops: usize) -> Batch {
        Batch { small: ops, small_set: 0, large: ops }
    }

    /// The batch for a set of `items` items (at least 1).
    pub fn for_items(self, items: usize) -> usize {
        (if items <= self.small_set { self.small } else { self.large }).max(1)
    }
}

#[derive(Debug)]
pub(super) struct Window {
    min: usize,
    max: usize,
    size: usize,
    /// The fastest reply seen: the server's latency with no queue.
    base: Option<Duration>,
    /// Lock requests in flight: when each was sent.
    sent: HashMap<ReqId, Instant>,
    /// The latest cut: replies to requests sent before it do not cut again.
    cut_at: Option<Instant>,
}

impl Window {
    /// A window of `max` operations that never goes below `min` (one batch).
    pub fn new(min: usize, max: usize) -> Self {
        let max = max.max(1);
        let min = min.clamp(1, max);
        Window { min, max, size: max, base: None, sent: HashMap::new(), cut_at: None }
    }

    /// Operations that may be in flight now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A lock request left at `now`.
    pub fn sent(&mut self, id: ReqId, now: Instant) {
        self.sent.insert(id, now);
    }

    /// The reply to request `id` (of `ops` operations) came at `now`; `failed` if it was an error (a timeout or a
    /// lost connection says as much about the server as a slow reply). Other requests' replies are ignored.
    pub fn replied(&mut self, id: ReqId, ops: usize, failed: bool, now: Instant) {
        let Some(sent) = self.sent.remove(&id) else { return };
        let latency = now.saturating_duration_since(sent);
        let base = *self.base.get_or_insert(latency);
        self.base = Some(base.min(latency));
        let queueing = failed || latency > base + QUEUE_DELAY;
        if queueing {
            if self.cut_at.is_none_or(|cut| sent >= cut) {
                self.size = (self.size / 2).max(self.min);
                self.cut_at = Some(now);
            }
        } else {
            // One GROWTH per window's worth of replies: about one per round trip.
            self.size = (self.size + (ops * GROWTH).div_ceil(self.size.max(1))).min(self.max);
        }
    }

    /// The connection was lost: requests in flight will not be answered normally. Start again from one batch (the
    /// server may be recovering; the latency history is kept).
    pub fn restart(&mut self) {
        self.sent.clear();
        self.size = self.min;
        self.cut_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn halves_once_per_round_trip_when_replies_slow_down_and_grows_back_while_quick() {
        let t0 = Instant::now();
        let mut window = Window::new(100, 1000);
        assert_eq!(window.size(), 1000);
        window.sent(1, t0);
        window.replied(1, 100, false, t0 + ms(10));
        assert_eq!(window.size(), 1000, "never above the maximum");
        // two slow replies of requests sent before the first cut: one cut only
        window.sent(2, t0 + ms(30));
        window.sent(3, t0 + ms(30));
        window.replied(2, 400, false, t0 + ms(300));
        assert_eq!(window.size(), 500);
        window.replied(3, 400, false, t0 + ms(310));
        assert_eq!(window.size(), 500);
        // a request sent after the cut that is slow too: cut again
        window.sent(4, t0 + ms(320));
        window.replied(4, 200, false, t0 + ms(600));
        assert_eq!(window.size(), 250);
        // quick again: about GROWTH more per window's worth of replies
        window.sent(5, t0 + ms(600));
        window.replied(5, 250, false, t0 + ms(610));
        assert_eq!(window.size(), 350);
    }

    #[test]
    fn stays_within_its_bounds() {
        let t0 = Instant::now();
        let mut window = Window::new(100, 1000);
        for i in 0..20 {
            window.sent(i, t0 + ms(i * 1000));
            window.replied(i, 50, true, t0 + ms(i * 1000 + 1));
        }
        assert_eq!(window.size(), 100, "never below one batch");
        for i in 20..200 {
            window.sent(i, t0 + ms(i * 1000));
            window.replied(i, 500, false, t0 + ms(i * 1000 + 1));
        }
        assert_eq!(window.size(), 1000);
        assert_eq!(Window::new(500, 10).size(), 10, "a batch larger than the window is cut to it");
        // replies to requests it never saw change nothing
        window.replied(9999, 500, true, t0);
        assert_eq!(window.size(), 1000);
        // a lost connection starts again from one batch
        window.restart();
        assert_eq!(window.size(), 100);
    }
}
