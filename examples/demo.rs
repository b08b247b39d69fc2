//! The recipe at work: members join and leave a party over a dozen items, and the assignment follows.
//!
//! ```text
//! cargo run --example demo                          # starts a throwaway ZooKeeper in Docker, removed at the end
//! cargo run --example demo -- --connect 127.0.0.1:2181
//! ```
//!
//! Without `--connect` it starts ZooKeeper in a container with the crate's test kit (`zk_partitioner_testing`):
//! from `ZOOKEEPER_IMAGE` if set, else from the official `zookeeper:3.9` image or the locally built
//! `zk-partitioner/zookeeper:3.8`, pulling or building one if neither is present (once; progress on stderr).
//!
//! Each member is a separate ZooKeeper session running kazoo's worker loop (release when told to). The demo prints
//! who owns what each time the party settles, and checks that the owners form a disjoint cover of the items.

use std::time::{Duration, Instant};

#[path = "common/zookeeper.rs"]
mod zookeeper;

use zk_partitioner::{Item, PartitionState, SetPartitioner};
use zk_partitioner_testing as testing;

const TIME_BOUNDARY: Duration = Duration::from_millis(500);
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

struct Member {
    name: &'static str,
    partitioner: SetPartitioner,
    worker: tokio::task::JoinHandle<()>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zookeeper::exit("demo", demo().await)
}

async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    // The container (without --connect) is removed when `_server` drops, at the end of this function.
    let Some((cluster, _server)) = zookeeper::zookeeper("demo").await? else { return Ok(()) };
    println!("ZooKeeper at {cluster}; partitioning 12 items under /queues\n");
    let items: Vec<Item> = (0..12).map(|i| Item::from(format!("queue-{i:02}"))).collect();
    let started = Instant::now();

    let mut members = Vec::new();
    for name in ["alpha", "bravo", "charlie"] {
        members.push(join(&cluster, name, &items).await?);
        settle(&members, &items, started, &format!("{name} joined")).await?;
    }
    let leaving = members.remove(1);
    leaving.partitioner.finish().await;
    leaving.worker.abort();
    settle(&members, &items, started, &format!("{} left (finish)", leaving.name)).await?;
    members.push(join(&cluster, "delta", &items).await?);
    settle(&members, &items, started, "delta joined").await?;
    for member in &members {
        member.partitioner.finish().await;
        member.worker.abort();
    }
    let observer = zk_partitioner::connect(&cluster, SESSION_TIMEOUT).await?;
    let left = observer.list_children("/queues/party").await?.len();
    let mut locks = 0;
    for item in &items {
        locks += observer.list_children(&format!("/queues/locks/{item}")).await?.len();
    }
    println!("\nall members finished: {left} party nodes and {locks} lock nodes left");
    if left + locks > 0 {
        return Err("finish() left nodes behind".into());
    }
    Ok(())
}

async fn join(cluster: &str, name: &'static str, items: &[Item]) -> Result<Member, Box<dyn std::error::Error>> {
    let client = zk_partitioner::connect(cluster, SESSION_TIMEOUT).await?;
    let partitioner = SetPartitioner::builder(client, "/queues", items.to_vec())
        .identifier(name)
        .time_boundary(TIME_BOUNDARY)
        .build()
        .await?;
    let worker = tokio::spawn(worker_loop(partitioner.clone()));
    Ok(Member { name, partitioner, worker })
}

/// kazoo's worker loop, without the work: release when told to, until the partitioner fails or finishes.
async fn worker_loop(partitioner: SetPartitioner) {
    let mut changes = partitioner.subscribe();
    loop {
        let state = changes.borrow_and_update().state;
        match state {
            PartitionState::Release => {
                let _ = partitioner.release_set().await;
            }
            PartitionState::Failure => return,
            PartitionState::Acquired | PartitionState::Allocating => {}
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Waits until every member holds its share of the same party (the test kit's `check_stable`), then prints the
/// assignment.
async fn settle(members: &[Member], items: &[Item], started: Instant, event: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snapshots: Vec<_> = members.iter().map(|m| m.partitioner.snapshot()).collect();
        match testing::check_stable(&snapshots, items) {
            Ok(()) => {
                println!("[{:>5.1}s] {event}", started.elapsed().as_secs_f64());
                for (member, snapshot) in members.iter().zip(&snapshots) {
                    let list: Vec<String> = snapshot.items.iter().map(Item::to_string).collect();
                    println!("          {:<8} {:<22} {}", member.name, snapshot.member, list.join(" "));
                }
                return Ok(());
            }
            Err(not_yet) if Instant::now() > deadline => {
                return Err(format!("the party did not settle after {event}: {not_yet}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
