//! The sticky weighted placement on a real ZooKeeper (`WeightedRendezvous::sticky`): the party's first member records
//! the assignment in force under `<path>/placement`, every member computes the next one from it, so a join moves
//! items to the joiner only, a leave moves the leaver's items only, and a weight change moves little besides the
//! item; under both rebalance modes, with members of several capacities.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::members::{AbortOnDrop, Member, assert_disjoint_cover, auto_release, build_member};
use common::{Ctx, Proxy, connect, expire, timing, wait_until};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Error, Item, PartitionState, Rebalance, SharedSet,
    describe::{DescribeOptions, describe_with},
    weighted::{Weight, WeightedRendezvous},
};

const PATH: &str = "/partitioner";
const ITEMS: i64 = 400;

struct Worker {
    member: Member,
    _loop: AbortOnDrop,
}

async fn sticky_member(ctx: &Ctx, name: &str, capacity: u32, rebalance: Rebalance) -> Worker {
    sticky_member_on(ctx.client().await, name, capacity, rebalance).await
}

/// A sticky member on `client`'s session (one through a proxy the test can cut, say).
async fn sticky_member_on(client: Client, name: &str, capacity: u32, rebalance: Rebalance) -> Worker {
    let member = build_member(client, name, &[], |b| {
        b.shared_set(true)
            .rebalance(rebalance)
            .partition_func(WeightedRendezvous::default().sticky())
            .capacity(capacity)
            .time_boundary(Duration::from_millis(400))
    })
    .await;
    let worker_loop = auto_release(&member.partitioner);
    Worker { member, _loop: worker_loop }
}

/// Each item's owner (member name), once every worker is ACQUIRED over the same party of `workers` at the set's
/// current version, the claims a disjoint cover, and the record names that assignment (its digest line checked by
/// the crate; here: it exists and is written for this party).
async fn settled(ctx: &Ctx, workers: &[&Worker], set: &SharedSet) -> BTreeMap<Item, String> {
    let expected = set.read().await.expect("read the set");
    wait_until(
        "every member ACQUIRED over the party at the set's version",
        timing(Duration::from_secs(30)),
        || async {
            workers.iter().all(|w| {
                let s = w.member.partitioner.snapshot();
                s.state == PartitionState::Acquired
                    && s.set_version == Some(expected.version)
                    && s.members.len() == workers.len()
            })
        },
    )
    .await;
    let members: Vec<&Member> = workers.iter().map(|w| &w.member).collect();
    assert_disjoint_cover(&ctx.observer, PATH, &members, &expected.items).await;
    // The first member records what everyone holds once it holds its share.
    wait_until("the placement record names the assignment in force", timing(Duration::from_secs(10)), || async {
        record_owners(ctx).await == owners(workers)
    })
    .await;
    owners(workers)
}

fn owners(workers: &[&Worker]) -> BTreeMap<Item, String> {
    let mut owners = BTreeMap::new();
    for w in workers {
        let snapshot = w.member.partitioner.snapshot();
        for item in snapshot.items.iter() {
            owners.insert(item.clone(), snapshot.member.to_string());
        }
    }
    owners
}

/// The assignment the record in ZooKeeper says, read with the observer's own session: the names, the base and the
/// log, applied in order (the format in `crates/proto/src/placement/record.rs`). Empty while there is no record (or the node is still
/// empty, before its first index), or while it names a chunk that does not exist.
async fn record_owners(ctx: &Ctx) -> BTreeMap<Item, String> {
    let node = format!("{PATH}/placement");
    let Ok((index, _)) = ctx.observer.get_data(&node).await else { return BTreeMap::new() };
    let index = String::from_utf8(index).expect("utf-8 index");
    // A first write creates the node empty, then the chunks, then sets the index.
    if index.is_empty() {
        return BTreeMap::new();
    }
    let mut lines = index.lines();
    assert_eq!(lines.next(), Some("zk-partitioner placement v2"), "{index}");
    let chunks = |key: &str, line: Option<&str>| -> Vec<String> {
        let line = line.unwrap_or_default();
        let rest = line.strip_prefix(key).unwrap_or_else(|| panic!("{key} in {index}"));
        rest.split_whitespace().map(str::to_owned).collect()
    };
    let (_inputs, _digest, _items) = (lines.next(), lines.next(), lines.next());
    let (names, base, log) = (chunks("names", lines.next()), chunks("base", lines.next()), chunks("log", lines.next()));
    let text = |name: String| {
        let node = format!("{node}/{name}");
        let observer = ctx.observer.clone();
        async move { observer.get_data(&node).await.ok().map(|(data, _)| String::from_utf8(data).unwrap()) }
    };
    let mut members = Vec::new();
    for name in names {
        let Some(text) = text(name).await else { return BTreeMap::new() };
        members.extend(text.lines().map(str::to_owned));
    }
    let mut owners = BTreeMap::new();
    for name in base.into_iter().chain(log) {
        let Some(text) = text(name).await else { return BTreeMap::new() };
        for line in text.lines() {
            let (item, owner) = line.split_once('\t').expect("a tab");
            let item = Item::from(item.parse::<i64>().expect("an integer item"));
            match owner {
                "-" => drop(owners.remove(&item)),
                owner => drop(owners.insert(item, members[owner.parse::<usize>().expect("an index")].clone())),
            }
        }
    }
    owners
}

/// An operator's view of a settled party (`describe`, which `zkp inspect --partition sticky` prints): with the sticky
/// function, the shares come from the record, written for the party and set as read, and nothing is held outside its
/// share; with the greedy (what `--partition weighted` gives), the shares are not the party's.
async fn described_as_held(ctx: &Ctx) {
    let sticky = WeightedRendezvous::default().sticky();
    let options = DescribeOptions::new().shared_set(true).partition_func(&sticky);
    let view = describe_with(&ctx.observer, PATH, options).await.expect("describe");
    assert_eq!(view.outside_share, Some(Vec::new()));
    let placement = view.placement.expect("the record");
    assert!(placement.current, "the record is not for the party as read (the digests differ?)");
    assert_eq!(placement.items, ITEMS as usize);
    for member in &view.members {
        assert_eq!(member.load, member.held, "{}: its share's load is not what it holds", member.name);
    }
    let greedy = WeightedRendezvous::default();
    let options = DescribeOptions::new().shared_set(true).partition_func(&greedy);
    let view = describe_with(&ctx.observer, PATH, options).await.expect("describe");
    assert!(view.outside_share.is_some_and(|outside| !outside.is_empty()), "the greedy's shares are the party's");
    assert_eq!(view.placement, None);
}

/// Between the assignments `before` and `after` a join, items moved, and only to `joiner`.
fn only_the_joiner_gained(before: &BTreeMap<Item, String>, after: &BTreeMap<Item, String>, joiner: &Worker) {
    let joiner = joiner.member.partitioner.snapshot().member.to_string();
    let gained = moved(before, after);
    assert!(!gained.is_empty(), "the joiner took nothing");
    assert!(gained.iter().all(|(_, _, to)| *to == joiner), "items moved elsewhere than to the joiner: {gained:?}");
}

fn moved(before: &BTreeMap<Item, String>, after: &BTreeMap<Item, String>) -> Vec<(Item, String, String)> {
    before
        .iter()
        .filter_map(|(item, was)| {
            let now = after.get(item)?;
            (now != was).then(|| (item.clone(), was.clone(), now.clone()))
        })
        .collect()
}

async fn join_weight_change_and_leave(rebalance: Rebalance) {
    common::init_tracing();
    let ctx = Ctx::new().await;
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing((0..ITEMS).map(Item::from)).await.expect("create");
    admin.set_weights([(0, Weight::new(5)), (1, Weight::new(3))]).await.expect("weights");
    let a = sticky_member(&ctx, "a", 1, rebalance).await;
    let b = sticky_member(&ctx, "b", 2, rebalance).await;
    let c = sticky_member(&ctx, "c", 2, rebalance).await;
    let first = settled(&ctx, &[&a, &b, &c], &admin).await;

    // A member joins: only the joiner gains.
    let d = sticky_member(&ctx, "d", 1, rebalance).await;
    let joined = settled(&ctx, &[&a, &b, &c, &d], &admin).await;
    only_the_joiner_gained(&first, &joined, &d);
    described_as_held(&ctx).await;

    // One item's weight triples: little moves besides that item (the rule sheds it or a few of its owner's).
    admin.set_weights([(7, Weight::new(3))]).await.expect("reweigh");
    let reweighed = settled(&ctx, &[&a, &b, &c, &d], &admin).await;
    let shifted = moved(&joined, &reweighed);
    assert!(shifted.len() <= 3, "a weight change moved {} items: {shifted:?}", shifted.len());

    // A member leaves: only its items move.
    let leaver = b.member.partitioner.snapshot().member.to_string();
    b.member.partitioner.finish().await;
    drop(b);
    let left = settled(&ctx, &[&a, &c, &d], &admin).await;
    let lost = moved(&reweighed, &left);
    assert!(lost.iter().all(|(_, from, _)| *from == leaver), "items of members that stayed moved: {lost:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_members_keep_the_placement_through_a_join_a_weight_change_and_a_leave() {
    join_weight_change_and_leave(Rebalance::Eager).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn incremental_members_keep_the_placement_through_a_join_a_weight_change_and_a_leave() {
    join_weight_change_and_leave(Rebalance::Incremental).await;
}

/// A chunk of the record deleted by hand: the first member, which has the chunk cached, writes the next change as a
/// whole new record instead of appending to the broken one (whose missing chunk a joiner could never read), and a
/// joiner then reads it and converges with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_chunk_deleted_by_hand_is_replaced_not_named_again() {
    common::init_tracing();
    let ctx = Ctx::new().await;
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing((0..ITEMS).map(Item::from)).await.expect("create");
    let a = sticky_member(&ctx, "a", 1, Rebalance::Incremental).await;
    let b = sticky_member(&ctx, "b", 2, Rebalance::Incremental).await;
    settled(&ctx, &[&a, &b], &admin).await;
    let node = format!("{PATH}/placement");
    let (index, _) = ctx.observer.get_data(&node).await.expect("the record");
    let index = String::from_utf8(index).expect("utf-8");
    let base = index.lines().find_map(|line| line.strip_prefix("base ")).expect("a base line");
    let victim = base.split_whitespace().next().expect("a base chunk").to_owned();
    ctx.observer.delete(&format!("{node}/{victim}"), None).await.expect("delete a chunk by hand");

    // A small change (appended to the log, were the record whole).
    admin.set_weights([(5, Weight::new(3))]).await.expect("reweigh");
    settled(&ctx, &[&a, &b], &admin).await;
    let (index, _) = ctx.observer.get_data(&node).await.expect("the record");
    assert!(!String::from_utf8(index).expect("utf-8").contains(&victim), "the deleted chunk is still named");
    let c = sticky_member(&ctx, "c", 1, Rebalance::Incremental).await;
    settled(&ctx, &[&a, &b, &c], &admin).await;
    let (index, _) = ctx.observer.get_data(&node).await.expect("the record");
    assert!(!String::from_utf8(index).expect("utf-8").contains(&victim), "the deleted chunk is still named");
}

/// The party's first member, the one that writes the record, loses its session: the members left move only its
/// items, the next first member records that assignment, and a member joining after takes items from the others
/// only. Under both rebalance modes.
async fn the_writer_expires(rebalance: Rebalance) {
    common::init_tracing();
    let ctx = Ctx::new().await;
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing((0..ITEMS).map(Item::from)).await.expect("create");
    admin.set_weights([(0, Weight::new(5)), (1, Weight::new(3))]).await.expect("weights");
    let proxy = Proxy::start(ctx.addr).await;
    let client = connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), Duration::from_secs(2)).await;
    // `a` sorts first among the members' names: the party's first member, the record's writer.
    let a = sticky_member_on(client, "a", 2, rebalance).await;
    let b = sticky_member(&ctx, "b", 2, rebalance).await;
    let c = sticky_member(&ctx, "c", 1, rebalance).await;
    let before = settled(&ctx, &[&a, &b, &c], &admin).await;
    let writer = a.member.partitioner.snapshot().member.to_string();
    assert!(before.values().any(|owner| *owner == writer), "the writer holds nothing");

    expire(&a.member.client, &proxy).await;
    let failed = a.member.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    // `settled` waits for the record to name what b and c hold: written by b, the first member now.
    let after = settled(&ctx, &[&b, &c], &admin).await;
    let moved_items = moved(&before, &after);
    assert!(!moved_items.is_empty(), "the writer's items went nowhere");
    assert!(
        moved_items.iter().all(|(_, from, _)| *from == writer),
        "items of members that stayed moved: {moved_items:?}"
    );
    drop(a);

    // A member joining after reads the record the new writer wrote: only it gains.
    let d = sticky_member(&ctx, "d", 1, rebalance).await;
    let joined = settled(&ctx, &[&b, &c, &d], &admin).await;
    only_the_joiner_gained(&after, &joined, &d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_members_keep_the_placement_when_the_writer_expires() {
    the_writer_expires(Rebalance::Eager).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn incremental_members_keep_the_placement_when_the_writer_expires() {
    the_writer_expires(Rebalance::Incremental).await;
}

/// A sticky rule that moves every item at every call from a previous assignment (to the next member): the protocol
/// must not depend on the rule being a fixed point, since it hands a record written for its very inputs out as it is.
struct Rotating;

impl zk_partitioner::partition::PartitionFn for Rotating {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let at = members.iter().position(|m| m == me).unwrap_or(usize::MAX);
        items.iter().enumerate().filter(|(i, _)| i % members.len() == at).map(|(_, item)| item.clone()).collect()
    }
    fn keeps_placement(&self) -> bool {
        true
    }
    fn placement(&self, input: &zk_partitioner::weighted::Weighted<'_>) -> Option<Vec<usize>> {
        let m = input.members.len();
        let fresh = |i: usize| i % m;
        Some(match input.previous {
            Some(previous) => previous.iter().enumerate().map(|(i, p)| p.map_or(fresh(i), |o| (o + 1) % m)).collect(),
            None => (0..input.items.len()).map(fresh).collect(),
        })
    }
}

async fn rotating_member(ctx: &Ctx, name: &str) -> Worker {
    let member = build_member(ctx.client().await, name, &[], |b| {
        b.shared_set(true)
            .static_membership(true)
            .rebalance(Rebalance::Incremental)
            .partition_func(Rotating)
            .time_boundary(Duration::from_millis(400))
    })
    .await;
    let worker_loop = auto_release(&member.partitioner);
    Worker { member, _loop: worker_loop }
}

/// The scenario: the party records its placement; a version that moves nothing lands (a close); then a
/// member decides again on the same items (a static member's restart, which is no party change). It must hand out the
/// record as the others keep it. Before, the record's inputs named the set's version: the restarted member computed
/// again from the record (here: every item to the next member), held another assignment than the others, and waited
/// for their items for good, with nobody reporting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_moves_nothing_leaves_a_restarted_member_on_the_recorded_placement() {
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
    set.create_if_missing((0..9).map(Item::from)).await.expect("create");
    let s0 = rotating_member(&ctx, "s0").await;
    let s1 = rotating_member(&ctx, "s1").await;
    let s2 = rotating_member(&ctx, "s2").await;
    let before = settled(&ctx, &[&s0, &s1, &s2], &set).await;

    let closed = set.close([Item::from(0)]).await.expect("close");
    wait_until("every member follows the version of the close", timing(Duration::from_secs(10)), || async {
        [&s0, &s1, &s2].iter().all(|w| w.member.partitioner.snapshot().set_version == Some(closed.version))
    })
    .await;
    s1.member.partitioner.finish().await;
    drop(s1);
    let s1 = rotating_member(&ctx, "s1").await;

    let after = settled(&ctx, &[&s0, &s1, &s2], &set).await;
    assert_eq!(after, before, "the restarted member holds what the record says, as everyone else");
    for w in [&s0, &s1, &s2] {
        assert!(w.member.partitioner.snapshot().disagreements.is_empty());
    }
}
