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
//! Exits 1 with the reason when the update is refused (an item that is not there, an item of the other kind, a set
//! left empty, a stale `--if-version`) or the session cannot be opened (the same messages as the worker's and
//! inspect's), 2 on bad arguments (checked before connecting). `--connect` is required, as by worker and inspect.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;
use zk_partitioner::{Item, ItemSet, SharedItems};

#[path = "common/connection.rs"]
mod connection;
#[path = "common/tls.rs"]
mod tls;

use connection::seconds;

/// Read or change the shared item set of a partition path.
#[derive(Debug, Parser)]
#[command(name = "item_set")]
struct Args {
    #[command(flatten)]
    session: connection::SessionArgs,
    /// The partitioner's path
    #[arg(long, value_name = "PATH", value_parser = path)]
    path: String,
    /// ZooKeeper session timeout, in seconds: if the command is killed part-way through a large update, the update
    /// is undone or finished about this long after
    #[arg(long, value_name = "SECS", default_value = "6", value_parser = seconds)]
    session_timeout: std::time::Duration,
    /// Treat the items as integers, not strings
    #[arg(long)]
    int_items: bool,
    /// Print one JSON object instead of text [default: off]
    #[arg(long)]
    json: bool,
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

/// A partition path, checked as the partitioners check it.
fn path(value: &str) -> Result<String, String> {
    zk_partitioner::check_path(value).map(|()| value.to_string()).map_err(|err| err.to_string())
}

/// The items of the command line, checked as the set checks them (whether they are of the set's kind is known only
/// once it is read).
fn items(raw: &[String], ints: bool) -> Result<Vec<Item>, String> {
    let items: Vec<Item> = raw
        .iter()
        .map(|s| {
            let s = s.trim();
            if ints {
                s.parse::<i64>().map(Item::from).map_err(|_| format!("{s:?} is not an integer (--int-items)"))
            } else {
                Ok(Item::from(s))
            }
        })
        .collect::<Result<_, _>>()?;
    zk_partitioner::check_items(&items).map_err(|err| err.to_string())?;
    Ok(items)
}

impl Command {
    /// The items given to the command, if it takes any.
    fn items(&self) -> Option<&[String]> {
        match self {
            Command::Show => None,
            Command::Create { items } | Command::Add { items } | Command::Remove { items } => Some(items),
            Command::Replace { items, .. } => Some(items),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Bad items are bad arguments: exit 2 with the usage, before connecting.
    let given = match args.command.items().map(|raw| items(raw, args.int_items)).transpose() {
        Ok(given) => given.unwrap_or_default(),
        Err(message) => {
            use clap::CommandFactory;
            Args::command().error(clap::error::ErrorKind::ValueValidation, message).exit()
        }
    };
    match run(&args, given).await {
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

async fn run(args: &Args, items: Vec<Item>) -> Result<SharedItems, String> {
    let client = args.session.open(args.session_timeout).await?;
    let mut set = ItemSet::new(client, args.path.clone()).map_err(|e| e.to_string())?;
    if args.session.auth.is_some() {
        set = set.acls(zk_partitioner::zookeeper_client::Acls::creator_all());
    }
    let result = match &args.command {
        Command::Show => set.read().await,
        Command::Create { .. } => set.create_if_missing(items).await.map(|(set, _)| set),
        Command::Add { .. } => set.add(items).await,
        Command::Remove { .. } => set.remove(items).await,
        Command::Replace { if_version: Some(version), .. } => set.replace_if(*version, items).await,
        Command::Replace { if_version: None, .. } => set.replace(items).await,
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
