//! Lineage in the simulation (runs with [`Plan::lineage`](crate::sim::Plan::lineage)): admins split, merge, close and
//! add children with the production [`SetStore`]; each member's worker finishes the items its snapshot shows closed
//! through the handle's checkpoint writer; and the invariants, checked at every step:
//!
//! - the committed set never holds a finished item, nor a child one of whose parents is unfinished;
//! - no member lists a child one of whose parents is unfinished;
//! - no member takes a finished item again (an owner listed after the finish took its lock before it);
//! - a finish reported as done landed, while its lock node was the item's lowest contender;
//! - every item a snapshot shows closed was closed;
//! - a name finished and retired that enters the set again is a new item: it never finds the old one's checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::member::Member;
use super::progress::generation_dir;
use super::{Actor, CHECKPOINTS, ITEMS, LOCKS, PATH, World, poll_with};
use crate::shared_set::{LineageChange, LineageEntry, SetStore, SharedSetVersion};
use crate::sim::net::{self, ActorId, SimClient, lock};
use crate::sim::zk;
use crate::{Error, FencingToken, Item, PartitionState, Snapshot};
use proto::set_layout::{Header, State};

/// The lineage nodes' directory.
pub(super) const LINEAGE: &str = "/p/item-lineage";

/// A finish in flight: the item, and the call.
pub(super) type Finishing = (Item, BoxFuture<'static, Result<Vec<Item>, Error>>);

impl World {
    /// A committed version's new items: one finished since it last entered the set (and since retired) starts a new
    /// incarnation, which must not find the old one's checkpoint (its first owner would resume the old item's
    /// progress). A name that left by a plain remove and comes back is the same item: its checkpoint is its own.
    pub(super) fn new_incarnations(&mut self, names: &BTreeSet<String>) {
        let before = self.committed.last_key_value().map(|(_, names)| names.clone()).unwrap_or_default();
        for name in names.difference(&before) {
            if !self.finished_since_entry.remove(name) {
                continue;
            }
            let incarnation = self.incarnations.entry(name.clone()).or_default();
            *incarnation += 1;
            let incarnation = *incarnation;
            let stored = {
                let net = lock(&self.net);
                let dir = generation_dir(net.zk.data_of(CHECKPOINTS).as_deref());
                net.zk.exists(&format!("{dir}/{name}")).is_some()
            };
            let of = self.checkpoint_incarnation.get(name).copied().unwrap_or_default();
            if stored && of < incarnation {
                self.violate(format!(
                    "item {name} enters the set anew (incarnation {incarnation}) with the checkpoint of its \
                     incarnation {of}: its first owner would resume the old item's progress"
                ));
            }
        }
    }

    /// An item's lineage node, as stored now.
    fn entry(&self, name: &str) -> Option<LineageEntry> {
        let data = lock(&self.net).zk.data_of(&format!("{LINEAGE}/{name}"))?;
        LineageEntry::parse(&data).ok()
    }

    /// Every lineage node, by name: the lineage in force (while an import is being applied, the nodes it staged, which
    /// are in force from its commit on, and move into place after it).
    fn entries(&self) -> BTreeMap<String, LineageEntry> {
        let net = lock(&self.net);
        let dir = lineage_dir(&net.zk);
        let names = net.zk.children_of(&dir);
        names
            .into_iter()
            .filter_map(|name| {
                let entry = LineageEntry::parse(&net.zk.data_of(&format!("{dir}/{name}"))?).ok()?;
                Some((name, entry))
            })
            .collect()
    }

    /// An admin's lineage change, for kinds 5 to 9 of a lineage run's draw: split (a ready item, or now and then a
    /// waiting one), merge two items, close some, add a child to one or two (a finished one, now and then), or retire
    /// the finished items whose children have started (and read the lineage).
    pub(super) fn lineage_change(
        &mut self,
        kind: u64,
        current: &[i64],
        set: SetStore<SimClient>,
    ) -> Option<(String, BoxFuture<'static, Result<SharedSetVersion, Error>>)> {
        if kind == 9 {
            // Retirement of everything finished whose children started, then the lineage read the tools make; half
            // the time, a retired name is then used again for a new, unrelated item (its first owner must find no
            // checkpoint of the old item's).
            let reuse = self.rng().below(2) == 0;
            let retire = async move {
                let retired = set.retire(Duration::ZERO).await?;
                // The retirement has reported its outcome: a failure of the reads that follow says nothing about it.
                set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
                set.lineage().await?;
                if let Some(name) = retired.first().filter(|_| reuse) {
                    return set.add(vec![name.clone()]).await;
                }
                set.read().await
            };
            return Some(("retire".to_owned(), retire.boxed()));
        }
        if current.len() < 2 {
            return None;
        }
        let entries = self.entries();
        let waiting: Vec<String> = entries
            .iter()
            .filter(|(name, e)| e.finished.is_none() && !current.iter().any(|v| v.to_string() == **name))
            .map(|(name, _)| name.clone())
            .collect();
        let finished: Vec<String> =
            entries.iter().filter(|(_, e)| e.finished.is_some()).map(|(name, _)| name.clone()).collect();
        let mut rng = self.rng();
        let pick = |rng: &mut super::RngGuard<'_>| Item::from(current[rng.below(current.len() as u64) as usize]);
        let change = match kind {
            5 => {
                let parent = match waiting.is_empty() || rng.below(4) != 0 {
                    true => pick(&mut rng),
                    false => Item::from(waiting[rng.below(waiting.len() as u64) as usize].as_str()),
                };
                let count = 1 + rng.below(2);
                drop(rng);
                let children = (0..count).map(|_| self.new_value()).collect();
                LineageChange::Split { parent: int_item(parent), children }
            }
            6 => {
                let (a, b) = (pick(&mut rng), pick(&mut rng));
                drop(rng);
                if a == b {
                    return None;
                }
                LineageChange::Merge { parents: vec![a, b], child: self.new_value() }
            }
            7 => {
                let items = (0..1 + rng.below(2)).map(|_| pick(&mut rng)).collect::<Vec<_>>();
                drop(rng);
                let mut items = items;
                items.sort();
                items.dedup();
                LineageChange::Close { items }
            }
            _ => {
                let mut parents = vec![pick(&mut rng)];
                if !finished.is_empty() && rng.below(2) == 0 {
                    parents.push(int_item(Item::from(finished[rng.below(finished.len() as u64) as usize].as_str())));
                }
                drop(rng);
                parents.sort();
                parents.dedup();
                LineageChange::AddChild { child: self.new_value(), parents }
            }
        };
        let what = format!("{change:?}");
        Some((what, async move { set.change_lineage(change).await }.boxed()))
    }

    fn new_value(&mut self) -> Item {
        self.next_value += 1;
        Item::from(self.next_value - 1)
    }

    /// The worker's finishes: each item its snapshot shows closed is finished once per ownership, half the time with
    /// a final checkpoint, while faults remain (so that the world can settle after them). Checked first: every item
    /// shown closed was closed (or has since been finished and retired).
    pub(super) fn start_finishes(&mut self, m: &mut Member, snapshot: &Snapshot) {
        if !self.lineage_run() {
            return;
        }
        for item in snapshot.closed.iter() {
            let name = item.node_name();
            if !self.entry(&name).map_or(self.ever_finished.contains(&name), |e| e.closed) {
                return self.violate(format!("{} shows {item} closed, but it is not", snapshot.member));
            }
        }
        if snapshot.state != PartitionState::Acquired || self.faults_left == 0 {
            return;
        }
        for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
            let closed = snapshot.closed.binary_search(item).is_ok();
            if !closed || m.worker.finish_tried.get(item) == Some(token) || self.rng().below(2) == 0 {
                continue;
            }
            m.worker.finish_tried.insert(item.clone(), *token);
            let Ok(writer) = m.handle.checkpoint_writer(item) else { continue };
            let last = (self.rng().below(2) == 0).then(|| format!("final {}", snapshot.member).into_bytes());
            let call = async move { writer.finish_item(last.as_deref()).await }.boxed();
            m.worker.finishing.push((item.clone(), call));
        }
    }

    /// Polls the worker's finishes and checks what they return: done, fenced (the item moved), or the session gone.
    pub(super) fn poll_finishes(&mut self, actor: ActorId, m: &mut Member) {
        let waker = self.wakers[actor].clone();
        let mut k = 0;
        while k < m.worker.finishing.len() {
            let Poll::Ready(result) = poll_with(&mut m.worker.finishing[k].1, &waker) else {
                k += 1;
                continue;
            };
            let (item, _) = m.worker.finishing.remove(k);
            let name = item.node_name();
            match result {
                Ok(ready) => {
                    self.note(format!("a{actor} finished {item}; ready: {ready:?}"));
                    if !self.ever_finished.contains(&name) {
                        self.violate(format!("a{actor}'s finish of {item} returned Ok but no finish of it landed"));
                    }
                    self.quiet_since = self.quiet_since.max(self.now());
                }
                Err(
                    Error::CheckpointFenced { .. }
                    | Error::Stopped
                    | Error::SessionLost { .. }
                    | Error::SharedSetOutcomeUnknown { .. }
                    | Error::SharedSetConflict { .. }
                    | Error::EmptySharedSet { .. },
                ) => {}
                Err(err) => self.violate(format!("a{actor}'s finish of {item} failed: {err}")),
            }
        }
    }

    fn lineage_run(&self) -> bool {
        self.plan.shared_set && self.plan.lineage
    }

    /// Records a finish that landed (a write that marks a lineage node finished), checking that its lock node was the
    /// item's lowest contender.
    pub(super) fn record_finish(&mut self, write: &net::Write) {
        for op in &write.ops {
            // A retired item's name is free again: a new item of that name is not the finished one.
            if let zk::WriteOp::Delete { path, .. } = op
                && let Some(name) = path.strip_prefix(LINEAGE).and_then(|rest| rest.strip_prefix('/'))
            {
                self.finished_at.remove(name);
                continue;
            }
            let zk::WriteOp::SetData { path, data, .. } = op else { continue };
            let Some(name) = path.strip_prefix(LINEAGE).and_then(|rest| rest.strip_prefix('/')) else { continue };
            // The write that first marks an item finished is its finish (an admin's later write of a finished
            // parent's node, adding a child, keeps the mark).
            if !self.finished_at.contains_key(name) && LineageEntry::parse(data).is_ok_and(|e| e.finished.is_some()) {
                let now = self.now();
                self.finished_at.insert(name.to_owned(), now);
                self.ever_finished.insert(name.to_owned());
                self.finished_since_entry.insert(name.to_owned());
                let checked =
                    write.ops.iter().any(|op| matches!(op, zk::WriteOp::Check { path, .. } if path.starts_with(LOCKS)));
                if !checked || !write.checks_lowest {
                    self.violate(format!("the finish of {name} landed without its lowest contender's check"));
                }
            }
        }
    }

    /// The committed set holds no finished item, and no child with an unfinished parent.
    pub(super) fn check_ready_set(&mut self, version: u64, names: &std::collections::BTreeSet<String>) {
        if !self.lineage_run() {
            return;
        }
        let entries = self.entries();
        for name in names {
            if let Err(why) = ready(&entries, name) {
                self.violate(format!("version {version} of the shared set holds {name}, which {why}"));
                return;
            }
        }
    }

    /// No member lists a child with an unfinished parent, or a finished item it took after the finish.
    pub(super) fn check_listings(&self) -> Result<(), String> {
        if !self.lineage_run() {
            return Ok(());
        }
        let entries = self.entries();
        let epoch = lock(&self.net).epoch;
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = &m.step.core();
            for &index in core.listed() {
                let name = core.item(index).node_name();
                if let Some(&finished) = self.finished_at.get(&name) {
                    let taken = core.held_at(index).map(|at| at.saturating_duration_since(epoch));
                    if taken.is_none_or(|taken| taken > finished) {
                        return Err(format!(
                            "{} lists {name}, finished at {finished:?}, through a lock taken at {taken:?}",
                            core.me()
                        ));
                    }
                    continue;
                }
                if let Some(entry) = entries.get(&name)
                    && let Some(parent) = entry.parents.iter().find(|p| !finished(&entries, p))
                {
                    return Err(format!("{} lists {name} while its parent {parent} is unfinished", core.me()));
                }
            }
        }
        Ok(())
    }
}

/// Whether `name` may be in the set: not finished, every parent finished.
fn ready(entries: &BTreeMap<String, LineageEntry>, name: &str) -> Result<(), String> {
    let Some(entry) = entries.get(name) else { return Ok(()) };
    if entry.finished.is_some() {
        return Err("has finished".into());
    }
    match entry.parents.iter().find(|p| !finished(entries, p)) {
        Some(parent) => Err(format!("waits on its unfinished parent {parent}")),
        None => Ok(()),
    }
}

/// A parent counts as finished once its node says so (or has been retired).
fn finished(entries: &BTreeMap<String, LineageEntry>, name: &str) -> bool {
    entries.get(name).is_none_or(|e| e.finished.is_some())
}

/// The simulation's items are integers: a name read back as one.
fn int_item(item: Item) -> Item {
    match &item {
        Item::Str(name) => name.parse::<i64>().map(Item::from).unwrap_or(item),
        Item::Int(_) => item,
    }
}

/// What a fencing token looks like in a worker's memory of the finishes it tried.
pub(super) type Tried = BTreeMap<Item, FencingToken>;

/// The directory of the lineage in force: `<path>/item-lineage`, or while an import is applied, the lineage it
/// staged (readers read that one until it is applied).
pub(super) fn lineage_dir(zk: &zk::Zk) -> String {
    let applying = zk.data_of(ITEMS).and_then(|data| Header::parse(&data).ok()).and_then(|header| match header.state {
        State::Applying(tag) => Some(format!("{PATH}/item-changes/{tag}/lineage")),
        _ => None,
    });
    applying.filter(|staged| zk.exists(staged).is_some()).unwrap_or_else(|| LINEAGE.to_owned())
}
