//! What the tests and the simulation's checker read of a core (test builds only): none of it decides anything.

use std::collections::BTreeSet;
use std::time::Instant;

use super::Core;
use crate::announcement::Agreement;
use crate::{Item, PartitionState};

impl Core {
    /// The items published as processable.
    pub fn listed(&self) -> &BTreeSet<usize> {
        self.published.shown().listed()
    }

    /// Our node for an item we hold.
    pub fn held_node(&self, item: usize) -> Option<&str> {
        self.locks.held().contains(&item).then(|| self.locks.get(item)?.node()).flatten()
    }

    pub fn state(&self) -> PartitionState {
        self.published.shown().state()
    }

    pub fn me(&self) -> &str {
        self.party.me()
    }

    /// What this member announces now (its party node says it once the write lands).
    pub fn announcement(&self) -> Agreement {
        self.cfg.agreement
    }

    /// When we last found the lock of a listed item held (the checker's bound for a deleted held node).
    pub fn held_at(&self, item: usize) -> Option<Instant> {
        self.locks.held().contains(&item).then(|| self.locks.get(item).map(|lock| lock.held_at())).flatten()
    }

    /// The version and items of the shared set the assignment in force follows.
    pub fn followed(&self) -> Option<(u64, Vec<Item>)> {
        let version = self.set.in_force().version?;
        let mut items: Vec<Item> =
            self.set.assigned().iter().map(|&index| self.set.catalogue().item(index).clone()).collect();
        items.sort();
        Some((version, items))
    }

    /// The members the assignment in force was computed from.
    pub fn members_in_force(&self) -> &[String] {
        self.party.members()
    }

    /// Our share under the assignment in force (`None` while the party settles).
    pub fn target(&self) -> Option<&BTreeSet<usize>> {
        self.share.target()
    }

    /// Whether the target was computed for the set followed now: `false` once the set changed under it
    /// (incremental: it is worked towards, less what left the set, until the quiet period ends).
    pub fn target_up_to_date(&self) -> bool {
        !self.share.outdated()
    }

    /// Whether the target waits for the quiet period's end to be taken again (after a hand-over).
    pub fn target_deferred(&self) -> bool {
        self.share.deferred()
    }

    /// How many departures were handed over at once (the fast path).
    pub fn hand_overs(&self) -> u64 {
        self.party.hand_overs()
    }

    /// The departed members' items the latest hand-over computed, if the latest assignment adopted was one.
    pub fn last_orphans(&self) -> Option<&BTreeSet<usize>> {
        self.party.last_orphans()
    }

    /// The party of the assignment the quiet period last decided: what a hand-over's orphans are computed from.
    pub fn decided_members(&self) -> Option<&[String]> {
        self.party.decided_members()
    }

    /// How many assignments the quiet period decided (a hand-over is not one).
    pub fn decided(&self) -> u64 {
        self.party.decided()
    }
}
