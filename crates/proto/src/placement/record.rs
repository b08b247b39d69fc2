//! The record's format: its index, its chunks' lines, and the assignment they add up to.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::Item;
use crate::chunked;
use crate::error::shown;
use crate::hash::{FNV_OFFSET, GOLDEN_GAMMA, finish, fnv1a};
use crate::sabotage::{Sabotage, breaks};
use crate::set_layout::{Kind, parse_name};

/// The first line of the index. v2: the digest names the items with their owners (v1 named the owners only).
pub const MAGIC: &str = "zk-partitioner placement v2";

/// The record's index: what it is for, and the names of its chunks (children of `<path>/placement`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// The digest of the inputs the assignment was computed from.
    pub inputs: u64,
    /// The assignment's [`digest`].
    pub digest: u64,
    /// How many items it places.
    pub items: usize,
    /// Chunks of member names, in order.
    pub names: Vec<String>,
    /// Chunks of the base assignment, in item order.
    pub base: Vec<String>,
    /// One chunk per change since the base, oldest first.
    pub log: Vec<String>,
}

impl Index {
    pub fn render(&self) -> Vec<u8> {
        let mut text =
            format!("{MAGIC}\ninputs {:016x}\ndigest {:016x}\nitems {}\n", self.inputs, self.digest, self.items);
        for (key, chunks) in [("names", &self.names), ("base", &self.base), ("log", &self.log)] {
            text.push_str(key);
            for chunk in chunks {
                let _ = write!(text, " {chunk}");
            }
            text.push('\n');
        }
        text.into_bytes()
    }

    pub fn parse(data: &[u8]) -> Result<Index, String> {
        let text = std::str::from_utf8(data).map_err(|_| "its index is not UTF-8".to_owned())?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("its index {} does not start with {MAGIC:?}", shown(text)));
        }
        let mut field = |key: &str| {
            let line = lines.next().unwrap_or_default();
            match line.split_once(' ').map_or((line, ""), |(k, rest)| (k, rest)) {
                (k, rest) if k == key => Ok(rest),
                _ => Err(format!("its index has {} where {key:?} belongs", shown(line))),
            }
        };
        let hex = |key: &str, text: &str| {
            u64::from_str_radix(text, 16)
                .ok()
                .filter(|_| text.len() == 16)
                .ok_or_else(|| format!("its {key} {} is not 16 hex digits", shown(text)))
        };
        let inputs = hex("inputs", field("inputs")?)?;
        let digest = hex("digest", field("digest")?)?;
        let items = field("items")?;
        let items = items.parse().map_err(|_| format!("its item count {} is not a number", shown(items)))?;
        let names = chunk_names(field("names")?);
        let base = chunk_names(field("base")?);
        let log = chunk_names(field("log")?);
        let index = Index { inputs, digest, items, names, base, log };
        chunked::check_names(index.chunks(), 0)?;
        if index.names.is_empty() && index.items > 0 {
            return Err("its index names no member for its items".into());
        }
        Ok(index)
    }

    /// Every chunk it names: names, base, then log.
    pub fn chunks(&self) -> impl Iterator<Item = &String> {
        self.names.iter().chain(&self.base).chain(&self.log)
    }
}

fn chunk_names(text: &str) -> Vec<String> {
    text.split(' ').filter(|name| !name.is_empty()).map(str::to_owned).collect()
}

/// A read of the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The index node's data version; `None`: no node.
    pub version: Option<i32>,
    pub found: Found,
}

/// What the read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// No record: no node, or one with no index yet.
    Nothing,
    /// A record whose digest is the one the reader expected (its own latest assignment's), computed from `inputs`:
    /// its chunks were not read.
    Expected {
        inputs: u64,
    },
    Record(Arc<Record>),
    /// A chunk the index named went while it was read: the record moved on (its watch fires), read it again.
    Torn,
    /// Not a record this crate can use: why.
    Unreadable(String),
}

/// A record to write: a member's assignment ([`Record::computed`]) over the record read at `version` (`None`: no
/// node), its items of `kind`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub version: Option<i32>,
    pub assignment: Arc<Record>,
    pub kind: Kind,
}

/// An assignment with what it was computed from: a record as assembled from its index and chunks, or a member's
/// own latest assignment (which is the record in force when their digests agree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub inputs: u64,
    pub digest: u64,
    /// The member names its owners are numbered by (members that have left included, until the next fold).
    pub names: Vec<String>,
    /// Every item it places, sorted.
    pub items: Arc<[Item]>,
    /// Each item's owner, in the order of `items`: an index into `names`.
    pub owners: Vec<u32>,
}

impl Record {
    /// The record `index` names, from its chunks (`chunk` gives a chunk's data by name), its items of `kind`. An
    /// error when a chunk is missing (a torn read: the index has moved on since, or the writer stopped half-way,
    /// which leaves chunks no index names but never an index naming missing ones) or when what the chunks add up
    /// to does not have the index's count and digest.
    pub fn assemble<'d>(index: &Index, chunk: impl Fn(&str) -> Option<&'d [u8]>, kind: Kind) -> Result<Record, String> {
        let text = |name: &String| {
            let data = chunk(name).ok_or_else(|| format!("its chunk {name} is missing"))?;
            std::str::from_utf8(data).map_err(|_| format!("its chunk {name} is not UTF-8"))
        };
        let mut names = Vec::new();
        for name in &index.names {
            names.extend(text(name)?.lines().map(str::to_owned));
        }
        let mut owners: Vec<(Item, u32)> = Vec::with_capacity(index.items);
        for name in &index.base {
            for line in text(name)?.lines() {
                let (item, owner) = parse_line(name, line, kind, names.len())?;
                let owner = owner.ok_or_else(|| format!("its base chunk {name} removes an item"))?;
                if owners.last().is_some_and(|(last, _)| *last >= item) {
                    return Err(format!("its base chunk {name} is out of item order at {}", shown(line)));
                }
                owners.push((item, owner));
            }
        }
        for name in &index.log {
            let mut change = Vec::new();
            for line in text(name)?.lines() {
                let entry = parse_line(name, line, kind, names.len())?;
                if change.last().is_some_and(|(last, _)| *last >= entry.0) {
                    return Err(format!("its log chunk {name} is out of item order at {}", shown(line)));
                }
                change.push(entry);
            }
            owners = apply(owners, change);
        }
        let found = digest_of(&names, owners.iter().map(|(item, owner)| (item, *owner as usize)));
        if owners.len() != index.items || found != index.digest {
            return Err(format!(
                "its chunks add up to {} items of digest {found:016x}, not the {} of digest {:016x} it names",
                owners.len(),
                index.items,
                index.digest
            ));
        }
        let (items, owners): (Vec<Item>, Vec<u32>) = owners.into_iter().unzip();
        Ok(Record { inputs: index.inputs, digest: index.digest, names, items: items.into(), owners })
    }

    /// A member's own assignment (`owners[i]` owns `items[i]`, an index into `members`), computed from `inputs`.
    /// `None` when an owner is out of range.
    pub fn computed(inputs: u64, members: &[String], items: Arc<[Item]>, owners: &[usize]) -> Option<Record> {
        let owners: Vec<u32> = owners
            .iter()
            .map(|&owner| u32::try_from(owner).ok().filter(|&o| (o as usize) < members.len()))
            .collect::<Option<_>>()?;
        (owners.len() == items.len()).then(|| Record {
            inputs,
            digest: digest_of(members, items.iter().zip(owners.iter().map(|&owner| owner as usize))),
            names: members.to_vec(),
            items,
            owners,
        })
    }

    /// Each of `items`' owner in the record, as an index into `members` (sorted, as the partitioner passes them):
    /// `None` for an item the record does not place or whose owner is not among `members`. The previous assignment
    /// the sticky placement starts from.
    pub fn previous_for(&self, members: &[String], items: &[Item]) -> Vec<Option<usize>> {
        let member_of: Vec<Option<usize>> = self.names.iter().map(|name| members.binary_search(name).ok()).collect();
        let mut placed = self.items.iter().zip(&self.owners).peekable();
        items
            .iter()
            .map(|item| {
                while placed.next_if(|(other, _)| *other < item).is_some() {}
                placed.next_if(|(other, _)| *other == item).and_then(|(_, &owner)| member_of[owner as usize])
            })
            .collect()
    }
}

/// One line of chunk `chunk`: `<item>\t<owner>`, or `<item>\t-` (the item left the set).
fn parse_line(chunk: &str, line: &str, kind: Kind, names: usize) -> Result<(Item, Option<u32>), String> {
    let bad = |why: &str| format!("its chunk {chunk} has a line {} {why}", shown(line));
    let (name, owner) = line.split_once('\t').ok_or_else(|| bad("without a tab"))?;
    let item = parse_name(kind, name).ok_or_else(|| bad("that names no item of the set's kind"))?;
    if owner == "-" {
        return Ok((item, None));
    }
    match owner.parse::<u32>() {
        Ok(owner) if (owner as usize) < names => Ok((item, Some(owner))),
        _ => Err(bad("whose owner is not one of its members")),
    }
}

/// `owners` with one change applied: each entry of `change` (in item order) places its item, or removes it.
pub fn apply(owners: Vec<(Item, u32)>, change: Vec<(Item, Option<u32>)>) -> Vec<(Item, u32)> {
    let mut merged = Vec::with_capacity(owners.len() + change.len());
    let mut change = change.into_iter().peekable();
    for (item, owner) in owners {
        while let Some((new, placed)) = change.next_if(|(new, _)| *new < item) {
            merged.extend(placed.map(|owner| (new, owner)));
        }
        match change.next_if(|(new, _)| *new == item) {
            Some((_, placed)) => merged.extend(placed.map(|owner| (item, owner))),
            None => merged.push((item, owner)),
        }
    }
    merged.extend(change.filter_map(|(item, placed)| placed.map(|owner| (item, owner))));
    merged
}

/// The digest of an assignment: every item with its owner's name, in item order. A member compares it with its own
/// assignment's to know, without reading the record's chunks, that the record says what it computed. It must name
/// the items: the same owners in the same order over another set (one item split into another between two versions
/// of the shared set, say) is another assignment, and a member that took it for its own kept computing from a record
/// that the others read as it is (they then claimed one item both, for good: a simulation seed found it).
///
/// Owners are indexes into `members`; one out of range counts as no owner (the partition functions never return one).
pub fn digest(members: &[String], items: &[Item], owners: &[usize]) -> u64 {
    digest_of(members, items.iter().zip(owners.iter().copied()))
}

fn digest_of<'i>(names: &[String], placed: impl Iterator<Item = (&'i Item, usize)>) -> u64 {
    let hashes: Vec<u64> = names.iter().map(|name| fnv(name.as_bytes())).collect();
    let (mut digest, mut count) = (0x6a09_e667_f3bc_c908_u64, 0u64);
    let items_named = !breaks(Sabotage::PlacementDigestOwnersOnly);
    for (item, owner) in placed {
        let item = if items_named { item_hash(item) } else { 0 };
        digest = mix(digest ^ item ^ hashes.get(owner).copied().unwrap_or(0));
        count += 1;
    }
    mix(digest ^ count)
}

/// An item's hash for the digest, mixed in with its owner's in one step: an integer's value times SplitMix64's odd
/// increment (no decimal name to format, and distinct values stay distinct), a string's FNV-1a.
fn item_hash(item: &Item) -> u64 {
    match item {
        Item::Int(value) => (*value as u64).wrapping_mul(GOLDEN_GAMMA),
        Item::Str(name) => !fnv(name.as_bytes()),
    }
}

/// What an assignment was computed from: the set's `content` ([`content_digest`]: its items and their weights), the
/// `function`'s fingerprint, the party (`members`, sorted) and their `capacities`. A record for a member's very inputs
/// is its assignment, handed out as it is.
///
/// The set is named by what it holds, not by the shared set's version: a version that changes no item and no weight
/// (a close, a split whose children wait, a retirement) is the same input. Named by version, a record written at
/// version v was computed from again by a member that decided at v+1, while the members that decided at v kept it
/// (they only relabel their assignment at v+1): the sticky rule is not a fixed point at every size, so the late
/// member's share overlapped another's, and both waited for good.
pub fn inputs_digest(content: u64, function: Option<u64>, members: &[String], capacities: &[u32]) -> u64 {
    let mut text = format!("{content:016x} {function:?}\n");
    for (member, capacity) in members.iter().zip(capacities) {
        text.push_str(member);
        text.push_str(&format!("\t{capacity}\n"));
    }
    fnv(text.as_bytes())
}

/// The digest of a set's content: every item (sorted, as the catalogue keeps them) with its weight in every dimension
/// (`weights`, in the same order), and the dimensions' names. Two members with the same items and weights compute the
/// same, whatever version of the shared set each read them at.
pub fn content_digest(items: &[Item], weights: &crate::Weights) -> u64 {
    let mut hash = crate::announcement::set_digest(items);
    for dimension in weights.dimensions() {
        hash = fnv1a(hash, dimension.as_bytes());
        hash = fnv1a(hash, &[0]);
    }
    if !weights.is_uniform() {
        for index in 0..weights.len() {
            for value in weights.item(index) {
                hash = fnv1a(hash, &value.to_le_bytes());
            }
        }
    }
    finish(hash ^ items.len() as u64)
}

/// 64-bit FNV-1a.
fn fnv(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

/// A SplitMix64 step: each step of the digest depends on every bit of the steps before.
fn mix(z: u64) -> u64 {
    finish(z.wrapping_add(GOLDEN_GAMMA))
}
