//! Metrics, through the [`metrics`](https://docs.rs/metrics/0.24) facade: the partitioner records them, and whatever
//! recorder the application installs (Prometheus, StatsD, OpenTelemetry, a test's debugging recorder) exports them.
//! Without a recorder they cost next to nothing.
//!
//! Every metric carries the label `path`: the partition path (relative to the client's chroot). Metric names:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`zk_partitioner_rebalances_total`](REBALANCES) | counter | `path`, `cause` | the member stopped being `ACQUIRED` (it was told to release, or started taking more items) |
//! | [`zk_partitioner_allocation_seconds`](ALLOCATION_SECONDS) | histogram | `path` | from entering `ALLOCATING` to `ACQUIRED`, in seconds |
//! | [`zk_partitioner_items_held`](ITEMS_HELD) | gauge | `path` | items the member lists as processable now ([`Snapshot::items`](crate::Snapshot::items)) |
//! | [`zk_partitioner_items_revoked_total`](ITEMS_REVOKED) | counter | `path` | items the member was told to stop processing ([`Snapshot::revoked`](crate::Snapshot::revoked)) |
//! | [`zk_partitioner_lock_waits_total`](LOCK_WAITS) | counter | `path` | times one of the member's lock contenders had to wait behind another contender |
//! | [`zk_partitioner_session_suspensions_total`](SESSION_SUSPENSIONS) | counter | `path` | connection losses of the member's ZooKeeper session (the session may survive them) |
//! | [`zk_partitioner_session_expiries_total`](SESSION_EXPIRIES) | counter | `path` | the member's session expired (the partitioner then fails) |
//! | [`zk_partitioner_partition_fn_seconds`](PARTITION_FN_SECONDS) | histogram | `path` | how long each call of the partition function took, in seconds |
//!
//! The `cause` of a rebalance is one of [`CAUSES`]: `party_changed` (a member joined or left), `item_set_changed`
//! (the [shared item set](crate::ItemSet) changed), `connection` (the connection was suspended), `lock_lost` (a lock
//! node did not survive a suspension, or someone else deleted a held one), `release_set` (the worker called
//! `release_set()` while `ACQUIRED`), or `other`.
//!
//! Call [`describe`] once after installing a recorder to give exporters each metric's unit and help text.
//!
//! ```
//! use zk_partitioner::metrics;
//!
//! // Install the recorder or exporter of your choice first (metrics-exporter-prometheus, metrics-util's
//! // DebuggingRecorder as in examples/metrics.rs, ...), through the `metrics` crate; then:
//! metrics::describe(); // units and help texts (without a recorder: nothing happens)
//! assert!(metrics::NAMES.contains(&metrics::REBALANCES));
//! ```

use std::time::Instant;

use zookeeper_client::SessionState;

use crate::decision::Reason;
use crate::party::Paths;
use crate::{Item, PartitionState};

/// Counter: the member stopped being `ACQUIRED`. Labels `path`, `cause` (one of [`CAUSES`]).
pub const REBALANCES: &str = "zk_partitioner_rebalances_total";
/// Histogram: seconds from entering `ALLOCATING` (at start, or after leaving `ACQUIRED`) to reaching `ACQUIRED`,
/// including the `time_boundary` wait and any `RELEASE` in between. Label `path`.
pub const ALLOCATION_SECONDS: &str = "zk_partitioner_allocation_seconds";
/// Gauge: the number of items the member lists as processable ([`Snapshot::items`](crate::Snapshot::items)), set at
/// every transition (0 in `FAILURE`). Label `path`.
pub const ITEMS_HELD: &str = "zk_partitioner_items_held";
/// Counter: items the member was told to stop processing (each item counted once per `RELEASE` episode, however
/// often the episode is republished). Label `path`.
pub const ITEMS_REVOKED: &str = "zk_partitioner_items_revoked_total";
/// Counter: one of the member's lock contenders found another contender before it and started waiting for it to go
/// (counted at every wait: a contender that waits behind two others in turn counts twice). Label `path`.
pub const LOCK_WAITS: &str = "zk_partitioner_lock_waits_total";
/// Counter: the member's connection to ZooKeeper was lost (its session suspended; it may survive). Label `path`.
pub const SESSION_SUSPENSIONS: &str = "zk_partitioner_session_suspensions_total";
/// Counter: the member's session expired (counted once; the partitioner then fails). Label `path`.
pub const SESSION_EXPIRIES: &str = "zk_partitioner_session_expiries_total";

/// Histogram: seconds each call of the partition function took, by the wall clock (it runs synchronously on the
/// partitioner's task, once per stable party or item set, so this is its CPU time unless the machine is short of
/// cores). Label `path`.
pub const PARTITION_FN_SECONDS: &str = "zk_partitioner_partition_fn_seconds";

/// Every metric name, for exporters' allow lists and for tests.
pub const NAMES: [&str; 8] = [
    REBALANCES,
    ALLOCATION_SECONDS,
    ITEMS_HELD,
    ITEMS_REVOKED,
    LOCK_WAITS,
    SESSION_SUSPENSIONS,
    SESSION_EXPIRIES,
    PARTITION_FN_SECONDS,
];

/// The values of [`REBALANCES`]' `cause` label.
pub const CAUSES: [&str; 6] = ["party_changed", "item_set_changed", "connection", "lock_lost", "release_set", "other"];

/// Registers every metric's unit and help text with the installed recorder (optional; exporters show them).
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(REBALANCES, Unit::Count, "Times the member stopped being ACQUIRED, by cause");
    describe_histogram!(ALLOCATION_SECONDS, Unit::Seconds, "Time from entering ALLOCATING to ACQUIRED");
    describe_gauge!(ITEMS_HELD, Unit::Count, "Items the member lists as processable");
    describe_counter!(ITEMS_REVOKED, Unit::Count, "Items the member was told to stop processing");
    describe_counter!(LOCK_WAITS, Unit::Count, "Times a lock contender of the member waited behind another");
    describe_counter!(SESSION_SUSPENSIONS, Unit::Count, "Connection losses of the member's ZooKeeper session");
    describe_counter!(SESSION_EXPIRIES, Unit::Count, "Expiries of the member's ZooKeeper session");
    describe_histogram!(PARTITION_FN_SECONDS, Unit::Seconds, "Time each call of the partition function took");
}

/// The partition function, timed: each call's duration is recorded as [`PARTITION_FN_SECONDS`].
pub(crate) struct Timed {
    pub(crate) inner: Box<dyn crate::PartitionFn>,
    pub(crate) path: String,
}

impl crate::PartitionFn for Timed {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let started = Instant::now();
        let mine = self.inner.partition(me, members, items);
        ::metrics::histogram!(PARTITION_FN_SECONDS, "path" => self.path.clone())
            .record(started.elapsed().as_secs_f64());
        mine
    }

    fn prepare(&self, me: &str, members: &[String], items: &[Item]) {
        self.inner.prepare(me, members, items);
    }
}

/// What the driver records, and the little state that needs (the allocation clock, the last session state).
#[derive(Debug)]
pub(crate) struct DriverMetrics {
    path: String,
    /// When the member entered `ALLOCATING`, while it has not reached `ACQUIRED` since.
    allocating_since: Option<Instant>,
    last_session: SessionState,
    expired: bool,
}

impl DriverMetrics {
    /// A member of the partition at `paths`, starting (as every member does) in `ALLOCATING`, connected.
    pub(crate) fn new(paths: &Paths, now: Instant) -> Self {
        let path = paths.party.strip_suffix("/party").unwrap_or(&paths.party);
        DriverMetrics {
            path: path.to_owned(),
            allocating_since: Some(now),
            last_session: SessionState::SyncConnected,
            expired: false,
        }
    }

    /// A publication: from the state `before` (and the items then `revoked_before`, sorted) to `after`.
    pub(crate) fn published(
        &mut self,
        (before, revoked_before): (PartitionState, &[Item]),
        (after, reason, items, revoked): (PartitionState, Reason, usize, &[Item]),
        now: Instant,
    ) {
        let path = self.path.clone();
        if before == PartitionState::Acquired && matches!(after, PartitionState::Release | PartitionState::Allocating) {
            let cause = reason.rebalance_cause().unwrap_or("other");
            ::metrics::counter!(REBALANCES, "path" => path.clone(), "cause" => cause).increment(1);
        }
        match after {
            PartitionState::Allocating => {
                self.allocating_since.get_or_insert(now);
            }
            PartitionState::Acquired => {
                if let Some(since) = self.allocating_since.take() {
                    let seconds = now.saturating_duration_since(since).as_secs_f64();
                    ::metrics::histogram!(ALLOCATION_SECONDS, "path" => path.clone()).record(seconds);
                }
            }
            PartitionState::Failure => self.allocating_since = None,
            PartitionState::Release => {}
        }
        let newly_revoked = revoked.iter().filter(|item| revoked_before.binary_search(item).is_err()).count();
        if newly_revoked > 0 {
            ::metrics::counter!(ITEMS_REVOKED, "path" => path.clone()).increment(newly_revoked as u64);
        }
        ::metrics::gauge!(ITEMS_HELD, "path" => path).set(items as f64);
    }

    /// A session state reported by the client.
    pub(crate) fn session(&mut self, state: SessionState) {
        let last = std::mem::replace(&mut self.last_session, state);
        let suspended = match state {
            SessionState::Disconnected => last != SessionState::Disconnected,
            // The client folded a disconnection and a reconnection into one change.
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => last == state,
            _ => false,
        };
        if suspended {
            ::metrics::counter!(SESSION_SUSPENSIONS, "path" => self.path.clone()).increment(1);
        }
        if state == SessionState::Expired && !std::mem::replace(&mut self.expired, true) {
            ::metrics::counter!(SESSION_EXPIRIES, "path" => self.path.clone()).increment(1);
        }
    }

    /// A lock contender started waiting behind another.
    pub(crate) fn lock_wait(&self) {
        ::metrics::counter!(LOCK_WAITS, "path" => self.path.clone()).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::{CompositeKey, MetricKind};

    use super::*;

    fn value_of<'a>(snapshot: &'a [(CompositeKey, DebugValue)], kind: MetricKind, name: &str) -> Vec<&'a DebugValue> {
        snapshot.iter().filter(|(key, _)| key.kind() == kind && key.key().name() == name).map(|(_, v)| v).collect()
    }

    #[test]
    fn transitions_become_metrics() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let start = Instant::now();
        let items: Vec<Item> = (0..3).map(Item::from).collect();
        metrics::with_local_recorder(&recorder, || {
            let mut m = DriverMetrics::new(&Paths::new("/p"), start);
            use PartitionState::*;
            m.published((Allocating, &[]), (Acquired, Reason::AllAcquired, 3, &[]), start + Duration::from_secs(2));
            m.published((Acquired, &[]), (Release, Reason::PartyChanged, 0, &items), start + Duration::from_secs(3));
            // Republished with one more revoked item: only the new one counts.
            m.published((Release, &items[..2]), (Release, Reason::ItemsRevoked, 0, &items), start);
            m.published((Release, &items), (Allocating, Reason::ReleaseSet, 0, &[]), start + Duration::from_secs(4));
            m.published((Allocating, &[]), (Acquired, Reason::AllAcquired, 2, &[]), start + Duration::from_secs(5));
            m.session(SessionState::Disconnected);
            m.session(SessionState::SyncConnected);
            m.session(SessionState::SyncConnected); // folded
            m.session(SessionState::Expired);
            m.session(SessionState::Expired);
            m.lock_wait();
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let flat: Vec<(CompositeKey, DebugValue)> = snapshot.into_iter().map(|(k, _, _, v)| (k, v)).collect();
        assert_eq!(value_of(&flat, MetricKind::Counter, REBALANCES), [&DebugValue::Counter(1)]);
        let rebalance = flat.iter().find(|(k, _)| k.key().name() == REBALANCES).unwrap();
        let labels: Vec<(String, String)> =
            rebalance.0.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
        assert_eq!(labels, [("path".into(), "/p".into()), ("cause".into(), "party_changed".into())]);
        assert_eq!(value_of(&flat, MetricKind::Counter, ITEMS_REVOKED), [&DebugValue::Counter(4)]);
        assert_eq!(value_of(&flat, MetricKind::Counter, SESSION_SUSPENSIONS), [&DebugValue::Counter(2)]);
        assert_eq!(value_of(&flat, MetricKind::Counter, SESSION_EXPIRIES), [&DebugValue::Counter(1)]);
        assert_eq!(value_of(&flat, MetricKind::Counter, LOCK_WAITS), [&DebugValue::Counter(1)]);
        assert_eq!(value_of(&flat, MetricKind::Gauge, ITEMS_HELD), [&DebugValue::Gauge(2.0.into())]);
        let seconds: Vec<f64> = match &value_of(&flat, MetricKind::Histogram, ALLOCATION_SECONDS)[..] {
            [DebugValue::Histogram(values)] => values.iter().map(|v| v.into_inner()).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(seconds, [2.0, 1.0]);
    }

    #[test]
    fn every_reason_that_leaves_acquired_has_a_cause_among_the_documented_ones() {
        use Reason::*;
        // Exhaustive by construction: a new reason must be listed in `Reason::rebalance_cause`'s match.
        let all = [
            AllAcquired,
            Ended,
            RevokedReleased,
            SessionSurvived,
            ConnectionChanged,
            ConnectionSuspended,
            PartyChanged,
            ItemSetChanged,
            ItemsRevoked,
            TakingGained,
            LockLostInSuspension,
            HeldLockDeleted,
            ReleaseSet,
            Disagreement,
        ];
        for reason in all {
            if let Some(cause) = reason.rebalance_cause() {
                assert!(CAUSES.contains(&cause), "{reason}: {cause}");
            }
        }
        assert_eq!(PartyChanged.rebalance_cause(), Some("party_changed"));
        assert_eq!(ItemSetChanged.rebalance_cause(), Some("item_set_changed"));
        assert_eq!(HeldLockDeleted.rebalance_cause(), Some("lock_lost"));
        assert_eq!(AllAcquired.rebalance_cause(), None);
    }
}
