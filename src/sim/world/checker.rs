//! The invariants, checked after every step: safety (no item listed twice, every listing backed by the lowest lock
//! contender or within an operator deletion's bound, checkpoints fenced), the shared set's committed versions, and
//! convergence once the faults are over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::progress::checkpoint_item;
use super::{Actor, ITEMS, LOCKS, PARTY, PATH, World};
use crate::sim::Plan;
use crate::sim::net::{self, ActorId, lock};
use crate::sim::zk::{self, SessionId};
use crate::{Item, PartitionState, Snapshot};
use proto::announcement::Agreement;
use proto::set_layout::{self as layout, Chunk, Header, RawRead, SetView, State, Table};

/// How long after the later of an operator's deletion of a held lock node and the watch registration's due time
/// (2 × time_boundary after the lock was taken) a member may keep listing the item: the requests queued before the
/// watch's, and the notification's trip; if the member's connection was disturbed meanwhile, also the client's read
/// timeout (if the server does not answer, it suspends).
fn operator_window(plan: &Plan, disturbed: bool) -> Duration {
    let delivery = Duration::from_millis(400);
    if disturbed { plan.session * 2 / 5 + delivery } else { delivery }
}

impl World {
    /// Whether a session has a lock node (held or waiting) for `item`.
    pub(super) fn holds_a_node(&self, session: SessionId, item: &Item) -> bool {
        let net = lock(&self.net);
        let dir = format!("{LOCKS}/{item}");
        net.zk
            .children_of(&dir)
            .iter()
            .any(|child| net.zk.exists(&format!("{dir}/{child}")).is_some_and(|stat| stat.ephemeral_owner == session))
    }

    /// Records every newly committed version of the shared set (the set in force by the protocol's own reading of
    /// the model), and checks that no version is committed twice with different sets, and that no checkpoint write
    /// landed unless its lock node was the lowest contender.
    pub(super) fn record_set(&mut self) {
        let writes = std::mem::take(&mut lock(&self.net).writes);
        for write in writes {
            if write.result.is_err() {
                continue;
            }
            self.record_finish(&write);
            self.record_update(&write);
            self.check_progress_write(&write);
            let net::Write { session, ops, checks_lowest: lowest, .. } = write;
            let checkpoint = ops.iter().any(|op| {
                matches!(op, zk::WriteOp::SetData { path, .. } | zk::WriteOp::Create { path, .. } if checkpoint_item(path).is_some())
            });
            let Some(lock_node) = ops.iter().find_map(|op| match op {
                zk::WriteOp::Check { path, .. } if path.starts_with(LOCKS) => Some(path.clone()),
                _ => None,
            }) else {
                continue;
            };
            if checkpoint && !lowest {
                self.violate(format!("session {session} wrote a checkpoint checked by {lock_node}, which is not the item's lowest contender"));
            }
        }
        if !self.plan.shared_set {
            return;
        }
        let net = lock(&self.net);
        let data = net.zk.data_of(ITEMS);
        if data == self.header_seen {
            return;
        }
        let Some(data) = data else {
            drop(net);
            self.header_seen = None;
            return;
        };
        let version = net.zk.exists(ITEMS).map_or(0, |stat| stat.version);
        let header = Header::parse(&data).ok();
        let change = match header.as_ref().map(|h| &h.state) {
            Some(State::Applying(tag)) => Some((
                net.zk.children_of(&format!("{PATH}/item-changes/{tag}/add")),
                net.zk.children_of(&format!("{PATH}/item-changes/{tag}/remove")),
            )),
            _ => None,
        };
        let lease = header
            .as_ref()
            .and_then(|h| h.state.change())
            .map(|tag| net.zk.exists(&format!("{PATH}/item-writers/{tag}")).is_some());
        // The table a header names is whole from before its commit until another is in force.
        let weights: Option<Result<Table, String>> = header.as_ref().and_then(|h| h.weights.as_ref()).map(|table| {
            let index = net.zk.data_of(&format!("{PATH}/item-weights/{}", table.tag));
            let index = index.ok_or_else(|| format!("the index of weight table {} is missing", table.tag))?;
            let names = layout::parse_index(&index)?;
            let chunks = names.into_iter().map(|name| match net.zk.data_of(&format!("{PATH}/item-weights/{name}")) {
                Some(data) => Ok(Chunk::new(name, data.into())),
                None => Err(format!("chunk {name} of weight table {} is missing", table.tag)),
            });
            Ok(Table { chunks: chunks.collect::<Result<_, String>>()? })
        });
        if let Some(Err(reason)) = &weights {
            let reason = reason.clone();
            drop(net);
            self.violate(format!("the shared set's header names a weight table that is not whole: {reason}"));
            return;
        }
        let read = RawRead {
            header: Some((data.clone(), version)),
            children: net.zk.children_of(ITEMS),
            listed: None,
            change,
            lease,
            weights,
        };
        drop(net);
        self.header_seen = Some(data);
        if let SetView::Committed(committed) = layout::interpret(read) {
            match self.committed_weights.get(&committed.version) {
                Some(stored) if *stored != committed.weights => {
                    let stored = stored.clone();
                    self.violate(format!(
                        "version {} of the shared set weighed {stored:?} and now weighs {:?}",
                        committed.version, committed.weights
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed_weights.insert(committed.version, committed.weights.clone());
                }
            }
            let names: BTreeSet<String> = committed.items.iter().map(Item::node_name).collect();
            match self.committed.get(&committed.version) {
                Some(stored) if *stored != names => {
                    let stored = stored.clone();
                    self.violate(format!(
                        "version {} of the shared set was {stored:?} and is now {names:?}",
                        committed.version
                    ));
                }
                Some(_) => {}
                None => {
                    self.note(format!("set version {} = {names:?}", committed.version));
                    self.check_ready_set(committed.version, &names);
                    self.new_incarnations(&names);
                    self.committed.insert(committed.version, names);
                }
            }
        }
    }

    /// Records an update a write applied (a header write that moves the version on): its token must be new (an update
    /// applied twice is a lost reply retried blindly); the commit of the admin whose reply is to be lost has its reply
    /// lost now. And which incarnation of its item each checkpoint written belongs to.
    fn record_update(&mut self, write: &net::Write) {
        for op in &write.ops {
            match op {
                zk::WriteOp::SetData { path, data, .. } | zk::WriteOp::Create { path, data, .. } if path == ITEMS => {
                    let Ok(header) = Header::parse(data) else { continue };
                    let moved_on = header.version > self.header_version;
                    self.header_version = header.version;
                    let Some(token) = header.log.last().filter(|_| moved_on) else { continue };
                    if !self.landed.insert(token.clone()) {
                        self.violate(format!("update {token} was applied twice (version {})", header.version));
                    }
                    if self.lost_reply == Some(write.session) {
                        self.lost_reply = None;
                        let prefix = format!("{ITEMS}/");
                        let removed: Vec<Item> = write
                            .ops
                            .iter()
                            .filter_map(|op| match op {
                                zk::WriteOp::Delete { path, .. } => path.strip_prefix(&prefix)?.parse::<i64>().ok(),
                                _ => None,
                            })
                            .map(Item::from)
                            .collect();
                        self.lose_the_reply(write.session, removed);
                    }
                }
                // A sticky party's record is being written: a version that moves nothing lands right behind it, now
                // and then (a member that decides after it must hand out the record as the others do).
                zk::WriteOp::SetData { path, .. } | zk::WriteOp::Create { path, .. }
                    if *path == format!("{PATH}/placement") && self.rng().below(2) == 0 =>
                {
                    self.admin_moves_nothing();
                }
                zk::WriteOp::SetData { path, .. } | zk::WriteOp::Create { path, .. }
                    if checkpoint_item(path).is_some() =>
                {
                    if let Some(name) = checkpoint_item(path) {
                        let incarnation = self.incarnations.get(name).copied().unwrap_or_default();
                        self.checkpoint_incarnation.insert(name.to_owned(), incarnation);
                    }
                }
                _ => {}
            }
        }
    }

    /// What each party node announces, as written: its history grows at every change.
    pub(super) fn record_announcements(&mut self) {
        let now = self.now();
        let net = lock(&self.net);
        let read: Vec<(String, Option<Agreement>)> = net
            .zk
            .children_of(PARTY)
            .into_iter()
            .filter_map(|node| {
                let data = net.zk.data_of(&format!("{PARTY}/{node}"))?;
                Some((node, Agreement::from_node_data(&data)))
            })
            .collect();
        drop(net);
        // And what each member's core announces (it compares that, before its own write lands), by `core:<node>`.
        let cores: Vec<(String, Option<Agreement>)> = self
            .members()
            .into_iter()
            .filter_map(|actor| match &self.actors[actor] {
                Actor::Member(m) => {
                    Some((format!("core:{}", m.step.membership().node), Some(m.step.core().announcement())))
                }
                _ => None,
            })
            .collect();
        for (node, agreement) in read.into_iter().chain(cores) {
            let history = self.announced.entry(node).or_default();
            if history.last().map(|(_, said)| said) != Some(&agreement) {
                history.push((now, agreement));
            }
        }
    }

    /// A member reports another (`d`) as on another version of the shared set, or holding another assignment, only
    /// once that has lasted past the time a member needs to follow a change: through the `catch_up` before the report
    /// (less the time a read and a write take, `SLACK`), what the reporter announced (its core's line) and what the
    /// other's node said differed at every instant.
    pub(super) fn check_reported_lag(&mut self, reporter: &str, d: &crate::snapshot::Disagreement) {
        const SLACK: Duration = Duration::from_millis(300);
        let catch_up = self.plan.time_boundary * 2 + Duration::from_secs(2);
        let now = self.now();
        let (Some(from), Some(to)) = ((now + SLACK).checked_sub(catch_up), now.checked_sub(SLACK)) else { return };
        // The other member's node: the latest with its name (a static member's restart has a node of its own).
        let other = self
            .announced
            .iter()
            .filter(|(node, _)| !node.starts_with("core:") && proto::layout::member_name(node) == Some(&d.member))
            .max_by_key(|(_, history)| history.first().map(|(since, _)| *since))
            .map(|(node, _)| node);
        let ours = self.announced.get(&format!("core:{reporter}"));
        let (Some(ours), Some(theirs)) = (ours, other.and_then(|n| self.announced.get(n))) else {
            return;
        };
        let at = |history: &[(Duration, Option<Agreement>)], t: Duration| {
            history.iter().rev().find(|(since, _)| *since <= t).and_then(|(_, said)| *said)
        };
        let mut instants: Vec<Duration> =
            ours.iter().chain(theirs).map(|(t, _)| *t).filter(|t| (from..=to).contains(t)).collect();
        instants.push(from);
        for t in instants {
            if let (Some(a), Some(b)) = (at(ours, t), at(theirs, t))
                && a.compare(&b).is_none()
            {
                let show = |history: &[(Duration, Option<Agreement>)]| {
                    history
                        .iter()
                        .rev()
                        .take(6)
                        .map(|(t, a)| format!("{t:?} {}", a.map(|a| a.to_string()).unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(" | ")
                };
                let line = format!(
                    "{reporter} reports {} ({:?}), but they announced alike {:?} before (within {catch_up:?}, less \
                     {SLACK:?}): a member catching up is not a disagreement\n  ours: {}\n  theirs: {}\n  reported \
                     theirs: {}",
                    d.member,
                    d.kind,
                    now - t,
                    show(ours),
                    show(theirs),
                    d.theirs,
                );
                return self.violate(line);
            }
        }
    }

    /// Whether `path` (a lock node) is the lowest contender of its directory.
    fn lowest_contender(&self, path: &str) -> bool {
        let Some((dir, node)) = path.rsplit_once('/') else { return false };
        let net = lock(&self.net);
        let children = net.zk.children_of(dir);
        let lowest = children
            .iter()
            .filter_map(|c| proto::layout::sequence(c).map(|seq| (seq.to_owned(), c.clone())))
            .min()
            .map(|(_, c)| c);
        lowest.as_deref() == Some(node)
    }

    /// No item listed by two live sessions; every listed item backed by the member's lowest contender node (or one an
    /// operator deleted, for the stated bound); every shared set followed was committed.
    pub(super) fn check_safety(&mut self) -> Result<(), String> {
        let now = self.now();
        let mut owner: BTreeMap<String, ActorId> = BTreeMap::new();
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = &m.step.core();
            if let Some((version, items)) = core.followed() {
                let names: BTreeSet<String> = items.iter().map(Item::node_name).collect();
                match self.committed.get(&version) {
                    Some(stored) if *stored == names => {}
                    stored => {
                        return Err(format!(
                            "{} follows version {version} of the shared set as {names:?}, but the committed version \
                             {version} is {stored:?}",
                            core.me()
                        ));
                    }
                }
            }
            let listed = core.listed();
            if listed.is_empty() {
                continue;
            }
            let session = m.zk.session();
            let name = core.me().to_owned();
            if !lock(&self.net).zk.is_alive(session) {
                return Err(format!("{name} lists {} items but its session {session} has ended", listed.len()));
            }
            for &index in listed {
                let item = core.item(index).to_string();
                let dir = format!("{LOCKS}/{item}");
                let Some(node) = core.held_node(index) else {
                    return Err(format!("{name} lists item {item} without a held node"));
                };
                if let Some(&deleted) = self.operator_deleted.get(&format!("{dir}/{node}")) {
                    // The node is gone: the member may not know yet, for a bounded time only.
                    let held =
                        core.held_at(index).map_or(now, |at| at.saturating_duration_since(lock(&self.net).epoch));
                    let watched_by = held + self.plan.time_boundary * 2;
                    let last_disturbed = self.disturbed.get(&session).copied().unwrap_or_default().max(self.stalled);
                    let disturbed = last_disturbed >= held || !lock(&self.net).is_up(session);
                    let limit = deleted.max(watched_by) + operator_window(&self.plan, disturbed);
                    if now > limit {
                        return Err(format!(
                            "{name} still lists item {item} {:?} after an operator deleted its lock node (taken at \
                             {held:?}, deleted at {deleted:?}; the bound is {limit:?})",
                            now - deleted
                        ));
                    }
                    continue;
                }
                if let Some(other) = owner.insert(item.clone(), actor) {
                    return Err(format!("item {item} listed by a{other} and a{actor}, both sessions alive"));
                }
                if !self.lowest_contender(&format!("{dir}/{node}")) {
                    let children = lock(&self.net).zk.children_of(&dir);
                    return Err(format!(
                        "{name} lists item {item} but its node {node} is not the lowest contender ({children:?})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each member's target and what it lists, for a violation's message.
    pub(super) fn targets(&self) -> String {
        let mut out = Vec::new();
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = m.step.core();
            let names = |indexes: &BTreeSet<usize>| -> Vec<String> {
                indexes.iter().map(|&index| core.item(index).node_name()).collect()
            };
            let target = core.target().map(names);
            out.push(format!("{} {target:?} listing {:?}", core.me(), names(core.listed())));
        }
        out.join("; ")
    }

    /// Every live member `Acquired` over the real party and the latest committed set, nothing unfinished in the set,
    /// listings a disjoint cover, no stray lock node.
    pub(super) fn converged(&self) -> Result<(), String> {
        let net = lock(&self.net);
        let party: Vec<String> = proto::layout::members(&net.zk.children_of(PARTY)).0;
        drop(net);
        let mut covered = BTreeSet::new();
        let members = self.members();
        if members.len() != self.live().len() {
            return Err("a process is still starting".into());
        }
        if let Some(reported) = self.mixed_rules_reported(&members) {
            return reported;
        }
        for &actor in &members {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = &m.step.core();
            if core.state() != PartitionState::Acquired {
                return Err(format!("{} is {}", core.me(), core.state()));
            }
            let snapshot = m.handle.read(Snapshot::clone);
            if *snapshot.members != party {
                return Err(format!("{} allocated for {:?}, the party is {party:?}", core.me(), snapshot.members));
            }
            // Every member runs the same configuration and follows the same set: nothing to disagree on.
            if let Some(disagreement) = snapshot.disagreements.first() {
                return Err(format!("{} reports a disagreement: {disagreement}", core.me()));
            }
            for &index in core.listed() {
                let item = core.item(index).node_name();
                if !covered.insert(item.clone()) {
                    return Err(format!("item {item} listed twice"));
                }
            }
            // Hygiene: every lock node of this session is the held node of a listed item.
            let held: BTreeSet<String> = core
                .listed()
                .iter()
                .filter_map(|&index| Some(format!("{LOCKS}/{}/{}", core.item(index), core.held_node(index)?)))
                .collect();
            for path in lock(&self.net).zk.ephemerals(m.zk.session(), &format!("{LOCKS}/")) {
                if !held.contains(&path) {
                    return Err(format!("{} has a stray lock node {path}", core.me()));
                }
            }
            if !m.worker.saves.is_empty() || m.worker.release.is_some() || !m.worker.finishing.is_empty() {
                return Err(format!("{}'s worker is still busy", core.me()));
            }
        }
        let expected: BTreeSet<String> = if self.plan.shared_set {
            let net = lock(&self.net);
            let header = net.zk.data_of(ITEMS).and_then(|data| Header::parse(&data).ok());
            drop(net);
            match header {
                Some(header) if header.state != State::Ready => {
                    return Err(format!("the shared set is still {:?}", header.state));
                }
                Some(header) => self.committed.get(&header.version).cloned().unwrap_or_default(),
                None => return Err("the shared set is missing".into()),
            }
        } else {
            self.fixed.iter().map(Item::node_name).collect()
        };
        if covered != expected {
            let missing: Vec<&String> = expected.difference(&covered).collect();
            let extra: Vec<&String> = covered.difference(&expected).collect();
            return Err(format!(
                "listings cover {} of {} items: missing {missing:?}, not in the set {extra:?}",
                covered.len(),
                expected.len()
            ));
        }
        if (0..self.actors.len()).any(|a| matches!(&self.actors[a], Actor::Admin(ad) if ad.op.is_some())) {
            return Err("an admin's change is under way".into());
        }
        if self.plan.weighted && self.plan.combo.rendezvous && self.plan.sticky {
            self.placement_recorded(&members)?;
        }
        self.loads_follow_the_weights(&members)
    }

    /// A party whose members run two sticky rules (a mixed run with both in the party): they cannot share a placement,
    /// and each member must say so, reporting every member of the other rule (`None`: not such a party).
    fn mixed_rules_reported(&self, members: &[ActorId]) -> Option<Result<(), String>> {
        let rule = |actor: &ActorId| match &self.actors[*actor] {
            Actor::Member(m) => Some((m.step.core().me().to_owned(), super::processes::other_rule(&self.plan, m.slot))),
            _ => None,
        };
        let rules: Vec<(String, bool)> = members.iter().filter_map(rule).collect();
        if !rules.iter().any(|(_, other)| *other) || rules.iter().all(|(_, other)| *other) {
            return None;
        }
        for &actor in members {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let mine = super::processes::other_rule(&self.plan, m.slot);
            let snapshot = m.handle.read(Snapshot::clone);
            for (name, _) in rules.iter().filter(|(_, other)| *other != mine) {
                let reported = snapshot
                    .disagreements
                    .iter()
                    .any(|d| d.member == *name && d.kind == crate::snapshot::DisagreementKind::PartitionFn);
                if !reported {
                    return Some(Err(format!(
                        "{} does not report {name}, which runs another sticky rule",
                        m.step.core().me()
                    )));
                }
            }
        }
        Some(Ok(()))
    }

    /// A sticky function's party: the placement record reads whole, and says who holds what.
    fn placement_recorded(&self, members: &[ActorId]) -> Result<(), String> {
        let mut listed = BTreeMap::new();
        for &actor in members {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            for &index in m.step.core().listed() {
                listed.insert(m.step.core().item(index).clone(), m.step.core().me().to_owned());
            }
        }
        let node = format!("{PATH}/placement");
        let net = lock(&self.net);
        let index = net.zk.data_of(&node).ok_or("no placement record")?;
        let index =
            proto::placement::record::Index::parse(&index).map_err(|err| format!("the placement record: {err}"))?;
        let chunks: BTreeMap<&String, Vec<u8>> =
            index.chunks().filter_map(|name| Some((name, net.zk.data_of(&format!("{node}/{name}"))?))).collect();
        drop(net);
        let chunk = |name: &str| chunks.iter().find(|(n, _)| n.as_str() == name).map(|(_, data)| data.as_slice());
        let record = proto::placement::record::Record::assemble(&index, chunk, layout::Kind::Int)
            .map_err(|err| format!("the placement record: {err}"))?;
        let recorded: BTreeMap<Item, String> = record
            .items
            .iter()
            .zip(&record.owners)
            .map(|(item, &owner)| (item.clone(), record.names[owner as usize].clone()))
            .collect();
        match recorded == listed {
            true => Ok(()),
            false => Err(format!("the placement record says {recorded:?}, the members hold {listed:?}")),
        }
    }

    /// Every member reports its own capacity, and a load that is the committed weight of what it lists.
    fn loads_follow_the_weights(&self, members: &[ActorId]) -> Result<(), String> {
        let (items, weights): (Vec<Item>, BTreeMap<Item, crate::weighted::Weight>) = if self.plan.shared_set {
            let Some((&version, names)) = self.committed.last_key_value() else { return Ok(()) };
            let mut items: Vec<Item> = names.iter().filter_map(|n| n.parse::<i64>().ok()).map(Item::from).collect();
            items.sort();
            (items, self.committed_weights.get(&version).cloned().unwrap_or_default())
        } else {
            (self.fixed.clone(), BTreeMap::new())
        };
        let table = crate::weighted::Weights::of(&items, &weights);
        for &actor in members {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            // A function that ignores capacities divides as if every member had capacity 1.
            let capacity = match super::processes::by_capacity(&self.plan) {
                true => super::processes::capacity_of(m.slot),
                false => 1,
            };
            let snapshot = m.handle.read(Snapshot::clone);
            let Some(load) = snapshot.load.as_deref() else {
                return Err(format!("{} is ACQUIRED without a load", snapshot.member));
            };
            let positions = snapshot.items.iter().filter_map(|item| items.binary_search(item).ok());
            let expected = crate::weighted::Load::of(positions, &table, capacity, 1, None);
            let reported: Vec<(&str, u64)> = load.dimensions.iter().map(|d| (&*d.dimension, d.assigned)).collect();
            let held: Vec<(&str, u64)> = expected.dimensions.iter().map(|d| (&*d.dimension, d.assigned)).collect();
            if load.capacity != capacity || reported != held {
                return Err(format!("{} reports a load of {load}, but it holds {held:?}", snapshot.member));
            }
        }
        Ok(())
    }
}
