//! Partitioner-level test helpers: members with their own sessions, waits on partitioner state, and a reader of the
//! lock nodes that checks who really holds each item.

use std::collections::BTreeMap;
use std::time::Duration;

use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Item, PartitionState, SetPartitioner, Snapshot};

pub use zk_partitioner_testing::wait_snapshot;
use zk_partitioner_testing::{Claim, Holder, check_claims, read_holders};

/// The `time_boundary` the ported kazoo tests use.
pub const TIME_BOUNDARY: Duration = Duration::from_millis(200);

/// The partitioner path members use (relative to the test's chroot).
pub const PATH: &str = "/partitioner";

/// One party member: its own ZooKeeper session (the client is kept so tests can check lock ownership by session)
/// and its partitioner.
pub struct Member {
    pub client: Client,
    pub partitioner: SetPartitioner,
}

impl Member {
    /// The member's session id, as ZooKeeper stores it in `ephemeralOwner`.
    pub fn session(&self) -> i64 {
        self.client.session_id().0
    }

    pub fn state(&self) -> PartitionState {
        self.partitioner.state()
    }

    /// Waits until the partitioner reaches `state`; panics with the last snapshot after `deadline`.
    pub async fn wait_state(&self, state: PartitionState, deadline: Duration) -> Snapshot {
        wait_snapshot(&self.partitioner, &format!("state {state}"), deadline, |s| s.state == state).await
    }

    /// Waits until the partitioner is Acquired with exactly `items`.
    pub async fn wait_items(&self, items: &[Item], deadline: Duration) {
        wait_snapshot(&self.partitioner, &format!("ACQUIRED with {items:?}"), deadline, |s| {
            s.state == PartitionState::Acquired && *s.items == *items
        })
        .await;
    }
}

/// A member at [`PATH`] on `client`'s session, with the `time_boundary` [`TIME_BOUNDARY`], its builder then adjusted
/// by `configure` (partition function, limits, policies...).
pub async fn build_member(
    client: Client,
    identifier: &str,
    items: &[Item],
    configure: impl FnOnce(zk_partitioner::Builder) -> zk_partitioner::Builder,
) -> Member {
    let builder = SetPartitioner::builder(client.clone(), PATH, items.to_vec())
        .identifier(identifier)
        .time_boundary(TIME_BOUNDARY);
    let partitioner = configure(builder).build().await.expect("build partitioner");
    Member { client, partitioner }
}

/// Records every snapshot a partitioner publishes, from now on, for assertions on the sequence of states.
pub struct Recorder {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Snapshot>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub fn start(partitioner: &SetPartitioner) -> Self {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        // The current snapshot first, then one per change, until the task has stopped.
        let mut changes = partitioner.subscribe();
        changes.mark_changed();
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let snapshot = changes.borrow_and_update().clone();
                sink.lock().unwrap().push(snapshot);
            }
        });
        Recorder { seen, task }
    }

    /// The states seen so far, in order.
    pub fn states(&self) -> Vec<PartitionState> {
        self.seen.lock().unwrap().iter().map(|s| s.state).collect()
    }

    /// Every snapshot seen so far.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The ZooKeeper session holding each item's lock, as the kit's [`read_holders`] reads it under the partitioner
/// `path` (the lowest contender's `ephemeralOwner`). Items with no holder (no contender, or one that just went away)
/// are absent. Panics if the read fails.
pub async fn lock_holders(observer: &Client, path: &str, items: &[Item]) -> BTreeMap<String, i64> {
    let holders = read_holders(observer, path, items).await.unwrap_or_else(|err| panic!("reading lock holders: {err}"));
    holders
        .into_iter()
        .filter_map(|(item, holder)| match holder {
            Holder::Session(session) => Some((item, session)),
            Holder::Free | Holder::Unknown => None,
        })
        .collect()
}

/// Each member's partitioner with the session its locks must belong to, as
/// [`check_converged`](zk_partitioner_testing::check_converged) takes them.
pub fn claimants<'a>(members: &[&'a Member]) -> Vec<(&'a SetPartitioner, i64)> {
    members.iter().map(|member| (&member.partitioner, member.session())).collect()
}

/// Asserts the partitioners' claims form a disjoint cover of `items` and that each claim is backed by a lock node
/// owned by the claiming member's session: the kit's [`check_claims`], without the party check, panicking.
pub async fn assert_disjoint_cover(observer: &Client, path: &str, members: &[&Member], items: &[Item]) {
    let holders = read_holders(observer, path, items).await.unwrap_or_else(|err| panic!("reading lock holders: {err}"));
    let claims: Vec<Claim> = members
        .iter()
        .map(|member| Claim { party: None, ..Claim::of(&member.partitioner.snapshot(), member.session()) })
        .collect();
    if let Err(problem) = check_claims(&claims, Some(&holders), items) {
        panic!("the claims are not a disjoint cover backed by the locks: {problem}");
    }
}

/// Items `0..n` as integers, the way kazoo's tests build their sets (`range(n)`).
pub fn ints(n: i64) -> Vec<Item> {
    (0..n).map(Item::from).collect()
}

/// Integer items from a list.
pub fn items_of(values: &[i64]) -> Vec<Item> {
    values.iter().copied().map(Item::from).collect()
}

/// Runs kazoo's worker loop on every member until all are ACQUIRED over the same party of `members.len()`: a member
/// in RELEASE calls `release_set()`. Panics with every member's snapshot after `deadline`.
pub async fn settle(members: &[Member], deadline: Duration) {
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        let snapshots: Vec<Snapshot> = members.iter().map(|m| m.partitioner.snapshot()).collect();
        let done = snapshots.iter().all(|s| s.state == PartitionState::Acquired && s.members.len() == members.len());
        if done {
            return;
        }
        assert!(tokio::time::Instant::now() < give_up, "members did not settle within {deadline:?}: {snapshots:#?}");
        for member in members {
            if member.state() == PartitionState::Release {
                member.partitioner.release_set().await.expect("release_set");
            }
        }
        // Wake on the next transition of any member (or re-check after a short while).
        let changes = members.iter().map(|m| {
            let mut receiver = m.partitioner.subscribe();
            Box::pin(async move { receiver.changed().await.ok() })
        });
        let _ = tokio::time::timeout(Duration::from_millis(200), futures::future::select_all(changes)).await;
    }
}

/// Runs kazoo's worker loop for a member in the background: whenever it is told to release, it releases. Stops when
/// the partitioner fails or the returned handle is dropped (aborted).
pub fn auto_release(partitioner: &SetPartitioner) -> AbortOnDrop {
    let partitioner = partitioner.clone();
    let mut changes = partitioner.subscribe();
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let state = changes.borrow_and_update().state;
            match state {
                PartitionState::Release => {
                    let _ = partitioner.release_set().await;
                }
                PartitionState::Failure => return,
                _ => {}
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }))
}

/// A task that is aborted when this handle drops.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who owns each item, with its fencing token (the creation zxid of the lock node that holds it), by member name.
pub fn owners_of<'a>(
    partitioners: impl IntoIterator<Item = &'a SetPartitioner>,
) -> BTreeMap<Item, (String, zk_partitioner::FencingToken)> {
    let mut owners = BTreeMap::new();
    for partitioner in partitioners {
        let snapshot = partitioner.snapshot();
        for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
            owners.insert(item.clone(), (snapshot.member.to_string(), *token));
        }
    }
    owners
}
