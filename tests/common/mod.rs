//! Integration-test harness: real ZooKeeper servers in Docker, per-test namespaces, a TCP proxy for connection cuts and
//! forced session expiry, and condition-based waits.
//!
//! * Image: `ZOOKEEPER_IMAGE` (default `zookeeper:3.9`, the official image). It must already exist locally: nothing is
//!   ever pulled. Here: `bash docker/zookeeper/build.sh && export ZOOKEEPER_IMAGE=zk-partitioner/zookeeper:3.8`.
//! * [`server()`]: one standalone server shared by every test of a test binary; isolate tests with [`namespace`].
//!   [`OwnedServer`] and [`Ensemble`] belong to one test (stop/start/pause them freely).
//! * Every server runs with `tickTime=200` (session timeouts from 400 ms up to 60 s), unlimited connections per client
//!   IP and every four-letter word enabled.
//! * Containers are removed when their owner drops and, whatever happens to the test process (panic, kill), by a
//!   watchdog within about a second after it exits.
//! * Deadlines go through [`timing`], which scales them by `ZK_TEST_TIME_SCALE` for slow machines.
#![allow(dead_code)]

pub mod counting;
pub mod ctx;
mod docker;
mod ensemble;
pub mod faults;
pub mod kazoo;
pub mod members;
mod proxy;
mod server;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, SessionId, SessionState, StateWatcher};

// Each test binary uses a different part of the harness.
#[allow(unused_imports)]
pub use ctx::Ctx;
#[allow(unused_imports)]
pub use docker::{ImageRef, check_image, check_image_on};
#[allow(unused_imports)]
pub use ensemble::Ensemble;
#[allow(unused_imports)]
pub use proxy::{Proxy, expire};
#[allow(unused_imports)]
pub use server::{OwnedServer, ServerHandle, server};

/// How often [`wait_until`] and [`wait_for`] re-check their condition.
pub const POLL: Duration = Duration::from_millis(20);

/// `base` scaled by `ZK_TEST_TIME_SCALE` (a positive float, default 1.0). Use it for every deadline.
pub fn timing(base: Duration) -> Duration {
    static SCALE: OnceLock<f64> = OnceLock::new();
    let scale = *SCALE.get_or_init(|| match std::env::var("ZK_TEST_TIME_SCALE") {
        Err(_) => 1.0,
        Ok(raw) => match raw.trim().parse::<f64>() {
            Ok(scale) if scale.is_finite() && scale > 0.0 => scale,
            _ => panic!("ZK_TEST_TIME_SCALE={raw:?} is not a positive number"),
        },
    });
    base.mul_f64(scale)
}

/// Installs a `tracing` subscriber that writes through the test harness' capture, filtered by `RUST_LOG` (default
/// `warn,zookeeper_client=error`: the client warns on every failed connection attempt, which cuts, stops and
/// readiness probes cause by design). Idempotent: call it at the start of every test.
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,zookeeper_client=error"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// Polls `cond` every [`POLL`] until it returns `true`; panics naming `what` once `deadline` (not scaled here: pass
/// [`timing`]`(..)`) has passed. A probe that itself hangs is cut off at the deadline.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, deadline, || {
        let check = cond();
        async move { if check.await { Ok(()) } else { Err("the condition is still false".to_string()) } }
    })
    .await
}

/// Polls `probe` every [`POLL`] until it returns `Ok(value)` and returns that value. `Err(observation)` means "not
/// yet"; after `deadline` it panics naming `what` and the last observation.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let mut last = String::from("none");
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, probe()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(observation)) => last = observation,
            Err(_) => last = format!("the probe itself was still running at the deadline (before that: {last})"),
        }
        if started.elapsed() >= deadline {
            panic!("timed out after {:.1?} waiting for {what}; last observation: {last}", started.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `watcher` reports `state` (checking the current state first); panics naming `what` with the last
/// state after `deadline`. Quick `Disconnected`/`SyncConnected` blips can coalesce: wait for a state that lasts.
pub async fn wait_session_state(watcher: &mut StateWatcher, state: SessionState, deadline: Duration, what: &str) {
    let started = Instant::now();
    loop {
        let now = watcher.state();
        if now == state {
            return;
        }
        if now.is_terminated() {
            panic!("{what}: the session ended in state {now} while waiting for {state}");
        }
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() || tokio::time::timeout(left, watcher.changed()).await.is_err() {
            panic!("{what}: no session state {state} within {deadline:?}; last state: {}", watcher.peek_state());
        }
    }
}

/// Something that has a ZooKeeper connect string (`host:port[,host:port...]`, no chroot).
pub trait Cluster {
    /// The connect string.
    fn connect_string(&self) -> String;
}

impl Cluster for str {
    fn connect_string(&self) -> String {
        self.to_string()
    }
}

impl Cluster for String {
    fn connect_string(&self) -> String {
        self.clone()
    }
}

impl<T: Cluster + ?Sized> Cluster for &T {
    fn connect_string(&self) -> String {
        (**self).connect_string()
    }
}

/// `cluster` with the chroot `namespace` appended (`h1:p1,h2:p2/ns`), ready for [`connect`].
pub fn with_chroot(cluster: &(impl Cluster + ?Sized), namespace: &str) -> String {
    format!("{}{namespace}", cluster.connect_string())
}

/// Connects a new session (its own `Client`) to `cluster`, which may end with a chroot; panics with the cause if no
/// session is established within about `session_timeout`.
pub async fn connect(cluster: &str, session_timeout: Duration) -> Client {
    try_connect(cluster, session_timeout)
        .await
        .unwrap_or_else(|err| panic!("cannot open a ZooKeeper session to {cluster}: {err}"))
}

/// [`connect`] returning the error instead of panicking.
pub async fn try_connect(cluster: &str, session_timeout: Duration) -> Result<Client, zookeeper_client::Error> {
    Client::connector().with_session_timeout(session_timeout).connect(cluster).await
}

/// Creates a fresh, unique persistent node `/t-<16 hex digits>` on `cluster` and returns its path, to be used as the
/// chroot of one test ([`with_chroot`]).
pub async fn namespace(cluster: &(impl Cluster + ?Sized)) -> String {
    let cluster = cluster.connect_string();
    let path = format!("/t-{:016x}", random_u64());
    let client = connect(&cluster, timing(Duration::from_secs(4))).await;
    client
        .create(&path, b"", &persistent())
        .await
        .unwrap_or_else(|err| panic!("cannot create namespace {path} on {cluster}: {err}"));
    path
}

/// Create options: persistent, open ACL.
pub const fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Create options: ephemeral, open ACL.
pub const fn ephemeral() -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

/// Create options: ephemeral sequential, open ACL (the created name is `format!("{prefix}{sequence}")`).
pub const fn ephemeral_sequential() -> CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all())
}

/// Sends a ZooKeeper four-letter word (`srvr`, `dump`, `cons`, ...) to `addr` and returns the answer. Fails after
/// 2 s (a paused server accepts through Docker's port proxy but never answers).
pub async fn four_letter(addr: SocketAddr, command: &str) -> std::io::Result<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(command.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    };
    tokio::time::timeout(Duration::from_secs(2), exchange).await.unwrap_or_else(|_| {
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer to `{command}` within 2 s")))
    })
}

/// The `Mode:` a server reports through `srvr` (`standalone`, `leader` or `follower`) when it is serving; otherwise
/// `Err` with what it answered instead.
pub async fn server_mode(addr: SocketAddr) -> Result<String, String> {
    let answer = four_letter(addr, "srvr").await.map_err(|err| format!("{addr}: {err}"))?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_string())
        .ok_or_else(|| format!("{addr} is not serving: {:?}", answer.trim()))
}

/// Whether the server at `addr` still knows `session`: its `dump` lists it among live sessions (a standalone server
/// or leader lists its session sets, a follower the global sessions), among sessions with ephemerals, or among
/// connections.
pub async fn session_listed(addr: SocketAddr, session: SessionId) -> std::io::Result<bool> {
    let dump = four_letter(addr, "dump").await?;
    if !dump.contains("SessionTracker dump:") {
        return Err(std::io::Error::other(format!("unexpected answer to `dump` from {addr}: {:?}", dump.trim())));
    }
    let needle = format!("{:#x}", session.0);
    Ok(dump.split(|c: char| c.is_whitespace() || c == ':' || c == ',').any(|word| word == needle))
}

/// A random 64-bit value (no `rand` dependency: std's randomly keyed hasher, a counter and the clock).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}
