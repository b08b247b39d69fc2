//! The background task that owns a partitioner's ZooKeeper conversation: a thin loop around the decision core.
//!
//! The loop is here, and it is only its `select!`: [`step`] is the loop's body, shared with the simulation (what each
//! input does to the [`Core`], and how each action the core asks for is carried out); [`requests`] turns each
//! operation into ZooKeeper requests, [`publish`] each publication into the snapshot handles read (with its logs and
//! metrics), and `supervise` runs the loop and cleans up after a panic. The task decides nothing itself. Every wait
//! is one `select!` over cancel-safe sources, so every event reaches the core at once, whatever the core is doing.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{AbortHandle, Abortable, BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client::{Client, SessionState, StateWatcher};

use crate::handle::Command;
use crate::membership::Membership;
use crate::zookeeper::WatchEvent;
use proto::decision::{Core, Reply, ReqId};

pub(crate) mod input_watches;
pub(crate) mod publish;
pub(crate) mod requests;
pub(crate) mod step;
mod supervise;

use publish::Publisher;
use requests::{Context, Done};
use step::{Requests, Step};
#[cfg(test)]
pub(crate) use supervise::delete_our_nodes; // the simulation's panic clean-up
pub(crate) use supervise::supervise;

/// A watch of the real client.
type Watch = BoxFuture<'static, WatchEvent>;

pub(crate) struct Driver {
    step: Step<Client>,
    session: StateWatcher,
    commands: mpsc::UnboundedReceiver<Command>,
    requests: InFlight,
    /// Some handle still exists (the command channel is open).
    handles_alive: bool,
}

/// The requests in flight, as tokio runs them: polled by the loop's `select!`, lock waits abortable.
struct InFlight {
    /// Their replies go to the core.
    futures: FuturesUnordered<BoxFuture<'static, Done<Watch>>>,
    /// How to stop waiting on a lock watch the core no longer cares about.
    waits: HashMap<ReqId, AbortHandle>,
}

impl Requests<Watch> for InFlight {
    fn start(&mut self, id: ReqId, wait: bool, request: impl Future<Output = Done<Watch>> + Send + 'static) {
        let future = if wait {
            // An aborted wait answers nothing; the core has already forgotten it.
            let (abort, registration) = AbortHandle::new_pair();
            self.waits.insert(id, abort);
            Abortable::new(request, registration)
                .map(move |done| done.unwrap_or_else(|_| Done::reply_to(id, Reply::Changed(Ok(())))))
                .boxed()
        } else {
            request.boxed()
        };
        self.futures.push(future);
    }

    fn cancel(&mut self, id: ReqId) {
        if let Some(abort) = self.waits.remove(&id) {
            abort.abort();
        }
    }

    fn stop(&mut self) {
        for (_, abort) in self.waits.drain() {
            abort.abort();
        }
    }
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
            step: Step::new(core, publisher, client, context, membership),
            session,
            commands,
            requests: InFlight { futures: FuturesUnordered::new(), waits: HashMap::new() },
            handles_alive: true,
        }
    }

    pub async fn run(mut self) {
        // The state may have changed between the join and now.
        let state = self.session.peek_state();
        if state != SessionState::SyncConnected && state != SessionState::ConnectedReadOnly {
            self.step.session(state, now());
        }
        loop {
            self.step.act(&mut self.requests, now());
            if self.step.core().is_stopped() {
                break;
            }
            let deadline = self.step.core().poll_timeout().map(Instant::from_std);
            let sleep = OptionFuture::from(deadline.map(tokio::time::sleep_until));

            tokio::select! {
                state = self.session.changed() => self.step.session(state, now()),
                Some(done) = self.requests.futures.next(), if !self.requests.futures.is_empty() => {
                    self.requests.waits.remove(&done.id);
                    self.step.reply(done, now());
                }
                fired = self.step.watches().fired() => self.step.watch(fired, now()),
                command = self.commands.recv(), if self.handles_alive => {
                    // Every handle gone: say so once, then stop polling a channel that would answer at once forever.
                    self.handles_alive = command.is_some();
                    self.step.command(command, now());
                }
                Some(()) = sleep => self.step.timeout(now()),
            }
        }
        // Answer commands that raced with the end; later ones find the channel closed.
        self.commands.close();
        let late = std::iter::from_fn(|| self.commands.try_recv().ok()).collect::<Vec<_>>();
        self.step.answer_late(late);
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}
