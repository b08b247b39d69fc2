//! The members' shares and loads as the partition function gives them, rebuilt from what [`describe`](super) read:
//! the same inputs every member gives the function (the member names as read, their capacities, the set and its
//! weights), so that a weighted party's shares and loads are the ones its members compute and report
//! ([`Snapshot::load`](crate::Snapshot::load)).

use std::collections::{BTreeMap, HashMap};

use super::{ItemInfo, MemberInfo, OutsideShare, item_of_name};
use crate::{
    Error, Item,
    partition::PartitionFn,
    weighted::{Load, Weight, Weighted, Weights},
};
use proto::announcement::Agreement;
use proto::partition_fn::guarded;
use proto::placement::record::{Record, content_digest, digest, inputs_digest};

/// Each member's share, by name: positions in the set, ascending.
pub(super) type Shares = BTreeMap<String, Vec<usize>>;

/// The partition function's inputs for the party as read.
pub(super) struct Inputs {
    /// Every member's name, sorted by code point, as members pass them (a name carried by two nodes is there twice,
    /// as in the members' own call).
    names: Vec<String>,
    /// Each name's capacity, what the function is given: the announced capacity for a function with a load bound,
    /// or when no function is known; 1 for a function that ignores capacities (members then report capacity 1).
    capacities: Vec<u32>,
    /// The set, sorted and without duplicates.
    set: Vec<Item>,
    /// Its weights, in the order of `set`.
    weights: Weights,
    /// The sum of `capacities`.
    total_capacity: u64,
    /// The function's load bound, if a function with one is known.
    bound: Option<f64>,
}

impl Inputs {
    /// The inputs for `members` (their names and announced capacities) over `set` (sorted or not) with its `named`
    /// weights, for `partition_fn` if one is known.
    pub(super) fn new(
        members: &[MemberInfo],
        mut set: Vec<Item>,
        named: &BTreeMap<Item, Weight>,
        partition_fn: Option<&dyn PartitionFn>,
    ) -> Self {
        set.sort();
        set.dedup();
        let weighted = partition_fn.is_none_or(|f| f.load_bound().is_some());
        let mut party: Vec<(&str, u32)> =
            members.iter().map(|m| (m.name.as_str(), if weighted { m.capacity } else { 1 })).collect();
        party.sort_unstable();
        let names: Vec<String> = party.iter().map(|&(name, _)| name.to_owned()).collect();
        let capacities: Vec<u32> = party.iter().map(|&(_, capacity)| capacity).collect();
        let total_capacity = capacities.iter().map(|&c| u64::from(c)).sum();
        let weights = Weights::of(&set, named);
        let bound = partition_fn.and_then(|f| f.load_bound());
        Inputs { names, capacities, set, weights, total_capacity, bound }
    }

    /// The set the items of a description make, when the expected set is not known: all integers if every name is
    /// a canonical decimal integer, else all strings.
    pub(super) fn inferred_set(items: &[ItemInfo]) -> Vec<Item> {
        let inferred: Vec<Item> = items.iter().map(|info| item_of_name(&info.item)).collect();
        if inferred.iter().all(|item| matches!(item, Item::Int(_))) {
            inferred
        } else {
            items.iter().map(|info| Item::Str(info.item.clone())).collect()
        }
    }

    /// The capacity `name` is given (1 for a name not in the party).
    fn capacity_of(&self, name: &str) -> u32 {
        self.names.binary_search_by(|n| n.as_str().cmp(name)).map_or(1, |at| self.capacities[at])
    }

    /// Each member's share under `partition_fn`, by name, as positions in the set.
    ///
    /// # Errors
    /// [`Error::PartitionFn`] if the function panics, or returns an item outside the set or one twice.
    pub(super) fn shares(&self, partition_fn: &dyn PartitionFn) -> Result<Shares, Error> {
        let mut shares = BTreeMap::new();
        for name in &self.names {
            if shares.contains_key(name) {
                continue;
            }
            let input = Weighted::new(name, &self.names, &self.capacities, &self.set, &self.weights);
            let share =
                guarded(|| partition_fn.partition_weighted(&input)).map_err(|reason| Error::PartitionFn { reason })?;
            let mut positions = Vec::with_capacity(share.len());
            for item in share {
                let at = self.set.binary_search(&item).map_err(|_| Error::PartitionFn {
                    reason: format!("returned {item:?}, which is not in the set"),
                })?;
                positions.push(at);
            }
            positions.sort_unstable();
            if positions.windows(2).any(|pair| pair[0] == pair[1]) {
                return Err(Error::PartitionFn { reason: "returned an item more than once".into() });
            }
            shares.insert(name.clone(), positions);
        }
        Ok(shares)
    }

    /// Each member's share under `partition_fn`, a function that [keeps the
    /// placement](PartitionFn::keeps_placement), as the members compute it from `record`, the placement record in
    /// force (`None`: there is none): the record itself when it was written for these very inputs (`inputs`,
    /// [`inputs_digest`]; then `true`), else computed from it. `None` when the function does not give the whole
    /// placement.
    ///
    /// # Errors
    /// [`Error::PartitionFn`] if the function panics, or returns a placement that does not match the set and party.
    pub(super) fn placed_shares(
        &self,
        partition_fn: &dyn PartitionFn,
        record: Option<&Record>,
        inputs: u64,
    ) -> Result<Option<(Shares, bool)>, Error> {
        let me = self.names.first().map_or("", String::as_str);
        let input = Weighted::new(me, &self.names, &self.capacities, &self.set, &self.weights);
        let previous = record.map(|record| record.previous_for(&self.names, &self.set));
        // As a member hands it out (`Core::placed_share`): every item placed on a member of the party, the same owners.
        if let (Some(record), Some(previous)) = (record, &previous)
            && record.inputs == inputs
            && let Some(owners) = previous.iter().copied().collect::<Option<Vec<usize>>>()
            && digest(&self.names, &self.set, &owners) == record.digest
        {
            return Ok(Some((self.shares_of(&owners), true)));
        }
        let input = match &previous {
            Some(previous) => input.with_previous(previous),
            None => input,
        };
        let owners = guarded(|| partition_fn.placement(&input)).map_err(|reason| Error::PartitionFn { reason })?;
        let Some(owners) = owners else { return Ok(None) };
        if owners.len() != self.set.len() || owners.iter().any(|&owner| owner >= self.names.len()) {
            return Err(Error::PartitionFn {
                reason: "returned a placement that does not match the items and members".into(),
            });
        }
        Ok(Some((self.shares_of(&owners), false)))
    }

    /// Each member's items (positions in the set) under `owners`, every item's owner as an index into the names.
    fn shares_of(&self, owners: &[usize]) -> Shares {
        let mut shares: Shares = self.names.iter().map(|name| (name.clone(), Vec::new())).collect();
        for (at, &owner) in owners.iter().enumerate() {
            if let Some(share) = shares.get_mut(&self.names[owner]) {
                share.push(at);
            }
        }
        shares
    }

    /// The digest of the inputs the members give the function ([`inputs_digest`]) over this set (a `shared` set at
    /// its version, else the `fixed` set as the members were given it): the set by its items and weights.
    pub(super) fn digest(&self, partition_fn: &dyn PartitionFn, shared: Option<u64>, fixed: Option<&[Item]>) -> u64 {
        let agreement =
            Agreement::new(fixed, shared, partition_fn, fixed.and_then(<[Item]>::first).or(self.set.first()));
        inputs_digest(content_digest(&self.set, &self.weights), agreement.function, &self.names, &self.capacities)
    }

    /// The load of member `name` carrying the items at `positions` in the set.
    pub(super) fn load(&self, name: &str, positions: &[usize]) -> Load {
        Load::of(positions.iter().copied(), &self.weights, self.capacity_of(name), self.total_capacity, self.bound)
    }

    /// The positions in the set of the items each session holds (items outside the set are left out).
    pub(super) fn held(&self, items: &[ItemInfo]) -> HashMap<i64, Vec<usize>> {
        let position: HashMap<String, usize> = self.set.iter().enumerate().map(|(at, i)| (i.node_name(), at)).collect();
        let mut held: HashMap<i64, Vec<usize>> = HashMap::new();
        for info in items {
            if let (Some(owner), Some(&at)) = (&info.owner, position.get(&info.item)) {
                held.entry(owner.session).or_default().push(at);
            }
        }
        held
    }

    /// Each item's successor, by lock node name: the member its share goes to when the member whose share it is
    /// (`shares`) departs, as `partition_fn` computes it for the party without that member (from the assignment
    /// without it, for a function that keeps the placement). `None` when the function does not declare that a
    /// departure moves only the departed member's items, in a party of one, or past [`SUCCESSOR_WORK`].
    ///
    /// # Errors
    /// [`Error::PartitionFn`] if the function panics, or returns an item outside the set or a placement that does not
    /// match it.
    ///
    /// [`SUCCESSOR_WORK`]: super::SUCCESSOR_WORK
    pub(super) fn successors(
        &self,
        partition_fn: &dyn PartitionFn,
        shares: &Shares,
    ) -> Result<Option<HashMap<String, String>>, Error> {
        let members = self.names.len() as u64;
        let work = members.saturating_mul(members).saturating_mul(self.set.len() as u64);
        if !partition_fn.departures_move_only_theirs() || members < 2 || work > super::SUCCESSOR_WORK {
            return Ok(None);
        }
        let refused = |reason: String| Error::PartitionFn { reason };
        let mut successors = HashMap::new();
        for (gone, share) in shares {
            if share.is_empty() {
                continue;
            }
            let keep: Vec<usize> = (0..self.names.len()).filter(|&at| self.names[at] != *gone).collect();
            let names: Vec<String> = keep.iter().map(|&at| self.names[at].clone()).collect();
            let capacities: Vec<u32> = keep.iter().map(|&at| self.capacities[at]).collect();
            let input = Weighted::new(&names[0], &names, &capacities, &self.set, &self.weights);
            if partition_fn.keeps_placement() {
                // The assignment in force without the departed member: each item's owner, or none for its items.
                let mut previous = vec![None; self.set.len()];
                for (name, positions) in shares {
                    let owner = names.iter().position(|n| n == name);
                    for &at in positions {
                        previous[at] = owner;
                    }
                }
                let placed = guarded(|| partition_fn.placement(&input.with_previous(&previous))).map_err(refused)?;
                let Some(owners) = placed.filter(|owners| owners.len() == self.set.len()) else {
                    return Err(refused("returned a placement that does not match the items and members".into()));
                };
                for &at in share {
                    let owner = names.get(owners[at]).ok_or_else(|| refused("placed an item on no member".into()))?;
                    successors.insert(self.set[at].node_name(), owner.clone());
                }
                continue;
            }
            let orphans: std::collections::HashSet<&Item> = share.iter().map(|&at| &self.set[at]).collect();
            for name in &names {
                let input = Weighted::new(name, &names, &capacities, &self.set, &self.weights);
                let mine = guarded(|| partition_fn.partition_weighted(&input)).map_err(refused)?;
                for item in mine.iter().filter(|item| orphans.contains(item)) {
                    successors.insert(item.node_name(), name.clone());
                }
            }
        }
        Ok(Some(successors))
    }

    /// The items held by a member whose share (`shares`, by name) does not include them.
    pub(super) fn outside_share(
        &self,
        shares: &BTreeMap<String, Vec<usize>>,
        items: &[ItemInfo],
        member_of_session: &HashMap<i64, String>,
    ) -> Vec<OutsideShare> {
        // Which member's share each item (by lock node name) is in.
        let mut share_of: HashMap<String, &str> = HashMap::with_capacity(self.set.len());
        for (name, positions) in shares {
            for &at in positions {
                share_of.insert(self.set[at].node_name(), name);
            }
        }
        let mut outside = Vec::new();
        for info in items {
            let Some(owner) = &info.owner else { continue };
            // Orphans are listed as such; this is about members.
            let Some(holder) = member_of_session.get(&owner.session) else { continue };
            let share = share_of.get(&info.item).copied();
            if share != Some(holder.as_str()) {
                outside.push(OutsideShare {
                    item: info.item.clone(),
                    holder: holder.clone(),
                    share_of: share.map(str::to_owned),
                });
            }
        }
        outside
    }
}
