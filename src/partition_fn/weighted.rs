//! [`WeightedRendezvous`]: rendezvous hashing with a load bound, by weight, against each member's capacity share.

use super::{member_seed, weight};
use crate::partition_fn::Weighted;
use crate::weight::capacity_limit;
use crate::{Item, PartitionFn};

/// Rendezvous hashing by weight with a load bound: divides the items' weights among the members in proportion to
/// their capacities ([`Builder::capacity`](crate::Builder::capacity)), moving little when the party or a weight
/// changes.
///
/// Items are placed heaviest first (by their largest share of any dimension's total; equal sizes in the set's
/// order). Each goes to the highest-ranked member (a hash of member and item) that has room for it: whose load
/// plus the item stays within `load_factor` × its ideal share in every dimension ([`capacity_limit`]). An item
/// that fits nowhere (larger than any member's room) goes to the member that it leaves least loaded relative to
/// its limit, and that member is reported [`Load::over_capacity`](crate::Load::over_capacity).
///
/// Every member of a party must use the same `load_factor`.
///
/// ```
/// use std::collections::BTreeMap;
/// use zk_partitioner::{Item, PartitionFn, Weight, Weighted, WeightedRendezvous, Weights};
///
/// let items: Vec<Item> = (0..100).map(Item::from).collect();
/// let weights = Weights::of(&items, &BTreeMap::from([(Item::from(7), Weight::new(20))]));
/// let members = ["big".to_string(), "small".to_string()];
/// let capacities = [3, 1];
/// let share = |me| {
///     let input = Weighted::new(me, &members, &capacities, &items, &weights);
///     WeightedRendezvous::default().partition_weighted(&input)
/// };
/// let weight_of = |share: &[Item]| share.iter().map(|i| if *i == Item::from(7) { 20 } else { 1 }).sum::<u64>();
/// // 119 in all: the big member's ideal is 89.25, the small one's 29.75; neither goes past 1.1× of it.
/// assert!(weight_of(&share("big")) <= 99 && weight_of(&share("small")) <= 33);
/// assert_eq!(share("big").len() + share("small").len(), 100);
/// ```
#[derive(Clone, Debug)]
pub struct WeightedRendezvous {
    load_factor: f64,
}

impl Default for WeightedRendezvous {
    /// A load factor of 1.10: no member carries more than 10 % above its ideal share where a placement allows.
    fn default() -> Self {
        WeightedRendezvous::with_load_factor(1.10)
    }
}

impl WeightedRendezvous {
    /// A function that lets no member carry more than `load_factor` × its ideal share, where a placement allows;
    /// clamped to 1.0 ..= 1000 (a non-finite factor counts as 1.0).
    pub fn with_load_factor(load_factor: f64) -> Self {
        let load_factor = if load_factor.is_finite() { load_factor.clamp(1.0, 1000.0) } else { 1.0 };
        WeightedRendezvous { load_factor }
    }

    /// The owner (an index into `input.members`) of every item, in the order of `input.items`.
    pub fn assign(&self, input: &Weighted<'_>) -> Vec<usize> {
        let members = input.members;
        if members.is_empty() {
            return Vec::new();
        }
        let weights = input.weights;
        let totals = weights.totals();
        let total_capacity: u64 = input.capacities.iter().map(|&c| u64::from(c)).sum();
        let limits: Vec<Vec<u64>> = input
            .capacities
            .iter()
            .map(|&c| totals.iter().map(|&t| capacity_limit(t, c, total_capacity, self.load_factor)).collect())
            .collect();
        // Heaviest first: by the largest share of a dimension's total (fixed point), then in the set's order.
        let size = |index: usize| -> u128 {
            weights
                .item(index)
                .iter()
                .zip(&totals)
                .map(|(&w, &t)| (u128::from(w) << 64) / u128::from(t.max(1)))
                .max()
                .unwrap_or(0)
        };
        let mut order: Vec<(u128, usize)> = (0..input.items.len()).map(|i| (size(i), i)).collect();
        order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let seeds: Vec<u64> = members.iter().map(|m| member_seed(m)).collect();
        let mut load = vec![vec![0u64; totals.len()]; members.len()];
        let mut owners = vec![0usize; input.items.len()];
        let mut ranked: Vec<(u64, usize)> = Vec::with_capacity(members.len());
        for (_, index) in order {
            let name = input.items[index].node_name();
            let item = weights.item(index);
            ranked.clear();
            ranked.extend(seeds.iter().enumerate().map(|(m, &seed)| (weight(seed, name.as_bytes()), m)));
            ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let fits = |m: usize, load: &[Vec<u64>]| {
                load[m].iter().zip(item).zip(&limits[m]).all(|((&l, &w), &limit)| l.saturating_add(w) <= limit)
            };
            let owner = ranked.iter().map(|&(_, m)| m).find(|&m| fits(m, &load)).unwrap_or_else(|| {
                // Fits nowhere: the member it leaves least loaded relative to its limits (fixed point).
                let relative = |m: usize| -> u128 {
                    load[m]
                        .iter()
                        .zip(item)
                        .zip(&limits[m])
                        .map(|((&l, &w), &limit)| (u128::from(l + w) << 32) / u128::from(limit.max(1)))
                        .max()
                        .unwrap_or(0)
                };
                (0..members.len()).min_by_key(|&m| (relative(m), m)).unwrap_or(0)
            });
            for (l, &w) in load[owner].iter_mut().zip(item) {
                *l = l.saturating_add(w);
            }
            owners[index] = owner;
        }
        owners
    }
}

impl PartitionFn for WeightedRendezvous {
    /// Without weights and capacities: every item weighs 1, every member has capacity 1.
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let capacities = vec![1; members.len()];
        let weights = crate::Weights::uniform(items.len());
        self.partition_weighted(&Weighted { me, members, capacities: &capacities, items, weights: &weights })
    }

    fn load_bound(&self) -> Option<f64> {
        Some(self.load_factor)
    }

    fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
        let Some(me) = input.members.iter().position(|m| m == input.me) else {
            return Vec::new();
        };
        if input.capacities.len() != input.members.len() || input.weights.len() != input.items.len() {
            return Vec::new();
        }
        self.assign(input)
            .into_iter()
            .zip(input.items)
            .filter(|&(owner, _)| owner == me)
            .map(|(_, item)| item.clone())
            .collect()
    }
}
