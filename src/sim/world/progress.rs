//! Exports and imports among the admins (progress runs: [`Plan::progress`](crate::sim::Plan)): now and then an
//! export, a backup taken while the party runs; now and then a maintenance window, in which every member finishes,
//! an operator sometimes wipes the path, and an admin imports a backup (restored, reset or pruned; or resets the
//! path's own checkpoints in place, `reset_checkpoints`) before the members start again. One window in three is
//! racy: members start again as the import begins, so it races their joins. Checked:
//!
//! - an export is one version: its items and weights are those of the committed version it names, and no finished
//!   item is among its items;
//! - an import is all or nothing: one that returned leaves exactly the progress it was to put in force (items,
//!   checkpoints, lineage; the checkpoints only in a quiet window), one that failed changed nothing (its token is in
//!   no committed header, the checkpoints in force are the same);
//! - an import's commit never lands while a lock node exists;
//! - no checkpoint lands after an import under an ownership (a lock node) that began before it.

use std::collections::{BTreeMap, BTreeSet};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::lineage::lineage_dir;
use super::{Actor, ITEMS, LOCKS, PARTY, PATH, World};
use crate::Error;
use crate::shared_set::{ImportMode, Imported, Progress};
use crate::sim::net::{self, ActorId, lock};
use crate::sim::zk;
use proto::set_layout::{self as layout, Header};

/// `<path>/checkpoints`: the first generation's checkpoints, and the pointer to the generation in force.
const POINTER: &str = "/p/checkpoints";
/// Later generations' checkpoints.
const GENERATIONS: &str = "/p/checkpoint-generations";

/// What the runs of exports and imports keep.
#[derive(Default)]
pub(super) struct State {
    /// The exports taken: the tokens a window's import brings back.
    backups: Vec<Progress>,
    window: Option<Window>,
    /// The zxid of the latest import's commit.
    last_import: Option<i64>,
    pub exports: usize,
    pub imports: usize,
    pub refused: usize,
}

/// A maintenance window under way.
struct Window {
    /// Members keep being started meanwhile.
    racy: bool,
    /// Its import has started.
    importing: bool,
}

/// An export or an import, as it returned.
pub(super) enum Done {
    Exported(Result<Progress, Error>),
    Imported(Box<ImportDone>),
}

/// An import as it returned, with what it was given and the state it started from.
pub(super) struct ImportDone {
    /// The path's own progress reset in place (`SharedSet::reset_checkpoints`): `token` is not what it imported.
    in_place: bool,
    token: Progress,
    mode: ImportMode,
    /// The set's latest committed version and items, and the checkpoints' pointer, when it started.
    before: (u64, BTreeSet<String>, Option<Vec<u8>>),
    result: Result<Imported, Error>,
}

/// A progress call in flight: what it is (for the log), and the call.
pub(super) type ProgressOp = (String, BoxFuture<'static, Done>);

impl World {
    /// At a fault of a progress run: now and then an export, now and then a maintenance window.
    pub(super) fn progress_fault(&mut self) {
        if !(self.plan.shared_set && self.plan.progress) {
            return;
        }
        if self.rng().below(3) == 0 {
            self.export_now();
        }
        if self.progress.window.is_none() && self.rng().below(4) == 0 {
            let racy = self.rng().below(3) == 0;
            self.note(format!(
                "maintenance: every member finishes{}",
                if racy { " (racy: members start again with the import)" } else { "" }
            ));
            self.progress.window = Some(Window { racy, importing: false });
            for actor in self.members() {
                if let Actor::Member(m) = &mut self.actors[actor] {
                    m.worker.finish = Some(m.handle.finish().boxed());
                }
                lock(&self.net).dirty.insert(actor);
            }
        }
    }

    /// Whether a window is under way (admins wait for it to end).
    pub(super) fn in_window(&self) -> bool {
        self.progress.window.is_some()
    }

    /// Whether replacements wait: until a window's party is stopped, and in a quiet window until it ends (a racy
    /// window's members start again as its import begins, and race it).
    pub(super) fn replacements_paused(&self) -> bool {
        self.progress.window.as_ref().is_some_and(|window| !window.racy || !window.importing)
    }

    fn export_now(&mut self) {
        let actor = self.idle_admin();
        let Actor::Admin(admin) = &mut self.actors[actor] else { return };
        let set = admin.set.clone();
        admin.progress = Some(("export".to_owned(), async move { Done::Exported(set.export().await) }.boxed()));
        self.note(format!("a{actor} admin starts: export"));
        lock(&self.net).dirty.insert(actor);
    }

    /// After every step: once a window's party is stopped (nobody in the party, no lock node, and in a quiet window
    /// no member process left), its import starts.
    pub(super) fn drive_window(&mut self) {
        let Some(window) = &self.progress.window else { return };
        if window.importing {
            return;
        }
        let racy = window.racy;
        // Every member finishes, those started since the window opened included (a replacement started as it
        // opened): until the party is stopped, nobody starts again.
        for actor in self.members() {
            if let Actor::Member(m) = &mut self.actors[actor]
                && m.worker.finish.is_none()
            {
                m.worker.finish = Some(m.handle.finish().boxed());
                lock(&self.net).dirty.insert(actor);
            }
        }
        let (party, locks) = {
            let net = lock(&self.net);
            let locks =
                net.zk.children_of(LOCKS).iter().any(|dir| !net.zk.children_of(&format!("{LOCKS}/{dir}")).is_empty());
            (net.zk.children_of(PARTY), locks)
        };
        if !party.is_empty() || locks || (!racy && !self.live().is_empty()) {
            return;
        }
        let Some(token) = self.pick_backup() else {
            // Nothing to bring back yet: the window ends with an export only.
            self.export_now();
            return self.end_window();
        };
        let mode = match self.rng().below(10) {
            0..5 => ImportMode::Restore,
            5..7 => ImportMode::ResetCheckpoints,
            _ => ImportMode::Prune,
        };
        // A wipe (a quiet window's, when no admin is busy: nobody is left to carry a version of the history it
        // erases).
        let busy =
            self.actors.iter().any(|a| matches!(a, Actor::Admin(ad) if ad.op.is_some() || ad.progress.is_some()));
        if mode != ImportMode::Prune && !racy && !busy && self.rng().below(4) == 0 {
            self.wipe();
        }
        let before = {
            let (version, items) = self.committed.last_key_value().map(|(v, i)| (*v, i.clone())).unwrap_or_default();
            let wiped = lock(&self.net).zk.exists(ITEMS).is_none();
            let items = if wiped { BTreeSet::new() } else { items };
            (version, items, lock(&self.net).zk.data_of(POINTER))
        };
        let actor = self.idle_admin();
        let Actor::Admin(admin) = &mut self.actors[actor] else { return };
        let set = admin.set.clone();
        // Half the resets are of the path's own progress, in place (the set as it is now stays).
        let in_place = mode == ImportMode::ResetCheckpoints && token.exported.set_version % 2 == 0;
        let what = match in_place {
            true => "reset of the checkpoints in place".to_owned(),
            false => format!("import of version {} ({mode:?})", token.exported.set_version),
        };
        let call = async move {
            let result = match in_place {
                true => set.reset_checkpoints().await,
                false => set.import(&token, mode).await,
            };
            Done::Imported(Box::new(ImportDone { in_place, token, mode, before, result }))
        };
        admin.progress = Some((what.clone(), call.boxed()));
        self.note(format!("a{actor} admin starts: {what}"));
        lock(&self.net).dirty.insert(actor);
        if let Some(window) = &mut self.progress.window {
            window.importing = true;
        }
    }

    /// A backup to bring back, at random (the latest most often).
    fn pick_backup(&mut self) -> Option<Progress> {
        let count = self.progress.backups.len() as u64;
        if count == 0 {
            return None;
        }
        let pick = if self.rng().below(2) == 0 { count - 1 } else { self.rng().below(count) };
        self.progress.backups.get(pick as usize).cloned()
    }

    /// An operator deletes everything under the path (the import then brings the party to an empty path).
    fn wipe(&mut self) {
        let mut net = lock(&self.net);
        let operator = net.zk.open_session();
        let mut stack = vec![(PATH.to_owned(), false)];
        while let Some((node, listed)) = stack.pop() {
            if listed {
                let _ = net.zk.delete(operator, &node);
                continue;
            }
            let children = net.zk.children_of(&node);
            stack.push((node.clone(), true));
            stack.extend(children.into_iter().map(|child| (format!("{node}/{child}"), false)));
        }
        net.zk.expire(operator);
        net.fire_watches();
        drop(net);
        // The path's history is gone with it: its next set (the import's, or one a member's start-up creates) starts
        // a history of versions of its own, and no item of it is finished.
        self.committed.clear();
        self.finished_at.clear();
        self.committed_weights.clear();
        self.header_version = 0;
        self.header_seen = None;
        self.note(format!("operator wipes {PATH}"));
    }

    fn end_window(&mut self) {
        self.progress.window = None;
        let now = self.now();
        self.quiet_since = self.quiet_since.max(now);
        self.note("maintenance ends".to_owned());
    }

    /// An export or import returned: what it reports is checked against the model; an import ends its window.
    pub(super) fn progress_done(&mut self, actor: ActorId, what: &str, done: Done, tokens: &[String]) {
        match done {
            Done::Exported(Ok(token)) => {
                self.note(format!("a{actor} admin {what}: version {}", token.exported.set_version));
                self.progress.exports += 1;
                self.check_export(&token);
                self.progress.backups.push(token);
            }
            Done::Exported(Err(err)) => self.note(format!("a{actor} admin {what} failed: {err}")),
            Done::Imported(done) => {
                let racy = self.progress.window.as_ref().is_some_and(|window| window.racy);
                match &done.result {
                    Ok(imported) => {
                        self.note(format!("a{actor} admin {what}: version {}", imported.version));
                        self.progress.imports += 1;
                        self.check_import(&done, imported, racy);
                    }
                    Err(err @ Error::SharedSetOutcomeUnknown { .. }) => {
                        self.note(format!("a{actor} admin {what}: {err}"));
                    }
                    Err(err) => {
                        self.note(format!("a{actor} admin {what} failed: {err}"));
                        self.progress.refused += usize::from(matches!(err, Error::ImportRefused { .. }));
                        if let Some(token) = tokens.iter().find(|token| self.landed.contains(*token)) {
                            self.violate(format!("admin {what} reported {err}, but its update {token} was committed"));
                        }
                        // The set may have moved on by an admin's update that was under way as the window opened
                        // (its token is not the import's): the checkpoints in force only an import moves.
                        let (_, _, pointer) = &done.before;
                        if lock(&self.net).zk.data_of(POINTER) != *pointer {
                            self.violate(format!("admin {what} reported {err}, but the checkpoints in force moved"));
                        }
                    }
                }
                self.end_window();
            }
        }
    }

    /// An export is one version: its items and weights are the committed version's, and none of its items finished.
    fn check_export(&mut self, token: &Progress) {
        let version = token.exported.set_version;
        let items: BTreeSet<String> = token.items.iter().cloned().collect();
        match self.committed.get(&version) {
            Some(stored) if *stored != items => {
                let stored = stored.clone();
                return self.violate(format!("an export of version {version} holds {items:?}, which was {stored:?}"));
            }
            None => return self.violate(format!("an export names version {version}, which was never committed")),
            Some(_) => {}
        }
        let weights: BTreeMap<String, String> = self
            .committed_weights
            .get(&version)
            .map(|w| w.iter().map(|(item, weight)| (item.node_name(), weight.to_string())).collect())
            .unwrap_or_default();
        if weights != token.weights {
            return self.violate(format!("an export of version {version} weighs {:?}, not {weights:?}", token.weights));
        }
        if let Some((name, _)) = token.lineage.iter().find(|(name, l)| l.finished.is_some() && items.contains(*name)) {
            self.violate(format!("an export of version {version} holds {name}, which it says is finished"));
        }
    }

    /// An import that returned left what it was to put in force: the items at the version it returned, and (quiet
    /// windows: nobody wrote since) the checkpoints of the generation in force and the lineage nodes.
    fn check_import(&mut self, done: &ImportDone, imported: &Imported, racy: bool) {
        if done.in_place {
            return self.check_reset(imported, racy);
        }
        let Ok(contents) = done.token.contents() else {
            return self.violate("an import of a token that does not read succeeded".to_owned());
        };
        // A pruned import keeps the set it committed over: the version before its own.
        let base = self.committed.get(&imported.version.saturating_sub(1)).cloned().unwrap_or_default();
        let set: Vec<crate::Item> = match done.mode {
            ImportMode::Prune => proto::set_layout::parse_names(contents.kind, base).0,
            _ => contents.items.clone(),
        };
        let expected = match done.mode {
            ImportMode::Prune => contents.pruned(&set, &BTreeMap::new()).0,
            ImportMode::ResetCheckpoints => {
                let mut reset = contents;
                reset.checkpoints.clear();
                reset
            }
            _ => contents,
        };
        let names: BTreeSet<String> = expected.items.iter().map(crate::Item::node_name).collect();
        match self.committed.get(&imported.version) {
            Some(stored) if *stored == names => {}
            stored => {
                let stored = stored.cloned();
                return self.violate(format!(
                    "an import returned version {} with {names:?}, but that version is {stored:?}",
                    imported.version
                ));
            }
        }
        // What it left is judged while it is the latest version: an admin's update under way as the window opened
        // may land after it (and change the lineage), as may members' saves in a racy window.
        if racy || self.committed.last_key_value().map(|(version, _)| *version) != Some(imported.version) {
            return;
        }
        let (checkpoints, lineage) = {
            let net = lock(&self.net);
            let dir = generation_dir(net.zk.data_of(POINTER).as_deref());
            let checkpoints: BTreeMap<String, Vec<u8>> = net
                .zk
                .children_of(&dir)
                .into_iter()
                .filter_map(|name| Some((name.clone(), net.zk.data_of(&format!("{dir}/{name}"))?)))
                .collect();
            // Its lineage, or what it staged while it is being applied (its session may have ended first).
            let lineage_dir = lineage_dir(&net.zk);
            let lineage: BTreeMap<String, Vec<u8>> = net
                .zk
                .children_of(&lineage_dir)
                .into_iter()
                .filter_map(|name| Some((name.clone(), net.zk.data_of(&format!("{lineage_dir}/{name}"))?)))
                .collect();
            (checkpoints, lineage)
        };
        if checkpoints != expected.checkpoints {
            let (got, wanted): (Vec<&String>, Vec<&String>) =
                (checkpoints.keys().collect(), expected.checkpoints.keys().collect());
            return self
                .violate(format!("an import left the checkpoints of {got:?}, not of {wanted:?} (or not those)"));
        }
        let wanted: BTreeMap<String, Vec<u8>> =
            expected.lineage.iter().map(|(name, entry)| (name.clone(), entry.render().into_bytes())).collect();
        if lineage != wanted {
            self.violate(format!(
                "an import left the lineage of {:?}, not of {:?}",
                lineage.keys().collect::<Vec<_>>(),
                wanted.keys().collect::<Vec<_>>()
            ));
        }
    }

    /// A reset in place kept the set it committed over, and (while nothing landed after it, in a quiet window) left
    /// no checkpoint in force.
    fn check_reset(&mut self, imported: &Imported, racy: bool) {
        let (before, after) =
            (self.committed.get(&imported.version.saturating_sub(1)), self.committed.get(&imported.version));
        if let (Some(before), Some(after)) = (before, after)
            && before != after
        {
            let (before, after) = (before.clone(), after.clone());
            return self.violate(format!("a reset of the checkpoints changed the set from {before:?} to {after:?}"));
        }
        if racy || self.committed.last_key_value().map(|(version, _)| *version) != Some(imported.version) {
            return;
        }
        let left = {
            let net = lock(&self.net);
            net.zk.children_of(&generation_dir(net.zk.data_of(POINTER).as_deref()))
        };
        if !left.is_empty() {
            self.violate(format!("a reset of the checkpoints left the checkpoints of {left:?}"));
        }
    }

    /// A write that landed, as the checker sees it: an import's commit (it deletes and creates the party's node) must
    /// find no lock node; a checkpoint's (checked by its lock node) must be under an ownership that began after the
    /// latest import's commit.
    pub(super) fn check_progress_write(&mut self, write: &net::Write) {
        let import = write.ops.iter().any(|op| matches!(op, zk::WriteOp::Delete { path, .. } if path == PARTY));
        if import {
            let held: Vec<String> = {
                let net = lock(&self.net);
                net.zk
                    .children_of(LOCKS)
                    .iter()
                    .flat_map(|dir| {
                        net.zk.children_of(&format!("{LOCKS}/{dir}")).into_iter().map(move |n| format!("{dir}/{n}"))
                    })
                    .collect()
            };
            if !held.is_empty() {
                self.violate(format!("an import committed while lock nodes {held:?} existed"));
            }
            self.progress.last_import = Some(lock(&self.net).zk.zxid());
            // The token's progress is the items' history now: every checkpoint in force is its item's own, and which
            // items are finished is the token's to say.
            self.finished_since_entry.clear();
            self.finished_at.clear();
            // The staged lineage's finished items are finished from the commit on (its apply may write their marks
            // before the import returns).
            let tag = write.ops.iter().find_map(|op| match op {
                zk::WriteOp::SetData { path, data, .. } if path == ITEMS => match Header::parse(data).ok()?.state {
                    layout::State::Applying(tag) => Some(tag),
                    _ => None,
                },
                _ => None,
            });
            let staged = tag.map(|tag| format!("{PATH}/item-changes/{tag}/lineage"));
            let finished: Vec<String> = staged.map_or_else(Vec::new, |staged| {
                let net = lock(&self.net);
                net.zk
                    .children_of(&staged)
                    .into_iter()
                    .filter(|name| {
                        let data = net.zk.data_of(&format!("{staged}/{name}")).unwrap_or_default();
                        crate::shared_set::LineageEntry::parse(&data).is_ok_and(|entry| entry.finished.is_some())
                    })
                    .collect()
            });
            let now = self.now();
            for name in finished {
                self.finished_at.insert(name.clone(), now);
                self.ever_finished.insert(name);
            }
            for (name, incarnation) in &self.incarnations {
                self.checkpoint_incarnation.insert(name.clone(), *incarnation);
            }
            return;
        }
        let Some(last) = self.progress.last_import else { return };
        let checkpoint = write.ops.iter().any(|op| match op {
            zk::WriteOp::SetData { path, .. } | zk::WriteOp::Create { path, .. } => checkpoint_item(path).is_some(),
            _ => false,
        });
        let lock_node = write.ops.iter().find_map(|op| match op {
            zk::WriteOp::Check { path, .. } if path.starts_with(LOCKS) => Some(path.clone()),
            _ => None,
        });
        let (true, Some(lock_node)) = (checkpoint, lock_node) else { return };
        let created = lock(&self.net).zk.exists(&lock_node).map(|stat| stat.czxid);
        if created.is_some_and(|czxid| czxid < last) {
            self.violate(format!(
                "session {}'s checkpoint landed after an import, under its lock node {lock_node} of before it",
                write.session
            ));
        }
    }
}

/// The directory of the checkpoints in force, by `<path>/checkpoints`'s data.
pub(super) fn generation_dir(pointer: Option<&[u8]>) -> String {
    match crate::checkpoint_store::generation::parse(PATH, pointer.unwrap_or_default(), 0) {
        Ok(generation) => generation.dir,
        Err(_) => POINTER.to_owned(),
    }
}

/// The item a checkpoint node's path names, in the first generation or a later one.
pub(super) fn checkpoint_item(path: &str) -> Option<&str> {
    if let Some(name) = path.strip_prefix(POINTER).and_then(|rest| rest.strip_prefix('/')) {
        return Some(name);
    }
    let rest = path.strip_prefix(GENERATIONS)?.strip_prefix('/')?;
    let (_, name) = rest.split_once('/')?;
    Some(name)
}
