//! The option matrix under seeded faults: every combination of partition function ({`KazooStride`, `Rendezvous`}),
//! rebalance ({`Eager`, `Incremental`}) and session policy ({`Standard`, `SessionAware`}), each on a ZooKeeper
//! container of its own, with four in-process members (each its own 3 s session behind its own TCP proxy) dividing 40
//! integer items with a 0.5 s `time_boundary`, a [`SafetyChecker`] sampling every claim against the lock nodes
//! throughout, and after every fault a wait for full recovery.
//!
//! Faults, drawn from a seeded SplitMix64 (the same sequence for every combination):
//! - `Stall`: ZooKeeper is paused until every member's client has given the silent connection up and every member
//!   that listed items has stopped listing them (zookeeper-client gives up after 2/5 of the negotiated session
//!   timeout without a byte: 1.2 s here, checked every 1/20: 150 ms; the Java client and kazoo use 2/3), and for at
//!   least 0.47-0.6 of the session timeout (1.4-1.8 s). A stall that has not suspended every client within 2 s fails
//!   the combination: a stall shorter than the read timeout tests nothing. Every session must survive it: the
//!   clients ping every 450 ms when idle, so the server last heard from each at most about 0.6 s before the pause, and
//!   2.6 s of silence stays under the 3 s timeout.
//! - `JoinThenStall`: a member joins; once it is ALLOCATING (the rebalance it starts is under way), 0-0.2 s later,
//!   ZooKeeper stalls as above. The rebalance cannot end before the 0.5 s `time_boundary` of quiet after the join, and
//!   the test checks, once the pause has taken hold, that some member had not yet ACQUIRED over the new party: the
//!   stall landed mid-rebalance.
//! - `Join`: a member joins; the party grows to at most 6, after which a join comes with a member leaving
//!   (`finish()`).
//! - `Kill`: a member's proxy is cut until its session has really expired (`common::expire`); a new member replaces
//!   it.
//! - `Restart`: ZooKeeper is stopped and started again (data kept).
//!
//! After every fault the test waits until every live member is `ACQUIRED` over exactly the live party, the claims are
//! a disjoint cover of the 40 items and each claim is backed by a lock node of the claimant's session, and requires
//! it within the liveness bound RELIABILITY.md promises: session timeout + `time_boundary` + 2 s (5.5 s), from the
//! end of the fault. A restart's own bound is the same 5.5 s counted from the server serving again (when the fault
//! ends): a session that the outage outlasted is restored by the restarted server with a full timeout, so its lock
//! nodes live a session timeout past the restart, then the party allocates within `time_boundary` + 2 s. When
//! members failed (their clients learn it after zookeeper-client's reconnection back-off, or at their own deadline of
//! 7/5 of the session timeout without a reply), the 5.5 s count from their last replacement's join, or from the
//! failed sessions' expiry (a session timeout after the server serves) if that is later. When sessions survived, it
//! counts from the end of zookeeper-client's reconnection back-off, at most as long after the server serves as the
//! server was down. A member
//! that ends in `FAILURE` after a stall, a join or a kill (which it should all survive; the killed member is removed
//! before) fails the combination; after a restart, members whose sessions did not survive it are replaced, as an
//! orchestrator would, and counted. The checker's fault windows run from each fault's start to its recovery: each
//! must have compared the members' claims against each other, a kill's also against the locks, and each stall's own
//! window must have compared claims while ZooKeeper was paused; over the run, at least 10 claims per fault must have
//! been checked against the locks inside the windows. Any safety violation, a recovery over the bound, or a check not met fails the
//! combination with the seed and the command that replays it.
//!
//! ```text
//! ZOOKEEPER_IMAGE=zk-partitioner/zookeeper:3.8 cargo test --test matrix -- --nocapture
//! MATRIX_SEED=7 MATRIX_FAULTS=40 MATRIX_COMBO=rendezvous-incremental-sessionaware cargo test --test matrix -- --nocapture
//! ```
//!
//! - `MATRIX_SEED`: the seed (decimal, or hex with `0x`); default [`DEFAULT_SEED`].
//! - `MATRIX_FAULTS`: faults per combination; default [`DEFAULT_FAULTS`].
//! - `MATRIX_COMBO`: run only these combinations (comma-separated, e.g. `stride-eager-standard`); the others pass
//!   at once.
//! - `MATRIX_PARALLEL`: how many combinations may run at once (each has its own container); default 2. libtest runs
//!   as many tests at once as there are cores (`--test-threads`); this caps it whatever the thread count, so that
//!   the timings the faults depend on (a 1.2 s read timeout, 3 s sessions) are not distorted by CPU starvation. On 2
//!   cores, 8 at once (`MATRIX_PARALLEL=8 ... -- --test-threads=8`) was too heavy: `docker pause` failed ("unable to
//!   freeze") and sessions expired wholesale; 2 at once takes about 3 minutes for the whole file with the defaults.
//!
//! Each combination prints its rounds as they happen, then the summary table of every combination finished so far
//! (the last one to finish prints all of them).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::faults::{Monitor, Opts, PATH, SafetyChecker};
use common::members::{AbortOnDrop, Member, auto_release, build_member, claimants, ints};
use common::{OwnedServer, Proxy, timing};
use futures::FutureExt;
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Item, PartitionState, Rebalance, SessionPolicy};
use zk_partitioner_testing::{SplitMix64, check_converged};

/// Every member's session timeout.
const SESSION: Duration = Duration::from_secs(3);
/// Every member's `time_boundary`. The join-then-stall offsets (0.5–0.8 s) are set against it: the stall lands as
/// the members, after 0.5 s of quiet, take their new locks.
const TIME_BOUNDARY: Duration = Duration::from_millis(500);
/// The party size the test keeps up (failed members are replaced).
const MEMBERS: usize = 4;
/// Joins grow the party up to this size; beyond it a join comes with a leave.
const MAX_PARTY: usize = 6;
const ITEMS: i64 = 40;
/// How long the test waits for a recovery at most, to report how long it took even when that is over the liveness
/// bound (which fails the combination).
const RECOVERY_CAP: Duration = Duration::from_secs(30);
/// A stall lasts until every client has suspended, and at least `(STALL_MIN + STALL_SPREAD * draw) * SESSION`.
const STALL_MIN: f64 = 0.47;
const STALL_SPREAD: f64 = 0.13;
/// A stall that has not suspended every client this long after the pause took hold fails the combination (past it,
/// the sessions might not survive the stall).
const STALL_DEADLINE: Duration = Duration::from_secs(2);
const DEFAULT_SEED: u64 = 20261123;
const DEFAULT_FAULTS: usize = 12;
const DEFAULT_PARALLEL: usize = 2;

/// The liveness bound RELIABILITY.md promises once faults stop: session timeout + `time_boundary` + 2 s. A restart's
/// recovery is held to it too, counted from the server serving again (see the module docs).
fn liveness_bound() -> Duration {
    SESSION + TIME_BOUNDARY + Duration::from_secs(2)
}

// ---------------------------------------------------------------------------------------------------------------
// The eight combinations
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn stride_eager_standard() {
    matrix(Combo { rendezvous: false, rebalance: Rebalance::Eager, policy: SessionPolicy::Standard }).await;
}

#[tokio::test]
async fn stride_eager_sessionaware() {
    matrix(Combo { rendezvous: false, rebalance: Rebalance::Eager, policy: SessionPolicy::SessionAware }).await;
}

#[tokio::test]
async fn stride_incremental_standard() {
    matrix(Combo { rendezvous: false, rebalance: Rebalance::Incremental, policy: SessionPolicy::Standard }).await;
}

#[tokio::test]
async fn stride_incremental_sessionaware() {
    matrix(Combo { rendezvous: false, rebalance: Rebalance::Incremental, policy: SessionPolicy::SessionAware }).await;
}

#[tokio::test]
async fn rendezvous_eager_standard() {
    matrix(Combo { rendezvous: true, rebalance: Rebalance::Eager, policy: SessionPolicy::Standard }).await;
}

#[tokio::test]
async fn rendezvous_eager_sessionaware() {
    matrix(Combo { rendezvous: true, rebalance: Rebalance::Eager, policy: SessionPolicy::SessionAware }).await;
}

#[tokio::test]
async fn rendezvous_incremental_standard() {
    matrix(Combo { rendezvous: true, rebalance: Rebalance::Incremental, policy: SessionPolicy::Standard }).await;
}

#[tokio::test]
async fn rendezvous_incremental_sessionaware() {
    matrix(Combo { rendezvous: true, rebalance: Rebalance::Incremental, policy: SessionPolicy::SessionAware }).await;
}

#[derive(Clone, Copy, Debug)]
struct Combo {
    rendezvous: bool,
    rebalance: Rebalance,
    policy: SessionPolicy,
}

impl Combo {
    /// `rendezvous-incremental-sessionaware`: what `MATRIX_COMBO` takes.
    fn name(self) -> String {
        let function = if self.rendezvous { "rendezvous" } else { "stride" };
        let rebalance = if self.rebalance == Rebalance::Incremental { "incremental" } else { "eager" };
        let policy = if self.policy == SessionPolicy::SessionAware { "sessionaware" } else { "standard" };
        format!("{function}-{rebalance}-{policy}")
    }

    /// The test's name: `rendezvous_incremental_sessionaware`.
    fn test_name(self) -> String {
        self.name().replace('-', "_")
    }

    /// The position in the summary table.
    fn index(self) -> usize {
        usize::from(self.rendezvous) * 4
            + usize::from(self.rebalance == Rebalance::Incremental) * 2
            + usize::from(self.policy == SessionPolicy::SessionAware)
    }

    fn all_names() -> Vec<String> {
        let mut names = Vec::new();
        for rendezvous in [false, true] {
            for rebalance in [Rebalance::Eager, Rebalance::Incremental] {
                for policy in [SessionPolicy::Standard, SessionPolicy::SessionAware] {
                    names.push(Combo { rendezvous, rebalance, policy }.name());
                }
            }
        }
        names
    }

    fn opts(self) -> Opts {
        Opts {
            session: SESSION,
            time_boundary: TIME_BOUNDARY,
            max_allocation_time: None,
            session_policy: self.policy,
            rebalance: self.rebalance,
            rendezvous: self.rendezvous,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Configuration, seeds, replay
// ---------------------------------------------------------------------------------------------------------------

struct Config {
    seed: u64,
    faults: usize,
}

impl Config {
    fn from_env() -> Config {
        let seed = match std::env::var("MATRIX_SEED") {
            Err(_) => DEFAULT_SEED,
            Ok(raw) => {
                let raw = raw.trim();
                let parsed = match raw.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => raw.parse().ok(),
                };
                parsed.unwrap_or_else(|| panic!("MATRIX_SEED={raw:?} is not a number"))
            }
        };
        let faults = match std::env::var("MATRIX_FAULTS") {
            Err(_) => DEFAULT_FAULTS,
            Ok(raw) => raw.trim().parse().unwrap_or_else(|_| panic!("MATRIX_FAULTS={raw:?} is not a count")),
        };
        Config { seed, faults }
    }

    /// Whether `MATRIX_COMBO` selects `combo` (unset: every combination). Panics on a name that is no combination.
    fn selects(combo: Combo) -> bool {
        let Ok(raw) = std::env::var("MATRIX_COMBO") else { return true };
        let wanted: Vec<&str> = raw.split(',').map(str::trim).filter(|name| !name.is_empty()).collect();
        let known = Combo::all_names();
        for name in &wanted {
            assert!(known.iter().any(|k| k == name), "MATRIX_COMBO: {name:?} is not one of {known:?}");
        }
        wanted.is_empty() || wanted.contains(&combo.name().as_str())
    }

    /// The command that runs `combo` again with the same seed and number of faults.
    fn replay(&self, combo: Combo) -> String {
        let image =
            std::env::var("ZOOKEEPER_IMAGE").map(|image| format!("ZOOKEEPER_IMAGE={image} ")).unwrap_or_default();
        format!(
            "{image}MATRIX_SEED={} MATRIX_FAULTS={} MATRIX_COMBO={} cargo test --test matrix {} -- --exact --nocapture",
            self.seed,
            self.faults,
            combo.name(),
            combo.test_name()
        )
    }
}

/// At most `MATRIX_PARALLEL` combinations at once (tokio's semaphore works across the tests' runtimes).
fn slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let permits = match std::env::var("MATRIX_PARALLEL") {
            Err(_) => DEFAULT_PARALLEL,
            Ok(raw) => match raw.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => panic!("MATRIX_PARALLEL={raw:?} is not a positive count"),
            },
        };
        tokio::sync::Semaphore::new(permits)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// ZooKeeper paused until every client has suspended, for 0.47-0.6 of the session timeout at least.
    Stall,
    /// A member joins; once it is ALLOCATING, 0-0.2 s later, ZooKeeper stalls as in `Stall`.
    JoinThenStall,
    /// A member joins (with a member leaving when the party is at [`MAX_PARTY`]).
    Join,
    /// A member's session is expired for real; a new member replaces it.
    Kill,
    /// ZooKeeper stopped and started again, data kept.
    Restart,
}

/// The draw: stalls, the point of this test, twice as likely as a kill or a restart (also the slowest faults).
const DRAW: [Fault; 8] = [
    Fault::Stall,
    Fault::Stall,
    Fault::JoinThenStall,
    Fault::JoinThenStall,
    Fault::Join,
    Fault::Join,
    Fault::Kill,
    Fault::Restart,
];

/// One round's random choices, all drawn every round whatever the fault, so that every combination (whose party
/// sizes differ as members fail) sees the same sequence of faults.
struct Draw {
    fault: Fault,
    /// Picks the member to kill or to leave, modulo the party size.
    victim: u64,
    /// The stall's least length: `(STALL_MIN + STALL_SPREAD stall) * SESSION`.
    stall: f64,
    /// The join-then-stall delay after the joiner is ALLOCATING: `0.2 delay` s.
    delay: f64,
}

impl Draw {
    fn next(rng: &mut SplitMix64) -> Draw {
        let fault = DRAW[rng.below(DRAW.len())];
        Draw { fault, victim: rng.next_u64(), stall: rng.unit(), delay: rng.unit() }
    }

    fn stall_length(&self) -> Duration {
        SESSION.mul_f64(STALL_MIN + STALL_SPREAD * self.stall)
    }

    fn join_delay(&self) -> Duration {
        Duration::from_secs_f64(0.2 * self.delay)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The summary
// ---------------------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Stats {
    planned: usize,
    done: usize,
    recoveries: BTreeMap<Fault, Vec<Duration>>,
    stalls: usize,
    /// Stalls during which every member's client changed session state (lost its connection).
    stalls_suspending: usize,
    /// Stalls during which every member that listed items stopped listing them.
    stalls_reacted: usize,
    violations: usize,
    claims_checked: u64,
    /// Members replaced because they ended in FAILURE after a restart (not counting the victims of `Kill`).
    replaced: usize,
    /// What the run is at: the first allocation, a fault, the final checks.
    stage: String,
}

impl Stats {
    fn row(&self, combo: Combo, result: &str) -> String {
        let mut all: Vec<Duration> = self.recoveries.values().flatten().copied().collect();
        all.sort();
        let (median, worst) = match all.as_slice() {
            [] => ("-".to_string(), "-".to_string()),
            times => (format!("{:.2?}", times[times.len() / 2]), format!("{:.2?}", times[times.len() - 1])),
        };
        let over = all.iter().filter(|t| **t > liveness_bound()).count();
        format!(
            "| {} | {}/{} | {} | {} | {median} | {worst} | {over} | {} | {}/{} | {} | {} | {} |",
            combo.name(),
            self.done,
            self.planned,
            self.violations,
            self.claims_checked,
            self.stalls,
            self.stalls_suspending,
            self.stalls,
            self.stalls_reacted,
            self.replaced,
            result
        )
    }

    fn per_fault(&self) -> String {
        self.recoveries
            .iter()
            .map(|(fault, times)| {
                let mut times = times.clone();
                times.sort();
                format!(
                    "{fault:?} {} (median {:.2?}, worst {:.2?})",
                    times.len(),
                    times[times.len() / 2],
                    times[times.len() - 1]
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Every finished combination's row, by [`Combo::index`].
fn rows() -> &'static Mutex<BTreeMap<usize, String>> {
    static ROWS: OnceLock<Mutex<BTreeMap<usize, String>>> = OnceLock::new();
    ROWS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn print_table(config: &Config) {
    let rows = rows().lock().unwrap();
    eprintln!(
        "\nmatrix summary (seed {}, {} faults per combination, liveness bound {:.1?}; {} of 8 combinations so far)",
        config.seed,
        config.faults,
        liveness_bound(),
        rows.len()
    );
    eprintln!(
        "| combination | faults | violations | claims checked | median recovery | worst recovery | over the bound | \
         stalls | stalls that suspended every client | stalls every listing member stopped listing in | replaced | result |"
    );
    eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for row in rows.values() {
        eprintln!("{row}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------------------------

async fn matrix(combo: Combo) {
    common::init_tracing();
    let config = Config::from_env();
    if !Config::selects(combo) {
        eprintln!("[{}] not selected by MATRIX_COMBO; skipped", combo.name());
        return;
    }
    let _slot = slots().acquire().await.expect("the semaphore is never closed");
    eprintln!(
        "[{}] seed {}, {} faults; replay with: {}",
        combo.name(),
        config.seed,
        config.faults,
        config.replay(combo)
    );
    let stats = Arc::new(Mutex::new(Stats { planned: config.faults, ..Stats::default() }));
    let started = Instant::now();
    let outcome = AssertUnwindSafe(run(combo, &config, stats.clone())).catch_unwind().await;
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(failure)) => Some(failure),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".to_string());
            Some(format!("panicked: {message}"))
        }
    };
    let took = started.elapsed();
    {
        let stats = stats.lock().unwrap();
        let result = match &failure {
            None => format!("ok ({:.0?})", took),
            Some(_) => format!("FAILED at {} ({:.0?})", stats.stage, took),
        };
        rows().lock().unwrap().insert(combo.index(), stats.row(combo, &result));
        eprintln!("[{}] recoveries by fault: {}", combo.name(), stats.per_fault());
    }
    print_table(&config);
    if let Some(failure) = failure {
        panic!(
            "[{}] {failure}\n\nseed {}, {} faults; replay with:\n    {}",
            combo.name(),
            config.seed,
            config.faults,
            config.replay(combo)
        );
    }
}

/// Runs one combination; `Err` (or a panic in a helper) fails it.
async fn run(combo: Combo, config: &Config, stats: Arc<Mutex<Stats>>) -> Result<(), String> {
    let name = combo.name();
    let mut rng = SplitMix64::new(config.seed);
    let server = OwnedServer::launch().await;
    let namespace = common::namespace(&server).await;
    let observer = common::connect(&format!("{}{namespace}", server.endpoint()), Duration::from_secs(20)).await;
    let items = ints(ITEMS);
    let checker = SafetyChecker::start(observer.clone(), &items, &[]);
    let mut world = World { combo, server, namespace, items, live: Vec::new(), target: MEMBERS, checker, next_id: 0 };
    stats.lock().unwrap().stage = "the first allocation".to_string();
    let first = world.recover(&observer, None).await.map_err(|e| format!("the first allocation: {e}"))?;
    eprintln!("[{name}] {MEMBERS} members ACQUIRED after {:.2?}", first.took);
    let bound = timing(liveness_bound());

    for round in 1..=config.faults {
        let draw = Draw::next(&mut rng);
        stats.lock().unwrap().stage = format!("fault {round} ({:?})", draw.fault);
        // The checker's fault window: from the fault's start to the party's recovery.
        let window = world.checker.fault();
        let fault_started = Instant::now();
        let what = world.inject(&draw).await;
        let fault_over = Instant::now();
        let recovery = match what {
            Ok(_) => world.recover(&observer, Some(draw.fault)).await,
            Err(_) => Err(String::new()),
        };
        let checked = window.close();
        let checks = world.checker.checks();
        let mut s = stats.lock().unwrap();
        s.violations = checks.violations.len();
        s.claims_checked = checks.total.claims_checked;
        let what = match what {
            Ok(what) => what,
            Err(failure) => {
                return Err(format!(
                    "fault {round} ({:?}): {failure}{}",
                    draw.fault,
                    violations_text(&checks.violations)
                ));
            }
        };
        let recovery = match recovery {
            Ok(recovery) => recovery,
            Err(observation) => {
                return Err(format!(
                    "fault {round} ({:?}: {what}): {observation}{}",
                    draw.fault,
                    violations_text(&checks.violations)
                ));
            }
        };
        let took = fault_over.elapsed();
        // After a restart that sessions did not survive, the fault lasts until the failed members' sessions, which
        // the restarted server restored with a full timeout, have expired (a session timeout after it serves), and
        // until the orchestrator (the test) has replaced the failed members: a member cannot converge before it
        // exists, a client learns that its session is gone only after zookeeper-client's back-off or at its own
        // deadline (7/5 of the session timeout without a reply), and the replacements are started one by one.
        // Members whose sessions survived reconnect after zookeeper-client's back-off, which doubles while the
        // server is down: its next attempt comes at most as long after the server serves as the server was down.
        let bounded = match (draw.fault, recovery.replaced_by) {
            (Fault::Restart, Some(replaced_by)) => {
                took.saturating_sub(replaced_by.saturating_duration_since(fault_over).max(SESSION))
            }
            (Fault::Restart, None) => took.saturating_sub(fault_over.saturating_duration_since(fault_started)),
            _ => took,
        };
        s.done = round;
        s.replaced += recovery.replaced;
        s.recoveries.entry(draw.fault).or_default().push(took);
        if let Some(stall) = &what.stall {
            s.stalls += 1;
            s.stalls_suspending += usize::from(stall.clients_suspended == stall.members);
            s.stalls_reacted += usize::from(stall.stopped_listing == stall.listing);
        }
        eprintln!(
            "[{name}] fault {round:3}/{}: {:?}: {what}; recovered in {took:.2?}{}{} (party {}; {} claims checked, {} \
             during the fault and its recovery; {} violations)",
            config.faults,
            draw.fault,
            if recovery.replaced > 0 { format!(", replacing {} failed", recovery.replaced) } else { String::new() },
            if bounded == took {
                String::new()
            } else {
                format!(
                    " ({bounded:.2?} beyond the client's back-off, or after the failed sessions ended and were replaced)"
                )
            },
            world.live.len(),
            checks.total.claims_checked,
            checked.claims_checked,
            checks.violations.len()
        );
        if !checks.violations.is_empty() {
            return Err(format!(
                "safety violated during fault {round} ({:?}: {what}){}",
                draw.fault,
                violations_text(&checks.violations)
            ));
        }
        if bounded > bound {
            return Err(format!(
                "fault {round} ({:?}: {what}): recovered in {bounded:.2?}, over the liveness bound {bound:.2?} \
                 (session timeout + time_boundary + 2 s{})",
                draw.fault,
                match (draw.fault, recovery.replaced_by) {
                    (Fault::Restart, Some(_)) => {
                        ", counted from the last failed member's replacement and the failed sessions' expiry"
                    }
                    (Fault::Restart, None) => ", counted from the server serving again plus the client's back-off",
                    _ => "",
                }
            ));
        }
        // The checker compared claims while the fault was under way, and, while a member's session was being
        // expired (seconds with ZooKeeper up, the others listing), checked them against the locks. (During a stall or
        // a restart nothing can be read, and once ZooKeeper answers again the members list nothing until they have
        // recovered, when the window closes: there the comparison is the check, and each stall asserts its own.)
        let against_locks = draw.fault == Fault::Kill;
        if checked.exclusive_claims == 0 || (against_locks && checked.claims_checked == 0) {
            return Err(format!(
                "fault {round} ({:?}: {what}): between the fault's start and its recovery the safety checker compared \
                 {} claims against each other and checked {} against the locks: {checked:?}",
                draw.fault, checked.exclusive_claims, checked.claims_checked
            ));
        }
    }

    stats.lock().unwrap().stage = "the final checks".to_string();
    let World { checker, .. } = world;
    let min_claims = 10 * config.faults as u64;
    // (a panic here is caught and reported by `matrix`, as any other)
    let checks = checker.assert_safe_during_faults(min_claims).await;
    let mut s = stats.lock().unwrap();
    s.violations = checks.violations.len();
    s.claims_checked = checks.total.claims_checked;
    eprintln!(
        "[{name}] safety: {} samples, {} claims checked ({} during faults and their recoveries), {} checked against \
         each other ({} during faults), {} unreadable samples, {} violations",
        checks.total.samples,
        checks.total.claims_checked,
        checks.during_faults.claims_checked,
        checks.total.exclusive_claims,
        checks.during_faults.exclusive_claims,
        checks.total.unreadable,
        checks.violations.len()
    );
    if !checks.violations.is_empty() {
        return Err(format!("safety violated{}", violations_text(&checks.violations)));
    }
    // Every stall suspended every client and stopped every listing member (each stall checked it already; the table
    // says it again).
    if s.stalls_suspending != s.stalls || s.stalls_reacted != s.stalls {
        return Err(format!(
            "of {} stalls, {} suspended every client and {} stopped every listing member",
            s.stalls, s.stalls_suspending, s.stalls_reacted
        ));
    }
    if s.stalls == 0 {
        eprintln!("[{name}] warning: this seed drew no stall");
    }
    Ok(())
}

fn violations_text(violations: &[String]) -> String {
    if violations.is_empty() {
        return String::new();
    }
    let shown: Vec<&String> = violations.iter().take(10).collect();
    format!("\n{} safety violation(s), the first {}: {shown:#?}", violations.len(), shown.len())
}

// ---------------------------------------------------------------------------------------------------------------
// The world: a server, a party, a checker
// ---------------------------------------------------------------------------------------------------------------

/// A live member: its session (behind its own proxy), its worker loop (kazoo's: `release_set()` when told), and
/// monitors of its session and its snapshots.
struct Live {
    member: Member,
    proxy: Proxy,
    monitor: Monitor,
    _worker: AbortOnDrop,
}

impl Live {
    fn describe(&self) -> String {
        let s = self.member.partitioner.snapshot();
        format!(
            "{} (session {}, client {}): {}{} generation {}, items {:?}, revoked {:?}, party of {} {:?}",
            s.member,
            self.member.session(),
            self.member.client.state_watcher().peek_state(),
            s.state,
            if s.suspended { " (suspended)" } else { "" },
            s.generation,
            s.items.iter().map(Item::to_string).collect::<Vec<_>>(),
            s.revoked.iter().map(Item::to_string).collect::<Vec<_>>(),
            s.members.len(),
            s.members
        )
    }
}

/// What the members saw of a stall.
struct StallSeen {
    length: Duration,
    members: usize,
    /// Members whose client changed session state during the stall.
    clients_suspended: usize,
    /// Members that listed items when the stall began.
    listing: usize,
    /// Of those, the members that stopped listing them during the stall.
    stopped_listing: usize,
    /// Claims the checker compared against each other while ZooKeeper was paused.
    exclusive_claims: u64,
}

/// What a fault did, for the log.
#[derive(Default)]
struct Done {
    text: String,
    stall: Option<StallSeen>,
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)?;
        if let Some(stall) = &self.stall {
            if !self.text.is_empty() {
                f.write_str(", ")?;
            }
            write!(
                f,
                "stalled {:.2?}: {}/{} clients suspended, {}/{} listing members stopped listing, {} claims checked \
                 against each other meanwhile",
                stall.length,
                stall.clients_suspended,
                stall.members,
                stall.stopped_listing,
                stall.listing,
                stall.exclusive_claims
            )?;
        }
        Ok(())
    }
}

struct Recovery {
    took: Duration,
    replaced: usize,
    /// When the last replacement of a failed member had joined, if any was needed.
    replaced_by: Option<Instant>,
}

struct World {
    combo: Combo,
    server: OwnedServer,
    namespace: String,
    items: Vec<Item>,
    live: Vec<Live>,
    /// The party size to keep up.
    target: usize,
    checker: SafetyChecker,
    next_id: usize,
}

impl World {
    /// A new member, watched by the checker, with its worker loop.
    async fn member(&mut self) -> Live {
        self.next_id += 1;
        let proxy = Proxy::start(self.server.addr()).await;
        let client = common::connect(&format!("{}{}", proxy.endpoint(), self.namespace), SESSION).await;
        let member =
            build_member(client, &format!("m{}", self.next_id), &self.items, |b| self.combo.opts().apply(b)).await;
        self.checker.watch(&member);
        let monitor = Monitor::start(&member);
        let worker = auto_release(&member.partitioner);
        Live { member, proxy, monitor, _worker: worker }
    }

    /// Replaces the members that ended in FAILURE and tops the party up to `target`; returns how many it replaced.
    /// After a fault the members should all survive (`after` is not a restart; `None`: the first allocation), a
    /// member in FAILURE is an error instead.
    async fn replace_the_dead(&mut self, after: Option<Fault>) -> Result<usize, String> {
        if after != Some(Fault::Restart)
            && let Some(failed) = self.live.iter().find(|l| l.member.partitioner.state() == PartitionState::Failure)
        {
            let snapshot = failed.member.partitioner.snapshot();
            let cause = snapshot.cause.map_or_else(|| "no cause".to_string(), |cause| cause.to_string());
            let after = after.map_or_else(|| "the first allocation".to_string(), |fault| format!("a {fault:?}"));
            return Err(format!(
                "{} went to FAILURE ({cause}) after {after}, which it should survive",
                snapshot.member
            ));
        }
        let mut replaced = 0;
        let mut kept = Vec::new();
        for live in std::mem::take(&mut self.live) {
            if live.member.partitioner.state() == PartitionState::Failure {
                live.member.partitioner.finish().await;
                replaced += 1;
            } else {
                kept.push(live);
            }
        }
        self.live = kept;
        while self.live.len() < self.target {
            let live = self.member().await;
            self.live.push(live);
        }
        Ok(replaced)
    }

    /// Injects one fault; returns what it did, or why the fault did not do what it is for.
    async fn inject(&mut self, draw: &Draw) -> Result<Done, String> {
        Ok(match draw.fault {
            Fault::Stall => Done { text: String::new(), stall: Some(self.stall(draw.stall_length(), false).await?) },
            Fault::JoinThenStall => {
                let mut text = self.join(draw.victim).await;
                let joiner = self.live.last().expect("the joiner").member.partitioner.clone();
                let what = "the joiner to be ALLOCATING";
                common::wait_until(what, timing(Duration::from_secs(10)), || async {
                    joiner.state() == PartitionState::Allocating
                })
                .await;
                tokio::time::sleep(draw.join_delay()).await; // the fault's own timing, inside the quiet period
                text.push_str(&format!(", stall {:.2?} after it was ALLOCATING", draw.join_delay()));
                Done { text, stall: Some(self.stall(draw.stall_length(), true).await?) }
            }
            Fault::Join => Done { text: self.join(draw.victim).await, stall: None },
            Fault::Kill => {
                let victim = self.live.remove((draw.victim % self.live.len() as u64) as usize);
                let name = victim.member.partitioner.snapshot().member;
                let took = common::expire(&victim.member.client, &victim.proxy).await;
                victim.member.partitioner.finish().await;
                drop(victim);
                let replacement = self.member().await;
                let text = format!(
                    "{name}'s session expired ({took:.2?}), replaced by {}",
                    replacement.member.partitioner.snapshot().member
                );
                self.live.push(replacement);
                Done { text, stall: None }
            }
            Fault::Restart => {
                let started = Instant::now();
                self.server.stop().await;
                self.server.start().await;
                Done { text: format!("stopped and serving again in {:.2?}", started.elapsed()), stall: None }
            }
        })
    }

    /// A member joins; at [`MAX_PARTY`] a member leaves (`finish()`) first.
    async fn join(&mut self, victim: u64) -> String {
        let mut text = String::new();
        if self.live.len() >= MAX_PARTY {
            let leaving = self.live.remove((victim % self.live.len() as u64) as usize);
            text = format!("{} left, ", leaving.member.partitioner.snapshot().member);
            leaving.member.partitioner.finish().await;
        }
        let joining = self.member().await;
        text.push_str(&format!("{} joined", joining.member.partitioner.snapshot().member));
        self.live.push(joining);
        self.target = self.live.len();
        text
    }

    /// Pauses ZooKeeper until every member's client has suspended and every member that listed items has stopped
    /// listing them, and for `length` at least; `Err` if that did not happen within [`STALL_DEADLINE`] (or, with
    /// `mid_rebalance`, if every member was already ACQUIRED over the whole party when the pause took hold).
    async fn stall(&mut self, length: Duration, mid_rebalance: bool) -> Result<StallSeen, String> {
        let count = |live: &[Live]| -> Vec<(u64, u64)> {
            live.iter()
                .map(|l| l.monitor.reactions())
                .map(|reactions| (reactions.session_changes, reactions.stopped_listing))
                .collect()
        };
        let listing: Vec<bool> = self.live.iter().map(|l| !l.member.partitioner.snapshot().items.is_empty()).collect();
        let before = count(&self.live);
        let window = self.checker.fault();
        self.pause().await;
        let paused = Instant::now();
        let settled = self.live.iter().all(|l| {
            let s = l.member.partitioner.snapshot();
            s.state == PartitionState::Acquired && s.members.len() == self.live.len()
        });
        let reacted = |now: &[(u64, u64)]| {
            before.iter().zip(now).zip(&listing).all(|((b, n), listing)| n.0 > b.0 && (!*listing || n.1 > b.1))
        };
        while !reacted(&count(&self.live)) && paused.elapsed() < STALL_DEADLINE {
            tokio::time::sleep(common::POLL).await; // polling the members' counters
        }
        if let Some(rest) = length.checked_sub(paused.elapsed()) {
            tokio::time::sleep(rest).await; // the stall lasts this long at least
        }
        let during = count(&self.live);
        let lasted = paused.elapsed();
        self.server.unpause().await;
        let checked = window.close();
        let changed = |pick: fn(&(u64, u64)) -> u64| {
            before.iter().zip(&during).zip(&listing).filter(|((b, d), _)| pick(d) > pick(b)).count()
        };
        let seen = StallSeen {
            length: lasted,
            members: self.live.len(),
            clients_suspended: changed(|c| c.0),
            listing: listing.iter().filter(|l| **l).count(),
            stopped_listing: before
                .iter()
                .zip(&during)
                .zip(&listing)
                .filter(|((b, d), listing)| **listing && d.1 > b.1)
                .count(),
            exclusive_claims: checked.exclusive_claims,
        };
        if mid_rebalance && settled {
            return Err(format!(
                "the stall missed the rebalance: every member was ACQUIRED over the whole party when the pause took \
                 hold (stalled {lasted:.2?})"
            ));
        }
        if seen.clients_suspended < seen.members || seen.stopped_listing < seen.listing {
            let members: Vec<String> = self.live.iter().map(Live::describe).collect();
            return Err(format!(
                "a stall of {lasted:.2?} suspended {}/{} clients and stopped {}/{} listing members (it must suspend \
                 every one within {STALL_DEADLINE:?}, else it tests nothing)\nmembers:\n  {}",
                seen.clients_suspended,
                seen.members,
                seen.stopped_listing,
                seen.listing,
                members.join("\n  ")
            ));
        }
        if seen.listing > 0 && seen.exclusive_claims == 0 {
            return Err(format!("the safety checker compared no claims while ZooKeeper was paused: {checked:?}"));
        }
        Ok(seen)
    }

    /// Pauses ZooKeeper. On a loaded machine the cgroup freezer can time out ("unable to freeze"): that is Docker's
    /// failure, not the fault under test, so it is retried (after making sure the container runs) a few times.
    async fn pause(&self) {
        let mut attempt = 1;
        loop {
            match self.server.try_pause().await {
                Ok(()) => return,
                Err(err) if attempt < 3 => {
                    eprintln!("[{}] attempt {attempt} to pause ZooKeeper failed, retrying: {err}", self.combo.name());
                    // A freeze that timed out is normally undone by runc; if not, thaw it before trying again.
                    let _ = self.server.try_unpause().await;
                    tokio::time::sleep(Duration::from_millis(200)).await; // before the next attempt
                    attempt += 1;
                }
                Err(err) => panic!("{err} (attempt {attempt})"),
            }
        }
    }

    /// Waits until [`converged`](Self::converged), replacing members that failed after `after` (a restart; `None`:
    /// the first allocation), and failing on any other failure; `Err` with the last observation after
    /// [`RECOVERY_CAP`]. How long it took is for the caller to hold against the liveness bound.
    async fn recover(&mut self, observer: &Client, after: Option<Fault>) -> Result<Recovery, String> {
        let started = Instant::now();
        let cap = timing(RECOVERY_CAP);
        let mut replaced = 0;
        let mut replaced_by = None;
        loop {
            let now_replaced = self.replace_the_dead(after).await?;
            if now_replaced > 0 {
                replaced += now_replaced;
                replaced_by = Some(Instant::now());
            }
            let last = match tokio::time::timeout(Duration::from_secs(5), self.converged(observer)).await {
                Ok(Ok(())) => return Ok(Recovery { took: started.elapsed(), replaced, replaced_by }),
                Ok(Err(observation)) => observation,
                Err(_) => "the convergence check itself took over 5 s".to_string(),
            };
            if started.elapsed() > cap {
                let members: Vec<String> = self.live.iter().map(Live::describe).collect();
                return Err(format!(
                    "no recovery within {cap:.0?}; last observation: {last}\nmembers:\n  {}",
                    members.join("\n  ")
                ));
            }
            tokio::time::sleep(common::POLL).await;
        }
    }

    /// Every live member ACQUIRED over exactly the live party, the claims a disjoint cover of the items, each backed
    /// by a lock node of the claimant's session, and no member changed state during the check (the kit's
    /// [`check_converged`]). `Err` says precisely what is not so.
    async fn converged(&self, observer: &Client) -> Result<(), String> {
        let members: Vec<&Member> = self.live.iter().map(|live| &live.member).collect();
        check_converged(observer, PATH, &claimants(&members), &self.items).await
    }
}

#[test]
fn splitmix64_draws_the_published_sequence() {
    // SplitMix64's published first outputs for seed 0 (so a replay on another machine draws the same faults).
    let mut rng = SplitMix64::new(0);
    assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let names: BTreeSet<String> = Combo::all_names().into_iter().collect();
    assert_eq!(names.len(), 8);
}
