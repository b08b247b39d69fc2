//! The Rust side of the benchmark in `bench/` (see BENCHMARKS.md): one run of one in-process scenario per invocation,
//! printed as one JSON line, so that `bench/run.sh` can alternate it with `bench/kazoo_bench.py`, which prints the same
//! fields for kazoo.
//!
//! ```text
//! cargo bench --bench partitioner -- single --connect HOST:PORT --path /p --items N [--time-boundary SECS]
//!     [--mode fresh|reused] [--run I]
//! cargo bench --bench partitioner -- delete-tree --connect HOST:PORT --path /p
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
[--mode fresh|reused] [--run I]\n       partitioner delete-tree --connect HOST:PORT --path /p";

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
