//! Changing the items' weights: a new weight table is written whole under a fresh tag (and its writer's lease), then
//! put in force by one conditional write of the header, which names it; the table it replaces is deleted after.
//!
//! A table is never changed once written, and a reader reads the header first, so no reader ever mixes two tables. A
//! writer that stops before its commit leaves a table that no header names and whose lease is gone: the next weight
//! writer deletes it.

use std::collections::BTreeMap;

use super::layout::{self, Committed, SetView, State, TableRef};
use super::{MAX_ATTEMPTS, Retry, SharedItems, SharedSet, backoff};
use crate::error::retry_transient;
use crate::zookeeper::{Mode, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item, Weight};

/// Chunks created per `multi` (each at most [`layout::TABLE_CHUNK_BYTES`]).
const CREATES_PER_MULTI: usize = 4;

impl<Z: ZooKeeper> SharedSet<Z> {
    /// Gives each listed item its weight (`None`: back to 1), all at once: one new version of the set.
    pub async fn change_weights(&self, changes: Vec<(Item, Option<Weight>)>) -> Result<SharedItems, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        let mut uncertain = false;
        let result = self.change_weights_as(&zk, &token, &mut uncertain, &changes).await;
        match result {
            Err(Error::SessionLost { .. } | Error::Stopped) if uncertain => {
                Err(Error::ItemSetOutcomeUnknown { path: self.paths.node.clone() })
            }
            result => result,
        }
    }

    async fn change_weights_as(
        &self,
        zk: &Z,
        token: &str,
        uncertain: &mut bool,
        changes: &[(Item, Option<Weight>)],
    ) -> Result<SharedItems, Error> {
        for attempt in 0..MAX_ATTEMPTS {
            backoff(zk, attempt).await;
            let current = match self.view(zk).await? {
                SetView::Committed(committed) => *committed,
                SetView::Missing { .. } => return Err(Error::ItemSetMissing { path: self.paths.node.clone() }),
                SetView::Unreadable(reason) => {
                    return Err(Error::ItemSetCorrupt { path: self.paths.node.clone(), reason });
                }
                SetView::Torn => continue,
            };
            if *uncertain && current.header.landed(token) {
                return Ok(SharedItems::of(current));
            }
            if let Some(unfinished) = &current.unfinished {
                self.settle(zk, unfinished, &[]).await?;
                continue;
            }
            let mut weights = current.weights.clone();
            for (item, weight) in changes {
                if current.items.binary_search(item).is_err() {
                    return Err(Error::InvalidItem {
                        item: item.to_string(),
                        reason: "is not in the shared item set, so it has no weight to set".into(),
                    });
                }
                match weight {
                    Some(weight) => weights.insert(item.clone(), weight.clone()),
                    None => weights.remove(item),
                };
            }
            if weights == current.weights {
                return Ok(SharedItems::of(current));
            }
            match self.write_weights(zk, &current, &weights, token).await {
                Ok(()) => {
                    let mut after = SharedItems::of(current);
                    after.version += 1;
                    after.weights = weights;
                    return Ok(after);
                }
                Err(Ok(Retry::Moved)) => {}
                Err(Ok(Retry::Unknown)) => *uncertain = true,
                Err(Err(err)) => return Err(err),
            }
        }
        Err(self.too_busy())
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
        for dir in [&self.paths.weights, &self.paths.writers] {
            retry_transient(zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| Err(self.zk_error("mkdir", e)))?;
        }
        self.collect_tables(zk).await;
        let tag = layout::token(zk.random());
        let chunks = if weights.is_empty() { Vec::new() } else { layout::render_table(weights, self.chunk) };
        if chunks.len() > layout::MAX_CHUNKS {
            return Err(Err(Error::InvalidConfig {
                field: "weights",
                reason: format!("a weight table of {} chunks is more than {}", chunks.len(), layout::MAX_CHUNKS),
            }));
        }
        let outcome = match self.write_table(zk, &tag, &chunks).await {
            Ok(()) => {
                let mut next = current.header.next(current.header.kind, State::Ready, token).recording(&[], &[]);
                next.weights = (!chunks.is_empty()).then(|| TableRef { tag: tag.clone(), chunks: chunks.len() });
                let data = next.render();
                let ops = [WriteOp::SetData {
                    path: &self.paths.node,
                    data: data.as_bytes(),
                    version: Some(current.header_version),
                }];
                self.commit(zk, &ops).await
            }
            Err(err) => Err(err),
        };
        match &outcome {
            Ok(()) => {
                if let Some(old) = &current.header.weights {
                    self.delete_table(zk, &old.tag).await;
                }
            }
            // Lost with the connection: it may be in force; the lease goes, and the next writer's clean-up (or ours,
            // at the next attempt) deletes it if no header names it.
            Err(Ok(Retry::Unknown)) => {}
            Err(_) => self.delete_table(zk, &tag).await,
        }
        self.release_lease(zk, &tag).await;
        outcome
    }

    /// Writes `weights` (the set's weights without those of items an update removes) as a new table under a fresh
    /// tag and our lease, for the update's commit to put in force. Returns the tag and the table for the header to
    /// name (`None`: no weights left); [`after_pruning`](SharedSet::after_pruning) cleans up after the commit.
    pub(super) async fn prune_weights(
        &self,
        zk: &Z,
        weights: &BTreeMap<Item, Weight>,
    ) -> Result<(String, Option<TableRef>), Result<Retry, Error>> {
        for dir in [&self.paths.weights, &self.paths.writers] {
            retry_transient(zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| Err(self.zk_error("mkdir", e)))?;
        }
        let tag = layout::token(zk.random());
        let chunks = if weights.is_empty() { Vec::new() } else { layout::render_table(weights, self.chunk) };
        if let Err(err) = self.write_table(zk, &tag, &chunks).await {
            self.delete_table(zk, &tag).await;
            self.release_lease(zk, &tag).await;
            return Err(err);
        }
        let table = (!chunks.is_empty()).then(|| TableRef { tag: tag.clone(), chunks: chunks.len() });
        Ok((tag, table))
    }

    /// After an update that pruned the weights: the table replaced goes if the update landed, ours if it failed (not
    /// when its outcome is unknown: the next writer's clean-up decides by the header), and our lease goes.
    pub(super) async fn after_pruning(&self, zk: &Z, landed: bool, unknown: bool, tag: &str, old: Option<TableRef>) {
        if landed {
            if let Some(old) = old {
                self.delete_table(zk, &old.tag).await;
            }
        } else if !unknown {
            self.delete_table(zk, tag).await;
        }
        self.release_lease(zk, tag).await;
    }

    /// Creates our lease, the table's node and its chunks.
    async fn write_table(&self, zk: &Z, tag: &str, chunks: &[Vec<u8>]) -> Result<(), Result<Retry, Error>> {
        let (lease, table) = (self.paths.lease(tag), self.paths.table(tag));
        let ops = [
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
            self.create_op(&table),
        ];
        self.write(zk, &ops).await?;
        let paths: Vec<String> = (0..chunks.len()).map(|k| self.paths.table_chunk(tag, k)).collect();
        for (paths, chunks) in paths.chunks(CREATES_PER_MULTI).zip(chunks.chunks(CREATES_PER_MULTI)) {
            let ops: Vec<WriteOp<'_>> =
                paths.iter().zip(chunks).map(|(path, data)| self.create_data_op(path, data)).collect();
            self.write(zk, &ops).await?;
        }
        Ok(())
    }

    /// One `multi` of a table's writer: a lost reply or a node found (a retry of ours that landed) is a failed
    /// attempt, started over under a fresh tag.
    async fn write(&self, zk: &Z, ops: &[WriteOp<'_>]) -> Result<(), Result<Retry, Error>> {
        match zk.multi_write(ops).await {
            Ok(_) => Ok(()),
            Err(err) if crate::error::is_transient(&err.error) => Err(Ok(Retry::Moved)),
            Err(err) if matches!(err.error, ZkError::NodeExists | ZkError::NoNode) => Err(Ok(Retry::Moved)),
            Err(err) => Err(Err(self.zk_error("multi create", err.error))),
        }
    }

    /// Deletes a weight table, chunks first. Best effort.
    async fn delete_table(&self, zk: &Z, tag: &str) {
        let table = self.paths.table(tag);
        if let Ok(names) = zk.list_children(&table).await {
            let paths: Vec<String> = names.iter().map(|name| format!("{table}/{name}")).collect();
            for group in paths.chunks(self.chunk.max(1)) {
                let ops: Vec<WriteOp<'_>> = group.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
                let _ = zk.multi_write(&ops).await;
            }
        }
        let _ = zk.delete(&table, None).await;
    }

    /// Deletes the weight tables that no header names and whose writer's lease is gone (a writer that stopped before
    /// its commit, or a deletion that did not finish). A table with a live lease may be about to be named: never
    /// touched. Best effort.
    pub(super) async fn collect_tables(&self, zk: &Z) {
        let named = |header: layout::Header| header.weights.map(|table| table.tag);
        for tag in self.abandoned(zk, &self.paths.weights, named).await {
            self.delete_table(zk, &tag).await;
        }
    }
}
