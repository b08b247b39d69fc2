//! The Rust side of the benchmark in `bench/` (see BENCHMARKS.md): one run of one in-process scenario per invocation,
//! printed as one JSON line, so that `bench/run.sh` can alternate it with `bench/kazoo_bench.py`, which prints the same
//! fields for kazoo.
//!
//! ```text
//! cargo bench --bench partitioner -- single --connect HOST:PORT --path /p --items N [--time-boundary SECS]
//!     [--mode fresh|reused] [--run I]
//! cargo bench --bench partitioner -- delete-tree --connect HOST:PORT --path /p
//! cargo bench --bench partitioner -- floor --connect HOST:PORT --path /p --items N [--run REPS]
//! ```
//!
//! `single`: one member, on a session connected beforehand, partitions the integers `0..N` under `--path` (a path
//! never used before for `--mode fresh`, one whose lock directories a previous run left for `--mode reused`). It
//! measures the time from `build()` to `ACQUIRED` (`raw_s`; `net_s` = `raw_s` − time boundary), the ZooKeeper requests
//! the server received meanwhile (`mntr` before and after), and the process's peak RSS (`VmHWM`) once connected
//! (`rss_idle_kb`) and once holding the items (`rss_peak_kb`). Then it calls `finish()` (timed as `finish_s`).
//!
//! `delete-tree`: removes `--path` and everything under it (between runs; not measured).
//!
//! `floor`: what a warm allocation of N items cannot go below on this server, with no partitioner at all
//! (BENCHMARKS.md, "The floor of the warm allocation, and a request trace"). Its lock directories made first (not
//! measured), it sends the requests such an allocation needs, as a bare client: contender creates in `multi`s of B
//! (100, 500 and N), and for each batch the read that tells the position and the fencing token (a read `multi` of B
//! children lists and B node reads). Per batch size, `--run` repetitions (7 by default) of: one create `multi` alone,
//! then its read alone (the latency per request at that batch size), and the whole allocation pipelined (every create
//! `multi` at once, each one's read sent as it returns), then the nodes deleted (not measured). One JSON line per
//! batch size, medians and minimums.
//!
//! With `RUST_LOG` set (e.g. `RUST_LOG=zk_partitioner=debug`) the library's logs go to stderr, timed from the start.
//!
//! Not a criterion benchmark (`harness = false`): it needs a ZooKeeper server, which `bench/run.sh` starts.

use std::process::ExitCode;
use std::time::{Duration, Instant};

mod support;

use futures::StreamExt;
use futures::future::BoxFuture;
use support::{counter_delta, mntr};
use zk_partitioner::zookeeper_client::{self, Client};
use zk_partitioner::{Item, PartitionState, SetPartitioner};

const USAGE: &str = "usage: partitioner single --connect HOST:PORT --path /p --items N [--time-boundary SECS] \
[--mode fresh|reused] [--run I]\n       partitioner delete-tree --connect HOST:PORT --path /p\n       \
partitioner floor --connect HOST:PORT --path /p --items N [--run REPS]";

struct Args {
    command: String,
    connect: String,
    path: String,
    items: usize,
    time_boundary: f64,
    mode: String,
    run: u32,
}

/// `None` when no scenario was named (a bare `cargo bench`): nothing to do.
fn parse_args() -> Result<Option<Args>, String> {
    // `cargo bench` appends `--bench` (and `cargo test --benches`, `--test`); they mean nothing here.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test");
    let Some(command) = args.next() else { return Ok(None) };
    let mut parsed = Args {
        command,
        connect: String::new(),
        path: String::new(),
        items: 0,
        time_boundary: 0.1,
        mode: "fresh".into(),
        run: 0,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |what: &str| format!("{flag} takes {what}, not {value:?}");
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--path" => parsed.path = value,
            "--items" => parsed.items = value.parse().map_err(|_| bad("a count"))?,
            "--time-boundary" => {
                parsed.time_boundary = value.parse().ok().filter(|s: &f64| *s > 0.0).ok_or_else(|| bad("seconds"))?
            }
            "--mode" => parsed.mode = value,
            "--run" => parsed.run = value.parse().map_err(|_| bad("a number"))?,
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    if parsed.connect.is_empty() || !parsed.path.starts_with('/') {
        return Err(format!("--connect and --path are required\n{USAGE}"));
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            eprintln!("partitioner bench: no scenario given, nothing to do; the benchmark is `bash bench/run.sh`");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if std::env::var_os("RUST_LOG").is_some() {
        // The library's own account of where the time goes, e.g. RUST_LOG=zk_partitioner=debug.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = runtime.block_on(async {
        match args.command.as_str() {
            "single" => single(&args).await,
            "delete-tree" => delete_tree(&args).await,
            "floor" => floor(&args).await,
            other => Err(format!("unknown scenario {other:?}\n{USAGE}")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("partitioner bench: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(endpoint: &str) -> Result<Client, String> {
    Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(endpoint)
        .await
        .map_err(|e| format!("cannot connect to {endpoint}: {e}"))
}

async fn single(args: &Args) -> Result<(), String> {
    if args.items == 0 {
        return Err(format!("--items is required\n{USAGE}"));
    }
    let client = connect(&args.connect).await?;
    let rss_idle_kb = vm_hwm_kb();
    let items: Vec<Item> = (0..args.items as i64).map(Item::from).collect();
    let time_boundary = Duration::from_secs_f64(args.time_boundary);

    let before = mntr(&args.connect)?;
    let start = Instant::now();
    let partitioner = SetPartitioner::builder(client.clone(), args.path.clone(), items)
        .identifier("bench-rust")
        .time_boundary(time_boundary)
        .build()
        .await
        .map_err(|e| format!("build: {e}"))?;
    let state = partitioner.wait_for_acquire(Duration::from_secs(3600)).await;
    let raw = start.elapsed().as_secs_f64();
    let after = mntr(&args.connect)?;
    let rss_peak_kb = vm_hwm_kb();
    let held = partitioner.items().len();
    if state != PartitionState::Acquired || held != args.items {
        return Err(format!("ended in {state} holding {held} of {} items", args.items));
    }

    let finishing = Instant::now();
    partitioner.finish().await;
    let finish_s = finishing.elapsed().as_secs_f64();
    drop(client);

    let requests = counter_delta(&before, &after, "zk_packets_received") - MNTR_PACKETS;
    println!(
        "{{\"impl\":\"rust\",\"scenario\":\"single\",\"mode\":\"{}\",\"n\":{},\"run\":{},\"tb_s\":{},\"raw_s\":{raw:.6},\
         \"net_s\":{:.6},\"requests\":{requests},\"writes\":{},\"reads\":{},\"rss_idle_kb\":{rss_idle_kb},\
         \"rss_peak_kb\":{rss_peak_kb},\"finish_s\":{finish_s:.6}}}",
        args.mode,
        args.items,
        args.run,
        args.time_boundary,
        raw - args.time_boundary,
        counter_delta(&before, &after, "zk_cnt_updatelatency"),
        counter_delta(&before, &after, "zk_cnt_readlatency"),
    );
    Ok(())
}

/// The `mntr` command itself is one packet the server counts (measured on ZooKeeper 3.8: two `mntr` in a row differ
/// by one in `zk_packets_received`).
const MNTR_PACKETS: i64 = 1;

/// This process's peak resident set size so far, in KiB (`VmHWM` in `/proc/self/status`; 0 where unavailable).
fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Contender data as the partitioner writes it: the member's name.
const FLOOR_DATA: &[u8] = b"floor-probe@bench-host";

async fn floor(args: &Args) -> Result<(), String> {
    use zookeeper_client::{Acls, CreateMode, MultiWriteResult};
    if args.items == 0 {
        return Err(format!("--items is required\n{USAGE}"));
    }
    let reps = if args.run == 0 { 7 } else { args.run as usize };
    let client = connect(&args.connect).await?;
    // The warm path: `<path>/locks/<item>` for every item (not measured).
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let locks = format!("{}/locks", args.path);
    for path in [args.path.clone(), locks.clone()] {
        match client.create(&path, b"", &persistent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(err) => return Err(format!("create {path}: {err}")),
        }
    }
    let dirs: Vec<String> = (0..args.items).map(|i| format!("{locks}/{i}")).collect();
    let mut made = futures::stream::iter(dirs.iter().map(|dir| client.create(dir, b"", &persistent))).buffered(1000);
    while let Some(result) = made.next().await {
        match result {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(err) => return Err(format!("create a lock directory: {err}")),
        }
    }
    drop(made);
    let sequential = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let prefix = "0123456789abcdef0123456789abcdef__lock__";
    // One create `multi` over `dirs`: the created nodes' paths.
    let create = |dirs: &[String]| {
        let mut writer = client.new_multi_writer();
        let added: Result<(), _> = dirs.iter().try_for_each(|dir| {
            writer.add_create(&format!("{dir}/{prefix}"), FLOOR_DATA, &sequential).map_err(|e| e.to_string())
        });
        async move {
            added?;
            let results = writer.commit().await.map_err(|e| format!("create multi: {e}"))?;
            Ok::<Vec<String>, String>(
                results
                    .into_iter()
                    .filter_map(|r| match r {
                        MultiWriteResult::Create { path, .. } => Some(path),
                        _ => None,
                    })
                    .collect(),
            )
        }
    };
    // Its read: each directory's children and the node's stat (its creation zxid, the fencing token).
    let read = |nodes: &[String]| {
        let mut reader = client.new_multi_reader();
        let added: Result<(), _> = nodes.iter().try_for_each(|node| {
            let dir = node.rsplit_once('/').map_or("/", |(dir, _)| dir);
            reader.add_get_children(dir).and_then(|()| reader.add_get_data(node)).map_err(|e| e.to_string())
        });
        async move {
            added?;
            reader.commit().await.map_err(|e| format!("read multi: {e}"))?;
            Ok::<(), String>(())
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let mut batches = vec![100, 500, args.items];
    batches.retain(|&b| b <= args.items);
    batches.dedup();
    for batch in batches {
        let (mut creates, mut reads, mut pipelined) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            // One request of each kind alone: the latency per request at this batch size.
            let start = Instant::now();
            let nodes = create(&dirs[..batch]).await?;
            creates.push(ms(start.elapsed()));
            let start = Instant::now();
            read(&nodes).await?;
            reads.push(ms(start.elapsed()));
            delete_nodes(&client, nodes).await?;
            // The whole allocation, pipelined: every create at once, each one's read as it returns.
            let start = Instant::now();
            let chains = dirs.chunks(batch).map(|chunk| async {
                let nodes = create(chunk).await?;
                read(&nodes).await?;
                Ok::<Vec<String>, String>(nodes)
            });
            let nodes: Vec<Vec<String>> = futures::future::try_join_all(chains).await?;
            pipelined.push(ms(start.elapsed()));
            delete_nodes(&client, nodes.concat()).await?;
        }
        let requests = 2 * args.items.div_ceil(batch);
        let (create_ms, read_ms) = (median(creates.clone()), median(reads.clone()));
        println!(
            "{{\"impl\":\"bare\",\"scenario\":\"floor\",\"n\":{},\"batch\":{batch},\"reps\":{reps},\
             \"requests\":{requests},\"create_ms\":{create_ms:.3},\"read_ms\":{read_ms:.3},\
             \"serial_ms\":{:.3},\"pipelined_ms\":{:.3},\"pipelined_min_ms\":{:.3}}}",
            args.items,
            args.items.div_ceil(batch) as f64 * (create_ms + read_ms),
            median(pipelined.clone()),
            pipelined.iter().copied().fold(f64::INFINITY, f64::min),
        );
    }
    Ok(())
}

/// Deletes `nodes`, 500 per `multi`.
async fn delete_nodes(client: &Client, nodes: Vec<String>) -> Result<(), String> {
    for chunk in nodes.chunks(500) {
        let mut writer = client.new_multi_writer();
        for node in chunk {
            writer.add_delete(node, None).map_err(|e| e.to_string())?;
        }
        writer.commit().await.map_err(|e| format!("delete multi: {e}"))?;
    }
    Ok(())
}

async fn delete_tree(args: &Args) -> Result<(), String> {
    let client = connect(&args.connect).await?;
    remove(&client, args.path.clone()).await
}

/// Deletes `path` and its subtree, children first, many requests at once.
fn remove(client: &Client, path: String) -> BoxFuture<'_, Result<(), String>> {
    Box::pin(async move {
        let children = match client.list_children(&path).await {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(err) => return Err(format!("list {path}: {err}")),
        };
        let base = if path == "/" { String::new() } else { path.clone() };
        let mut removals =
            futures::stream::iter(children.into_iter().map(|child| remove(client, format!("{base}/{child}"))))
                .buffer_unordered(1000);
        while let Some(result) = removals.next().await {
            result?;
        }
        match client.delete(&path, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(err) => Err(format!("delete {path}: {err}")),
        }
    })
}
