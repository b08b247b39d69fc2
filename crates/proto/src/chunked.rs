//! The one way this crate stores a record too large for a node: an index node naming chunk nodes, each chunk written
//! once under the tag of the record that first wrote it (`<tag>-<k>`) and shared by later records that hold the same
//! bytes. The shared set's weight tables (`shared_set/table.rs`) and the placement record (`placement/`) are both
//! stored this way; their indexes' formats differ, their chunks' names, limits and cuts are the ones here.

use std::collections::BTreeSet;

use crate::error::shown;
use crate::hash::{FNV_OFFSET, GOLDEN_GAMMA, finish, fnv1a};

/// The most chunks an index may name.
pub const MAX_CHUNKS: usize = 4096;

/// The most bytes of one chunk: a read of many chunks in one `multi` stays far below ZooKeeper's 1 MB packet limit.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// The name of chunk `k` first written by the record `tag`.
pub fn chunk_name(tag: &str, k: usize) -> String {
    format!("{tag}-{k}")
}

/// The tag of the record that wrote a node: an index's own name, a chunk's before the dash.
pub fn tag_of(name: &str) -> &str {
    name.split_once('-').map_or(name, |(tag, _)| tag)
}

/// A record's tag (or an update's token): 16 lowercase hex digits.
pub fn is_tag(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a chunk's name, `<tag>-<k>` (`k` in decimal, without leading zeros).
fn is_chunk_name(name: &str) -> bool {
    name.split_once('-').is_some_and(|(tag, k)| is_tag(tag) && k.parse::<usize>().is_ok_and(|n| n.to_string() == k))
}

/// Checks the chunks an index names: at least `at_least`, at most [`MAX_CHUNKS`], each once, each `<tag>-<k>`.
pub fn check_names<'a>(names: impl IntoIterator<Item = &'a String>, at_least: usize) -> Result<(), String> {
    let names: Vec<&String> = names.into_iter().collect();
    let distinct: BTreeSet<&&String> = names.iter().collect();
    if names.len() < at_least || names.len() > MAX_CHUNKS || distinct.len() != names.len() {
        return Err(format!(
            "its index names {} chunks ({} distinct): {at_least} to {MAX_CHUNKS}, each once, are allowed",
            names.len(),
            distinct.len()
        ));
    }
    match names.iter().find(|name| !is_chunk_name(name)) {
        Some(bad) => Err(format!("its index names a chunk {}, not <tag>-<k>", shown(bad))),
        None => Ok(()),
    }
}

/// Whether a content-defined chunk starts at the item named `name`, for about one name in `per_chunk`: the same on
/// every machine and in every version (FNV-1a of the name, then SplitMix64's finalizer, so that its low bits are
/// even). Cut this way (as rsync and restic cut), a change of some lines changes only the chunks that hold them.
pub fn cuts_before(name: &str, per_chunk: usize) -> bool {
    let fnv = fnv1a(FNV_OFFSET, name.as_bytes());
    finish(fnv.wrapping_add(GOLDEN_GAMMA)).is_multiple_of(per_chunk.max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_are_a_tag_a_dash_and_a_plain_decimal() {
        let tag = "00000000000000cc";
        let ok: Vec<String> = (0..3).map(|k| chunk_name(tag, k)).collect();
        assert_eq!(check_names(&ok, 1), Ok(()));
        assert_eq!(tag_of(&ok[2]), tag);
        for bad in ["00000000000000cc-01", "00000000000000CC-1", "0cc-1", "00000000000000cc", "00000000000000cc-x"] {
            let names = vec![bad.to_owned()];
            assert!(check_names(&names, 1).is_err_and(|e| e.contains("not <tag>-<k>")), "{bad}");
        }
        assert!(check_names(&[ok[0].clone(), ok[0].clone()], 1).is_err(), "named twice");
        assert!(check_names(&[], 1).is_err() && check_names(&[], 0).is_ok());
        let too_many: Vec<String> = (0..=MAX_CHUNKS).map(|k| chunk_name(tag, k)).collect();
        assert!(check_names(&too_many, 0).is_err());
    }
}
