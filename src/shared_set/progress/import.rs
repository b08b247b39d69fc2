//! Importing: a token's progress into a stopped party, all or nothing.
//!
//! 1. **Refusals**, before anything is written: a token this version cannot read, one that shares no item with the
//!    path's set (unless the path has none), and a party that is not stopped: a member in `<path>/party`, or a
//!    contender in any lock directory (Kafka's empty-group rule). The error names them.
//! 2. **The intent**, under the importer's ephemeral lease: the set's header says `staging` (or `creating`, on a path
//!    without a set), so readers keep the set in force (or see none).
//! 3. **Staging**, out of sight, each request checking that the header is still the intent: the set's additions and
//!    removals (as any large update's), the lineage nodes (`item-changes/<tag>/lineage`), the checkpoints as a new
//!    generation (`checkpoint-generations/<tag>`, see [`generation`]), and a weight table.
//! 4. **The commit**, one `multi`: the header to `applying` (naming the table), `<path>/checkpoints` to the new
//!    generation, and `<path>/party` deleted and created again, which fails if anyone joined since the check: so
//!    no member that joined before it can be running after it. From then on every reader sees the new progress.
//! 5. **Applying**: the additions, removals and lineage nodes move into place (anyone finishes this if the importer
//!    stops: it is `applying` like any large update); then `ready`, and the old checkpoints and table are deleted.
//!
//! A cut import leaves the old state: before its commit, its lease goes with its session, and the next writer or
//! the party's first member undoes its intent; its staged nodes are collected as garbage.

use std::collections::BTreeSet;

use super::{Contents, ImportMode, Imported, Progress};
use crate::checkpoint_store::generation::{self, Generation};
use crate::paths::Paths;
use crate::retry::{is_transient, retry_transient};
use crate::shared_set::chunks::{chunks, paths_of};
use crate::shared_set::read::read_raw;
use crate::shared_set::weights::{Replaced, WrittenTable};
use crate::shared_set::{Attempts, MAX_ATTEMPTS, Retry, SetStore};
use crate::zookeeper::{Mode, MultiError, ReadOp, ReadResult, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};
use proto::set_layout::{self as layout, Committed, Header, SetView, State};

/// Bytes of paths and data per staging `multi`: far below ZooKeeper's 1 MB packet limit.
const STAGE_BYTES: usize = 512 * 1024;
/// Lock directories listed per read `multi` when checking that nobody holds a lock.
const DIRS_PER_READ: usize = 500;
/// Holders named in a refusal, at most.
const HOLDERS_NAMED: usize = 10;

/// One attempt at an import: the set it replaces (none: there is none), what the path is to hold, the checkpoints
/// in force it replaces, the update's token and the change's tag.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    current: Option<&'a Committed>,
    target: &'a Contents,
    old: &'a Generation,
    token: &'a str,
    tag: &'a str,
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// See [`SharedSet::import`](crate::SharedSet::import).
    pub async fn import(&self, progress: &Progress, mode: ImportMode) -> Result<Imported, Error> {
        self.import_over(progress, mode, None).await
    }

    /// See [`SharedSet::reset_checkpoints`](crate::SharedSet::reset_checkpoints): the path's own progress, exported
    /// and imported back without its checkpoints, over the very version it was exported at (an update landing in
    /// between would otherwise be undone by the import: it exports again).
    pub async fn reset_checkpoints(&self) -> Result<Imported, Error> {
        for _ in 0..MAX_ATTEMPTS {
            let progress = self.export().await?;
            let over = Some(progress.exported.set_version);
            match self.import_over(&progress, ImportMode::ResetCheckpoints, over).await {
                Err(Error::SharedSetConflict { .. }) => continue,
                done => return done,
            }
        }
        Err(self.too_busy())
    }

    /// [`import`](SetStore::import), over version `over` of the set only (`None`: any), else a conflict.
    async fn import_over(&self, progress: &Progress, mode: ImportMode, over: Option<u64>) -> Result<Imported, Error> {
        let contents = progress.contents()?;
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        let party = Paths::new(&self.paths.base).party;
        for dir in [&self.paths.changes, &self.paths.writers, &self.paths.outcomes, &party] {
            retry_transient(&zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| self.zk_error("mkdir", e))?;
        }
        let generations = generation::generations(&self.paths.base);
        retry_transient(&zk, || zk.mkdir(&generations, &self.acls)).await.map_err(|e| self.zk_error("mkdir", e))?;
        // The change tags of our attempts: an intent of ours found after its reply was lost is undone at once.
        let mut own: Vec<String> = Vec::new();
        let mut attempts = Attempts::default();
        while attempts.another(&zk).await {
            let current = match self.view(&zk).await? {
                SetView::Committed(committed) => match &committed.unfinished {
                    Some(unfinished) => {
                        self.settle(&zk, unfinished, &own).await?;
                        continue;
                    }
                    None => Some(*committed),
                },
                SetView::Missing { unfinished: Some(unfinished) } => {
                    self.settle(&zk, &unfinished, &own).await?;
                    continue;
                }
                SetView::Missing { unfinished: None } => None,
                SetView::Unreadable(reason) => {
                    return Err(Error::SharedSetCorrupt { path: self.paths.node.clone(), reason });
                }
                SetView::Torn => continue,
            };
            if over.is_some() && current.as_ref().map(|current| current.version) != over {
                return Err(Error::SharedSetConflict {
                    path: self.paths.node.clone(),
                    reason: "the set moved on since its progress was read".into(),
                });
            }
            let (target, dropped) = self.target(&contents, mode, current.as_ref())?;
            self.check_stopped(&zk).await?;
            let old = self.read_generation(&zk).await?;
            let tag = layout::token(zk.random());
            own.push(tag.clone());
            let attempt = Attempt { current: current.as_ref(), target: &target, old: &old, token: &token, tag: &tag };
            match self.write_import(&zk, &attempt).await {
                Ok(version) => {
                    self.delete_generation(&zk, &old).await;
                    return Ok(Imported {
                        version,
                        items: target.items.len(),
                        checkpoints: target.checkpoints.len(),
                        lineage: target.lineage.len(),
                        dropped,
                    });
                }
                Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                Err(Err(err)) => return Err(err),
            }
        }
        Err(self.too_busy())
    }

    /// What the path is to hold, by `mode`, and the token's names left out; or why the import is refused.
    fn target(
        &self,
        contents: &Contents,
        mode: ImportMode,
        current: Option<&Committed>,
    ) -> Result<(Contents, Vec<String>), Error> {
        if let Some(current) = current {
            let theirs: BTreeSet<&Item> = contents.items.iter().collect();
            if !current.items.iter().any(|item| theirs.contains(item)) {
                return Err(self.refused(
                    "the token shares no item with the set here: the wrong file, or the wrong path? (import it \
                     into an empty path, or empty this one first)",
                    Vec::new(),
                ));
            }
        }
        Ok(match (mode, current) {
            (ImportMode::Prune, None) => {
                return Err(self.refused(
                    "there is no set here to prune the token to (restore it instead: ImportMode::Restore)",
                    Vec::new(),
                ));
            }
            (ImportMode::Prune, Some(current)) => contents.clone().pruned(&current.items, &current.weights),
            (ImportMode::ResetCheckpoints, _) => {
                let mut reset = contents.clone();
                reset.checkpoints.clear();
                (reset, Vec::new())
            }
            (ImportMode::Restore, _) => (contents.clone(), Vec::new()),
        })
    }

    fn refused(&self, reason: &str, holders: Vec<String>) -> Error {
        Error::ImportRefused { path: self.paths.base.clone(), reason: reason.to_owned(), holders }
    }

    /// Refuses unless the party is stopped: nobody in `<path>/party`, no contender in any lock directory.
    async fn check_stopped(&self, zk: &Z) -> Result<(), Error> {
        let paths = Paths::new(&self.paths.base);
        let listed = |dir: String| async move {
            match retry_transient(zk, || zk.list_children(&dir)).await {
                Ok(children) => Ok(children),
                Err(ZkError::NoNode) => Ok(Vec::new()),
                Err(err) => Err(Error::zk("get_children", dir, err)),
            }
        };
        let nodes = listed(paths.party.clone()).await?;
        if !nodes.is_empty() {
            let (mut members, _) = proto::layout::members(&nodes);
            members.truncate(HOLDERS_NAMED);
            let reason = format!("{} member(s) are in the party: stop every member first", nodes.len());
            return Err(self.refused(&reason, members));
        }
        let dirs = listed(paths.locks.clone()).await?;
        let mut holders = Vec::new();
        let mut held = 0;
        for group in dirs.chunks(DIRS_PER_READ) {
            let dir_paths: Vec<String> = group.iter().map(|dir| paths.lock_dir(dir)).collect();
            let ops: Vec<ReadOp<'_>> = dir_paths.iter().map(|path| ReadOp::Children(path)).collect();
            let results = retry_transient(zk, || zk.multi_read(&ops))
                .await
                .map_err(|e| Error::zk("multi read", paths.locks.as_str(), e))?;
            for (dir, result) in group.iter().zip(results) {
                let ReadResult::Children(contenders) = result else { continue };
                if let Some(first) =
                    contenders.iter().min_by_key(|node| proto::layout::sequence(node).map(str::to_owned))
                {
                    held += 1;
                    if holders.len() < HOLDERS_NAMED {
                        let node = format!("{}/{first}", paths.lock_dir(dir));
                        let who = match retry_transient(zk, || zk.get_data(&node)).await {
                            Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
                            Err(_) => String::from("?"),
                        };
                        holders.push(format!("{who} (item {dir})"));
                    }
                }
            }
        }
        if held > 0 {
            let reason = format!("{held} item lock(s) are held or waited for: stop every member first");
            return Err(self.refused(&reason, holders));
        }
        Ok(())
    }

    /// Steps 2 to 5 of the module's list. The version of the set committed, or why this attempt did not land.
    async fn write_import(&self, zk: &Z, attempt: &Attempt<'_>) -> Result<u64, Result<Retry, Error>> {
        let outcome = match self.intent(zk, attempt.current, attempt.target.kind, attempt.tag).await {
            Ok(intent) => self.stage_import(zk, attempt, intent).await,
            Err(err) => Err(err),
        };
        // Our lease goes whatever happened (see `write_large`).
        self.release_lease(zk, attempt.tag).await;
        outcome
    }

    /// The intent: the header says `staging` (a set) or `creating` (none) under our lease, with the change's
    /// directories. Returns the header's data version after it.
    async fn intent(
        &self,
        zk: &Z,
        current: Option<&Committed>,
        kind: layout::Kind,
        tag: &str,
    ) -> Result<i32, Result<Retry, Error>> {
        let (lease, change) = (self.paths.lease(tag), self.paths.change(tag));
        let (additions, removals, lineage) =
            (self.paths.additions(tag), self.paths.removals(tag), staged_lineage(&change));
        let (header, header_op_version) = match current {
            Some(current) => {
                (current.header.with_state(State::Staging(tag.to_owned())).render(), Some(current.header_version))
            }
            None => (Header::creating(kind, tag).render(), self.absent_at(zk).await?),
        };
        let header_op = match (current, header_op_version) {
            (None, None) => self.create_data_op(&self.paths.node, header.as_bytes()),
            (_, version) => WriteOp::SetData { path: &self.paths.node, data: header.as_bytes(), version },
        };
        let ops = [
            header_op,
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
            self.create_op(&change),
            self.create_op(&additions),
            self.create_op(&removals),
            self.create_op(&lineage),
        ];
        self.commit(zk, &ops).await?;
        Ok(header_op_version.map_or(0, |version| version + 1))
    }

    /// The data version of an `absent` header (an undone creation's), `None` when there is no header node; `Moved`
    /// for any other (someone else's creation got there first).
    async fn absent_at(&self, zk: &Z) -> Result<Option<i32>, Result<Retry, Error>> {
        let read = retry_transient(zk, || read_raw(zk, &self.paths, None)).await.map_err(|_| Ok(Retry::Unknown))?;
        match &read.header {
            None => Ok(None),
            Some((data, version)) => match Header::parse(data) {
                Ok(header) if header.state == State::Absent => Ok(Some(*version)),
                _ => Err(Ok(Retry::Moved)),
            },
        }
    }

    /// Stages everything under the intent (header at data version `intent`), commits, and applies.
    async fn stage_import(&self, zk: &Z, attempt: &Attempt<'_>, intent: i32) -> Result<u64, Result<Retry, Error>> {
        let Attempt { current, target, tag, .. } = *attempt;
        let names: Vec<String> = target.items.iter().map(Item::node_name).collect();
        match current {
            // The set's additions and removals, as any large update stages them.
            Some(current) => {
                let on_disk: BTreeSet<String> =
                    current.items.iter().map(Item::node_name).chain(current.skipped.iter().cloned()).collect();
                let wanted: BTreeSet<String> = names.iter().cloned().collect();
                let adds: Vec<String> = wanted.difference(&on_disk).cloned().collect();
                let removes: Vec<String> = on_disk.difference(&wanted).cloned().collect();
                self.stage(zk, tag, intent, &adds, &removes).await?;
            }
            // No set: readers see none while `creating`, so the items go in place at once.
            None => {
                let creates: Vec<(String, Vec<u8>)> =
                    names.iter().map(|name| (self.paths.item(name), Vec::new())).collect();
                self.write_nodes(zk, intent, &creates).await?;
            }
        }
        let change = self.paths.change(tag);
        let lineage: Vec<(String, Vec<u8>)> = target
            .lineage
            .iter()
            .map(|(name, entry)| (format!("{}/{name}", staged_lineage(&change)), entry.render().into_bytes()))
            .collect();
        self.write_nodes(zk, intent, &lineage).await?;
        // The checkpoints as a new generation, its directory first.
        let dir = generation::generation_dir(&self.paths.base, tag);
        let mut checkpoints: Vec<(String, Vec<u8>)> = vec![(dir.clone(), Vec::new())];
        checkpoints.extend(target.checkpoints.iter().map(|(name, blob)| (format!("{dir}/{name}"), blob.clone())));
        self.write_nodes(zk, intent, &checkpoints).await?;
        // The weight table (none when nothing weighs other than 1).
        let replaced = current.map(Replaced::of).unwrap_or_default();
        let table = match target.weights.is_empty() {
            true => None,
            false => Some(self.write_table_replacing(zk, replaced, &target.weights).await?),
        };
        let committed = self.commit_import(zk, attempt, intent, table.as_ref()).await;
        let outcome = match &committed {
            Ok(_) => Ok(()),
            Err(Ok(retry)) => Err(Ok(*retry)),
            Err(Err(err)) => Err(Err(err.clone())),
        };
        // Ours goes if the commit did not land; the one it replaced if it did (with no table now, all of it).
        let written = table.unwrap_or_else(WrittenTable::none);
        self.after_table_replacing(zk, &outcome, &written, replaced).await;
        let version = committed?;
        // Applied by us now, or by whoever finds it abandoned.
        if let Err(err) = self.finish_applying(zk, tag).await {
            tracing::warn!(%err, change = tag, "an import is committed but not yet applied; it will be finished");
        }
        Ok(version)
    }

    /// The commit: the header to `applying`, `<path>/checkpoints` to the new generation, `<path>/party` deleted and
    /// created again (so that nobody joined since the check), with the update's outcome marker.
    async fn commit_import(
        &self,
        zk: &Z,
        attempt: &Attempt<'_>,
        intent: i32,
        table: Option<&WrittenTable>,
    ) -> Result<u64, Result<Retry, Error>> {
        let Attempt { current, target, old, token, tag } = *attempt;
        let mut header = match current {
            Some(current) => current.header.next(target.kind, State::Applying(tag.to_owned()), token),
            None => Header {
                kind: target.kind,
                version: 1,
                state: State::Applying(tag.to_owned()),
                log: vec![token.to_owned()],
                weights: None,
                lineage: false,
                deltas: Vec::new(),
            },
        };
        header.weights = table.and_then(|table| table.table.clone());
        header.lineage = !target.lineage.is_empty();
        let header = header.render();
        let (pointer, pointer_data) = (generation::pointer(&self.paths.base), generation::render(tag));
        let party = Paths::new(&self.paths.base).party;
        let pointer_op = match old.version {
            -1 => self.create_data_op(&pointer, pointer_data.as_bytes()),
            version => WriteOp::SetData { path: &pointer, data: pointer_data.as_bytes(), version: Some(version) },
        };
        let ops = [
            WriteOp::SetData { path: &self.paths.node, data: header.as_bytes(), version: Some(intent) },
            pointer_op,
            WriteOp::Delete { path: &party, version: None },
            self.create_op(&party),
        ];
        #[cfg(test)]
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.to_owned());
        let version = current.map_or(1, |current| current.version + 1);
        match self.write_marked(zk, &ops, token).await {
            Ok(Ok(())) => Ok(version),
            Ok(Err(MultiError { index: Some(2), error: ZkError::NotEmpty })) => Err(Err(self.refused(
                "a member joined the party while the import was being written: stop every member first",
                Vec::new(),
            ))),
            // Someone moved `<path>/checkpoints` (another import): read again.
            Ok(Err(MultiError {
                index: Some(1),
                error: ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode,
            })) => Err(Ok(Retry::Moved)),
            Ok(Err(MultiError { index: None, error })) if is_transient(&error) => Err(Ok(Retry::Lost)),
            Ok(Err(MultiError { index: Some(0), error: ZkError::BadVersion | ZkError::NoNode })) => {
                Err(Ok(Retry::Moved))
            }
            Ok(Err(MultiError { error, .. })) => Err(Err(self.zk_error("multi", error))),
            Err(err) => Err(Err(err)),
        }
    }

    /// Creates nodes (path, data) in `multi`s that each check the header is still the intent (at data version
    /// `intent`); resumable: a node found already there (a lost reply of ours) is skipped.
    async fn write_nodes(&self, zk: &Z, intent: i32, nodes: &[(String, Vec<u8>)]) -> Result<(), Result<Retry, Error>> {
        let mut done: BTreeSet<&str> = BTreeSet::new();
        for _ in 0..MAX_ATTEMPTS {
            let todo: Vec<&(String, Vec<u8>)> =
                nodes.iter().filter(|(path, _)| !done.contains(path.as_str())).collect();
            let mut lost = false;
            for group in by_bytes(&todo, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(intent) }];
                ops.extend(group.iter().map(|(path, data)| self.create_data_op(path, data)));
                match zk.multi_write(&ops).await {
                    Ok(_) => done.extend(group.iter().map(|(path, _)| path.as_str())),
                    Err(MultiError { index: Some(0), .. }) => return Err(Ok(Retry::Moved)),
                    Err(MultiError { error, .. }) if is_transient(&error) || error == ZkError::NodeExists => {
                        lost = true;
                        break;
                    }
                    Err(MultiError { error, .. }) => return Err(Err(self.zk_error("multi create", error))),
                }
            }
            if !lost {
                return Ok(());
            }
            // Some of it may have landed: what exists now is skipped.
            for group in todo.chunks(self.chunk) {
                let ops: Vec<ReadOp<'_>> = group.iter().map(|(path, _)| ReadOp::Data(path)).collect();
                let Ok(results) = retry_transient(zk, || zk.multi_read(&ops)).await else {
                    return Err(Ok(Retry::Unknown));
                };
                for ((path, _), result) in group.iter().zip(results) {
                    if matches!(result, ReadResult::Data(..)) {
                        done.insert(path.as_str());
                    }
                }
            }
        }
        Err(Err(self.too_busy()))
    }

    /// Deletes the checkpoints of a generation no longer in force (best effort: what is left is collected later).
    async fn delete_generation(&self, zk: &Z, old: &Generation) {
        let Ok(names) = zk.list_children(&old.dir).await else { return };
        let paths = paths_of(&old.dir, &names);
        for chunk in chunks(&paths, self.chunk) {
            let ops: Vec<WriteOp<'_>> = chunk.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
            let _ = zk.multi_write(&ops).await;
        }
        // The first generation's directory is `<path>/checkpoints` itself: it stays.
        if old.tag.is_some() {
            let _ = zk.delete(&old.dir, None).await;
        }
    }

    /// Deletes the checkpoint generations that `<path>/checkpoints` does not name and whose writer's lease is gone:
    /// those of imports that stopped before their commit. Best effort.
    pub(in crate::shared_set) async fn collect_generations(&self, zk: &Z) {
        let generations = generation::generations(&self.paths.base);
        let Ok(tags) = zk.list_children(&generations).await else { return };
        if tags.is_empty() {
            return;
        }
        let Ok(in_force) = self.read_generation(zk).await else { return };
        let leases: Vec<String> = tags.iter().map(|tag| self.paths.lease(tag)).collect();
        let ops: Vec<ReadOp<'_>> = leases.iter().map(|lease| ReadOp::Data(lease)).collect();
        let Ok(results) = zk.multi_read(&ops).await else { return };
        for (tag, lease) in tags.iter().zip(results) {
            let abandoned = matches!(lease, ReadResult::Failed(ZkError::NoNode)) && in_force.tag.as_ref() != Some(tag);
            if abandoned {
                let dir = generation::generation_dir(&self.paths.base, tag);
                self.delete_generation(zk, &Generation { dir, tag: Some(tag.clone()), version: 0 }).await;
            }
        }
    }
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// Whether `current` is an import being applied (its lineage nodes move into place after its commit): a reader of
    /// lineage, or a member starting, settles it first, so as not to see them half moved.
    pub(in crate::shared_set) async fn applying_import(&self, zk: &Z, current: &Committed) -> Result<bool, Error> {
        let State::Applying(tag) = &current.header.state else { return Ok(false) };
        let staged = staged_lineage(&self.paths.change(tag));
        match retry_transient(zk, || zk.check_stat(&staged)).await {
            Ok(stat) => Ok(stat.is_some()),
            Err(err) => Err(self.zk_error("exists", err)),
        }
    }

    /// Waits until no import is being applied (finishing one whose writer is gone): see
    /// [`applying_import`](SetStore::applying_import). At once when there is none, or no set.
    pub(crate) async fn settle_import(&self) -> Result<(), Error> {
        let zk = self.zk()?;
        let mut attempts = Attempts::default();
        while attempts.another(&zk).await {
            // The header alone first (a member's start-up must not read a large set twice): most often it says
            // `ready`.
            let header = match retry_transient(&zk, || zk.get_data(&self.paths.node)).await {
                Ok((data, _)) => Header::parse(&data).ok(),
                Err(ZkError::NoNode) => None,
                Err(err) => return Err(self.zk_error("get_data", err)),
            };
            if !header.is_some_and(|header| matches!(header.state, State::Applying(_))) {
                return Ok(());
            }
            let current = match self.view(&zk).await? {
                SetView::Committed(current) => current,
                SetView::Torn => continue,
                _ => return Ok(()),
            };
            let Some(unfinished) = &current.unfinished else { return Ok(()) };
            if !self.applying_import(&zk, &current).await? {
                return Ok(());
            }
            self.settle(&zk, unfinished, &[]).await?;
        }
        Err(self.too_busy())
    }
}

/// `item-changes/<tag>/lineage`: an import's lineage nodes, staged.
pub(in crate::shared_set) fn staged_lineage(change: &str) -> String {
    format!("{change}/lineage")
}

/// Groups of nodes to create in one `multi` each: at most `chunk - 1` (the header's check comes first) and
/// [`STAGE_BYTES`] of paths and data.
fn by_bytes<'a>(nodes: &[&'a (String, Vec<u8>)], chunk: usize) -> Vec<Vec<&'a (String, Vec<u8>)>> {
    let mut groups: Vec<Vec<&(String, Vec<u8>)>> = vec![Vec::new()];
    let mut bytes = 0;
    for node in nodes {
        let size = node.0.len() + node.1.len() + 32;
        let full = groups.last().is_some_and(|group| group.len() + 1 >= chunk.max(2) || bytes + size > STAGE_BYTES);
        if full && groups.last().is_some_and(|group| !group.is_empty()) {
            groups.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(group) = groups.last_mut() {
            group.push(node);
        }
    }
    groups.retain(|group| !group.is_empty());
    groups
}
