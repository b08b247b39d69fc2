//! The background task that owns a partitioner's ZooKeeper conversation: a thin loop around the decision core.
//!
//! The loop is here; [`requests`] turns each operation the core asks for into ZooKeeper requests, [`publish`] each
//! publication into the snapshot handles read (with its logs and metrics), and `supervise` runs the loop and cleans up
//! after a panic. It feeds the [`Core`] what happens (session changes, the party watch, request replies, commands,
//! time), performs the actions the core asks for, in order, and decides nothing itself. Every wait is one `select!`
//! over cancel-safe sources, so every event reaches the core at once, whatever the core is doing.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{AbortHandle, Abortable, BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zookeeper_client::{Client, SessionState, StateWatcher};

use crate::Error;
use crate::decision::{AckId, Action, Core, Event, Op, Reply, ReqId};
use crate::handle::Command;
use crate::party::Membership;
use crate::zookeeper::WatchEvent;

pub(crate) mod publish;
pub(crate) mod requests;
mod supervise;
mod watches;

use publish::Publisher;
use requests::{Context, Done};
#[cfg(test)]
pub(crate) use supervise::delete_our_nodes;
pub(crate) use supervise::supervise;
use watches::InputWatches; // the simulation's panic clean-up

/// A watch of the real client.
type Watch = BoxFuture<'static, WatchEvent>;

pub(crate) struct Driver {
    client: Client,
    context: Arc<Context>,
    core: Core,
    membership: Membership,
    session: StateWatcher,
    commands: mpsc::UnboundedReceiver<Command>,
    publisher: Publisher,
    /// Requests in flight; their replies go to the core.
    in_flight: FuturesUnordered<BoxFuture<'static, Done<Watch>>>,
    /// How to stop waiting on a lock watch the core no longer cares about.
    watches: HashMap<ReqId, AbortHandle>,
    /// The watches armed by the latest reads of the party, the shared set and the placement record.
    input_watches: InputWatches<Watch>,
    /// Each item's lock directory, by the core's item index (grown as the shared set brings new items).
    lock_dirs: Arc<Vec<String>>,
    release_acks: HashMap<AckId, oneshot::Sender<Result<(), Error>>>,
    finish_acks: HashMap<AckId, oneshot::Sender<()>>,
    next_ack: AckId,
    /// Some handle still exists (the command channel is open).
    handles_alive: bool,
}

impl Driver {
    pub fn new(
        client: Client,
        context: Arc<Context>,
        core: Core,
        membership: Membership,
        session: StateWatcher,
        commands: mpsc::UnboundedReceiver<Command>,
        publisher: Publisher,
    ) -> Self {
        // Before `build()` returns: from then on, the set's size is among the metrics.
        publisher.started(&core);
        Driver {
            client,
            context,
            core,
            membership,
            session,
            commands,
            publisher,
            in_flight: FuturesUnordered::new(),
            watches: HashMap::new(),
            input_watches: InputWatches::new(),
            lock_dirs: Arc::new(Vec::new()),
            release_acks: HashMap::new(),
            finish_acks: HashMap::new(),
            next_ack: 0,
            handles_alive: true,
        }
    }

    pub async fn run(mut self) {
        // The state may have changed between the join and now.
        let state = self.session.peek_state();
        if state != SessionState::SyncConnected && state != SessionState::ConnectedReadOnly {
            self.publisher.session(state);
            self.core.handle(publish::session_event(state), now());
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

            tokio::select! {
                state = self.session.changed() => {
                    self.publisher.session(state);
                    self.core.handle(publish::session_event(state), now());
                }
                Some(mut done) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.watches.remove(&done.id);
                    self.input_watches.keep(&mut done);
                    if let Some(membership) = done.joined {
                        self.membership = membership;
                    }
                    self.core.handle(Event::Reply(done.id, done.reply), now());
                }
                (event, ended) = self.input_watches.fired() => {
                    if let Some(state) = ended {
                        self.publisher.session(state);
                    }
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
        let cause = self.publisher.sender().borrow().cause.clone().unwrap_or(Error::Stopped);
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
            Action::Publish(publication) => self.publisher.publish(&self.core, *publication, now()),
            Action::Ack(id, result) => {
                if let Some(ack) = self.release_acks.remove(&id) {
                    let _ = ack.send(result.map_err(publish::error_of));
                } else if let Some(ack) = self.finish_acks.remove(&id) {
                    let _ = ack.send(());
                }
            }
            Action::Stop => {
                self.input_watches.clear();
                for (_, abort) in self.watches.drain() {
                    abort.abort();
                }
            }
        }
    }

    /// Starts a request on the one request path ([`requests::perform`]); its reply reaches the core through
    /// `in_flight`.
    fn send(&mut self, id: ReqId, op: Op) {
        if self.lock_dirs.len() < self.core.item_count() {
            let dirs = Arc::make_mut(&mut self.lock_dirs);
            for index in dirs.len()..self.core.item_count() {
                dirs.push(self.context.paths.lock_dir(&self.core.item(index).node_name()));
            }
        }
        let watch = matches!(op, Op::Watch { .. });
        if watch {
            self.publisher.lock_wait();
        }
        let request = requests::perform(
            self.client.clone(),
            self.context.clone(),
            self.lock_dirs.clone(),
            self.membership.clone(),
            id,
            op,
        );
        let future = if watch {
            // An aborted wait answers nothing; the core has already forgotten it.
            let (abort, registration) = AbortHandle::new_pair();
            self.watches.insert(id, abort);
            Abortable::new(request, registration)
                .map(move |done| done.unwrap_or_else(|_| Done::reply_to(id, Reply::Changed(Ok(())))))
                .boxed()
        } else {
            request.boxed()
        };
        self.in_flight.push(future);
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}
