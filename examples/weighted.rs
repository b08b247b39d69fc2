//! A weighted party: members of different sizes carry their share of items of different weights.
//!
//! ```text
//! cargo run --example weighted                      # a throwaway ZooKeeper in Docker, removed at the end
//! cargo run --example weighted -- --connect 127.0.0.1:2181
//! ```
//!
//! Three members of capacities 1, 1 and 2 divide 40 tenants whose weights live in the shared set: two tenants are
//! hot. Each member prints its load (its weight against its ideal share); then a tenant gets hotter and the party
//! follows, moving a few tenants and keeping the rest where they are (the sticky placement).

#[path = "common/zookeeper.rs"]
mod zookeeper;

use std::time::{Duration, Instant};

use zk_partitioner::weighted::{Weight, WeightedRendezvous};
use zk_partitioner::{Item, PartitionState, Rebalance, SetPartitioner, SharedSet};

const PATH: &str = "/tenants";
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zookeeper::exit("weighted", run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Some((cluster, _server)) = zookeeper::zookeeper("weighted").await? else { return Ok(()) };
    let tenants: Vec<Item> = (0..40).map(|i| Item::from(format!("tenant-{i:02}"))).collect();
    let admin = SharedSet::new(zk_partitioner::connect(&cluster, SESSION_TIMEOUT).await?, PATH)?;
    admin.create_if_missing(tenants.clone()).await?;
    // One kind of weight for the whole set (plain numbers); a tenant without one weighs 1.
    admin.set_weights([("tenant-00", Weight::new(10)), ("tenant-01", Weight::new(6))]).await?;

    let mut members = Vec::new();
    for (name, capacity) in [("small-a", 1), ("small-b", 1), ("large", 2)] {
        let client = zk_partitioner::connect(&cluster, SESSION_TIMEOUT).await?;
        let partitioner = SetPartitioner::builder(client, PATH, Vec::<Item>::new()) // the set exists: it wins
            .identifier(name)
            .shared_set(true)
            .rebalance(Rebalance::Incremental)
            .partition_func(WeightedRendezvous::default().sticky())
            .capacity(capacity)
            .time_boundary(Duration::from_millis(500))
            .build()
            .await?;
        tokio::spawn(release_when_told(partitioner.clone()));
        members.push((name, partitioner));
    }
    let before = settled(&members, &admin).await?;

    admin.set_weights([("tenant-02", Weight::new(8))]).await?;
    println!("\ntenant-02 now weighs 8:");
    let after = settled(&members, &admin).await?;
    let moved: Vec<String> = before
        .iter()
        .filter(|(item, owner)| after.get(item) != Some(owner))
        .map(|(item, _)| item.to_string())
        .collect();
    println!("moved {} of {} tenants: {}", moved.len(), before.len(), moved.join(", "));
    for (_, partitioner) in members {
        partitioner.finish().await;
    }
    Ok(())
}

/// kazoo's worker loop without the work: release when told to.
async fn release_when_told(partitioner: SetPartitioner) {
    let mut changes = partitioner.subscribe();
    loop {
        if changes.borrow_and_update().state == PartitionState::Release {
            let _ = partitioner.release_set().await;
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Waits until every member is ACQUIRED at the set's current version, prints each one's load, and returns who owns
/// which tenant.
async fn settled(
    members: &[(&str, SetPartitioner)],
    admin: &SharedSet,
) -> Result<std::collections::BTreeMap<Item, String>, Box<dyn std::error::Error>> {
    let version = admin.read().await?.version;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snapshots: Vec<_> = members.iter().map(|(_, p)| p.snapshot()).collect();
        let done = snapshots.iter().all(|s| {
            s.state == PartitionState::Acquired && s.set_version == Some(version) && s.members.len() == members.len()
        });
        if done {
            let mut owners = std::collections::BTreeMap::new();
            for ((name, _), snapshot) in members.iter().zip(&snapshots) {
                let load = snapshot.load.as_ref().map(|l| l.to_string()).unwrap_or_default();
                println!("  {name:<8} {:>2} tenants, {load}", snapshot.items.len());
                owners.extend(snapshot.items.iter().map(|item| (item.clone(), name.to_string())));
            }
            return Ok(owners);
        }
        if Instant::now() > deadline {
            return Err("the party did not settle".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
