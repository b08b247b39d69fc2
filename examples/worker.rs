//! kazoo's documented worker loop as a command-line program.
//!
//! ```text
//! cargo run --example worker -- --connect HOST:PORT[,...] --path /p (--items a,b,c | --items-file FILE)
//!     [--int-items] [--identifier ID] [--time-boundary SECS] [--max-reaction-time SECS]
//!     [--session-timeout SECS] [--partition stride|rendezvous] [--rebalance eager|incremental]
//!     [--session-policy standard|session-aware] [--static-membership [--max-identity-wait SECS]] [--json]
//! ```
//!
//! The defaults are kazoo's: `--partition stride` ([`KazooStride`]), `--rebalance eager`, `--session-policy standard`.
//! `rendezvous` is [`Rendezvous::default()`]; every member of a party must use the same partition function.
//!
//! `--static-membership` ([`Builder::static_membership`](zk_partitioner::Builder::static_membership)) makes the
//! member's name its `--identifier` (required with it, unique in the party), so a worker restarted with the same
//! identifier gets the same items back; if the party still has a node with that identifier (the previous process
//! crashed and its session has not expired yet), it waits for it to go, up to `--max-identity-wait` (default: twice
//! the session timeout), and exits 1 if it outlives that.
//!
//! Prints every state change (one JSON object per line with `--json`: `ts`, `state`, `member`, `session` (the
//! ZooKeeper session id, as ZooKeeper stores it in `ephemeralOwner`), `generation`, `items` (the items it may process
//! now: those held when ACQUIRED, and under `--rebalance incremental` the kept ones while the party changes), `revoked`
//! (the items to stop, in RELEASE), `suspended` (true while a session-aware member waits for its connection) and
//! `cause` on FAILURE). On SIGINT or SIGTERM it calls `finish()` and exits 0; on FAILURE it exits 1 with the cause.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use zk_partitioner::{
    Item, KazooStride, PartitionState, Rebalance, Rendezvous, SessionPolicy, SetPartitioner, Snapshot,
};

struct Args {
    connect: String,
    path: String,
    items: Vec<Item>,
    identifier: Option<String>,
    time_boundary: Duration,
    max_reaction_time: Duration,
    session_timeout: Duration,
    rendezvous: bool,
    rebalance: Rebalance,
    session_policy: SessionPolicy,
    static_membership: bool,
    max_identity_wait: Option<Duration>,
    json: bool,
}

const USAGE: &str = "usage: worker --connect HOST:PORT[,...] --path /p (--items a,b,c | --items-file FILE) \
[--int-items] [--identifier ID] [--time-boundary SECS] [--max-reaction-time SECS] [--session-timeout SECS] \
[--partition stride|rendezvous] [--rebalance eager|incremental] [--session-policy standard|session-aware] \
[--static-membership [--max-identity-wait SECS]] [--json]";

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut connect, mut path, mut raw_items, mut identifier) = (None, None, None, None);
    let (mut time_boundary, mut max_reaction_time, mut session_timeout) = (30.0, 1.0, 10.0);
    let (mut json, mut int_items, mut rendezvous, mut static_membership) = (false, false, false, false);
    let mut max_identity_wait = None;
    let (mut rebalance, mut session_policy) = (Rebalance::Eager, SessionPolicy::Standard);
    let seconds = |flag: &str, value: Option<String>| -> Result<f64, String> {
        let value = value.ok_or(format!("{flag} needs a value"))?;
        match value.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 86400.0 => Ok(s),
            _ => Err(format!("{flag} takes a number of seconds between 0 and 86400, not {value:?}")),
        }
    };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--connect" => connect = args.next(),
            "--path" => path = args.next(),
            "--items" => {
                raw_items = Some(args.next().ok_or("--items needs a value")?.split(',').map(str::to_owned).collect())
            }
            "--items-file" => {
                let file = args.next().ok_or("--items-file needs a value")?;
                let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
                raw_items = Some(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect());
            }
            "--int-items" => int_items = true,
            "--identifier" => identifier = args.next(),
            "--time-boundary" => time_boundary = seconds(&flag, args.next())?,
            "--max-reaction-time" => max_reaction_time = seconds(&flag, args.next())?,
            "--session-timeout" => session_timeout = seconds(&flag, args.next())?,
            "--partition" => {
                rendezvous = choose(&flag, args.next(), &[("stride", false), ("rendezvous", true)])?;
            }
            "--rebalance" => {
                rebalance = choose(
                    &flag,
                    args.next(),
                    &[("eager", Rebalance::Eager), ("incremental", Rebalance::Incremental)],
                )?;
            }
            "--session-policy" => {
                let policies = [("standard", SessionPolicy::Standard), ("session-aware", SessionPolicy::SessionAware)];
                session_policy = choose(&flag, args.next(), &policies)?;
            }
            "--static-membership" => static_membership = true,
            "--max-identity-wait" => max_identity_wait = Some(Duration::from_secs_f64(seconds(&flag, args.next())?)),
            "--json" => json = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let raw_items: Vec<String> = raw_items.ok_or(format!("--items or --items-file is required\n{USAGE}"))?;
    if static_membership && identifier.is_none() {
        return Err(format!(
            "--static-membership needs --identifier (unique in the party, kept across restarts)\n{USAGE}"
        ));
    }
    if max_identity_wait.is_some() && !static_membership {
        return Err(format!("--max-identity-wait applies only with --static-membership\n{USAGE}"));
    }
    let items = if int_items {
        raw_items
            .iter()
            .map(|s| s.trim().parse::<i64>().map(Item::from).map_err(|_| format!("{s:?} is not an integer")))
            .collect::<Result<_, _>>()?
    } else {
        raw_items.into_iter().map(Item::from).collect()
    };
    Ok(Args {
        connect: connect.ok_or(format!("--connect is required\n{USAGE}"))?,
        path: path.ok_or(format!("--path is required\n{USAGE}"))?,
        items,
        identifier,
        time_boundary: Duration::from_secs_f64(time_boundary),
        max_reaction_time: Duration::from_secs_f64(max_reaction_time),
        session_timeout: Duration::from_secs_f64(session_timeout),
        rendezvous,
        rebalance,
        session_policy,
        static_membership,
        max_identity_wait,
        json,
    })
}

/// The value given to `flag`, one of `choices` (by name).
fn choose<T: Copy>(flag: &str, value: Option<String>, choices: &[(&str, T)]) -> Result<T, String> {
    let value = value.ok_or(format!("{flag} needs a value"))?;
    choices.iter().find(|(name, _)| *name == value).map(|&(_, choice)| choice).ok_or_else(|| {
        let names: Vec<&str> = choices.iter().map(|&(name, _)| name).collect();
        format!("{flag} takes {}, not {value:?}", names.join(" or "))
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("worker: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let client = zk_partitioner::zookeeper_client::Client::connector()
        .with_session_timeout(args.session_timeout)
        .connect(&args.connect)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", args.connect))?;
    let session = client.session_id().0;
    let mut builder = SetPartitioner::builder(client, args.path, args.items)
        .time_boundary(args.time_boundary)
        .max_reaction_time(args.max_reaction_time)
        .rebalance(args.rebalance)
        .session_policy(args.session_policy);
    builder = if args.rendezvous {
        builder.partition_func(Rendezvous::default())
    } else {
        builder.partition_func(KazooStride)
    };
    if let Some(identifier) = args.identifier {
        builder = builder.identifier(identifier);
    }
    if args.static_membership {
        builder = builder.static_membership(true);
    }
    if let Some(limit) = args.max_identity_wait {
        builder = builder.max_identity_wait(limit);
    }
    let partitioner = builder.build().await.map_err(|e| e.to_string())?;
    let mut changes = partitioner.changes();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            snapshot = changes.next() => {
                let Some(snapshot) = snapshot else { break };
                print_snapshot(&snapshot, session, args.json);
                match snapshot.state {
                    PartitionState::Failure => return Ok(ExitCode::FAILURE),
                    // Stop working on `snapshot.revoked` (everything, unless incremental), then let them go. Under
                    // `--rebalance incremental`, `snapshot.items` (the kept items) stay in work meanwhile.
                    PartitionState::Release => {
                        if let Err(err) = partitioner.release_set().await {
                            eprintln!("worker: release_set failed: {err}");
                        }
                    }
                    // A real worker processes `snapshot.items` here until the state changes (under
                    // `--rebalance incremental` they may be non-empty while ALLOCATING, too).
                    PartitionState::Acquired | PartitionState::Allocating => {}
                }
            }
        }
    }
    partitioner.finish().await;
    print_snapshot(&partitioner.snapshot(), session, args.json);
    Ok(ExitCode::SUCCESS)
}

fn print_snapshot(snapshot: &Snapshot, session: i64, json: bool) {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
    let items: Vec<String> = snapshot.items.iter().map(item_json).collect();
    if json {
        let mut line = format!(
            r#"{{"ts":{ts:.6},"state":"{}","member":{},"session":{session},"generation":{},"items":[{}]"#,
            snapshot.state,
            json_string(&snapshot.member),
            snapshot.generation,
            items.join(",")
        );
        if !snapshot.revoked.is_empty() {
            let revoked: Vec<String> = snapshot.revoked.iter().map(item_json).collect();
            line.push_str(&format!(r#","revoked":[{}]"#, revoked.join(",")));
        }
        if snapshot.suspended {
            line.push_str(r#","suspended":true"#);
        }
        if let Some(cause) = &snapshot.cause {
            line.push_str(&format!(r#","cause":{}"#, json_string(&cause.to_string())));
        }
        println!("{line}}}");
    } else {
        let revoked: Vec<String> = snapshot.revoked.iter().map(Item::to_string).collect();
        let revoked = if revoked.is_empty() { String::new() } else { format!(" revoked [{}]", revoked.join(", ")) };
        let suspended = if snapshot.suspended { " (suspended)" } else { "" };
        let cause = snapshot.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
        println!("{ts:.3} {} {} [{}]{revoked}{suspended}{cause}", snapshot.member, snapshot.state, items.join(", "));
    }
}

fn item_json(item: &Item) -> String {
    match item {
        Item::Int(i) => i.to_string(),
        Item::Str(s) => json_string(s),
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
