//! The shared item set: the items of a partition path kept in ZooKeeper, which any process may change and every
//! member follows ([`Builder::shared_item_set`](crate::Builder::shared_item_set)).
//!
//! # Layout and atomicity
//!
//! One child of `<path>/items` per item scales to 100,000 items (a single node of JSON would hit ZooKeeper's 1 MB
//! limit); the data of `<path>/items` is a header saying the set's kind, its version and where its latest update
//! stands ([`layout`] has the whole format). Every reader (a member, `build()`, an admin) only ever sees a set that a
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
//! renders. Children that do not (written by hand) are skipped with a warning and reported by [`ItemSet::read`]; the
//! next update deletes them.

pub(crate) mod layout;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::future::{Either, select};
use zookeeper_client::Client;

use crate::acl::NodeAcls;
use crate::error::is_transient;
use crate::error::retry_transient;
use crate::item::{check_kind_of_set, validate_items};
use crate::names::check_base_path;
use crate::session::SessionRef;
use crate::zookeeper::{Mode, MultiError, ReadOp, ReadResult, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};
use layout::{Committed, Header, Kind, RawRead, SetPaths, SetView, State, Unfinished};

/// Operations per `multi` (each a create or a delete of one item) ...
pub(crate) const CHUNK_OPS: usize = 1000;
/// ... and bytes of paths per `multi`, far below ZooKeeper's 1 MB packet limit (`jute.maxbuffer`).
const CHUNK_BYTES: usize = 512 * 1024;
/// Attempts of one update against concurrent writers before giving up (with the backoff below, about 10 s of
/// contention).
const MAX_ATTEMPTS: u32 = 100;
/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(200);
/// How long an update waits for another writer's update under way (while that writer's lease lives) before giving up.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// A handle on the shared item set of one partition path, for members and for tools that are not members.
///
/// Cheap to clone. A read is one request (two while a large update is being applied); an update that fits one
/// request is a read and one conditional write; a larger one is staged, committed and applied (see the
/// `item_set` module's docs in the source for why every reader sees either the set before or the set after).
///
/// **Cancel safety**: every change runs on a task of its own (the caller's runtime's). Dropping its future (a
/// `timeout`, a `select!`) stops the waiting, not the change: it completes, or fails and leaves nothing, as it would
/// have. **Lost replies** are resolved by the header's log of the latest 16 updates: if 16 others land while the
/// reply of ours is lost and we reconnect, ours can no longer be recognised (a retried `replace_if` then reports a
/// conflict; a retried `add` or `remove` is simply applied again, which changes nothing).
///
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use zk_partitioner::ItemSet;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let client = Client::connect("127.0.0.1:2181").await.expect("connect");
/// let set = ItemSet::new(client, "/work_queues")?;
/// set.create_if_missing(["queue-1", "queue-2"]).await?;
/// let after = set.add(["queue-3"]).await?;
/// assert!(after.items.contains(&"queue-3".into()));
/// set.remove(["queue-1"]).await?;
/// println!("version {}: {:?}", set.read().await?.version, set.read().await?.items);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ItemSet {
    inner: SharedSet<Client>,
}

impl fmt::Debug for ItemSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemSet").field("node", &self.inner.paths.node).finish_non_exhaustive()
    }
}

/// The shared set as read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedItems {
    /// The items, sorted: the set in force (committed), whatever update is under way.
    pub items: Vec<Item>,
    /// The set's version: it increases by one with every update.
    pub version: u64,
    /// A large update is being staged or applied (or its writer stopped part-way and it is about to be undone or
    /// finished); `items` is the set in force all the same.
    pub updating: bool,
    /// Children of `<path>/items` that are not items of the set's kind (written by hand): ignored by members, deleted
    /// by the next update.
    pub skipped: Vec<String>,
}

impl SharedItems {
    fn of(committed: Committed) -> Self {
        SharedItems {
            items: committed.items,
            version: committed.version,
            updating: committed.unfinished.is_some(),
            skipped: committed.skipped,
        }
    }
}

impl ItemSet {
    /// A handle on the shared set of the partition path `path` (relative to the client's chroot), on `client`'s
    /// session. Nothing is read or written until a method is called.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `path` is not a valid partition path.
    pub fn new(client: Client, path: impl Into<String>) -> Result<Self, Error> {
        let base = path.into();
        check_base_path(&base)?;
        Ok(ItemSet { inner: SharedSet::new(SessionRef::Owned(client), &base, NodeAcls::default()) })
    }

    /// Creates the nodes it makes (the set's node, its items, and `<path>` if missing) with this ACL instead of
    /// kazoo's open one: use the partitioner's ([`Builder::acls`](crate::Builder::acls)). Nodes that exist keep
    /// theirs.
    pub fn with_acls(mut self, acls: zookeeper_client::Acls<'_>) -> Self {
        self.inner.acls = NodeAcls::new(&acls);
        self
    }

    /// The same set on a member's session, which the member releases when its background task ends.
    pub(crate) fn from_shared(inner: SharedSet<Client>) -> Self {
        ItemSet { inner }
    }

    /// The path of the set's node, `<path>/items`.
    pub fn path(&self) -> &str {
        &self.inner.paths.node
    }

    /// Runs a change on a task of its own, so that it is cancel safe: dropping the caller's future does not stop the
    /// change part-way (a staged update would keep its lease, and so stay unfinished, as long as the session lives);
    /// it completes, or fails and is undone, on its own.
    async fn detached<T, F>(&self, change: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        tokio::spawn(change).await.unwrap_or_else(|err| {
            Err(Error::Internal { reason: format!("the shared set's update task of {} failed: {err}", self.path()) })
        })
    }

    /// Reads the set in force.
    ///
    /// # Errors
    /// [`Error::ItemSetMissing`] if there is none yet (or its first version is still being written),
    /// [`Error::ItemSetCorrupt`] if its node was written by something else, [`Error::ZooKeeper`] or
    /// [`Error::SessionLost`] if ZooKeeper fails.
    pub async fn read(&self) -> Result<SharedItems, Error> {
        self.inner.read().await
    }

    /// Creates the set with `items` if there is none, else leaves it as it is. Returns the set in force and whether
    /// this call created it. A creation left unfinished by a writer that is gone is undone first; one under way is
    /// waited for.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item that is not a valid node name or mixes integers with strings,
    /// [`Error::EmptyItemSet`] for no items, and the errors of [`read`](ItemSet::read).
    pub async fn create_if_missing<I>(&self, items: I) -> Result<(SharedItems, bool), Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.create_if_missing(items).await }).await
    }

    /// Adds `items` (those already in the set are left as they are) and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] naming the first item given that is not a valid node name or is not of the set's kind
    /// (integers or strings), and the errors of [`read`](ItemSet::read). Nothing is changed when it fails.
    pub async fn add<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.add(items).await }).await
    }

    /// Removes `items` and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] naming the first item that is not in the set, [`Error::EmptyItemSet`] if nothing would
    /// be left, and the errors of [`read`](ItemSet::read). Nothing is changed when it fails. A removal whose reply was
    /// lost with the connection is sent again; items it finds already gone then count as removed.
    pub async fn remove<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.remove(items).await }).await
    }

    /// Makes the set exactly `items`, whatever it was, and returns it.
    ///
    /// # Errors
    /// As [`add`](ItemSet::add), plus [`Error::EmptyItemSet`] for no items.
    pub async fn replace<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.replace(None, items).await }).await
    }

    /// Makes the set exactly `items` if its version is still `version` (from a [`read`](ItemSet::read)): a
    /// compare-and-set for tools that compute the new set from the old one. A write of ours whose reply was lost is
    /// recognised (by its token in the set's log of its latest updates) and returns `Ok`.
    ///
    /// # Errors
    /// [`Error::ItemSetConflict`] if the set changed since that read (read it again and recompute), and the errors of
    /// [`replace`](ItemSet::replace).
    pub async fn replace_if<I>(&self, version: u64, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.replace(Some(version), items).await }).await
    }
}

/// The shared set on any session (the simulation's too): the protocol itself.
#[derive(Clone, Debug)]
pub(crate) struct SharedSet<Z> {
    /// The client: the user's own, or a member's until its background task ends.
    session: SessionRef<Z>,
    paths: SetPaths,
    acls: NodeAcls,
    /// Operations per `multi` ([`CHUNK_OPS`]; the simulation uses a few, so that its small sets take the staged path).
    chunk: usize,
    /// The tokens of this handle's updates, in order (test builds: the simulation's checker reads them).
    #[cfg(test)]
    pub tokens: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Why one attempt of an update did not complete (the update reads the set again and starts over).
enum Retry {
    /// Another writer got there first, or someone edited the set by hand.
    Moved,
    /// Lost with the connection: it may have landed.
    Unknown,
}

impl<Z: ZooKeeper> SharedSet<Z> {
    pub fn new(session: SessionRef<Z>, base: &str, acls: NodeAcls) -> Self {
        SharedSet {
            session,
            paths: SetPaths::new(base),
            acls,
            chunk: CHUNK_OPS,
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

    pub async fn read(&self) -> Result<SharedItems, Error> {
        let zk = self.zk()?;
        match self.view(&zk).await? {
            SetView::Committed(committed) => Ok(SharedItems::of(committed)),
            SetView::Missing { .. } => Err(Error::ItemSetMissing { path: self.paths.node.clone() }),
            SetView::Unreadable(reason) => Err(Error::ItemSetCorrupt { path: self.paths.node.clone(), reason }),
            // `view` reads again until the read is whole.
            SetView::Torn => Err(Error::ItemSetConflict {
                path: self.paths.node.clone(),
                reason: "the set kept changing while it was read; try again".into(),
            }),
        }
    }

    /// Reads the set until a read is whole (a torn read means an update landed between two reads).
    async fn view(&self, zk: &Z) -> Result<SetView, Error> {
        for _ in 0..MAX_ATTEMPTS {
            // A read lost with the connection is sent again (until the session ends): an update whose outcome is
            // unknown must not be reported as failed for a read that failed.
            let read = retry_transient(zk, || read_raw(zk, &self.paths, None)).await;
            let view = layout::interpret(read.map_err(|e| self.zk_error("read", e))?);
            if view != SetView::Torn {
                return Ok(view);
            }
        }
        Ok(SetView::Torn)
    }

    pub async fn create_if_missing(&self, items: Vec<Item>) -> Result<(SharedItems, bool), Error> {
        let items = validate_items(items, true)?;
        if items.is_empty() {
            return Err(Error::EmptyItemSet { path: self.paths.node.clone() });
        }
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        // The change tags of our attempts: each attempt stages under a fresh one (a tag is never used twice, so a
        // late clean-up of one attempt cannot touch the next).
        let mut own = Vec::new();
        for attempt in 0..MAX_ATTEMPTS {
            backoff(&zk, attempt).await;
            match self.view(&zk).await? {
                SetView::Committed(committed) => {
                    let created = committed.header.landed(&token);
                    return Ok((SharedItems::of(committed), created));
                }
                SetView::Unreadable(reason) => {
                    return Err(Error::ItemSetCorrupt { path: self.paths.node.clone(), reason });
                }
                SetView::Torn => {}
                SetView::Missing { unfinished: Some(unfinished) } => {
                    self.settle(&zk, &unfinished, &own).await?;
                }
                SetView::Missing { unfinished: None } => {
                    let tag = layout::token(zk.random());
                    own.push(tag.clone());
                    match self.create(&zk, &items, &token, &tag).await {
                        Ok(()) | Err(Retry::Moved | Retry::Unknown) => {}
                    }
                }
            }
        }
        Err(self.too_busy())
    }

    pub async fn add(&self, added: Vec<Item>) -> Result<SharedItems, Error> {
        let added = validate_items(added, true)?;
        self.update(None, |current, _| {
            // Checked against the set before merging, so that the error names the new item, not one of the set's.
            if let Some(held) = current.first() {
                check_kind_of_set(&added, held, &self.paths.node)?;
            }
            Ok(current.iter().chain(&added).cloned().collect())
        })
        .await
    }

    pub async fn remove(&self, removed: Vec<Item>) -> Result<SharedItems, Error> {
        let removed: BTreeSet<Item> = removed.into_iter().collect();
        self.update(None, |current, retried| {
            // After a lost reply, what is gone may be our own removal.
            if !retried && let Some(missing) = removed.iter().find(|item| !current.contains(*item)) {
                return Err(Error::InvalidItem {
                    item: missing.to_string(),
                    reason: "is not in the shared item set, so it cannot be removed".into(),
                });
            }
            Ok(current.difference(&removed).cloned().collect())
        })
        .await
    }

    pub async fn replace(&self, expected: Option<u64>, items: Vec<Item>) -> Result<SharedItems, Error> {
        let items: BTreeSet<Item> = validate_items(items, true)?.into_iter().collect();
        self.update(expected, |_, _| Ok(items.clone())).await
    }

    fn too_busy(&self) -> Error {
        Error::ItemSetConflict {
            path: self.paths.node.clone(),
            reason: format!("other writers changed the set {MAX_ATTEMPTS} times during this update; try again"),
        }
    }

    /// Reads the set in force, computes the new one and writes the difference, conditionally on the version read;
    /// starts over when another writer got there first (unless the caller asked for a precise `expected` version).
    /// `change` is told whether an earlier attempt's outcome is unknown (its reply was lost).
    async fn update(
        &self,
        expected: Option<u64>,
        change: impl Fn(&BTreeSet<Item>, bool) -> Result<BTreeSet<Item>, Error>,
    ) -> Result<SharedItems, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        let mut uncertain = false;
        let result = self.update_as(&zk, &token, &mut uncertain, expected, change).await;
        match result {
            // The session ended with our update's outcome unknown: say so, rather than that it failed.
            Err(Error::SessionLost { .. } | Error::Stopped) if uncertain => {
                Err(Error::ItemSetOutcomeUnknown { path: self.paths.node.clone() })
            }
            result => result,
        }
    }

    /// [`SharedSet::update`]'s attempts, with our update's `token`; `uncertain` says whether one of them may have
    /// landed unseen.
    async fn update_as(
        &self,
        zk: &Z,
        token: &str,
        uncertain: &mut bool,
        expected: Option<u64>,
        change: impl Fn(&BTreeSet<Item>, bool) -> Result<BTreeSet<Item>, Error>,
    ) -> Result<SharedItems, Error> {
        let zk = zk.clone();
        let token = token.to_owned();
        // The change tags of our staged attempts (see `create_if_missing`).
        let mut own: Vec<String> = Vec::new();
        for attempt in 0..MAX_ATTEMPTS {
            backoff(&zk, attempt).await;
            let current = match self.view(&zk).await? {
                SetView::Committed(committed) => committed,
                SetView::Missing { .. } => return Err(Error::ItemSetMissing { path: self.paths.node.clone() }),
                SetView::Unreadable(reason) => {
                    return Err(Error::ItemSetCorrupt { path: self.paths.node.clone(), reason });
                }
                SetView::Torn => continue,
            };
            #[cfg(test)]
            if crate::sabotage::breaks(crate::sabotage::Sabotage::LostRepliesUnresolved) {
                *uncertain = false;
            }
            if *uncertain && current.header.landed(&token) {
                // Our update landed; its reply was lost. If it is still ours to apply, apply it now (as the lost
                // reply's sequel would have).
                if let Some(unfinished) = &current.unfinished
                    && let State::Applying(tag) = &unfinished.state
                    && own.contains(tag)
                    && let Err(err) = self.finish_applying(&zk, tag).await
                {
                    tracing::warn!(%err, change = %tag, "an update is committed but not yet applied; it will be finished");
                }
                return Ok(SharedItems::of(current));
            }
            if let Some(unfinished) = &current.unfinished {
                self.settle(&zk, unfinished, &own).await?;
                continue;
            }
            if let Some(expected) = expected
                && expected != current.version
            {
                return Err(Error::ItemSetConflict {
                    path: self.paths.node.clone(),
                    reason: format!("expected version {expected}, found version {}", current.version),
                });
            }
            let before: BTreeSet<Item> = current.items.iter().cloned().collect();
            let after = change(&before, *uncertain)?;
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            if after.is_empty() {
                return Err(Error::EmptyItemSet { path: self.paths.node.clone() });
            }
            // All of one kind (a replace may change the kind; an add may not mix kinds).
            let after = validate_items(after.into_iter().collect(), true)?;
            // By node name: an integer and a string that render alike are one child (a replace that changes the
            // kind keeps it), and a child skipped as garbage may be an item of the new kind.
            let on_disk: BTreeSet<String> =
                current.items.iter().map(Item::node_name).chain(current.skipped.iter().cloned()).collect();
            let wanted: BTreeSet<String> = after.iter().map(Item::node_name).collect();
            let adds: Vec<String> = wanted.difference(&on_disk).cloned().collect();
            let removes: Vec<String> = on_disk.difference(&wanted).cloned().collect();
            let kind = Kind::of(&after);
            if adds.is_empty() && removes.is_empty() && kind == current.header.kind && current.skipped.is_empty() {
                return Ok(SharedItems::of(current));
            }
            let written = if fits_one_request(&self.paths, self.chunk, &adds, &removes) {
                self.write_small(&zk, &current, kind, &adds, &removes, &token).await
            } else {
                let tag = layout::token(zk.random());
                own.push(tag.clone());
                self.write_large(&zk, &current, kind, &adds, &removes, &token, &tag).await
            };
            match written {
                Ok(()) => {
                    let version = current.version + 1;
                    return Ok(SharedItems { items: after, version, updating: false, skipped: Vec::new() });
                }
                Err(Ok(Retry::Moved)) if expected.is_some() && !*uncertain => {
                    return Err(Error::ItemSetConflict {
                        path: self.paths.node.clone(),
                        reason: format!("the set changed after version {}", current.version),
                    });
                }
                Err(Ok(Retry::Moved)) => {}
                Err(Ok(Retry::Unknown)) => *uncertain = true,
                Err(Err(err)) => return Err(err),
            }
        }
        Err(self.too_busy())
    }

    /// One `multi`: the header's next version, conditional on the one read, with every create and delete.
    async fn write_small(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        adds: &[String],
        removes: &[String],
        token: &str,
    ) -> Result<(), Result<Retry, Error>> {
        let header = current.header.next(kind, State::Ready, token).render();
        let (created, deleted) = (paths_of(&self.paths.node, adds), paths_of(&self.paths.node, removes));
        let mut ops = vec![WriteOp::SetData {
            path: &self.paths.node,
            data: header.as_bytes(),
            version: Some(current.header_version),
        }];
        ops.extend(deleted.iter().map(|path| WriteOp::Delete { path, version: None }));
        ops.extend(created.iter().map(|path| self.create_op(path)));
        self.commit(zk, &ops).await
    }

    /// A staged update: intent (under our lease), staging, commit, apply, finish (see the module docs). `token` goes
    /// into the header's log; `tag` names this attempt's change and lease.
    #[allow(clippy::too_many_arguments)]
    async fn write_large(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        adds: &[String],
        removes: &[String],
        token: &str,
        tag: &str,
    ) -> Result<(), Result<Retry, Error>> {
        for dir in [&self.paths.changes, &self.paths.writers] {
            retry_transient(zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| Err(self.zk_error("mkdir", e)))?;
        }
        self.collect_garbage(zk).await;
        // 1. The intent: the header says `staging` under our lease; the set in force is unchanged.
        let staging = current.header.with_state(State::Staging(tag.to_owned())).render();
        let (lease, change) = (self.paths.lease(tag), self.paths.change(tag));
        let (additions, removals) = (self.paths.additions(tag), self.paths.removals(tag));
        let ops = [
            WriteOp::SetData {
                path: &self.paths.node,
                data: staging.as_bytes(),
                version: Some(current.header_version),
            },
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
            self.create_op(&change),
            self.create_op(&additions),
            self.create_op(&removals),
        ];
        // A lost intent may have landed: the next read then finds our own `staging`, and undoes it.
        let outcome = match self.commit(zk, &ops).await {
            Ok(()) => self.stage_and_commit(zk, current, kind, (adds, removes), token, tag).await,
            Err(err) => Err(err),
        };
        // Whatever happened, our lease goes before we return: while it lives nobody finishes or undoes a change of
        // ours left part-way, and an intent whose reply was lost may have taken it.
        self.release_lease(zk, tag).await;
        outcome
    }

    /// Steps 2 to 5 of [`SharedSet::write_large`], under our lease.
    async fn stage_and_commit(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        (adds, removes): (&[String], &[String]),
        token: &str,
        tag: &str,
    ) -> Result<(), Result<Retry, Error>> {
        let staged_version = current.header_version + 1;
        // 2. Staging, each request checking that the header is still our intent (nobody undid it).
        self.stage(zk, tag, staged_version, adds, removes).await?;
        // 3. The commit: from `staging` to `applying`, one conditional write; every reader now sees the change.
        let applying = current.header.next(kind, State::Applying(tag.to_owned()), token).render();
        let ops =
            [WriteOp::SetData { path: &self.paths.node, data: applying.as_bytes(), version: Some(staged_version) }];
        // A lost reply: the next read tells whether it landed (our token in the header's log).
        self.commit(zk, &ops).await?;
        // 4. and 5. Apply it to the base set and say `ready`. The update is in force whatever happens now: if this
        // fails (the session ends, say), whoever finds the change abandoned finishes it.
        if let Err(err) = self.finish_applying(zk, tag).await {
            tracing::warn!(%err, change = tag, "an update is committed but not yet applied; it will be finished");
        }
        Ok(())
    }

    /// Stages a change's additions and removals under `item-changes/<tag>`, each `multi` checking that the header is
    /// still at `version` (our intent). Resumable: what is already staged is listed and skipped.
    async fn stage(
        &self,
        zk: &Z,
        tag: &str,
        version: i32,
        adds: &[String],
        removes: &[String],
    ) -> Result<(), Result<Retry, Error>> {
        let (additions, removals) = (self.paths.additions(tag), self.paths.removals(tag));
        let mut staged_adds: BTreeSet<String> = BTreeSet::new();
        let mut staged_removes: BTreeSet<String> = BTreeSet::new();
        for _ in 0..MAX_ATTEMPTS {
            let mut todo: Vec<String> = adds
                .iter()
                .filter(|name| !staged_adds.contains(*name))
                .map(|name| format!("{additions}/{name}"))
                .collect();
            todo.extend(
                removes.iter().filter(|name| !staged_removes.contains(*name)).map(|name| format!("{removals}/{name}")),
            );
            if todo.is_empty() {
                return Ok(());
            }
            let mut lost = false;
            for chunk in chunks(&todo, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(version) }];
                ops.extend(chunk.iter().map(|path| self.create_op(path)));
                match zk.multi_write(&ops).await {
                    Ok(_) => {}
                    Err(MultiError { index: Some(0), error: ZkError::BadVersion | ZkError::NoNode }) => {
                        return Err(Ok(Retry::Moved));
                    }
                    Err(MultiError { error, .. }) if is_transient(&error) || error == ZkError::NodeExists => {
                        lost = true;
                        break;
                    }
                    Err(MultiError { error, .. }) => return Err(Err(self.zk_error("multi create", error))),
                }
            }
            if !lost {
                return Ok(());
            }
            // Some of it may have landed: list what is staged, and stage the rest.
            let listed = |dir: String| async move { retry_transient(zk, || zk.list_children(&dir)).await };
            staged_adds = listed(additions.clone())
                .await
                .map_err(|e| Err(self.zk_error("get_children", e)))?
                .into_iter()
                .collect();
            staged_removes = listed(removals.clone())
                .await
                .map_err(|e| Err(self.zk_error("get_children", e)))?
                .into_iter()
                .collect();
        }
        Err(Err(self.too_busy()))
    }

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
            for chunk in chunks(&paths, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(*version) }];
                for path in chunk {
                    let create = todo.iter().any(|(p, create)| p == path && *create);
                    ops.push(if create { self.create_op(path) } else { WriteOp::Delete { path, version: None } });
                }
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

    /// Deals with an update under way: waits while its writer's lease lives (up to [`MAX_WAIT`]); once the writer is
    /// gone, undoes a `staging` or `creating` change and finishes an `applying` one (or a `deleting` set). A change
    /// of ours (one of the tags in `own`), found after the reply to its intent was lost, is undone at once.
    async fn settle(&self, zk: &Z, unfinished: &Unfinished, own: &[String]) -> Result<(), Error> {
        let own = unfinished.state.change().is_some_and(|tag| own.iter().any(|t| t == tag));
        if !own && !unfinished.abandoned() {
            return self.wait_for_writer(zk, unfinished).await;
        }
        recover(zk, self, unfinished).await
    }

    /// Waits until the header changes or the writer's lease goes, up to [`MAX_WAIT`].
    async fn wait_for_writer(&self, zk: &Z, unfinished: &Unfinished) -> Result<(), Error> {
        let Some(tag) = unfinished.state.change() else { return Ok(()) };
        let header = match zk.get_and_watch_data(&self.paths.node).await {
            Ok((_, _, watch)) => watch,
            Err(ZkError::NoNode) => return Ok(()),
            Err(err) => return Err(self.zk_error("get_data", err)),
        };
        let lease = match zk.check_and_watch_stat(&self.paths.lease(tag)).await {
            Ok((None, _)) => return Ok(()),
            Ok((Some(_), watch)) => watch,
            Err(err) => return Err(self.zk_error("exists", err)),
        };
        let timeout = std::pin::pin!(zk.sleep(MAX_WAIT));
        match select(select(header, lease), timeout).await {
            Either::Left(_) => Ok(()),
            Either::Right(_) => Err(Error::ItemSetConflict {
                path: self.paths.node.clone(),
                reason: format!("another writer's {unfinished} has been under way for over {MAX_WAIT:?}; try again"),
            }),
        }
    }

    /// Writes the first version of the set (`None` from [`layout::interpret`] before): one `multi` if it fits, else
    /// under a `creating` header and our lease (`tag`), committed by the header's write to `ready`. The header's node
    /// is created, or written over at its version if an undone creation left it `absent`.
    async fn create(&self, zk: &Z, items: &[Item], token: &str, tag: &str) -> Result<(), Retry> {
        if retry_transient(zk, || zk.mkdir(&self.paths.base, &self.acls)).await.is_err() {
            return Err(Retry::Unknown);
        }
        let Ok(read) = retry_transient(zk, || read_raw(zk, &self.paths, None)).await else {
            return Err(Retry::Unknown);
        };
        let absent_at = match &read.header {
            None => None,
            Some((data, version)) => match Header::parse(data) {
                Ok(header) if header.state == State::Absent => Some(*version),
                // Someone else's set, or their creation: read again.
                _ => return Err(Retry::Moved),
            },
        };
        let kind = Kind::of(items);
        let names: Vec<String> = items.iter().map(Item::node_name).collect();
        let ready = Header { kind, version: 1, state: State::Ready, log: vec![token.to_owned()] };
        let ready_text = ready.render();
        let created = paths_of(&self.paths.node, &names);
        if fits_one_request(&self.paths, self.chunk, &names, &[]) {
            let mut ops = vec![self.header_write(ready_text.as_bytes(), absent_at)];
            ops.extend(created.iter().map(|path| self.create_op(path)));
            return self.commit(zk, &ops).await.map_err(|e| e.unwrap_or(Retry::Unknown));
        }
        if retry_transient(zk, || zk.mkdir(&self.paths.writers, &self.acls)).await.is_err() {
            return Err(Retry::Unknown);
        }
        let creating = Header { kind, version: 0, state: State::Creating(tag.to_owned()), log: Vec::new() }.render();
        let lease = self.paths.lease(tag);
        let ops = [
            self.header_write(creating.as_bytes(), absent_at),
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
        ];
        // A lost reply: the next read finds our `creating` header (ours, so undone at once) or nothing.
        let creating_version = absent_at.map_or(0, |version| version + 1);
        let outcome = match self.commit(zk, &ops).await {
            Ok(()) => self.create_under_lease(zk, &created, &ready_text, creating_version).await,
            Err(err) => Err(err.unwrap_or(Retry::Unknown)),
        };
        // Whatever happened, our lease goes before we return (see `write_large`).
        self.release_lease(zk, tag).await;
        outcome
    }

    /// The write of the header that starts a set: a create, or over an `absent` header at its version.
    fn header_write<'a>(&'a self, data: &'a [u8], absent_at: Option<i32>) -> WriteOp<'a> {
        match absent_at {
            None => self.create_data_op(&self.paths.node, data),
            Some(version) => WriteOp::SetData { path: &self.paths.node, data, version: Some(version) },
        }
    }

    /// Creates the items of a first version under a `creating` header (at data version `version`), then says
    /// `ready` (which commits it).
    async fn create_under_lease(
        &self,
        zk: &Z,
        created: &[String],
        ready_text: &str,
        version: i32,
    ) -> Result<(), Retry> {
        let mut done: BTreeSet<String> = BTreeSet::new();
        for _ in 0..MAX_ATTEMPTS {
            let todo: Vec<String> = created.iter().filter(|path| !done.contains(*path)).cloned().collect();
            let mut lost = false;
            for chunk in chunks(&todo, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(version) }];
                ops.extend(chunk.iter().map(|path| self.create_op(path)));
                match zk.multi_write(&ops).await {
                    Ok(_) => done.extend(chunk.iter().cloned()),
                    Err(MultiError { index: Some(0), .. }) => return Err(Retry::Moved),
                    Err(MultiError { error, .. }) if is_transient(&error) || error == ZkError::NodeExists => {
                        lost = true;
                        break;
                    }
                    Err(_) => return Err(Retry::Moved),
                }
            }
            if !lost {
                let ops =
                    [WriteOp::SetData { path: &self.paths.node, data: ready_text.as_bytes(), version: Some(version) }];
                return self.commit(zk, &ops).await.map_err(|e| e.unwrap_or(Retry::Unknown));
            }
            let Ok(children) = retry_transient(zk, || zk.list_children(&self.paths.node)).await else {
                return Err(Retry::Unknown);
            };
            done = children.into_iter().map(|name| self.paths.item(&name)).collect();
        }
        Err(Retry::Moved)
    }

    /// Sends one write `multi` whose first operation is on the header: `Moved` if that failed (another writer), or a
    /// later one failed with `NodeExists` or `NoNode` (the children were edited by hand); `Unknown` if lost with the
    /// connection.
    async fn commit(&self, zk: &Z, ops: &[WriteOp<'_>]) -> Result<(), Result<Retry, Error>> {
        match zk.multi_write(ops).await {
            Ok(_) => Ok(()),
            Err(MultiError { index: None, error }) if is_transient(&error) => Err(Ok(Retry::Unknown)),
            Err(MultiError { index: Some(_), error: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode }) => {
                Err(Ok(Retry::Moved))
            }
            Err(MultiError { error, .. }) => Err(Err(self.zk_error("multi", error))),
        }
    }

    fn create_op<'a>(&'a self, path: &'a str) -> WriteOp<'a> {
        self.create_data_op(path, b"")
    }

    fn create_data_op<'a>(&'a self, path: &'a str, data: &'a [u8]) -> WriteOp<'a> {
        WriteOp::Create { path, data, mode: Mode::Persistent, acls: &self.acls }
    }

    /// Deletes a writer's lease, retrying while the connection is lost (once the session ends, it is gone anyway).
    async fn release_lease(&self, zk: &Z, tag: &str) {
        let lease = self.paths.lease(tag);
        if let Err(err) = retry_transient(zk, || zk.delete(&lease, None)).await
            && err != ZkError::NoNode
        {
            tracing::debug!(%err, %lease, "could not delete a lease; it goes with the session");
        }
    }

    /// Deletes staged changes left behind: those whose writer's lease is gone and that the header does not name (a
    /// writer that stopped before its intent landed or after it was undone, or a clean-up that did not finish). A
    /// change with a live lease may be about to be named: never touched. Best effort.
    async fn collect_garbage(&self, zk: &Z) {
        let Ok(tags) = zk.list_children(&self.paths.changes).await else { return };
        if tags.is_empty() {
            return;
        }
        // Listed first, then the header and the leases in one read: a change named after this read has a live lease.
        let leases: Vec<String> = tags.iter().map(|tag| self.paths.lease(tag)).collect();
        let mut ops = vec![ReadOp::Data(&self.paths.node)];
        ops.extend(leases.iter().map(|lease| ReadOp::Data(lease)));
        let Ok(results) = zk.multi_read(&ops).await else { return };
        let mut results = results.into_iter();
        let named = match results.next() {
            Some(ReadResult::Data(data, _)) => {
                Header::parse(&data).ok().and_then(|h| h.state.change().map(str::to_owned))
            }
            _ => return,
        };
        for (tag, lease) in tags.iter().zip(results) {
            let dead = matches!(lease, ReadResult::Failed(ZkError::NoNode));
            if dead && named.as_deref() != Some(tag.as_str()) {
                self.delete_tree(zk, &self.paths.change(tag)).await;
            }
        }
    }

    /// Deletes a staged change's nodes, leaves first. Best effort.
    async fn delete_tree(&self, zk: &Z, change: &str) {
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

/// Undoes or finishes an update whose writer is gone (or our own intent, found after its reply was lost): the one
/// recovery both writers and the party's first member run.
pub(crate) async fn recover<Z: ZooKeeper>(zk: &Z, set: &SharedSet<Z>, unfinished: &Unfinished) -> Result<(), Error> {
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
    // Only the change we were asked about: anything else is a newer state, for whoever reads it next.
    if header.state != unfinished.state {
        return Ok(());
    }
    match &header.state {
        State::Ready | State::Absent => Ok(()),
        State::Staging(tag) => {
            // Undo: back to `ready` at the same version (the writer's staging requests check the header's version,
            // so none lands after this), then clear its staging.
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
        State::Applying(tag) => {
            tracing::info!(node = %set.paths.node, change = %tag, "finishing an update whose writer is gone");
            set.finish_applying(zk, tag).await
        }
        State::Creating(tag) | State::Deleting(tag) => {
            // Undo a creation: say `deleting` (which fences the writer's requests), delete the children, then say
            // `absent` (the node stays, so its version keeps growing: a late deleter's requests, checked against
            // the `deleting` version, can never land in a set created afterwards). The next writer creates afresh.
            let mut version = version;
            if matches!(header.state, State::Creating(_)) {
                let deleting = header.with_state(State::Deleting(tag.clone())).render();
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
            let absent = Header { kind: header.kind, version: 0, state: State::Absent, log: Vec::new() }.render();
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

/// One consistent read of the set's nodes: the header and the base set in one read `multi`, and when the header asks
/// for more (a change's lists, a writer's lease) a second `multi` with everything again. `header_hint` (the header as
/// just read with a watch) saves the first `multi` when it already says what to read.
pub(crate) async fn read_raw<Z: ZooKeeper>(
    zk: &Z,
    paths: &SetPaths,
    header_hint: Option<&Header>,
) -> Result<RawRead, ZkError> {
    let mut wanted: (Option<String>, Option<String>) = match header_hint {
        Some(header) => {
            let (lists, lease) = layout::wants(header);
            (lists.map(str::to_owned), lease.map(str::to_owned))
        }
        None => (None, None),
    };
    // Three passes at most: a header that changes at every pass is read as torn (below).
    let mut pass = 0;
    loop {
        let (lists, lease) = (wanted.0.clone(), wanted.1.clone());
        let (additions, removals, lease_path) = (
            lists.as_deref().map(|tag| paths.additions(tag)),
            lists.as_deref().map(|tag| paths.removals(tag)),
            lease.as_deref().map(|tag| paths.lease(tag)),
        );
        let mut ops = vec![ReadOp::Data(&paths.node), ReadOp::Children(&paths.node)];
        if let (Some(additions), Some(removals)) = (&additions, &removals) {
            ops.push(ReadOp::Children(additions));
            ops.push(ReadOp::Children(removals));
        }
        if let Some(lease) = &lease_path {
            ops.push(ReadOp::Data(lease));
        }
        let mut results = zk.multi_read(&ops).await?.into_iter();
        let header = match results.next() {
            Some(ReadResult::Data(data, stat)) => Some((data, stat.version)),
            Some(ReadResult::Failed(ZkError::NoNode)) => None,
            Some(ReadResult::Failed(err)) => return Err(err),
            _ => return Err(ZkError::UnexpectedError("the set's header read answered something else".into())),
        };
        let children = match results.next() {
            Some(ReadResult::Children(children)) => children,
            _ => Vec::new(),
        };
        let change = if additions.is_some() {
            match (results.next(), results.next()) {
                (Some(ReadResult::Children(adds)), Some(ReadResult::Children(removes))) => Some((adds, removes)),
                _ => None,
            }
        } else {
            None
        };
        let lease_alive = lease_path.is_some().then(|| matches!(results.next(), Some(ReadResult::Data(..))));
        let read = RawRead { header, children, change, lease: lease_alive };
        // Enough for what this header asks?
        let needs = read.header.as_ref().and_then(|(data, _)| Header::parse(data).ok()).map(|header| {
            let (lists, lease) = layout::wants(&header);
            (lists.map(str::to_owned), lease.map(str::to_owned))
        });
        match needs {
            Some(needs) if needs != (lists, lease) && pass < 2 => {
                wanted = needs;
                pass += 1;
            }
            // Whole, or (the header changed at every pass) the last read: short of what its header asks, it reads
            // as torn, and the reader reads again.
            _ => return Ok(read),
        }
    }
}

/// Before attempt `attempt` (0: none): a random pause up to 2^attempt ms, at most [`MAX_BACKOFF`], so writers that
/// collided do not collide again in lockstep.
async fn backoff<Z: ZooKeeper>(zk: &Z, attempt: u32) {
    if attempt == 0 {
        return;
    }
    let ceiling = Duration::from_millis(1 << attempt.min(16)).min(MAX_BACKOFF);
    let fraction = (zk.random() & 0xffff) as u32;
    zk.sleep(ceiling.mul_f64(f64::from(fraction) / 65536.0)).await;
}

/// `<dir>/<name>` for each name.
fn paths_of(dir: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|name| format!("{dir}/{name}")).collect()
}

/// Whether an update's creates and deletes, with the header's write, fit one request of `chunk` operations.
fn fits_one_request(paths: &SetPaths, chunk: usize, adds: &[String], removes: &[String]) -> bool {
    let ops = adds.len() + removes.len() + 1;
    let bytes: usize = adds.iter().chain(removes).map(|name| paths.node.len() + name.len() + 17).sum();
    ops <= chunk && bytes <= CHUNK_BYTES
}

/// Splits paths into `multi`s of at most `chunk` operations and [`CHUNK_BYTES`] (leaving room for one more operation
/// each); at least one (possibly empty) chunk.
fn chunks(paths: &[String], chunk: usize) -> Vec<&[String]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, path) in paths.iter().enumerate() {
        if index > start && (index - start >= chunk - 1 || bytes + path.len() > CHUNK_BYTES) {
            chunks.push(&paths[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += path.len() + 16;
    }
    chunks.push(&paths[start..]);
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_both_limits() {
        let paths: Vec<String> = (0..2500).map(|i| format!("/p/items/{i}")).collect();
        let sizes: Vec<usize> = chunks(&paths, CHUNK_OPS).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [999, 999, 502]);
        let long: Vec<String> = (0..3).map(|_| "x".repeat(300 * 1024)).collect();
        assert_eq!(chunks(&long, CHUNK_OPS).len(), 3);
        assert_eq!(chunks(&[], CHUNK_OPS).len(), 1);
        assert_eq!(chunks(&paths[..5], 3).iter().map(|c| c.len()).collect::<Vec<_>>(), [2, 2, 1]);
        let set = SetPaths::new("/p");
        assert!(fits_one_request(&set, CHUNK_OPS, &paths[..999], &[]));
        assert!(!fits_one_request(&set, CHUNK_OPS, &paths[..999], &paths[..1]));
    }
}
