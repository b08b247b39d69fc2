//! The simulation's tests: every mode combination under seeded faults (a fixed base here, a fresh one in CI), and a
//! pinned seed for each bug the project found, which fails with the bug put back into the code and passes without.

use std::time::{Duration, Instant};

use super::{Combo, Outcome, Plan, Rng, run};
use crate::sabotage::Sabotage;

/// Seeds per combination in `cargo test` (`SIM_RUNS` overrides): enough for a million steps.
const DEFAULT_RUNS: u64 = 110;

/// Seeds per combination (`SIM_RUNS`), and the base they are drawn from (`SIM_BASE`): fixed here so `cargo test`
/// is reproducible; CI and long runs move it, so that every run explores seeds no earlier run has.
fn runs() -> u64 {
    std::env::var("SIM_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_RUNS)
}

fn base() -> u64 {
    std::env::var("SIM_BASE").ok().and_then(|v| v.parse().ok()).unwrap_or(20_261_123)
}

/// The seed of run `k` of combination `c`: one number replays one run (`SIM_SEED`).
fn seed(base: u64, c: usize, k: u64) -> u64 {
    base.wrapping_mul(1_000_003).wrapping_add(c as u64 * 1_000_000_007).wrapping_add(k)
}

/// Runs one seed of one combination; the plan (sizes, fault count, timing) is drawn from the seed itself.
fn run_seed(combo: Combo, seed: u64, sabotage: Sabotage) -> Outcome {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut plan = Plan::draw(combo, &mut rng);
    plan.sabotage = sabotage;
    // A sabotage of the shared set, or of the bound on an operator's deletions, shows only in runs that have them.
    match sabotage {
        Sabotage::IgnoreSetChanges
        | Sabotage::IndexOrder
        | Sabotage::NoSetRecovery
        | Sabotage::ApplyingReadAsBase
        | Sabotage::CreatingReadAsCommitted
        | Sabotage::LostRepliesUnresolved => plan.shared_set = true,
        Sabotage::ChildrenReadyEarly | Sabotage::RetireKeepsLinks => (plan.shared_set, plan.lineage) = (true, true),
        Sabotage::HeldWatchOnlyWhenQuiet => plan.operator_deletes = true,
        _ => {}
    }
    // The other switches' seeds were pinned before lineage existed: they run without it.
    if !matches!(
        sabotage,
        Sabotage::None
            | Sabotage::ChildrenReadyEarly
            | Sabotage::RetireKeepsLinks
            | Sabotage::PlacementDigestOwnersOnly
    ) {
        plan.lineage = false;
    }
    run(seed, plan)
}

fn combo_name(combo: Combo) -> String {
    format!(
        "{}-{}-{}",
        if combo.rendezvous { "rendezvous" } else { "stride" },
        format!("{:?}", combo.rebalance).to_lowercase(),
        format!("{:?}", combo.policy).to_lowercase()
    )
}

/// One combination's runs, summed up.
#[derive(Default)]
struct Tally {
    passed: usize,
    static_runs: usize,
    shared_runs: usize,
    weighted_runs: usize,
    sticky_runs: usize,
    lineage_runs: usize,
    finishes: usize,
    set_changes: usize,
    saves: usize,
    steps: u64,
    faults: usize,
    recoveries: Vec<Duration>,
    failures: Vec<String>,
}

fn tally(c: usize, combo: Combo, seeds: Vec<u64>) -> Tally {
    let mut tally = Tally::default();
    for seed in seeds {
        let outcome = run_seed(combo, seed, Sabotage::None);
        tally.steps += outcome.steps;
        tally.faults += outcome.faults;
        tally.static_runs += usize::from(outcome.static_membership);
        tally.shared_runs += usize::from(outcome.shared_set);
        tally.weighted_runs += usize::from(outcome.weighted);
        tally.sticky_runs += usize::from(outcome.sticky);
        tally.lineage_runs += usize::from(outcome.lineage);
        tally.finishes += outcome.finishes;
        tally.set_changes += outcome.set_changes;
        tally.saves += outcome.saves;
        match outcome.violation {
            Some(violation) => tally.failures.push(format!(
                "{}: replay with\n  SIM_SEED={seed} SIM_COMBO={c} cargo test --release --lib \
                 sim::tests::every_combination -- --nocapture\n{violation}",
                combo_name(combo)
            )),
            None => {
                tally.passed += 1;
                tally.recoveries.push(outcome.recovery);
            }
        }
    }
    tally.recoveries.sort();
    tally
}

/// Every combination of partition function, rebalance mode and session policy, many seeds each (one thread per
/// combination): no violation at any step, and convergence within the liveness bound after the last fault.
#[test]
fn every_combination_survives_seeded_faults() {
    let started = Instant::now();
    let only: Option<u64> = std::env::var("SIM_SEED").ok().and_then(|v| v.parse().ok());
    let only_combo: Option<usize> = std::env::var("SIM_COMBO").ok().and_then(|v| v.parse().ok());
    let (runs, base) = (runs(), base());
    let threads: Vec<_> = Combo::all()
        .into_iter()
        .enumerate()
        .filter(|(c, _)| only_combo.is_none_or(|only| only == *c))
        .map(|(c, combo)| {
            let seeds: Vec<u64> = match only {
                Some(seed) => vec![seed],
                None => (0..runs).map(|k| seed(base, c, k)).collect(),
            };
            std::thread::spawn(move || (combo, tally(c, combo, seeds)))
        })
        .collect();
    let tallies: Vec<(Combo, Tally)> =
        threads.into_iter().map(|t| t.join().expect("a simulation thread panicked")).collect();
    eprintln!(
        "| combination | runs passed | of them static | with a shared set | weighted | sticky | with lineage | set changes | items \
         finished | checkpoints saved | steps | faults | median recovery | worst recovery |"
    );
    eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let (mut steps, mut runs_passed, mut failures) = (0u64, 0usize, Vec::new());
    for (combo, t) in &tallies {
        let median = t.recoveries.get(t.recoveries.len() / 2).copied().unwrap_or_default();
        let worst = t.recoveries.last().copied().unwrap_or_default();
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {median:.2?} | {worst:.2?} |",
            combo_name(*combo),
            t.passed,
            t.static_runs,
            t.shared_runs,
            t.weighted_runs,
            t.sticky_runs,
            t.lineage_runs,
            t.set_changes,
            t.finishes,
            t.saves,
            t.steps,
            t.faults
        );
        steps += t.steps;
        runs_passed += t.passed;
        failures.extend(t.failures.iter().cloned());
    }
    eprintln!(
        "seed base {base}: {runs_passed} runs passed, {} failed, {steps} simulated steps in {:.1?}",
        failures.len(),
        started.elapsed()
    );
    for failure in &failures {
        // The combination, the replay command and the violation of each.
        eprintln!("{}\n", failure.lines().take(3).collect::<Vec<_>>().join("\n"));
    }
    assert!(failures.is_empty(), "{} failing runs; the first:\n{}", failures.len(), failures[0]);
    // The default run's promise, and CI's (`SIM_MIN_STEPS`): a change to the plans must not shrink them unseen.
    let min_steps = std::env::var("SIM_MIN_STEPS").ok().and_then(|v| v.parse().ok());
    if let Some(min) =
        min_steps.or((only.is_none() && only_combo.is_none() && runs == DEFAULT_RUNS).then_some(1_000_000))
    {
        assert!(steps >= min, "the run must take at least {min} steps, took {steps}");
    }
}

/// The seeds that catch each bug the project found, with the combination (index into [`Combo::all`]) they were
/// found in. Found by `pin_regression_seeds` below; a change to the world's model changes what a seed does: re-pin
/// from what it prints. Four switches have no pinned seed ([`UNPINNED`]): `Sabotage::HeldWatchOnlyWhenQuiet` needs
/// lock work busy for over 2 × `time_boundary` right after an acquisition, which the simulation's small parties did
/// not produce in about 50,000 seeds of the current model
/// (`decision::tests::held_locks_are_watched_within_twice_time_boundary_of_their_acquisition_under_churn` catches
/// it); `Sabotage::OwnPredecessorWaited` was found by a long run (4 runs in 73,600, base 20261125 at 787c7f3), and
/// its seeds no longer reproduce it since the model changed, nor did about 50,000 searched seeds.
/// `Sabotage::PlacementRecomputed` was found by base 918273645 (1 run in 12,000, combination 4, seed
/// 918280399822180) while a sticky function's first assignment was the greedy's; since it starts from the sticky rule's
/// own placement, 6,000 seeds in each rendezvous combination did not reproduce it, and
/// `Sabotage::PlacementChangeIgnored` (a race between a record's write and a decision) was not found in 4,000; both
/// are caught by `decision::tests::placement`.
const PINNED: [(Sabotage, usize, u64); 15] = [
    (Sabotage::ResumeAbandonsRebalance, 3, 20_360_183_784_069),
    (Sabotage::UnnoticedSuspensionDuringRelease, 2, 20_360_183_784_072),
    (Sabotage::AckBeforeRelease, 0, 20_360_183_784_062),
    (Sabotage::IgnoreSetChanges, 0, 20_360_183_784_063),
    (Sabotage::OwnStraysKept, 1, 20_360_183_823_457),
    (Sabotage::IndexOrder, 3, 20_360_183_784_069),
    (Sabotage::NoSetRecovery, 5, 20_360_183_784_089),
    (Sabotage::ApplyingReadAsBase, 0, 20_360_183_784_062),
    (Sabotage::CreatingReadAsCommitted, 1, 20_360_183_790_394),
    (Sabotage::LostRepliesUnresolved, 0, 20_360_183_788_575),
    (Sabotage::CleanupOnce, 4, 20_360_183_784_711),
    (Sabotage::ChildrenReadyEarly, 2, 20_360_183_784_064),
    // Found by the long run of 2026-11-26 (seed base 2611261949), 1 of 73,600 runs.
    (Sabotage::RetireKeepsLinks, 0, 2_611_269_782_792_651),
    // The check that skips walking the listed items on every event, remembered past a change of the target.
    (Sabotage::TargetChangeUnseen, 2, 20_360_183_784_062),
    // Found by CI's base 92109071392329 (1 run in 9,600): an item split between two versions of the shared set left
    // the owners' sequence the same, and two members claimed one item for good.
    (Sabotage::PlacementDigestOwnersOnly, 6, 18_322_371_430_704_971_380),
];

/// Switches the search looks for that have no pinned seed (see [`PINNED`]), with the combination to prefer.
const UNPINNED: [(Sabotage, usize, u64); 4] = [
    (Sabotage::HeldWatchOnlyWhenQuiet, 2, 0),
    (Sabotage::OwnPredecessorWaited, 0, 0),
    (Sabotage::PlacementChangeIgnored, 4, 0),
    (Sabotage::PlacementRecomputed, 4, 0),
];

/// Whether `seed` catches `sabotage`: the checker finds a violation, or, in a debug build, one of the core's own
/// assertions stops the run (`TargetChangeUnseen` releases an item while it is listed, which a `debug_assert` guards;
/// a release build runs on and the checker finds the item listed without its lock).
fn caught(combo: Combo, seed: u64, sabotage: Sabotage) -> bool {
    let run = std::panic::catch_unwind(|| run_seed(combo, seed, sabotage).violation.is_some());
    run.unwrap_or(true)
}

/// The checker is not vacuous, and each bug stays fixed: every pinned seed finds a violation with its bug put back,
/// and none with the code as it is.
#[test]
fn regression_seeds() {
    let all = Combo::all();
    for (sabotage, c, seed) in PINNED {
        let combo = all[c];
        assert!(
            caught(combo, seed, sabotage),
            "{sabotage:?} is no longer caught by seed {seed} ({})",
            combo_name(combo)
        );
        if let Some(violation) = run_seed(combo, seed, Sabotage::None).violation {
            panic!("seed {seed} fails the code as it is ({}):\n{violation}", combo_name(combo));
        }
    }
}

/// Which pinned seeds still catch their sabotage and pass without it (all of them, not the first failure only).
/// `cargo test --release --lib sim::tests::probe_pinned_seeds -- --ignored --nocapture`
#[test]
#[ignore = "a report, run when re-pinning"]
fn probe_pinned_seeds() {
    let all = Combo::all();
    for (sabotage, c, seed) in PINNED {
        let caught = caught(all[c], seed, sabotage);
        let clean = run_seed(all[c], seed, Sabotage::None).violation.is_none();
        eprintln!("{sabotage:?} {c} {seed}: caught {caught}, clean {clean}");
    }
}

/// Searches seeds for each sabotage until one catches it (and passes without it); prints the table to pin.
/// `cargo test --release --lib sim::tests::pin_regression_seeds -- --ignored --nocapture`
#[test]
#[ignore = "a search, run to re-pin the regression seeds"]
fn pin_regression_seeds() {
    let all = Combo::all();
    // `SIM_SABOTAGE=<name>[,<name>...]` searches for those alone; `SIM_PIN_TRIES=<n>` (20,000) seeds each;
    // `SIM_PIN_COMBOS=2,3` only in those combinations.
    let only = std::env::var("SIM_SABOTAGE").ok();
    let tries: u64 = std::env::var("SIM_PIN_TRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let combos: Vec<usize> = std::env::var("SIM_PIN_COMBOS")
        .ok()
        .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).filter(|&c| c < all.len()).collect())
        .unwrap_or_default();
    // Those pinned, and those that have no pinned seed.
    let threads: Vec<_> = PINNED
        .iter()
        .chain(&UNPINNED)
        .filter(|(sabotage, ..)| {
            only.as_ref().is_none_or(|names| names.split(',').any(|n| n == format!("{sabotage:?}")))
        })
        .map(|&(sabotage, preferred, _)| {
            let (all, combos) = (all.clone(), combos.clone());
            std::thread::spawn(move || {
                for k in 0..tries {
                    let c = match combos.len() {
                        0 if k % 2 == 0 => preferred,
                        0 => (k as usize / 2) % all.len(),
                        n => combos[k as usize % n],
                    };
                    let seed = seed(base(), 99, k);
                    if let Some(violation) = run_seed(all[c], seed, sabotage).violation
                        && run_seed(all[c], seed, Sabotage::None).violation.is_none()
                    {
                        let first = violation.lines().next().unwrap_or_default().to_owned();
                        return (sabotage, Some((c, seed, k, first)));
                    }
                }
                (sabotage, None)
            })
        })
        .collect();
    for thread in threads {
        match thread.join().expect("a search thread panicked") {
            (sabotage, Some((c, seed, tries, first))) => {
                eprintln!("    (Sabotage::{sabotage:?}, {c}, {seed}), // after {tries} tries: {first}")
            }
            (sabotage, None) => eprintln!("    {sabotage:?}: not caught in {tries} seeds"),
        }
    }
}
