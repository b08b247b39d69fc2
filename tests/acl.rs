//! ACLs and authentication on a real ZooKeeper: a party whose members authenticate as one digest user and create
//! every node creator-all works as before (kazoo members included), while strangers (unauthenticated, or another
//! user) get `NoAuth` for every attempt to disturb it; a member without the rights fails with a clear error at
//! `build()` leaving nothing behind, or in `FAILURE` during allocation, never in a retry loop.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kazoo::KazooWorker;
use common::members::{AbortOnDrop, Member, auto_release, ints, lock_holders, wait_snapshot};
use common::{Ctx, timing, wait_for};
use zk_partitioner::zookeeper_client::{self, Acls, Client, CreateMode};
use zk_partitioner::{Error, Item, PartitionState, SetPartitioner};

const PATH: &str = "/partitioner";
const ALICE: &str = "alice:s3cret";

/// A session in the test's namespace, authenticated as `user:password` (digest) if given.
async fn session(ctx: &Ctx, auth: Option<&str>) -> Client {
    let mut connector = Client::connector().with_session_timeout(Duration::from_secs(6));
    if let Some(auth) = auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    connector.connect(&format!("{}{}", ctx.endpoint, ctx.namespace)).await.expect("connect")
}

async fn protected_member(ctx: &Ctx, name: &str, items: &[Item]) -> (Member, AbortOnDrop) {
    let client = session(ctx, Some(ALICE)).await;
    let partitioner = SetPartitioner::builder(client.clone(), PATH, items.to_vec())
        .identifier(name)
        .time_boundary(Duration::from_millis(500))
        .acls(Acls::creator_all())
        .build()
        .await
        .expect("build a protected member");
    let worker = auto_release(&partitioner);
    (Member { client, partitioner }, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_protected_party_works_and_strangers_get_no_auth() {
    let ctx = Ctx::new().await;
    let items = ints(6);
    let (a, _wa) = protected_member(&ctx, "a", &items).await;
    let (b, _wb) = protected_member(&ctx, "b", &items).await;
    let auth = ["--auth", ALICE];
    let kazoo = KazooWorker::start_with(&ctx, PATH, "k", &items, Duration::from_millis(500), &auth).await;
    let alice = session(&ctx, Some(ALICE)).await;

    // Every member ACQUIRED over a party of 3, the items covered once.
    wait_for("a protected party of 3 covering every item", timing(Duration::from_secs(20)), || async {
        let snapshots = [a.partitioner.snapshot(), b.partitioner.snapshot()];
        if snapshots.iter().any(|s| s.state != PartitionState::Acquired || s.members.len() != 3) {
            return Err(format!("{snapshots:?}"));
        }
        if kazoo.view().state != "ACQUIRED" {
            return Err(format!("kazoo {:?}", kazoo.view()));
        }
        let holders = lock_holders(&alice, PATH, &items).await;
        if holders.len() == items.len() { Ok(()) } else { Err(format!("holders {holders:?}")) }
    })
    .await;
    let tokens = (a.partitioner.snapshot().tokens, b.partitioner.snapshot().tokens);
    let node = a.client.list_ephemerals(&format!("{PATH}/locks")).await.expect("list a's lock nodes");
    let held = node.first().cloned().expect("a lock node of a's");

    for (who, stranger) in [("anonymous", session(&ctx, None).await), ("bob", session(&ctx, Some("bob:other")).await)] {
        let no_auth = |what: &str, result: Result<(), zookeeper_client::Error>| {
            assert_eq!(result, Err(zookeeper_client::Error::NoAuth), "{who}: {what}");
        };
        no_auth("delete a held lock node", stranger.delete(&held, None).await);
        let party = format!("{PATH}/party/{}-intruder-", "f".repeat(32));
        let ephemeral_sequential = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        no_auth("join the party", stranger.create(&party, b"x", &ephemeral_sequential).await.map(drop));
        let contender = format!("{PATH}/locks/0/{}__lock__", "f".repeat(32));
        no_auth("contend for an item", stranger.create(&contender, b"x", &ephemeral_sequential).await.map(drop));
        no_auth("write the base path", stranger.set_data(PATH, b"x", None).await.map(drop));
        no_auth("read the party", stranger.list_children(&format!("{PATH}/party")).await.map(drop));
    }

    // The party is undisturbed: the same members hold the same lock nodes.
    assert_eq!((a.partitioner.snapshot().tokens, b.partitioner.snapshot().tokens), tokens);
    assert_eq!(alice.list_children(&format!("{PATH}/party")).await.expect("party").len(), 3);
    assert!(alice.check_stat(&held).await.expect("stat").is_some(), "the held lock node survived");
    kazoo.stop().await;
}

/// Bob's session lacks CREATE on alice's party: `build()` says so, naming the node and the permission, and leaves
/// nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_without_the_rights_fails_at_build_and_leaves_nothing() {
    let ctx = Ctx::new().await;
    let (_a, _wa) = protected_member(&ctx, "a", &ints(2)).await;
    let bob = session(&ctx, Some("bob:other")).await;
    let built = SetPartitioner::builder(bob.clone(), PATH, ints(2)).identifier("bob").build().await;
    let err = built.expect_err("bob has no rights on alice's nodes");
    assert!(matches!(&err, Error::PermissionDenied { path, .. } if path.starts_with(PATH)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("NoAuth") && message.contains("CREATE"), "{message}");
    let alice = session(&ctx, Some(ALICE)).await;
    let party = alice.list_children(&format!("{PATH}/party")).await.expect("party");
    assert_eq!(party.len(), 1, "only a's node: {party:?}");
    assert!(bob.list_ephemerals("/").await.expect("bob's ephemerals").is_empty(), "bob left nothing behind");
}

/// An open party where one item's lock directory is protected (created by alice, creator-all): a member that cannot
/// contend for it ends in FAILURE with that cause at once, instead of retrying forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permission_error_during_allocation_is_a_failure() {
    let ctx = Ctx::new().await;
    let alice = session(&ctx, Some(ALICE)).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    alice.mkdir(&format!("{PATH}/locks"), &persistent).await.expect("open lock root");
    let creator_all = CreateMode::Persistent.with_acls(Acls::creator_all());
    alice.create(&format!("{PATH}/locks/1"), b"", &creator_all).await.expect("a protected lock directory");

    let member = ctx.member("open", ints(3)).await;
    let failed = wait_snapshot(&member.partitioner, "FAILURE", timing(Duration::from_secs(10)), |s| {
        s.state == PartitionState::Failure
    })
    .await;
    let cause = failed.cause.expect("a cause");
    assert!(matches!(&cause, Error::PermissionDenied { path, .. } if path.contains("/locks/1")), "{cause:?}");
    // Nothing of the member's is left: after publishing FAILURE it deletes its contenders and its party node.
    let client = &member.client;
    wait_for("the failed member's nodes to go", timing(Duration::from_secs(10)), || async {
        let left: BTreeSet<String> =
            client.list_ephemerals(PATH).await.map_err(|e| e.to_string())?.into_iter().collect();
        if left.is_empty() { Ok(()) } else { Err(format!("left behind: {left:?}")) }
    })
    .await;
}
