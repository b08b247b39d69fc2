//! The write requests every step of the protocol shares: one `multi` headed by a conditional write of the header
//! and what its failure means ([`Retry`]), the creates of persistent nodes, and the best-effort deletion of a
//! writer's lease and of a staged change.

use super::chunks::{chunks, paths_of};
use super::{Retry, SharedSet};
use crate::Error;
use crate::error::is_transient;
use crate::error::retry_transient;
use crate::zookeeper::{Mode, MultiError, WriteOp, ZkError, ZooKeeper};

impl<Z: ZooKeeper> SharedSet<Z> {
    /// Sends one write `multi` whose first operation is on the header: `Moved` if that failed (another writer), or a
    /// later one failed with `NodeExists` or `NoNode` (the children were edited by hand); `Unknown` if lost with the
    /// connection.
    pub(super) async fn commit(&self, zk: &Z, ops: &[WriteOp<'_>]) -> Result<(), Result<Retry, Error>> {
        match zk.multi_write(ops).await {
            Ok(_) => Ok(()),
            Err(MultiError { index: None, error }) if is_transient(&error) => Err(Ok(Retry::Unknown)),
            Err(MultiError { index: Some(_), error: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode }) => {
                Err(Ok(Retry::Moved))
            }
            Err(MultiError { error, .. }) => Err(Err(self.zk_error("multi", error))),
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
        for dir in ["add", "remove"] {
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
