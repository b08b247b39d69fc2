//! `SessionPolicy::SessionAware`: a stall shorter than the session timeout pauses the worker but moves no item;
//! a longer one fails the member as usual.

mod common;

use std::time::Duration;

use common::members::{Member, Recorder, auto_release, ints, items_of, lock_holders};
use common::{Ctx, Proxy, timing};
use zk_partitioner::{Error, PartitionState, SessionPolicy};

const PATH: &str = "/partitioner";

async fn session_aware_member(ctx: &Ctx, session_timeout: Duration) -> (Member, Proxy) {
    let proxy = Proxy::start(ctx.addr).await;
    let client = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), session_timeout).await;
    let partitioner = zk_partitioner::SetPartitioner::builder(client.clone(), PATH, ints(4))
        .identifier("0")
        .time_boundary(common::members::TIME_BOUNDARY)
        .session_policy(SessionPolicy::SessionAware)
        .build()
        .await
        .expect("build");
    (Member { client, partitioner }, proxy)
}

#[tokio::test]
async fn a_short_stall_moves_no_item() {
    // given: a session-aware member and a standard one, both ACQUIRED, each running kazoo's worker loop
    let ctx = Ctx::new().await;
    let (m0, proxy) = session_aware_member(&ctx, Duration::from_secs(6)).await;
    let m1 = ctx.member("1", ints(4)).await;
    m0.wait_items(&items_of(&[0, 2]), timing(Duration::from_secs(10))).await;
    m1.wait_items(&items_of(&[1, 3]), timing(Duration::from_secs(10))).await;
    let tokens_before = m0.partitioner.snapshot().tokens;
    let holders_before = lock_holders(&ctx.observer, PATH, &ints(4)).await;
    let (r0, r1) = (Recorder::start(&m0.partitioner), Recorder::start(&m1.partitioner));
    let _loop = auto_release(&m0.partitioner);
    // when: the connection is cut for less than the session timeout
    proxy.cut();
    let paused = m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    assert!(paused.suspended, "the worker is told to pause, and why");
    assert!(paused.items.is_empty(), "nothing may be processed while suspended");
    proxy.heal();
    // then: the same locks come back, untouched
    m0.wait_items(&items_of(&[0, 2]), timing(Duration::from_secs(10))).await;
    assert_eq!(m0.partitioner.snapshot().tokens, tokens_before, "same lock nodes, same tokens");
    assert_eq!(lock_holders(&ctx.observer, PATH, &ints(4)).await, holders_before);
    assert!(!m0.partitioner.snapshot().suspended);
    // the worker's release_set() was answered without releasing anything, and m1 never noticed
    assert!(r0.states().ends_with(&[PartitionState::Release, PartitionState::Acquired]), "{:?}", r0.states());
    assert!(!r1.states().contains(&PartitionState::Release), "m1 saw {:?}", r1.states());
}

#[tokio::test]
async fn a_stall_longer_than_the_session_fails() {
    // given
    let ctx = Ctx::new().await;
    let (m0, proxy) = session_aware_member(&ctx, Duration::from_secs(1)).await;
    let m1 = ctx.member("1", ints(4)).await;
    m0.wait_items(&items_of(&[0, 2]), timing(Duration::from_secs(10))).await;
    m1.wait_items(&items_of(&[1, 3]), timing(Duration::from_secs(10))).await;
    // when: the worker asks to release while suspended, and the session expires meanwhile
    proxy.cut();
    let paused = m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    assert!(paused.suspended);
    let release = tokio::spawn(m0.partitioner.release_set());
    common::expire(&m0.client, &proxy).await;
    // then
    let failed = m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "{:?}", failed.cause);
    assert!(matches!(release.await.unwrap(), Err(Error::SessionLost { .. })));
    m1.wait_state(PartitionState::Release, timing(Duration::from_secs(10))).await;
    m1.partitioner.release_set().await.unwrap();
    m1.wait_items(&ints(4), timing(Duration::from_secs(10))).await;
}

#[tokio::test]
async fn a_lock_node_lost_during_the_stall_means_release() {
    // given
    let ctx = Ctx::new().await;
    let (m0, proxy) = session_aware_member(&ctx, Duration::from_secs(6)).await;
    m0.wait_items(&ints(4), timing(Duration::from_secs(10))).await;
    // when: during the stall, an operator deletes one of m0's lock nodes
    proxy.cut();
    m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    let dir = format!("{PATH}/locks/2");
    let node = ctx.observer.list_children(&dir).await.unwrap().pop().unwrap();
    ctx.observer.delete(&format!("{dir}/{node}"), None).await.unwrap();
    let release = tokio::spawn(m0.partitioner.release_set());
    proxy.heal();
    // then: the member does not trust the survivors blindly: it releases and allocates again
    release.await.unwrap().expect("release_set");
    m0.wait_items(&ints(4), timing(Duration::from_secs(10))).await;
    assert!(m0.partitioner.snapshot().token(&ints(4)[2]).unwrap().get() > 0);
}
