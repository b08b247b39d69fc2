//! Admins: processes that change the shared set with the production [`SetStore`], and what their reported results
//! are checked against.

use std::collections::BTreeSet;
use std::task::Poll;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{Actor, PATH, SET_CHUNK, World, poll_with};
use crate::acl::NodeAcls;
use crate::session::SessionRef;
use crate::shared_set::SetStore;
use crate::sim::net::{ActorId, SimClient, lock};
use crate::{Error, Item};

/// An admin changing the shared set with the production code.
pub(super) struct Admin {
    pub(super) zk: SimClient,
    pub(super) set: SetStore<SimClient>,
    pub(super) op: Option<(String, BoxFuture<'static, Result<crate::shared_set::SharedSetVersion, Error>>)>,
    /// Updates left in this admin's burst (each one starts when the one before returns).
    pub(super) burst: usize,
    /// Items the burst adds back first (what another admin's update, whose reply was lost, removed).
    pub(super) add_back: Vec<Item>,
    /// An export or import in flight (progress runs).
    pub(super) progress: Option<super::progress::ProgressOp>,
}

/// An admin's change in flight: what it is (for the log), and the call.
type AdminOp = (String, BoxFuture<'static, Result<crate::shared_set::SharedSetVersion, Error>>);

impl World {
    pub(super) fn drive_admin(&mut self, actor: ActorId, admin: &mut Admin) {
        if let Some((what, future)) = &mut admin.progress
            && let Poll::Ready(done) = poll_with(future, &self.wakers[actor].clone())
        {
            let what = what.clone();
            admin.progress = None;
            let tokens = admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            self.progress_done(actor, &what, done, &tokens);
            admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        }
        let Some((what, future)) = &mut admin.op else { return };
        let Poll::Ready(result) = poll_with(future, &self.wakers[actor].clone()) else { return };
        let what = what.clone();
        admin.op = None;
        // Its reply was to be lost, but it committed nothing (it failed, or had nothing to do): the next one is.
        if self.lost_reply == Some(admin.zk.session()) {
            self.lost_reply = None;
        }
        let tokens = admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match &result {
            Ok(read) => {
                self.note(format!("a{actor} admin {what}: version {} = {:?}", read.version, read.items));
                if let Some(weights) = self.committed_weights.get(&read.version)
                    && *weights != read.weights
                {
                    self.violate(format!(
                        "admin {what} reports version {} weighing {:?}, but that version weighs {weights:?}",
                        read.version, read.weights
                    ));
                }
                let names: BTreeSet<String> = read.items.iter().map(Item::node_name).collect();
                match self.committed.get(&read.version) {
                    Some(stored) if *stored != names => self.violate(format!(
                        "admin {what} reports version {} as {names:?}, but that version is {stored:?}",
                        read.version
                    )),
                    None => self
                        .violate(format!("admin {what} reports version {}, which was never committed", read.version)),
                    _ => {}
                }
            }
            // The one failure that may have changed the set, and says so.
            Err(err @ Error::SharedSetOutcomeUnknown { .. }) => self.note(format!("a{actor} admin {what}: {err}")),
            Err(err) => {
                self.note(format!("a{actor} admin {what} failed: {err}"));
                if let Some(token) = tokens.iter().find(|token| self.landed.contains(*token)) {
                    self.violate(format!("admin {what} reported {err}, but its update {token} was committed"));
                }
            }
        }
        admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        if admin.burst > 0 {
            admin.burst -= 1;
            let op = self.burst_op(admin);
            self.note(format!("a{actor} admin starts: {} ({} left in its burst)", op.0, admin.burst));
            admin.op = Some(op);
            lock(&self.net).dirty.insert(actor);
        }
    }

    /// An idle admin, or a new one on a session of its own.
    pub(super) fn idle_admin(&mut self) -> ActorId {
        let idle = (0..self.actors.len())
            .find(|&a| matches!(&self.actors[a], Actor::Admin(ad) if ad.op.is_none() && ad.progress.is_none()));
        match idle {
            Some(actor) => actor,
            None => {
                let actor = self.actors.len();
                let session = lock(&self.net).open_session(actor);
                let zk = SimClient::new(self.net.clone(), session);
                let set = SetStore::new(SessionRef::Owned(zk.clone()), PATH, NodeAcls::default()).with_chunk(SET_CHUNK);
                let admin = Admin { zk, set, op: None, burst: 0, add_back: Vec::new(), progress: None };
                self.add_actor(Actor::Admin(Box::new(admin)))
            }
        }
    }

    /// In a lineage run, an admin makes a version that moves no item: it closes one (or splits one into a child that
    /// waits for it).
    pub(super) fn admin_moves_nothing(&mut self) {
        let current = self.current_values();
        if !(self.plan.shared_set && self.plan.lineage)
            || current.is_empty()
            || self.faults_left == 0
            || self.in_window()
        {
            return;
        }
        let actor = self.idle_admin();
        let pick = Item::from(current[self.rng().below(current.len() as u64) as usize]);
        let close = self.rng().below(2) == 0;
        let change = match close {
            true => crate::shared_set::LineageChange::Close { items: vec![pick] },
            false => {
                let child = Item::from(self.next_value);
                self.next_value += 1;
                crate::shared_set::LineageChange::Split { parent: pick, children: vec![child] }
            }
        };
        let Actor::Admin(admin) = &mut self.actors[actor] else { return };
        let set = admin.set.clone();
        let what = format!("{change:?} (moves nothing)");
        admin.op = Some((what.clone(), async move { set.change_lineage(change).await }.boxed()));
        self.note(format!("a{actor} admin starts: {what}"));
        lock(&self.net).dirty.insert(actor);
    }

    /// The items of the latest committed version, as values.
    fn current_values(&self) -> Vec<i64> {
        self.committed
            .last_key_value()
            .map(|(_, names)| names.iter().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default()
    }

    /// An admin's commit lands and its reply is lost: the admin removes one item (in a lineage run, splits one), and
    /// its session is cut the moment the server applies the commit (`record_set` sees it), for most of a session
    /// timeout. Meanwhile another admin makes 16 to 24 updates, the first of them adding back what the lost one
    /// removed, so that its token has left the header's log by the time it looks again: it must find its outcome all
    /// the same, and never apply its change a second time.
    pub(super) fn admin_loses_a_reply(&mut self) {
        if self.in_window() {
            return;
        }
        let current = self.current_values();
        if current.len() < 3 || self.lost_reply.is_some() {
            return self.admin_changes();
        }
        let actor = self.idle_admin();
        let pick = current[self.rng().below(current.len() as u64) as usize];
        let child = self.next_value;
        self.next_value += 1;
        let retire = self.plan.lineage && self.rng().below(3) == 0;
        let Actor::Admin(admin) = &self.actors[actor] else { return };
        let (set, session) = (admin.set.clone(), admin.zk.session());
        let retirement = match retire {
            true => self.lineage_change(9, &current, set.clone()),
            false => None,
        };
        let (what, future): AdminOp = if let Some((what, future)) = retirement {
            (format!("{what} (its reply to be lost)"), future)
        } else if self.plan.lineage {
            let change =
                crate::shared_set::LineageChange::Split { parent: Item::from(pick), children: vec![Item::from(child)] };
            (format!("{change:?} (its reply to be lost)"), async move { set.change_lineage(change).await }.boxed())
        } else {
            let items = vec![Item::from(pick)];
            (format!("remove [{pick}] (its reply to be lost)"), async move { set.remove(items).await }.boxed())
        };
        if let Actor::Admin(admin) = &mut self.actors[actor] {
            admin.op = Some((what.clone(), future));
        }
        self.note(format!("a{actor} admin starts: {what}"));
        self.lost_reply = Some(session);
        lock(&self.net).dirty.insert(actor);
    }

    /// The commit of the admin whose reply is to be lost has been applied: its connection is cut before the reply
    /// arrives, for most of a session timeout, and a burst of updates by another admin begins, adding back first
    /// what the lost update removed (`removed`).
    pub(super) fn lose_the_reply(&mut self, session: crate::sim::zk::SessionId, removed: Vec<Item>) {
        let detect = self.rng().millis(0, 20);
        let outage = self.plan.session.mul_f64(0.5 + self.rng().below(250) as f64 / 1000.0);
        self.note(format!("the reply to session {session}'s commit is lost; a burst of updates follows"));
        self.lost_replies += 1;
        self.cut_session(session, detect, outage);
        let actor = self.idle_admin();
        let count = 16 + self.rng().below(9) as usize;
        let Actor::Admin(mut admin) = std::mem::replace(&mut self.actors[actor], Actor::Gone) else { return };
        admin.burst = count - 1;
        admin.add_back = removed;
        let op = self.burst_op(&mut admin);
        self.note(format!("a{actor} admin starts a burst of {count}: {}", op.0));
        admin.op = Some(op);
        self.actors[actor] = Actor::Admin(admin);
        lock(&self.net).dirty.insert(actor);
        let now = self.now();
        self.quiet_since = self.quiet_since.max(now + outage);
    }

    /// The next update of a burst: what to add back first, then one new item added, then removed again, in turn.
    fn burst_op(&mut self, admin: &mut Admin) -> AdminOp {
        let set = admin.set.clone();
        if !admin.add_back.is_empty() {
            let items = std::mem::take(&mut admin.add_back);
            return (format!("add back {items:?}"), async move { set.add(items).await }.boxed());
        }
        let value = self.next_value;
        if admin.burst % 2 == 1 || value == 0 {
            self.next_value += 1;
            let items = vec![Item::from(value)];
            (format!("add [{value}]"), async move { set.add(items).await }.boxed())
        } else {
            let items = vec![Item::from(value - 1)];
            (format!("remove [{}]", value - 1), async move { set.remove(items).await }.boxed())
        }
    }

    /// An admin changes the shared set with the production code: adds, removes, replaces or compare-and-sets, often
    /// enough items to be staged. A third of the time, another admin's change is still under way.
    pub(super) fn admin_changes(&mut self) {
        if !self.plan.shared_set || self.in_window() {
            return;
        }
        let actor = self.idle_admin();
        let current = self.current_values();
        let count = 1 + self.rng().below(5) as usize;
        // Weighted runs also change weights (a fifth kind: other runs draw as they always did).
        // Lineage runs also split, merge, close, add children and retire (kinds 5 to 9).
        let kinds = if self.plan.lineage {
            10
        } else if self.plan.weighted {
            5
        } else {
            4
        };
        let kind = self.rng().below(kinds);
        let Actor::Admin(admin) = &mut self.actors[actor] else { return };
        let set = admin.set.clone();
        let lineage = match kind {
            5.. => self.lineage_change(kind, &current, set.clone()),
            _ => None,
        };
        let (what, future): (String, BoxFuture<'static, Result<crate::shared_set::SharedSetVersion, Error>>) =
            match (lineage, kind) {
                (Some(change), _) => change,
                (None, 0) if current.len() > count + 1 => {
                    let mut removed = Vec::new();
                    let mut rng = lock(&self.net);
                    for _ in 0..count {
                        let pick = current[rng.rng.below(current.len() as u64) as usize];
                        if !removed.contains(&pick) {
                            removed.push(pick);
                        }
                    }
                    drop(rng);
                    let items: Vec<Item> = removed.iter().copied().map(Item::from).collect();
                    (format!("remove {removed:?}"), async move { set.remove(items).await }.boxed())
                }
                (None, 4) if !current.is_empty() => {
                    let mut rng = lock(&self.net);
                    let mut changes = Vec::new();
                    for _ in 0..count.min(3) {
                        let item = Item::from(current[rng.rng.below(current.len() as u64) as usize]);
                        // Now and then back to 1; else 0 to 9 (a zero weight, and items heavier than a share, included).
                        let weight = (rng.rng.below(4) != 0).then(|| crate::weighted::Weight::new(rng.rng.below(10)));
                        changes.push((item, weight));
                    }
                    drop(rng);
                    let what = format!("weigh {changes:?}");
                    (what, async move { set.change_weights(changes).await }.boxed())
                }
                (None, 1) if !current.is_empty() => {
                    // A compare-and-set from the version read: keep most, add some.
                    let version = self.committed.last_key_value().map_or(0, |(v, _)| *v);
                    let mut items: Vec<Item> = current.iter().skip(count / 2).copied().map(Item::from).collect();
                    for _ in 0..count {
                        items.push(Item::from(self.next_value));
                        self.next_value += 1;
                    }
                    let what = format!("replace_if {version} with {} items", items.len());
                    (what, async move { set.replace(Some(version), items).await }.boxed())
                }
                _ => {
                    let mut added = Vec::new();
                    for _ in 0..count {
                        // A new value, or one removed earlier (it comes back under its old index in older members).
                        let value = if self.next_value > 0 && lock(&self.net).rng.below(3) == 0 {
                            lock(&self.net).rng.below(self.next_value as u64) as i64
                        } else {
                            self.next_value += 1;
                            self.next_value - 1
                        };
                        added.push(value);
                    }
                    let items: Vec<Item> = added.iter().copied().map(Item::from).collect();
                    (format!("add {added:?}"), async move { set.add(items).await }.boxed())
                }
            };
        self.note(format!("a{actor} admin starts: {what}"));
        if let Actor::Admin(admin) = &mut self.actors[actor] {
            admin.op = Some((what, future));
        }
        lock(&self.net).dirty.insert(actor);
        // Sometimes the admin crashes part-way, once its first requests went out: its session lingers, then expires
        // with its lease.
        if self.rng().below(6) == 0 {
            self.drive();
            if let Actor::Admin(admin) = &self.actors[actor]
                && admin.op.is_some()
            {
                self.note(format!("crash admin a{actor}"));
                self.gone(actor, false);
            }
        }
    }
}
