//! Party membership: one ephemeral node per member under `<path>/party`.
//!
//! A member's node is `<32 lowercase hex>-<identifier>-<10-digit sequence>` (ephemeral sequential), its data the
//! identifier, then a line announcing its set of items and partition function (see `announcement`). kazoo's `ShallowParty`
//! names a member by the text after the first `-` of its node, so this member's name is `<identifier>-<sequence>`
//! (unique even when identifiers repeat) and a kazoo member's name is its identifier. The random hex prefix lets a
//! member recognise its own node after a create whose reply was lost.
//!
//! A static member (`Builder::static_membership`) joins exactly as kazoo does: its node is `<32 hex>-<identifier>`
//! (ephemeral, not sequential), so its name is its identifier and a restarted process gets the same name back. It
//! must be the only node with that name: [`join`] waits for any other node carrying it to go first.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::Error;
use crate::paths::Paths;
use crate::retry::{is_transient, retry_transient};
use crate::zookeeper::{Mode, Stat, ZkError, ZooKeeper};
use proto::layout::{member_name, name_of_own_node, node_prefix, static_node};

/// This member's node in the party.
#[derive(Clone, Debug)]
pub(crate) struct Membership {
    /// The node's name under `<path>/party`.
    pub node: String,
    /// The member's name: the node name after its first `-`.
    pub name: Arc<str>,
}

/// 32 random lowercase hex digits, as Python's `uuid.uuid4().hex` (from the session's randomness, so the simulation
/// replays them).
fn random_hex<Z: ZooKeeper>(zk: &Z) -> String {
    format!("{:016x}{:016x}", zk.random(), zk.random())
}

/// Creates the base path, `party` and `locks` (persistent, empty, open ACL, as kazoo's `ensure_path`). `mkdir -p`
/// fails with `NoNode` only when the client's chroot is missing, which the error then names.
pub(crate) async fn ensure_base<Z: ZooKeeper>(zk: &Z, paths: &Paths) -> Result<(), Error> {
    for path in [&paths.party, &paths.locks] {
        retry_transient(zk, || zk.mkdir(path, &paths.acls)).await.map_err(|e| match e {
            ZkError::NoNode if zk.chroot() != "/" => Error::ChrootMissing { chroot: zk.chroot().to_string() },
            e => Error::zk("mkdir", path.as_str(), e),
        })?;
    }
    Ok(())
}

/// How a member's party node is made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Naming {
    /// Ephemeral sequential, `<name><sequence>`: the name given to [`join`] is the node's prefix (see
    /// [`node_prefix`]).
    Sequential,
    /// A static member's node (`Builder::static_membership`): ephemeral, the name given to [`join`] is the whole
    /// node (see [`static_node`]). Another node carrying the identifier is waited for up to `wait` (`None`: not at
    /// all, [`Error::IdentifierInUse`] at once).
    Static { wait: Option<Duration> },
}

/// A new name for this member's party node, ours alone (32 random hex digits first): the whole node under static
/// membership, its prefix otherwise. Chosen before the join so that whoever drops a join can find and delete the node.
pub(crate) fn fresh_node_name<Z: ZooKeeper>(zk: &Z, identifier: &str, static_membership: bool) -> String {
    let hex = random_hex(zk);
    if static_membership { static_node(&hex, identifier) } else { node_prefix(&hex, identifier) }
}

/// Joins the party with the node `name` (see [`Naming`]): the one join, at start-up (`build()`, which waits for a
/// static member's predecessor) and when the core joins again after our node disappeared (which does not: a
/// process with the same identifier took our place, and we must not join twice).
///
/// Cancel safe in this sense: `name` is unique, so whoever drops the future can find and delete the node.
pub(crate) async fn join<Z: ZooKeeper>(
    zk: &Z,
    paths: &Paths,
    identifier: &str,
    data: &str,
    name: &str,
    naming: Naming,
) -> Result<Membership, Error> {
    match naming {
        Naming::Sequential => join_with_prefix(zk, paths, data, name).await,
        Naming::Static { wait } => join_static(zk, paths, identifier, data, name, wait).await,
    }
}

/// Joins the party with a node named `<prefix><sequence>` (see [`node_prefix`]).
async fn join_with_prefix<Z: ZooKeeper>(zk: &Z, paths: &Paths, data: &str, prefix: &str) -> Result<Membership, Error> {
    let path = format!("{}/{prefix}", paths.party);
    loop {
        match zk.create(&path, data.as_bytes(), Mode::EphemeralSequential, &paths.acls).await {
            Ok((_, sequence)) => return Ok(Membership::from_node(format!("{prefix}{sequence}"))),
            Err(err) if is_transient(&err) => {
                // The create may have happened: our random prefix finds it if so.
                tracing::warn!(error = %err, "party join lost its reply; looking for our node");
                let children = retry_transient(zk, || zk.list_children(&paths.party))
                    .await
                    .map_err(|e| Error::zk("get_children", paths.party.as_str(), e))?;
                if let Some(node) = children.into_iter().find(|child| child.starts_with(prefix)) {
                    return Ok(Membership::from_node(node));
                }
            }
            Err(err) => return Err(Error::zk("create", path, err)),
        }
    }
}

/// Joins the party as a static member with the node `<path>/party/<node>` (see [`static_node`]), whose member name
/// is exactly `identifier`.
///
/// Another party node with the same name (a crashed predecessor whose session has not expired yet, or a live
/// duplicate) is logged and waited for, up to `wait` (`None`: not at all), then this fails with
/// [`Error::IdentifierInUse`]. After creating its node the member lists the party again: if an older node with its
/// name appeared meanwhile (two processes joining at once), it deletes its own node and waits again, so of two
/// processes racing for one identifier exactly one joins (the older node, by creation zxid, stays).
///
/// Cancel safe in the same sense as [`join_with_prefix`]: the node's name is unique, so whoever drops the future can
/// find and delete it.
async fn join_static<Z: ZooKeeper>(
    zk: &Z,
    paths: &Paths,
    identifier: &str,
    data: &str,
    node: &str,
    wait: Option<Duration>,
) -> Result<Membership, Error> {
    let started = zk.now();
    let elapsed = || zk.now().saturating_duration_since(started);
    let path = format!("{}/{node}", paths.party);
    let mut announced = HashSet::new();
    loop {
        // 1. Wait until nobody else carries our name.
        let holders = namesakes(zk, paths, identifier, node).await?;
        if let Some((other, stat)) = holders.into_iter().next() {
            let in_use = || Error::IdentifierInUse {
                identifier: identifier.to_owned(),
                node: other.clone(),
                session: stat.ephemeral_owner,
                waited: elapsed(),
            };
            let Some(limit) = wait else { return Err(in_use()) };
            let left = limit.saturating_sub(elapsed());
            if left.is_zero() {
                return Err(in_use());
            }
            if announced.insert(other.clone()) {
                tracing::warn!(
                    identifier,
                    node = %other,
                    session = stat.ephemeral_owner,
                    limit = ?limit,
                    "another party node carries our static identifier (a crashed predecessor whose session has not \
                     expired, or a live duplicate); waiting for it to go"
                );
            }
            let other_path = format!("{}/{other}", paths.party);
            let gone = std::pin::pin!(crate::lock_requests::wait_for(zk, &other_path));
            let timeout = std::pin::pin!(zk.sleep(left));
            match futures::future::select(gone, timeout).await {
                futures::future::Either::Right(_) => return Err(in_use()),
                futures::future::Either::Left((Ok(()), _)) => {
                    tracing::info!(identifier, node = %other, waited = ?elapsed(), "the other node is gone");
                }
                futures::future::Either::Left((Err(err), _)) if is_transient(&err) => {
                    zk.sleep(Duration::from_millis(50)).await;
                }
                futures::future::Either::Left((Err(err), _)) => {
                    return Err(Error::zk("exists", other_path.as_str(), err));
                }
            }
            continue;
        }
        // 2. Take our place. A create replayed after a lost reply finds our own node (the hex makes it ours).
        let created =
            match retry_transient(zk, || zk.create(&path, data.as_bytes(), Mode::Ephemeral, &paths.acls)).await {
                Ok((stat, _)) if !stat.is_invalid() => Some(stat.czxid),
                Ok(_) | Err(ZkError::NodeExists) => None,
                Err(err) => return Err(Error::zk("create", path, err)),
            };
        let czxid = match created {
            Some(czxid) => czxid,
            None => match retry_transient(zk, || zk.check_stat(&path)).await {
                Ok(Some(stat)) => stat.czxid,
                // Gone already (deleted by hand): start over.
                Ok(None) => continue,
                Err(err) => return Err(Error::zk("exists", path, err)),
            },
        };
        let membership = Membership::from_node(node.to_owned());
        // 3. Did an older node with our name appear while we joined? Then it keeps its place and we step back.
        let others = namesakes(zk, paths, identifier, node).await?;
        if let Some((other, stat)) = others.iter().find(|(_, stat)| stat.czxid < czxid) {
            tracing::warn!(
                identifier,
                node = %other,
                session = stat.ephemeral_owner,
                "an older party node with our static identifier appeared while we joined; stepping back"
            );
            leave(zk, paths, &membership).await?;
            if wait.is_none() {
                return Err(Error::IdentifierInUse {
                    identifier: identifier.to_owned(),
                    node: other.clone(),
                    session: stat.ephemeral_owner,
                    waited: elapsed(),
                });
            }
            continue;
        }
        for (other, stat) in &others {
            // Younger: a process of this crate steps back on its own; anything else (a kazoo member) would not.
            tracing::warn!(
                identifier,
                node = %other,
                session = stat.ephemeral_owner,
                "a newer party node carries our static identifier; a static member of this crate gives way to us, \
                 anything else is a duplicate identifier"
            );
        }
        return Ok(membership);
    }
}

/// The other children of `<path>/party` whose member name is `identifier` (every node but `ours`), with their stats,
/// oldest first. Nodes that vanish while being read are left out.
async fn namesakes<Z: ZooKeeper>(
    zk: &Z,
    paths: &Paths,
    identifier: &str,
    ours: &str,
) -> Result<Vec<(String, Stat)>, Error> {
    let children = retry_transient(zk, || zk.list_children(&paths.party))
        .await
        .map_err(|e| Error::zk("get_children", paths.party.as_str(), e))?;
    let mut found = Vec::new();
    for child in children.into_iter().filter(|child| child != ours && member_name(child) == Some(identifier)) {
        let path = format!("{}/{child}", paths.party);
        match retry_transient(zk, || zk.check_stat(&path)).await {
            Ok(Some(stat)) => found.push((child, stat)),
            Ok(None) => {}
            Err(err) => return Err(Error::zk("exists", path, err)),
        }
    }
    found.sort_by_key(|(_, stat)| stat.czxid);
    Ok(found)
}

impl Membership {
    pub(crate) fn from_node(node: String) -> Self {
        Membership { name: Arc::from(name_of_own_node(&node)), node }
    }
}

/// Leaves the party. A node that is already gone (deleted, or its session ended) counts as left.
pub(crate) async fn leave<Z: ZooKeeper>(zk: &Z, paths: &Paths, membership: &Membership) -> Result<(), Error> {
    let path = format!("{}/{}", paths.party, membership.node);
    match retry_transient(zk, || zk.delete(&path, None)).await {
        Ok(()) | Err(ZkError::NoNode) => Ok(()),
        Err(err) => Err(Error::zk("delete", path, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_name_is_after_first_dash() {
        let m = Membership::from_node("0123456789abcdef0123456789abcdef-a-b-0000000007".into());
        assert_eq!(&*m.name, "a-b-0000000007");
    }

    #[test]
    fn static_nodes_are_named_by_their_identifier() {
        let node = static_node("0123456789abcdef0123456789abcdef", "worker-3");
        assert_eq!(&*Membership::from_node(node).name, "worker-3");
    }
}
