//! The user's handle, [`SetPartitioner`]: reads of the published snapshot, commands to the member's task,
//! checkpoints. Its [`Builder`](crate::Builder) is in `builder.rs`, the start-up in `startup.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::Client;

use crate::handle::Handle;
use crate::{
    Error, Item, PartitionState, SharedSet, Snapshot,
    checkpoint::{Checkpoint, CheckpointWriter},
};

/// A member of a party dividing a set of items with the others, kazoo's `SetPartitioner`.
///
/// A cheap handle (`Clone + Send + Sync`) on a background task that owns the ZooKeeper conversation. Reading the state
/// is synchronous; waiting is async. Dropping the last handle makes the task release every lock and leave the party,
/// as [`finish`](SetPartitioner::finish) does. The handle uses the member's session for
/// [checkpoints](SetPartitioner::checkpoint_writer) and the [shared set](SetPartitioner::shared_set) only while the task
/// runs: once it has ended (and deleted the member's nodes, or failed to), the handle no longer keeps the session
/// open, so a session whose nodes could not be deleted closes with the crate's last clone of the client (keep no
/// clone of your own for this to happen; a clone you keep is yours to drop).
///
/// # Examples
/// kazoo's worker loop, reading the state and waiting for each transition:
/// ```no_run
/// # async fn dox() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zk_partitioner::{PartitionState, SetPartitioner};
///
/// let client = zk_partitioner::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
/// let partitioner = SetPartitioner::builder(client, "/work_queues", ["queue-1", "queue-2", "queue-3"])
///     .build()
///     .await?;
/// let mut changes = partitioner.subscribe();
/// loop {
///     let state = changes.borrow_and_update().state;
///     match state {
///         PartitionState::Failure => return Err(partitioner.snapshot().cause.map_or_else(|| "failed".into(), Into::into)),
///         PartitionState::Release => partitioner.release_set().await?,
///         PartitionState::Acquired => {
///             for queue in partitioner.items() {
///                 // Work on `queue`, checking `partitioner.is_acquired()` between units of work.
///                 println!("working on {queue}");
///             }
///         }
///         PartitionState::Allocating => {}
///     }
///     changes.changed().await?; // sleep until the next transition
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct SetPartitioner {
    /// Snapshot reads, commands, checkpoints: the workings, shared with the simulation (`handle.rs`).
    handle: Handle<Client>,
    shared_set: Option<Arc<SharedSet>>,
}

impl fmt::Debug for SetPartitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = self.handle.subscribe();
        let snapshot = snapshot.borrow();
        f.debug_struct("SetPartitioner")
            .field("member", &snapshot.member)
            .field("state", &snapshot.state)
            .field("generation", &snapshot.generation)
            .finish_non_exhaustive()
    }
}

impl SetPartitioner {
    /// Wraps a started member's handle (see `startup::launch`). [`SetPartitioner::builder`] is in `builder.rs`.
    pub(crate) fn new(handle: Handle<Client>, shared_set: Option<Arc<SharedSet>>) -> Self {
        SetPartitioner { handle, shared_set }
    }

    /// Reads the latest snapshot (a `Failure` with [`Error::Stopped`] once the task is gone without publishing one).
    fn read<R>(&self, read: impl FnOnce(&Snapshot) -> R) -> R {
        self.handle.read(read)
    }

    /// The current state.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::PartitionState;
    ///
    /// match partitioner.state() {
    ///     PartitionState::Allocating => println!("waiting for the party to settle, or for locks"),
    ///     PartitionState::Acquired => println!("processing {:?}", partitioner.items()),
    ///     PartitionState::Release => partitioner.release_set().await?,
    ///     PartitionState::Failure => println!("failed: {:?}", partitioner.snapshot().cause),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn state(&self) -> PartitionState {
        self.read(|s| s.state)
    }

    /// Whether the state is [`PartitionState::Allocating`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    ///
    /// if partitioner.is_allocating() {
    ///     partitioner.wait_for_acquire(Duration::from_secs(30)).await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_allocating(&self) -> bool {
        self.state() == PartitionState::Allocating
    }

    /// Whether the state is [`PartitionState::Acquired`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// for item in partitioner.items() {
    ///     if !partitioner.is_acquired() {
    ///         break; // told to release: stop before the next unit of work
    ///     }
    ///     println!("working on {item}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_acquired(&self) -> bool {
        self.state() == PartitionState::Acquired
    }

    /// Whether the state is [`PartitionState::Release`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// if partitioner.is_release() {
    ///     // Stop processing first: the items are someone else's once released.
    ///     partitioner.release_set().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_release(&self) -> bool {
        self.state() == PartitionState::Release
    }

    /// Whether the state is [`PartitionState::Failure`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::Error;
    ///
    /// if partitioner.is_failed() {
    ///     // Terminal: build a new partitioner (on a new client if the session was lost).
    ///     return Err(partitioner.snapshot().cause.unwrap_or(Error::Stopped));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_failed(&self) -> bool {
        self.state() == PartitionState::Failure
    }

    /// The items this member owns and may process, sorted: empty unless the state is [`PartitionState::Acquired`]
    /// (kazoo hands out the last set in every state; this crate does not), or, under
    /// [`Rebalance::Incremental`](crate::Rebalance::Incremental), the items it keeps while the party changes.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// let items = partitioner.items();
    /// println!("{} items to process: {items:?}", items.len());
    /// # Ok(())
    /// # }
    /// ```
    pub fn items(&self) -> Vec<Item> {
        self.read(|s| s.items.to_vec())
    }

    /// A writer of `item`'s checkpoint, fenced by the lock node through which this member holds the item now: its
    /// saves succeed only while the member still holds the item through that node. See [`CheckpointWriter`], which
    /// explains why the fence holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `item` is not among [`items`](SetPartitioner::items) now.
    ///
    /// # Examples
    /// A task processing one item keeps its writer: once the item moves away, its saves fail, whether or not the
    /// task noticed.
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::Item;
    ///
    /// let item = Item::from("queue-1");
    /// let checkpoints = partitioner.checkpoint_writer(&item)?;
    /// let mut offset = match partitioner.load_checkpoint(&item).await? {
    ///     Some(checkpoint) => u64::from_be_bytes(checkpoint.data.try_into().unwrap_or_default()),
    ///     None => 0,
    /// };
    /// loop {
    ///     offset += 100; // process a hundred messages
    ///     checkpoints.save(&offset.to_be_bytes()).await?; // Err(CheckpointFenced) once the item has moved
    /// }
    /// # }
    /// ```
    pub fn checkpoint_writer(&self, item: &Item) -> Result<CheckpointWriter, Error> {
        self.handle.checkpoint_writer(item).map(CheckpointWriter)
    }

    /// Finishes `item`, a closed item this member holds and has drained: the same as
    /// `self.checkpoint_writer(item)?.finish_item(final_checkpoint)` (see [`CheckpointWriter::finish_item`]). The
    /// item leaves the shared set for good, and its children whose parents have all finished enter it (returned).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if `item` is not among [`items`](SetPartitioner::items) now, and those of
    /// [`CheckpointWriter::finish_item`].
    ///
    /// # Cancel safety
    /// As [`CheckpointWriter::finish_item`].
    pub async fn finish_item(&self, item: &Item, final_checkpoint: Option<&[u8]>) -> Result<Vec<Item>, Error> {
        self.checkpoint_writer(item)?.finish_item(final_checkpoint).await
    }

    /// Reads `item`'s checkpoint: the bytes last saved, the fencing token and member name of their writer, and when
    /// they were saved; `None` if no checkpoint was ever saved for the item.
    ///
    /// Any item can be read, held or not. Once this member holds the item, the read sees the last checkpoint any
    /// previous owner saved: every save of theirs succeeded before their lock node went, and this member's reads
    /// come after it saw that lock node gone.
    ///
    /// # Errors
    /// - [`Error::CheckpointCorrupt`] if the node holds data this crate did not write;
    /// - [`Error::ZooKeeper`] or [`Error::SessionLost`] if the read fails.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// for item in partitioner.items() {
    ///     match partitioner.load_checkpoint(&item).await? {
    ///         Some(checkpoint) => println!("{item}: resume after {:?} ({} wrote it)", checkpoint.data, checkpoint.writer),
    ///         None => println!("{item}: start from the beginning"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn load_checkpoint(&self, item: &Item) -> Result<Option<Checkpoint>, Error> {
        self.handle.load_checkpoint(item).await
    }

    /// The shared set this member follows ([`Builder::shared_set`](crate::Builder::shared_set)), on the
    /// member's own session; `None` with a fixed set. Changing it changes every member's set. Once the partitioner's
    /// task has ended, its methods fail with [`Error::Stopped`] (the member's session is released); use a [`SharedSet`]
    /// on a client of your own to change the set from a process that is not a member.
    pub fn shared_set(&self) -> Option<&SharedSet> {
        self.shared_set.as_deref()
    }

    /// A copy of the latest published snapshot.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// let snapshot = partitioner.snapshot();
    /// println!(
    ///     "{} (generation {}): {} items, party of {}",
    ///     snapshot.state,
    ///     snapshot.generation,
    ///     snapshot.items.len(),
    ///     snapshot.members.len()
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        self.read(Snapshot::clone)
    }

    /// A `watch` receiver of snapshots: `changed()` wakes on every transition. Like every `watch` receiver it may
    /// skip intermediate snapshots when several transitions happen before it looks;
    /// [`Snapshot::generation`] counts them. `changed()` fails once the partitioner's task has stopped and its final
    /// snapshot has been seen. This is the one way to watch a partitioner; a loop that handles every snapshot in
    /// `changed()`'s arm of a `select!` calls `mark_changed()` first, so that the current snapshot comes first.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) {
    /// let mut changes = partitioner.subscribe();
    /// loop {
    ///     let snapshot = changes.borrow_and_update().clone();
    ///     println!("{} with {} items", snapshot.state, snapshot.items.len());
    ///     if changes.changed().await.is_err() {
    ///         break; // the partitioner's task has stopped
    ///     }
    /// }
    /// # }
    /// ```
    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.handle.subscribe()
    }

    /// Waits until the state is no longer [`PartitionState::Allocating`], or `timeout` passes, and returns the state
    /// then. (kazoo's returns nothing, and returns at once in some states it does not tell.)
    ///
    /// Returns at once in [`Acquired`](PartitionState::Acquired), [`Release`](PartitionState::Release) and
    /// [`Failure`](PartitionState::Failure).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::PartitionState;
    ///
    /// match partitioner.wait_for_acquire(Duration::from_secs(30)).await {
    ///     PartitionState::Acquired => println!("processing {:?}", partitioner.items()),
    ///     PartitionState::Allocating => println!("still allocating after 30 s"),
    ///     PartitionState::Release => partitioner.release_set().await?,
    ///     PartitionState::Failure => println!("failed: {:?}", partitioner.snapshot().cause),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for_acquire(&self, timeout: Duration) -> PartitionState {
        let mut receiver = self.handle.subscribe();
        let reached = tokio::time::timeout(timeout, receiver.wait_for(|s| s.state != PartitionState::Allocating))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|snapshot| snapshot.state);
        // On a timeout, or if the task is gone (its last snapshot is Failure), the latest state.
        reached.unwrap_or_else(|| self.state())
    }

    /// Releases every lock this member holds and starts a new allocation (state
    /// [`Allocating`](PartitionState::Allocating)). Call it when the state is [`Release`](PartitionState::Release).
    ///
    /// As in kazoo it may be called in any state but `Failure`; in `Allocating` it restarts the allocation. It
    /// returns once the locks are deleted.
    ///
    /// # Errors
    /// In [`Failure`](PartitionState::Failure), the failure's cause. If a lock cannot be released (the session ended
    /// meanwhile) the partitioner fails and the cause is returned.
    ///
    /// # Cancel safety
    /// The command is sent when the method is called; dropping the future only stops waiting for its completion.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::PartitionState;
    ///
    /// let mut changes = partitioner.subscribe();
    /// changes.wait_for(|s| s.state == PartitionState::Release).await.ok();
    /// // Stop processing every item, then:
    /// partitioner.release_set().await?; // now Allocating again
    /// # Ok(())
    /// # }
    /// ```
    pub fn release_set(&self) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        self.handle.release_set()
    }

    /// Releases every lock, leaves the party and moves to [`Failure`](PartitionState::Failure) with cause
    /// [`Error::Finished`]; the background task then stops. Returns once all of that is done.
    ///
    /// Idempotent: on a partitioner that already failed or finished it returns at once.
    ///
    /// # Cancel safety
    /// The command is sent when the method is called; dropping the future only stops waiting for its completion.
    ///
    /// # Examples
    /// Leaving at once on Ctrl-C, rather than after a session timeout:
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) {
    /// tokio::signal::ctrl_c().await.ok();
    /// partitioner.finish().await; // the others take over its items after their time_boundary
    /// # }
    /// ```
    pub fn finish(&self) -> impl Future<Output = ()> + Send + 'static {
        self.handle.finish()
    }
}
