//! The reconnect relay: a loopback TCP relay between one session's client and the ZooKeeper servers, so that a lost
//! connection is re-established as soon as a server accepts again instead of when the client's back-off ends.
//!
//! zookeeper-client 0.11 waits `100 ms × servers × 2^(attempt - 1)` (plus jitter) between failed reconnection
//! attempts, capped only by the session's own deadline, and none of it can be configured: after a 4 s outage of a
//! single server its next attempt can come 3 s after the server is back, after 6 s up to 6 s (the Java client sleeps
//! at most 1 s). The relay gives the client an endpoint that always accepts at once. For each connection it accepts
//! it finds a server itself: every server in turn, a short pause after a round in which none answered. The client's
//! attempt therefore stays in its handshake, which it waits for `2/5` of the session timeout, rather than failing
//! and backing off, and it goes through as soon as a server accepts.
//!
//! The relay never answers for a server. The bytes the client sends before the first reply (the handshake: connect
//! request, authentication, watches to restore; the client sends nothing else before its session is back) are kept
//! and sent again to the next server when one closes without a reply, as a server that is starting up does, or a
//! port forwarder whose server has gone. That is what the client would send to it anyway. From the first reply on,
//! the relay only copies bytes, and when either side closes or fails it closes the other, so the client sees every
//! connection loss and every stall exactly as it would directly. Session expiry, read timeouts and the client's own
//! deadline are unchanged.
//!
//! The relay lives as long as its session: it stops accepting once the session has ended (closed, expired or
//! failed authentication), and each connection ends with the client's side of it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tracing::{Instrument, debug, trace, warn};
use zookeeper_client::StateWatcher;

/// The pause after a round in which no server answered, doubled after each such round up to [`MAX_PAUSE`]
/// (with ±50 % jitter, so that a fleet's relays do not knock in step).
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between rounds (225 ms with its jitter): a server that accepts again is found within about
/// this long.
const MAX_PAUSE: Duration = Duration::from_millis(150);

/// How long one TCP connection attempt to a server may take before the next server is tried (an address that drops
/// packets, such as a stopped container's, never refuses).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the relay first waits for a server's reply to the handshake before it tries again (doubled at each
/// silent attempt of one connection, up to [`MAX_REPLY_WAIT`]). A server answers a handshake in milliseconds; a
/// port forwarder whose server is still starting (docker-proxy) can accept a connection and hold it for seconds.
const FIRST_REPLY_WAIT: Duration = Duration::from_millis(500);

/// The longest wait for a reply to the handshake (a server in a long GC pause is given this long).
const MAX_REPLY_WAIT: Duration = Duration::from_secs(4);

/// The most handshake bytes kept for a replay. The handshake restores every watch of the session, so it can be large;
/// a client that sends more than this before any reply is not speaking ZooKeeper's protocol.
const MAX_HANDSHAKE: usize = 64 << 20;

/// A running relay: its address, and the means to tell it which session it serves.
#[derive(Debug)]
pub(crate) struct Relay {
    addr: SocketAddr,
    session: oneshot::Sender<StateWatcher>,
}

impl Relay {
    /// Listens on a free loopback port and relays every connection made to it to one of `servers` (`(host, port)`,
    /// resolved at each attempt, so that a server whose address changes is still found).
    ///
    /// The relay stops when the returned value is dropped before [`attach`](Self::attach) (no session was opened),
    /// or after the attached session has ended.
    pub(crate) async fn start(servers: Vec<(String, u16)>) -> std::io::Result<Relay> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (session, session_rx) = oneshot::channel();
        let relay = Shared { servers, last: AtomicUsize::new(usize::MAX) };
        let span = tracing::debug_span!("relay", %addr);
        tokio::spawn(serve(listener, Arc::new(relay), session_rx).instrument(span));
        Ok(Relay { addr, session })
    }

    /// The loopback address to give the client instead of the servers.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ties the relay's life to the session `watcher` follows.
    pub(crate) fn attach(self, watcher: StateWatcher) {
        // An error means the relay already stopped (its runtime is shutting down): nothing to tie.
        let _ = self.session.send(watcher);
    }
}

#[derive(Debug)]
struct Shared {
    servers: Vec<(String, u16)>,
    /// The server that last answered (`usize::MAX` before the first).
    last: AtomicUsize,
}

/// Accepts connections until the session has ended (or was never attached).
async fn serve(listener: TcpListener, shared: Arc<Shared>, session: oneshot::Receiver<StateWatcher>) {
    let mut ended = std::pin::pin!(session_ended(session));
    loop {
        tokio::select! {
            () = &mut ended => break,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    // Detached: a connection ends with the client's side of it, so that the last bytes of a closing
                    // session (its close request) still reach the server after the session is reported closed.
                    tokio::spawn(relay_connection(client, shared.clone()).in_current_span());
                }
                Err(err) => {
                    // Out of file descriptors, typically: the client will retry.
                    warn!(%err, "the reconnect relay cannot accept a connection");
                    tokio::time::sleep(MAX_PAUSE).await;
                }
            },
        }
    }
    debug!("the session ended; the reconnect relay stops");
}

/// Resolves once the attached session is closed, expired or failed authentication, or at once if none was attached.
async fn session_ended(session: oneshot::Receiver<StateWatcher>) {
    let Ok(mut watcher) = session.await else { return };
    if watcher.peek_state().is_terminated() {
        return;
    }
    while !watcher.changed().await.is_terminated() {}
}

/// Relays one client connection: finds a server that answers its handshake, then copies both ways.
async fn relay_connection(mut client: TcpStream, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let servers = shared.servers.len();
    if servers == 0 {
        return;
    }
    let mut handshake = Vec::new();
    let mut pause = FIRST_PAUSE;
    let mut reply_wait = FIRST_REPLY_WAIT;
    // A connection starts at a random server other than the one that answered last (it has just dropped a
    // connection, so it may be going down), as the client itself would shuffle; a fleet's sessions spread out.
    let last = shared.last.load(Ordering::Relaxed);
    let mut first = random() as usize % servers;
    if servers > 1 && first == last {
        first = (first + 1 + random() as usize % (servers - 1)) % servers;
    }
    loop {
        for offset in 0..servers {
            let index = (first + offset) % servers;
            let (host, port) = &shared.servers[index];
            match try_server(&mut client, &mut handshake, host, *port, &mut reply_wait).await {
                Attempt::Answered(mut server) => {
                    shared.last.store(index, Ordering::Relaxed);
                    trace!(server = %format_args!("{host}:{port}"), "relaying");
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    return;
                }
                Attempt::ClientGone => return,
                Attempt::NoAnswer(reason) => trace!(server = %format_args!("{host}:{port}"), %reason, "no answer"),
            }
        }
        // No server answered in this round: pause, unless the client gives up meanwhile.
        let jittered = pause.mul_f64(0.5 + (random() % 1000) as f64 / 1000.0);
        let mut scratch = [0u8; 4096];
        tokio::select! {
            () = tokio::time::sleep(jittered) => {}
            read = client.read(&mut scratch) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) if handshake.len() + n <= MAX_HANDSHAKE => handshake.extend_from_slice(&scratch[..n]),
                Ok(_) => return too_long(),
            },
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// How one attempt to reach a server for a client's connection ended.
enum Attempt {
    /// The server replied; its first bytes have been passed to the client.
    Answered(TcpStream),
    /// The client closed its connection (it gave up waiting, or its session ended).
    ClientGone,
    /// The server could not be reached, or closed without a reply: try the next one.
    NoAnswer(String),
}

/// Connects to `host:port`, sends it the handshake so far and waits (up to `reply_wait`, doubled if it passes) for
/// its first reply, passing on whatever more the client sends meanwhile (and keeping it for a replay).
///
/// Giving up on a server that has the handshake and sending it to the next is what the client does after a
/// connection loss: the server may have re-attached the session already, and attaching it again is harmless. Only
/// one connection carries the handshake at a time: two at once could leave the session on the one the relay drops.
async fn try_server(
    client: &mut TcpStream,
    handshake: &mut Vec<u8>,
    host: &str,
    port: u16,
    reply_wait: &mut Duration,
) -> Attempt {
    let mut scratch = [0u8; 16 * 1024];
    let connecting = tokio::time::timeout(ATTEMPT_TIMEOUT, TcpStream::connect((host, port)));
    let mut connecting = std::pin::pin!(connecting);
    // Connect, while keeping what the client sends (its handshake) and noticing if it gives up.
    let mut server = loop {
        tokio::select! {
            connected = &mut connecting => match connected {
                Ok(Ok(server)) => break server,
                Ok(Err(err)) => return Attempt::NoAnswer(err.to_string()),
                Err(_) => return Attempt::NoAnswer(format!("no answer within {ATTEMPT_TIMEOUT:?}")),
            },
            read = client.read(&mut scratch) => match read {
                Ok(0) | Err(_) => return Attempt::ClientGone,
                Ok(n) if handshake.len() + n <= MAX_HANDSHAKE => handshake.extend_from_slice(&scratch[..n]),
                Ok(_) => {
                    too_long();
                    return Attempt::ClientGone;
                }
            },
        }
    };
    let _ = server.set_nodelay(true);
    if let Err(err) = server.write_all(handshake).await {
        return Attempt::NoAnswer(err.to_string());
    }
    // Wait for the server's first reply; pass on (and keep) whatever more the client sends.
    let mut reply = [0u8; 16 * 1024];
    let silence = tokio::time::sleep(*reply_wait);
    tokio::pin!(silence);
    loop {
        tokio::select! {
            () = &mut silence => {
                let waited = *reply_wait;
                *reply_wait = (*reply_wait * 2).min(MAX_REPLY_WAIT);
                return Attempt::NoAnswer(format!("no reply within {waited:?}"));
            }
            read = server.read(&mut reply) => match read {
                Ok(0) => return Attempt::NoAnswer("closed without a reply".to_string()),
                Err(err) => return Attempt::NoAnswer(err.to_string()),
                Ok(n) => {
                    if client.write_all(&reply[..n]).await.is_err() {
                        return Attempt::ClientGone;
                    }
                    return Attempt::Answered(server);
                }
            },
            read = client.read(&mut scratch) => match read {
                Ok(0) | Err(_) => return Attempt::ClientGone,
                Ok(n) if handshake.len() + n <= MAX_HANDSHAKE => {
                    handshake.extend_from_slice(&scratch[..n]);
                    if let Err(err) = server.write_all(&scratch[..n]).await {
                        return Attempt::NoAnswer(err.to_string());
                    }
                }
                Ok(_) => {
                    too_long();
                    return Attempt::ClientGone;
                }
            },
        }
    }
}

fn too_long() {
    warn!(
        limit = MAX_HANDSHAKE,
        "a connection to the reconnect relay sent more than it keeps before any reply; closed"
    );
}

fn random() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that closes its first `silent` connections without a word, then echoes.
    async fn flaky_echo(silent: usize) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut accepted = 0;
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                accepted += 1;
                if accepted <= silent {
                    // Read a little, so the relay has sent its handshake, then close without replying.
                    let mut buf = [0u8; 64];
                    let _ = conn.read(&mut buf).await;
                    continue;
                }
                tokio::spawn(async move {
                    let (mut r, mut w) = conn.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn the_handshake_is_replayed_to_the_server_that_answers() {
        let (addr, _server) = flaky_echo(2).await;
        let relay = Relay::start(vec![("127.0.0.1".to_string(), addr.port())]).await.unwrap();
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b"hello", "the third connection's echo of the kept handshake");
        client.write_all(b" world").await.unwrap();
        let mut buf = [0u8; 6];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b" world");
    }

    #[tokio::test]
    async fn a_connection_held_without_a_reply_is_given_up_for_another() {
        // The first connection is accepted and held open in silence (a port forwarder whose server is not up yet);
        // the second echoes.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (held, _) = listener.accept().await.unwrap();
            let (mut conn, _) = listener.accept().await.unwrap();
            let (mut r, mut w) = conn.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
            drop(held);
        });
        let relay = Relay::start(vec![("127.0.0.1".to_string(), port)]).await.unwrap();
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        let started = tokio::time::Instant::now();
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b"hello");
        let took = started.elapsed();
        assert!(took < FIRST_REPLY_WAIT * 2, "answered after {took:?}");
    }

    #[tokio::test]
    async fn a_server_that_starts_late_is_found_within_the_longest_pause() {
        // A port nothing listens on yet.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let relay = Relay::start(vec![("127.0.0.1".to_string(), port)]).await.unwrap();
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let listening = tokio::time::Instant::now();
        let (mut conn, _) = tokio::time::timeout(Duration::from_secs(2), listener.accept()).await.unwrap().unwrap();
        let waited = listening.elapsed();
        assert!(waited <= MAX_PAUSE.mul_f64(1.5) + Duration::from_millis(100), "found after {waited:?}");
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[tokio::test]
    async fn a_server_closing_closes_the_client() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let relay = Relay::start(vec![("127.0.0.1".to_string(), port)]).await.unwrap();
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        client.write_all(b"x").await.unwrap();
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1];
        conn.read_exact(&mut buf).await.unwrap();
        conn.write_all(b"y").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        drop(conn);
        let read = tokio::time::timeout(Duration::from_secs(2), client.read(&mut buf)).await.unwrap();
        assert!(matches!(read, Ok(0) | Err(_)), "the client sees the server's close: {read:?}");
    }

    #[tokio::test]
    async fn the_relay_stops_when_its_session_was_never_attached() {
        let relay = Relay::start(vec![("127.0.0.1".to_string(), 1)]).await.unwrap();
        let addr = relay.addr();
        drop(relay);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(addr).await.is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "the relay still listens");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
