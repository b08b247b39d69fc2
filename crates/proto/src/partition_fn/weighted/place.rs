//! What both placements share: the limits, the score, the heaviest-first order, the loads, and the reference
//! placement without memory that the remembered one must equal.

use std::cmp::Ordering;

use super::ln;
use crate::partition_fn::{Weighted, member_seed, weight};
use crate::weight::capacity_limit;
use crate::{Item, Weights};

/// One call's inputs, checked, with what every placement derives from them.
pub(super) struct Problem<'a> {
    pub(super) members: &'a [String],
    /// Per member, at least 1.
    pub(super) capacities: Vec<u32>,
    pub(super) items: &'a [Item],
    pub(super) weights: &'a Weights,
    pub(super) dimensions: usize,
    /// `members × dimensions`: each member's [`capacity_limit`] per dimension.
    pub(super) limits: Vec<u64>,
    /// The weights' totals per dimension ([`Weights::totals`]), which the limits were computed from.
    pub(super) totals: Vec<u64>,
}

impl<'a> Problem<'a> {
    /// `None` when there is nothing to place or the lengths do not match.
    pub(super) fn new(input: &Weighted<'a>, load_factor: f64) -> Option<Problem<'a>> {
        let weights = input.weights;
        let usable = !input.members.is_empty()
            && input.capacities.len() == input.members.len()
            && weights.len() == input.items.len()
            && !weights.dimensions().is_empty();
        if !usable {
            return None;
        }
        // A capacity of 0 would make a member's share 0 and its score infinite: it counts as 1.
        let capacities: Vec<u32> = input.capacities.iter().map(|&c| c.max(1)).collect();
        let total_capacity: u64 = capacities.iter().map(|&c| u64::from(c)).sum();
        let totals = weights.totals();
        let limits = capacities
            .iter()
            .flat_map(|&c| totals.iter().map(move |&t| capacity_limit(t, c, total_capacity, load_factor)))
            .collect();
        Some(Problem {
            members: input.members,
            capacities,
            items: input.items,
            weights,
            dimensions: totals.len(),
            limits,
            totals,
        })
    }

    pub(super) fn limits(&self, member: usize) -> &[u64] {
        &self.limits[member * self.dimensions..(member + 1) * self.dimensions]
    }
}

/// The score of an item for a member (lower ranks higher): the exponential variate of the rendezvous hash divided
/// by the capacity, `-ln(h / 2^64) / c` in fixed point. Of independent exponential variates divided by their rates,
/// the smallest is member `m`'s with probability `c_m / Σ c`: each member is first choice for its capacity's share of
/// the items, and a member joining or leaving changes nothing between the others.
pub(super) fn score(seed: u64, capacity: u32, item: &[u8]) -> u64 {
    score_of_hash(weight(seed, item), capacity)
}

/// [`score`] from a rendezvous hash already computed.
pub(super) fn score_of_hash(hash: u64, capacity: u32) -> u64 {
    ln::neg_ln(hash) / u64::from(capacity.max(1))
}

/// Each item's largest share of a dimension's total, as a fraction `(weight, total)` (`(0, 1)` for an item that
/// weighs nothing): what orders the items heaviest first.
pub(super) fn shares(weights: &Weights) -> Vec<(u64, u64)> {
    let totals = weights.totals();
    (0..weights.len())
        .map(|i| {
            let mut best = (0, 1);
            for (&w, &t) in weights.item(i).iter().zip(&totals) {
                // w / t > best: compared by cross-multiplying, exactly. A zero total has only zero weights.
                if t > 0 && u128::from(w) * u128::from(best.1) > u128::from(best.0) * u128::from(t) {
                    best = (w, t);
                }
            }
            best
        })
        .collect()
}

/// Whether item `a` is placed before item `b`: the larger share first, equal shares in the set's order.
pub(super) fn before(shares: &[(u64, u64)], a: u32, b: u32) -> Ordering {
    let ((wa, ta), (wb, tb)) = (shares[a as usize], shares[b as usize]);
    (u128::from(wb) * u128::from(ta)).cmp(&(u128::from(wa) * u128::from(tb))).then(a.cmp(&b))
}

/// The items, heaviest first.
pub(super) fn heaviest_first(shares: &[(u64, u64)]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..shares.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| before(shares, a, b));
    order
}

/// The members' loads, `members × dimensions`.
pub(super) struct Loads {
    dimensions: usize,
    values: Vec<u64>,
}

impl Loads {
    pub(super) fn new(problem: &Problem<'_>) -> Loads {
        Loads { dimensions: problem.dimensions, values: vec![0; problem.members.len() * problem.dimensions] }
    }

    fn of(&self, member: usize) -> &[u64] {
        &self.values[member * self.dimensions..(member + 1) * self.dimensions]
    }

    /// Whether `item` fits on `member` within its limits in every dimension.
    #[inline]
    pub(super) fn fits(&self, problem: &Problem<'_>, member: usize, item: &[u64]) -> bool {
        if let ([w], 1) = (item, self.dimensions) {
            // One dimension, the common case, without the slices.
            return match (self.values.get(member), problem.limits.get(member)) {
                (Some(&l), Some(&limit)) => l.saturating_add(*w) <= limit,
                _ => false,
            };
        }
        let (load, limits) = (self.of(member), problem.limits(member));
        load.iter().zip(item).zip(limits).all(|((&l, &w), &limit)| l.saturating_add(w) <= limit)
    }

    pub(super) fn add(&mut self, member: usize, item: &[u64]) {
        let width = self.dimensions;
        if let ([w], 1, Some(l)) = (item, width, self.values.get_mut(member)) {
            *l = l.saturating_add(*w);
            return;
        }
        for (l, &w) in self.values[member * width..(member + 1) * width].iter_mut().zip(item) {
            *l = l.saturating_add(w);
        }
    }

    /// How full `member` would be with `item`: its largest `load / limit` over the dimensions, in Q32.
    pub(super) fn relative(&self, problem: &Problem<'_>, member: usize, item: &[u64]) -> u128 {
        let (load, limits) = (self.of(member), problem.limits(member));
        load.iter()
            .zip(item)
            .zip(limits)
            .map(|((&l, &w), &limit)| (u128::from(l.saturating_add(w)) << 32) / u128::from(limit.max(1)))
            .max()
            .unwrap_or(0)
    }
}

/// Where an item that fits on no member goes: the member it leaves least full relative to its limits (so an item
/// larger than every share goes to a member of the largest capacity), equal ones by rank. `ranked` is every member
/// as `(score, index)`.
pub(super) fn least_full(problem: &Problem<'_>, loads: &Loads, item: &[u64], ranked: &[(u64, usize)]) -> usize {
    ranked.iter().min_by_key(|&&(score, m)| (loads.relative(problem, m, item), score, m)).map_or(0, |&(_, m)| m)
}

/// The placement without memory, by its definition: heaviest first, each item to the best-ranked member it fits on,
/// else to [`least_full`]. The remembered placement must return exactly this.
pub(super) fn assign_uncached(problem: &Problem<'_>) -> Vec<usize> {
    assign_counting(problem).0
}

/// [`assign_uncached`], and how many items fit on no member.
pub(super) fn assign_counting(problem: &Problem<'_>) -> (Vec<usize>, usize) {
    let mut forced = 0;
    let seeds: Vec<u64> = problem.members.iter().map(|m| member_seed(m)).collect();
    let order = heaviest_first(&shares(problem.weights));
    let mut loads = Loads::new(problem);
    let mut owners = vec![0; problem.items.len()];
    let mut ranked = Vec::with_capacity(seeds.len());
    for index in order {
        let index = index as usize;
        let name = problem.items[index].node_name();
        let item = problem.weights.item(index);
        ranked.clear();
        ranked.extend(
            seeds.iter().zip(&problem.capacities).enumerate().map(|(m, (&s, &c))| (score(s, c, name.as_bytes()), m)),
        );
        ranked.sort_unstable();
        let owner = match ranked.iter().find(|&&(_, m)| loads.fits(problem, m, item)) {
            Some(&(_, m)) => m,
            None => {
                forced += 1;
                least_full(problem, &loads, item, &ranked)
            }
        };
        loads.add(owner, item);
        owners[index] = owner;
    }
    (owners, forced)
}
