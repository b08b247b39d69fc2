//! A member's memory of the shared set between reads: its last listing, to which it applies the changes the header
//! records ([`delta`](super::delta)), and the last weight table it read.
//!
//! A member that has read version `v` and is told of a change reads the header (with its watch, as it always does)
//! and, when the header records every version after `v`, applies them to the items it has instead of listing every
//! item again: a burst of finishes costs each member a header read per version, not a read of the whole set. It also
//! keeps the weight table it read: the same table is not read again, and a new one only for the chunks it does not
//! share with it (`zk-partitioner`'s `shared_set::table`).
//! The header's stat makes this exact. A client sees its node's `cversion` count every child created and deleted, and
//! `numChildren` count the children, so the recorded changes must account for both moves since `v` exactly; any
//! change to the base set that is not recorded (a staged update's apply, a set deleted and created again at the same
//! version, a hand-made node) shows as a mismatch, and the member lists the items as before.
//!
//! What it keeps is kept parsed: the listing as items of the set's kind ([`Listed`], changed in place by each recorded
//! change), and each chunk with its lines parsed at first use ([`Chunk`](super::Chunk)). So a version that
//! changes one weight of 100,000 costs a member one chunk to parse and one pass over the items, not 100,000 names
//! and lines to parse again (BENCHMARKS.md, "A member's CPU per version of the set").

use std::sync::Arc;

use super::delta::Delta;
use super::{Header, Listed, State, Table, TableRef};

/// What a read of the set's node says of its children: the two fields of its stat that the cache reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// How many times a child was created or deleted (ZooKeeper's `cversion`).
    pub cversion: i32,
    /// How many children it has.
    pub num_children: i32,
}

/// What a reader keeps between reads of the shared set: a member's last listing of the base set (from a read of a
/// `ready` header, with the stat it was read at), and the last weight table read (a writer keeps only that).
#[derive(Default)]
pub struct SetCache {
    listing: Option<Listing>,
    /// The weight table last read: a table is never changed, only replaced under a fresh tag, and its chunks are
    /// never changed either.
    table: Option<(TableRef, Table)>,
    /// Weight chunks read since [`take_chunks_read`](SetCache::take_chunks_read) last asked.
    chunks_read: u64,
    /// Remembers weight tables, not listings (a writer's: it lists the set at every update anyway).
    tables_only: bool,
}

/// A summary: the listing's version and size, the table's tag and chunk count (not their data).
impl std::fmt::Debug for SetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let listing = self.listing.as_ref().map(|l| (l.version, l.listed.items.len()));
        let table = self.table.as_ref().map(|(table, chunks)| (&table.tag, chunks.chunks.len()));
        f.debug_struct("SetCache").field("listing", &listing).field("table", &table).finish_non_exhaustive()
    }
}

struct Listing {
    version: u64,
    cversion: i32,
    num_children: i32,
    /// Parsed once, at the listing, and changed in place by the recorded changes after it.
    listed: Arc<Listed>,
}

impl SetCache {
    /// A cache of weight tables alone, for a writer (`zk-partitioner`'s `SetStore`): its updates read the set's
    /// listing whole, but a table only for the chunks it does not have.
    pub fn tables_only() -> Self {
        SetCache { tables_only: true, ..SetCache::default() }
    }

    /// The cache behind its lock. Nothing panics while it is held (set inserts and removes, clones): it is never
    /// poisoned.
    pub fn locked(cache: &std::sync::Mutex<SetCache>) -> std::sync::MutexGuard<'_, SetCache> {
        cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers `children`, listed in one read with `header` and its node's `stat` (only a `ready` header's: the base
    /// set is then the set in force), and returns them parsed (for [`RawRead::listed`](super::RawRead)).
    pub fn remember(&mut self, header: &Header, stat: &Stat, children: &[String]) -> Option<Arc<Listed>> {
        self.listing = (header.state == State::Ready && !self.tables_only).then(|| Listing {
            version: header.version,
            cversion: stat.cversion,
            num_children: stat.num_children,
            listed: Arc::new(Listed::parse(header.kind, children.iter().cloned())),
        });
        self.listing.as_ref().map(|listing| listing.listed.clone())
    }

    /// The base set's children as of `header` (read with its node's `stat`), from the remembered listing and the
    /// changes the header records, if they account exactly for every child created and deleted since; `None` if the
    /// items must be listed. What it returns is remembered for the next read.
    pub fn bridge(&mut self, header: &Header, stat: &Stat) -> Option<Arc<Listed>> {
        let listing = self.listing.as_mut()?;
        if header.state != State::Ready || header.version < listing.version || header.kind != listing.listed.kind {
            return None;
        }
        let wanted = listing.version + 1..=header.version;
        let deltas: Vec<&Delta> = header.deltas.iter().filter(|d| wanted.contains(&d.version)).collect();
        let contiguous = deltas.iter().map(|d| d.version).eq(wanted.clone());
        let (added, removed) =
            deltas.iter().fold((0i64, 0i64), |(a, r), d| (a + d.added.len() as i64, r + d.removed.len() as i64));
        let created_and_deleted = i64::from(stat.cversion) - i64::from(listing.cversion);
        let grown = i64::from(stat.num_children) - i64::from(listing.num_children);
        if !contiguous || created_and_deleted != added + removed || grown != added - removed {
            return None;
        }
        for delta in deltas.iter().filter(|d| !d.added.is_empty() || !d.removed.is_empty()) {
            // Each change applies as its `multi` did: the removed were there, the added were not. (With the counts
            // matching this cannot fail; if it did, the listing is forgotten and the items listed.) Changed in place
            // unless the last read still holds the listing.
            if !Arc::make_mut(&mut listing.listed).apply(&delta.removed, &delta.added) {
                self.listing = None;
                return None;
            }
        }
        (listing.version, listing.cversion, listing.num_children) = (header.version, stat.cversion, stat.num_children);
        Some(listing.listed.clone())
    }

    /// The weight table last read, and its reference (a clone shares the chunks' data).
    pub fn table(&self) -> Option<(TableRef, Table)> {
        self.table.clone()
    }

    /// Remembers the weight table just read, for which `read` chunks were read (the others were remembered).
    pub fn remember_table(&mut self, table: TableRef, chunks: Table, read: usize) {
        self.table = Some((table, chunks));
        self.chunks_read += read as u64;
    }

    /// The weight chunks read since the last call.
    pub fn take_chunks_read(&mut self) -> u64 {
        std::mem::take(&mut self.chunks_read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set_layout::Kind;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    fn stat(cversion: i32, num_children: i32) -> Stat {
        Stat { cversion, num_children }
    }

    fn header(version: u64, state: State) -> Header {
        Header { kind: Kind::Str, version, state, log: Vec::new(), weights: None, lineage: false, deltas: Vec::new() }
    }

    /// The header of `version`, recording each of `changes` (added, removed) for the versions up to it.
    fn recorded(version: u64, changes: &[(&[&str], &[&str])]) -> Header {
        let first = version + 1 - changes.len() as u64;
        let mut h = header(first - 1, State::Ready);
        for (added, removed) in changes {
            h = h.next(Kind::Str, State::Ready, "00000000000000aa").recording(&names(added), &names(removed));
        }
        assert_eq!(h.version, version);
        Header::parse(h.render().as_bytes()).expect("a header that records changes parses back")
    }

    #[test]
    fn a_member_bridges_recorded_changes_and_lists_whenever_they_do_not_account_for_the_stat() {
        let listed = names(&["a", "b", "c"]);
        let fresh = || {
            let mut cache = SetCache::default();
            cache.remember(&header(5, State::Ready), &stat(10, 3), &listed);
            cache
        };
        // v6 finishes `a` into `a1` and `a2`; v7 closes something (no item moves); v8 adds `d`.
        let changes: [(&[&str], &[&str]); 3] = [(&["a1", "a2"], &["a"]), (&[], &[]), (&["d"], &[])];
        let h8 = recorded(8, &changes);
        // cversion counts creates and deletes: 3 creates and 1 delete, 4 more; 2 more children.
        let mut cache = fresh();
        let bridged = cache.bridge(&h8, &stat(14, 5)).expect("every change since v5 is recorded");
        // What listing the set now would give.
        assert_eq!(*bridged, Listed::parse(Kind::Str, names(&["d", "c", "b", "a2", "a1"])));
        // It remembers what it bridged to: the next version bridges from v8.
        let h9 = recorded(9, &[(&["a1", "a2"], &["a"]), (&[], &[]), (&["d"], &[]), (&[], &["b"])]);
        assert_eq!(cache.bridge(&h9, &stat(15, 4)).map(|c| c.items.len()), Some(4));
        // The same version again, unchanged: nothing to apply.
        assert_eq!(cache.bridge(&h9, &stat(15, 4)).map(|c| c.items.len()), Some(4));

        // A child made or deleted besides the recorded changes (by hand, a staged update's apply).
        assert_eq!(fresh().bridge(&h8, &stat(15, 6)), None, "one create more");
        assert_eq!(fresh().bridge(&h8, &stat(15, 4)), None, "one delete more");
        // The set deleted and created again, back at the same version with other items.
        assert_eq!(fresh().bridge(&header(5, State::Ready), &stat(17, 3)), None);
        // A version not recorded (a staged update's), or no longer kept.
        assert_eq!(fresh().bridge(&recorded(8, &changes[1..]), &stat(14, 5)), None);
        // An older version, a change under way, a member that never listed.
        assert_eq!(fresh().bridge(&header(4, State::Ready), &stat(10, 3)), None);
        let staging = Header { state: State::Staging("00000000000000cc".into()), ..h8.clone() };
        assert_eq!(fresh().bridge(&staging, &stat(14, 5)), None);
        assert_eq!(SetCache::default().bridge(&h8, &stat(14, 5)), None);
        // A listing under a change under way is not remembered.
        let mut cache = fresh();
        cache.remember(&staging, &stat(14, 5), &listed);
        assert_eq!(cache.bridge(&h8, &stat(14, 5)), None);
        // Changes that do not apply (counts that match by chance): the listing is forgotten.
        let mut cache = fresh();
        let wrong = recorded(6, &[(&["b"], &["z"])]);
        assert_eq!(cache.bridge(&wrong, &stat(12, 3)), None);
        assert_eq!(cache.bridge(&header(5, State::Ready), &stat(10, 3)), None, "forgotten");
    }

    #[test]
    fn a_weight_table_is_remembered_with_its_tag() {
        use crate::set_layout::Chunk;
        let mut cache = SetCache::default();
        assert_eq!(cache.table(), None);
        let table = TableRef { tag: "00000000000000aa".into() };
        let chunks = Table { chunks: vec![Chunk::new("00000000000000aa-0".into(), b"a\t2\n"[..].into())] };
        cache.remember_table(table.clone(), chunks.clone(), 1);
        assert_eq!(cache.table(), Some((table, chunks)));
        assert_eq!((cache.take_chunks_read(), cache.take_chunks_read()), (1, 0));
    }
}
