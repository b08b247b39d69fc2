//! Creating the set's first version: one `multi` when it fits, else its items written under a `creating` header and
//! the writer's lease, committed by the header's write to `ready`.

use std::collections::BTreeSet;

use super::chunks::{chunks, fits_one_request, paths_of};
use super::read::read_raw;
use super::{Attempts, MAX_ATTEMPTS, Retry, SetStore, SharedSetVersion};
use crate::retry::{is_transient, retry_transient};
use crate::zookeeper::{Mode, MultiError, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};
use proto::item::validate_items;
use proto::set_layout::{self as layout, Header, Kind, SetView, State};

impl<Z: ZooKeeper> SetStore<Z> {
    pub async fn create_if_missing(&self, items: Vec<Item>) -> Result<(SharedSetVersion, bool), Error> {
        let items = validate_items(items, true)?;
        if items.is_empty() {
            return Err(Error::EmptySharedSet { path: self.paths.node.clone() });
        }
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        // The change tags of our attempts: each attempt stages under a fresh one (a tag is never used twice, so a
        // late clean-up of one attempt cannot touch the next).
        let mut own = Vec::new();
        // Our creation landed (its reply came, or its outcome marker says so): whatever the set is by the time it is
        // read, we created it.
        let mut created = false;
        let mut attempts = Attempts::default();
        while attempts.another(&zk).await {
            match self.view(&zk).await? {
                SetView::Committed(committed) => return Ok((SharedSetVersion::of(*committed), created)),
                SetView::Unreadable(reason) => {
                    return Err(Error::SharedSetCorrupt { path: self.paths.node.clone(), reason });
                }
                SetView::Torn => {}
                SetView::Missing { unfinished: Some(unfinished) } => {
                    self.settle(&zk, &unfinished, &own).await?;
                }
                SetView::Missing { unfinished: None } => {
                    let tag = layout::token(zk.random());
                    own.push(tag.clone());
                    match self.create(&zk, &items, &token, &tag).await {
                        Ok(()) => created = true,
                        Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                        Err(Err(err)) => return Err(err),
                    }
                }
            }
        }
        Err(self.too_busy())
    }

    /// Writes the first version of the set (`None` from [`layout::interpret`] before): one `multi` if it fits, else
    /// under a `creating` header and our lease (`tag`), committed by the header's write to `ready`. The header's node
    /// is created, or written over at its version if an undone creation left it `absent`.
    async fn create(&self, zk: &Z, items: &[Item], token: &str, tag: &str) -> Result<(), Result<Retry, Error>> {
        // The partition path, and the outcome markers' parent beneath it (so that the commit does not fail on it).
        if retry_transient(zk, || zk.mkdir(&self.paths.outcomes, &self.acls)).await.is_err() {
            return Err(Ok(Retry::Unknown));
        }
        let Ok(read) = retry_transient(zk, || read_raw(zk, &self.paths, None)).await else {
            return Err(Ok(Retry::Unknown));
        };
        let absent_at = match &read.header {
            None => None,
            Some((data, version)) => match Header::parse(data) {
                Ok(header) if header.state == State::Absent => Some(*version),
                // Someone else's set, or their creation: read again.
                _ => return Err(Ok(Retry::Moved)),
            },
        };
        let kind = Kind::of(items);
        let names: Vec<String> = items.iter().map(Item::node_name).collect();
        let ready = Header {
            kind,
            version: 1,
            state: State::Ready,
            log: vec![token.to_owned()],
            weights: None,
            lineage: false,
            deltas: Vec::new(),
        };
        let ready_text = ready.render();
        let created = paths_of(&self.paths.node, &names);
        if fits_one_request(&self.paths, self.chunk, &names, &[]) {
            let mut ops = vec![self.header_write(ready_text.as_bytes(), absent_at)];
            ops.extend(created.iter().map(|path| self.create_op(path)));
            return self.commit_marked(zk, &ops, token).await.map_err(|e| Ok(e.unwrap_or(Retry::Unknown)));
        }
        if retry_transient(zk, || zk.mkdir(&self.paths.writers, &self.acls)).await.is_err() {
            return Err(Ok(Retry::Unknown));
        }
        let creating = Header::creating(kind, tag).render();
        let lease = self.paths.lease(tag);
        let ops = [
            self.header_write(creating.as_bytes(), absent_at),
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
        ];
        // A lost reply: the next read finds our `creating` header (ours, so undone at once) or nothing.
        let creating_version = absent_at.map_or(0, |version| version + 1);
        let outcome = match self.commit(zk, &ops).await {
            Ok(()) => self.create_under_lease(zk, &created, &ready_text, creating_version, token).await,
            Err(err) => Err(Ok(err.unwrap_or(Retry::Unknown))),
        };
        // Whatever happened, our lease goes before we return (see `write_large`).
        self.release_lease(zk, tag).await;
        outcome
    }

    /// The write of the header that starts a set: a create, or over an `absent` header at its version.
    fn header_write<'a>(&'a self, data: &'a [u8], absent_at: Option<i32>) -> WriteOp<'a> {
        match absent_at {
            None => self.create_data_op(&self.paths.node, data),
            Some(version) => WriteOp::SetData { path: &self.paths.node, data, version: Some(version) },
        }
    }

    /// Creates the items of a first version under a `creating` header (at data version `version`), then says
    /// `ready` (which commits it).
    async fn create_under_lease(
        &self,
        zk: &Z,
        created: &[String],
        ready_text: &str,
        version: i32,
        token: &str,
    ) -> Result<(), Result<Retry, Error>> {
        let mut done: BTreeSet<String> = BTreeSet::new();
        for _ in 0..MAX_ATTEMPTS {
            let todo: Vec<String> = created.iter().filter(|path| !done.contains(*path)).cloned().collect();
            let mut lost = false;
            for chunk in chunks(&todo, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(version) }];
                ops.extend(chunk.iter().map(|path| self.create_op(path)));
                match zk.multi_write(&ops).await {
                    Ok(_) => done.extend(chunk.iter().cloned()),
                    Err(MultiError { index: Some(0), .. }) => return Err(Ok(Retry::Moved)),
                    Err(MultiError { error, .. }) if is_transient(&error) || error == ZkError::NodeExists => {
                        lost = true;
                        break;
                    }
                    Err(_) => return Err(Ok(Retry::Moved)),
                }
            }
            if !lost {
                let ops =
                    [WriteOp::SetData { path: &self.paths.node, data: ready_text.as_bytes(), version: Some(version) }];
                return self.commit_marked(zk, &ops, token).await;
            }
            let Ok(children) = retry_transient(zk, || zk.list_children(&self.paths.node)).await else {
                return Err(Ok(Retry::Unknown));
            };
            done = children.into_iter().map(|name| self.paths.item(&name)).collect();
        }
        Err(Ok(Retry::Moved))
    }
}
