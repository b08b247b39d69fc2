//! Fault-injection helpers: members with their own session options, a background safety checker that samples claims
//! against lock nodes while faults happen, scans of the nodes a session owns, convergence waits, party churn, a proxy
//! that goes silent instead of closing connections, and which ensemble server a session is connected to.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zk_partitioner::zookeeper_client::{Client, Error as ZkError};
use zk_partitioner::{Item, PartitionState, Rebalance, Rendezvous, SessionPolicy, SetPartitioner, Snapshot};

use super::ctx::SESSION_TIMEOUT;
use super::members::{Member, Recorder, TIME_BOUNDARY};
use super::{Proxy, four_letter, wait_for};

/// The partitioner path every fault test uses (relative to the test's chroot).
pub const PATH: &str = "/partitioner";

/// How a member is built: its session timeout and partitioner options.
#[derive(Clone, Debug)]
pub struct Opts {
    pub session: Duration,
    pub time_boundary: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// [`Rendezvous`] instead of the default [`KazooStride`](zk_partitioner::KazooStride) (every member of a party
    /// must use the same function).
    pub rendezvous: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            session: SESSION_TIMEOUT,
            time_boundary: TIME_BOUNDARY,
            max_allocation_time: None,
            session_policy: SessionPolicy::Standard,
            rebalance: Rebalance::Eager,
            rendezvous: false,
        }
    }
}

impl Opts {
    /// The defaults with another session timeout.
    pub fn session(session: Duration) -> Self {
        Opts { session, ..Opts::default() }
    }
}

/// A member with a new session to `connect_string` (which carries the test's chroot).
pub async fn member_at(connect_string: &str, identifier: &str, items: &[Item], opts: &Opts) -> Member {
    let client = super::connect(connect_string, opts.session).await;
    build_member(client, identifier, items, opts).await
}

/// A member whose session goes through a new proxy to `upstream`, in `namespace`.
pub async fn member_behind_proxy(
    upstream: SocketAddr,
    namespace: &str,
    identifier: &str,
    items: &[Item],
    opts: &Opts,
) -> (Member, Proxy) {
    let proxy = Proxy::start(upstream).await;
    let member = member_at(&format!("{}{namespace}", proxy.endpoint()), identifier, items, opts).await;
    (member, proxy)
}

/// A partitioner at [`PATH`] on `client`'s session.
pub async fn build_member(client: Client, identifier: &str, items: &[Item], opts: &Opts) -> Member {
    let mut builder = SetPartitioner::builder(client.clone(), PATH, items.to_vec())
        .identifier(identifier)
        .time_boundary(opts.time_boundary)
        .session_policy(opts.session_policy)
        .rebalance(opts.rebalance);
    if let Some(limit) = opts.max_allocation_time {
        builder = builder.max_allocation_time(limit);
    }
    if opts.rendezvous {
        builder = builder.partition_func(Rendezvous::default());
    }
    Member { client, partitioner: builder.build().await.expect("build partitioner") }
}

/// Who holds an item's lock, as read by an observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The session owning the lowest contender.
    Session(i64),
    /// No contender (or no lock directory).
    Free,
    /// The lowest contender went away between the listing and its stat: unknown.
    Unknown,
}

/// The lowest kazoo contender among `children` (`..__lock__<10 digits>`).
fn lowest_contender(children: &[String]) -> Option<&String> {
    children
        .iter()
        .filter_map(|c| c.rsplit_once("__lock__").map(|(_, seq)| (seq, c)))
        .filter(|(seq, _)| seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()))
        .min()
        .map(|(_, c)| c)
}

/// Reads who holds each item's lock, after a `sync` (so the read is at least as new as anything any session saw
/// before the call, even through an ensemble follower). Items are read concurrently; each item's answer is a point
/// in time (sequence numbers only grow, so a lowest contender that still exists at its stat is still the lowest).
pub async fn read_holders(observer: &Client, items: &[Item]) -> Result<BTreeMap<String, Holder>, ZkError> {
    observer.sync("/").await?;
    let reads = items.iter().map(|item| async move {
        let dir = format!("{PATH}/locks/{item}");
        let children = match observer.list_children(&dir).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok((item.to_string(), Holder::Free)),
            Err(err) => return Err(err),
        };
        let Some(lowest) = lowest_contender(&children) else {
            return Ok((item.to_string(), Holder::Free));
        };
        let holder = match observer.check_stat(&format!("{dir}/{lowest}")).await? {
            Some(stat) => Holder::Session(stat.ephemeral_owner),
            None => Holder::Unknown,
        };
        Ok((item.to_string(), holder))
    });
    futures::future::try_join_all(reads).await.map(|pairs| pairs.into_iter().collect())
}

/// Every party node and lock contender node (paths relative to the chroot) owned by `session`, after a `sync`.
pub async fn nodes_owned_by(observer: &Client, items: &[Item], session: i64) -> Vec<String> {
    observer.sync("/").await.expect("sync");
    let mut dirs = vec![format!("{PATH}/party")];
    dirs.extend(items.iter().map(|item| format!("{PATH}/locks/{item}")));
    let scans = dirs.into_iter().map(|dir| async move {
        let children = match observer.list_children(&dir).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Vec::new(),
            Err(err) => panic!("listing {dir}: {err}"),
        };
        let mut owned = Vec::new();
        for child in children {
            let path = format!("{dir}/{child}");
            match observer.check_stat(&path).await {
                Ok(Some(stat)) if stat.ephemeral_owner == session => owned.push(path),
                Ok(_) => {}
                Err(err) => panic!("stat {path}: {err}"),
            }
        }
        owned
    });
    futures::future::join_all(scans).await.into_iter().flatten().collect()
}

/// The party's children with their owners (`ephemeralOwner`, 0 for a persistent node), after a `sync`.
pub async fn party_nodes(observer: &Client) -> Vec<(String, i64)> {
    observer.sync("/").await.expect("sync");
    let party = format!("{PATH}/party");
    let mut nodes = Vec::new();
    for child in observer.list_children(&party).await.expect("listing the party") {
        if let Some(stat) = observer.check_stat(&format!("{party}/{child}")).await.expect("stat a party node") {
            nodes.push((child, stat.ephemeral_owner));
        }
    }
    nodes
}

/// Checks that `members` have converged on `items`: all ACQUIRED over the same party of `members.len()`, their claims
/// disjoint and covering `items`, and each claim backed by a lock node of the claiming member's session. `Err` says
/// what is missing.
pub async fn converged(observer: &Client, members: &[&Member], items: &[Item]) -> Result<(), String> {
    let snapshots: Vec<Snapshot> = members.iter().map(|m| m.partitioner.snapshot()).collect();
    for snapshot in &snapshots {
        if snapshot.state != PartitionState::Acquired {
            return Err(format!("{} is {}", snapshot.member, snapshot.state));
        }
        if snapshot.members.len() != members.len() || snapshot.members != snapshots[0].members {
            return Err(format!("{} allocated for party {:?}", snapshot.member, snapshot.members));
        }
    }
    let holders = read_holders(observer, items).await.map_err(|err| format!("reading lock holders: {err}"))?;
    let mut claimed = BTreeSet::new();
    for (member, snapshot) in members.iter().zip(&snapshots) {
        for item in snapshot.items.iter() {
            let name = item.to_string();
            if !claimed.insert(name.clone()) {
                return Err(format!("{name} is claimed twice"));
            }
            let holder = holders.get(&name).copied().unwrap_or(Holder::Free);
            if holder != Holder::Session(member.session()) {
                return Err(format!("{} claims {name} but its lock holder is {holder:?}", snapshot.member));
            }
        }
    }
    let all: BTreeSet<String> = items.iter().map(Item::to_string).collect();
    if claimed != all {
        return Err(format!("claims {claimed:?} do not cover {all:?}"));
    }
    let current: Vec<Snapshot> = members.iter().map(|m| m.partitioner.snapshot()).collect();
    if current.iter().zip(&snapshots).any(|(now, then)| now.generation != then.generation) {
        return Err("a member changed state while its claims were checked".to_string());
    }
    Ok(())
}

/// Waits until [`converged`] holds; returns how long that took. Panics after `deadline` with the last observation and
/// every member's snapshot. Does not release anything itself: run [`auto_release`](super::members::auto_release) on
/// the members (the worker loop).
pub async fn wait_converged(
    what: &str,
    observer: &Client,
    members: &[&Member],
    items: &[Item],
    deadline: Duration,
) -> Duration {
    let started = Instant::now();
    let outcome = tokio::time::timeout(deadline, async {
        loop {
            match converged(observer, members, items).await {
                Ok(()) => return,
                Err(_) => tokio::time::sleep(super::POLL).await,
            }
        }
    })
    .await;
    if outcome.is_err() {
        let last = converged(observer, members, items).await.err().unwrap_or_else(|| "converged just now".into());
        let snapshots: Vec<Snapshot> = members.iter().map(|m| m.partitioner.snapshot()).collect();
        panic!("{what}: not converged within {deadline:?}; last observation: {last}; snapshots: {snapshots:#?}");
    }
    started.elapsed()
}

/// A member the checker watches: its partitioner and the session its locks must belong to.
#[derive(Clone)]
struct Watched {
    session: i64,
    partitioner: SetPartitioner,
}

/// What the checker saw.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    /// Samples where the lock read succeeded.
    pub samples: u64,
    /// Samples thrown away because the lock read failed (server down, connection lost).
    pub unreadable: u64,
    /// Claims (member, item) checked against a lock holder read while the member's generation did not change.
    pub claims_checked: u64,
    /// Each violation: when (since the checker started), and what.
    pub violations: Vec<String>,
}

/// Samples, continuously and in the background, every watched member's claims against the lock nodes.
///
/// A claim is an item in a member's published [`Snapshot::items`] (the items its worker may process): only in
/// ACQUIRED by default, also in RELEASE and ALLOCATING for the items a member keeps under
/// [`Rebalance::Incremental`]. One sample: every member's snapshot, then (after a `sync`) every item's lock holder,
/// then every member's snapshot again. A member whose generation did not change across the lock read claimed the
/// same thing during the whole read, so a claim of an item whose lowest contender belongs to another session, or to
/// nobody, or an item claimed by two such members, is a real violation at that instant; a member whose generation
/// changed is skipped (read skew). Reads that fail (a server down) are counted and skipped.
pub struct SafetyChecker {
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl SafetyChecker {
    /// Starts sampling with `observer` (a session of its own, chrooted like the members) over `items`.
    pub fn start(observer: Client, items: &[Item], members: &[&Member]) -> SafetyChecker {
        let watched =
            members.iter().map(|m| Watched { session: m.session(), partitioner: m.partitioner.clone() }).collect();
        let members = Arc::new(Mutex::new(watched));
        let checks = Arc::new(Mutex::new(Checks::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(sample_loop(observer, items.to_vec(), members.clone(), checks.clone(), stop.clone()));
        SafetyChecker { members, checks, stop, task: Some(task) }
    }

    /// Watches one more member from now on.
    pub fn watch(&self, member: &Member) {
        self.watch_as(member, member.session());
    }

    /// Watches `member` as if its locks had to belong to `session` (to test the checker itself).
    pub fn watch_as(&self, member: &Member, session: i64) {
        let watched = Watched { session, partitioner: member.partitioner.clone() };
        self.members.lock().unwrap().push(watched);
    }

    /// Stops sampling (after the sample in progress) and returns what was seen.
    pub async fn stop(mut self) -> Checks {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            task.await.expect("the safety checker panicked");
        }
        self.checks()
    }

    /// What was seen so far.
    pub fn checks(&self) -> Checks {
        self.checks.lock().unwrap().clone()
    }

    /// Waits until at least `min_claims` claims have been checked in all (so the check was not vacuous: call it once
    /// members are ACQUIRED), stops sampling after the sample in progress, and asserts that no violation was seen.
    /// Returns what was seen.
    pub async fn assert_safe(self, min_claims: u64) -> Checks {
        let checks = &self.checks;
        let enough =
            wait_for("the safety checker to check enough claims", super::timing(Duration::from_secs(10)), || {
                let seen = checks.lock().unwrap().clone();
                async move { if seen.claims_checked >= min_claims { Ok(()) } else { Err(format!("{seen:?}")) } }
            });
        enough.await;
        let checks = self.stop().await;
        assert!(checks.violations.is_empty(), "safety violations: {:#?}\n{checks:?}", checks.violations);
        assert!(
            checks.claims_checked >= min_claims,
            "the safety checker checked only {} claims (wanted at least {min_claims}): {checks:?}",
            checks.claims_checked
        );
        checks
    }
}

impl Drop for SafetyChecker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn sample_loop(
    observer: Client,
    items: Vec<Item>,
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    stop: Arc<AtomicBool>,
) {
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let watched = members.lock().unwrap().clone();
        let before: Vec<Snapshot> = watched.iter().map(|w| w.partitioner.snapshot()).collect();
        let read = tokio::time::timeout(Duration::from_secs(2), read_holders(&observer, &items)).await;
        let after: Vec<Snapshot> = watched.iter().map(|w| w.partitioner.snapshot()).collect();
        let holders = match read {
            Ok(Ok(holders)) => holders,
            Ok(Err(_)) | Err(_) => {
                checks.lock().unwrap().unreadable += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let at = started.elapsed();
        let mut found = Vec::new();
        let mut claims = 0;
        let mut claimed_by: BTreeMap<String, String> = BTreeMap::new();
        for ((w, before), after) in watched.iter().zip(&before).zip(&after) {
            if before.generation != after.generation || before.state == PartitionState::Failure {
                continue;
            }
            for item in before.items.iter() {
                let name = item.to_string();
                claims += 1;
                if let Some(other) = claimed_by.insert(name.clone(), before.member.to_string()) {
                    found.push(format!("at {at:.2?}: {name} claimed by both {other} and {}", before.member));
                }
                match holders.get(&name).copied().unwrap_or(Holder::Unknown) {
                    Holder::Session(owner) if owner == w.session => {}
                    Holder::Session(owner) => found.push(format!(
                        "at {at:.2?}: {} (session {:#x}) is {} with {name} (generation {}), whose lock is held by \
                         session {owner:#x}",
                        before.member, w.session, before.state, before.generation
                    )),
                    Holder::Free => found.push(format!(
                        "at {at:.2?}: {} (session {:#x}) is {} with {name} (generation {}), which has no lock node \
                         at all",
                        before.member, w.session, before.state, before.generation
                    )),
                    Holder::Unknown => claims -= 1,
                }
            }
        }
        {
            let mut checks = checks.lock().unwrap();
            checks.samples += 1;
            checks.claims_checked += claims;
            checks.violations.extend(found);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Members joining and leaving the party in the background: a partitioner joins, `period` later it finishes, and
/// `period` later the next one joins, so the party changes every `period`.
pub struct Churn {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<usize>>,
}

impl Churn {
    /// Starts churning with `client`'s session (the churners never stay long enough to allocate).
    pub fn start(client: Client, items: &[Item], period: Duration) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let items = items.to_vec();
        let task = tokio::spawn(async move {
            let mut joins = 0;
            while !flag.load(Ordering::SeqCst) {
                let churner = SetPartitioner::builder(client.clone(), PATH, items.clone())
                    .identifier("churn")
                    .time_boundary(Duration::from_secs(3600))
                    .build()
                    .await
                    .expect("build a churner");
                joins += 1;
                tokio::time::sleep(period).await;
                churner.finish().await;
                tokio::time::sleep(period).await;
            }
            joins
        });
        Churn { stop, task: Some(task) }
    }

    /// Stops churning once the current churner has left; returns how many joined in all.
    pub async fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.take().expect("stopped once").await.expect("the churn task panicked")
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Waits until the partitioner's background task has stopped (its snapshot channel closed).
pub async fn wait_task_stopped(partitioner_watch: tokio::sync::watch::Receiver<Snapshot>, deadline: Duration) {
    let mut watch = partitioner_watch;
    tokio::time::timeout(deadline, async { while watch.changed().await.is_ok() {} })
        .await
        .expect("the partitioner task did not stop");
}

/// The session ids (`sid=0x...`) connected to the server at `addr`, from its `cons`; `Err` if it does not answer.
pub async fn sessions_on(addr: SocketAddr) -> Result<BTreeSet<i64>, String> {
    let cons = four_letter(addr, "cons").await.map_err(|err| format!("{addr}: {err}"))?;
    Ok(cons
        .split(|c: char| c == ',' || c == '(' || c == ')' || c.is_whitespace())
        .filter_map(|word| word.strip_prefix("sid=0x"))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .map(|sid| sid as i64)
        .collect())
}

/// Which of `servers` (id, address) `session` is connected to, waiting until exactly one answering server lists it.
pub async fn server_of(servers: &[(usize, SocketAddr)], session: i64, deadline: Duration) -> usize {
    wait_for(&format!("session {session:#x} to be connected to a server"), deadline, || async {
        let mut found = Vec::new();
        for (id, addr) in servers {
            if let Ok(sessions) = sessions_on(*addr).await
                && sessions.contains(&session)
            {
                found.push(*id);
            }
        }
        match found.as_slice() {
            [id] => Ok(*id),
            other => Err(format!("listed by servers {other:?}")),
        }
    })
    .await
}

/// The states `recorder` saw, once it has caught up with `partitioner`'s latest snapshot (a recorder is a task of
/// its own: it may lag a transition behind when asked).
pub async fn recorded_states(recorder: &Recorder, partitioner: &SetPartitioner) -> Vec<PartitionState> {
    wait_for("the recorder to catch up", super::timing(Duration::from_secs(5)), || async {
        let latest = partitioner.snapshot().generation;
        match recorder.snapshots().last() {
            Some(seen) if seen.generation == latest => Ok(()),
            other => Err(format!("recorded up to {:?}, latest {latest}", other.map(|s| s.generation))),
        }
    })
    .await;
    recorder.states()
}

/// A TCP proxy in front of one server that can black-hole its connections: [`freeze`](Self::freeze) stops
/// forwarding bytes (connections stay open, nothing answers, as with a paused server or a silent network partition,
/// so a client notices only through its own timeout); [`thaw`](Self::thaw) closes every connection made so far and
/// forwards new ones again. Tasks are aborted on drop.
pub struct FreezingProxy {
    addr: SocketAddr,
    frozen: Arc<tokio::sync::watch::Sender<bool>>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FreezingProxy {
    pub async fn start(upstream: SocketAddr) -> FreezingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let frozen = Arc::new(tokio::sync::watch::Sender::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (frozen_for_accept, registry) = (frozen.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let frozen = frozen_for_accept.subscribe();
                let task = tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(upstream).await else { return };
                    let ((client_read, client_write), (server_read, server_write)) =
                        (inbound.into_split(), outbound.into_split());
                    tokio::join!(
                        pump(client_read, server_write, frozen.clone()),
                        pump(server_read, client_write, frozen)
                    );
                });
                registry.lock().unwrap().push(task.abort_handle());
            }
        });
        FreezingProxy { addr, frozen, connections, accept }
    }

    /// `127.0.0.1:PORT`: connect clients here (append a chroot as usual).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Stops forwarding: every connection, old or new, goes silent.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Closes every connection made so far and forwards new ones again.
    pub fn thaw(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
        self.frozen.send_replace(false);
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
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
