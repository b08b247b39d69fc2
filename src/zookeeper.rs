//! The ZooKeeper requests this crate sends, as a trait: zookeeper-client's [`Client`] in production, the in-memory
//! model in the deterministic simulation (`src/sim/`).
//!
//! Everything that talks to ZooKeeper (the request path that performs the decision core's operations, the shared
//! shared set's protocol, checkpoints, start-up) is written once against [`ZooKeeper`], as FoundationDB's actors are
//! written against its `INetwork`: the simulation then runs the code that ships, error handling included, instead of
//! a copy of it.
//!
//! The trait keeps zookeeper-client's semantics, which the code above relies on: a request is queued when the method
//! is called (requests of one session reach the server in call order), and the returned future only awaits its reply;
//! errors are the client's [`Error`](zookeeper_client::Error). It adds the two things the simulation must control:
//! time ([`ZooKeeper::sleep`]) and randomness ([`ZooKeeper::random`]).

use std::future::Future;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use zookeeper_client::{Client, EventType, MultiReadResult, MultiWriteError, MultiWriteResult, SessionState};

pub(crate) use zookeeper_client::{Error as ZkError, Stat};

/// A node's stat with every field 0 (the first ids 1), for unit tests to fill in what they need.
#[cfg(test)]
pub(crate) fn test_stat() -> Stat {
    Stat {
        czxid: 1,
        mzxid: 1,
        pzxid: 1,
        ctime: 0,
        mtime: 0,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 0,
        num_children: 0,
    }
}

use crate::acl::NodeAcls;

/// How a node is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Persistent,
    Ephemeral,
    EphemeralSequential,
}

/// One operation of a write `multi`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WriteOp<'a> {
    Create {
        path: &'a str,
        data: &'a [u8],
        mode: Mode,
        acls: &'a NodeAcls,
    },
    Delete {
        path: &'a str,
        version: Option<i32>,
    },
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: Option<i32>,
    },
    /// Fails the `multi` unless the node exists (at this data version, if given).
    Check {
        path: &'a str,
        version: Option<i32>,
    },
}

/// The outcome of one operation of a write `multi` that succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// The created node's path (with its sequence, if sequential) and stat (invalid from servers before
    /// 3.7.2/3.8.2/3.9.0, ZOOKEEPER-4026).
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    Set(Stat),
    Checked,
}

/// How a write `multi` failed: the request as a whole (`index` `None`: its outcome is unknown if the error is a lost
/// connection), or the operation at `index` (nothing was applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MultiError {
    pub index: Option<usize>,
    pub error: ZkError,
}

/// One operation of a read `multi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadOp<'a> {
    Data(&'a str),
    Children(&'a str),
}

/// The outcome of one operation of a read `multi` (each succeeds or fails on its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadResult {
    Data(Vec<u8>, Stat),
    Children(Vec<String>),
    Failed(ZkError),
}

/// What a one-shot watch saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
    /// The session ended (the watch will never fire).
    SessionEnded(SessionState),
}

impl WatchEvent {
    /// The error a request of the ended session would get, if the event says the session ended.
    pub fn session_error(self) -> Option<ZkError> {
        match self {
            WatchEvent::SessionEnded(SessionState::AuthFailed) => Some(ZkError::AuthFailed),
            WatchEvent::SessionEnded(SessionState::Closed) => Some(ZkError::ClientClosed),
            WatchEvent::SessionEnded(_) => Some(ZkError::SessionExpired),
            _ => None,
        }
    }
}

/// The requests a session can send (see the module docs). Every method queues its request at once.
pub(crate) trait ZooKeeper: Clone + Send + Sync + 'static {
    /// A one-shot watch: resolves once, with what fired it.
    type Watch: Future<Output = WatchEvent> + Send + Unpin + 'static;

    /// The session's id (a node's `ephemeralOwner` when this session created it).
    fn session_id(&self) -> i64;
    /// The chroot paths are relative to (`/` for none).
    fn chroot(&self) -> &str;

    /// Creates a node; returns its stat and, for a sequential node, its sequence text (appended to `path`).
    fn create<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
        mode: Mode,
        acls: &'a NodeAcls,
    ) -> impl Future<Output = Result<(Stat, String), ZkError>> + Send + 'a;
    /// `mkdir -p`: creates the node and its missing ancestors, persistent; never `NodeExists`.
    fn mkdir(&self, path: &str, acls: &NodeAcls) -> impl Future<Output = Result<(), ZkError>> + Send;
    fn delete(&self, path: &str, version: Option<i32>) -> impl Future<Output = Result<(), ZkError>> + Send;
    fn get_data(&self, path: &str) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send;
    fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat, Self::Watch), ZkError>> + Send;
    fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat, ZkError>> + Send;
    fn check_stat(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send;
    /// Stat and a watch that fires on creation, deletion or a data change.
    fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<Stat>, Self::Watch), ZkError>> + Send;
    fn list_children(&self, path: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send;
    fn get_and_watch_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat, Self::Watch), ZkError>> + Send;
    /// The paths of this session's ephemeral nodes that start with `prefix` (a string prefix; ZooKeeper 3.6+).
    fn list_ephemerals(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send;
    /// Brings the server this session reads from up to date with the leader (for `path`'s subtree).
    fn sync(&self, path: &str) -> impl Future<Output = Result<(), ZkError>> + Send;
    /// All or nothing; an empty `multi` succeeds without a request.
    fn multi_write(&self, ops: &[WriteOp<'_>]) -> impl Future<Output = Result<Vec<Written>, MultiError>> + Send;
    /// One consistent read of several nodes; each operation succeeds or fails on its own.
    fn multi_read(&self, ops: &[ReadOp<'_>]) -> impl Future<Output = Result<Vec<ReadResult>, ZkError>> + Send;

    /// The time, on the clock the session lives by.
    fn now(&self) -> Instant;
    /// Waits, on that clock.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
    /// 64 random bits (jitter, node name prefixes).
    fn random(&self) -> u64;
}

impl ZooKeeper for Client {
    type Watch = BoxFuture<'static, WatchEvent>;

    fn session_id(&self) -> i64 {
        Client::session_id(self).0
    }

    fn chroot(&self) -> &str {
        self.path()
    }

    fn create<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
        mode: Mode,
        acls: &'a NodeAcls,
    ) -> impl Future<Output = Result<(Stat, String), ZkError>> + Send + 'a {
        let sequential = mode == Mode::EphemeralSequential;
        let created = Client::create(self, path, data, &create_options(acls, mode));
        async move {
            let (stat, sequence) = created.await?;
            Ok((stat, if sequential { sequence.to_string() } else { String::new() }))
        }
    }

    fn mkdir(&self, path: &str, acls: &NodeAcls) -> impl Future<Output = Result<(), ZkError>> + Send {
        let (client, path, acls) = (self.clone(), path.to_owned(), acls.clone());
        async move { Client::mkdir(&client, &path, &acls.persistent()).await }
    }

    fn delete(&self, path: &str, version: Option<i32>) -> impl Future<Output = Result<(), ZkError>> + Send {
        Client::delete(self, path, version)
    }

    fn get_data(&self, path: &str) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send {
        Client::get_data(self, path)
    }

    fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat, Self::Watch), ZkError>> + Send {
        let watched = Client::get_and_watch_data(self, path);
        async move { watched.await.map(|(data, stat, watcher)| (data, stat, watch(watcher))) }
    }

    fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat, ZkError>> + Send {
        Client::set_data(self, path, data, version)
    }

    fn check_stat(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send {
        Client::check_stat(self, path)
    }

    fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<Stat>, Self::Watch), ZkError>> + Send {
        let watched = Client::check_and_watch_stat(self, path);
        async move { watched.await.map(|(stat, watcher)| (stat, watch(watcher))) }
    }

    fn list_children(&self, path: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        Client::list_children(self, path)
    }

    fn get_and_watch_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat, Self::Watch), ZkError>> + Send {
        let watched = Client::get_and_watch_children(self, path);
        async move { watched.await.map(|(children, stat, watcher)| (children, stat, watch(watcher))) }
    }

    fn list_ephemerals(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        Client::list_ephemerals(self, prefix)
    }

    fn sync(&self, path: &str) -> impl Future<Output = Result<(), ZkError>> + Send {
        Client::sync(self, path)
    }

    fn multi_write(&self, ops: &[WriteOp<'_>]) -> impl Future<Output = Result<Vec<Written>, MultiError>> + Send {
        let mut writer = self.new_multi_writer();
        let built = ops.iter().enumerate().try_for_each(|(index, op)| {
            let added = match *op {
                WriteOp::Create { path, data, mode, acls } => {
                    writer.add_create(path, data, &create_options(acls, mode))
                }
                WriteOp::Delete { path, version } => writer.add_delete(path, version),
                WriteOp::SetData { path, data, version } => writer.add_set_data(path, data, version),
                WriteOp::Check { path, version } => writer.add_check_version(path, version.unwrap_or(-1)),
            };
            added.map_err(|error| MultiError { index: Some(index), error })
        });
        let committed = built.map(|()| writer.commit());
        async move {
            let results = committed?.await.map_err(|err| match err {
                MultiWriteError::RequestFailed { source } => MultiError { index: None, error: source },
                MultiWriteError::OperationFailed { index, source } => MultiError { index: Some(index), error: source },
            })?;
            Ok(results
                .into_iter()
                .map(|result| match result {
                    MultiWriteResult::Create { path, stat } => Written::Created { path, stat },
                    MultiWriteResult::Delete => Written::Deleted,
                    MultiWriteResult::SetData { stat } => Written::Set(stat),
                    _ => Written::Checked,
                })
                .collect())
        }
    }

    fn multi_read(&self, ops: &[ReadOp<'_>]) -> impl Future<Output = Result<Vec<ReadResult>, ZkError>> + Send {
        let mut reader = self.new_multi_reader();
        let built = ops.iter().try_for_each(|op| match *op {
            ReadOp::Data(path) => reader.add_get_data(path),
            ReadOp::Children(path) => reader.add_get_children(path),
        });
        let committed = built.map(|()| reader.commit());
        async move {
            Ok(committed?
                .await?
                .into_iter()
                .map(|result| match result {
                    MultiReadResult::Data { data, stat } => ReadResult::Data(data, stat),
                    MultiReadResult::Children { children } => ReadResult::Children(children),
                    MultiReadResult::Error { err } => ReadResult::Failed(err),
                    _ => ReadResult::Failed(ZkError::UnexpectedError("an unknown multi read result".into())),
                })
                .collect())
        }
    }

    fn now(&self) -> Instant {
        // Tokio's clock: paused and advanced with the runtime's in tests that control time.
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    fn random(&self) -> u64 {
        // A v4 UUID is 122 random bits.
        uuid::Uuid::new_v4().as_u64_pair().0
    }
}

/// A client watcher as a future of what fired it. zookeeper-client 0.11 panics inside `OneshotWatcher::changed` when
/// it drops the watch's sender without an event (its session task ended, e.g. the client was closed or the runtime is
/// shutting down); that is the end of the session, reported here as `Closed` instead of a panic in the caller's task.
fn watch(watcher: zookeeper_client::OneshotWatcher) -> BoxFuture<'static, WatchEvent> {
    async move {
        let event = std::panic::AssertUnwindSafe(watcher.changed()).catch_unwind().await;
        match event {
            Err(_) => WatchEvent::SessionEnded(SessionState::Closed),
            Ok(event) => match event.event_type {
                EventType::Session => WatchEvent::SessionEnded(event.session_state),
                EventType::NodeCreated => WatchEvent::Created,
                EventType::NodeDeleted => WatchEvent::Deleted,
                EventType::NodeDataChanged => WatchEvent::DataChanged,
                EventType::NodeChildrenChanged => WatchEvent::ChildrenChanged,
            },
        }
    }
    .boxed()
}

/// The options of a node created in `mode` with `acls`.
fn create_options(acls: &NodeAcls, mode: Mode) -> zookeeper_client::CreateOptions<'_> {
    match mode {
        Mode::Persistent => acls.persistent(),
        Mode::Ephemeral => acls.ephemeral(),
        Mode::EphemeralSequential => acls.ephemeral_sequential(),
    }
}
