//! The decision table, row by row: a scripted conversation with one core (no ZooKeeper, no clock), each test one row
//! or one bug of the old driver.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::sabotage::Sabotage;
use crate::{KazooStride, PartitionState, Rebalance, SessionPolicy};

const TB: Duration = Duration::from_millis(100);
/// A quiet party's wait, with the longest jitter a member adds to it (a tenth of the boundary).
const SETTLED: Duration = Duration::from_millis(110);

/// A core for member `me` of a set of `items` integers, with a clock the test moves.
struct Script {
    core: Core,
    now: Instant,
    /// Actions the core asked for and the test has not looked at yet.
    seen: Vec<Action>,
}

fn config(items: usize, rebalance: Rebalance, policy: SessionPolicy, limit: Option<Duration>) -> CoreConfig {
    let items: Vec<Item> = (0..items as i64).map(Item::from).collect();
    CoreConfig {
        agreement: Agreement::new(Some(&items), None, &KazooStride, None),
        kazoo_compatible: true,
        weights: Default::default(),
        identifier: "a".into(),
        party_node: node_of("a-0000000000"),
        items,
        shared_set: None,
        partition_fn: Box::new(KazooStride),
        time_boundary: TB,
        max_reaction_time: Duration::from_millis(10),
        max_allocation_time: limit,
        session_policy: policy,
        rebalance,
        window: 100,
        batch: Batch::fixed(100),
        jitter_parties: JitterParties::default(),
        lock_dirs_exist: true,
        departure_fast_path: true,
    }
}

/// A request lost with the connection.
fn lost_connection() -> Failed {
    Failed { code: Code::ConnectionLoss, error: crate::error::Detail::new(std::io::Error::other("lost")) }
}

/// The party node of a member named `member`.
fn node_of(member: &str) -> String {
    format!("0123456789abcdef0123456789abcdef-{member}")
}

/// A read of a shared set in force at `version` with `items` (integers or strings), nothing under way.
fn set_read(items: &[Item], version: u64) -> crate::set_layout::RawRead {
    set_read_with(items, version, false)
}

/// As [`set_read`], of a set that has lineage (`lineage=on`) or not.
fn set_read_with(items: &[Item], version: u64, lineage: bool) -> crate::set_layout::RawRead {
    use crate::set_layout::{Header, Kind, RawRead, State};
    let header = Header {
        kind: Kind::of(items),
        version,
        state: State::Ready,
        log: Vec::new(),
        weights: None,
        lineage,
        deltas: Vec::new(),
    };
    RawRead {
        header: Some((header.render().into_bytes(), version as i32)),
        children: items.iter().map(Item::node_name).collect(),
        listed: None,
        change: None,
        lease: None,
        weights: None,
    }
}

impl Script {
    fn new(cfg: CoreConfig) -> Script {
        let now = Instant::now();
        let mut script = Script { core: Core::new(cfg, Arc::from("a-0000000000"), 7, now), now, seen: Vec::new() };
        script.drain();
        script
    }

    fn drain(&mut self) {
        while let Some(action) = self.core.poll_action() {
            self.seen.push(action);
        }
    }

    fn send(&mut self, event: Event) {
        self.core.handle(event, self.now);
        self.drain();
    }

    fn wait(&mut self, by: Duration) {
        self.now += by;
        self.core.handle_timeout(self.now);
        self.drain();
    }

    /// Takes the one pending request matching `pick`.
    fn request(&mut self, what: &str, pick: impl Fn(&Op) -> bool) -> (ReqId, Op) {
        let at = self
            .seen
            .iter()
            .position(|a| matches!(a, Action::Request(_, op) if pick(op)))
            .unwrap_or_else(|| panic!("no {what} request among {:?}", self.seen));
        match self.seen.remove(at) {
            Action::Request(id, op) => (id, op),
            _ => unreachable!("matched a request"),
        }
    }

    /// Answers the party read with these members.
    fn party(&mut self, members: &[&str]) {
        let (id, _) = self.request("party read", |op| *op == Op::ReadParty);
        let children = members.iter().map(|m| node_of(m)).collect();
        self.send(Event::Reply(id, Reply::Party(Ok(PartyRead { children }))));
    }

    /// Answers every create and listing (every directory exists): our nodes are the only contenders, so every lock
    /// is held.
    fn grant_locks(&mut self) {
        while let Some(at) = self.seen.iter().position(|a| matches!(a, Action::Request(_, Op::Create { .. }))) {
            let Action::Request(id, Op::Create { contenders, .. }) = self.seen.remove(at) else { unreachable!() };
            let created: Vec<(String, i64)> =
                contenders.iter().map(|(_, prefix)| (format!("{prefix}0000000001"), 42)).collect();
            let nodes: HashMap<usize, String> =
                contenders.iter().zip(&created).map(|((item, _), (node, _))| (*item, node.clone())).collect();
            self.send(Event::Reply(id, Reply::Created(Ok(created))));
            let (id, Op::List(items)) = self.request("listing", |op| matches!(op, Op::List(_))) else { unreachable!() };
            // Our node is read along only while its token is unknown; the creates above gave it.
            assert!(items.iter().all(|(_, node)| node.is_none()), "a known token read again");
            let listed = items.iter().map(|(item, _)| Ok((vec![nodes[item].clone()], 0))).collect();
            self.send(Event::Reply(id, Reply::Listed(Ok(listed))));
        }
    }

    /// Answers the read of the other members' announcements: each the same line as ours.
    fn announcements_agree(&mut self) {
        let (id, Op::ReadAnnouncements(nodes)) =
            self.request("announcements", |op| matches!(op, Op::ReadAnnouncements(_)))
        else {
            unreachable!()
        };
        let ours = self.core.cfg.agreement;
        let data = nodes.iter().map(|node| Some((ours.node_data(node).into_bytes(), 1))).collect();
        self.send(Event::Reply(id, Reply::Announcements(Ok(data))));
    }

    /// The publications since the last call.
    fn published(&mut self) -> Vec<Publication> {
        let (publications, rest) =
            std::mem::take(&mut self.seen).into_iter().partition(|a| matches!(a, Action::Publish(_)));
        self.seen = rest;
        publications.into_iter().map(|a| if let Action::Publish(p) = a { *p } else { unreachable!() }).collect()
    }

    fn last_state(&mut self) -> PartitionState {
        self.published().last().map(|p| p.state).unwrap_or_else(|| self.core.state())
    }

    fn acks(&mut self) -> Vec<(AckId, Result<(), Cause>)> {
        let (acks, rest) = std::mem::take(&mut self.seen).into_iter().partition(|a| matches!(a, Action::Ack(..)));
        self.seen = rest;
        acks.into_iter().map(|a| if let Action::Ack(id, r) = a { (id, r) } else { unreachable!() }).collect()
    }

    /// Builds up to `Acquired` as the only member (owning every item).
    fn acquired(cfg: CoreConfig) -> Script {
        let mut s = Script::new(cfg);
        s.party(&["a-0000000000"]);
        s.wait(SETTLED);
        s.grant_locks();
        assert_eq!(s.last_state(), PartitionState::Acquired);
        s
    }
}

fn listed(p: &Publication) -> BTreeSet<usize> {
    p.items.iter().map(|&(i, _)| i).collect()
}

#[test]
fn allocation_waits_for_a_quiet_party_then_takes_every_lock() {
    let mut s = Script::new(config(4, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.wait(TB / 2);
    assert!(s.seen.iter().all(|a| !matches!(a, Action::Request(_, Op::Create { .. }))), "took locks before the quiet");
    s.send(Event::PartyChanged); // the quiet period starts again
    s.party(&["a-0000000000", "b-0000000001"]);
    s.wait(TB / 2 + TB / 4);
    assert!(
        s.seen.iter().all(|a| !matches!(a, Action::Request(_, Op::Create { .. }))),
        "the change did not restart it"
    );
    s.wait(SETTLED);
    s.grant_locks();
    let acquired = s.published().pop().expect("a publication");
    assert_eq!(acquired.state, PartitionState::Acquired);
    assert_eq!(listed(&acquired), BTreeSet::from([0, 2]), "kazoo's stride: member 0 of 2");
}

/// Records every call of the partition function: `prepare` or `partition`, and the party it was given.
struct Recorder(std::sync::Mutex<Vec<(&'static str, Vec<String>)>>);

impl crate::PartitionFn for Arc<Recorder> {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        self.0.lock().unwrap().push(("partition", members.to_vec()));
        KazooStride.partition(me, members, items)
    }

    fn prepare(&self, _me: &str, members: &[String], _items: &[Item]) {
        self.0.lock().unwrap().push(("prepare", members.to_vec()));
    }
}

#[test]
fn the_partition_function_works_ahead_a_quarter_into_each_quiet_period() {
    let recorder = Arc::new(Recorder(std::sync::Mutex::new(Vec::new())));
    let mut cfg = config(4, Rebalance::Eager, SessionPolicy::Standard, None);
    cfg.partition_fn = Box::new(recorder.clone());
    let mut s = Script::new(cfg);
    let calls = |r: &Arc<Recorder>| std::mem::take(&mut *r.0.lock().unwrap());
    let one = vec!["a-0000000000".to_string()];
    let two = vec!["a-0000000000".to_string(), "b-0000000001".to_string()];
    s.party(&["a-0000000000"]);
    // The core asks to be woken for it: the quarter is a timeout of its own.
    assert_eq!(s.core.poll_timeout(), Some(s.now + TB / 4), "woken a quarter into the quiet period");
    s.wait(TB / 4 - Duration::from_millis(1));
    assert!(calls(&recorder).is_empty(), "nothing before a quarter of the boundary");
    s.wait(Duration::from_millis(1));
    assert_eq!(calls(&recorder), [("prepare", one.clone())]);
    s.wait(Duration::from_millis(10));
    assert!(calls(&recorder).is_empty(), "once per quiet period");
    // A change starts a new period, with its own call ahead.
    s.send(Event::PartyChanged);
    s.party(&["a-0000000000", "b-0000000001"]);
    s.wait(TB / 4);
    assert_eq!(calls(&recorder), [("prepare", two.clone())]);
    s.wait(SETTLED);
    assert_eq!(calls(&recorder), [("partition", two)], "the deciding call, with the same party");
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
    s.wait(TB);
    assert!(calls(&recorder).is_empty(), "nothing while the assignment stands");
}

#[test]
fn eager_party_change_while_acquired_revokes_everything_and_release_set_deletes_after_publishing() {
    let mut s = Script::acquired(config(2, Rebalance::Eager, SessionPolicy::Standard, None));
    s.send(Event::PartyChanged);
    let release = s.published().pop().expect("Release");
    assert_eq!(
        (release.state, release.revoked.clone(), listed(&release)),
        (PartitionState::Release, vec![0, 1], BTreeSet::new())
    );
    s.send(Event::ReleaseSet(1));
    // The publication comes before the delete, and the ack only after it.
    let order: Vec<&str> = s
        .seen
        .iter()
        .map(|a| match a {
            Action::Publish(_) => "publish",
            Action::Request(_, Op::Release { .. }) => "release",
            Action::Ack(..) => "ack",
            _ => "other",
        })
        .filter(|k| *k != "other")
        .collect();
    assert_eq!(order, ["publish", "release"]);
    let (id, _) = s.request("release", |op| matches!(op, Op::Release { .. }));
    s.send(Event::Reply(id, Reply::Released(Ok(()))));
    assert_eq!(s.acks(), [(1, Ok(()))]);
}

#[test]
fn incremental_party_change_keeps_what_stays_and_revokes_only_what_moves() {
    let mut s = Script::acquired(config(4, Rebalance::Incremental, SessionPolicy::Standard, None));
    s.published();
    s.send(Event::PartyChanged);
    assert!(s.published().is_empty(), "nothing stops while the party settles");
    s.party(&["a-0000000000", "b-0000000001"]);
    s.wait(SETTLED);
    let release = s.published().pop().expect("Release");
    assert_eq!(release.state, PartitionState::Release);
    assert_eq!((listed(&release), release.revoked.clone()), (BTreeSet::from([0, 2]), vec![1, 3]));
    s.send(Event::ReleaseSet(9));
    let (id, Op::Release { nodes, .. }) = s.request("release", |op| matches!(op, Op::Release { .. })) else {
        unreachable!()
    };
    assert_eq!(nodes.iter().map(|n| n.item).collect::<Vec<_>>(), [1, 3], "only the revoked items");
    s.send(Event::Reply(id, Reply::Released(Ok(()))));
    assert_eq!(s.acks(), [(9, Ok(()))]);
    let back = s.published().pop().expect("Acquired again");
    assert_eq!((back.state, listed(&back)), (PartitionState::Acquired, BTreeSet::from([0, 2])));
}

#[test]
fn standard_suspension_stops_processing_at_once_in_every_mode() {
    for rebalance in [Rebalance::Eager, Rebalance::Incremental] {
        let mut s = Script::acquired(config(2, rebalance, SessionPolicy::Standard, None));
        s.send(Event::Suspended);
        let release = s.published().pop().expect("Release");
        assert_eq!((release.state, listed(&release)), (PartitionState::Release, BTreeSet::new()), "{rebalance:?}");
        // A reconnection the client folded into one "connected" counts as a suspension too.
        let mut s = Script::acquired(config(2, rebalance, SessionPolicy::Standard, None));
        s.send(Event::Connected);
        assert_eq!(s.last_state(), PartitionState::Release, "{rebalance:?}: folded reconnection");
    }
}

#[test]
fn session_aware_suspension_resumes_with_the_same_locks_when_they_survive() {
    let mut s = Script::acquired(config(2, Rebalance::Incremental, SessionPolicy::SessionAware, None));
    s.send(Event::Suspended);
    let paused = s.published().pop().expect("Release");
    assert!(paused.suspended && paused.items.is_empty());
    s.send(Event::ReleaseSet(3));
    assert!(s.acks().is_empty(), "release_set() waits for the session's fate");
    s.send(Event::Connected);
    let (id, _) = s.request("verification", |op| matches!(op, Op::Verify(_)));
    s.send(Event::Reply(id, Reply::Verified(Ok(true))));
    let resumed = s.published().pop().expect("Acquired");
    assert_eq!((resumed.state, listed(&resumed)), (PartitionState::Acquired, BTreeSet::from([0, 1])));
    assert_eq!(s.acks(), [(3, Ok(()))]);
    assert!(s.seen.iter().all(|a| !matches!(a, Action::Request(_, Op::Release { .. }))), "nothing released");
}

/// The old driver acknowledged every waiting `release_set()` but one before the release happened.
#[test]
fn release_set_calls_are_acknowledged_only_after_the_release() {
    let mut s = Script::acquired(config(2, Rebalance::Eager, SessionPolicy::SessionAware, None));
    s.send(Event::Suspended);
    s.send(Event::ReleaseSet(1));
    s.send(Event::ReleaseSet(2));
    s.send(Event::Connected);
    let (id, _) = s.request("verification", |op| matches!(op, Op::Verify(_)));
    s.send(Event::Reply(id, Reply::Verified(Ok(false)))); // a lock node did not survive
    assert!(s.acks().is_empty(), "acknowledged before anything was deleted");
    let (id, _) = s.request("release", |op| matches!(op, Op::Release { .. }));
    s.send(Event::Reply(id, Reply::Released(Ok(()))));
    let mut acks: Vec<AckId> = s.acks().into_iter().map(|(id, result)| result.map(|()| id).expect("ok")).collect();
    acks.sort_unstable();
    assert_eq!(acks, [1, 2]);
}

/// The old incremental driver ignored `max_allocation_time` during rebalances.
#[test]
fn max_allocation_time_bounds_an_incremental_rebalance() {
    let limit = Duration::from_millis(500);
    let mut s = Script::acquired(config(2, Rebalance::Incremental, SessionPolicy::Standard, Some(limit)));
    s.published();
    // The party keeps changing faster than time_boundary: the rebalance never settles.
    let started = s.now;
    let failed = loop {
        s.send(Event::PartyChanged);
        s.party(&["a-0000000000", "b-0000000001"]);
        s.wait(TB / 2);
        if let Some(failed) = s.published().into_iter().find(|p| p.state == PartitionState::Failure) {
            break failed;
        }
        assert!(s.now - started < limit * 2, "still rebalancing after twice the limit");
    };
    assert_eq!(failed.cause, Some(Cause::AllocationTimeout(limit)));
    assert!(s.now - started >= limit, "failed before the limit");
}

#[test]
fn a_lost_session_fails_at_once_and_asks_nothing_more() {
    let mut s = Script::acquired(config(2, Rebalance::Eager, SessionPolicy::Standard, None));
    s.seen.clear();
    s.send(Event::SessionEnded(SessionEnd::Expired));
    let failed = s.published().pop().expect("Failure");
    let lost = Cause::SessionEnded(SessionEnd::Expired);
    assert_eq!((failed.state, failed.cause, failed.items.len()), (PartitionState::Failure, Some(lost), 0));
    assert!(s.seen.iter().all(|a| !matches!(a, Action::Request(..))), "nothing to clean after the session");
    assert!(matches!(s.seen.last(), Some(Action::Stop)));
}

#[test]
fn finish_releases_then_leaves_then_stops() {
    let mut s = Script::acquired(config(2, Rebalance::Eager, SessionPolicy::Standard, None));
    s.send(Event::Finish(Some(5)));
    assert_eq!(s.published().pop().map(|p| (p.state, p.cause)), Some((PartitionState::Failure, Some(Cause::Finished))));
    let (id, _) = s.request("release", |op| matches!(op, Op::Release { .. }));
    assert!(s.seen.iter().all(|a| !matches!(a, Action::Request(_, Op::Leave))), "left before releasing");
    s.send(Event::Reply(id, Reply::Released(Ok(()))));
    let (id, _) = s.request("leave", |op| *op == Op::Leave);
    s.send(Event::Reply(id, Reply::Left));
    assert_eq!(s.acks(), [(5, Ok(()))]);
    assert!(s.core.is_stopped());
}

#[test]
fn no_deadline_in_the_past_is_ever_reported() {
    // A suspended member with a quiet party has nothing to wait for: a deadline in the past would spin the driver.
    let mut s = Script::new(config(2, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.send(Event::Suspended);
    s.wait(TB * 3);
    assert!(s.core.poll_timeout().is_none_or(|t| t > s.now), "{:?} is not after {:?}", s.core.poll_timeout(), s.now);
}

/// The lock window follows ZooKeeper's latency: after a slow reply fewer creates are in flight than after a quick
/// one (the window halves; it never goes below one batch).
#[test]
fn a_slow_reply_shrinks_the_lock_window() {
    let creates_after = |second: Duration| {
        let mut cfg = config(2000, Rebalance::Eager, SessionPolicy::Standard, None);
        cfg.window = 400;
        let mut s = Script::new(cfg);
        s.party(&["a-0000000000"]);
        s.wait(SETTLED);
        let creates = |s: &Script| s.seen.iter().filter(|a| matches!(a, Action::Request(_, Op::Create { .. }))).count();
        assert_eq!(creates(&s), 4, "a full window of 4 batches of 100 at first");
        // The first batch's reply comes after 5 ms (the fastest seen), the second's after `second`; each listing at
        // once, showing our node first.
        for delay in [Duration::from_millis(5), second] {
            let (id, Op::Create { contenders, .. }) = s.request("create", |op| matches!(op, Op::Create { .. })) else {
                unreachable!()
            };
            s.wait(delay);
            let created: Vec<(String, i64)> =
                contenders.iter().map(|(_, prefix)| (format!("{prefix}0000000001"), 42)).collect();
            let names: Vec<String> = created.iter().map(|(name, _)| name.clone()).collect();
            s.send(Event::Reply(id, Reply::Created(Ok(created))));
            let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
            s.send(Event::Reply(id, Reply::Listed(Ok(names.into_iter().map(|n| Ok((vec![n], 0))).collect()))));
        }
        creates(&s)
    };
    assert_eq!(creates_after(Duration::from_millis(5)), 4, "quick replies: each freed batch is sent again at once");
    assert_eq!(
        creates_after(Duration::from_millis(500)),
        3,
        "a slow reply halves the window to 200: 300 stay in flight"
    );
}

/// On a fresh path (`<path>/locks` had no child when the member was built) the directories are made first, one
/// `multi` per batch, and each create follows its batch's directories; on a used path the creates go at once (a
/// missing directory is learnt from the create's `NoNode`).
#[test]
fn a_fresh_path_makes_the_directories_before_the_first_creates() {
    let first_requests = |lock_dirs_exist: bool| {
        let mut cfg = config(250, Rebalance::Eager, SessionPolicy::Standard, None);
        cfg.window = 1000;
        cfg.lock_dirs_exist = lock_dirs_exist;
        let mut s = Script::new(cfg);
        s.party(&["a-0000000000"]);
        s.wait(SETTLED);
        let requests: Vec<Op> = s
            .seen
            .iter()
            .filter_map(|a| if let Action::Request(_, op) = a { Some(op.clone()) } else { None })
            .collect();
        (s, requests)
    };
    let (_, used) = first_requests(true);
    assert!(used.iter().all(|op| matches!(op, Op::Create { .. })), "a used path creates at once: {used:?}");
    assert_eq!(used.len(), 3, "250 items in batches of 100");

    let (mut s, fresh) = first_requests(false);
    let dirs: Vec<usize> = fresh.iter().map(|op| if let Op::MakeDirs(items) = op { items.len() } else { 0 }).collect();
    assert_eq!(dirs, [100, 100, 50], "a fresh path makes every directory first, a batch per multi: {fresh:?}");
    // Each batch's directories made, its creates follow; every lock is then held.
    while let Some(at) = s.seen.iter().position(|a| matches!(a, Action::Request(_, Op::MakeDirs(_)))) {
        let Action::Request(id, Op::MakeDirs(_)) = s.seen.remove(at) else { unreachable!() };
        s.send(Event::Reply(id, Reply::DirsMade(Ok(()))));
    }
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
}

/// The batch follows the set's size: larger `multi`s for a small set, the large-set batch once it has more items.
#[test]
fn the_batch_follows_the_set_size() {
    let creates = |items: usize| {
        let mut cfg = config(items, Rebalance::Eager, SessionPolicy::Standard, None);
        cfg.window = 10_000;
        cfg.batch = Batch { small: 500, small_set: 1000, large: 100 };
        let mut s = Script::new(cfg);
        s.party(&["a-0000000000"]);
        s.wait(SETTLED);
        let sizes: Vec<usize> = s
            .seen
            .iter()
            .filter_map(|a| match a {
                Action::Request(_, Op::Create { contenders, .. }) => Some(contenders.len()),
                _ => None,
            })
            .collect();
        sizes
    };
    assert_eq!(creates(1000), [500, 500], "up to the bound: the small-set batch");
    assert_eq!(creates(1001), [vec![100; 10], vec![1]].concat(), "above it: the large-set batch");
    assert_eq!(Batch::fixed(0).for_items(5), 1, "never an empty multi");
}

/// The fresh-path rule lasts one allocation: once acquired, every directory is assumed again, those of the other
/// members' shares too, so a rebalance's creates go at once instead of making each relocked item's directory again.
#[test]
fn once_acquired_a_fresh_path_assumes_every_directory_again() {
    let mut cfg = config(10, Rebalance::Eager, SessionPolicy::Standard, None);
    cfg.lock_dirs_exist = false;
    let mut s = Script::new(cfg);
    s.party(&["a-0000000000", "b-0000000001"]);
    s.wait(SETTLED);
    let (id, Op::MakeDirs(ours)) = s.request("directories", |op| matches!(op, Op::MakeDirs(_))) else { unreachable!() };
    assert_eq!(ours.len(), 5, "our half of the items (stride), directories first");
    assert!(!(0..s.core.item_count()).all(|item| s.core.locks.dir_known(item)), "the other half is not assumed yet");
    s.send(Event::Reply(id, Reply::DirsMade(Ok(()))));
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
    assert!((0..s.core.item_count()).all(|item| s.core.locks.dir_known(item)), "acquired: every directory is assumed");
}

/// Held-lock watches wait until the lock work has been quiet for `time_boundary`: a rebalance's watches must not
/// queue at the server in front of the party's creates. The core says when they are due.
#[test]
fn held_locks_are_watched_once_the_lock_work_is_quiet_for_time_boundary() {
    let mut s = Script::new(config(3, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.wait(SETTLED);
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
    let watches = |s: &Script| s.seen.iter().filter(|a| matches!(a, Action::Request(_, Op::WatchHeld { .. }))).count();
    assert_eq!(watches(&s), 0, "no watch while the allocation's replies are fresh");
    let due = s.core.poll_timeout().expect("the watches' time is a timeout");
    assert_eq!(due, s.now + TB, "due time_boundary after the last lock reply");
    s.wait(TB / 2);
    assert_eq!(watches(&s), 0, "not before");
    s.wait(TB / 2);
    assert_eq!(watches(&s), 3, "one watch per held lock, all at once");
}

/// At most `HELD_WATCH_REGISTRATIONS` held-lock watches are being registered at once: a member that just took many
/// locks registers their watches in a stream, each registration's first answer letting the next one go. A
/// registration that fails (its only answer) frees its slot too, and is asked again later, as is a watch that a
/// write to the held node used up.
#[test]
fn held_lock_watches_are_registered_a_few_at_a_time() {
    let limit = locks::HELD_WATCH_REGISTRATIONS;
    let mut s = Script::new(config(limit + 8, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.wait(SETTLED);
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
    s.wait(TB);
    let asked = |s: &Script| -> Vec<(ReqId, usize)> {
        let watch = |a: &Action| match a {
            Action::Request(id, Op::WatchHeld { item, .. }) => Some((*id, *item)),
            _ => None,
        };
        s.seen.iter().filter_map(watch).collect()
    };
    let first: Vec<ReqId> = asked(&s).iter().map(|&(id, _)| id).collect();
    assert_eq!(first.len(), limit, "{limit} registrations in flight, the rest wait");
    s.send(Event::Reply(first[0], Reply::HeldWatchSet));
    assert_eq!(asked(&s).len(), limit + 1, "a registered watch lets the next registration go");
    s.send(Event::Reply(first[1], Reply::HeldGone(Err(lost_connection()))));
    assert_eq!(asked(&s).len(), limit + 2, "so does a failed registration");
    for &id in &first[2..] {
        s.send(Event::Reply(id, Reply::HeldWatchSet));
    }
    for (id, _) in asked(&s).split_off(limit) {
        s.send(Event::Reply(id, Reply::HeldWatchSet));
    }
    let mut items: Vec<usize> = asked(&s).iter().map(|&(_, item)| item).collect();
    assert_eq!(items.len(), limit + 9, "every held lock watched, the failed one asked again");
    items.sort_unstable();
    items.dedup();
    assert_eq!(items.len(), limit + 8);
    assert_eq!(s.last_state(), PartitionState::Acquired);
    // A write to a held node used its one-shot watch: the same node is watched again, as a request of its own.
    let (_, changed_item) = asked(&s)[2];
    s.send(Event::Reply(first[2], Reply::HeldChanged));
    let (again, item) = *asked(&s).last().expect("a registration");
    assert_eq!((asked(&s).len(), item), (limit + 10, changed_item), "watched again after its data changed");
    s.send(Event::Reply(again, Reply::HeldWatchSet));
    assert_eq!(s.last_state(), PartitionState::Acquired, "a data change is no loss");
    s.send(Event::Reply(first[0], Reply::HeldGone(Ok(()))));
    assert_eq!(s.last_state(), PartitionState::Release, "the second answer still tells of a deleted held node");
}

/// Items added to a shared set get the next indexes whatever they sort as; a publication still lists them in item
/// order, with each token and lock node beside its own item (a handle looks items up by binary search: before, an
/// added item that sorts first could not be found, so neither its fencing token nor a checkpoint write worked).
#[test]
fn publications_list_items_in_item_order_after_items_that_sort_first_are_added() {
    let strs = |names: &[&str]| names.iter().map(|n| Item::from(*n)).collect::<Vec<_>>();
    let mut cfg = config(0, Rebalance::Incremental, SessionPolicy::Standard, None);
    cfg.items = strs(&["i0", "i1"]);
    cfg.shared_set = Some(0);
    let mut s = Script::new(cfg);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    s.send(Event::Reply(id, Reply::Set(Ok(set_read(&strs(&["i0", "i1"]), 0)))));
    s.party(&["a-0000000000"]);
    s.wait(SETTLED);
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);

    s.send(Event::SetChanged);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    let items = strs(&["a0", "a1", "i0", "i1", "z0"]);
    s.send(Event::Reply(id, Reply::Set(Ok(set_read(&items, 1)))));
    s.wait(SETTLED);
    // The added items' directories are made first (a shared set's new items have none yet).
    let (id, _) = s.request("directories", |op| matches!(op, Op::MakeDirs(_)));
    s.send(Event::Reply(id, Reply::DirsMade(Ok(()))));
    s.grant_locks();
    let acquired = s.published().pop().expect("a publication");
    assert_eq!(acquired.state, PartitionState::Acquired);
    let listed: Vec<&Item> = acquired.items.iter().map(|&(index, _)| s.core.item(index)).collect();
    assert_eq!(listed, items.iter().collect::<Vec<_>>(), "listed in item order");
    for (&(index, _), node) in acquired.items.iter().zip(&acquired.nodes) {
        assert_eq!(s.core.held_node(index), Some(node.as_str()), "each lock node beside its own item");
    }
}

/// A create lost with the connection that lands after the listing that did not find it: the member created again
/// with the same prefix, and its new node sorts behind the late one. Both are ours; the late one is deleted (once,
/// the member waited for it forever: its own node, kept by every sweep because its prefix was still in use), and
/// the member then holds the lock with the node it tracks.
#[test]
fn a_late_landing_create_of_ours_is_deleted_not_waited_for() {
    let mut s = Script::new(config(1, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.wait(SETTLED);
    // The create's reply is lost with the connection; the listing after the retry delay does not find the node.
    let (id, Op::Create { contenders, .. }) = s.request("create", |op| matches!(op, Op::Create { .. })) else {
        unreachable!()
    };
    let prefix = contenders[0].1.clone();
    s.send(Event::Reply(id, Reply::Created(Err(lost_connection()))));
    s.wait(Duration::from_millis(10));
    let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
    s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![], 0))]))));
    // So it creates again, with the same prefix; meanwhile the lost create landed (sequence 1, before ours).
    let (id, Op::Create { contenders, .. }) = s.request("create again", |op| matches!(op, Op::Create { .. })) else {
        unreachable!()
    };
    assert_eq!(contenders[0].1, prefix);
    let (late, ours) = (format!("{prefix}0000000001"), format!("{prefix}0000000002"));
    s.send(Event::Reply(id, Reply::Created(Ok(vec![(ours.clone(), 43)]))));
    let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
    s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![late.clone(), ours.clone()], 0))]))));
    // Then: the late node is deleted, and the member waits for that deletion, not forever.
    let (release, Op::Release { nodes, keep, .. }) = s.request("delete", |op| matches!(op, Op::Release { .. })) else {
        unreachable!()
    };
    assert_eq!(nodes, [OurNode { item: 0, prefix: prefix.clone(), node: Some(late.clone()) }]);
    assert_eq!(keep, [(0, prefix)], "our tracked node is kept");
    let (watch, Op::Watch { node, .. }) = s.request("watch", |op| matches!(op, Op::Watch { .. })) else {
        unreachable!()
    };
    assert_eq!(node, late);
    s.send(Event::Reply(release, Reply::Released(Ok(()))));
    s.send(Event::Reply(watch, Reply::Changed(Ok(()))));
    let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
    s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![ours.clone()], 0))]))));
    assert_eq!(s.last_state(), PartitionState::Acquired);
    assert_eq!(s.core.held_node(0), Some(ours.as_str()));
}

/// After a lost create reply, the listing finds two nodes of ours (the create landed, and so did a retried one): the
/// lowest is taken as ours, the other deleted.
#[test]
fn two_nodes_of_ours_found_after_a_lost_reply_keep_the_lowest() {
    let mut s = Script::new(config(1, Rebalance::Eager, SessionPolicy::Standard, None));
    s.party(&["a-0000000000"]);
    s.wait(SETTLED);
    let (id, Op::Create { contenders, .. }) = s.request("create", |op| matches!(op, Op::Create { .. })) else {
        unreachable!()
    };
    let prefix = contenders[0].1.clone();
    s.send(Event::Reply(id, Reply::Created(Err(lost_connection()))));
    s.wait(Duration::from_millis(10));
    let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
    let (low, high) = (format!("{prefix}0000000004"), format!("{prefix}0000000007"));
    s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![high.clone(), low.clone()], 0))]))));
    let (_, Op::Release { nodes, .. }) = s.request("delete", |op| matches!(op, Op::Release { .. })) else {
        unreachable!()
    };
    assert_eq!(nodes.iter().map(|n| n.node.clone()).collect::<Vec<_>>(), [Some(high)]);
    let (id, Op::List(listed)) = s.request("listing for the stat", |op| matches!(op, Op::List(_))) else {
        unreachable!()
    };
    assert_eq!(listed, [(0, Some(low.clone()))], "the kept node's stat is read");
    s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![low.clone()], 99))]))));
    assert_eq!(s.core.held_node(0), Some(low.as_str()));
}

/// Under churn (the lock work never quiet for `time_boundary`: here a create whose reply does not come), a held lock
/// is still watched 2 × `time_boundary` after its acquisition: the bound on how long a member may keep listing an
/// item whose node an operator deleted. (Before, held locks were watched only once the lock work was quiet.)
#[test]
fn held_locks_are_watched_within_twice_time_boundary_of_their_acquisition_under_churn() {
    for sabotage in [Sabotage::None, Sabotage::HeldWatchOnlyWhenQuiet] {
        let mut cfg = config(2, Rebalance::Incremental, SessionPolicy::Standard, None);
        (cfg.window, cfg.batch) = (1, Batch::fixed(1));
        let mut s = Script::new(cfg);
        crate::sabotage::set(sabotage);
        s.party(&["a-0000000000"]);
        s.wait(SETTLED);
        // Item 0's lock is taken; item 1's create is sent and its reply is slow.
        let (id, Op::Create { contenders, .. }) = s.request("create", |op| matches!(op, Op::Create { .. })) else {
            unreachable!()
        };
        assert_eq!(contenders.len(), 1, "one create at a time");
        let node = format!("{}0000000001", contenders[0].1);
        s.send(Event::Reply(id, Reply::Created(Ok(vec![(node.clone(), 42)]))));
        let (id, _) = s.request("listing", |op| matches!(op, Op::List(_)));
        s.send(Event::Reply(id, Reply::Listed(Ok(vec![Ok((vec![node.clone()], 0))]))));
        assert_eq!(s.core.held_node(contenders[0].0), Some(node.as_str()));
        let acquired = s.now;
        s.request("the next create", |op| matches!(op, Op::Create { .. }));
        let watched = |s: &Script| s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::WatchHeld { .. })));
        s.wait(TB * 2);
        match sabotage {
            Sabotage::None => {
                assert!(watched(&s), "watched 2 × time_boundary after the acquisition: {:?}", s.seen);
                assert_eq!(s.now, acquired + TB * 2);
            }
            _ => assert!(!watched(&s), "the sabotaged core waits for quiet"),
        }
    }
    crate::sabotage::set(Sabotage::None);
}

mod departures;
mod placement;
mod read_cost;
mod shared_set;

/// A party node of ours beside our member node (a join whose reply was lost landed late, beside the node of the join
/// that followed) would be a member nobody is, its share never taken: it is deleted at the party read that shows it.
/// With the switch `OwnStraysKept`, nothing is asked.
#[test]
fn a_stray_party_node_of_ours_is_deleted() {
    for sabotage in [Sabotage::None, Sabotage::OwnStraysKept] {
        crate::sabotage::set(sabotage);
        let mut s = Script::new(config(4, Rebalance::Eager, SessionPolicy::Standard, None));
        let (id, _) = s.request("party read", |op| *op == Op::ReadParty);
        let stray = node_of("a-0000000007");
        let children = vec![node_of("a-0000000000"), stray.clone(), node_of("b-0000000001")];
        s.send(Event::Reply(id, Reply::Party(Ok(PartyRead { children }))));
        let asked: Vec<Vec<String>> = s
            .seen
            .iter()
            .filter_map(|a| match a {
                Action::Request(_, Op::DeleteStrayNodes(nodes)) => Some(nodes.clone()),
                _ => None,
            })
            .collect();
        crate::sabotage::set(Sabotage::None);
        match sabotage {
            Sabotage::None => assert_eq!(asked, [vec![stray]]),
            _ => assert!(asked.is_empty(), "{asked:?}"),
        }
    }
}
