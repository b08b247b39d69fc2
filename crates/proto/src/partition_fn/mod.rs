//! Partition functions: who gets which items.

use std::sync::Mutex;

use crate::Item;
use crate::hash::{FNV_OFFSET, FNV_PRIME, finish, fnv1a};

mod observed;
mod prefix;
mod ranking;
mod weighted;
pub use observed::{Call, Observed, Observer, check_declarations};
use ranking::Ranking;
pub use weighted::WeightedRendezvous;

/// Decides which items a member owns, given every member of the party.
///
/// Every member of a party must use the same function over the same items, and the function must be
/// deterministic: the members never talk to each other, they only agree because they compute the same answer from the
/// same inputs. If two members disagree, both wait for a lock the other holds (kazoo issue #392).
///
/// The function runs on the partitioner's background task, so it must be fast and must not block.
///
/// Its inputs are:
/// - `me`: this member's name (see [`Snapshot::member`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.member));
/// - `members`: every member's name, sorted by code point, this member included;
/// - `items`: the whole set, sorted (integers numerically, strings by code point) and without duplicates.
///
/// It returns the items this member owns; items not in the set and duplicates are an error
/// ([`Error::PartitionFn`](https://docs.rs/zk-partitioner/latest/zk_partitioner/enum.Error.html#variant.PartitionFn)). Closures implement the trait:
///
/// ```
/// use zk_partitioner::{Item, partition::PartitionFn};
///
/// // Everything goes to the alphabetically first member.
/// let first_takes_all = |me: &str, members: &[String], items: &[Item]| -> Vec<Item> {
///     if members.first().map(String::as_str) == Some(me) { items.to_vec() } else { Vec::new() }
/// };
/// let members = ["a-0000000001".to_string(), "b-0000000000".to_string()];
/// assert_eq!(first_takes_all.partition("a-0000000001", &members, &[Item::from(1)]), [Item::from(1)]);
/// ```
pub trait PartitionFn: Send + Sync + 'static {
    /// Returns the items `me` owns.
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item>;

    /// Work ahead of the deciding call, for a function that remembers work between calls (like [`Rendezvous`]).
    ///
    /// While the party settles, once it has been quiet for a quarter of `time_boundary`, the partitioner calls this
    /// with the party as it then stands; if nothing changes before `time_boundary` has passed, the deciding
    /// [`partition`](PartitionFn::partition) call gets the same arguments. The wait is idle time for every member,
    /// so work done here (a first ranking of every item, say) is off the path to `Acquired`. It must not change what
    /// `partition` returns. The default does nothing; a function that wraps another (to time it, say) should forward
    /// it, as [`Observed`] does.
    fn prepare(&self, me: &str, members: &[String], items: &[Item]) {
        let _ = (me, members, items);
    }

    /// For a function that divides by weight and capacity ([`WeightedRendezvous`]): the most weight it lets a
    /// member carry in any dimension, as a multiple of the member's ideal share
    /// ([`capacity_limit`](crate::capacity_limit) computes the limit). `None` (the default): the function ignores
    /// weights and capacities.
    ///
    /// A function that says `Some` is called through [`partition_weighted`](PartitionFn::partition_weighted), and
    /// the partitioner waits until it has read every member's announced capacity before deciding; a member whose
    /// load passes this bound is reported [`Load::over_capacity`](crate::Load::over_capacity).
    fn load_bound(&self) -> Option<f64> {
        None
    }

    /// Returns the items `input.me` owns, knowing the items' weights and the members' capacities. The partitioner
    /// always calls this one; the default calls [`partition`](PartitionFn::partition), which ignores them.
    fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
        self.partition(input.me, input.members, input.items)
    }

    /// [`prepare`](PartitionFn::prepare) with weights and capacities; the default calls `prepare`.
    fn prepare_weighted(&self, input: &Weighted<'_>) {
        self.prepare(input.me, input.members, input.items)
    }

    /// Whether the function computes a *sticky* placement from the previous assignment ([`Weighted::previous`]), so
    /// that the partitioner keeps the assignment in force in ZooKeeper for every member to compute from (see
    /// [`WeightedRendezvous::sticky`]). `false` (the default): it computes from its inputs alone. To wrap a function
    /// (to time it, say), use [`Observed`], which forwards this and every other method. `build()` refuses a function
    /// whose declarations disagree with its answers ([`check_declarations`]), such as a hand-written wrapper that
    /// forwards [`placement`](PartitionFn::placement) but not this: it would keep no record and compute without the
    /// previous assignment.
    fn keeps_placement(&self) -> bool {
        false
    }

    /// For a function that [keeps the placement](PartitionFn::keeps_placement): the owner of every item (an index
    /// into `input.members`, in the order of `input.items`), computed from `input.previous` where given. `None`
    /// (the default): the function does not say.
    fn placement(&self, input: &Weighted<'_>) -> Option<Vec<usize>> {
        let _ = input;
        None
    }

    /// Whether a member's departure moves only the departed member's items: each of them goes to another member,
    /// and every survivor keeps what it had (a function with a load bound may also move a few of a survivor's, as
    /// the survivors' room grows). [`Rendezvous`] and [`WeightedRendezvous`] say `true`; kazoo's round-robin, which
    /// shifts nearly every item when a member leaves, says `false`, as does the default.
    ///
    /// Under [`Rebalance::Incremental`](crate::Rebalance::Incremental), a function that says `true` gets the
    /// *departure fast path*: a party change that is only departures (sessions that ended, members that finished) is
    /// handed over at once, without waiting `time_boundary`. Each survivor takes the items it gains as soon as their
    /// holder's lock node is gone, and gives up any it loses (a survivor's item moved by a load bound) only once the
    /// party has been quiet for `time_boundary`, as before. A function that says `true` wrongly costs no safety (the
    /// locks decide who holds an item), only lock contention until the quiet period ends.
    fn departures_move_only_theirs(&self) -> bool {
        false
    }
}

/// The inputs of [`PartitionFn::partition_weighted`]: those of [`PartitionFn::partition`], with every member's
/// capacity and every item's weight.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Weighted<'a> {
    /// This member's name.
    pub me: &'a str,
    /// Every member's name, sorted by code point, this member included.
    pub members: &'a [String],
    /// Each member's capacity, in the order of `members` (1 for a member that announces none, e.g. a kazoo member).
    pub capacities: &'a [u32],
    /// The whole set, sorted and without duplicates.
    pub items: &'a [Item],
    /// The items' weights, in the order of `items`.
    pub weights: &'a crate::Weights,
    /// The assignment the party agreed on before this change, for a function that [keeps the
    /// placement](PartitionFn::keeps_placement): each item's owner then, as an index into `members` (`None` where
    /// that owner has left or the item is new). `None`: there is none (a first assignment, or a function that
    /// ignores it).
    pub previous: Option<&'a [Option<usize>]>,
}

impl<'a> Weighted<'a> {
    /// The inputs for `me` among `members` (with their `capacities`) over `items` (with their `weights`).
    ///
    /// # Panics
    ///
    /// When `capacities` or `weights` do not match `members` or `items` in length.
    pub fn new(
        me: &'a str,
        members: &'a [String],
        capacities: &'a [u32],
        items: &'a [Item],
        weights: &'a crate::Weights,
    ) -> Self {
        assert_eq!(members.len(), capacities.len(), "one capacity per member");
        assert_eq!(items.len(), weights.len(), "one weight per item");
        Weighted { me, members, capacities, items, weights, previous: None }
    }

    /// The same inputs, with the previous assignment (see [`previous`](Weighted::previous)).
    ///
    /// # Panics
    ///
    /// When `previous` does not match `items` in length.
    pub fn with_previous(self, previous: &'a [Option<usize>]) -> Self {
        assert_eq!(previous.len(), self.items.len(), "one previous owner per item");
        Weighted { previous: Some(previous), ..self }
    }

    /// The same inputs, without the previous assignment: what a wrapper passes to place afresh.
    pub fn without_previous(self) -> Self {
        Weighted { previous: None, ..self }
    }
}

/// The probe party a function is asked about, without ZooKeeper: by the announcement's fingerprint (what the other
/// members compare) and by [`check_declarations`] (what `build()` refuses). Three members; with weights, of
/// capacities 1, 2 and 3.
pub(crate) const PROBE_MEMBERS: [&str; 3] = ["probe-a-0000000000", "probe-b-0000000001", "probe-c-0000000002"];
/// The probe members' capacities when the function is asked with weights.
pub(crate) const PROBE_CAPACITIES: [u32; 3] = [1, 2, 3];

/// The probe items' weights when the function is asked with weights: 1 to 5, in turn.
pub(crate) fn probe_weights(items: &[Item]) -> crate::Weights {
    let weights = items.iter().zip(0u64..).map(|(item, i)| (item.clone(), crate::Weight::new(i % 5 + 1))).collect();
    crate::Weights::of(items, &weights)
}

/// Calls the user's partition function (or anything that calls it): a panic becomes its message, so the member
/// reports `Failure` with the cause instead of a dead task behind a stale snapshot. Every call of user code goes
/// through here. The payload is dropped normally: a payload whose drop panics unwinds from here (the driver's
/// supervision turns that into `Failure` and cleans up; `build()` guards its own probe).
pub fn guarded<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        .map_err(|payload| format!("panicked: {}", crate::error::panic_message(&*payload)))
}

impl<F> PartitionFn for F
where
    F: Fn(&str, &[String], &[Item]) -> Vec<Item> + Send + Sync + 'static,
{
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        self(me, members, items)
    }
}

/// kazoo's default partition function, the crate's default: sort the items, sort the members, and give member `i`
/// the items at positions `i`, `i + P`, `i + 2P`, … (Python's `sorted(items)[i::P]`).
///
/// Balanced (assignments differ by at most one item) but not sticky: when the party changes, most items move.
///
/// ```
/// use zk_partitioner::{Item, partition::{KazooStride, PartitionFn}};
///
/// let members = ["w-1".to_string(), "w2".to_string()];
/// let items: Vec<Item> = ["a", "b", "c", "d", "e"].into_iter().map(Item::from).collect();
/// assert_eq!(KazooStride.partition("w-1", &members, &items), ["a", "c", "e"].map(Item::from));
/// assert_eq!(KazooStride.partition("w2", &members, &items), ["b", "d"].map(Item::from));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct KazooStride;

impl PartitionFn for KazooStride {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let mut workers: Vec<&str> = members.iter().map(String::as_str).collect();
        workers.sort_unstable();
        // kazoo uses list.index(): the first occurrence. A member not in the list owns nothing (kazoo raises).
        let Some(index) = workers.iter().position(|&w| w == me) else {
            return Vec::new();
        };
        // The partitioner passes the items sorted: then only our share is copied, O(items / members) allocations
        // after one O(items) check.
        if items.is_sorted() {
            return items.iter().skip(index).step_by(workers.len()).cloned().collect();
        }
        let mut sorted = items.to_vec();
        sorted.sort();
        sorted.into_iter().skip(index).step_by(workers.len()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn matches_kazoo_examples() {
        let items: Vec<Item> = (0..3).map(Item::from).collect();
        let two = names(&["0", "1"]);
        assert_eq!(KazooStride.partition("0", &two, &items), [0, 2].map(Item::from));
        assert_eq!(KazooStride.partition("1", &two, &items), [1].map(Item::from));
        let letters: Vec<Item> = ["a", "b", "c", "d", "e"].into_iter().map(Item::from).collect();
        let three = names(&["w3", "w-1", "w2"]);
        assert_eq!(KazooStride.partition("w-1", &three, &letters), ["a", "d"].map(Item::from));
        assert_eq!(KazooStride.partition("w2", &three, &letters), ["b", "e"].map(Item::from));
        assert_eq!(KazooStride.partition("w3", &three, &letters), ["c"].map(Item::from));
    }

    #[test]
    fn every_item_exactly_once() {
        let items: Vec<Item> = (0..97).map(Item::from).collect();
        for p in 1..12 {
            let members: Vec<String> = (0..p).map(|i| format!("m{i:02}")).collect();
            let mut all: Vec<Item> = members.iter().flat_map(|m| KazooStride.partition(m, &members, &items)).collect();
            all.sort();
            assert_eq!(all, items, "party of {p}");
        }
    }

    #[test]
    fn unknown_member_owns_nothing() {
        assert!(KazooStride.partition("x", &names(&["a"]), &[Item::from(1)]).is_empty());
    }
}

/// Rendezvous (highest-random-weight) hashing with a load cap: a partition function that moves few items when the
/// party changes.
///
/// Each item ranks every member by a hash of `(member, item)` and goes to the highest-ranked member that still has
/// room; a member has room for at most `load_factor × items / members` items (rounded down, and never fewer than the
/// average rounded up). Items are placed in their sorted
/// order, so every member computes the same assignment. When a member joins, mostly the items that now rank it
/// first move to it (about `1/(n+1)` of them); when one leaves, only its items move.
///
/// Measured by this module's tests over random parties of 10 members with at least 100 items each: a join or a leave
/// moves at most 1.2× the ideal `1/(n+1)`, and the largest share is at most 1.05× the average.
///
/// The hash is fixed and part of the contract (changing it would make old and new members disagree): 64-bit FNV-1a
/// over the member name's UTF-8 bytes, one `0x00` byte and the item's node name, then the SplitMix64 finalizer.
/// Members using it must all use the same `load_factor`. It is not kazoo's function: a party that mixes kazoo workers
/// must keep [`KazooStride`].
///
/// ```
/// use zk_partitioner::{Item, partition::{PartitionFn, Rendezvous}};
///
/// let items: Vec<Item> = (0..1000).map(Item::from).collect();
/// let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
/// let four: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
/// let a_before = Rendezvous::default().partition("a", &three, &items);
/// let a_after = Rendezvous::default().partition("a", &four, &items);
/// // When `d` joins, `a` mostly gives items up: nearly everything it holds afterwards it held before.
/// let kept = a_after.iter().filter(|item| a_before.contains(item)).count();
/// assert!(kept * 100 >= a_after.len() * 95);
/// assert!(a_after.len() >= 240 && a_after.len() <= 262);
/// ```
pub struct Rendezvous {
    load_factor: f64,
    /// The ranking of the latest call, patched by the next one when only the party changed (see [`ranking`]).
    ranking: Mutex<Option<Ranking>>,
}

impl Default for Rendezvous {
    /// A load factor of 1.05: no member gets more than 5% above the average (rounded up).
    fn default() -> Self {
        Rendezvous::with_load_factor(1.05)
    }
}

impl Clone for Rendezvous {
    /// The same function, with nothing remembered yet.
    fn clone(&self) -> Self {
        Rendezvous::with_load_factor(self.load_factor)
    }
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendezvous").field("load_factor", &self.load_factor).finish_non_exhaustive()
    }
}

impl Rendezvous {
    /// A function whose members hold at most `load_factor × items / members` items each (but at least the average).
    /// Smaller factors balance more tightly and move more items on a change; `load_factor` is clamped to at least 1.0.
    pub fn with_load_factor(load_factor: f64) -> Self {
        let load_factor = if load_factor.is_finite() { load_factor.max(1.0) } else { 1.0 };
        Rendezvous { load_factor, ranking: Mutex::new(None) }
    }

    /// The owner (an index into `members`) of every item, in the order of `items`. `members` and `items` must be the
    /// sorted, duplicate-free lists the partitioner passes.
    ///
    /// The ranking of each item is remembered for the next call (about 80 bytes per item: the item, its name and its
    /// best-ranked members; not for parties over 30,000): when only the party changed, a join costs one hash per item
    /// and a leave a pass over the remembered ranking (and a full ranking of the items that ranked the leaver first),
    /// instead of one hash per item and member. The result is the same either way.
    pub fn assign(&self, members: &[String], items: &[Item]) -> Vec<usize> {
        if members.is_empty() {
            return Vec::new();
        }
        // At most load_factor × the average (rounded down), but never below the average rounded up, so that
        // capacity × members ≥ items.
        let fair = items.len().div_ceil(members.len());
        let capacity = ((items.len() as f64 * self.load_factor / members.len() as f64) as usize).max(fair).max(1);
        if remembers(members)
            && let Ok(mut remembered) = self.ranking.lock()
        {
            let mut ranking = ranking_for(remembered.take(), members, items);
            let owners = ranking.place(members, capacity);
            *remembered = Some(ranking);
            return owners;
        }
        assign_uncached(members, items, capacity)
    }

    /// Brings the remembered ranking up to `members` (building it if none is remembered for `items`), without placing
    /// anything: the costly part of [`assign`](Rendezvous::assign), done ahead ([`PartitionFn::prepare`]).
    fn remember(&self, members: &[String], items: &[Item]) {
        if remembers(members)
            && let Ok(mut remembered) = self.ranking.lock()
        {
            *remembered = Some(ranking_for(remembered.take(), members, items));
        }
    }

    /// How many items fell back to ranking every member since the ranking was last built (tests and tuning).
    #[cfg(test)]
    fn fallbacks(&self) -> usize {
        self.ranking.lock().ok().and_then(|r| r.as_ref().map(|r| r.fallbacks)).unwrap_or(0)
    }
}

/// Whether a ranking for `members` can be remembered: it orders equal weights by name, which is the party's order
/// only when it is sorted, and numbers members in 16 bits, enough for parties up to [`prefix::MAX_MEMBERS`].
fn remembers(members: &[String]) -> bool {
    members.len() <= prefix::MAX_MEMBERS && members.windows(2).all(|pair| pair[0] < pair[1])
}

/// The `remembered` ranking brought up to `members`, or a new one when it is for other items or cannot follow.
fn ranking_for(remembered: Option<Ranking>, members: &[String], items: &[Item]) -> Ranking {
    match remembered {
        Some(mut ranking) if ranking.is_for(items) => {
            if ranking.follow(members) {
                ranking
            } else {
                Ranking::build(members, items)
            }
        }
        _ => Ranking::build(members, items),
    }
}

/// The placement without memory: each item, in order, goes to the highest-weight member with room (equal weights:
/// the earlier member).
fn assign_uncached(members: &[String], items: &[Item], capacity: usize) -> Vec<usize> {
    let seeds: Vec<u64> = members.iter().map(|m| member_seed(m)).collect();
    let mut load = vec![0usize; members.len()];
    let mut owners = Vec::with_capacity(items.len());
    let mut weights = Vec::with_capacity(members.len());
    for item in items {
        let name = item.node_name();
        self::weights(&seeds, name.as_bytes(), &mut weights);
        let mut best: Option<usize> = None;
        let mut heaviest = 0;
        for (m, &w) in weights.iter().enumerate() {
            if w > weights[heaviest] {
                heaviest = m;
            }
            if load[m] < capacity && best.is_none_or(|b| w > weights[b]) {
                best = Some(m);
            }
        }
        // capacity × members ≥ items, so some member always has room.
        let owner = best.unwrap_or(heaviest);
        load[owner] += 1;
        owners.push(owner);
    }
    owners
}

impl PartitionFn for Rendezvous {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let Some(me) = members.iter().position(|m| m == me) else {
            return Vec::new();
        };
        self.assign(members, items)
            .into_iter()
            .zip(items)
            .filter(|&(owner, _)| owner == me)
            .map(|(_, i)| i.clone())
            .collect()
    }

    /// Ranks the items for `members` now (a first call at 100 members × 100,000 items costs each member tens of
    /// milliseconds of CPU, all members at once), so that the deciding call only places them.
    fn prepare(&self, _me: &str, members: &[String], items: &[Item]) {
        self.remember(members, items);
    }

    /// A departed member's items go to their next-ranked members; the rest stay (but for a few that the load
    /// bound had turned away from a survivor, which now has room for them).
    fn departures_move_only_theirs(&self) -> bool {
        true
    }
}

/// One FNV-1a step of `byte` for each of `N` independent hash states (the processor runs them side by side).
#[inline(always)]
fn fnv1a_lanes<const N: usize>(states: &mut [u64; N], byte: u8) {
    for hash in states {
        *hash = (*hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
    }
}

/// The hash state after a member's name and the separator byte: every weight of that member starts here.
fn member_seed(member: &str) -> u64 {
    fnv1a(fnv1a(FNV_OFFSET, member.as_bytes()), &[0])
}

/// The weight of an item for the member whose seed is `seed`: FNV-1a continued over the item's node name, then
/// SplitMix64's finalizer (FNV alone mixes its last bytes poorly).
fn weight(seed: u64, item: &[u8]) -> u64 {
    finish(fnv1a(seed, item))
}

/// `weight(seed, item)` for every seed, into `out`: four members at a time, so the processor runs four independent
/// multiply chains side by side instead of waiting on one (about twice as fast as one by one).
fn weights(seeds: &[u64], item: &[u8], out: &mut Vec<u64>) {
    out.clear();
    let mut chunks = seeds.chunks_exact(4);
    for chunk in &mut chunks {
        let mut h = [chunk[0], chunk[1], chunk[2], chunk[3]];
        for &byte in item {
            fnv1a_lanes(&mut h, byte);
        }
        out.extend(h.map(finish));
    }
    out.extend(chunks.remainder().iter().map(|&seed| weight(seed, item)));
}

/// The heaviest seed of every name, in order: `(weight, index into seeds)`, equal weights going to the earlier seed;
/// empty if there are no seeds. The names are `names` cut at `ends` (name `i` ends at `ends[i]`), as [`Ranking`]
/// keeps them. The result of ranking each name on its own, at well under half the cost when neighbouring names share
/// a beginning (`17`, `18`; `queue-0017`, `queue-0018`), as sorted item names do: FNV-1a reads its input front to
/// back, so the hash state after the part a name shares with the name before it is kept, and only the rest is hashed.
/// Seeds go eight at a time, one name after another, so the processor overlaps eight hash chains and each name's
/// beginning is read once per eight seeds; only the maximum is kept, not every weight.
fn heaviest_of_each(seeds: &[u64], names: &[u8], ends: &[usize]) -> Vec<(u64, u32)> {
    if seeds.is_empty() {
        return Vec::new();
    }
    // Each name with the length of the beginning it shares with the previous one (capped at 255: one byte each, and
    // a longer shared beginning is only hashed again).
    let mut shared = Vec::with_capacity(ends.len());
    let mut start = 0;
    let mut previous: &[u8] = &[];
    for &end in ends {
        let name = names.get(start..end).unwrap_or_default();
        let common = previous.iter().zip(name).take_while(|(a, b)| a == b).count();
        shared.push(u8::try_from(common).unwrap_or(u8::MAX));
        (start, previous) = (end, name);
    }
    // `u32::MAX`: no seed yet (the first group of seeds replaces it). Seed indexes are u32 as member ids are.
    let mut best = vec![(0, u32::MAX); ends.len()];
    let mut first = 0;
    let mut rest = seeds;
    while rest.len() >= 8 {
        let group: [u64; 8] = std::array::from_fn(|i| rest[i]);
        heaviest_of_group(group, first, names, ends, &shared, &mut best);
        (first, rest) = (first + 8, &rest[8..]);
    }
    if rest.len() >= 4 {
        heaviest_of_group([rest[0], rest[1], rest[2], rest[3]], first, names, ends, &shared, &mut best);
        (first, rest) = (first + 4, &rest[4..]);
    }
    for &seed in rest {
        heaviest_of_group([seed], first, names, ends, &shared, &mut best);
        first += 1;
    }
    best
}

/// [`heaviest_of_each`] for the `N` seeds `seeds`, whose indexes start at `first`: updates `best`.
fn heaviest_of_group<const N: usize>(
    seeds: [u64; N],
    first: u32,
    names: &[u8],
    ends: &[usize],
    shared: &[u8],
    best: &mut [(u64, u32)],
) {
    // states[d]: the seeds' hash states after the first d bytes of the previous name.
    let mut states: Vec<[u64; N]> = vec![seeds];
    let mut start = 0;
    for ((&end, &shared), best) in ends.iter().zip(shared).zip(best) {
        let name = names.get(start..end).unwrap_or_default();
        start = end;
        // `shared` ≤ both names' lengths, so `states` has that entry; the `min` and `get` only guard the invariant.
        let kept = usize::from(shared).min(states.len() - 1);
        states.truncate(kept + 1);
        let mut h = states[kept];
        for &byte in name.get(kept..).unwrap_or_default() {
            fnv1a_lanes(&mut h, byte);
            states.push(h);
        }
        for (lane, w) in (first..).zip(h.map(finish)) {
            if best.1 == u32::MAX || w > best.0 {
                *best = (w, lane);
            }
        }
    }
}

#[cfg(test)]
mod rendezvous_tests {
    use super::*;

    /// The simulation's deterministic generator (SplitMix64), with a member name drawn from it.
    struct Rng(crate::rng::SplitMix64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
        fn member(&mut self) -> String {
            format!("host-{:x}-{:010}", self.next() % 100_000, self.next() % 1_000_000)
        }
    }

    fn sorted(mut members: Vec<String>) -> Vec<String> {
        members.sort();
        members.dedup();
        members
    }

    fn moved(before: &[usize], before_members: &[String], after: &[usize], after_members: &[String]) -> usize {
        before.iter().zip(after).filter(|&(&b, &a)| before_members[b] != after_members[a]).count()
    }

    #[test]
    fn the_hash_is_fixed() {
        // Changing these values breaks every running party: they are part of the contract.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        let owners = Rendezvous::default()
            .assign(&sorted(vec!["a".into(), "b".into(), "c".into()]), &[0, 1, 2, 3, 4, 5].map(Item::from));
        assert_eq!(owners, RENDEZVOUS_GOLDEN);
    }

    #[test]
    fn heaviest_of_each_finds_what_ranking_each_name_alone_finds() {
        let mut rng = Rng(crate::rng::SplitMix64::new(11));
        for round in 0..200 {
            // Up to 21 seeds (every group size and remainder), some repeated so that equal weights occur.
            let mut seeds: Vec<u64> = (0..rng.next() % 22).map(|_| member_seed(&rng.member())).collect();
            if seeds.len() > 2 && round % 3 == 0 {
                seeds[1] = seeds[0];
                let last = seeds.len() - 1;
                seeds[last] = seeds[0];
            }
            // Names over a small alphabet share beginnings often; half the rounds sorted, as item names are.
            let mut names: Vec<Vec<u8>> = (0..rng.next() % 60)
                .map(|_| (0..rng.next() % 12).map(|_| b"ab1-"[(rng.next() % 4) as usize]).collect())
                .collect();
            if round % 5 == 0 {
                // Shared beginnings longer than the 255 bytes the shortcut remembers.
                for name in &mut names {
                    name.splice(0..0, std::iter::repeat_n(b'x', 270));
                }
            }
            if round % 2 == 0 {
                names.sort();
            }
            let ends: Vec<usize> = {
                let mut end = 0;
                names
                    .iter()
                    .map(|name| {
                        end += name.len();
                        end
                    })
                    .collect()
            };
            let joined = names.concat();
            let expected: Vec<(u64, u32)> = if seeds.is_empty() {
                Vec::new()
            } else {
                let mut all = Vec::new();
                names
                    .iter()
                    .map(|name| {
                        weights(&seeds, name, &mut all);
                        // The first of the heaviest: `max_by_key` would give the last.
                        let (index, &w) = all.iter().enumerate().rev().max_by_key(|&(_, w)| w).unwrap();
                        (w, index as u32)
                    })
                    .collect()
            };
            assert_eq!(heaviest_of_each(&seeds, &joined, &ends), expected, "round {round}: {} seeds", seeds.len());
        }
    }

    #[test]
    fn a_party_too_large_to_remember_is_placed_without_memory() {
        // Past MAX_MEMBERS the ranking's 16-bit ids would not fit: the placement is computed afresh, and is the same.
        let items: Vec<Item> = (0..50).map(Item::from).collect();
        let members = sorted((0..=prefix::MAX_MEMBERS).map(|m| format!("m{m:05}")).collect());
        let f = Rendezvous::default();
        let owners = f.assign(&members, &items);
        assert!(f.ranking.lock().is_ok_and(|r| r.is_none()), "nothing remembered");
        assert_eq!(owners, assign_uncached(&members, &items, capacity(members.len(), items.len())));
    }

    #[test]
    fn prepare_ranks_ahead_and_changes_no_placement() {
        let mut items: Vec<Item> = (0..3000).map(Item::from).collect();
        items.sort();
        let before = sorted((0..10).map(|m| format!("m{m:02}")).collect());
        let mut after = before.clone();
        after.push("m10".into());
        let f = Rendezvous::default();
        f.prepare("m00", &before, &items);
        assert!(f.ranking.lock().is_ok_and(|r| r.as_ref().is_some_and(|r| r.is_for(&items))), "ranked ahead");
        // Worked ahead for one party, decided for it or for the next: the placement is the one ranked afresh.
        assert_eq!(f.assign(&before, &items), assign_uncached(&before, &items, capacity(10, items.len())));
        f.prepare("m00", &after, &items);
        assert_eq!(f.assign(&after, &items), assign_uncached(&after, &items, capacity(11, items.len())));
        assert_eq!(f.partition("m03", &after, &items), Rendezvous::default().partition("m03", &after, &items));
        // Functions that remember nothing keep the default, which does nothing.
        KazooStride.prepare("m00", &before, &items);
    }

    /// The owners of items 0..6 among members a, b, c, recorded once: a change to the hash or the placement order
    /// shows up here.
    const RENDEZVOUS_GOLDEN: [usize; 6] = [0, 2, 0, 1, 2, 1];

    fn capacity(members: usize, items: usize) -> usize {
        ((items as f64 * 1.05 / members as f64) as usize).max(items.div_ceil(members)).max(1)
    }

    #[test]
    fn the_remembered_ranking_places_exactly_as_ranking_afresh() {
        let mut rng = Rng(crate::rng::SplitMix64::new(11));
        let f = Rendezvous::default();
        let mut items: Vec<Item> = (0..2000).map(|i| Item::from(format!("q-{i}"))).collect();
        items.sort();
        let mut members = sorted((0..20).map(|_| rng.member()).collect());
        for step in 0..80 {
            match rng.next() % 6 {
                0 | 1 => members.push(rng.member()),
                2 | 3 if members.len() > 1 => drop(members.remove((rng.next() % members.len() as u64) as usize)),
                4 => {
                    // a join and a leave at once, or a change too large to patch
                    let n = 1 + (rng.next() % 8) as usize;
                    for _ in 0..n.min(members.len() - 1) {
                        members.remove((rng.next() % members.len() as u64) as usize);
                    }
                    members.extend((0..n).map(|_| rng.member()));
                }
                _ => {
                    items.push(Item::from(format!("q-new-{step}")));
                    items.sort();
                }
            }
            members = sorted(members);
            let owners = f.assign(&members, &items);
            assert_eq!(owners, assign_uncached(&members, &items, capacity(members.len(), items.len())), "step {step}");
        }
    }

    #[test]
    fn a_join_costs_one_hash_per_item_and_fallbacks_are_rare() {
        // 100 members, 20,000 items: after a join, at most 1% of the items need a full ranking (39 measured; the
        // first placement, which remembers only each item's best member, needs 227).
        let mut rng = Rng(crate::rng::SplitMix64::new(5));
        let items: Vec<Item> = (0..20_000).map(Item::from).collect();
        let mut members = sorted((0..100).map(|_| rng.member()).collect());
        let f = Rendezvous::default();
        f.assign(&members, &items);
        let built = f.fallbacks();
        members.push(rng.member());
        let members = sorted(members);
        let owners = f.assign(&members, &items);
        let fallbacks = f.fallbacks() - built;
        eprintln!("fallbacks: {built} at build, {fallbacks} after the join ({} items)", items.len());
        assert!(fallbacks * 100 <= items.len(), "{fallbacks} items ranked afresh after a join");
        assert_eq!(owners, assign_uncached(&members, &items, capacity(members.len(), items.len())));
    }

    #[test]
    fn every_item_exactly_once_and_deterministic() {
        let mut rng = Rng(crate::rng::SplitMix64::new(7));
        for round in 0..50 {
            let members = sorted((0..1 + round % 12).map(|_| rng.member()).collect());
            let items: Vec<Item> = (0..(rng.next() % 500) as i64).map(Item::from).collect();
            let f = Rendezvous::default();
            let mut all: Vec<Item> = members.iter().flat_map(|m| f.partition(m, &members, &items)).collect();
            all.sort();
            assert_eq!(all, items, "round {round}");
            assert_eq!(f.assign(&members, &items), f.assign(&members, &items));
        }
    }

    #[test]
    fn join_and_leave_move_little_and_balance_holds() {
        let f = Rendezvous::default();
        let mut rng = Rng(crate::rng::SplitMix64::new(42));
        let (mut worst_join, mut worst_leave, mut worst_balance) = (0f64, 0f64, 0f64);
        for _ in 0..100 {
            let members = sorted((0..10).map(|_| rng.member()).collect());
            let per_member = 100 + (rng.next() % 200) as usize;
            let items: Vec<Item> = (0..(per_member * 10) as i64).map(|i| Item::from(format!("item-{i}"))).collect();
            let before = f.assign(&members, &items);

            let mut joined = members.clone();
            joined.push(rng.member());
            let joined = sorted(joined);
            let after_join = f.assign(&joined, &items);
            let ideal_join = items.len() as f64 / joined.len() as f64;
            worst_join = worst_join.max(moved(&before, &members, &after_join, &joined) as f64 / ideal_join);

            let mut left = members.clone();
            left.remove((rng.next() % 10) as usize);
            let after_leave = f.assign(&left, &items);
            let ideal_leave = items.len() as f64 / members.len() as f64;
            worst_leave = worst_leave.max(moved(&before, &members, &after_leave, &left) as f64 / ideal_leave);

            for (owners, party) in [(&before, members.len()), (&after_join, joined.len()), (&after_leave, left.len())] {
                let mut load = vec![0usize; party];
                owners.iter().for_each(|&o| load[o] += 1);
                let average = items.len() as f64 / party as f64;
                worst_balance = worst_balance.max(*load.iter().max().unwrap() as f64 / average);
            }
        }
        eprintln!("worst join {worst_join:.3}× ideal, worst leave {worst_leave:.3}×, worst balance {worst_balance:.3}");
        assert!(worst_join <= 1.2, "a join moved {worst_join:.3}× the ideal");
        assert!(worst_leave <= 1.2, "a leave moved {worst_leave:.3}× the ideal");
        assert!(worst_balance <= 1.05, "the largest share was {worst_balance:.3}× the average");
    }
}
