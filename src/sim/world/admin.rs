//! Admins: processes that change the shared set with the production [`SharedSet`], and what their reported results
//! are checked against.

use std::collections::BTreeSet;
use std::task::Poll;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{Actor, PATH, SET_CHUNK, World, poll_with};
use crate::acl::NodeAcls;
use crate::item_set::SharedSet;
use crate::session::SessionRef;
use crate::sim::net::{ActorId, SimClient, lock};
use crate::{Error, Item};

/// An admin changing the shared set with the production code.
pub(super) struct Admin {
    pub(super) zk: SimClient,
    pub(super) set: SharedSet<SimClient>,
    pub(super) op: Option<(String, BoxFuture<'static, Result<crate::SharedItems, Error>>)>,
}

impl World {
    pub(super) fn drive_admin(&mut self, actor: ActorId, admin: &mut Admin) {
        let Some((what, future)) = &mut admin.op else { return };
        let Poll::Ready(result) = poll_with(future, &self.wakers[actor].clone()) else { return };
        let what = what.clone();
        admin.op = None;
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
            Err(err @ Error::ItemSetOutcomeUnknown { .. }) => self.note(format!("a{actor} admin {what}: {err}")),
            Err(err) => {
                self.note(format!("a{actor} admin {what} failed: {err}"));
                if let Some(token) = tokens.iter().find(|token| self.landed.contains(*token)) {
                    self.violate(format!("admin {what} reported {err}, but its update {token} was committed"));
                }
            }
        }
        admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// An admin changes the shared set with the production code: adds, removes, replaces or compare-and-sets, often
    /// enough items to be staged. A third of the time, another admin's change is still under way.
    pub(super) fn admin_changes(&mut self) {
        if !self.plan.shared_set {
            return;
        }
        let idle = (0..self.actors.len()).find(|&a| matches!(&self.actors[a], Actor::Admin(ad) if ad.op.is_none()));
        let actor = match idle {
            Some(actor) => actor,
            None => {
                let actor = self.actors.len();
                let session = lock(&self.net).open_session(actor);
                let zk = SimClient::new(self.net.clone(), session);
                let set =
                    SharedSet::new(SessionRef::Owned(zk.clone()), PATH, NodeAcls::default()).with_chunk(SET_CHUNK);
                self.add_actor(Actor::Admin(Box::new(Admin { zk, set, op: None })))
            }
        };
        let current: Vec<i64> = self
            .committed
            .last_key_value()
            .map(|(_, names)| names.iter().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
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
        let (what, future): (String, BoxFuture<'static, Result<crate::SharedItems, Error>>) = match (lineage, kind) {
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
                    let weight = (rng.rng.below(4) != 0).then(|| crate::Weight::new(rng.rng.below(10)));
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
