//! `Builder::static_membership`: a member's name is its identifier, so a process restarted with the same identifier
//! within `time_boundary` is no party change for the others. On a real ZooKeeper: graceful and crash restarts under
//! both rebalance modes, duplicate identifiers (live, racing, cancelled), configuration errors, and a party shared with
//! kazoo 2.11 members.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::faults::{SafetyChecker, party_nodes, wait_converged};
use common::kazoo::KazooWorker;
use common::members::{AbortOnDrop, Member, Recorder, auto_release, ints, wait_snapshot};
use common::{Ctx, Proxy, timing, wait_for};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Error, Item, PartitionState, Rebalance, SetPartitioner,
    partition::{KazooStride, PartitionFn, Rendezvous},
};

const PATH: &str = "/partitioner";

/// Long enough for a restart (finish, a new session, build) on a loaded 2-core machine.
fn time_boundary() -> Duration {
    timing(Duration::from_millis(1500))
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    rebalance: Rebalance,
    rendezvous: bool,
}

const EAGER: Mode = Mode { rebalance: Rebalance::Eager, rendezvous: false };
const INCREMENTAL: Mode = Mode { rebalance: Rebalance::Incremental, rendezvous: true };

fn builder(client: &Client, identifier: &str, items: &[Item], mode: Mode) -> zk_partitioner::Builder {
    let builder = SetPartitioner::builder(client.clone(), PATH, items.to_vec())
        .identifier(identifier)
        .static_membership(true)
        .time_boundary(time_boundary())
        .rebalance(mode.rebalance);
    if mode.rendezvous { builder.partition_func(Rendezvous::default()) } else { builder.partition_func(KazooStride) }
}

/// A static member running kazoo's worker loop (release when told), with a recorder of what it publishes.
struct Worker {
    member: Member,
    recorder: Recorder,
    _loop: AbortOnDrop,
}

impl Worker {
    fn new(member: Member) -> Worker {
        let recorder = Recorder::start(&member.partitioner);
        let worker_loop = auto_release(&member.partitioner);
        Worker { member, recorder, _loop: worker_loop }
    }

    fn items(&self) -> Vec<Item> {
        self.member.partitioner.items()
    }
}

async fn start(ctx: &Ctx, identifier: &str, items: &[Item], mode: Mode) -> Worker {
    let client = ctx.client().await;
    let partitioner = builder(&client, identifier, items, mode).build().await.expect("build a static member");
    Worker::new(Member { client, partitioner })
}

/// A static member whose session goes through a proxy the test can cut (a crash: the session lingers).
async fn start_behind_proxy(
    ctx: &Ctx,
    identifier: &str,
    items: &[Item],
    mode: Mode,
    session: Duration,
) -> (Worker, Proxy) {
    let proxy = Proxy::start(ctx.addr).await;
    let client = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), session).await;
    let partitioner = builder(&client, identifier, items, mode).build().await.expect("build a static member");
    (Worker::new(Member { client, partitioner }), proxy)
}

async fn converge(ctx: &Ctx, what: &str, workers: &[&Worker], items: &[Item]) {
    let members: Vec<&Member> = workers.iter().map(|w| &w.member).collect();
    wait_converged(what, &ctx.observer, &members, items, timing(Duration::from_secs(30))).await;
}

/// Every member's items, by name.
fn assignment(workers: &[&Worker]) -> BTreeMap<String, Vec<Item>> {
    workers.iter().map(|w| (w.member.partitioner.snapshot().member.to_string(), w.items())).collect()
}

/// What `worker` published since its recorder started (the recorder's first entry is the snapshot current then).
fn published_since_start(worker: &Worker) -> Vec<(PartitionState, usize, usize)> {
    let snapshots = worker.recorder.snapshots();
    let first = snapshots.first().map_or(0, |s| s.generation);
    snapshots.iter().filter(|s| s.generation > first).map(|s| (s.state, s.items.len(), s.revoked.len())).collect()
}

/// Asserts that nobody stopped an item: every snapshot `worker` published lists all the items it listed before
/// (none revoked, none dropped).
fn assert_stopped_nothing(worker: &Worker, before: &[Item]) {
    for snapshot in worker.recorder.snapshots() {
        assert!(snapshot.revoked.is_empty(), "{} revoked {:?}", snapshot.member, snapshot.revoked);
        assert!(
            before.iter().all(|item| snapshot.items.contains(item)),
            "{} stopped listing some of {before:?}: {} with {:?}",
            snapshot.member,
            snapshot.state,
            snapshot.items
        );
    }
}

/// Observes `others` for `window` after the party has settled: under incremental rebalancing a short restart must
/// make none of them publish anything. (A negative check needs an observation window; the positive conditions
/// before it are all waited for.)
async fn assert_quiet(others: &[&Worker], window: Duration) {
    tokio::time::sleep(window).await;
    for worker in others {
        let published = published_since_start(worker);
        assert!(
            published.is_empty(),
            "{} published {published:?} (state, items, revoked) during a restart within time_boundary",
            worker.member.partitioner.snapshot().member
        );
    }
}

async fn graceful_restart(mode: Mode) {
    // given: 4 static members over 40 items, settled
    let ctx = Ctx::new().await;
    let items = ints(40);
    let mut workers = Vec::new();
    for name in ["s-a", "s-b", "s-c", "s-d"] {
        workers.push(start(&ctx, name, &items, mode).await);
    }
    let restarted = workers.remove(2);
    let all: Vec<&Worker> = workers.iter().chain([&restarted]).collect();
    converge(&ctx, "four static members", &all, &items).await;
    let before = assignment(&all);
    assert_eq!(
        restarted.member.partitioner.snapshot().member.as_ref(),
        "s-c",
        "a static member's name is its identifier"
    );
    let old_items = restarted.items();
    let old_session = restarted.member.session();
    let checker = SafetyChecker::start(ctx.client().await, &items, &all.iter().map(|w| &w.member).collect::<Vec<_>>());
    // Watch what the others publish from now on.
    for worker in &mut workers {
        worker.recorder = Recorder::start(&worker.member.partitioner);
    }

    // when: s-c finishes (gives up its locks, leaves) and a new process with a new session starts as s-c
    let started = Instant::now();
    restarted.member.partitioner.finish().await;
    drop(restarted);
    let restarted = start(&ctx, "s-c", &items, mode).await;
    let restart_took = started.elapsed();
    assert!(restart_took < time_boundary(), "the restart took {restart_took:?}, longer than time_boundary");
    checker.watch(&restarted.member);
    assert_ne!(restarted.member.session(), old_session);

    // then: it takes back exactly its old items, the party converges on the assignment it had
    restarted.member.wait_items(&old_items, timing(Duration::from_secs(20))).await;
    let all: Vec<&Worker> = workers.iter().chain([&restarted]).collect();
    converge(&ctx, "after the restart", &all, &items).await;
    assert_eq!(assignment(&all), before, "a restart with the same identifier must not move any item");
    let others: Vec<&Worker> = workers.iter().collect();
    match mode.rebalance {
        // and nobody else published anything, let alone stopped an item
        Rebalance::Incremental => {
            assert_quiet(&others, time_boundary()).await;
            for (worker, name) in workers.iter().zip(["s-a", "s-b", "s-d"]) {
                assert_stopped_nothing(worker, &before[name]);
            }
        }
        // kazoo's rule still holds for the others: a leave and a join each stop everyone (or one combined stop,
        // when the join comes before they released)
        _ => {
            for worker in &workers {
                let published = published_since_start(worker);
                assert!(
                    published.iter().any(|&(state, _, _)| state == PartitionState::Release),
                    "an eager member did not release: {published:?}"
                );
            }
        }
    }
    let checks = checker.assert_safe(100).await;
    tracing::info!(?restart_took, ?checks, "graceful restart");
}

#[tokio::test]
async fn graceful_restart_incremental_moves_and_stops_nothing_else() {
    graceful_restart(INCREMENTAL).await;
}

#[tokio::test]
async fn graceful_restart_eager_gives_every_member_its_items_back() {
    graceful_restart(EAGER).await;
}

async fn crash_restart(mode: Mode) {
    // given: 3 static members, one of them with a short session behind a proxy
    let ctx = Ctx::new().await;
    let items = ints(30);
    let session = Duration::from_secs(3);
    let a = start(&ctx, "s-a", &items, mode).await;
    let (victim, proxy) = start_behind_proxy(&ctx, "s-b", &items, mode, session).await;
    let mut c = start(&ctx, "s-c", &items, mode).await;
    let mut a = a;
    converge(&ctx, "three static members", &[&a, &victim, &c], &items).await;
    let before = assignment(&[&a, &victim, &c]);
    let old_items = victim.items();
    a.recorder = Recorder::start(&a.member.partitioner);
    c.recorder = Recorder::start(&c.member.partitioner);
    let checker = SafetyChecker::start(ctx.client().await, &items, &[&a.member, &victim.member, &c.member]);

    // when: s-b's connection is cut for good (a crash: its session, party node and locks linger until the session
    // expires) and a new process starts as s-b at once
    let client = ctx.client().await;
    let crashed_at = Instant::now();
    let rebuild = async {
        let partitioner = builder(&client, "s-b", &items, mode).build().await;
        (partitioner, crashed_at.elapsed())
    };
    let (rebuilt, expired_after) = tokio::join!(rebuild, common::expire(&victim.member.client, &proxy));
    let (partitioner, waited) = rebuilt;
    let partitioner = partitioner.expect("the new s-b joins once the old session is gone");

    // then: it waited for the old node (the server expires the session no sooner than its timeout)...
    assert!(
        waited >= session.mul_f64(0.9),
        "the new s-b joined after {waited:?}, before the old session (timeout {session:?}) could expire"
    );
    let restarted = Worker::new(Member { client, partitioner });
    checker.watch(&restarted.member);
    // ...and takes exactly the old items
    restarted.member.wait_items(&old_items, timing(Duration::from_secs(20))).await;
    converge(&ctx, "after the crash restart", &[&a, &restarted, &c], &items).await;
    assert_eq!(assignment(&[&a, &restarted, &c]), before, "a crash restart must not move any item");
    if mode.rebalance == Rebalance::Incremental {
        assert_quiet(&[&a, &c], time_boundary()).await;
        assert_stopped_nothing(&a, &before["s-a"]);
        assert_stopped_nothing(&c, &before["s-c"]);
    }
    let checks = checker.assert_safe(100).await;
    assert_eq!(victim.member.state(), PartitionState::Failure, "the crashed member's session is gone");
    tracing::info!(?waited, ?expired_after, ?checks, "crash restart");
}

#[tokio::test]
async fn crash_restart_incremental_waits_for_the_old_session_then_takes_its_items() {
    crash_restart(INCREMENTAL).await;
}

#[tokio::test]
async fn crash_restart_eager_waits_for_the_old_session_then_takes_its_items() {
    crash_restart(EAGER).await;
}

#[tokio::test]
async fn a_live_duplicate_identifier_fails_after_the_limit_and_leaves_nothing_behind() {
    // given: a static member "dup", settled
    let ctx = Ctx::new().await;
    let items = ints(6);
    let first = start(&ctx, "dup", &items, INCREMENTAL).await;
    first.member.wait_state(PartitionState::Acquired, timing(Duration::from_secs(20))).await;
    let generation = first.member.partitioner.snapshot().generation;
    let nodes = party_nodes(&ctx.observer).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let (first_node, _) = nodes[0].clone();
    assert!(first_node.ends_with("-dup") && first_node.len() == 32 + 4, "kazoo's ShallowParty node: {first_node}");

    // when: a second process builds with the same identifier
    let client = ctx.client().await;
    let limit = Duration::from_secs(1);
    let started = Instant::now();
    let second = builder(&client, "dup", &items, INCREMENTAL).max_identity_wait(limit).build().await;

    // then: it fails with IdentifierInUse naming the live node and its session, after the limit
    let waited = started.elapsed();
    match second {
        Err(Error::IdentifierInUse { identifier, node, session, waited: reported }) => {
            assert_eq!(identifier, "dup");
            assert_eq!(node, first_node);
            assert_eq!(session, first.member.session());
            assert!(reported >= limit, "{reported:?}");
        }
        other => panic!("expected IdentifierInUse, got {other:?}"),
    }
    assert!(waited >= limit && waited < limit + timing(Duration::from_secs(3)), "waited {waited:?}");
    // and nothing of the second session is left; the first member did not notice anything
    assert_eq!(party_nodes(&ctx.observer).await, nodes);
    assert_eq!(first.member.partitioner.snapshot().generation, generation);

    // when: a build waiting for the identifier is dropped (cancelled)
    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), builder(&client, "dup", &items, INCREMENTAL).build());
    assert!(cancelled.await.is_err(), "the build should still be waiting");
    // then: still nothing of it (the guard's clean-up, if any, runs on the same session: sync through it)
    client.sync("/").await.expect("sync");
    assert_eq!(party_nodes(&ctx.observer).await, nodes);

    // when: the first member finishes, a new build with the identifier goes through at once
    first.member.partitioner.finish().await;
    let next = builder(&client, "dup", &items, INCREMENTAL).build().await.expect("the identifier is free");
    assert_eq!(next.snapshot().member.as_ref(), "dup");
    next.finish().await;
}

#[tokio::test]
async fn two_processes_racing_for_one_identifier_join_once() {
    let ctx = Ctx::new().await;
    let items = ints(4);
    let (one, two) = (ctx.client().await, ctx.client().await);
    let limit = Duration::from_secs(1);
    let (a, b) = tokio::join!(
        builder(&one, "race", &items, EAGER).max_identity_wait(limit).build(),
        builder(&two, "race", &items, EAGER).max_identity_wait(limit).build()
    );
    let (winner, loser_session) = match (a, b) {
        (Ok(p), Err(Error::IdentifierInUse { session, .. })) => {
            assert_eq!(session, one.session_id().0);
            (p, two.session_id().0)
        }
        (Err(Error::IdentifierInUse { session, .. }), Ok(p)) => {
            assert_eq!(session, two.session_id().0);
            (p, one.session_id().0)
        }
        (a, b) => panic!("exactly one build must succeed: {a:?} / {b:?}"),
    };
    let nodes = party_nodes(&ctx.observer).await;
    assert_eq!(nodes.len(), 1, "one party node for one identifier: {nodes:?}");
    assert!(nodes.iter().all(|(_, owner)| *owner != loser_session));
    winner.finish().await;
}

#[tokio::test]
async fn static_membership_configuration_errors() {
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let base = || SetPartitioner::builder(client.clone(), PATH, ints(3));
    let no_identifier = base().static_membership(true).build().await;
    assert!(matches!(no_identifier, Err(Error::InvalidConfig { field: "identifier", .. })), "{no_identifier:?}");
    let not_static = base().identifier("x").max_identity_wait(Duration::from_secs(1)).build().await;
    assert!(matches!(not_static, Err(Error::InvalidConfig { field: "max_identity_wait", .. })), "{not_static:?}");
    for bad in [Duration::ZERO, Duration::from_secs(365 * 24 * 3600)] {
        let result = base().identifier("x").static_membership(true).max_identity_wait(bad).build().await;
        assert!(matches!(result, Err(Error::InvalidConfig { field: "max_identity_wait", .. })), "{bad:?}: {result:?}");
    }
    // Nothing was written.
    assert!(matches!(
        ctx.observer.list_children("/partitioner").await,
        Err(zk_partitioner::zookeeper_client::Error::NoNode)
    ));
}

// ---- A party shared with kazoo 2.11 ------------------------------------------------------------------------------

/// Waits until the Rust and kazoo workers are all ACQUIRED with kazoo's stride over the names of all of them (the
/// Rust members' names are their identifiers), their claims backed by lock nodes and covering every item once.
async fn wait_mixed_cover(
    ctx: &Ctx,
    rust: &[&Worker],
    kazoo: &[&KazooWorker],
    items: &[Item],
) -> BTreeMap<String, Vec<String>> {
    wait_for("a disjoint cover agreed by static Rust members and kazoo", timing(Duration::from_secs(40)), || async {
        let holders = common::members::lock_holders(&ctx.observer, PATH, items).await;
        let mut names: Vec<String> = rust.iter().map(|w| w.member.partitioner.snapshot().member.to_string()).collect();
        names.extend(kazoo.iter().map(|k| k.identifier.clone()));
        names.sort();
        let mut claims = BTreeMap::new();
        let mut by_member = BTreeMap::new();
        for worker in rust {
            let snapshot = worker.member.partitioner.snapshot();
            if snapshot.state != PartitionState::Acquired || *snapshot.members != *names {
                return Err(format!("{} is {} over {:?}", snapshot.member, snapshot.state, snapshot.members));
            }
            let expected = KazooStride.partition(&snapshot.member, &names, items);
            if *snapshot.items != *expected {
                return Err(format!("{} holds {:?}, stride says {expected:?}", snapshot.member, snapshot.items));
            }
            for item in snapshot.items.iter() {
                claims.insert(item.to_string(), worker.member.session());
            }
            by_member.insert(snapshot.member.to_string(), snapshot.items.iter().map(Item::to_string).collect());
        }
        for worker in kazoo {
            let view = worker.view();
            if view.state != "ACQUIRED" {
                return Err(format!("{} is {:?}", worker.identifier, view.state));
            }
            for item in &view.items {
                claims.insert(item.clone(), view.session);
            }
            by_member.insert(worker.identifier.clone(), view.items.clone());
        }
        if claims != holders || claims.len() != items.len() {
            return Err(format!("claims {claims:?}, lock holders {holders:?}"));
        }
        Ok(by_member)
    })
    .await
}

#[tokio::test]
async fn static_members_share_a_party_with_kazoo_and_restart_into_the_same_items() {
    // given: two static Rust members and two kazoo workers (kazoo's stride, eager: kazoo's only mode)
    let ctx = Ctx::new().await;
    let items = ints(12);
    let rs_a = start(&ctx, "rs-a", &items, EAGER).await;
    let kz_1 = KazooWorker::start(&ctx, PATH, "kz-1", &items, time_boundary()).await;
    let rs_b = start(&ctx, "rs-b", &items, EAGER).await;
    let kz_2 = KazooWorker::start(&ctx, PATH, "kz-2", &items, time_boundary()).await;
    // then kazoo reads a static member's node as the identifier, as this crate reads kazoo's
    let before = wait_mixed_cover(&ctx, &[&rs_a, &rs_b], &[&kz_1, &kz_2], &items).await;

    // when a static Rust member restarts gracefully
    rs_b.member.partitioner.finish().await;
    drop(rs_b);
    let rs_b = start(&ctx, "rs-b", &items, EAGER).await;
    // then every member, kazoo's included, ends with the items it had
    let after = wait_mixed_cover(&ctx, &[&rs_a, &rs_b], &[&kz_1, &kz_2], &items).await;
    assert_eq!(after, before);

    // when a static Rust member is given a kazoo worker's identifier, it waits for kazoo's node, and gives up
    let client = ctx.client().await;
    let clash = builder(&client, "kz-1", &items, EAGER).max_identity_wait(Duration::from_millis(500)).build().await;
    match clash {
        Err(Error::IdentifierInUse { node, session, .. }) => {
            assert!(node.ends_with("-kz-1"), "{node}");
            assert_eq!(session, kz_1.view().session);
        }
        other => panic!("expected IdentifierInUse for kazoo's node, got {other:?}"),
    }
    // and the party did not notice
    assert_eq!(wait_mixed_cover(&ctx, &[&rs_a, &rs_b], &[&kz_1, &kz_2], &items).await, before);
}

#[tokio::test]
async fn a_static_member_whose_node_is_deleted_rejoins_under_the_same_name() {
    // given: two static members, settled
    let ctx = Ctx::new().await;
    let items = ints(10);
    let a = start(&ctx, "s-a", &items, INCREMENTAL).await;
    let b = start(&ctx, "s-b", &items, INCREMENTAL).await;
    converge(&ctx, "two static members", &[&a, &b], &items).await;
    let before = assignment(&[&a, &b]);
    let nodes = party_nodes(&ctx.observer).await;
    let (old_node, _) = nodes.iter().find(|(node, _)| node.ends_with("-s-b")).cloned().expect("s-b's node");

    // when: an operator deletes s-b's party node
    ctx.observer.delete(&format!("{PATH}/party/{old_node}"), None).await.expect("delete s-b's node");

    // then: s-b joins again with a new node of the same kind (`<32 hex>-s-b`, owned by its session)...
    let session = b.member.session();
    wait_for("s-b's new party node", timing(Duration::from_secs(20)), || async {
        let nodes = party_nodes(&ctx.observer).await;
        match nodes.iter().find(|(node, _)| node.ends_with("-s-b")) {
            Some((node, owner)) if *node != old_node && *owner == session && node.len() == 32 + 4 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // ...under the same name, so the party converges on the same assignment
    converge(&ctx, "after the rejoin", &[&a, &b], &items).await;
    assert_eq!(assignment(&[&a, &b]), before);
    assert_eq!(b.member.partitioner.snapshot().member.as_ref(), "s-b");
}

/// An operator deletes a static member's node while a duplicate waits for the identifier: the duplicate joins, and
/// the original, finding its own node gone and its name taken, fails with `IdentifierInUse` instead of acting as a
/// member without a party node (it never rejoins a second time under the same name).
#[tokio::test]
async fn a_member_whose_identifier_was_taken_while_its_node_was_gone_fails() {
    // given: a static member "s", and a second process waiting for the identifier
    let ctx = Ctx::new().await;
    let items = ints(4);
    let original = start(&ctx, "s", &items, INCREMENTAL).await;
    original.member.wait_state(PartitionState::Acquired, timing(Duration::from_secs(20))).await;
    let (old_node, _) = party_nodes(&ctx.observer).await.into_iter().next().expect("the original's node");
    let client = ctx.client().await;
    let waiting = tokio::spawn({
        let client = client.clone();
        let items = items.clone();
        async move { builder(&client, "s", &items, INCREMENTAL).max_identity_wait(Duration::from_secs(60)).build().await }
    });
    // (Whether the duplicate is already watching the node or has not listed the party yet, it joins within
    // milliseconds of the deletion; the original can rejoin only after a quiet time_boundary, 1.5 s.)

    // when: an operator deletes the original's node
    ctx.observer.delete(&format!("{PATH}/party/{old_node}"), None).await.expect("delete the original's node");

    // then: the duplicate joins and takes every item; the original fails with IdentifierInUse
    let duplicate = waiting.await.expect("join").expect("the duplicate joins once the node is gone");
    let failed = wait_snapshot(&original.member.partitioner, "FAILURE", timing(Duration::from_secs(20)), |s| {
        s.state == PartitionState::Failure
    })
    .await;
    assert!(
        matches!(&failed.cause, Some(Error::IdentifierInUse { identifier, .. }) if identifier == "s"),
        "{:?}",
        failed.cause
    );
    let duplicate = Worker::new(Member { client, partitioner: duplicate });
    converge(&ctx, "the duplicate alone", &[&duplicate], &items).await;
    let nodes = party_nodes(&ctx.observer).await;
    assert_eq!(nodes.len(), 1, "one node for the identifier: {nodes:?}");
}
