//! Exporting: the set, its lineage, its weights and every checkpoint, read at one version of the set.
//!
//! The set is read settled (an update under way is waited for, or finished), then the lineage nodes, then the
//! checkpoints of the generation in force; then the header and `<path>/checkpoints` are read again, in one read.
//! If either moved, everything is read again. So a token holds one version of the set, with its lineage and
//! weights, and checkpoints that were each in force at some moment of that version: members running meanwhile may
//! save newer ones (a backup), but an import or a reset can never be half in it.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;

use super::{CheckpointRecord, Exported, FORMAT, FinishedRecord, LineageRecord, Progress};
use crate::checkpoint_store::generation::{self, Generation};
use crate::retry::{is_transient, retry_transient};
use crate::shared_set::{Attempts, SetStore};
use crate::zookeeper::{ReadOp, ReadResult, ZkError, ZooKeeper};
use crate::{Error, Item};
use proto::set_layout::Kind;

/// Checkpoint nodes read per `multi` (a checkpoint is meant to be small: an offset, a cursor)...
const CHECKPOINTS_PER_READ: usize = 200;
/// ... and such reads in flight at once.
const READS_IN_FLIGHT: usize = 8;

impl<Z: ZooKeeper> SetStore<Z> {
    /// See [`SharedSet::export`](crate::SharedSet::export).
    pub async fn export(&self) -> Result<Progress, Error> {
        let zk = self.zk()?;
        let mut attempts = Attempts::default();
        while attempts.another(&zk).await {
            let current = self.settled(&zk, &mut attempts, &[]).await?;
            let names: Vec<String> = self.lineage_names(&zk).await?.into_iter().collect();
            let Some(entries) = self.entries(&zk, &names).await? else { continue };
            // A node gone between the listing and the read: the set moved on (a retirement).
            let Some(entries) =
                entries.into_iter().map(|(name, entry)| Some((name, entry?.0))).collect::<Option<BTreeMap<_, _>>>()
            else {
                continue;
            };
            let generation = self.read_generation(&zk).await?;
            let Some(checkpoints) = self.read_checkpoints(&zk, &generation).await? else { continue };
            if !self.unmoved(&zk, current.header_version, &generation).await? {
                continue;
            }
            let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            let lineage = entries
                .into_iter()
                .map(|(name, entry)| {
                    let record = LineageRecord {
                        parents: entry.parents,
                        children: entry.children,
                        closed: entry.closed,
                        finished: entry.finished.map(|f| FinishedRecord { member: f.member, token: f.token }),
                    };
                    (name, record)
                })
                .collect();
            return Ok(Progress {
                format: FORMAT.to_owned(),
                exported: Exported { path: self.paths.base.clone(), set_version: current.version, at_ms },
                kind: match current.header.kind {
                    Kind::Int => "int",
                    Kind::Str => "str",
                }
                .to_owned(),
                items: current.items.iter().map(Item::node_name).collect(),
                weights: current.weights.iter().map(|(item, weight)| (item.node_name(), weight.to_string())).collect(),
                lineage,
                checkpoints,
            });
        }
        Err(Error::SharedSetConflict {
            path: self.paths.node.clone(),
            reason: "the set kept changing while its progress was read; try again".into(),
        })
    }

    /// The checkpoints in force, without creating `<path>/checkpoints` (an export writes nothing).
    pub(in crate::shared_set) async fn read_generation(&self, zk: &Z) -> Result<Generation, Error> {
        let pointer = generation::pointer(&self.paths.base);
        match retry_transient(zk, || zk.get_data(&pointer)).await {
            Ok((data, stat)) => generation::parse(&self.paths.base, &data, stat.version)
                .map_err(|reason| Error::CheckpointCorrupt { item: String::new(), path: pointer, reason }),
            // No member ever joined: the first generation, empty (version -1: no node).
            Err(ZkError::NoNode) => Ok(Generation { dir: pointer, tag: None, version: -1 }),
            Err(err) => Err(Error::zk("get_data", pointer.as_str(), err)),
        }
    }

    /// Every checkpoint of `generation`, by item, as tokens hold them: `None` when the read must start over (a
    /// node went between the listing and its read).
    async fn read_checkpoints(
        &self,
        zk: &Z,
        generation: &Generation,
    ) -> Result<Option<BTreeMap<String, CheckpointRecord>>, Error> {
        let names = match retry_transient(zk, || zk.list_children(&generation.dir)).await {
            Ok(names) => names,
            Err(ZkError::NoNode) => return Ok(Some(BTreeMap::new())),
            Err(err) => return Err(Error::zk("get_children", generation.dir.as_str(), err)),
        };
        // The first generation's directory is also `<path>/checkpoints`: every child of it is a checkpoint.
        let paths: Vec<String> = names.iter().map(|name| format!("{}/{name}", generation.dir)).collect();
        let batches: Vec<(&[String], &[String])> =
            names.chunks(CHECKPOINTS_PER_READ).zip(paths.chunks(CHECKPOINTS_PER_READ)).collect();
        let mut found = BTreeMap::new();
        for wave in batches.chunks(READS_IN_FLIGHT) {
            let reads = wave.iter().map(|(names, paths)| async move {
                let ops: Vec<ReadOp<'_>> = paths.iter().map(|path| ReadOp::Data(path)).collect();
                let results = retry_transient(zk, || zk.multi_read(&ops)).await;
                (*names, results)
            });
            for (names, results) in futures::future::join_all(reads).await {
                let results = results.map_err(|e| Error::zk("multi read", generation.dir.as_str(), e))?;
                for (name, result) in names.iter().zip(results) {
                    match result {
                        ReadResult::Data(blob, stat) => {
                            let record = record(&blob, stat.mtime).map_err(|reason| Error::CheckpointCorrupt {
                                item: name.clone(),
                                path: format!("{}/{name}", generation.dir),
                                reason: reason.to_owned(),
                            })?;
                            found.insert(name.clone(), record);
                        }
                        ReadResult::Failed(ZkError::NoNode) => return Ok(None),
                        ReadResult::Failed(err) if is_transient(&err) => return Ok(None),
                        ReadResult::Failed(err) => return Err(Error::zk("get_data", generation.dir.as_str(), err)),
                        ReadResult::Children(_) => return Ok(None),
                    }
                }
            }
        }
        Ok(Some(found))
    }

    /// Whether the header is still at data version `header` and `<path>/checkpoints` at `generation`'s: one read.
    async fn unmoved(&self, zk: &Z, header: i32, generation: &Generation) -> Result<bool, Error> {
        let pointer = generation::pointer(&self.paths.base);
        let ops = [ReadOp::Data(&self.paths.node), ReadOp::Data(&pointer)];
        let results = retry_transient(zk, || zk.multi_read(&ops)).await.map_err(|e| self.zk_error("multi read", e))?;
        let version = |result: Option<&ReadResult>| match result {
            Some(ReadResult::Data(_, stat)) => Some(stat.version),
            Some(ReadResult::Failed(ZkError::NoNode)) => Some(-1),
            _ => None,
        };
        Ok(version(results.first()) == Some(header) && version(results.get(1)) == Some(generation.version))
    }
}

/// A checkpoint node's data (and modification time) as a token holds it.
fn record(blob: &[u8], mtime: i64) -> Result<CheckpointRecord, &'static str> {
    let (token, writer, data) = crate::checkpoint_store::parse_blob(blob)?;
    Ok(CheckpointRecord {
        data: base64::engine::general_purpose::STANDARD.encode(data),
        writer,
        token,
        saved_ms: u64::try_from(mtime).unwrap_or(0),
    })
}
