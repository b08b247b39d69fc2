//! Changing the items' weights: a new weight table is written under a fresh tag (and its writer's lease), then put in
//! force by one conditional write of the header, which names it; what of the table it replaces the new one does not
//! share is deleted after. The new table writes only the chunks the table in force lacks ([`table`](super::table)).
//!
//! A table is never changed once written, and a reader reads the header first, so no reader ever mixes two tables. A
//! writer that stops before its commit leaves nodes that no table in force names and whose lease is gone: the next
//! weight writer deletes them.

use std::collections::{BTreeMap, BTreeSet};

use super::{Attempts, Retry, SetStore, SharedSetVersion, table};
use crate::retry::retry_transient;
use crate::zookeeper::{Mode, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item, weighted::Weight};
use proto::chunked;
use proto::set_layout::{self as layout, Committed, State, TableRef};

/// Chunks created per `multi` (each at most [`chunked::CHUNK_BYTES`]).
const CREATES_PER_MULTI: usize = 4;

/// The weight table a new one replaces: the one the header names, and its chunks as read.
#[derive(Clone, Copy, Default)]
pub(super) struct Replaced<'a> {
    pub index: Option<&'a TableRef>,
    pub table: Option<&'a layout::Table>,
}

impl<'a> Replaced<'a> {
    /// The table in force of `current` (if it names one).
    pub fn of(current: &'a Committed) -> Self {
        Replaced { index: current.header.weights.as_ref(), table: current.table.as_ref() }
    }
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// Gives each listed item its weight (`None`: back to 1), all at once: one new version of the set.
    pub async fn change_weights(&self, changes: Vec<(Item, Option<Weight>)>) -> Result<SharedSetVersion, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        self.change_weights_as(&zk, &token, &changes).await
    }

    async fn change_weights_as(
        &self,
        zk: &Z,
        token: &str,
        changes: &[(Item, Option<Weight>)],
    ) -> Result<SharedSetVersion, Error> {
        let mut attempts = Attempts::default();
        loop {
            let current = self.settled(zk, &mut attempts, &[]).await?;
            let mut weights = current.weights.clone();
            for (item, weight) in changes {
                if current.items.binary_search(item).is_err() {
                    return Err(Error::InvalidItem {
                        item: item.to_string(),
                        reason: "is not in the shared set, so it has no weight to set".into(),
                    });
                }
                match weight {
                    Some(weight) => weights.insert(item.clone(), weight.clone()),
                    None => weights.remove(item),
                };
            }
            if weights == current.weights {
                return Ok(SharedSetVersion::of(current));
            }
            match self.write_weights(zk, &current, &weights, token).await {
                Ok(()) => {
                    let mut after = SharedSetVersion::of(current);
                    after.version += 1;
                    after.weights = weights;
                    return Ok(after);
                }
                Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                Err(Err(err)) => return Err(err),
            }
        }
    }

    /// Writes `weights` as a new table under our lease, and commits it with the header's next version (conditional on
    /// the one read). The table it replaces goes after a commit, ours after a failed one.
    async fn write_weights(
        &self,
        zk: &Z,
        current: &Committed,
        weights: &BTreeMap<Item, Weight>,
        token: &str,
    ) -> Result<(), Result<Retry, Error>> {
        self.collect_tables(zk).await;
        let written = self.write_table(zk, current, weights).await?;
        let mut next = current.header.next(current.header.kind, State::Ready, token).recording(&[], &[]);
        next.weights = written.table.clone();
        let data = next.render();
        let ops =
            [WriteOp::SetData { path: &self.paths.node, data: data.as_bytes(), version: Some(current.header_version) }];
        let outcome = self.commit_marked(zk, &ops, token).await;
        self.after_table(zk, &outcome, &written, current).await;
        outcome
    }

    /// Writes `weights` (the set's weights without those of items an update removes, or that it finished) as a new
    /// table under a fresh tag and our lease, for the update's commit to put in force (naming `table`);
    /// [`after_table`](SetStore::after_table) cleans up after the commit.
    pub(super) async fn write_table(
        &self,
        zk: &Z,
        current: &Committed,
        weights: &BTreeMap<Item, Weight>,
    ) -> Result<WrittenTable, Result<Retry, Error>> {
        self.write_table_replacing(zk, Replaced::of(current), weights).await
    }

    /// [`write_table`](SetStore::write_table) in place of the table `replaced` (none: no set yet).
    pub(super) async fn write_table_replacing(
        &self,
        zk: &Z,
        replaced: Replaced<'_>,
        weights: &BTreeMap<Item, Weight>,
    ) -> Result<WrittenTable, Result<Retry, Error>> {
        let tag = layout::token(zk.random());
        let plan = table::plan(&tag, weights, self.chunk, replaced.table);
        if plan.names.len() > chunked::MAX_CHUNKS {
            return Err(Err(Error::InvalidConfig {
                field: "weights",
                reason: format!("a weight table of {} chunks is more than {}", plan.names.len(), chunked::MAX_CHUNKS),
            }));
        }
        let mut written = WrittenTable { tag, table: None, created: Vec::new(), names: plan.names };
        if written.names.is_empty() {
            return Ok(written);
        }
        for dir in [&self.paths.weights, &self.paths.writers] {
            retry_transient(zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| Err(self.zk_error("mkdir", e)))?;
        }
        let outcome = self.create_table(zk, &mut written, plan.creates).await;
        if let Err(failed) = &outcome {
            // Nothing committed: ours go (a lost create reads as `Moved` here, never as unknown).
            let failed = match failed {
                Ok(_) => Err(Ok(Retry::Moved)),
                Err(err) => Err(Err(err.clone())),
            };
            self.after_table_replacing(zk, &failed, &written, replaced).await;
        }
        outcome.map(|()| written)
    }

    /// Creates our lease, the new chunks, then the index: a reader that finds the index finds every chunk it names.
    async fn create_table(
        &self,
        zk: &Z,
        written: &mut WrittenTable,
        creates: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Result<Retry, Error>> {
        let lease = self.paths.lease(&written.tag);
        self.write(zk, &[WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls }]).await?;
        for group in creates.chunks(CREATES_PER_MULTI) {
            let paths: Vec<String> = group.iter().map(|(name, _)| self.paths.table_chunk(name)).collect();
            let ops: Vec<WriteOp<'_>> =
                paths.iter().zip(group).map(|(path, (_, data))| self.create_data_op(path, data)).collect();
            // Noted first: a failed `multi` may have landed, and the clean-up deletes what does not exist.
            written.created.extend(group.iter().map(|(name, _)| name.clone()));
            self.write(zk, &ops).await?;
        }
        let (index, data) =
            (self.paths.table(&written.tag), layout::render_index(written.names.iter().map(String::as_str)));
        self.write(zk, &[self.create_data_op(&index, data.as_bytes())]).await?;
        written.table = Some(TableRef { tag: written.tag.clone() });
        Ok(())
    }

    /// After the commit that was to put `written` in force instead of `current`'s table (its `outcome`): the
    /// replaced table's index and the chunks `written` does not share go if it landed; ours go if it did not (not
    /// when its outcome is unknown: the next writer's clean-up decides by the header). Our lease goes either way.
    pub(super) async fn after_table(
        &self,
        zk: &Z,
        outcome: &Result<(), Result<Retry, Error>>,
        written: &WrittenTable,
        current: &Committed,
    ) {
        self.after_table_replacing(zk, outcome, written, Replaced::of(current)).await;
    }

    /// [`after_table`](SetStore::after_table), for a table written in place of `replaced`.
    pub(super) async fn after_table_replacing(
        &self,
        zk: &Z,
        outcome: &Result<(), Result<Retry, Error>>,
        written: &WrittenTable,
        replaced: Replaced<'_>,
    ) {
        let unknown = matches!(outcome, Err(Ok(Retry::Unknown)) | Err(Err(Error::SharedSetOutcomeUnknown { .. })));
        if outcome.is_ok() {
            if let Some(old) = replaced.index {
                let kept: BTreeSet<&String> = written.names.iter().collect();
                let chunks = replaced.table.iter().flat_map(|table| &table.chunks).map(|chunk| &chunk.name);
                let mut gone: Vec<String> =
                    chunks.filter(|name| !kept.contains(name)).map(|name| self.paths.table_chunk(name)).collect();
                gone.push(self.paths.table(&old.tag));
                self.delete_nodes(zk, &gone).await;
            }
        } else if !unknown {
            let mut ours: Vec<String> = written.created.iter().map(|name| self.paths.table_chunk(name)).collect();
            ours.push(self.paths.table(&written.tag));
            self.delete_nodes(zk, &ours).await;
        }
        if !written.names.is_empty() {
            self.release_lease(zk, &written.tag).await;
        }
    }

    /// One `multi` of a table's writer: a lost reply or a node found (a retry of ours that landed) is a failed
    /// attempt, started over under a fresh tag.
    async fn write(&self, zk: &Z, ops: &[WriteOp<'_>]) -> Result<(), Result<Retry, Error>> {
        match zk.multi_write(ops).await {
            Ok(_) => Ok(()),
            Err(err) if crate::retry::is_transient(&err.error) => Err(Ok(Retry::Moved)),
            Err(err) if matches!(err.error, ZkError::NodeExists | ZkError::NoNode) => Err(Ok(Retry::Moved)),
            Err(err) => Err(Err(self.zk_error("multi create", err.error))),
        }
    }

    /// Deletes nodes under `item-weights`, a `multi` per group, one by one where a group fails (a node already gone).
    /// Best effort.
    async fn delete_nodes(&self, zk: &Z, paths: &[String]) {
        for group in paths.chunks(self.chunk.max(1)) {
            let ops: Vec<WriteOp<'_>> = group.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
            if zk.multi_write(&ops).await.is_err() {
                for path in group {
                    let _ = zk.delete(path, None).await;
                }
            }
        }
    }

    /// Deletes what no table in force names and no live lease covers under `item-weights`: the nodes of a writer that
    /// stopped before its commit, or of a clean-up that did not finish. A table with a live lease may be about to be
    /// named: never touched. Best effort.
    pub(super) async fn collect_tables(&self, zk: &Z) {
        let names = match zk.list_children(&self.paths.weights).await {
            Ok(names) if !names.is_empty() => names,
            _ => return,
        };
        let tags: BTreeSet<&str> = names.iter().map(|name| chunked::tag_of(name)).collect();
        let named = |header: layout::Header| header.weights.map(|table| table.tag);
        let Some((in_force, abandoned)) =
            self.abandoned_of(zk, tags.iter().map(|t| (*t).to_owned()).collect(), named).await
        else {
            return;
        };
        // The chunks the table in force names (written by it or by tables before it) stay.
        let mut kept = BTreeSet::new();
        if let Some(tag) = &in_force {
            match zk.get_data(&self.paths.table(tag)).await.map(|(data, _)| layout::parse_index(&data)) {
                Ok(Ok(chunks)) => kept.extend(chunks),
                // Gone (replaced since), unreadable or unanswered: nothing is known to be free.
                _ => return,
            }
        }
        let abandoned: BTreeSet<String> = abandoned.into_iter().collect();
        let (mut chunks, mut indexes) = (Vec::new(), Vec::new());
        for name in names {
            if abandoned.contains(chunked::tag_of(&name)) && !kept.contains(&name) {
                match name.contains('-') {
                    true => chunks.push(self.paths.table_chunk(&name)),
                    false => indexes.push(self.paths.table(&name)),
                }
            }
        }
        chunks.append(&mut indexes);
        self.delete_nodes(zk, &chunks).await;
    }
}

/// A table written for a commit: its tag (and lease), the reference a header names (`None`: no weights, nothing
/// written), the chunks it created and every chunk its index names.
pub(super) struct WrittenTable {
    pub tag: String,
    pub table: Option<TableRef>,
    created: Vec<String>,
    names: Vec<String>,
}

impl WrittenTable {
    /// No table: every item weighs 1 (after it, the one it replaces goes whole).
    pub fn none() -> Self {
        WrittenTable { tag: String::new(), table: None, created: Vec::new(), names: Vec::new() }
    }
}
