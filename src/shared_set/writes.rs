//! The write requests every step of the protocol shares: one `multi` headed by a conditional write of the header
//! and what its failure means ([`Retry`]); the commit of an update, which carries its outcome marker so that a lost
//! reply is resolved exactly ([`SetStore::write_marked`]); the creates of persistent nodes; and the best-effort
//! deletion of a writer's lease and of a staged change.

use super::chunks::{chunks, paths_of};
use super::{Retry, SetStore};
use crate::Error;
use crate::retry::{is_transient, retry_transient, session_end};
use crate::zookeeper::{Mode, MultiError, WriteOp, ZkError, ZooKeeper};

impl<Z: ZooKeeper> SetStore<Z> {
    /// Sends the `multi` that commits our update (`ops`), with the update's outcome marker created last
    /// ([`SetPaths::outcome`](proto::set_layout::SetPaths::outcome)), and says exactly what happened to it:
    /// - `Ok(Ok(()))`: it landed (its reply came, or it was lost and the marker is there);
    /// - `Ok(Err(_))`: it did not land: the `multi`'s own failure, or a lost reply (`index: None`) whose marker is not
    ///   there, so that the caller may read the set again and retry without ever applying its change twice;
    /// - `Err(_)`: [`Error::SharedSetOutcomeUnknown`] when the session ended before the marker could be looked for
    ///   (the marker, an ephemeral node, went with it), or another error of that look.
    ///
    /// The marker's parent is created the first time a `multi` finds it missing (nothing of that `multi` applied).
    pub(super) async fn write_marked(
        &self,
        zk: &Z,
        ops: &[WriteOp<'_>],
        token: &str,
    ) -> Result<Result<(), MultiError>, Error> {
        let marker = self.paths.outcome(token);
        let mut all = ops.to_vec();
        all.push(WriteOp::Create { path: &marker, data: b"", mode: Mode::Ephemeral, acls: &self.acls });
        let last = all.len() - 1;
        let mut parent_made = false;
        loop {
            match zk.multi_write(&all).await {
                Ok(_) => {
                    self.forget_marker(zk, &marker);
                    return Ok(Ok(()));
                }
                Err(MultiError { index: Some(index), error: ZkError::NoNode }) if index == last && !parent_made => {
                    retry_transient(zk, || zk.mkdir(&self.paths.outcomes, &self.acls))
                        .await
                        .map_err(|e| self.zk_error("mkdir", e))?;
                    parent_made = true;
                }
                Err(MultiError { index: None, error }) if is_transient(&error) => {
                    #[cfg(test)]
                    if proto::sabotage::breaks(proto::sabotage::Sabotage::LostRepliesUnresolved) {
                        return Ok(Err(MultiError { index: None, error }));
                    }
                    return match self.marker_found(zk, &marker, token).await? {
                        true => Ok(Ok(())),
                        false => Ok(Err(MultiError { index: None, error })),
                    };
                }
                Err(failed) => return Ok(Err(failed)),
            }
        }
    }

    /// Whether our update's marker exists, after a `sync` (so that a server this session reconnected to has seen
    /// whatever the leader committed before); a marker found is deleted.
    async fn marker_found(&self, zk: &Z, marker: &str, token: &str) -> Result<bool, Error> {
        let found = match retry_transient(zk, || zk.sync(&self.paths.node)).await {
            Ok(()) => retry_transient(zk, || zk.check_stat(marker)).await,
            Err(err) => Err(err),
        };
        match found {
            Ok(stat) => {
                if stat.is_some() {
                    self.forget_marker(zk, marker);
                }
                Ok(stat.is_some())
            }
            Err(err) if session_end(&err).is_some() => {
                Err(Error::SharedSetOutcomeUnknown { path: self.paths.node.clone(), token: token.to_owned() })
            }
            Err(err) => Err(self.zk_error("exists", err)),
        }
    }

    /// Deletes our marker once the outcome is known: sent now, its reply not awaited (a failed delete leaves an
    /// ephemeral node that goes with the session, and a later update of ours uses another token).
    fn forget_marker(&self, zk: &Z, marker: &str) {
        drop(zk.delete(marker, None));
    }

    /// [`write_marked`](SetStore::write_marked) for a `multi` headed by a conditional write of the header, its
    /// failures read as [`commit`](SetStore::commit) reads them; `Retry::Lost` for a lost reply that did not land.
    pub(super) async fn commit_marked(
        &self,
        zk: &Z,
        ops: &[WriteOp<'_>],
        token: &str,
    ) -> Result<(), Result<Retry, Error>> {
        match self.write_marked(zk, ops, token).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(MultiError { index: None, error })) if is_transient(&error) => Err(Ok(Retry::Lost)),
            Ok(Err(failed)) => Err(self.commit_failure(failed)),
            Err(err) => Err(Err(err)),
        }
    }

    /// Sends one write `multi` whose first operation is on the header: `Moved` if that failed (another writer), or a
    /// later one failed with `NodeExists` or `NoNode` (the children were edited by hand); `Unknown` if lost with the
    /// connection.
    pub(super) async fn commit(&self, zk: &Z, ops: &[WriteOp<'_>]) -> Result<(), Result<Retry, Error>> {
        zk.multi_write(ops).await.map(drop).map_err(|failed| self.commit_failure(failed))
    }

    /// What a failed `multi` headed by a conditional write of the header means.
    fn commit_failure(&self, failed: MultiError) -> Result<Retry, Error> {
        match failed {
            MultiError { index: None, error } if is_transient(&error) => Ok(Retry::Unknown),
            MultiError { index: Some(_), error: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode } => {
                Ok(Retry::Moved)
            }
            MultiError { error, .. } => Err(self.zk_error("multi", error)),
        }
    }

    pub(super) fn create_op<'a>(&'a self, path: &'a str) -> WriteOp<'a> {
        self.create_data_op(path, b"")
    }

    pub(super) fn create_data_op<'a>(&'a self, path: &'a str, data: &'a [u8]) -> WriteOp<'a> {
        WriteOp::Create { path, data, mode: Mode::Persistent, acls: &self.acls }
    }

    /// Deletes a writer's lease, retrying while the connection is lost (once the session ends, it is gone anyway).
    pub(super) async fn release_lease(&self, zk: &Z, tag: &str) {
        let lease = self.paths.lease(tag);
        if let Err(err) = retry_transient(zk, || zk.delete(&lease, None)).await
            && err != ZkError::NoNode
        {
            tracing::debug!(%err, %lease, "could not delete a lease; it goes with the session");
        }
    }

    /// Deletes a staged change's nodes, leaves first. Best effort.
    pub(super) async fn delete_tree(&self, zk: &Z, change: &str) {
        // (`lineage`: an import's staged lineage nodes.)
        for dir in ["add", "remove", "lineage"] {
            let dir = format!("{change}/{dir}");
            if let Ok(names) = zk.list_children(&dir).await {
                let paths = paths_of(&dir, &names);
                for chunk in chunks(&paths, self.chunk) {
                    let ops: Vec<WriteOp<'_>> =
                        chunk.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
                    let _ = zk.multi_write(&ops).await;
                }
            }
            let _ = zk.delete(&dir, None).await;
        }
        let _ = zk.delete(change, None).await;
    }
}
