//! The metrics a real partitioner records. Through a global debugging recorder (only the first test's members record
//! into it): allocation time, items held, lock waits, a rebalance with its cause, revoked items, a suspension and an
//! expiry. Through a recorder per member (each on a thread of its own, as if in a process of its own with an
//! exporter): the state gauges follow the member's states, `zk_partitioner_items` is the set's size, and the members'
//! items held add up to it once the party is stable: what the example alerts in docs/prometheus rely on. A weighted
//! member's load gauges say what its snapshot's load says. And a member of a shared set reads small changes from the
//! set's header alone, listing the items only when the header cannot account for a change.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::ctx::SESSION_TIMEOUT;
use common::members::{Member, TIME_BOUNDARY, auto_release, ints, settle};
use common::{Ctx, timing, wait_for, wait_until};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::registry::{AtomicStorage, Registry};
use tokio::sync::oneshot;
use zk_partitioner::{
    Builder, Item, PartitionState, SetPartitioner, SharedSet, metrics as names,
    weighted::{Load, Weight, WeightedRendezvous},
};

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
    /// Every gauge set, to any value.
    gauges_set: std::collections::HashSet<String>,
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
            if matches!(value, DebugValue::Gauge(_)) {
                seen.gauges_set.insert(name.clone());
            }
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
            || seen.gauges_set.contains(name)
            || seen.histograms.contains_key(name)
    }
}

#[tokio::test]
async fn a_partitioner_records_its_metrics() {
    let recorder = DebuggingRecorder::new();
    let totals = Totals { snapshotter: recorder.snapshotter(), seen: Mutex::default() };
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    names::register_descriptions();

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
    // (Every metric but the shared set's reads: this party divides a fixed set. The tests of those reads are below.)
    let shared_set = [names::SHARED_SET_READS, names::WEIGHT_CHUNK_READS];
    let recorded = |name: &&str| shared_set.contains(name) || totals.recorded(name);
    assert!(names::NAMES.iter().all(recorded), "every metric recorded");
}

/// A recorder that keeps the latest value of everything recorded, to be read at any time (the debugging recorder's
/// snapshots drain gauges, after which a gauge set to 0 and one not set since read the same).
#[derive(Clone)]
struct Kept(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Kept {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0.get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0.get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0.get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

impl Kept {
    fn new() -> Self {
        Kept(Arc::new(Registry::atomic()))
    }

    /// The gauge `name` of [`PATH`] with this `state` label (`None`: without one), if set.
    fn gauge(&self, name: &str, state: Option<&str>) -> Option<f64> {
        let label = |key: &Key, wanted: &str| key.labels().find(|l| l.key() == wanted).map(|l| l.value().to_owned());
        self.0.get_gauge_handles().into_iter().find_map(|(key, gauge): (Key, Arc<AtomicU64>)| {
            let ours = key.name() == name && label(&key, "path").as_deref() == Some(PATH);
            (ours && label(&key, "state").as_deref() == state).then(|| f64::from_bits(gauge.load(Ordering::SeqCst)))
        })
    }

    /// The state [`names::STATE`] reads 1 for; panics unless exactly one does and the other three read 0.
    fn state(&self) -> &'static str {
        let values: Vec<Option<f64>> = names::STATES.iter().map(|&s| self.gauge(names::STATE, Some(s))).collect();
        let at_one: Vec<&str> =
            names::STATES.iter().zip(&values).filter(|(_, v)| **v == Some(1.0)).map(|(s, _)| *s).collect();
        let at_zero = values.iter().filter(|v| **v == Some(0.0)).count();
        assert!(at_one.len() == 1 && at_zero == 3, "{:?}: {values:?}", names::STATES);
        at_one[0]
    }

    /// When the member entered its state, by [`names::STATE_ENTERED`].
    fn entered(&self) -> f64 {
        self.gauge(names::STATE_ENTERED, None).expect("the time of the latest state")
    }

    fn items(&self) -> Option<f64> {
        self.gauge(names::ITEMS, None)
    }

    /// The weight chunks the member read ([`names::WEIGHT_CHUNK_READS`]).
    fn chunk_reads(&self) -> u64 {
        self.counter(names::WEIGHT_CHUNK_READS, None)
    }

    /// The member's reads of the shared set of this `read` kind ([`names::SHARED_SET_READS`]).
    fn reads(&self, read: &str) -> u64 {
        self.counter(names::SHARED_SET_READS, Some(read))
    }

    /// The counter `name` of [`PATH`] with this `read` label (`None`: without one), 0 if never counted.
    fn counter(&self, name: &str, read: Option<&str>) -> u64 {
        self.0
            .get_counter_handles()
            .into_iter()
            .find_map(|(key, counter): (Key, Arc<AtomicU64>)| {
                let label = |wanted: &str| key.labels().find(|l| l.key() == wanted).map(|l| l.value().to_owned());
                let ours = key.name() == name && label("path").as_deref() == Some(PATH);
                (ours && label("read").as_deref() == read).then(|| counter.load(Ordering::SeqCst))
            })
            .unwrap_or(0)
    }

    fn held(&self) -> Option<f64> {
        self.gauge(names::ITEMS_HELD, None)
    }

    /// The gauge `name` of [`PATH`] with this `dimension` label, if set.
    fn dimension(&self, name: &str, dimension: &str) -> Option<f64> {
        self.0.get_gauge_handles().into_iter().find_map(|(key, gauge): (Key, Arc<AtomicU64>)| {
            let label = |wanted: &str| key.labels().find(|l| l.key() == wanted).map(|l| l.value().to_owned());
            let ours = key.name() == name && label("path").as_deref() == Some(PATH);
            (ours && label("dimension").as_deref() == Some(dimension))
                .then(|| f64::from_bits(gauge.load(Ordering::SeqCst)))
        })
    }

    /// Whether the load gauges say what `load` says.
    fn shows(&self, load: &Load) -> Result<(), String> {
        let mut found = vec![
            (names::CAPACITY.to_owned(), self.gauge(names::CAPACITY, None), f64::from(load.capacity)),
            (names::LOAD_IMBALANCE.to_owned(), self.gauge(names::LOAD_IMBALANCE, None), load.imbalance),
            (names::OVER_CAPACITY.to_owned(), self.gauge(names::OVER_CAPACITY, None), f64::from(load.over_capacity)),
        ];
        for d in &load.dimensions {
            let assigned = self.dimension(names::ASSIGNED_WEIGHT, &d.dimension);
            found.push((format!("{} {}", names::ASSIGNED_WEIGHT, d.dimension), assigned, d.assigned as f64));
            let ideal = self.dimension(names::IDEAL_WEIGHT, &d.dimension);
            found.push((format!("{} {}", names::IDEAL_WEIGHT, d.dimension), ideal, d.ideal));
        }
        let wrong: Vec<String> = found
            .into_iter()
            .filter(|(_, gauge, expected)| *gauge != Some(*expected))
            .map(|(name, gauge, expected)| format!("{name}: {gauge:?}, not {expected}"))
            .collect();
        if wrong.is_empty() { Ok(()) } else { Err(format!("{load}: {}", wrong.join("; "))) }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("a clock after 1970").as_secs_f64()
}

/// Stops an [`apart`] member's thread when dropped (its runtime, and the member's session with it, end).
struct Thread(Option<oneshot::Sender<()>>);

impl Drop for Thread {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// A member of the party at [`PATH`] that runs (its session and its background task) on a thread of its own, with a
/// current-thread runtime and a [`Kept`] recorder as the thread's default: what it records is its alone.
async fn apart(
    ctx: &Ctx,
    identifier: &str,
    items: Vec<Item>,
    configure: impl FnOnce(Builder) -> Builder + Send + 'static,
) -> (Member, Kept, Thread) {
    let (connect, identifier) = (format!("{}{}", ctx.endpoint, ctx.namespace), identifier.to_owned());
    let kept = Kept::new();
    let recorder = kept.clone();
    let (started, member) = oneshot::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _default = metrics::set_default_local_recorder(&recorder);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let client = common::connect(&connect, SESSION_TIMEOUT).await;
            let builder = SetPartitioner::builder(client.clone(), PATH, items)
                .identifier(identifier)
                .time_boundary(TIME_BOUNDARY);
            let partitioner = configure(builder).build().await.expect("build partitioner");
            let _ = started.send(Member { client, partitioner });
            let _ = stopped.await;
        });
    });
    let member = member.await.expect("the member's thread built it (else its panic is above)");
    (member, kept, Thread(Some(stop)))
}

#[tokio::test]
async fn each_member_says_its_state_and_the_items_held_add_up_to_the_set() {
    let deadline = timing(Duration::from_secs(20));
    // given: a lock held by hand, so m0's contender for item 3 waits behind it and m0 stays ALLOCATING
    let ctx = Ctx::new().await;
    let items = ints(5);
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &[Item::from(3)]).await;
    let before = unix_now();
    let (m0, k0, _t0) = apart(&ctx, "m0", items.clone(), |b| b).await;
    wait_until("m0 waits for item 3", deadline, || async {
        k0.0.get_counter_handles()
            .iter()
            .any(|(key, c)| key.name() == names::LOCK_WAITS && c.load(Ordering::SeqCst) > 0)
    })
    .await;
    assert_eq!(m0.state(), PartitionState::Allocating);
    // then: ALLOCATING since it started, the set's 5 items, none held
    assert_eq!(k0.state(), "ALLOCATING");
    let allocating = k0.entered();
    let waited = unix_now();
    assert!((before..=waited).contains(&allocating), "entered ALLOCATING at {allocating}, started at {before}");
    assert_eq!((k0.items(), k0.held()), (Some(5.0), Some(0.0)));

    // when: the blocker lets go, then: ACQUIRED since then, all 5 held
    ctx.release_locks(&blocker, held).await;
    m0.wait_items(&items, deadline).await;
    assert_eq!(k0.state(), "ACQUIRED");
    let acquired = k0.entered();
    assert!(acquired >= waited, "entered ACQUIRED at {acquired}, before the lock was let go at {waited}");
    assert_eq!((k0.items(), k0.held()), (Some(5.0), Some(5.0)));

    // when: m1 joins (nobody releases yet), then: m0 is in RELEASE, holding nothing it may process; m1 ALLOCATING
    let (m1, k1, _t1) = apart(&ctx, "m1", items.clone(), |b| b).await;
    m0.wait_state(PartitionState::Release, deadline).await;
    assert_eq!(k0.state(), "RELEASE");
    assert!(k0.entered() >= acquired);
    assert_eq!((k0.items(), k0.held()), (Some(5.0), Some(0.0)));
    assert_eq!(m1.state(), PartitionState::Allocating, "m1 waits for m0's locks");
    assert_eq!((k1.state(), k1.items(), k1.held()), ("ALLOCATING", Some(5.0), Some(0.0)));

    // when: both run the worker loop until stable, then: both ACQUIRED, and their items held add up to the set
    let pair = [m0, m1];
    settle(&pair, deadline).await;
    let mut sum = 0.0;
    for (member, kept) in pair.iter().zip([&k0, &k1]) {
        assert_eq!((kept.state(), kept.items()), ("ACQUIRED", Some(5.0)));
        let held = kept.held().expect("items held");
        assert_eq!(held, member.partitioner.snapshot().items.len() as f64);
        sum += held;
    }
    assert_eq!(sum, 5.0, "the items held add up to the set");

    // when: m0 finishes, then: m0 is in FAILURE holding nothing, m1 takes everything: the sum is still the set
    let [m0, m1] = pair;
    m0.partitioner.finish().await;
    m0.wait_state(PartitionState::Failure, deadline).await;
    assert_eq!((k0.state(), k0.held()), ("FAILURE", Some(0.0)));
    let _m1_worker = auto_release(&m1.partitioner);
    m1.wait_items(&items, deadline).await;
    assert_eq!((k1.state(), k1.items(), k1.held()), ("ACQUIRED", Some(5.0), Some(5.0)));
}

#[tokio::test]
async fn the_items_gauge_follows_the_shared_set() {
    let deadline = timing(Duration::from_secs(20));
    // given: a member of a shared set seeded with 3 items, ACQUIRED with them
    let ctx = Ctx::new().await;
    let (m0, k0, _t0) = apart(&ctx, "m0", ints(3), |b| b.shared_set(true)).await;
    let _worker = auto_release(&m0.partitioner);
    m0.wait_items(&ints(3), deadline).await;
    assert_eq!((k0.items(), k0.held()), (Some(3.0), Some(3.0)));
    let set = SharedSet::new(ctx.client().await, PATH).expect("the set's handle");

    // when: 2 items are added, then: 5; when: 1 is removed, then: 4
    set.add([Item::from(3), Item::from(4)]).await.expect("add to the set");
    m0.wait_items(&ints(5), deadline).await;
    assert_eq!((k0.items(), k0.held()), (Some(5.0), Some(5.0)));
    set.remove([Item::from(0)]).await.expect("remove from the set");
    m0.wait_items(&ints(5)[1..], deadline).await;
    assert_eq!((k0.items(), k0.held()), (Some(4.0), Some(4.0)));
}

#[tokio::test]
async fn a_weighted_members_load_gauges_follow_its_load() {
    let deadline = timing(Duration::from_secs(20));
    // given: a shared set of 8 items, item 0 weighing 4 cpu (and nothing else), divided by weight between members of
    // capacities 1 and 3
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("the set's handle");
    set.create_if_missing(ints(8)).await.expect("create the set");
    set.set_weights([(0, Weight::named([("cpu", 4)]).expect("a weight"))]).await.expect("weigh");
    let weighted = |capacity| {
        move |b: Builder| b.shared_set(true).partition_func(WeightedRendezvous::default()).capacity(capacity)
    };
    let (small, k_small, _t0) = apart(&ctx, "small", Vec::new(), weighted(1)).await;
    let (big, k_big, _t1) = apart(&ctx, "big", Vec::new(), weighted(3)).await;
    let _workers = (auto_release(&small.partitioner), auto_release(&big.partitioner));
    let settled = |version: u64| {
        let members = [(&small, &k_small), (&big, &k_big)];
        async move {
            wait_for("both members ACQUIRED, their load gauges as their loads", deadline, || async {
                let mut loads = Vec::new();
                for (member, kept) in members {
                    let s = member.partitioner.snapshot();
                    let ready = s.state == PartitionState::Acquired && s.set_version == Some(version);
                    let load = s.load.clone().filter(|_| ready && s.members.len() == 2).ok_or(format!("{s:?}"))?;
                    kept.shows(&load)?;
                    loads.push(load);
                }
                Ok(loads)
            })
            .await
        }
    };

    // when: they have settled
    let loads = settled(2).await;
    // then: the gauges say each one's load (checked while waiting), in the one dimension the weights name (the
    // other items weigh 1 cpu), and capacities 1 and 3
    let dimensions: Vec<&str> = loads[0].dimensions.iter().map(|d| d.dimension.as_str()).collect();
    assert_eq!(dimensions, ["cpu"]);
    assert_eq!((k_small.gauge(names::CAPACITY, None), k_big.gauge(names::CAPACITY, None)), (Some(1.0), Some(3.0)));

    // when: the weights are reset, then: the one dimension is `weight`, and the cpu series read 0
    set.reset_weights([0]).await.expect("reset the weights");
    let loads = settled(3).await;
    assert!(loads.iter().all(|load| load.dimensions.len() == 1 && load.dimensions[0].dimension == "weight"));
    for kept in [&k_small, &k_big] {
        let cpu = (kept.dimension(names::ASSIGNED_WEIGHT, "cpu"), kept.dimension(names::IDEAL_WEIGHT, "cpu"));
        assert_eq!(cpu, (Some(0.0), Some(0.0)));
    }
}

#[tokio::test]
async fn a_shared_set_member_reads_small_changes_from_the_header_alone() {
    let deadline = timing(Duration::from_secs(20));
    // given: a shared set of 2,000 items, and a member following it
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
    let (created, _) = set.create_if_missing(ints(2_000)).await.expect("create the set");
    let (m0, k0, _t0) = apart(&ctx, "m0", ints(2_000), |b| b.shared_set(true)).await;
    let _worker = auto_release(&m0.partitioner);
    let follows = |version: u64, items: Vec<Item>| {
        let m0 = &m0;
        async move {
            wait_until(&format!("m0 holds the set's {} items at version {version}", items.len()), deadline, || async {
                let snapshot = m0.partitioner.snapshot();
                snapshot.set_version == Some(version) && snapshot.state == PartitionState::Acquired && {
                    let mut held = snapshot.items.to_vec();
                    held.sort();
                    held == items
                }
            })
            .await;
        }
    };
    follows(created.version, created.items).await;
    let listed = k0.reads("listing");
    assert!(listed >= 1, "the first read lists every item");

    // when: 20 small changes, each followed before the next
    for i in 0..20 {
        let after = match i % 2 {
            0 => set.add([Item::from(10_000 + i)]).await,
            _ => set.remove([Item::from(i)]).await,
        }
        .expect("a small change");
        follows(after.version, after.items).await;
    }
    // then: each was read from the header alone
    assert_eq!(k0.reads("listing"), listed, "no listing after a small change");
    assert!(k0.reads("header") >= 20, "{} header reads", k0.reads("header"));

    // when: a child made by hand beside a change (the header does not record it)
    ctx.observer.create(&format!("{PATH}/items/by-hand"), b"", &common::persistent()).await.expect("create by hand");
    let after = set.add([Item::from(20_000)]).await.expect("a small change");
    // then: the counts do not add up, the member lists the items again, and finds what a listing finds
    follows(after.version, after.items).await;
    assert_eq!(k0.reads("listing"), listed + 1);
}

/// A member reads a weight table whole once; after a change of one weight, it reads the one chunk that changed.
#[tokio::test]
async fn a_member_reads_only_the_weight_chunks_that_changed() {
    let deadline = timing(Duration::from_secs(20));
    // given: 20,000 items, every one weighted (a table of about 20 chunks), and a member following them
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
    set.create_if_missing(ints(20_000)).await.expect("create the set");
    let weighed = set.set_weights((0..20_000).map(|i| (i, Weight::new(i as u64 % 7 + 1)))).await.expect("weigh all");
    let (m0, k0, _t0) = apart(&ctx, "m0", Vec::new(), |b| b.shared_set(true)).await;
    let _worker = auto_release(&m0.partitioner);
    let at = |version: u64| {
        let m0 = &m0;
        async move {
            wait_until(&format!("m0 ACQUIRED at version {version}"), deadline, || async {
                let snapshot = m0.partitioner.snapshot();
                snapshot.set_version == Some(version) && snapshot.state == PartitionState::Acquired
            })
            .await;
        }
    };
    at(weighed.version).await;
    let whole = k0.chunk_reads();
    assert!(whole >= 10, "the first read reads the whole table: {whole} chunks");

    // when: one weight changes, then another, each followed before the next
    for (i, item) in [12_345, 777].into_iter().enumerate() {
        let changed = set.set_weights([(item, Weight::new(1_000))]).await.expect("one weight");
        at(changed.version).await;
        // then: the member read one chunk more (the index names the others, which it has)
        assert_eq!(k0.chunk_reads(), whole + i as u64 + 1, "after changing item {item}'s weight");
    }
    // and: a change that adds no weight reads no chunk (the table is the same)
    let added = set.add([Item::from(50_000)]).await.expect("add");
    at(added.version).await;
    assert_eq!(k0.chunk_reads(), whole + 2);
}
