//! The recipe at work: members join and leave a party over a dozen items, and the assignment follows.
//!
//! ```text
//! cargo run --example demo                          # starts ZooKeeper in Docker from $ZOOKEEPER_IMAGE
//! cargo run --example demo -- --connect 127.0.0.1:2181
//! ```
//!
//! Each member is a separate ZooKeeper session running kazoo's worker loop (release when told to). The demo prints
//! who owns what each time the party settles, and checks that the owners form a disjoint cover of the items.

#[allow(unused_imports)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Item, PartitionState, SetPartitioner};

const TIME_BOUNDARY: Duration = Duration::from_millis(500);

struct Member {
    name: &'static str,
    partitioner: SetPartitioner,
    _worker: common::members::AbortOnDrop,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let connect = match args.as_slice() {
        [] => {
            println!("starting ZooKeeper in Docker (image from $ZOOKEEPER_IMAGE) ...");
            common::server().await.connect_string()
        }
        [flag, endpoint] if flag == "--connect" => endpoint.clone(),
        _ => return Err("usage: demo [--connect HOST:PORT]".into()),
    };
    let namespace = common::namespace(&connect).await;
    let cluster = format!("{connect}{namespace}");
    println!("ZooKeeper at {connect}; partitioning 12 items under {namespace}/queues\n");
    let items: Vec<Item> = (0..12).map(|i| Item::from(format!("queue-{i:02}"))).collect();
    let started = Instant::now();

    let mut members = Vec::new();
    for name in ["alpha", "bravo", "charlie"] {
        members.push(join(&cluster, name, &items).await?);
        settle(&members, &items, started, &format!("{name} joined")).await?;
    }
    let leaving = members.remove(1);
    leaving.partitioner.finish().await;
    settle(&members, &items, started, &format!("{} left (finish)", leaving.name)).await?;
    members.push(join(&cluster, "delta", &items).await?);
    settle(&members, &items, started, "delta joined").await?;
    for member in &members {
        member.partitioner.finish().await;
    }
    let observer = Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&cluster).await?;
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
    let client = Client::connector().with_session_timeout(Duration::from_secs(6)).connect(cluster).await?;
    let partitioner = SetPartitioner::builder(client, "/queues", items.to_vec())
        .identifier(name)
        .time_boundary(TIME_BOUNDARY)
        .build()
        .await?;
    let worker = common::members::auto_release(&partitioner);
    Ok(Member { name, partitioner, _worker: worker })
}

/// Waits until every member holds its share of the same party, then prints the assignment.
async fn settle(members: &[Member], items: &[Item], started: Instant, event: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snapshots: Vec<_> = members.iter().map(|m| m.partitioner.snapshot()).collect();
        if snapshots.iter().all(|s| s.state == PartitionState::Acquired && s.members.len() == members.len()) {
            println!("[{:>5.1}s] {event}", started.elapsed().as_secs_f64());
            let mut owned = BTreeSet::new();
            for (member, snapshot) in members.iter().zip(&snapshots) {
                let list: Vec<String> = snapshot.items.iter().map(Item::to_string).collect();
                println!("          {:<8} {:<22} {}", member.name, snapshot.member, list.join(" "));
                for item in snapshot.items.iter() {
                    if !owned.insert(item.clone()) {
                        return Err(format!("{item} is owned twice"));
                    }
                }
            }
            if owned.len() != items.len() {
                return Err(format!("only {} of {} items are owned", owned.len(), items.len()));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the party did not settle after {event}: {snapshots:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
