//! Applying a committed (`applying`) change to the base set, then saying `ready`: the last step of a staged update,
//! which its writer runs, or anyone who finds the writer gone.

use std::collections::BTreeSet;

use super::chunks::chunks;
use super::read::read_raw;
use super::{MAX_ATTEMPTS, SetStore};
use crate::Error;
use crate::retry::{is_transient, retry_transient};
use crate::zookeeper::{MultiError, WriteOp, ZkError, ZooKeeper};
use proto::set_layout::{Header, State};

impl<Z: ZooKeeper> SetStore<Z> {
    /// Applies the change the header says is `applying` to the base set, then says `ready`. Idempotent, and safe to
    /// run by several processes at once: each request checks that the header still says `applying` this change.
    pub async fn finish_applying(&self, zk: &Z, tag: &str) -> Result<(), Error> {
        for _ in 0..MAX_ATTEMPTS {
            let read =
                retry_transient(zk, || read_raw(zk, &self.paths, None)).await.map_err(|e| self.zk_error("read", e))?;
            let Some((data, version)) = &read.header else { return Ok(()) };
            let header = match Header::parse(data) {
                Ok(header) if header.state == State::Applying(tag.to_owned()) => header,
                // Finished (or moved on) by someone else.
                _ => return Ok(()),
            };
            let Some((adds, removes)) = &read.change else { continue };
            let base: BTreeSet<&String> = read.children.iter().collect();
            let mut todo: Vec<(String, bool)> =
                removes.iter().filter(|name| base.contains(name)).map(|name| (self.paths.item(name), false)).collect();
            todo.extend(adds.iter().filter(|name| !base.contains(name)).map(|name| (self.paths.item(name), true)));
            if todo.is_empty() {
                let ready = header.with_state(State::Ready).render();
                let ops =
                    [WriteOp::SetData { path: &self.paths.node, data: ready.as_bytes(), version: Some(*version) }];
                match self.commit(zk, &ops).await {
                    Ok(()) => {
                        self.delete_tree(zk, &self.paths.change(tag)).await;
                        return Ok(());
                    }
                    Err(Err(err)) => return Err(err),
                    Err(Ok(_)) => continue,
                }
            }
            let paths: Vec<String> = todo.iter().map(|(path, _)| path.clone()).collect();
            // The chunks are consecutive slices of `paths`, which is `todo` in order: `done` is where one starts.
            let mut done = 0;
            for chunk in chunks(&paths, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(*version) }];
                for (path, (_, create)) in chunk.iter().zip(&todo[done..]) {
                    ops.push(if *create { self.create_op(path) } else { WriteOp::Delete { path, version: None } });
                }
                done += chunk.len();
                match zk.multi_write(&ops).await {
                    Ok(_) => {}
                    // The header moved on (someone finished it), or another applier raced us, or the reply was lost:
                    // read again.
                    Err(MultiError { error, .. })
                        if is_transient(&error)
                            || matches!(error, ZkError::NodeExists | ZkError::NoNode | ZkError::BadVersion) =>
                    {
                        break;
                    }
                    Err(MultiError { error, .. }) => return Err(self.zk_error("multi", error)),
                }
            }
        }
        Err(self.too_busy())
    }
}
