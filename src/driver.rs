//! The background task that owns a partitioner's ZooKeeper conversation.
//!
//! Only the driver talks to ZooKeeper and only it changes state; handles read the published [`Snapshot`] and send
//! [`Command`]s. Every wait is a `select!` over cancel-safe sources (the session's state, the party watch, lock
//! requests, commands, timers), so a party change or a command is acted on at once, never at the next poll.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zookeeper_client::{Client, EventType, SessionState, StateWatcher, WatchedEvent};

mod allocation;

use crate::locks::{self, Contender};
use crate::party::{self, Membership, Paths};
use crate::policy::{self, Reaction, Rebalance, SessionPolicy};
use crate::{Error, FencingToken, Item, PartitionFn, PartitionState, Snapshot};

/// Requests from handles to the driver; each carries the channel its answer goes back on.
#[derive(Debug)]
pub(crate) enum Command {
    ReleaseSet(oneshot::Sender<Result<(), Error>>),
    Finish(oneshot::Sender<()>),
}

/// Everything fixed at build time.
pub(crate) struct Config {
    pub paths: Paths,
    pub identifier: String,
    /// The whole set, sorted and validated.
    pub items: Vec<Item>,
    /// Each item's lock directory, in the order of `items`.
    pub lock_dirs: Vec<String>,
    pub partition_fn: Box<dyn PartitionFn>,
    pub time_boundary: Duration,
    pub retry_delay: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// At most this many lock requests in flight at once.
    pub window: usize,
}

/// Where the driver goes next.
enum Next {
    Allocate,
    Hold,
    AwaitRelease,
    /// `Release` because the connection is suspended, waiting to learn whether the session (and our locks) survive.
    Suspended,
    /// The party changed while `Acquired` under [`Rebalance::Incremental`]: move only what must move.
    Rebalance,
    ReleaseSet(oneshot::Sender<Result<(), Error>>),
    Fail(Error),
    /// `finish()` was called (with its acknowledgement) or every handle was dropped.
    Finish(Option<oneshot::Sender<()>>),
}

/// Why an allocation stopped before every lock was held.
enum Interrupt {
    PartyChanged,
    Leave(Next),
}

pub(crate) struct Driver {
    client: Client,
    config: Arc<Config>,
    membership: Membership,
    session: StateWatcher,
    commands: mpsc::UnboundedReceiver<Command>,
    publisher: watch::Sender<Snapshot>,
    /// The fired-or-not watch on `<path>/party` children, armed by the latest read of the party.
    party_changed: Option<BoxFuture<'static, WatchedEvent>>,
    /// Lock nodes we own or may own, by item index: everything `release_set` must delete.
    contenders: HashMap<usize, Contender>,
    /// Items whose lock directory is known to exist, so their contenders can be created in batches.
    known_dirs: HashSet<usize>,
    /// The membership of the latest stable party.
    members: Arc<[String]>,
    /// When the current allocation must be done by, if there is a limit.
    allocation_deadline: Option<Instant>,
    /// Whether the current `Release` is a suspension ([`SessionPolicy::SessionAware`]).
    suspended: bool,
    /// Held items the worker must stop (published in `Release`); `None` means all of them.
    revoked: Option<HashSet<usize>>,
}

impl Driver {
    pub fn new(
        client: Client,
        config: Arc<Config>,
        membership: Membership,
        session: StateWatcher,
        commands: mpsc::UnboundedReceiver<Command>,
        publisher: watch::Sender<Snapshot>,
    ) -> Self {
        Driver {
            client,
            config,
            membership,
            session,
            commands,
            publisher,
            party_changed: None,
            contenders: HashMap::new(),
            known_dirs: HashSet::new(),
            members: Arc::from([]),
            allocation_deadline: None,
            suspended: false,
            revoked: None,
        }
    }

    pub async fn run(mut self) {
        let mut next = Next::Allocate;
        loop {
            next = match next {
                Next::Allocate => self.allocate().await,
                Next::Hold => self.hold().await,
                Next::AwaitRelease => self.await_release().await,
                Next::Suspended => self.suspended().await,
                Next::Rebalance => self.rebalance().await,
                Next::ReleaseSet(ack) => self.release_set(ack).await,
                Next::Fail(cause) => {
                    // Stop the worker first, then clean up so others can take our items at once.
                    tracing::error!(%cause, "partitioner failed");
                    self.publish(PartitionState::Failure, Some(cause), "failed");
                    self.clean_up().await;
                    break;
                }
                Next::Finish(ack) => {
                    // Stop the worker before the locks go: once a lock node is deleted another member may take its
                    // item, so no snapshot may still list it.
                    self.publish(PartitionState::Failure, Some(Error::Finished), "finished");
                    self.clean_up().await;
                    if let Some(ack) = ack {
                        let _ = ack.send(());
                    }
                    break;
                }
            };
        }
        // Answer commands that raced with the end; later ones find the channel closed.
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::ReleaseSet(ack) => drop(ack.send(Err(self.failure_cause()))),
                Command::Finish(ack) => drop(ack.send(())),
            }
        }
    }

    fn failure_cause(&self) -> Error {
        self.publisher.borrow().cause.clone().unwrap_or(Error::Stopped)
    }

    fn state(&self) -> PartitionState {
        self.publisher.borrow().state
    }

    /// The single place where state changes: bumps the generation and wakes every observer.
    fn publish(&mut self, state: PartitionState, cause: Option<Error>, reason: &str) {
        let mut held: Vec<(usize, FencingToken)> =
            self.contenders.iter().filter(|(_, c)| c.held).map(|(&i, c)| (i, FencingToken::new(c.czxid))).collect();
        held.sort_unstable();
        let is_revoked = |i: &usize| self.revoked.as_ref().is_none_or(|revoked| revoked.contains(i));
        // What the worker may process: everything held once Acquired; under Incremental, what it keeps meanwhile.
        let processable = match state {
            PartitionState::Acquired => true,
            PartitionState::Allocating | PartitionState::Release => {
                self.config.rebalance == Rebalance::Incremental && !self.suspended
            }
            PartitionState::Failure => false,
        };
        let (revoked, kept): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(i, _)| state == PartitionState::Release && is_revoked(i));
        let kept = if processable { kept } else { Vec::new() };
        let item = |&(i, _): &(usize, FencingToken)| self.config.items[i].clone();
        let items: Arc<[Item]> = kept.iter().map(item).collect();
        let tokens: Arc<[FencingToken]> = kept.iter().map(|&(_, token)| token).collect();
        let revoked: Arc<[Item]> = revoked.iter().map(item).collect();
        let (member, members) = (self.membership.name.clone(), self.members.clone());
        let suspended = state == PartitionState::Release && self.suspended;
        self.publisher.send_modify(|snapshot| {
            tracing::info!(from = %snapshot.state, to = %state, generation = snapshot.generation + 1, reason, items = items.len(), revoked = revoked.len(), "state change");
            snapshot.state = state;
            snapshot.generation += 1;
            snapshot.member = member;
            snapshot.items = items;
            snapshot.tokens = tokens;
            snapshot.revoked = revoked;
            snapshot.members = members;
            snapshot.cause = cause;
            snapshot.suspended = suspended;
        });
    }

    /// The items we hold, as indexes.
    fn held(&self) -> HashSet<usize> {
        self.contenders.iter().filter(|(_, c)| c.held).map(|(&i, _)| i).collect()
    }

    /// Whether the worker may be processing items right now (so a suspension must stop it).
    fn processing(&self) -> bool {
        !self.publisher.borrow().items.is_empty()
    }

    /// Reacts to a change of the session's state (kazoo's policy, see [`policy::react`]).
    fn on_session(&mut self, state: SessionState) -> Option<Next> {
        let current = if self.processing() { PartitionState::Acquired } else { self.state() };
        match policy::react(self.config.session_policy, state, current) {
            Reaction::Ignore => {
                tracing::debug!(%state, "session state change");
                None
            }
            Reaction::Release => {
                tracing::warn!(%state, "connection state changed; releasing");
                self.revoked = None;
                self.publish(PartitionState::Release, None, "connection state changed");
                Some(Next::AwaitRelease)
            }
            Reaction::Suspend => {
                tracing::warn!(%state, "connection suspended; pausing until the session's fate is known");
                self.suspended = true;
                self.publish(PartitionState::Release, None, "connection suspended");
                Some(Next::Suspended)
            }
            Reaction::Fail => Some(Next::Fail(Error::SessionLost { state })),
        }
    }

    fn on_command(command: Option<Command>) -> Next {
        match command {
            Some(Command::ReleaseSet(ack)) => Next::ReleaseSet(ack),
            Some(Command::Finish(ack)) => Next::Finish(Some(ack)),
            None => Next::Finish(None),
        }
    }

    /// Reads the party and arms a watch on it. Returns the sorted member names.
    async fn watch_party(&mut self) -> Result<Vec<String>, Next> {
        let (client, party) = (self.client.clone(), self.config.paths.party.clone());
        let read = async move { party::retry_transient(|| client.get_and_watch_children(&party)).await };
        let (children, _, watcher) = self.read("get_children", self.config.paths.party.clone(), read).await?;
        self.party_changed = Some(watcher.changed().boxed());
        let (members, foreign) = party::members(&children);
        if !foreign.is_empty() {
            tracing::warn!(?foreign, "ignoring children of the party node that are not member nodes");
        }
        Ok(members)
    }

    /// Awaits a read that is retried across reconnections while still reacting to the session and to commands, as
    /// the `select!` loops do: a suspension during the read moves to `Release` at once, not when the connection
    /// returns (the state watcher would by then have folded the disconnection into a single "connected"). Only for
    /// reads: dropping one midway loses nothing.
    async fn read<T>(
        &mut self,
        op: &'static str,
        path: String,
        read: impl Future<Output = Result<T, zookeeper_client::Error>>,
    ) -> Result<T, Next> {
        tokio::pin!(read);
        loop {
            tokio::select! {
                result = &mut read => return result.map_err(|err| Next::Fail(Error::zk(op, path, err))),
                state = self.session.changed() => {
                    if let Some(next) = self.on_session(state) {
                        return Err(next);
                    }
                }
                command = self.commands.recv() => return Err(Self::on_command(command)),
            }
        }
    }

    /// ALLOCATING: wait until the party is stable, compute our share, take its locks.
    async fn allocate(&mut self) -> Next {
        let now = Instant::now();
        let deadline = *self
            .allocation_deadline
            .get_or_insert_with(|| self.config.max_allocation_time.map_or(far_future(), |limit| now + limit));
        loop {
            let assigned = match self.stable_assignment(deadline).await {
                Ok(assigned) => assigned,
                Err(next) => return next,
            };
            tracing::debug!(members = self.members.len(), assigned = assigned.len(), "party stable; taking locks");
            match self.acquire(assigned, deadline).await {
                Ok(()) => {
                    self.allocation_deadline = None;
                    self.publish(PartitionState::Acquired, None, "all assigned locks held");
                    return Next::Hold;
                }
                Err(Interrupt::PartyChanged) => {
                    tracing::info!("party changed during allocation; releasing and starting over");
                    if let Err(err) = self.release_contenders().await {
                        return Next::Fail(err);
                    }
                }
                Err(Interrupt::Leave(next)) => return next,
            }
        }
    }

    /// Waits for a stable party that includes us and returns our share of the items under it.
    async fn stable_assignment(&mut self, deadline: Instant) -> Result<Vec<usize>, Next> {
        loop {
            let members = self.stabilise(deadline).await?;
            if !members.iter().any(|m| **m == *self.membership.name) {
                // An operator (or a bug elsewhere) removed our party node: join again, which changes the party.
                tracing::warn!(member = %self.membership.name, "our party node is gone; joining again");
                self.membership =
                    party::join(&self.client, &self.config.paths, &self.config.identifier).await.map_err(Next::Fail)?;
                continue;
            }
            self.members = members.into();
            return self.assignment().map_err(Next::Fail);
        }
    }

    /// Waits until the party has had no change for `time_boundary`: each change restarts the wait (a true debounce,
    /// where kazoo's fixed windows need between one and two boundaries of quiet).
    async fn stabilise(&mut self, deadline: Instant) -> Result<Vec<String>, Next> {
        let mut members = self.watch_party().await?;
        let quiet_until = tokio::time::sleep(self.config.time_boundary);
        tokio::pin!(quiet_until);
        loop {
            let Some(party_changed) = self.party_changed.as_mut() else {
                return Err(Next::Fail(Error::Stopped));
            };
            tokio::select! {
                () = &mut quiet_until => return Ok(members),
                event = party_changed => {
                    if let Some(next) = self.on_party_event(&event) {
                        return Err(next);
                    }
                    members = self.watch_party().await?;
                    quiet_until.as_mut().reset(Instant::now() + self.config.time_boundary);
                }
                state = self.session.changed() => {
                    if let Some(next) = self.on_session(state) {
                        return Err(next);
                    }
                }
                command = self.commands.recv() => return Err(Self::on_command(command)),
                () = tokio::time::sleep_until(deadline) => return Err(self.allocation_timed_out()),
            }
        }
    }

    fn allocation_timed_out(&self) -> Next {
        Next::Fail(Error::AllocationTimeout(self.config.max_allocation_time.unwrap_or_default()))
    }

    /// A terminal session event delivered through the party watch means the session is over.
    fn on_party_event(&self, event: &WatchedEvent) -> Option<Next> {
        (event.event_type == EventType::Session && event.session_state.is_terminated())
            .then(|| Next::Fail(Error::SessionLost { state: event.session_state }))
    }

    /// Our share under the partition function, as indexes into the sorted item list.
    fn assignment(&self) -> Result<Vec<usize>, Error> {
        let items = &self.config.items;
        // User code: a panic must become a Failure with its cause, not a dead task behind a stale snapshot.
        let call = || self.config.partition_fn.partition(&self.membership.name, &self.members, items);
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            Error::PartitionFn { reason: format!("panicked: {message}") }
        })?;
        let mut assigned = Vec::with_capacity(mine.len());
        for item in mine {
            let index = items
                .binary_search(&item)
                .map_err(|_| Error::PartitionFn { reason: format!("returned {item:?}, which is not in the set") })?;
            assigned.push(index);
        }
        let count = assigned.len();
        assigned.sort_unstable();
        assigned.dedup();
        if assigned.len() != count {
            return Err(Error::PartitionFn { reason: "returned an item more than once".into() });
        }
        Ok(assigned)
    }

    /// ACQUIRED: hold the locks until the party or the connection changes, or a command comes.
    async fn hold(&mut self) -> Next {
        let Some(party_changed) = self.party_changed.as_mut() else {
            return Next::Fail(Error::Stopped);
        };
        tokio::select! {
            event = party_changed => {
                self.party_changed = None;
                if let Some(next) = self.on_party_event(&event) {
                    return next;
                }
                if self.config.rebalance == Rebalance::Incremental {
                    return Next::Rebalance;
                }
                self.revoked = None;
                self.publish(PartitionState::Release, None, "party changed");
                Next::AwaitRelease
            }
            state = self.session.changed() => self.on_session(state).unwrap_or(Next::Hold),
            command = self.commands.recv() => Self::on_command(command),
        }
    }

    /// RELEASE: wait for the worker to call `release_set()` (or `finish()`); only the end of the session interrupts.
    async fn await_release(&mut self) -> Next {
        self.party_changed = None;
        tokio::select! {
            state = self.session.changed() => self.on_session(state).unwrap_or(Next::AwaitRelease),
            command = self.commands.recv() => Self::on_command(command),
        }
    }

    /// The party changed under [`Rebalance::Incremental`]: keep processing what stays ours while the party settles,
    /// then give up only what moved (after the worker's `release_set()`), take what we gained, and go back to
    /// `Acquired`. Unmoved items keep their lock nodes throughout.
    async fn rebalance(&mut self) -> Next {
        let deadline = far_future();
        loop {
            let assigned: HashSet<usize> = match self.stable_assignment(deadline).await {
                Ok(assigned) => assigned.into_iter().collect(),
                Err(next) => return next,
            };
            let held = self.held();
            let revoked: HashSet<usize> = held.difference(&assigned).copied().collect();
            let mut gained: Vec<usize> = assigned.difference(&held).copied().collect();
            gained.sort_unstable();
            tracing::info!(
                kept = held.len() - revoked.len(),
                revoked = revoked.len(),
                gained = gained.len(),
                "rebalancing"
            );
            if !revoked.is_empty() {
                self.revoked = Some(revoked);
                self.publish(PartitionState::Release, None, "party changed: items revoked");
                match self.await_revocation().await {
                    Ok(()) => {}
                    Err(Interrupt::PartyChanged) => continue,
                    Err(Interrupt::Leave(next)) => return next,
                }
            }
            if gained.is_empty() {
                if self.state() != PartitionState::Acquired {
                    self.publish(PartitionState::Acquired, None, "revoked items released");
                }
                return Next::Hold;
            }
            self.publish(PartitionState::Allocating, None, "taking gained items");
            match self.acquire(gained, deadline).await {
                Ok(()) => {
                    self.publish(PartitionState::Acquired, None, "gained items held");
                    return Next::Hold;
                }
                Err(Interrupt::PartyChanged) => {
                    // Let go of what we were still waiting for; what we hold is sorted out by the next round.
                    if let Err(err) = self.release_where(|c| !c.held).await {
                        return Next::Fail(err);
                    }
                }
                Err(Interrupt::Leave(next)) => return next,
            }
        }
    }

    /// Waits for the worker to stop the revoked items (`release_set()`), then releases exactly those.
    async fn await_revocation(&mut self) -> Result<(), Interrupt> {
        loop {
            let Some(party_changed) = self.party_changed.as_mut() else {
                return Err(Interrupt::Leave(Next::Fail(Error::Stopped)));
            };
            tokio::select! {
                event = party_changed => {
                    return Err(match self.on_party_event(&event) {
                        Some(next) => Interrupt::Leave(next),
                        None => Interrupt::PartyChanged,
                    });
                }
                state = self.session.changed() => {
                    if let Some(next) = self.on_session(state) {
                        return Err(Interrupt::Leave(next));
                    }
                }
                command = self.commands.recv() => match command {
                    Some(Command::ReleaseSet(ack)) => {
                        let revoked = self.revoked.take().unwrap_or_default();
                        let result = self.release_where(|c| revoked.contains(&c.index)).await;
                        let _ = ack.send(result.clone());
                        return result.map_err(|err| Interrupt::Leave(Next::Fail(err)));
                    }
                    other => return Err(Interrupt::Leave(Self::on_command(other))),
                },
            }
        }
    }

    /// RELEASE, suspended ([`SessionPolicy::SessionAware`]): wait for the connection to come back. `release_set()`
    /// calls wait here too. Same session back and every lock node still ours: resume `Acquired` with the same locks.
    async fn suspended(&mut self) -> Next {
        let mut waiting_release: Vec<oneshot::Sender<Result<(), Error>>> = Vec::new();
        let next = loop {
            // The state watcher may have coalesced the disconnection and the reconnection into one change.
            let state = self.client.state();
            if state.is_terminated() {
                break Next::Fail(Error::SessionLost { state });
            }
            if state != SessionState::Disconnected {
                let held: Vec<String> =
                    self.contenders.values().filter(|c| c.held).filter_map(Contender::node_path).collect();
                break match locks::still_ours(&self.client, &self.config.paths.locks, &held).await {
                    Ok(true) => {
                        tracing::info!("same session back and every lock node still ours; resuming");
                        self.suspended = false;
                        self.publish(PartitionState::Acquired, None, "session survived the suspension");
                        for ack in waiting_release.drain(..) {
                            let _ = ack.send(Ok(()));
                        }
                        Next::Hold
                    }
                    Ok(false) => {
                        tracing::warn!("a lock node did not survive the suspension; releasing");
                        self.suspended = false;
                        match waiting_release.pop() {
                            Some(ack) => Next::ReleaseSet(ack),
                            None => {
                                self.publish(PartitionState::Release, None, "a lock node did not survive");
                                Next::AwaitRelease
                            }
                        }
                    }
                    Err(err) => Next::Fail(err),
                };
            }
            tokio::select! {
                state = self.session.changed() => {
                    if state.is_terminated() {
                        break Next::Fail(Error::SessionLost { state });
                    }
                }
                command = self.commands.recv() => match command {
                    Some(Command::ReleaseSet(ack)) => waiting_release.push(ack),
                    other => break Self::on_command(other),
                },
            }
        };
        // Calls still waiting see the outcome: a failure's cause, or the release that follows.
        for ack in waiting_release {
            let _ = ack.send(match &next {
                Next::Fail(cause) => Err(cause.clone()),
                _ => Ok(()),
            });
        }
        self.suspended = false;
        next
    }

    async fn release_set(&mut self, ack: oneshot::Sender<Result<(), Error>>) -> Next {
        self.revoked = None;
        // A new allocation begins: `max_allocation_time` counts from here (restarts under churn do not reset it).
        self.allocation_deadline = None;
        // Publish first, without the items: release_set() may come while Acquired, and a deleted lock's item may be
        // taken by another member at once.
        let releasing = self.take_where(|_| true);
        self.publish(PartitionState::Allocating, None, "release_set");
        match self.release(releasing).await {
            Ok(()) => {
                let _ = ack.send(Ok(()));
                Next::Allocate
            }
            Err(err) => {
                let _ = ack.send(Err(err.clone()));
                Next::Fail(err)
            }
        }
    }

    /// Deletes every lock node we own or may own.
    async fn release_contenders(&mut self) -> Result<(), Error> {
        self.release_where(|_| true).await
    }

    /// Deletes the lock nodes of the contenders `which` selects.
    async fn release_where(&mut self, which: impl Fn(&Contender) -> bool) -> Result<(), Error> {
        let contenders = self.take_where(which);
        self.release(contenders).await
    }

    /// Takes the contenders `which` selects out of the bookkeeping (so no snapshot lists them any more).
    fn take_where(&mut self, which: impl Fn(&Contender) -> bool) -> Vec<Contender> {
        let indexes: Vec<usize> = self.contenders.iter().filter(|(_, c)| which(c)).map(|(&i, _)| i).collect();
        indexes.iter().filter_map(|i| self.contenders.remove(i)).collect()
    }

    /// Deletes these contenders' lock nodes, then sweeps any untracked node of our session.
    async fn release(&mut self, contenders: Vec<Contender>) -> Result<(), Error> {
        if contenders.is_empty() {
            return Ok(());
        }
        let count = contenders.len();
        locks::release_all(&self.client, contenders, self.config.window).await?;
        tracing::debug!(count, "locks released");
        let tracked = self.contenders.values().filter_map(Contender::node_path).collect();
        locks::sweep_orphans(&self.client, &self.config.paths.locks, tracked).await.map(drop)
    }

    /// Best effort at the end: delete our lock nodes and leave the party. After a lost session there is nothing left
    /// to delete, and the requests fail at once.
    async fn clean_up(&mut self) {
        self.party_changed = None;
        if self.client.state().is_terminated() {
            self.contenders.clear();
            return;
        }
        if let Err(err) = self.release_contenders().await {
            tracing::warn!(%err, "could not release every lock while leaving");
        }
        if let Err(err) = party::leave(&self.client, &self.config.paths, &self.membership).await {
            tracing::warn!(%err, "could not leave the party");
        }
    }
}

/// An instant that never comes in practice (about 30 years away), for a deadline that is not set.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365 * 30)
}
