//! Deterministic simulation: many members, admins and starting processes running the crate's own code against an
//! in-memory ZooKeeper, under seeded faults, with the invariants checked after every step (FoundationDB's and
//! TigerBeetle's discipline: one seed replays one run exactly).
//!
//! What runs is what ships: each member is the decision core fed by the request path ([`crate::driver::requests`]), the
//! publisher and the handle ([`crate::handle`]), started by [`crate::startup`], on a [`SimClient`](net::SimClient) (the
//! [`ZooKeeper`](crate::zookeeper::ZooKeeper) implementation of [`net`]); admins change the shared set with the
//! production [`SetStore`](crate::shared_set::SetStore). Only the driver's `select!` loop is the simulation's own: it
//! picks among the ready sources at random, as `select!` does. The network ([`net`]) queues each session's requests in
//! order, serves them with latency, delivers replies and watch events in order per session, and loses, fails or delays
//! requests at a cut.
//!
//! Faults, from the same random stream: connection cuts (short, or past the session timeout), server stalls past the
//! clients' read timeout (some past the session timeout, expiring sessions), joins, crashes, graceful leaves, a
//! panicking task, admins changing the shared set (concurrently, with changes large enough to be staged, cut and
//! crashed part-way), and operators deleting held lock nodes. A worker per member answers every `Release` with
//! `release_set()` after a random delay, and on every `Acquired` takes each listed item's fencing token and saves its
//! checkpoint through the handle.
//!
//! Checked after every step:
//! - **safety**: no item listed by two members whose sessions are both alive; a member lists an item only while its
//!   session is alive and its lock node is the lowest contender (or, for a node an operator deleted, for at most the
//!   stated bound); `release_set()` returns only once its revoked items' nodes are gone;
//! - **the handle**: every listed item has its fencing token and a checkpoint writer; every save of the listed owner
//!   succeeds or is fenced; no checkpoint write lands unless its lock node is the item's lowest contender;
//! - **the shared set**: every set a member follows is one a writer committed (a version is committed once, with one
//!   set); an admin's reported result matches the set stored at its version; an update reported as failed changed
//!   nothing (its token is in no committed header);
//! - **liveness**: once faults stop, within the liveness bound, every live member is `Acquired` over the real party
//!   and the latest committed set, with nothing left unfinished in the set, their listings a disjoint cover;
//! - **hygiene**: then, no lock node of a live session is anything but its member's held lock (no orphans).
//!
//! `SIM_SEED=<seed>` replays one failing run; `SIM_RUNS`, `SIM_BASE` scale and move the run (see `RELIABILITY.md`).
//!
//! Here: the plan of a run and what it found; [`world`] holds the world that runs it (its processes, faults and
//! checkers), [`net`] the network and [`zk`] the ZooKeeper model it runs on; `tests` the seeded runs.

mod net;
mod world;
mod zk;

use std::time::Duration;

use world::World;

use crate::{Rebalance, SessionPolicy};
use proto::rng::SplitMix64;
use proto::sabotage::Sabotage;

/// The simulation's draws: SplitMix64 ([`proto::rng::SplitMix64`], the `testing` kit's), with the helpers the
/// schedules use.
#[derive(Clone, Debug)]
pub(crate) struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A duration between `low` and `high` (in milliseconds).
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }
}

/// One of the eight mode combinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Combo {
    pub rendezvous: bool,
    pub rebalance: Rebalance,
    pub policy: SessionPolicy,
}

impl Combo {
    pub fn all() -> Vec<Combo> {
        let mut all = Vec::new();
        for rendezvous in [false, true] {
            for rebalance in [Rebalance::Eager, Rebalance::Incremental] {
                for policy in [SessionPolicy::Standard, SessionPolicy::SessionAware] {
                    all.push(Combo { rendezvous, rebalance, policy });
                }
            }
        }
        all
    }
}

/// The shape of one simulated run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub combo: Combo,
    pub members: usize,
    pub items: usize,
    pub faults: usize,
    pub session: Duration,
    pub time_boundary: Duration,
    pub max_allocation_time: Option<Duration>,
    /// Static membership: a member's name is its identifier (`s<slot>`), and a member that is gone is replaced by
    /// one with the same identifier (its start-up waits for the old node to go).
    pub static_membership: bool,
    /// The items come from the shared set, which admins change as faults.
    pub shared_set: bool,
    /// An operator deletes members' held lock nodes by hand, now and then.
    pub operator_deletes: bool,
    /// Members jitter their debounce waits as a large party's do.
    pub large_party_jitter: bool,
    /// Members have capacities 1 to 3 (by slot), the rendezvous combinations divide by weight
    /// ([`WeightedRendezvous`](crate::weighted::WeightedRendezvous)), and admins of a shared set change weights too.
    pub weighted: bool,
    /// With a shared set: admins also split, merge, close and add children, and workers finish the closed items they
    /// hold (fenced, through the handle's checkpoint writer).
    pub lineage: bool,
    /// In a weighted run: the function is sticky ([`WeightedRendezvous::sticky`](crate::weighted::WeightedRendezvous::sticky)),
    /// so members follow and write the placement record.
    pub sticky: bool,
    /// In a sticky run: the members of even slots run another sticky rule (one that places afresh, ignoring the
    /// previous assignment), as in a rolling deploy that changed the rule. They never share a placement; the members
    /// must report it (a partition-function disagreement) instead of waiting for each other without a word.
    pub mixed_rules: bool,
    /// In a sticky run: the members run a sticky rule that moves every item at every call from a previous
    /// assignment ([`world`]'s `Rotating`), so that any member that computes from a record the others hand out as it
    /// is holds another assignment than them: the protocol must never depend on the rule being a fixed point.
    pub rotating: bool,
    /// With a shared set: admins export the party's progress now and then, and import a backup in maintenance
    /// windows that stop the party ([`world`]'s `progress`).
    pub progress: bool,
    pub sabotage: Sabotage,
}

impl Plan {
    /// A plan drawn from the seed: party and set sizes, fault count, timing.
    pub fn draw(combo: Combo, rng: &mut Rng) -> Plan {
        Plan {
            combo,
            members: 2 + rng.below(3) as usize,
            items: 5 + rng.below(30) as usize,
            faults: 6 + rng.below(10) as usize,
            session: Duration::from_secs(3),
            time_boundary: rng.millis(100, 600),
            max_allocation_time: None,
            static_membership: rng.below(2) == 0,
            sabotage: Sabotage::None,
            shared_set: rng.below(3) == 0,
            operator_deletes: rng.below(3) == 0,
            // Drawn last: the fields above stay what they were for every seed.
            large_party_jitter: rng.below(2) == 0,
            weighted: rng.below(3) == 0,
            lineage: rng.below(2) == 0,
            sticky: rng.below(2) == 0,
            mixed_rules: rng.below(8) == 0,
            rotating: rng.below(4) == 0,
            progress: rng.below(2) == 0,
        }
    }
}

/// What the simulation found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outcome {
    pub steps: u64,
    pub faults: usize,
    pub static_membership: bool,
    pub shared_set: bool,
    /// Capacities and weights (see [`Plan::weighted`]).
    pub weighted: bool,
    /// Lineage (see [`Plan::lineage`]): a shared set's run with lineage.
    pub lineage: bool,
    /// A sticky function's run (see [`Plan::sticky`]).
    pub sticky: bool,
    /// Items finished by their owners.
    pub finishes: usize,
    /// Set changes admins made (committed).
    pub set_changes: usize,
    /// Checkpoints saved through the handles.
    pub saves: usize,
    /// Admin commits whose reply was lost while 16 or more other updates landed.
    pub lost_replies: usize,
    /// A sticky run whose members ran two rules ([`Plan::mixed_rules`]).
    pub mixed_rules: bool,
    /// A sticky run whose members ran the rotating rule ([`Plan::rotating`]).
    pub rotating: bool,
    /// Departures a member handed over at once (the fast path), summed over the members.
    pub hand_overs: u64,
    /// Exports of the party's progress that returned, imports that landed, and imports refused.
    pub exports: usize,
    pub imports: usize,
    pub imports_refused: usize,
    /// Simulated time from the end of the last fault to a converged, clean world.
    pub recovery: Duration,
    pub violation: Option<String>,
}

/// Runs one seeded simulation of `plan`.
pub(crate) fn run(seed: u64, plan: Plan) -> Outcome {
    proto::sabotage::set(plan.sabotage);
    let mut world = World::new(seed, plan);
    let outcome = world.run();
    proto::sabotage::set(Sabotage::None);
    outcome
}

#[cfg(test)]
mod tests;
