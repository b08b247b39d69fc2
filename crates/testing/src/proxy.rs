//! TCP proxies in front of one ZooKeeper server, to cut a member's connection (and so expire its session), or to
//! make it go silent, without touching anyone else's.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};
use zookeeper_client::{Client, SessionId, SessionState};

use super::{Cluster, session_listed, timing, wait_for};

/// A TCP proxy on `127.0.0.1:<random port>` forwarding every connection to one upstream server. [`cut`](Self::cut)
/// closes every live connection at once and closes each new one right after accepting it, until
/// [`heal`](Self::heal). Must be created inside the test's runtime; its tasks are aborted on drop.
///
/// Give each member whose connection a test cuts its own proxy, and connect it through
/// [`with_chroot`](super::with_chroot)`(&proxy, namespace)`.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    cut: bool,
    next_id: u64,
    connections: HashMap<u64, Connection>,
    /// [`Proxy::lose_reply_to_next`] or [`Proxy::cut_after`], waiting for its request.
    trigger: Option<Trigger>,
    /// [`Proxy::watch_for`]: requests to count as they come.
    sightings: Vec<(Trigger, Arc<std::sync::atomic::AtomicU64>)>,
}

/// Counts the requests of one kind that reached a [`Proxy`] since [`Proxy::watch_for`]: a way to know that a client
/// has sent a request, and so to place a fault after it.
#[derive(Clone, Debug)]
pub struct Sighting(Arc<std::sync::atomic::AtomicU64>);

impl Sighting {
    /// How many such requests the proxy has forwarded to the server so far.
    pub fn count(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A request that loses its reply when it comes: the `left`-th next one of type `opcode` whose bytes contain
/// `needle`; then the proxy closes that connection, or (`cut`) cuts.
#[derive(Clone)]
struct Trigger {
    opcode: i32,
    needle: Vec<u8>,
    left: u32,
    cut: bool,
}

impl Trigger {
    fn matches(&self, opcode: i32, frame: &[u8]) -> bool {
        opcode == self.opcode && (self.needle.is_empty() || frame.windows(self.needle.len()).any(|w| w == self.needle))
    }
}

/// A relayed connection: duplicates of its sockets (to shut them down from `cut`, synchronously) and its task.
struct Connection {
    sockets: Vec<std::net::TcpStream>,
    task: AbortHandle,
}

impl Connection {
    fn close(&self) {
        for socket in &self.sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
        self.task.abort();
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("cut", &self.is_cut())
            .finish()
    }
}

/// Binds a listener on a random port of 127.0.0.1, panicking with the cause if that is impossible.
async fn bind_loopback() -> (TcpListener, SocketAddr) {
    let bound = match TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener.local_addr().map(|addr| (listener, addr)),
        Err(err) => Err(err),
    };
    bound.unwrap_or_else(|err| panic!("cannot bind a proxy on 127.0.0.1: {err}"))
}

impl Proxy {
    /// Starts a proxy to `upstream` (e.g. [`ServerHandle::addr`](super::ServerHandle::addr)).
    ///
    /// # Panics
    /// If no port of 127.0.0.1 can be bound.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let (listener, addr) = bind_loopback().await;
        let shared = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn(accept_loop(listener, upstream, shared.clone()));
        Proxy { addr, upstream, shared, accept }
    }

    /// `127.0.0.1:PORT`: connect clients here (append a chroot as usual).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The connect string: the endpoint.
    pub fn connect_string(&self) -> String {
        self.endpoint()
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Closes every live connection now (both sides: the client sees end-of-stream, the server a closed connection)
    /// and closes new ones right after accepting them, until [`heal`](Self::heal).
    pub fn cut(&self) {
        let connections = {
            let mut state = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            state.cut = true;
            std::mem::take(&mut state.connections)
        };
        for connection in connections.values() {
            connection.close();
        }
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).cut = false;
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).cut
    }

    /// [`cut`](Self::cut), wait `outage`, [`heal`](Self::heal): a connection loss of that length.
    pub async fn cut_for(&self, outage: Duration) {
        self.cut();
        tokio::time::sleep(outage).await;
        self.heal();
    }

    /// Loses the reply to the next request of type `opcode` (ZooKeeper's request types: `14` a write `multi`, `22`
    /// a read `multi`, `1` a create, `2` a delete, `5` a `set_data`): the request reaches the server, which applies
    /// it, but its connection closes before the reply comes back (nothing the server sends on it after that request
    /// is relayed). The client sees the connection lost with the request's outcome unknown, and reconnects through
    /// the proxy on the same session. One-shot.
    pub fn lose_reply_to_next(&self, opcode: i32) {
        self.state().trigger = Some(Trigger { opcode, needle: Vec::new(), left: 1, cut: false });
    }

    /// [`cut`](Self::cut)s right after the `nth` next request of type `opcode` (see
    /// [`lose_reply_to_next`](Self::lose_reply_to_next)) reaches the server, and before its reply comes back: the
    /// client is stopped at a chosen point of a chain of requests, with that request applied. One-shot; stays cut
    /// until [`heal`](Self::heal).
    pub fn cut_after(&self, opcode: i32, nth: u32) {
        self.state().trigger = Some(Trigger { opcode, needle: Vec::new(), left: nth.max(1), cut: true });
    }

    /// [`cut_after`](Self::cut_after) the next request of type `opcode` whose bytes contain `needle` (a path, or a
    /// node's data): stops a client at the request that writes, say, a given state.
    pub fn cut_after_containing(&self, opcode: i32, needle: &[u8]) {
        self.state().trigger = Some(Trigger { opcode, needle: needle.to_vec(), left: 1, cut: true });
    }

    /// From now on, counts the requests of type `opcode` whose bytes contain `needle` (empty for any) that the proxy
    /// forwards to the server, on every connection (see [`lose_reply_to_next`](Self::lose_reply_to_next) for the
    /// types). The requests themselves go on as usual. E.g. a client's `exists` on a node (`3`, the node's path) says
    /// it has started to watch it.
    pub fn watch_for(&self, opcode: i32, needle: &[u8]) -> Sighting {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let matcher = Trigger { opcode, needle: needle.to_vec(), left: 0, cut: false };
        self.state().sightings.push((matcher, count.clone()));
        Sighting(count)
    }

    /// Whether [`lose_reply_to_next`](Self::lose_reply_to_next) or [`cut_after`](Self::cut_after) is still
    /// waiting for its request.
    pub fn reply_loss_pending(&self) -> bool {
        self.state().trigger.is_some()
    }

    /// How many connections are being relayed now.
    pub fn live_connections(&self) -> usize {
        self.state().connections.len()
    }

    /// Expires `session` (its id as ZooKeeper stores it in `ephemeralOwner`, `client.session_id().0`), a session
    /// connected through this proxy, for real, without its `Client`: cuts the proxy, waits until the server behind it
    /// no longer lists the session (its `dump`; so the session's ephemeral nodes are gone), then heals the proxy. The client learns that its session expired when it reconnects, or on its own 7/5
    /// of the session timeout after it last heard from the server. Returns how long it took.
    ///
    /// Use it on code under test that owns its client; the session can be read from ZooKeeper, e.g. with
    /// [`sole_holder`](super::sole_holder). With the `Client` at hand, [`expire`] also waits until the client
    /// reports `Expired`.
    ///
    /// # Panics
    /// If the server still lists the session after `deadline` (a session longer than that, or not behind this proxy).
    pub async fn expire_session(&self, session: i64, deadline: Duration) -> Duration {
        let session = SessionId(session);
        let started = Instant::now();
        self.cut();
        let upstream = self.upstream;
        wait_dropped(upstream, session, deadline).await;
        self.heal();
        started.elapsed()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Cluster for Proxy {
    fn connect_string(&self) -> String {
        self.endpoint()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        let connections = std::mem::take(&mut self.shared.lock().unwrap_or_else(PoisonError::into_inner).connections);
        for connection in connections.values() {
            connection.close();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Mutex<State>>) {
    loop {
        let inbound = match listener.accept().await {
            Ok((inbound, _)) => inbound,
            Err(err) => {
                tracing::warn!("proxy to {upstream}: accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let duplicate = match duplicate(&inbound) {
            Ok(duplicate) => duplicate,
            Err(err) => {
                tracing::warn!("proxy to {upstream}: cannot duplicate a socket: {err}");
                continue;
            }
        };
        // Registering under the lock that `cut` takes: a connection is either refused here or closed by `cut`.
        let mut state = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if state.cut {
            let _ = duplicate.shutdown(Shutdown::Both);
            continue;
        }
        let id = state.next_id;
        state.next_id += 1;
        let task = tokio::spawn(relay(id, inbound, upstream, shared.clone()));
        state.connections.insert(id, Connection { sockets: vec![duplicate], task: task.abort_handle() });
    }
}

async fn relay(id: u64, inbound: TcpStream, upstream: SocketAddr, shared: Arc<Mutex<State>>) {
    if let Ok(outbound) = TcpStream::connect(upstream).await {
        let registered = match duplicate(&outbound) {
            Ok(duplicate) => match shared.lock().unwrap_or_else(PoisonError::into_inner).connections.get_mut(&id) {
                Some(connection) => {
                    connection.sockets.push(duplicate);
                    true
                }
                None => false, // cut while connecting
            },
            Err(_) => false,
        };
        if registered {
            relay_frames(inbound, outbound, &shared).await;
            if shared.lock().unwrap_or_else(PoisonError::into_inner).cut {
                cut_all(&shared);
            }
        }
    }
    shared.lock().unwrap_or_else(PoisonError::into_inner).connections.remove(&id);
}

/// Relays both ways until either side closes. The client's side is read frame by frame (a 4-byte length, then the
/// request: after the session's connect request, `xid` and request type come first), so that a request whose reply
/// is to be lost closes the connection once it is sent and before anything more comes back.
async fn relay_frames(inbound: TcpStream, outbound: TcpStream, shared: &Mutex<State>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_in, mut client_out) = inbound.into_split();
    let (mut server_in, mut server_out) = outbound.into_split();
    let replies_held = std::sync::atomic::AtomicBool::new(false);
    let to_server = async {
        let mut first = true;
        loop {
            let mut length = [0u8; 4];
            client_in.read_exact(&mut length).await?;
            let size = u32::from_be_bytes(length) as usize;
            let mut frame = vec![0u8; size];
            client_in.read_exact(&mut frame).await?;
            let opcode = (!first && size >= 8).then(|| i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]));
            first = false;
            let lose = {
                let mut state = shared.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(opcode) = opcode {
                    for (matcher, count) in &state.sightings {
                        if matcher.matches(opcode, &frame) {
                            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                }
                match &mut state.trigger {
                    Some(trigger) if opcode.is_some_and(|opcode| trigger.matches(opcode, &frame)) => {
                        trigger.left -= 1;
                        if trigger.left == 0 {
                            let cut = trigger.cut;
                            state.trigger = None;
                            Some(cut)
                        } else {
                            None
                        }
                    }
                    _ => None,
                }
            };
            if lose.is_some() {
                replies_held.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            server_out.write_all(&length).await?;
            server_out.write_all(&frame).await?;
            if let Some(cut) = lose {
                // Time for the server to apply it; its reply is dropped meanwhile. Then this connection closes (and
                // with `cut`, every connection, new ones refused).
                tokio::time::sleep(Duration::from_millis(300)).await;
                shared.lock().unwrap_or_else(PoisonError::into_inner).cut |= cut;
                return Ok::<(), std::io::Error>(());
            }
        }
    };
    let to_client = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = server_in.read(&mut buffer).await?;
            if read == 0 {
                return Ok::<(), std::io::Error>(());
            }
            if !replies_held.load(std::sync::atomic::Ordering::SeqCst) {
                client_out.write_all(&buffer[..read]).await?;
            }
        }
    };
    tokio::select! {
        _ = to_server => {}
        _ = to_client => {}
    }
}

/// Closes every relayed connection (the proxy is cut).
fn cut_all(shared: &Mutex<State>) {
    let connections = std::mem::take(&mut shared.lock().unwrap_or_else(PoisonError::into_inner).connections);
    for connection in connections.values() {
        connection.close();
    }
}

/// Waits until the server at `upstream` no longer lists `session` (its `dump`): its ephemeral nodes are gone.
async fn wait_dropped(upstream: SocketAddr, session: SessionId, deadline: Duration) {
    wait_for(&format!("the server at {upstream} to drop session {session}"), deadline, || async {
        match session_listed(upstream, session).await {
            Ok(false) => Ok(()),
            Ok(true) => Err("`dump` still lists it".to_string()),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
}

/// A second handle on the same socket, to shut it down while the relay task owns the original.
fn duplicate(stream: &TcpStream) -> std::io::Result<std::net::TcpStream> {
    Ok(std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?))
}

/// Expires `client`'s session for real, through the `proxy` it is connected through: cuts the proxy, waits until
/// the client reports [`SessionState::Expired`] (it does so on its own 7/5 of the negotiated session timeout after
/// it last heard from the server), and until the server behind the proxy no longer lists the session (its `dump`;
/// so the session's ephemeral nodes are gone), then heals the proxy. Returns how long it took. Works with any
/// upstream server: an ensemble's followers list global sessions too.
///
/// # Panics
/// Naming what did not happen in time (within twice the session timeout plus 5 s, scaled by
/// [`timing`](super::timing)).
pub async fn expire(client: &Client, proxy: &Proxy) -> Duration {
    let started = Instant::now();
    let session = client.session_id();
    let session_timeout = client.session_timeout();
    let mut watcher = client.state_watcher();
    let deadline = timing(session_timeout * 2 + Duration::from_secs(5));
    proxy.cut();
    loop {
        match watcher.state() {
            SessionState::Expired => break,
            state if state.is_terminated() => panic!("session {session} ended as {state}, not Expired"),
            _ => {}
        }
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() || tokio::time::timeout(left, watcher.changed()).await.is_err() {
            panic!(
                "session {session} (timeout {session_timeout:?}) behind proxy {} did not report Expired within \
                 {deadline:?} (is it connected through this proxy?); last state: {}",
                proxy.endpoint(),
                watcher.peek_state()
            );
        }
    }
    let upstream = proxy.upstream();
    wait_dropped(upstream, session, deadline).await;
    proxy.heal();
    started.elapsed()
}

/// A TCP proxy in front of one server that can black-hole its connections: [`freeze`](Self::freeze) stops
/// forwarding bytes (connections stay open, nothing answers, as with a paused server or a silent network partition,
/// so a client notices only through its own timeout), at once or, with [`freeze_at`](Self::freeze_at), as a chosen
/// request comes; [`thaw`](Self::thaw) closes every connection made so far and forwards new ones again. Tasks are
/// aborted on drop.
pub struct FreezingProxy {
    addr: SocketAddr,
    frozen: Arc<tokio::sync::watch::Sender<bool>>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// [`FreezingProxy::freeze_at`], waiting for its request.
    trigger: Arc<Mutex<Option<Trigger>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FreezingProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreezingProxy").field("addr", &self.addr).field("frozen", &*self.frozen.borrow()).finish()
    }
}

impl FreezingProxy {
    /// Starts a proxy to `upstream`, forwarding.
    ///
    /// # Panics
    /// If no port of 127.0.0.1 can be bound.
    pub async fn start(upstream: SocketAddr) -> FreezingProxy {
        let (listener, addr) = bind_loopback().await;
        let frozen = Arc::new(tokio::sync::watch::Sender::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let trigger = Arc::new(Mutex::new(None));
        let (frozen_for_accept, registry, armed) = (frozen.clone(), connections.clone(), trigger.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (freezer, armed) = (frozen_for_accept.clone(), armed.clone());
                let task = tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(upstream).await else { return };
                    let ((client_read, client_write), (server_read, server_write)) =
                        (inbound.into_split(), outbound.into_split());
                    let frozen = freezer.subscribe();
                    tokio::join!(
                        pump_requests(client_read, server_write, freezer, armed),
                        pump(server_read, client_write, frozen)
                    );
                });
                registry.lock().unwrap_or_else(PoisonError::into_inner).push(task.abort_handle());
            }
        });
        FreezingProxy { addr, frozen, connections, trigger, accept }
    }

    /// `127.0.0.1:PORT`: connect clients here (append a chroot as usual).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Stops forwarding: every connection, old or new, goes silent.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// [`freeze`](Self::freeze)s as the next request of type `opcode` (ZooKeeper's request types: `1` a create, `4`
    /// a `get_data`, `14` a write `multi`, `22` a read `multi`...) whose bytes contain `needle` (a path; empty for
    /// any) comes from the client, before forwarding it: the client is stopped at a chosen request, which the server
    /// never sees, and it waits for an answer that does not come until it gives the connection up. One-shot; stays
    /// frozen until [`thaw`](Self::thaw). [`freeze_pending`](Self::freeze_pending) says whether it came.
    pub fn freeze_at(&self, opcode: i32, needle: &[u8]) {
        *self.trigger.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Trigger { opcode, needle: needle.to_vec(), left: 1, cut: false });
    }

    /// Whether [`freeze_at`](Self::freeze_at) is still waiting for its request.
    pub fn freeze_pending(&self) -> bool {
        self.trigger.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// Whether the proxy is frozen (by [`freeze`](Self::freeze), or by [`freeze_at`](Self::freeze_at)'s request).
    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// Closes every connection made so far and forwards new ones again.
    pub fn thaw(&self) {
        for connection in self.connections.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            connection.abort();
        }
        self.frozen.send_replace(false);
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for connection in self.connections.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            connection.abort();
        }
    }
}

/// Copies the client's requests from `from` to `to` frame by frame (a 4-byte length, then the request: after the
/// session's connect request, `xid` and request type come first), holding them while frozen; freezes, before
/// forwarding it, on the request that `trigger` waits for.
async fn pump_requests(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    freezer: Arc<tokio::sync::watch::Sender<bool>>,
    trigger: Arc<Mutex<Option<Trigger>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut frozen = freezer.subscribe();
    let mut first = true;
    loop {
        let mut length = [0u8; 4];
        if from.read_exact(&mut length).await.is_err() {
            break;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
        if from.read_exact(&mut frame).await.is_err() {
            break;
        }
        let opcode = (!first && frame.len() >= 8).then(|| i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]));
        first = false;
        if let Some(opcode) = opcode {
            let mut armed = trigger.lock().unwrap_or_else(PoisonError::into_inner);
            if armed.as_ref().is_some_and(|trigger| trigger.matches(opcode, &frame)) {
                *armed = None;
                freezer.send_replace(true);
            }
        }
        if frozen.wait_for(|frozen| !*frozen).await.is_err()
            || to.write_all(&length).await.is_err()
            || to.write_all(&frame).await.is_err()
        {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Copies `from` to `to`, holding what it read while frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if frozen.wait_for(|frozen| !*frozen).await.is_err() || to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
