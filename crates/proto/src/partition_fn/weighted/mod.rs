//! [`WeightedRendezvous`]: rendezvous hashing by capacity, with a load bound by weight, that remembers its work.

use std::sync::Mutex;

use crate::partition_fn::Weighted;
use crate::{Item, PartitionFn};

mod ln;
mod memory;
mod place;
mod sticky;
#[cfg(test)]
mod tests;

use memory::Memory;
use place::{Problem, assign_uncached};

/// Rendezvous hashing by capacity, with a load bound by weight: divides the items' weights among the members in
/// proportion to their capacities ([`Builder::capacity`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.capacity)), and moves little when the party,
/// a capacity or a weight changes.
///
/// # The placement
///
/// Every member computes the same placement from the same inputs, with integer arithmetic only:
///
/// 1. **Limits.** Member `m` of capacity `c` may carry [`capacity_limit`](crate::capacity_limit)`(T, c, C,
///    load_factor)` in each dimension, where `T` is the dimension's total weight and `C` the party's total capacity
///    (a capacity of 0 counts as 1).
/// 2. **Ranking.** Each item ranks the members by the score `-ln(h / 2^64) / c`, lowest first, where `h` is
///    [`Rendezvous`](crate::Rendezvous)'s hash of member and item (FNV-1a of the member name, a `0x00` byte and the
///    item's node name, then SplitMix64's finalizer) and the logarithm is computed in fixed point (Q6.58, integer
///    arithmetic, no platform `ln`); equal scores by member name. A member is then first choice for about `c / C`
///    of the items, so the bound only corrects the remainder, and a member joining or leaving does not reorder the
///    others.
/// 3. **Order.** Items are placed heaviest first: by their largest share of a dimension's total (compared exactly),
///    equal shares in the set's order.
/// 4. **Greedy.** Each item goes to the best-ranked member whose load plus the item stays within its limit in every
///    dimension. An item that fits on no member (one larger than every member's limit, say) goes to the member it
///    leaves least full (the smallest largest `load / limit` over the dimensions; equal ones by rank), which the
///    partitioner then reports [`Load::over_capacity`](crate::Load::over_capacity): such an item lands on a member
///    of the largest capacity, alone if it is larger than that member's limit.
///
/// So no member passes its limit unless an item fits nowhere. The hash, the logarithm and the order are part of the
/// contract: members using different versions of them disagree. Every member of a party must use the same
/// `load_factor`.
///
/// # Memory
///
/// The function remembers, between calls, each item's best-ranked members, the heaviest-first order and the latest
/// placement (about 110 bytes per item, plus a copy of the items, their names and weights). A member joining costs one score per
/// item, a member leaving a pass over the remembered lists (and a full ranking of the items that listed only it),
/// a capacity change both, and a changed weight moves that item in the order; then the greedy runs again (a pass over
/// the items). The result is the same as computing everything afresh. [`prepare_weighted`](PartitionFn::prepare_weighted)
/// does all of it ahead, so that the deciding call with the same inputs only hands out the placement. Parties
/// larger than 30,000 members, or whose names are not sorted and distinct, are placed without memory.
///
/// ```
/// use std::collections::BTreeMap;
/// use zk_partitioner::{Item, partition::PartitionFn, weighted::{Weight, Weighted, WeightedRendezvous, Weights}};
///
/// let items: Vec<Item> = (0..100).map(Item::from).collect();
/// let weights = Weights::of(&items, &BTreeMap::from([(Item::from(7), Weight::new(20))]));
/// let members = ["big".to_string(), "small".to_string()];
/// let capacities = [3, 1];
/// let f = WeightedRendezvous::default();
/// let share = |me| f.partition_weighted(&Weighted::new(me, &members, &capacities, &items, &weights));
/// let weight_of = |share: &[Item]| share.iter().map(|i| if *i == Item::from(7) { 20 } else { 1 }).sum::<u64>();
/// // 119 in all: the big member's ideal is 89.25, the small one's 29.75; neither goes past 1.1× of it.
/// assert!(weight_of(&share("big")) <= 99 && weight_of(&share("small")) <= 33);
/// assert_eq!(share("big").len() + share("small").len(), 100);
/// // The same as computed without memory, by a fresh function.
/// let owners = WeightedRendezvous::default().assign(&Weighted::new("big", &members, &capacities, &items, &weights));
/// assert_eq!(owners.iter().filter(|&&m| m == 0).count(), share("big").len());
/// ```
pub struct WeightedRendezvous {
    load_factor: f64,
    /// Places from the previous assignment the party agreed on ([`WeightedRendezvous::sticky`]).
    sticky: bool,
    memory: Mutex<Option<Memory>>,
}

impl Default for WeightedRendezvous {
    /// A load factor of 1.10: no member carries more than 10 % above its ideal share where a placement allows.
    fn default() -> Self {
        WeightedRendezvous::with_load_factor(1.10)
    }
}

impl Clone for WeightedRendezvous {
    /// The same function, with nothing remembered yet.
    fn clone(&self) -> Self {
        WeightedRendezvous { sticky: self.sticky, ..WeightedRendezvous::with_load_factor(self.load_factor) }
    }
}

impl std::fmt::Debug for WeightedRendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightedRendezvous")
            .field("load_factor", &self.load_factor)
            .field("sticky", &self.sticky)
            .finish_non_exhaustive()
    }
}

impl WeightedRendezvous {
    /// A function that lets no member carry more than `load_factor` × its ideal share, where a placement allows;
    /// clamped to 1.0 ..= 1000 (a non-finite factor counts as 1.0). Smaller factors balance more tightly and move
    /// more weight on a change.
    pub fn with_load_factor(load_factor: f64) -> Self {
        let load_factor = if load_factor.is_finite() { load_factor.clamp(1.0, 1000.0) } else { 1.0 };
        WeightedRendezvous { load_factor, sticky: false, memory: Mutex::new(None) }
    }

    /// The same function, placing from the previous assignment: [`assign_sticky`](Self::assign_sticky) when the
    /// partitioner passes one ([`Weighted::previous`]); without one (the party's first assignment), `assign_sticky`
    /// from [`assign`](Self::assign)'s placement, which is where the sticky rule would take that placement anyway. The partitioner then keeps the
    /// assignment in force in ZooKeeper, so that every member computes from the same one (`docs/sticky-placement.md`).
    /// Every member of a party must agree on this, as on the load factor: the function's fingerprint tells them apart.
    pub fn sticky(self) -> Self {
        WeightedRendezvous { sticky: true, ..self }
    }

    /// The owner (an index into `input.members`) of every item, in the order of `input.items`; empty when there are
    /// no members or the capacities or weights do not match the members or items in length. `input.me` is not
    /// used. `input.members` and `input.items` are the sorted, duplicate-free lists the partitioner passes.
    pub fn assign(&self, input: &Weighted<'_>) -> Vec<usize> {
        let Some(problem) = Problem::new(input, self.load_factor) else {
            return Vec::new();
        };
        if !remembers(problem.members) {
            return assign_uncached(&problem);
        }
        match self.memory.lock() {
            Ok(mut remembered) => {
                let mut memory = remembered_for(remembered.take(), &problem);
                let owners = memory.place(&problem);
                *remembered = Some(memory);
                owners
            }
            // Only a panic inside this function poisons the lock; compute afresh rather than trust what it left.
            Err(_) => assign_uncached(&problem),
        }
    }

    /// The *sticky* placement: the owner of every item (as [`assign`](Self::assign) returns it), computed from the
    /// previous assignment `previous` (each item's previous owner as an index into `input.members`, `None` where the
    /// owner left or there was none), so that a change moves close to the minimum weight: a member joining takes
    /// about its share, a member leaving moves little more than what it held, and a changed weight moves little
    /// besides that item. Its rule, in integers and the same on every member given the same `previous`, is in
    /// `docs/sticky-placement.md`. Whatever `previous` piled on a member, it ends within its limit, or holding one
    /// item larger than its limit and nothing else, unless the members' limits cannot hold the items at all.
    ///
    /// The partitioner calls it for a [`sticky`](Self::sticky) function, with the assignment its members agreed on
    /// (the placement record that document describes); it also serves placements kept elsewhere (a controller), and
    /// measuring (`cargo bench --bench partition_fn`). Weights of several dimensions are placed by
    /// [`assign`](Self::assign), ignoring `previous`.
    ///
    /// ```
    /// use zk_partitioner::{Item, weighted::{Weighted, WeightedRendezvous, Weights}};
    ///
    /// let items: Vec<Item> = (0..1000).map(Item::from).collect();
    /// let weights = Weights::uniform(items.len());
    /// let before = ["a".to_string(), "b".to_string()];
    /// let f = WeightedRendezvous::default();
    /// let first = f.assign(&Weighted::new("a", &before, &[1, 1], &items, &weights));
    /// // "c" joins: the old owners are indexes into the new party, which keeps "a" and "b" at 0 and 1.
    /// let after = ["a".to_string(), "b".to_string(), "c".to_string()];
    /// let previous: Vec<Option<usize>> = first.iter().map(|&m| Some(m)).collect();
    /// let next = f.assign_sticky(&Weighted::new("a", &after, &[1, 1, 1], &items, &weights), &previous);
    /// let moved = first.iter().zip(&next).filter(|(a, b)| a != b).count();
    /// // Every moved item went to the joiner, about a third of them in all.
    /// assert!(first.iter().zip(&next).all(|(&a, &b)| a == b || b == 2));
    /// assert!((300..=367).contains(&moved), "{moved}");
    /// ```
    pub fn assign_sticky(&self, input: &Weighted<'_>, previous: &[Option<usize>]) -> Vec<usize> {
        match Problem::new(input, self.load_factor) {
            // Items are numbered in 32 bits, one number short of the full range (`u32::MAX` is "no owner").
            Some(problem) if problem.dimensions == 1 && problem.items.len() < u32::MAX as usize => {
                sticky::assign_sticky(&problem, previous)
            }
            Some(_) => self.assign(input),
            None => Vec::new(),
        }
    }

    /// Items that ran out of remembered members during a placement since the ranking was built (tests and tuning).
    #[cfg(test)]
    fn fallbacks(&self) -> usize {
        self.memory.lock().ok().and_then(|m| m.as_ref().map(|m| m.fallbacks)).unwrap_or(0)
    }
}

/// Whether a placement for `members` can be remembered: the lists order equal scores by name, which is the party's
/// order only when it is sorted, and number members in 16 bits.
fn remembers(members: &[String]) -> bool {
    members.len() <= crate::partition_fn::prefix::MAX_MEMBERS && members.windows(2).all(|pair| pair[0] < pair[1])
}

/// The `remembered` memory brought up to `problem`, or a new one when it is for other items.
fn remembered_for(remembered: Option<Memory>, problem: &Problem<'_>) -> Memory {
    match remembered {
        Some(mut memory) if memory.is_for(problem.items) => {
            memory.follow(problem);
            memory
        }
        _ => Memory::build(problem),
    }
}

impl PartitionFn for WeightedRendezvous {
    /// Without weights and capacities: every item weighs 1, every member has capacity 1 (each member then holds at
    /// most `load_factor` × the average count, rounded up).
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let capacities = vec![1; members.len()];
        let weights = crate::Weights::uniform(items.len());
        self.partition_weighted(&Weighted::new(me, members, &capacities, items, &weights))
    }

    /// Ranks and places ahead (see [Memory](WeightedRendezvous#memory)).
    fn prepare(&self, me: &str, members: &[String], items: &[Item]) {
        let capacities = vec![1; members.len()];
        let weights = crate::Weights::uniform(items.len());
        self.prepare_weighted(&Weighted::new(me, members, &capacities, items, &weights));
    }

    fn load_bound(&self) -> Option<f64> {
        Some(self.load_factor)
    }

    fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
        let Some(me) = input.members.iter().position(|m| m == input.me) else {
            return Vec::new();
        };
        self.owners(input)
            .into_iter()
            .zip(input.items)
            .filter(|&(owner, _)| owner == me)
            .map(|(_, item)| item.clone())
            .collect()
    }

    /// Ranks and places ahead, so that the deciding call with the same inputs only hands out the placement (see
    /// [Memory](WeightedRendezvous#memory)); nothing for a [`sticky`](WeightedRendezvous::sticky) function. At 100
    /// members × 100,000 items a first call costs about 0.2 s of CPU and a change 5 to 9 ms (BENCHMARKS.md,
    /// "Weighted items and capacities: the partition function alone").
    fn prepare_weighted(&self, input: &Weighted<'_>) {
        // The sticky placement keeps nothing between calls to work ahead on: the greedy's ranking would go unused.
        if !self.sticky {
            self.assign(input);
        }
    }

    fn keeps_placement(&self) -> bool {
        self.sticky
    }

    fn placement(&self, input: &Weighted<'_>) -> Option<Vec<usize>> {
        self.sticky.then(|| self.owners(input))
    }

    /// Greedy or sticky, a departed member's items go to the survivors and the survivors keep theirs (but for the
    /// few a load bound moves as their room grows).
    fn departures_move_only_theirs(&self) -> bool {
        true
    }
}

impl WeightedRendezvous {
    /// Every item's owner: from the previous assignment where the function is sticky and one is given. A sticky
    /// function without one starts from the greedy's placement carried through one sticky call: the greedy's is not
    /// what the sticky rule keeps (it moves 7-9 % of the weight once from it), and starting there would make the
    /// party's first change pay that on top of its own.
    fn owners(&self, input: &Weighted<'_>) -> Vec<usize> {
        match input.previous {
            Some(previous) if self.sticky && previous.len() == input.items.len() => self.assign_sticky(input, previous),
            None if self.sticky => {
                let greedy: Vec<Option<usize>> = self.assign(input).into_iter().map(Some).collect();
                match greedy.len() == input.items.len() {
                    true => self.assign_sticky(input, &greedy),
                    false => Vec::new(),
                }
            }
            _ => self.assign(input),
        }
    }
}
