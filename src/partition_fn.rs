//! Partition functions: who gets which items.

use crate::Item;

/// Decides which items a member owns, given every member of the party.
///
/// Every member of a party must use the same function over the same items, and the function must be
/// deterministic: the members never talk to each other, they only agree because they compute the same answer from the
/// same inputs. If two members disagree, both wait for a lock the other holds (kazoo issue #392).
///
/// The function runs on the partitioner's background task, so it must be fast and must not block.
///
/// Its inputs are:
/// - `me`: this member's name (see [`Snapshot::member`](crate::Snapshot::member));
/// - `members`: every member's name, sorted by code point, this member included;
/// - `items`: the whole set, sorted (integers numerically, strings by code point) and without duplicates.
///
/// It returns the items this member owns; items not in the set and duplicates are an error
/// ([`Error::PartitionFn`](crate::Error::PartitionFn)). Closures implement the trait:
///
/// ```
/// use zk_partitioner::{Item, PartitionFn};
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
/// use zk_partitioner::{Item, KazooStride, PartitionFn};
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
