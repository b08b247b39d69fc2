//! A test kit for code built on [zk-partitioner](https://docs.rs/zk-partitioner): real ZooKeeper servers in Docker,
//! real faults, and checks of what the members claim. For dev-dependencies:
//!
//! ```toml
//! [dev-dependencies]
//! zk-partitioner-testing = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! What it gives:
//!
//! - **Servers.** [`server()`]: one standalone ZooKeeper shared by every test of a test binary (isolate tests with
//!   [`namespace`], a fresh chroot each); [`OwnedServer`]: a server one test owns and may
//!   [`stop`](OwnedServer::stop), [`start`](OwnedServer::start), [`pause`](OwnedServer::pause), also with a TLS
//!   client port ([`OwnedServer::launch_tls`], certificates of yours in a [`ServerTls`]); [`Ensemble`]: three
//!   servers to lose a leader or a follower. Containers are removed when their owner drops and, however the test
//!   process ends (panic, kill), by a watchdog about a second after it exits.
//! - **The image.** `ZOOKEEPER_IMAGE` if set; else the official `zookeeper:3.9` if present, else
//!   `zk-partitioner/zookeeper:3.8` if present; else the kit pulls `zookeeper:3.9` (giving up after 30 s without
//!   progress, at once when no registry answers) and, if that fails, builds `zk-partitioner/zookeeper:3.8` from Debian
//!   packages with the repository's `docker/zookeeper/build.sh` (needs root and a Debian mirror; about a minute, once
//!   per machine: concurrent test processes wait on a lock file). Progress goes to stderr. See [`ensure_image`].
//! - **Faults.** [`Proxy`]: a TCP proxy in front of one server, one per member, to [`cut`](Proxy::cut) that
//!   member's connection or [`expire`] its session for real (the server forgets it), also right after a chosen
//!   request ([`cut_after_containing`](Proxy::cut_after_containing)), and to see which requests a client sent
//!   ([`watch_for`](Proxy::watch_for)), so that a fault said to land mid-operation is placed by the operation's own
//!   requests; [`FreezingProxy`]: a connection that goes silent instead of closing, at once or as a chosen request
//!   comes ([`freeze_at`](FreezingProxy::freeze_at)).
//! - **Waits.** [`wait_for`] and [`wait_until`] poll a condition under a deadline and panic naming what did not
//!   happen; [`wait_snapshot`] wakes on a partitioner's transitions; every deadline goes through [`timing`]
//!   (`ZK_TEST_TIME_SCALE=2` doubles them on a slow machine).
//! - **Seeds.** [`SplitMix64`]: a seeded random sequence, the same on every machine, to draw faults that a seed
//!   replays.
//! - **Safety.** [`check_exclusive`] and [`check_stable`] over members' [`Snapshot`]s;
//!   [`read_holders`] reads who really holds each item's lock; [`check_converged`] says whether members have settled
//!   (every item owned once, by the session holding its lock; [`check_claims`] is the same check over claims read
//!   by hand); [`SafetyChecker`] samples claims continuously while faults happen: against each other on every
//!   sample, whether or not ZooKeeper answers, and against the locks whenever it does; it also takes the claims of
//!   members in other processes ([`SafetyChecker::watch_claims`]), and counts apart what it checked while the test
//!   said a fault was under way ([`SafetyChecker::fault`]).
//!
//! Unix only (the proxy shuts sockets down through duplicated file descriptors; the container watchdog is a shell
//! loop), with Docker reachable at `DOCKER_HOST` or the default socket, and the `docker` CLI for the watchdog.
//!
//! Every server runs with `tickTime=200` (session timeouts from 400 ms to 60 s), unlimited connections per client
//! address, every four-letter word enabled, and `forceSync=no` (its log is written, not fsynced: a test server
//! needs no durability against the host's power loss, and a disk busy with other writes cannot stall it). Helpers
//! that set up the test panic with one line naming the cause and the fix, as test code should.
//!
//! # Examples
//!
//! A member survives losing its session: its worker loop builds a new partitioner on a new session.
//!
//! ```no_run
//! use std::time::Duration;
//! use zk_partitioner_testing::{self as testing, Proxy};
//! use zk_partitioner::{PartitionState, SetPartitioner};
//!
//! # async fn dox() {
//! let server = testing::server().await; // a ZooKeeper container shared by this test binary
//! let namespace = testing::namespace(server).await; // a chroot of this test's own
//! let proxy = Proxy::start(server.addr()).await; // the member's own route to the server
//! let client = testing::connect(&testing::with_chroot(&proxy, &namespace), Duration::from_secs(2)).await;
//! let member = SetPartitioner::builder(client.clone(), "/jobs", ["a", "b"])
//!     .time_boundary(Duration::from_millis(200))
//!     .build()
//!     .await
//!     .unwrap();
//! testing::wait_snapshot(&member, "ACQUIRED", testing::timing(Duration::from_secs(10)), |s| {
//!     s.state == PartitionState::Acquired
//! })
//! .await;
//! testing::expire(&client, &proxy).await; // cut until the server drops the session, then heal
//! testing::wait_snapshot(&member, "FAILURE", testing::timing(Duration::from_secs(10)), |s| {
//!     s.state == PartitionState::Failure
//! })
//! .await;
//! # }
//! ```

// Unix only: the proxy shuts sockets down through duplicated file descriptors, the container watchdog is a shell loop.
#![cfg(unix)]
#![deny(missing_docs, missing_debug_implementations)]

mod checks;
mod docker;
mod ensemble;
mod image;
mod proxy;
mod safety;
mod standalone;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, SessionId, SessionState, StateWatcher};

use zk_partitioner::{SetPartitioner, Snapshot};

pub use checks::{Checks, Tally};
pub use docker::ServerTls;
pub use ensemble::Ensemble;
pub use image::{ImageRef, check_image, check_image_on, ensure_image, provide_image};
pub use proto::rng::SplitMix64;
pub use proxy::{FreezingProxy, Proxy, Sighting, expire};
pub use safety::{
    Claim, FaultWindow, Holder, SafetyChecker, check_claims, check_converged, check_exclusive, check_stable,
    read_holders, sole_holder,
};
pub use standalone::{OwnedServer, ServerHandle, probe_session, server};

/// How often [`wait_until`] and [`wait_for`] re-check their condition.
pub const POLL: Duration = Duration::from_millis(20);

/// The lock contenders among the children of an item's lock directory (`<path>/locks/<item>`), in the order they
/// hold the lock: the first holds it. kazoo's rule, exactly (`__lock__` and a 10-digit sequence, possibly negative
/// after ZooKeeper's counter wraps, compared as text); other children are left out. The rule this crate itself
/// follows, for tests that read a lock directory by hand.
pub fn lock_contenders(children: &[String]) -> Vec<&str> {
    proto::layout::contenders_in_order(children)
}

/// `base` scaled by `ZK_TEST_TIME_SCALE` (a positive float, default 1.0). Use it for every deadline.
///
/// # Panics
/// If `ZK_TEST_TIME_SCALE` is set to something that is not a positive number.
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

/// Polls `cond` every [`POLL`] until it returns `true`.
///
/// # Panics
/// Naming `what`, once `deadline` (not scaled here: pass [`timing`]`(..)`) has passed. A probe that itself hangs is
/// cut off at the deadline.
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
/// yet".
///
/// # Panics
/// After `deadline`, naming `what` and the last observation.
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

/// Waits until a snapshot of `partitioner` satisfies `condition` and returns it, without polling: the partitioner's
/// watch channel wakes the wait on every transition.
///
/// # Panics
/// After `deadline`, or if the partitioner's task ends first, naming `what` and the last snapshot.
pub async fn wait_snapshot(
    partitioner: &SetPartitioner,
    what: &str,
    deadline: Duration,
    condition: impl FnMut(&Snapshot) -> bool,
) -> Snapshot {
    let mut receiver = partitioner.subscribe();
    match tokio::time::timeout(deadline, receiver.wait_for(condition)).await {
        Ok(Ok(snapshot)) => snapshot.clone(),
        Ok(Err(_)) => panic!("partitioner task ended before {what}; last snapshot: {:?}", partitioner.snapshot()),
        Err(_) => panic!("no {what} within {deadline:?}; last snapshot: {:?}", partitioner.snapshot()),
    }
}

/// Waits until `watcher` reports `state` (checking the current state first). Quick `Disconnected`/`SyncConnected`
/// blips can coalesce: wait for a state that lasts.
///
/// # Panics
/// After `deadline`, or when the session ends in another state, naming `what` and the last state.
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

/// Something that has a ZooKeeper connect string (`host:port[,host:port...]`, no chroot): a server, an ensemble, a
/// proxy, or a string.
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

/// Opens a new session (its own `Client`) to `cluster`, which may end with a chroot, through
/// [`zk_partitioner::connect`].
///
/// # Panics
/// With the cause (unreachable, refused, missing chroot...) if no session is established within the connect timeout.
pub async fn connect(cluster: &str, session_timeout: Duration) -> Client {
    try_connect(cluster, session_timeout).await.unwrap_or_else(|err| panic!("{err}"))
}

/// [`connect`] returning the error instead of panicking.
///
/// # Errors
/// As [`zk_partitioner::connect`].
pub async fn try_connect(cluster: &str, session_timeout: Duration) -> Result<Client, zk_partitioner::Error> {
    zk_partitioner::connect(cluster, session_timeout).await
}

/// Creates a fresh, unique persistent node `/t-<16 hex digits>` on `cluster` and returns its path, to be used as the
/// chroot of one test ([`with_chroot`]).
///
/// # Panics
/// If the node cannot be created.
pub async fn namespace(cluster: &(impl Cluster + ?Sized)) -> String {
    let cluster = cluster.connect_string();
    let path = format!("/t-{:016x}", random_u64());
    let client = connect(&cluster, timing(Duration::from_secs(4))).await;
    if let Err(err) = client.create(&path, b"", &persistent()).await {
        panic!("cannot create namespace {path} on {cluster}: {err}");
    }
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

/// Sends a ZooKeeper four-letter word (`srvr`, `dump`, `cons`, ...) to `addr` and returns the answer.
///
/// # Errors
/// The connection's error, or a timeout after 2 s (a paused server accepts through Docker's port proxy but never
/// answers).
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

/// The `Mode:` a server reports through `srvr` (`standalone`, `leader` or `follower`) when it is serving.
///
/// # Errors
/// What it answered instead, or why it did not answer.
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
///
/// # Errors
/// If the server does not answer `dump` as expected.
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

/// Writes one progress line to the process' real stderr: unlike `eprintln!`, it is not captured by the test harness,
/// so a minute-long image build is visible while `cargo test` runs.
pub(crate) fn progress(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "[zk-partitioner] {line}");
}
