//! A TCP proxy in front of one ZooKeeper server, to cut a member's connection (and so expire its session) without
//! touching anyone else's.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};
use zookeeper_client::{Client, SessionState};

use super::{Cluster, session_listed, timing, wait_for};

/// A TCP proxy on `127.0.0.1:<random port>` forwarding every connection to one upstream server. [`cut`](Self::cut)
/// closes every live connection at once and closes each new one right after accepting it, until
/// [`heal`](Self::heal). Must be created inside the test's runtime; its tasks are aborted on drop.
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

impl Proxy {
    /// Starts a proxy to `upstream` (e.g. [`ServerHandle::addr`](super::ServerHandle::addr)).
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy on 127.0.0.1");
        let addr = listener.local_addr().expect("the proxy's address");
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
            let mut state = self.shared.lock().unwrap();
            state.cut = true;
            std::mem::take(&mut state.connections)
        };
        for connection in connections.values() {
            connection.close();
        }
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.shared.lock().unwrap().cut = false;
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        self.shared.lock().unwrap().cut
    }

    /// [`cut`](Self::cut), wait `outage`, [`heal`](Self::heal): a connection loss of that length.
    pub async fn cut_for(&self, outage: Duration) {
        self.cut();
        tokio::time::sleep(outage).await;
        self.heal();
    }

    /// How many connections are being relayed now.
    pub fn live_connections(&self) -> usize {
        self.shared.lock().unwrap().connections.len()
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
        let connections = std::mem::take(&mut self.shared.lock().unwrap().connections);
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
        let mut state = shared.lock().unwrap();
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

async fn relay(id: u64, mut inbound: TcpStream, upstream: SocketAddr, shared: Arc<Mutex<State>>) {
    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
        let registered = match duplicate(&outbound) {
            Ok(duplicate) => match shared.lock().unwrap().connections.get_mut(&id) {
                Some(connection) => {
                    connection.sockets.push(duplicate);
                    true
                }
                None => false, // cut while connecting
            },
            Err(_) => false,
        };
        if registered {
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        }
    }
    shared.lock().unwrap().connections.remove(&id);
}

/// A second handle on the same socket, to shut it down while the relay task owns the original.
fn duplicate(stream: &TcpStream) -> std::io::Result<std::net::TcpStream> {
    Ok(std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?))
}

/// Expires `client`'s session for real, through the `proxy` it is connected through: cuts the proxy, waits until
/// the client reports [`SessionState::Expired`] (it does so on its own 7/5 of the negotiated session timeout after
/// it last heard from the server), and until the server behind the proxy no longer lists the session (its `dump`;
/// so the session's ephemeral nodes are gone), then heals the proxy. Returns how long it took. Panics naming what
/// did not happen in time. Works with any upstream server: an ensemble's followers list global sessions too.
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
    wait_for(&format!("the server at {upstream} to drop session {session}"), deadline, || async {
        match session_listed(upstream, session).await {
            Ok(false) => Ok(()),
            Ok(true) => Err("`dump` still lists it".to_string()),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
    proxy.heal();
    started.elapsed()
}
