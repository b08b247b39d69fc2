//! [`SimClient`], the [`ZooKeeper`] implementation the simulated processes run on: each call becomes a request on
//! its session's connection, and a future that the network completes (a reply, a watch event, a timer).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{Answer, Net, Request, Response, Ticket, lock};
use crate::acl::NodeAcls;
use crate::sim::zk::{self as model, Mode as ModelMode, SessionId};
use crate::zookeeper::{Mode, MultiError, ReadOp, ReadResult, Stat, WatchEvent, WriteOp, Written, ZkError, ZooKeeper};

/// A simulated process's client of one session.
#[derive(Clone)]
pub(crate) struct SimClient {
    net: Arc<Mutex<Net>>,
    session: SessionId,
}

impl std::fmt::Debug for SimClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimClient").field("session", &self.session).finish()
    }
}

impl SimClient {
    pub fn new(net: Arc<Mutex<Net>>, session: SessionId) -> Self {
        SimClient { net, session }
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Sends a request now; the future resolves with its answer.
    fn send(&self, request: Request) -> Reply {
        let ticket = lock(&self.net).submit(self.session, request);
        Reply { net: self.net.clone(), ticket }
    }

    fn watch_ticket(&self) -> Ticket {
        lock(&self.net).ticket()
    }

    fn watch(&self, ticket: Ticket) -> SimWatch {
        SimWatch { net: self.net.clone(), ticket }
    }
}

/// A pending request's answer.
struct Reply {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for Reply {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let mut net = lock(&self.net);
        match net.answers.remove(&self.ticket) {
            Some(answer) => Poll::Ready(answer),
            None => {
                net.wakers.insert(self.ticket, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A one-shot watch of the simulation.
pub(crate) struct SimWatch {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for SimWatch {
    type Output = WatchEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WatchEvent> {
        let mut net = lock(&self.net);
        match net.watch_events.remove(&self.ticket) {
            Some(event) => Poll::Ready(event),
            None => {
                net.wakers.insert(self.ticket, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A timer of the simulation.
struct Sleep {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut net = lock(&self.net);
        if net.due(self.ticket) {
            Poll::Ready(())
        } else {
            net.wakers.insert(self.ticket, cx.waker().clone());
            Poll::Pending
        }
    }
}

fn model_mode(mode: Mode) -> ModelMode {
    match mode {
        Mode::Persistent => ModelMode::Persistent,
        Mode::Ephemeral => ModelMode::Ephemeral,
        Mode::EphemeralSequential => ModelMode::EphemeralSequential,
    }
}

/// The answer's error alone (for requests that are not a `multi`).
fn plain<T>(result: Result<T, (Option<usize>, ZkError)>) -> Result<T, ZkError> {
    result.map_err(|(_, e)| e)
}

fn unexpected<T>() -> Result<T, ZkError> {
    Err(ZkError::UnexpectedError("the simulated server answered something else".into()))
}

impl ZooKeeper for SimClient {
    type Watch = SimWatch;

    fn session_id(&self) -> i64 {
        self.session as i64
    }

    fn chroot(&self) -> &str {
        "/"
    }

    fn create<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
        mode: Mode,
        _acls: &'a NodeAcls,
    ) -> impl Future<Output = Result<(Stat, String), ZkError>> + Send + 'a {
        let reply = self.send(Request::Create { path: path.to_owned(), data: data.to_vec(), mode: model_mode(mode) });
        async move {
            match plain(reply.await)? {
                Response::Created(created, stat) => {
                    let sequence = created.strip_prefix(path).unwrap_or_default().to_owned();
                    Ok((stat, if mode == Mode::EphemeralSequential { sequence } else { String::new() }))
                }
                _ => unexpected(),
            }
        }
    }

    fn mkdir(&self, path: &str, acls: &NodeAcls) -> impl Future<Output = Result<(), ZkError>> + Send {
        // As zookeeper-client's: create each missing node from the top, one request each, NodeExists is fine.
        let (client, path, acls) = (self.clone(), path.to_owned(), acls.clone());
        async move {
            let ends: Vec<usize> =
                path.match_indices('/').map(|(i, _)| i).skip(1).chain(std::iter::once(path.len())).collect();
            for end in ends {
                match client.create(&path[..end], b"", Mode::Persistent, &acls).await {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(())
        }
    }

    fn delete(&self, path: &str, version: Option<i32>) -> impl Future<Output = Result<(), ZkError>> + Send {
        let reply = self.send(Request::Delete { path: path.to_owned(), version });
        async move { plain(reply.await).map(drop) }
    }

    fn get_data(&self, path: &str) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send {
        let reply = self.send(Request::GetData { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Data(data, stat) => Ok((data, stat)),
                _ => unexpected(),
            }
        }
    }

    fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::GetData { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Data(data, stat) => Ok((data, stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat, ZkError>> + Send {
        let reply = self.send(Request::SetData { path: path.to_owned(), data: data.to_vec(), version });
        async move {
            match plain(reply.await)? {
                Response::Stat(stat) => Ok(stat),
                _ => unexpected(),
            }
        }
    }

    fn check_stat(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send {
        let reply = self.send(Request::Exists { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Exists(stat) => Ok(stat),
                _ => unexpected(),
            }
        }
    }

    fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<Stat>, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::Exists { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Exists(stat) => Ok((stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn list_children(&self, path: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        let reply = self.send(Request::Children { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Children(children, _) => Ok(children),
                _ => unexpected(),
            }
        }
    }

    fn get_and_watch_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::Children { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Children(children, stat) => Ok((children, stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn list_ephemerals(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        let reply = self.send(Request::Ephemerals { prefix: prefix.to_owned() });
        async move {
            match plain(reply.await)? {
                Response::Paths(paths) => Ok(paths),
                _ => unexpected(),
            }
        }
    }

    fn sync(&self, _path: &str) -> impl Future<Output = Result<(), ZkError>> + Send {
        let reply = self.send(Request::Sync);
        async move { plain(reply.await).map(drop) }
    }

    fn multi_write(&self, ops: &[WriteOp<'_>]) -> impl Future<Output = Result<Vec<Written>, MultiError>> + Send {
        let ops: Vec<model::WriteOp> = ops
            .iter()
            .map(|op| match *op {
                WriteOp::Create { path, data, mode, .. } => {
                    model::WriteOp::Create { path: path.to_owned(), data: data.to_vec(), mode: model_mode(mode) }
                }
                WriteOp::Delete { path, version } => model::WriteOp::Delete { path: path.to_owned(), version },
                WriteOp::SetData { path, data, version } => {
                    model::WriteOp::SetData { path: path.to_owned(), data: data.to_vec(), version }
                }
                WriteOp::Check { path, version } => model::WriteOp::Check { path: path.to_owned(), version },
            })
            .collect();
        // An empty multi is answered by the client without a request.
        let reply = (!ops.is_empty()).then(|| self.send(Request::MultiWrite(ops)));
        async move {
            let Some(reply) = reply else { return Ok(Vec::new()) };
            match reply.await {
                Ok(Response::Written(results)) => Ok(results),
                Ok(_) => Err(MultiError { index: None, error: ZkError::UnexpectedError("not a multi".into()) }),
                Err((index, error)) => Err(MultiError { index, error }),
            }
        }
    }

    fn multi_read(&self, ops: &[ReadOp<'_>]) -> impl Future<Output = Result<Vec<ReadResult>, ZkError>> + Send {
        let ops: Vec<model::ReadOp> = ops
            .iter()
            .map(|op| match *op {
                ReadOp::Data(path) => model::ReadOp::Data { path: path.to_owned() },
                ReadOp::Children(path) => model::ReadOp::Children { path: path.to_owned() },
            })
            .collect();
        let reply = (!ops.is_empty()).then(|| self.send(Request::MultiRead(ops)));
        async move {
            let Some(reply) = reply else { return Ok(Vec::new()) };
            match plain(reply.await)? {
                Response::Read(results) => Ok(results),
                _ => unexpected(),
            }
        }
    }

    fn now(&self) -> Instant {
        lock(&self.net).instant()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let ticket = {
            let mut net = lock(&self.net);
            let at = net.now + duration;
            net.timer(at)
        };
        Sleep { net: self.net.clone(), ticket }
    }

    fn random(&self) -> u64 {
        lock(&self.net).rng.next()
    }
}
