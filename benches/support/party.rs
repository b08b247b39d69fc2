//! A party in this process, for the benchmarks that run one against a real ZooKeeper: sessions, the worker loop's
//! release, who owns what, and waiting for the party to settle.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{FencingToken, Item, PartitionState, SetPartitioner};

/// A session of its own (20 s: a loaded machine must not lose members to the benchmark's own CPU).
pub async fn connect(endpoint: &str) -> Result<Client, String> {
    Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(endpoint)
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))
}

/// The worker loop's part the benchmarks need: stop what is revoked at once.
pub fn release_when_asked(member: &SetPartitioner) {
    let worker = member.clone();
    tokio::spawn(async move {
        let mut changes = worker.subscribe();
        loop {
            if changes.borrow_and_update().state == PartitionState::Release {
                let _ = worker.release_set().await;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Who owns each item: the member's index and its fencing token.
pub fn owners(members: &[SetPartitioner]) -> BTreeMap<Item, (usize, FencingToken)> {
    let mut owners = BTreeMap::new();
    for (index, member) in members.iter().enumerate() {
        let snapshot = member.snapshot();
        for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
            owners.insert(item.clone(), (index, *token));
        }
    }
    owners
}

/// Waits until every member is ACQUIRED (at `version` of the shared set, if given) with a disjoint cover of `items`.
pub async fn converged(
    members: &[SetPartitioner],
    version: Option<u64>,
    items: &[Item],
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let expected: BTreeSet<&Item> = items.iter().collect();
    loop {
        let ready = members.iter().all(|m| {
            let s = m.snapshot();
            s.state == PartitionState::Acquired
                && version.is_none_or(|v| s.set_version == Some(v))
                && s.members.len() == members.len()
        });
        if ready {
            let mut listed = BTreeSet::new();
            let disjoint = members.iter().all(|m| m.snapshot().items.iter().all(|item| listed.insert(item.clone())));
            if disjoint && listed.iter().collect::<BTreeSet<_>>() == expected {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no convergence at version {version:?} within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
