//! The writer's plan: the chunks to create and the index to write so that the record says a new assignment, and the
//! chunks of the record in force that the new index no longer names.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use super::record::{self, Index, Record};
use crate::Item;
use crate::chunked::{CHUNK_BYTES, MAX_CHUNKS, chunk_name, cuts_before};
use crate::error::shown;

/// About how many lines a base chunk holds (where they are cut depends on the items only, see
/// [`cuts_before`]): some 100 chunks of 10-20 KB at 100,000 items.
pub const BASE_LINES: usize = 1024;
/// The log is folded into a new base once it would pass this fraction of the base's bytes.
const LOG_SHARE: usize = 10;

/// The record in force, as the writer read it: its index, what it adds up to, and its chunks' data by name.
#[derive(Debug)]
pub struct InForce<'a> {
    pub index: &'a Index,
    pub record: &'a Record,
    pub chunks: &'a HashMap<String, Arc<[u8]>>,
}

/// What to write.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub index: Index,
    /// The chunks the index names that the record in force does not have: name and data, to create first.
    pub creates: Vec<(String, Vec<u8>)>,
    /// The record in force's chunks the index no longer names: to delete once it is written.
    pub obsolete: Vec<String>,
}

/// The plan for a record saying that each of `items` (sorted, distinct) is owned by `members[owners[i]]` (`members`
/// sorted, distinct), computed from `inputs`; new chunks are named under `tag` (16 hex digits, never used before).
/// A change from `in_force` is appended to its log; without a record in force, or when the log would pass a tenth of
/// the base or a chunk, the assignment is folded into a new base (sharing the base chunks that did not change).
pub fn plan(
    tag: &str,
    in_force: Option<InForce<'_>>,
    inputs: u64,
    members: &[String],
    items: &[Item],
    owners: &[usize],
) -> Result<Plan, String> {
    check(members, items, owners)?;
    let digest = record::digest(members, items, owners);
    if let Some(in_force) = &in_force
        && let Some(plan) = appended(tag, in_force, inputs, digest, members, items, owners)
    {
        return Ok(plan);
    }
    let plan = folded(tag, in_force, inputs, digest, members, items, owners);
    match plan.index.chunks().count() {
        n if n > MAX_CHUNKS => Err(format!("{} items need {n} chunks; at most {MAX_CHUNKS} are allowed", items.len())),
        _ => Ok(plan),
    }
}

fn check(members: &[String], items: &[Item], owners: &[usize]) -> Result<(), String> {
    if owners.len() != items.len() {
        return Err(format!("{} owners for {} items", owners.len(), items.len()));
    }
    if let Some(&owner) = owners.iter().find(|&&owner| owner >= members.len()) {
        return Err(format!("owner {owner} of a party of {} members", members.len()));
    }
    if !members.windows(2).all(|pair| pair[0] < pair[1]) || !items.windows(2).all(|pair| pair[0] < pair[1]) {
        return Err("members or items are not sorted and distinct".into());
    }
    // ZooKeeper's names hold no control characters; these would break the record's lines.
    match members.iter().find(|name| name.is_empty() || name.contains(['\n', '\t', '\r'])) {
        Some(bad) => Err(format!("member name {} cannot be recorded", shown(bad))),
        None => Ok(()),
    }
}

/// The change from the record in force, appended to its log; `None` when it should be folded instead.
fn appended(
    tag: &str,
    in_force: &InForce<'_>,
    inputs: u64,
    digest: u64,
    members: &[String],
    items: &[Item],
    owners: &[usize],
) -> Option<Plan> {
    let old = in_force.record;
    // Members keep their numbers; newcomers are numbered after the names the record has.
    let mut names = old.names.clone();
    let known: HashMap<&str, u32> = old.names.iter().zip(0..).map(|(name, k)| (name.as_str(), k)).collect();
    let mut number = Vec::with_capacity(members.len());
    let mut added = String::new();
    for member in members {
        number.push(match known.get(member.as_str()) {
            Some(&k) => k,
            None => {
                added.push_str(member);
                added.push('\n');
                names.push(member.clone());
                u32::try_from(names.len() - 1).ok()?
            }
        });
    }
    // Members that left stay named until the next fold; fold before they outnumber those present.
    if names.len() > 2 * members.len() + 16 {
        return None;
    }
    let mut change = String::new();
    let mut previous = old.items.iter().zip(&old.owners).peekable();
    for (item, &owner) in items.iter().zip(owners) {
        while let Some((gone, _)) = previous.next_if(|(other, _)| *other < item) {
            let _ = writeln!(change, "{gone}\t-");
        }
        let owner = number[owner];
        if previous.next_if(|(other, _)| *other == item).is_none_or(|(_, &was)| was != owner) {
            let _ = writeln!(change, "{item}\t{owner}");
        }
    }
    for (gone, _) in previous {
        let _ = writeln!(change, "{gone}\t-");
    }
    let size =
        |names: &[String]| names.iter().map(|name| in_force.chunks.get(name).map_or(0, |d| d.len())).sum::<usize>();
    let (base_bytes, log_bytes) = (size(&in_force.index.base), size(&in_force.index.log));
    if change.len() > CHUNK_BYTES || (log_bytes + change.len()) * LOG_SHARE > base_bytes {
        return None;
    }
    let mut index = Index { inputs, digest, items: items.len(), ..in_force.index.clone() };
    let mut creates = Vec::new();
    for (list, text) in [(&mut index.names, added), (&mut index.log, change)] {
        if !text.is_empty() {
            let name = chunk_name(tag, creates.len());
            list.push(name.clone());
            creates.push((name, text.into_bytes()));
        }
    }
    (index.chunks().count() <= MAX_CHUNKS).then_some(Plan { index, creates, obsolete: Vec::new() })
}

/// The assignment as a new base, with an empty log.
fn folded(
    tag: &str,
    in_force: Option<InForce<'_>>,
    inputs: u64,
    digest: u64,
    members: &[String],
    items: &[Item],
    owners: &[usize],
) -> Plan {
    let mut names_chunks = Vec::new();
    let mut chunk = String::new();
    for member in members {
        if chunk.len() + member.len() + 1 > CHUNK_BYTES && !chunk.is_empty() {
            names_chunks.push(std::mem::take(&mut chunk));
        }
        chunk.push_str(member);
        chunk.push('\n');
    }
    names_chunks.extend((!chunk.is_empty()).then_some(chunk));
    let mut base_chunks = Vec::new();
    let mut chunk = String::new();
    for (item, owner) in items.iter().zip(owners) {
        let name = item.node_name();
        let line = format!("{name}\t{owner}\n");
        if !chunk.is_empty() && (cuts_before(&name, BASE_LINES) || chunk.len() + line.len() > CHUNK_BYTES) {
            base_chunks.push(std::mem::take(&mut chunk));
        }
        chunk.push_str(&line);
    }
    base_chunks.extend((!chunk.is_empty()).then_some(chunk));

    // Chunks of the record in force with the same bytes are named again rather than written again.
    let shared: HashMap<&[u8], &str> = match &in_force {
        Some(in_force) => in_force
            .index
            .chunks()
            .filter_map(|name| in_force.chunks.get(name).map(|data| (&**data, name.as_str())))
            .collect(),
        None => HashMap::new(),
    };
    let mut creates = Vec::new();
    let mut name_all = |texts: Vec<String>| -> Vec<String> {
        texts
            .into_iter()
            .map(|text| match shared.get(text.as_bytes()) {
                Some(name) => (*name).to_owned(),
                None => {
                    let name = chunk_name(tag, creates.len());
                    creates.push((name.clone(), text.into_bytes()));
                    name
                }
            })
            .collect()
    };
    let names = name_all(names_chunks);
    let base = name_all(base_chunks);
    let index = Index { inputs, digest, items: items.len(), names, base, log: Vec::new() };
    let named: HashSet<&String> = index.chunks().collect();
    let obsolete = match &in_force {
        Some(in_force) => in_force.index.chunks().filter(|name| !named.contains(name)).cloned().collect(),
        None => Vec::new(),
    };
    Plan { index, creates, obsolete }
}
