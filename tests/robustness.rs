//! The driver cannot leave a stale snapshot or a phantom member behind: a panic inside its task, its runtime going
//! away, or a `build()` cancelled half-way, each on a real ZooKeeper.

mod common;

use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::faults::nodes_owned_by;
use common::members::{auto_release, ints, wait_snapshot};
use common::{Ctx, connect, session_listed, timing, wait_for, wait_session_state, wait_until};
use zk_partitioner::zookeeper_client::SessionState;
use zk_partitioner::{
    Error, Item, PartitionState, SetPartitioner,
    partition::{KazooStride, PartitionFn},
};
use zk_partitioner_testing::FreezingProxy;

const PATH: &str = "/partitioner";

/// A panic payload whose own drop panics: the partition function's panic is caught, and dropping its payload then
/// panics inside the partitioner's task, which is how a bug in the task itself would surface.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a bug inside the background task");
    }
}

async fn party_nodes(ctx: &Ctx) -> Vec<String> {
    ctx.observer.list_children(&format!("{PATH}/party")).await.unwrap_or_default()
}

/// A panic in the background task publishes FAILURE with its cause and removes the member's nodes, instead of leaving
/// the last snapshot (possibly ACQUIRED) in place forever.
#[tokio::test]
async fn a_panic_in_the_task_fails_the_member_and_cleans_up() {
    let ctx = Ctx::new().await;
    let member = ctx
        .member_with("panicky", ints(2), |builder| {
            builder.partition_func(|_: &str, _: &[String], _: &[Item]| -> Vec<Item> { std::panic::panic_any(Bomb) })
        })
        .await;
    let failed = wait_snapshot(&member.partitioner, "FAILURE", timing(Duration::from_secs(10)), |s| {
        s.state == PartitionState::Failure
    })
    .await;
    assert!(
        matches!(&failed.cause, Some(Error::Internal { reason }) if reason.contains("a bug inside the background task")),
        "{:?}",
        failed.cause
    );
    assert!(failed.items.is_empty());
    assert_eq!(member.partitioner.state(), PartitionState::Failure);
    wait_for("the failed member to leave the party", timing(Duration::from_secs(10)), || async {
        let party = party_nodes(&ctx).await;
        if party.is_empty() { Ok(()) } else { Err(format!("{party:?}")) }
    })
    .await;
}

/// A panic while the connection is silent: the clean-up's requests are lost with the connection, and are sent again
/// once it is back (the clean-up once made one pass and gave up, leaving lock nodes nobody processes, and so items
/// nobody else could take, for as long as the session lived). The test holds a clone of the member's client, so the
/// session outlives the whole wait: the nodes must go while it still lives, which only a clean-up that sends its
/// lost requests again does (a session that closes or expires would delete them whatever the clean-up did). Then,
/// the test's clone dropped, the session closes while the handle still exists: the task let go of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_the_connection_is_silent_still_frees_every_item() {
    // given: a member behind a proxy that can go silent, holding both items; its partition function is kazoo's, but
    // its second real call stalls, then panics in a way that unwinds the task. The test keeps a clone of its client.
    let ctx = Ctx::new().await;
    let proxy = FreezingProxy::start(ctx.addr).await;
    let client = connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), Duration::from_secs(10)).await;
    let session = client.session_id();
    let keeper = client.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let second_call_panics = move |me: &str, members: &[String], items: &[Item]| -> Vec<Item> {
        if !me.starts_with("probe-") && counter.fetch_add(1, Ordering::SeqCst) == 1 {
            std::thread::sleep(Duration::from_millis(500));
            std::panic::panic_any(Bomb);
        }
        KazooStride.partition(me, members, items)
    };
    let items = ints(2);
    let doomed = SetPartitioner::builder(client, PATH, items.clone())
        .identifier("doomed")
        .time_boundary(common::members::TIME_BOUNDARY)
        .partition_func(second_call_panics)
        .build()
        .await
        .expect("build");
    wait_snapshot(&doomed, "ACQUIRED", timing(Duration::from_secs(10)), |s| *s.items == *items).await;
    assert_eq!(nodes_owned_by(&ctx.observer, &items, session.0).await.len(), 3, "a party node and two locks");

    // when: another member joins (the second call), and the connection goes silent while the function stalls; the
    // clean-up's first requests go into the silence, and are lost when the client gives the connection up (its read
    // timeout, 2/5 of the session); then the connection answers again, well within the session timeout
    let other = ctx.member("other", items.clone()).await;
    let _worker = auto_release(&other.partitioner);
    wait_until("the second call", timing(Duration::from_secs(10)), || async { calls.load(Ordering::SeqCst) >= 2 })
        .await;
    proxy.freeze();
    wait_snapshot(&doomed, "FAILURE", timing(Duration::from_secs(10)), |s| s.state == PartitionState::Failure).await;
    let mut watcher = keeper.state_watcher();
    let what = "the client to give the silent connection up";
    wait_session_state(&mut watcher, SessionState::Disconnected, timing(Duration::from_secs(10)), what).await;
    proxy.thaw();

    // then: the failed member's nodes go while its session still lives (the clean-up sent its requests again), and
    // the other member takes every item
    wait_for("the failed member's nodes to go", timing(Duration::from_secs(10)), || async {
        let left = nodes_owned_by(&ctx.observer, &items, session.0).await;
        if left.is_empty() { Ok(()) } else { Err(format!("still there: {left:?}")) }
    })
    .await;
    assert!(
        session_listed(ctx.addr, session).await.expect("dump"),
        "the session must outlive the clean-up, or its end could have deleted the nodes"
    );
    assert!(!keeper.state_watcher().peek_state().is_terminated(), "{}", keeper.state_watcher().peek_state());
    other.wait_items(&items, timing(Duration::from_secs(15))).await;
    assert_eq!(party_nodes(&ctx).await.len(), 1, "only the other member is left");

    // and: with the test's clone gone, the session closes, all while the failed member's handle is still held
    drop((keeper, watcher));
    // Closed at once when the close request goes through; on a loaded machine it may not, and the session then
    // expires after its 10 s timeout: either way only if nothing holds the client any more.
    wait_until("the failed member's session to end", timing(Duration::from_secs(20)), || async {
        session_listed(ctx.addr, session).await.is_ok_and(|listed| !listed)
    })
    .await;
    assert!(matches!(doomed.snapshot().cause, Some(Error::Internal { .. })), "{:?}", doomed.snapshot().cause);
    assert_eq!(doomed.load_checkpoint(&Item::from(0)).await, Err(Error::Stopped));
}

/// When the runtime that runs the task shuts down, every handle reports FAILURE (`Stopped`) instead of the stale
/// ACQUIRED snapshot.
#[test]
fn a_task_gone_with_its_runtime_reads_as_failure() {
    let outer = tokio::runtime::Runtime::new().expect("runtime");
    let (ctx, client) = outer.block_on(async {
        let ctx = Ctx::new().await;
        let client = ctx.client().await;
        (ctx, client)
    });
    // The member's task runs on a runtime of its own, which then goes away.
    let inner = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let partitioner = inner.block_on(async {
        let partitioner = SetPartitioner::builder(client, PATH, ints(2))
            .time_boundary(common::members::TIME_BOUNDARY)
            .build()
            .await
            .expect("build");
        partitioner.wait_for_acquire(timing(Duration::from_secs(10))).await;
        partitioner
    });
    assert_eq!(partitioner.state(), PartitionState::Acquired, "{:?}", partitioner.snapshot());
    drop(inner);
    assert_eq!(partitioner.state(), PartitionState::Failure);
    assert_eq!(partitioner.snapshot().cause, Some(Error::Stopped));
    assert!(partitioner.items().is_empty(), "a stopped member must list nothing");
    assert!(outer.block_on(partitioner.release_set()).is_err());
    drop(ctx);
}

/// `build()` raced against a timeout and cancelled at every point of its course leaves no party node behind: the
/// members it did build are finished, and the party ends empty.
#[tokio::test]
async fn a_cancelled_build_leaves_no_member_behind() {
    let ctx = Ctx::new().await;
    let client = ctx.client().await;
    let builder = |identifier: String| {
        SetPartitioner::builder(client.clone(), PATH, ints(1))
            .identifier(identifier)
            .time_boundary(Duration::from_secs(60))
    };
    // How long a whole build takes here, so the timeouts below sweep its whole course.
    let started = std::time::Instant::now();
    builder("measure".into()).build().await.expect("build").finish().await;
    let course = started.elapsed();
    let (mut cancelled, mut built) = (0, 0);
    // From "cancelled before anything was sent" to "completed": 60 steps over one and a half courses.
    for step in 0..60u32 {
        let build = builder(format!("try{step}")).build();
        match tokio::time::timeout(course * 3 / 2 * step / 60, build).await {
            Ok(partitioner) => {
                built += 1;
                partitioner.expect("build").finish().await;
            }
            Err(_) => cancelled += 1,
        }
    }
    assert!(cancelled > 0 && built > 0, "the timeouts missed the build's course: {cancelled} cancelled, {built} built");
    wait_for("every cancelled member's node to go", timing(Duration::from_secs(10)), || async {
        let party = party_nodes(&ctx).await;
        if party.is_empty() { Ok(()) } else { Err(format!("{party:?}")) }
    })
    .await;
}
