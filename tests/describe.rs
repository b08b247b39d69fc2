//! `describe()` on a real ZooKeeper (`zkp inspect` prints it: crates/cli/tests/inspect.rs): Rust and kazoo members,
//! orphaned lock nodes and contended items, compared with the lock nodes as an independent reader sees them; a weighted
//! party's capacities and loads, compared with what its members report.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::counting::{CountingProxy, op};
use common::kazoo::KazooWorker;
use common::members::{AbortOnDrop, Member, TIME_BOUNDARY, auto_release, ints};
use common::{Ctx, timing, wait_for, wait_until};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Error, Item, PartitionState, SharedSet, describe,
    describe::{DescribeOptions, Description, describe_with},
    partition::KazooStride,
    weighted::{Weight, WeightedRendezvous},
};
use zk_partitioner_testing::lock_contenders;

const PATH: &str = "/partitioner";

/// One contender as read by hand: node name, session, creation zxid.
type RawNode = (String, i64, i64);

/// Every lock directory under `PATH` and its kazoo contenders in sequence order, read node by node (no `multi`):
/// the reference `describe` is compared with.
async fn raw_locks(observer: &Client) -> BTreeMap<String, Vec<RawNode>> {
    let locks = format!("{PATH}/locks");
    let mut all = BTreeMap::new();
    for dir in observer.list_children(&locks).await.expect("list the lock directories") {
        let dir_path = format!("{locks}/{dir}");
        let children = observer.list_children(&dir_path).await.expect("list a lock directory");
        let mut nodes = Vec::new();
        for child in lock_contenders(&children) {
            if let Ok(Some(stat)) = observer.check_stat(&format!("{dir_path}/{child}")).await {
                nodes.push((child.to_string(), stat.ephemeral_owner, stat.czxid));
            }
        }
        all.insert(dir, nodes);
    }
    all
}

/// Whether `description` says exactly what the lock nodes say: each directory's owner and queue, node by node.
fn matches_lock_nodes(description: &Description, raw: &BTreeMap<String, Vec<RawNode>>) -> Result<(), String> {
    let described: BTreeMap<String, Vec<RawNode>> = description
        .items
        .iter()
        .filter(|item| item.has_lock_dir)
        .map(|item| {
            let nodes =
                item.owner.iter().chain(&item.waiting).map(|c| (c.node.clone(), c.session, c.token.get())).collect();
            (item.item.clone(), nodes)
        })
        .collect();
    if &described == raw { Ok(()) } else { Err(format!("describe says {described:?}, the lock nodes {raw:?}")) }
}

/// Describes until the description matches the lock nodes read right after it and satisfies `condition` (members
/// move: kazoo re-creates a waiting contender every max_reaction_time, so a pair of reads may straddle a change).
async fn described_when(
    ctx: &Ctx,
    what: &str,
    options: impl Fn() -> DescribeOptions<'static>,
    condition: impl Fn(&Description) -> Result<(), String>,
) -> Description {
    wait_for(what, timing(Duration::from_secs(30)), || async {
        let description = describe_with(&ctx.observer, PATH, options()).await.map_err(|err| err.to_string())?;
        condition(&description)?;
        matches_lock_nodes(&description, &raw_locks(&ctx.observer).await)?;
        Ok(description)
    })
    .await
}

fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

#[tokio::test]
async fn describe_matches_the_lock_nodes_with_rust_and_kazoo_members() {
    // given: a session without a party node holds item 11 before anyone joins (an orphan that blocks the item)
    let ctx = Ctx::new().await;
    let items: &'static [Item] = leak(ints(12));
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &[Item::from(11)]).await;
    // and two Rust members and a kazoo member divide the items (kazoo's stride over k1 < r1-.. < r2-..: r2 gets 11)
    let r1 = ctx.member("r1", items.to_vec()).await;
    let r2 = ctx.member("r2", items.to_vec()).await;
    let _workers = (auto_release(&r1.partitioner), auto_release(&r2.partitioner));
    let k1 = KazooWorker::start(&ctx, PATH, "k1", items, TIME_BOUNDARY).await;
    let member_sessions = |d: &Description| d.members.iter().map(|m| m.session).collect::<Vec<_>>();

    // when: the party is stable, with r2 queued behind the orphan on item 11
    let d = described_when(
        &ctx,
        "every item owned, r2 waiting behind the orphan on item 11",
        || DescribeOptions::new().items(items),
        |d| {
            let sessions = member_sessions(d);
            let settled = d.members.len() == 3
                && d.items.len() == 12
                && d.items.iter().take(11).all(|i| i.owner.as_ref().is_some_and(|o| sessions.contains(&o.session)))
                && d.item("11").is_some_and(|i| i.waiting.len() == 1)
                && d.contended().count() == 1;
            if settled { Ok(()) } else { Err(format!("{d:#?}")) }
        },
    )
    .await;

    // then: the members are the three processes, each with its identifier and session
    let kazoo = k1.view();
    let r1_name = r1.partitioner.snapshot().member.to_string();
    let r2_name = r2.partitioner.snapshot().member.to_string();
    let members: Vec<(&str, &str, i64)> =
        d.members.iter().map(|m| (m.name.as_str(), m.identifier.as_str(), m.session)).collect();
    assert_eq!(
        members,
        [("k1", "k1", kazoo.session), (&*r1_name, "r1", r1.session()), (&*r2_name, "r2", r2.session())]
    );
    let counts: Vec<(usize, usize)> = d.members.iter().map(|m| (m.items, m.waiting)).collect();
    assert_eq!(counts, [(4, 0), (4, 0), (3, 1)]);
    // and item 11 is held by the orphan, with r2 waiting behind it
    let eleven = d.item("11").unwrap();
    let owner = eleven.owner.as_ref().unwrap();
    assert_eq!((owner.session, owner.orphan), (blocker.session_id().0, true));
    assert_eq!((eleven.waiting[0].session, eleven.waiting[0].member.as_str()), (r2.session(), &*r2_name));
    assert_eq!(d.orphans.len(), 1);
    assert_eq!((d.orphans[0].item.as_str(), d.orphans[0].holds), ("11", true));
    assert!(d.unowned.is_empty());
    assert_eq!(
        d.owner_counts,
        BTreeMap::from([
            (blocker.session_id().0.to_string(), 1), // an orphan whose node carries no name
            ("k1".into(), 4),
            (r1_name.clone(), 4),
            (r2_name.clone(), 3)
        ])
    );
    // and every owner's token is its lock node's creation zxid (matches_lock_nodes compared them node by node), and
    // every member's contender is named after its party node, kazoo's too (kazoo writes no data into lock nodes)
    assert!(d.items.iter().all(|i| i.owner.as_ref().is_some_and(|o| o.token.get() > 0)));
    for info in &d.items {
        for contender in info.owner.iter().chain(&info.waiting).filter(|c| !c.orphan) {
            let member = d.members.iter().find(|m| m.session == contender.session).expect("a member");
            assert_eq!(contender.member, member.name);
        }
    }

    // when: the blocker lets go, then a ghost session queues behind item 0's owner and holds a directory of its own
    ctx.release_locks(&blocker, held).await;
    let ghost = ctx.client().await;
    common::orphan_contender(&ghost, PATH, "extra", "ghost").await;
    let ghost_waiting = common::orphan_contender(&ghost, PATH, "0", "ghost").await;
    let expected: &'static [Item] = leak(ints(13)); // 12 never had a lock directory
    let d = described_when(
        &ctx,
        "every item owned by a member, the ghost waiting on 0 and holding 'extra'",
        || DescribeOptions::new().items(expected),
        |d| {
            let sessions = member_sessions(d);
            let settled =
                d.items.iter().take(12).all(|i| i.owner.as_ref().is_some_and(|o| sessions.contains(&o.session)))
                    && d.members.iter().all(|m| m.waiting == 0)
                    && d.orphans.len() == 2;
            if settled { Ok(()) } else { Err(format!("{d:#?}")) }
        },
    )
    .await;

    // then: the unowned item is the expected one without a directory; the orphans are the ghost's two nodes
    assert_eq!(d.unowned, ["12"]);
    assert!(!d.item("12").unwrap().has_lock_dir);
    let names: Vec<&str> = d.items.iter().map(|i| i.item.as_str()).collect();
    assert_eq!(names.last(), Some(&"extra"), "integers first, numerically, then strings: {names:?}");
    let orphans: Vec<(&str, bool, &str)> =
        d.orphans.iter().map(|o| (o.item.as_str(), o.holds, o.contender.member.as_str())).collect();
    assert_eq!(orphans, [("0", false, "ghost"), ("extra", true, "ghost")]);
    assert!(ghost_waiting.ends_with(&d.item("0").unwrap().waiting[0].node));
    assert_eq!(d.contended().map(|i| i.item.as_str()).collect::<Vec<_>>(), ["0"]);
    assert_eq!(d.owner_counts, BTreeMap::from([("ghost".into(), 1), ("k1".into(), 4), (r1_name, 4), (r2_name, 4)]));
    assert_eq!(d.imbalance(), Some(1.0));
    assert_eq!(d.outside_share, None);

    // and with the members' function over their items, nobody holds anything outside its share
    let d = describe_with(&ctx.observer, PATH, DescribeOptions::new().items(items).partition_func(&KazooStride))
        .await
        .unwrap();
    assert_eq!(d.outside_share, Some(Vec::new()));
    // while a function that gives everything to k1 says which items the others hold
    let k1_takes_all =
        |me: &str, _: &[String], items: &[Item]| -> Vec<Item> { if me == "k1" { items.to_vec() } else { Vec::new() } };
    let d = describe_with(&ctx.observer, PATH, DescribeOptions::new().items(items).partition_func(&k1_takes_all))
        .await
        .unwrap();
    let outside = d.outside_share.unwrap();
    assert_eq!(outside.len(), 8, "{outside:?}");
    assert!(outside.iter().all(|o| o.holder != "k1" && o.share_of.as_deref() == Some("k1")));
    drop(k1);
}

/// A member of a weighted party on the shared set, releasing when told.
async fn weighted_member(ctx: &Ctx, identifier: &str, capacity: u32) -> (Member, AbortOnDrop) {
    let member = ctx
        .member_with(identifier, Vec::new(), |b| {
            b.shared_set(true)
                .partition_func(WeightedRendezvous::default())
                .capacity(capacity)
                .time_boundary(Duration::from_millis(500))
        })
        .await;
    let release = auto_release(&member.partitioner);
    (member, release)
}

/// Waits until `members` are ACQUIRED at the shared set's version, then describes the party (the shared set, the
/// members' function) until it has settled: every item owned, none outside its holder's share, and each member's
/// load the one it reports itself.
async fn weighted_description(ctx: &Ctx, set: &SharedSet, members: &[&Member]) -> Description {
    let version = set.read().await.expect("read the set").version;
    wait_until("every member ACQUIRED at the set's version", timing(Duration::from_secs(20)), || async {
        members.iter().all(|m| {
            let s = m.partitioner.snapshot();
            s.state == PartitionState::Acquired && s.set_version == Some(version) && s.members.len() == members.len()
        })
    })
    .await;
    let function: &'static WeightedRendezvous = leak(WeightedRendezvous::default());
    described_when(
        ctx,
        "settled: no item outside its share, each member's load as it reports it",
        || DescribeOptions::new().shared_set(true).partition_func(function),
        |d| {
            let settled = d.shared_set_version == Some(version)
                && d.unowned.is_empty()
                && d.outside_share.as_ref().is_some_and(Vec::is_empty)
                && members.iter().all(|m| {
                    let s = m.partitioner.snapshot();
                    d.member(&s.member).is_some_and(|info| info.load.as_ref() == s.load.as_deref())
                });
            if settled { Ok(()) } else { Err(format!("{d:#?}")) }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn describe_reports_a_weighted_partys_capacities_and_loads() {
    // given: a shared set of 24 items, two of them heavy, divided by members of capacities 1 and 3
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("a handle on the set");
    set.create_if_missing((0..24).map(Item::from)).await.expect("create the set");
    set.set_weights([(0, Weight::new(6)), (1, Weight::new(4))]).await.expect("weigh");
    let (small, _small_loop) = weighted_member(&ctx, "small", 1).await;
    let (big, _big_loop) = weighted_member(&ctx, "big", 3).await;

    // when: the party has settled
    let d = weighted_description(&ctx, &set, &[&small, &big]).await;

    // then: each member's capacity is the one it announced, and its load is the one it reports (checked while
    // waiting), its ideal share a quarter or three quarters of the 32 in all
    let info = |m: &Member| d.member(&m.partitioner.snapshot().member).expect("a member").clone();
    let (small_info, big_info) = (info(&small), info(&big));
    assert_eq!((small_info.capacity, big_info.capacity), (1, 3));
    for (m, ideal) in [(&small_info, 8.0), (&big_info, 24.0)] {
        let load = m.load.as_ref().expect("a load");
        assert_eq!((load.capacity, load.dimensions.len()), (m.capacity, 1), "{load}");
        assert_eq!((load.dimensions[0].dimension.as_str(), load.dimensions[0].ideal), ("weight", ideal), "{load}");
        assert!(!load.over_capacity, "{load}");
        // and, settled, it holds exactly that
        assert_eq!(m.held.as_ref(), Some(load), "{}", m.name);
    }
    let assigned = |m: &zk_partitioner::describe::MemberInfo| m.load.as_ref().map_or(0, |l| l.dimensions[0].assigned);
    assert_eq!(assigned(&small_info) + assigned(&big_info), 32);
    assert!(assigned(&big_info) > 2 * assigned(&small_info), "{d:#?}");

    // when: a weight changes, in two dimensions
    set.set_weights([(2, Weight::named([("cpu", 5), ("bytes", 100)]).expect("a weight"))]).await.expect("reweigh");
    let d = weighted_description(&ctx, &set, &[&small, &big]).await;
    // then: the loads follow, in every dimension the weights name, still as the members report them
    let load = d.member(&big.partitioner.snapshot().member).and_then(|m| m.load.clone()).expect("a load");
    let dimensions: Vec<&str> = load.dimensions.iter().map(|dim| dim.dimension.as_str()).collect();
    assert_eq!(dimensions, ["bytes", "cpu", "weight"], "{load}");
    assert!(d.members.iter().all(|m| m.held == m.load), "{d:#?}");
    // and a description without the function has no load, but still what each member holds
    let d = describe_with(&ctx.observer, PATH, DescribeOptions::new().shared_set(true)).await.unwrap();
    assert!(d.members.iter().all(|m| m.load.is_none() && m.held.is_some() && m.capacity >= 1), "{d:#?}");
    // and reading the shared set of a path that has none is the set's error
    ctx.observer.create("/no-set", b"", &common::persistent()).await.expect("create /no-set");
    let options = DescribeOptions::new().shared_set(true);
    let missing = describe_with(&ctx.observer, "/no-set", options).await;
    assert!(matches!(&missing, Err(Error::SharedSetMissing { path }) if path == "/no-set/items"), "{missing:?}");
}

#[tokio::test]
async fn a_missing_path_is_a_clear_error() {
    let ctx = Ctx::new().await;
    assert_eq!(describe(&ctx.observer, "/nowhere").await, Err(Error::PathNotFound { path: "/nowhere".into() }));
    assert_eq!(
        describe(&ctx.observer, "/nowhere").await.unwrap_err().to_string(),
        "partition path /nowhere does not exist"
    );
    assert!(matches!(describe(&ctx.observer, "relative").await, Err(Error::InvalidConfig { field: "path", .. })));
    // A path without party or locks yet is an empty partition, not an error.
    ctx.observer.create("/empty", b"", &common::persistent()).await.unwrap();
    let d = describe_with(&ctx.observer, "/empty", DescribeOptions::new().items(&ints(2))).await.unwrap();
    assert!(d.members.is_empty());
    assert_eq!(d.unowned, ["0", "1"]);
    assert_eq!(d.imbalance(), None);
}

/// `describe` of 10,000 items held by 4 members: time and requests (BENCHMARKS.md, "describe"). Run with
/// `cargo test --release --test describe -- --ignored --nocapture describe_10000`.
#[tokio::test]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn describe_10000_items() {
    const ITEMS: usize = 10_000;
    const MEMBERS: usize = 4;
    let ctx = Ctx::new().await;
    // given: 4 sessions with party nodes hold 10,000 lock directories between them, kazoo-style (made with multis)
    let mut holders = Vec::new();
    for m in 0..MEMBERS {
        let client = ctx.client().await;
        client.mkdir(&format!("{PATH}/party"), &common::persistent()).await.unwrap();
        let node = format!("{PATH}/party/{}-m{m}", "ab".repeat(16));
        client.create(&node, format!("m{m}").as_bytes(), &common::ephemeral()).await.unwrap();
        holders.push(client);
    }
    ctx.observer.mkdir(&format!("{PATH}/locks"), &common::persistent()).await.unwrap();
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(500) {
        let mut writer = ctx.observer.new_multi_writer();
        for item in chunk {
            writer.add_create(&format!("{PATH}/locks/{item}"), b"", &common::persistent()).unwrap();
        }
        writer.commit().await.unwrap();
    }
    for (m, client) in holders.iter().enumerate() {
        let mine: Vec<usize> = (m..ITEMS).step_by(MEMBERS).collect();
        for chunk in mine.chunks(500) {
            let mut writer = client.new_multi_writer();
            for item in chunk {
                let prefix = format!("{PATH}/locks/{item}/{}__lock__", "cd".repeat(16));
                writer.add_create(&prefix, format!("m{m}").as_bytes(), &common::ephemeral_sequential()).unwrap();
            }
            writer.commit().await.unwrap();
        }
    }
    // when: an observer behind a counting proxy describes it once, to count the requests
    let proxy = CountingProxy::start(ctx.addr).await;
    let counted = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), Duration::from_secs(6)).await;
    proxy.take();
    describe(&counted, PATH).await.unwrap();
    let ops = proxy.take();
    // and a direct observer (no proxy hop in the timing) describes it ten times
    let observer = ctx.client().await;
    let mut times = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let d = describe(&observer, PATH).await.unwrap();
        times.push(started.elapsed());
        // then: everything is there
        assert_eq!((d.members.len(), d.items.len(), d.unowned.len()), (MEMBERS, ITEMS, 0));
        assert!(d.members.iter().all(|m| m.items == ITEMS / MEMBERS));
    }
    let count = |code: i32| ops.iter().filter(|&&op| op == code).count();
    times.sort();
    println!(
        "describe of {ITEMS} items, {MEMBERS} members: min {:?}, median {:?}, max {:?} over 10 calls; {} requests per \
         call: {} multi reads, {} get_children, {} exists, {} sync",
        times[0],
        times[5],
        times[9],
        ops.len(),
        count(op::MULTI_READ),
        count(op::GET_CHILDREN),
        count(op::EXISTS),
        count(op::SYNC),
    );
    assert_eq!(ops.len(), 45);
    // and how the concurrency bound matters (the default is 8)
    for concurrency in [1, 2, 4, 8, 16] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            describe_with(&observer, PATH, DescribeOptions::new().concurrency(concurrency)).await.unwrap();
            times.push(started.elapsed());
        }
        times.sort();
        println!("concurrency {concurrency:>2}: min {:?}, median {:?}", times[0], times[2]);
    }
}
