//! Fencing tokens: each acquired item carries its lock node's creation zxid, which strictly increases every time the
//! item changes hands, across releases, joins and session expiry.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::members::{Member, ints, settle};
use common::{Ctx, timing};
use zk_partitioner::{FencingToken, PartitionState};
use zk_partitioner_testing::lock_contenders;

const PATH: &str = "/partitioner";

/// Every item's token as the members report it, checked against the lock node ZooKeeper holds for it.
async fn tokens(ctx: &Ctx, members: &[&Member]) -> BTreeMap<String, FencingToken> {
    let mut all = BTreeMap::new();
    for member in members {
        let snapshot = member.partitioner.snapshot();
        assert_eq!(snapshot.state, PartitionState::Acquired);
        assert_eq!(snapshot.items.len(), snapshot.tokens.len());
        for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
            assert_eq!(member.partitioner.snapshot().token(item), Some(*token));
            // The token is the czxid of the lowest contender, owned by this member's session.
            let dir = format!("{PATH}/locks/{item}");
            let children = ctx.observer.list_children(&dir).await.unwrap();
            let stat =
                ctx.observer.check_stat(&format!("{dir}/{}", lock_contenders(&children)[0])).await.unwrap().unwrap();
            assert_eq!(stat.ephemeral_owner, member.session(), "{item}");
            assert_eq!(token.get(), stat.czxid, "{item}: token is not the lock node's czxid");
            all.insert(item.to_string(), *token);
        }
    }
    all
}

fn assert_all_increased(before: &BTreeMap<String, FencingToken>, after: &BTreeMap<String, FencingToken>) {
    assert_eq!(before.len(), after.len());
    for (item, old) in before {
        assert!(after[item] > *old, "{item}: token went from {old} to {}", after[item]);
    }
}

#[tokio::test]
async fn tokens_increase_across_hand_offs_and_expiry() {
    // given: one member holding everything
    let ctx = Ctx::new().await;
    let items = ints(600); // more than one batch
    let (m0, proxy) = ctx.member_via_proxy("0", items.clone(), Duration::from_secs(1)).await;
    m0.wait_items(&items, timing(Duration::from_secs(10))).await;
    let first = tokens(&ctx, &[&m0]).await;
    assert!(first.values().all(|t| t.get() > 0));
    assert_eq!(m0.partitioner.snapshot().token(&zk_partitioner::Item::from(100_000)), None);

    // when: a member joins and half the items change hands
    let m1 = ctx.member("1", items.clone()).await;
    let pair = [m0, m1];
    settle(&pair, timing(Duration::from_secs(20))).await;
    let second = tokens(&ctx, &[&pair[0], &pair[1]]).await;
    assert_all_increased(&first, &second);

    // when: m0's session expires and m1 takes everything
    let [m0, m1] = pair;
    common::expire(&m0.client, &proxy).await;
    m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    assert!(m0.partitioner.snapshot().token(&items[0]).is_none(), "no token outside ACQUIRED");
    let survivors = [m1];
    settle(&survivors, timing(Duration::from_secs(20))).await;
    let third = tokens(&ctx, &[&survivors[0]]).await;
    assert_all_increased(&second, &third);

    // and a release_set round trip hands out new, larger tokens too
    survivors[0].partitioner.release_set().await.unwrap();
    survivors[0].wait_items(&items, timing(Duration::from_secs(10))).await;
    let fourth = tokens(&ctx, &[&survivors[0]]).await;
    assert_all_increased(&third, &fourth);
}
