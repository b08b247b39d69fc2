//! The background task that owns a partitioner's ZooKeeper conversation: a thin loop around the decision core.
//!
//! It feeds the [`Core`] what happens (session changes, the party watch, request replies, commands, time), performs
//! the actions the core asks for, in order, and decides nothing itself. Every wait is one `select!` over cancel-safe
//! sources, so every event reaches the core at once, whatever the core is doing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::future::{AbortHandle, Abortable, BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zookeeper_client::{Client, EventType, OneshotWatcher, SessionState, StateWatcher, WatchedEvent};

use crate::agreement::Agreement;
use crate::decision::{
    self, AckId, Action, Core, Event, Op, PartyRead, Publication, Reply, ReqError, ReqId, SetInForce,
};
use crate::error::{is_transient, session_end};
use crate::item_set;
use crate::locks::{self, NodeRef};
use crate::party::{self, Membership, Paths};
use crate::session::SessionRelease;
use crate::{Error, Snapshot};

/// Held-lock watch registrations (one `getData` each) in flight at once. They are not on the way to `ACQUIRED` (the
/// core asks for them once its lock work has been quiet for `time_boundary`), yet each is a request of its own: a
/// hundred members registering a thousand each at once would queue 100,000 requests at one server. At 32 per member,
/// a thousand take a few hundred milliseconds; a node deleted before its watch is registered is seen as gone by the
/// registration itself.
const HELD_WATCH_REGISTRATIONS: usize = 32;

/// Requests from handles to the driver; each carries the channel its answer goes back on.
#[derive(Debug)]
pub(crate) enum Command {
    ReleaseSet(oneshot::Sender<Result<(), Error>>),
    Finish(oneshot::Sender<()>),
}

/// What the driver needs to turn the core's requests into ZooKeeper paths.
pub(crate) struct Config {
    pub paths: Paths,
    pub identifier: String,
    /// Our party node's data: the identifier and our announcement (`agreement`).
    pub node_data: String,
    /// `<path>/items`, when the set is the shared one.
    pub set_node: Option<String>,
    /// A rejoin creates a static member's node (`Builder::static_membership`).
    pub static_membership: bool,
}

/// A request's outcome, with the party watch a party read armed.
struct Done {
    id: ReqId,
    reply: Reply,
    party_watch: Option<OneshotWatcher>,
    set_watch: Option<OneshotWatcher>,
    /// Our new party node, after a rejoin.
    joined: Option<Membership>,
}

pub(crate) struct Driver {
    client: Client,
    config: Arc<Config>,
    core: Core,
    membership: Membership,
    session: StateWatcher,
    commands: mpsc::UnboundedReceiver<Command>,
    publisher: Arc<watch::Sender<Snapshot>>,
    /// Requests in flight; their replies go to the core.
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    /// How to stop waiting on a lock watch the core no longer cares about.
    watches: HashMap<ReqId, AbortHandle>,
    /// The watch armed by the latest party read; `None` once fired (a fired future is never polled again).
    party_watch: Option<BoxFuture<'static, WatchedEvent>>,
    /// The same for the shared set.
    set_watch: Option<BoxFuture<'static, WatchedEvent>>,
    /// Each item's lock directory, by the core's item index (grown as the shared set brings new items).
    lock_dirs: Arc<Vec<String>>,
    /// Bounds how many held-lock watches are being registered at once ([`HELD_WATCH_REGISTRATIONS`]).
    held_watch_registrations: Arc<tokio::sync::Semaphore>,
    /// The set change the snapshot shows (items are looked up only when it changes).
    published_set: SetInForce,
    /// What each party node announces (its data never changes, so each is read once), by node name.
    agreements: Arc<Mutex<HashMap<String, Option<Agreement>>>>,
    release_acks: HashMap<AckId, oneshot::Sender<Result<(), Error>>>,
    finish_acks: HashMap<AckId, oneshot::Sender<()>>,
    next_ack: AckId,
    /// Some handle still exists (the command channel is open).
    handles_alive: bool,
    metrics: crate::metrics::DriverMetrics,
}

impl Driver {
    pub fn new(
        client: Client,
        config: Arc<Config>,
        core: Core,
        membership: Membership,
        session: StateWatcher,
        commands: mpsc::UnboundedReceiver<Command>,
        publisher: Arc<watch::Sender<Snapshot>>,
    ) -> Self {
        let metrics = crate::metrics::DriverMetrics::new(&config.paths, now());
        Driver {
            client,
            config,
            core,
            membership,
            session,
            commands,
            publisher,
            in_flight: FuturesUnordered::new(),
            watches: HashMap::new(),
            party_watch: None,
            set_watch: None,
            published_set: Default::default(),
            held_watch_registrations: Arc::new(tokio::sync::Semaphore::new(HELD_WATCH_REGISTRATIONS)),
            lock_dirs: Arc::new(Vec::new()),
            agreements: Arc::new(Mutex::new(HashMap::new())),
            release_acks: HashMap::new(),
            finish_acks: HashMap::new(),
            next_ack: 0,
            handles_alive: true,
            metrics,
        }
    }

    pub async fn run(mut self) {
        // The state may have changed between the join and now.
        let state = self.session.peek_state();
        if state != SessionState::SyncConnected && state != SessionState::ConnectedReadOnly {
            self.metrics.session(state);
            self.core.handle(session_event(state), now());
        }
        loop {
            while let Some(action) = self.core.poll_action() {
                self.perform(action);
            }
            if self.core.is_stopped() {
                break;
            }
            let deadline = self.core.poll_timeout().map(Instant::from_std);
            let sleep = OptionFuture::from(deadline.map(tokio::time::sleep_until));
            let party_watch = OptionFuture::from(self.party_watch.as_mut());
            let set_watch = OptionFuture::from(self.set_watch.as_mut());
            tokio::select! {
                state = self.session.changed() => {
                    self.metrics.session(state);
                    self.core.handle(session_event(state), now());
                }
                Some(done) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.watches.remove(&done.id);
                    if let Some(watcher) = done.party_watch {
                        self.party_watch = Some(locks::changed(watcher).boxed());
                    }
                    if let Some(watcher) = done.set_watch {
                        self.set_watch = Some(locks::changed(watcher).boxed());
                    }
                    if let Some(membership) = done.joined {
                        self.membership = membership;
                    }
                    self.core.handle(Event::Reply(done.id, done.reply), now());
                }
                Some(event) = party_watch => {
                    self.party_watch = None;
                    let event = if event.event_type == EventType::Session && event.session_state.is_terminated() {
                        self.metrics.session(event.session_state);
                        session_event(event.session_state)
                    } else {
                        Event::PartyChanged
                    };
                    self.core.handle(event, now());
                }
                Some(event) = set_watch => {
                    self.set_watch = None;
                    let event = if event.event_type == EventType::Session && event.session_state.is_terminated() {
                        session_event(event.session_state)
                    } else {
                        Event::SetChanged
                    };
                    self.core.handle(event, now());
                }
                command = self.commands.recv(), if self.handles_alive => {
                    // Every handle gone: say so once, then stop polling a channel that would answer at once forever.
                    self.handles_alive = command.is_some();
                    let event = self.on_command(command);
                    self.core.handle(event, now());
                }
                Some(()) = sleep => self.core.handle_timeout(now()),
            }
        }
        // Answer commands that raced with the end; later ones find the channel closed.
        self.commands.close();
        let cause = self.publisher.borrow().cause.clone().unwrap_or(Error::Stopped);
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::ReleaseSet(ack) => drop(ack.send(Err(cause.clone()))),
                Command::Finish(ack) => drop(ack.send(())),
            }
        }
    }

    fn on_command(&mut self, command: Option<Command>) -> Event {
        self.next_ack += 1;
        let id = self.next_ack;
        match command {
            Some(Command::ReleaseSet(ack)) => {
                self.release_acks.insert(id, ack);
                Event::ReleaseSet(id)
            }
            Some(Command::Finish(ack)) => {
                self.finish_acks.insert(id, ack);
                Event::Finish(Some(id))
            }
            None => Event::Finish(None),
        }
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::Request(id, op) => self.send(id, op),
            Action::Cancel(id) => {
                if let Some(abort) = self.watches.remove(&id) {
                    abort.abort();
                }
            }
            Action::Publish(publication) => self.publish(publication),
            Action::Ack(id, result) => {
                if let Some(ack) = self.release_acks.remove(&id) {
                    let _ = ack.send(result);
                } else if let Some(ack) = self.finish_acks.remove(&id) {
                    let _ = ack.send(());
                }
            }
            Action::Stop => {
                self.party_watch = None;
                self.set_watch = None;
                for (_, abort) in self.watches.drain() {
                    abort.abort();
                }
            }
        }
    }

    /// The single place where the published snapshot changes: bumps the generation and wakes every observer.
    fn publish(&mut self, p: Publication) {
        let indexes: Vec<usize> = p.items.iter().map(|&(i, _)| i).collect();
        let items = self.core.items_of(&indexes);
        let tokens = p.items.iter().map(|&(_, token)| token).collect();
        let revoked = self.core.items_of(&p.revoked);
        // The core may learn of the session's end from any request's reply or watch (a held-lock watch, the set's)
        // before the session watcher says so: count it from the cause, once (`session` ignores a second Expired).
        if let Some(Error::SessionLost { state }) = &p.cause {
            self.metrics.session(*state);
        }
        let before = self.publisher.borrow().state;
        let revoked_before = self.publisher.borrow().revoked.clone();
        self.metrics.published((before, &revoked_before), (p.state, p.reason, items.len(), &revoked), now());
        self.publisher.send_modify(|snapshot| {
            if p.disagreements != snapshot.disagreements {
                for disagreement in p.disagreements.iter() {
                    tracing::warn!(
                        other = %disagreement.member,
                        ours = %disagreement.ours,
                        theirs = %disagreement.theirs,
                        "{disagreement}: the members may wait forever for each other's locks until one of them is \
                         reconfigured"
                    );
                }
            }
            if p.set != self.published_set {
                snapshot.added = self.core.items_of(&p.set.added);
                snapshot.removed = self.core.items_of(&p.set.removed);
                snapshot.set_version = p.set.version;
                self.published_set = p.set.clone();
                if !snapshot.added.is_empty() || !snapshot.removed.is_empty() {
                    tracing::info!(
                        version = p.set.version,
                        added = snapshot.added.len(),
                        removed = snapshot.removed.len(),
                        "following a new version of the shared item set"
                    );
                }
            }
            snapshot.disagreements = p.disagreements;
            tracing::info!(
                from = %snapshot.state,
                to = %p.state,
                generation = snapshot.generation + 1,
                reason = p.reason,
                items = items.len(),
                revoked = revoked.len(),
                "state change"
            );
            if let Some(cause) = &p.cause {
                if matches!(cause, Error::Finished) {
                    tracing::info!("partitioner finished: locks released, party left");
                } else {
                    tracing::warn!(%cause, "partitioner ended");
                }
            }
            snapshot.state = p.state;
            snapshot.generation += 1;
            snapshot.member = p.member;
            snapshot.items = items;
            snapshot.tokens = tokens;
            snapshot.revoked = revoked;
            snapshot.members = p.members;
            snapshot.cause = p.cause;
            snapshot.suspended = p.suspended;
            snapshot.lock_nodes = p.nodes.into();
        });
    }

    /// Starts a request; its reply reaches the core through `in_flight`.
    fn send(&mut self, id: ReqId, op: Op) {
        if self.lock_dirs.len() < self.core.item_count() {
            let dirs = Arc::make_mut(&mut self.lock_dirs);
            for index in dirs.len()..self.core.item_count() {
                dirs.push(self.config.paths.lock_dir(&self.core.item(index).node_name()));
            }
        }
        let client = self.client.clone();
        let lock_dirs = self.lock_dirs.clone();
        // Every index in an Op names an item of the core's catalogue, which `lock_dirs` now covers.
        let dir = move |item: usize| lock_dirs[item].clone();
        let paths = self.config.paths.clone();
        let future: BoxFuture<'static, Done> = match op {
            Op::ReadParty => {
                // The core asks for a read only when no rejoin is under way: our node's name is the current one.
                let own = self.membership.node.clone();
                let known = self.agreements.clone();
                async move {
                    match client.get_and_watch_children(&paths.party).await {
                        Ok((children, _, watcher)) => {
                            let ours = children.contains(&own);
                            let (members, foreign) = party::members(&children);
                            if !foreign.is_empty() {
                                tracing::warn!(
                                    ?foreign,
                                    "ignoring children of the party node that are not member nodes"
                                );
                            }
                            let agreements = read_agreements(&client, &paths, &children, &own, &known).await;
                            let read = PartyRead { members, ours, agreements };
                            let reply = Reply::Party(Ok(read));
                            Done { id, reply, party_watch: Some(watcher), set_watch: None, joined: None }
                        }
                        Err(err) => reply(id, Reply::Party(Err(classify("get_children", &paths.party, err)))),
                    }
                }
                .boxed()
            }
            Op::Join => {
                let (identifier, static_membership) = (self.config.identifier.clone(), self.config.static_membership);
                let data = self.config.node_data.clone();
                async move {
                    // `<path>/party` may be gone too (an operator removed it).
                    let joined = match party::ensure_base(&client, &paths).await {
                        Ok(()) => party::join(&client, &paths, &identifier, &data, static_membership).await,
                        Err(err) => Err(err),
                    };
                    match joined {
                        Ok(membership) => {
                            let name = membership.name.clone();
                            let reply = Reply::Joined(Ok(name));
                            Done { id, reply, party_watch: None, set_watch: None, joined: Some(membership) }
                        }
                        Err(err) => reply(id, Reply::Joined(Err(ReqError::Fatal(err)))),
                    }
                }
                .boxed()
            }
            Op::MakeDirs(items) => {
                let dirs: Vec<String> = items.into_iter().map(dir).collect();
                async move {
                    let result = locks::make_dirs(&client, &dirs, &paths.acls).await;
                    reply(id, Reply::DirsMade(result.map_err(|err| classify("mkdir", &paths.locks, err))))
                }
                .boxed()
            }
            Op::Create { contenders, data } => {
                let prefixes: Vec<String> =
                    contenders.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
                async move {
                    let result = locks::create_contenders(&client, &prefixes, data.as_bytes(), &paths.acls).await;
                    let result = result.map_err(|(err, index)| match err {
                        // Sequential names never collide: treat it as an unknown outcome, which a listing settles.
                        zookeeper_client::Error::NodeExists => ReqError::Transient,
                        // Named by the operation that failed (a protected directory among open ones, say).
                        err => {
                            let failed = index.and_then(|index| prefixes.get(index)).or(prefixes.first());
                            classify("create", failed.map_or("", String::as_str), err)
                        }
                    });
                    reply(id, Reply::Created(result))
                }
                .boxed()
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
                async move {
                    let result = match locks::list_dirs(&client, &dirs).await {
                        Ok(listings) => Ok(listings
                            .into_iter()
                            .zip(&dirs)
                            .map(|(listing, (dir, _))| listing.map_err(|err| classify("get_children", dir, err)))
                            .collect()),
                        Err(err) => Err(classify("multi get_children", &paths.locks, err)),
                    };
                    reply(id, Reply::Listed(result))
                }
                .boxed()
            }
            Op::Watch { item, node } => {
                self.metrics.lock_wait();
                let path = format!("{}/{node}", dir(item));
                let (abort, registration) = AbortHandle::new_pair();
                self.watches.insert(id, abort);
                let wait = async move {
                    let result = locks::wait_for(&client, &path).await;
                    reply(id, Reply::Changed(result.map_err(|err| classify("get_data", &path, err))))
                };
                // An aborted wait answers nothing; the core has already forgotten it.
                Abortable::new(wait, registration)
                    .map(move |done| done.unwrap_or_else(|_| reply(id, Reply::Changed(Ok(())))))
                    .boxed()
            }
            Op::Release { nodes, keep, window } => {
                let nodes: Vec<NodeRef> =
                    nodes.into_iter().map(|c| NodeRef { dir: dir(c.item), prefix: c.prefix, node: c.node }).collect();
                let kept: HashSet<String> =
                    keep.into_iter().map(|(item, prefix)| format!("{}/{prefix}", dir(item))).collect();
                async move {
                    let count = nodes.len();
                    let mut result = locks::release_all(&client, nodes, window).await;
                    if result.is_ok() {
                        result = locks::sweep_orphans(&client, &paths.locks, &kept).await.map(drop);
                    }
                    tracing::debug!(count, ok = result.is_ok(), "locks released");
                    reply(id, Reply::Released(result))
                }
                .boxed()
            }
            Op::Verify(nodes) => {
                let nodes: Vec<String> =
                    nodes.into_iter().map(|(item, node)| format!("{}/{node}", dir(item))).collect();
                async move {
                    let result = locks::still_ours(&client, &paths.locks, &nodes).await;
                    reply(id, Reply::Verified(result))
                }
                .boxed()
            }
            Op::ReadSet => {
                let node = self.config.set_node.clone().unwrap_or_default();
                async move {
                    let (result, set_watch) = item_set::read_watched(&client, &node).await;
                    let reply = Reply::Set(result.map_err(|err| classify("get_children", &node, err)));
                    Done { id, reply, party_watch: None, set_watch, joined: None }
                }
                .boxed()
            }
            Op::RemoveDirs(items) => {
                let dirs: Vec<String> = items.into_iter().map(dir).collect();
                async move {
                    let removed = locks::remove_empty_dirs(&client, &dirs).await;
                    tracing::debug!(removed, asked = dirs.len(), "lock directories of removed items");
                    reply(id, Reply::DirsRemoved)
                }
                .boxed()
            }
            Op::WatchHeld { item, node } => {
                let path = format!("{}/{node}", dir(item));
                let registrations = self.held_watch_registrations.clone();
                async move {
                    let result = locks::wait_gone(&client, &path, &registrations).await;
                    reply(id, Reply::HeldGone(result.map_err(|err| classify("get_data", &path, err))))
                }
                .boxed()
            }
            Op::Leave => {
                let membership = self.membership.clone();
                async move {
                    if let Err(err) = party::leave(&client, &paths, &membership).await {
                        tracing::warn!(%err, "could not leave the party");
                    }
                    reply(id, Reply::Left)
                }
                .boxed()
            }
        };
        self.in_flight.push(future);
    }
}

fn reply(id: ReqId, reply: Reply) -> Done {
    Done { id, reply, party_watch: None, set_watch: None, joined: None }
}

/// What each other member announces, reading the data of party nodes not seen before (one read `multi`); `known`
/// keeps what was read, for the nodes still in the party. A failed read only delays the check to the next change.
async fn read_agreements(
    client: &Client,
    paths: &Paths,
    children: &[String],
    own: &str,
    known: &Mutex<HashMap<String, Option<Agreement>>>,
) -> Vec<(String, Agreement)> {
    let unknown: Vec<&String> = {
        let Ok(mut known) = known.lock() else { return Vec::new() };
        known.retain(|node, _| children.contains(node));
        children.iter().filter(|child| *child != own && !known.contains_key(*child)).collect()
    };
    if !unknown.is_empty() {
        let mut reader = client.new_multi_reader();
        let mut added = true;
        for node in &unknown {
            added &= reader.add_get_data(&format!("{}/{node}", paths.party)).is_ok();
        }
        if added && let Ok(results) = reader.commit().await {
            let Ok(mut known) = known.lock() else { return Vec::new() };
            for (node, result) in unknown.into_iter().zip(results) {
                if let zookeeper_client::MultiReadResult::Data { data, .. } = result {
                    known.insert(node.clone(), Agreement::from_node_data(&data));
                }
            }
        }
    }
    let Ok(known) = known.lock() else { return Vec::new() };
    children.iter().filter_map(|child| Some((party::member_name(child)?.to_owned(), (*known.get(child)?)?))).collect()
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// The core's view of a session state.
fn session_event(state: SessionState) -> Event {
    if state.is_terminated() {
        Event::SessionLost(Error::SessionLost { state })
    } else if state == SessionState::Disconnected {
        Event::Suspended
    } else {
        Event::Connected
    }
}

/// How the core should treat a failed request.
fn classify(op: &'static str, path: &str, err: zookeeper_client::Error) -> ReqError {
    if session_end(&err).is_some() {
        ReqError::Fatal(Error::zk(op, path, err))
    } else if err == zookeeper_client::Error::NoNode {
        ReqError::NoNode
    } else if is_transient(&err) {
        ReqError::Transient
    } else {
        ReqError::Fatal(Error::zk(op, path, err))
    }
}

/// Runs the driver, and turns a panic into a published `Failure` plus a clean-up: every node of our session under
/// the partition path (our lock contenders and party node) is deleted, found with `GetEphemerals`, each request sent
/// again while it is lost with the connection (so until it succeeds or the session ends). However the task ends, it
/// then releases the handles' hold on the member's session: with no clone left, the session closes, and any node that
/// could not be deleted goes with it; a member that processes nothing never lingers in the party.
pub(crate) async fn supervise(driver: Driver, release: SessionRelease) {
    let (client, publisher, paths) = (driver.client.clone(), driver.publisher.clone(), driver.config.paths.clone());
    if let Err(panic) = std::panic::AssertUnwindSafe(driver.run()).catch_unwind().await {
        let reason = format!("the background task panicked: {}", decision::panic_message(&*panic));
        tracing::error!(%reason, "partitioner failed");
        publisher.send_modify(|snapshot| {
            snapshot.state = crate::PartitionState::Failure;
            snapshot.generation += 1;
            snapshot.items = Arc::from([]);
            snapshot.tokens = Arc::from([]);
            snapshot.revoked = Arc::from([]);
            snapshot.cause = Some(Error::Internal { reason });
            snapshot.suspended = false;
        });
        delete_our_nodes(&client, &paths).await;
    }
    release.release();
}

/// Deletes every ephemeral node of our session under the partition path (after a panic, when no bookkeeping is left
/// to trust). One session serves one member of a partition path, so these are all ours. Requests lost with the
/// connection are sent again; the client fails them for good once the session ends, which ends this too.
async fn delete_our_nodes(client: &Client, paths: &Paths) {
    for base in [&paths.locks, &paths.party] {
        let nodes = match party::retry_transient(|| client.list_ephemerals(base)).await {
            Ok(nodes) => nodes,
            Err(err) => {
                tracing::warn!(%err, base, "could not list our nodes after a panic; the session closes with them");
                continue;
            }
        };
        for node in nodes.iter().filter(|node| node.strip_prefix(base.as_str()).is_some_and(|r| r.starts_with('/'))) {
            match party::retry_transient(|| client.delete(node, None)).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                Err(err) => tracing::warn!(%err, node, "could not delete a node after a panic"),
            }
        }
    }
}
