//! A new weight table's chunks: cut where the items say, and shared with the table in force.
//!
//! A chunk ends before an item whose name hashes to 0 modulo the chunk size (a content-defined cut, as rsync's and
//! restic's), or where it would pass [`CHUNK_BYTES`]. So a change of some weights, or of the items, changes
//! only the chunks that hold them, and cuts nowhere else. The new table's index names the unchanged chunks' nodes,
//! already written for the table in force, and only the changed chunks are written. One weight changed at 100,000
//! weighted items costs the writer one chunk and an index instead of about 100 chunks. Each member then reads the
//! index and that one chunk: it keeps the chunks it has read ([`SetCache`](super::cache::SetCache)).

use std::collections::{BTreeMap, HashMap};

use crate::{Item, weighted::Weight};
use proto::chunked::{CHUNK_BYTES, chunk_name, cuts_before};
use proto::set_layout::Table;

/// A table to write under a tag: the chunk names its index lists, in order, and the chunks to create for it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub names: Vec<String>,
    /// The chunks the table in force does not have: name (under the new tag) and data.
    pub creates: Vec<(String, Vec<u8>)>,
}

/// The table giving `weights` under `tag`, sharing every chunk of `in_force` that it would write byte for byte the
/// same; chunks of about `per_chunk` lines. Empty when there are no weights (no table).
pub(crate) fn plan(tag: &str, weights: &BTreeMap<Item, Weight>, per_chunk: usize, in_force: Option<&Table>) -> Plan {
    let shared: HashMap<&[u8], &str> =
        in_force.iter().flat_map(|table| &table.chunks).map(|chunk| (&*chunk.data, chunk.name.as_str())).collect();
    let mut plan = Plan { names: Vec::new(), creates: Vec::new() };
    for (k, data) in render_chunks(weights, per_chunk).into_iter().enumerate() {
        match shared.get(data.as_slice()) {
            Some(name) => plan.names.push((*name).to_owned()),
            None => {
                let name = chunk_name(tag, k);
                plan.names.push(name.clone());
                plan.creates.push((name, data));
            }
        }
    }
    plan
}

/// `<item>\t<weight>\n` lines in item order, cut into chunks: before an item whose name [cuts](cuts_before), or
/// where a chunk would pass [`CHUNK_BYTES`] (a line is never split).
pub(crate) fn render_chunks(weights: &BTreeMap<Item, Weight>, per_chunk: usize) -> Vec<Vec<u8>> {
    let (mut chunks, mut chunk) = (Vec::new(), Vec::new());
    for (item, weight) in weights {
        let name = item.node_name();
        let line = format!("{name}\t{weight}\n");
        if !chunk.is_empty() && (cuts_before(&name, per_chunk) || chunk.len() + line.len() > CHUNK_BYTES) {
            chunks.push(std::mem::take(&mut chunk));
        }
        chunk.extend_from_slice(line.as_bytes());
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use proto::set_layout::Chunk;

    const TAG: &str = "00000000000000aa";
    const NEXT: &str = "00000000000000bb";

    fn weights(range: std::ops::Range<i64>, bump: Option<i64>) -> BTreeMap<Item, Weight> {
        range.map(|i| (Item::from(i), Weight::new(if Some(i) == bump { 99 } else { i as u64 % 5 + 1 }))).collect()
    }

    fn written(plan: &Plan) -> Table {
        let data: HashMap<&str, &[u8]> = plan.creates.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        let chunks = plan.names.iter().map(|name| Chunk::new(name.clone(), Arc::from(data[name.as_str()])));
        Table { chunks: chunks.collect() }
    }

    #[test]
    fn chunks_hold_every_line_once_in_order_and_cut_near_the_chunk_size() {
        let all = weights(0..20_000, None);
        let chunks = render_chunks(&all, 100);
        let text: String = chunks.iter().map(|c| String::from_utf8(c.clone()).unwrap()).collect();
        let expected: String = all.iter().map(|(i, w)| format!("{}\t{w}\n", i.node_name())).collect();
        assert_eq!(text, expected);
        // About one cut per 100 lines.
        assert!((140..=270).contains(&chunks.len()), "{} chunks", chunks.len());
        assert!(render_chunks(&BTreeMap::new(), 100).is_empty());
        // A chunk never passes the limit: 20,000 lines with one cut allowed per 2^60 names.
        let big = render_chunks(&all, 1 << 60);
        assert!(big.len() > 1 && big.iter().all(|c| c.len() <= CHUNK_BYTES));
    }

    #[test]
    fn a_changed_weight_rewrites_only_its_chunk_and_an_added_item_only_its_own() {
        let first = plan(TAG, &weights(0..20_000, None), 100, None);
        assert_eq!(first.names.len(), first.creates.len(), "a first table writes every chunk");
        assert!(first.names.iter().all(|name| name.starts_with(TAG)));
        let in_force = written(&first);

        let bumped = plan(NEXT, &weights(0..20_000, Some(12_345)), 100, Some(&in_force));
        assert_eq!(bumped.names.len(), first.names.len());
        assert_eq!(bumped.creates.len(), 1, "one chunk changed");
        assert!(bumped.creates[0].0.starts_with(NEXT));
        assert!(String::from_utf8_lossy(&bumped.creates[0].1).contains("12345\t99\n"));

        let mut grown = weights(0..20_000, None);
        grown.insert(Item::from(7_777_777), Weight::new(3));
        grown.remove(&Item::from(42));
        let changed = plan(NEXT, &grown, 100, Some(&in_force));
        assert!(changed.creates.len() <= 2, "{} chunks rewritten", changed.creates.len());
        assert_eq!(plan(NEXT, &weights(0..20_000, None), 100, Some(&in_force)).creates, Vec::new());
        assert_eq!(plan(NEXT, &BTreeMap::new(), 100, Some(&in_force)), Plan { names: vec![], creates: vec![] });
    }
}
