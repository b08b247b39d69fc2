//! The lineage benchmark (BENCHMARKS.md, "Splitting shards"): a party of members (in this process, each on its own
//! ZooKeeper session) over a shared set of N items; an admin on another session splits S of them into two children
//! each; then the parents' owners finish them: 20 one at a time (the next once both children of the last are
//! `ACQUIRED`: a stream that closes a shard now and then), then the rest in a burst, each member finishing the parents
//! it holds one after another, every member at once. Measured: the requests per split and per finish (`mntr`), the
//! time from each finish's return until both children are `ACQUIRED` by their owners (paced and burst apart), and the
//! items other than the parents and children that were taken again (seen as a new fencing token): by another member,
//! because the partition function moved them, or by the same member, stopped although it kept them (the goal is 0
//! under `Rebalance::Incremental`).
//!
//! ```text
//! cargo bench --bench lineage -- --connect HOST:PORT [--members 10] [--items 10000] [--splits 1000]
//!     [--rebalance incremental|eager] [--time-boundary SECS] [--path /p]
//! ```
//!
//! One JSON line on stdout. `bash bench/lineage.sh` starts a ZooKeeper and prints the table of BENCHMARKS.md. Not a
//! criterion benchmark (`harness = false`): it needs a ZooKeeper server.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::party::{connect, converged, owners, release_when_asked};
use support::{counter_delta, mntr};
use zk_partitioner::{Item, PartitionState, Rebalance, SetPartitioner, SharedSet, partition::Rendezvous};

struct Args {
    connect: String,
    members: usize,
    items: i64,
    splits: i64,
    rebalance: Rebalance,
    time_boundary: Duration,
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
        members: 10,
        items: 10_000,
        splits: 1_000,
        rebalance: Rebalance::Incremental,
        time_boundary: Duration::from_secs(1),
        path: "/bench/lineage".into(),
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|_| format!("{flag}: {v:?} is not a number"));
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--members" => parsed.members = number(&value)? as usize,
            "--items" => parsed.items = number(&value)? as i64,
            "--splits" => parsed.splits = number(&value)? as i64,
            "--time-boundary" => parsed.time_boundary = Duration::from_secs_f64(number(&value)?),
            "--path" => parsed.path = value,
            "--rebalance" => {
                parsed.rebalance = match value.as_str() {
                    "incremental" => Rebalance::Incremental,
                    "eager" => Rebalance::Eager,
                    other => return Err(format!("--rebalance: {other:?} is not incremental or eager")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.connect.is_empty() {
        return Err("--connect HOST:PORT is required".into());
    }
    if parsed.splits > parsed.items {
        return Err("--splits cannot be more than --items".into());
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lineage: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lineage: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lineage: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Parents finished one at a time, before the burst.
const PACED: i64 = 20;

/// Finishes `item` through whichever member holds it (waiting for one to, up to a minute); returns when it returned.
async fn finish_somewhere(members: &[SetPartitioner], item: &Item) -> Result<Instant, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for member in members {
            if member.items().contains(item) && member.finish_item(item, None).await.is_ok() {
                return Ok(Instant::now());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("nobody could finish {item} within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0)
}

async fn run(args: &Args) -> Result<(), String> {
    let admin = connect(&args.connect).await?;
    let path = format!("{}-{}-{}", args.path, args.items, std::process::id());
    let set = SharedSet::new(admin.clone(), path.clone()).map_err(|e| e.to_string())?;
    set.create_if_missing((0..args.items).map(Item::from)).await.map_err(|e| format!("seed the set: {e}"))?;
    let mut members = Vec::new();
    for k in 0..args.members {
        let client = connect(&args.connect).await?;
        let member = SetPartitioner::builder(client, path.clone(), Vec::<Item>::new())
            .identifier(format!("m{k}"))
            .shared_set(true)
            .partition_func(Rendezvous::default())
            .rebalance(args.rebalance)
            .time_boundary(args.time_boundary)
            .build()
            .await
            .map_err(|e| format!("member {k}: {e}"))?;
        release_when_asked(&member);
        members.push(member);
    }
    let current = set.read().await.map_err(|e| e.to_string())?;
    converged(&members, Some(current.version), &current.items, Duration::from_secs(120)).await?;

    // 1. The admin splits parents 0..S, each into two new children.
    let child = |parent: i64, k: i64| Item::from(args.items + 2 * parent + k);
    let before = mntr(&args.connect)?;
    let started = Instant::now();
    for parent in 0..args.splits {
        set.split(parent, [child(parent, 0), child(parent, 1)]).await.map_err(|e| format!("split {parent}: {e}"))?;
    }
    let split_s = started.elapsed().as_secs_f64();
    let split_requests = counter_delta(&before, &mntr(&args.connect)?, "zk_packets_received") - 1;
    let current = set.read().await.map_err(|e| e.to_string())?;
    converged(&members, Some(current.version), &current.items, Duration::from_secs(120)).await?;
    let tokens_before = owners(&members);

    // 2. The parents are finished by their owners, first one at a time, then all at once. A watcher notes when each
    // child is first ACQUIRED by its owner.
    let acquired: Arc<Mutex<BTreeMap<Item, Instant>>> = Arc::default();
    let watching = {
        let (members, acquired) = (members.clone(), acquired.clone());
        let children: BTreeSet<Item> = (0..args.splits).flat_map(|p| [child(p, 0), child(p, 1)]).collect();
        tokio::spawn(async move {
            loop {
                let now = Instant::now();
                let done = {
                    let mut seen = acquired.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    for member in &members {
                        let snapshot = member.snapshot();
                        if snapshot.state != PartitionState::Acquired {
                            continue;
                        }
                        for item in snapshot.items.iter().filter(|item| children.contains(*item)) {
                            seen.entry(item.clone()).or_insert(now);
                        }
                    }
                    seen.len() == children.len()
                };
                if done {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let before = mntr(&args.connect)?;
    let started = Instant::now();
    let parents: BTreeSet<Item> = (0..args.splits).map(Item::from).collect();
    // When both children of parent `p` were first ACQUIRED, once they both were.
    let both = |p: i64| {
        let seen = acquired.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Some((*seen.get(&child(p, 0))?).max(*seen.get(&child(p, 1))?))
    };
    // 2a. Paced: one finish at a time, the next once both children of the last are ACQUIRED (a stream that closes a
    // shard now and then).
    let paced = PACED.min(args.splits);
    let mut paced_latencies = Vec::new();
    for p in 0..paced {
        let finished = finish_somewhere(&members, &Item::from(p)).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let last = loop {
            if let Some(last) = both(p) {
                break last;
            }
            if Instant::now() > deadline {
                return Err(format!("the children of {p} were not ACQUIRED within 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        paced_latencies.push(last.saturating_duration_since(finished).as_secs_f64());
    }
    // 2b. A burst: every other parent, each finished by whoever holds it, every member at once (a finish that finds
    // the parent moved is tried again by its next owner).
    let queue: Arc<Mutex<Vec<Item>>> = Arc::new(Mutex::new((paced..args.splits).map(Item::from).collect()));
    let finishers: Vec<_> = members
        .iter()
        .map(|member| {
            let (member, queue) = (member.clone(), queue.clone());
            tokio::spawn(async move {
                let mut finished = Vec::new();
                loop {
                    let mine = {
                        let mut queue = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if queue.is_empty() {
                            return finished;
                        }
                        let held = member.items();
                        queue.iter().position(|item| held.contains(item)).map(|at| queue.swap_remove(at))
                    };
                    let Some(item) = mine else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    match member.finish_item(&item, None).await {
                        Ok(_) => finished.push((item, Instant::now())),
                        Err(_) => queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(item),
                    }
                }
            })
        })
        .collect();
    let mut finished_at = BTreeMap::new();
    for finisher in finishers {
        for (item, at) in finisher.await.map_err(|e| e.to_string())? {
            finished_at.insert(item, at);
        }
    }
    let finish_s = started.elapsed().as_secs_f64();
    tokio::time::timeout(Duration::from_secs(120), watching)
        .await
        .map_err(|_| "the children were not all ACQUIRED within 120 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let current = set.read().await.map_err(|e| e.to_string())?;
    converged(&members, Some(current.version), &current.items, Duration::from_secs(120)).await?;
    let total_s = started.elapsed().as_secs_f64();
    let finish_requests = counter_delta(&before, &mntr(&args.connect)?, "zk_packets_received") - 1;

    let acquired = acquired.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let mut latencies: Vec<f64> = (paced..args.splits)
        .filter_map(|p| {
            let finished = finished_at.get(&Item::from(p))?;
            let last = [child(p, 0), child(p, 1)].iter().filter_map(|c| acquired.get(c)).max().copied()?;
            Some(last.saturating_duration_since(*finished).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    paced_latencies.sort_by(f64::total_cmp);
    // Items other than the parents that were taken again: by another member (the partition function moved them:
    // `Rendezvous`'s load bound rises with the set) or by the same one (stopped although their owner kept them).
    let now = owners(&members);
    let (mut moved, mut stopped) = (0, 0);
    for (item, (owner, token)) in tokens_before.iter().filter(|(item, _)| !parents.contains(*item)) {
        match now.get(item) {
            Some((o, _)) if o != owner => moved += 1,
            Some((_, t)) if t != token => stopped += 1,
            _ => {}
        }
    }
    let target = (args.time_boundary + Duration::from_secs(1)).as_secs_f64();
    let over_target = latencies.iter().filter(|&&l| l > target).count();
    let rebalance = match args.rebalance {
        Rebalance::Incremental => "incremental",
        _ => "eager",
    };
    println!(
        "{{\"members\":{},\"items\":{},\"splits\":{},\"rebalance\":\"{rebalance}\",\"time_boundary_s\":{},\
         \"split_s\":{split_s:.3},\"requests_per_split\":{:.2},\"finish_s\":{finish_s:.3},\"all_acquired_s\":{total_s:.3},\
         \"requests_per_finish\":{:.2},\"paced\":{paced},\"paced_finish_to_children_acquired_s\":{{\"median\":{:.3},\
         \"max\":{:.3}}},\"burst_finish_to_children_acquired_s\":{{\"median\":{:.3},\"p99\":{:.3},\"max\":{:.3}}},\
         \"measured\":{},\"over_target\":{over_target},\"moved_by_function\":{moved},\"kept_but_stopped\":{stopped}}}",
        args.members,
        args.items,
        args.splits,
        args.time_boundary.as_secs_f64(),
        split_requests as f64 / args.splits as f64,
        finish_requests as f64 / args.splits as f64,
        percentile(&paced_latencies, 0.5),
        paced_latencies.last().copied().unwrap_or(0.0),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(0.0),
        latencies.len(),
    );
    for member in &members {
        member.finish().await;
    }
    Ok(())
}
