//! Items: the things being partitioned, and how they become lock node names.

use std::cmp::Ordering;
use std::fmt;

use crate::InputError;
use crate::error::shown;
use crate::names::check_node_name;

/// One element of the set being partitioned.
///
/// kazoo partitions Python values and names each item's lock node with `str(item)`. This crate supports the two kinds
/// of item that appear in practice, integers and strings, rendered exactly as Python's `str()` renders them, so a Rust
/// worker and a kazoo worker given the same set lock the same nodes. Items of one kind sort the way Python's
/// `sorted()` sorts them: integers numerically, strings by code point.
///
/// ```
/// use zk_partitioner::Item;
///
/// assert_eq!(Item::from(-7).to_string(), "-7");
/// assert_eq!(Item::from("queue-1").to_string(), "queue-1");
/// let mut items = vec![Item::from(10), Item::from(9)];
/// items.sort();
/// assert_eq!(items, [Item::from(9), Item::from(10)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    /// An integer, rendered in decimal.
    Int(i64),
    /// A string, rendered as itself.
    Str(String),
}

impl Item {
    /// The lock node name of this item (Python's `str(item)`).
    pub fn node_name(&self) -> String {
        self.to_string()
    }

    fn kind(&self) -> &'static str {
        match self {
            Item::Int(_) => "integer",
            Item::Str(_) => "string",
        }
    }

    /// The kind with its article, for a message: `an integer`, `a string`.
    fn a_kind(&self) -> &'static str {
        match self {
            Item::Int(_) => "an integer",
            Item::Str(_) => "a string",
        }
    }

    /// The item for a message: `the integer 7`, `the string "7"` (cut when long).
    fn described(&self) -> String {
        match self {
            Item::Int(i) => format!("the integer {i}"),
            Item::Str(s) => format!("the string {}", shown(s)),
        }
    }
}

impl Ord for Item {
    /// Integers numerically, strings by code point (Rust orders UTF-8 strings by code point). Python cannot compare an
    /// integer with a string; here integers sort first, but [`Builder::build`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.build) rejects mixed
    /// sets under the default partition function, which must agree with kazoo.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Item::Int(a), Item::Int(b)) => a.cmp(b),
            (Item::Str(a), Item::Str(b)) => a.cmp(b),
            (Item::Int(_), Item::Str(_)) => Ordering::Less,
            (Item::Str(_), Item::Int(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Int(i) => write!(f, "{i}"),
            Item::Str(s) => f.write_str(s),
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Item {
            fn from(value: $t) -> Self {
                Item::Int(i64::from(value))
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<&str> for Item {
    fn from(value: &str) -> Self {
        Item::Str(value.to_owned())
    }
}

impl From<String> for Item {
    fn from(value: String) -> Self {
        Item::Str(value)
    }
}

impl From<&String> for Item {
    fn from(value: &String) -> Self {
        Item::Str(value.clone())
    }
}

impl From<&Item> for Item {
    fn from(value: &Item) -> Self {
        value.clone()
    }
}

/// Checks items as [`Builder::build`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.build) does under any options, without a session: each renders
/// to a valid lock node name, no two distinct items render alike (the integer `1` and the string `"1"`), and all are
/// of one kind, integers or strings (what the default partition function and a shared set require). For programs
/// that check their configuration before they connect.
///
/// # Errors
/// [`InputError::InvalidItem`] naming an offending item and what is wrong with it.
///
/// # Examples
/// ```
/// use zk_partitioner::{Item, checks::check_items};
///
/// assert!(check_items(["queue-1", "queue-2"]).is_ok());
/// assert!(check_items(["queue-1", "a/b"]).is_err()); // a '/' would make it a path
/// assert!(check_items([Item::from(1), Item::from("1")]).is_err()); // one lock node for two items
/// ```
pub fn check_items<I>(items: I) -> Result<(), InputError>
where
    I: IntoIterator,
    I::Item: Into<Item>,
{
    validate_items(items.into_iter().map(Into::into).collect(), true).map(drop)
}

/// Checks a set of items and returns it sorted and free of duplicates.
///
/// Every item must render to a valid znode name, and no two distinct items may render to the same name (`1` and
/// `"1"` would share one lock). With `require_one_kind`, integers and strings may not be mixed (Python's `sorted()`
/// rejects such a set, so a kazoo peer could not partition it).
pub fn validate_items(items: Vec<Item>, require_one_kind: bool) -> Result<Vec<Item>, InputError> {
    let mut items = items;
    items.sort();
    items.dedup();
    if require_one_kind
        && let (Some(first), Some(last)) = (items.first(), items.last())
        && first.kind() != last.kind()
    {
        return Err(InputError::InvalidItem {
            item: last.to_string(),
            reason: format!(
                "is a {} while {} is an {}: the default partition function sorts items like Python, which cannot \
                 compare integers with strings (use one kind, or another partition function)",
                last.kind(),
                first.described(),
                first.kind()
            ),
        });
    }
    let mut names: Vec<(String, &Item)> = Vec::with_capacity(items.len());
    for item in &items {
        let name = item.node_name();
        check_node_name(&name).map_err(|reason| InputError::InvalidItem { item: name.clone(), reason })?;
        names.push((name, item));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = names.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(InputError::InvalidItem {
            item: pair[0].0.clone(),
            reason: format!(
                "{} and {} render to the same lock node name",
                pair[0].1.described(),
                pair[1].1.described()
            ),
        });
    }
    Ok(items)
}

/// Checks that every item of `added` has the kind of `held`, an item of the shared set whose node is `set`: a shared
/// set is all integers or all strings. The error names the first new item of the other kind, not an item of the set.
pub fn check_kind_of_set(added: &[Item], held: &Item, set: &str) -> Result<(), InputError> {
    match added.iter().find(|item| item.kind() != held.kind()) {
        None => Ok(()),
        Some(item) => Err(InputError::InvalidItem {
            item: item.to_string(),
            reason: format!(
                "is {} but the shared set at {set} holds {}s (such as {}): a shared set's items are all of one \
                 kind (give the item as {}, or replace the whole set to change its kind)",
                item.a_kind(),
                held.kind(),
                held.described(),
                held.a_kind()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_python_str() {
        assert_eq!(Item::from(0).to_string(), "0");
        assert_eq!(Item::from(-12).to_string(), "-12");
        assert_eq!(Item::from(i64::MAX).to_string(), "9223372036854775807");
        assert_eq!(Item::from("é-ü").to_string(), "é-ü");
    }

    #[test]
    fn sorts_like_python_sorted() {
        let mut ints: Vec<Item> = [10, -1, 2, 100].into_iter().map(Item::from).collect();
        ints.sort();
        assert_eq!(ints, [-1, 2, 10, 100].map(Item::from));
        // Code point order: 'B' (0x42) < 'a' (0x61) < 'é' (0xe9) < '中' (0x4e2d).
        let mut strs: Vec<Item> = ["中", "a", "é", "B"].into_iter().map(Item::from).collect();
        strs.sort();
        assert_eq!(strs, ["B", "a", "é", "中"].map(Item::from));
    }

    #[test]
    fn rejects_colliding_renderings() {
        let err = validate_items(vec![Item::from(1), Item::from("1")], false).unwrap_err();
        assert!(matches!(err, InputError::InvalidItem { ref item, .. } if item == "1"), "{err}");
        assert_eq!(
            err.to_string(),
            "invalid item \"1\": the integer 1 and the string \"1\" render to the same lock node name"
        );
    }

    #[test]
    fn rejects_mixed_kinds_when_asked() {
        let err = validate_items(vec![Item::from(1), Item::from("a")], true).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid item \"a\": is a string while the integer 1 is an integer"),
            "{err}"
        );
        assert!(!err.to_string().contains("Int("), "{err}");
        assert!(validate_items(vec![Item::from(1), Item::from("a")], false).is_ok());
    }

    #[test]
    fn an_item_of_the_other_kind_is_named_against_a_shared_set() {
        let held = Item::from("a");
        let err = check_kind_of_set(&[Item::from("b"), Item::from(5)], &held, "/p/items").unwrap_err();
        assert!(matches!(err, InputError::InvalidItem { ref item, .. } if item == "5"), "{err}");
        assert_eq!(
            err.to_string(),
            "invalid item \"5\": is an integer but the shared set at /p/items holds strings (such as the string \
             \"a\"): a shared set's items are all of one kind (give the item as a string, or replace the whole set to \
             change its kind)"
        );
        let err = check_kind_of_set(&[Item::from("7")], &Item::from(1), "/p/items").unwrap_err();
        assert!(
            err.to_string().starts_with(
                "invalid item \"7\": is a string but the shared set at /p/items holds \
             integers (such as the integer 1)"
            ),
            "{err}"
        );
        assert!(check_kind_of_set(&[Item::from(2), Item::from(3)], &Item::from(1), "/p/items").is_ok());
    }

    #[test]
    fn a_long_item_is_cut_in_its_error() {
        let long = "q".repeat(2000);
        let err = validate_items(vec![Item::from(long.as_str())], true).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with(&format!("invalid item \"{}\"… (2000 bytes): is 2000 bytes long", "q".repeat(64))));
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn rejects_bad_names() {
        for bad in ["", ".", "..", "a/b", "tab\there", "nul\0", "\u{7f}", "\u{e000}", "\u{fff0}"] {
            let err = validate_items(vec![Item::from(bad)], true).unwrap_err();
            assert!(matches!(err, InputError::InvalidItem { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn sorts_and_dedups() {
        let items = validate_items(vec![Item::from("b"), Item::from("a"), Item::from("b")], true).unwrap();
        assert_eq!(items, ["a", "b"].map(Item::from));
    }
}
