//! A member's memory of the shared set between reads: its last listing, to which it applies the changes the header
//! records ([`delta`](super::delta)), and the last weight table it read.
//!
//! A member that has read version `v` and is told of a change reads the header (with its watch, as it always does)
//! and, when the header records every version after `v`, applies them to the items it has instead of listing every
//! item again: a burst of finishes costs each member a header read per version, not a read of the whole set.
//! The header's stat makes this exact. A client sees its node's `cversion` count every child created and deleted, and
//! `numChildren` count the children, so the recorded changes must account for both moves since `v` exactly; any
//! change to the base set that is not recorded (a staged update's apply, a set deleted and created again at the same
//! version, a hand-made node) shows as a mismatch, and the member lists the items as before.

use std::collections::BTreeSet;

use super::delta::Delta;
use super::layout::{Header, State, TableRef};
use crate::zookeeper::Stat;

/// A member's last listing of the base set, from a read of a `ready` header, with the stat it was read at.
#[derive(Debug, Default)]
pub(crate) struct SetCache {
    listing: Option<Listing>,
    /// The weight table last read: a table is never changed, only replaced under a fresh tag.
    table: Option<(TableRef, Vec<Vec<u8>>)>,
}

#[derive(Debug)]
struct Listing {
    version: u64,
    cversion: i32,
    num_children: i32,
    children: BTreeSet<String>,
}

impl SetCache {
    /// Remembers `children`, listed in one read with `header` and its node's `stat` (only a `ready` header's: the base
    /// set is then the set in force).
    pub fn remember(&mut self, header: &Header, stat: &Stat, children: &[String]) {
        self.listing = (header.state == State::Ready).then(|| Listing {
            version: header.version,
            cversion: stat.cversion,
            num_children: stat.num_children,
            children: children.iter().cloned().collect(),
        });
    }

    /// The base set's children as of `header` (read with its node's `stat`), from the remembered listing and the
    /// changes the header records, if they account exactly for every child created and deleted since; `None` if the
    /// items must be listed. What it returns is remembered for the next read.
    pub fn bridge(&mut self, header: &Header, stat: &Stat) -> Option<Vec<String>> {
        let listing = self.listing.as_mut()?;
        if header.state != State::Ready || header.version < listing.version {
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
        for delta in deltas {
            // Each change applies as its `multi` did: the removed were there, the added were not. (With the counts
            // matching this cannot fail; if it did, the listing is forgotten and the items listed.)
            let applies = delta.removed.iter().all(|name| listing.children.remove(name))
                && delta.added.iter().all(|name| listing.children.insert(name.clone()));
            if !applies {
                self.listing = None;
                return None;
            }
        }
        (listing.version, listing.cversion, listing.num_children) = (header.version, stat.cversion, stat.num_children);
        Some(listing.children.iter().cloned().collect())
    }

    /// The chunks of `table` if they were the last read.
    pub fn table(&self, table: &TableRef) -> Option<Vec<Vec<u8>>> {
        self.table.as_ref().filter(|(t, _)| t == table).map(|(_, chunks)| chunks.clone())
    }

    pub fn remember_table(&mut self, table: TableRef, chunks: Vec<Vec<u8>>) {
        self.table = Some((table, chunks));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item_set::layout::Kind;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    fn stat(cversion: i32, num_children: i32) -> Stat {
        Stat {
            czxid: 1,
            mzxid: 1,
            pzxid: 1,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children,
        }
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
        let mut children = cache.bridge(&h8, &stat(14, 5)).expect("every change since v5 is recorded");
        children.sort();
        assert_eq!(children, names(&["a1", "a2", "b", "c", "d"]));
        // It remembers what it bridged to: the next version bridges from v8.
        let h9 = recorded(9, &[(&["a1", "a2"], &["a"]), (&[], &[]), (&["d"], &[]), (&[], &["b"])]);
        assert_eq!(cache.bridge(&h9, &stat(15, 4)).map(|c| c.len()), Some(4));
        // The same version again, unchanged: nothing to apply.
        assert_eq!(cache.bridge(&h9, &stat(15, 4)).map(|c| c.len()), Some(4));

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
    fn a_weight_table_is_remembered_by_its_tag() {
        let mut cache = SetCache::default();
        let table = TableRef { tag: "00000000000000aa".into(), chunks: 1 };
        assert_eq!(cache.table(&table), None);
        cache.remember_table(table.clone(), vec![b"a\t2\n".to_vec()]);
        assert_eq!(cache.table(&table), Some(vec![b"a\t2\n".to_vec()]));
        assert_eq!(cache.table(&TableRef { tag: "00000000000000bb".into(), chunks: 1 }), None);
    }
}
