//! A deterministic, pure, in-memory model of the ZooKeeper semantics the lock and party recipes rely on, for the
//! seeded simulation tests.
//!
//! It models one server's data tree as seen by clients that never lose their connection: no clocks, no threads, no
//! randomness, and every operation is applied atomically when called. The simulation decides *when* things happen
//! (delivery order, session expiry); this model only decides *what* ZooKeeper would answer. Everything is kept in
//! `BTreeMap`s/`BTreeSet`s so iteration, and therefore every result, is reproducible from the seed.
//!
//! Fidelity notes (all checked against the Apache ZooKeeper server's `PrepRequestProcessor`/`DataTree`):
//! * A sequential node's suffix is the parent's `cversion` before the create, formatted `%010d`. The server bumps
//!   its stored `cversion` on every child *create* (`newCversion = parent.cversion + 1`) but only moves `pzxid` on a
//!   child delete, so deletes do not advance the counter; suffixes still never repeat under a parent. The `cversion`
//!   a client sees counts deletes too: `DataNode.copyStat` reports `2 × cversion − numChildren` (creates + deletes),
//!   as the real server does (checked on 3.8: two creates and two deletes read 4, the next sequential suffix is 2).
//! * Sessions are transactions too: `createSession` and `closeSession` each take a zxid; all the ephemerals of an
//!   ending session are deleted under its `closeSession` zxid.
//! * A node gets a NodeDeleted event on its data watches and its child watches, and its parent's child watches get
//!   NodeChildrenChanged. The server sends one notification per session and path; the client then completes every
//!   watcher it registered on that path, which is why each [`WatchId`] here fires on its own.
//! * An empty multi is answered by `zookeeper-client` without contacting the server (`Ok(vec![])`), so it is here.
//!
//! Here: the model's vocabulary and its requests; [`transaction`] applies, rolls back and commits changes to the
//! data tree; [`watches`] arms and fires the one-shot watches.

mod transaction;
mod watches;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use transaction::is_valid;
use watches::{WatchKind, WatchTable, drop_session_watches};

pub(crate) type SessionId = u64;
pub(crate) type WatchId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ZkErr {
    NoNode,
    NodeExists,
    BadVersion,
    NotEmpty,
    SessionExpired,
    NoChildrenForEphemerals,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Persistent,
    EphemeralSequential,
    /// Ephemeral, named as given (a static member's party node).
    Ephemeral,
}

/// The subset of ZooKeeper's `Stat` the recipes look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    /// The owning session, 0 if persistent.
    pub ephemeral_owner: SessionId,
    pub num_children: usize,
    /// As a client sees it: child creates plus deletes.
    pub cversion: i64,
    /// The data version: bumped by every `set_data`.
    pub version: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WriteOp {
    Create {
        path: String,
        data: Vec<u8>,
        mode: Mode,
    },
    /// At this data version only, if given.
    Delete {
        path: String,
        version: Option<i32>,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    /// Fails unless the node exists (at this data version, if given); changes nothing.
    Check {
        path: String,
        version: Option<i32>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WriteResult {
    Created { path: String, stat: Stat },
    Deleted,
    Set(Stat),
    Checked,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadOp {
    Children { path: String },
    Data { path: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadResult {
    Children(Vec<String>),
    Data(Vec<u8>, Stat),
    Error(ZkErr),
}

// Named after ZooKeeper's event types, prefix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
    NodeCreated,
}

/// One watch that fired: `watch` (registered by `session` on `path`) saw `event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fired {
    pub session: SessionId,
    pub watch: WatchId,
    pub path: String,
    pub event: WatchEvent,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    data: Vec<u8>,
    czxid: i64,
    mzxid: i64,
    version: i32,
    ephemeral_owner: SessionId,
    /// Bumped on every child create; the next sequential suffix under this node.
    cversion: i64,
    /// Child names (not paths); sorted, so listings are deterministic.
    children: BTreeSet<String>,
}

impl Node {
    fn new(data: Vec<u8>, zxid: i64, ephemeral_owner: SessionId) -> Self {
        Node { data, czxid: zxid, mzxid: zxid, version: 0, ephemeral_owner, cversion: 0, children: BTreeSet::new() }
    }

    fn stat(&self) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ephemeral_owner: self.ephemeral_owner,
            num_children: self.children.len(),
            // What a client sees: creates plus deletes (see the module docs).
            cversion: 2 * self.cversion - self.children.len() as i64,
            version: self.version,
        }
    }
}

/// The model server. `Clone` + `Eq` let a checker snapshot it and compare whole states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Zk {
    /// Every node by full path; only well-formed paths ever get in, so a malformed path simply is not found.
    nodes: BTreeMap<String, Node>,
    /// Live sessions → paths of their ephemerals. An id that was handed out but is absent here has ended.
    sessions: BTreeMap<SessionId, BTreeSet<String>>,
    next_session: SessionId,
    data_watches: WatchTable,
    child_watches: WatchTable,
    next_watch: WatchId,
    zxid: i64,
    fired: Vec<Fired>,
}

impl Default for Zk {
    fn default() -> Self {
        Self::new()
    }
}

impl Zk {
    pub fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert("/".to_owned(), Node::new(Vec::new(), 0, 0));
        Zk {
            nodes,
            sessions: BTreeMap::new(),
            next_session: 1,
            data_watches: BTreeMap::new(),
            child_watches: BTreeMap::new(),
            next_watch: 1,
            zxid: 0,
            fired: Vec::new(),
        }
    }

    /// Opens a session; ids start at 1 and are never reused. Takes a zxid, as `createSession` does.
    pub fn open_session(&mut self) -> SessionId {
        let s = self.next_session;
        self.next_session += 1;
        self.sessions.insert(s, BTreeSet::new());
        self.zxid += 1;
        s
    }

    pub fn is_alive(&self, s: SessionId) -> bool {
        self.sessions.contains_key(&s)
    }

    /// The live sessions, in order.
    pub fn live_sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.sessions.keys().copied()
    }

    /// Ends a session (expiry or close): deletes its ephemerals (firing watches as a real server does), drops every
    /// watch registered by it, marks it dead. Idempotent.
    pub fn expire(&mut self, s: SessionId) {
        // Removing the entry is what marks it dead; an unknown or already ended session has nothing left to do.
        let Some(ephemerals) = self.sessions.remove(&s) else { return };
        // Its watchers go before its nodes, so the deletions below notify only the sessions that are still there.
        drop_session_watches(&mut self.data_watches, s);
        drop_session_watches(&mut self.child_watches, s);
        // closeSession is one transaction: every ephemeral goes under the same zxid, watches fire after all of them.
        let zxid = self.zxid + 1;
        let mut journal = Vec::with_capacity(ephemerals.len());
        for path in &ephemerals {
            let deleted = self.apply_delete(path, &mut journal);
            debug_assert_eq!(deleted, Ok(()), "an ephemeral always exists and never has children");
        }
        self.commit(zxid, journal);
    }

    /// Requests fail with SessionExpired when `s` is not alive.
    pub fn create(&mut self, s: SessionId, path: &str, data: &[u8], mode: Mode) -> Result<(String, Stat), ZkErr> {
        self.check_session(s)?;
        let zxid = self.zxid + 1;
        let mut journal = Vec::with_capacity(1);
        // A single create fails before changing anything, so there is nothing to roll back on error.
        let created = self.apply_create(s, path, data, mode, zxid, &mut journal)?;
        self.commit(zxid, journal);
        Ok(created)
    }

    /// Persistent, creating missing ancestors; Ok if it already exists (like zookeeper-client's mkdir).
    pub fn mkdir(&mut self, s: SessionId, path: &str) -> Result<(), ZkErr> {
        self.check_session(s)?;
        if !is_valid(path) {
            return Err(ZkErr::NoNode);
        }
        // Each missing ancestor is its own create request in the client, hence its own zxid.
        let ends = path.match_indices('/').map(|(i, _)| i).skip(1).chain(std::iter::once(path.len()));
        for end in ends {
            let prefix = &path[..end];
            if !self.nodes.contains_key(prefix) {
                self.create(s, prefix, &[], Mode::Persistent)?;
            }
        }
        Ok(())
    }

    /// NotEmpty if it has children. The root cannot be deleted (the server answers BadArguments): NoNode here.
    pub fn delete(&mut self, s: SessionId, path: &str) -> Result<(), ZkErr> {
        self.delete_versioned(s, path, None)
    }

    /// A delete at this data version only, if given (BadVersion otherwise).
    pub fn delete_versioned(&mut self, s: SessionId, path: &str, version: Option<i32>) -> Result<(), ZkErr> {
        self.check_session(s)?;
        self.check_version(path, version)?;
        let zxid = self.zxid + 1;
        let mut journal = Vec::with_capacity(1);
        self.apply_delete(path, &mut journal)?;
        self.commit(zxid, journal);
        Ok(())
    }

    /// Sets a node's data, at this data version only, if given; fires its data watches (NodeDataChanged).
    pub fn set_data(&mut self, s: SessionId, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat, ZkErr> {
        self.check_session(s)?;
        let zxid = self.zxid + 1;
        let mut journal = Vec::with_capacity(1);
        let stat = self.apply_set_data(path, data, version, zxid, &mut journal)?;
        self.commit(zxid, journal);
        Ok(stat)
    }

    /// Stat of a node (`None` if missing). With `watch`, arms a one-shot data watch whether or not the node exists
    /// (it fires on creation, deletion or a data change), as ZooKeeper's `exists` does.
    pub fn exists_watch(
        &mut self,
        s: SessionId,
        path: &str,
        watch: bool,
    ) -> Result<(Option<Stat>, Option<WatchId>), ZkErr> {
        self.check_session(s)?;
        if !is_valid(path) {
            return Err(ZkErr::NoNode);
        }
        let stat = self.nodes.get(path).map(Node::stat);
        let id = watch.then(|| self.register(WatchKind::Data, s, path));
        Ok((stat, id))
    }

    /// Child names, sorted. With `watch`, arms a one-shot child watch (only if the node exists).
    pub fn children(&mut self, s: SessionId, path: &str, watch: bool) -> Result<(Vec<String>, Option<WatchId>), ZkErr> {
        self.check_session(s)?;
        let node = self.nodes.get(path).ok_or(ZkErr::NoNode)?;
        let children = node.children.iter().cloned().collect();
        let id = watch.then(|| self.register(WatchKind::Children, s, path));
        Ok((children, id))
    }

    /// Data and stat. With `watch`, arms a one-shot data watch (only if the node exists).
    pub fn get_data(
        &mut self,
        s: SessionId,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<u8>, Stat, Option<WatchId>), ZkErr> {
        self.check_session(s)?;
        let node = self.nodes.get(path).ok_or(ZkErr::NoNode)?;
        let (data, stat) = (node.data.clone(), node.stat());
        let id = watch.then(|| self.register(WatchKind::Data, s, path));
        Ok((data, stat, id))
    }

    /// All or nothing: on the first failing op nothing is applied and Err((index, err)) is returned. A dead session
    /// fails the whole multi as Err((0, SessionExpired)).
    pub fn multi_write(&mut self, s: SessionId, ops: &[WriteOp]) -> Result<Vec<WriteResult>, (usize, ZkErr)> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.check_session(s).map_err(|err| (0, err))?;
        // One transaction: every op sees the effects of the ones before it and all share one zxid.
        let zxid = self.zxid + 1;
        let mut journal = Vec::with_capacity(ops.len());
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let result = match op {
                WriteOp::Create { path, data, mode } => self
                    .apply_create(s, path, data, *mode, zxid, &mut journal)
                    .map(|(path, stat)| WriteResult::Created { path, stat }),
                WriteOp::Delete { path, version } => self
                    .check_version(path, *version)
                    .and_then(|()| self.apply_delete(path, &mut journal))
                    .map(|()| WriteResult::Deleted),
                WriteOp::SetData { path, data, version } => {
                    self.apply_set_data(path, data, *version, zxid, &mut journal).map(WriteResult::Set)
                }
                WriteOp::Check { path, version } => self.check_version(path, *version).map(|()| WriteResult::Checked),
            };
            match result {
                Ok(result) => results.push(result),
                Err(err) => {
                    self.rollback(journal);
                    return Err((index, err));
                }
            }
        }
        self.commit(zxid, journal);
        Ok(results)
    }

    /// Each read succeeds or fails on its own (ZooKeeper's read-only multi). No watches.
    pub fn multi_read(&mut self, s: SessionId, ops: &[ReadOp]) -> Result<Vec<ReadResult>, ZkErr> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.check_session(s)?;
        let read = |op: &ReadOp| match op {
            ReadOp::Children { path } => self.nodes.get(path).map_or(ReadResult::Error(ZkErr::NoNode), |n| {
                ReadResult::Children(n.children.iter().cloned().collect())
            }),
            ReadOp::Data { path } => self
                .nodes
                .get(path)
                .map_or(ReadResult::Error(ZkErr::NoNode), |n| ReadResult::Data(n.data.clone(), n.stat())),
        };
        Ok(ops.iter().map(read).collect())
    }

    /// Paths of `s`'s ephemeral nodes whose path starts with `prefix` (string prefix, as GetEphemerals), sorted.
    /// Empty for a dead session.
    pub fn ephemerals(&self, s: SessionId, prefix: &str) -> Vec<String> {
        let Some(paths) = self.sessions.get(&s) else { return Vec::new() };
        // Strings sharing a prefix are contiguous in sorted order, starting at the prefix itself.
        paths
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|path| path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Watch events fired since the last call, in firing order.
    pub fn take_fired(&mut self) -> Vec<Fired> {
        std::mem::take(&mut self.fired)
    }

    pub fn exists(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(Node::stat)
    }

    /// Child names, sorted; no watch, empty if missing.
    pub fn children_of(&self, path: &str) -> Vec<String> {
        self.nodes.get(path).map(|n| n.children.iter().cloned().collect()).unwrap_or_default()
    }

    pub fn data_of(&self, path: &str) -> Option<Vec<u8>> {
        self.nodes.get(path).map(|n| n.data.clone())
    }

    /// The zxid of the last committed transaction.
    pub fn zxid(&self) -> i64 {
        self.zxid
    }

    fn check_session(&self, s: SessionId) -> Result<(), ZkErr> {
        if self.is_alive(s) { Ok(()) } else { Err(ZkErr::SessionExpired) }
    }
}

#[cfg(test)]
mod tests;
