//! Transactions on the model's data tree: each change is applied with a journal entry, a failing transaction is
//! rolled back newest change first, and a committing one takes its zxid and then fires its watches; with the
//! path rules every change checks.

use super::{Mode, Node, SessionId, Stat, WatchEvent, WatchKind, Zk, ZkErr};

/// One change applied by a transaction that has not committed yet. Read backwards it undoes the transaction (so a
/// failed multi leaves no trace); read forwards at commit it says which watches to fire.
pub(super) enum Applied {
    Created(String),
    /// The removed node, kept so a rollback can put it back exactly.
    Deleted(String, Node),
    /// The node's data, version and mzxid before a `set_data`.
    DataSet(String, Vec<u8>, i32, i64),
}

impl Zk {
    /// Creates one node as part of the transaction `zxid`, recording it in `journal`. Checks run in the server's
    /// order (NoNode, NodeExists, NoChildrenForEphemerals) and all come before any change, so an Err changes nothing.
    pub(super) fn apply_create(
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
    pub(super) fn check_version(&self, path: &str, version: Option<i32>) -> Result<(), ZkErr> {
        let node = self.nodes.get(path).ok_or(ZkErr::NoNode)?;
        match version {
            Some(version) if version != -1 && version != node.version => Err(ZkErr::BadVersion),
            _ => Ok(()),
        }
    }

    /// Sets one node's data as part of the transaction `zxid`, recording what it was in `journal`.
    pub(super) fn apply_set_data(
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
    pub(super) fn apply_delete(&mut self, path: &str, journal: &mut Vec<Applied>) -> Result<(), ZkErr> {
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
    pub(super) fn rollback(&mut self, journal: Vec<Applied>) {
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
    pub(super) fn commit(&mut self, zxid: i64, journal: Vec<Applied>) {
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
}

/// Absolute, no trailing slash (except the root), no empty, "." or ".." component, no NUL.
pub(super) fn is_valid(path: &str) -> bool {
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
