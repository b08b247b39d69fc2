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
//! | [`zk_partitioner_state`](STATE) | gauge | `path`, `state` | 1 for the member's current state, 0 for the other three (`state` is one of [`STATES`]) |
//! | [`zk_partitioner_state_entered_timestamp_seconds`](STATE_ENTERED) | gauge | `path` | when the member entered its current state, in seconds since the Unix epoch |
//! | [`zk_partitioner_items`](ITEMS) | gauge | `path` | items in the set the member divides (the fixed set, or the shared set as it last read it) |
//! | [`zk_partitioner_capacity`](CAPACITY) | gauge | `path` | the capacity the member's load is measured against ([`Load::capacity`](crate::weighted::Load::capacity)) |
//! | [`zk_partitioner_assigned_weight`](ASSIGNED_WEIGHT) | gauge | `path`, `dimension` | the weight of the member's share, per dimension of the items' weights |
//! | [`zk_partitioner_ideal_weight`](IDEAL_WEIGHT) | gauge | `path`, `dimension` | the member's ideal share of each dimension: its total × the member's capacity / the party's |
//! | [`zk_partitioner_load_imbalance`](LOAD_IMBALANCE) | gauge | `path` | the largest assigned / ideal over the dimensions (1: exactly its share) |
//! | [`zk_partitioner_over_capacity`](OVER_CAPACITY) | gauge | `path` | 1 when the member carries more than the partition function's load bound allows in some dimension, else 0 |
//! | [`zk_partitioner_shared_set_reads_total`](SHARED_SET_READS) | counter | `path`, `read` | reads of the shared set by the member: `read="header"` when its header held every change since the member's last listing, `read="listing"` when every item was listed |
//! | [`zk_partitioner_weight_chunk_reads_total`](WEIGHT_CHUNK_READS) | counter | `path` | chunks of the shared set's weight table the member read: a new table's chunks it did not already have |
//!
//! The `cause` of a rebalance is one of [`CAUSES`]: `party_changed` (a member joined or left), `shared_set_changed`
//! (the [shared set](crate::SharedSet) changed), `connection` (the connection was suspended), `lock_lost` (a lock
//! node did not survive a suspension, or someone else deleted a held one), `release_set` (the worker called
//! `release_set()` while `ACQUIRED`), or `other`.
//!
//! The load gauges ([`CAPACITY`] to [`OVER_CAPACITY`]) follow the member's load under its assignment
//! ([`Snapshot::load`](crate::Snapshot::load)), set at every publication that has one, so from the first assignment
//! on. The dimensions are those the items' weights name (an item without a weight weighs 1 in each), or `weight`
//! ([`DEFAULT_DIMENSION`](crate::weighted::DEFAULT_DIMENSION)) when they name none; when a weight change drops a dimension,
//! its series are set to 0.
//!
//! The gauges are set at every transition and when the member starts (`ALLOCATING`, nothing held), and the session
//! counters are registered at 0 then, so that a rate or an increase sees their first event. With them, alerts can
//! say "`ALLOCATING` for more than 5 minutes" (`time() - zk_partitioner_state_entered_timestamp_seconds > 300` for a
//! member whose `zk_partitioner_state{state="ALLOCATING"}` is 1) and "items with no owner" (the largest
//! `zk_partitioner_items` of a path above the sum of its members' `zk_partitioner_items_held`): the README's metrics
//! section links example rules. One member per path in a process: two would write the same series.
//!
//! Call [`register_descriptions`] once after installing a recorder to give exporters each metric's unit and help text.
//!
//! ```
//! use zk_partitioner::metrics;
//!
//! // Install the recorder or exporter of your choice first (metrics-exporter-prometheus, metrics-util's
//! // DebuggingRecorder as in examples/metrics.rs, ...), through the `metrics` crate; then:
//! metrics::register_descriptions(); // units and help texts (without a recorder: nothing happens)
//! assert!(metrics::NAMES.contains(&metrics::REBALANCES));
//! ```

use std::time::{Instant, SystemTime};

use zookeeper_client::SessionState;

use crate::paths::Paths;
use crate::{Item, PartitionState, weighted::Load};
use proto::decision::Reason;

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
/// partitioner's task, once per stable party or shared set, so this is its CPU time unless the machine is short of
/// cores). Label `path`.
pub const PARTITION_FN_SECONDS: &str = "zk_partitioner_partition_fn_seconds";

/// Gauge: 1 for the member's current state, 0 for the other three (Prometheus' convention for an enumeration: one
/// series per value, so `zk_partitioner_state{state="ALLOCATING"} == 1` selects the members allocating). Labels
/// `path`, `state` (one of [`STATES`]).
pub const STATE: &str = "zk_partitioner_state";
/// Gauge: when the member entered its current state, in seconds since the Unix epoch by its wall clock (a
/// republication of the same state, such as a party change during `ALLOCATING`, leaves it alone). Alerts compute how
/// long a member has been in a state as `time() - zk_partitioner_state_entered_timestamp_seconds`. Label `path`.
pub const STATE_ENTERED: &str = "zk_partitioner_state_entered_timestamp_seconds";
/// Gauge: the number of items in the set the member divides, as it sees it: the fixed set, or the shared set as it
/// last read it ([`SharedSet`](crate::SharedSet)). Once the party is stable, its members' [`ITEMS_HELD`] add up to this.
/// Label `path`.
pub const ITEMS: &str = "zk_partitioner_items";

/// Gauge: the capacity the member's load is measured against ([`Load::capacity`](crate::weighted::Load::capacity)): its
/// announced capacity ([`Builder::capacity`](crate::Builder::capacity)) under a weighted partition function, 1 under
/// one that ignores capacities. Label `path`.
pub const CAPACITY: &str = "zk_partitioner_capacity";
/// Gauge: the weight of the member's share under its assignment, per dimension of the items' weights
/// ([`DimensionLoad::assigned`](crate::weighted::DimensionLoad::assigned)). Labels `path`, `dimension` (the dimension's name:
/// `weight` for weights given as one number, and for a set without weights, where it counts the items).
pub const ASSIGNED_WEIGHT: &str = "zk_partitioner_assigned_weight";
/// Gauge: the member's ideal share of each dimension: the dimension's total × its capacity / the party's total
/// capacity ([`DimensionLoad::ideal`](crate::weighted::DimensionLoad::ideal)). Labels `path`, `dimension`.
pub const IDEAL_WEIGHT: &str = "zk_partitioner_ideal_weight";
/// Gauge: the largest [`ASSIGNED_WEIGHT`] / [`IDEAL_WEIGHT`] over the dimensions (1.0: exactly its share; 0 without
/// an ideal share) ([`Load::imbalance`](crate::weighted::Load::imbalance)). Label `path`.
pub const LOAD_IMBALANCE: &str = "zk_partitioner_load_imbalance";
/// Gauge: 1 when the member carries more than its partition function's load bound allows in some dimension (no
/// placement within every member's bound was found: an item larger than a share, say), else 0
/// ([`Load::over_capacity`](crate::weighted::Load::over_capacity)). Label `path`.
pub const OVER_CAPACITY: &str = "zk_partitioner_over_capacity";

/// Counter: the member read the [shared set](crate::SharedSet) (at start, and after each change of it). Labels
/// `path`, `read`: `header` when the set's header recorded every change since the member's last listing, so that
/// reading the header was the whole read; `listing` when the member listed every item (at start, after a staged
/// update or a change too large to record, or after falling more than a few kilobytes of changes behind). A member
/// whose `listing` reads grow with every change of a large set reads far more than it needs: see
/// [`SharedSet`](crate::SharedSet)'s notes on reads.
pub const SHARED_SET_READS: &str = "zk_partitioner_shared_set_reads_total";

/// The values of [`SHARED_SET_READS`]' `read` label.
pub const SHARED_SET_READ_KINDS: [&str; 2] = ["header", "listing"];

/// Counter: chunks of the shared set's weight table the member read (label `path`). A member reads a table when the
/// set's header names a new one, and then only the chunks it does not already have: changing a few weights costs
/// each member a chunk or two, and a member reads the whole table once, at start.
pub const WEIGHT_CHUNK_READS: &str = "zk_partitioner_weight_chunk_reads_total";

/// Every metric name, for exporters' allow lists and for tests.
pub const NAMES: [&str; 18] = [
    REBALANCES,
    ALLOCATION_SECONDS,
    ITEMS_HELD,
    ITEMS_REVOKED,
    LOCK_WAITS,
    SESSION_SUSPENSIONS,
    SESSION_EXPIRIES,
    PARTITION_FN_SECONDS,
    STATE,
    STATE_ENTERED,
    ITEMS,
    CAPACITY,
    ASSIGNED_WEIGHT,
    IDEAL_WEIGHT,
    LOAD_IMBALANCE,
    OVER_CAPACITY,
    SHARED_SET_READS,
    WEIGHT_CHUNK_READS,
];

/// The values of [`STATE`]'s `state` label: kazoo's state names ([`PartitionState::as_str`]).
pub const STATES: [&str; 4] = ["ALLOCATING", "ACQUIRED", "RELEASE", "FAILURE"];

/// The values of [`REBALANCES`]' `cause` label.
pub const CAUSES: [&str; 6] =
    ["party_changed", "shared_set_changed", "connection", "lock_lost", "release_set", "other"];

/// Registers every metric's unit and help text with the installed recorder (optional; exporters show them).
pub fn register_descriptions() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(REBALANCES, Unit::Count, "Times the member stopped being ACQUIRED, by cause");
    describe_histogram!(ALLOCATION_SECONDS, Unit::Seconds, "Time from entering ALLOCATING to ACQUIRED");
    describe_gauge!(ITEMS_HELD, Unit::Count, "Items the member lists as processable");
    describe_counter!(ITEMS_REVOKED, Unit::Count, "Items the member was told to stop processing");
    describe_counter!(LOCK_WAITS, Unit::Count, "Times a lock contender of the member waited behind another");
    describe_counter!(SESSION_SUSPENSIONS, Unit::Count, "Connection losses of the member's ZooKeeper session");
    describe_counter!(SESSION_EXPIRIES, Unit::Count, "Expiries of the member's ZooKeeper session");
    describe_histogram!(PARTITION_FN_SECONDS, Unit::Seconds, "Time each call of the partition function took");
    describe_gauge!(STATE, "1 for the member's current state (label state), 0 for the others");
    describe_gauge!(STATE_ENTERED, Unit::Seconds, "Unix time at which the member entered its current state");
    describe_gauge!(ITEMS, Unit::Count, "Items in the set the member divides, as it sees it");
    describe_gauge!(CAPACITY, "The capacity the member's load is measured against");
    describe_gauge!(ASSIGNED_WEIGHT, "Weight of the member's share, per dimension (label dimension)");
    describe_gauge!(IDEAL_WEIGHT, "The member's ideal share of each dimension's weight (label dimension)");
    describe_gauge!(LOAD_IMBALANCE, "Largest assigned / ideal weight of the member over the dimensions");
    describe_gauge!(OVER_CAPACITY, "1 when the member carries more than the load bound allows, else 0");
    describe_counter!(SHARED_SET_READS, Unit::Count, "Reads of the shared set: by its header alone, or listing it");
    describe_counter!(WEIGHT_CHUNK_READS, Unit::Count, "Chunks of the shared set's weight table read by the member");
}

/// The member at `paths` read the shared set: by its header alone, or by `listing` every item.
pub(crate) fn shared_set_read(paths: &Paths, listing: bool) {
    let read = SHARED_SET_READ_KINDS[usize::from(listing)];
    ::metrics::counter!(SHARED_SET_READS, "path" => path_of(paths), "read" => read).increment(1);
}

/// The member at `paths` read `chunks` chunks of the shared set's weight table.
pub(crate) fn weight_chunks_read(paths: &Paths, chunks: u64) {
    if chunks > 0 {
        ::metrics::counter!(WEIGHT_CHUNK_READS, "path" => path_of(paths)).increment(chunks);
    }
}

/// `function` as every member runs it: each of its decisions timed into [`PARTITION_FN_SECONDS`] for the member at
/// `path`. The builder and the simulation both wrap their members' functions with it.
pub(crate) fn timed(
    function: Box<dyn crate::partition::PartitionFn>,
    path: &str,
) -> Box<dyn crate::partition::PartitionFn> {
    Box::new(crate::partition::Observed::new(function, PartitionFnSeconds { path: path.to_owned() }))
}

/// Records each decision of the partition function it observes (its share, a sticky function's placement; not
/// its work ahead) as [`PARTITION_FN_SECONDS`] for the member at `path`.
struct PartitionFnSeconds {
    path: String,
}

impl crate::partition::Observer for PartitionFnSeconds {
    fn observe<T>(&self, call: crate::partition::Call, run: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let answer = run();
        if call != crate::partition::Call::Prepare {
            ::metrics::histogram!(PARTITION_FN_SECONDS, "path" => self.path.clone())
                .record(started.elapsed().as_secs_f64());
        }
        answer
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
    /// The dimensions of the load set last (a dimension that goes is set to 0).
    dimensions: Vec<String>,
}

impl DriverMetrics {
    /// A member of the partition at `paths`, starting (as every member does) in `ALLOCATING`, connected: its state
    /// gauges say so, it holds nothing, and its session counters are registered at 0 (a rate sees their first event).
    pub(crate) fn new(paths: &Paths, now: Instant) -> Self {
        let path = path_of(paths);
        entered(&path, PartitionState::Allocating);
        ::metrics::gauge!(ITEMS_HELD, "path" => path.clone()).set(0.0);
        ::metrics::counter!(SESSION_SUSPENSIONS, "path" => path.clone()).increment(0);
        ::metrics::counter!(SESSION_EXPIRIES, "path" => path.clone()).increment(0);
        DriverMetrics {
            path,
            allocating_since: Some(now),
            last_session: SessionState::SyncConnected,
            expired: false,
            dimensions: Vec::new(),
        }
    }

    /// The size of the set the member divides, before its first publication.
    pub(crate) fn started(&self, set_len: usize) {
        ::metrics::gauge!(ITEMS, "path" => self.path.clone()).set(set_len as f64);
    }

    /// The background task of the member at `paths` panicked: it is in `FAILURE` and holds nothing (its publisher,
    /// and this, went with the task).
    pub(crate) fn panicked(paths: &Paths) {
        let path = path_of(paths);
        entered(&path, PartitionState::Failure);
        ::metrics::gauge!(ITEMS_HELD, "path" => path).set(0.0);
    }

    /// A publication: from the state `before` (and the items then `revoked_before`, sorted) to `after`, with `items`
    /// listed out of a set of `set_len`.
    pub(crate) fn published(
        &mut self,
        (before, revoked_before): (PartitionState, &[Item]),
        (after, reason, items, revoked): (PartitionState, Reason, usize, &[Item]),
        set_len: usize,
        now: Instant,
    ) {
        let path = self.path.clone();
        if after != before {
            entered(&path, after);
        }
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
        ::metrics::gauge!(ITEMS, "path" => path.clone()).set(set_len as f64);
        ::metrics::gauge!(ITEMS_HELD, "path" => path).set(items as f64);
    }

    /// The member's load under the assignment it publishes: the load gauges, with the series of a dimension the
    /// weights no longer name set to 0.
    pub(crate) fn load(&mut self, load: &Load) {
        let path = &self.path;
        ::metrics::gauge!(CAPACITY, "path" => path.clone()).set(f64::from(load.capacity));
        ::metrics::gauge!(LOAD_IMBALANCE, "path" => path.clone()).set(load.imbalance);
        ::metrics::gauge!(OVER_CAPACITY, "path" => path.clone()).set(if load.over_capacity { 1.0 } else { 0.0 });
        let dimensions: Vec<String> = load.dimensions.iter().map(|d| d.dimension.clone()).collect();
        for gone in self.dimensions.iter().filter(|&d| !dimensions.contains(d)) {
            ::metrics::gauge!(ASSIGNED_WEIGHT, "path" => path.clone(), "dimension" => gone.clone()).set(0.0);
            ::metrics::gauge!(IDEAL_WEIGHT, "path" => path.clone(), "dimension" => gone.clone()).set(0.0);
        }
        for d in &load.dimensions {
            let dimension = d.dimension.clone();
            ::metrics::gauge!(ASSIGNED_WEIGHT, "path" => path.clone(), "dimension" => dimension.clone())
                .set(d.assigned as f64);
            ::metrics::gauge!(IDEAL_WEIGHT, "path" => path.clone(), "dimension" => dimension).set(d.ideal);
        }
        self.dimensions = dimensions;
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

/// The `path` label of the member at `paths`.
fn path_of(paths: &Paths) -> String {
    paths.party.strip_suffix("/party").unwrap_or(&paths.party).to_owned()
}

/// The member at `path` entered `state` now: [`STATE`] says which, [`STATE_ENTERED`] when.
fn entered(path: &str, state: PartitionState) {
    for name in STATES {
        let value = if name == state.as_str() { 1.0 } else { 0.0 };
        ::metrics::gauge!(STATE, "path" => path.to_owned(), "state" => name).set(value);
    }
    // A clock before 1970 (a machine that never set it) reads as the epoch: alerts on time in a state then fire.
    let unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64());
    ::metrics::gauge!(STATE_ENTERED, "path" => path.to_owned()).set(unix);
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
        let at = |seconds| start + Duration::from_secs(seconds);
        metrics::with_local_recorder(&recorder, || {
            let mut m = DriverMetrics::new(&Paths::new("/p"), start);
            use PartitionState::*;
            m.published((Allocating, &[]), (Acquired, Reason::AllAcquired, 3, &[]), 3, at(2));
            m.published((Acquired, &[]), (Release, Reason::PartyChanged, 0, &items), 3, at(3));
            // Republished with one more revoked item: only the new one counts.
            m.published((Release, &items[..2]), (Release, Reason::ItemsRevoked, 0, &items), 3, start);
            m.published((Release, &items), (Allocating, Reason::ReleaseSet, 0, &[]), 3, at(4));
            // The shared set grew by one.
            m.published((Allocating, &[]), (Acquired, Reason::AllAcquired, 2, &[]), 4, at(5));
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
        assert_eq!(value_of(&flat, MetricKind::Gauge, ITEMS), [&DebugValue::Gauge(4.0.into())]);
        let seconds: Vec<f64> = match &value_of(&flat, MetricKind::Histogram, ALLOCATION_SECONDS)[..] {
            [DebugValue::Histogram(values)] => values.iter().map(|v| v.into_inner()).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(seconds, [2.0, 1.0]);
    }

    /// A gauge's value in a snapshot, by name and `state` label (a snapshot of the debugging recorder drains it: a
    /// gauge not set since the previous snapshot reads 0).
    fn gauge(snapshot: &[(CompositeKey, DebugValue)], name: &str, state: Option<&str>) -> f64 {
        let found = snapshot.iter().find(|(key, _)| {
            let label = key.key().labels().find(|l| l.key() == "state").map(|l| l.value());
            key.kind() == MetricKind::Gauge && key.key().name() == name && label == state
        });
        match found {
            Some((_, DebugValue::Gauge(value))) => value.into_inner(),
            other => panic!("no gauge {name} {state:?}: {other:?}"),
        }
    }

    /// Which states [`STATE`] reads 1 for, and whether every other reads 0.
    fn states_at_one(snapshot: &[(CompositeKey, DebugValue)]) -> Vec<&'static str> {
        let values: Vec<f64> = STATES.iter().map(|&state| gauge(snapshot, STATE, Some(state))).collect();
        assert!(values.iter().all(|&v| v == 0.0 || v == 1.0), "{values:?}");
        STATES.iter().zip(values).filter(|&(_, v)| v == 1.0).map(|(&state, _)| state).collect()
    }

    fn unix_now() -> f64 {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("a clock after 1970").as_secs_f64()
    }

    #[test]
    fn the_state_gauges_say_which_state_and_since_when() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let read = || -> Vec<(CompositeKey, DebugValue)> {
            snapshotter.snapshot().into_vec().into_iter().map(|(k, _, _, v)| (k, v)).collect()
        };
        let start = Instant::now();
        let items: Vec<Item> = (0..3).map(Item::from).collect();
        let paths = Paths::new("/p");
        metrics::with_local_recorder(&recorder, || {
            use PartitionState::*;
            // A new member: ALLOCATING since now, nothing held, its session counters at 0; the set's size at start.
            let before = unix_now();
            let mut m = DriverMetrics::new(&paths, start);
            m.started(3);
            let snapshot = read();
            assert_eq!(states_at_one(&snapshot), ["ALLOCATING"]);
            let allocating = gauge(&snapshot, STATE_ENTERED, None);
            assert!((before..=unix_now()).contains(&allocating), "{before} {allocating}");
            assert_eq!(gauge(&snapshot, ITEMS, None), 3.0);
            assert_eq!(gauge(&snapshot, ITEMS_HELD, None), 0.0);
            for name in [SESSION_SUSPENSIONS, SESSION_EXPIRIES] {
                assert_eq!(value_of(&snapshot, MetricKind::Counter, name), [&DebugValue::Counter(0)], "{name}");
            }

            // ACQUIRED, then RELEASE: each transition sets the four states and the time.
            m.published((Allocating, &[]), (Acquired, Reason::AllAcquired, 3, &[]), 3, start);
            let snapshot = read();
            assert_eq!(states_at_one(&snapshot), ["ACQUIRED"]);
            let acquired = gauge(&snapshot, STATE_ENTERED, None);
            assert!(acquired >= allocating);
            m.published((Acquired, &[]), (Release, Reason::PartyChanged, 0, &items), 3, start);
            let snapshot = read();
            assert_eq!(states_at_one(&snapshot), ["RELEASE"]);
            assert!(gauge(&snapshot, STATE_ENTERED, None) >= acquired);
            assert_eq!(gauge(&snapshot, ITEMS_HELD, None), 0.0);

            // RELEASE republished: the state and its time are left alone (not set since the last read: 0), the
            // item counts are set again.
            m.published((Release, &items[..2]), (Release, Reason::ItemsRevoked, 0, &items), 3, start);
            let snapshot = read();
            assert_eq!(states_at_one(&snapshot), [] as [&str; 0]);
            assert_eq!(gauge(&snapshot, STATE_ENTERED, None), 0.0);
            assert_eq!(gauge(&snapshot, ITEMS, None), 3.0);

            // FAILURE, and a panicked task's FAILURE (published without its publisher).
            m.published((Release, &items), (Failure, Reason::Ended, 0, &[]), 3, start);
            assert_eq!(states_at_one(&read()), ["FAILURE"]);
            DriverMetrics::panicked(&paths);
            let snapshot = read();
            assert_eq!(states_at_one(&snapshot), ["FAILURE"]);
            assert!(gauge(&snapshot, STATE_ENTERED, None) > 0.0);
        });
        // One series per state, no more.
        let mut series: Vec<Vec<(String, String)>> = read()
            .iter()
            .filter(|(key, _)| key.key().name() == STATE)
            .map(|(key, _)| key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect())
            .collect();
        series.sort();
        let mut expected: Vec<Vec<(String, String)>> =
            STATES.iter().map(|&state| vec![("path".into(), "/p".into()), ("state".into(), state.into())]).collect();
        expected.sort();
        assert_eq!(series, expected);
    }

    #[test]
    fn a_load_sets_the_load_gauges_and_a_dimension_that_goes_reads_0() {
        use std::collections::BTreeMap;

        use crate::weighted::{Weight, Weights};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let read = || -> Vec<(CompositeKey, DebugValue)> {
            snapshotter.snapshot().into_vec().into_iter().map(|(k, _, _, v)| (k, v)).collect()
        };
        // (name, dimension label) -> value, for the gauges
        let gauges = |snapshot: &[(CompositeKey, DebugValue)]| -> BTreeMap<(String, Option<String>), f64> {
            snapshot
                .iter()
                .filter_map(|(key, value)| match value {
                    DebugValue::Gauge(value) => {
                        let dimension = key.key().labels().find(|l| l.key() == "dimension").map(|l| l.value().into());
                        Some(((key.key().name().to_owned(), dimension), value.into_inner()))
                    }
                    _ => None,
                })
                .collect()
        };
        let at = |name: &str, dimension: Option<&str>| (name.to_owned(), dimension.map(str::to_owned));
        let items: Vec<Item> = (0..4).map(Item::from).collect();
        let named = BTreeMap::from([
            (Item::from(0), Weight::named([("cpu", 4), ("bytes", 100)]).unwrap()),
            (Item::from(1), Weight::named([("cpu", 2), ("bytes", 300)]).unwrap()),
        ]);
        let two_dimensions = Load::of([0, 1], &Weights::of(&items, &named), 3, 4, Some(1.1));
        let uniform = Load::of([2], &Weights::uniform(4), 1, 2, None);
        metrics::with_local_recorder(&recorder, || {
            let mut m = DriverMetrics::new(&Paths::new("/p"), Instant::now());
            // A member of capacity 3 in a party of 4 holding both weighted items (the other two weigh 1 in each
            // dimension): cpu 6 of 8 (ideal 6), bytes 400 of 402 (ideal 301.5), over the bound.
            m.load(&two_dimensions);
            let g = gauges(&read());
            assert_eq!(g[&at(CAPACITY, None)], 3.0);
            assert_eq!((g[&at(ASSIGNED_WEIGHT, Some("cpu"))], g[&at(IDEAL_WEIGHT, Some("cpu"))]), (6.0, 6.0));
            assert_eq!((g[&at(ASSIGNED_WEIGHT, Some("bytes"))], g[&at(IDEAL_WEIGHT, Some("bytes"))]), (400.0, 301.5));
            assert_eq!((g[&at(LOAD_IMBALANCE, None)], g[&at(OVER_CAPACITY, None)]), (400.0 / 301.5, 1.0));
            // The weights are reset: one dimension, `weight`; cpu and bytes read 0.
            m.load(&uniform);
            let snapshot = read();
            let g = gauges(&snapshot);
            assert_eq!(g[&at(CAPACITY, None)], 1.0);
            assert_eq!((g[&at(ASSIGNED_WEIGHT, Some("weight"))], g[&at(IDEAL_WEIGHT, Some("weight"))]), (1.0, 2.0));
            for gone in ["cpu", "bytes"] {
                assert_eq!((g[&at(ASSIGNED_WEIGHT, Some(gone))], g[&at(IDEAL_WEIGHT, Some(gone))]), (0.0, 0.0));
            }
            assert_eq!((g[&at(LOAD_IMBALANCE, None)], g[&at(OVER_CAPACITY, None)]), (0.5, 0.0));
            // Every series carries the path.
            for (key, _) in snapshot.iter().filter(|(key, _)| key.key().name() != STATE) {
                assert_eq!(key.key().labels().find(|l| l.key() == "path").map(|l| l.value()), Some("/p"));
            }
        });
    }

    #[test]
    fn every_state_is_labelled_by_its_name() {
        use PartitionState::*;
        let names: Vec<&str> =
            [Allocating, Acquired, Release, Failure].into_iter().map(PartitionState::as_str).collect();
        assert_eq!(names, STATES);
    }

    #[test]
    fn every_reason_that_leaves_acquired_has_a_cause_among_the_documented_ones() {
        use Reason::*;
        for reason in Reason::ALL {
            if let Some(cause) = reason.rebalance_cause() {
                assert!(CAUSES.contains(&cause), "{reason}: {cause}");
            }
        }
        assert_eq!(PartyChanged.rebalance_cause(), Some("party_changed"));
        assert_eq!(SharedSetChanged.rebalance_cause(), Some("shared_set_changed"));
        assert_eq!(HeldLockDeleted.rebalance_cause(), Some("lock_lost"));
        assert_eq!(AllAcquired.rebalance_cause(), None);
    }
}
