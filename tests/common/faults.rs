//! Fault-injection helpers: members with their own session options, the kit's safety checker over [`Member`]s, scans
//! of the nodes a session owns, convergence waits, party churn, and which ensemble server a session is connected to.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zk_partitioner::zookeeper_client::{Client, Error as ZkError};
use zk_partitioner::{Item, PartitionState, Rebalance, SessionPolicy, SetPartitioner, Snapshot, partition::Rendezvous};

use super::ctx::SESSION_TIMEOUT;
use super::members::{Member, Recorder, TIME_BOUNDARY, build_member, claimants};
use super::{Proxy, four_letter, wait_for};

use zk_partitioner_testing::check_converged;
#[allow(unused_imports)]
pub use zk_partitioner_testing::{Checks, Claim, FaultWindow, FreezingProxy, Holder, Tally};

pub use super::members::PATH;

/// How a member is built: its session timeout and partitioner options.
#[derive(Clone, Debug)]
pub struct Opts {
    pub session: Duration,
    pub time_boundary: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// [`Rendezvous`] instead of the default [`KazooStride`](zk_partitioner::partition::KazooStride) (every member of a party
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

    /// `builder` with these partitioner options (for [`build_member`]).
    pub fn apply(&self, builder: zk_partitioner::Builder) -> zk_partitioner::Builder {
        let mut builder =
            builder.time_boundary(self.time_boundary).session_policy(self.session_policy).rebalance(self.rebalance);
        if let Some(limit) = self.max_allocation_time {
            builder = builder.max_allocation_time(limit);
        }
        if self.rendezvous {
            builder = builder.partition_func(Rendezvous::default());
        }
        builder
    }
}

/// A member with a new session to `connect_string` (which carries the test's chroot).
pub async fn member_at(connect_string: &str, identifier: &str, items: &[Item], opts: &Opts) -> Member {
    let client = super::connect(connect_string, opts.session).await;
    build_member(client, identifier, items, |builder| opts.apply(builder)).await
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

/// Reads who holds each item's lock under [`PATH`] (the kit's [`read_holders`](zk_partitioner_testing::read_holders)).
pub async fn read_holders(observer: &Client, items: &[Item]) -> Result<BTreeMap<String, Holder>, ZkError> {
    zk_partitioner_testing::read_holders(observer, PATH, items).await
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

/// Waits until the kit's [`check_converged`] holds over [`PATH`]; returns how long that took. Panics after `deadline` with the last observation and
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
            match check_converged(observer, PATH, &claimants(members), items).await {
                Ok(()) => return,
                Err(_) => tokio::time::sleep(super::POLL).await,
            }
        }
    })
    .await;
    if outcome.is_err() {
        let last = check_converged(observer, PATH, &claimants(members), items)
            .await
            .err()
            .unwrap_or_else(|| "converged just now".into());
        let snapshots: Vec<Snapshot> = members.iter().map(|m| m.partitioner.snapshot()).collect();
        panic!("{what}: not converged within {deadline:?}; last observation: {last}; snapshots: {snapshots:#?}");
    }
    started.elapsed()
}

/// The kit's [`SafetyChecker`](zk_partitioner_testing::SafetyChecker) over [`PATH`], watching [`Member`]s.
pub struct SafetyChecker(zk_partitioner_testing::SafetyChecker);

impl SafetyChecker {
    /// Starts sampling with `observer` (a session of its own, chrooted like the members) over `items`.
    pub fn start(observer: Client, items: &[Item], members: &[&Member]) -> SafetyChecker {
        let checker = SafetyChecker(zk_partitioner_testing::SafetyChecker::start(observer, PATH, items));
        for member in members {
            checker.watch(member);
        }
        checker
    }

    /// Watches one more member from now on.
    pub fn watch(&self, member: &Member) {
        self.watch_as(member, member.session());
    }

    /// Watches `member` as if its locks had to belong to `session` (to test the checker itself).
    pub fn watch_as(&self, member: &Member, session: i64) {
        self.0.watch(&member.partitioner, session);
    }

    /// Watches a member seen another way (a worker process through its output): see the kit's
    /// [`watch_claims`](zk_partitioner_testing::SafetyChecker::watch_claims).
    pub fn watch_claims(&self, read: impl Fn() -> Option<(u64, Claim)> + Send + Sync + 'static) {
        self.0.watch_claims(read);
    }

    /// Opens a fault window: samples taken until the guard drops are also counted in `Checks::during_faults`.
    pub fn fault(&self) -> FaultWindow {
        self.0.fault()
    }

    /// Stops sampling (after the sample in progress) and returns what was seen.
    pub async fn stop(self) -> Checks {
        self.0.stop().await
    }

    /// What was seen so far.
    pub fn checks(&self) -> Checks {
        self.0.checks()
    }

    /// Waits until at least `min_claims` claims have been checked, stops, and asserts that no violation was seen.
    pub async fn assert_safe(self, min_claims: u64) -> Checks {
        self.0.assert_safe(min_claims).await
    }

    /// Stops, and asserts that no violation was seen and that at least `min_claims` claims were checked inside fault
    /// windows, against the locks and against each other.
    pub async fn assert_safe_during_faults(self, min_claims: u64) -> Checks {
        self.0.assert_safe_during_faults(min_claims).await
    }
}

/// Counts what one member went through, from two background tasks (aborted when this drops): the session state
/// changes its client reported (a lost connection shows as at least one: the client's watcher may fold a quick
/// disconnection and reconnection into one change), its partitioner's transitions out of ACQUIRED, and the snapshots
/// that list nothing after one that listed items (the receiver may skip intermediate snapshots, never generations).
/// Compare counts taken before and after a fault to see how the member reacted to it.
pub struct Monitor {
    counts: Arc<Counts>,
    _tasks: [super::members::AbortOnDrop; 2],
}

#[derive(Default)]
struct Counts {
    session_changes: AtomicU64,
    left_acquired: AtomicU64,
    stopped_listing: AtomicU64,
}

/// A [`Monitor`]'s counts at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reactions {
    /// Session state changes the member's client reported.
    pub session_changes: u64,
    /// Transitions out of ACQUIRED its partitioner published.
    pub left_acquired: u64,
    /// Snapshots listing nothing after one that listed items.
    pub stopped_listing: u64,
}

impl Monitor {
    pub fn start(member: &Member) -> Monitor {
        let counts = Arc::new(Counts::default());
        let mut watcher = member.client.state_watcher();
        let sessions = counts.clone();
        let session_task = tokio::spawn(async move {
            loop {
                let state = watcher.changed().await;
                sessions.session_changes.fetch_add(1, Ordering::SeqCst);
                if state.is_terminated() {
                    return;
                }
            }
        });
        let mut snapshots = member.partitioner.subscribe();
        let transitions = counts.clone();
        let snapshot_task = tokio::spawn(async move {
            let (mut state, mut generation, mut listing) = {
                let s = snapshots.borrow_and_update();
                (s.state, s.generation, !s.items.is_empty())
            };
            while snapshots.changed().await.is_ok() {
                let s = snapshots.borrow_and_update();
                if state == PartitionState::Acquired && s.generation != generation {
                    transitions.left_acquired.fetch_add(1, Ordering::SeqCst);
                }
                if listing && s.items.is_empty() {
                    transitions.stopped_listing.fetch_add(1, Ordering::SeqCst);
                }
                (state, generation, listing) = (s.state, s.generation, !s.items.is_empty());
            }
        });
        Monitor {
            counts,
            _tasks: [super::members::AbortOnDrop(session_task), super::members::AbortOnDrop(snapshot_task)],
        }
    }

    /// The counts now.
    pub fn reactions(&self) -> Reactions {
        Reactions {
            session_changes: self.counts.session_changes.load(Ordering::SeqCst),
            left_acquired: self.counts.left_acquired.load(Ordering::SeqCst),
            stopped_listing: self.counts.stopped_listing.load(Ordering::SeqCst),
        }
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
    wait_for(&format!("session {session} to be connected to a server"), deadline, || async {
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
