//! The shared item set's admin command: read or change the items of a partition path whose members run with
//! `shared_item_set(true)` (`worker --shared-set`). Not a member: it joins no party and holds no lock.
//!
//! ```text
//! cargo run --example item_set -- --connect 127.0.0.1:2181 --path /work_queues show
//! cargo run --example item_set -- --connect 127.0.0.1:2181 --path /work_queues add e,f
//! cargo run --example item_set -- --connect 127.0.0.1:2181 --path /work_queues remove a
//! cargo run --example item_set -- --connect 127.0.0.1:2181 --path /work_queues replace a,b,c --if-version 7
//! cargo run --example item_set -- --help
//! ```
//!
//! Every change is one atomic, versioned update ([`ItemSet`]): two admins at once never lose each other's changes.
//! Prints the set after the command (`--json`: one JSON object with `version`, `items`, `updating`, `skipped`).
//! Exits 1 with the reason when the update is refused (an item that is not there, a set left empty, a stale
//! `--if-version`), 2 on bad arguments.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::json;
use zk_partitioner::{Item, ItemSet, SharedItems};

#[path = "common/tls.rs"]
mod tls;

/// Read or change the shared item set of a partition path.
#[derive(Debug, Parser)]
#[command(name = "item_set")]
struct Args {
    /// ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/chroot]
    #[arg(long, value_name = "HOST:PORT[,...]")]
    connect: String,
    /// The partitioner's path
    #[arg(long, value_name = "PATH")]
    path: String,
    /// Authenticate the session: SCHEME:CREDENTIALS, e.g. digest:USER:PASSWORD (a set it creates is then readable and
    /// writable by that identity only: creator-all)
    #[arg(long, value_name = "SCHEME:CREDENTIALS")]
    auth: Option<String>,
    #[command(flatten)]
    tls: tls::TlsArgs,
    /// Treat the items as integers, not strings
    #[arg(long)]
    int_items: bool,
    /// Print one JSON object instead of text [default: off]
    #[arg(long)]
    json: bool,
    /// Seconds to keep trying to open a session
    #[arg(long, value_name = "SECS", default_value = "10")]
    connect_timeout: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the set and its version
    Show,
    /// Create the set with these items if there is none (an existing set is left as it is)
    Create {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
    },
    /// Add items (those already there are left as they are)
    Add {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
    },
    /// Remove items (each must be in the set)
    Remove {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
    },
    /// Make the set exactly these items
    Replace {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
        /// Only if the set is still at this version (from `show`): a compare-and-set
        #[arg(long, value_name = "VERSION")]
        if_version: Option<u64>,
    },
}

fn items(raw: &[String], ints: bool) -> Result<Vec<Item>, String> {
    raw.iter()
        .map(|s| {
            let s = s.trim();
            if ints {
                s.parse::<i64>().map(Item::from).map_err(|_| format!("{s:?} is not an integer"))
            } else {
                Ok(Item::from(s))
            }
        })
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(set) => {
            print(&set, args.json);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("item_set: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<SharedItems, String> {
    let timeout = Duration::try_from_secs_f64(args.connect_timeout).map_err(|e| format!("--connect-timeout: {e}"))?;
    let mut connector = zk_partitioner::zookeeper_client::Client::connector();
    if let Some(auth) = &args.auth {
        let (scheme, credentials) = auth.split_once(':').ok_or("--auth must be SCHEME:CREDENTIALS")?;
        connector = connector.with_auth(scheme, credentials.as_bytes());
    }
    let (connector, cluster) = args.tls.apply(connector, &args.connect)?;
    let client = zk_partitioner::connect_with(connector, &cluster, timeout).await.map_err(|e| e.to_string())?;
    let mut set = ItemSet::new(client, args.path.clone()).map_err(|e| e.to_string())?;
    if args.auth.is_some() {
        set = set.with_acls(zk_partitioner::zookeeper_client::Acls::creator_all());
    }
    let ints = args.int_items;
    let result = match &args.command {
        Command::Show => set.read().await,
        Command::Create { items: raw } => set.create_if_missing(items(raw, ints)?).await.map(|(set, _)| set),
        Command::Add { items: raw } => set.add(items(raw, ints)?).await,
        Command::Remove { items: raw } => set.remove(items(raw, ints)?).await,
        Command::Replace { items: raw, if_version: Some(version) } => set.replace_if(*version, items(raw, ints)?).await,
        Command::Replace { items: raw, if_version: None } => set.replace(items(raw, ints)?).await,
    };
    result.map_err(|e| e.to_string())
}

fn print(set: &SharedItems, json: bool) {
    let rendered: Vec<serde_json::Value> = set
        .items
        .iter()
        .map(|item| match item {
            Item::Int(i) => json!(i),
            Item::Str(s) => json!(s),
        })
        .collect();
    if json {
        let line = json!({"version": set.version, "items": rendered, "updating": set.updating, "skipped": set.skipped});
        println!("{line}");
    } else {
        let items: Vec<String> = set.items.iter().map(Item::to_string).collect();
        let updating = if set.updating { " (an update is under way)" } else { "" };
        println!("version {}: {} items{updating}: {}", set.version, items.len(), items.join(","));
        if !set.skipped.is_empty() {
            println!("ignored children (not items): {}", set.skipped.join(","));
        }
    }
}
