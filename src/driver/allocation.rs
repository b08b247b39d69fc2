//! Taking the locks of an assignment: batched `multi` requests for the common case, item by item for whatever a
//! batch cannot settle, at most `window` operations in flight, every request a future the driver can drop at any
//! moment without losing track of a node (the [`Contender`] records say what to clean up).

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::{Driver, Interrupt, Next};
use crate::Error;
use crate::locks::{self, BatchStep, Contender, Outcome, Position, Step, StepFuture};
use crate::party;

impl Driver {
    /// Takes the lock of every assigned item, many requests at once, until all are held or something interrupts.
    ///
    /// Uncontended items cost two `multi` requests per [`locks::BATCH`] items: create the contenders, list their
    /// directories. Anything a batch cannot settle (a missing directory, a lost reply, a contended lock) continues item
    /// by item. At most `window` operations are in flight at once; waits on a watch do not count.
    pub(super) async fn acquire(&mut self, assigned: Vec<usize>, deadline: Instant) -> Result<(), Interrupt> {
        let missing_dirs = self.find_missing_dirs(&assigned).await.map_err(Interrupt::Leave)?;
        let mut queue: VecDeque<usize> = assigned.into();
        let mut steps: FuturesUnordered<StepFuture> = FuturesUnordered::new();
        let mut in_flight = 0usize;
        let mut waiting = queue.len();
        let mut follow_ups = Vec::new();
        loop {
            while in_flight < self.config.window && !queue.is_empty() {
                let batch: Vec<usize> = queue.drain(..queue.len().min(locks::BATCH)).collect();
                in_flight += batch.len();
                steps.push(self.start_batch(batch, &missing_dirs));
            }
            if waiting == 0 {
                return Ok(());
            }
            let Some(party_changed) = self.party_changed.as_mut() else {
                return Err(Interrupt::Leave(Next::Fail(Error::Stopped)));
            };
            tokio::select! {
                Some(outcome) = steps.next() => {
                    let held = match outcome {
                        Outcome::One(index, step) => {
                            in_flight -= usize::from(step.was_request());
                            self.advance(index, step).map(|next| match next {
                                Some(next) => { follow_ups.push(next); 0 }
                                None => 1,
                            })
                        }
                        Outcome::Batch(indexes, step) => {
                            in_flight -= indexes.len();
                            self.advance_batch(indexes, step, &mut follow_ups)
                        }
                    };
                    waiting -= held.map_err(|err| Interrupt::Leave(Next::Fail(err)))?;
                    for next in follow_ups.drain(..) {
                        in_flight += next.weight();
                        steps.push(next.into_future());
                    }
                }
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
                command = self.commands.recv() => return Err(Interrupt::Leave(Self::on_command(command))),
                () = tokio::time::sleep_until(deadline) => return Err(Interrupt::Leave(self.allocation_timed_out())),
            }
        }
    }

    /// The assigned items whose lock directory does not exist, from one listing of `<path>/locks` (skipped when every
    /// directory is already known: after the first allocation, a reused path costs nothing here).
    async fn find_missing_dirs(&mut self, assigned: &[usize]) -> Result<HashSet<usize>, Next> {
        if assigned.iter().all(|i| self.known_dirs.contains(i)) {
            return Ok(HashSet::new());
        }
        let (client, locks_dir) = (self.client.clone(), self.config.paths.locks.clone());
        let read = async move {
            match party::retry_transient(|| client.list_children(&locks_dir)).await {
                // `<path>/locks` itself is gone: every directory is missing (the item path recreates it).
                Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
                other => other,
            }
        };
        let existing: HashSet<String> =
            self.read("get_children", self.config.paths.locks.clone(), read).await?.into_iter().collect();
        let locks_dir = &self.config.paths.locks;
        let mut missing = HashSet::new();
        for &index in assigned {
            let name = &self.config.lock_dirs[index][locks_dir.len() + 1..];
            if existing.contains(name) {
                self.known_dirs.insert(index);
            } else {
                missing.insert(index);
            }
        }
        Ok(missing)
    }

    /// Starts taking the locks of a batch of items, each with a new contender: creates the batch's missing lock
    /// directories first if there are any.
    fn start_batch(&mut self, batch: Vec<usize>, missing_dirs: &HashSet<usize>) -> StepFuture {
        for &index in &batch {
            self.contenders.insert(index, Contender::new(index, self.config.lock_dirs[index].clone()));
        }
        let dirs: Vec<String> =
            batch.iter().filter(|i| missing_dirs.contains(i)).map(|&i| self.config.lock_dirs[i].clone()).collect();
        if dirs.is_empty() { self.create_batch(batch) } else { locks::make_dirs(&self.client, batch, dirs) }
    }

    /// Lists the lock directories of a batch whose contenders were created, with each contender's stat.
    fn list_batch(&self, indexes: Vec<usize>, delay: Duration) -> Advance {
        let dirs_and_nodes: Vec<(String, String)> = indexes
            .iter()
            .filter_map(|i| self.contenders.get(i))
            .map(|c| (c.dir.clone(), c.node_path().unwrap_or_else(|| format!("{}/{}", c.dir, c.prefix))))
            .collect();
        let count = indexes.len();
        Advance::Batch(locks::list_batch(&self.client, indexes, dirs_and_nodes, delay), count)
    }

    fn create_batch(&self, batch: Vec<usize>) -> StepFuture {
        let prefixes = batch.iter().filter_map(|i| self.contenders.get(i)).map(|c| format!("{}/{}", c.dir, c.prefix));
        locks::create_batch(&self.client, batch.clone(), prefixes.collect(), self.membership.name.as_bytes())
    }

    /// Moves a batch of items forward after a `multi` returned; pushes each item's next request to `follow_ups`
    /// and returns how many locks are now held.
    fn advance_batch(
        &mut self,
        indexes: Vec<usize>,
        step: BatchStep,
        follow_ups: &mut Vec<Advance>,
    ) -> Result<usize, Error> {
        let retry = self.config.retry_delay;
        match step {
            BatchStep::DirsMade(Ok(_)) => {
                self.known_dirs.extend(indexes.iter().copied());
                let count = indexes.len();
                follow_ups.push(Advance::Batch(self.create_batch(indexes), count));
            }
            BatchStep::Created(Ok(results)) => {
                for (index, result) in indexes.iter().zip(results) {
                    if let (Some(contender), zookeeper_client::MultiWriteResult::Create { path, stat }) =
                        (self.contenders.get_mut(index), result)
                    {
                        contender.node = path.rsplit('/').next().map(str::to_owned);
                        // Servers before 3.7.2/3.8.2/3.9.0 send no stat for a create inside a multi (ZOOKEEPER-4026).
                        contender.czxid = if stat.is_invalid() { 0 } else { stat.czxid };
                    }
                }
                follow_ups.push(self.list_batch(indexes, Duration::ZERO));
            }
            BatchStep::Listed(Ok(results)) => {
                let mut held = 0;
                for (index, pair) in indexes.into_iter().zip(results.chunks(2)) {
                    let listed = match pair.first() {
                        Some(zookeeper_client::MultiReadResult::Children { children }) => Ok(children.clone()),
                        Some(zookeeper_client::MultiReadResult::Error { err }) => Err(err.clone()),
                        _ => Err(zookeeper_client::Error::UnexpectedError("get_children answered with data".into())),
                    };
                    if let (Some(zookeeper_client::MultiReadResult::Data { stat, .. }), Some(contender)) =
                        (pair.get(1), self.contenders.get_mut(&index))
                    {
                        contender.czxid = stat.czxid;
                    }
                    match self.advance(index, Step::Listed(listed))? {
                        Some(next) => follow_ups.push(next),
                        None => held += 1,
                    }
                }
                return Ok(held);
            }
            BatchStep::Listed(Err(err)) => {
                if let Some(err) = Error::zk_or_transient("multi get_children", self.config.paths.locks.clone(), err) {
                    return Err(err);
                }
                follow_ups.push(self.list_batch(indexes, retry));
            }
            BatchStep::DirsMade(Err(err)) | BatchStep::Created(Err(err)) => {
                let source = match err {
                    zookeeper_client::MultiWriteError::RequestFailed { source } => source,
                    zookeeper_client::MultiWriteError::OperationFailed { source, .. } => source,
                };
                let data = self.membership.name.as_bytes();
                for index in indexes {
                    let Some(contender) = self.contenders.get(&index) else { continue };
                    // A `multi` is all or nothing. When it was refused (a directory exists already, or is missing),
                    // nothing was written: go item by item. When its reply was lost, the listing tells what happened.
                    let next = match (&source, Error::zk_or_transient("multi", contender.dir.clone(), source.clone())) {
                        (zookeeper_client::Error::NodeExists | zookeeper_client::Error::NoNode, _) => {
                            locks::create(&self.client, index, contender, data)
                        }
                        (_, None) => locks::list(&self.client, index, &contender.dir, retry),
                        (_, Some(err)) => return Err(err),
                    };
                    follow_ups.push(Advance::Request(next));
                }
            }
        }
        Ok(0)
    }

    /// Moves one item's lock forward after a request returned. `Ok(None)` means the lock is held.
    fn advance(&mut self, index: usize, step: Step) -> Result<Option<Advance>, Error> {
        use zookeeper_client::Error as ZkError;
        let retry = self.config.retry_delay;
        let (client, data) = (&self.client, self.membership.name.as_bytes());
        let Some(contender) = self.contenders.get_mut(&index) else {
            // Every started item has a contender until it is released, and releasing drops the step futures first.
            return Err(Error::Stopped);
        };
        let next = match step {
            Step::Created(Ok((stat, sequence))) => {
                self.known_dirs.insert(index);
                contender.node = Some(format!("{}{sequence}", contender.prefix));
                contender.czxid = stat.czxid;
                Advance::Request(locks::list(client, index, &contender.dir, Duration::ZERO))
            }
            Step::Created(Err(ZkError::NoNode)) => {
                Advance::Request(locks::make_dir(client, index, &contender.dir, Duration::ZERO))
            }
            Step::Created(Err(err)) => match Error::zk_or_transient("create", contender.dir.clone(), err) {
                // The create may or may not have happened: the listing will tell (our prefix is unique).
                None => Advance::Request(locks::list(client, index, &contender.dir, retry)),
                Some(err) => return Err(err),
            },
            Step::DirReady(Ok(())) => Advance::Request(locks::create(client, index, contender, data)),
            Step::DirReady(Err(err)) => match Error::zk_or_transient("mkdir", contender.dir.clone(), err) {
                None => Advance::Request(locks::make_dir(client, index, &contender.dir, retry)),
                Some(err) => return Err(err),
            },
            Step::Listed(Ok(children)) => {
                if contender.node.is_none() {
                    contender.node = children.iter().find(|c| c.starts_with(&contender.prefix)).cloned();
                    if contender.node.is_none() {
                        return Ok(Some(Advance::Request(locks::create(client, index, contender, data))));
                    }
                }
                let own = contender.node.as_deref().unwrap_or_default();
                match locks::position(&children, own) {
                    Position::Held if contender.czxid <= 0 => {
                        // Held, but a node found again after a lost reply has no known stat yet: read it, so the
                        // fencing token is right.
                        let path = format!("{}/{own}", contender.dir);
                        Advance::Request(locks::stat(client, index, path, Duration::ZERO))
                    }
                    Position::Held => {
                        tracing::debug!(item = %self.config.items[index], node = own, "lock held");
                        contender.held = true;
                        return Ok(None);
                    }
                    Position::Behind(predecessor) => {
                        tracing::debug!(item = %self.config.items[index], predecessor, "lock contended; waiting");
                        let path = format!("{}/{predecessor}", contender.dir);
                        Advance::Wait(locks::wait_for(client, index, path))
                    }
                    Position::Missing => {
                        tracing::warn!(item = %self.config.items[index], node = own, "our lock node vanished; contending again");
                        contender.node = None;
                        Advance::Request(locks::create(client, index, contender, data))
                    }
                }
            }
            Step::Listed(Err(ZkError::NoNode)) => {
                // The directory went away, and our node with it.
                contender.node = None;
                self.known_dirs.remove(&index);
                Advance::Request(locks::make_dir(client, index, &contender.dir, Duration::ZERO))
            }
            Step::Listed(Err(err)) => match Error::zk_or_transient("get_children", contender.dir.clone(), err) {
                None => Advance::Request(locks::list(client, index, &contender.dir, retry)),
                Some(err) => return Err(err),
            },
            Step::Stat(Ok(Some(stat))) if stat.ephemeral_owner == client.session_id().0 => {
                contender.czxid = stat.czxid;
                contender.held = true;
                return Ok(None);
            }
            Step::Stat(Ok(_)) => {
                tracing::warn!(item = %self.config.items[index], "our lock node vanished; contending again");
                contender.node = None;
                Advance::Request(locks::create(client, index, contender, data))
            }
            Step::Stat(Err(err)) => match Error::zk_or_transient("exists", contender.dir.clone(), err) {
                None => Advance::Request(locks::stat(client, index, contender.node_path().unwrap_or_default(), retry)),
                Some(err) => return Err(err),
            },
            Step::PredecessorChanged(Ok(())) => {
                Advance::Request(locks::list(client, index, &contender.dir, Duration::ZERO))
            }
            Step::PredecessorChanged(Err(err)) => {
                match Error::zk_or_transient("get_data", contender.dir.clone(), err) {
                    None => Advance::Request(locks::list(client, index, &contender.dir, retry)),
                    Some(err) => return Err(err),
                }
            }
        };
        Ok(Some(next))
    }
}

/// The next step of one item's lock, or of a batch of them.
enum Advance {
    /// One request: one operation against the in-flight window.
    Request(StepFuture),
    /// A `multi` of this many operations.
    Batch(StepFuture, usize),
    /// A wait on a watch: costs the server nothing while it waits.
    Wait(StepFuture),
}

impl Advance {
    /// The operations this step keeps in flight; what its outcome gives back to the window.
    fn weight(&self) -> usize {
        match self {
            Advance::Request(_) => 1,
            Advance::Batch(_, count) => *count,
            Advance::Wait(_) => 0,
        }
    }

    fn into_future(self) -> StepFuture {
        match self {
            Advance::Request(step) | Advance::Batch(step, _) | Advance::Wait(step) => step,
        }
    }
}
