//! Rust and kazoo (Python, PyPI `kazoo` 2.11) workers in one party: they must agree on the assignment and reach a
//! disjoint cover, checked by reading the lock nodes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::kazoo::{KazooWorker, require_kazoo};
use common::members::{Member, TIME_BOUNDARY, auto_release, ints, lock_holders};
use common::{Ctx, timing, wait_for};
use zk_partitioner::{
    Item, PartitionState,
    partition::{KazooStride, PartitionFn},
};

const PATH: &str = "/partitioner";

/// Waits until every worker, Rust or kazoo, is ACQUIRED with the share the default function gives it over the
/// current party, every claim is backed by a lock node of the claimant's session, and the claims cover every item
/// exactly once.
async fn wait_for_mixed_cover(ctx: &Ctx, rust: &[&Member], kazoo: &[&KazooWorker], items: &[Item]) {
    let expected_members = rust.len() + kazoo.len();
    wait_for("a disjoint cover agreed by Rust and kazoo workers", timing(Duration::from_secs(30)), || async {
        let holders = lock_holders(&ctx.observer, PATH, items).await;
        let mut claims: BTreeMap<String, i64> = BTreeMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut problems = Vec::new();
        for member in rust {
            let snapshot = member.partitioner.snapshot();
            if snapshot.state != PartitionState::Acquired || snapshot.members.len() != expected_members {
                problems.push(format!(
                    "{} is {} with {} members",
                    snapshot.member,
                    snapshot.state,
                    snapshot.members.len()
                ));
            }
            names.push(snapshot.member.to_string());
            for item in snapshot.items.iter() {
                if claims.insert(item.to_string(), member.session()).is_some() {
                    problems.push(format!("{item} claimed twice"));
                }
            }
        }
        for worker in kazoo {
            let view = worker.view();
            if view.state != "ACQUIRED" {
                problems.push(format!("{} is {}", worker.identifier, view.state));
            }
            names.push(worker.identifier.clone());
            for item in view.items {
                if claims.insert(item.clone(), view.session).is_some() {
                    problems.push(format!("{item} claimed twice"));
                }
            }
        }
        if claims != holders {
            problems.push(format!("claims {claims:?} differ from lock holders {holders:?}"));
        }
        let covered: BTreeSet<&String> = claims.keys().collect();
        if covered.len() != items.len() {
            problems.push(format!("{} of {} items claimed", covered.len(), items.len()));
        }
        // Both sides computed kazoo's stride over the same sorted names.
        for member in rust {
            let snapshot = member.partitioner.snapshot();
            let expected = KazooStride.partition(&snapshot.member, &names, items);
            if snapshot.state == PartitionState::Acquired && *snapshot.items != *expected {
                problems.push(format!("{} holds {:?}, stride says {expected:?}", snapshot.member, snapshot.items));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    })
    .await;
}

#[tokio::test]
async fn rust_and_kazoo_workers_share_a_party() {
    require_kazoo();
    // given: 12 integer items (sorted numerically by both sides: 2 < 10), two Rust and two kazoo workers
    let ctx = Ctx::new().await;
    let items = ints(12);
    let rust_a = ctx.member("rs-a", items.clone()).await;
    let kazoo_1 = KazooWorker::start(&ctx, PATH, "kz-1", &items, TIME_BOUNDARY).await;
    let rust_b = ctx.member("rs-b", items.clone()).await;
    let kazoo_2 = KazooWorker::start(&ctx, PATH, "kz-2", &items, TIME_BOUNDARY).await;
    let _loops = [auto_release(&rust_a.partitioner), auto_release(&rust_b.partitioner)];
    // then
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1, &kazoo_2], &items).await;

    // when a kazoo worker leaves, the other three re-divide its items
    kazoo_2.stop().await;
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1], &items).await;

    // and when a Rust worker leaves too
    rust_b.partitioner.finish().await;
    wait_for_mixed_cover(&ctx, &[&rust_a], &[&kazoo_1], &items).await;
    kazoo_1.stop().await;
}

/// Incremental Rust members (keeping unmoved items) in a party with eager kazoo workers: exclusion comes from the
/// locks, and every member computes kazoo's stride, so the mix converges like any other party.
#[tokio::test]
async fn incremental_rust_workers_mix_with_kazoo() {
    require_kazoo();
    let ctx = Ctx::new().await;
    let items = ints(12);
    let incremental = |b: zk_partitioner::Builder| b.rebalance(zk_partitioner::Rebalance::Incremental);
    let rust_a = ctx.member_with("rs-a", items.clone(), incremental).await;
    let kazoo_1 = KazooWorker::start(&ctx, PATH, "kz-1", &items, TIME_BOUNDARY).await;
    let rust_b = ctx.member_with("rs-b", items.clone(), incremental).await;
    let kazoo_2 = KazooWorker::start(&ctx, PATH, "kz-2", &items, TIME_BOUNDARY).await;
    let _loops = [auto_release(&rust_a.partitioner), auto_release(&rust_b.partitioner)];
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1, &kazoo_2], &items).await;

    kazoo_2.stop().await;
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1], &items).await;
    rust_b.partitioner.finish().await;
    wait_for_mixed_cover(&ctx, &[&rust_a], &[&kazoo_1], &items).await;
    kazoo_1.stop().await;
}
