//! The shared set on a real ZooKeeper: members follow additions and removals under every rebalance mode (only
//! the owners of changed items stop under `Rebalance::Incremental`), concurrent admins lose nothing, a member joins
//! while the set changes, members whose configurations disagree say so at once, and bad input gets clear errors.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kazoo::KazooWorker;
use common::members::{AbortOnDrop, Member, Recorder, assert_disjoint_cover, auto_release, items_of};
use common::{Ctx, timing, wait_for, wait_until};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Error, FencingToken, Item, PartitionState, Rebalance, SetPartitioner, SharedSet, Snapshot, partition::Rendezvous,
    snapshot::DisagreementKind,
};

const PATH: &str = "/partitioner";

struct Worker {
    member: Member,
    recorder: Recorder,
    _loop: AbortOnDrop,
}

async fn shared_member(ctx: &Ctx, name: &str, seed: &[i64], rebalance: Rebalance) -> Worker {
    let member = ctx
        .member_with(name, items_of(seed), |b| {
            b.shared_set(true).rebalance(rebalance).partition_func(Rendezvous::default())
        })
        .await;
    let recorder = Recorder::start(&member.partitioner);
    let worker_loop = auto_release(&member.partitioner);
    Worker { member, recorder, _loop: worker_loop }
}

/// Waits until every member is ACQUIRED at the set's current version and the claims are a disjoint cover of it.
async fn wait_cover(ctx: &Ctx, workers: &[&Worker], set: &SharedSet) -> Vec<Item> {
    let expected = set.read().await.expect("read the set");
    let party = workers.len();
    wait_until("every member ACQUIRED at the set's version", timing(Duration::from_secs(20)), || async {
        workers.iter().all(|w| {
            let s = w.member.partitioner.snapshot();
            s.state == PartitionState::Acquired && s.set_version == Some(expected.version) && s.members.len() == party
        })
    })
    .await;
    let members: Vec<&Member> = workers.iter().map(|w| &w.member).collect();
    assert_disjoint_cover(&ctx.observer, PATH, &members, &expected.items).await;
    expected.items
}

/// Who owns each item, with its fencing token (the creation zxid of the lock node that holds it).
fn ownership(workers: &[&Worker]) -> BTreeMap<Item, (String, FencingToken)> {
    common::members::owners_of(workers.iter().map(|w| &w.member.partitioner))
}

/// Every item still in the set that kept its owner kept its lock node: it was never released and taken again.
fn assert_kept(before: &BTreeMap<Item, (String, FencingToken)>, after: &BTreeMap<Item, (String, FencingToken)>) {
    let mut kept = 0;
    for (item, (owner, token)) in before {
        if let Some((new_owner, new_token)) = after.get(item)
            && new_owner == owner
        {
            assert_eq!(token, new_token, "{item} kept its owner {owner} but was released and taken again");
            kept += 1;
        }
    }
    assert!(kept > 0, "no item kept its owner: the check proves nothing ({before:?} then {after:?})");
}

async fn follows_changes(rebalance: Rebalance) {
    let ctx = Ctx::new().await;
    let seed: Vec<i64> = (0..6).collect();
    let a = shared_member(&ctx, "a", &seed, rebalance).await;
    let b = shared_member(&ctx, "b", &[], rebalance).await;
    let c = shared_member(&ctx, "c", &[], rebalance).await;
    let workers = [&a, &b, &c];
    let set = a.member.partitioner.shared_set().expect("a shared set").clone();
    let before = wait_cover(&ctx, &workers, &set).await;
    assert_eq!(before, items_of(&seed));

    // Two items are added: they are covered, and under incremental rebalancing every item that keeps its owner
    // keeps its lock node (its fencing token) throughout: it never stopped.
    let tokens = ownership(&workers);
    let added = SharedSet::new(ctx.client().await, PATH).expect("handle").add(items_of(&[6, 7])).await.expect("add");
    assert_eq!(added.items, items_of(&[0, 1, 2, 3, 4, 5, 6, 7]));
    let after = wait_cover(&ctx, &workers, &set).await;
    assert_eq!(after.len(), 8);
    for w in workers {
        let snapshot = w.member.partitioner.snapshot();
        assert_eq!(*snapshot.added, items_of(&[6, 7]), "{}", snapshot.member);
        assert!(snapshot.removed.is_empty());
    }
    if rebalance == Rebalance::Incremental {
        assert_kept(&tokens, &ownership(&workers));
    }

    // Three items are removed: under incremental rebalancing only their owners stop them; their directories go.
    let removed = items_of(&[1, 4, 6]);
    let tokens = ownership(&workers);
    set.remove(removed.clone()).await.expect("remove");
    let remaining = wait_cover(&ctx, &workers, &set).await;
    assert_eq!(remaining, items_of(&[0, 2, 3, 5, 7]));
    for w in workers {
        let snapshot = w.member.partitioner.snapshot();
        assert_eq!(*snapshot.removed, removed, "{}", snapshot.member);
    }
    if rebalance == Rebalance::Incremental {
        assert_kept(&tokens, &ownership(&workers));
    }
    let observer = &ctx.observer;
    wait_for("the lock directories of removed items are deleted", timing(Duration::from_secs(10)), || async {
        let dirs = observer.list_children(&format!("{PATH}/locks")).await.map_err(|e| e.to_string())?;
        let left: Vec<&String> = dirs.iter().filter(|d| removed.iter().any(|r| r.to_string() == **d)).collect();
        if left.is_empty() { Ok(()) } else { Err(format!("left: {left:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_members_follow_additions_and_removals() {
    follows_changes(Rebalance::Eager).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn incremental_members_stop_only_what_changes_owner() {
    follows_changes(Rebalance::Incremental).await;
}

/// Eight admins, each on its own session, add and remove at once: every change lands, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_admins_lose_no_change() {
    let ctx = Ctx::new().await;
    let first = SharedSet::new(ctx.client().await, PATH).expect("handle");
    let (created, fresh) = first.create_if_missing(items_of(&[1000, 1001, 1002, 1003])).await.expect("create");
    assert!(fresh);
    let (again, fresh) = first.create_if_missing(items_of(&[5])).await.expect("exists");
    assert!(!fresh, "an existing set is left as it is");
    assert_eq!(again.items, created.items);

    let mut admins = Vec::new();
    for k in 0..8i64 {
        let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
        admins.push(tokio::spawn(async move {
            for round in 0..5i64 {
                set.add(items_of(&[k * 100 + round])).await.expect("add");
            }
            if k < 4 {
                set.remove(items_of(&[1000 + k])).await.expect("remove");
            }
        }));
    }
    for admin in admins {
        admin.await.expect("admin task");
    }
    let after = first.read().await.expect("read");
    let expected: Vec<i64> = (0..8).flat_map(|k| (0..5).map(move |round| k * 100 + round)).collect();
    assert_eq!(after.items, items_of(&expected), "every admin's changes are there, and only they");
    assert!(!after.updating);
    // One version per update (each fits one multi): 40 additions and 4 removals after the creation.
    assert_eq!(after.version, created.version + 44);

    // A compare-and-set against a stale version fails and changes nothing.
    let stale = first.replace_if(created.version, items_of(&[9])).await;
    assert!(matches!(stale, Err(Error::SharedSetConflict { .. })), "{stale:?}");
    assert_eq!(first.read().await.expect("read").items, after.items);
    let done = first.replace_if(after.version, items_of(&[9])).await.expect("fresh version");
    assert_eq!(done.items, items_of(&[9]));
}

/// A member joins while an admin keeps adding items: it ends up with the same set as the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_joining_while_the_set_changes() {
    let ctx = Ctx::new().await;
    let a = shared_member(&ctx, "a", &[0, 1, 2], Rebalance::Incremental).await;
    let b = shared_member(&ctx, "b", &[], Rebalance::Incremental).await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
    let admin = {
        let set = set.clone();
        tokio::spawn(async move {
            for value in 3..23 {
                set.add(items_of(&[value])).await.expect("add");
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };
    // c joins in the middle of the admin's changes.
    wait_for("the admin halfway", timing(Duration::from_secs(10)), || async {
        let read = set.read().await.map_err(|e| e.to_string())?;
        if read.items.len() >= 12 { Ok(()) } else { Err(format!("{} items", read.items.len())) }
    })
    .await;
    let c = shared_member(&ctx, "c", &[], Rebalance::Incremental).await;
    admin.await.expect("admin");
    let items = wait_cover(&ctx, &[&a, &b, &c], &set).await;
    assert_eq!(items, items_of(&(0..23).collect::<Vec<_>>()));
}

async fn fixed_member(ctx: &Ctx, name: &str, items: &[&str], rendezvous: bool, tb: Duration) -> Member {
    ctx.member_with(name, items.iter().map(|i| Item::from(*i)).collect(), |b| {
        let b = b.time_boundary(tb);
        if rendezvous { b.partition_func(Rendezvous::default()) } else { b }
    })
    .await
}

async fn wait_disagreement(member: &Member, other: &str, kind: DisagreementKind, within: Duration) -> Snapshot {
    let started = tokio::time::Instant::now();
    let snapshot = common::members::wait_snapshot(&member.partitioner, "a reported disagreement", within, |s| {
        s.disagreements.iter().any(|d| d.member.starts_with(other) && d.kind == kind)
    })
    .await;
    tracing::info!(elapsed = ?started.elapsed(), "disagreement reported");
    snapshot
}

/// The rolling deploy: `--items a,b,c` and `--items b,c`. Both members say so within time_boundary + 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_with_different_sets_say_so_at_once() {
    let ctx = Ctx::new().await;
    let tb = Duration::from_secs(1);
    let old = fixed_member(&ctx, "old", &["a", "b", "c"], false, tb).await;
    let started = tokio::time::Instant::now();
    let new = fixed_member(&ctx, "new", &["b", "c"], false, tb).await;
    let within = timing(tb + Duration::from_secs(1));
    let seen_by_new = wait_disagreement(&new, "old", DisagreementKind::Items, within).await;
    let seen_by_old = wait_disagreement(&old, "new", DisagreementKind::Items, within).await;
    assert!(started.elapsed() <= within, "reported after {:?}", started.elapsed());
    let d = &seen_by_new.disagreements[0];
    assert!(d.ours.contains("set=") && d.theirs.contains("set=") && d.ours != d.theirs, "{d:?}");
    assert!(d.to_string().contains("different set of items"), "{d}");
    assert_eq!(seen_by_old.disagreements.len(), 1);

    // The newcomer leaves: the report goes away.
    new.partitioner.finish().await;
    common::members::wait_snapshot(&old.partitioner, "no disagreement", timing(Duration::from_secs(10)), |s| {
        s.disagreements.is_empty()
    })
    .await;
}

/// Same set, another partition function: reported as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_with_different_partition_functions_say_so() {
    let ctx = Ctx::new().await;
    let tb = Duration::from_millis(500);
    let stride = fixed_member(&ctx, "stride", &["a", "b", "c", "d"], false, tb).await;
    let rendezvous = fixed_member(&ctx, "rendezvous", &["a", "b", "c", "d"], true, tb).await;
    let within = timing(Duration::from_secs(3));
    wait_disagreement(&stride, "rendezvous", DisagreementKind::PartitionFn, within).await;
    wait_disagreement(&rendezvous, "stride", DisagreementKind::PartitionFn, within).await;
}

/// Members that agree report nothing, kazoo members (which announce nothing) included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agreeing_members_and_kazoo_members_report_nothing() {
    let ctx = Ctx::new().await;
    let tb = Duration::from_millis(500);
    let items = items_of(&[0, 1, 2, 3, 4, 5]);
    let kazoo = KazooWorker::start(&ctx, PATH, "kazoo", &items, tb).await;
    let a = ctx.member_with("a", items.clone(), |b| b.time_boundary(tb)).await;
    let b = ctx.member_with("b", items.clone(), |b| b.time_boundary(tb)).await;
    let _loops = [auto_release(&a.partitioner), auto_release(&b.partitioner)];
    for member in [&a, &b] {
        common::members::wait_snapshot(
            &member.partitioner,
            "ACQUIRED in a party of 3",
            timing(Duration::from_secs(20)),
            |s| s.state == PartitionState::Acquired && s.members.len() == 3,
        )
        .await;
        assert!(member.partitioner.snapshot().disagreements.is_empty());
    }
    kazoo.stop().await;
}

/// Bad input: clear errors, nothing changed, no panic, and members keep their items through garbage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let ctx = Ctx::new().await;
    let client: Client = ctx.client().await;
    let set = SharedSet::new(client.clone(), PATH).expect("handle");
    assert!(matches!(SharedSet::new(client.clone(), "relative"), Err(Error::InvalidConfig { .. })));
    assert!(matches!(set.read().await, Err(Error::SharedSetMissing { .. })));
    // No set and nothing to seed it with: an error, and no `<path>`, `party` or `locks` left behind.
    let built = SetPartitioner::builder(client.clone(), PATH, Vec::<Item>::new()).shared_set(true).build().await;
    assert!(matches!(built, Err(Error::SharedSetMissing { .. })), "{built:?}");
    assert_eq!(client.check_stat(PATH).await.expect("stat"), None, "{PATH} was created");
    // Nor under a path that exists (another application's, or a fixed set's party): nothing added to it.
    let other = "/elsewhere";
    client.create(other, b"", &common::persistent()).await.expect("create");
    let built = SetPartitioner::builder(client.clone(), other, Vec::<Item>::new()).shared_set(true).build().await;
    assert!(matches!(built, Err(Error::SharedSetMissing { .. })), "{built:?}");
    assert_eq!(client.list_children(other).await.expect("children"), Vec::<String>::new());
    assert!(matches!(set.create_if_missing(Vec::<Item>::new()).await, Err(Error::EmptySharedSet { .. })));

    let member = shared_member(&ctx, "a", &[1, 2, 3], Rebalance::Incremental).await;
    common::members::wait_snapshot(&member.member.partitioner, "ACQUIRED", timing(Duration::from_secs(10)), |s| {
        s.state == PartitionState::Acquired && s.items.len() == 3
    })
    .await;
    let version = set.read().await.expect("read").version;

    let absent = set.remove(items_of(&[2, 99])).await;
    assert!(matches!(&absent, Err(Error::InvalidItem { item, .. }) if item == "99"), "{absent:?}");
    let empty = set.remove(items_of(&[1, 2, 3])).await;
    assert!(matches!(empty, Err(Error::EmptySharedSet { .. })), "{empty:?}");
    // An item of the other kind: the error names it (not an item of the set) and says what is wrong.
    let mixed = set.add([Item::from("x")]).await;
    assert!(matches!(&mixed, Err(Error::InvalidItem { item, .. }) if item == "x"), "{mixed:?}");
    let message = mixed.unwrap_err().to_string();
    assert!(
        message.starts_with(&format!(
            "invalid item \"x\": is a string but the shared set at {PATH}/items holds integers (such as the \
             integer 1)"
        )),
        "{message}"
    );
    let slash = set.add([Item::from("a/b")]).await;
    assert!(matches!(slash, Err(Error::InvalidItem { .. })), "{slash:?}");
    let unchanged = set.read().await.expect("read");
    assert_eq!((unchanged.items, unchanged.version), (items_of(&[1, 2, 3]), version), "nothing changed");

    // A child written by hand that is no integer: ignored by members, reported by read(), deleted by the next update.
    client.create(&format!("{PATH}/items/garbage"), b"", &common::persistent()).await.expect("create garbage");
    let read = set.read().await.expect("read");
    assert_eq!(read.skipped, ["garbage"]);
    set.add(items_of(&[4])).await.expect("add");
    let read = set.read().await.expect("read");
    assert!(read.skipped.is_empty());
    common::members::wait_snapshot(
        &member.member.partitioner,
        "ACQUIRED with 4 items",
        timing(Duration::from_secs(10)),
        |s| s.state == PartitionState::Acquired && *s.items == *items_of(&[1, 2, 3, 4]),
    )
    .await;

    // The set's node overwritten with garbage: the API says so, members keep what they have; once repaired, they
    // follow again (children created by hand meanwhile count from the header's next write: members watch the
    // header, which every update writes).
    let mark = member.recorder.snapshots().len();
    let (header, _) = client.get_data(&format!("{PATH}/items")).await.expect("read the header");
    client.set_data(&format!("{PATH}/items"), b"{\"items\": [1, 2]}", None).await.expect("overwrite");
    let corrupt = set.read().await;
    assert!(matches!(corrupt, Err(Error::SharedSetCorrupt { .. })), "{corrupt:?}");
    for child in ["5", "6"] {
        client.create(&format!("{PATH}/items/{child}"), b"", &common::persistent()).await.expect("a child by hand");
    }
    client.set_data(&format!("{PATH}/items"), &header, None).await.expect("repair");
    common::members::wait_snapshot(
        &member.member.partitioner,
        "ACQUIRED with 6 items",
        timing(Duration::from_secs(10)),
        |s| s.state == PartitionState::Acquired && *s.items == *items_of(&[1, 2, 3, 4, 5, 6]),
    )
    .await;
    for snapshot in &member.recorder.snapshots()[mark..] {
        assert_ne!(snapshot.state, PartitionState::Failure);
        for item in items_of(&[1, 2, 3, 4]) {
            assert!(snapshot.items.contains(&item), "{item} stopped while the set was unreadable: {snapshot:?}");
        }
    }
}
