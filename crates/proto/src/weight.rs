//! Item weights and member capacities: what a weighted partition function divides by.
//!
//! An item weighs 1 unless the shared set says otherwise ([`SharedSet::set_weights`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.SharedSet.html#method.set_weights));
//! a weight is one value or values in several named dimensions (`cpu=3,bytes=100`). A member's capacity
//! ([`Builder::capacity`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.capacity)) is its relative size: a member of capacity 4 should carry four
//! times the weight of a member of capacity 1, in every dimension. Its **ideal share** of a dimension is that
//! dimension's total weight × its capacity / the party's total capacity.
//!
//! The rules, which every member applies alike:
//! - an item without a weight weighs 1 in every dimension of the set;
//! - an item with a weight weighs 0 in the dimensions it does not name;
//! - a member that announces no capacity (a kazoo member, an older build) has capacity 1.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::{InputError, Item};

/// The name of the dimension of a weight given as one number ([`Weight::new`]).
pub const DEFAULT_DIMENSION: &str = "weight";
/// The largest value of a weight in one dimension (10¹²): sums over a million items stay far from `u64::MAX`.
pub const MAX_WEIGHT: u64 = 1_000_000_000_000;
/// The most dimensions a weight may name.
pub const MAX_DIMENSIONS: usize = 8;
/// The largest capacity a member may announce.
pub const MAX_CAPACITY: u32 = 1_000_000;

/// An item's weight: one value ([`Weight::new`]), or values in named dimensions ([`Weight::named`]).
///
/// ```
/// use zk_partitioner::weighted::Weight;
///
/// fn main() -> Result<(), zk_partitioner::Error> {
///     assert_eq!(Weight::new(5).to_string(), "5");
///     let both = Weight::named([("cpu", 3), ("bytes", 100)])?;
///     assert_eq!(both.to_string(), "bytes=100,cpu=3");
///     assert_eq!(both.get("cpu"), 3);
///     assert_eq!(both.get("memory"), 0);
///     assert_eq!("bytes=100,cpu=3".parse::<Weight>()?, both);
///     assert!("cpu=-1".parse::<Weight>().is_err());
///     Ok(())
/// }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Weight {
    values: Values,
}

/// A weight's values. One value in [`DEFAULT_DIMENSION`] is always `One`, so that equal weights are equal values:
/// a member holds 100,000 weights, and the common one costs no allocation to parse, clone or drop.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Values {
    One(u64),
    /// Sorted by dimension, no dimension twice, at least one, and not [`DEFAULT_DIMENSION`] alone.
    Named(std::sync::Arc<[(String, u64)]>),
}

impl fmt::Debug for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Weight").field("values", &self.values().collect::<Vec<_>>()).finish()
    }
}

impl PartialOrd for Weight {
    fn partial_cmp(&self, other: &Weight) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Weight {
    /// By the dimensions and values, in dimension order (as the pairs compare).
    fn cmp(&self, other: &Weight) -> std::cmp::Ordering {
        self.values().cmp(other.values())
    }
}

impl Weight {
    /// A weight of `value` in the one dimension [`DEFAULT_DIMENSION`] (values above [`MAX_WEIGHT`] count as it).
    pub fn new(value: u64) -> Weight {
        Weight { values: Values::One(value.min(MAX_WEIGHT)) }
    }

    /// A weight in named dimensions. A dimension name is 1 to 32 characters of `a-z`, `0-9` and `_`, starting with a
    /// letter; at most [`MAX_DIMENSIONS`], none twice, each value at most [`MAX_WEIGHT`].
    pub fn named<N: Into<String>>(values: impl IntoIterator<Item = (N, u64)>) -> Result<Weight, InputError> {
        let mut sorted: BTreeMap<String, u64> = BTreeMap::new();
        let mut count = 0;
        for (name, value) in values {
            let name = name.into();
            count += 1;
            check_dimension(&name).map_err(|reason| invalid(&name, &reason))?;
            if value > MAX_WEIGHT {
                return Err(invalid(&name, &format!("{value} is above the largest weight, {MAX_WEIGHT}")));
            }
            if sorted.insert(name.clone(), value).is_some() {
                return Err(invalid(&name, "is named twice"));
            }
        }
        if count == 0 {
            return Err(InputError::InvalidWeight { weight: String::new(), reason: "names no dimension".into() });
        }
        if count > MAX_DIMENSIONS {
            return Err(InputError::InvalidWeight {
                weight: format!("{count} dimensions"),
                reason: format!("at most {MAX_DIMENSIONS} dimensions"),
            });
        }
        Ok(match sorted.get(DEFAULT_DIMENSION) {
            Some(&value) if sorted.len() == 1 => Weight::new(value),
            _ => Weight { values: Values::Named(sorted.into_iter().collect()) },
        })
    }

    /// The value in `dimension` (0 if the weight does not name it).
    pub fn get(&self, dimension: &str) -> u64 {
        self.values().find(|&(name, _)| name == dimension).map_or(0, |(_, value)| value)
    }

    /// The dimensions and values, by dimension name.
    pub fn values(&self) -> impl Iterator<Item = (&str, u64)> {
        let (one, named) = match &self.values {
            Values::One(value) => (Some((DEFAULT_DIMENSION, *value)), &[][..]),
            Values::Named(pairs) => (None, &pairs[..]),
        };
        one.into_iter().chain(named.iter().map(|(name, value)| (name.as_str(), *value)))
    }
}

impl fmt::Display for Weight {
    /// `5` for a weight in the default dimension alone, else `name=value,...` by name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Values::One(value) = self.values {
            return write!(f, "{value}");
        }
        for (i, (name, value)) in self.values().enumerate() {
            write!(f, "{}{name}={value}", if i == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

impl FromStr for Weight {
    type Err = InputError;

    /// What [`Display`](fmt::Display) writes: `5`, or `cpu=3,bytes=100`.
    fn from_str(text: &str) -> Result<Weight, InputError> {
        let number = |value: &str| {
            value.parse::<u64>().ok().filter(|&v| v <= MAX_WEIGHT && value.bytes().all(|b| b.is_ascii_digit()))
        };
        if !text.contains('=') {
            return number(text).map(Weight::new).ok_or_else(|| {
                invalid(text, &format!("is not a whole number from 0 to {MAX_WEIGHT}, nor name=value pairs"))
            });
        }
        let mut pairs = Vec::new();
        for pair in text.split(',') {
            let (name, value) = pair.split_once('=').ok_or_else(|| invalid(text, "is not name=value pairs"))?;
            let value = number(value)
                .ok_or_else(|| invalid(text, &format!("{value:?} is not a whole number from 0 to {MAX_WEIGHT}")))?;
            pairs.push((name.to_owned(), value));
        }
        Weight::named(pairs)
    }
}

fn invalid(weight: &str, reason: &str) -> InputError {
    InputError::InvalidWeight { weight: crate::error::shown(weight), reason: reason.to_owned() }
}

fn check_dimension(name: &str) -> Result<(), String> {
    let valid = (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err("is not a dimension name (1 to 32 of a-z, 0-9 and _, starting with a letter)".into())
    }
}

/// Checks a member's capacity ([`Builder::capacity`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.capacity)): 1 to [`MAX_CAPACITY`].
pub fn check_capacity(capacity: u32) -> Result<u32, InputError> {
    if (1..=MAX_CAPACITY).contains(&capacity) {
        Ok(capacity)
    } else {
        Err(InputError::InvalidCapacity { capacity, max: MAX_CAPACITY })
    }
}

/// The weights of a sorted item list, as a weighted partition function reads them: per item, one value per
/// dimension.
///
/// ```
/// use std::collections::BTreeMap;
/// use zk_partitioner::{Item, weighted::{Weight, Weights}};
///
/// let items: Vec<Item> = (0..3).map(Item::from).collect();
/// let set = BTreeMap::from([(Item::from(1), Weight::new(7))]);
/// let weights = Weights::of(&items, &set);
/// assert_eq!(weights.dimensions(), ["weight"]);
/// assert_eq!([weights.item(0), weights.item(1), weights.item(2)], [[1], [7], [1]]);
/// assert_eq!(weights.totals(), [9]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weights {
    /// Sorted; [`DEFAULT_DIMENSION`] alone when no item names another.
    dimensions: Vec<String>,
    /// `items × dimensions`, item by item.
    values: Vec<u64>,
}

impl Weights {
    /// Every one of `count` items weighs 1 (what a set without weights means).
    pub fn uniform(count: usize) -> Weights {
        Weights { dimensions: vec![DEFAULT_DIMENSION.to_owned()], values: vec![1; count] }
    }

    /// The weights of `items` (sorted, as the partitioner passes them; in their order) given the weights the set names; items it does not name weigh 1 in
    /// every dimension, and weights of items not in `items` are ignored.
    pub fn of(items: &[Item], weights: &BTreeMap<Item, Weight>) -> Weights {
        let matched = matched(items, weights);
        let (mut named, mut default) = (std::collections::BTreeSet::new(), false);
        for weight in matched.iter().flatten() {
            match &weight.values {
                Values::One(_) => default = true,
                Values::Named(pairs) => named.extend(pairs.iter().map(|(name, _)| name.as_str())),
            }
        }
        if default || named.is_empty() {
            named.insert(DEFAULT_DIMENSION);
        }
        let dimensions: Vec<String> = named.into_iter().map(str::to_owned).collect();
        let mut values = Vec::with_capacity(items.len() * dimensions.len());
        for weight in matched {
            match weight {
                Some(weight) => values.extend(dimensions.iter().map(|d| weight.get(d))),
                None => values.extend(std::iter::repeat_n(1, dimensions.len())),
            }
        }
        Weights { dimensions, values }
    }

    /// The dimensions, sorted.
    pub fn dimensions(&self) -> &[String] {
        &self.dimensions
    }

    /// How many items this covers.
    pub fn len(&self) -> usize {
        self.values.len() / self.dimensions.len().max(1)
    }

    /// Whether this covers no item.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every item's values, item by item, each in the order of [`dimensions`](Weights::dimensions): with one
    /// dimension, item `i`'s weight is value `i`.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// Item `index`'s value in each dimension, in the order of [`dimensions`](Weights::dimensions).
    pub fn item(&self, index: usize) -> &[u64] {
        let width = self.dimensions.len();
        &self.values[index * width..(index + 1) * width]
    }

    /// Whether every item weighs 1 in the one default dimension.
    pub fn is_uniform(&self) -> bool {
        self.dimensions.len() == 1 && self.dimensions[0] == DEFAULT_DIMENSION && self.values.iter().all(|&v| v == 1)
    }

    /// Each dimension's total over all items.
    pub fn totals(&self) -> Vec<u64> {
        let width = self.dimensions.len();
        let mut totals = vec![0u64; width];
        for row in self.values.chunks_exact(width.max(1)) {
            for (total, value) in totals.iter_mut().zip(row) {
                *total = total.saturating_add(*value);
            }
        }
        totals
    }
}

/// Each of `items`' weight in `weights`, if it has one: one walk when `items` is sorted without duplicates (as the
/// partitioner passes them, and as the map's keys are), else a lookup per item.
fn matched<'a>(items: &[Item], weights: &'a BTreeMap<Item, Weight>) -> Vec<Option<&'a Weight>> {
    if !items.is_sorted_by(|a, b| a < b) {
        return items.iter().map(|item| weights.get(item)).collect();
    }
    let mut named = weights.iter().peekable();
    items
        .iter()
        .map(|item| {
            while named.next_if(|&(key, _)| key < item).is_some() {}
            named.next_if(|&(key, _)| key == item).map(|(_, weight)| weight)
        })
        .collect()
}

/// The most weight of one dimension a member may carry under a load bound: `bound` × its ideal share
/// (`total × capacity / total_capacity`), rounded up. Computed in integers (the bound in thousandths), so that every
/// member computes the same limit.
pub fn capacity_limit(total: u64, capacity: u32, total_capacity: u64, bound: f64) -> u64 {
    let permille = (bound.clamp(1.0, 1000.0) * 1000.0).round() as u128;
    let denominator = u128::from(total_capacity.max(1)) * 1000;
    let limit = (u128::from(total) * u128::from(capacity) * permille).div_ceil(denominator);
    u64::try_from(limit).unwrap_or(u64::MAX)
}

/// A member's load under the assignment in force ([`Snapshot::load`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.load), and per member in
/// [`describe()`](https://docs.rs/zk-partitioner/latest/zk_partitioner/fn.describe.html)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Load {
    /// The member's capacity, as the partition function divides by it: 1 for a member that announces none, and for
    /// every member under a function that ignores capacities (one without a
    /// [`load_bound`](crate::PartitionFn::load_bound)).
    pub capacity: u32,
    /// Per dimension of the set's weights, by name.
    pub dimensions: Vec<DimensionLoad>,
    /// The largest `assigned / ideal` over the dimensions (1.0: exactly its share; 0 when it has no ideal share).
    pub imbalance: f64,
    /// Whether the member carries more than the partition function's load bound allows in some dimension
    /// ([`PartitionFn::load_bound`](crate::PartitionFn::load_bound)): no placement within every member's bound was
    /// found (an item larger than a share, say). Always `false` for a function without a bound.
    pub over_capacity: bool,
}

/// One dimension of a [`Load`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DimensionLoad {
    /// The dimension's name.
    pub dimension: String,
    /// The weight of the member's items in this dimension.
    pub assigned: u64,
    /// Its ideal share: the dimension's total × its capacity / the party's total capacity.
    pub ideal: f64,
}

impl Load {
    /// The load of the member with `capacity` that owns `share` (indexes into the items `weights` covers), in a
    /// party of `total_capacity`, under a function with load `bound`.
    pub fn of(
        share: impl IntoIterator<Item = usize>,
        weights: &Weights,
        capacity: u32,
        total_capacity: u64,
        bound: Option<f64>,
    ) -> Load {
        let totals = weights.totals();
        let mut assigned = vec![0u64; totals.len()];
        for index in share {
            for (sum, value) in assigned.iter_mut().zip(weights.item(index)) {
                *sum = sum.saturating_add(*value);
            }
        }
        let mut load = Load { capacity, dimensions: Vec::new(), imbalance: 0.0, over_capacity: false };
        for ((dimension, total), assigned) in weights.dimensions().iter().zip(totals).zip(assigned) {
            let ideal = total as f64 * f64::from(capacity) / total_capacity.max(1) as f64;
            if ideal > 0.0 {
                load.imbalance = load.imbalance.max(assigned as f64 / ideal);
            }
            if let Some(bound) = bound {
                load.over_capacity |= assigned > capacity_limit(total, capacity, total_capacity, bound);
            }
            load.dimensions.push(DimensionLoad { dimension: dimension.clone(), assigned, ideal });
        }
        load
    }
}

impl fmt::Display for Load {
    /// `capacity 4, weight 120/118.5 (1.01×)`, one `name assigned/ideal` per dimension, and `OVER CAPACITY` if so.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "capacity {}", self.capacity)?;
        for d in &self.dimensions {
            write!(f, ", {} {}/{:.1}", d.dimension, d.assigned, d.ideal)?;
        }
        write!(f, " ({:.2}×)", self.imbalance)?;
        if self.over_capacity {
            f.write_str(" OVER CAPACITY")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_is_one_weight_however_it_is_made_and_weights_order_by_their_pairs() {
        assert_eq!(Weight::named([(DEFAULT_DIMENSION, 5)]).unwrap(), Weight::new(5));
        assert_eq!("weight=5".parse::<Weight>().unwrap(), Weight::new(5));
        assert_eq!(Weight::named([(DEFAULT_DIMENSION, 5)]).unwrap().to_string(), "5");
        let weights: Vec<Weight> = ["5", "cpu=3", "bytes=1,cpu=3", "weight=2,x=1", "0", "a=9", "cpu=3,weight=1"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        // The order is that of the (dimension, value) pairs, as it was when a weight was a list of them.
        let pairs = |w: &Weight| w.values().map(|(d, v)| (d.to_owned(), v)).collect::<Vec<_>>();
        let mut by_pairs = weights.clone();
        by_pairs.sort_by_key(|w| pairs(w));
        let mut by_ord = weights;
        by_ord.sort();
        assert_eq!(by_ord, by_pairs);
        assert_eq!(
            Weight::named([("cpu", 2), ("bytes", 9)]).unwrap().values().collect::<Vec<_>>(),
            [("bytes", 9), ("cpu", 2)]
        );
    }

    #[test]
    fn items_in_any_order_get_their_own_weights() {
        let named =
            BTreeMap::from([(Item::from(1), Weight::new(7)), (Item::from(3), Weight::named([("cpu", 2)]).unwrap())]);
        let sorted: Vec<Item> = (0..4).map(Item::from).collect();
        let shuffled: Vec<Item> = [3, 0, 2, 1].map(Item::from).to_vec();
        let (a, b) = (Weights::of(&sorted, &named), Weights::of(&shuffled, &named));
        let twice = Weights::of(&[1, 1, 2].map(Item::from), &named);
        assert_eq!(
            [twice.item(0), twice.item(1), twice.item(2)],
            [&[7][..], &[7], &[1]],
            "an item listed twice weighs the same twice"
        );
        assert_eq!(a.dimensions(), ["cpu", "weight"]);
        assert_eq!([a.item(0), a.item(1), a.item(3)], [&[1, 1][..], &[0, 7], &[2, 0]]);
        assert_eq!([b.item(0), b.item(1), b.item(3)], [&[2, 0][..], &[1, 1], &[0, 7]]);
    }

    #[test]
    fn weights_parse_render_and_refuse_garbage() {
        for text in ["0", "5", "1000000000000", "a=1", "bytes=100,cpu=3", "x_1=0"] {
            assert_eq!(text.parse::<Weight>().map(|w| w.to_string()).as_deref().ok(), Some(text), "{text}");
        }
        assert_eq!("cpu=3,bytes=100".parse::<Weight>().ok(), Weight::named([("bytes", 100), ("cpu", 3)]).ok());
        for garbage in [
            "",
            "-1",
            "+1",
            "1.5",
            "1000000000001",
            "cpu",
            "cpu=",
            "=3",
            "Cpu=1",
            "1cpu=1",
            "cpu=1,cpu=2",
            "cpu=1,",
            "a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1",
            "cpu=1;bytes=2",
        ] {
            assert!(garbage.parse::<Weight>().is_err(), "{garbage:?}");
        }
        assert!(Weight::named(Vec::<(String, u64)>::new()).is_err());
        assert_eq!(Weight::new(u64::MAX).get(DEFAULT_DIMENSION), MAX_WEIGHT);
    }

    #[test]
    fn tables_follow_the_rules() {
        let items: Vec<Item> = (0..4).map(Item::from).collect();
        let named = BTreeMap::from([
            (Item::from(0), Weight::named([("cpu", 3), ("bytes", 10)]).unwrap()),
            (Item::from(2), Weight::named([("cpu", 5)]).unwrap()),
            (Item::from(9), Weight::named([("ignored", 5)]).unwrap()),
        ]);
        let table = Weights::of(&items, &named);
        assert_eq!(table.dimensions(), ["bytes", "cpu"]);
        assert_eq!((table.item(0), table.item(1), table.item(2)), (&[10, 3][..], &[1, 1][..], &[0, 5][..]));
        assert_eq!(table.totals(), [12, 10]);
        assert_eq!(table.len(), 4);
        assert!(Weights::uniform(3).is_uniform() && !table.is_uniform());
        assert_eq!(Weights::of(&items, &BTreeMap::new()), Weights::uniform(4));
    }

    #[test]
    fn limits_and_loads() {
        // 100 weight over capacities 1 + 3: ideal 25 and 75; a bound of 1.1 allows 27.5 → 28 and 82.5 → 83.
        assert_eq!(capacity_limit(100, 1, 4, 1.1), 28);
        assert_eq!(capacity_limit(100, 3, 4, 1.1), 83);
        assert_eq!(capacity_limit(100, 1, 4, 1.0), 25);
        assert_eq!(capacity_limit(0, 1, 4, 1.0), 0);
        let items: Vec<Item> = (0..4).map(Item::from).collect();
        let table = Weights::of(&items, &BTreeMap::from([(Item::from(3), Weight::new(97))]));
        let load = Load::of([3], &table, 1, 4, Some(1.1));
        assert_eq!(load.dimensions[0].assigned, 97);
        assert!(load.over_capacity && (load.imbalance - 97.0 / 25.0).abs() < 1e-9);
        let light = Load::of([0, 1], &table, 3, 4, Some(1.1));
        assert!(!light.over_capacity, "{light}");
        assert!(!Load::of([3], &table, 1, 4, None).over_capacity);
        assert_eq!(light.to_string(), "capacity 3, weight 2/75.0 (0.03×)");
    }

    #[test]
    fn capacities_are_checked() {
        assert!(check_capacity(0).is_err() && check_capacity(MAX_CAPACITY + 1).is_err());
        assert_eq!(check_capacity(8).ok(), Some(8));
    }
}
