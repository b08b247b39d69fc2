//! The shared set: the items of a partition path kept in ZooKeeper, which any process may change and every
//! member follows ([`Builder::shared_set`](crate::Builder::shared_set)).
//!
//! # Layout and atomicity
//!
//! One child of `<path>/items` per item scales to 100,000 items (a single node of JSON would hit ZooKeeper's 1 MB
//! limit); the data of `<path>/items` is a header saying the set's kind, its version and where its latest update
//! stands (`zk_partitioner_proto::set_layout` has the whole format). Every reader (a member, `build()`, an admin) only ever sees a set that a
//! writer committed, never a mix:
//!
//! - an update that fits one request (1,000 items, 512 KiB of paths) is one `multi`: the header's new version,
//!   conditional on the version read (so two admins never lose each other's changes), with the creates and deletes
//!   of the items it changes;
//! - a larger one is staged out of sight first (`<path>/item-changes/<tag>`, under an ephemeral lease of its writer,
//!   `<path>/item-writers/<tag>`), then committed with one conditional write of the header (`applying`: from then on
//!   every reader sees the base set with the change applied), then applied to the base set, which anyone may finish;
//! - a first set too large for one request is written while the header says `creating` (readers see no set yet), and
//!   committed by the header's write to `ready`.
//!
//! A writer that stops part-way (a crash, a session that expired) loses its lease: its change is undone (`staging`,
//! `creating`) or finished (`applying`) by the next writer, or by the first member of the party, as soon as the lease
//! is gone, so within the writer's session timeout. Each attempt stages under a fresh tag (never reused, so a late
//! clean-up of one attempt cannot touch another), and the header's node is never deleted (an undone creation leaves
//! it `absent`), so every version check fences what came before. An update reported as failed changed nothing; one
//! reported as done is wholly in force. A reply lost with the connection is resolved by reading the header, whose
//! `log` keeps the tokens of the latest updates: a retried update that finds its own token returns `Ok`, and a
//! retried removal of items already gone is not an error.
//!
//! Items of a shared set are all integers or all strings (`kind`): a child's name must parse back into the item it
//! renders. Children that do not (written by hand) are skipped with a warning and reported by [`SharedSet::read`]; the
//! next update deletes them.
//!
//! # Lineage
//!
//! Shards that split and merge: [`SharedSet::split`] and [`SharedSet::merge`] record each item's parents, and a
//! child enters the set only once its parents have finished ([`Lineage`], [`SharedSet::lineage`]).

// Where things are: `api`, the public `SharedSet`. `read`: reading the set (`SharedSetVersion`, `read_raw`). `create`
// and `update`: a writer's first version of the set and its changes. `apply`: applying a committed change. `recovery`:
// an update found under way, and what stopped writers left behind. `weights` and `table`: weight tables and their
// shared chunks. `writes` and `chunks`: the requests they all send. `lineage`: shards that split and merge.
// `proto::set_layout`: the format of the nodes and how a read of them is interpreted. This file: the protocol's state
// (`SetStore`) and its pacing against concurrent writers.

mod api;
mod apply;
mod attempts;
mod chunks;
mod create;
mod lineage;
mod progress;
mod read;
mod recovery;
mod table;
mod update;
mod weights;
mod writes;

pub use api::SharedSet;
pub(crate) use chunks::CHUNK_OPS;
pub(crate) use lineage::{Finisher, closed, finished};
pub use lineage::{ItemLineage, Lineage, LineageStatus};
#[cfg(test)]
pub(crate) use lineage::{LineageChange, entry::Entry as LineageEntry};
pub use progress::{CheckpointRecord, Exported, FinishedRecord, ImportMode, Imported, LineageRecord, Progress};
pub use read::SharedSetVersion;
pub(crate) use read::{read_bridged, read_raw_cached};
pub(crate) use recovery::recover;

use crate::Error;
use crate::acl::NodeAcls;
use crate::session::SessionRef;
use crate::zookeeper::{ZkError, ZooKeeper};
use attempts::{Attempts, MAX_ATTEMPTS};
use proto::set_layout::SetPaths;

/// The shared set on any session (the simulation's too): the protocol itself.
#[derive(Clone, Debug)]
pub(crate) struct SetStore<Z> {
    /// The client: the user's own, or a member's until its background task ends.
    session: SessionRef<Z>,
    paths: SetPaths,
    acls: NodeAcls,
    /// Operations per `multi` ([`CHUNK_OPS`]; the simulation uses a few, so that its small sets take the staged path).
    chunk: usize,
    /// The weight table last read, shared by the handle's clones: an update reads only a new table's new chunks.
    tables: std::sync::Arc<std::sync::Mutex<proto::set_layout::cache::SetCache>>,
    /// The tokens of this handle's updates, in order (test builds: the simulation's checker reads them).
    #[cfg(test)]
    pub tokens: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Why one attempt of an update did not complete (the update reads the set again and starts over).
#[derive(Clone, Copy, Debug)]
enum Retry {
    /// Another writer got there first, or someone edited the set by hand.
    Moved,
    /// A step before the commit (an intent, a weight table's write) was lost with the connection: it may have
    /// landed, and the next read tells (an intent of ours is undone, a table of ours collected).
    Unknown,
    /// The commit was lost with the connection, and its outcome marker says it did not land.
    Lost,
}

impl<Z: ZooKeeper> SetStore<Z> {
    pub fn new(session: SessionRef<Z>, base: &str, acls: NodeAcls) -> Self {
        SetStore {
            session,
            paths: SetPaths::new(base),
            acls,
            chunk: CHUNK_OPS,
            tables: std::sync::Arc::new(std::sync::Mutex::new(proto::set_layout::cache::SetCache::tables_only())),
            #[cfg(test)]
            tokens: Default::default(),
        }
    }

    /// With at most `chunk` operations per `multi` (at least 3: the header's and two more), instead of 1,000.
    pub fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk.clamp(3, CHUNK_OPS);
        self
    }

    /// The set's nodes.
    pub fn paths(&self) -> &SetPaths {
        &self.paths
    }

    /// The client, unless this is a member's set and the member's task has ended.
    fn zk(&self) -> Result<Z, Error> {
        self.session.client().ok_or(Error::Stopped)
    }

    fn zk_error(&self, op: &'static str, err: ZkError) -> Error {
        Error::zk(op, self.paths.node.as_str(), err)
    }
}
