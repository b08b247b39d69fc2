#![doc = include_str!("items.md")]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;
use zk_partitioner::{
    Item, SharedSet,
    shared_set::{Imported, Lineage, Progress, SharedSetVersion},
    weighted::Weight,
};

use crate::connection::{self, seconds};
use crate::{lineage, progress};

/// Read or change the shared set of a partition path.
#[derive(Debug, clap::Args)]
pub struct Args {
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
    /// Give items weights, all at once: pairs of an item and its weight, a whole number (5) or values in named
    /// dimensions (cpu=3,bytes=100); the other items keep theirs
    Weigh {
        #[arg(value_names = ["ITEM", "WEIGHT"], num_args = 2.., required = true)]
        pairs: Vec<String>,
    },
    /// Give items back the default weight of 1
    ResetWeights {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
    },
    /// Split PARENT into new children: PARENT is closed, and the children enter the set once it has finished
    Split {
        #[arg(value_name = "PARENT")]
        parent: String,
        #[arg(value_name = "C1,C2", value_delimiter = ',', required = true)]
        children: Vec<String>,
    },
    /// Merge parents into one new child: every parent is closed, and the child enters the set once all have finished
    Merge {
        #[arg(value_name = "P1,P2", value_delimiter = ',', required = true)]
        parents: Vec<String>,
        #[arg(value_name = "CHILD")]
        child: String,
    },
    /// Add a new child after parents that stay open: it enters the set once they have all finished
    AddChild {
        #[arg(value_name = "CHILD")]
        child: String,
        #[arg(value_name = "P1,P2", value_delimiter = ',', required = true)]
        parents: Vec<String>,
    },
    /// Close items: their source produces nothing new for them (their owners finish them once drained)
    Close {
        #[arg(value_name = "A,B,C", value_delimiter = ',', required = true)]
        items: Vec<String>,
    },
    /// Print the lineage trees: each item with parents, children or closed, and where it stands
    Lineage,
    /// Retire the items finished more than --age-secs ago whose children have all started
    Retire {
        /// How long after its finish an item is kept (for its children's first owners to read its checkpoint)
        #[arg(long, value_name = "SECS", default_value = "86400")]
        age_secs: u64,
    },
    /// Write the party's progress (the set, lineage, weights and every checkpoint) as one JSON token
    Export {
        /// Write the token to FILE (whole, then renamed into place) and print a summary, instead of the token on
        /// stdout
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Import a token from `export` into the path, all or nothing; the party must be stopped
    Import {
        /// The token (`-`: standard input)
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// What to take from the token
        #[arg(long, value_enum, default_value_t = progress::Mode::Restore)]
        mode: progress::Mode,
    },
    /// Reset every checkpoint at once (the set, lineage and weights stay); the party must be stopped
    ResetCheckpoints,
}

/// What a command prints.
enum Output {
    /// The set after the command, and (`create`) whether this command created it.
    Set(SharedSetVersion, Option<bool>),
    Lineage(Lineage),
    Retired(Vec<Item>),
    /// What an import (or a reset of the checkpoints) did, and which.
    Imported(Imported, &'static str),
    /// `export` printed its token or summary.
    Exported,
}

/// A partition path, checked as the partitioners check it.
fn path(value: &str) -> Result<String, String> {
    zk_partitioner::checks::check_path(value).map(|()| value.to_string()).map_err(|err| err.to_string())
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
    zk_partitioner::checks::check_items(&items).map_err(|err| err.to_string())?;
    Ok(items)
}

/// What the command line gives the command, checked before connecting: items, for `weigh` their weights, and for
/// `import` the token.
#[derive(Debug, Default)]
struct Given {
    items: Vec<Item>,
    weights: Vec<Weight>,
    token: Option<Progress>,
}

impl Command {
    /// The items (and weights) given to the command, checked: bad ones are bad arguments.
    fn given(&self, ints: bool) -> Result<Given, String> {
        let joined: Vec<String>;
        let raw = match self {
            Command::Show
            | Command::Lineage
            | Command::Retire { .. }
            | Command::Export { .. }
            | Command::ResetCheckpoints => return Ok(Given::default()),
            Command::Import { file, .. } => {
                return Ok(Given { token: Some(progress::read_token(file)?), ..Given::default() });
            }
            Command::Split { parent, children } => {
                joined = std::iter::once(parent).chain(children).cloned().collect();
                &joined
            }
            Command::Merge { parents, child } | Command::AddChild { child, parents } => {
                joined = std::iter::once(child).chain(parents).cloned().collect();
                &joined
            }
            Command::Close { items } => items,
            Command::Weigh { pairs } => return weighed(pairs, ints),
            Command::Create { items }
            | Command::Add { items }
            | Command::Remove { items }
            | Command::ResetWeights { items } => items,
            Command::Replace { items, .. } => items,
        };
        Ok(Given { items: items(raw, ints)?, ..Given::default() })
    }
}

/// `weigh`'s arguments: items and weights, alternating.
fn weighed(pairs: &[String], ints: bool) -> Result<Given, String> {
    if !pairs.len().is_multiple_of(2) {
        let last = pairs.last().map_or("", String::as_str);
        return Err(format!("{last:?} has no weight: weigh takes ITEM WEIGHT pairs"));
    }
    let names: Vec<String> = pairs.iter().step_by(2).cloned().collect();
    let weights = pairs.iter().skip(1).step_by(2).map(|w| w.parse::<Weight>()).collect::<Result<_, _>>();
    Ok(Given { items: items(&names, ints)?, weights: weights.map_err(|e| e.to_string())?, token: None })
}

/// Runs `zkp items`: exit 0 with the set printed, 1 when the update is refused or no session opens.
pub async fn main(args: Args) -> ExitCode {
    // Bad items are bad arguments: exit 2 with the usage, before connecting.
    let given = match args.command.given(args.int_items) {
        Ok(given) => given,
        Err(message) => crate::usage_error("items", clap::error::ErrorKind::ValueValidation, &message),
    };
    match run(&args, given).await {
        Ok(Output::Set(set, created)) => {
            print(&set, created, args.json);
            ExitCode::SUCCESS
        }
        Ok(Output::Lineage(lineage)) => {
            match args.json {
                true => println!("{}", lineage::to_json(&lineage)),
                false => print!(
                    "version {}: {} items with lineage\n{}",
                    lineage.version,
                    lineage.items.len(),
                    lineage::trees(&lineage)
                ),
            }
            ExitCode::SUCCESS
        }
        Ok(Output::Imported(imported, what)) => {
            progress::print_imported(&imported, what, args.json);
            ExitCode::SUCCESS
        }
        Ok(Output::Exported) => ExitCode::SUCCESS,
        Ok(Output::Retired(items)) => {
            let names: Vec<String> = items.iter().map(Item::to_string).collect();
            match args.json {
                true => println!("{}", json!({ "retired": names })),
                false => println!("retired {} items: {}", names.len(), names.join(",")),
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("zkp items: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, given: Given) -> Result<Output, String> {
    let Given { items, weights, token } = given;
    let client = args.session.open(args.session_timeout).await?;
    let mut set = SharedSet::new(client, args.path.clone()).map_err(|e| e.to_string())?;
    if args.session.auth.is_some() {
        set = set.acls(zk_partitioner::zookeeper_client::Acls::creator_all());
    }
    let result = match &args.command {
        Command::Lineage => return set.lineage().await.map(Output::Lineage).map_err(|e| e.to_string()),
        Command::Export { out } => {
            return progress::export(&set, out.as_ref(), args.json).await.map(|()| Output::Exported);
        }
        Command::Import { mode, .. } => {
            let Some(token) = token else { return Err("no token read".into()) };
            let imported = set.import(&token, (*mode).into()).await.map_err(|e| e.to_string())?;
            return Ok(Output::Imported(imported, "imported"));
        }
        Command::ResetCheckpoints => {
            let imported = set.reset_checkpoints().await.map_err(|e| e.to_string())?;
            return Ok(Output::Imported(imported, "checkpoints reset"));
        }
        Command::Retire { age_secs } => {
            let age = std::time::Duration::from_secs(*age_secs);
            return set.retire(age).await.map(Output::Retired).map_err(|e| e.to_string());
        }
        Command::Split { .. } => set.split(items[0].clone(), items[1..].to_vec()).await,
        Command::Merge { .. } => set.merge(items[1..].to_vec(), items[0].clone()).await,
        Command::AddChild { .. } => set.add_child(items[0].clone(), items[1..].to_vec()).await,
        Command::Close { .. } => set.close(items).await,
        Command::Show => set.read().await,
        Command::Create { .. } => {
            let created = set.create_if_missing(items).await;
            return created.map(|(set, created)| Output::Set(set, Some(created))).map_err(|e| e.to_string());
        }
        Command::Add { .. } => set.add(items).await,
        Command::Remove { .. } => set.remove(items).await,
        Command::Replace { if_version: Some(version), .. } => set.replace_if(*version, items).await,
        Command::Replace { if_version: None, .. } => set.replace(items).await,
        Command::Weigh { .. } => set.set_weights(items.into_iter().zip(weights)).await,
        Command::ResetWeights { .. } => set.reset_weights(items).await,
    };
    result.map(|set| Output::Set(set, None)).map_err(|e| e.to_string())
}

fn print(set: &SharedSetVersion, created: Option<bool>, json: bool) {
    let rendered: Vec<serde_json::Value> = set
        .items
        .iter()
        .map(|item| match item {
            Item::Int(i) => json!(i),
            Item::Str(s) => json!(s),
        })
        .collect();
    if json {
        let weights: serde_json::Map<String, serde_json::Value> = set
            .weights
            .iter()
            .map(|(item, weight)| {
                let values: serde_json::Map<String, serde_json::Value> =
                    weight.values().map(|(dimension, value)| (dimension.to_owned(), json!(value))).collect();
                (item.to_string(), serde_json::Value::Object(values))
            })
            .collect();
        let mut line = json!({
            "version": set.version,
            "items": rendered,
            "updating": set.updating,
            "skipped": set.skipped,
            "weights": weights,
        });
        if let Some(created) = created {
            line["created"] = json!(created);
        }
        println!("{line}");
    } else {
        let items: Vec<String> = set.items.iter().map(Item::to_string).collect();
        let updating = if set.updating { " (an update is under way)" } else { "" };
        let created = match created {
            Some(true) => " (created now)",
            Some(false) => " (it existed already)",
            None => "",
        };
        println!("version {}: {} items{updating}{created}: {}", set.version, items.len(), items.join(","));
        if !set.weights.is_empty() {
            let weights: Vec<String> = set.weights.iter().map(|(item, weight)| format!("{item} {weight}")).collect();
            println!("weights of {} items (the others weigh 1): {}", weights.len(), weights.join("; "));
        }
        if !set.skipped.is_empty() {
            println!("ignored children (not items): {}", set.skipped.join(","));
        }
    }
}
