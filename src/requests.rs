//! The one request path: turns each operation the decision core asks for into ZooKeeper requests, and their outcome
//! into the core's reply. Written once against [`ZooKeeper`], so the driver runs it on zookeeper-client and the
//! deterministic simulation on its in-memory model: the simulation tests the requests that ship.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::agreement::Agreement;
use crate::decision::{Op, PartyRead, Reply, ReqError, ReqId, SetRead};
use crate::error::{is_transient, session_end};
use crate::item_set::layout::{self, Header, SetPaths, SetView};
use crate::locks::{self, NodeRef};
use crate::party::{self, Membership, Paths};
use crate::zookeeper::{ReadOp, ReadResult, ZkError, ZooKeeper};
use crate::Error;

/// Held-lock watch registrations (one `getData` each) in flight at once. They are not on the way to `ACQUIRED` (the
/// core asks for them once its lock work has been quiet for `time_boundary`), yet each is a request of its own: a
/// hundred members registering a thousand each at once would queue 100,000 requests at one server. At 32 per member,
/// a thousand take a few hundred milliseconds; a node deleted before its watch is registered is seen as gone by the
/// registration itself.
const HELD_WATCH_REGISTRATIONS: usize = 32;

/// What the request path needs besides the session: the member's nodes and identity.
pub(crate) struct Context {
    pub paths: Paths,
    pub identifier: String,
    /// Our party node's data: the identifier and our announcement.
    pub node_data: String,
    /// The shared set's nodes, when the set is the shared one.
    pub set: Option<SetPaths>,
    /// A rejoin creates a static member's node (`Builder::static_membership`).
    pub static_membership: bool,
    /// Bounds how many held-lock watches are being registered at once ([`HELD_WATCH_REGISTRATIONS`]).
    held_watch_registrations: tokio::sync::Semaphore,
    /// What each party node announces (its data never changes, so each is read once), by node name.
    agreements: Mutex<HashMap<String, Option<Agreement>>>,
}

impl Context {
    pub fn new(
        paths: Paths,
        identifier: String,
        node_data: String,
        set: Option<SetPaths>,
        static_membership: bool,
    ) -> Self {
        Context {
            paths,
            identifier,
            node_data,
            set,
            static_membership,
            held_watch_registrations: tokio::sync::Semaphore::new(HELD_WATCH_REGISTRATIONS),
            agreements: Mutex::new(HashMap::new()),
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
    /// Our new party node, after a rejoin.
    pub joined: Option<Membership>,
}

impl<W> Done<W> {
    /// A reply that armed no watch.
    pub fn reply_to(id: ReqId, reply: Reply) -> Self {
        Done { id, reply, party_watch: None, set_watch: None, joined: None }
    }
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
                let ours = children.contains(&own.node);
                let (members, foreign) = party::members(&children);
                if !foreign.is_empty() {
                    tracing::warn!(?foreign, "ignoring children of the party node that are not member nodes");
                }
                let agreements = read_agreements(&zk, paths, &children, &own.node, &ctx.agreements).await;
                let reply = Reply::Party(Ok(PartyRead { members, ours, agreements }));
                Done { id, reply, party_watch: Some(watch), set_watch: None, joined: None }
            }
            Err(err) => Done::reply_to(id, Reply::Party(Err(classify("get_children", &paths.party, err)))),
        },
        Op::Join => {
            // `<path>/party` may be gone too (an operator removed it).
            let joined = match party::ensure_base(&zk, paths).await {
                Ok(()) => party::join(&zk, paths, &ctx.identifier, &ctx.node_data, ctx.static_membership).await,
                Err(err) => Err(err),
            };
            match joined {
                Ok(membership) => {
                    let reply = Reply::Joined(Ok(membership.name.clone()));
                    Done { id, reply, party_watch: None, set_watch: None, joined: Some(membership) }
                }
                Err(err) => Done::reply_to(id, Reply::Joined(Err(ReqError::Fatal(err)))),
            }
        }
        Op::MakeDirs(items) => {
            let dirs: Vec<String> = items.into_iter().map(dir).collect();
            let result = locks::make_dirs(&zk, &dirs, &paths.acls).await;
            Done::reply_to(id, Reply::DirsMade(result.map_err(|err| classify("mkdir", &paths.locks, err))))
        }
        Op::Create { contenders, data } => {
            let prefixes: Vec<String> =
                contenders.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
            let result = locks::create_contenders(&zk, &prefixes, data.as_bytes(), &paths.acls).await;
            let result = result.map_err(|(err, index)| match err {
                // Sequential names never collide: treat it as an unknown outcome, which a listing settles.
                ZkError::NodeExists => ReqError::Transient,
                // Named by the operation that failed (a protected directory among open ones, say).
                err => {
                    let failed = index.and_then(|index| prefixes.get(index)).or(prefixes.first());
                    classify("create", failed.map_or("", String::as_str), err)
                }
            });
            Done::reply_to(id, Reply::Created(result))
        }
        Op::List(items) => {
            let dirs: Vec<(String, Option<String>)> = items
                .into_iter()
                .map(|(item, node)| {
                    let dir = dir(item);
                    let node = node.map(|node| format!("{dir}/{node}"));
                    (dir, node)
                })
                .collect();
            let result = match locks::list_dirs(&zk, &dirs).await {
                Ok(listings) => Ok(listings
                    .into_iter()
                    .zip(&dirs)
                    .map(|(listing, (dir, _))| listing.map_err(|err| classify("get_children", dir, err)))
                    .collect()),
                Err(err) => Err(classify("multi get_children", &paths.locks, err)),
            };
            Done::reply_to(id, Reply::Listed(result))
        }
        Op::Watch { item, node } => {
            let path = format!("{}/{node}", dir(item));
            let result = locks::wait_for(&zk, &path).await;
            Done::reply_to(id, Reply::Changed(result.map_err(|err| classify("get_data", &path, err))))
        }
        Op::Release { nodes, keep, window } => {
            let nodes: Vec<NodeRef> =
                nodes.into_iter().map(|c| NodeRef { dir: dir(c.item), prefix: c.prefix, node: c.node }).collect();
            let kept: HashSet<String> =
                keep.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
            let count = nodes.len();
            let mut result = locks::release_all(&zk, nodes, window).await;
            if result.is_ok() {
                result = locks::sweep_orphans(&zk, &paths.locks, &kept).await.map(drop);
            }
            tracing::debug!(count, ok = result.is_ok(), "locks released");
            Done::reply_to(id, Reply::Released(result))
        }
        Op::Verify(nodes) => {
            let nodes: Vec<String> = nodes.into_iter().map(|(item, node)| format!("{}/{node}", dir(item))).collect();
            let result = locks::still_ours(&zk, &paths.locks, &nodes).await;
            Done::reply_to(id, Reply::Verified(result))
        }
        Op::ReadSet => {
            let Some(set) = &ctx.set else {
                return Done::reply_to(id, Reply::Set(Err(ReqError::Fatal(Error::Internal { reason: "no shared set".into() }))));
            };
            let (result, set_watch) = read_set(&zk, set).await;
            let reply = Reply::Set(result.map_err(|err| classify("read", &set.node, err)));
            Done { id, reply, party_watch: None, set_watch, joined: None }
        }
        Op::RemoveDirs(items) => {
            let dirs: Vec<String> = items.into_iter().map(dir).collect();
            let removed = locks::remove_empty_dirs(&zk, &dirs).await;
            tracing::debug!(removed, asked = dirs.len(), "lock directories of removed items");
            Done::reply_to(id, Reply::DirsRemoved)
        }
        Op::WatchHeld { item, node } => {
            let path = format!("{}/{node}", dir(item));
            let result = locks::wait_gone(&zk, &path, &ctx.held_watch_registrations).await;
            Done::reply_to(id, Reply::HeldGone(result.map_err(|err| classify("get_data", &path, err))))
        }
        Op::Leave => {
            if let Err(err) = party::leave(&zk, paths, &own).await {
                tracing::warn!(%err, "could not leave the party");
            }
            Done::reply_to(id, Reply::Left)
        }
    }
}

/// A member's read of the shared set, with the one watch that tells of its next change: a data watch on the header
/// (every update that commits writes it), or an existence watch while the set is missing. One watch, never dropped
/// before it fires: dropping an unfired watch makes the client ask the server to remove the path's watches, which
/// races with the next read's new watch on the same path.
async fn read_set<Z: ZooKeeper>(zk: &Z, set: &SetPaths) -> (Result<Option<SetRead>, ZkError>, Option<Z::Watch>) {
    let (header, watch) = match zk.get_and_watch_data(&set.node).await {
        Ok((data, _, watch)) => (Header::parse(&data).ok(), watch),
        Err(ZkError::NoNode) => {
            tracing::warn!(node = %set.node, "the shared item set is missing: keeping the set in force until it is back");
            return match zk.check_and_watch_stat(&set.node).await {
                Ok((_, watch)) => (Ok(None), Some(watch)),
                Err(err) => (Err(err), None),
            };
        }
        Err(err) => return (Err(err), None),
    };
    let read = match crate::item_set::read_raw(zk, set, header.as_ref()).await {
        Ok(read) => read,
        Err(err) => return (Err(err), Some(watch)),
    };
    let read = match layout::interpret(read) {
        SetView::Committed(committed) if committed.items.is_empty() => {
            tracing::warn!(node = %set.node, "the shared item set is empty: keeping the set in force");
            None
        }
        SetView::Committed(committed) => Some(SetRead { items: committed.items, version: committed.version }),
        SetView::Missing { .. } => {
            tracing::info!(node = %set.node, "the shared item set is being created: keeping the set in force");
            None
        }
        SetView::Unreadable(reason) => {
            tracing::warn!(node = %set.node, %reason, "the shared item set's node is unreadable: keeping the set in force");
            None
        }
        // An update landed between the reads: the watch fires, and the next read is whole.
        SetView::Torn => None,
    };
    (Ok(read), Some(watch))
}

/// What each other member announces, reading the data of party nodes not seen before (one read `multi`); `known`
/// keeps what was read, for the nodes still in the party. A failed read only delays the check to the next change.
async fn read_agreements<Z: ZooKeeper>(
    zk: &Z,
    paths: &Paths,
    children: &[String],
    own: &str,
    known: &Mutex<HashMap<String, Option<Agreement>>>,
) -> Vec<(String, Agreement)> {
    let unknown: Vec<String> = {
        let Ok(mut known) = known.lock() else { return Vec::new() };
        known.retain(|node, _| children.contains(node));
        children.iter().filter(|child| *child != own && !known.contains_key(*child)).cloned().collect()
    };
    if !unknown.is_empty() {
        let nodes: Vec<String> = unknown.iter().map(|node| format!("{}/{node}", paths.party)).collect();
        let ops: Vec<ReadOp<'_>> = nodes.iter().map(|node| ReadOp::Data(node)).collect();
        if let Ok(results) = zk.multi_read(&ops).await {
            let Ok(mut known) = known.lock() else { return Vec::new() };
            for (node, result) in unknown.into_iter().zip(results) {
                if let ReadResult::Data(data, _) = result {
                    known.insert(node, Agreement::from_node_data(&data));
                }
            }
        }
    }
    let Ok(known) = known.lock() else { return Vec::new() };
    children.iter().filter_map(|child| Some((party::member_name(child)?.to_owned(), (*known.get(child)?)?))).collect()
}

/// How the core should treat a failed request.
fn classify(op: &'static str, path: &str, err: ZkError) -> ReqError {
    if session_end(&err).is_some() {
        ReqError::Fatal(Error::zk(op, path, err))
    } else if err == ZkError::NoNode {
        ReqError::NoNode
    } else if is_transient(&err) {
        ReqError::Transient
    } else {
        ReqError::Fatal(Error::zk(op, path, err))
    }
}
