//! The shared set is atomic on a real ZooKeeper: a reader never sees part of an update, whatever happens to its
//! writer (a connection cut part-way, a session that expires part-way, a concurrent writer, a lost reply); an
//! update abandoned part-way is finished or undone by the party's first member within its writer's session timeout;
//! a member started while an update is under way starts from the committed set; and a member following another
//! version is reported as a disagreement.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::members::{Member, Recorder, auto_release};
use common::{Ctx, timing, wait_for, wait_until};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Error, Item, PartitionState, SharedSet, snapshot::DisagreementKind};
use zk_partitioner_testing::Proxy;

const PATH: &str = "/partitioner";
/// ZooKeeper's request type of a write `multi`.
const MULTI: i32 = 14;
/// ZooKeeper's request type of an `exists`.
const EXISTS: i32 = 3;
/// The admins' session timeout (an abandoned update waits for its writer's lease, so for this, to be recovered).
const ADMIN_SESSION: Duration = Duration::from_secs(4);

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<Item> {
    range.map(|n| Item::from(format!("{prefix}{n:04}"))).collect()
}

fn set_of(items: &[Item]) -> BTreeSet<Item> {
    items.iter().cloned().collect()
}

/// An admin's client, through its own proxy.
async fn admin_behind_proxy(ctx: &Ctx) -> (Client, Proxy) {
    let proxy = Proxy::start(ctx.addr).await;
    let client = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), ADMIN_SESSION).await;
    (client, proxy)
}

/// Reads the set over and over on its own session until stopped; every read must be a whole set that some update
/// committed (one of `allowed`), or no set at all when `missing_ok`.
struct Reader {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(usize, Vec<String>)>,
}

impl Reader {
    fn start(set: SharedSet, allowed: Vec<BTreeSet<Item>>, missing_ok: bool) -> Reader {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let (mut reads, mut wrong) = (0, Vec::new());
            while !*stopped.borrow() {
                match set.read().await {
                    Ok(read) => {
                        reads += 1;
                        let items = set_of(&read.items);
                        if !allowed.contains(&items) {
                            wrong.push(format!("version {} with {} items", read.version, items.len()));
                        }
                    }
                    Err(Error::SharedSetMissing { .. }) if missing_ok => reads += 1,
                    Err(err) => wrong.push(format!("read failed: {err}")),
                }
                tokio::select! {
                    _ = stopped.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                }
            }
            (reads, wrong)
        });
        Reader { stop, task }
    }

    async fn assert_whole(self) {
        let _ = self.stop.send(true);
        let (reads, wrong) = self.task.await.expect("the reader");
        assert!(reads > 10, "only {reads} reads: the check proves little");
        assert!(
            wrong.is_empty(),
            "{} of {reads} reads saw a set no update committed: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}

/// The header's data (`<path>/items`), as text.
async fn header(observer: &Client, path: &str) -> String {
    match observer.get_data(&format!("{path}/items")).await {
        Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
        Err(_) => String::new(),
    }
}

/// Waits until the header says `state` (`creating`, `staging`, `applying`, `ready`).
async fn wait_header(observer: &Client, path: &str, state: &str, deadline: Duration) {
    let wanted = format!("state={state}");
    wait_until(&format!("the header of {path} to say {wanted}"), deadline, || async {
        header(observer, path).await.contains(&wanted)
    })
    .await;
}

/// Waits until the writer behind `proxy` was stopped (see [`Proxy::cut_after_containing`]), and checks that the
/// header then says `state`.
async fn writer_stopped(ctx: &Ctx, proxy: &Proxy, path: &str, state: &str) {
    wait_until("the writer to be stopped", timing(Duration::from_secs(20)), || async {
        proxy.is_cut() && !proxy.reply_loss_pending()
    })
    .await;
    wait_header(&ctx.observer, path, state, timing(Duration::from_secs(5))).await;
}

/// A 5,000-item `create_if_missing` whose connection is cut part-way completes whole; one whose session expires
/// part-way fails, and the next `create_if_missing` (after undoing the abandoned creation) creates the set whole.
/// No reader ever sees part of it. (Before, the next attempt returned the part written so far, for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_creation_cut_part_way_is_whole_or_absent() {
    let ctx = Ctx::new().await;
    let items = names("i", 0..5000);
    let reader = Reader::start(SharedSet::new(ctx.client().await, PATH).expect("set"), vec![set_of(&items)], true);

    // A cut of one second in the middle: the writer reconnects on the same session and carries on.
    // Stopped after its first request of items, for a second.
    let (client, proxy) = admin_behind_proxy(&ctx).await;
    let set = SharedSet::new(client, PATH).expect("set");
    proxy.cut_after_containing(MULTI, b"/items/i");
    let create = tokio::spawn({
        let items = items.clone();
        async move { set.create_if_missing(items).await }
    });
    writer_stopped(&ctx, &proxy, PATH, "creating").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.heal();
    let (created, fresh) = create.await.expect("task").expect("a creation cut part-way still completes");
    assert!(fresh, "this call created the set");
    assert_eq!((created.items.len(), created.version), (5000, 1));
    reader.assert_whole().await;

    // The same on another path, with the writer's session expiring part-way.
    let path = "/partitioner2";
    let reader = Reader::start(SharedSet::new(ctx.client().await, path).expect("set"), vec![set_of(&items)], true);
    let (client, proxy) = admin_behind_proxy(&ctx).await;
    let session = client.session_id().0;
    let set = SharedSet::new(client, path).expect("set");
    proxy.cut_after_containing(MULTI, b"/items/i");
    let create = tokio::spawn({
        let items = items.clone();
        async move { set.create_if_missing(items).await }
    });
    writer_stopped(&ctx, &proxy, path, "creating").await;
    proxy.expire_session(session, timing(ADMIN_SESSION * 3)).await;
    let failed = create.await.expect("task");
    assert!(failed.is_err(), "a creation whose session expired part-way reports it: {failed:?}");
    // Another process creates the set: it undoes the abandoned creation (its writer's lease is gone) and starts over.
    let other = SharedSet::new(ctx.client().await, path).expect("set");
    let (created, fresh) = other.create_if_missing(items.clone()).await.expect("created after the abandoned one");
    assert!(fresh);
    assert_eq!(set_of(&created.items), set_of(&items));
    reader.assert_whole().await;
}

/// Two admins race: one removes 2,500 of 3,000 items (an update of several requests), the other adds one item while
/// the removal is staged. Both succeed, each whole, one after the other; no reader sees a mix. (Before, the second
/// writer's update took the half-removed set as its base, members followed a set nobody committed, and the first
/// writer then failed with part of its change applied.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_admins_racing_a_large_removal_both_land_whole() {
    let ctx = Ctx::new().await;
    let start = names("k", 0..3000);
    SharedSet::new(ctx.client().await, PATH).expect("set").create_if_missing(start.clone()).await.expect("create");
    let removed = names("k", 0..2500);
    let added = Item::from("zz1");
    let after_remove: BTreeSet<Item> = names("k", 2500..3000).into_iter().collect();
    let after_add: BTreeSet<Item> = set_of(&start).into_iter().chain([added.clone()]).collect();
    let both: BTreeSet<Item> = after_remove.iter().cloned().chain([added.clone()]).collect();
    let reader = Reader::start(
        SharedSet::new(ctx.client().await, PATH).expect("set"),
        vec![set_of(&start), after_remove.clone(), after_add, both.clone()],
        false,
    );

    // The remover is held up after its first staging request; the adder comes meanwhile and waits for it.
    let (client, proxy) = admin_behind_proxy(&ctx).await;
    let first = SharedSet::new(client, PATH).expect("set");
    proxy.cut_after_containing(MULTI, b"/remove/");
    let remove = tokio::spawn({
        let removed = removed.clone();
        async move { first.remove(removed).await }
    });
    writer_stopped(&ctx, &proxy, PATH, "staging").await;
    // The adder, through a proxy that sees its requests: it finds the removal under way and watches the remover's
    // lease (an `exists` on `<path>/item-writers/<tag>`), then waits.
    let (adder, adder_proxy) = admin_behind_proxy(&ctx).await;
    let lease_watched = adder_proxy.watch_for(EXISTS, format!("{PATH}/item-writers/").as_bytes());
    let second = SharedSet::new(adder.clone(), PATH).expect("set");
    let add = tokio::spawn({
        let added = added.clone();
        async move { second.add([added]).await }
    });
    wait_until("the adder to watch the remover's lease", timing(Duration::from_secs(10)), || async {
        lease_watched.count() > 0
    })
    .await;
    // (a round trip on the adder's session after its `exists`: the answer, the lease alive, has reached it)
    adder.sync(PATH).await.expect("sync");
    assert!(proxy.is_cut(), "the remover is still stopped, its lease alive");
    assert!(header(&ctx.observer, PATH).await.contains("state=staging"), "the removal is still staged");
    assert!(!add.is_finished(), "the adder waits while the remover's lease lives");
    proxy.heal();
    let remove = remove.await.expect("task").expect("the removal lands whole");
    let add = add.await.expect("task").expect("the add lands after the removal");
    let second = SharedSet::new(ctx.client().await, PATH).expect("set");
    assert_eq!((remove.version, add.version), (2, 3), "the removal first, then the add");
    assert_eq!(set_of(&add.items), both);
    let last = second.read().await.expect("read");
    assert_eq!(set_of(&last.items), both);
    assert_eq!(last.version, 3, "version 1 created, then one version each");
    assert!(!last.updating);
    reader.assert_whole().await;
}

/// Lost replies are resolved: a removal, a `replace_if` and a large update whose write's reply is lost each report
/// success (their write landed), and nothing is applied twice. (Before, the retried removal reported its items
/// missing, and the retried `replace_if` a conflict with its own write.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_whose_reply_is_lost_reports_what_happened() {
    let ctx = Ctx::new().await;
    let (client, proxy) = admin_behind_proxy(&ctx).await;
    let set = SharedSet::new(client, PATH).expect("set");
    set.create_if_missing(common::members::ints(10)).await.expect("create");

    proxy.lose_reply_to_next(MULTI);
    let removed = set.remove([Item::from(3)]).await.expect("a removal whose reply was lost succeeded");
    assert!(!proxy.reply_loss_pending(), "the reply was lost");
    assert!(!removed.items.contains(&Item::from(3)));
    assert_eq!(removed.version, 2);

    proxy.lose_reply_to_next(MULTI);
    let replaced = set.replace_if(2, common::members::ints(4)).await.expect("replace_if finds its own write");
    assert!(!proxy.reply_loss_pending(), "the reply was lost");
    assert_eq!((replaced.items, replaced.version), (common::members::ints(4), 3));

    // A large update: the reply to its first write (the intent) is lost.
    let more: Vec<Item> = (100..3100).map(Item::from).collect();
    proxy.lose_reply_to_next(MULTI);
    let grown = set.add(more.clone()).await.expect("a large update whose intent's reply was lost");
    assert!(!proxy.reply_loss_pending(), "the reply was lost");
    assert_eq!(grown.items.len(), 3004);
    let read = set.read().await.expect("read");
    assert_eq!((read.items.len(), read.version, read.updating), (3004, 4, false));
}

/// Waits until the member is ACQUIRED at `version` with every item of `expected` (it is alone in its party).
async fn wait_alone_at(member: &Member, version: u64, expected: &BTreeSet<Item>, deadline: Duration) {
    common::members::wait_snapshot(&member.partitioner, &format!("ACQUIRED at version {version}"), deadline, |s| {
        s.state == PartitionState::Acquired && s.set_version == Some(version) && set_of(&s.items) == *expected
    })
    .await;
}

/// Every snapshot a lone member published while ACQUIRED lists a whole committed version: one of `versions`.
fn assert_only_committed(recorder: &Recorder, versions: &[(u64, &BTreeSet<Item>)]) {
    for snapshot in recorder.snapshots() {
        if snapshot.state != PartitionState::Acquired {
            continue;
        }
        let version = snapshot.set_version.expect("a member of a shared set says its version");
        let expected = versions.iter().find(|(v, _)| *v == version).map(|(_, items)| *items);
        assert_eq!(Some(&set_of(&snapshot.items)), expected, "ACQUIRED at version {version}");
    }
}

/// A writer's session expires half-way through a 3,000-item addition: the party's first member finds its lease
/// gone and undoes the update (still staged) or finishes it (committed), within the writer's session timeout plus
/// a few seconds. The set is then whole (the old one or the new one), never left `updating`. (Before, an update
/// killed part-way stayed `updating` for good, and members stopped following changes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_abandoned_part_way_is_undone_or_finished_by_a_member() {
    let ctx = Ctx::new().await;
    let start = common::members::ints(20);
    let member = ctx.member_with("m", start.clone(), |b| b.shared_set(true)).await;
    let recorder = Recorder::start(&member.partitioner);
    let _worker = auto_release(&member.partitioner);
    wait_alone_at(&member, 1, &set_of(&start), timing(Duration::from_secs(10))).await;

    // Stopped after its first staging request, or after its commit.
    for (round, state, request) in [(0, "staging", &b"/add/"[..]), (1, "applying", &b"state=applying"[..])] {
        let before = SharedSet::new(ctx.client().await, PATH).expect("set").read().await.expect("read");
        let (client, proxy) = admin_behind_proxy(&ctx).await;
        let session = client.session_id().0;
        let admin = SharedSet::new(client, PATH).expect("set");
        let more: Vec<Item> = (1000 + round * 5000..4000 + round * 5000).map(|n| Item::from(n as i64)).collect();
        proxy.cut_after_containing(MULTI, request);
        let update = tokio::spawn({
            let more = more.clone();
            async move { admin.add(more).await }
        });
        // The writer goes silent part-way, then its session expires (a crash, or a partition past the timeout).
        writer_stopped(&ctx, &proxy, PATH, state).await;
        let cut_at = Instant::now();
        proxy.expire_session(session, timing(ADMIN_SESSION * 3)).await;
        let outcome = update.await.expect("task");
        wait_header(&ctx.observer, PATH, "ready", timing(ADMIN_SESSION + Duration::from_secs(8))).await;
        let recovered = cut_at.elapsed();
        let after = SharedSet::new(ctx.client().await, PATH).expect("set").read().await.expect("read");
        let grown: BTreeSet<Item> = set_of(&before.items).into_iter().chain(more.iter().cloned()).collect();
        match state {
            // Staged, not committed: undone; the writer was told it failed (or that the outcome is unknown).
            "staging" => {
                assert_eq!((set_of(&after.items), after.version), (set_of(&before.items), before.version));
                assert!(outcome.is_err(), "{outcome:?}");
            }
            // Committed: finished by the member; the writer may not know.
            _ => assert_eq!((set_of(&after.items), after.version), (grown.clone(), before.version + 1)),
        }
        eprintln!(
            "{state}: the update was {} {recovered:.2?} after its writer went silent",
            if state == "staging" { "undone" } else { "finished" }
        );
        assert!(
            recovered <= timing(ADMIN_SESSION + Duration::from_secs(4)),
            "recovered {recovered:?} after the writer went silent, beyond its session timeout + 4 s"
        );
        wait_alone_at(&member, after.version, &set_of(&after.items), timing(Duration::from_secs(15))).await;
    }
    let v1 = set_of(&start);
    let v2: BTreeSet<Item> = v1.iter().cloned().chain((6000..9000).map(|n: i64| Item::from(n))).collect();
    assert_only_committed(&recorder, &[(1, &v1), (2, &v2)]);
}

/// A member started while an update is staged starts from the committed set, and follows the update once its
/// writer commits it. (Before, it started from the half-written set and said nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_started_during_an_update_starts_from_the_committed_set() {
    let ctx = Ctx::new().await;
    let start = common::members::ints(20);
    SharedSet::new(ctx.client().await, PATH).expect("set").create_if_missing(start.clone()).await.expect("create");
    let (client, proxy) = admin_behind_proxy(&ctx).await;
    let admin = SharedSet::new(client, PATH).expect("set");
    let more: Vec<Item> = (1000..4000).map(Item::from).collect();
    // The writer is held up after its first staging request (within its session timeout) while the member starts.
    proxy.cut_after_containing(MULTI, b"/add/");
    let update = tokio::spawn({
        let more = more.clone();
        async move { admin.add(more).await }
    });
    writer_stopped(&ctx, &proxy, PATH, "staging").await;
    let member = ctx.member_with("m", Vec::new(), |b| b.shared_set(true)).await;
    let recorder = Recorder::start(&member.partitioner);
    let _worker = auto_release(&member.partitioner);
    wait_alone_at(&member, 1, &set_of(&start), timing(Duration::from_secs(10))).await;
    proxy.heal();
    let done = update.await.expect("task").expect("the held-up update lands");
    let grown: BTreeSet<Item> = set_of(&start).into_iter().chain(more).collect();
    assert_eq!((set_of(&done.items), done.version), (grown.clone(), 2));
    wait_alone_at(&member, 2, &grown, timing(Duration::from_secs(15))).await;
    assert_only_committed(&recorder, &[(1, &set_of(&start)), (2, &grown)]);
}

/// A member whose party node announces another version of the shared set (`set=shared@<version>`) is reported as an
/// `SetVersion` disagreement, which ends once it announces the version the others follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_on_another_version_is_a_reported_disagreement() {
    let ctx = Ctx::new().await;
    let member = ctx.member_with("m", common::members::ints(5), |b| b.shared_set(true)).await;
    let _worker = auto_release(&member.partitioner);
    wait_alone_at(&member, 1, &set_of(&common::members::ints(5)), timing(Duration::from_secs(10))).await;
    // Our member's announcement, as another member on version 0 would write it.
    let party = format!("{PATH}/party");
    let ours = ctx.observer.list_children(&party).await.expect("party")[0].clone();
    let (data, _) = ctx.observer.get_data(&format!("{party}/{ours}")).await.expect("our node");
    let text = String::from_utf8(data).expect("text");
    assert!(text.contains("set=shared@1"), "a member announces the version it follows: {text:?}");
    let lagging = text.replacen("m\n", "ghost\n", 1).replace("set=shared@1", "set=shared@0");
    let ghost_client = ctx.client().await;
    let (_, sequence) = ghost_client
        .create(
            &format!("{party}/0123456789abcdef0123456789abcdef-ghost-"),
            lagging.as_bytes(),
            &zk_partitioner::zookeeper_client::CreateMode::EphemeralSequential
                .with_acls(zk_partitioner::zookeeper_client::Acls::anyone_all()),
        )
        .await
        .expect("the ghost's node");
    let report = wait_for("the disagreement", timing(Duration::from_secs(10)), || async {
        let snapshot = member.partitioner.snapshot();
        snapshot
            .disagreements
            .iter()
            .find(|d| d.member.starts_with("ghost"))
            .cloned()
            .ok_or_else(|| format!("none yet: {:?}", snapshot.disagreements))
    })
    .await;
    assert_eq!(report.kind, DisagreementKind::SetVersion);
    // The ghost catches up: the report ends (the member reads announcements again while one lags).
    let path = format!("{party}/0123456789abcdef0123456789abcdef-ghost-{sequence}");
    ghost_client.set_data(&path, text.replacen("m\n", "ghost\n", 1).as_bytes(), None).await.expect("catch up");
    wait_until("the disagreement to end", timing(Duration::from_secs(10)), || async {
        member.partitioner.snapshot().disagreements.is_empty()
    })
    .await;
}
