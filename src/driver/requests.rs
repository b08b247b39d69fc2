//! The one request path: turns each operation the decision core asks for into ZooKeeper requests, and their outcome
//! into the core's reply. Written once against [`ZooKeeper`], so the driver runs it on zookeeper-client and the
//! deterministic simulation on its in-memory model: the simulation tests the requests that ship.
//!
//! It decides nothing: a failed request comes back as ZooKeeper's answer ([`Code`]) with the error to report, and the
//! core decides what it means. The helpers it calls retry what they must do whole (a release, a verification, a
//! join) while the connection is lost, until the session ends.

use std::collections::HashSet;
use std::sync::Arc;

use crate::Error;
use crate::lock_requests::{self, NodeRef};
use crate::membership::{self, Membership};
use crate::paths::Paths;
use crate::placement::store as placement;
use crate::retry::{code_of, retry_transient};
use crate::session::SessionRef;
use crate::shared_set::{SetStore, read_bridged, read_raw_cached};
use crate::zookeeper::{ReadOp, ReadResult, ZkError, ZooKeeper};
use proto::decision::{Code, Failed, Op, PartyRead, Reply, ReqId};
use proto::error::Detail;
use proto::layout;
use proto::set_layout::cache::SetCache;
use proto::set_layout::{Header, RawRead, SetPaths};

/// What the request path needs besides the session: the member's nodes and identity.
pub(crate) struct Context {
    pub paths: Paths,
    pub identifier: String,
    /// The shared set's nodes, when the set is the shared one.
    pub set: Option<SetPaths>,
    /// A rejoin creates a static member's node (`Builder::static_membership`).
    pub static_membership: bool,
    /// Operations per `multi` of the shared set's updates (a recovery's).
    pub set_chunk: usize,
    /// The shared set's last listing and weight table, so that a read after a small change lists nothing.
    set_cache: std::sync::Mutex<SetCache>,
    /// The placement record's chunks as last read, so that a read after a change reads only the new ones.
    placement_cache: placement::ChunkCache,
}

impl Context {
    pub fn new(
        paths: Paths,
        identifier: String,
        set: Option<SetPaths>,
        static_membership: bool,
        set_chunk: usize,
    ) -> Self {
        Context {
            paths,
            identifier,
            set,
            static_membership,
            set_chunk,
            set_cache: std::sync::Mutex::default(),
            placement_cache: placement::ChunkCache::default(),
        }
    }
}

/// A request's outcome, with the watches a read armed.
pub(crate) struct Done<W> {
    pub id: ReqId,
    pub reply: Reply,
    /// The party read's child watch.
    pub party_watch: Option<W>,
    /// The shared set read's watch.
    pub set_watch: Option<W>,
    /// The placement record read's watch.
    pub placement_watch: Option<W>,
    /// Our new party node, after a rejoin.
    pub joined: Option<Membership>,
    /// The rest of a request answered twice ([`Op::WatchHeld`]): it runs on under the same id once this reply is in.
    pub then: Option<Then<W>>,
}

/// The rest of a request answered twice, which yields its second reply.
pub(crate) type Then<W> = std::pin::Pin<Box<dyn Future<Output = Done<W>> + Send>>;

impl<W> Done<W> {
    /// A reply that armed no watch.
    pub fn reply_to(id: ReqId, reply: Reply) -> Self {
        Done { id, reply, party_watch: None, set_watch: None, placement_watch: None, joined: None, then: None }
    }
}

/// A request `op` on `path` that failed with `err`.
pub(crate) fn failed(op: &'static str, path: &str, err: ZkError) -> Failed {
    Failed { code: code_of(&err), error: Detail::new(Error::zk(op, path, err)) }
}

/// A lock directory's listing that found its item finished ([`Code::Finished`]).
pub(crate) fn finished_listing(dir: &str) -> Failed {
    let item = dir.rsplit('/').next().unwrap_or_default().to_owned();
    Failed {
        code: Code::Finished,
        error: Detail::new(Error::InvalidItem { item, reason: "was finished: its lock is not held again".into() }),
    }
}

/// An operation of several requests that failed with `error` (the requests' errors already wrapped).
pub(crate) fn failed_from(error: Error) -> Failed {
    use zookeeper_client::SessionState;
    let code = match &error {
        Error::ZooKeeper { source, .. } => code_of(source),
        Error::SessionLost { state: SessionState::Closed } => Code::ClientClosed,
        Error::SessionLost { state: SessionState::AuthFailed } => Code::AuthFailed,
        Error::SessionLost { .. } => Code::SessionExpired,
        Error::PermissionDenied { .. } => Code::NoAuth,
        Error::IdentifierInUse { .. } => Code::IdentifierInUse,
        Error::ChrootMissing { .. } => Code::NoNode,
        _ => Code::Other,
    };
    Failed { code, error: Detail::new(error) }
}

/// Performs `op` (request `id`) on the session `zk`. `lock_dirs` names each item's lock directory by the core's
/// index; `own` is our party node as of now.
pub(crate) async fn perform<Z: ZooKeeper>(
    zk: Z,
    ctx: Arc<Context>,
    lock_dirs: Arc<Vec<String>>,
    own: Membership,
    id: ReqId,
    op: Op,
) -> Done<Z::Watch> {
    // Every index in an Op names an item of the core's catalogue, which `lock_dirs` covers.
    let dir = |item: usize| lock_dirs.get(item).cloned().unwrap_or_default();
    let paths = &ctx.paths;
    match op {
        Op::ReadParty => match zk.get_and_watch_children(&paths.party).await {
            Ok((children, _, watch)) => {
                let foreign: Vec<&String> = children.iter().filter(|c| layout::member_name(c).is_none()).collect();
                if !foreign.is_empty() {
                    tracing::warn!(?foreign, "ignoring children of the party node that are not member nodes");
                }
                let reply = Reply::Party(Ok(PartyRead { children }));
                Done { party_watch: Some(watch), ..Done::reply_to(id, reply) }
            }
            Err(err) => Done::reply_to(id, Reply::Party(Err(failed("get_children", &paths.party, err)))),
        },
        Op::ReadAnnouncements(nodes) => {
            let paths: Vec<String> = nodes.iter().map(|node| format!("{}/{node}", ctx.paths.party)).collect();
            let ops: Vec<ReadOp<'_>> = paths.iter().map(|path| ReadOp::Data(path)).collect();
            let result = match zk.multi_read(&ops).await {
                Ok(results) => Ok(results
                    .into_iter()
                    .map(|result| match result {
                        ReadResult::Data(data, stat) => Some((data, stat.mzxid)),
                        _ => None,
                    })
                    .collect()),
                Err(err) => Err(failed("multi get_data", &ctx.paths.party, err)),
            };
            Done::reply_to(id, Reply::Announcements(result))
        }
        Op::Announce(data) => {
            let node = format!("{}/{}", paths.party, own.node);
            let result = retry_transient(&zk, || zk.set_data(&node, data.as_bytes(), None)).await;
            let result = match result {
                // Our node is gone (the core finds out from the party, and joins again with the new data).
                Ok(_) | Err(ZkError::NoNode) => Ok(()),
                Err(err) => Err(failed("set_data", &node, err)),
            };
            Done::reply_to(id, Reply::Announced(result))
        }
        Op::DeleteStrayNodes(nodes) => {
            let mut result = Ok(());
            for node in nodes {
                let path = format!("{}/{node}", paths.party);
                tracing::warn!(
                    node,
                    "deleting a party node of ours that is not our member node (a join that landed late)"
                );
                match retry_transient(&zk, || zk.delete(&path, None)).await {
                    Ok(()) | Err(ZkError::NoNode) => {}
                    Err(err) => result = Err(failed("delete", &path, err)),
                }
            }
            Done::reply_to(id, Reply::StraysDeleted(result))
        }
        Op::Join(data) => {
            // `<path>/party` may be gone too (an operator removed it).
            let joined = match membership::ensure_base(&zk, paths).await {
                Ok(()) => {
                    let name = membership::fresh_node_name(&zk, &ctx.identifier, ctx.static_membership);
                    let naming = if ctx.static_membership {
                        membership::Naming::Static { wait: None }
                    } else {
                        membership::Naming::Sequential
                    };
                    membership::join(&zk, paths, &ctx.identifier, &data, &name, naming).await
                }
                Err(err) => Err(err),
            };
            match joined {
                Ok(membership) => {
                    let reply = Reply::Joined(Ok(membership.node.clone()));
                    Done { joined: Some(membership), ..Done::reply_to(id, reply) }
                }
                Err(err) => Done::reply_to(id, Reply::Joined(Err(failed_from(err)))),
            }
        }
        Op::MakeDirs(items) => {
            let dirs: Vec<String> = items.into_iter().map(dir).collect();
            let result = lock_requests::make_dirs(&zk, &dirs, &paths.acls).await;
            Done::reply_to(id, Reply::DirsMade(result.map_err(|err| failed("mkdir", &paths.locks, err))))
        }
        Op::Create { contenders, data } => {
            let prefixes: Vec<String> =
                contenders.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
            let result = lock_requests::create_contenders(&zk, &prefixes, data.as_bytes(), &paths.acls).await;
            let result = result.map_err(|(err, index)| {
                // Named by the operation that failed (a protected directory among open ones, say).
                let prefix = index.and_then(|index| prefixes.get(index)).or(prefixes.first());
                failed("create", prefix.map_or("", String::as_str), err)
            });
            Done::reply_to(id, Reply::Created(result))
        }
        Op::List(items) => {
            // With a shared set, each item's lineage node is read along: a finished item is never held again.
            let dirs: Vec<lock_requests::DirRead> = items
                .into_iter()
                .map(|(item, node)| {
                    let dir = dir(item);
                    let node = node.map(|node| format!("{dir}/{node}"));
                    let name = dir.rsplit('/').next().unwrap_or_default();
                    let lineage = ctx.set.as_ref().map(|set| set.lineage_node(name));
                    lock_requests::DirRead { dir, node, lineage }
                })
                .collect();
            let result = match lock_requests::list_dirs(&zk, &dirs).await {
                Ok(listings) => Ok(listings
                    .into_iter()
                    .zip(&dirs)
                    .map(|(listing, read)| {
                        listing.map_err(|err| match err {
                            lock_requests::ListError::Zk(err) => failed("get_children", &read.dir, err),
                            lock_requests::ListError::Finished => finished_listing(&read.dir),
                        })
                    })
                    .collect()),
                Err(err) => Err(failed("multi get_children", &paths.locks, err)),
            };
            Done::reply_to(id, Reply::Listed(result))
        }
        Op::ReadClosed(items) => {
            let Some(set) = &ctx.set else {
                return Done::reply_to(id, Reply::Closed(Ok(vec![false; items.len()])));
            };
            let nodes: Vec<String> =
                items.iter().map(|&item| set.lineage_node(dir(item).rsplit('/').next().unwrap_or_default())).collect();
            let result = crate::shared_set::closed(&zk, &nodes).await;
            Done::reply_to(id, Reply::Closed(result.map_err(|err| failed("multi get_data", &set.lineage, err))))
        }
        Op::Watch { item, node } => {
            let path = format!("{}/{node}", dir(item));
            let result = lock_requests::wait_for_predecessor(&zk, &path).await;
            Done::reply_to(id, Reply::Changed(result.map_err(|err| failed("get_data", &path, err))))
        }
        Op::Release { nodes, keep, window } => {
            let nodes: Vec<NodeRef> =
                nodes.into_iter().map(|c| NodeRef { dir: dir(c.item), prefix: c.prefix, node: c.node }).collect();
            let kept: HashSet<String> =
                keep.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
            let count = nodes.len();
            let mut result = lock_requests::release_all(&zk, nodes, window).await;
            if result.is_ok() {
                result = lock_requests::sweep_orphans(&zk, &paths.locks, &kept).await.map(drop);
            }
            tracing::debug!(count, ok = result.is_ok(), "locks released");
            Done::reply_to(id, Reply::Released(result.map_err(failed_from)))
        }
        Op::Verify(nodes) => {
            let nodes: Vec<String> = nodes.into_iter().map(|(item, node)| format!("{}/{node}", dir(item))).collect();
            let result = lock_requests::still_ours(&zk, &paths.locks, &nodes).await;
            Done::reply_to(id, Reply::Verified(result.map_err(failed_from)))
        }
        Op::ReadSet => {
            let Some(set) = &ctx.set else {
                let failed = Failed {
                    code: Code::Other,
                    error: Detail::new(Error::Internal { reason: "no shared set".into() }),
                };
                return Done::reply_to(id, Reply::Set(Err(failed)));
            };
            let (result, set_watch) = read_set(&zk, set, &ctx.set_cache, paths).await;
            let reply = Reply::Set(result.map_err(|err| failed("read", &set.node, err)));
            Done { set_watch, ..Done::reply_to(id, reply) }
        }
        Op::RecoverSet(unfinished) => {
            let result = match &ctx.set {
                Some(set) => {
                    let shared = SetStore::new(SessionRef::Owned(zk.clone()), &set.base, paths.acls.clone())
                        .with_chunk(ctx.set_chunk);
                    let recovered = crate::shared_set::recover(&zk, &shared, &unfinished).await;
                    if let Err(err) = &recovered {
                        tracing::warn!(%err, %unfinished, "could not finish or undo the shared set's update; trying again later");
                    }
                    recovered.map_err(failed_from)
                }
                None => Ok(()),
            };
            Done::reply_to(id, Reply::Recovered(result))
        }
        Op::WatchLease(tag) => {
            let result = match &ctx.set {
                Some(set) => {
                    let lease = set.lease(&tag);
                    lock_requests::wait_for(&zk, &lease).await.map_err(|err| failed("get_data", &lease, err))
                }
                None => Ok(()),
            };
            Done::reply_to(id, Reply::LeaseGone(result))
        }
        Op::RemoveDirs(items) => {
            let dirs: Vec<String> = items.into_iter().map(dir).collect();
            let removed = lock_requests::remove_empty_dirs(&zk, &dirs).await;
            tracing::debug!(removed, asked = dirs.len(), "lock directories of removed items");
            Done::reply_to(id, Reply::DirsRemoved)
        }
        Op::WatchHeld { item, node } => {
            let path = format!("{}/{node}", dir(item));
            match lock_requests::watch_held(&zk, &path).await {
                // Registered: say so (the core lets the next registration go), and wait for the watch to fire.
                Ok(Some(watch)) => {
                    let gone = async move {
                        let reply = match lock_requests::held_gone(watch).await {
                            Ok(true) => Reply::HeldGone(Ok(())),
                            Ok(false) => Reply::HeldChanged,
                            Err(err) => Reply::HeldGone(Err(failed("get_data", &path, err))),
                        };
                        Done::reply_to(id, reply)
                    };
                    Done { then: Some(Box::pin(gone)), ..Done::reply_to(id, Reply::HeldWatchSet) }
                }
                Ok(None) => Done::reply_to(id, Reply::HeldGone(Ok(()))),
                Err(err) => Done::reply_to(id, Reply::HeldGone(Err(failed("get_data", &path, err)))),
            }
        }
        Op::ReadPlacement { expect, kind } => {
            let node = &paths.placement;
            let (result, placement_watch) = placement::read(&zk, node, expect, kind, &ctx.placement_cache).await;
            let reply = Reply::Placement(result.map_err(|err| failed("read", node, err)));
            Done { placement_watch, ..Done::reply_to(id, reply) }
        }
        Op::WritePlacement(write) => {
            let node = &paths.placement;
            let result = placement::write(&zk, node, &paths.acls, &write, &ctx.placement_cache).await;
            tracing::debug!(?result, items = write.assignment.items.len(), "placement record written");
            Done::reply_to(id, Reply::PlacementWritten(result.map_err(|err| failed("write", node, err))))
        }
        Op::Leave => {
            if let Err(err) = membership::leave(&zk, paths, &own).await {
                tracing::warn!(%err, "could not leave the party");
            }
            Done::reply_to(id, Reply::Left)
        }
    }
}

/// A member's read of the shared set (the core interprets it), with the one watch that tells of its next change: a
/// data watch on the header (every update that commits writes it), or an existence watch while the set is missing.
/// One watch, never dropped before it fires: dropping an unfired watch makes the client ask the server to remove the
/// path's watches, which races with the next read's new watch on the same path. When the header records every change
/// since the member's last listing, the header is the whole read ([`read_bridged`]).
async fn read_set<Z: ZooKeeper>(
    zk: &Z,
    set: &SetPaths,
    cache: &std::sync::Mutex<SetCache>,
    paths: &Paths,
) -> (Result<RawRead, ZkError>, Option<Z::Watch>) {
    let (header, watch) = match zk.get_and_watch_data(&set.node).await {
        Ok((data, stat, watch)) => {
            let header = Header::parse(&data).ok();
            if let Some(read) = match &header {
                Some(header) => read_bridged(zk, set, (&data, header, &stat), cache).await,
                None => None,
            } {
                crate::metrics::shared_set_read(paths, false);
                crate::metrics::weight_chunks_read(paths, SetCache::locked(cache).take_chunks_read());
                return (read, Some(watch));
            }
            (header, watch)
        }
        Err(ZkError::NoNode) => {
            // If it was created meanwhile, the watch fires and the next read finds it.
            return match zk.check_and_watch_stat(&set.node).await {
                Ok((_, watch)) => {
                    let missing = RawRead {
                        header: None,
                        children: Vec::new(),
                        listed: None,
                        change: None,
                        lease: None,
                        weights: None,
                    };
                    (Ok(missing), Some(watch))
                }
                Err(err) => (Err(err), None),
            };
        }
        Err(err) => return (Err(err), None),
    };
    crate::metrics::shared_set_read(paths, true);
    let read = read_raw_cached(zk, set, header.as_ref(), Some(cache)).await;
    crate::metrics::weight_chunks_read(paths, SetCache::locked(cache).take_chunks_read());
    (read, Some(watch))
}
