#![doc = include_str!("worker.md")]

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{ArgGroup, ValueEnum};
use serde_json::{Map, Value, json};
use zk_partitioner::zookeeper_client::{SessionState, StateWatcher};
use zk_partitioner::{
    Item, PartitionState, Rebalance, SessionPolicy, SetPartitioner, Snapshot,
    partition::{Call, KazooStride, Observed, Observer, Rendezvous},
    weighted::{Load, WeightedRendezvous},
};

use crate::connection::{self, seconds};

/// kazoo's SetPartitioner worker loop: join a party under --path and print every state change.
#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("item-source").args(["items", "items_file"])))]
pub struct Args {
    #[command(flatten)]
    session: connection::SessionArgs,
    /// The partitioner's path (created if missing)
    #[arg(long, value_name = "PATH", value_parser = path)]
    path: String,
    /// The items to divide, comma-separated
    #[arg(long, value_name = "A,B,C", value_delimiter = ',')]
    items: Vec<String>,
    /// Read the items from a file, one per line (blank lines ignored)
    #[arg(long, value_name = "FILE")]
    items_file: Option<std::path::PathBuf>,
    /// Treat the items as integers (as kazoo's `range(n)`), not strings
    #[arg(long)]
    int_items: bool,
    /// This member's identifier [default: <hostname>-<pid>]
    #[arg(long, value_name = "ID", value_parser = identifier)]
    identifier: Option<String>,
    /// Seconds the party must be unchanged before the items are divided
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds)]
    time_boundary: Duration,
    /// kazoo's max_reaction_time: here, the pause before retrying a request lost with the connection
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = seconds)]
    max_reaction_time: Duration,
    /// ZooKeeper session timeout, in seconds (a crashed member's items wait this long)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    session_timeout: Duration,
    /// Partition function
    #[arg(long, value_enum, default_value_t = Partition::Stride)]
    partition: Partition,
    /// This member's capacity, announced to the party: under `--partition weighted`, a member of capacity 3 carries
    /// three times the weight of a member of capacity 1 (ignored by the other functions)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = capacity)]
    capacity: u32,
    /// What a party change does: eager (everyone stops everything) or incremental (only moved items stop)
    #[arg(long, value_enum, default_value_t = RebalanceArg::Eager)]
    rebalance: RebalanceArg,
    /// Under --rebalance incremental: wait time_boundary after a departure too (by default a departed member's items
    /// are taken as soon as its session has ended or it has left, with --partition rendezvous, weighted or sticky)
    #[arg(long)]
    no_departure_fast_path: bool,
    /// What a suspended connection does: standard (release everything) or session-aware (pause, keep the items)
    #[arg(long, value_enum, default_value_t = SessionPolicyArg::Standard)]
    session_policy: SessionPolicyArg,
    /// The member's name is its --identifier, so a restart gets the same items back
    #[arg(long, requires = "identifier")]
    static_membership: bool,
    /// With --static-membership: seconds to wait for an older node with this identifier to go [default: twice the
    /// session timeout]
    #[arg(long, value_name = "SECS", requires = "static_membership", value_parser = seconds)]
    max_identity_wait: Option<Duration>,
    /// Take the items from the shared set in ZooKeeper (`<path>/items`) and follow its changes; --items or
    /// --items-file seed it if it does not exist yet (change it with `zkp items`)
    #[arg(long)]
    shared_set: bool,
    /// With --shared-set: finish each item this member holds once it has been closed (`zkp items close`, or a split
    /// or merge of it) and drained for this many seconds, so that its children can start; prints each finish
    #[arg(long, value_name = "SECS", requires = "shared_set", value_parser = seconds)]
    drain_secs: Option<Duration>,
    /// Keep a fenced checkpoint per item (`<path>/checkpoints/<item>`): a count of the times the item was taken,
    /// read and increased by each new owner, so a new owner resumes where the last one stopped
    #[arg(long)]
    checkpoints: bool,
    /// Print one JSON object per state change instead of a line of text
    #[arg(long)]
    json: bool,
    /// Serve the partitioner's metrics in Prometheus' text format over HTTP on this address (e.g. 0.0.0.0:9464;
    /// any path answers), through metrics-exporter-prometheus; the metrics are listed in the README
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Partition {
    /// kazoo's stride (KazooStride)
    Stride,
    /// Rendezvous hashing with a 1.05 load cap: a join or leave moves few items
    Rendezvous,
    /// Rendezvous hashing by weight (WeightedRendezvous, 1.10 load bound): the items' weights divided in proportion
    /// to the members' --capacity
    Weighted,
    /// The same, computing each change from the assignment in force, which the party keeps in ZooKeeper
    /// (WeightedRendezvous::sticky): a join, a leave or a weight change moves close to the least it must
    Sticky,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RebalanceArg {
    Eager,
    Incremental,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SessionPolicyArg {
    Standard,
    SessionAware,
}

/// A partition path, checked as `build()` checks it.
fn path(value: &str) -> Result<String, String> {
    zk_partitioner::checks::check_path(value).map(|()| value.to_string()).map_err(|err| err.to_string())
}

/// A capacity, checked as `build()` checks it (1 to 1,000,000).
fn capacity(value: &str) -> Result<u32, String> {
    let max = zk_partitioner::weighted::MAX_CAPACITY;
    value
        .parse::<u32>()
        .ok()
        .filter(|c| (1..=max).contains(c))
        .ok_or_else(|| format!("invalid capacity {value:?}: a capacity is a whole number from 1 to {max}"))
}

/// A member identifier, checked as `build()` checks it.
fn identifier(value: &str) -> Result<String, String> {
    zk_partitioner::checks::check_identifier(value).map(|()| value.to_string()).map_err(|err| err.to_string())
}

impl Args {
    /// The items of `--items` or `--items-file`, checked as `build()` checks them.
    fn items(&self) -> Result<Vec<Item>, String> {
        let raw: Vec<String> = match &self.items_file {
            Some(file) => std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?
                .lines()
                .filter(|line| !line.trim().is_empty())
                .map(str::to_owned)
                .collect(),
            None => self.items.clone(),
        };
        let items: Vec<Item> = if self.int_items {
            raw.iter()
                .map(|s| s.trim().parse::<i64>().map(Item::from).map_err(|_| format!("{s:?} is not an integer")))
                .collect::<Result<_, _>>()?
        } else {
            raw.into_iter().map(Item::from).collect()
        };
        zk_partitioner::checks::check_items(&items).map_err(|err| err.to_string())?;
        Ok(items)
    }
}

/// Runs `zkp worker`: until a stop signal (exit 0), FAILURE or a failed join (exit 1).
pub async fn main(args: Args) -> ExitCode {
    // Bad arguments print the usage to stderr and exit 2, before any connection: every flag is checked as it is
    // parsed, the items just below.
    let items = match args.items() {
        Ok(items) if items.is_empty() && !args.shared_set => crate::usage_error(
            "worker",
            clap::error::ErrorKind::MissingRequiredArgument,
            "one of --items or --items-file is required (or --shared-set with an existing set)",
        ),
        Ok(items) => items,
        Err(message) => crate::usage_error("worker", clap::error::ErrorKind::ValueValidation, &message),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    match run(args, items).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("zkp worker: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = sigterm.recv() => Ok(()),
    }
}

async fn run(args: Args, items: Vec<Item>) -> Result<ExitCode, String> {
    if let Some(addr) = args.metrics_addr {
        // Installed before joining, so that a scrape finds the endpoint as soon as the process runs.
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        zk_partitioner::metrics::register_descriptions();
        tracing::info!(%addr, "serving Prometheus metrics");
    }
    let stop = stop_signal();
    tokio::pin!(stop);
    // A signal while connecting or joining ends the process at once: `build()` is cancel safe (a party node it may
    // have created is deleted).
    let joined = tokio::select! {
        result = stop.as_mut() => {
            result?;
            tracing::info!("stopped before joining the party");
            return Ok(ExitCode::SUCCESS);
        }
        joined = join(&args, items) => joined?,
    };
    let (partitioner, session, mut session_state) = joined;
    // The current snapshot first, then one per transition (the watch may skip intermediate ones).
    let mut changes = partitioner.subscribe();
    changes.mark_changed();
    // With --drain-secs: when each held item was first seen closed, by ownership (fencing token).
    let mut draining: std::collections::HashMap<Item, (zk_partitioner::FencingToken, tokio::time::Instant)> =
        Default::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // With --checkpoints: the items whose checkpoint this member already counted, by fencing token.
    let mut counted = std::collections::HashMap::new();
    loop {
        tokio::select! {
            result = stop.as_mut() => {
                result?;
                break;
            }
            _ = tick.tick(), if args.drain_secs.is_some() => {
                if let Some(drain) = args.drain_secs {
                    drain_closed(&partitioner, drain, &mut draining, args.json).await;
                }
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    break; // the partitioner's task has stopped
                }
                let snapshot = changes.borrow_and_update().clone();
                let resumed = if args.checkpoints && snapshot.state == PartitionState::Acquired {
                    take_checkpoints(&partitioner, &snapshot, &mut counted).await
                } else {
                    Vec::new()
                };
                print_snapshot(&snapshot, session, args.json, &resumed);
                match snapshot.state {
                    PartitionState::Failure => {
                        let cause = snapshot.cause.map(|c| c.to_string()).unwrap_or_default();
                        eprintln!("zkp worker: the partitioner failed: {cause}");
                        return Ok(ExitCode::FAILURE);
                    }
                    // Stop working on `snapshot.revoked` (everything, unless incremental), then let them go. Under
                    // `--rebalance incremental`, `snapshot.items` (the kept items) stay in work meanwhile.
                    PartitionState::Release => {
                        if let Err(err) = partitioner.release_set().await {
                            eprintln!("zkp worker: release_set failed: {err}");
                        }
                    }
                    // A real worker processes `snapshot.items` here until the state changes (under
                    // `--rebalance incremental` they may be non-empty while ALLOCATING, too).
                    PartitionState::Acquired | PartitionState::Allocating => {}
                }
            }
        }
    }
    // Leave cleanly: release every lock, delete the party node, stop the task.
    partitioner.finish().await;
    print_snapshot(&partitioner.snapshot(), session, args.json, &[]);
    // Then close the session: zookeeper-client sends `CloseSession` once the last `Client` clone is dropped, and the
    // process must not exit before it has (else the server keeps the session for a session timeout).
    drop(partitioner);
    let closed =
        async { while !matches!(session_state.changed().await, SessionState::Closed | SessionState::Expired) {} };
    if tokio::time::timeout(Duration::from_secs(2), closed).await.is_err() {
        tracing::warn!("the session did not close within 2 s; the server ends it after the session timeout");
    }
    Ok(ExitCode::SUCCESS)
}

/// Finishes the held items that were closed (as the snapshot shows them) and have been drained for `drain` (see
/// `--drain-secs`).
async fn drain_closed(
    partitioner: &SetPartitioner,
    drain: Duration,
    draining: &mut std::collections::HashMap<Item, (zk_partitioner::FencingToken, tokio::time::Instant)>,
    json: bool,
) {
    let snapshot = partitioner.snapshot();
    draining.retain(|item, (token, _)| partitioner.snapshot().token(item) == Some(*token));
    let now = tokio::time::Instant::now();
    for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
        if !snapshot.is_closed(item) {
            continue;
        }
        let (_, since) = *draining.entry(item.clone()).or_insert((*token, now));
        if now.duration_since(since) < drain {
            continue;
        }
        match partitioner.finish_item(item, None).await {
            Ok(ready) => {
                draining.remove(item);
                let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
                if json {
                    let ready: Vec<Value> = ready.iter().map(item_json).collect();
                    println!(
                        "{}",
                        json!({"ts": (ts * 1e6).round() / 1e6, "finished_item": item_json(item), "ready": ready})
                    );
                } else {
                    let ready: Vec<String> = ready.iter().map(Item::to_string).collect();
                    println!("finished {item} (drained {}s); ready now: [{}]", drain.as_secs_f64(), ready.join(", "));
                }
            }
            Err(err) => eprintln!("zkp worker: could not finish {item}: {err}"),
        }
    }
}

/// Connects and joins the party; returns the partitioner, its session id and a watcher of the session's state.
async fn join(args: &Args, items: Vec<Item>) -> Result<(SetPartitioner, i64, StateWatcher), String> {
    let client = args.session.open(args.session_timeout).await?;
    let session = client.session_id().0;
    let session_state = client.state_watcher();
    let mut builder = SetPartitioner::builder(client, args.path.clone(), items)
        .time_boundary(args.time_boundary)
        .max_reaction_time(args.max_reaction_time)
        .rebalance(match args.rebalance {
            RebalanceArg::Eager => Rebalance::Eager,
            RebalanceArg::Incremental => Rebalance::Incremental,
        })
        .session_policy(match args.session_policy {
            SessionPolicyArg::Standard => SessionPolicy::Standard,
            SessionPolicyArg::SessionAware => SessionPolicy::SessionAware,
        })
        .departure_fast_path(!args.no_departure_fast_path);
    builder = match args.partition {
        Partition::Stride => builder.partition_func(Observed::new(KazooStride, CpuTime)),
        Partition::Rendezvous => builder.partition_func(Observed::new(Rendezvous::default(), CpuTime)),
        Partition::Weighted => builder.partition_func(Observed::new(WeightedRendezvous::default(), CpuTime)),
        Partition::Sticky => builder.partition_func(Observed::new(WeightedRendezvous::default().sticky(), CpuTime)),
    };
    builder = builder.capacity(args.capacity);
    if let Some(identifier) = &args.identifier {
        builder = builder.identifier(identifier.clone());
    }
    if args.static_membership {
        builder = builder.static_membership(true);
    }
    if let Some(limit) = args.max_identity_wait {
        builder = builder.max_identity_wait(limit);
    }
    if args.shared_set {
        builder = builder.shared_set(true);
    }
    if args.session.auth.is_some() {
        builder = builder.acls(zk_partitioner::zookeeper_client::Acls::creator_all());
    }
    let partitioner = builder.build().await.map_err(|e| e.to_string())?;
    Ok((partitioner, session, session_state))
}

/// Whether `snapshot` is the end of a clean `finish()`.
fn finished(snapshot: &Snapshot) -> bool {
    snapshot.state == PartitionState::Failure && matches!(snapshot.cause, Some(zk_partitioner::Error::Finished))
}

/// For each item newly held (by fencing token): reads its checkpoint (how many owners took it before), and saves one
/// more with a fenced write. Returns `(item, count)` for the items counted now.
async fn take_checkpoints(
    partitioner: &SetPartitioner,
    snapshot: &Snapshot,
    counted: &mut std::collections::HashMap<Item, zk_partitioner::FencingToken>,
) -> Vec<(Item, u64)> {
    let mut resumed = Vec::new();
    for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
        if counted.get(item) == Some(token) {
            continue;
        }
        let before = match partitioner.load_checkpoint(item).await {
            Ok(Some(checkpoint)) => String::from_utf8_lossy(&checkpoint.data).parse::<u64>().unwrap_or(0),
            Ok(None) => 0,
            Err(err) => {
                tracing::warn!(%item, %err, "cannot read the checkpoint");
                continue;
            }
        };
        let saved = match partitioner.checkpoint_writer(item) {
            Ok(writer) => writer.save((before + 1).to_string().as_bytes()).await,
            Err(err) => Err(err),
        };
        match saved {
            Ok(()) => {
                counted.insert(item.clone(), *token);
                resumed.push((item.clone(), before + 1));
            }
            // The item moved meanwhile: its new owner counts it.
            Err(err) => tracing::warn!(%item, %err, "checkpoint not saved"),
        }
    }
    resumed
}

/// CPU time spent in the partition function so far, in microseconds (the JSON's `partition_fn_ms`, which the scale
/// benchmark reads).
static PARTITION_FN_MICROS: AtomicU64 = AtomicU64::new(0);

/// Adds the CPU time of each call of the partition function (its work ahead included) to [`PARTITION_FN_MICROS`]:
/// CPU time, not wall time, since a hundred members on two cores wait for each other (the wall time of a 50 ms call
/// can reach seconds).
struct CpuTime;

impl Observer for CpuTime {
    fn observe<T>(&self, _call: Call, run: impl FnOnce() -> T) -> T {
        let started = thread_cpu_micros();
        let answer = run();
        PARTITION_FN_MICROS.fetch_add(thread_cpu_micros().saturating_sub(started), Ordering::Relaxed);
        answer
    }
}

/// The calling thread's CPU time in microseconds (0 where the clock is unavailable).
fn thread_cpu_micros() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) } != 0 {
        return 0;
    }
    time.tv_sec as u64 * 1_000_000 + time.tv_nsec as u64 / 1_000
}

fn print_snapshot(snapshot: &Snapshot, session: i64, json: bool, checkpoints: &[(Item, u64)]) {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
    if json {
        let mut line = Map::new();
        line.insert("ts".into(), json!((ts * 1e6).round() / 1e6));
        line.insert("state".into(), json!(snapshot.state.to_string()));
        line.insert("member".into(), json!(&*snapshot.member));
        line.insert("session".into(), json!(session));
        line.insert("generation".into(), json!(snapshot.generation));
        line.insert("partition_fn_ms".into(), json!(PARTITION_FN_MICROS.load(Ordering::Relaxed) as f64 / 1000.0));
        line.insert("items".into(), Value::Array(snapshot.items.iter().map(item_json).collect()));
        if !snapshot.revoked.is_empty() {
            line.insert("revoked".into(), Value::Array(snapshot.revoked.iter().map(item_json).collect()));
        }
        if snapshot.suspended {
            line.insert("suspended".into(), json!(true));
        }
        if let Some(cause) = &snapshot.cause {
            line.insert("cause".into(), json!(cause.to_string()));
        }
        if let Some(version) = snapshot.set_version {
            line.insert("set_version".into(), json!(version));
        }
        if !snapshot.added.is_empty() {
            line.insert("added".into(), Value::Array(snapshot.added.iter().map(item_json).collect()));
        }
        if !snapshot.removed.is_empty() {
            line.insert("removed".into(), Value::Array(snapshot.removed.iter().map(item_json).collect()));
        }
        if !snapshot.disagreements.is_empty() {
            let all = snapshot.disagreements.iter().map(|d| json!(d.to_string())).collect();
            line.insert("disagreements".into(), Value::Array(all));
        }
        if let Some(load) = acquired_load(snapshot) {
            line.insert("load".into(), load_json(load));
        }
        if !checkpoints.is_empty() {
            let counts = checkpoints.iter().map(|(item, count)| (item.to_string(), json!(count))).collect();
            line.insert("checkpoints".into(), Value::Object(counts));
        }
        if finished(snapshot) {
            line.insert("finished".into(), json!(true));
        }
        println!("{}", Value::Object(line));
    } else if finished(snapshot) {
        println!("{ts:.3} {} FINISHED (finish(): locks released, party left)", snapshot.member);
    } else {
        let items: Vec<String> = snapshot.items.iter().map(Item::to_string).collect();
        let revoked: Vec<String> = snapshot.revoked.iter().map(Item::to_string).collect();
        let revoked = if revoked.is_empty() { String::new() } else { format!(" revoked [{}]", revoked.join(", ")) };
        let suspended = if snapshot.suspended { " (suspended)" } else { "" };
        let cause = snapshot.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
        println!("{ts:.3} {} {} [{}]{revoked}{suspended}{cause}", snapshot.member, snapshot.state, items.join(", "));
        if let Some(load) = acquired_load(snapshot) {
            println!("    load: {load}");
        }
        for disagreement in snapshot.disagreements.iter() {
            println!("    warning: {disagreement}");
        }
        for (item, count) in checkpoints {
            println!("    {item}: checkpoint {count} (taken {count} times)");
        }
    }
}

/// The member's load, when it is ACQUIRED.
fn acquired_load(snapshot: &Snapshot) -> Option<&Load> {
    snapshot.load.as_deref().filter(|_| snapshot.state == PartitionState::Acquired)
}

/// `{capacity, dimensions: [{dimension, assigned, ideal}], imbalance, over_capacity}`.
fn load_json(load: &Load) -> Value {
    let dimensions: Vec<Value> = load
        .dimensions
        .iter()
        .map(|d| json!({"dimension": d.dimension, "assigned": d.assigned, "ideal": d.ideal}))
        .collect();
    json!({
        "capacity": load.capacity,
        "dimensions": dimensions,
        "imbalance": load.imbalance,
        "over_capacity": load.over_capacity,
    })
}

fn item_json(item: &Item) -> Value {
    match item {
        Item::Int(i) => json!(i),
        Item::Str(s) => json!(s),
    }
}
