//! Weighted items and member capacities on a real ZooKeeper: members of capacities 1, 2 and 3 divide a shared set's
//! weights in proportion, follow a weight change made at run time under both rebalance modes, a kazoo member in a
//! weighted party is reported instead of silently computing another answer, and weights change atomically with
//! clear errors for bad input.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kazoo::KazooWorker;
use common::members::{AbortOnDrop, Member, assert_disjoint_cover, auto_release, items_of};
use common::{Ctx, timing, wait_until};
use zk_partitioner::{
    Error, FencingToken, Item, PartitionState, Rebalance, SetPartitioner, SharedSet,
    checks::InputError,
    shared_set::SharedSetVersion,
    snapshot::DisagreementKind,
    weighted::{Weight, WeightedRendezvous, capacity_limit},
};
use zk_partitioner_testing::wait_snapshot;

const PATH: &str = "/partitioner";
const BOUND: f64 = 1.10;

struct Worker {
    member: Member,
    _loop: AbortOnDrop,
}

async fn weighted_member(ctx: &Ctx, name: &str, capacity: u32, rebalance: Rebalance) -> Worker {
    let member = ctx
        .member_with(name, Vec::new(), |b| {
            b.shared_set(true)
                .rebalance(rebalance)
                .partition_func(WeightedRendezvous::with_load_factor(BOUND))
                .capacity(capacity)
                .time_boundary(Duration::from_millis(500))
        })
        .await;
    let worker_loop = auto_release(&member.partitioner);
    Worker { member, _loop: worker_loop }
}

/// The weight of `item` in the set as read (1 unless it names one).
fn weight_of(set: &SharedSetVersion, item: &Item) -> u64 {
    set.weights.get(item).map_or(1, |w| w.get(zk_partitioner::weighted::DEFAULT_DIMENSION))
}

/// Waits until every member is ACQUIRED at the set's version, checks the claims are a disjoint cover, and checks each
/// member's reported load against the set's weights: what it holds, its capacity, within the load bound.
async fn wait_weighted_cover(ctx: &Ctx, workers: &[&Worker], capacities: &[u32], set: &SharedSet) -> SharedSetVersion {
    let expected = set.read().await.expect("read the set");
    wait_until("every member ACQUIRED at the set's version", timing(Duration::from_secs(20)), || async {
        workers.iter().all(|w| {
            let s = w.member.partitioner.snapshot();
            s.state == PartitionState::Acquired && s.set_version == Some(expected.version) && s.members.len() == 3
        })
    })
    .await;
    let members: Vec<&Member> = workers.iter().map(|w| &w.member).collect();
    assert_disjoint_cover(&ctx.observer, PATH, &members, &expected.items).await;
    let total: u64 = expected.items.iter().map(|item| weight_of(&expected, item)).sum();
    let total_capacity: u64 = capacities.iter().map(|&c| u64::from(c)).sum();
    for (w, &capacity) in workers.iter().zip(capacities) {
        let snapshot = w.member.partitioner.snapshot();
        let load = snapshot.load.clone().expect("a load once ACQUIRED");
        let held: u64 = snapshot.items.iter().map(|item| weight_of(&expected, item)).sum();
        assert_eq!(load.capacity, capacity, "{}", snapshot.member);
        assert_eq!(load.dimensions.len(), 1, "{load:?}");
        assert_eq!(load.dimensions[0].assigned, held, "{}: the reported load is what it holds", snapshot.member);
        let ideal = total as f64 * f64::from(capacity) / total_capacity as f64;
        assert!((load.dimensions[0].ideal - ideal).abs() < 1e-6, "{load:?} ideal {ideal}");
        let limit = capacity_limit(total, capacity, total_capacity, BOUND);
        assert!(held <= limit && !load.over_capacity, "{}: {held} > {limit} ({load})", snapshot.member);
    }
    expected
}

fn ownership(workers: &[&Worker]) -> BTreeMap<Item, (String, FencingToken)> {
    common::members::owners_of(workers.iter().map(|w| &w.member.partitioner))
}

async fn capacities_and_a_weight_change(rebalance: Rebalance) {
    let ctx = Ctx::new().await;
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing((0..60).map(Item::from)).await.expect("create");
    admin.set_weights([(0, Weight::new(8)), (1, Weight::new(8))]).await.expect("weights");
    let capacities = [1, 2, 3];
    let a = weighted_member(&ctx, "a", 1, rebalance).await;
    let b = weighted_member(&ctx, "b", 2, rebalance).await;
    let c = weighted_member(&ctx, "c", 3, rebalance).await;
    let workers = [&a, &b, &c];
    let first = wait_weighted_cover(&ctx, &workers, &capacities, &admin).await;
    assert_eq!(weight_of(&first, &Item::from(0)), 8);
    // The larger member carries more: capacity 3 against capacity 1.
    let held = |w: &Worker| w.member.partitioner.snapshot().load.clone().map_or(0, |l| l.dimensions[0].assigned);
    assert!(held(&c) > 2 * held(&a), "{} vs {}", held(&c), held(&a));

    // One item becomes heavy at run time: every member follows the new version, within its bound again. Under
    // incremental rebalancing, items that keep their owner keep their lock node.
    let tokens = ownership(&workers);
    let changed = admin.set_weights([(2, Weight::new(12))]).await.expect("reweigh");
    assert_eq!(changed.version, first.version + 1);
    let second = wait_weighted_cover(&ctx, &workers, &capacities, &admin).await;
    assert_eq!(weight_of(&second, &Item::from(2)), 12);
    if rebalance == Rebalance::Incremental {
        let after = ownership(&workers);
        // Items whose owner is the same member before and after: each must still hold the very lock node it held
        // (the same fencing token), not a new one.
        let same_owner: Vec<&Item> = tokens
            .iter()
            .filter(|(item, (owner, _))| after.get(*item).is_some_and(|(o, _)| o == owner))
            .map(|(i, _)| i)
            .collect();
        let reissued: Vec<String> = same_owner
            .iter()
            .filter(|item| after[**item].1 != tokens[**item].1)
            .map(|item| format!("{item} ({}: {:?} -> {:?})", tokens[*item].0, tokens[*item].1, after[*item].1))
            .collect();
        assert!(
            same_owner.len() * 2 > tokens.len(),
            "only {} of {} items kept their owner",
            same_owner.len(),
            tokens.len()
        );
        assert!(reissued.is_empty(), "items that kept their owner took a new lock node: {reissued:?}");
    }

    // Back to uniform: the loads follow once more.
    admin.reset_weights([0, 1, 2]).await.expect("reset");
    let third = wait_weighted_cover(&ctx, &workers, &capacities, &admin).await;
    assert!(third.weights.is_empty(), "{:?}", third.weights);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_members_divide_by_capacity_and_follow_a_weight_change() {
    capacities_and_a_weight_change(Rebalance::Eager).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn incremental_members_divide_by_capacity_and_follow_a_weight_change() {
    capacities_and_a_weight_change(Rebalance::Incremental).await;
}

/// A kazoo member computes kazoo's stride, not weights: the weighted members say so at once, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kazoo_member_in_a_weighted_party_is_reported() {
    let ctx = Ctx::new().await;
    let tb = Duration::from_millis(500);
    let items = items_of(&[0, 1, 2, 3, 4, 5]);
    let kazoo = KazooWorker::start(&ctx, PATH, "kazoo", &items, tb).await;
    let weighted = ctx
        .member_with("weighted", items.clone(), |b| {
            b.time_boundary(tb).partition_func(WeightedRendezvous::default()).capacity(2)
        })
        .await;
    let seen = wait_snapshot(&weighted.partitioner, "a disagreement with the kazoo member", timing(tb * 6), |s| {
        s.disagreements.iter().any(|d| d.kind == DisagreementKind::Unannounced && d.member.starts_with("kazoo"))
    })
    .await;
    let d = &seen.disagreements[0];
    assert!(d.to_string().contains(&d.member) && d.theirs.contains("kazoo"), "{d}");
    assert!(d.ours.contains(" cap=2"), "our announcement carries our capacity: {}", d.ours);
    kazoo.stop().await;
    wait_snapshot(&weighted.partitioner, "no disagreement once kazoo left", timing(Duration::from_secs(10)), |s| {
        s.disagreements.is_empty()
    })
    .await;
}

/// Weights change atomically: a bad change changes nothing; a removed item loses its weight; replaced tables go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn weights_change_atomically_and_bad_input_is_refused() {
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let admin = SharedSet::new(client.clone(), PATH).expect("handle");
    assert!(matches!(admin.set_weights([(1, Weight::new(2))]).await, Err(Error::SharedSetMissing { .. })));
    let created = admin.create_if_missing((0..3000).map(Item::from)).await.expect("create").0;
    // An item not in the set: refused, nothing changed (the version stays).
    let refused = admin.set_weights([(1, Weight::new(2)), (5000, Weight::new(3))]).await;
    assert!(matches!(&refused, Err(Error::InvalidItem { item, .. }) if item == "5000"), "{refused:?}");
    assert_eq!(admin.read().await.expect("read").version, created.version);
    assert!(matches!("-3".parse::<Weight>(), Err(InputError::InvalidWeight { .. })));
    let built = SetPartitioner::builder(client.clone(), PATH, Vec::<Item>::new()).shared_set(true).capacity(0);
    assert!(matches!(built.build().await, Err(Error::InvalidCapacity { capacity: 0, .. })));

    // Every item weighted at once: a table of several chunks, read back whole.
    let all: Vec<(Item, Weight)> = (0..3000).map(|i| (Item::from(i), Weight::new(i as u64 % 7 + 1))).collect();
    let written = admin.set_weights(all.clone()).await.expect("weigh all");
    let read = admin.read().await.expect("read");
    assert_eq!(read.version, written.version);
    assert_eq!(read.weights, all.into_iter().collect::<BTreeMap<_, _>>());
    let (index, chunks) = weight_nodes(&ctx).await;
    assert!(index.len() == 1 && chunks.len() >= 2, "one table of a few chunks: {index:?} {chunks:?}");
    let two = Weight::named([("cpu", 2), ("bytes", 512)]).expect("weight");
    admin.set_weights([(7, two.clone())]).await.expect("two dimensions");
    assert_eq!(admin.read().await.expect("read").weights.get(&Item::from(7)), Some(&two));
    // A new table, which wrote one chunk (item 7's) and shares the others; the replaced index and chunk are gone.
    let (next_index, next_chunks) = weight_nodes(&ctx).await;
    assert!(next_index.len() == 1 && next_index != index, "{next_index:?}");
    assert_eq!(next_chunks.len(), chunks.len(), "{next_chunks:?}");
    let written: Vec<&String> = next_chunks.iter().filter(|c| !chunks.contains(c)).collect();
    assert!(written.len() == 1 && written[0].starts_with(&next_index[0]), "{written:?}");

    // A removed item loses its weight; added back, it weighs 1.
    admin.remove([7]).await.expect("remove");
    let re_added = admin.add([7]).await.expect("add back");
    assert!(!re_added.weights.contains_key(&Item::from(7)));
    assert!(!admin.read().await.expect("read").weights.contains_key(&Item::from(7)));
    assert_eq!(admin.read().await.expect("read").weights.len(), 2999);
    // Only the table in force is left: its index, and the chunks it names.
    let (index, chunks) = weight_nodes(&ctx).await;
    assert_eq!(index.len(), 1, "{index:?}");
    let (data, _) = ctx.observer.get_data(&format!("{PATH}/item-weights/{}", index[0])).await.expect("the index");
    let named: Vec<String> = String::from_utf8(data).expect("text").lines().skip(1).map(str::to_owned).collect();
    assert_eq!(named.len(), chunks.len());
    assert!(named.iter().all(|name| chunks.contains(name)), "{named:?} {chunks:?}");
}

/// The nodes under `item-weights`: the tables' indexes (named by their tag) and the chunks (`<tag>-<k>`), sorted.
async fn weight_nodes(ctx: &Ctx) -> (Vec<String>, Vec<String>) {
    let mut nodes = ctx.observer.list_children(&format!("{PATH}/item-weights")).await.expect("tables");
    nodes.sort();
    nodes.into_iter().partition(|name| !name.contains('-'))
}

/// An admin's updates of a large weighted set cost time in proportion to the set, not to its square: on a
/// current-thread runtime (this test's) the work between two requests starves the admin's own session, so an update
/// that compared every weighted item with every item of the new set (2.5 billion comparisons at this size, minutes in
/// a debug build) lost the connection, then the session. The session must stay connected through every update.
#[tokio::test]
async fn a_large_weighted_sets_updates_keep_the_admins_session_connected() {
    const N: i64 = 50_000;
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let mut states = client.state_watcher();
    // Any change of the session's state (a lost connection first) ends this task.
    let watch = tokio::spawn(async move { states.changed().await });
    let set = SharedSet::new(client, PATH).expect("handle");
    let ints = |range: std::ops::Range<i64>| range.map(Item::from).collect::<Vec<_>>();
    set.create_if_missing(ints(0..N)).await.expect("create the set");
    set.set_weights((0..N).map(|i| (i, Weight::new(i as u64 % 5 + 1)))).await.expect("weigh every item");
    // when: one item added (one request), then half the set replaced (a staged update applied in chunks)
    let added = set.add([Item::from(N)]).await.expect("add one item");
    assert_eq!(added.weights.len(), N as usize, "the weights stay with their items");
    let replaced = set.replace(ints(N / 2..N / 2 + N)).await.expect("replace half the set");
    // then: the set is what was asked, the kept items keep their weights, and the session never left SyncConnected
    assert_eq!(replaced.items, ints(N / 2..N / 2 + N));
    assert_eq!(replaced.weights.len(), (N / 2) as usize, "the removed items' weights went with them");
    assert_eq!(set.read().await.expect("read").items, replaced.items);
    assert!(!watch.is_finished(), "the admin's session changed state: {:?}", watch.await);
    watch.abort();
}
