//! The sticky placement: the next assignment computed from the previous one, so that a join, a leave or a weight
//! change moves close to the minimum (`docs/sticky-placement.md`; the rule was modelled first in
//! `bench/explore/sticky_placement.py`).
//!
//! For the party and weights in force, with `W` the total weight and `C` the total capacity, member `m` of capacity
//! `c` has the ideal share `W · c / C` and the limit `H` ([`capacity_limit`](crate::capacity_limit), the greedy's).
//! A member is *exempt* when it holds an item larger than its ideal share (no placement can keep it within its
//! bound). The *target* of a member is its capacity's share of what the members that are not exempt carry, capped
//! at `H`: the few items larger than any share sit on exempt members, so the others average less than their ideal
//! share, and a band relative to the ideal share could not be met by anyone.
//!
//! 1. **Keep** every item on its previous owner if that owner is in the party; the others form the pool.
//! 2. **Shed**: a member over its limit keeps its heaviest item and sheds its others, the ones it ranks worst first
//!    (the lowest in its own pseudo-random order of the items, [`State::preference`]; equal ones by item), each
//!    that fits in what is left of the excess; if an excess remains, also its lightest remaining item (so it ends
//!    at most at its limit). A heaviest item larger than the limit is the bound instead: its member keeps it alone.
//! 3. **Place** the pool heaviest first: each item, in its rendezvous order, to the first *needy* member (not exempt,
//!    below 9/10 of its target) it fits on within its target; else the first needy member it fits on within its
//!    limit; else the first member it fits on within its target; else within its limit; else to the member that
//!    would shed least to take it (equal ones: the least full relative to its ideal share after taking it). Targets
//!    here count the pool as spread over the members that are not exempt. Shedding and placing run again, at most
//!    ten times, if a fallback put a member over its limit.
//! 4. **Pull**: every needy member, the neediest first, takes items until it is within 1/1000 of its ideal share of
//!    its target, from the members above 19/20 of their targets (donors): the donors give down to a common level
//!    (at least 19/20 of their targets) that covers the deficit, the fullest first, each the items that fit in what
//!    it owes, those it ranks worst first (as it sheds). A donor that gives less than 9/10 of what it owes (its items
//!    are too lumpy) is not asked again by that puller.
//!
//! Nothing else moves: a member between 9/10 of its target and its limit keeps every item, which is what makes a
//! change cheap (a joiner starts empty and pulls its share thinly from everyone). Every comparison is exact, in
//! integers, and every tie goes to the lower item or member index, so members computing from the same previous
//! assignment and inputs agree.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::place::{Problem, score_of_hash};
use crate::Item;
use crate::hash::{GOLDEN_GAMMA, finish};
use crate::partition_fn::{member_seed, weights};

/// No owner (an item in the pool).
const NONE: u32 = u32::MAX;
/// Rounds of shedding and placing, at most.
const PLACE_ROUNDS: usize = 10;
/// Rounds of asking donors, per puller, at most.
const PULL_ROUNDS: usize = 100;
/// The lowest level donors give down to, as a fraction of their targets in Q32 (19/20).
const FLOOR_Q32: u128 = (19u128 << 32) / 20;

/// The sticky placement of one dimension's weights: the owner (an index into `problem.members`) of every item, from
/// `previous` (each item's previous owner as an index into the same members, `None` for an item whose owner left or
/// that had none). `previous` shorter than the items counts the rest as unowned.
pub(super) fn assign_sticky(problem: &Problem<'_>, previous: &[Option<usize>]) -> Vec<usize> {
    assign(problem, previous, DonorOrdering::Ahead).0
}

/// How [`State::giving_orders`] orders the donors' items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DonorOrdering {
    /// The part each donor is likely to give, the rest when it runs out ([`Giving::deferred_from`]).
    Ahead,
    /// Every item at once: the same answer, more work (tests compare the two).
    #[cfg(test)]
    Whole,
}

/// [`assign_sticky`], ordering the donors' items as `ordering` says; and how many times a donor ran out of the part
/// ordered ahead.
pub(super) fn assign(
    problem: &Problem<'_>,
    previous: &[Option<usize>],
    ordering: DonorOrdering,
) -> (Vec<usize>, usize) {
    let mut state = State::new(problem, previous, ordering);
    let mut pool = state.unowned();
    pool.extend(state.shed());
    for _ in 0..PLACE_ROUNDS {
        if pool.is_empty() {
            break;
        }
        state.place(pool);
        pool = state.shed();
    }
    // Only when the limits can hardly hold the items could ten rounds leave items unplaced: place them where they
    // cost least, so that no item is without an owner.
    for i in pool {
        let m = state.least_full(i);
        state.give(i, m);
    }
    state.pull();
    // Every item has an owner here: the pool was placed to the last item, and pulling only moves owned items.
    (state.owner.iter().map(|&m| m as usize).collect(), state.ran_out)
}

/// The placement being built.
struct State<'p, 'a> {
    problem: &'p Problem<'a>,
    seeds: Vec<u64>,
    /// Each item's weight (the first dimension, the only one the caller passes): borrowed when it is the only one.
    weights: Cow<'a, [u64]>,
    total_weight: u128,
    total_capacity: u128,
    owner: Vec<u32>,
    load: Vec<u64>,
    /// The heaviest item each member was given (kept through shedding, which never sheds it).
    heaviest: Vec<u64>,
    /// Each member's items, built when first asked for (a join never asks); an entry whose item has since moved is
    /// skipped (and dropped by [`State::items_of`]).
    held: Option<Vec<Vec<u32>>>,
    /// While pulling: each member's items in the order it gives them away; dropped when the member takes items
    /// itself (and built again if it is asked to give later).
    giving: Vec<Option<Giving>>,
    ordering: DonorOrdering,
    /// How many times a donor ran out of the part of its items ordered ahead.
    ran_out: usize,
}

/// A member's items in the order it gives them away: least preferred first (the items it ranks worst,
/// [`State::preference`]), equal ones by item. A heap, so that a donor asked for a little sorts only what it gives.
struct Giving {
    /// [`State::giving_key`]s.
    heap: BinaryHeap<Reverse<u64>>,
    /// The lightest weight among them: a donor that owes less has nothing left to give.
    lightest: u64,
    /// `Some(cut)` while the items the member prefers at `cut` or more are left out of the heap; every key in it
    /// comes before theirs, and they are added when it runs out. A donor gives a small part of what it holds (on a
    /// join about 1 %), and sorting only a few times that part is most of what makes a join cheap.
    deferred_from: Option<u32>,
}

impl Giving {
    fn new(entries: Vec<Reverse<u64>>, lightest: u64, deferred_from: Option<u32>) -> Giving {
        Giving { heap: BinaryHeap::from(entries), lightest, deferred_from }
    }
}

impl<'p, 'a> State<'p, 'a> {
    fn new(problem: &'p Problem<'a>, previous: &[Option<usize>], ordering: DonorOrdering) -> State<'p, 'a> {
        let members = problem.members.len();
        let weights = match problem.dimensions {
            1 => Cow::Borrowed(problem.weights.values()),
            _ => Cow::Owned((0..problem.items.len()).map(|i| problem.weights.item(i)[0]).collect()),
        };
        let mut state = State {
            problem,
            seeds: problem.members.iter().map(|m| member_seed(m)).collect(),
            // The total the limits were computed from (`Weights::totals`), so that shares and limits agree.
            total_weight: u128::from(problem.totals[0]),
            total_capacity: problem.capacities.iter().map(|&c| u128::from(c)).sum(),
            weights,
            owner: vec![NONE; problem.items.len()],
            load: vec![0; members],
            heaviest: vec![0; members],
            held: None,
            giving: (0..members).map(|_| None).collect(),
            ordering,
            ran_out: 0,
        };
        for (i, before) in previous.iter().enumerate().take(problem.items.len()) {
            if let Some(m) = before.filter(|&m| m < members) {
                state.give(i as u32, m);
            }
        }
        state
    }

    fn capacity(&self, m: usize) -> u128 {
        u128::from(self.problem.capacities[m])
    }

    fn limit(&self, m: usize) -> u64 {
        self.problem.limits[m]
    }

    /// Whether `m` holds an item larger than its ideal share `W · c / C`.
    fn exempt(&self, m: usize) -> bool {
        u128::from(self.heaviest[m]) * self.total_capacity > self.total_weight * self.capacity(m)
    }

    /// How much `m` wants to keep item `i`, higher first: the top half of SplitMix64's `i`-th output from the
    /// member's seed, a pseudo-random order of the items that is the member's own. Any order every member computes
    /// alike would do: it chooses only *which* of a member's items go, never how much weight. This one costs one mix
    /// per item; the item's rendezvous hash (FNV over its name) made ordering every donor two thirds of a join's CPU.
    fn preference(&self, m: usize, i: u32) -> u32 {
        (finish(self.seeds[m].wrapping_add((u64::from(i) + 1).wrapping_mul(GOLDEN_GAMMA))) >> 32) as u32
    }

    /// `m`'s preference for `i` and then `i`, in one number: the order in which `m` gives its items away (and
    /// sheds them), lowest first; the item is the low half.
    fn giving_key(&self, m: usize, i: u32) -> u64 {
        u64::from(self.preference(m, i)) << 32 | u64::from(i)
    }

    fn give(&mut self, i: u32, m: usize) {
        let w = self.weights[i as usize];
        self.owner[i as usize] = m as u32;
        self.load[m] = self.load[m].saturating_add(w);
        self.heaviest[m] = self.heaviest[m].max(w);
        if let Some(held) = &mut self.held {
            held[m].push(i);
        }
    }

    fn take(&mut self, i: u32) {
        let from = self.owner[i as usize];
        if let Some(load) = self.load.get_mut(from as usize) {
            *load = load.saturating_sub(self.weights[i as usize]);
        }
        self.owner[i as usize] = NONE;
    }

    fn unowned(&self) -> Vec<u32> {
        (0..self.owner.len() as u32).filter(|&i| self.owner[i as usize] == NONE).collect()
    }

    /// The items `m` holds now (in no particular order: every use sorts them or breaks ties by item).
    fn items_of(&mut self, m: usize) -> Vec<u32> {
        let (owner, members) = (&self.owner, self.load.len());
        let held = self.held.get_or_insert_with(|| {
            // One pass over the items, in order, builds every member's list.
            let mut held = vec![Vec::new(); members];
            for (i, &m) in owner.iter().enumerate() {
                if let Some(items) = held.get_mut(m as usize) {
                    items.push(i as u32);
                }
            }
            held
        });
        held[m].retain(|&i| owner[i as usize] == m as u32);
        held[m].clone()
    }

    /// Step 2: the items shed by every member over its limit, or over its heaviest item when that is larger.
    fn shed(&mut self) -> Vec<u32> {
        let mut shed = Vec::new();
        for m in 0..self.load.len() {
            if self.load[m] <= self.limit(m) {
                continue;
            }
            let items = self.items_of(m);
            let Some(keep) = items.iter().copied().max_by(|&a, &b| self.weight(a).cmp(&self.weight(b)).then(b.cmp(&a)))
            else {
                continue;
            };
            // An item larger than the limit stays where it is: its member keeps it and sheds the rest.
            let bound = self.limit(m).max(self.weight(keep));
            if self.load[m] <= bound {
                continue;
            }
            // Least preferred (worst-scored) first, equal ones by item.
            let mut keys: Vec<u64> = items.iter().filter(|&&i| i != keep).map(|&i| self.giving_key(m, i)).collect();
            keys.sort_unstable();
            // The item is a key's low half.
            let ranked: Vec<u32> = keys.into_iter().map(|key| key as u32).collect();
            let mut excess = self.load[m] - bound;
            let mut chosen = vec![false; ranked.len()];
            for (k, &i) in ranked.iter().enumerate() {
                if excess == 0 {
                    break;
                }
                let w = self.weight(i);
                if w > 0 && w <= excess {
                    chosen[k] = true;
                    excess -= w;
                }
            }
            if excess > 0 {
                // The lightest item left (the worst-scored of equal ones) takes the member below its limit.
                let lightest = (0..ranked.len()).filter(|&k| !chosen[k]).min_by_key(|&k| (self.weight(ranked[k]), k));
                if let Some(k) = lightest {
                    chosen[k] = true;
                }
            }
            for (k, &i) in ranked.iter().enumerate() {
                if chosen[k] {
                    self.take(i);
                    shed.push(i);
                }
            }
        }
        shed
    }

    fn weight(&self, i: u32) -> u64 {
        self.weights[i as usize]
    }

    /// Each member's target: its capacity's share of `carried` (what the members that are not exempt carry), capped
    /// at its limit; its limit when every member is exempt.
    fn targets(&self, exempt: &[bool], carried: u128) -> Vec<u64> {
        let capacity: u128 = (0..exempt.len()).filter(|&m| !exempt[m]).map(|m| self.capacity(m)).sum();
        (0..exempt.len())
            .map(|m| match carried.checked_mul(self.capacity(m)).and_then(|c| c.checked_div(capacity)) {
                Some(share) => u64::try_from(share).unwrap_or(u64::MAX).min(self.limit(m)),
                None => self.limit(m),
            })
            .collect()
    }

    fn carried(&self, exempt: &[bool]) -> u128 {
        (0..exempt.len()).filter(|&m| !exempt[m]).map(|m| u128::from(self.load[m])).sum()
    }

    /// Step 3: places `pool`, heaviest first.
    fn place(&mut self, mut pool: Vec<u32>) {
        pool.sort_unstable_by(|&a, &b| self.weight(b).cmp(&self.weight(a)).then(a.cmp(&b)));
        let members = self.load.len();
        let exempt: Vec<bool> = (0..members).map(|m| self.exempt(m)).collect();
        let largest_limit = (0..members).map(|m| self.limit(m)).max().unwrap_or(0);
        let spread: u128 = pool.iter().map(|&i| self.weight(i)).filter(|&w| w <= largest_limit).map(u128::from).sum();
        let target = self.targets(&exempt, self.carried(&exempt) + spread);
        let mut hashes = Vec::with_capacity(members);
        for i in pool {
            let w = self.weight(i);
            let mut digits = [0; 20];
            weights(&self.seeds, name_of(&self.problem.items[i as usize], &mut digits), &mut hashes);
            // The best-ranked member of each kind in one pass: needy and within its target, needy, within its
            // target, any (all within their limits). Ranked by score, equal scores by index (the pass visits members
            // in index order). A needy member takes an orphan even past its target: else it would pull as much
            // from the others, and a leaver's few items would move others' too.
            let mut best: [Option<(u64, usize)>; 4] = [None; 4];
            for (m, &h) in hashes.iter().enumerate() {
                let after = self.load[m].saturating_add(w);
                if after > self.limit(m) {
                    continue;
                }
                let score = score_of_hash(h, self.problem.capacities[m]);
                let needy = !exempt[m] && is_needy(self.load[m], target[m]);
                let kinds = [needy && after <= target[m], needy, after <= target[m], true];
                for (slot, fits) in best.iter_mut().zip(kinds) {
                    if fits && slot.is_none_or(|(s, _)| score < s) {
                        *slot = Some((score, m));
                    }
                }
            }
            let m = match best.iter().flatten().next() {
                Some(&(_, m)) => m,
                None => self.least_full(i),
            };
            self.give(i, m);
        }
    }

    /// Where an item that fits under no member's limit goes: to the member that would shed least to take it (down
    /// to its limit, or to the item alone if the item is larger), then the least full relative to its ideal share
    /// after taking it, then the lower index.
    fn least_full(&self, i: u32) -> usize {
        let w = self.weight(i);
        let after = |m: usize| u128::from(self.load[m].saturating_add(w));
        // (load + w) / (W · c / C) compared across members: (load_a + w) · c_b against (load_b + w) · c_a.
        let fuller = |a: usize, b: usize| (after(a) * self.capacity(b)).cmp(&(after(b) * self.capacity(a)));
        // What `m` would shed to take it: down to its limit, or to the item alone if it is larger.
        let cost = |m: usize| self.load[m].saturating_add(w).saturating_sub(self.limit(m).max(w));
        let order = |a: &usize, b: &usize| cost(*a).cmp(&cost(*b)).then(fuller(*a, *b)).then(a.cmp(b));
        (0..self.load.len()).min_by(order).unwrap_or(0)
    }

    /// Step 4: the needy members pull from the donors.
    fn pull(&mut self) {
        let members = self.load.len();
        let exempt: Vec<bool> = (0..members).map(|m| self.exempt(m)).collect();
        let target = self.targets(&exempt, self.carried(&exempt));
        let mut needy: Vec<usize> =
            (0..members).filter(|&m| !exempt[m] && target[m] > 0 && is_needy(self.load[m], target[m])).collect();
        // The neediest first: load / target ascending, compared by cross-multiplying; then by index.
        needy.sort_unstable_by(|&a, &b| {
            let (la, lb) = (u128::from(self.load[a]), u128::from(self.load[b]));
            (la * u128::from(target[b])).cmp(&(lb * u128::from(target[a]))).then(a.cmp(&b))
        });
        if !needy.is_empty() {
            // The donors give about `deficit / carried` of the weight they hold, in fewer items than that share of
            // their items when weights are skewed (they give those that fit): sixteen times that share and 1/256
            // more is ordered ahead (Q32, as a preference: preferences are uniform over 32 bits). Less ran out
            // often on the benchmark's join; more cost more than it saved.
            let deficit: u128 = needy.iter().map(|&m| u128::from(target[m].saturating_sub(self.load[m]))).sum();
            let ahead = (deficit.saturating_mul(16) << 32).checked_div(self.carried(&exempt)).unwrap_or(u128::MAX);
            let cut =
                u32::try_from(ahead.saturating_add(1 << 24)).ok().filter(|_| self.ordering == DonorOrdering::Ahead);
            self.giving = self.giving_orders(&exempt, cut);
        }
        for m in needy {
            self.pull_into(m, &exempt, &target);
            // It holds more now: the order it would give in, if asked later, is built again.
            self.giving[m] = None;
        }
    }

    fn pull_into(&mut self, m: usize, exempt: &[bool], target: &[u64]) {
        let members = self.load.len();
        let mut deficit = target[m].saturating_sub(self.load[m]);
        let mut stuck = vec![false; members];
        stuck[m] = true;
        for _ in 0..PULL_ROUNDS {
            // Close enough: within 1/1000 of its ideal share, W · c / C.
            if u128::from(deficit) * 1000 * self.total_capacity <= self.total_weight * self.capacity(m) {
                break;
            }
            let donors: Vec<usize> = (0..members)
                .filter(|&j| !exempt[j] && !stuck[j] && u128::from(self.load[j]) * 20 > u128::from(target[j]) * 19)
                .collect();
            if donors.is_empty() {
                break;
            }
            let level = self.level(&donors, target, deficit);
            let mut owed: Vec<(usize, u64)> = donors
                .iter()
                .map(|&j| (j, self.load[j].saturating_sub(below(level, target[j]))))
                .filter(|&(_, b)| b > 0)
                .collect();
            // The fullest first: load / target descending; then by index.
            owed.sort_unstable_by(|&(a, _), &(b, _)| {
                let (la, lb) = (u128::from(self.load[a]), u128::from(self.load[b]));
                (lb * u128::from(target[a])).cmp(&(la * u128::from(target[b]))).then(a.cmp(&b))
            });
            let (mut got, mut newly_stuck) = (0u64, false);
            for (j, budget) in owed {
                let budget = budget.min(deficit);
                if budget == 0 {
                    break;
                }
                let mut giving = match self.giving[j].take() {
                    Some(giving) => giving,
                    None => self.giving_order(j),
                };
                // Least preferred first, each that fits in what is left; entries of items given away since are
                // dropped, those too heavy now are put back.
                let (mut left, mut taken_items, mut too_heavy) = (budget, Vec::new(), Vec::new());
                while left > 0 && left >= giving.lightest {
                    let Some(entry) = giving.heap.pop() else {
                        match giving.deferred_from.take() {
                            Some(cut) => {
                                self.ran_out += 1;
                                giving.heap = BinaryHeap::from(self.deferred(j, cut));
                                continue;
                            }
                            None => break,
                        }
                    };
                    // The item is a key's low half.
                    let i = entry.0 as u32;
                    if self.owner[i as usize] != j as u32 {
                        continue;
                    }
                    match self.weights[i as usize] {
                        w if w <= left => {
                            taken_items.push(i);
                            left -= w;
                        }
                        _ => too_heavy.push(entry),
                    }
                }
                giving.heap.extend(too_heavy);
                self.giving[j] = Some(giving);
                for i in taken_items {
                    self.take(i);
                    self.give(i, m);
                }
                let taken = budget - left;
                if u128::from(taken) * 10 < u128::from(budget) * 9 {
                    // Too lumpy (or nothing light enough): not asked again by this puller.
                    stuck[j] = true;
                    newly_stuck = true;
                }
                deficit = deficit.saturating_sub(taken);
                got += taken;
            }
            if got == 0 && !newly_stuck {
                break;
            }
        }
    }

    /// The order in which each member that is not exempt gives its items (those that weigh something) away, from
    /// one pass over the items in order (a pass in order costs a fraction of reading the same items scattered,
    /// member by member); with `cut`, only the items each prefers less than `cut` are in it yet.
    fn giving_orders(&self, exempt: &[bool], cut: Option<u32>) -> Vec<Option<Giving>> {
        let mut entries: Vec<Vec<Reverse<u64>>> = vec![Vec::new(); self.load.len()];
        let mut lightest = vec![u64::MAX; self.load.len()];
        for (i, (&m, &w)) in self.owner.iter().zip(self.weights.iter()).enumerate() {
            let m = m as usize;
            if m < exempt.len() && !exempt[m] && w > 0 {
                let key = self.giving_key(m, i as u32);
                if cut.is_none_or(|cut| key >> 32 < u64::from(cut)) {
                    entries[m].push(Reverse(key));
                }
                lightest[m] = lightest[m].min(w);
            }
        }
        entries.into_iter().zip(lightest).map(|(e, lightest)| Some(Giving::new(e, lightest, cut))).collect()
    }

    /// The keys [`State::giving_orders`] left out of `j`'s order: its items that weigh something and that it
    /// prefers at `cut` or more.
    fn deferred(&mut self, j: usize, cut: u32) -> Vec<Reverse<u64>> {
        let items = self.items_of(j);
        let keys = items.into_iter().filter(|&i| self.weights[i as usize] > 0).map(|i| self.giving_key(j, i));
        keys.filter(|&key| key >> 32 >= u64::from(cut)).map(Reverse).collect()
    }

    /// [`State::giving_orders`] for one member.
    fn giving_order(&mut self, j: usize) -> Giving {
        let items: Vec<u32> = self.items_of(j).into_iter().filter(|&i| self.weights[i as usize] > 0).collect();
        let lightest = items.iter().map(|&i| self.weights[i as usize]).min().unwrap_or(u64::MAX);
        Giving::new(items.into_iter().map(|i| Reverse(self.giving_key(j, i))).collect(), lightest, None)
    }

    /// The level `x` (Q32, at least 19/20) down to which the donors give: the lowest at which what they carry above
    /// `x` × their targets is at most `deficit`.
    fn level(&self, donors: &[usize], target: &[u64], deficit: u64) -> u128 {
        let above = |x: u128| -> u128 {
            donors.iter().map(|&j| u128::from(self.load[j].saturating_sub(below(x, target[j])))).sum()
        };
        if above(FLOOR_Q32) <= u128::from(deficit) {
            return FLOOR_Q32;
        }
        // above(hi) is 0: hi is at least every donor's load / target.
        let mut hi = donors
            .iter()
            .map(|&j| (u128::from(self.load[j]) << 32).div_ceil(u128::from(target[j].max(1))))
            .max()
            .unwrap_or(FLOOR_Q32)
            .max(FLOOR_Q32);
        let mut lo = FLOOR_Q32;
        // above() falls as x rises: the lowest x in (lo, hi] with above(x) <= deficit.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if above(mid) > u128::from(deficit) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    }
}

/// `x` (Q32) × `target`, rounded down (saturating: `x` can be as large as 2^96 for a member whose target is tiny).
fn below(x: u128, target: u64) -> u64 {
    u64::try_from(x.saturating_mul(u128::from(target)) >> 32).unwrap_or(u64::MAX)
}

/// An item's node name as bytes, without allocating: an integer's decimal digits are written into `digits`.
pub(super) fn name_of<'b>(item: &'b Item, digits: &'b mut [u8; 20]) -> &'b [u8] {
    match item {
        Item::Str(name) => name.as_bytes(),
        Item::Int(value) => {
            // At most 19 digits and a sign: i64::MIN is -9223372036854775808.
            let (mut rest, mut at) = (value.unsigned_abs(), digits.len());
            loop {
                at -= 1;
                digits[at] = b'0' + (rest % 10) as u8;
                rest /= 10;
                if rest == 0 {
                    break;
                }
            }
            if *value < 0 {
                at -= 1;
                digits[at] = b'-';
            }
            &digits[at..]
        }
    }
}

/// Below 9/10 of its target.
fn is_needy(load: u64, target: u64) -> bool {
    u128::from(load) * 10 < u128::from(target) * 9
}
