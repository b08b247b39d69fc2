//! Item locks, kazoo's `Lock` recipe on the wire: contenders are ephemeral sequential nodes
//! `<path>/locks/<item>/<32 hex>__lock__<10-digit sequence>`, ordered by the sequence text; the lowest holds the lock.
//!
//! This module has the pure rules (which children are contenders, who holds the lock) and the individual requests,
//! each a `'static` future so the driver can run thousands at once on one session and drop them when allocation is
//! abandoned. The driver keeps the bookkeeping ([`Contender`]) so a dropped request never loses track of a node.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use zookeeper_client::{
    Acls, Client, CreateMode, CreateOptions, CreateSequence, MultiReadResult, MultiWriteError, MultiWriteResult, Stat,
};

use crate::Error;
use crate::error::{is_transient, session_end};
use crate::party::{PERSISTENT, random_hex};

/// The marker kazoo's exclusive lock puts before the sequence.
const LOCK_MARK: &str = "__lock__";

/// Operations per `multi` request. Each is small (a path and a member name), so 500 stay far below ZooKeeper's 1 MB
/// packet limit (`jute.maxbuffer`) while saving 499 round trips.
pub(crate) const BATCH: usize = 500;

static EPHEMERAL_SEQUENTIAL: CreateOptions<'static> = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());

/// The sequence text of a contender node, kazoo's `(?:__lock__)(-?\d{10})$`; `None` for other children.
pub(crate) fn sequence(child: &str) -> Option<&str> {
    let digits_at = child.len().checked_sub(10)?;
    if !child.is_char_boundary(digits_at) || !child[digits_at..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let head = &child[..digits_at];
    let (head, start) = match head.strip_suffix('-') {
        Some(h) if h.ends_with(LOCK_MARK) => (h, digits_at - 1),
        _ => (head, digits_at),
    };
    head.ends_with(LOCK_MARK).then(|| &child[start..])
}

/// Where our contender stands among the children of its lock directory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Position<'a> {
    /// No contender comes before ours: we hold the lock.
    Held,
    /// We wait for this contender (the one just before ours) to go.
    Behind(&'a str),
    /// Our node is not among the children (someone deleted it).
    Missing,
}

/// Finds our node's position, comparing sequence texts exactly as kazoo does (as strings, not numbers, so both
/// sides agree even after ZooKeeper's 32-bit sequence wraps; kazoo issues #606/#730).
pub(crate) fn position<'a>(children: &'a [String], own: &str) -> Position<'a> {
    let Some(own_seq) = children.iter().find(|c| c.as_str() == own).and_then(|c| sequence(c)) else {
        return Position::Missing;
    };
    let predecessor = children
        .iter()
        .filter_map(|c| sequence(c).map(|seq| (seq, c.as_str())))
        .filter(|(seq, _)| *seq < own_seq)
        .max_by(|a, b| a.0.cmp(b.0));
    match predecessor {
        Some((_, name)) => Position::Behind(name),
        None => Position::Held,
    }
}

/// The driver's record of one item's lock: enough to finish or undo it whatever happened to the requests.
#[derive(Debug)]
pub(crate) struct Contender {
    /// The item's index in the sorted set.
    pub index: usize,
    /// `<path>/locks/<item>`.
    pub dir: String,
    /// `<32 hex>__lock__`: ours alone, so it finds our node even when a create's reply was lost.
    pub prefix: String,
    /// Our node's name once known.
    pub node: Option<String>,
    /// The node's creation zxid: the fencing token (0 until known).
    pub czxid: i64,
    /// Whether our node is the lowest contender.
    pub held: bool,
}

impl Contender {
    pub fn new(index: usize, dir: String) -> Self {
        Contender { index, dir, prefix: format!("{}{LOCK_MARK}", random_hex()), node: None, czxid: 0, held: false }
    }

    pub fn node_path(&self) -> Option<String> {
        self.node.as_ref().map(|node| format!("{}/{node}", self.dir))
    }
}

/// The outcome of one lock request.
#[derive(Debug)]
pub(crate) enum Step {
    /// The contender create returned.
    Created(Result<(Stat, CreateSequence), zookeeper_client::Error>),
    /// The lock directory was created (or found).
    DirReady(Result<(), zookeeper_client::Error>),
    /// The lock directory was listed.
    Listed(Result<Vec<String>, zookeeper_client::Error>),
    /// The contender we waited for changed or is gone: look again.
    PredecessorChanged(Result<(), zookeeper_client::Error>),
    /// Our held node's stat was read (for its fencing token).
    Stat(Result<Option<Stat>, zookeeper_client::Error>),
}

impl Step {
    /// Whether this step counts against the in-flight window: waits on a watch do not.
    pub fn was_request(&self) -> bool {
        !matches!(self, Step::PredecessorChanged(_))
    }
}

/// The outcome of one `multi` request covering several items (in the order of its indexes).
#[derive(Debug)]
pub(crate) enum BatchStep {
    /// The lock directories were created.
    DirsMade(Result<Vec<MultiWriteResult>, MultiWriteError>),
    /// The contenders were created.
    Created(Result<Vec<MultiWriteResult>, MultiWriteError>),
    /// The lock directories were listed, each followed by our node's data and stat (two results per item).
    Listed(Result<Vec<MultiReadResult>, zookeeper_client::Error>),
}

/// What a lock request in flight gives back, tagged with the index (or indexes) of its items.
#[derive(Debug)]
pub(crate) enum Outcome {
    One(usize, Step),
    Batch(Vec<usize>, BatchStep),
}

/// A lock request in flight.
pub(crate) type StepFuture = BoxFuture<'static, Outcome>;

pub(crate) fn create(client: &Client, index: usize, contender: &Contender, data: &[u8]) -> StepFuture {
    let (client, path, data) = (client.clone(), format!("{}/{}", contender.dir, contender.prefix), data.to_vec());
    async move { Outcome::One(index, Step::Created(client.create(&path, &data, &EPHEMERAL_SEQUENTIAL).await)) }.boxed()
}

pub(crate) fn make_dir(client: &Client, index: usize, dir: &str, delay: Duration) -> StepFuture {
    let (client, dir) = (client.clone(), dir.to_owned());
    async move {
        tokio::time::sleep(delay).await;
        // `mkdir` also recreates `<path>/locks` should an operator have removed it.
        Outcome::One(index, Step::DirReady(client.mkdir(&dir, &PERSISTENT).await))
    }
    .boxed()
}

pub(crate) fn list(client: &Client, index: usize, dir: &str, delay: Duration) -> StepFuture {
    let (client, dir) = (client.clone(), dir.to_owned());
    async move {
        tokio::time::sleep(delay).await;
        Outcome::One(index, Step::Listed(client.list_children(&dir).await))
    }
    .boxed()
}

/// Reads our node's stat (for its fencing token).
pub(crate) fn stat(client: &Client, index: usize, node: String, delay: Duration) -> StepFuture {
    let client = client.clone();
    async move {
        tokio::time::sleep(delay).await;
        Outcome::One(index, Step::Stat(client.check_stat(&node).await))
    }
    .boxed()
}

/// Waits until the contender before ours changes or goes. A data watch, as kazoo's and zookeeper-client's locks use:
/// an `exists` watch on a node that is already gone would linger until someone recreated that name.
pub(crate) fn wait_for(client: &Client, index: usize, predecessor: String) -> StepFuture {
    let client = client.clone();
    async move {
        let step = match client.get_and_watch_data(&predecessor).await {
            Ok((_, _, watcher)) => {
                let event = watcher.changed().await;
                match session_end_of(&event) {
                    Some(err) => Step::PredecessorChanged(Err(err)),
                    None => Step::PredecessorChanged(Ok(())),
                }
            }
            Err(zookeeper_client::Error::NoNode) => Step::PredecessorChanged(Ok(())),
            Err(err) => Step::PredecessorChanged(Err(err)),
        };
        Outcome::One(index, step)
    }
    .boxed()
}

/// Creates the lock directories `dirs` (missing ones, as far as we know) in one `multi`. If any already exists the
/// whole request fails and nothing is created; the caller then goes item by item.
pub(crate) fn make_dirs(client: &Client, indexes: Vec<usize>, dirs: Vec<String>) -> StepFuture {
    let client = client.clone();
    async move {
        let mut writer = client.new_multi_writer();
        let mut result = Ok(());
        for dir in &dirs {
            result = result.and_then(|()| writer.add_create(dir, b"", &PERSISTENT));
        }
        let outcome = match result {
            Ok(()) => writer.commit().await,
            Err(err) => Err(MultiWriteError::RequestFailed { source: err }),
        };
        Outcome::Batch(indexes, BatchStep::DirsMade(outcome))
    }
    .boxed()
}

/// Creates one contender per item in one `multi` (all or none).
pub(crate) fn create_batch(client: &Client, indexes: Vec<usize>, prefixes: Vec<String>, data: &[u8]) -> StepFuture {
    let (client, data) = (client.clone(), data.to_vec());
    async move {
        let mut writer = client.new_multi_writer();
        let mut result = Ok(());
        for prefix in &prefixes {
            result = result.and_then(|()| writer.add_create(prefix, &data, &EPHEMERAL_SEQUENTIAL));
        }
        let outcome = match result {
            Ok(()) => writer.commit().await,
            Err(err) => Err(MultiWriteError::RequestFailed { source: err }),
        };
        Outcome::Batch(indexes, BatchStep::Created(outcome))
    }
    .boxed()
}

/// Lists several lock directories in one read-only `multi`, and reads our node in each (for its creation zxid, the
/// fencing token: servers before 3.7.2/3.8.2/3.9.0 return no stat for a create inside a `multi`, ZOOKEEPER-4026).
/// Each read succeeds or fails on its own.
pub(crate) fn list_batch(
    client: &Client,
    indexes: Vec<usize>,
    dirs_and_nodes: Vec<(String, String)>,
    delay: Duration,
) -> StepFuture {
    let client = client.clone();
    async move {
        tokio::time::sleep(delay).await;
        let mut reader = client.new_multi_reader();
        let mut result = Ok(());
        for (dir, node) in &dirs_and_nodes {
            result = result.and_then(|()| reader.add_get_children(dir)).and_then(|()| reader.add_get_data(node));
        }
        let outcome = match result {
            Ok(()) => reader.commit().await,
            Err(err) => Err(err),
        };
        Outcome::Batch(indexes, BatchStep::Listed(outcome))
    }
    .boxed()
}

/// A watch event that reports the end of the session, as the client error that requests would get.
fn session_end_of(event: &zookeeper_client::WatchedEvent) -> Option<zookeeper_client::Error> {
    use zookeeper_client::{EventType, SessionState};
    if event.event_type != EventType::Session {
        return None;
    }
    Some(match event.session_state {
        SessionState::AuthFailed => zookeeper_client::Error::AuthFailed,
        SessionState::Closed => zookeeper_client::Error::ClientClosed,
        _ => zookeeper_client::Error::SessionExpired,
    })
}

/// Deletes every lock contender node of our session under `locks_dir` that is not in `tracked`: orphans, which the
/// bookkeeping should never leave, but which would block an item forever if it did (kazoo #732/#760). One request to
/// list them (`GetEphemerals`, ZooKeeper 3.6+; skipped on older servers). Returns how many were deleted.
pub(crate) async fn sweep_orphans(
    client: &Client,
    locks_dir: &str,
    tracked: std::collections::HashSet<String>,
) -> Result<usize, Error> {
    // The server matches a string prefix (and refuses a trailing '/'): `/p/locks` would also match `/p/locksmith`.
    let ours = match client.list_ephemerals(locks_dir).await {
        Ok(ours) => ours,
        Err(zookeeper_client::Error::Unimplemented) => return Ok(0),
        Err(err) => match Error::zk_or_transient("get_ephemerals", locks_dir.to_owned(), err) {
            // The next release sweeps again.
            None => return Ok(0),
            Some(err) => return Err(err),
        },
    };
    let orphans: Vec<Contender> = ours
        .into_iter()
        .filter(|path| path.strip_prefix(locks_dir).is_some_and(|rest| rest.starts_with('/')))
        .filter(|path| sequence(path).is_some() && !tracked.contains(path))
        .filter_map(|path| {
            let (dir, node) = path.rsplit_once('/')?;
            Some(Contender {
                index: usize::MAX,
                dir: dir.to_owned(),
                prefix: String::new(),
                node: Some(node.to_owned()),
                czxid: 0,
                held: false,
            })
        })
        .collect();
    let count = orphans.len();
    if count > 0 {
        tracing::warn!(count, "deleting lock nodes of our session that nothing tracked");
        release_all(client, orphans, BATCH).await?;
    }
    Ok(count)
}

/// Whether every node in `nodes` still exists and belongs to our session, as the leader sees it: `sync` on `path`
/// first, so a lagging follower cannot vouch for a node the leader already deleted. Reads go `BATCH` per `multi`.
pub(crate) async fn still_ours(client: &Client, path: &str, nodes: &[String]) -> Result<bool, Error> {
    crate::party::retry_transient(|| client.sync(path)).await.map_err(|e| Error::zk("sync", path, e))?;
    let session = client.session_id().0;
    for chunk in nodes.chunks(BATCH) {
        let read = || {
            let mut reader = client.new_multi_reader();
            let added = chunk.iter().try_for_each(|node| reader.add_get_data(node));
            async move {
                added?;
                reader.commit().await
            }
        };
        let results = crate::party::retry_transient(read).await.map_err(|e| Error::zk("multi get_data", path, e))?;
        let ours = results.len() == chunk.len()
            && results
                .iter()
                .all(|result| matches!(result, MultiReadResult::Data { stat, .. } if stat.ephemeral_owner == session));
        if !ours {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes our node of every contender, concurrently (at most `window` requests in flight). A contender whose create
/// reply never arrived is looked up by its prefix first: requests on one session are applied in order, so the listing
/// sees the create if it happened.
///
/// Lost connections are retried; a node already gone counts as deleted. Fails only when the session ends (every node
/// is gone with it, but the caller must know) or on an error that retrying cannot fix.
pub(crate) async fn release_all(client: &Client, contenders: Vec<Contender>, window: usize) -> Result<(), Error> {
    // Nodes we know are deleted `BATCH` per `multi`. A `multi` is all or nothing, so one node already gone fails its
    // whole batch; such a batch, and nodes we must look up first, go one by one.
    let (known, unknown): (Vec<Contender>, Vec<Contender>) = contenders.into_iter().partition(|c| c.node.is_some());
    let mut batches: Vec<Vec<Contender>> = Vec::new();
    let mut known = known.into_iter().peekable();
    while known.peek().is_some() {
        batches.push(known.by_ref().take(BATCH).collect());
    }
    let leftovers: Vec<Contender> =
        futures::stream::iter(batches.into_iter().map(|batch| release_batch(client, batch)))
            .buffer_unordered((window / BATCH).max(1))
            .flat_map(futures::stream::iter)
            .collect()
            .await;
    let mut results = futures::stream::iter(leftovers.into_iter().chain(unknown).map(|c| release_one(client, c)))
        .buffer_unordered(window.max(1));
    let mut first_error = None;
    while let Some(result) = results.next().await {
        if let Err(err) = result {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Deletes a batch of known nodes in one `multi`; returns the contenders still to release one by one if it failed.
async fn release_batch(client: &Client, batch: Vec<Contender>) -> Vec<Contender> {
    let mut writer = client.new_multi_writer();
    for contender in &batch {
        if let Some(path) = contender.node_path()
            && writer.add_delete(&path, None).is_err()
        {
            return batch;
        }
    }
    match writer.commit().await {
        Ok(_) => {
            tracing::debug!(count = batch.len(), "locks released in one multi");
            Vec::new()
        }
        Err(err) => {
            tracing::debug!(%err, count = batch.len(), "batched release failed; releasing one by one");
            batch
        }
    }
}

async fn release_one(client: &Client, mut contender: Contender) -> Result<(), Error> {
    let mut delay = Duration::from_millis(10);
    loop {
        let result = match contender.node_path() {
            Some(path) => match client.delete(&path, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {
                    tracing::debug!(node = %path, "lock released");
                    return Ok(());
                }
                Err(err) => Err(Error::zk_or_transient("delete", path, err)),
            },
            None => match client.list_children(&contender.dir).await {
                Ok(children) => match children.into_iter().find(|c| c.starts_with(&contender.prefix)) {
                    Some(node) => {
                        contender.node = Some(node);
                        continue;
                    }
                    None => return Ok(()),
                },
                Err(zookeeper_client::Error::NoNode) => return Ok(()),
                Err(err) => Err(Error::zk_or_transient("get_children", contender.dir.clone(), err)),
            },
        };
        match result {
            Err(Some(err)) => return Err(err),
            Err(None) | Ok(()) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl Error {
    /// `None` for an error worth retrying, the wrapped error otherwise.
    pub(crate) fn zk_or_transient(op: &'static str, path: String, err: zookeeper_client::Error) -> Option<Error> {
        if is_transient(&err) && session_end(&err).is_none() { None } else { Some(Error::zk(op, path, err)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn contender_names_follow_kazoo_regex() {
        assert_eq!(sequence("3e93aa__lock__0000000000"), Some("0000000000"));
        assert_eq!(sequence("__lock__0000000042"), Some("0000000042"));
        assert_eq!(sequence("x__lock__-0000000001"), Some("-0000000001"));
        // Go's and Curator's names, read locks, short or long sequences are not contenders.
        assert_eq!(sequence("_c_1234-lock-0000000031"), None);
        assert_eq!(sequence("x__rlock__0000000001"), None);
        assert_eq!(sequence("x__lock__000000001"), None);
        assert_eq!(sequence("x__lock__00000000001"), None);
        assert_eq!(sequence("x__lock__-000000001"), None);
        assert_eq!(sequence("é__lock__000000000"), None);
        assert_eq!(sequence("000000000é"), None);
    }

    #[test]
    fn lowest_sequence_holds() {
        let children = names(&["b__lock__0000000002", "a__lock__0000000001", "junk", "c__lock__0000000003"]);
        assert_eq!(position(&children, "a__lock__0000000001"), Position::Held);
        assert_eq!(position(&children, "b__lock__0000000002"), Position::Behind("a__lock__0000000001"));
        assert_eq!(position(&children, "c__lock__0000000003"), Position::Behind("b__lock__0000000002"));
        assert_eq!(position(&children, "d__lock__0000000004"), Position::Missing);
    }

    #[test]
    fn sequences_compare_as_text_like_kazoo() {
        // After the wrap, "-2147483647" < "-2147483648" as text; both sides must agree, so we copy kazoo.
        let children = names(&["a__lock__-2147483648", "b__lock__-2147483647"]);
        assert_eq!(position(&children, "b__lock__-2147483647"), Position::Held);
    }
}
