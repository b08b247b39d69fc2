//! `Rebalance::Incremental`: on a join, a graceful leave or a crash, items that stay with their owner never pause and
//! keep their lock node; only moved items go through revoke → release → acquire; no item is ever held twice.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::faults::SafetyChecker;
use common::members::{AbortOnDrop, Member, Recorder, auto_release, ints};
use common::{Ctx, Proxy, timing, wait_for};
use zk_partitioner::{FencingToken, Item, PartitionState, Rebalance, partition::Rendezvous};

const PATH: &str = "/partitioner";

/// The session of the member that crashes. Short, so that its crash is seen soon, but not so short that a loaded
/// machine suspends it before then: the client's read timeout is 2/5 of it, and a suspension revokes every item and
/// takes the locks again with new nodes, which this test would report as an unmoved item's lock node changing (at 1 s,
/// a 400 ms scheduling hiccup on a 2-core machine did exactly that).
const CRASHING_SESSION: Duration = Duration::from_secs(4);

struct Worker {
    member: Member,
    recorder: Recorder,
    _loop: AbortOnDrop,
    _proxy: Option<Proxy>,
}

async fn worker(ctx: &Ctx, name: &str, items: &[Item], via_proxy: bool) -> Worker {
    let configure =
        |b: zk_partitioner::Builder| b.partition_func(Rendezvous::default()).rebalance(Rebalance::Incremental);
    let (member, proxy) = if via_proxy {
        let proxy = Proxy::start(ctx.addr).await;
        let client = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), CRASHING_SESSION).await;
        let builder = zk_partitioner::SetPartitioner::builder(client.clone(), PATH, items.to_vec())
            .identifier(name)
            .time_boundary(common::members::TIME_BOUNDARY);
        let partitioner = configure(builder).build().await.expect("build");
        (Member { client, partitioner }, Some(proxy))
    } else {
        (ctx.member_with(name, items.to_vec(), configure).await, None)
    };
    let recorder = Recorder::start(&member.partitioner);
    let worker_loop = auto_release(&member.partitioner);
    Worker { member, recorder, _loop: worker_loop, _proxy: proxy }
}

/// Who holds what, with the token, as the members report it once settled.
type Owners = BTreeMap<String, (i64, FencingToken)>;

/// Waits until every worker is ACQUIRED over a party of `workers.len()`, the claims cover `items`, and they stay the
/// same for three `time_boundary`s: a departure is handed over at once, and what it also moves between survivors (a
/// load bound's shifts) moves only once the quiet period has passed.
async fn settled(workers: &[&Worker], items: &[Item]) -> Owners {
    loop {
        let owners = cover(workers, items).await;
        tokio::time::sleep(common::members::TIME_BOUNDARY * 3).await;
        if cover(workers, items).await == owners {
            return owners;
        }
    }
}

/// Waits until every worker is ACQUIRED over a party of `workers.len()` and the claims cover `items`.
async fn cover(workers: &[&Worker], items: &[Item]) -> Owners {
    wait_for("the incremental party to settle", timing(Duration::from_secs(30)), || async {
        let mut owners = Owners::new();
        for w in workers {
            let s = w.member.partitioner.snapshot();
            if s.state != PartitionState::Acquired || s.members.len() != workers.len() {
                return Err(format!("{} is {} with {} members", s.member, s.state, s.members.len()));
            }
            for (item, token) in s.items.iter().zip(s.tokens.iter()) {
                owners.insert(item.to_string(), (w.member.session(), *token));
            }
        }
        if owners.len() == items.len() {
            Ok(owners)
        } else {
            Err(format!("{} of {} items claimed", owners.len(), items.len()))
        }
    })
    .await
}

/// Items whose owner did not change kept their lock node (same token) and were listed as processable by their owner
/// in every snapshot it published meanwhile (zero pause). Returns how many items moved.
fn check_unmoved(before: &Owners, after: &Owners, workers: &[&Worker]) -> usize {
    let mut moved = 0;
    for (item, (session, token)) in before {
        match after.get(item) {
            Some((s, t)) if s == session => {
                let owner = workers.iter().find(|w| w.member.session() == *session).expect("owner");
                let snapshots = owner.recorder.snapshots();
                // A suspension revokes everything, whatever the rebalance: a cause this test does not measure.
                let suspended = snapshots.iter().any(|snapshot| snapshot.suspended);
                assert_eq!(
                    t,
                    token,
                    "{item} stayed with its owner but its lock node changed{}",
                    if suspended { " (its owner's connection was suspended meanwhile)" } else { "" }
                );
                for snapshot in snapshots {
                    assert!(
                        snapshot.items.iter().any(|i| i.to_string() == *item),
                        "{item} paused at {owner} in {snapshot:?}",
                        owner = snapshot.member
                    );
                }
            }
            _ => moved += 1,
        }
    }
    moved
}

#[tokio::test]
async fn unmoved_items_never_pause_on_join_leave_and_crash() {
    // given: 4 incremental members with rendezvous hashing over 400 items, and a safety checker sampling throughout
    let ctx = Ctx::new().await;
    let items = ints(400);
    let mut workers = Vec::new();
    for name in ["a", "b", "c"] {
        workers.push(worker(&ctx, name, &items, false).await);
    }
    workers.push(worker(&ctx, "d", &items, true).await); // the one that will crash
    let all: Vec<&Worker> = workers.iter().collect();
    let mut owners = settled(&all, &items).await;
    let checker = SafetyChecker::start(ctx.client().await, &items, &all.iter().map(|w| &w.member).collect::<Vec<_>>());
    let restart_recorders = |workers: &mut Vec<Worker>| {
        for w in workers.iter_mut() {
            w.recorder = Recorder::start(&w.member.partitioner);
        }
    };
    restart_recorders(&mut workers);

    // when: a fifth joins
    workers.push(worker(&ctx, "e", &items, false).await);
    checker.watch(&workers[4].member);
    let all: Vec<&Worker> = workers.iter().collect();
    let after_join = settled(&all, &items).await;
    // then: about 1/5 moved (80 ideal), and nobody else paused
    let moved = check_unmoved(&owners, &after_join, &all);
    eprintln!("join: {moved} of 400 items moved; every other item kept its lock node and never paused");
    assert!((1..=100).contains(&moved), "{moved} items moved on a join");
    owners = after_join;

    // when: one leaves gracefully
    restart_recorders(&mut workers);
    let leaving = workers.remove(1);
    leaving.member.partitioner.finish().await;
    let all: Vec<&Worker> = workers.iter().collect();
    let after_leave = settled(&all, &items).await;
    let moved = check_unmoved(&owners, &after_leave, &all);
    eprintln!("graceful leave: {moved} of 400 items moved");
    assert!((1..=110).contains(&moved), "{moved} items moved on a leave");
    owners = after_leave;

    // when: one crashes (its connection cut for good; its session expires)
    restart_recorders(&mut workers);
    let crashed = workers.remove(2); // "d", behind the proxy
    assert!(crashed.member.partitioner.snapshot().member.starts_with("d-"));
    if let Some(proxy) = &crashed._proxy {
        proxy.cut();
    }
    let all: Vec<&Worker> = workers.iter().collect();
    let after_crash = settled(&all, &items).await;
    let moved = check_unmoved(&owners, &after_crash, &all);
    eprintln!("crash: {moved} of 400 items moved");
    assert!((1..=150).contains(&moved), "{moved} items moved on a crash");

    // and no item was ever held by two members, nor claimed without its lock
    let checks = checker.assert_safe(100).await;
    assert_eq!(checks.violations.len(), 0, "{checks:?}");
}
