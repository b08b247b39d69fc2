//! An admin's lineage changes: split, merge, add a child, close. Each reads the header, then the lineage nodes it
//! touches, checks them, and commits the header's next version with the nodes' writes in one `multi`.

use std::collections::{BTreeMap, BTreeSet};

use super::entry::Entry;
use crate::retry::retry_transient;
use crate::shared_set::{Attempts, Retry, SetStore, SharedSetVersion};
use crate::zookeeper::{Stat, WriteOp, ZooKeeper};
use crate::{Error, Item};
use proto::item::{check_kind_of_set, validate_items};
use proto::set_layout::{self as layout, Committed, State, TableRef};

/// A change of lineage, as an admin asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LineageChange {
    /// Closes `parent` and gives it `children`, new items that wait for it to finish.
    Split { parent: Item, children: Vec<Item> },
    /// Closes every parent and gives them one new child, which waits for all of them.
    Merge { parents: Vec<Item>, child: Item },
    /// A new item with `parents` (which stay open): it waits for all of them, or enters the set at once if they have
    /// all finished.
    AddChild { child: Item, parents: Vec<Item> },
    /// The source produces nothing new for these items.
    Close { items: Vec<Item> },
}

/// What a change writes: lineage nodes (new ones, and updates at the version read) and items entering the set.
#[derive(Default)]
struct Plan {
    created: Vec<(String, Entry)>,
    updated: Vec<(String, Entry, i32)>,
    ready: Vec<String>,
}

impl LineageChange {
    /// Every item the change names (new ones included).
    fn named(&self) -> Vec<Item> {
        match self {
            LineageChange::Split { parent, children } => std::iter::once(parent).chain(children).cloned().collect(),
            LineageChange::Merge { parents, child } | LineageChange::AddChild { child, parents } => {
                parents.iter().chain(std::iter::once(child)).cloned().collect()
            }
            LineageChange::Close { items } => items.clone(),
        }
    }

    /// Checks what can be checked without reading: valid names, no item twice, enough parents and children.
    fn check_shape(&self) -> Result<(), Error> {
        let named = self.named();
        let distinct = validate_items(named.clone(), true)?;
        let invalid =
            |item: &Item, reason: &str| Err(Error::InvalidItem { item: item.to_string(), reason: reason.into() });
        if distinct.len() != named.len() {
            let mut seen = BTreeSet::new();
            let twice = named.iter().find(|item| !seen.insert(*item)).unwrap_or(&named[0]);
            return invalid(twice, "is named twice in one lineage change");
        }
        match self {
            LineageChange::Split { parent, children } if children.is_empty() => {
                invalid(parent, "cannot be split into no children")
            }
            LineageChange::Merge { parents, child } if parents.len() < 2 => {
                invalid(child, "needs at least two parents to merge (one parent continued by one child is a split)")
            }
            LineageChange::AddChild { child, parents } if parents.is_empty() => {
                invalid(child, "needs at least one parent (a root item is added with `add`)")
            }
            _ => Ok(()),
        }
    }
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// Applies a lineage change: one new version of the set. A commit whose reply was lost is resolved by its
    /// outcome marker: never applied twice, never reported failed once landed.
    pub async fn change_lineage(&self, change: LineageChange) -> Result<SharedSetVersion, Error> {
        change.check_shape()?;
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        let mut attempts = Attempts::default();
        loop {
            let current = self.settled(&zk, &mut attempts, &[]).await?;
            let named = change.named();
            if let Some(held) = current.items.first() {
                check_kind_of_set(&named, held, &self.paths.node)?;
            }
            let names: Vec<String> = named.iter().map(Item::node_name).collect();
            let Some(entries) = self.entries(&zk, &names).await? else { continue };
            let plan = plan(&change, &current, &entries)?;
            if plan.created.is_empty() && plan.updated.is_empty() {
                return Ok(SharedSetVersion::of(current));
            }
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            // A table that still weighs finished items is pruned along (as plain updates do), so that a name used
            // again for a child weighs 1.
            let pruned = match current.stale_weights {
                true => match self.write_table(&zk, &current, &current.weights).await {
                    Ok(pruned) => Some(pruned),
                    Err(Ok(_)) => continue,
                    Err(Err(err)) => return Err(err),
                },
                false => None,
            };
            let table = pruned.as_ref().map_or_else(|| current.header.weights.clone(), |pruned| pruned.table.clone());
            let written = self.write_plan(&zk, &current, &plan, &token, table).await;
            if let Some(pruned) = &pruned {
                self.after_table(&zk, &written, pruned, &current).await;
            }
            match written {
                Ok(()) => {
                    let (mut ready, _) = layout::parse_names(current.header.kind, plan.ready);
                    let mut after = SharedSetVersion::of(current);
                    after.version += 1;
                    after.items.append(&mut ready);
                    after.items.sort();
                    return Ok(after);
                }
                Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                Err(Err(err)) => return Err(err),
            }
        }
    }

    /// One `multi`: the header's next version (naming weight `table`), conditional on the one read, with the lineage
    /// nodes' writes and the creates of the children made ready.
    async fn write_plan(
        &self,
        zk: &Z,
        current: &Committed,
        plan: &Plan,
        token: &str,
        table: Option<TableRef>,
    ) -> Result<(), Result<Retry, Error>> {
        retry_transient(zk, || zk.mkdir(&self.paths.lineage, &self.acls))
            .await
            .map_err(|e| Err(self.zk_error("mkdir", e)))?;
        let mut header = current.header.next(current.header.kind, State::Ready, token).recording(&plan.ready, &[]);
        header.lineage = true;
        header.weights = table;
        let header = header.render();
        let created: Vec<(String, String)> =
            plan.created.iter().map(|(name, entry)| (self.paths.lineage_node(name), entry.render())).collect();
        let updated: Vec<(String, String, i32)> = plan
            .updated
            .iter()
            .map(|(name, entry, version)| (self.paths.lineage_node(name), entry.render(), *version))
            .collect();
        let ready: Vec<String> = plan.ready.iter().map(|name| self.paths.item(name)).collect();
        let mut ops = vec![WriteOp::SetData {
            path: &self.paths.node,
            data: header.as_bytes(),
            version: Some(current.header_version),
        }];
        ops.extend(updated.iter().map(|(path, data, version)| WriteOp::SetData {
            path,
            data: data.as_bytes(),
            version: Some(*version),
        }));
        ops.extend(created.iter().map(|(path, data)| self.create_data_op(path, data.as_bytes())));
        ops.extend(ready.iter().map(|path| self.create_op(path)));
        self.commit_marked(zk, &ops, token).await
    }
}

/// Checks `change` against the set and its lineage nodes (`entries`, by name, each with its version), and says what
/// to write.
fn plan(
    change: &LineageChange,
    current: &Committed,
    entries: &BTreeMap<String, Option<(Entry, Stat)>>,
) -> Result<Plan, Error> {
    let in_set = |name: &str| current.holds(name);
    let entry = |name: &str| entries.get(name).and_then(Option::as_ref);
    let invalid = |name: &str, reason: String| Error::InvalidItem { item: name.to_owned(), reason };
    // An item that exists and has not finished: in the set, or waiting.
    let open = |name: &str| -> Result<(), Error> {
        match entry(name) {
            Some((e, _)) if e.finished.is_some() => Err(invalid(name, "has finished".into())),
            Some(_) => Ok(()),
            None if in_set(name) => Ok(()),
            None => Err(invalid(name, "is not in the shared set, nor waiting in its lineage".into())),
        }
    };
    let new = |name: &str| -> Result<(), Error> {
        if in_set(name) || entry(name).is_some() {
            Err(invalid(name, "already exists (a child must be a new item)".into()))
        } else {
            Ok(())
        }
    };
    let mut plan = Plan::default();
    match change {
        LineageChange::Split { parent, children } => {
            let parent = parent.node_name();
            open(&parent)?;
            let children: Vec<String> = children.iter().map(Item::node_name).collect();
            for child in &children {
                new(child)?;
            }
            touch(&mut plan, entries, &parent, &|e| {
                e.closed = true;
                e.children.extend(children.iter().cloned());
            });
            for child in children {
                plan.created.push((child, Entry { parents: vec![parent.clone()], ..Entry::default() }));
            }
        }
        LineageChange::Merge { parents, child } => {
            let child = child.node_name();
            new(&child)?;
            let parents: Vec<String> = parents.iter().map(Item::node_name).collect();
            for parent in &parents {
                open(parent)?;
                touch(&mut plan, entries, parent, &|e| {
                    e.closed = true;
                    e.children.push(child.clone());
                });
            }
            plan.created.push((child, Entry { parents, ..Entry::default() }));
        }
        LineageChange::AddChild { child, parents } => {
            let child = child.node_name();
            new(&child)?;
            let parents: Vec<String> = parents.iter().map(Item::node_name).collect();
            let mut all_finished = true;
            for parent in &parents {
                match entry(parent) {
                    Some((e, _)) => all_finished &= e.finished.is_some(),
                    None if in_set(parent) => all_finished = false,
                    None => {
                        return Err(invalid(
                            parent,
                            "is not in the shared set, nor in its lineage: an unknown parent".into(),
                        ));
                    }
                }
                touch(&mut plan, entries, parent, &|e| e.children.push(child.clone()));
            }
            if all_finished {
                plan.ready.push(child.clone());
            }
            plan.created.push((child, Entry { parents, ..Entry::default() }));
        }
        LineageChange::Close { items } => {
            for item in items {
                let name = item.node_name();
                open(&name)?;
                touch(&mut plan, entries, &name, &|e| e.closed = true);
            }
        }
    }
    Ok(plan)
}

/// Writes `edit` of `name`'s entry into `plan`: an update at the version read, or a new node for an item of the set
/// that had none. An edit that changes nothing writes nothing.
fn touch(plan: &mut Plan, entries: &BTreeMap<String, Option<(Entry, Stat)>>, name: &str, edit: &dyn Fn(&mut Entry)) {
    match entries.get(name).and_then(Option::as_ref) {
        Some((read, stat)) => {
            let mut entry = read.clone();
            edit(&mut entry);
            if entry != *read {
                plan.updated.push((name.to_owned(), entry, stat.version));
            }
        }
        None => {
            let mut entry = Entry::default();
            edit(&mut entry);
            plan.created.push((name.to_owned(), entry));
        }
    }
}
