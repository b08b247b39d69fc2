//! The shared set benchmark (BENCHMARKS.md, "Changing the set"): a party of members (in this process, each on
//! its own ZooKeeper session) over a shared set of N items; an admin on another session adds 1 item, adds 1,000,
//! then removes 1,000. For each change: the time from the update's return until every member is `ACQUIRED` at the
//! new version with a disjoint cover of the set, the ZooKeeper requests the server received meanwhile (`mntr`), how
//! many items changed owner, and how many items that kept their owner were stopped anyway (released and taken again,
//! seen as a new fencing token: the goal is 0 under `Rebalance::Incremental`).
//!
//! ```text
//! cargo bench --bench shared_set -- --connect HOST:PORT [--members 10] [--items 10000]
//!     [--rebalance incremental|eager] [--time-boundary SECS] [--path /p]
//! ```
//!
//! One JSON line per change on stdout. `bash bench/shared_set.sh` starts a ZooKeeper and runs the table of
//! BENCHMARKS.md. Not a criterion benchmark (`harness = false`): it needs a ZooKeeper server.

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::party::{connect, converged, owners, release_when_asked};
use support::{counter_delta, mntr};
use zk_partitioner::{Item, Rebalance, SetPartitioner, SharedSet, partition::Rendezvous};

struct Args {
    connect: String,
    members: usize,
    items: i64,
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
        rebalance: Rebalance::Incremental,
        time_boundary: Duration::from_secs(1),
        path: "/bench/shared-set".into(),
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|_| format!("{flag}: {v:?} is not a number"));
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--members" => parsed.members = number(&value)? as usize,
            "--items" => parsed.items = number(&value)? as i64,
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
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("shared_set: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("shared_set: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("shared_set: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let admin_client = connect(&args.connect).await?;
    let path = format!("{}-{}-{}", args.path, args.items, std::process::id());
    let set = SharedSet::new(admin_client.clone(), path.clone()).map_err(|e| e.to_string())?;
    let seed: Vec<Item> = (0..args.items).map(Item::from).collect();
    let started = Instant::now();
    set.create_if_missing(seed).await.map_err(|e| format!("seed the set: {e}"))?;
    let seeded = started.elapsed();

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
    let cold = started.elapsed();
    eprintln!("seeded {} items in {seeded:.2?}; {} members ACQUIRED after {cold:.2?}", args.items, args.members);

    let next = args.items;
    let changes: [(&str, Vec<Item>, bool); 3] = [
        ("add 1 item", vec![Item::from(next)], true),
        ("add 1,000 items", (next + 1..next + 1001).map(Item::from).collect(), true),
        ("remove 1,000 items", (0..1000).map(Item::from).collect(), false),
    ];
    let rebalance = match args.rebalance {
        Rebalance::Incremental => "incremental",
        _ => "eager",
    };
    for (name, items, add) in changes {
        let before = owners(&members);
        let stats_before = mntr(&args.connect)?;
        let started = Instant::now();
        let after = if add { set.add(items).await } else { set.remove(items).await };
        let after = after.map_err(|e| format!("{name}: {e}"))?;
        let written = started.elapsed();
        converged(&members, Some(after.version), &after.items, Duration::from_secs(120)).await?;
        let elapsed = started.elapsed();
        let stats_after = mntr(&args.connect)?;
        let now = owners(&members);
        let (mut moved, mut stopped) = (0, 0);
        for (item, (owner, token)) in &before {
            match now.get(item) {
                Some((new_owner, _)) if new_owner != owner => moved += 1,
                Some((_, new_token)) if new_token != token => stopped += 1,
                _ => {}
            }
        }
        let requests = counter_delta(&stats_before, &stats_after, "zk_packets_received") - 1;
        println!(
            "{{\"change\":\"{name}\",\"members\":{},\"items\":{},\"rebalance\":\"{rebalance}\",\
             \"time_boundary_s\":{},\"update_s\":{:.3},\"converged_s\":{:.3},\"requests\":{requests},\
             \"moved\":{moved},\"kept_but_stopped\":{stopped}}}",
            args.members,
            args.items,
            args.time_boundary.as_secs_f64(),
            written.as_secs_f64(),
            elapsed.as_secs_f64(),
        );
    }
    for member in &members {
        member.finish().await;
    }
    Ok(())
}
