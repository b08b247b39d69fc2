//! The scale benchmark's in-process host (BENCHMARKS.md, "The scale benchmark"): many members in this one process,
//! each with its own ZooKeeper client and session, driven by commands on stdin. Every member prints the worker
//! example's JSON lines (`ts`, `state`, `member`, `session`, `generation`, `items`, ...) plus `id` (the identifier it
//! was given) and `partition_fn_ms`, so that `bench/scale.py` analyses them exactly like separate worker processes.
//!
//! ```text
//! cargo bench --bench scale -- --connect HOST:PORT --path /p --items-file FILE [--int-items]
//!     [--time-boundary 2] [--session-timeout 10] [--max-reaction-time 1]
//!     [--partition stride|rendezvous] [--rebalance eager|incremental] [--session-policy standard|session-aware]
//!     [--worker-threads N]
//! ```
//!
//! Every member runs on one multi-threaded Tokio runtime with `--worker-threads` threads (default: Tokio's, one per
//! core). The partition function runs on those threads (on the partitioner's task), and so do the clients'
//! sessions: a slow partition function computed by many members at once delays everyone's pings.
//!
//! Commands, one per line on stdin:
//!
//! - `join ID [crashable]`: a new member with identifier ID (its own client and session). `crashable` routes its
//!   connection through a TCP proxy of its own (`zk_partitioner_testing::Proxy`), so that `crash` can cut it.
//! - `leave ID`: the member calls `finish()` (gives up its locks, leaves the party), as the worker does on SIGTERM.
//! - `crash ID`: the member stops at once without `finish()`: its proxy is cut (both sides closed, new connections
//!   refused for the rest of the run) and its worker loop is aborted; its session, party node and lock nodes linger
//!   in ZooKeeper until the session timeout, as after a SIGKILL. (The partitioner's background task may keep trying
//!   to reconnect through the cut proxy; it can reach nothing.) Only a member that joined `crashable` can crash.
//! - `quit` (or end of input): every member still there calls `finish()` (for at most 60 s), then the process exits.
//!
//! When a member is gone (left, crashed, or FAILURE) a line `{"id": ID, "exit": CODE, "ts": ...}` says so (0 after
//! `finish()`, 137 after a crash, 1 after FAILURE), as a worker process's exit would.
//!
//! `partition_fn_ms`: the cumulative CPU milliseconds this member spent inside its partition function (a wrapper
//! around `KazooStride` / `Rendezvous::default()` reads the thread's CPU clock around every call; Linux only). Not a criterion benchmark (`harness = false`): a bare `cargo bench` does nothing.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod support;

use serde_json::{Map, Value, json};
use support::thread_cpu_nanos;
use tokio::io::AsyncBufReadExt;
use tokio::sync::oneshot;
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Item, PartitionState, Rebalance, SessionPolicy, SetPartitioner, Snapshot,
    connection::ConnectOptions,
    partition::{Call, KazooStride, Observed, Observer, Rendezvous},
};
use zk_partitioner_testing::Proxy;

#[derive(Clone)]
struct Args {
    connect: String,
    path: String,
    items_file: String,
    int_items: bool,
    time_boundary: Duration,
    session_timeout: Duration,
    max_reaction_time: Duration,
    rendezvous: bool,
    rebalance: Rebalance,
    session_policy: SessionPolicy,
    worker_threads: Option<usize>,
}

fn parse_args() -> Result<Option<Args>, String> {
    // `cargo bench` appends `--bench`; a bare `cargo bench` names no server: nothing to do.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test").peekable();
    if args.peek().is_none() {
        return Ok(None);
    }
    let mut parsed = Args {
        connect: String::new(),
        path: String::new(),
        items_file: String::new(),
        int_items: false,
        time_boundary: Duration::from_secs(2),
        session_timeout: Duration::from_secs(10),
        max_reaction_time: Duration::from_secs(1),
        rendezvous: false,
        rebalance: Rebalance::Eager,
        session_policy: SessionPolicy::Standard,
        worker_threads: None,
    };
    while let Some(flag) = args.next() {
        if flag == "--int-items" {
            parsed.int_items = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let seconds = |v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("{flag}: {v:?} is not a positive number of seconds"))
        };
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--worker-threads" => {
                let threads = value.parse::<usize>().ok().filter(|n| *n > 0);
                parsed.worker_threads = Some(threads.ok_or_else(|| format!("--worker-threads: {value:?}"))?);
            }
            "--path" => parsed.path = value,
            "--items-file" => parsed.items_file = value,
            "--time-boundary" => parsed.time_boundary = seconds(&value)?,
            "--session-timeout" => parsed.session_timeout = seconds(&value)?,
            "--max-reaction-time" => parsed.max_reaction_time = seconds(&value)?,
            "--partition" => {
                parsed.rendezvous = match value.as_str() {
                    "stride" => false,
                    "rendezvous" => true,
                    other => return Err(format!("--partition: stride or rendezvous, not {other:?}")),
                }
            }
            "--rebalance" => {
                parsed.rebalance = match value.as_str() {
                    "eager" => Rebalance::Eager,
                    "incremental" => Rebalance::Incremental,
                    other => return Err(format!("--rebalance: eager or incremental, not {other:?}")),
                }
            }
            "--session-policy" => {
                parsed.session_policy = match value.as_str() {
                    "standard" => SessionPolicy::Standard,
                    "session-aware" => SessionPolicy::SessionAware,
                    other => return Err(format!("--session-policy: standard or session-aware, not {other:?}")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.connect.is_empty() || parsed.path.is_empty() || parsed.items_file.is_empty() {
        return Err("--connect, --path and --items-file are required".into());
    }
    Ok(Some(parsed))
}

fn read_items(args: &Args) -> Result<Vec<Item>, String> {
    let text =
        std::fs::read_to_string(&args.items_file).map_err(|e| format!("cannot read {}: {e}", args.items_file))?;
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            if args.int_items {
                line.parse::<i64>().map(Item::from).map_err(|_| format!("{line:?} is not an integer"))
            } else {
                Ok(Item::from(line.to_owned()))
            }
        })
        .collect()
}

/// Adds the CPU time the observed partition function's calls take to a shared counter (nanoseconds). The function
/// is synchronous: it runs start to end on this thread, so the thread's CPU clock measures it alone, whatever the
/// other members' threads do meanwhile (a wall clock would count their time too).
struct CpuNanos(Arc<AtomicU64>);

impl Observer for CpuNanos {
    fn observe<T>(&self, _call: Call, run: impl FnOnce() -> T) -> T {
        let started = thread_cpu_nanos();
        let answer = run();
        self.0.fetch_add(thread_cpu_nanos().saturating_sub(started), Ordering::Relaxed);
        answer
    }
}

fn now() -> f64 {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
    (ts * 1e6).round() / 1e6
}

fn item_json(item: &Item) -> Value {
    match item {
        Item::Int(i) => json!(i),
        Item::Str(s) => json!(s),
    }
}

/// `zkp worker`'s JSON line (see crates/cli/src/worker.rs), plus `id` and `partition_fn_ms`.
fn print_snapshot(id: &str, snapshot: &Snapshot, session: i64, nanos: &AtomicU64) {
    let mut line = Map::new();
    line.insert("ts".into(), json!(now()));
    line.insert("id".into(), json!(id));
    line.insert("state".into(), json!(snapshot.state.to_string()));
    line.insert("member".into(), json!(&*snapshot.member));
    line.insert("session".into(), json!(session));
    line.insert("generation".into(), json!(snapshot.generation));
    line.insert("items".into(), Value::Array(snapshot.items.iter().map(item_json).collect()));
    if !snapshot.revoked.is_empty() {
        line.insert("revoked".into(), json!(snapshot.revoked.len()));
    }
    if snapshot.suspended {
        line.insert("suspended".into(), json!(true));
    }
    if let Some(cause) = &snapshot.cause {
        line.insert("cause".into(), json!(cause.to_string()));
        if matches!(cause, zk_partitioner::Error::Finished) {
            line.insert("finished".into(), json!(true));
        }
    }
    line.insert("partition_fn_ms".into(), json!(nanos.load(Ordering::Relaxed) as f64 / 1e6));
    println!("{}", Value::Object(line));
}

fn print_exit(id: &str, code: i32) {
    println!("{}", json!({"ts": now(), "id": id, "exit": code}));
}

fn print_failure(id: &str, cause: &str) {
    println!("{}", json!({"ts": now(), "id": id, "state": "FAILURE", "items": [], "cause": cause}));
}

struct Member {
    leave: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    proxy: Option<Proxy>,
}

/// One member's life: connect, join, answer every RELEASE at once, `finish()` when told to leave.
async fn member(id: String, connect: String, args: Args, items: Arc<Vec<Item>>, leave: oneshot::Receiver<()>) {
    let nanos = Arc::new(AtomicU64::new(0));
    // Detached: dropping the client (a crash) does not close the session; only finish() and the timeout end it.
    let connector = Client::connector().with_session_timeout(args.session_timeout).with_detached();
    let client = match zk_partitioner::connection::connect_with_options(
        connector,
        &connect,
        ConnectOptions::new().connect_timeout(Duration::from_secs(30)),
    )
    .await
    {
        Ok(client) => client,
        Err(err) => {
            print_failure(&id, &err.to_string());
            print_exit(&id, 1);
            return;
        }
    };
    let session = client.session_id().0;
    let mut builder = SetPartitioner::builder(client, args.path.clone(), items.iter().cloned())
        .identifier(id.clone())
        .time_boundary(args.time_boundary)
        .max_reaction_time(args.max_reaction_time)
        .rebalance(args.rebalance)
        .session_policy(args.session_policy);
    builder = if args.rendezvous {
        builder.partition_func(Observed::new(Rendezvous::default(), CpuNanos(nanos.clone())))
    } else {
        builder.partition_func(Observed::new(KazooStride, CpuNanos(nanos.clone())))
    };
    let partitioner = match builder.build().await {
        Ok(partitioner) => partitioner,
        Err(err) => {
            print_failure(&id, &err.to_string());
            print_exit(&id, 1);
            return;
        }
    };
    let mut changes = partitioner.subscribe();
    changes.mark_changed();
    tokio::pin!(leave);
    loop {
        tokio::select! {
            _ = &mut leave => break,
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                let snapshot = changes.borrow_and_update().clone();
                print_snapshot(&id, &snapshot, session, &nanos);
                match snapshot.state {
                    PartitionState::Failure => {
                        print_exit(&id, 1);
                        return;
                    }
                    PartitionState::Release => {
                        if let Err(err) = partitioner.release_set().await {
                            eprintln!("scale: {id}: release_set failed: {err}");
                        }
                    }
                    PartitionState::Acquired | PartitionState::Allocating => {}
                }
            }
        }
    }
    partitioner.finish().await;
    print_snapshot(&id, &partitioner.snapshot(), session, &nanos);
    print_exit(&id, 0);
}

async fn serve(args: Args) -> Result<(), String> {
    let items = Arc::new(read_items(&args)?);
    let upstream: std::net::SocketAddr =
        args.connect.parse().map_err(|_| format!("--connect must be HOST:PORT of one server, not {}", args.connect))?;
    let mut members: HashMap<String, Member> = HashMap::new();
    // Crashed members' proxies stay cut (refusing reconnections) until the end of the run.
    let mut graveyard: Vec<Proxy> = Vec::new();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| format!("stdin: {e}"))? {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["join", id, rest @ ..] => {
                let (proxy, connect) = if rest.contains(&"crashable") {
                    let proxy = Proxy::start(upstream).await;
                    let endpoint = proxy.endpoint();
                    (Some(proxy), endpoint)
                } else {
                    (None, args.connect.clone())
                };
                let (leave, leave_rx) = oneshot::channel();
                let task = tokio::spawn(member(id.to_string(), connect, args.clone(), items.clone(), leave_rx));
                members.insert(id.to_string(), Member { leave, task, proxy });
            }
            ["leave", id] => {
                if let Some(member) = members.remove(*id) {
                    let _ = member.leave.send(());
                    // The task finishes on its own and prints its exit line; keep the proxy alive meanwhile.
                    if let Some(proxy) = member.proxy {
                        graveyard.push(proxy);
                    }
                }
            }
            ["crash", id] => match members.remove(*id) {
                Some(Member { proxy: Some(proxy), task, .. }) => {
                    proxy.cut();
                    task.abort();
                    let _ = task.await;
                    graveyard.push(proxy);
                    print_exit(id, 137);
                }
                Some(member) => {
                    eprintln!("scale: {id} did not join crashable: leaving it alone");
                    members.insert(id.to_string(), member);
                }
                None => eprintln!("scale: no member {id}"),
            },
            ["quit"] => break,
            [] => {}
            _ => eprintln!("scale: unknown command {line:?}"),
        }
    }
    // `quit` or end of input: every member still in the party leaves with finish() (at most 60 s), so that the next
    // run starts on a server without this run's sessions and lock nodes.
    let tasks: Vec<_> = members
        .into_values()
        .map(|member| {
            let _ = member.leave.send(());
            member.task
        })
        .collect();
    let _ = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(tasks)).await;
    drop(graveyard);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("scale: {message}");
            return ExitCode::from(2);
        }
    };
    // The library's logs (tracing) on stderr, filtered by RUST_LOG (default: warnings), as in the worker example.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads {
        runtime.worker_threads(threads);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("scale: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(args));
    // Crashed members' background tasks may still be trying to reconnect: do not wait for them.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("scale: {message}");
            ExitCode::FAILURE
        }
    }
}
