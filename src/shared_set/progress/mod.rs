//! A party's progress as one token ([`Progress`]): the shared set, its lineage, its weights and every checkpoint,
//! exported at one version of the set ([`SharedSet::export`](crate::SharedSet::export)) and imported all or nothing
//! ([`SharedSet::import`](crate::SharedSet::import)).
//!
//! The token is JSON, with a `format` field that names its layout ([`Progress::FORMAT`]); a reader refuses any other format,
//! before writing anything. Items are named as their lock nodes are (`Item::node_name`), with the set's `kind`
//! saying how to read them back; checkpoint bytes are base64.
//!
//! ```json
//! {"format": "zk-partitioner progress 1",
//!  "exported": {"path": "/orders", "set_version": 12, "at_ms": 1764633600000},
//!  "kind": "str",
//!  "items": ["shard-2", "shard-3"],
//!  "weights": {"shard-2": "3"},
//!  "lineage": {"shard-1": {"children": ["shard-2", "shard-3"], "closed": true,
//!                          "finished": {"member": "worker-7", "token": 4294967301}},
//!              "shard-2": {"parents": ["shard-1"]}, "shard-3": {"parents": ["shard-1"]}},
//!  "checkpoints": {"shard-1": {"data": "b2Zmc2V0PTkwMDA=", "writer": "worker-7", "token": 4294967301,
//!                              "saved_ms": 1764633500000}}}
//! ```

mod export;
mod import;

pub(super) use import::staged_lineage;

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::lineage::entry::{Entry, Finished};
use crate::checkpoint_store::MAX_CHECKPOINT_SIZE;
use crate::{Error, Item, weighted::Weight};
use proto::item::validate_items;
use proto::set_layout::{self as layout, Kind};

/// The token's layout, as its `format` field says ([`Progress::FORMAT`]).
const FORMAT: &str = "zk-partitioner progress 1";

/// What the word before the number says in every format of this family.
const FAMILY: &str = "zk-partitioner progress ";

/// A party's progress: the shared set, its lineage trees, its weights and every item's checkpoint, as one
/// consistent view ([`SharedSet::export`](crate::SharedSet::export)), to import elsewhere or later
/// ([`SharedSet::import`](crate::SharedSet::import)). [`to_json`](Progress::to_json) and
/// [`from_json`](Progress::from_json) write and read it (`zkp items export` and `zkp items import`); the fields say
/// what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Progress {
    /// [`Progress::FORMAT`].
    pub format: String,
    /// Where it was read, at which version of the set, and when.
    pub exported: Exported,
    /// The kind of the set's items: `"int"` or `"str"`.
    pub kind: String,
    /// The set in force, sorted: each item by its lock node name.
    pub items: Vec<String>,
    /// The items that have a weight, in [`Weight`]'s text form (`3`, `cpu=2,bytes=100`); the others weigh 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, String>,
    /// Every item with lineage (a parent, a child, or closed), finished items included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lineage: BTreeMap<String, LineageRecord>,
    /// Every checkpoint, by item: of the set's items, of finished ones, and of items since removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checkpoints: BTreeMap<String, CheckpointRecord>,
}

/// Where and when a [`Progress`] was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Exported {
    /// The partition path.
    pub path: String,
    /// The version of the shared set it was read at.
    pub set_version: u64,
    /// When, in milliseconds since the Unix epoch (the exporting machine's clock).
    pub at_ms: u64,
}

/// One item's lineage in a [`Progress`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LineageRecord {
    /// Its parents, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// Its children, in the order added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Its source produces nothing new for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// Who finished it, if it was finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<FinishedRecord>,
}

/// Who finished an item, under which ownership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FinishedRecord {
    /// The member that finished it.
    pub member: String,
    /// Its fencing token for the item.
    pub token: i64,
}

/// One item's checkpoint in a [`Progress`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CheckpointRecord {
    /// The bytes its writer saved, in base64 (standard alphabet, padded).
    pub data: String,
    /// The member that saved it.
    pub writer: String,
    /// That member's fencing token for the item when it saved.
    pub token: i64,
    /// When it was saved, in milliseconds since the Unix epoch (the ZooKeeper server's clock).
    #[serde(default)]
    pub saved_ms: u64,
}

impl CheckpointRecord {
    /// The bytes its writer saved.
    ///
    /// # Errors
    /// [`Error::InvalidProgress`] if `data` is not base64.
    pub fn bytes(&self) -> Result<Vec<u8>, Error> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .map_err(|err| invalid(format!("a checkpoint's data is not base64: {err}")))
    }
}

/// How [`SharedSet::import`](crate::SharedSet::import) uses a token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImportMode {
    /// The token's set, lineage, weights and checkpoints become the path's, in place of what it had (or on an
    /// empty path).
    #[default]
    Restore,
    /// As `Restore`, but with no checkpoints: every item starts from nothing (bloop's `trim_horizon`).
    ResetCheckpoints,
    /// The path keeps its set; the token's checkpoints, weights and closed marks are imported for the items the set
    /// has, and the token's other items are dropped (and reported). The token's parents, children and finishes are
    /// not: every item of the set here is live (one the token says is finished resumes from its final checkpoint).
    /// An item of the set the token does not know starts from nothing (its weight stays).
    Prune,
}

/// What an import did ([`SharedSet::import`](crate::SharedSet::import)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Imported {
    /// The shared set's version after the import.
    pub version: u64,
    /// The items of the set in force.
    pub items: usize,
    /// The checkpoints written.
    pub checkpoints: usize,
    /// The lineage nodes written.
    pub lineage: usize,
    /// The token's items (and finished items, and checkpoints of removed ones) left out: with
    /// [`ImportMode::Prune`], those the path's set does not have.
    pub dropped: Vec<String>,
}

impl Progress {
    /// The layout this version writes and reads, as the `format` field says: a reader refuses any other.
    pub const FORMAT: &'static str = FORMAT;

    /// The token as JSON, on one line.
    pub fn to_json(&self) -> String {
        // A tree of strings, integers and booleans always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a token written by [`to_json`](Progress::to_json) (or by `zkp items export`).
    ///
    /// # Errors
    /// [`Error::InvalidProgress`] for text that is not JSON, JSON cut short, a `format` this version does not read
    /// (a newer one), or a token whose fields are missing, unknown or malformed.
    pub fn from_json(text: &str) -> Result<Progress, Error> {
        #[derive(Deserialize)]
        struct Head {
            format: Option<serde_json::Value>,
        }
        let head: Head = serde_json::from_str(text).map_err(|err| not_json(&err))?;
        match head.format {
            Some(serde_json::Value::String(format)) if format == FORMAT => {}
            Some(serde_json::Value::String(format)) if format.starts_with(FAMILY) => {
                return Err(invalid(format!(
                    "its format {format:?} is not one this version reads ({FORMAT:?}): it was written by a newer \
                     version of zk-partitioner"
                )));
            }
            Some(other) => {
                return Err(invalid(format!(
                    "its format {other} is not {FORMAT:?}: not a zk-partitioner progress token"
                )));
            }
            None => return Err(invalid(format!("it has no \"format\" field (expected {FORMAT:?})"))),
        }
        serde_json::from_str(text).map_err(|err| not_json(&err))
    }

    /// The items of the set, as items of its kind.
    ///
    /// # Errors
    /// [`Error::InvalidProgress`] as [`SharedSet::import`](crate::SharedSet::import) would report it.
    pub fn set_items(&self) -> Result<Vec<Item>, Error> {
        Ok(self.contents()?.items)
    }

    /// The token checked and read into what an import writes.
    pub(crate) fn contents(&self) -> Result<Contents, Error> {
        if self.format != FORMAT {
            return Err(invalid(format!("its format {:?} is not {FORMAT:?}", self.format)));
        }
        let kind = match self.kind.as_str() {
            "int" => Kind::Int,
            "str" => Kind::Str,
            other => return Err(invalid(format!("its kind {other:?} is neither \"int\" nor \"str\""))),
        };
        // A lock node name that reads back as an item of the set's kind, and renders as the same name.
        let named = |name: &String, what: &str| -> Result<Item, Error> {
            let item = layout::parse_name(kind, name)
                .filter(|item| item.node_name() == *name)
                .ok_or_else(|| invalid(format!("{what} {name:?} is not an item of kind {:?}", self.kind)))?;
            validate_items(vec![item.clone()], true)
                .map_err(|err| invalid(format!("{what} {name:?}: {}", Error::from(err))))?;
            Ok(item)
        };
        let mut items = Vec::with_capacity(self.items.len());
        for name in &self.items {
            items.push(named(name, "its item")?);
        }
        let count = items.len();
        let items = validate_items(items, true).map_err(|err| invalid(format!("its items: {}", Error::from(err))))?;
        if items.len() != count {
            return Err(invalid("it names an item twice".to_owned()));
        }
        if items.is_empty() {
            return Err(invalid("its set has no item (a shared set is never empty)".to_owned()));
        }
        let in_set: BTreeSet<String> = self.items.iter().cloned().collect();
        let mut lineage = BTreeMap::new();
        for (name, record) in &self.lineage {
            named(name, "a lineage entry's item")?;
            for other in record.parents.iter().chain(&record.children) {
                named(other, "a parent or child")?;
            }
            if record.finished.is_some() && in_set.contains(name) {
                return Err(invalid(format!("item {name:?} is finished, yet in the set: not one version's view")));
            }
            let finished = match &record.finished {
                Some(done) if done.member.is_empty() || done.member.contains(char::is_whitespace) => {
                    return Err(invalid(format!("item {name:?}'s finisher {:?} is not a member name", done.member)));
                }
                Some(done) => Some(Finished { token: done.token, member: done.member.clone() }),
                None => None,
            };
            let entry = Entry {
                parents: record.parents.clone(),
                children: record.children.clone(),
                closed: record.closed,
                finished,
            };
            lineage.insert(name.clone(), entry);
        }
        let mut weights = BTreeMap::new();
        for (name, weight) in &self.weights {
            let item = named(name, "a weighted item")?;
            let weight: Weight = weight.parse().map_err(|err| invalid(format!("item {name:?}'s weight: {err}")))?;
            weights.insert(item, weight);
        }
        let mut checkpoints = BTreeMap::new();
        for (name, record) in &self.checkpoints {
            named(name, "a checkpoint's item")?;
            let data = record.bytes()?;
            if data.len() > MAX_CHECKPOINT_SIZE {
                return Err(invalid(format!(
                    "item {name:?}'s checkpoint is {} bytes; at most {MAX_CHECKPOINT_SIZE} are allowed",
                    data.len()
                )));
            }
            if record.writer.is_empty() || record.writer.contains(char::is_whitespace) {
                return Err(invalid(format!(
                    "item {name:?}'s checkpoint writer {:?} is not a member name",
                    record.writer
                )));
            }
            checkpoints.insert(name.clone(), crate::checkpoint_store::blob(record.token, &record.writer, &data));
        }
        Ok(Contents { kind, items, weights, lineage, checkpoints })
    }
}

/// A token's contents as an import writes them: the set, its weights, the lineage nodes' entries and the checkpoint
/// nodes' data, by item (node name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contents {
    pub kind: Kind,
    /// Sorted.
    pub items: Vec<Item>,
    pub weights: BTreeMap<Item, Weight>,
    pub lineage: BTreeMap<String, Entry>,
    pub checkpoints: BTreeMap<String, Vec<u8>>,
}

impl Contents {
    /// The contents for the items of `set` alone ([`ImportMode::Prune`]): the set's own items; the token's weights,
    /// closed marks and checkpoints of those it also has (the set here holds them: none is finished, none waits for
    /// a parent); and the names left out.
    pub fn pruned(mut self, set: &[Item], own_weights: &BTreeMap<Item, Weight>) -> (Contents, Vec<String>) {
        let kept: BTreeSet<String> = set.iter().map(Item::node_name).collect();
        let mut dropped: BTreeSet<String> =
            self.items.iter().map(Item::node_name).filter(|name| !kept.contains(name)).collect();
        dropped.extend(self.lineage.keys().chain(self.checkpoints.keys()).filter(|n| !kept.contains(*n)).cloned());
        // Every item kept is in the set here, so none is finished, and none waits for a parent (a child in a set has
        // finished parents): of the token's lineage, only the closed marks still hold. An item of the set the token
        // says is finished resumes from its final checkpoint, and its owner finishes it again.
        self.lineage.retain(|name, _| kept.contains(name));
        for entry in self.lineage.values_mut() {
            entry.parents.clear();
            entry.children.clear();
            entry.finished = None;
        }
        // An item left with nothing to say (a child whose parents were dropped) is a plain item.
        self.lineage.retain(|_, entry| *entry != Entry::default());
        self.checkpoints.retain(|name, _| kept.contains(name));
        let mut weights: BTreeMap<Item, Weight> = own_weights
            .iter()
            .filter(|(item, _)| !self.items.contains(item))
            .map(|(i, w)| (i.clone(), w.clone()))
            .collect();
        weights.extend(self.weights.into_iter().filter(|(item, _)| kept.contains(&item.node_name())));
        self.weights = weights;
        self.items = set.to_vec();
        (self, dropped.into_iter().collect())
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidProgress { reason }
}

fn not_json(err: &serde_json::Error) -> Error {
    if err.is_eof() {
        invalid(format!("it is cut short ({err}): a truncated file?"))
    } else if err.is_data() {
        invalid(format!("it is not a progress token: {err}"))
    } else {
        invalid(format!("it is not JSON: {err}"))
    }
}

#[cfg(test)]
mod tests;
