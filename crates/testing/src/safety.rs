//! Safety checks: what members claim ([`Snapshot::items`]) against each other and against who really holds each lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use zookeeper_client::{Client, Error as ZkError};

use zk_partitioner::{Item, PartitionState, SetPartitioner, Snapshot};

use super::checks::{Checks, Tally};
use super::{timing, wait_for};

/// Checks snapshots of several members taken at one moment: no item is listed by two members (a listed item is
/// one the member's worker may process).
///
/// # Errors
/// The first item listed twice, and by whom.
///
/// # Examples
/// ```
/// use zk_partitioner_testing::check_exclusive;
///
/// assert!(check_exclusive(&[]).is_ok());
/// ```
pub fn check_exclusive(snapshots: &[Snapshot]) -> Result<(), String> {
    let mut listed_by: BTreeMap<&Item, &str> = BTreeMap::new();
    for snapshot in snapshots {
        if snapshot.state == PartitionState::Failure {
            continue;
        }
        for item in snapshot.items.iter() {
            if let Some(other) = listed_by.insert(item, &snapshot.member) {
                return Err(format!("item {item} is listed by both {other} and {}", snapshot.member));
            }
        }
    }
    Ok(())
}

/// Checks that members whose snapshots these are have settled on `items`: every one
/// [`Acquired`](PartitionState::Acquired), over the same party of exactly these members, and the items they list
/// are disjoint and cover `items` (every item owned once). [`check_claims`] without the lock nodes; with them, see
/// [`check_converged`].
///
/// # Errors
/// What is not so yet: a member in another state or party, an item listed twice, items nobody lists.
pub fn check_stable(snapshots: &[Snapshot], items: &[Item]) -> Result<(), String> {
    let claims: Vec<Claim> = snapshots.iter().map(|snapshot| Claim::of(snapshot, 0)).collect();
    check_claims(&claims, None, items)
}

/// What one member claims, as [`check_claims`] checks it: usually [`Claim::of`] a snapshot; built by hand for a
/// member seen another way (a worker process's output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The member's name in the party ([`Snapshot::member`]).
    pub member: String,
    /// Its state.
    pub state: PartitionState,
    /// Whether its connection is suspended (only mentioned in errors).
    pub suspended: bool,
    /// The party its assignment was computed from ([`Snapshot::members`]); `None` not to check it.
    pub party: Option<Vec<String>>,
    /// The items it lists (their renderings, as [`read_holders`] keys them).
    pub items: Vec<String>,
    /// The session its locks must belong to (as ZooKeeper stores it in `ephemeralOwner`).
    pub session: i64,
}

impl Claim {
    /// What `snapshot` claims, for a member whose locks must belong to `session`.
    pub fn of(snapshot: &Snapshot, session: i64) -> Claim {
        Claim {
            member: snapshot.member.to_string(),
            state: snapshot.state,
            suspended: snapshot.suspended,
            party: Some(snapshot.members.to_vec()),
            items: snapshot.items.iter().map(Item::to_string).collect(),
            session,
        }
    }
}

/// The convergence check: members whose claims these are have settled on `items`. Every one
/// [`Acquired`](PartitionState::Acquired); every party that is checked ([`Claim::party`]) is exactly these members;
/// the items they list are disjoint and cover `items` (every item owned once); and, given the lock `holders` (from
/// [`read_holders`]), each listed item's lock is held by its claimant's session.
///
/// # Errors
/// The first member not `Acquired`; once all are, everything else that is not so, separated by `; `: a member
/// allocated for another party, an item listed twice, an item whose lock another session (or nobody) holds, items
/// nobody lists, items listed but not among `items`.
///
/// # Examples
/// ```
/// use zk_partitioner_testing::check_claims;
///
/// assert!(check_claims(&[], None, &[]).is_ok());
/// ```
pub fn check_claims(
    claims: &[Claim],
    holders: Option<&BTreeMap<String, Holder>>,
    items: &[Item],
) -> Result<(), String> {
    if let Some(claim) = claims.iter().find(|claim| claim.state != PartitionState::Acquired) {
        let suspended = if claim.suspended { " (suspended)" } else { "" };
        return Err(format!("{} is {}{suspended}", claim.member, claim.state));
    }
    let mut problems = Vec::new();
    let mut names: Vec<String> = claims.iter().map(|claim| claim.member.clone()).collect();
    names.sort();
    for claim in claims {
        if let Some(party) = &claim.party
            && *party != names
        {
            problems.push(format!("{} allocated for party {party:?}, not {names:?}", claim.member));
        }
    }
    let held_by = |name: &str| match holders.map(|holders| holders.get(name).copied().unwrap_or(Holder::Free)) {
        None => String::new(),
        Some(Holder::Session(session)) => format!(" (held by session {session})"),
        Some(Holder::Free) => " (held by nobody)".to_string(),
        Some(Holder::Unknown) => " (held by a contender that just went away)".to_string(),
    };
    let mut claimants: BTreeMap<&str, Vec<&Claim>> = BTreeMap::new();
    for claim in claims {
        for item in &claim.items {
            claimants.entry(item).or_default().push(claim);
        }
    }
    let mut unclaimed = Vec::new();
    for item in items {
        let name = item.to_string();
        match claimants.remove(name.as_str()).as_deref() {
            None | Some([]) => unclaimed.push(format!("{name}{}", held_by(&name))),
            Some([claim]) => {
                let backed = holders.is_none_or(|holders| holders.get(&name) == Some(&Holder::Session(claim.session)));
                if !backed {
                    problems.push(format!("{} claims {name}{}", claim.member, held_by(&name)));
                }
            }
            Some(several) => {
                let who: Vec<&str> = several.iter().map(|claim| claim.member.as_str()).collect();
                let who = if let [a, b] = who[..] { format!("both {a} and {b}") } else { who.join(", ") };
                problems.push(format!("item {name} is listed by {who}{}", held_by(&name)));
            }
        }
    }
    if !unclaimed.is_empty() {
        problems.push(format!("no member lists {}", unclaimed.join(", ")));
    }
    for extra in claimants.keys() {
        problems.push(format!("item {extra} is listed but not among the expected items"));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Checks, from outside, that `members` (each a partitioner and the session its locks must belong to, its client's
/// `session_id().0`) have converged on `items` under the partitioner path `path`: [`check_claims`] over their
/// snapshots and the lock holders [`read_holders`] reads with `observer`, and no member changed state (generation)
/// while its locks were read. Meant for [`wait_for`], or a loop that also replaces failed members.
///
/// # Errors
/// What is not so yet, as [`check_claims`] says it; a failed lock read; a member that changed state meanwhile.
pub async fn check_converged(
    observer: &Client,
    path: &str,
    members: &[(&SetPartitioner, i64)],
    items: &[Item],
) -> Result<(), String> {
    let snapshots: Vec<Snapshot> = members.iter().map(|(partitioner, _)| partitioner.snapshot()).collect();
    let claims: Vec<Claim> =
        snapshots.iter().zip(members).map(|(snapshot, (_, session))| Claim::of(snapshot, *session)).collect();
    if let Some(claim) = claims.iter().find(|claim| claim.state != PartitionState::Acquired) {
        // Not worth a read of the locks yet.
        return check_claims(std::slice::from_ref(claim), None, &[]);
    }
    let holders = read_holders(observer, path, items).await.map_err(|err| format!("reading lock holders: {err}"))?;
    check_claims(&claims, Some(&holders), items)?;
    let moved = members
        .iter()
        .zip(&snapshots)
        .any(|((partitioner, _), then)| partitioner.snapshot().generation != then.generation);
    if moved {
        return Err("a member changed state while its claims were checked".to_string());
    }
    Ok(())
}

/// Who holds an item's lock, as read by an observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The session owning the lowest contender (as ZooKeeper stores it in `ephemeralOwner`).
    Session(i64),
    /// No contender (or no lock directory).
    Free,
    /// The lowest contender went away between the listing and its stat: unknown.
    Unknown,
}

/// Reads who holds each item's lock under the partitioner path `path`, after a `sync` (so the read is at least as
/// new as anything any session saw before the call, even through an ensemble follower). Items are read concurrently;
/// each item's answer is a point in time (sequence numbers only grow, so a lowest contender that still exists at its
/// stat is still the lowest). Keys are the items' renderings.
///
/// # Errors
/// The first failed request.
pub async fn read_holders(observer: &Client, path: &str, items: &[Item]) -> Result<BTreeMap<String, Holder>, ZkError> {
    observer.sync("/").await?;
    let reads = items.iter().map(|item| async move {
        let dir = format!("{path}/locks/{item}");
        let children = match observer.list_children(&dir).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok((item.to_string(), Holder::Free)),
            Err(err) => return Err(err),
        };
        let Some(lowest) = super::lock_contenders(&children).first().copied() else {
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

/// The one session holding the lock of every item in `items` under `path`, as ZooKeeper stores it in
/// `ephemeralOwner`: the way to find a single worker's session from outside it (e.g. to
/// [`expire`](super::Proxy::expire_session) it). Meant for [`wait_for`].
///
/// # Errors
/// A description of the holders while they are not one session (or the read failed).
pub async fn sole_holder(observer: &Client, path: &str, items: &[Item]) -> Result<i64, String> {
    let holders = read_holders(observer, path, items).await.map_err(|err| format!("reading the locks: {err}"))?;
    let sessions: BTreeSet<Option<i64>> = holders
        .values()
        .map(|holder| match holder {
            Holder::Session(session) => Some(*session),
            Holder::Free | Holder::Unknown => None,
        })
        .collect();
    match sessions.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(session)] if holders.len() == items.len() => Ok(*session),
        _ => Err(format!("lock holders: {holders:?}")),
    }
}

/// Reads what a member seen from outside the process claims now (see [`SafetyChecker::watch_claims`]).
type ClaimSource = Arc<dyn Fn() -> Option<(u64, Claim)> + Send + Sync>;

/// A member the checker watches.
#[derive(Clone)]
enum Watched {
    /// A partitioner of this process, and the session its locks must belong to.
    Partitioner { session: i64, partitioner: SetPartitioner },
    /// A member seen another way (a worker process through its output).
    Source(ClaimSource),
}

/// What one member claimed at one read: the generation its claim is versioned by, and the claim.
struct Seen {
    generation: u64,
    claim: Claim,
    /// Read through [`SafetyChecker::watch_claims`].
    external: bool,
}

impl Watched {
    /// Its generation alone (cheap: the first read of a sample).
    fn generation(&self) -> Option<u64> {
        match self {
            Watched::Partitioner { partitioner, .. } => Some(partitioner.snapshot().generation),
            Watched::Source(read) => read().map(|(generation, _)| generation),
        }
    }

    fn read(&self) -> Option<Seen> {
        match self {
            Watched::Partitioner { session, partitioner } => {
                let snapshot = partitioner.snapshot();
                Some(Seen { generation: snapshot.generation, claim: Claim::of(&snapshot, *session), external: false })
            }
            Watched::Source(read) => read().map(|(generation, claim)| Seen { generation, claim, external: true }),
        }
    }
}

/// Samples, continuously and in the background, every watched member's claims: against each other, and against the
/// lock nodes.
///
/// A claim is an item a member lists as processable: for a partitioner, an item in its published
/// [`Snapshot::items`] (only in ACQUIRED by default, also in RELEASE and ALLOCATING for the items a member keeps under
/// [`Rebalance::Incremental`](zk_partitioner::Rebalance::Incremental)); for a member seen another way, what
/// [`watch_claims`](Self::watch_claims) reads. Two samplers run side by side:
///
/// - **held by two**, every few milliseconds, from the claims alone: every member's generation, then every member's
///   claim. A member whose generation did not change between the two reads claimed the same thing over an interval
///   that contains the instant between the two passes, so an item claimed by two such members is a real violation at
///   that instant. This needs no ZooKeeper: it runs the same whether the server answers or not (a pause, a restart).
/// - **backed by the lock**: every member's claim, then (after a `sync`) every item's lock holder, then every
///   member's claim again. A member whose generation did not change across the lock read claimed the same thing
///   during the whole read, so a claim of an item whose lowest contender belongs to another session, or to nobody,
///   or an item claimed by two such members, is a real violation at that instant; a member whose generation changed
///   is skipped (read skew). A read that fails (a server down) is counted as unreadable, and its sample checks
///   nothing against the locks.
///
/// A test marks the time its faults are under way with [`fault`](Self::fault): the samples taken meanwhile are also
/// counted apart ([`Checks::during_faults`]), so the test can tell that the checker checked something while it
/// mattered, not only before and after.
///
/// Must be started inside a Tokio runtime; sampling stops when it is dropped.
pub struct SafetyChecker {
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    /// How many fault windows are open now.
    open_windows: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for SafetyChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetyChecker")
            .field("members", &lock(&self.members).len())
            .field("checks", &*lock(&self.checks))
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fault window of a [`SafetyChecker`], open until dropped or [`close`](Self::close)d: samples taken while one is
/// open are also counted in [`Checks::during_faults`].
#[must_use = "the window closes when this is dropped"]
pub struct FaultWindow {
    open_windows: Arc<AtomicUsize>,
    checks: Arc<Mutex<Checks>>,
    /// [`Checks::during_faults`] when it opened.
    at_open: Tally,
    closed: bool,
}

impl std::fmt::Debug for FaultWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultWindow").field("at_open", &self.at_open).finish_non_exhaustive()
    }
}

impl FaultWindow {
    /// What was checked while it was open (and while any other window was: windows that overlap share their
    /// samples). Closes it.
    pub fn close(mut self) -> Tally {
        self.shut();
        lock(&self.checks).during_faults.since(&self.at_open)
    }

    fn shut(&mut self) {
        if !self.closed {
            self.closed = true;
            self.open_windows.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for FaultWindow {
    fn drop(&mut self) {
        self.shut();
    }
}

impl SafetyChecker {
    /// Starts sampling with `observer` (a session of its own, chrooted like the members) over `items` of the
    /// partitioner at `path`. Add members with [`watch`](Self::watch) or [`watch_claims`](Self::watch_claims).
    pub fn start(observer: Client, path: &str, items: &[Item]) -> SafetyChecker {
        let members = Arc::new(Mutex::new(Vec::new()));
        let checks = Arc::new(Mutex::new(Checks::default()));
        let open_windows = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = Sampler {
            members: members.clone(),
            checks: checks.clone(),
            open_windows: open_windows.clone(),
            stop: stop.clone(),
            started: Instant::now(),
        };
        let tasks = vec![
            tokio::spawn(sampler.clone().exclusive_loop()),
            tokio::spawn(sampler.lock_loop(observer, path.to_string(), items.to_vec())),
        ];
        SafetyChecker { members, checks, open_windows, stop, tasks }
    }

    /// Watches one more member from now on: `partitioner`, whose locks must belong to `session` (its client's
    /// `session_id().0`).
    pub fn watch(&self, partitioner: &SetPartitioner, session: i64) {
        lock(&self.members).push(Watched::Partitioner { session, partitioner: partitioner.clone() });
    }

    /// Watches one more member seen another way, e.g. a worker process through the lines it prints: `read` returns
    /// what it claims now ([`Claim::items`], its state, the session its locks must belong to) with a generation, a
    /// number that changes whenever its claim may have (the worker's [`Snapshot::generation`], or a count of the
    /// lines read), or `None` while it claims nothing (not started yet, or known dead: a killed process processes
    /// nothing). `read` is called often, from the checker's tasks: keep it cheap and never blocking.
    ///
    /// The checker can only be as right as `read`: a member must be seen to stop claiming an item before it lets go
    /// of its lock (a worker prints its `RELEASE` before calling `release_set()`, and the process reading the lines
    /// takes them as they come), else a claim read late looks like a violation.
    pub fn watch_claims(&self, read: impl Fn() -> Option<(u64, Claim)> + Send + Sync + 'static) {
        lock(&self.members).push(Watched::Source(Arc::new(read)));
    }

    /// Opens a fault window: until the returned guard is dropped (or [`closed`](FaultWindow::close), which says
    /// what was checked meanwhile), samples are also counted in [`Checks::during_faults`]. Open one for as long as a
    /// fault is under way.
    pub fn fault(&self) -> FaultWindow {
        self.open_windows.fetch_add(1, Ordering::SeqCst);
        let mut checks = lock(&self.checks);
        checks.fault_windows += 1;
        FaultWindow {
            open_windows: self.open_windows.clone(),
            checks: self.checks.clone(),
            at_open: checks.during_faults,
            closed: false,
        }
    }

    /// Stops sampling (after the samples in progress) and returns what was seen.
    ///
    /// # Panics
    /// If a sampling task panicked.
    pub async fn stop(mut self) -> Checks {
        self.stop.store(true, Ordering::SeqCst);
        for task in std::mem::take(&mut self.tasks) {
            if let Err(err) = task.await {
                panic!("the safety checker's task failed: {err}");
            }
        }
        self.checks()
    }

    /// What was seen so far.
    pub fn checks(&self) -> Checks {
        lock(&self.checks).clone()
    }

    /// Waits until at least `min_claims` claims have been checked against the locks in all (so the check was not
    /// vacuous: call it once members are ACQUIRED), stops sampling after the samples in progress, and returns what was
    /// seen. The count includes claims checked before and after any fault: to require checks while faults were under
    /// way, see [`assert_safe_during_faults`](Self::assert_safe_during_faults).
    ///
    /// # Panics
    /// If a violation was seen, or fewer than `min_claims` claims were checked within 10 s (scaled by
    /// [`timing`](super::timing)).
    pub async fn assert_safe(self, min_claims: u64) -> Checks {
        let checks = &self.checks;
        let enough = wait_for("the safety checker to check enough claims", timing(Duration::from_secs(10)), || {
            let seen = lock(checks).clone();
            async move { if seen.total.claims_checked >= min_claims { Ok(()) } else { Err(format!("{seen:?}")) } }
        });
        enough.await;
        let checks = self.stop().await;
        assert!(checks.violations.is_empty(), "safety violations: {:#?}\n{checks:?}", checks.violations);
        assert!(
            checks.total.claims_checked >= min_claims,
            "the safety checker checked only {} claims (wanted at least {min_claims}): {checks:?}",
            checks.total.claims_checked
        );
        checks
    }

    /// Stops sampling (after the samples in progress) and asserts that no violation was seen, that fault windows
    /// were opened ([`fault`](Self::fault)), and that inside them at least `min_claims` claims were checked against
    /// the locks and at least `min_claims` against each other. Returns what was seen, for more specific assertions.
    ///
    /// # Panics
    /// If a violation was seen, no fault window was opened, or fewer claims were checked inside them.
    pub async fn assert_safe_during_faults(self, min_claims: u64) -> Checks {
        let checks = self.stop().await;
        assert!(checks.violations.is_empty(), "safety violations: {:#?}\n{checks:?}", checks.violations);
        let during = &checks.during_faults;
        assert!(checks.fault_windows > 0, "no fault window was opened: nothing says when the faults were: {checks:?}");
        assert!(
            during.claims_checked >= min_claims && during.exclusive_claims >= min_claims,
            "inside the fault windows the safety checker checked only {} claims against the locks and {} against \
             each other (wanted at least {min_claims} of each): {checks:?}",
            during.claims_checked,
            during.exclusive_claims
        );
        checks
    }
}

impl Drop for SafetyChecker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What both sampling loops share.
#[derive(Clone)]
struct Sampler {
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    open_windows: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    started: Instant,
}

impl Sampler {
    fn in_fault(&self) -> bool {
        self.open_windows.load(Ordering::SeqCst) > 0
    }

    fn record(&self, tally: Tally, in_fault: bool, found: Vec<String>) {
        let mut checks = lock(&self.checks);
        checks.count(&tally, in_fault);
        checks.violations.extend(found);
    }

    /// Held by two, from the claims alone, every few milliseconds.
    async fn exclusive_loop(self) {
        while !self.stop.load(Ordering::SeqCst) {
            let in_fault_at_start = self.in_fault();
            let watched = lock(&self.members).clone();
            let before: Vec<Option<u64>> = watched.iter().map(Watched::generation).collect();
            let after: Vec<Option<Seen>> = watched.iter().map(Watched::read).collect();
            let at = self.started.elapsed();
            let steady: Vec<&Claim> = before
                .iter()
                .zip(&after)
                .filter_map(|(before, after)| match (before, after) {
                    (Some(generation), Some(seen)) if seen.generation == *generation => Some(&seen.claim),
                    _ => None,
                })
                .filter(|claim| claim.state != PartitionState::Failure)
                .collect();
            let (claims, found) = held_by_two(&steady, at);
            let tally = Tally { exclusive_samples: 1, exclusive_claims: claims, ..Tally::default() };
            self.record(tally, in_fault_at_start || self.in_fault(), found);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Backed by the lock: claims, then the lock holders, then the claims again.
    async fn lock_loop(self, observer: Client, path: String, items: Vec<Item>) {
        while !self.stop.load(Ordering::SeqCst) {
            let in_fault_at_start = self.in_fault();
            let watched = lock(&self.members).clone();
            let before: Vec<Option<Seen>> = watched.iter().map(Watched::read).collect();
            let read = tokio::time::timeout(Duration::from_secs(2), read_holders(&observer, &path, &items)).await;
            let after: Vec<Option<u64>> = watched.iter().map(Watched::generation).collect();
            let in_fault = in_fault_at_start || self.in_fault();
            let holders = match read {
                Ok(Ok(holders)) => holders,
                Ok(Err(_)) | Err(_) => {
                    self.record(Tally { unreadable: 1, ..Tally::default() }, in_fault, Vec::new());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let at = self.started.elapsed();
            let steady: Vec<&Seen> = before
                .iter()
                .zip(&after)
                .filter_map(|(before, after)| match (before, after) {
                    (Some(seen), Some(generation)) if seen.generation == *generation => Some(seen),
                    _ => None,
                })
                .filter(|seen| seen.claim.state != PartitionState::Failure)
                .collect();
            let mut tally = Tally { samples: 1, ..Tally::default() };
            let mut found = Vec::new();
            for seen in &steady {
                let claim = &seen.claim;
                for name in &claim.items {
                    let checked = match holders.get(name).copied().unwrap_or(Holder::Unknown) {
                        Holder::Session(owner) if owner == claim.session => true,
                        Holder::Session(owner) => {
                            found.push(format!(
                                "at {at:.2?}: {} (session {}) is {} with {name} (generation {}), whose lock is held \
                                 by session {owner}",
                                claim.member, claim.session, claim.state, seen.generation
                            ));
                            true
                        }
                        Holder::Free => {
                            found.push(format!(
                                "at {at:.2?}: {} (session {}) is {} with {name} (generation {}), which has no lock \
                                 node at all",
                                claim.member, claim.session, claim.state, seen.generation
                            ));
                            true
                        }
                        Holder::Unknown => false,
                    };
                    if checked {
                        tally.claims_checked += 1;
                        tally.external_claims_checked += u64::from(seen.external);
                    }
                }
            }
            let claims: Vec<&Claim> = steady.iter().map(|seen| &seen.claim).collect();
            found.extend(held_by_two(&claims, at).1);
            self.record(tally, in_fault, found);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Items claimed by two of `claims` (all read at one instant): how many claims were compared, and a violation for
/// each item claimed twice.
fn held_by_two(claims: &[&Claim], at: Duration) -> (u64, Vec<String>) {
    let mut claimed_by: BTreeMap<&str, &str> = BTreeMap::new();
    let mut found = Vec::new();
    let mut count = 0;
    for claim in claims {
        for item in &claim.items {
            count += 1;
            if let Some(other) = claimed_by.insert(item, &claim.member) {
                found.push(format!("at {at:.2?}: {item} claimed by both {other} and {}", claim.member));
            }
        }
    }
    (count, found)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn snapshot(member: &str, state: PartitionState, items: &[i64], party: &[&str]) -> Snapshot {
        let mut snapshot = Snapshot::initial(Arc::from(member));
        snapshot.state = state;
        snapshot.items = items.iter().copied().map(Item::from).collect::<Vec<_>>().into();
        snapshot.members = party.iter().map(|m| m.to_string()).collect::<Vec<_>>().into();
        snapshot
    }

    #[test]
    fn an_item_listed_twice_is_named() {
        let a = snapshot("a-1", PartitionState::Acquired, &[0, 1], &["a-1", "b-2"]);
        let b = snapshot("b-2", PartitionState::Acquired, &[1, 2], &["a-1", "b-2"]);
        let err = check_exclusive(&[a.clone(), b]).unwrap_err();
        assert_eq!(err, "item 1 is listed by both a-1 and b-2");
        let failed = snapshot("b-2", PartitionState::Failure, &[], &[]);
        assert!(check_exclusive(&[a, failed]).is_ok());
    }

    #[test]
    fn stable_means_acquired_same_party_and_a_disjoint_cover() {
        let party = ["a-1", "b-2"];
        let items: Vec<Item> = (0..4).map(Item::from).collect();
        let a = snapshot("a-1", PartitionState::Acquired, &[0, 2], &party);
        let b = snapshot("b-2", PartitionState::Acquired, &[1, 3], &party);
        assert_eq!(check_stable(&[a.clone(), b.clone()], &items), Ok(()));
        let short = snapshot("b-2", PartitionState::Acquired, &[1], &party);
        assert_eq!(check_stable(&[a.clone(), short], &items).unwrap_err(), "no member lists 3");
        let allocating = snapshot("b-2", PartitionState::Allocating, &[], &party);
        assert_eq!(check_stable(&[a.clone(), allocating], &items).unwrap_err(), "b-2 is ALLOCATING");
        let other_party = snapshot("b-2", PartitionState::Acquired, &[1, 3], &["b-2"]);
        assert!(check_stable(&[a, other_party], &items).unwrap_err().starts_with("b-2 allocated for party"));
    }

    #[test]
    fn an_item_claimed_by_two_is_found_from_the_claims_alone() {
        let party = ["a-1", "b-2"];
        let a = Claim::of(&snapshot("a-1", PartitionState::Acquired, &[0, 2], &party), 10);
        let b = Claim::of(&snapshot("b-2", PartitionState::Acquired, &[1, 2], &party), 20);
        let (count, found) = held_by_two(&[&a, &b], Duration::from_millis(1500));
        assert_eq!(count, 4);
        assert_eq!(found, ["at 1.50s: 2 claimed by both a-1 and b-2"]);
        let c = Claim { items: vec!["3".to_string()], ..b };
        assert_eq!(held_by_two(&[&a, &c], Duration::ZERO), (3, Vec::new()));
    }

    #[test]
    fn a_fault_windows_tally_is_what_was_counted_while_it_was_open() {
        let mut checks = Checks::default();
        let sample =
            Tally { samples: 1, claims_checked: 4, exclusive_samples: 1, exclusive_claims: 6, ..Tally::default() };
        checks.count(&sample, false);
        let at_open = checks.during_faults;
        checks.count(&sample, true);
        checks.count(&Tally { unreadable: 1, ..Tally::default() }, true);
        assert_eq!((checks.total.samples, checks.total.unreadable, checks.total.claims_checked), (2, 1, 8));
        assert_eq!(
            checks.during_faults.since(&at_open),
            Tally {
                samples: 1,
                unreadable: 1,
                claims_checked: 4,
                exclusive_samples: 1,
                exclusive_claims: 6,
                ..Tally::default()
            }
        );
    }

    #[test]
    fn converged_means_every_claim_backed_by_the_claimants_lock() {
        let party = ["a-1", "b-2"];
        let items: Vec<Item> = (0..3).map(Item::from).collect();
        let a = Claim::of(&snapshot("a-1", PartitionState::Acquired, &[0, 2], &party), 10);
        let b = Claim::of(&snapshot("b-2", PartitionState::Acquired, &[1], &party), 20);
        let mut holders: BTreeMap<String, Holder> = [("0", 10), ("1", 20), ("2", 10)]
            .map(|(item, session)| (item.to_string(), Holder::Session(session)))
            .into();
        assert_eq!(check_claims(&[a.clone(), b.clone()], Some(&holders), &items), Ok(()));
        holders.insert("2".to_string(), Holder::Free);
        assert_eq!(
            check_claims(&[a.clone(), b.clone()], Some(&holders), &items).unwrap_err(),
            "a-1 claims 2 (held by nobody)"
        );
        let twice = Claim { items: vec!["1".to_string(), "7".to_string()], party: None, ..a.clone() };
        assert_eq!(
            check_claims(&[twice, b], None, &items).unwrap_err(),
            "item 1 is listed by both a-1 and b-2; no member lists 0, 2; item 7 is listed but not among the expected \
             items"
        );
    }
}
