//! What [`Rendezvous`](super::Rendezvous) remembers between calls: each item's best-ranked members, so that a party
//! change costs work in proportion to the members that changed (one hash per item for a joiner), not items × members.
//!
//! The remembered list of an item is always a *prefix* of that item's true ranking among the live members (highest
//! weight first, equal weights by name). The capped placement walks it; only an item whose whole prefix is full falls
//! back to ranking every member, and its list is then refreshed (a first ranking keeps only each item's best member;
//! the walks lengthen the lists where the placement needs them). So the cached and the uncached assignment are the
//! same, always (a unit test compares them over random joins and leaves).

use super::{heaviest_of_each, member_seed, weight};
use crate::Item;

/// Members remembered per item, at most. A first ranking remembers only each item's best; an item whose walk runs
/// past its list ranks everyone and then keeps `KEPT`. With the default load factor, 100 members and 20,000 items,
/// that is 227 items in the first placement and 39 in a join's
/// (`a_join_costs_one_hash_per_item_and_fallbacks_are_rare`); more would cost memory (10 bytes per item each) for
/// nothing.
const KEPT: usize = 4;
/// A party change larger than this share of the party rebuilds the ranking instead of patching it.
const PATCH_LIMIT: f64 = 0.25;

/// One item's remembered list: `(weight, id)`, highest weight first, equal weights by name.
type Prefix = super::prefix::Prefix<KEPT>;

pub(super) struct Ranking {
    /// The items this ranking is for (a call with other items rebuilds it).
    items: Vec<Item>,
    /// Every item's node name, concatenated; item `i`'s ends at `ends[i]`.
    names: Vec<u8>,
    ends: Vec<usize>,
    /// Members by id: name and hash seed; `None` once gone (ids are not reused until a rebuild).
    members: Vec<Option<(String, u64)>>,
    alive: usize,
    prefixes: Vec<Prefix>,
    /// Items whose walk fell back to ranking every member, over this ranking's life (for tests and tuning).
    pub(super) fallbacks: usize,
}

impl Ranking {
    /// Ranks every member for every item.
    pub(super) fn build(members: &[String], items: &[Item]) -> Ranking {
        let mut names = Vec::new();
        let mut ends = Vec::with_capacity(items.len());
        for item in items {
            names.extend_from_slice(item.node_name().as_bytes());
            ends.push(names.len());
        }
        let seeds: Vec<u64> = members.iter().map(|m| member_seed(m)).collect();
        let mut ranking = Ranking {
            items: items.to_vec(),
            names,
            ends,
            members: members.iter().zip(&seeds).map(|(m, &seed)| Some((m.clone(), seed))).collect(),
            alive: members.len(),
            prefixes: vec![Prefix::EMPTY; items.len()],
            fallbacks: 0,
        };
        // Only each item's best member, not its best `KEPT`: what the first placement mostly needs, at a fraction of
        // the cost (a first `assign` of 100 members over 100,000 items: 28 ms instead of 70). A one-entry list is
        // still a prefix of the ranking; an item that needs more (its best is full, or leaves) ranks everyone then and
        // keeps `KEPT`.
        let best = heaviest_of_each(&seeds, &ranking.names, &ranking.ends);
        for (prefix, entry) in ranking.prefixes.iter_mut().zip(best) {
            prefix.insert(0, entry);
        }
        ranking
    }

    /// Whether this ranking is for `items`.
    pub(super) fn is_for(&self, items: &[Item]) -> bool {
        self.items == items
    }

    /// Follows a party change: forgets who left and ranks who joined. `false` if the change is too large to patch
    /// (the caller rebuilds).
    pub(super) fn follow(&mut self, members: &[String]) -> bool {
        let departed: Vec<u32> = (0..self.members.len() as u32)
            .filter(|&id| self.name(id).is_some_and(|name| members.binary_search_by(|m| m.as_str().cmp(name)).is_err()))
            .collect();
        let joined: Vec<&String> =
            members.iter().filter(|m| !self.members.iter().flatten().any(|(name, _)| name == *m)).collect();
        if departed.is_empty() && joined.is_empty() {
            return true;
        }
        // A large change is cheaper to rank afresh; so is a table grown mostly of departed members (ids are not reused,
        // so a long life of churn would otherwise grow it without bound).
        let grown = self.members.len() + joined.len() > 2 * members.len() + 16;
        if grown || (departed.len() + joined.len()) as f64 > PATCH_LIMIT * members.len() as f64 + 1.0 {
            return false;
        }
        for &id in &departed {
            self.members[id as usize] = None;
        }
        self.alive -= departed.len();
        if !departed.is_empty() {
            let gone = |id: u32| departed.contains(&id);
            for prefix in &mut self.prefixes {
                let mut kept = Prefix::EMPTY;
                for (at, entry) in prefix.entries().filter(|&(_, id)| !gone(id)).enumerate() {
                    kept.insert(at, entry);
                }
                *prefix = kept;
            }
        }
        for name in joined {
            let id = self.members.len() as u32;
            let seed = member_seed(name);
            self.members.push(Some((name.clone(), seed)));
            for item in 0..self.items.len() {
                let w = weight(seed, self.name_of(item));
                // The list stays a prefix of the true ranking: the joiner goes in if it ranks above the last entry,
                // or if the list held every live member (then it is the whole ranking, and the joiner has a place).
                let prefix = &self.prefixes[item];
                let complete = prefix.len() == self.alive;
                let place = prefix.entries().position(|e| self.above((w, id), e));
                let at = match place {
                    Some(at) => at,
                    None if complete => prefix.len(),
                    None => continue,
                };
                self.prefixes[item].insert(at, (w, id));
            }
            self.alive += 1;
        }
        true
    }

    /// The capped placement: each item, in order, goes to the best-ranked member with room. `members` is the sorted
    /// party this ranking follows; the owners are indexes into it.
    pub(super) fn place(&mut self, members: &[String], capacity: usize) -> Vec<usize> {
        // Member id → index in `members`. After `build` or `follow` with `members`, the live ids are exactly
        // `members`, and departed ids are in no prefix; `load.get` below keeps even a broken invariant from panicking.
        let mut index = vec![usize::MAX; self.members.len()];
        // And back: the live ids in the party's order (which `rank_fully` relies on for equal weights).
        let mut by_index = vec![None; members.len()];
        for (id, member) in self.members.iter().enumerate() {
            if let Some((name, _)) = member
                && let Ok(at) = members.binary_search(name)
            {
                index[id] = at;
                by_index[at] = Some(id as u32);
            }
        }
        let ids: Vec<u32> = by_index.into_iter().flatten().collect();
        let seeds: Vec<u64> = ids.iter().map(|&id| self.seed(id)).collect();
        let mut weights = Vec::with_capacity(ids.len());
        let mut load = vec![0usize; members.len()];
        let mut owners = Vec::with_capacity(self.items.len());
        for item in 0..self.items.len() {
            let has_room = |id: u32| index.get(id as usize).and_then(|&m| load.get(m)).is_some_and(|&l| l < capacity);
            let mut owner = self.prefixes[item].entries().map(|(_, id)| id).find(|&id| has_room(id));
            if owner.is_none() {
                // Every remembered member is full (or gone): rank them all and remember the fresh prefix, whose walk
                // mostly finds room; only when all of it is full, rank everyone once more for the best with room.
                self.fallbacks += 1;
                self.rank_fully(item, &ids, &seeds, &mut weights);
                owner = self.prefixes[item].entries().map(|(_, id)| id).find(|&id| has_room(id));
                if owner.is_none() {
                    owner = self.best_with_room(item, &ids, has_room);
                }
            }
            let owner = owner.and_then(|id| index.get(id as usize).copied()).filter(|&m| m < load.len());
            // capacity × members ≥ items, so some member always has room; `members` is not empty (the caller checks).
            let owner = owner.unwrap_or(0);
            load[owner] += 1;
            owners.push(owner);
        }
        owners
    }

    /// The best-ranked of `ids` for `item` that `has_room`.
    fn best_with_room(&self, item: usize, ids: &[u32], has_room: impl Fn(u32) -> bool) -> Option<u32> {
        let name = self.name_of(item);
        let mut best: Option<(u64, u32)> = None;
        for &id in ids {
            if !has_room(id) {
                continue;
            }
            let w = weight(self.seed(id), name);
            if best.is_none_or(|b| self.above((w, id), b)) {
                best = Some((w, id));
            }
        }
        best.map(|(_, id)| id)
    }

    /// Remembers the true top `KEPT` of `ids` (every live member, in the party's order, with their `seeds`) for
    /// `item`; `weights` is scratch space.
    fn rank_fully(&mut self, item: usize, ids: &[u32], seeds: &[u64], weights: &mut Vec<u64>) {
        let name = self.name_of(item);
        // All weights first, in a tight loop the processor overlaps; then the best few.
        super::weights(seeds, name, weights);
        let mut prefix = Prefix::EMPTY;
        // `ids` come in the party's (name) order, so an equal weight met later ranks below: plain comparisons of the
        // weights give the order `above` defines. A full list's last weight is the one to beat.
        let mut len = 0;
        for (&w, &id) in weights.iter().zip(ids) {
            if len == KEPT && w <= prefix.keys[KEPT - 1] {
                continue;
            }
            let at = prefix.keys[..len].iter().position(|&e| w > e).unwrap_or(len);
            prefix.insert(at, (w, id));
            len = prefix.len();
        }
        self.prefixes[item] = prefix;
    }

    /// Whether `a` ranks above `b`: a higher weight, or (astronomically rare) the same weight and a smaller name,
    /// which is the sorted party's order, as in the uncached placement.
    fn above(&self, a: (u64, u32), b: (u64, u32)) -> bool {
        a.0 > b.0 || (a.0 == b.0 && self.name(a.1) < self.name(b.1))
    }

    fn name(&self, id: u32) -> Option<&str> {
        self.members.get(id as usize)?.as_ref().map(|(name, _)| name.as_str())
    }

    /// A member's hash seed (only live ids are ever asked for).
    fn seed(&self, id: u32) -> u64 {
        self.members.get(id as usize).and_then(Option::as_ref).map_or(0, |&(_, seed)| seed)
    }

    fn name_of(&self, item: usize) -> &[u8] {
        let start = if item == 0 { 0 } else { self.ends[item - 1] };
        &self.names[start..self.ends[item]]
    }
}
