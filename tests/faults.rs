//! Fault injection against real ZooKeeper (one session per member): crashes, forced session expiry, connection
//! cuts and silences, a standalone server restart, a 3-server ensemble losing and freezing servers, party churn,
//! operators editing the znodes, and cleanup when a member stops mid-allocation. Members use kazoo's policies unless
//! a test says otherwise; the crash and ensemble tests also run `Rebalance::Incremental` and
//! `SessionPolicy::SessionAware` members.
//!
//! Each test proves one or more of the crate's guarantees:
//! - safety: a background [`SafetyChecker`] samples every member's claims against the lock nodes while the faults
//!   happen (no claim for an item whose lock another session, or nobody, holds; no item claimed twice);
//! - a suspended member leaves ACQUIRED at once;
//! - liveness: once the faults stop, the live members converge (every item held by exactly the member claiming it)
//!   within session timeout + time_boundary + 2 s;
//! - hygiene: `finish()`, a drop, or a lost session leaves no node of the member's session.
//!
//! `ZOOKEEPER_IMAGE=zk-partitioner/zookeeper:3.8 cargo test --test faults -- --nocapture` prints the timings.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::counting::op::{MULTI, MULTI_READ};
use common::faults::{
    Churn, Claim, FreezingProxy, Opts, PATH, SafetyChecker, member_at, member_behind_proxy, nodes_owned_by,
    party_nodes, recorded_states, server_of, wait_converged, wait_task_stopped,
};
use common::members::{Member, Recorder, TIME_BOUNDARY, auto_release, build_member, ints, items_of, wait_snapshot};
use common::{
    Ctx, Ensemble, OwnedServer, connect, expire, namespace, timing, wait_for, wait_session_state, wait_until,
};
use zk_partitioner::zookeeper_client::SessionState;
use zk_partitioner::{Error, PartitionState, Rebalance, SessionPolicy};

/// How long members get to converge when nothing is in the way.
fn acquire_deadline() -> Duration {
    timing(Duration::from_secs(10))
}

/// The liveness bound once faults stop: a dead session's timeout, a quiet `time_boundary`, and 2 s of work.
fn liveness_bound(session: Duration, time_boundary: Duration) -> Duration {
    timing(session + time_boundary + Duration::from_secs(2))
}

/// What is left of `bound` since `since`.
fn left(bound: Duration, since: Instant) -> Duration {
    bound.saturating_sub(since.elapsed())
}

fn chroot(ctx: &Ctx) -> String {
    format!("{}{}", ctx.endpoint, ctx.namespace)
}

async fn wait_left_acquired(member: &Member, deadline: Duration) -> Duration {
    let started = Instant::now();
    wait_snapshot(&member.partitioner, "a state other than ACQUIRED", deadline, |s| {
        s.state != PartitionState::Acquired
    })
    .await;
    started.elapsed()
}

/// Every member's current generation.
fn generations_of(members: &[Member]) -> Vec<u64> {
    members.iter().map(|m| m.partitioner.snapshot().generation).collect()
}

/// Waits until `member` has made a transition since `generation` (it was ACQUIRED then, so it left ACQUIRED), however
/// far it got since.
async fn wait_transition(member: &Member, generation: u64, deadline: Duration) {
    wait_snapshot(&member.partitioner, &format!("a transition after generation {generation}"), deadline, |s| {
        s.generation > generation
    })
    .await;
}

/// The checker is not vacuous: a member watched as if its locks had to belong to another session is reported at
/// once, and the member watched correctly is not.
#[tokio::test]
async fn safety_checker_reports_claims_backed_by_another_session() {
    // given
    let ctx = Ctx::new().await;
    let items = ints(4);
    let (m0, m1) = (ctx.member("0", items.clone()).await, ctx.member("1", items.clone()).await);
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    wait_converged("two members", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    // when
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0]);
    checker.watch_as(&m1, m0.session());
    let observed = &checker;
    wait_for("a violation", timing(Duration::from_secs(5)), || async {
        let checks = observed.checks();
        if checks.violations.is_empty() { Err(format!("{checks:?}")) } else { Ok(()) }
    })
    .await;
    // then: every violation is about m1's items, claimed while held by m1's real session
    let checks = checker.stop().await;
    let m1_name = m1.partitioner.snapshot().member;
    assert!(
        checks.violations.iter().all(|v| v.contains(&format!("{m1_name} (session")) && v.contains("held by session")),
        "{:#?}",
        checks.violations
    );
}

/// The checker checks that no item is held by two on every sample, whether or not ZooKeeper answers, and counts what
/// it checked inside a fault window apart: with its observer's connection silent (every read of the locks fails), a
/// member seen from outside (`watch_claims`) that claims an item a real member holds is reported at once.
#[tokio::test]
async fn safety_checker_finds_an_item_held_by_two_while_zookeeper_is_silent() {
    // given: a member holding both items, and a checker whose observer goes through a proxy that can go silent
    let ctx = Ctx::new().await;
    let items = ints(2);
    let m0 = ctx.member("0", items.clone()).await;
    let _worker = auto_release(&m0.partitioner);
    wait_converged("one member", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    let proxy = FreezingProxy::start(ctx.addr).await;
    let observer = connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), Duration::from_secs(20)).await;
    let checker = SafetyChecker::start(observer, &items, &[&m0]);
    let impostor = Arc::new(AtomicBool::new(false));
    let claims = impostor.clone();
    checker.watch_claims(move || {
        claims.load(Ordering::SeqCst).then(|| {
            let claim = Claim {
                member: "impostor".to_string(),
                state: PartitionState::Acquired,
                suspended: false,
                party: None,
                items: vec!["0".to_string()],
                session: 1,
            };
            (1, claim)
        })
    });
    let observed = &checker;
    wait_until("claims checked against the locks", timing(Duration::from_secs(5)), || async {
        observed.checks().total.claims_checked > 0
    })
    .await;

    // when: the observer's connection goes silent (a fault), until a read of the locks has failed; then the impostor
    // claims item 0, which m0 holds
    proxy.freeze();
    let window = checker.fault();
    let unreadable = checker.checks().total.unreadable;
    wait_until("a read of the locks to fail", timing(Duration::from_secs(10)), || async {
        observed.checks().total.unreadable > unreadable
    })
    .await;
    impostor.store(true, Ordering::SeqCst);
    wait_until("the item held by two to be reported", timing(Duration::from_secs(5)), || async {
        !observed.checks().violations.is_empty()
    })
    .await;
    let during = window.close();
    proxy.thaw();

    // then: reported from the claims alone, inside the window, while the locks could not be read
    let checks = checker.stop().await;
    assert!(!checks.violations.is_empty());
    assert!(checks.violations.iter().all(|v| v.contains("0 claimed by both")), "{:#?}", checks.violations);
    assert!(during.unreadable > 0 && during.exclusive_samples > 0 && during.exclusive_claims > 0, "{during:?}");
    assert_eq!(checks.fault_windows, 1);
}

// ---------------------------------------------------------------------------------------------------------------
// 1. A member crashes (its session is never closed)
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn crashed_member_items_go_to_survivors_within_the_liveness_bound() {
    crash_of_one_of_three(Opts::default()).await;
}

/// The same under `Rebalance::Incremental` with `Rendezvous`: the survivors keep processing their own items (same
/// lock nodes, same tokens) while they take the crashed member's, and every item they list in any state is theirs.
#[tokio::test]
async fn crashed_member_items_go_to_incremental_survivors_who_keep_their_own() {
    let opts = Opts { rebalance: Rebalance::Incremental, rendezvous: true, ..Opts::default() };
    crash_of_one_of_three(opts).await;
}

async fn crash_of_one_of_three(opts: Opts) {
    // given: three members with their worker loops; m0's 1 s session goes through a proxy
    let ctx = Ctx::new().await;
    let items = ints(12);
    let session = Duration::from_secs(1);
    let m0_opts = Opts { session, ..opts.clone() };
    let (m0, proxy) = member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &m0_opts).await;
    let (m1, m2) =
        (member_at(&chroot(&ctx), "1", &items, &opts).await, member_at(&chroot(&ctx), "2", &items, &opts).await);
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner), auto_release(&m2.partitioner)];
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1, &m2]);
    wait_converged("three members", &ctx.observer, &[&m0, &m1, &m2], &items, acquire_deadline()).await;
    assert!(!m0.partitioner.items().is_empty());
    let kept: Vec<_> = [&m1, &m2].iter().map(|m| m.partitioner.snapshot()).collect();

    // when: m0's process dies: its connection is gone for good, nobody closes its session
    let crashed_at = Instant::now();
    proxy.cut();

    // then: the survivors own everything within the liveness bound (the server expires m0's session first)
    let bound = liveness_bound(session, TIME_BOUNDARY);
    wait_converged("the survivors", &ctx.observer, &[&m1, &m2], &items, left(bound, crashed_at)).await;
    let took = crashed_at.elapsed();
    eprintln!("[faults] {:?}: survivors own every item {took:.2?} after the crash (bound {bound:?})", opts.rebalance);
    // m0 left ACQUIRED at the cut and fails once its client gives up on the session
    let failed = m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(5))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    assert_eq!(nodes_owned_by(&ctx.observer, &items, m0.session()).await, Vec::<String>::new());
    if opts.rebalance == Rebalance::Incremental {
        // an item a survivor still owns kept its lock node (same token): it was never released and taken again
        let mut unmoved = 0;
        for (member, before) in [&m1, &m2].into_iter().zip(&kept) {
            let now = member.partitioner.snapshot();
            for (item, token) in before.items.iter().zip(before.tokens.iter()) {
                if let Ok(index) = now.items.binary_search(item) {
                    assert_eq!(now.tokens[index], *token, "{} took {item} again", now.member);
                    unmoved += 1;
                }
            }
        }
        assert!(unmoved > 0, "no survivor kept anything");
    }
    checker.assert_safe(10).await;
}

// ---------------------------------------------------------------------------------------------------------------
// 2. Forced session expiry
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn session_expiry_while_acquired_fails_and_the_others_recover() {
    // given
    let ctx = Ctx::new().await;
    let items = ints(4);
    let session = Duration::from_secs(1);
    let (m0, proxy) = member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &Opts::session(session)).await;
    let m1 = ctx.member("1", items.clone()).await;
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1]);
    wait_converged("two members", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    let recorder = Recorder::start(&m0.partitioner);

    // when: the server expires m0's session
    let took = expire(&m0.client, &proxy).await;
    let expired_at = Instant::now();

    // then: m0 fails with SessionLost, having left ACQUIRED
    let failed = m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(5))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    assert!(failed.items.is_empty());
    assert!(matches!(m0.partitioner.release_set().await, Err(Error::SessionLost { .. })));
    assert_eq!(m0.partitioner.wait_for_acquire(Duration::from_secs(30)).await, PartitionState::Failure);
    // (the recorder's first snapshot is the ACQUIRED one it started in)
    let states = recorded_states(&recorder, &m0.partitioner).await;
    assert_eq!(states.last(), Some(&PartitionState::Failure), "{states:?}");
    assert!(!states[1..].contains(&PartitionState::Acquired), "m0 was ACQUIRED again after the cut: {states:?}");
    // none of its nodes is left: no party node, no lock node
    assert_eq!(nodes_owned_by(&ctx.observer, &items, m0.session()).await, Vec::<String>::new());
    assert!(party_nodes(&ctx.observer).await.iter().all(|(_, owner)| *owner == m1.session()));
    // and m1 takes everything
    let bound = liveness_bound(session, TIME_BOUNDARY);
    let recovered = wait_converged("m1 alone", &ctx.observer, &[&m1], &items, left(bound, expired_at)).await;
    eprintln!("[faults] expiry while ACQUIRED: expire() took {took:.2?}, m1 owned everything {recovered:.2?} later");
    checker.assert_safe(10).await;
}

#[tokio::test]
async fn session_expiry_while_allocating_fails_and_the_others_recover() {
    // given: a foreign session holds item 0, so m0 (assigned items 0 and 2) is stuck ALLOCATING behind it
    let ctx = Ctx::new().await;
    let items = ints(4);
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[0])).await;
    let session = Duration::from_secs(1);
    let (m0, proxy) = member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &Opts::session(session)).await;
    let m1 = ctx.member("1", items.clone()).await;
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1]);
    m1.wait_items(&items_of(&[1, 3]), acquire_deadline()).await;
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, m0.session()]).await;
    assert_eq!(m0.state(), PartitionState::Allocating);
    let recorder = Recorder::start(&m0.partitioner);

    // when
    expire(&m0.client, &proxy).await;

    // then: FAILURE with SessionLost, never ACQUIRED, and its contender and party node are gone
    let failed = m0.wait_state(PartitionState::Failure, timing(Duration::from_secs(5))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    let states = recorded_states(&recorder, &m0.partitioner).await;
    assert!(!states.contains(&PartitionState::Acquired), "{states:?}");
    assert_eq!(nodes_owned_by(&ctx.observer, &items, m0.session()).await, Vec::<String>::new());
    // m1 takes over; it queues behind the blocker for item 0 and gets it once the blocker lets go
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, m1.session()]).await;
    ctx.release_locks(&blocker, held).await;
    let released_at = Instant::now();
    wait_converged(
        "m1 alone",
        &ctx.observer,
        &[&m1],
        &items,
        left(liveness_bound(session, TIME_BOUNDARY), released_at),
    )
    .await;
    checker.assert_safe(10).await;
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Connection cuts shorter than the session timeout
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn short_cut_while_acquired_releases_at_once_then_reacquires_with_the_same_session() {
    // given: m0 (4 s session) behind a proxy, m1 direct; no worker loop on m0 (the test plays it)
    let ctx = Ctx::new().await;
    let items = ints(4);
    let (m0, proxy) =
        member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &Opts::session(Duration::from_secs(4))).await;
    let m1 = ctx.member("1", items.clone()).await;
    let _worker = auto_release(&m1.partitioner);
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1]);
    {
        let _worker = auto_release(&m0.partitioner);
        wait_converged("two members", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    }
    let (session, mine, m1_generation) = (m0.session(), m0.partitioner.items(), m1.partitioner.snapshot().generation);

    // when
    proxy.cut();

    // then: RELEASE at once (kazoo parity), without waiting for any timeout (the client's is 2/5 of 4 s)
    let took = wait_left_acquired(&m0, timing(Duration::from_secs(5))).await;
    assert_eq!(m0.state(), PartitionState::Release);
    assert!(took < timing(Duration::from_millis(500)), "left ACQUIRED {took:?} after the cut");
    assert!(m0.partitioner.items().is_empty());
    // its locks are still its own: the session lives on
    let holders = common::members::lock_holders(&ctx.observer, PATH, &mine).await;
    assert!(holders.values().all(|owner| *owner == session), "{holders:x?}");

    // when: the connection comes back within the session timeout, and the worker releases
    tokio::time::sleep(Duration::from_secs(1)).await; // the length of the outage
    proxy.heal();
    wait_session_state(
        &mut m0.client.state_watcher(),
        SessionState::SyncConnected,
        timing(Duration::from_secs(5)),
        "m0",
    )
    .await;
    m0.partitioner.release_set().await.expect("release_set after the cut");

    // then: ACQUIRED again with the same session and the same items; m1 never noticed
    wait_converged("after the cut", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    assert_eq!(m0.session(), session, "the session survived the cut");
    assert_eq!(m0.partitioner.items(), mine);
    assert_eq!(m1.partitioner.snapshot().generation, m1_generation, "m1 was disturbed by m0's cut");
    checker.assert_safe(10).await;
}

#[tokio::test]
async fn short_cut_while_contending_leaves_one_contender_and_gets_the_lock_after_heal() {
    // given: a foreign session holds item 0; m0 (4 s session, behind a proxy) holds item 1 and queues for item 0
    let ctx = Ctx::new().await;
    let items = ints(2);
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[0])).await;
    let b = blocker.session_id().0;
    let (m0, proxy) =
        member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &Opts::session(Duration::from_secs(4))).await;
    // the worker loop releases as soon as it is told to, i.e. during the outage
    let _worker = auto_release(&m0.partitioner);
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0]);
    ctx.wait_lock_queue(PATH, 0, &[b, m0.session()]).await;
    ctx.wait_lock_queue(PATH, 1, &[m0.session()]).await;
    let session = m0.session();
    let before = m0.client.list_ephemerals(&format!("{PATH}/locks")).await.expect("list ephemerals");
    assert_eq!(before.len(), 2, "{before:?}");

    // when: a cut shorter than the session timeout
    let generation = m0.partitioner.snapshot().generation;
    proxy.cut();
    wait_transition(&m0, generation, timing(Duration::from_secs(5))).await; // RELEASE
    tokio::time::sleep(Duration::from_millis(1500)).await; // the length of the outage
    proxy.heal();

    // then: the worker's release_set() starts a new allocation, with the same session, once its old contenders are
    // deleted (the deletes wait for the connection)
    wait_snapshot(&m0.partitioner, "ALLOCATING again", acquire_deadline(), |s| {
        s.generation >= generation + 2 && s.state == PartitionState::Allocating
    })
    .await;
    // its old contenders are gone, and it is back in the queue with exactly one contender per item
    let observer = &ctx.observer;
    wait_for("m0's old contenders to be deleted", acquire_deadline(), || async {
        let mut left = Vec::new();
        for node in &before {
            if observer.check_stat(node).await.map_err(|err| err.to_string())?.is_some() {
                left.push(node.clone());
            }
        }
        if left.is_empty() { Ok(()) } else { Err(format!("still there: {left:?}")) }
    })
    .await;
    ctx.wait_lock_queue(PATH, 0, &[b, session]).await;
    ctx.wait_lock_queue(PATH, 1, &[session]).await;
    assert_eq!(m0.state(), PartitionState::Allocating);
    // and it gets item 0 as soon as the blocker lets go
    ctx.release_locks(&blocker, held).await;
    m0.wait_items(&items, acquire_deadline()).await;
    assert_eq!(m0.session(), session, "the session survived the cut");
    for item in &items {
        let dir = format!("{PATH}/locks/{item}");
        let mut own = m0.client.list_ephemerals(&dir).await.expect("list ephemerals");
        own.retain(|node| node.starts_with(&format!("{dir}/")));
        assert_eq!(own.len(), 1, "contenders of m0's session under {dir}: {own:?}");
    }
    wait_converged("m0", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    checker.assert_safe(1).await;
}

/// kazoo parity (policy.rs): a suspension while ALLOCATING moves to RELEASE, so the worker learns that the connection
/// is gone. Here the connection goes silent at the allocation's read of the lock directories (the proxy freezes as
/// that request comes, so the server never answers it): the member waits between two `select!`s of its allocation,
/// until the client declares the connection lost.
#[tokio::test]
async fn suspension_during_an_allocation_read_moves_to_release() {
    // given: m0 (time_boundary 1 s; 4 s session, so its client gives up on a silent connection after 1.6 s) behind a
    // proxy that goes silent as the allocation sends its read of the lock directories (a read `multi` of
    // `<path>/locks/...`)
    let ctx = Ctx::new().await;
    let proxy = FreezingProxy::start(ctx.addr).await;
    proxy.freeze_at(MULTI_READ, format!("{PATH}/locks/").as_bytes());
    let opts = Opts { session: Duration::from_secs(4), time_boundary: Duration::from_secs(1), ..Opts::default() };
    let m0 = member_at(&format!("{}{}", proxy.endpoint(), ctx.namespace), "0", &ints(3), &opts).await;
    let session = m0.session();

    // when: the quiet period ends and the allocation sends its read, into the silence
    wait_until("the allocation's read to reach the proxy", timing(Duration::from_secs(10)), || async {
        !proxy.freeze_pending()
    })
    .await;
    let at_freeze = m0.partitioner.snapshot();
    assert_eq!(at_freeze.state, PartitionState::Allocating, "the silence fell mid-allocation: {at_freeze:?}");
    let mut watcher = m0.client.state_watcher();
    wait_session_state(&mut watcher, SessionState::Disconnected, timing(Duration::from_secs(5)), "m0 to notice").await;
    let noticed = Instant::now();

    // then: m0 leaves ALLOCATING for RELEASE
    let mut snapshots = m0.partitioner.subscribe();
    let deadline = timing(Duration::from_secs(2));
    // (`is_ok()` at once: the `Ref` that `wait_for` returns locks the channel against the partitioner's next publish)
    let released =
        tokio::time::timeout(deadline, snapshots.wait_for(|s| s.state == PartitionState::Release)).await.is_ok();
    let state = m0.state();
    proxy.thaw();
    assert!(released, "still {state} {:.1?} after the client reported the connection lost", noticed.elapsed());
    // and, the connection back, it allocates with the same session
    m0.partitioner.release_set().await.expect("release_set");
    wait_converged("m0", &ctx.observer, &[&m0], &ints(3), acquire_deadline()).await;
    assert_eq!(m0.session(), session);
}

/// Cuts the connection at chosen requests of a 300-item allocation, each time right after the request reached the
/// server and before its reply came back (the proxy cuts as the request comes): the lock directories' creation, the
/// contenders' creation (applied, the member not told), the listing of the directories. The worker releases during
/// the outage. Replies lost with the connection must not leave contender nodes behind (kazoo #732/#760: an orphaned
/// contender blocks its item for as long as the session lives).
#[tokio::test]
async fn cuts_during_a_large_allocation_leave_no_orphaned_contender() {
    // given: m0 behind a proxy armed for the first allocation's first request on the lock directories
    let ctx = Ctx::new().await;
    let items = ints(300);
    let proxy = common::Proxy::start(ctx.addr).await;
    let locks = format!("{PATH}/locks/");
    // (request type, what its bytes contain, what it is)
    let moments: [(i32, &[u8], &str); 3] = [
        (MULTI, locks.as_bytes(), "the lock directories' creation"),
        (MULTI, b"__lock__", "the contenders' creation"),
        (MULTI_READ, locks.as_bytes(), "the listing of the lock directories"),
    ];
    proxy.cut_after_containing(moments[0].0, moments[0].1);
    let opts = Opts::session(Duration::from_secs(4));
    let m0 = member_at(&format!("{}{}", proxy.endpoint(), ctx.namespace), "0", &items, &opts).await;
    let _worker = auto_release(&m0.partitioner);
    let session = m0.session();
    for (round, (opcode, needle, what)) in moments.into_iter().enumerate() {
        if round > 0 {
            // (the first is armed before m0 exists)
            proxy.cut_after_containing(opcode, needle);
        }
        // when: the allocation sends that request; the proxy cuts before its reply, for 300 ms
        wait_until(&format!("the cut at {what}"), timing(Duration::from_secs(10)), || async {
            proxy.is_cut() && !proxy.reply_loss_pending()
        })
        .await;
        let at_cut = m0.partitioner.snapshot();
        assert_ne!(at_cut.state, PartitionState::Acquired, "the cut at {what} fell mid-allocation: {at_cut:?}");
        let held = nodes_owned_by(&ctx.observer, &items, session).await.len().saturating_sub(1); // its party node aside
        tokio::time::sleep(Duration::from_millis(300)).await; // the outage's length
        proxy.heal();
        eprintln!("[faults] cut at {what}: {held} lock nodes of m0's session then");

        // then: ACQUIRED with everything, and exactly one node of its session per item
        wait_converged(&format!("cut at {what}"), &ctx.observer, &[&m0], &items, acquire_deadline()).await;
        assert_eq!(m0.session(), session, "the session survived the cut");
        let nodes = m0.client.list_ephemerals(&format!("{PATH}/locks")).await.expect("list ephemerals");
        let dirs: std::collections::BTreeSet<&str> =
            nodes.iter().filter_map(|node| node.rsplit_once('/').map(|(dir, _)| dir)).collect();
        assert_eq!((nodes.len(), dirs.len()), (items.len(), items.len()), "cut at {what}: {} nodes", nodes.len());
        // and again, from a fresh allocation
        m0.partitioner.release_set().await.expect("release_set");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 4. A standalone server restarts with its data
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn server_restart_keeps_long_sessions_and_fails_members_whose_session_ran_out() {
    // given: a server of our own; a1 and a2 have 20 s sessions (they outlive the restart), b has 1 s (its client
    // gives up after 7/5 of that without a server, which the test waits for before restarting the server)
    common::init_tracing();
    let server = OwnedServer::launch().await;
    let ns = namespace(&server).await;
    let connect_string = format!("{}{ns}", server.endpoint());
    let items = ints(6);
    let long = Opts::session(Duration::from_secs(20));
    let short = Opts::session(Duration::from_secs(1));
    let a1 = member_at(&connect_string, "a1", &items, &long).await;
    let a2 = member_at(&connect_string, "a2", &items, &long).await;
    let b = member_at(&connect_string, "b", &items, &short).await;
    let _workers = [auto_release(&a1.partitioner), auto_release(&a2.partitioner), auto_release(&b.partitioner)];
    let observer = connect(&connect_string, Duration::from_secs(20)).await;
    let checker = SafetyChecker::start(observer.clone(), &items, &[&a1, &a2, &b]);
    wait_converged("three members", &observer, &[&a1, &a2, &b], &items, acquire_deadline()).await;
    let (r1, r2) = (Recorder::start(&a1.partitioner), Recorder::start(&a2.partitioner));
    let sessions = (a1.session(), a2.session());

    // when: the server stops
    let generations = [a1.partitioner.snapshot().generation, a2.partitioner.snapshot().generation];
    server.stop().await;
    // then: everyone leaves ACQUIRED; b's session runs out while the server is down
    for (member, generation) in [&a1, &a2].into_iter().zip(generations) {
        wait_transition(member, generation, timing(Duration::from_secs(5))).await;
        assert_ne!(member.state(), PartitionState::Acquired, "nothing can be acquired while the server is down");
    }
    let failed = b.wait_state(PartitionState::Failure, timing(Duration::from_secs(10))).await;
    assert!(matches!(failed.cause, Some(Error::SessionLost { .. })), "cause: {:?}", failed.cause);
    assert_ne!(a1.state(), PartitionState::Failure);
    assert_ne!(a2.state(), PartitionState::Failure);

    // when: it comes back with its data
    server.start().await;
    let restarted_at = Instant::now();

    // then: a1 and a2 resume their sessions (when the client's reconnect back-off lets them: it is not the
    // partitioner's), the server expires b's (1 s after its restart), and a1 and a2 share everything
    for member in [&a1, &a2] {
        let what = format!("{} to reconnect", member.partitioner.snapshot().member);
        let mut watcher = member.client.state_watcher();
        wait_session_state(&mut watcher, SessionState::SyncConnected, timing(Duration::from_secs(20)), &what).await;
    }
    let reconnected_at = Instant::now();
    let bound = liveness_bound(Duration::from_secs(1), TIME_BOUNDARY);
    let took = wait_converged("a1 and a2", &observer, &[&a1, &a2], &items, left(bound, reconnected_at)).await;
    eprintln!(
        "[faults] server restarted; members reconnected after {:.2?}, converged {took:.2?} later",
        reconnected_at - restarted_at
    );
    assert_eq!((a1.session(), a2.session()), sessions, "the 20 s sessions survived the restart");
    for (recorder, member) in [(&r1, &a1), (&r2, &a2)] {
        let states = recorded_states(recorder, &member.partitioner).await;
        assert!(states.contains(&PartitionState::Release), "{states:?}");
        assert!(!states.contains(&PartitionState::Failure), "{states:?}");
        assert_eq!(states.last(), Some(&PartitionState::Acquired), "{states:?}");
    }
    assert_eq!(nodes_owned_by(&observer, &items, b.session()).await, Vec::<String>::new());
    checker.assert_safe(10).await;
}

// ---------------------------------------------------------------------------------------------------------------
// 5. A 3-server ensemble loses its leader, a follower, and has a server frozen
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn ensemble_failover_keeps_every_item_owned_exactly_once() {
    // given: three members, with sessions long enough to outlive every failover: one with kazoo's policies, one
    // SessionAware (a stall shorter than its session must move none of its items), one Incremental. The last two are
    // on the full connect string; the first on the two followers' only, so that a follower always has a member to
    // lose when it stops (on the full string all three can land on the leader, and the follower's stop then proves
    // nothing).
    common::init_tracing();
    let ensemble = Ensemble::launch().await;
    let ns = namespace(&ensemble).await;
    let connect_string = format!("{}{ns}", ensemble.connect_string());
    let servers: Vec<_> = ensemble.ids().map(|id| (id, ensemble.addr(id))).collect();
    let first_leader = ensemble.leader().await;
    let followers_only = ensemble.ids().filter(|id| *id != first_leader).map(|id| ensemble.endpoint(id));
    let followers_only = format!("{}{ns}", followers_only.collect::<Vec<_>>().join(","));
    let items = ints(9);
    let opts = Opts::session(Duration::from_secs(8));
    let session_aware = Opts { session_policy: SessionPolicy::SessionAware, ..opts.clone() };
    let incremental = Opts { rebalance: Rebalance::Incremental, ..opts.clone() };
    let members = [
        member_at(&followers_only, "0", &items, &opts).await,
        member_at(&connect_string, "1", &items, &session_aware).await,
        member_at(&connect_string, "2", &items, &incremental).await,
    ];
    let all: Vec<&Member> = members.iter().collect();
    let _workers: Vec<_> = members.iter().map(|m| auto_release(&m.partitioner)).collect();
    let observer = connect(&connect_string, Duration::from_secs(8)).await;
    let checker = SafetyChecker::start(observer.clone(), &items, &all);
    let sessions: Vec<i64> = members.iter().map(Member::session).collect();
    let deadline = timing(Duration::from_secs(30));
    wait_converged("on the ensemble", &observer, &all, &items, deadline).await;
    let session_aware_tokens = members[1].partitioner.snapshot().tokens;
    let connected_to = |live: Vec<(usize, std::net::SocketAddr)>| {
        let sessions = sessions.clone();
        async move {
            let mut on = Vec::new();
            for session in sessions {
                on.push(server_of(&live, session, timing(Duration::from_secs(20))).await);
            }
            on
        }
    };
    let live_without = |gone: usize| servers.iter().copied().filter(|(id, _)| *id != gone).collect::<Vec<_>>();

    // when: a follower stops: the one with the most members (member 0 is on one of the two)
    let leader = ensemble.leader().await;
    let on = connected_to(servers.clone()).await;
    let followers: Vec<usize> = ensemble.ids().filter(|id| *id != leader).collect();
    let follower = followers.iter().copied().max_by_key(|id| on.iter().filter(|s| *s == id).count()).expect("two");
    let moved: Vec<usize> = (0..members.len()).filter(|i| on[*i] == follower).collect();
    assert_eq!(leader, first_leader, "no election before the first fault");
    assert!(!moved.is_empty(), "no member on follower {follower} (members on servers {on:?}, leader {leader})");
    let generations = generations_of(&members);
    ensemble.stop(follower).await;
    // then: its members leave ACQUIRED, move to another server and re-acquire; the others are undisturbed
    let phase = Instant::now();
    for i in &moved {
        wait_transition(&members[*i], generations[*i], deadline).await;
    }
    wait_converged("without a follower", &observer, &all, &items, deadline).await;
    for i in (0..members.len()).filter(|i| !moved.contains(i)) {
        assert_eq!(members[i].partitioner.snapshot().generation, generations[i], "member {i} was disturbed");
    }
    let now_on = connected_to(live_without(follower)).await;
    eprintln!(
        "[faults] follower {follower} stopped: members {moved:?} moved ({on:?} -> {now_on:?}), converged in {:.2?}",
        phase.elapsed()
    );
    ensemble.start(follower).await;

    // when: the leader stops
    let leader = ensemble.leader().await;
    let generations = generations_of(&members);
    ensemble.stop(leader).await;
    // then: followers drop their clients during the election: every member leaves ACQUIRED, then all converge
    for (member, generation) in members.iter().zip(&generations) {
        wait_transition(member, *generation, deadline).await;
    }
    let phase = Instant::now();
    wait_converged("without the old leader", &observer, &all, &items, deadline).await;
    let on = connected_to(live_without(leader)).await;
    eprintln!("[faults] leader {leader} stopped: converged in {:.2?}, members on servers {on:?}", phase.elapsed());
    ensemble.start(leader).await;

    // when: the server with the most members freezes (connections stay open, nothing answers)
    let on = connected_to(servers.clone()).await;
    let frozen = ensemble.ids().max_by_key(|id| on.iter().filter(|s| *s == id).count()).expect("three servers");
    let stuck: Vec<usize> = (0..members.len()).filter(|i| on[*i] == frozen).collect();
    let generations = generations_of(&members);
    ensemble.pause(frozen).await;
    // then: its members notice within the client's connection timeout (2/5 of the session), leave ACQUIRED, move,
    // and re-acquire
    let phase = Instant::now();
    for i in &stuck {
        wait_transition(&members[*i], generations[*i], deadline).await;
    }
    wait_converged("with a frozen server", &observer, &all, &items, deadline).await;
    let now_on = connected_to(live_without(frozen)).await;
    eprintln!(
        "[faults] server {frozen} paused: members {stuck:?} moved ({on:?} -> {now_on:?}), converged in {:.2?}",
        phase.elapsed()
    );
    ensemble.unpause(frozen).await;
    ensemble.wait_serving(frozen).await;

    // then: the same sessions throughout, a disjoint cover, and no violation at any sampled instant
    wait_converged("after every fault", &observer, &all, &items, deadline).await;
    assert_eq!(members.iter().map(Member::session).collect::<Vec<_>>(), sessions);
    assert_eq!(members[1].partitioner.snapshot().tokens, session_aware_tokens, "the SessionAware member's locks moved");
    let checks = checker.assert_safe(50).await;
    eprintln!("[faults] ensemble safety checker: {checks:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// 6. Party churn
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn churn_faster_than_time_boundary_converges_once_it_stops() {
    // given: three settled members
    let ctx = Ctx::new().await;
    let items = ints(6);
    let members = [
        ctx.member("0", items.clone()).await,
        ctx.member("1", items.clone()).await,
        ctx.member("2", items.clone()).await,
    ];
    let all: Vec<&Member> = members.iter().collect();
    let _workers: Vec<_> = members.iter().map(|m| auto_release(&m.partitioner)).collect();
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &all);
    wait_converged("three members", &ctx.observer, &all, &items, acquire_deadline()).await;
    let generations = generations_of(&members);

    // when: for 2 s, a member joins or leaves every time_boundary / 2
    let churn = Churn::start(ctx.client().await, &items, TIME_BOUNDARY / 2);
    tokio::time::sleep(Duration::from_secs(2)).await; // the length of the churn
    let joins = churn.stop().await;
    let stopped_at = Instant::now();

    // then: the churn was noticed, and the members converge within the liveness bound once it stops
    assert!(joins >= 5, "only {joins} churners joined");
    for (member, generation) in members.iter().zip(generations) {
        assert!(member.partitioner.snapshot().generation > generation, "the churn went unnoticed");
    }
    let bound = liveness_bound(Duration::ZERO, TIME_BOUNDARY);
    let took = wait_converged("after the churn", &ctx.observer, &all, &items, left(bound, stopped_at)).await;
    eprintln!("[faults] {joins} churners; converged {took:.2?} after the churn stopped");
    assert_eq!(party_nodes(&ctx.observer).await.len(), 3, "a churner was left in the party");
    checker.assert_safe(10).await;
}

#[tokio::test]
async fn steady_churn_fails_an_allocation_with_a_time_limit() {
    // given: a party that changes every 100 ms, and two members with a 1 s time_boundary: one with
    // max_allocation_time(2 s), one without
    let ctx = Ctx::new().await;
    let items = ints(4);
    let churn = Churn::start(ctx.client().await, &items, Duration::from_millis(100));
    let time_boundary = Duration::from_secs(1);
    let limit = Duration::from_secs(2);
    let limited = Opts { time_boundary, max_allocation_time: Some(limit), ..Opts::default() };
    let unlimited = Opts { time_boundary, ..Opts::default() };
    // when
    let built_at = Instant::now();
    let m0 = member_at(&chroot(&ctx), "limited", &items, &limited).await;
    let m1 = member_at(&chroot(&ctx), "unlimited", &items, &unlimited).await;
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    let (r0, r1) = (Recorder::start(&m0.partitioner), Recorder::start(&m1.partitioner));

    // then: the limited one fails with AllocationTimeout instead of allocating forever, and leaves nothing behind
    let failed = m0.wait_state(PartitionState::Failure, limit + timing(Duration::from_secs(3))).await;
    let took = built_at.elapsed();
    assert_eq!(failed.cause, Some(Error::AllocationTimeout(limit)));
    assert!(took >= limit, "failed after {took:?}, before the limit");
    let states = recorded_states(&r0, &m0.partitioner).await;
    assert!(!states.contains(&PartitionState::Acquired), "{states:?}");
    // (a failed partitioner publishes FAILURE first, so its worker stops at once, then cleans up and stops)
    wait_task_stopped(m0.partitioner.subscribe(), timing(Duration::from_secs(5))).await;
    assert_eq!(m0.client.list_ephemerals("/").await.expect("list ephemerals"), Vec::<String>::new());
    // the unlimited one is still allocating
    assert_eq!(m1.state(), PartitionState::Allocating);
    let states = recorded_states(&r1, &m1.partitioner).await;
    assert!(!states.contains(&PartitionState::Acquired), "{states:?}");

    // when: the churn stops, the unlimited one gets everything
    churn.stop().await;
    let stopped_at = Instant::now();
    wait_converged(
        "m1 alone",
        &ctx.observer,
        &[&m1],
        &items,
        left(liveness_bound(Duration::ZERO, time_boundary), stopped_at),
    )
    .await;
}

/// `max_allocation_time` counts "from entering ALLOCATING": an allocation interrupted by a connection loss (RELEASE)
/// and restarted by `release_set()` gets the whole limit again, however long the worker took to call it.
#[tokio::test]
async fn allocation_time_limit_restarts_with_each_allocation() {
    // given: m0 (limit 1.5 s) stuck behind a foreign holder of its only item
    let ctx = Ctx::new().await;
    let items = ints(1);
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items).await;
    let limit = Duration::from_millis(1500);
    let opts = Opts { session: Duration::from_secs(4), max_allocation_time: Some(limit), ..Opts::default() };
    let (m0, proxy) = member_behind_proxy(ctx.addr, &ctx.namespace, "0", &items, &opts).await;
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, m0.session()]).await;

    // when: its connection drops (-> RELEASE) for longer than the limit, then comes back; meanwhile the holder let go
    proxy.cut();
    m0.wait_state(PartitionState::Release, timing(Duration::from_secs(5))).await;
    tokio::time::sleep(limit + Duration::from_millis(500)).await; // the length of the outage
    proxy.heal();
    wait_session_state(
        &mut m0.client.state_watcher(),
        SessionState::SyncConnected,
        timing(Duration::from_secs(5)),
        "m0",
    )
    .await;
    ctx.release_locks(&blocker, held).await;
    m0.partitioner.release_set().await.expect("release_set");

    // then: the new allocation has its own 1.5 s, and needs far less
    let outcome = wait_snapshot(&m0.partitioner, "ACQUIRED or FAILURE", acquire_deadline(), |s| {
        matches!(s.state, PartitionState::Acquired | PartitionState::Failure)
    })
    .await;
    assert_eq!(outcome.state, PartitionState::Acquired, "cause: {:?}", outcome.cause);
}

// ---------------------------------------------------------------------------------------------------------------
// 7. An operator edits the znodes
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn operator_deletes_a_members_party_node() {
    // given
    let ctx = Ctx::new().await;
    let items = ints(4);
    let (m0, m1) = (ctx.member("0", items.clone()).await, ctx.member("1", items.clone()).await);
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1]);
    wait_converged("two members", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    let name = m0.partitioner.snapshot().member;
    let (node, _) = party_nodes(&ctx.observer)
        .await
        .into_iter()
        .find(|(_, owner)| *owner == m0.session())
        .expect("m0's party node");

    // when
    ctx.observer.delete(&format!("{PATH}/party/{node}"), None).await.expect("delete m0's party node");

    // then: m0 joins again under a new name, and both converge
    wait_converged("after the deletion", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    assert_ne!(m0.partitioner.snapshot().member, name, "m0 must have joined again");
    let owners: Vec<i64> = party_nodes(&ctx.observer).await.into_iter().map(|(_, owner)| owner).collect();
    assert_eq!(owners.len(), 2, "{owners:x?}");
    assert!(owners.contains(&m0.session()) && owners.contains(&m1.session()), "{owners:x?}");
    checker.assert_safe(10).await;
}

#[tokio::test]
async fn operator_deletes_empty_lock_directories_between_allocations() {
    // given: one member, with a 2 s time_boundary so that its next allocation waits a while
    let ctx = Ctx::new().await;
    let items = ints(3);
    let opts = Opts { time_boundary: Duration::from_secs(2), ..Opts::default() };
    let m0 = member_at(&chroot(&ctx), "0", &items, &opts).await;
    wait_converged("m0", &ctx.observer, &[&m0], &items, acquire_deadline()).await;

    // when: m0 releases (its lock directories are now empty), and an operator removes them and `locks` itself
    m0.partitioner.release_set().await.expect("release_set");
    let generation = m0.partitioner.snapshot().generation;
    for item in &items {
        ctx.observer.delete(&format!("{PATH}/locks/{item}"), None).await.expect("delete an empty lock directory");
    }
    ctx.observer.delete(&format!("{PATH}/locks"), None).await.expect("delete the empty locks node");
    assert_eq!(m0.partitioner.snapshot().generation, generation, "m0 moved on before the deletions were done");

    // then: m0 recreates what it needs and acquires everything
    wait_converged("m0", &ctx.observer, &[&m0], &items, timing(Duration::from_secs(2)) + acquire_deadline()).await;
    for item in &items {
        assert!(ctx.observer.check_stat(&format!("{PATH}/locks/{item}")).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn operator_adds_a_foreign_party_child_while_members_are_acquired() {
    // given
    let ctx = Ctx::new().await;
    let items = ints(5);
    let (m0, m1) = (ctx.member("0", items.clone()).await, ctx.member("1", items.clone()).await);
    let _workers = [auto_release(&m0.partitioner), auto_release(&m1.partitioner)];
    let checker = SafetyChecker::start(ctx.observer.clone(), &items, &[&m0, &m1]);
    wait_converged("two members", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    let before = (m0.partitioner.items(), m1.partitioner.items());
    let (r0, r1) = (Recorder::start(&m0.partitioner), Recorder::start(&m1.partitioner));
    let generations = [m0.partitioner.snapshot().generation, m1.partitioner.snapshot().generation];

    // when: a node that is not a member node appears under `party`
    ctx.observer.create(&format!("{PATH}/party/operator-note"), b"", &common::persistent()).await.unwrap();

    // then: the party's children changed, so both go through RELEASE, then converge on the same shares
    for (member, generation) in [(&m0, generations[0]), (&m1, generations[1])] {
        wait_transition(member, generation, timing(Duration::from_secs(5))).await;
    }
    wait_converged("after the foreign child", &ctx.observer, &[&m0, &m1], &items, acquire_deadline()).await;
    for (recorder, member) in [(&r0, &m0), (&r1, &m1)] {
        let states = recorded_states(recorder, &member.partitioner).await;
        assert!(states.contains(&PartitionState::Release), "{states:?}");
    }
    assert_eq!((m0.partitioner.items(), m1.partitioner.items()), before, "the foreign child took a share");
    checker.assert_safe(10).await;
}

/// Not in kazoo's failure list, but the guarantee says a member lists an item only while it holds the item's lock:
/// when someone else deletes a held lock node and takes the item at once, the member stops listing it as soon as
/// ZooKeeper tells it (one watch notification), never lists it while the other process holds it, and takes it back
/// (with a larger fencing token) once free. Under both rebalance modes; incremental keeps the other item throughout.
#[tokio::test]
async fn operator_deletes_a_held_lock_node() {
    for rebalance in [Rebalance::Eager, Rebalance::Incremental] {
        operator_deletes_a_held_lock_node_under(rebalance).await;
    }
}

async fn operator_deletes_a_held_lock_node_under(rebalance: Rebalance) {
    // given
    let ctx = Ctx::new().await;
    let items = ints(2);
    let m0 = ctx.member_with("0", items.clone(), |b| b.rebalance(rebalance)).await;
    let _worker = auto_release(&m0.partitioner);
    wait_converged("m0", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    let before = m0.partitioner.snapshot();
    let node = m0.client.list_ephemerals(&format!("{PATH}/locks/0")).await.expect("list ephemerals");
    assert_eq!(node.len(), 1, "{node:?}");
    let recorder = Recorder::start(&m0.partitioner);

    // when: a thief deletes m0's lock node and takes item 0 in the same instant (one multi: its contender is then
    // the lowest before m0 can hear of the deletion)
    let thief = ctx.client().await;
    let deleted_at = Instant::now();
    let mut writer = thief.new_multi_writer();
    writer.add_delete(&node[0], None).expect("delete op");
    let thief_prefix = format!("{PATH}/locks/0/{}__lock__", "b".repeat(32));
    writer.add_create(&thief_prefix, b"thief", &common::ephemeral_sequential()).expect("create op");
    let results = writer.commit().await.expect("delete m0's lock node of item 0 and take the item");
    let thief_node = match &results[1] {
        zk_partitioner::zookeeper_client::MultiWriteResult::Create { path, .. } => path.clone(),
        other => panic!("unexpected multi result {other:?}"),
    };

    // then: m0 stops listing item 0 within one notification's trip, or when its watch is registered if that was
    // still to come (time_boundary after its allocation): a snapshot without it is published ...
    wait_for("a snapshot without item 0", timing(Duration::from_secs(1)), || async {
        let stopped =
            recorder.snapshots().iter().any(|s| s.generation > before.generation && !s.items.contains(&items[0]));
        if stopped { Ok(()) } else { Err(format!("{:?}", m0.partitioner.snapshot())) }
    })
    .await;
    let noticed = deleted_at.elapsed();
    // ... queues behind the thief, and never listed item 0 meanwhile (checked over every snapshot published since)
    ctx.wait_lock_queue(PATH, 0, &[thief.session_id().0, m0.session()]).await;
    for snapshot in recorder.snapshots().into_iter().filter(|s| s.generation > before.generation) {
        assert!(!snapshot.items.contains(&items[0]), "item 0 listed while the thief held it: {snapshot:?}");
        if rebalance == Rebalance::Incremental {
            assert!(snapshot.items.contains(&items[1]), "incremental: item 1 must stay listed: {snapshot:?}");
        }
    }
    // when the thief lets go, m0 takes item 0 back with a larger token
    thief.delete(&thief_node, None).await.expect("the thief lets go");
    wait_converged("m0 again", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    let after = m0.partitioner.snapshot();
    assert!(after.tokens[0] > before.tokens[0], "{:?} then {:?}", before.tokens, after.tokens);
    if rebalance == Rebalance::Incremental {
        assert_eq!(after.tokens[1], before.tokens[1], "item 1 kept its lock node");
    }
    tracing::info!(?rebalance, ?noticed, "an operator's deletion noticed");
}

/// A write to a held lock node (a tool, an operator) fires the node's one-shot watch without taking the lock: the
/// member keeps the item, watches the node again, and still notices when the node is then deleted.
#[tokio::test]
async fn operator_writes_then_deletes_a_held_lock_node() {
    // given: a member that holds both items, past the time its held-lock watches are registered by (twice
    // time_boundary after its locks were taken, the core's bound, plus a round trip: nothing outside the member can
    // see a watch registered, and a write before the registration would test nothing new)
    let ctx = Ctx::new().await;
    let items = ints(2);
    let m0 = ctx.member_with("0", items.clone(), |b| b).await;
    let _worker = auto_release(&m0.partitioner);
    wait_converged("m0", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    tokio::time::sleep(2 * TIME_BOUNDARY + Duration::from_millis(500)).await;
    let before = m0.partitioner.snapshot();
    let node = m0.client.list_ephemerals(&format!("{PATH}/locks/0")).await.expect("list ephemerals");
    assert_eq!(node.len(), 1, "{node:?}");
    let recorder = Recorder::start(&m0.partitioner);
    let operator = ctx.client().await;

    // when: someone writes to the held node; then, once the member has had a round trip to watch it again, deletes it
    operator.set_data(&node[0], b"touched", None).await.expect("write to m0's lock node");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m0.partitioner.snapshot().items, before.items, "a write is no loss");
    operator.delete(&node[0], None).await.expect("delete m0's lock node");

    // then: the deletion is noticed through the watch registered again (a snapshot without item 0, then item 0
    // taken back with a larger token)
    wait_for("a snapshot without item 0", timing(Duration::from_secs(1)), || async {
        let stopped =
            recorder.snapshots().iter().any(|s| s.generation > before.generation && !s.items.contains(&items[0]));
        if stopped { Ok(()) } else { Err(format!("{:?}", m0.partitioner.snapshot())) }
    })
    .await;
    wait_converged("m0 again", &ctx.observer, &[&m0], &items, acquire_deadline()).await;
    assert!(m0.partitioner.snapshot().tokens[0] > before.tokens[0]);
}

// ---------------------------------------------------------------------------------------------------------------
// 8. Stopping a member in the middle of an allocation leaves nothing behind
// ---------------------------------------------------------------------------------------------------------------

/// When the test stops the member.
#[derive(Clone, Copy, Debug)]
enum StopAt {
    /// This long after build() returned (0: while it waits for the party to be stable; about time_boundary: while
    /// its first lock requests are in flight).
    After(Duration),
    /// Once it queues behind the foreign holder of item 0.
    Blocked,
}

#[tokio::test]
async fn finish_or_drop_during_allocation_leaves_no_node_behind() {
    // given: 300 items, of which a foreign session holds 0..30, so every allocation is stuck behind it
    let ctx = Ctx::new().await;
    let items = ints(300);
    let blocker = ctx.client().await;
    let _held = ctx.hold_locks(&blocker, PATH, &ints(30)).await;
    let b = blocker.session_id().0;
    let stops = [
        StopAt::After(Duration::ZERO),
        StopAt::After(TIME_BOUNDARY),
        StopAt::After(TIME_BOUNDARY + Duration::from_millis(5)),
        StopAt::After(TIME_BOUNDARY + Duration::from_millis(30)),
        StopAt::Blocked,
    ];
    for drop_it in [false, true] {
        for stop in stops {
            let what = format!("{} at {stop:?}", if drop_it { "drop" } else { "finish" });
            let member = build_member(ctx.client().await, "0", &items, |b| Opts::default().apply(b)).await;
            match stop {
                StopAt::After(delay) => tokio::time::sleep(delay).await,
                StopAt::Blocked => ctx.wait_lock_queue(PATH, 0, &[b, member.session()]).await,
            }
            let Member { client, partitioner } = member;
            let watch = partitioner.subscribe();
            // when
            if drop_it {
                drop(partitioner);
            } else {
                partitioner.finish().await;
                // then: finish() returns once everything is gone
                assert_eq!(partitioner.snapshot().cause, Some(Error::Finished), "{what}");
                let left = client.list_ephemerals("/").await.expect("list ephemerals");
                assert_eq!(left, Vec::<String>::new(), "{what}: nodes of the session right after finish()");
            }
            // then: once the task stopped, no node of the session exists, and none appears later
            wait_task_stopped(watch, timing(Duration::from_secs(10))).await;
            let left = client.list_ephemerals("/").await.expect("list ephemerals");
            assert_eq!(left, Vec::<String>::new(), "{what}: nodes of the session after the task stopped");
        }
    }
    // the blocker still holds its locks and is alone in every queue
    let holders = common::members::lock_holders(&ctx.observer, PATH, &items).await;
    assert!(holders.values().all(|owner| *owner == b), "{holders:x?}");
    assert_eq!(holders.len(), 30);
}

// ---------------------------------------------------------------------------------------------------------------
// 9. Calls in the wrong state
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn calls_in_the_wrong_state_have_documented_results() {
    // given: an ACQUIRED member
    let ctx = Ctx::new().await;
    let m0 = ctx.member("0", ints(2)).await;
    m0.wait_items(&ints(2), acquire_deadline()).await;

    // when: finish() twice at once, from two handles
    let other = m0.partitioner.clone();
    tokio::time::timeout(
        timing(Duration::from_secs(5)),
        futures::future::join(m0.partitioner.finish(), other.finish()),
    )
    .await
    .expect("both finish() calls return");

    // then
    assert_eq!(m0.state(), PartitionState::Failure);
    assert_eq!(m0.partitioner.snapshot().cause, Some(Error::Finished));
    // a third finish() returns at once
    tokio::time::timeout(Duration::from_millis(100), m0.partitioner.finish()).await.expect("finish() after FAILURE");
    // release_set() in FAILURE returns the cause
    assert_eq!(m0.partitioner.release_set().await, Err(Error::Finished));
    // wait_for_acquire() in FAILURE returns FAILURE at once, whatever the timeout
    let started = Instant::now();
    assert_eq!(m0.partitioner.wait_for_acquire(Duration::from_secs(30)).await, PartitionState::Failure);
    assert!(started.elapsed() < Duration::from_millis(100), "took {:?}", started.elapsed());
    assert!(m0.partitioner.items().is_empty());
    assert_eq!(m0.client.list_ephemerals("/").await.expect("list ephemerals"), Vec::<String>::new());
}

/// `release_set()` and `finish()` may be called while ACQUIRED. The member must not go on reporting ACQUIRED (with
/// its items) once it has started deleting their locks: when the first of its lock nodes disappears, the member must
/// already be out of ACQUIRED (else its worker, or anyone reading `is_acquired()`/`items()`, goes on processing items
/// that another member may already have locked).
#[tokio::test]
async fn release_set_or_finish_while_acquired_never_claims_a_deleted_lock() {
    let ctx = Ctx::new().await;
    let items = ints(200);
    let mut failures = Vec::new();
    for finish in [false, true] {
        let call = if finish { "finish()" } else { "release_set()" };
        // given: an ACQUIRED member, and a watch on each of its lock nodes
        let member = ctx.member(if finish { "f" } else { "r" }, items.clone()).await;
        member.wait_items(&items, acquire_deadline()).await;
        let generation = member.partitioner.snapshot().generation;
        let nodes = member.client.list_ephemerals(&format!("{PATH}/locks")).await.expect("list ephemerals");
        assert_eq!(nodes.len(), items.len());
        let mut watches = futures::stream::FuturesUnordered::new();
        for node in &nodes {
            let (_, watcher) = ctx.observer.check_and_watch_stat(node).await.expect("watch a lock node");
            watches.push(watcher.changed());
        }

        // when
        let partitioner = member.partitioner.clone();
        let running = tokio::spawn(async move {
            if finish {
                partitioner.finish().await;
            } else {
                partitioner.release_set().await.expect("release_set");
            }
        });

        // then: when the first lock node is gone, the member no longer claims it
        let first = tokio::time::timeout(acquire_deadline(), futures::StreamExt::next(&mut watches)).await;
        let event = first.expect("no lock node was deleted").expect("a lock node event");
        let snapshot = member.partitioner.snapshot();
        if snapshot.state == PartitionState::Acquired || !snapshot.items.is_empty() {
            failures.push(format!(
                "{call}: {} is still {} (generation {generation} -> {}) with {} items after its lock node {} was \
                 deleted",
                snapshot.member,
                snapshot.state,
                snapshot.generation,
                snapshot.items.len(),
                event.path
            ));
        }
        running.await.expect("the call");
        member.partitioner.finish().await;
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The member's own contender node in `dir`: the child its session owns.
async fn own_contender(ctx: &Ctx, dir: &str, member: &Member) -> String {
    let children = ctx.observer.list_children(dir).await.expect("list the lock directory");
    for child in children {
        if let Ok(Some(stat)) = ctx.observer.check_stat(&format!("{dir}/{child}")).await
            && stat.ephemeral_owner == member.session()
        {
            return child;
        }
    }
    panic!("no contender of {} in {dir}", member.partitioner.snapshot().member)
}

/// A create of the member's that was lost with the connection lands late, after the member listed the directory and
/// created again: a node of its own session, with its own prefix, sorts before the one it tracks. (On one server this
/// cannot be timed from outside; the test writes that node with the member's own session.) The member must not wait
/// for itself: it once did, forever, since the release sweep spares nodes whose prefix is still in use.
#[tokio::test]
async fn a_node_of_the_members_own_before_its_contender_is_not_waited_for() {
    // given: a member waiting behind a foreign holder for item 0; then its contender is replaced, in one multi of
    // its own session, by another node with its prefix (what a late-landing create leaves once the member's node
    // is gone and re-created)
    let ctx = Ctx::new().await;
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[0])).await;
    let member = ctx.member("self-blocked", ints(1)).await;
    let _worker = auto_release(&member.partitioner);
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, member.session()]).await;
    let dir = format!("{PATH}/locks/0");
    let node = own_contender(&ctx, &dir, &member).await;
    let prefix = &node[..node.len() - 10];
    let mut multi = member.client.new_multi_writer();
    multi.add_delete(&format!("{dir}/{node}"), None).expect("delete");
    multi.add_create(&format!("{dir}/{prefix}"), b"late", &common::ephemeral_sequential()).expect("create");
    multi.commit().await.expect("replace the member's node");

    // when: the holder lets go
    ctx.release_locks(&blocker, held).await;

    // then: the member holds item 0, with a single node of its own in the directory
    member.wait_items(&ints(1), acquire_deadline()).await;
    let children = ctx.observer.list_children(&dir).await.expect("list");
    assert_eq!(children.len(), 1, "one contender left: {children:?}");
    assert_eq!(own_contender(&ctx, &dir, &member).await, children[0]);
}

/// The same late create, landing behind the node the member holds through: harmless while it holds, but a node of
/// its session that no lock tracks; it is deleted.
#[tokio::test]
async fn a_node_of_the_members_own_behind_its_contender_is_deleted() {
    // given: a member waiting behind a foreign holder; a second node with its prefix appears behind its own
    let ctx = Ctx::new().await;
    let blocker = ctx.client().await;
    let held = ctx.hold_locks(&blocker, PATH, &items_of(&[0])).await;
    let member = ctx.member("doubled", ints(1)).await;
    let _worker = auto_release(&member.partitioner);
    ctx.wait_lock_queue(PATH, 0, &[blocker.session_id().0, member.session()]).await;
    let dir = format!("{PATH}/locks/0");
    let node = own_contender(&ctx, &dir, &member).await;
    let prefix = &node[..node.len() - 10];
    member.client.create(&format!("{dir}/{prefix}"), b"late", &common::ephemeral_sequential()).await.expect("create");

    // when: the holder lets go
    ctx.release_locks(&blocker, held).await;

    // then: the member holds item 0 through its own node, and the extra node goes
    member.wait_items(&ints(1), acquire_deadline()).await;
    wait_for("the extra node to go", acquire_deadline(), || async {
        let children = ctx.observer.list_children(&dir).await.unwrap_or_default();
        if children == [node.clone()] { Ok(()) } else { Err(format!("{children:?}")) }
    })
    .await;
}
