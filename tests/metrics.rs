//! The metrics a real partitioner records (through a global debugging recorder: this test binary holds one test, so
//! nothing else records into it): allocation time, items held, lock waits, a rebalance with its cause, revoked items,
//! a suspension and an expiry.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use common::members::{auto_release, ints, settle};
use common::{Ctx, timing, wait_until};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use zk_partitioner::{Item, PartitionState, metrics as names};

const PATH: &str = "/partitioner";

/// What has been recorded for [`PATH`] so far. The debugging recorder's snapshots drain it (counters restart at 0,
/// histograms are emptied, gauges read 0 until set again), so every read is added to running totals here.
struct Totals {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// By (name, cause label).
    counters: HashMap<(String, Option<String>), u64>,
    /// The last non-zero value of each gauge.
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
}

impl Totals {
    fn refresh(&self) -> std::sync::MutexGuard<'_, Seen> {
        let mut seen = self.seen.lock().unwrap();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let label = |wanted: &str| key.labels().find(|l| l.key() == wanted).map(|l| l.value().to_owned());
            if label("path").as_deref() != Some(PATH) {
                continue;
            }
            let name = key.name().to_owned();
            match value {
                DebugValue::Counter(delta) => *seen.counters.entry((name, label("cause"))).or_default() += delta,
                DebugValue::Gauge(value) if value.into_inner() != 0.0 => {
                    seen.gauges.insert(name, value.into_inner());
                }
                DebugValue::Gauge(_) => {}
                DebugValue::Histogram(samples) => {
                    seen.histograms.entry(name).or_default().extend(samples.into_iter().map(|s| s.into_inner()));
                }
            }
        }
        seen
    }

    fn counter(&self, name: &str, cause: Option<&str>) -> u64 {
        let seen = self.refresh();
        seen.counters
            .iter()
            .filter(|((n, c), _)| n == name && (cause.is_none() || c.as_deref() == cause))
            .map(|(_, v)| v)
            .sum()
    }

    fn gauge(&self, name: &str) -> Option<f64> {
        self.refresh().gauges.get(name).copied()
    }

    fn samples(&self, name: &str) -> Vec<f64> {
        self.refresh().histograms.get(name).cloned().unwrap_or_default()
    }

    fn recorded(&self, name: &str) -> bool {
        let seen = self.refresh();
        seen.counters.keys().any(|(n, _)| n == name)
            || seen.gauges.contains_key(name)
            || seen.histograms.contains_key(name)
    }
}

#[tokio::test]
async fn a_partitioner_records_its_metrics() {
    let recorder = DebuggingRecorder::new();
    let totals = Totals { snapshotter: recorder.snapshotter(), seen: Mutex::default() };
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    names::describe();

    // given: a lock held by hand, so the first member's contender for item 3 must wait behind it
    let ctx = Ctx::new().await;
    let items = ints(4);
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &[Item::from(3)]).await;
    let (m0, proxy) = ctx.member_via_proxy("m0", items.clone(), Duration::from_secs(1)).await;
    let _m0_worker = auto_release(&m0.partitioner);
    wait_until("m0 waits for item 3", timing(Duration::from_secs(10)), || async {
        totals.counter(names::LOCK_WAITS, None) >= 1
    })
    .await;
    assert_eq!(m0.state(), PartitionState::Allocating);

    // when: the blocker lets go
    ctx.release_locks(&blocker, held).await;
    m0.wait_items(&items, timing(Duration::from_secs(10))).await;
    // then: one allocation was timed (from the start to ACQUIRED, at least the time_boundary), 4 items are held
    let allocations = totals.samples(names::ALLOCATION_SECONDS);
    assert_eq!(allocations.len(), 1, "{allocations:?}");
    assert!(allocations[0] >= common::members::TIME_BOUNDARY.as_secs_f64());
    assert_eq!(totals.gauge(names::ITEMS_HELD), Some(4.0));

    // when: a second member joins
    let m1 = ctx.member("m1", items.clone()).await;
    let _m1_worker = auto_release(&m1.partitioner);
    let pair = [m0, m1];
    settle(&pair, timing(Duration::from_secs(20))).await;
    // then: one rebalance caused by the party change (m0's: m1 was never ACQUIRED before), m0's 4 items revoked, and
    // a gauge of 2 (both members write the same series, one path: either way 2)
    assert_eq!(totals.counter(names::REBALANCES, Some("party_changed")), 1);
    assert_eq!(totals.counter(names::ITEMS_REVOKED, None), 4);
    assert_eq!(totals.samples(names::ALLOCATION_SECONDS).len(), 3, "m0 twice, m1 once");
    assert_eq!(totals.gauge(names::ITEMS_HELD), Some(2.0));

    // when: m0's session expires (its proxy is cut past the session timeout)
    let [m0, _m1] = pair;
    common::expire(&m0.client, &proxy).await;
    m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    // then: a suspension, then one expiry
    wait_until("m0's suspension and expiry counted", timing(Duration::from_secs(10)), || async {
        totals.counter(names::SESSION_SUSPENSIONS, None) >= 1 && totals.counter(names::SESSION_EXPIRIES, None) == 1
    })
    .await;
    // and m0's suspension (Standard policy) made it release: a rebalance caused by the connection
    assert_eq!(totals.counter(names::REBALANCES, Some("connection")), 1);
    assert!(names::NAMES.iter().all(|name| totals.recorded(name)), "every metric recorded");
}
