//! What [`WeightedRendezvous`](super::WeightedRendezvous) remembers between calls, so that a change costs work in
//! proportion to the change:
//!
//! - each item's best-ranked members (a *prefix* of its true ranking among the live members, as
//!   [`Rendezvous`](crate::Rendezvous) keeps it): a joiner costs one score per item, a leaver a pass over the lists,
//!   and a capacity change is the member leaving and joining again;
//! - the heaviest-first order, which depends on the weights alone: a changed weight moves that item in the order;
//! - the latest placement with the party it was for, so the deciding call after
//!   [`prepare_weighted`](crate::PartitionFn::prepare_weighted) with the same inputs only hands it out.
//!
//! The placement walks an item's list; only when no listed member has room does it score every member (and keeps
//! the fresh list). So the remembered placement equals [`assign_uncached`](super::place::assign_uncached), always.

use super::ln;
use super::place::{Loads, Problem, before, heaviest_first, least_full, shares};
use crate::partition_fn::{member_seed, weight};
use crate::{Item, Weights};

/// Members remembered per item, at most (10 bytes each per item).
const KEPT: usize = 8;
/// A party change larger than this share of the party ranks afresh instead of patching.
const PATCH_LIMIT: f64 = 0.25;
/// One item's remembered list: `(score, id)`, lower scores first, equal scores by name.
type Prefix = crate::partition_fn::prefix::Prefix<KEPT>;

struct Member {
    name: String,
    seed: u64,
    capacity: u32,
}

/// The latest placement and the party it was for (the items and weights are the memory's own).
struct Placed {
    members: Vec<String>,
    capacities: Vec<u32>,
    owners: Vec<usize>,
}

pub(super) struct Memory {
    items: Vec<Item>,
    /// Every item's node name, concatenated; item `i`'s ends at `ends[i]`.
    names: Vec<u8>,
    ends: Vec<usize>,
    /// Members by id; `None` once gone (ids are not reused until the ranking is built afresh).
    members: Vec<Option<Member>>,
    alive: usize,
    weights: Weights,
    shares: Vec<(u64, u64)>,
    /// The items, heaviest first, and each one's list, in the same order: the placement reads both front to back
    /// (in item order, every list would be a cache miss).
    order: Vec<u32>,
    prefixes: Vec<Prefix>,
    placed: Option<Placed>,
    /// Items whose list ran out during a placement and were scored for every member (tests and tuning).
    pub(super) fallbacks: usize,
}

impl Memory {
    /// Ranks every member for every item, and orders the items.
    pub(super) fn build(problem: &Problem<'_>) -> Memory {
        let mut names = Vec::new();
        let mut ends = Vec::with_capacity(problem.items.len());
        for item in problem.items {
            names.extend_from_slice(item.node_name().as_bytes());
            ends.push(names.len());
        }
        let shares = shares(problem.weights);
        let mut memory = Memory {
            items: problem.items.to_vec(),
            names,
            ends,
            members: Vec::new(),
            alive: 0,
            prefixes: Vec::new(),
            weights: problem.weights.clone(),
            order: heaviest_first(&shares),
            shares,
            placed: None,
            fallbacks: 0,
        };
        memory.rank_all(problem);
        memory
    }

    /// Forgets the ranking and ranks `problem`'s party afresh (ids from 0).
    fn rank_all(&mut self, problem: &Problem<'_>) {
        self.members = problem
            .members
            .iter()
            .zip(&problem.capacities)
            .map(|(name, &capacity)| Some(Member { name: name.clone(), seed: member_seed(name), capacity }))
            .collect();
        self.alive = self.members.len();
        self.placed = None;
        let live = self.live(problem.members);
        let mut hashes = Vec::with_capacity(live.ids.len());
        self.prefixes = self.order.iter().map(|&item| live.top(self.name_of(item as usize), &mut hashes)).collect();
    }

    /// The live members in the party's order (after `build` or `follow` with `members`, exactly `members`).
    fn live(&self, members: &[String]) -> Live {
        let n = members.len();
        let mut live = Live { ids: vec![u32::MAX; n], seeds: vec![0; n], capacities: vec![1; n] };
        for (id, member) in self.members.iter().enumerate() {
            if let Some(member) = member
                && let Ok(at) = members.binary_search(&member.name)
            {
                (live.ids[at], live.seeds[at], live.capacities[at]) = (id as u32, member.seed, member.capacity);
            }
        }
        live
    }

    /// Whether this memory is for `items`.
    pub(super) fn is_for(&self, items: &[Item]) -> bool {
        self.items == items
    }

    /// Brings everything up to `problem` (same items): the order to its weights, the ranking to its party.
    pub(super) fn follow(&mut self, problem: &Problem<'_>) {
        self.reweigh(problem.weights);
        if !self.follow_party(problem) {
            self.rank_all(problem);
        }
    }

    /// Follows changed weights: a few changed items are taken out of the order (with their lists) and put back
    /// where they now belong; many, or a change of totals that reorders the rest (several dimensions), sort again.
    fn reweigh(&mut self, weights: &Weights) {
        if *weights == self.weights {
            return;
        }
        self.placed = None;
        let comparable = weights.dimensions() == self.weights.dimensions() && weights.len() == self.weights.len();
        let changed: Vec<u32> = if comparable {
            (0..weights.len() as u32).filter(|&i| weights.item(i as usize) != self.weights.item(i as usize)).collect()
        } else {
            (0..weights.len() as u32).collect()
        };
        self.weights = weights.clone();
        self.shares = shares(weights);
        let shares = &self.shares;
        if changed.len() <= 16 {
            let mut taken = Vec::with_capacity(changed.len());
            for &item in &changed {
                if let Some(at) = self.order.iter().position(|&i| i == item) {
                    taken.push((self.order.remove(at), self.prefixes.remove(at)));
                }
            }
            if self.order.is_sorted_by(|&a, &b| before(shares, a, b).is_le()) {
                for (item, prefix) in taken {
                    let at = self.order.partition_point(|&i| before(shares, i, item).is_lt());
                    self.order.insert(at, item);
                    self.prefixes.insert(at, prefix);
                }
                return;
            }
            for (item, prefix) in taken {
                self.order.push(item);
                self.prefixes.push(prefix);
            }
        }
        let mut by_item = vec![Prefix::EMPTY; self.items.len()];
        for (&item, prefix) in self.order.iter().zip(&self.prefixes) {
            by_item[item as usize] = *prefix;
        }
        self.order = heaviest_first(shares);
        self.prefixes = self.order.iter().map(|&item| by_item[item as usize]).collect();
    }

    /// Follows a party change: forgets who left (or changed capacity) and scores who joined (or came back with
    /// another capacity). `false` if the change is too large to patch.
    fn follow_party(&mut self, problem: &Problem<'_>) -> bool {
        let (members, capacities) = (problem.members, &problem.capacities);
        let mut present = vec![false; members.len()];
        let mut departed = Vec::new();
        for (id, member) in self.members.iter().enumerate() {
            if let Some(member) = member {
                match members.binary_search(&member.name) {
                    Ok(at) if capacities[at] == member.capacity => present[at] = true,
                    _ => departed.push(id as u32),
                }
            }
        }
        let joined: Vec<usize> = (0..members.len()).filter(|&at| !present[at]).collect();
        if departed.is_empty() && joined.is_empty() {
            return true;
        }
        let grown = self.members.len() + joined.len() > 2 * members.len() + 16;
        if grown || (departed.len() + joined.len()) as f64 > PATCH_LIMIT * members.len() as f64 + 1.0 {
            return false;
        }
        self.placed = None;
        for &id in &departed {
            self.members[id as usize] = None;
        }
        self.alive -= departed.len();
        if !departed.is_empty() {
            for prefix in &mut self.prefixes {
                if prefix.entries().any(|(_, id)| departed.contains(&id)) {
                    let mut kept = Prefix::EMPTY;
                    for (at, entry) in prefix.entries().filter(|(_, id)| !departed.contains(id)).enumerate() {
                        kept.insert(at, entry);
                    }
                    *prefix = kept;
                }
            }
        }
        for at in joined {
            let (name, capacity) = (&members[at], capacities[at]);
            let id = self.members.len() as u32;
            let seed = member_seed(name);
            let c = u64::from(capacity.max(1));
            for position in 0..self.order.len() {
                let h = weight(seed, self.name_of(self.order[position] as usize));
                let prefix = &self.prefixes[position];
                let len = prefix.len();
                // Below the last entry of a list that leaves members out, whatever the rounding: no logarithm needed.
                if len > 0
                    && len < self.alive
                    && u128::from(lower_bound(h)) >= (u128::from(prefix.keys[len - 1]) + 1) * u128::from(c)
                {
                    continue;
                }
                let s = ln::neg_ln(h) / c;
                // The list stays a prefix of the ranking: the joiner goes in above the first entry it beats, or at
                // the end of a list that held every live member.
                let place =
                    prefix.entries().position(|(es, eid)| s < es || (s == es && name.as_str() < self.name(eid)));
                let at = match place {
                    Some(at) => at,
                    None if len == self.alive => len,
                    None => continue,
                };
                self.prefixes[position].insert(at, (s, id));
            }
            self.members.push(Some(Member { name: name.clone(), seed, capacity }));
            self.alive += 1;
        }
        true
    }

    /// The placement for `problem` (whose items, weights and party this memory follows): the one remembered if it
    /// was for the same party, else placed now and remembered.
    pub(super) fn place(&mut self, problem: &Problem<'_>) -> Vec<usize> {
        if let Some(placed) = &self.placed
            && placed.members == problem.members
            && placed.capacities == problem.capacities
        {
            return placed.owners.clone();
        }
        let n = problem.members.len();
        let live = self.live(problem.members);
        // Id → index in the party.
        let mut index = vec![usize::MAX; self.members.len()];
        for (m, &id) in live.ids.iter().enumerate() {
            if let Some(slot) = index.get_mut(id as usize) {
                *slot = m;
            }
        }
        let in_party = |prefix: &Prefix| -> Vec<usize> {
            prefix.entries().map(|(_, id)| index.get(id as usize).copied().unwrap_or(usize::MAX)).collect()
        };
        let mut loads = Loads::new(problem);
        let mut owners = vec![0; self.items.len()];
        let (mut hashes, mut scratch) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for position in 0..self.order.len() {
            let item = self.order[position] as usize;
            let weight = problem.weights.item(item);
            let mut owner = None;
            for &id in &self.prefixes[position].ids {
                let m = index.get(usize::from(id)).copied().unwrap_or(usize::MAX);
                if m >= n {
                    break;
                }
                if loads.fits(problem, m, weight) {
                    owner = Some(m);
                    break;
                }
            }
            if owner.is_none() {
                // No listed member has room: list the best few afresh and walk them; then the best of all members
                // with room; then, if none has, the least full.
                self.fallbacks += 1;
                let name = self.name_of(item);
                let prefix = live.top(name, &mut hashes);
                owner = in_party(&prefix).into_iter().find(|&m| m < n && loads.fits(problem, m, weight));
                if owner.is_none() && prefix.len() < n {
                    owner = live.best(name, &mut hashes, |m| loads.fits(problem, m, weight));
                }
                if owner.is_none() {
                    live.score_all(name, &mut hashes, &mut scratch);
                    owner = Some(least_full(problem, &loads, weight, &scratch));
                }
                self.prefixes[position] = prefix;
            }
            // Every live id maps into the party (the memory follows it), so `owner < n`; 0 only guards that.
            let owner = owner.filter(|&m| m < n).unwrap_or(0);
            loads.add(owner, weight);
            owners[item] = owner;
        }
        self.placed = Some(Placed {
            members: problem.members.to_vec(),
            capacities: problem.capacities.clone(),
            owners: owners.clone(),
        });
        owners
    }

    fn name(&self, id: u32) -> &str {
        self.members.get(id as usize).and_then(Option::as_ref).map_or("", |m| m.name.as_str())
    }

    fn name_of(&self, item: usize) -> &[u8] {
        let start = if item == 0 { 0 } else { self.ends[item - 1] };
        &self.names[start..self.ends[item]]
    }
}

/// Below `-ln(h / 2^64)` as [`ln::neg_ln`] computes it, for every `h`: `1 - h / 2^64` (less than `-ln` of it by the
/// square over 2), less 2^-36 in Q6.58 for the logarithm's rounding (below 2^-40). A member whose bound divided by
/// its capacity already ranks below the last of a full list needs no logarithm.
fn lower_bound(h: u64) -> u64 {
    (!h >> 6).saturating_sub(1 << 22)
}

/// The live members in the party's order: ids, hash seeds, capacities.
struct Live {
    ids: Vec<u32>,
    seeds: Vec<u64>,
    capacities: Vec<u32>,
}

impl Live {
    /// The best `KEPT` members for the item named `name`, as a list; `hashes` is scratch space. Equal to scoring
    /// every member, but takes the logarithm only of the members whose [`lower_bound`] could make the list.
    fn top(&self, name: &[u8], hashes: &mut Vec<u64>) -> Prefix {
        crate::partition_fn::weights(&self.seeds, name, hashes);
        let mut best: [(u64, usize); KEPT] = [(u64::MAX, usize::MAX); KEPT];
        let mut len = 0;
        for (m, (&h, &c)) in hashes.iter().zip(&self.capacities).enumerate() {
            let c = u64::from(c.max(1));
            // Worse than the last of a full list whatever the rounding: skip (equal scores need the exact value).
            if len == KEPT && u128::from(lower_bound(h)) >= (u128::from(best[KEPT - 1].0) + 1) * u128::from(c) {
                continue;
            }
            let entry = (ln::neg_ln(h) / c, m);
            if len == KEPT && entry >= best[KEPT - 1] {
                continue;
            }
            let at = best[..len].iter().position(|&e| entry < e).unwrap_or(len);
            let end = len.min(KEPT - 1);
            best.copy_within(at..end, at + 1);
            best[at] = entry;
            len = (len + 1).min(KEPT);
        }
        let mut prefix = Prefix::EMPTY;
        for (at, &(s, m)) in best[..len].iter().enumerate() {
            prefix.insert(at, (s, self.ids.get(m).copied().unwrap_or(u32::MAX)));
        }
        prefix
    }

    /// The best-ranked member (index in the party) that `fits`, if any.
    fn best(&self, name: &[u8], hashes: &mut Vec<u64>, fits: impl Fn(usize) -> bool) -> Option<usize> {
        crate::partition_fn::weights(&self.seeds, name, hashes);
        let mut best: Option<(u64, usize)> = None;
        for (m, (&h, &c)) in hashes.iter().zip(&self.capacities).enumerate() {
            let c = u64::from(c.max(1));
            if let Some((s, _)) = best
                && u128::from(lower_bound(h)) >= (u128::from(s) + 1) * u128::from(c)
            {
                continue;
            }
            if !fits(m) {
                continue;
            }
            let entry = (ln::neg_ln(h) / c, m);
            if best.is_none_or(|b| entry < b) {
                best = Some(entry);
            }
        }
        best.map(|(_, m)| m)
    }

    /// Every member's score for the item named `name`, as `(score, index in the party)`, into `scored`.
    fn score_all(&self, name: &[u8], hashes: &mut Vec<u64>, scored: &mut Vec<(u64, usize)>) {
        crate::partition_fn::weights(&self.seeds, name, hashes);
        scored.clear();
        let scores = hashes.iter().zip(&self.capacities).map(|(&h, &c)| ln::neg_ln(h) / u64::from(c.max(1)));
        scored.extend(scores.zip(0..));
    }
}
