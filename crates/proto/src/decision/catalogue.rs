//! The items a member knows, by stable index, and which of them form the set in force.
//!
//! The core names items by index (locks, shares and publications are index sets). With a fixed set the catalogue is
//! that set. With the shared set in ZooKeeper items come and go: an item keeps its index for the life of the member
//! (a removed item's lock may still be held, or be released later, under the same index), new items get the next
//! indexes, and the set in force is the subset the latest usable read of the shared set listed.
//!
//! Indexing below cannot go out of bounds: every index the core holds was handed out by this catalogue, indexes are
//! never taken back, and `in_set` grows with `items`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::placement::record::content_digest;
use crate::{Item, Weight, Weights};

/// Items by index, and the set in force.
#[derive(Debug)]
pub(super) struct Catalogue {
    /// Every item ever in the set, by index.
    items: Vec<Item>,
    index: HashMap<Item, usize>,
    /// The set in force, sorted by item (what the partition function sees) ...
    sorted: Arc<[Item]>,
    /// ... and the same items' indexes, in the same order.
    set: Vec<usize>,
    in_set: Vec<bool>,
    /// The shared set's version (`None` for a fixed set).
    version: Option<u64>,
    /// Counts the changes applied: the version alone does not identify a set (a child created by hand changes the
    /// set without changing the version).
    generation: u64,
    /// Each index's position among every item ever known, in item order; empty while index order is item order
    /// (a fixed set, and a shared set until an item is added that sorts before a known one).
    rank: Vec<usize>,
    /// The weights of `sorted` (named by the shared set; the others weigh 1): what a weighted partition function
    /// reads.
    weights: Weights,
    /// The digest of `sorted` and `weights` ([`content_digest`]): what names the set in a placement record's inputs.
    content: u64,
}

/// Whether an item in both sets (sorted, with their weights) weighs differently, or the dimensions differ: one walk
/// along both.
fn reweighed((before, was): (&[Item], &Weights), (after, is): (&[Item], &Weights)) -> bool {
    if was.dimensions() != is.dimensions() {
        return true;
    }
    let (mut i, mut j) = (0, 0);
    while i < before.len() && j < after.len() {
        match before[i].cmp(&after[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                if was.item(i) != is.item(j) {
                    return true;
                }
                (i, j) = (i + 1, j + 1);
            }
        }
    }
    false
}

/// What a change of the set did, as indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetChange {
    added: Vec<usize>,
    removed: Vec<usize>,
}

impl SetChange {
    /// The indexes removed.
    pub fn removed(&self) -> &[usize] {
        &self.removed
    }

    /// The indexes added and removed.
    pub fn into_parts(self) -> (Vec<usize>, Vec<usize>) {
        (self.added, self.removed)
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

impl Catalogue {
    /// A catalogue holding `items` (sorted, without duplicates) with their `named` weights as the set in force.
    pub fn new(items: Vec<Item>, version: Option<u64>, named: BTreeMap<Item, Weight>) -> Self {
        let index = items.iter().cloned().zip(0..).collect();
        let count = items.len();
        let (set, in_set) = ((0..count).collect(), vec![true; count]);
        let weights = Weights::of(&items, &named);
        let content = content_digest(&items, &weights);
        Catalogue {
            content,
            sorted: items.as_slice().into(),
            items,
            index,
            set,
            in_set,
            version,
            generation: 0,
            rank: Vec::new(),
            weights,
        }
    }

    /// The weights of the set in force, in the order of [`sorted`](Catalogue::sorted).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The item with this index (every index the core uses came from this catalogue).
    pub fn item(&self, index: usize) -> &Item {
        &self.items[index]
    }

    /// How many items have an index.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The set in force, sorted.
    pub fn sorted(&self) -> &[Item] {
        &self.sorted
    }

    /// The same, shared (a placement record keeps it).
    pub fn sorted_shared(&self) -> Arc<[Item]> {
        self.sorted.clone()
    }

    /// The index of an item of the set in force.
    pub fn index_in_set(&self, item: &Item) -> Option<usize> {
        self.index.get(item).copied().filter(|&index| self.in_set[index])
    }

    pub fn contains(&self, index: usize) -> bool {
        self.in_set.get(index).copied().unwrap_or(false)
    }

    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// The digest of the set in force and its weights: the same on every member that holds the same items and
    /// weights, whatever version each read them at.
    pub fn content(&self) -> u64 {
        self.content
    }

    /// How many changes were applied.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The set in force's indexes, in item order.
    pub fn set(&self) -> &[usize] {
        &self.set
    }

    /// Makes `items` (sorted, without duplicates) with their `named` weights the set in force, at `version`, and says
    /// what changed: the items (new items get new indexes; removed ones keep theirs), and whether the weights did
    /// (of an item in force before and after, or the dimensions; a weight named as 1 where none was is no change).
    pub fn replace(&mut self, items: Vec<Item>, version: u64, named: BTreeMap<Item, Weight>) -> (SetChange, bool) {
        self.version = Some(version);
        let weights = Weights::of(&items, &named);
        drop(named);
        let reweighed = reweighed((&self.sorted, &self.weights), (&items, &weights));
        if items[..] == self.sorted[..] {
            if reweighed {
                self.content = content_digest(&items, &weights);
                self.weights = weights;
                self.generation += 1;
            }
            return (SetChange::default(), reweighed);
        }
        let mut change = SetChange::default();
        let mut set = Vec::with_capacity(items.len());
        let mut in_set = vec![false; self.items.len()];
        for item in &items {
            let index = match self.index.get(item) {
                Some(&index) => index,
                None => {
                    let index = self.items.len();
                    self.items.push(item.clone());
                    self.index.insert(item.clone(), index);
                    in_set.push(false);
                    index
                }
            };
            if !self.in_set.get(index).copied().unwrap_or(false) {
                change.added.push(index);
            }
            in_set[index] = true;
            set.push(index);
        }
        change.removed = self.set.iter().copied().filter(|&index| !in_set[index]).collect();
        // New items that sort before known ones: index order is no longer item order, so rank every item (once per
        // change that adds items; a fixed set, or items added at the end, need no rank).
        if self.rank.len() != self.items.len() && !self.items.is_sorted() {
            let mut by_item: Vec<usize> = (0..self.items.len()).collect();
            by_item.sort_by(|&a, &b| self.items[a].cmp(&self.items[b]));
            self.rank = vec![0; self.items.len()];
            for (position, index) in by_item.into_iter().enumerate() {
                self.rank[index] = position;
            }
        }
        self.generation += 1;
        self.content = content_digest(&items, &weights);
        self.weights = weights;
        self.sorted = items.into();
        self.set = set;
        self.in_set = in_set;
        (change, reweighed)
    }

    /// The difference between the set in force and an earlier one (`before`, indexes).
    pub fn change_since(&self, before: &[usize]) -> SetChange {
        let mut was = vec![false; self.items.len()];
        for &index in before {
            was[index] = true;
        }
        let added = self.set.iter().copied().filter(|&index| !was[index]).collect();
        let removed = before.iter().copied().filter(|&index| !self.in_set[index]).collect();
        SetChange { added, removed }
    }

    /// `indexes` (distinct, in index order) in the order of their items: what a snapshot lists is sorted by item, for
    /// lookups by binary search. Index order is item order unless items were added that sort before known ones.
    pub fn in_item_order(&self, indexes: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut indexes: Vec<usize> = indexes.into_iter().collect();
        if !self.rank.is_empty() {
            indexes.sort_unstable_by_key(|&index| self.rank[index]);
        }
        indexes
    }

    /// `indexes` as items (for publication).
    pub fn items_of(&self, indexes: &[usize]) -> Arc<[Item]> {
        indexes.iter().map(|&index| self.items[index].clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(names: &[&str]) -> Vec<Item> {
        names.iter().map(|n| Item::from(*n)).collect()
    }

    #[test]
    fn indexes_are_stable_across_changes() {
        let mut catalogue = Catalogue::new(items(&["b", "d"]), Some(0), BTreeMap::new());
        let (change, _) = catalogue.replace(items(&["a", "b", "c"]), 1, BTreeMap::new());
        assert_eq!(change, SetChange { added: vec![2, 3], removed: vec![1] });
        assert_eq!(catalogue.item(2), &Item::from("a"));
        assert_eq!(catalogue.set(), [2, 0, 3]);
        assert_eq!(catalogue.sorted(), items(&["a", "b", "c"]));
        assert!(!catalogue.contains(1));
        assert_eq!(catalogue.index_in_set(&Item::from("d")), None);
        // "d" comes back under its old index.
        let (change, _) = catalogue.replace(items(&["d"]), 2, BTreeMap::new());
        assert_eq!(change, SetChange { added: vec![1], removed: vec![2, 0, 3] });
        assert_eq!(catalogue.len(), 4);
        assert_eq!(catalogue.change_since(&[2, 0, 3]), change);
        assert!(catalogue.replace(items(&["d"]), 3, BTreeMap::new()).0.is_empty());
        assert_eq!(catalogue.version(), Some(3));
    }

    #[test]
    fn weights_follow_the_set_and_a_reweighing_is_a_change() {
        let heavy = BTreeMap::from([(Item::from("b"), Weight::new(5))]);
        let mut catalogue = Catalogue::new(items(&["a", "b"]), Some(0), heavy.clone());
        assert_eq!((catalogue.weights().item(0), catalogue.weights().item(1)), (&[1][..], &[5][..]));
        let generation = catalogue.generation();
        let (change, reweighed) = catalogue.replace(items(&["a", "b"]), 1, BTreeMap::new());
        assert!(change.is_empty() && reweighed && catalogue.generation() > generation);
        assert!(catalogue.weights().is_uniform());
        // A weight of 1 named where none was weighs the same: no change for the function.
        let ones = BTreeMap::from([(Item::from("a"), Weight::new(1))]);
        let generation = catalogue.generation();
        assert_eq!(catalogue.replace(items(&["a", "b"]), 2, ones), (SetChange::default(), false));
        assert_eq!((catalogue.generation(), catalogue.version()), (generation, Some(2)));
        let (change, reweighed) = catalogue.replace(items(&["b", "c"]), 3, heavy);
        assert!(!change.is_empty() && reweighed);
        assert_eq!((catalogue.weights().item(0), catalogue.weights().item(1)), (&[5][..], &[1][..]));
    }
}
