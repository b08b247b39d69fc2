//! Safety checks: what members claim ([`Snapshot::items`]) against each other and against who really holds each lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use zookeeper_client::{Client, Error as ZkError};

use crate::{Item, PartitionState, SetPartitioner, Snapshot};

use super::{timing, wait_for};

/// Checks snapshots of several members taken at one moment: no item is listed by two members (a listed item is
/// one the member's worker may process).
///
/// # Errors
/// The first item listed twice, and by whom.
///
/// # Examples
/// ```
/// use zk_partitioner::testing::check_exclusive;
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
/// use zk_partitioner::testing::check_claims;
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

/// A member the checker watches: its partitioner and the session its locks must belong to.
#[derive(Clone)]
struct Watched {
    session: i64,
    partitioner: SetPartitioner,
}

/// What a [`SafetyChecker`] saw.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
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
/// [`Rebalance::Incremental`](crate::Rebalance::Incremental). One sample: every member's snapshot, then (after a
/// `sync`) every item's lock holder, then every member's snapshot again. A member whose generation did not change
/// across the lock read claimed the same thing during the whole read, so a claim of an item whose lowest contender
/// belongs to another session, or to nobody, or an item claimed by two such members, is a real violation at that
/// instant; a member whose generation changed is skipped (read skew). Reads that fail (a server down) are counted
/// and skipped.
///
/// Must be started inside a Tokio runtime; sampling stops when it is dropped.
pub struct SafetyChecker {
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
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

impl SafetyChecker {
    /// Starts sampling with `observer` (a session of its own, chrooted like the members) over `items` of the
    /// partitioner at `path`. Add members with [`watch`](Self::watch).
    pub fn start(observer: Client, path: &str, items: &[Item]) -> SafetyChecker {
        let members = Arc::new(Mutex::new(Vec::new()));
        let checks = Arc::new(Mutex::new(Checks::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(sample_loop(
            observer,
            path.to_string(),
            items.to_vec(),
            members.clone(),
            checks.clone(),
            stop.clone(),
        ));
        SafetyChecker { members, checks, stop, task: Some(task) }
    }

    /// Watches one more member from now on: `partitioner`, whose locks must belong to `session` (its client's
    /// `session_id().0`).
    pub fn watch(&self, partitioner: &SetPartitioner, session: i64) {
        lock(&self.members).push(Watched { session, partitioner: partitioner.clone() });
    }

    /// Stops sampling (after the sample in progress) and returns what was seen.
    ///
    /// # Panics
    /// If the sampling task panicked.
    pub async fn stop(mut self) -> Checks {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take()
            && let Err(err) = task.await
        {
            panic!("the safety checker's task failed: {err}");
        }
        self.checks()
    }

    /// What was seen so far.
    pub fn checks(&self) -> Checks {
        lock(&self.checks).clone()
    }

    /// Waits until at least `min_claims` claims have been checked in all (so the check was not vacuous: call it once
    /// members are ACQUIRED), stops sampling after the sample in progress, and returns what was seen.
    ///
    /// # Panics
    /// If a violation was seen, or fewer than `min_claims` claims were checked within 10 s (scaled by
    /// [`timing`](super::timing)).
    pub async fn assert_safe(self, min_claims: u64) -> Checks {
        let checks = &self.checks;
        let enough = wait_for("the safety checker to check enough claims", timing(Duration::from_secs(10)), || {
            let seen = lock(checks).clone();
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
    path: String,
    items: Vec<Item>,
    members: Arc<Mutex<Vec<Watched>>>,
    checks: Arc<Mutex<Checks>>,
    stop: Arc<AtomicBool>,
) {
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let watched = lock(&members).clone();
        let before: Vec<Snapshot> = watched.iter().map(|w| w.partitioner.snapshot()).collect();
        let read = tokio::time::timeout(Duration::from_secs(2), read_holders(&observer, &path, &items)).await;
        let after: Vec<Snapshot> = watched.iter().map(|w| w.partitioner.snapshot()).collect();
        let holders = match read {
            Ok(Ok(holders)) => holders,
            Ok(Err(_)) | Err(_) => {
                lock(&checks).unreadable += 1;
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
                        "at {at:.2?}: {} (session {}) is {} with {name} (generation {}), whose lock is held by \
                         session {owner}",
                        before.member, w.session, before.state, before.generation
                    )),
                    Holder::Free => found.push(format!(
                        "at {at:.2?}: {} (session {}) is {} with {name} (generation {}), which has no lock node \
                         at all",
                        before.member, w.session, before.state, before.generation
                    )),
                    Holder::Unknown => claims -= 1,
                }
            }
        }
        {
            let mut checks = lock(&checks);
            checks.samples += 1;
            checks.claims_checked += claims;
            checks.violations.extend(found);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
