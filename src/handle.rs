//! The workings of a partitioner's handle, on any session: reading the published snapshot (never a stale one once
//! the task is gone), sending commands to the task, and fenced checkpoint writers. [`SetPartitioner`] is this on
//! zookeeper-client's `Client`; the simulation runs it on its model, so the calls users make are the calls the
//! simulation checks.
//!
//! [`SetPartitioner`]: crate::SetPartitioner

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::checkpoint::{Checkpoints, Writer};
use crate::zookeeper::ZooKeeper;
use crate::{Error, Item, PartitionState, Snapshot, checkpoint::Checkpoint};

/// Requests from handles to the task; each carries the channel its answer goes back on.
#[derive(Debug)]
pub(crate) enum Command {
    ReleaseSet(oneshot::Sender<Result<(), Error>>),
    Finish(oneshot::Sender<()>),
}

/// A cheap, cloneable handle on one partitioner's task.
#[derive(Debug)]
pub(crate) struct Handle<Z> {
    commands: mpsc::UnboundedSender<Command>,
    snapshot: watch::Receiver<Snapshot>,
    /// Checkpoint reads and fenced writes, on the member's session while its task runs.
    checkpoints: Arc<Checkpoints<Z>>,
}

impl<Z> Clone for Handle<Z> {
    fn clone(&self) -> Self {
        Handle {
            commands: self.commands.clone(),
            snapshot: self.snapshot.clone(),
            checkpoints: self.checkpoints.clone(),
        }
    }
}

impl<Z: ZooKeeper> Handle<Z> {
    pub fn new(
        commands: mpsc::UnboundedSender<Command>,
        snapshot: watch::Receiver<Snapshot>,
        checkpoints: Arc<Checkpoints<Z>>,
    ) -> Self {
        Handle { commands, snapshot, checkpoints }
    }

    /// Reads the latest snapshot. If the task is gone without publishing `Failure` (its runtime shut down), the
    /// snapshot says `Failure` with [`Error::Stopped`]: a stale `Acquired` must never outlive the task.
    pub fn read<R>(&self, read: impl FnOnce(&Snapshot) -> R) -> R {
        let snapshot = self.snapshot.borrow();
        let task_gone = self.snapshot.has_changed().is_err();
        if task_gone && snapshot.state != PartitionState::Failure {
            let mut stopped = snapshot.clone();
            stopped.stop(Error::Stopped);
            return read(&stopped);
        }
        read(&snapshot)
    }

    /// A receiver of the published snapshots.
    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.snapshot.clone()
    }

    /// See [`SetPartitioner::checkpoint_writer`](crate::SetPartitioner::checkpoint_writer).
    pub fn checkpoint_writer(&self, item: &Item) -> Result<Writer<Z>, Error> {
        self.read(|snapshot| {
            let index = snapshot.items.binary_search(item).ok();
            let held = index.and_then(|index| Some((snapshot.lock_nodes.get(index)?, snapshot.tokens.get(index)?)));
            match held {
                Some((node, &token)) if !node.is_empty() => {
                    Ok(self.checkpoints.writer(item, node, token, snapshot.member.clone()))
                }
                _ => Err(Error::NotHeld { item: item.node_name(), path: self.checkpoints.path().to_owned() }),
            }
        })
    }

    /// See [`SetPartitioner::load_checkpoint`](crate::SetPartitioner::load_checkpoint).
    pub async fn load_checkpoint(&self, item: &Item) -> Result<Option<Checkpoint>, Error> {
        self.checkpoints.load(item).await
    }

    /// See [`SetPartitioner::release_set`](crate::SetPartitioner::release_set).
    pub fn release_set(&self) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let (ack, done) = oneshot::channel();
        let sent = self.commands.send(Command::ReleaseSet(ack));
        let snapshot = self.snapshot.clone();
        async move {
            let cause = || snapshot.borrow().cause.clone().unwrap_or(Error::Stopped);
            if sent.is_err() {
                return Err(cause());
            }
            done.await.unwrap_or_else(|_| Err(cause()))
        }
    }

    /// See [`SetPartitioner::finish`](crate::SetPartitioner::finish).
    pub fn finish(&self) -> impl Future<Output = ()> + Send + 'static {
        let (ack, done) = oneshot::channel();
        let sent = self.commands.send(Command::Finish(ack)).is_ok();
        async move {
            if sent {
                let _ = done.await;
            }
        }
    }
}
