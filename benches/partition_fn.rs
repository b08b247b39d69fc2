//! The partition functions' own cost, without ZooKeeper: what one member spends computing its share when the party
//! forms (the first call), when one member joins and when one leaves.
//!
//! ```text
//! cargo bench --bench partition_fn -- [--members 100] [--items 100000] [--names int|prefixed|random] [--runs 7]
//! ```
//!
//! `--names`: the integers `0..N` (`int`, as the scale benchmark uses), `queue-00000`.. (`prefixed`), or 16 hex digits
//! that share no beginning with their neighbours (`random`). Each run builds a fresh function (nothing remembered),
//! calls it for the party of `--members`, then for the party with one more member, then for the party without its
//! first member; every call is timed on its own, by the thread's CPU clock (Linux), so other processes on the machine
//! do not count. Prints the median and the range over the runs, in milliseconds, for `KazooStride` and
//! `Rendezvous::default()`.
//!
//! Not a criterion benchmark (`harness = false`); a bare `cargo bench` runs it once at the default size.

use std::process::ExitCode;

mod support;

use support::thread_cpu_nanos;

use zk_partitioner::{Item, KazooStride, PartitionFn, Rendezvous};

const USAGE: &str = "usage: partition_fn [--members 100] [--items 100000] [--names int|prefixed|random] [--runs 7]";

struct Args {
    members: usize,
    items: usize,
    names: String,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    // `cargo bench` appends `--bench` (and `cargo test --benches`, `--test`); they mean nothing here.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test");
    let mut parsed = Args { members: 100, items: 100_000, names: "int".into(), runs: 7 };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let count = |min: usize| value.parse().ok().filter(|&n: &usize| n >= min).ok_or(format!("{flag}: {value:?}"));
        match flag.as_str() {
            "--members" => parsed.members = count(2)?,
            "--items" => parsed.items = count(1)?,
            "--runs" => parsed.runs = count(1)?,
            "--names" if ["int", "prefixed", "random"].contains(&value.as_str()) => parsed.names = value,
            _ => return Err(format!("unknown argument {flag} {value:?}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut items: Vec<Item> = (0..args.items as u64)
        .map(|i| match args.names.as_str() {
            "int" => Item::from(i as i64),
            "prefixed" => Item::from(format!("queue-{i:05}")),
            // A fixed odd multiplier scatters the integers over 64 bits: neighbours share no beginning.
            _ => Item::from(format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        })
        .collect();
    items.sort();
    // The partitioner passes sorted parties; `member-000`.. sort as numbered.
    let party: Vec<String> = (0..args.members).map(|m| format!("member-{m:03}")).collect();
    let mut joined = party.clone();
    joined.push("member-new".into());
    let left: Vec<String> = party[1..].to_vec();
    println!(
        "{} members over {} items ({} names), {} runs: CPU milliseconds for one member's share, median [min-max]",
        args.members, args.items, args.names, args.runs
    );
    println!("{:<14} {:>24} {:>24} {:>24}", "function", "first call", "a member joins", "a member leaves");
    measure("KazooStride", &args, &items, [&party, &joined, &left], || Box::new(KazooStride));
    measure("Rendezvous", &args, &items, [&party, &joined, &left], || Box::new(Rendezvous::default()));
    ExitCode::SUCCESS
}

/// Times `runs` rounds of first call, join, leave, each round on a fresh function from `make`.
fn measure(
    name: &str,
    args: &Args,
    items: &[Item],
    parties: [&Vec<String>; 3],
    make: impl Fn() -> Box<dyn PartitionFn>,
) {
    let mut times = vec![Vec::new(); parties.len()];
    for _ in 0..args.runs {
        let function = make();
        for (party, times) in parties.iter().zip(&mut times) {
            // The member whose share is computed: one in every party.
            let me = &party[party.len() / 2];
            let started = thread_cpu_nanos();
            let share = function.partition(me, party, items);
            times.push(thread_cpu_nanos().saturating_sub(started) as f64 / 1e6);
            std::hint::black_box(share);
        }
    }
    let cells: Vec<String> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            format!("{:.1} [{:.1}-{:.1}]", t[t.len() / 2], t[0], t[t.len() - 1])
        })
        .collect();
    println!("{name:<14} {:>24} {:>24} {:>24}", cells[0], cells[1], cells[2]);
}
