//! An update found under way: waiting for its writer while the writer's lease lives and, once the lease is gone,
//! undoing (`staging`, `creating`) or finishing (`applying`) it, the one recovery that writers and the party's first
//! member run ([`recover`]); and the clean-up of staged changes that stopped writers left behind.

use std::time::Duration;

use futures::future::{Either, select};

use super::chunks::{chunks, paths_of};
use super::read::read_raw;
use super::{MAX_ATTEMPTS, SetStore};
use crate::Error;
use crate::retry::retry_transient;
use crate::zookeeper::{MultiError, ReadOp, ReadResult, WriteOp, ZkError, ZooKeeper};
use proto::set_layout::{Header, Recovery, SetView, Settle, State, Unfinished};

/// How long an update waits for another writer's update under way (while that writer's lease lives) before giving up.
const MAX_WAIT: Duration = Duration::from_secs(60);

impl<Z: ZooKeeper> SetStore<Z> {
    /// Deals with an update under way: waits while its writer's lease lives (up to [`MAX_WAIT`]); once the writer is
    /// gone, undoes a `staging` or `creating` change and finishes an `applying` one (or a `deleting` set). A change
    /// of ours (one of the tags in `own`), found after the reply to its intent was lost, is undone at once.
    pub(super) async fn settle(&self, zk: &Z, unfinished: &Unfinished, own: &[String]) -> Result<(), Error> {
        match unfinished.settle(own) {
            Settle::WaitForWriter => self.wait_for_writer(zk, unfinished).await,
            Settle::Recover => recover(zk, self, unfinished).await,
        }
    }

    /// Waits until the header changes or the writer's lease goes, up to [`MAX_WAIT`].
    async fn wait_for_writer(&self, zk: &Z, unfinished: &Unfinished) -> Result<(), Error> {
        let Some(tag) = unfinished.state.change() else { return Ok(()) };
        // Reads lost with the connection are sent again (until the session ends), as every read of the set's is.
        let header = match retry_transient(zk, || zk.get_and_watch_data(&self.paths.node)).await {
            Ok((_, _, watch)) => watch,
            Err(ZkError::NoNode) => return Ok(()),
            Err(err) => return Err(self.zk_error("get_data", err)),
        };
        let lease_path = self.paths.lease(tag);
        let lease = match retry_transient(zk, || zk.check_and_watch_stat(&lease_path)).await {
            Ok((None, _)) => return Ok(()),
            Ok((Some(_), watch)) => watch,
            Err(err) => return Err(self.zk_error("exists", err)),
        };
        let timeout = std::pin::pin!(zk.sleep(MAX_WAIT));
        match select(select(header, lease), timeout).await {
            Either::Left(_) => Ok(()),
            Either::Right(_) => Err(Error::SharedSetConflict {
                path: self.paths.node.clone(),
                reason: format!("another writer's {unfinished} has been under way for over {MAX_WAIT:?}; try again"),
            }),
        }
    }

    /// Deletes staged changes left behind: those whose writer's lease is gone and that the header does not name (a
    /// writer that stopped before its intent landed or after it was undone, or a clean-up that did not finish). A
    /// change with a live lease may be about to be named: never touched. Best effort.
    pub(super) async fn collect_garbage(&self, zk: &Z) {
        let named = |header: Header| header.state.change().map(str::to_owned);
        for tag in self.abandoned(zk, &self.paths.changes, named).await {
            self.delete_tree(zk, &self.paths.change(tag.as_str())).await;
        }
        // And the checkpoints an import that stopped before its commit wrote.
        self.collect_generations(zk).await;
    }

    /// The tags under `dir` (staged changes) that the header does not name (`named` says which one it names) and whose
    /// writer's lease is gone. Best effort: nothing on a failed read.
    pub(super) async fn abandoned(&self, zk: &Z, dir: &str, named: impl Fn(Header) -> Option<String>) -> Vec<String> {
        let Ok(tags) = zk.list_children(dir).await else { return Vec::new() };
        if tags.is_empty() {
            return tags;
        }
        self.abandoned_of(zk, tags, named).await.map(|(_, abandoned)| abandoned).unwrap_or_default()
    }

    /// Of `tags` (listed before this call), the tag the header names (`named` says which) and those it does not name
    /// whose writer's lease is gone. `None` on a failed read.
    pub(super) async fn abandoned_of(
        &self,
        zk: &Z,
        tags: Vec<String>,
        named: impl Fn(Header) -> Option<String>,
    ) -> Option<(Option<String>, Vec<String>)> {
        // Listed first, then the header and the leases in one read: a tag named after this read has a live lease.
        let leases: Vec<String> = tags.iter().map(|tag| self.paths.lease(tag)).collect();
        let mut ops = vec![ReadOp::Data(&self.paths.node)];
        ops.extend(leases.iter().map(|lease| ReadOp::Data(lease)));
        let results = zk.multi_read(&ops).await.ok()?;
        let mut results = results.into_iter();
        let named = match results.next() {
            Some(ReadResult::Data(data, _)) => Header::parse(&data).ok().and_then(named),
            _ => return None,
        };
        let abandoned = tags
            .into_iter()
            .zip(results)
            .filter(|(tag, lease)| {
                matches!(lease, ReadResult::Failed(ZkError::NoNode)) && named.as_deref() != Some(tag.as_str())
            })
            .map(|(tag, _)| tag)
            .collect();
        Some((named, abandoned))
    }
}

/// Undoes or finishes an update whose writer is gone (or our own intent, found after its reply was lost): the one
/// recovery both writers and the party's first member run. Then the staged changes stopped writers left behind are
/// deleted (a writer that died has often left one), so that they do not wait for the next large update.
pub(crate) async fn recover<Z: ZooKeeper>(zk: &Z, set: &SetStore<Z>, unfinished: &Unfinished) -> Result<(), Error> {
    let recovered = recover_change(zk, set, unfinished).await;
    if recovered.is_ok() {
        set.collect_garbage(zk).await;
    }
    recovered
}

async fn recover_change<Z: ZooKeeper>(zk: &Z, set: &SetStore<Z>, unfinished: &Unfinished) -> Result<(), Error> {
    let view = set.view(zk).await?;
    let (header, version) = match &view {
        SetView::Committed(c) => (c.header.clone(), c.header_version),
        SetView::Missing { unfinished: Some(_) } => {
            // Creating or deleting: the header is all we need.
            let read = read_raw(zk, &set.paths, None).await.map_err(|e| set.zk_error("read", e))?;
            let Some((data, version)) = read.header else { return Ok(()) };
            match Header::parse(&data) {
                Ok(header) => (header, version),
                Err(_) => return Ok(()),
            }
        }
        _ => return Ok(()),
    };
    // What to do is the protocol's ([`Unfinished::recovery`]); doing it is this function's.
    match unfinished.recovery(&header.state) {
        Recovery::Nothing => Ok(()),
        Recovery::Undo(tag) => {
            let tag = tag.as_str();
            let ready = header.with_state(State::Ready).render();
            let ops = [WriteOp::SetData { path: &set.paths.node, data: ready.as_bytes(), version: Some(version) }];
            match set.commit(zk, &ops).await {
                Ok(()) => {
                    tracing::info!(node = %set.paths.node, change = %tag, "undid an update whose writer is gone");
                    set.delete_tree(zk, &set.paths.change(tag)).await;
                    set.release_lease(zk, tag).await;
                    Ok(())
                }
                Err(Err(err)) => Err(err),
                Err(Ok(_)) => Ok(()),
            }
        }
        Recovery::Finish(tag) => {
            tracing::info!(node = %set.paths.node, change = %tag, "finishing an update whose writer is gone");
            set.finish_applying(zk, &tag).await
        }
        Recovery::UndoCreation { tag, say_deleting } => {
            // The node stays `absent`, so its version keeps growing: a late deleter's requests, checked against the
            // `deleting` version, can never land in a set created afterwards. The next writer creates afresh.
            let tag = tag.as_str();
            let mut version = version;
            if say_deleting {
                let deleting = header.with_state(State::Deleting(tag.to_owned())).render();
                let ops =
                    [WriteOp::SetData { path: &set.paths.node, data: deleting.as_bytes(), version: Some(version) }];
                match set.commit(zk, &ops).await {
                    Ok(()) => version += 1,
                    Err(Err(err)) => return Err(err),
                    Err(Ok(_)) => return Ok(()),
                }
            }
            let mut emptied = false;
            for _ in 0..MAX_ATTEMPTS {
                let children = retry_transient(zk, || zk.list_children(&set.paths.node))
                    .await
                    .map_err(|e| set.zk_error("get_children", e))?;
                if children.is_empty() {
                    emptied = true;
                    break;
                }
                let paths = paths_of(&set.paths.node, &children);
                for chunk in chunks(&paths, set.chunk) {
                    let mut ops = vec![WriteOp::Check { path: &set.paths.node, version: Some(version) }];
                    ops.extend(chunk.iter().map(|path| WriteOp::Delete { path, version: None }));
                    // The header moved on: someone else finished this, and more. Otherwise done, or lost, or
                    // raced by another deleter: the next listing tells.
                    if let Err(MultiError { index: Some(0), .. }) = zk.multi_write(&ops).await {
                        return Ok(());
                    }
                }
            }
            if !emptied {
                return Err(set.too_busy());
            }
            let absent = Header {
                kind: header.kind,
                version: 0,
                state: State::Absent,
                log: Vec::new(),
                weights: None,
                lineage: false,
                deltas: Vec::new(),
            }
            .render();
            let ops = [WriteOp::SetData { path: &set.paths.node, data: absent.as_bytes(), version: Some(version) }];
            match set.commit(zk, &ops).await {
                Ok(()) => {
                    tracing::info!(node = %set.paths.node, change = %tag, "undid a creation whose writer is gone");
                    set.release_lease(zk, tag).await;
                    Ok(())
                }
                Err(Err(err)) => Err(err),
                // Done by someone else, or lost: whoever reads next sees.
                Err(Ok(_)) => Ok(()),
            }
        }
    }
}
