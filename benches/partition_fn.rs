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
//! Then the weighted scenario (always; `--weighted-seeds 0` skips it): `--members` with capacities `1 + i % 8`,
//! `--items` with Zipf weights (`round(1e6 / rank^1.1)`, the ranks shuffled over the items by a seeded generator, one
//! shuffle per seed), for `WeightedRendezvous::default()` and, as the baseline, `Rendezvous::default()` (which
//! ignores weights and capacities). It prints, worst over the seeds (median in brackets):
//!
//! - heaviest / ideal: the largest `load / (total × c / C)` over the members that hold no item larger than that
//!   ideal share;
//! - a join (a member of capacity 4), a leave (one member of each capacity 1..=8 in turn) and the hottest item's
//!   weight doubled: the weight that changed owner over the least that must (the joiner's ideal share afterwards;
//!   the leaver's load; for the doubling, 0, so the weight moved besides that item is printed as a share of the
//!   total);
//! - the CPU milliseconds of each change on a function that saw the previous party: `prepare_weighted` (the work
//!   done ahead) + the deciding `partition_weighted` with the same inputs.
//!
//! The `assign_sticky` row computes each change from the assignment before it
//! (`WeightedRendezvous::assign_sticky`): the start is the greedy's placement carried through one sticky call (its
//! cost is the "first call" column), and the join, each leave and the doubling start from that; its CPU is the one
//! call. It also says whether each start, computed again from itself, came out unchanged.
//!
//! Not a criterion benchmark (`harness = false`); a bare `cargo bench` runs it once at the default size.

use std::process::ExitCode;

mod support;

use support::thread_cpu_nanos;

use zk_partitioner::{
    Item,
    partition::{KazooStride, PartitionFn, Rendezvous},
};

const USAGE: &str = "usage: partition_fn [--members 100] [--items 100000] [--names int|prefixed|random] [--runs 7] \
                     [--weighted-seeds 3]";

struct Args {
    members: usize,
    items: usize,
    names: String,
    runs: usize,
    weighted_seeds: usize,
}

fn parse_args() -> Result<Args, String> {
    // `cargo bench` appends `--bench` (and `cargo test --benches`, `--test`); they mean nothing here.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test");
    let mut parsed = Args { members: 100, items: 100_000, names: "int".into(), runs: 7, weighted_seeds: 3 };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let count = |min: usize| value.parse().ok().filter(|&n: &usize| n >= min).ok_or(format!("{flag}: {value:?}"));
        match flag.as_str() {
            "--members" => parsed.members = count(2)?,
            "--items" => parsed.items = count(1)?,
            "--runs" => parsed.runs = count(1)?,
            "--weighted-seeds" => parsed.weighted_seeds = count(0)?,
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
    if args.weighted_seeds > 0 {
        weighted::run(&args, &items, &party);
    }
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

/// The weighted scenario (see the header).
mod weighted {
    use std::collections::BTreeMap;

    use zk_partitioner::{
        Item,
        partition::{PartitionFn, Rendezvous},
        weighted::{Weight, Weighted, WeightedRendezvous, Weights},
    };
    use zk_partitioner_testing::SplitMix64;

    use super::{Args, thread_cpu_nanos};

    /// One party: names, capacities.
    #[derive(Clone)]
    struct Party {
        names: Vec<String>,
        capacities: Vec<u32>,
    }

    impl Party {
        fn with(&self, name: &str, capacity: u32) -> Party {
            let mut pairs: Vec<(String, u32)> = self.names.iter().cloned().zip(self.capacities.clone()).collect();
            pairs.push((name.to_owned(), capacity));
            pairs.sort();
            Party {
                names: pairs.iter().map(|p| p.0.clone()).collect(),
                capacities: pairs.iter().map(|p| p.1).collect(),
            }
        }

        fn without(&self, at: usize) -> Party {
            let mut party = self.clone();
            party.names.remove(at);
            party.capacities.remove(at);
            party
        }

        fn total(&self) -> u64 {
            self.capacities.iter().map(|&c| u64::from(c)).sum()
        }
    }

    /// The two functions compared, behind one interface: the owners of every item, and one timed change.
    enum Function {
        Weighted(WeightedRendezvous),
        Plain(Rendezvous),
    }

    impl Function {
        fn assign(&self, party: &Party, items: &[Item], weights: &Weights) -> Vec<usize> {
            match self {
                Function::Weighted(f) => f.assign(&Weighted::new("", &party.names, &party.capacities, items, weights)),
                Function::Plain(f) => f.assign(&party.names, items),
            }
        }

        /// CPU milliseconds of `prepare_weighted` and of the deciding call, for the party's middle member.
        fn change(&self, party: &Party, items: &[Item], weights: &Weights) -> (f64, f64) {
            let me = &party.names[party.names.len() / 2];
            let input = Weighted::new(me, &party.names, &party.capacities, items, weights);
            let f: &dyn PartitionFn = match self {
                Function::Weighted(f) => f,
                Function::Plain(f) => f,
            };
            let started = thread_cpu_nanos();
            f.prepare_weighted(&input);
            let prepared = thread_cpu_nanos();
            std::hint::black_box(f.partition_weighted(&input));
            let decided = thread_cpu_nanos();
            let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
            (ms(started, prepared), ms(prepared, decided))
        }
    }

    /// Zipf(1.1) weights over `items`, ranks shuffled by `seed`.
    fn zipf(items: &[Item], seed: u64) -> BTreeMap<Item, Weight> {
        let mut ranks: Vec<u64> = (1..=items.len() as u64).collect();
        let mut rng = SplitMix64::new(seed);
        for i in (1..ranks.len()).rev() {
            ranks.swap(i, rng.below(i + 1));
        }
        items
            .iter()
            .zip(ranks)
            .map(|(item, r)| (item.clone(), Weight::new((1e6 / (r as f64).powf(1.1)).round() as u64)))
            .collect()
    }

    fn value(weights: &Weights, i: usize) -> u64 {
        weights.item(i)[0]
    }

    /// The weight of the items whose owner's name differs, leaving out `except`.
    fn moved(a: (&[usize], &Party), b: (&[usize], &Party), weights: &Weights, except: Option<usize>) -> u64 {
        (0..a.0.len())
            .filter(|&i| Some(i) != except && a.1.names[a.0[i]] != b.1.names[b.0[i]])
            .map(|i| value(weights, i))
            .sum()
    }

    /// The largest `load / ideal` among members holding no item larger than their ideal share.
    fn heaviest(owners: &[usize], party: &Party, weights: &Weights) -> f64 {
        let total = weights.totals()[0] as f64;
        let mut load = vec![0u64; party.names.len()];
        let mut largest = vec![0u64; party.names.len()];
        for (i, &o) in owners.iter().enumerate() {
            load[o] += value(weights, i);
            largest[o] = largest[o].max(value(weights, i));
        }
        (0..load.len())
            .map(|m| (load[m] as f64, total * f64::from(party.capacities[m]) / party.total() as f64, largest[m] as f64))
            .filter(|&(_, ideal, largest)| largest <= ideal)
            .map(|(load, ideal, _)| load / ideal)
            .fold(0.0, f64::max)
    }

    #[derive(Default)]
    struct Figures {
        heaviest: Vec<f64>,
        join: Vec<f64>,
        leave: Vec<f64>,
        hot_only: Vec<f64>,
        first: Vec<f64>,
        costs: Vec<(&'static str, f64, f64)>,
        /// Sticky only: whether every placement computed again from itself came out unchanged.
        idempotent: bool,
        /// Sticky only: how many items changed owner, per kind of change (what a record of the changes would hold).
        items_moved: Vec<(&'static str, usize)>,
    }

    impl Figures {
        fn cost(&mut self, kind: &'static str, (prepare, decide): (f64, f64)) {
            self.costs.push((kind, prepare, decide));
        }
    }

    fn scenario(f: &Function, party: &Party, items: &[Item], seed: u64, out: &mut Figures) {
        let named = zipf(items, seed);
        let weights = Weights::of(items, &named);
        let total = weights.totals()[0];
        let (p, d) = f.change(party, items, &weights);
        out.first.push(p + d);
        let base = f.assign(party, items, &weights);
        out.heaviest.push(heaviest(&base, party, &weights));

        let joined = party.with("member-new", 4);
        out.cost("join", f.change(&joined, items, &weights));
        let after = f.assign(&joined, items, &weights);
        let ideal = total as f64 * 4.0 / joined.total() as f64;
        out.join.push(moved((&base, party), (&after, &joined), &weights, None) as f64 / ideal);
        out.cost("leave", f.change(party, items, &weights));

        // One leaver of each capacity, the first member that has it.
        for capacity in 1..=8 {
            let Some(at) = party.capacities.iter().position(|&c| c == capacity) else { continue };
            let left = party.without(at);
            out.cost("leave", f.change(&left, items, &weights));
            let after = f.assign(&left, items, &weights);
            let load: u64 = (0..items.len()).filter(|&i| base[i] == at).map(|i| value(&weights, i)).sum();
            out.leave.push(moved((&base, party), (&after, &left), &weights, None) as f64 / load.max(1) as f64);
            out.cost("join", f.change(party, items, &weights));
        }

        let hot = (0..items.len()).max_by_key(|&i| value(&weights, i)).unwrap_or(0);
        let mut doubled = named.clone();
        doubled.insert(items[hot].clone(), Weight::new(2 * value(&weights, hot)));
        let doubled = Weights::of(items, &doubled);
        out.cost("weight", f.change(party, items, &doubled));
        let after = f.assign(party, items, &doubled);
        out.hot_only.push(moved((&base, party), (&after, party), &weights, Some(hot)) as f64 / total as f64);
        out.cost("weight", f.change(party, items, &weights));
    }

    /// Each item's owner under `from` as an index into `to` (`None` where that member is not in `to`).
    fn carried_over(owners: &[usize], from: &Party, to: &Party) -> Vec<Option<usize>> {
        owners.iter().map(|&m| to.names.iter().position(|n| *n == from.names[m])).collect()
    }

    /// `assign_sticky` from `previous`, and its CPU milliseconds.
    fn sticky(
        f: &WeightedRendezvous,
        party: &Party,
        items: &[Item],
        weights: &Weights,
        previous: &[Option<usize>],
    ) -> (Vec<usize>, f64) {
        let input = Weighted::new("", &party.names, &party.capacities, items, weights);
        let started = thread_cpu_nanos();
        let owners = f.assign_sticky(&input, previous);
        (owners, thread_cpu_nanos().saturating_sub(started) as f64 / 1e6)
    }

    /// The same events as [`scenario`], each computed by `assign_sticky` from the previous assignment: the start is
    /// the greedy's placement carried through one sticky call (the one-off move a party makes when it first keeps
    /// a record), and every change starts from that.
    fn sticky_scenario(party: &Party, items: &[Item], seed: u64, out: &mut Figures) {
        let f = WeightedRendezvous::default();
        let named = zipf(items, seed);
        let weights = Weights::of(items, &named);
        let total = weights.totals()[0];
        let greedy = f.assign(&Weighted::new("", &party.names, &party.capacities, items, &weights));
        let (base, ms) = sticky(&f, party, items, &weights, &carried_over(&greedy, party, party));
        out.first.push(ms);
        out.heaviest.push(heaviest(&base, party, &weights));
        let (again, _) = sticky(&f, party, items, &weights, &carried_over(&base, party, party));
        out.idempotent &= again == base;

        let joined = party.with("member-new", 4);
        let (after, ms) = sticky(&f, &joined, items, &weights, &carried_over(&base, party, &joined));
        out.cost("join", (0.0, ms));
        out.heaviest.push(heaviest(&after, &joined, &weights));
        let ideal = total as f64 * 4.0 / joined.total() as f64;
        out.join.push(moved((&base, party), (&after, &joined), &weights, None) as f64 / ideal);
        out.items_moved.push(("join", count_moved((&base, party), (&after, &joined))));

        for capacity in 1..=8 {
            let Some(at) = party.capacities.iter().position(|&c| c == capacity) else { continue };
            let left = party.without(at);
            let (after, ms) = sticky(&f, &left, items, &weights, &carried_over(&base, party, &left));
            out.cost("leave", (0.0, ms));
            out.heaviest.push(heaviest(&after, &left, &weights));
            let load: u64 = (0..items.len()).filter(|&i| base[i] == at).map(|i| value(&weights, i)).sum();
            out.leave.push(moved((&base, party), (&after, &left), &weights, None) as f64 / load.max(1) as f64);
            out.items_moved.push(("leave", count_moved((&base, party), (&after, &left))));
        }

        let hot = (0..items.len()).max_by_key(|&i| value(&weights, i)).unwrap_or(0);
        let mut doubled = named.clone();
        doubled.insert(items[hot].clone(), Weight::new(2 * value(&weights, hot)));
        let doubled = Weights::of(items, &doubled);
        let (after, ms) = sticky(&f, party, items, &doubled, &carried_over(&base, party, party));
        out.cost("weight", (0.0, ms));
        out.heaviest.push(heaviest(&after, party, &doubled));
        out.hot_only.push(moved((&base, party), (&after, party), &weights, Some(hot)) as f64 / total as f64);
        out.items_moved.push(("weight", count_moved((&base, party), (&after, party))));
    }

    /// How many items changed owner, by name.
    fn count_moved(a: (&[usize], &Party), b: (&[usize], &Party)) -> usize {
        (0..a.0.len()).filter(|&i| a.1.names[a.0[i]] != b.1.names[b.0[i]]).count()
    }

    fn worst(values: &mut [f64]) -> String {
        values.sort_by(f64::total_cmp);
        match values {
            [] => "-".into(),
            _ => format!("{:.3} [{:.3}]", values[values.len() - 1], values[values.len() / 2]),
        }
    }

    pub(super) fn run(args: &Args, items: &[Item], party: &[String]) {
        let party = Party { names: party.to_vec(), capacities: (0..party.len()).map(|i| 1 + (i % 8) as u32).collect() };
        println!();
        println!(
            "weighted: {} members (capacities 1 + i % 8, total {}), {} items with Zipf(1.1) weights, {} seeds; worst \
             [median]",
            party.names.len(),
            party.total(),
            items.len(),
            args.weighted_seeds
        );
        println!(
            "{:<20} {:>16} {:>16} {:>16} {:>18} {:>20}",
            "function", "heaviest/ideal", "join moved/min", "leave moved/min", "doubling: others", "first call ms"
        );
        for (name, make) in [
            ("WeightedRendezvous", Some((|| Function::Weighted(WeightedRendezvous::default())) as fn() -> Function)),
            ("assign_sticky", None),
            ("Rendezvous", Some(|| Function::Plain(Rendezvous::default()))),
        ] {
            let mut figures = Figures { idempotent: true, ..Figures::default() };
            for seed in 0..args.weighted_seeds as u64 {
                match make {
                    Some(make) => scenario(&make(), &party, items, seed, &mut figures),
                    None => sticky_scenario(&party, items, seed, &mut figures),
                }
            }
            // Per kind of change: median of prepare + decide [median prepare + median decide], and the largest sum.
            let cost = |kind: &str| {
                let of = |pick: fn(&(&str, f64, f64)) -> f64| {
                    let mut v: Vec<f64> = figures.costs.iter().filter(|c| c.0 == kind).map(pick).collect();
                    v.sort_by(f64::total_cmp);
                    (v.get(v.len() / 2).copied().unwrap_or(0.0), v.last().copied().unwrap_or(0.0))
                };
                let (sum, max) = of(|c| c.1 + c.2);
                format!("{sum:.1} [{:.1}+{:.1}] max {max:.1}", of(|c| c.1).0, of(|c| c.2).0)
            };
            let others = worst(&mut figures.hot_only.iter().map(|v| v * 100.0).collect::<Vec<_>>());
            println!(
                "{name:<20} {:>16} {:>16} {:>16} {:>17}% {:>20}",
                worst(&mut figures.heaviest),
                worst(&mut figures.join),
                worst(&mut figures.leave),
                others,
                worst(&mut figures.first),
            );
            println!(
                "{:<20} CPU ms per change, median [prepare + decide] and max: join {}, leave {}, weight {}",
                "",
                cost("join"),
                cost("leave"),
                cost("weight")
            );
            if make.is_none() {
                println!("{:<20} computed again from itself, every start unchanged: {}", "", figures.idempotent);
                let items = |kind: &str| {
                    let mut v: Vec<usize> = figures.items_moved.iter().filter(|m| m.0 == kind).map(|m| m.1).collect();
                    v.sort_unstable();
                    format!(
                        "{} [{}-{}]",
                        v.get(v.len() / 2).unwrap_or(&0),
                        v.first().unwrap_or(&0),
                        v.last().unwrap_or(&0)
                    )
                };
                println!(
                    "{:<20} items that changed owner, median [range]: join {}, leave {}, weight {}",
                    "",
                    items("join"),
                    items("leave"),
                    items("weight")
                );
            }
        }
    }
}
