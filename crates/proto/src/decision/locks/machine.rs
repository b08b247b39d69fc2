//! The lock machine's transitions: what each reply, timer and change of the wanted set does to the lock table. The
//! table's state ([`super::LockTable`], [`super::Lock`]) is private to `locks`; these transitions, a child of it, are
//! the only code outside the table's own methods that writes it.

use std::collections::BTreeSet;
use std::time::Instant;

use super::super::{Action, Core, Op, OurNode, Pending, ReqError, ReqId};
use super::{HELD_WATCH_REGISTRATIONS, Listing, Lock, Next, Retry, Step};
use crate::layout::{self, Position, position, sequence};
use crate::sabotage::{Sabotage, breaks};

impl Core {
    pub(in crate::decision) fn on_dirs_made(&mut self, id: ReqId, items: Vec<usize>, result: Result<(), ReqError>) {
        match result {
            Ok(()) => {
                for item in items {
                    self.locks.dirs_known[item] = true;
                    if self.step_is(item, Step::MakingDir(id)) {
                        self.set_step(item, Step::Queued);
                    }
                }
            }
            Err(ReqError::Fatal(err)) => self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.max_reaction_time;
                for item in items {
                    if self.step_is(item, Step::MakingDir(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::MakeDir));
                    }
                }
            }
        }
    }

    pub(in crate::decision) fn on_created(
        &mut self,
        id: ReqId,
        items: Vec<usize>,
        result: Result<Vec<(String, i64)>, ReqError>,
    ) {
        match result {
            Ok(created) => {
                let mut listing = Vec::new();
                for (item, (node, czxid)) in items.into_iter().zip(created) {
                    if let Some(lock) = self.locks.entries.get_mut(&item)
                        && lock.step == Step::Creating(id)
                    {
                        lock.node = Some(node);
                        lock.token = czxid;
                        // Listed either way; one no longer wanted is released by the next pump (the listing's reply
                        // is then ignored).
                        listing.push(item);
                        self.locks.unwanted_left |= !self.locks.want.contains(&item);
                    }
                }
                self.send_lists(listing);
            }
            Err(ReqError::NoNode) => {
                // A directory is missing (a `multi` is all or nothing: none was created). Make them, then retry.
                let mut dirs = Vec::new();
                for item in items {
                    if self.step_is(item, Step::Creating(id)) {
                        self.locks.dirs_known[item] = false;
                        dirs.push(item);
                    }
                }
                self.send_make_dirs(dirs);
            }
            Err(ReqError::Transient) => {
                // The create may or may not have happened: a listing tells (our prefix is unique).
                let at = self.now + self.cfg.max_reaction_time;
                for item in items {
                    if self.step_is(item, Step::Creating(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::List));
                    }
                }
            }
            Err(ReqError::Fatal(err)) => {
                // Refused for good (a `multi` is all or nothing): nothing was created, so there is nothing to delete
                // (a lookup by prefix could itself be refused, e.g. without READ on the directory).
                for item in items {
                    if let Some(lock) = self.locks.entries.get_mut(&item)
                        && lock.step == Step::Creating(id)
                    {
                        lock.created = false;
                        self.set_step(item, Step::Queued);
                    }
                }
                self.fail(err);
            }
        }
    }

    pub(in crate::decision) fn on_listed(
        &mut self,
        id: ReqId,
        items: Vec<usize>,
        result: Result<Vec<Listing>, ReqError>,
    ) {
        let results = match result {
            Ok(results) => results,
            Err(ReqError::Fatal(err)) => return self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.max_reaction_time;
                for item in items {
                    if self.step_is(item, Step::Listing(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::List));
                    }
                }
                return;
            }
        };
        let (mut relist, mut dirs) = (Vec::new(), Vec::new());
        for (item, listed) in items.into_iter().zip(results) {
            if !self.step_is(item, Step::Listing(id)) {
                continue;
            }
            match listed {
                Ok((children, czxid)) => match self.on_children(item, &children, czxid) {
                    Next::Held | Next::Waiting => {}
                    Next::Queued => self.set_step(item, Step::Queued),
                    Next::List => relist.push(item),
                },
                Err(ReqError::NoNode) => {
                    // The directory went away, and our node with it.
                    if let Some(lock) = self.locks.entries.get_mut(&item) {
                        lock.node = None;
                        lock.token = 0;
                    }
                    self.locks.dirs_known[item] = false;
                    dirs.push(item);
                }
                Err(ReqError::Transient) => {
                    let at = self.now + self.cfg.max_reaction_time;
                    self.set_step(item, Step::Delayed(at, Retry::List));
                }
                Err(ReqError::Fatal(err)) => return self.fail(err),
            }
        }
        self.send_lists(relist);
        self.send_make_dirs(dirs);
    }

    /// Where our contender stands among `children`.
    pub(in crate::decision) fn on_children(&mut self, item: usize, children: &[String], czxid: i64) -> Next {
        let Some(lock) = self.locks.entries.get_mut(&item) else { return Next::Waiting };
        // Every contender carrying this lock's prefix is a node of ours: the prefix is this lock's alone. There can be
        // more than one, or one we do not track: a create whose reply was lost can still land after we listed the
        // directory and created again (a request on the wire when the connection broke may be applied after the
        // ones sent on the next connection). Keep one, the node we track if it is there, else the lowest, and delete
        // the others: left alone, a node of ours that sorts before the one we keep would have us wait for ourselves
        // forever (and the release sweep spares every node with a prefix still in use).
        let mut ours: Vec<&String> =
            children.iter().filter(|c| c.starts_with(&lock.prefix) && sequence(c).is_some()).collect();
        ours.sort_by(|a, b| sequence(a).cmp(&sequence(b)));
        let tracked = lock.node.as_ref().filter(|node| ours.iter().any(|c| c == node)).cloned();
        let adopted = tracked.is_none().then(|| ours.first().map(|c| c.to_string())).flatten();
        let kept = tracked.clone().or_else(|| adopted.clone());
        let strays: Vec<String> =
            ours.iter().filter(|c| Some(c.as_str()) != kept.as_deref()).map(|c| c.to_string()).collect();
        let strays = if breaks(Sabotage::OwnStraysKept) { Vec::new() } else { strays };
        let prefix = lock.prefix.clone();
        let next = match (tracked, adopted) {
            (None, None) => {
                // Not there: a create not seen now has not happened (yet: see above), or someone deleted our node.
                lock.node = None;
                lock.token = 0;
                lock.created = false;
                Next::Queued
            }
            (None, Some(node)) => {
                // After a lost create reply (or our tracked node was deleted and another of ours is there): ours now.
                // Its stat (the fencing token) comes with the next listing.
                lock.node = Some(node);
                lock.token = 0;
                Next::List
            }
            (Some(own), _) => {
                if czxid > 0 {
                    lock.token = czxid;
                }
                match position(children, &own) {
                    Position::Held if lock.token <= 0 => Next::List,
                    Position::Held => {
                        self.set_step(item, Step::Held);
                        // Someone other than us deleting it must not go unnoticed until the next rebalance; the watch
                        // is asked for once our lock work has been quiet for a while (`watch_held`).
                        self.locks.unwatched.insert(item, own);
                        self.locks.unwatched_since.get_or_insert(self.now);
                        if let Some(lock) = self.locks.entries.get_mut(&item) {
                            lock.held_at = self.now;
                        }
                        Next::Held
                    }
                    Position::Behind(predecessor) => {
                        // Possibly a stray of ours, deleted below: its deletion wakes this watch.
                        let node = predecessor.to_owned();
                        let id = self.request(Op::Watch { item, node }, Pending::Watch(item));
                        self.set_step(item, Step::Waiting(id));
                        Next::Waiting
                    }
                    // Not reached: `tracked` is among the children and has a sequence. Contend again, as if gone.
                    Position::Missing => {
                        if let Some(lock) = self.locks.entries.get_mut(&item) {
                            lock.node = None;
                            lock.token = 0;
                            lock.created = false;
                        }
                        Next::Queued
                    }
                }
            }
        };
        if !strays.is_empty() {
            self.delete_strays(item, prefix, strays);
        }
        next
    }

    /// Deletes nodes of ours in an item's directory that its lock does not track (see [`Core::on_children`]). Sent as
    /// a release that keeps every tracked lock, so it waits like any release before anything new is contended.
    pub(in crate::decision) fn delete_strays(&mut self, item: usize, prefix: String, strays: Vec<String>) {
        let nodes = strays.into_iter().map(|node| OurNode { item, prefix: prefix.clone(), node: Some(node) }).collect();
        let keep = self.locks.entries.iter().map(|(&item, lock)| (item, lock.prefix.clone())).collect();
        let window = self.locks.window.size();
        let id = self.request(Op::Release { nodes, keep, window }, Pending::Release(Vec::new()));
        self.locks.releases.insert(id, Vec::new());
    }

    pub(in crate::decision) fn on_changed(&mut self, id: ReqId, item: usize, result: Result<(), ReqError>) {
        if !self.step_is(item, Step::Waiting(id)) {
            return;
        }
        match result {
            Ok(()) => self.send_lists(vec![item]),
            Err(ReqError::Fatal(err)) => self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.max_reaction_time;
                self.set_step(item, Step::Delayed(at, Retry::List));
            }
        }
    }

    /// A held lock node's watch fired: if the node is the one we still hold, someone else deleted it (an operator, a
    /// buggy tool): another process may be taking the item right now. Stop listing it at once, then take it again
    /// by the normal rules (eager: everything stops, as on any loss; incremental: only this item).
    pub(in crate::decision) fn on_held_gone(&mut self, item: usize, node: String, result: Result<(), ReqError>) {
        match result {
            Ok(()) => {}
            // The session ended: its own event says so.
            Err(ReqError::Fatal(_)) => return,
            // Not expected (the driver retries a registration lost with the connection): watch again. The lock stays
            // held: moving it out of `held` here would hide it from a suspension's verification.
            Err(_) => return self.watch_held_again(item, node),
        }
        if !self.holds(item, &node) || self.ending.is_some() {
            return; // our own release, or a lock long replaced
        }
        if let Some(lock) = self.locks.entries.get_mut(&item) {
            lock.node = None;
            lock.created = false;
            lock.token = 0;
        }
        // Contend again if still wanted (the next pump creates a new contender).
        self.set_step(item, Step::Queued);
        self.locks.want_grew = true;
        if self.session.lock_lost_while_suspended() {
            return;
        }
        if !self.published.shown().listed().contains(&item) {
            return;
        }
        self.on_listed_lock_lost(item);
    }

    /// Whether `node` is the item's lock node and we hold the lock through it.
    pub(in crate::decision) fn holds(&self, item: usize, node: &str) -> bool {
        self.locks.entries.get(&item).is_some_and(|lock| lock.step == Step::Held && lock.node.as_deref() == Some(node))
    }

    pub(in crate::decision) fn step_is(&self, item: usize, step: Step) -> bool {
        self.locks.entries.get(&item).is_some_and(|lock| lock.step == step)
    }

    /// Moves an item's lock to `step`, keeping the indexes (`held`, `queued`, `delayed`) in line.
    pub(in crate::decision) fn set_step(&mut self, item: usize, step: Step) {
        let Some(lock) = self.locks.entries.get_mut(&item) else { return };
        match lock.step {
            Step::Held => {
                self.locks.held.remove(&item);
            }
            Step::Queued => {
                self.locks.queued.remove(&item);
                self.locks.need_dirs.remove(&item);
            }
            Step::Delayed(at, _) => {
                self.locks.delayed.remove(&(at, item));
            }
            _ => {}
        }
        lock.step = step;
        match step {
            Step::Held => {
                self.locks.held.insert(item);
            }
            Step::Queued if self.locks.dirs_known[item] => {
                self.locks.queued.insert(item);
            }
            Step::Queued => {
                self.locks.need_dirs.insert(item);
            }
            Step::Delayed(at, _) => {
                self.locks.delayed.insert((at, item));
            }
            _ => {}
        }
    }

    /// A lock with a prefix of its own: the random nonce plus a multiple of an odd constant, distinct for every lock
    /// of this member (and, the nonce being random, from every other member's).
    pub(in crate::decision) fn new_lock(&mut self) -> Lock {
        let bits = self
            .locks
            .nonce
            .wrapping_add(self.locks.prefixes_issued.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        self.locks.prefixes_issued += 1;
        Lock {
            prefix: layout::contender_prefix(bits),
            node: None,
            created: false,
            token: 0,
            step: Step::Queued,
            held_at: self.now,
        }
    }

    /// Changes what we want, and releases at once what we no longer want.
    pub(in crate::decision) fn set_want(&mut self, want: BTreeSet<usize>) {
        self.locks.want_is_target = false;
        if want != self.locks.want {
            self.locks.want = want;
            self.locks.want_grew = true;
            self.release_unwanted();
        }
    }

    /// Operations per `multi` for the set as it is now.
    pub(in crate::decision) fn batch(&self) -> usize {
        self.cfg.batch.for_items(self.set.catalogue().len())
    }

    pub(in crate::decision) fn send_lists(&mut self, items: Vec<usize>) {
        for chunk in items.chunks(self.batch()) {
            // Our node is read along only while its fencing token is unknown (servers before 3.8.2 send no stat for
            // a create inside a multi): one read fewer per item and listing otherwise.
            let unknown_token = |lock: &Lock| if lock.token == 0 { lock.node.clone() } else { None };
            let list =
                chunk.iter().map(|&item| (item, self.locks.entries.get(&item).and_then(unknown_token))).collect();
            let id = self.request(Op::List(list), Pending::Locks(chunk.to_vec()));
            for &item in chunk {
                self.set_step(item, Step::Listing(id));
            }
        }
    }

    pub(in crate::decision) fn send_make_dirs(&mut self, items: Vec<usize>) {
        for chunk in items.chunks(self.batch()) {
            let id = self.request(Op::MakeDirs(chunk.to_vec()), Pending::Locks(chunk.to_vec()));
            for &item in chunk {
                self.set_step(item, Step::MakingDir(id));
            }
        }
    }

    /// Brings the locks in line with `want`: releases what is not wanted (once no reply can still reveal a node),
    /// and contends for what is wanted, batched, within the window, never while a release is in flight.
    pub(in crate::decision) fn pump_locks(&mut self) {
        if std::mem::take(&mut self.locks.unwanted_left) {
            self.release_unwanted();
        }
        if !self.locks.releases.is_empty() {
            return;
        }
        if std::mem::take(&mut self.locks.want_grew) {
            let missing: Vec<usize> =
                self.locks.want.iter().filter(|item| !self.locks.entries.contains_key(item)).copied().collect();
            for item in missing {
                let lock = self.new_lock();
                self.locks.entries.insert(item, lock);
                self.set_step(item, Step::Queued);
            }
        }
        self.send_queued();
    }

    /// When the watches of held locks are due: `time_boundary` after the last lock request was sent or answered, with
    /// none in flight or waiting, and at the latest `2 × time_boundary` after the oldest of them was taken. Each watch
    /// costs ZooKeeper a read, and the server serves requests in order: sent as each lock is taken, a rebalance's
    /// watches (one per relocked item, 100,000 in an eager join at 100,000 items) queue in front of the creates of the
    /// members still allocating. Measured at 100 members × 100,000 items, eager join and leave: 4.1-5.6 s beyond
    /// time_boundary sent at once, 1.8-2.9 s held back (2 runs each). The cap keeps the bound below whatever the lock
    /// work does (under endless churn it would never be quiet).
    ///
    /// The bound this gives (RELIABILITY.md; the simulation checks it): a held lock node deleted by someone else is
    /// noticed within one round trip of the later of its deletion and its watch's registration, which is asked for at
    /// most `2 × time_boundary` after the lock was taken; if the server does not answer meanwhile, the client suspends
    /// after its read timeout and the member lists nothing anyway.
    pub(in crate::decision) fn held_watches_due(&self) -> Option<Instant> {
        if self.locks.unwatched.is_empty() || !self.session.connected() || self.ending.is_some() {
            return None;
        }
        let idle = self.locks.in_flight == 0 && self.locks.queued.is_empty() && self.locks.need_dirs.is_empty();
        let quiet = idle.then(|| self.locks.work_at + self.delays().held_watch_quiet());
        let capped = self.locks.unwatched_since.map(|since| since + self.delays().held_watch_latest());
        let capped = if breaks(Sabotage::HeldWatchOnlyWhenQuiet) { None } else { capped };
        [quiet, capped].into_iter().flatten().min()
    }

    /// Asks for the watches of held locks once they are due ([`Core::held_watches_due`]), at most
    /// [`HELD_WATCH_REGISTRATIONS`] being registered at once: the rest wait for a registration to be answered.
    pub(in crate::decision) fn watch_held(&mut self) {
        if self.held_watches_due().is_some_and(|due| self.now >= due) {
            self.locks.unwatched_since = None;
            let due = std::mem::take(&mut self.locks.unwatched);
            self.locks.to_watch.extend(due);
        }
        while self.locks.registering.len() < HELD_WATCH_REGISTRATIONS {
            let Some((item, node)) = self.locks.to_watch.pop_front() else { break };
            // A lock released or lost meanwhile needs no watch.
            if self.holds(item, &node) && self.ending.is_none() {
                let id = self.request(Op::WatchHeld { item, node: node.clone() }, Pending::HeldWatch(item, node));
                self.locks.registering.insert(id);
            }
        }
    }

    /// A held lock's watch is to be registered again (its data changed, which used the watch, or the registration
    /// failed): queued behind the others due, within the limit; dropped when sent if the lock is no longer held.
    pub(in crate::decision) fn watch_held_again(&mut self, item: usize, node: String) {
        self.locks.to_watch.push_back((item, node));
    }

    /// A held lock's watch is registered: its slot goes to the next one due (the next [`Core::watch_held`]).
    pub(in crate::decision) fn on_held_watch_set(&mut self, id: ReqId) {
        self.locks.registering.remove(&id);
    }

    /// Sends creates for queued items (and makes missing directories first), batched, within the window.
    pub(in crate::decision) fn send_queued(&mut self) {
        if !self.locks.need_dirs.is_empty() {
            // As many as the window has room for, taken from the front: this runs after every event, so it must
            // not touch the items it leaves (it once re-inserted them all each time: 11 s of a lone member's
            // 100,000-item allocation on a fresh path).
            let room = self.locks.window.size().saturating_sub(self.locks.in_flight);
            let mut make = Vec::new();
            while make.len() < room
                && let Some(item) = self.locks.need_dirs.pop_first()
            {
                if self.locks.dirs_known[item] {
                    self.locks.queued.insert(item);
                } else {
                    make.push(item);
                }
            }
            self.send_make_dirs(make);
        }
        while !self.locks.queued.is_empty() && self.locks.in_flight < self.locks.window.size() {
            let room = (self.locks.window.size() - self.locks.in_flight).min(self.batch());
            let batch: Vec<usize> = std::iter::from_fn(|| self.locks.queued.pop_first()).take(room).collect();
            let mut contenders = Vec::with_capacity(batch.len());
            for &item in &batch {
                if let Some(lock) = self.locks.entries.get_mut(&item) {
                    lock.created = true;
                    contenders.push((item, lock.prefix.clone()));
                }
            }
            let id =
                self.request(Op::Create { contenders, data: self.party.me().clone() }, Pending::Locks(batch.clone()));
            for item in batch {
                if let Some(lock) = self.locks.entries.get_mut(&item) {
                    lock.step = Step::Creating(id);
                }
            }
        }
    }

    /// Takes the locks nobody wants out of the bookkeeping and deletes their nodes. A lock whose create is in flight
    /// stays until its reply says what exists.
    pub(in crate::decision) fn release_unwanted(&mut self) {
        let unwanted: Vec<usize> =
            self.locks.entries.keys().filter(|item| !self.locks.want.contains(item)).copied().collect();
        let mut nodes = Vec::new();
        for item in unwanted {
            let Some(lock) = self.locks.entries.get(&item) else { continue };
            match lock.step {
                Step::Creating(_) => {
                    self.locks.unwanted_left = true;
                    continue;
                }
                Step::Waiting(id) => {
                    self.out.requests.remove(&id);
                    self.out.actions.push_back(Action::Cancel(id));
                }
                Step::Listing(_) | Step::MakingDir(_) => {} // their replies find no lock and are ignored
                Step::Queued | Step::Delayed(..) | Step::Held => {}
            }
            debug_assert!(!self.published.shown().listed().contains(&item), "releasing item {item} while it is listed");
            self.set_step(item, Step::Queued);
            self.locks.queued.remove(&item);
            self.locks.need_dirs.remove(&item);
            if let Some(lock) = self.locks.entries.remove(&item)
                && lock.created
            {
                nodes.push(OurNode { item, prefix: lock.prefix, node: lock.node });
            }
        }
        if !nodes.is_empty() {
            let keep = self.locks.entries.iter().map(|(&item, lock)| (item, lock.prefix.clone())).collect();
            let gone =
                nodes.iter().map(|node| node.item).filter(|&item| !self.set.catalogue().contains(item)).collect();
            let window = self.locks.window.size();
            let id = self.request(Op::Release { nodes, keep, window }, Pending::Release(gone));
            self.locks.releases.insert(id, Vec::new());
        }
    }

    /// Whether every unwanted lock is released (nothing in flight, nothing left).
    pub(in crate::decision) fn released_all_unwanted(&self) -> bool {
        self.locks.releases.is_empty() && self.locks.entries.keys().all(|item| self.locks.want.contains(item))
    }

    /// Wants exactly the target, comparing the (possibly 100,000-item) sets only when either changed.
    pub(in crate::decision) fn want_target(&mut self) {
        if self.locks.want_is_target {
            return;
        }
        if let Some(target) = self.share.target()
            && self.locks.want != *target
        {
            self.set_want(target.clone());
        }
        self.locks.want_is_target = self.share.target().is_some();
    }

    /// Wants exactly what is held (cloned only when that changes something: the sets can hold 100,000 items).
    pub(in crate::decision) fn want_held(&mut self) {
        if self.locks.want != self.locks.held {
            self.set_want(self.locks.held.clone());
        }
    }

    pub(in crate::decision) fn want_is_held(&self) -> bool {
        self.locks.want.iter().all(|item| self.locks.held.contains(item))
    }

    /// Runs the lock machinery, then answers `release_set()` calls whose release is complete.
    pub(in crate::decision) fn settle_locks(&mut self) {
        self.pump_locks();
        if self.published.awaiting_release() && self.released_all_unwanted() {
            for ack in self.published.take_release_acks() {
                self.out.actions.push_back(Action::Ack(ack, Ok(())));
            }
        }
        // A release finishing can complete an allocation.
        if self.ending.is_none()
            && !self.session.suspended()
            && self.published.owed().is_none()
            && self.share.target().is_some()
            && self.completes_in_state()
        {
            self.acquired_if_complete();
        }
    }
}
