//! The progress benchmark (BENCHMARKS.md, "Exporting and importing progress"): a shared set of N items (default
//! 100,000) with lineage (S parents split into two children each) and a checkpoint of B bytes (default 100) for every
//! item; then, R times: the party's progress exported as one token ([`SharedSet::export`]), imported into an empty
//! path (a move) and imported back over the original (a restore). Measured: each one's time and requests (`mntr`'s
//! `zk_packets_received`), the token's size; against the same nodes read one by one (one request in flight, as a
//! script of `get` calls does), and a sample of them created one by one. Every import is checked: the path's own
//! export afterwards holds the token's items, lineage and checkpoints.
//!
//! ```text
//! cargo bench --bench progress -- --connect HOST:PORT [--items 100000] [--splits 1000] [--checkpoint-bytes 100]
//!     [--runs 3] [--write-sample 10000] [--path /bench/progress]
//! ```
//!
//! JSON lines on stdout: one per run, then one for the one-by-one baseline. `bash bench/progress.sh` starts a
//! ZooKeeper, prints the table of BENCHMARKS.md and draws its plot. Not a criterion benchmark (`harness = false`):
//! it needs a ZooKeeper server.

mod support;

use std::process::ExitCode;
use std::time::Instant;

use futures::StreamExt;
use support::mntr;
use support::party::connect;
use zk_partitioner::shared_set::{ImportMode, Progress};
use zk_partitioner::zookeeper_client::{self, Acls, Client, CreateMode};
use zk_partitioner::{Item, SharedSet};

struct Args {
    connect: String,
    items: i64,
    splits: i64,
    checkpoint_bytes: usize,
    runs: usize,
    write_sample: usize,
    path: String,
}

fn parse_args() -> Result<Option<Args>, String> {
    // `cargo bench` appends `--bench`; a bare `cargo bench` names no server: nothing to do.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test").peekable();
    if args.peek().is_none() {
        return Ok(None);
    }
    let mut parsed = Args {
        connect: String::new(),
        items: 100_000,
        splits: 1_000,
        checkpoint_bytes: 100,
        runs: 3,
        write_sample: 10_000,
        path: "/bench/progress".into(),
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag}: {v:?} is not a whole number"));
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--items" => parsed.items = number(&value)? as i64,
            "--splits" => parsed.splits = number(&value)? as i64,
            "--checkpoint-bytes" => parsed.checkpoint_bytes = number(&value)? as usize,
            "--runs" => parsed.runs = number(&value)? as usize,
            "--write-sample" => parsed.write_sample = number(&value)? as usize,
            "--path" => parsed.path = value,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.connect.is_empty() {
        return Err("--connect HOST:PORT is required".into());
    }
    if parsed.items == 0 || parsed.runs == 0 || parsed.splits > parsed.items {
        return Err("--items and --runs must be positive, --splits at most --items".into());
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    support::main_of("progress", parse_args(), |args| async move { run(&args).await })
}

/// What a ZooKeeper request count reads (`mntr`'s packets received since `before`, less the `mntr` itself).
fn requests_since(args: &Args, before: &std::collections::HashMap<String, String>) -> Result<i64, String> {
    Ok(support::counter_delta(before, &mntr(&args.connect)?, "zk_packets_received") - 1)
}

/// A checkpoint node's data as the crate writes it (the guide's format: `zkp-checkpoint 1 <token> <writer>\n`, then
/// the bytes).
fn checkpoint_blob(item: &str, bytes: usize) -> Vec<u8> {
    let mut blob = format!("zkp-checkpoint 1 {} bench-writer\n", 4_294_967_296u64 + item.len() as u64).into_bytes();
    blob.extend(item.bytes().cycle().take(bytes));
    blob
}

/// Creates `paths` (persistent, with `data`), 1,000 in flight.
async fn create_all(client: &Client, nodes: Vec<(String, Vec<u8>)>) -> Result<(), String> {
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let mut made = futures::stream::iter(nodes.iter().map(|(path, data)| client.create(path, data, &persistent)))
        .buffer_unordered(1000);
    while let Some(result) = made.next().await {
        match result {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(err) => return Err(format!("create: {err}")),
        }
    }
    Ok(())
}

/// The token's contents an import must reproduce (the read position aside).
fn contents(p: &Progress) -> (String, &[String], String, String) {
    let lineage = serde_json::to_string(&p.lineage).unwrap_or_default();
    let checkpoints: Vec<(&String, &String)> = p.checkpoints.iter().map(|(k, v)| (k, &v.data)).collect();
    (p.kind.clone(), &p.items, lineage, format!("{checkpoints:?}"))
}

async fn run(args: &Args) -> Result<(), String> {
    let client = connect(&args.connect).await?;
    let base = format!("{}-{}-{}", args.path, args.items, std::process::id());
    let original = format!("{base}/original");
    let set = SharedSet::new(client.clone(), original.clone()).map_err(|e| e.to_string())?;

    // The party's progress, made as a party makes it (not measured): the set, S splits, a checkpoint per item.
    let started = Instant::now();
    set.create_if_missing((0..args.items).map(Item::from)).await.map_err(|e| format!("seed the set: {e}"))?;
    let child = |parent: i64, k: i64| Item::from(args.items + 2 * parent + k);
    for parent in 0..args.splits {
        set.split(parent, [child(parent, 0), child(parent, 1)]).await.map_err(|e| format!("split {parent}: {e}"))?;
    }
    let items = set.read().await.map_err(|e| e.to_string())?.items;
    let checkpoints = format!("{original}/checkpoints");
    create_all(&client, vec![(checkpoints.clone(), Vec::new())]).await?;
    let nodes: Vec<(String, Vec<u8>)> = items
        .iter()
        .map(|item| {
            let name = item.node_name();
            (format!("{checkpoints}/{name}"), checkpoint_blob(&name, args.checkpoint_bytes))
        })
        .collect();
    create_all(&client, nodes).await?;
    eprintln!(
        "[progress] {} items, {} splits, checkpoints written in {:.1?}",
        items.len(),
        args.splits,
        started.elapsed()
    );

    for run in 1..=args.runs {
        // Export.
        let before = mntr(&args.connect)?;
        let started = Instant::now();
        let progress = set.export().await.map_err(|e| format!("export: {e}"))?;
        let export_s = started.elapsed().as_secs_f64();
        let export_requests = requests_since(args, &before)?;
        let token = progress.to_json();
        if progress.checkpoints.len() != items.len() {
            return Err(format!("the export has {} checkpoints of {}", progress.checkpoints.len(), items.len()));
        }

        // Import into an empty path: a move.
        let moved = SharedSet::new(client.clone(), format!("{base}/moved-{run}")).map_err(|e| e.to_string())?;
        let parsed = Progress::from_json(&token).map_err(|e| format!("the token does not read back: {e}"))?;
        let before = mntr(&args.connect)?;
        let started = Instant::now();
        let imported = moved.import(&parsed, ImportMode::Restore).await.map_err(|e| format!("import (move): {e}"))?;
        let move_s = started.elapsed().as_secs_f64();
        let move_requests = requests_since(args, &before)?;
        let again = moved.export().await.map_err(|e| format!("export of the moved path: {e}"))?;
        if contents(&again) != contents(&progress) {
            return Err("the moved path's progress differs from the token".into());
        }

        // Import over the original: a restore, replacing its set, lineage and checkpoints.
        let before = mntr(&args.connect)?;
        let started = Instant::now();
        set.import(&parsed, ImportMode::Restore).await.map_err(|e| format!("import (restore): {e}"))?;
        let restore_s = started.elapsed().as_secs_f64();
        let restore_requests = requests_since(args, &before)?;
        let again = set.export().await.map_err(|e| format!("export after the restore: {e}"))?;
        if contents(&again) != contents(&progress) {
            return Err("the restored path's progress differs from the token".into());
        }
        println!(
            "{{\"kind\":\"run\",\"run\":{run},\"items\":{},\"lineage\":{},\"checkpoints\":{},\"checkpoint_bytes\":{},\
             \"token_bytes\":{},\"export_s\":{export_s:.4},\"export_requests\":{export_requests},\
             \"move_s\":{move_s:.4},\"move_requests\":{move_requests},\"restore_s\":{restore_s:.4},\
             \"restore_requests\":{restore_requests},\"imported_checkpoints\":{}}}",
            progress.items.len(),
            progress.lineage.len(),
            progress.checkpoints.len(),
            args.checkpoint_bytes,
            token.len(),
            imported.checkpoints,
        );
    }

    // The baseline: the same nodes read one by one (the set's items listed, then each lineage node and each checkpoint
    // read, one request in flight), and a sample of checkpoint nodes created one by one.
    let progress = set.export().await.map_err(|e| format!("export: {e}"))?;
    let in_force = String::from_utf8_lossy(&client.get_data(&checkpoints).await.map_err(|e| e.to_string())?.0)
        .trim()
        .strip_prefix("zkp-checkpoints 1 generation=")
        .map(|tag| format!("{original}/checkpoint-generations/{tag}"))
        .unwrap_or_else(|| checkpoints.clone());
    let before = mntr(&args.connect)?;
    let started = Instant::now();
    let listed = client.list_children(&format!("{original}/items")).await.map_err(|e| e.to_string())?;
    let mut bytes = 0usize;
    for name in progress.lineage.keys() {
        bytes += client.get_data(&format!("{original}/item-lineage/{name}")).await.map_err(|e| e.to_string())?.0.len();
    }
    for name in progress.checkpoints.keys() {
        bytes += client.get_data(&format!("{in_force}/{name}")).await.map_err(|e| e.to_string())?.0.len();
    }
    let read_s = started.elapsed().as_secs_f64();
    let read_requests = requests_since(args, &before)?;
    let sample = format!("{base}/one-by-one");
    create_all(&client, vec![(sample.clone(), Vec::new())]).await?;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let names: Vec<&String> = progress.checkpoints.keys().take(args.write_sample).collect();
    let started = Instant::now();
    for name in &names {
        client
            .create(&format!("{sample}/{name}"), &checkpoint_blob(name, args.checkpoint_bytes), &persistent)
            .await
            .map_err(|e| format!("create one by one: {e}"))?;
    }
    let write_s = started.elapsed().as_secs_f64();
    println!(
        "{{\"kind\":\"one-by-one\",\"items\":{},\"listed\":{},\"lineage\":{},\"checkpoints\":{},\"bytes_read\":{bytes},\
         \"read_s\":{read_s:.4},\"read_requests\":{read_requests},\"write_sample\":{},\"write_sample_s\":{write_s:.4}}}",
        progress.items.len(),
        listed.len(),
        progress.lineage.len(),
        progress.checkpoints.len(),
        names.len(),
    );
    Ok(())
}
