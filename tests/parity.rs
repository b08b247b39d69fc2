//! kazoo's partitioner tests (kazoo/tests/test_partitioner.py), ported to real ZooKeeper sessions, one per member,
//! with real expiry and real connection cuts; plus the behaviours kazoo gets wrong or leaves untested.

mod common;

use std::time::Duration;

use common::members::{Member, Recorder, TIME_BOUNDARY, assert_disjoint_cover, ints, items_of, lock_holders};
use common::{Ctx, timing};
use zk_partitioner::{Error, Item, PartitionState, SetPartitioner};

const PATH: &str = "/partitioner";

/// kazoo's `__wait_for_acquire` gives each member 14 s; ours converge in well under a second.
fn acquire_deadline() -> Duration {
    timing(Duration::from_secs(10))
}

#[tokio::test]
async fn party_of_one() {
    // given
    let ctx = Ctx::new().await;
    let member = ctx.member("0", ints(3)).await;
    // when / then
    member.wait_items(&ints(3), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&member], &ints(3)).await;
}

#[tokio::test]
async fn party_of_two_then_one_finishes() {
    // given
    let ctx = Ctx::new().await;
    let (m0, m1) = (ctx.member("0", ints(2)).await, ctx.member("1", ints(2)).await);
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1], &ints(2)).await;
    // when
    m0.partitioner.finish().await;
    // then
    assert_eq!(m0.state(), PartitionState::Failure);
    assert_eq!(m0.partitioner.snapshot().cause, Some(Error::Finished));
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    m1.partitioner.release_set().await.expect("release_set");
    m1.wait_items(&ints(2), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m1], &ints(2)).await;
}

#[tokio::test]
async fn party_expansion() {
    // given
    let ctx = Ctx::new().await;
    let (m0, m1) = (ctx.member("0", ints(3)).await, ctx.member("1", ints(3)).await);
    m0.wait_items(&items_of(&[0, 2]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    let (r0, r1) = (Recorder::start(&m0.partitioner), Recorder::start(&m1.partitioner));
    // when
    let m2 = ctx.member("2", ints(3)).await;
    // then: kazoo's vacuous "state_change_event is set" check, made real
    m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    assert!(r0.states().contains(&PartitionState::Release) && r1.states().contains(&PartitionState::Release));
    assert!(m0.partitioner.items().is_empty(), "items are readable only while ACQUIRED");
    m0.partitioner.release_set().await.unwrap();
    m1.partitioner.release_set().await.unwrap();
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    m2.wait_items(&items_of(&[2]), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1, &m2], &ints(3)).await;
}

#[tokio::test]
async fn more_members_than_items() {
    let ctx = Ctx::new().await;
    let (m0, m1) = (ctx.member("0", ints(1)).await, ctx.member("1", ints(1)).await);
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&[], acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1], &ints(1)).await;
}

#[tokio::test]
async fn session_expiry_fails_and_survivor_takes_over() {
    // given: m0 behind a proxy we can cut, m1 direct
    let ctx = Ctx::new().await;
    let (m0, proxy) = ctx.member_via_proxy("0", ints(2), Duration::from_secs(2)).await;
    let m1 = ctx.member("1", ints(2)).await;
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    // when: the server really expires m0's session
    common::expire(&m0.client, &proxy).await;
    // then
    let failed = m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    assert!(m0.partitioner.items().is_empty());
    // wrong-state calls have documented results
    assert!(matches!(m0.partitioner.release_set().await, Err(Error::SessionLost { .. })));
    assert_eq!(m0.partitioner.wait_for_acquire(Duration::from_secs(1)).await, PartitionState::Failure);
    m0.partitioner.finish().await;
    assert_eq!(m0.state(), PartitionState::Failure);
    // the survivor notices the party change, and takes everything
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(10))).await;
    m1.partitioner.release_set().await.unwrap();
    m1.wait_items(&ints(2), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m1], &ints(2)).await;
}

#[tokio::test]
async fn connection_loss_and_recovery_then_new_member() {
    // given
    let ctx = Ctx::new().await;
    let (m0, proxy) = ctx.member_via_proxy("0", ints(3), Duration::from_secs(4)).await;
    let m1 = ctx.member("1", ints(3)).await;
    m0.wait_items(&items_of(&[0, 2]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    let session = m0.session();
    // when: a cut shorter than the session timeout
    proxy.cut();
    // then: a suspended member stops at once (kazoo: RELEASE)
    m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    proxy.heal();
    m0.partitioner.release_set().await.unwrap();
    m0.wait_items(&items_of(&[0, 2]), acquire_deadline()).await;
    assert_eq!(m0.session(), session, "the session survived the cut");
    assert_eq!(m1.state(), PartitionState::Acquired, "the party did not change for m1");
    // and the party watch still works after the reconnect (kazoo #298)
    let m2 = ctx.member("2", ints(3)).await;
    m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    m0.partitioner.release_set().await.unwrap();
    m1.partitioner.release_set().await.unwrap();
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    m2.wait_items(&items_of(&[2]), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1, &m2], &ints(3)).await;
}

/// kazoo's race test with `SlowLockMock`, made real: a foreign session holds both locks, so member 0 is stuck
/// acquiring when member 1 joins.
#[tokio::test]
async fn new_member_joins_during_lock_acquisition() {
    // given
    let ctx = Ctx::new().await;
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &ints(2)).await;
    let m0 = ctx.member("0", ints(2)).await;
    let r0 = Recorder::start(&m0.partitioner);
    let b = blocker.session_id().0;
    ctx.wait_lock_queue(PATH, 0, &[b, m0.session()]).await; // m0 is queued behind the blocker on both items
    ctx.wait_lock_queue(PATH, 1, &[b, m0.session()]).await;
    // when
    let m1 = ctx.member("1", ints(2)).await;
    // then: m0 gives up item 1 for m1 while both are still blocked
    ctx.wait_lock_queue(PATH, 0, &[b, m0.session()]).await;
    ctx.wait_lock_queue(PATH, 1, &[b, m1.session()]).await;
    ctx.release_locks(&blocker, held).await;
    // then
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1], &ints(2)).await;
    assert!(
        !r0.snapshots().iter().any(|s| s.state == PartitionState::Acquired && s.items.len() == 2),
        "member 0 must never have acquired both items: {:?}",
        r0.states()
    );
}

/// kazoo's "steals the lock" race: member 0 holds item 0 and waits for item 1; member 1 joins and takes item 1 as
/// soon as the foreign holder lets go; member 0 must notice the party change and settle on item 0.
#[tokio::test]
async fn new_member_takes_a_lock_first() {
    // given
    let ctx = Ctx::new().await;
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[1])).await;
    let m0 = ctx.member("0", ints(2)).await;
    let b = blocker.session_id().0;
    ctx.wait_lock_queue(PATH, 1, &[b, m0.session()]).await;
    ctx.wait_lock_queue(PATH, 0, &[m0.session()]).await;
    assert_eq!(m0.state(), PartitionState::Allocating);
    // when
    let m1 = ctx.member("1", ints(2)).await;
    // then: m0 lets go of both and re-partitions; m1 queues for item 1
    ctx.wait_lock_queue(PATH, 1, &[b, m1.session()]).await;
    ctx.release_locks(&blocker, held).await;
    // then
    m1.wait_items(&items_of(&[1]), acquire_deadline()).await;
    m0.wait_items(&items_of(&[0]), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m0, &m1], &ints(2)).await;
}

#[tokio::test]
async fn contended_lock_is_taken_the_moment_its_holder_releases() {
    // given: a foreign holder, and a member queued behind it
    let ctx = Ctx::new().await;
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[0])).await;
    let m0 = ctx.member("0", ints(1)).await;
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, m0.session()]).await;
    // when
    let released = tokio::time::Instant::now();
    ctx.release_locks(&blocker, held).await;
    // then: a watch, not a poll: well under kazoo's max_reaction_time (1 s)
    m0.wait_items(&ints(1), timing(Duration::from_secs(5))).await;
    let took = released.elapsed();
    assert!(took < Duration::from_millis(500), "took {took:?} to take a released lock");
}

#[tokio::test]
async fn crashed_member_items_go_to_survivors() {
    // given: m0's connection goes through a proxy that we cut for good (a dead process: no finish, no close)
    let ctx = Ctx::new().await;
    let (m0, proxy) = ctx.member_via_proxy("0", ints(4), Duration::from_secs(1)).await;
    let m1 = ctx.member("1", ints(4)).await;
    m0.wait_items(&items_of(&[0, 2]), acquire_deadline()).await;
    m1.wait_items(&items_of(&[1, 3]), acquire_deadline()).await;
    // when
    proxy.cut();
    // then: once the server expires m0's session, m1 takes everything
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(10))).await;
    m1.partitioner.release_set().await.unwrap();
    m1.wait_items(&ints(4), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&m1], &ints(4)).await;
    drop(m0);
}

#[tokio::test]
async fn duplicate_identifiers_still_cover_every_item() {
    let ctx = Ctx::new().await;
    let members =
        [ctx.member("same", ints(7)).await, ctx.member("same", ints(7)).await, ctx.member("same", ints(7)).await];
    // The worker loop: whoever is told to release does so, until all hold a share of the same party.
    common::members::settle(&members, acquire_deadline()).await;
    let names: Vec<_> = members.iter().map(|m| m.partitioner.snapshot().member).collect();
    assert!(names.iter().all(|n| n.starts_with("same-")), "{names:?}");
    assert_ne!(names[0], names[1]);
    assert_disjoint_cover(&ctx.observer, PATH, &members.iter().collect::<Vec<_>>(), &ints(7)).await;
}

#[tokio::test]
async fn finish_removes_member_and_lock_nodes() {
    // given
    let ctx = Ctx::new().await;
    let member = ctx.member("0", ints(5)).await;
    member.wait_items(&ints(5), acquire_deadline()).await;
    assert_eq!(ctx.observer.list_children(&format!("{PATH}/party")).await.unwrap().len(), 1);
    // when
    member.partitioner.finish().await;
    // then: nothing of ours is left, but kazoo's persistent layout is
    assert!(ctx.observer.list_children(&format!("{PATH}/party")).await.unwrap().is_empty());
    assert!(lock_holders(&ctx.observer, PATH, &ints(5)).await.is_empty());
    for item in ints(5) {
        assert!(ctx.observer.check_stat(&format!("{PATH}/locks/{item}")).await.unwrap().is_some());
    }
    // finish() is idempotent
    member.partitioner.finish().await;
    assert_eq!(member.partitioner.snapshot().cause, Some(Error::Finished));
}

#[tokio::test]
async fn dropping_the_last_handle_leaves_the_party() {
    let ctx = Ctx::new().await;
    let member = ctx.member("0", ints(3)).await;
    member.wait_items(&ints(3), acquire_deadline()).await;
    let Member { client, partitioner } = member;
    let watcher = partitioner.subscribe();
    drop(partitioner);
    // The task cleans up and stops: the channel closes once it is done.
    let mut watcher = watcher;
    tokio::time::timeout(timing(Duration::from_secs(5)), async { while watcher.changed().await.is_ok() {} })
        .await
        .expect("the partitioner task did not stop");
    assert!(ctx.observer.list_children(&format!("{PATH}/party")).await.unwrap().is_empty());
    assert!(lock_holders(&ctx.observer, PATH, &ints(3)).await.is_empty());
    drop(client);
}

#[tokio::test]
async fn release_set_round_trip() {
    let ctx = Ctx::new().await;
    let member = ctx.member("0", ints(3)).await;
    member.wait_items(&ints(3), acquire_deadline()).await;
    let before = member.partitioner.snapshot().generation;
    member.partitioner.release_set().await.unwrap();
    assert!(member.partitioner.items().is_empty());
    member.wait_items(&ints(3), acquire_deadline()).await;
    assert!(member.partitioner.snapshot().generation >= before + 2);
    assert_disjoint_cover(&ctx.observer, PATH, &[&member], &ints(3)).await;
}

/// A wrapper that forwards a sticky function's answers and placement but not that it keeps one: `build()` refuses it
/// (without the check the party would silently keep no placement record).
struct HalfForwarded(zk_partitioner::weighted::WeightedRendezvous);

impl Default for HalfForwarded {
    fn default() -> Self {
        HalfForwarded(zk_partitioner::weighted::WeightedRendezvous::default().sticky())
    }
}

impl zk_partitioner::partition::PartitionFn for HalfForwarded {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        self.0.partition(me, members, items)
    }
    fn placement(&self, input: &zk_partitioner::weighted::Weighted<'_>) -> Option<Vec<usize>> {
        self.0.placement(input)
    }
}

#[tokio::test]
async fn bad_input_is_rejected_before_anything_is_written() {
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let build = |path: &str, items: Vec<Item>| SetPartitioner::builder(client.clone(), path, items);
    let cases: Vec<(&str, zk_partitioner::Builder)> = vec![
        ("relative path", build("bad", ints(1))),
        ("root path", build("/", ints(1))),
        ("trailing slash", build("/bad/", ints(1))),
        ("empty segment", build("/bad//x", ints(1))),
        ("dot segment", build("/bad/./x", ints(1))),
        ("empty item", build("/bad", vec![Item::from("")])),
        ("item with slash", build("/bad", vec![Item::from("a/b")])),
        ("dot item", build("/bad", vec![Item::from("..")])),
        ("control character", build("/bad", vec![Item::from("a\nb")])),
        ("colliding items", build("/bad", vec![Item::from(1), Item::from("1")])),
        ("mixed kinds", build("/bad", vec![Item::from(1), Item::from("a")])),
        ("empty identifier", build("/bad", ints(1)).identifier("")),
        ("identifier with slash", build("/bad", ints(1)).identifier("a/b")),
        ("zero time_boundary", build("/bad", ints(1)).time_boundary(Duration::ZERO)),
        ("zero max_reaction_time", build("/bad", ints(1)).max_reaction_time(Duration::ZERO)),
        ("absurd time_boundary", build("/bad", ints(1)).time_boundary(Duration::MAX)),
        ("zero max_allocation_time", build("/bad", ints(1)).max_allocation_time(Duration::ZERO)),
        ("half-forwarded partition function", build("/bad", ints(1)).partition_func(HalfForwarded::default())),
    ];
    for (case, builder) in cases {
        match builder.build().await {
            Err(Error::InvalidConfig { .. } | Error::InvalidItem { .. }) => {}
            other => panic!("{case}: expected a configuration error, got {other:?}"),
        }
    }
    assert_eq!(client.check_stat("/bad").await.unwrap(), None, "nothing may be written for bad input");

    // An empty set is allowed: the member acquires nothing.
    let empty = SetPartitioner::builder(client.clone(), PATH, Vec::<Item>::new())
        .time_boundary(TIME_BOUNDARY)
        .build()
        .await
        .unwrap();
    assert_eq!(empty.wait_for_acquire(acquire_deadline()).await, PartitionState::Acquired);
    assert!(empty.items().is_empty());
}

#[tokio::test]
async fn foreign_party_children_are_ignored() {
    // given: someone put a node under party that is not a member node
    let ctx = Ctx::new().await;
    ctx.observer.mkdir(&format!("{PATH}/party"), &common::persistent()).await.unwrap();
    ctx.observer.create(&format!("{PATH}/party/not-a-member"), b"", &common::persistent()).await.unwrap();
    // when
    let member = ctx.member("0", ints(4)).await;
    // then: it is not counted, so no item is left without an owner
    member.wait_items(&ints(4), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&member], &ints(4)).await;
}

#[tokio::test]
async fn wait_for_acquire_times_out_in_allocating() {
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let partitioner =
        SetPartitioner::builder(client, PATH, ints(1)).time_boundary(Duration::from_secs(3600)).build().await.unwrap();
    assert_eq!(partitioner.wait_for_acquire(Duration::from_millis(200)).await, PartitionState::Allocating);
    assert!(partitioner.items().is_empty());
    partitioner.finish().await;
}

/// kazoo #732/#760: a contender node of the member's own live session that nothing tracks (a lost cleanup) would queue
/// ahead of its next contender and block the item forever. Every release sweeps such nodes.
#[tokio::test]
async fn orphaned_contender_of_own_session_is_swept() {
    // given: a member holding both items, and an orphan of its own session queued on item 1
    let ctx = Ctx::new().await;
    let member = ctx.member("0", ints(2)).await;
    member.wait_items(&ints(2), acquire_deadline()).await;
    let orphan_prefix = format!("{PATH}/locks/1/{}__lock__", "0".repeat(32));
    let (_, sequence) = member.client.create(&orphan_prefix, b"", &common::ephemeral_sequential()).await.unwrap();
    let orphan = format!("{orphan_prefix}{sequence}");
    // when
    member.partitioner.release_set().await.unwrap();
    // then: the orphan is gone and the member takes item 1 again instead of queueing behind its own ghost
    assert_eq!(ctx.observer.check_stat(&orphan).await.unwrap(), None, "the orphan survived the release");
    member.wait_items(&ints(2), acquire_deadline()).await;
    assert_disjoint_cover(&ctx.observer, PATH, &[&member], &ints(2)).await;
}

/// A partition function that panics or returns items outside the set fails the member with the cause, instead of
/// leaving it stuck in ALLOCATING (kazoo logs the exception in a thread and stays there).
#[tokio::test]
async fn a_broken_partition_function_fails_with_its_cause() {
    let ctx = Ctx::new().await;
    let panicking = ctx
        .member_with("p", ints(2), |b| {
            b.partition_func(|_: &str, _: &[String], _: &[Item]| -> Vec<Item> { panic!("boom") })
        })
        .await;
    let failed = panicking.wait_state(PartitionState::Failure, acquire_deadline()).await;
    assert!(
        matches!(&failed.cause, Some(Error::PartitionFn { reason }) if reason.contains("boom")),
        "{:?}",
        failed.cause
    );

    let foreign = ctx
        .member_with("f", ints(2), |b| b.partition_func(|_: &str, _: &[String], _: &[Item]| vec![Item::from(99)]))
        .await;
    let failed = foreign.wait_state(PartitionState::Failure, acquire_deadline()).await;
    assert!(matches!(failed.cause, Some(Error::PartitionFn { .. })), "{:?}", failed.cause);
    // Both leave the party once failed (Failure is published first, so the worker stops before the cleanup).
    let observer = &ctx.observer;
    common::wait_for("the failed members to leave the party", timing(Duration::from_secs(5)), || async {
        let party = observer.list_children(&format!("{PATH}/party")).await.map_err(|e| e.to_string())?;
        if party.is_empty() { Ok(()) } else { Err(format!("{party:?}")) }
    })
    .await;
}
