#![doc = include_str!("inspect.md")]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use serde::Serialize;
use zk_partitioner::describe::{Contender, DescribeOptions, Description, ItemInfo, MemberInfo, describe_with};
use zk_partitioner::zookeeper_client::{AddWatchMode, EventType, SessionState};
use zk_partitioner::{
    Item,
    partition::{KazooStride, PartitionFn, Rendezvous},
    weighted::{Load, WeightedRendezvous},
};

use crate::connection::{self, seconds};
use crate::lineage;

/// Who owns what under a zk-partitioner / kazoo SetPartitioner path (read-only).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    session: connection::SessionArgs,

    /// The partition path, as given to the partitioners (required)
    #[arg(long, value_parser = path)]
    path: String,

    /// Print one JSON document instead of tables (with --watch: one document per line, per change) [default: off]
    #[arg(long)]
    json: bool,

    /// Print again after every change to the party or the locks, until interrupted [default: off]
    #[arg(long)]
    watch: bool,

    /// The items the members divide, comma-separated (integers if all are integers): items never contended are
    /// then listed as unowned, and --partition checks shares of this set [default: the lock directories' names]
    #[arg(long, value_delimiter = ',')]
    items: Option<Vec<String>>,

    /// The members follow the path's shared set: read it, with its weights, as the items the members divide
    /// (instead of --items) [default: off]
    #[arg(long, conflicts_with = "items")]
    shared_set: bool,

    /// The members' partition function, to list items held outside their holder's share
    #[arg(long, value_enum, default_value_t = Partition::None)]
    partition: Partition,

    /// Print only who owns these items, comma-separated: one line each, the item, its owner (member, session,
    /// fencing token, since when) or "nobody", and how many wait (with --json: one array) [default: every item]
    #[arg(long, value_name = "ITEM[,...]", value_delimiter = ',')]
    owner_of: Option<Vec<String>>,

    /// Items listed per section of the table before "... and N more"
    #[arg(long, default_value_t = 20)]
    limit: usize,

    /// ZooKeeper session timeout, in seconds
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    session_timeout: Duration,

    /// With --watch: wait this long after a change for more changes before printing, in milliseconds
    #[arg(long, default_value_t = 200)]
    settle_ms: u64,
}

/// A partition function the share check can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Partition {
    /// No share check
    None,
    /// kazoo's default (sorted items, stride over sorted members): zk_partitioner::partition::KazooStride
    Stride,
    /// zk_partitioner::partition::Rendezvous::default()
    Rendezvous,
    /// zk_partitioner::weighted::WeightedRendezvous::default(): by weight, in proportion to the members' capacities
    Weighted,
    /// zk_partitioner::weighted::WeightedRendezvous::default().sticky(): the shares the members compute from the placement
    /// record in force (<path>/placement)
    Sticky,
}

/// Runs `zkp inspect`: exit 0 once printed (or when `--watch` is interrupted), 1 on an error.
pub async fn main(args: Args) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zkp inspect: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A partition path, checked as the partitioners check it.
fn path(value: &str) -> Result<String, String> {
    zk_partitioner::checks::check_path(value).map(|()| value.to_string()).map_err(|err| err.to_string())
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = args.session.open(args.session_timeout).await?;
    let items: Option<Vec<Item>> = args.items.as_ref().map(|names| parse_items(names));
    let partition_fn: Option<Box<dyn PartitionFn>> = match args.partition {
        Partition::None => None,
        Partition::Stride => Some(Box::new(KazooStride)),
        Partition::Rendezvous => Some(Box::new(Rendezvous::default())),
        Partition::Weighted => Some(Box::new(WeightedRendezvous::default())),
        Partition::Sticky => Some(Box::new(WeightedRendezvous::default().sticky())),
    };
    let options = || {
        let mut options = DescribeOptions::new().shared_set(args.shared_set);
        if let Some(items) = &items {
            options = options.items(items);
        }
        if let Some(partition_fn) = &partition_fn {
            options = options.partition_func(partition_fn.as_ref());
        }
        options
    };
    if !args.watch {
        let description = describe_with(&client, &args.path, options()).await?;
        print(&description, &args);
        return Ok(());
    }

    // Persistent watches: the party's children, and everything under the locks. Events during a reconnection can be
    // lost (ZOOKEEPER-4698), so a reconnection also prints again.
    let base = args.path.trim_end_matches('/');
    let mut party = client.watch(&format!("{base}/party"), AddWatchMode::Persistent).await?;
    let mut locks = client.watch(&format!("{base}/locks"), AddWatchMode::PersistentRecursive).await?;
    let settle = Duration::from_millis(args.settle_ms);
    let mut changed = true;
    loop {
        if changed {
            let description = describe_with(&client, &args.path, options()).await?;
            print(&description, &args);
        }
        // Wait for a change, then for quiet.
        let mut first = true;
        changed = false;
        loop {
            let wait = async {
                tokio::select! {
                    event = party.changed() => event,
                    event = locks.changed() => event,
                }
            };
            let event = if first {
                tokio::select! {
                    event = wait => Some(event),
                    _ = tokio::signal::ctrl_c() => return Ok(()),
                }
            } else {
                tokio::time::timeout(settle, wait).await.ok()
            };
            let Some(event) = event else { break };
            first = false;
            if event.event_type == EventType::Session {
                match event.session_state {
                    // Never poll a persistent watcher after a terminal event: it panics.
                    state if state.is_terminated() => {
                        return Err(format!("the ZooKeeper session ended: {state}").into());
                    }
                    SessionState::Disconnected => continue,
                    _ => {}
                }
            }
            changed = true;
        }
    }
}

/// Items from the command line: all integers if every name is a canonical integer, else all strings (the rule
/// `describe` uses for lock directory names).
fn parse_items(names: &[String]) -> Vec<Item> {
    let names: Vec<&str> = names.iter().map(|name| name.trim()).filter(|name| !name.is_empty()).collect();
    let ints: Option<Vec<i64>> =
        names.iter().map(|name| name.parse::<i64>().ok().filter(|value| value.to_string() == *name)).collect();
    match ints {
        Some(ints) => ints.into_iter().map(Item::from).collect(),
        None => names.into_iter().map(Item::from).collect(),
    }
}

fn print(description: &Description, args: &Args) {
    if let Some(items) = &args.owner_of {
        return print_owners(description, items, args);
    }
    if args.json {
        let document = Document::from(description);
        let text = if args.watch { serde_json::to_string(&document) } else { serde_json::to_string_pretty(&document) };
        match text {
            Ok(text) => println!("{text}"),
            Err(err) => eprintln!("zkp inspect: cannot render JSON: {err}"),
        }
    } else {
        print!("{}", table(description, args.limit));
        if args.watch {
            println!();
        }
    }
}

/// `--owner-of`: the owner of each item asked for, in the order asked.
fn print_owners(description: &Description, items: &[String], args: &Args) {
    let found: Vec<(&str, Option<&ItemInfo>)> = items
        .iter()
        .map(|item| item.trim())
        .filter(|item| !item.is_empty())
        .map(|item| (item, description.item(item)))
        .collect();
    if args.json {
        let document: Vec<ItemJson> = found
            .iter()
            .map(|&(item, info)| match info {
                Some(info) => ItemJson::from(info),
                None => ItemJson { item, owner: None, waiting: Vec::new(), has_lock_dir: false, successor: None },
            })
            .collect();
        let text = if args.watch { serde_json::to_string(&document) } else { serde_json::to_string_pretty(&document) };
        match text {
            Ok(text) => println!("{text}"),
            Err(err) => eprintln!("zkp inspect: cannot render JSON: {err}"),
        }
        return;
    }
    let now = SystemTime::now();
    for (item, info) in found {
        let successor = info.and_then(|info| info.successor.as_deref());
        let successor = successor.map_or(String::new(), |successor| format!(", then {successor}"));
        match info.and_then(|info| Some((info.owner.as_ref()?, info.waiting.len()))) {
            Some((owner, waiting)) => println!(
                "{item}: {}, token {}, since {}, {waiting} waiting{successor}",
                who(owner),
                owner.token.get(),
                ago(now, owner.created)
            ),
            None if info.is_some_and(|info| info.has_lock_dir) => println!("{item}: nobody"),
            None => println!("{item}: nobody (no lock directory: never contended, or not an item of this path)"),
        }
    }
    if args.watch {
        println!();
    }
}

// ---- The table ----------------------------------------------------------------------------------------------------

fn table(d: &Description, limit: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let now = SystemTime::now();
    let held: usize = d.items.iter().filter(|item| item.owner.is_some()).count();
    let _ = writeln!(
        out,
        "partition {}: {} members, {} items ({} owned, {} unowned, {} contended), {} orphaned lock nodes",
        d.path,
        d.members.len(),
        d.items.len(),
        held,
        d.unowned.len(),
        d.contended().count(),
        d.orphans.len()
    );
    if let Some(version) = d.shared_set_version {
        let _ = writeln!(out, "shared set: version {version}");
    }
    let _ = writeln!(out, "\nMEMBERS");
    let rows: Vec<[String; 7]> = d
        .members
        .iter()
        .map(|m| {
            [
                m.name.clone(),
                m.identifier.clone(),
                m.session.to_string(),
                ago(now, m.joined),
                m.capacity.to_string(),
                m.items.to_string(),
                m.waiting.to_string(),
            ]
        })
        .collect();
    columns(&mut out, ["NAME", "IDENTIFIER", "SESSION", "JOINED", "CAPACITY", "ITEMS", "WAITING"], &rows);
    match d.imbalance() {
        Some(imbalance) => {
            let most = d.members.iter().map(|m| m.items).max().unwrap_or(0);
            let mean = held as f64 / d.members.len().max(1) as f64;
            let _ = writeln!(out, "imbalance: {imbalance:.2} (most {most}, mean {mean:.1} items per member)");
        }
        None => {
            let _ = writeln!(out, "imbalance: - (no member holds anything)");
        }
    }
    if d.members.iter().any(|m| m.load.is_some() || m.held.is_some()) {
        load_table(&mut out, &d.members);
    }
    let _ = writeln!(out, "\nUNOWNED ({})", d.unowned.len());
    if !d.unowned.is_empty() {
        let shown: Vec<&str> = d.unowned.iter().take(limit).map(String::as_str).collect();
        let _ = writeln!(out, "  {}{}", shown.join(", "), more(d.unowned.len(), limit));
    }
    let contended: Vec<_> = d.contended().collect();
    let _ = writeln!(out, "\nCONTENDED ({})", contended.len());
    let rows: Vec<[String; 3]> = contended
        .iter()
        .take(limit)
        .map(|item| {
            let waiting: Vec<String> = item.waiting.iter().map(who).collect();
            [item.item.clone(), item.owner.as_ref().map_or("-".into(), who), waiting.join(", ")]
        })
        .collect();
    if !rows.is_empty() {
        columns(&mut out, ["ITEM", "OWNER", "WAITING (in queue order)"], &rows);
        let _ = write!(out, "{}", more_line(contended.len(), limit));
    }
    let _ = writeln!(out, "\nORPHANS ({})", d.orphans.len());
    let rows: Vec<[String; 5]> = d
        .orphans
        .iter()
        .take(limit)
        .map(|o| {
            let role = if o.holds { "holds" } else { "waits" };
            [
                o.item.clone(),
                o.contender.member.clone(),
                o.contender.session.to_string(),
                role.into(),
                o.contender.node.clone(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        columns(&mut out, ["ITEM", "MEMBER", "SESSION", "ROLE", "NODE"], &rows);
        let _ = write!(out, "{}", more_line(d.orphans.len(), limit));
    }
    if let Some(outside) = &d.outside_share {
        let _ = writeln!(out, "\nOUTSIDE SHARE ({})", outside.len());
        let rows: Vec<[String; 3]> = outside
            .iter()
            .take(limit)
            .map(|o| [o.item.clone(), o.holder.clone(), o.share_of.clone().unwrap_or_else(|| "-".into())])
            .collect();
        if !rows.is_empty() {
            columns(&mut out, ["ITEM", "HELD BY", "SHARE OF"], &rows);
            let _ = write!(out, "{}", more_line(outside.len(), limit));
        }
    }
    if let Some(placement) = &d.placement {
        let when = match placement.current {
            true => "written for the party and set as read: the shares above are the record",
            false => "written before the latest change: the shares above are computed from it, as the members do",
        };
        let _ = writeln!(out, "\nPLACEMENT RECORD ({}/placement): {} items, {when}", d.path, placement.items);
    }
    let _ = writeln!(out, "\nITEMS PER OWNER");
    let rows: Vec<[String; 2]> =
        d.owner_counts.iter().map(|(owner, count)| [owner.clone(), count.to_string()]).collect();
    columns(&mut out, ["OWNER", "ITEMS"], &rows);
    if !d.foreign_party_nodes.is_empty() {
        let _ = writeln!(out, "\nNOT MEMBER NODES under {}/party: {}", d.path, d.foreign_party_nodes.join(", "));
    }
    if let Some(lineage) = d.lineage.as_ref().filter(|l| !l.items.is_empty()) {
        let _ = write!(
            out,
            "\nLINEAGE ({} items with parents, children or closed)\n{}",
            lineage.items.len(),
            lineage::trees(lineage)
        );
    }
    out
}

/// Each member's load: the weight of its share against its ideal share (with a partition function), and the weight
/// it holds.
fn load_table(out: &mut String, members: &[MemberInfo]) {
    use std::fmt::Write;
    let _ = writeln!(out, "\nLOAD (weight per dimension: assigned/ideal under the partition function, and held)");
    let rows: Vec<[String; 6]> = members
        .iter()
        .map(|m| {
            let assigned = m.load.as_ref().map_or("-".into(), |load| {
                let dims: Vec<String> =
                    load.dimensions.iter().map(|d| format!("{} {}/{:.1}", d.dimension, d.assigned, d.ideal)).collect();
                dims.join(", ")
            });
            let imbalance = m.load.as_ref().map_or("-".into(), |load| format!("{:.2}×", load.imbalance));
            let held = m.held.as_ref().map_or("-".into(), |held| {
                let dims: Vec<String> =
                    held.dimensions.iter().map(|d| format!("{} {}", d.dimension, d.assigned)).collect();
                format!("{} ({:.2}×)", dims.join(", "), held.imbalance)
            });
            let over = m.load.iter().chain(&m.held).any(|load| load.over_capacity);
            let status = if over { "OVER CAPACITY" } else { "" };
            [m.name.clone(), m.capacity.to_string(), assigned, imbalance, held, status.into()]
        })
        .collect();
    columns(out, ["NAME", "CAPACITY", "ASSIGNED/IDEAL", "IMBALANCE", "HELD", ""], &rows);
}

/// `member (session)`, marked when orphaned.
fn who(contender: &Contender) -> String {
    let orphan = if contender.orphan { ", orphan" } else { "" };
    format!("{} ({}{orphan})", contender.member, contender.session)
}

fn ago(now: SystemTime, then: SystemTime) -> String {
    match now.duration_since(then) {
        Ok(elapsed) if elapsed.as_secs() >= 3600 => format!("{}h ago", elapsed.as_secs() / 3600),
        Ok(elapsed) if elapsed.as_secs() >= 60 => format!("{}m ago", elapsed.as_secs() / 60),
        Ok(elapsed) => format!("{}s ago", elapsed.as_secs()),
        Err(_) => "just now".into(),
    }
}

fn more(total: usize, limit: usize) -> String {
    if total > limit { format!(" ... and {} more", total - limit) } else { String::new() }
}

fn more_line(total: usize, limit: usize) -> String {
    if total > limit { format!("  ... and {} more\n", total - limit) } else { String::new() }
}

/// Left-aligned columns, two spaces apart, indented by two.
fn columns<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    use std::fmt::Write;
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let mut text = String::from(" ");
        for (cell, width) in cells.iter().zip(widths) {
            let _ = write!(text, " {cell:<width$} ");
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

// ---- The JSON document --------------------------------------------------------------------------------------------

/// What `--json` prints: the description, with sessions as numbers (as the worker prints its own) and times in
/// milliseconds since the epoch.
#[derive(Serialize)]
struct Document<'a> {
    path: &'a str,
    members: Vec<MemberJson<'a>>,
    imbalance: Option<f64>,
    items: Vec<ItemJson<'a>>,
    unowned: &'a [String],
    contended: Vec<&'a str>,
    orphans: Vec<OrphanJson<'a>>,
    outside_share: Option<Vec<OutsideJson<'a>>>,
    owner_counts: &'a BTreeMap<String, usize>,
    foreign_party_nodes: &'a [String],
    shared_set_version: Option<u64>,
    /// With `--shared-set`: the lineage trees (see `zkp items lineage --json`).
    lineage: Option<serde_json::Value>,
    /// With `--partition sticky`: the placement record the shares come from.
    placement: Option<PlacementJson>,
}

#[derive(Serialize)]
struct PlacementJson {
    items: usize,
    /// Written for the party and set as read (else the shares are computed from it).
    current: bool,
}

#[derive(Serialize)]
struct MemberJson<'a> {
    name: &'a str,
    identifier: &'a str,
    node: &'a str,
    session: i64,
    joined_ms: u128,
    items: usize,
    waiting: usize,
    capacity: u32,
    load: Option<LoadJson<'a>>,
    held: Option<LoadJson<'a>>,
}

/// A member's load: its capacity, per dimension the weight assigned (or held) and its ideal share, the imbalance and
/// whether it is over the function's load bound.
#[derive(Serialize)]
struct LoadJson<'a> {
    capacity: u32,
    dimensions: Vec<DimensionJson<'a>>,
    imbalance: f64,
    over_capacity: bool,
}

#[derive(Serialize)]
struct DimensionJson<'a> {
    dimension: &'a str,
    assigned: u64,
    ideal: f64,
}

impl<'a> From<&'a Load> for LoadJson<'a> {
    fn from(load: &'a Load) -> Self {
        LoadJson {
            capacity: load.capacity,
            dimensions: load
                .dimensions
                .iter()
                .map(|d| DimensionJson { dimension: &d.dimension, assigned: d.assigned, ideal: d.ideal })
                .collect(),
            imbalance: load.imbalance,
            over_capacity: load.over_capacity,
        }
    }
}

#[derive(Serialize)]
struct ItemJson<'a> {
    item: &'a str,
    owner: Option<ContenderJson<'a>>,
    waiting: Vec<ContenderJson<'a>>,
    has_lock_dir: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    successor: Option<&'a str>,
}

impl<'a> From<&'a ItemInfo> for ItemJson<'a> {
    fn from(i: &'a ItemInfo) -> Self {
        ItemJson {
            item: &i.item,
            owner: i.owner.as_ref().map(ContenderJson::from),
            waiting: i.waiting.iter().map(ContenderJson::from).collect(),
            has_lock_dir: i.has_lock_dir,
            successor: i.successor.as_deref(),
        }
    }
}

#[derive(Serialize)]
struct ContenderJson<'a> {
    member: &'a str,
    session: i64,
    token: i64,
    node: &'a str,
    created_ms: u128,
    orphan: bool,
}

#[derive(Serialize)]
struct OrphanJson<'a> {
    item: &'a str,
    holds: bool,
    #[serde(flatten)]
    contender: ContenderJson<'a>,
}

#[derive(Serialize)]
struct OutsideJson<'a> {
    item: &'a str,
    holder: &'a str,
    share_of: Option<&'a str>,
}

fn millis(time: SystemTime) -> u128 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

impl<'a> From<&'a Contender> for ContenderJson<'a> {
    fn from(c: &'a Contender) -> Self {
        ContenderJson {
            member: &c.member,
            session: c.session,
            token: c.token.get(),
            node: &c.node,
            created_ms: millis(c.created),
            orphan: c.orphan,
        }
    }
}

impl<'a> From<&'a Description> for Document<'a> {
    fn from(d: &'a Description) -> Self {
        Document {
            path: &d.path,
            members: d
                .members
                .iter()
                .map(|m| MemberJson {
                    name: &m.name,
                    identifier: &m.identifier,
                    node: &m.node,
                    session: m.session,
                    joined_ms: millis(m.joined),
                    items: m.items,
                    waiting: m.waiting,
                    capacity: m.capacity,
                    load: m.load.as_ref().map(LoadJson::from),
                    held: m.held.as_ref().map(LoadJson::from),
                })
                .collect(),
            imbalance: d.imbalance(),
            items: d.items.iter().map(ItemJson::from).collect(),
            unowned: &d.unowned,
            contended: d.contended().map(|i| i.item.as_str()).collect(),
            orphans: d
                .orphans
                .iter()
                .map(|o| OrphanJson { item: &o.item, holds: o.holds, contender: ContenderJson::from(&o.contender) })
                .collect(),
            outside_share: d.outside_share.as_ref().map(|outside| {
                outside
                    .iter()
                    .map(|o| OutsideJson { item: &o.item, holder: &o.holder, share_of: o.share_of.as_deref() })
                    .collect()
            }),
            owner_counts: &d.owner_counts,
            foreign_party_nodes: &d.foreign_party_nodes,
            shared_set_version: d.shared_set_version,
            lineage: d.lineage.as_ref().map(lineage::to_json),
            placement: d.placement.as_ref().map(|p| PlacementJson { items: p.items, current: p.current }),
        }
    }
}
