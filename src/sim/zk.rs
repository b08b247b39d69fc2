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
//!   `cversion` on every child *create* (`newCversion = parent.cversion + 1`) but only moves `pzxid` on a child
//!   delete, so deletes do not advance the counter; suffixes still never repeat under a parent.
//! * Sessions are transactions too: `createSession` and `closeSession` each take a zxid; all the ephemerals of an
//!   ending session are deleted under its `closeSession` zxid.
//! * A node gets a NodeDeleted event on its data watches and its child watches, and its parent's child watches get
//!   NodeChildrenChanged. The server sends one notification per session and path; the client then completes every
//!   watcher it registered on that path, which is why each [`WatchId`] here fires on its own.
//! * An empty multi is answered by `zookeeper-client` without contacting the server (`Ok(vec![])`), so it is here.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchKind {
    Children,
    Data,
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
            cversion: self.cversion,
            version: self.version,
        }
    }
}

/// One change applied by a transaction that has not committed yet. Read backwards it undoes the transaction (so a
/// failed multi leaves no trace); read forwards at commit it says which watches to fire.
enum Applied {
    Created(String),
    /// The removed node, kept so a rollback can put it back exactly.
    Deleted(String, Node),
    /// The node's data, version and mzxid before a `set_data`.
    DataSet(String, Vec<u8>, i32, i64),
}

/// Watches of one kind: path → (session, id) in registration order, so they fire in a reproducible order.
type WatchTable = BTreeMap<String, Vec<(SessionId, WatchId)>>;

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

    fn register(&mut self, kind: WatchKind, s: SessionId, path: &str) -> WatchId {
        let id = self.next_watch;
        self.next_watch += 1;
        let table = match kind {
            WatchKind::Data => &mut self.data_watches,
            WatchKind::Children => &mut self.child_watches,
        };
        table.entry(path.to_owned()).or_default().push((s, id));
        id
    }

    /// Creates one node as part of the transaction `zxid`, recording it in `journal`. Checks run in the server's
    /// order (NoNode, NodeExists, NoChildrenForEphemerals) and all come before any change, so an Err changes nothing.
    fn apply_create(
        &mut self,
        s: SessionId,
        path: &str,
        data: &[u8],
        mode: Mode,
        zxid: i64,
        journal: &mut Vec<Applied>,
    ) -> Result<(String, Stat), ZkErr> {
        // The parent is whatever precedes the last '/' of the text as given, as on the server: a sequential create of
        // "/a/" makes "/a/0000000007".
        let (parent_path, _) = split(path).ok_or(ZkErr::NoNode)?;
        let parent = self.nodes.get(parent_path).ok_or(ZkErr::NoNode)?;
        let (parent_cversion, parent_owner) = (parent.cversion, parent.ephemeral_owner);
        let (path, owner) = match mode {
            Mode::Persistent => (path.to_owned(), 0),
            Mode::EphemeralSequential => (format!("{path}{parent_cversion:010}"), s),
            Mode::Ephemeral => (path.to_owned(), s),
        };
        if !is_valid(&path) {
            return Err(ZkErr::NoNode);
        }
        if self.nodes.contains_key(&path) {
            return Err(ZkErr::NodeExists);
        }
        if parent_owner != 0 {
            return Err(ZkErr::NoChildrenForEphemerals);
        }

        let (parent_path, name) = split(&path).expect("a valid path has a parent");
        let parent = self.nodes.get_mut(parent_path).expect("looked up above");
        parent.children.insert(name.to_owned());
        parent.cversion += 1;
        let node = Node::new(data.to_vec(), zxid, owner);
        let stat = node.stat();
        self.nodes.insert(path.clone(), node);
        if owner != 0 {
            self.sessions.get_mut(&owner).expect("callers check the session is alive").insert(path.clone());
        }
        journal.push(Applied::Created(path.clone()));
        Ok((path, stat))
    }

    /// NoNode if the node is missing, BadVersion if `version` is given and is not its data version.
    fn check_version(&self, path: &str, version: Option<i32>) -> Result<(), ZkErr> {
        let node = self.nodes.get(path).ok_or(ZkErr::NoNode)?;
        match version {
            Some(version) if version != -1 && version != node.version => Err(ZkErr::BadVersion),
            _ => Ok(()),
        }
    }

    /// Sets one node's data as part of the transaction `zxid`, recording what it was in `journal`.
    fn apply_set_data(
        &mut self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
        zxid: i64,
        journal: &mut Vec<Applied>,
    ) -> Result<Stat, ZkErr> {
        self.check_version(path, version)?;
        let node = self.nodes.get_mut(path).ok_or(ZkErr::NoNode)?;
        journal.push(Applied::DataSet(
            path.to_owned(),
            std::mem::replace(&mut node.data, data.to_vec()),
            node.version,
            node.mzxid,
        ));
        node.version = node.version.wrapping_add(1);
        node.mzxid = zxid;
        Ok(node.stat())
    }

    /// Deletes one node as part of a transaction, recording it (with the node, for rollback) in `journal`.
    fn apply_delete(&mut self, path: &str, journal: &mut Vec<Applied>) -> Result<(), ZkErr> {
        if path == "/" {
            return Err(ZkErr::NoNode);
        }
        let node = self.nodes.get(path).ok_or(ZkErr::NoNode)?;
        if !node.children.is_empty() {
            return Err(ZkErr::NotEmpty);
        }

        let (path, node) = self.nodes.remove_entry(path).expect("looked up above");
        let (parent_path, name) = split(&path).expect("a stored path has a parent");
        // Only the child set changes: the server moves the parent's pzxid on a delete, not its cversion.
        self.nodes.get_mut(parent_path).expect("a stored node's parent exists").children.remove(name);
        if node.ephemeral_owner != 0 {
            // Absent when the owner is the session being closed (expire has already removed its entry).
            if let Some(paths) = self.sessions.get_mut(&node.ephemeral_owner) {
                paths.remove(&path);
            }
        }
        journal.push(Applied::Deleted(path, node));
        Ok(())
    }

    /// Undoes a failed transaction, newest change first, so the state (including `cversion`s) is what it was.
    fn rollback(&mut self, journal: Vec<Applied>) {
        for applied in journal.into_iter().rev() {
            match applied {
                Applied::Created(path) => {
                    let node = self.nodes.remove(&path).expect("created by this transaction");
                    let (parent_path, name) = split(&path).expect("a stored path has a parent");
                    let parent = self.nodes.get_mut(parent_path).expect("a stored node's parent exists");
                    parent.children.remove(name);
                    parent.cversion -= 1;
                    if node.ephemeral_owner != 0 {
                        self.sessions.get_mut(&node.ephemeral_owner).expect("owner is alive").remove(&path);
                    }
                }
                Applied::Deleted(path, node) => {
                    let (parent_path, name) = split(&path).expect("a stored path has a parent");
                    self.nodes.get_mut(parent_path).expect("parents outlive children").children.insert(name.to_owned());
                    if node.ephemeral_owner != 0 {
                        self.sessions.get_mut(&node.ephemeral_owner).expect("owner is alive").insert(path.clone());
                    }
                    self.nodes.insert(path, node);
                }
                Applied::DataSet(path, data, version, mzxid) => {
                    let node = self.nodes.get_mut(&path).expect("set by this transaction");
                    (node.data, node.version, node.mzxid) = (data, version, mzxid);
                }
            }
        }
    }

    /// Makes a transaction visible: takes its zxid, then fires the watches of its changes in order. Firing after the
    /// whole transaction gives the same result as firing per change: nothing registers watches in between.
    fn commit(&mut self, zxid: i64, journal: Vec<Applied>) {
        self.zxid = zxid;
        for applied in journal {
            match applied {
                Applied::Created(path) => {
                    // Nothing can watch a missing node here (reads of one fail), but a real server would notify.
                    self.trigger(WatchKind::Data, &path, WatchEvent::NodeCreated);
                    self.trigger(WatchKind::Children, parent_of(&path), WatchEvent::NodeChildrenChanged);
                }
                Applied::Deleted(path, _) => {
                    self.trigger(WatchKind::Data, &path, WatchEvent::NodeDeleted);
                    self.trigger(WatchKind::Children, &path, WatchEvent::NodeDeleted);
                    self.trigger(WatchKind::Children, parent_of(&path), WatchEvent::NodeChildrenChanged);
                }
                Applied::DataSet(path, ..) => self.trigger(WatchKind::Data, &path, WatchEvent::NodeDataChanged),
            }
        }
    }

    /// Fires, and so disarms (watches are one-shot), every watch of `kind` on `path`.
    fn trigger(&mut self, kind: WatchKind, path: &str, event: WatchEvent) {
        let table = match kind {
            WatchKind::Data => &mut self.data_watches,
            WatchKind::Children => &mut self.child_watches,
        };
        if let Some(watches) = table.remove(path) {
            let fired =
                watches.into_iter().map(|(session, watch)| Fired { session, watch, path: path.to_owned(), event });
            self.fired.extend(fired);
        }
    }
}

/// Forgets, without firing, every watch `s` registered.
fn drop_session_watches(table: &mut WatchTable, s: SessionId) {
    table.retain(|_, watches| {
        watches.retain(|&(owner, _)| owner != s);
        !watches.is_empty()
    });
}

/// Absolute, no trailing slash (except the root), no empty, "." or ".." component, no NUL.
fn is_valid(path: &str) -> bool {
    path == "/"
        || path.strip_prefix('/').is_some_and(|rest| {
            rest.split('/').all(|name| !name.is_empty() && name != "." && name != ".." && !name.contains('\0'))
        })
}

/// (parent path, last component) split at the last '/'; the root's children have parent "/".
fn split(path: &str) -> Option<(&str, &str)> {
    let i = path.rfind('/')?;
    Some((if i == 0 { "/" } else { &path[..i] }, &path[i + 1..]))
}

fn parent_of(path: &str) -> &str {
    split(path).map_or("/", |(parent, _)| parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (session, watch, path, event) of each fired watch, for compact assertions.
    fn fired(zk: &mut Zk) -> Vec<(SessionId, WatchId, String, WatchEvent)> {
        zk.take_fired().into_iter().map(|f| (f.session, f.watch, f.path, f.event)).collect()
    }

    fn create(path: &str, mode: Mode) -> WriteOp {
        WriteOp::Create { path: path.to_owned(), data: path.as_bytes().to_vec(), mode }
    }

    fn delete(path: &str) -> WriteOp {
        WriteOp::Delete { path: path.to_owned(), version: None }
    }

    #[test]
    fn new_tree_and_sessions() {
        let mut zk = Zk::default();
        assert_eq!(zk.exists("/"), Some(Stat::default()));
        assert_eq!(zk.zxid(), 0);
        let (a, b) = (zk.open_session(), zk.open_session());
        assert_eq!((a, b), (1, 2));
        assert!(zk.is_alive(a) && zk.is_alive(b) && !zk.is_alive(0) && !zk.is_alive(3));
        // createSession is a transaction.
        assert_eq!(zk.zxid(), 2);
    }

    #[test]
    fn create_errors_and_paths() {
        let mut zk = Zk::new();
        let s = zk.open_session();
        assert_eq!(zk.create(s, "/a/b", b"", Mode::Persistent), Err(ZkErr::NoNode));
        let (path, stat) = zk.create(s, "/a", b"x", Mode::Persistent).unwrap();
        assert_eq!(path, "/a");
        assert_eq!((stat.czxid, stat.mzxid, stat.ephemeral_owner, stat.num_children), (zk.zxid(), zk.zxid(), 0, 0));
        assert_eq!(zk.create(s, "/a", b"", Mode::Persistent), Err(ZkErr::NodeExists));
        assert_eq!(zk.create(s, "/", b"", Mode::Persistent), Err(ZkErr::NodeExists));
        for bad in ["a", "/a/", "//a", "/a//b", "/a/.", "/a/..", ""] {
            assert_eq!(zk.create(s, bad, b"", Mode::Persistent), Err(ZkErr::NoNode), "{bad:?}");
            assert_eq!(zk.children(s, bad, true), Err(ZkErr::NoNode), "{bad:?}");
        }
        let (eph, stat) = zk.create(s, "/a/e-", b"", Mode::EphemeralSequential).unwrap();
        assert_eq!(stat.ephemeral_owner, s);
        assert_eq!(zk.create(s, &format!("{eph}/c"), b"", Mode::Persistent), Err(ZkErr::NoChildrenForEphemerals));
        // The server checks NodeExists before NoChildrenForEphemerals; a sequential "/a/" names a child of "/a".
        assert_eq!(zk.create(s, &eph, b"", Mode::Persistent), Err(ZkErr::NodeExists));
        assert_eq!(zk.create(s, "/a/", b"", Mode::EphemeralSequential).unwrap().0, "/a/0000000001");
        assert_eq!(zk.delete(s, "/a"), Err(ZkErr::NotEmpty));
        assert_eq!(zk.delete(s, "/missing"), Err(ZkErr::NoNode));
        assert_eq!(zk.delete(s, "/"), Err(ZkErr::NoNode));
        assert_eq!(zk.data_of("/a"), Some(b"x".to_vec()));
        assert_eq!(zk.children_of("/a"), ["0000000001", "e-0000000000"]);
        assert_eq!(zk.children_of("/missing"), Vec::<String>::new());
        assert_eq!(zk.exists("/a").unwrap().num_children, 2);
        assert_eq!(zk.get_data(s, "/a", false), Ok((b"x".to_vec(), zk.exists("/a").unwrap(), None)));
    }

    #[test]
    fn sequential_numbering_across_deletes() {
        let mut zk = Zk::new();
        let s = zk.open_session();
        zk.mkdir(s, "/a/locks/x").unwrap();
        let lock = "/a/locks/x/abc__lock__";
        let first = zk.create(s, lock, b"", Mode::EphemeralSequential).unwrap().0;
        let second = zk.create(s, lock, b"", Mode::EphemeralSequential).unwrap().0;
        assert_eq!(
            (first.as_str(), second.as_str()),
            ("/a/locks/x/abc__lock__0000000000", "/a/locks/x/abc__lock__0000000001")
        );
        zk.delete(s, &first).unwrap();
        zk.delete(s, &second).unwrap();
        // Deletes leave the counter alone (only pzxid moves on the server); numbers are never reused.
        assert_eq!(zk.exists("/a/locks/x").unwrap().cversion, 2);
        // Persistent children count too, and a failed create (NodeExists) does not.
        zk.create(s, "/a/locks/x/p", b"", Mode::Persistent).unwrap();
        assert_eq!(zk.create(s, "/a/locks/x/p", b"", Mode::Persistent), Err(ZkErr::NodeExists));
        let third = zk.create(s, "/a/locks/x/other-", b"", Mode::EphemeralSequential).unwrap().0;
        assert_eq!(third, "/a/locks/x/other-0000000003");
        let stat = zk.exists("/a/locks/x").unwrap();
        assert_eq!((stat.cversion, stat.num_children), (4, 2));
        // Counters are per parent.
        assert_eq!(zk.create(s, "/a/n-", b"", Mode::EphemeralSequential).unwrap().0, "/a/n-0000000001");
    }

    #[test]
    fn mkdir_creates_ancestors_once() {
        let mut zk = Zk::new();
        let s = zk.open_session();
        zk.mkdir(s, "/a/b/c").unwrap();
        assert_eq!(zk.zxid(), 4, "one create per missing node");
        assert!(zk.exists("/a/b/c").is_some());
        zk.mkdir(s, "/a/b/c").unwrap();
        zk.mkdir(s, "/a").unwrap();
        zk.mkdir(s, "/").unwrap();
        assert_eq!(zk.zxid(), 4, "existing nodes are left alone");
        zk.mkdir(s, "/a/b/d").unwrap();
        assert_eq!(zk.children_of("/a/b"), ["c", "d"]);
        let eph = zk.create(s, "/a/e", b"", Mode::EphemeralSequential).unwrap().0;
        assert_eq!(zk.mkdir(s, &format!("{eph}/x")), Err(ZkErr::NoChildrenForEphemerals));
        assert_eq!(zk.mkdir(s, "/a/"), Err(ZkErr::NoNode));
    }

    #[test]
    fn plain_ephemerals_keep_their_name_and_end_with_their_session() {
        let mut zk = Zk::new();
        let (s, t) = (zk.open_session(), zk.open_session());
        zk.mkdir(s, "/p").unwrap();
        let (path, stat) = zk.create(s, "/p/abc-w1", b"w1", Mode::Ephemeral).unwrap();
        assert_eq!((path.as_str(), stat.ephemeral_owner), ("/p/abc-w1", s));
        assert_eq!(zk.create(t, "/p/abc-w1", b"", Mode::Ephemeral), Err(ZkErr::NodeExists));
        zk.expire(s);
        assert!(zk.exists("/p/abc-w1").is_none());
    }

    #[test]
    fn failed_multi_changes_nothing() {
        let mut zk = Zk::new();
        let (s, w) = (zk.open_session(), zk.open_session());
        zk.mkdir(s, "/p").unwrap();
        zk.create(s, "/p/old", b"", Mode::Persistent).unwrap();
        let (_, watch) = zk.children(w, "/p", true).unwrap();
        let (_, _, old_watch) = zk.get_data(w, "/p/old", true).unwrap();
        let before = zk.clone();

        let ops = [
            create("/p/new", Mode::Persistent),
            create("/p/seq-", Mode::EphemeralSequential),
            delete("/p/old"),
            delete("/p/missing"),
            create("/p/never", Mode::Persistent),
        ];
        assert_eq!(zk.multi_write(s, &ops), Err((3, ZkErr::NoNode)));
        // Nodes, counters, zxid, ephemerals and armed watches are all as before, and nothing fired.
        assert_eq!(zk, before);
        assert!(zk.take_fired().is_empty());

        let ops = [delete("/p/old"), create("/p/x", Mode::Persistent), create("/p/x", Mode::Persistent)];
        assert_eq!(zk.multi_write(s, &ops), Err((2, ZkErr::NodeExists)));
        assert_eq!(zk, before);

        assert_eq!(zk.multi_write(w, &[create("/p/y", Mode::Persistent), delete("/p")]), Err((1, ZkErr::NotEmpty)));
        assert_eq!(zk, before);

        // The same ops minus the failing one commit, and the watches armed before are still there to fire.
        let ops = [create("/p/new", Mode::Persistent), create("/p/seq-", Mode::EphemeralSequential), delete("/p/old")];
        let results = zk.multi_write(s, &ops).unwrap();
        let WriteResult::Created { path, .. } = &results[1] else { panic!("{results:?}") };
        assert_eq!(path, "/p/seq-0000000002", "the rolled-back creates did not use up sequence numbers");
        assert_eq!(results[2], WriteResult::Deleted);
        assert_eq!(zk.zxid(), before.zxid() + 1);
        assert_eq!(
            fired(&mut zk),
            [
                (w, watch.unwrap(), "/p".to_owned(), WatchEvent::NodeChildrenChanged),
                (w, old_watch.unwrap(), "/p/old".to_owned(), WatchEvent::NodeDeleted),
            ]
        );
    }

    #[test]
    fn multi_shares_one_zxid() {
        let mut zk = Zk::new();
        let s = zk.open_session();
        zk.mkdir(s, "/p").unwrap();
        let zxid = zk.zxid();
        let ops = [
            create("/p/a", Mode::Persistent),
            create("/p/a/b", Mode::Persistent),
            create("/p/a/s-", Mode::EphemeralSequential),
            create("/p/a/s-", Mode::EphemeralSequential),
        ];
        let results = zk.multi_write(s, &ops).unwrap();
        assert_eq!(zk.zxid(), zxid + 1, "the whole multi is one transaction");
        let created: Vec<(String, Stat)> = results
            .into_iter()
            .map(|r| match r {
                WriteResult::Created { path, stat } => (path, stat),
                other => panic!("only creates here: {other:?}"),
            })
            .collect();
        assert!(created.iter().all(|(_, stat)| stat.czxid == zxid + 1 && stat.mzxid == zxid + 1));
        assert!(created[1..].iter().all(|(path, stat)| zk.exists(path) == Some(*stat)));
        // Later ops see earlier ones: consecutive suffixes, and "/p/a" had no children when its stat was taken.
        assert_eq!(created[2].0, "/p/a/s-0000000001");
        assert_eq!(created[3].0, "/p/a/s-0000000002");
        assert_eq!(created[0].1.num_children, 0);
        assert_eq!(zk.exists("/p/a").unwrap().czxid, zxid + 1);
        assert_eq!(zk.exists("/p/a").unwrap().num_children, 3);
        // Delete and re-create in one multi: the same zxid again, one step on.
        zk.multi_write(s, &[delete("/p/a/b"), create("/p/a/b", Mode::Persistent)]).unwrap();
        assert_eq!(zk.exists("/p/a/b").unwrap().czxid, zxid + 2);
        assert_eq!(zk.multi_write(s, &[]), Ok(Vec::new()));
        assert_eq!(zk.zxid(), zxid + 2, "an empty multi is not sent");
    }

    #[test]
    fn multi_read_each_op_on_its_own() {
        let mut zk = Zk::new();
        let s = zk.open_session();
        zk.mkdir(s, "/p/c").unwrap();
        let ops = [
            ReadOp::Children { path: "/p".to_owned() },
            ReadOp::Data { path: "/missing".to_owned() },
            ReadOp::Data { path: "/p/c".to_owned() },
            ReadOp::Children { path: "/missing".to_owned() },
        ];
        let stat = zk.exists("/p/c").unwrap();
        assert_eq!(
            zk.multi_read(s, &ops),
            Ok(vec![
                ReadResult::Children(vec!["c".to_owned()]),
                ReadResult::Error(ZkErr::NoNode),
                ReadResult::Data(Vec::new(), stat),
                ReadResult::Error(ZkErr::NoNode),
            ])
        );
        zk.expire(s);
        assert_eq!(zk.multi_read(s, &ops), Err(ZkErr::SessionExpired));
    }

    #[test]
    fn expiry_deletes_ephemerals_and_fires_watches() {
        let mut zk = Zk::new();
        let (a, b, c) = (zk.open_session(), zk.open_session(), zk.open_session());
        zk.mkdir(a, "/party").unwrap();
        zk.mkdir(a, "/locks").unwrap();
        let member = zk.create(a, "/party/m-", b"a", Mode::EphemeralSequential).unwrap().0;
        let lock = zk.create(a, "/locks/l-", b"a", Mode::EphemeralSequential).unwrap().0;
        let other = zk.create(b, "/party/m-", b"b", Mode::EphemeralSequential).unwrap().0;
        let (_, own) = zk.children(a, "/party", true).unwrap();
        let (_, party) = zk.children(b, "/party", true).unwrap();
        let (_, _, on_lock) = zk.get_data(b, &lock, true).unwrap();
        let (_, on_lock_children) = zk.children(c, &lock, true).unwrap();
        let (_, locks) = zk.children(c, "/locks", true).unwrap();
        let zxid = zk.zxid();

        zk.expire(a);
        assert!(!zk.is_alive(a));
        assert_eq!((zk.exists(&member), zk.exists(&lock)), (None, None));
        assert!(zk.exists(&other).is_some(), "only the expired session's nodes go");
        assert_eq!(zk.zxid(), zxid + 1, "closeSession is one transaction");
        // In deletion order (sorted paths); the expired session's own watch is dropped, not fired.
        assert_eq!(
            fired(&mut zk),
            [
                (b, on_lock.unwrap(), lock.clone(), WatchEvent::NodeDeleted),
                (c, on_lock_children.unwrap(), lock, WatchEvent::NodeDeleted),
                (c, locks.unwrap(), "/locks".to_owned(), WatchEvent::NodeChildrenChanged),
                (b, party.unwrap(), "/party".to_owned(), WatchEvent::NodeChildrenChanged),
            ]
        );
        assert!(own.is_some());

        // A dead session can do nothing, and ending it again changes nothing.
        assert_eq!(zk.create(a, "/x", b"", Mode::Persistent), Err(ZkErr::SessionExpired));
        assert_eq!(zk.mkdir(a, "/x"), Err(ZkErr::SessionExpired));
        assert_eq!(zk.delete(a, &other), Err(ZkErr::SessionExpired));
        assert_eq!(zk.children(a, "/", true), Err(ZkErr::SessionExpired));
        assert_eq!(zk.get_data(a, "/", true), Err(ZkErr::SessionExpired));
        assert_eq!(zk.multi_write(a, &[delete(&other)]), Err((0, ZkErr::SessionExpired)));
        assert_eq!(zk.ephemerals(a, "/"), Vec::<String>::new());
        let before = zk.clone();
        zk.expire(a);
        zk.expire(99);
        assert_eq!(zk, before);

        // A new child of /party does not reach the dropped watch of the dead session.
        zk.create(c, "/party/m-", b"c", Mode::EphemeralSequential).unwrap();
        assert!(zk.take_fired().is_empty());
    }

    #[test]
    fn watches_are_one_shot() {
        let mut zk = Zk::new();
        let (s, w) = (zk.open_session(), zk.open_session());
        zk.mkdir(s, "/p").unwrap();
        let (_, first) = zk.children(w, "/p", true).unwrap();
        let (_, second) = zk.children(w, "/p", true).unwrap();
        let (_, third) = zk.children(s, "/p", true).unwrap();
        assert_ne!(first, second, "each registration gets its own id");
        zk.create(s, "/p/a", b"", Mode::Persistent).unwrap();
        let event = WatchEvent::NodeChildrenChanged;
        assert_eq!(
            fired(&mut zk),
            [
                (w, first.unwrap(), "/p".to_owned(), event),
                (w, second.unwrap(), "/p".to_owned(), event),
                (s, third.unwrap(), "/p".to_owned(), event),
            ]
        );
        zk.create(s, "/p/b", b"", Mode::Persistent).unwrap();
        assert!(zk.take_fired().is_empty(), "fired watches are disarmed");

        // A watch request on a missing node fails and arms nothing.
        assert_eq!(zk.children(w, "/p/c", true), Err(ZkErr::NoNode));
        assert_eq!(zk.get_data(w, "/p/c", true), Err(ZkErr::NoNode));
        let (_, none) = zk.children(w, "/p", false).unwrap();
        assert_eq!(none, None);
        zk.create(s, "/p/c", b"", Mode::Persistent).unwrap();
        assert!(zk.take_fired().is_empty());

        // Deleting a node: its data and child watches see NodeDeleted, its parent's child watch a child change.
        let (_, _, data) = zk.get_data(w, "/p/c", true).unwrap();
        let (_, children) = zk.children(w, "/p/c", true).unwrap();
        let (_, parent) = zk.children(w, "/p", true).unwrap();
        zk.delete(s, "/p/c").unwrap();
        assert_eq!(
            fired(&mut zk),
            [
                (w, data.unwrap(), "/p/c".to_owned(), WatchEvent::NodeDeleted),
                (w, children.unwrap(), "/p/c".to_owned(), WatchEvent::NodeDeleted),
                (w, parent.unwrap(), "/p".to_owned(), WatchEvent::NodeChildrenChanged),
            ]
        );
        zk.create(s, "/p/c", b"", Mode::Persistent).unwrap();
        zk.delete(s, "/p/c").unwrap();
        assert!(zk.take_fired().is_empty());
    }

    #[test]
    fn data_versions_guard_set_data_delete_and_check() {
        let mut zk = Zk::new();
        let (s, w) = (zk.open_session(), zk.open_session());
        zk.create(s, "/h", b"v0", Mode::Persistent).unwrap();
        let stat = zk.set_data(s, "/h", b"v1", Some(0)).unwrap();
        assert_eq!(stat.version, 1);
        assert_eq!(zk.data_of("/h").as_deref(), Some(&b"v1"[..]));
        assert_eq!(zk.set_data(s, "/h", b"x", Some(0)), Err(ZkErr::BadVersion), "a stale version is refused");
        assert_eq!(zk.set_data(s, "/missing", b"x", None), Err(ZkErr::NoNode));
        assert_eq!(zk.data_of("/h").as_deref(), Some(&b"v1"[..]), "a refused write changes nothing");

        // A check fails the whole multi, at its index, and leaves everything as it was.
        let before = zk.clone();
        let ops = [WriteOp::Check { path: "/h".into(), version: Some(0) }, create("/new", Mode::Persistent)];
        assert_eq!(zk.multi_write(s, &ops), Err((0, ZkErr::BadVersion)));
        assert_eq!(zk, before);
        let ops = [
            WriteOp::Check { path: "/h".into(), version: Some(1) },
            WriteOp::SetData { path: "/h".into(), data: b"v2".to_vec(), version: Some(1) },
            create("/new", Mode::Persistent),
        ];
        let results = zk.multi_write(s, &ops).unwrap();
        assert!(matches!(results[..], [WriteResult::Checked, WriteResult::Set(_), WriteResult::Created { .. }]));

        // A data watch sees the change (one-shot); a versioned delete needs the current version.
        let (_, _, watch) = zk.get_data(w, "/h", true).unwrap();
        zk.set_data(s, "/h", b"v3", None).unwrap();
        assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/h".to_owned(), WatchEvent::NodeDataChanged)]);
        assert_eq!(zk.delete_versioned(s, "/h", Some(2)), Err(ZkErr::BadVersion));
        assert_eq!(zk.delete_versioned(s, "/h", Some(3)), Ok(()));
    }

    #[test]
    fn exists_watches_see_creation_and_deletion() {
        let mut zk = Zk::new();
        let (s, w) = (zk.open_session(), zk.open_session());
        // On a missing node: armed, and fires at its creation.
        let (stat, watch) = zk.exists_watch(w, "/lease", true).unwrap();
        assert_eq!(stat, None);
        zk.create(s, "/lease", b"", Mode::Ephemeral).unwrap();
        assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/lease".to_owned(), WatchEvent::NodeCreated)]);
        // On an existing one: fires at its deletion, here by its session's end (a writer's lease going).
        let (stat, watch) = zk.exists_watch(w, "/lease", true).unwrap();
        assert_eq!(stat.map(|s| s.ephemeral_owner), Some(s));
        zk.expire(s);
        assert_eq!(fired(&mut zk), [(w, watch.unwrap(), "/lease".to_owned(), WatchEvent::NodeDeleted)]);
        assert_eq!(zk.exists_watch(w, "/lease", false).unwrap(), (None, None));
    }

    #[test]
    fn ephemerals_by_string_prefix() {
        let mut zk = Zk::new();
        let (s, t) = (zk.open_session(), zk.open_session());
        zk.mkdir(s, "/a").unwrap();
        zk.mkdir(s, "/ab").unwrap();
        let ax = zk.create(s, "/a/x-", b"", Mode::EphemeralSequential).unwrap().0;
        let axy = zk.create(s, "/a/xy-", b"", Mode::EphemeralSequential).unwrap().0;
        let ab = zk.create(s, "/ab/z-", b"", Mode::EphemeralSequential).unwrap().0;
        zk.create(t, "/a/x-", b"", Mode::EphemeralSequential).unwrap();
        zk.create(s, "/a/persistent", b"", Mode::Persistent).unwrap();

        assert_eq!(zk.ephemerals(s, "/"), [ax.clone(), axy.clone(), ab.clone()]);
        assert_eq!(zk.ephemerals(s, ""), [ax.clone(), axy.clone(), ab.clone()]);
        // A string prefix, not a subtree: "/a" also matches "/ab/...", "/a/x" also "/a/xy-...".
        assert_eq!(zk.ephemerals(s, "/a"), [ax.clone(), axy.clone(), ab.clone()]);
        assert_eq!(zk.ephemerals(s, "/a/"), [ax.clone(), axy.clone()]);
        assert_eq!(zk.ephemerals(s, "/a/x"), [ax.clone(), axy.clone()]);
        assert_eq!(zk.ephemerals(s, &axy), [axy.as_str()]);
        assert_eq!(zk.ephemerals(s, "/b"), Vec::<String>::new());
        assert_eq!(zk.ephemerals(t, "/a/"), ["/a/x-0000000002"]);

        // Whoever deletes an ephemeral, it leaves its owner's list.
        zk.delete(t, &ax).unwrap();
        assert_eq!(zk.ephemerals(s, "/a/"), [axy]);
    }
}
