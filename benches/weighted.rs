//! The weighted benchmark on a real ZooKeeper (BENCHMARKS.md, "Weighted items and capacities"): a party of members of
//! capacities 1 to 8 (in this process, each on its own session) over a shared set whose items have Zipf-distributed
//! weights; then one member joins (capacity 4), it leaves, and the hottest item's weight doubles. For each: the time
//! until every member is `ACQUIRED` at the set's version with a disjoint cover, the heaviest member's load against its
//! ideal share, the weight that changed owner against the least that had to, items that kept their owner but were
//! stopped anyway (a new fencing token), and the CPU each member spent in the partition function.
//!
//! ```text
//! cargo bench --bench weighted -- --connect HOST:PORT [--members 100] [--items 100000] [--zipf 1.1]
//!     [--partition weighted|sticky|rendezvous] [--time-boundary SECS] [--path /p]
//! ```
//!
//! `sticky` is `WeightedRendezvous::sticky()`: the members keep the placement record and compute each change from the
//! assignment in force. Loads are measured the same way for every function, from the members' snapshots and the set's weights: member
//! `k`'s ideal share is the total weight × its capacity / the party's total capacity (`Rendezvous` ignores weights
//! and capacities; that is the point of the comparison). "Heaviest" leaves out members that hold a single item
//! heavier than their own ideal share (nothing can place such an item within bound). One JSON line per phase on
//! stdout; `bash bench/weighted.sh` starts a ZooKeeper and writes the table. Not a criterion benchmark.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::{process_cpu_nanos, thread_cpu_nanos};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    FencingToken, Item, PartitionState, Rebalance, SetPartitioner, SharedSet,
    partition::{Call, Observed, Observer, PartitionFn, Rendezvous},
    weighted::{Weight, WeightedRendezvous},
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Function {
    Weighted,
    Sticky,
    Rendezvous,
}

impl Function {
    fn name(self) -> &'static str {
        match self {
            Function::Weighted => "WeightedRendezvous",
            Function::Sticky => "WeightedRendezvous::sticky",
            Function::Rendezvous => "Rendezvous",
        }
    }

    fn build(self) -> Box<dyn PartitionFn> {
        match self {
            Function::Weighted => Box::new(WeightedRendezvous::default()),
            Function::Sticky => Box::new(WeightedRendezvous::default().sticky()),
            Function::Rendezvous => Box::new(Rendezvous::default()),
        }
    }
}

struct Args {
    connect: String,
    members: usize,
    items: i64,
    zipf: f64,
    function: Function,
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
        members: 100,
        items: 100_000,
        zipf: 1.1,
        function: Function::Weighted,
        time_boundary: Duration::from_secs(2),
        path: "/bench/weighted".into(),
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<f64>().ok().filter(|n| n.is_finite() && *n > 0.0).ok_or(format!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--connect" => parsed.connect = value,
            "--members" => parsed.members = number(&value)? as usize,
            "--items" => parsed.items = number(&value)? as i64,
            "--zipf" => parsed.zipf = number(&value)?,
            "--time-boundary" => parsed.time_boundary = Duration::from_secs_f64(number(&value)?),
            "--path" => parsed.path = value,
            "--partition" => {
                parsed.function = match value.as_str() {
                    "weighted" => Function::Weighted,
                    "sticky" => Function::Sticky,
                    "rendezvous" => Function::Rendezvous,
                    other => return Err(format!("--partition: weighted, sticky or rendezvous, not {other:?}")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if parsed.connect.is_empty() || parsed.members < 2 {
        return Err("--connect HOST:PORT is required, and at least 2 members".into());
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("weighted: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("weighted: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("weighted: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Adds up the CPU the observed partition function's calls take (the thread's clock).
struct CpuNanos(Arc<AtomicU64>);

impl Observer for CpuNanos {
    fn observe<T>(&self, _call: Call, run: impl FnOnce() -> T) -> T {
        let started = thread_cpu_nanos();
        let answer = run();
        self.0.fetch_add(thread_cpu_nanos().saturating_sub(started), Ordering::Relaxed);
        answer
    }
}

struct Member {
    partitioner: SetPartitioner,
    capacity: u32,
    cpu: Arc<AtomicU64>,
}

async fn connect(endpoint: &str) -> Result<Client, String> {
    Client::connector()
        .with_session_timeout(Duration::from_secs(60))
        .connect(endpoint)
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))
}

async fn join(args: &Args, path: &str, name: &str, capacity: u32) -> Result<Member, String> {
    let client = connect(&args.connect).await?;
    let cpu = Arc::new(AtomicU64::new(0));
    let inner = args.function.build();
    let partitioner = SetPartitioner::builder(client, path.to_owned(), Vec::<Item>::new())
        .identifier(name)
        .shared_set(true)
        .partition_func(Observed::new(inner, CpuNanos(cpu.clone())))
        .capacity(capacity)
        .rebalance(Rebalance::Incremental)
        .time_boundary(args.time_boundary)
        .build()
        .await
        .map_err(|e| format!("member {name}: {e}"))?;
    // The worker loop: stop what is revoked at once.
    let worker = partitioner.clone();
    tokio::spawn(async move {
        let mut changes = worker.subscribe();
        loop {
            if changes.borrow_and_update().state == PartitionState::Release {
                let _ = worker.release_set().await;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    Ok(Member { partitioner, capacity, cpu })
}

/// Who owns each item, with its fencing token (by member name).
type Owners = BTreeMap<Item, (String, FencingToken)>;

fn owners(members: &[Member]) -> Owners {
    let mut owners = BTreeMap::new();
    for member in members {
        let snapshot = member.partitioner.snapshot();
        for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
            owners.insert(item.clone(), (snapshot.member.to_string(), *token));
        }
    }
    owners
}

/// Waits until every member is ACQUIRED at `version` and the listings are a disjoint cover of `items`.
async fn converged(members: &[Member], version: u64, items: &[Item], limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let expected: BTreeSet<&Item> = items.iter().collect();
    loop {
        let ready = members.iter().all(|m| {
            let s = m.partitioner.snapshot();
            s.state == PartitionState::Acquired && s.set_version == Some(version) && s.members.len() == members.len()
        });
        if ready {
            let mut listed = BTreeSet::new();
            let disjoint =
                members.iter().all(|m| m.partitioner.snapshot().items.iter().all(|item| listed.insert(item.clone())));
            if disjoint && listed.iter().collect::<BTreeSet<_>>() == expected {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no convergence at version {version} within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each member's weight against its ideal share: the heaviest ratio among members that hold no single item heavier
/// than their own share, and how many were left out for holding one.
fn heaviest(members: &[Member], weights: &BTreeMap<Item, u64>) -> (f64, usize) {
    let total: u64 = weights.values().sum();
    let capacity: u64 = members.iter().map(|m| u64::from(m.capacity)).sum();
    let (mut worst, mut left_out) = (0.0f64, 0);
    for member in members {
        let ideal = total as f64 * f64::from(member.capacity) / capacity as f64;
        let held: Vec<u64> = member.partitioner.snapshot().items.iter().map(|i| weights[i]).collect();
        if held.iter().any(|&w| w as f64 > ideal) {
            left_out += 1;
            continue;
        }
        worst = worst.max(held.iter().sum::<u64>() as f64 / ideal);
    }
    (worst, left_out)
}

/// The weight of the items whose owner changed, and how many items kept their owner but got a new token.
fn moved(before: &Owners, after: &Owners, weights: &BTreeMap<Item, u64>) -> (u64, usize, usize) {
    let (mut weight, mut items, mut stopped) = (0, 0, 0);
    for (item, (owner, token)) in before {
        match after.get(item) {
            Some((new_owner, _)) if new_owner != owner => {
                weight += weights[item];
                items += 1;
            }
            Some((_, new_token)) if new_token != token => stopped += 1,
            _ => {}
        }
    }
    (weight, items, stopped)
}

/// Zipf(s) weights for ranks 1..=n, scaled so the lightest is about 1 (at least 1), shuffled over the items with a
/// fixed seed (SplitMix64).
fn zipf_weights(n: i64, s: f64) -> BTreeMap<Item, u64> {
    let scale = (n as f64).powf(s);
    let mut ranks: Vec<i64> = (1..=n).collect();
    let mut state = 0x5eed_u64;
    for i in (1..ranks.len()).rev() {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ranks.swap(i, (z % (i as u64 + 1)) as usize);
    }
    (0..n).map(|i| (Item::from(i), ((scale / (ranks[i as usize] as f64).powf(s)).round() as u64).max(1))).collect()
}

async fn run(args: &Args) -> Result<(), String> {
    let admin = connect(&args.connect).await?;
    let function = args.function.name();
    let path = format!("{}-{}-{}", args.path, function.replace("::", "-"), std::process::id());
    let set = SharedSet::new(admin, path.clone()).map_err(|e| e.to_string())?;
    let mut weights = zipf_weights(args.items, args.zipf);
    let started = Instant::now();
    set.create_if_missing((0..args.items).map(Item::from)).await.map_err(|e| format!("seed the set: {e}"))?;
    set.set_weights(weights.iter().map(|(item, &w)| (item.clone(), Weight::new(w))))
        .await
        .map_err(|e| format!("weigh the set: {e}"))?;
    let seeded = started.elapsed();

    let mut members = Vec::new();
    for k in 0..args.members {
        members.push(join(args, &path, &format!("m{k:03}"), 1 + (k % 8) as u32).await?);
    }
    let current = set.read().await.map_err(|e| format!("read the set: {e}"))?;
    converged(&members, current.version, &current.items, Duration::from_secs(600)).await?;
    eprintln!(
        "seeded and weighed {} items in {seeded:.2?}; {} members ACQUIRED after {:.2?}",
        args.items,
        members.len(),
        started.elapsed()
    );
    let total: u64 = weights.values().sum();
    let line = |phase: &str,
                members: &[Member],
                weights: &BTreeMap<Item, u64>,
                took: Duration,
                moved: (u64, usize, usize),
                least: f64,
                cpu: (f64, f64, f64)| {
        let (worst, left_out) = heaviest(members, weights);
        println!(
            "{{\"function\":\"{function}\",\"phase\":\"{phase}\",\"members\":{},\"items\":{},\"zipf\":{},\
             \"time_boundary_s\":{},\"converged_s\":{:.3},\"heaviest_over_ideal\":{worst:.4},\
             \"left_out\":{left_out},\"moved_weight\":{},\"moved_items\":{},\"least_weight\":{least:.1},\
             \"moved_over_least\":{:.4},\"kept_but_stopped\":{},\"cpu_ms_mean\":{:.3},\"cpu_ms_max\":{:.3},\"process_cpu_ms_per_member\":{:.3}}}",
            members.len(),
            args.items,
            args.zipf,
            args.time_boundary.as_secs_f64(),
            took.as_secs_f64(),
            moved.0,
            moved.1,
            if least > 0.0 { moved.0 as f64 / least } else { 0.0 },
            moved.2,
            cpu.0,
            cpu.1,
            cpu.2,
        );
    };
    // The CPU each member spent in the function since the last phase: mean and max, in ms; and the whole process's
    // CPU over the phase per member (every member's reads, decisions and client, and what the bench itself does: its
    // snapshot polls, and the admin's `set_weights` in the doubling phase).
    let cpu_since = |members: &[Member], before: &(Vec<u64>, u64)| -> (f64, f64, f64) {
        let spent: Vec<f64> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.cpu.load(Ordering::Relaxed) - before.0.get(i).copied().unwrap_or(0)) as f64 / 1e6)
            .collect();
        let process = process_cpu_nanos().saturating_sub(before.1) as f64 / 1e6 / members.len().max(1) as f64;
        (spent.iter().sum::<f64>() / spent.len() as f64, spent.iter().copied().fold(0.0, f64::max), process)
    };
    let cpu_now = |members: &[Member]| -> (Vec<u64>, u64) {
        (members.iter().map(|m| m.cpu.load(Ordering::Relaxed)).collect(), process_cpu_nanos())
    };
    line("formed", &members, &weights, started.elapsed(), (0, 0, 0), 0.0, cpu_since(&members, &(Vec::new(), 0)));

    // A member of capacity 4 joins: at least its ideal share must move to it.
    let (before, cpu) = (owners(&members), cpu_now(&members));
    let started = Instant::now();
    members.push(join(args, &path, "joiner", 4).await?);
    converged(&members, current.version, &current.items, Duration::from_secs(300)).await?;
    let capacity: u64 = members.iter().map(|m| u64::from(m.capacity)).sum();
    let least = total as f64 * 4.0 / capacity as f64;
    line(
        "join",
        &members,
        &weights,
        started.elapsed(),
        moved(&before, &owners(&members), &weights),
        least,
        cpu_since(&members, &cpu),
    );

    // It leaves: at least what it held must move.
    let (before, cpu) = (owners(&members), cpu_now(&members));
    let leaver = members.pop().ok_or("no joiner")?;
    let least = leaver.partitioner.snapshot().items.iter().map(|i| weights[i]).sum::<u64>() as f64;
    let started = Instant::now();
    leaver.partitioner.finish().await;
    converged(&members, current.version, &current.items, Duration::from_secs(300)).await?;
    line(
        "leave",
        &members,
        &weights,
        started.elapsed(),
        moved(&before, &owners(&members), &weights),
        least,
        cpu_since(&members, &cpu),
    );

    // The hottest item's weight doubles: ideally only it moves, and only if its owner has no room left for it.
    let (hot, &hot_weight) = weights.iter().max_by_key(|(_, w)| **w).ok_or("no items")?;
    let hot = hot.clone();
    let (before, cpu) = (owners(&members), cpu_now(&members));
    let started = Instant::now();
    let doubled = [(hot.clone(), Weight::new(hot_weight * 2))];
    let after = set.set_weights(doubled).await.map_err(|e| format!("double the hottest item: {e}"))?;
    let written = started.elapsed();
    weights.insert(hot.clone(), hot_weight * 2);
    converged(&members, after.version, &after.items, Duration::from_secs(300)).await?;
    eprintln!(
        "the admin's set_weights took {written:.2?}; every member ACQUIRED at its version {:.2?} later",
        started.elapsed() - written
    );
    let now = owners(&members);
    let others = moved(&before, &now, &weights);
    let hot_moved = before.get(&hot).map(|o| &o.0) != now.get(&hot).map(|o| &o.0);
    eprintln!(
        "the hottest item {hot} (weight {hot_weight} → {}) {} its owner",
        hot_weight * 2,
        if hot_moved { "changed" } else { "kept" }
    );
    // The least that must move: nothing, if some member can take the hot item within bound; the bench reports the
    // weight that moved besides the hot item itself against the hot item's new weight.
    let besides = (others.0 - if hot_moved { hot_weight * 2 } else { 0 }, others.1 - usize::from(hot_moved), others.2);
    line(
        "hot item doubles",
        &members,
        &weights,
        started.elapsed(),
        besides,
        (hot_weight * 2) as f64,
        cpu_since(&members, &cpu),
    );

    for member in &members {
        member.partitioner.finish().await;
    }
    Ok(())
}
