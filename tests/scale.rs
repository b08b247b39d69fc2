//! Large sets: batched allocation must not change correctness, and a long allocation must give way to a party change
//! at once.

mod common;

use std::time::Duration;

use common::members::{assert_disjoint_cover, ints, lock_holders, settle};
use common::{Ctx, timing, wait_for};
use zk_partitioner::{Item, PartitionState, partition::Rendezvous};

const PATH: &str = "/partitioner";

#[tokio::test]
async fn five_thousand_items_three_members_disjoint_cover() {
    // given
    let ctx = Ctx::new().await;
    let items = ints(5000);
    let members = [
        ctx.member("a", items.clone()).await,
        ctx.member("b", items.clone()).await,
        ctx.member("c", items.clone()).await,
    ];
    // when: each runs the worker loop
    settle(&members, timing(Duration::from_secs(60))).await;
    // then
    assert_disjoint_cover(&ctx.observer, PATH, &members.iter().collect::<Vec<_>>(), &items).await;
    for member in &members {
        let count = member.partitioner.items().len();
        assert!((1666..=1667).contains(&count), "{} holds {count} items", member.partitioner.snapshot().member);
    }
    // and a rebalance to two members keeps the cover (released nodes are really gone)
    let [a, b, c] = members;
    c.partitioner.finish().await;
    let pair = [a, b];
    settle(&pair, timing(Duration::from_secs(60))).await;
    assert_disjoint_cover(&ctx.observer, PATH, &pair.iter().collect::<Vec<_>>(), &items).await;
}

#[tokio::test]
async fn party_change_aborts_a_long_allocation_promptly() {
    // given: a member allocating many items, most of them blocked behind a foreign holder
    let ctx = Ctx::new().await;
    let items = ints(2000);
    let blocker = ctx.client().await;
    let blocked: Vec<Item> = items[..1000].to_vec();
    let held = ctx.hold_locks(&blocker, PATH, &blocked).await;
    let m0 = ctx.member("0", items.clone()).await;
    let blocker_session = blocker.session_id().0;
    let m0_session = m0.session();
    // m0 holds the 1000 free items and waits on the 1000 blocked ones
    wait_for("m0 to hold the free items", timing(Duration::from_secs(30)), || async {
        let holders = lock_holders(&ctx.observer, PATH, &items[1000..]).await;
        let mine = holders.values().filter(|&&s| s == m0_session).count();
        if mine == 1000 { Ok(()) } else { Err(format!("{mine} held")) }
    })
    .await;
    assert_eq!(m0.state(), PartitionState::Allocating);
    // A watch on one of m0's lock nodes that will move (an odd item) times the abort exactly, without polling.
    let moving: Vec<Item> = items[1000..].iter().skip(1).step_by(2).cloned().collect();
    let dir = format!("{PATH}/locks/{}", moving[0]);
    let node = ctx.observer.list_children(&dir).await.unwrap().pop().expect("m0's lock node");
    let (stat, deleted) = ctx.observer.check_and_watch_stat(&format!("{dir}/{node}")).await.unwrap();
    assert_eq!(stat.map(|s| s.ephemeral_owner), Some(m0_session));
    // when: a member joins
    let joined = tokio::time::Instant::now();
    let m1 = ctx.member("1", items.clone()).await;
    // then: m0's allocation is aborted by the party watch, without waiting for the blocked locks or a poll period
    tokio::time::timeout(timing(Duration::from_secs(10)), deleted.changed()).await.expect("m0 kept its lock");
    let took = joined.elapsed();
    assert!(took < timing(Duration::from_secs(1)), "m0 took {took:?} to abort its allocation");
    // and it drops every item that moved
    wait_for("m0 to let go of the items that moved", timing(Duration::from_secs(10)), || async {
        let holders = lock_holders(&ctx.observer, PATH, &moving).await;
        let mine = holders.values().filter(|&&s| s == m0_session).count();
        if mine == 0 { Ok(()) } else { Err(format!("{mine} still held")) }
    })
    .await;
    // and m1 gets them as soon as the party is stable again
    let m1_session = m1.session();
    wait_for("m1 to hold the items that moved", timing(Duration::from_secs(10)), || async {
        let holders = lock_holders(&ctx.observer, PATH, &moving).await;
        let theirs = holders.values().filter(|&&s| s == m1_session).count();
        if theirs == moving.len() { Ok(()) } else { Err(format!("{theirs} of {} held", moving.len())) }
    })
    .await;
    // and once the holder lets go, both settle on a disjoint cover
    ctx.release_locks(&blocker, held).await;
    settle(&[m0, m1], timing(Duration::from_secs(60))).await;
    assert!(lock_holders(&ctx.observer, PATH, &blocked).await.values().all(|&s| s != blocker_session));
}

#[tokio::test]
async fn rendezvous_party_covers_the_set_and_a_join_moves_few_items() {
    // given: 10 members dividing 1,000 items with rendezvous hashing
    let ctx = Ctx::new().await;
    let items = ints(1000);
    let mut members = Vec::new();
    for i in 0..10 {
        members
            .push(ctx.member_with(&format!("m{i}"), items.clone(), |b| b.partition_func(Rendezvous::default())).await);
    }
    settle(&members, timing(Duration::from_secs(60))).await;
    assert_disjoint_cover(&ctx.observer, PATH, &members.iter().collect::<Vec<_>>(), &items).await;
    let before = lock_holders(&ctx.observer, PATH, &items).await;
    // when: an 11th joins
    members.push(ctx.member_with("m10", items.clone(), |b| b.partition_func(Rendezvous::default())).await);
    settle(&members, timing(Duration::from_secs(60))).await;
    // then: about 1/11 of the items changed owner (the ideal is 91), not kazoo's ~90%
    assert_disjoint_cover(&ctx.observer, PATH, &members.iter().collect::<Vec<_>>(), &items).await;
    let after = lock_holders(&ctx.observer, PATH, &items).await;
    let moved = before.iter().filter(|(item, session)| after.get(*item) != Some(session)).count();
    assert!(moved <= 110, "{moved} of 1000 items changed owner on one join");
}
