//! The partitioner's metrics, as an application's recorder sees them.
//!
//! ```text
//! cargo run --example metrics                          # starts ZooKeeper in Docker from $ZOOKEEPER_IMAGE
//! cargo run --example metrics -- --connect 127.0.0.1:2181
//! ```
//!
//! It installs metrics-util's in-memory `DebuggingRecorder` as the global recorder (a real application installs a
//! Prometheus or StatsD exporter instead; the partitioner does not care which), runs three members over a dozen
//! items (they join one after the other, then one leaves), and prints every metric recorded, with its labels, unit
//! and help text. The names are documented in `zk_partitioner::metrics`.

#[allow(unused_imports)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use clap::Parser;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use zk_partitioner::{Item, SetPartitioner};

/// Runs a few members and prints the metrics they record.
#[derive(Parser, Debug)]
#[command(name = "metrics")]
struct Args {
    /// ZooKeeper connect string (HOST:PORT[,HOST:PORT...]) [default: a ZooKeeper started in Docker from
    /// $ZOOKEEPER_IMAGE]
    #[arg(long)]
    connect: Option<String>,
}

const PATH: &str = "/queues";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).map_err(|err| err.to_string())?;
    zk_partitioner::metrics::register_descriptions();

    let connect = match args.connect {
        Some(connect) => connect,
        None => {
            println!("starting ZooKeeper in Docker (image from $ZOOKEEPER_IMAGE) ...");
            common::server().await.connect_string()
        }
    };
    let namespace = common::namespace(&connect).await;
    let cluster = format!("{connect}{namespace}");
    let items: Vec<Item> = (0..12).map(|i| Item::from(format!("queue-{i:02}"))).collect();
    println!(
        "partitioning 12 items under {namespace}{PATH}: three members join one after the other, then one leaves\n"
    );

    let mut members = Vec::new();
    for name in ["alpha", "bravo", "charlie"] {
        let client = common::connect(&cluster, Duration::from_secs(6)).await;
        let partitioner = SetPartitioner::builder(client, PATH, items.clone())
            .identifier(name)
            .time_boundary(Duration::from_millis(300))
            .build()
            .await?;
        let worker = common::members::auto_release(&partitioner);
        members.push((partitioner, worker));
        settle(&members).await?;
    }
    let (leaving, _worker) = members.remove(0);
    leaving.finish().await;
    settle(&members).await?;

    println!("{:<44} {:<42} VALUE", "METRIC", "LABELS");
    let mut rows = snapshotter.snapshot().into_vec();
    rows.sort_by(|a, b| a.0.key().name().cmp(b.0.key().name()));
    for (key, unit, description, value) in rows {
        let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let value = match value {
            DebugValue::Counter(count) => count.to_string(),
            DebugValue::Gauge(value) => value.to_string(),
            DebugValue::Histogram(samples) => {
                let samples: Vec<String> = samples.iter().map(|s| format!("{:.3}", s.into_inner())).collect();
                format!("[{}]", samples.join(", "))
            }
        };
        let unit = unit.map(|unit| format!(" {}", unit.as_str())).unwrap_or_default();
        println!("{:<44} {:<42} {value}{unit}", key.key().name(), labels.join(","));
        if let Some(description) = description {
            println!("{:<44} {description}", "");
        }
    }
    for (member, _) in &members {
        member.finish().await;
    }
    Ok(())
}

/// Waits until every member is ACQUIRED over a party of all of them.
async fn settle(members: &[(SetPartitioner, common::members::AbortOnDrop)]) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = members.iter().all(|(p, _)| p.is_acquired() && p.snapshot().members.len() == members.len());
        if done {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the members did not settle within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
