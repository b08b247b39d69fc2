//! A lineage consumer: shards that split and merge are read in order, children only once their parents are done.
//!
//! ```text
//! cargo run --example lineage                       # a throwaway ZooKeeper in Docker, removed at the end
//! cargo run --example lineage -- --connect 127.0.0.1:2181
//! ```
//!
//! Two members divide a shared set of shards (incremental rebalancing with `Rendezvous`: a finish moves nothing but
//! the finished shard and its children). An admin splits `shard-1` into `shard-5` and `shard-6`, and merges `shard-2`
//! and `shard-3` into `shard-7`. Each member's consumer processes the shards it is given; once a shard is closed and
//! drained it finishes it with a final checkpoint, and the children whose parents have all finished enter the set.
//! A child's first owner reads its parents' final checkpoints to know where they stopped.

#[path = "common/zookeeper.rs"]
mod zookeeper;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use zk_partitioner::partition::Rendezvous;
use zk_partitioner::shared_set::{Lineage, LineageStatus};
use zk_partitioner::{Item, PartitionState, Rebalance, SetPartitioner, SharedSet};

const PATH: &str = "/shards";
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zookeeper::exit("lineage", run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Some((cluster, _server)) = zookeeper::zookeeper("lineage").await? else { return Ok(()) };
    let shards: Vec<Item> = (1..=4).map(|i| Item::from(format!("shard-{i}"))).collect();
    let mut consumers = Vec::new();
    for name in ["alpha", "bravo"] {
        let client = zk_partitioner::connect(&cluster, SESSION_TIMEOUT).await?;
        let partitioner = SetPartitioner::builder(client, PATH, shards.clone()) // seeds the set if it is new
            .identifier(name)
            .shared_set(true)
            .rebalance(Rebalance::Incremental)
            .partition_func(Rendezvous::default())
            .time_boundary(Duration::from_millis(500))
            .build()
            .await?;
        consumers.push((partitioner.clone(), tokio::spawn(consume(name, partitioner))));
    }

    // The stream reshards: shard-1 splits, shard-2 and shard-3 merge. The children wait for their parents.
    let admin = SharedSet::new(zk_partitioner::connect(&cluster, SESSION_TIMEOUT).await?, PATH)?;
    admin.split("shard-1", ["shard-5", "shard-6"]).await?;
    admin.merge(["shard-2", "shard-3"], "shard-7").await?;
    println!("split shard-1 into shard-5 and shard-6; merged shard-2 and shard-3 into shard-7");

    // Every child enters the set once its parents are finished, and is processed by its new owner.
    let deadline = Instant::now() + Duration::from_secs(30);
    let expected: Vec<Item> = ["shard-4", "shard-5", "shard-6", "shard-7"].map(Item::from).to_vec();
    loop {
        let mut processed: Vec<Item> = consumers.iter().flat_map(|(p, _)| p.snapshot().items.to_vec()).collect();
        processed.sort();
        if processed == expected && admin.read().await?.items == expected {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the children did not start: {}", names(&admin.read().await?.items)).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the consumers' last lines
    println!("\nthe set is now {}; the trees:", names(&expected));
    print_trees(&admin.lineage().await?);
    for (partitioner, consumer) in consumers {
        consumer.abort();
        partitioner.finish().await;
    }
    Ok(())
}

/// One member's consumer: processes the shards it holds, finishes each closed one once drained (here: a second after
/// it was first seen closed), and starts a child where its parents stopped.
async fn consume(name: &'static str, partitioner: SetPartitioner) -> Result<(), zk_partitioner::Error> {
    let mut closed_since: HashMap<Item, Instant> = HashMap::new();
    let mut started: Vec<Item> = Vec::new();
    loop {
        match partitioner.wait_for_acquire(Duration::from_secs(30)).await {
            PartitionState::Acquired => {}
            PartitionState::Release => {
                partitioner.release_set().await?;
                continue;
            }
            PartitionState::Failure => {
                return Err(partitioner.snapshot().cause.unwrap_or(zk_partitioner::Error::Stopped));
            }
            PartitionState::Allocating => continue,
        }
        let snapshot = partitioner.snapshot();
        for shard in snapshot.items.iter() {
            if !started.contains(shard) {
                started.push(shard.clone());
                let resume = resume_point(&partitioner, shard).await?;
                println!("{name}: processing {shard}{resume}");
            }
            if snapshot.is_closed(shard) {
                let since = *closed_since.entry(shard.clone()).or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_secs(1) {
                    // Fenced by this member's lock: Err(CheckpointFenced) if the shard has moved on meanwhile.
                    let ready = partitioner.finish_item(shard, Some(format!("{shard} done").as_bytes())).await?;
                    println!("{name}: finished {shard}; ready now: [{}]", names(&ready));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where a child starts: its parents' final checkpoints (kept until `SharedSet::retire`).
async fn resume_point(partitioner: &SetPartitioner, shard: &Item) -> Result<String, zk_partitioner::Error> {
    let Some(set) = partitioner.shared_set() else { return Ok(String::new()) };
    let Some(lineage) = set.lineage().await?.get(shard).cloned() else { return Ok(String::new()) };
    let mut from = Vec::new();
    for parent in &lineage.parents {
        if let Some(checkpoint) = partitioner.load_checkpoint(parent).await? {
            from.push(format!("{parent}: {:?}", String::from_utf8_lossy(&checkpoint.data)));
        }
    }
    Ok(if from.is_empty() { String::new() } else { format!(", after {}", from.join(", ")) })
}

fn print_trees(lineage: &Lineage) {
    for root in lineage.roots() {
        let Some(node) = lineage.get(root) else { continue };
        let status = match &node.status {
            LineageStatus::Finished { by, .. } => format!("finished by {by}"),
            LineageStatus::Waiting { on } => format!("waiting on {}", names(on)),
            other => format!("{other:?}"),
        };
        println!("  {root} ({status}) -> [{}]", names(&node.children));
    }
}

fn names(items: &[Item]) -> String {
    items.iter().map(Item::to_string).collect::<Vec<_>>().join(", ")
}
