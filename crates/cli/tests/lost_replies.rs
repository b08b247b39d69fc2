//! Writers whose reply is lost while other writers land many versions (issue 44): an update of the shared set, a
//! lineage change, a creation and a retirement each learn their exact outcome from the marker their commit created,
//! however many versions landed meanwhile, and never apply their change twice. The admin whose reply is lost is an
//! `zkp items` process behind a proxy that lets its commit reach the server and drops the reply; the other admin's
//! updates are `zkp items` processes too.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{Ctx, Proxy, timing, wait_for, zkp};
use serde_json::Value;
use tokio::process::{Child, Command};
use zk_partitioner::{Item, SharedSet};

const PATH: &str = "/partitioner";
/// How many other updates land while the first admin is cut off: more than the 16 tokens the set's header keeps.
const OTHERS: usize = 20;
/// ZooKeeper's type of a write `multi` (the commit of every update).
const MULTI: i32 = 14;

/// Runs `zkp items` on `cluster` (the namespace's connect string, or a proxy's) with `args`, as a process.
fn shared_set(cluster: &str, args: &[&str]) -> Command {
    let mut command = Command::new(zkp());
    command
        .arg("items")
        .args(["--connect", cluster, "--path", PATH, "--json", "--session-timeout", "30"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `zkp items` to the end; its JSON output (it must succeed).
async fn admin(cluster: &str, args: &[&str]) -> Value {
    let output = shared_set(cluster, args).output().await.expect("run shared_set");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "shared_set {args:?}: {}{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("shared_set {args:?} printed {stdout:?}: {err}"))
}

/// Starts `zkp items` with `args` through a fresh proxy that cuts the connection right after its first write `multi`
/// reaches the server (the commit: its reply is lost), and waits until that happened. The process waits, cut off.
async fn started_and_cut_after_its_commit(ctx: &Ctx, args: &[&str]) -> (Child, Proxy) {
    let proxy = Proxy::start(ctx.addr).await;
    proxy.cut_after(MULTI, 1);
    let cluster = format!("{}{}", proxy.endpoint(), ctx.namespace);
    let child = shared_set(&cluster, args).spawn().expect("spawn shared_set");
    wait_for("the commit to reach the server, and the proxy to cut", timing(Duration::from_secs(20)), || async {
        if proxy.is_cut() { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    (child, proxy)
}

/// Heals the proxy; the process's JSON output once it ends (it must succeed).
async fn healed_and_finished(child: Child, proxy: &Proxy, what: &str) -> Value {
    proxy.heal();
    let output = tokio::time::timeout(timing(Duration::from_secs(30)), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not end"))
        .expect("shared_set's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{what}: {}{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{what} printed {stdout:?}: {err}"))
}

/// `OTHERS` acknowledged updates by another admin (each a process of its own): a new item added, then removed, in turn.
async fn others_update(cluster: &str) {
    for k in 0..OTHERS {
        let item = format!("other-{}", k / 2);
        let command = if k % 2 == 0 { "add" } else { "remove" };
        admin(cluster, &[command, &item]).await;
    }
}

fn items_of(json: &Value) -> Vec<String> {
    json["items"].as_array().expect("items").iter().map(|i| i.as_str().expect("a string item").to_owned()).collect()
}

/// The reproduction: admin A removes `x`; its commit lands and its reply is lost; meanwhile admin B adds `x`
/// back (acknowledged) and makes 20 more updates, so A's token has left the header's log. A must find its removal
/// landed (exit 0) and not run it again: `x` stays. Before, A retried its removal and undid B's acknowledged `add`.
#[tokio::test]
async fn a_lost_reply_followed_by_twenty_updates_never_undoes_an_acknowledged_change() {
    let ctx = Ctx::new().await;
    let cluster = format!("{}{}", ctx.endpoint, ctx.namespace);
    admin(&cluster, &["create", "a,b,x"]).await;

    let (a, proxy) = started_and_cut_after_its_commit(&ctx, &["remove", "x"]).await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("the set's handle");
    assert!(!set.read().await.expect("read").items.contains(&Item::from("x")), "A's removal landed");
    // B: x back, acknowledged; then 20 more versions.
    let back = admin(&cluster, &["add", "x"]).await;
    assert!(items_of(&back).contains(&"x".to_owned()), "{back}");
    others_update(&cluster).await;

    let removed = healed_and_finished(a, &proxy, "A's removal").await;
    // A reports the version its removal made, as a received reply would have: the one just before B's add.
    let back_version = back["version"].as_u64().expect("a version");
    assert_eq!(removed["version"].as_u64(), Some(back_version - 1), "{removed}");
    assert!(!items_of(&removed).contains(&"x".to_owned()), "{removed}");
    let now = set.read().await.expect("read");
    assert!(
        now.items.contains(&Item::from("x")),
        "A's lost reply was resolved by running its removal again, which undid B's acknowledged add: {now:?}"
    );
    assert_eq!(now.version, back_version + OTHERS as u64, "no other version landed");
}

/// A split whose reply is lost, then 20 other updates: the split reports success (its own children are not
/// "already existing"), and it landed once.
#[tokio::test]
async fn a_lost_reply_to_a_split_is_its_own_success() {
    let ctx = Ctx::new().await;
    let cluster = format!("{}{}", ctx.endpoint, ctx.namespace);
    admin(&cluster, &["create", "s0,s1"]).await;

    let (a, proxy) = started_and_cut_after_its_commit(&ctx, &["split", "s0", "s0a,s0b"]).await;
    others_update(&cluster).await;
    healed_and_finished(a, &proxy, "the split").await;

    let lineage = admin(&cluster, &["lineage"]).await;
    let s0 = &lineage["items"]["s0"];
    assert_eq!(s0["children"], serde_json::json!(["s0a", "s0b"]), "split once: {lineage}");
    assert_eq!(s0["closed"], true, "{lineage}");
}

/// A first creation whose reply is lost, then 20 updates: `create` still says it created the set. Before, the
/// header's log had rolled past its token, and it said `created: false`.
#[tokio::test]
async fn create_if_missing_knows_it_created_the_set_after_a_lost_reply() {
    let ctx = Ctx::new().await;
    let cluster = format!("{}{}", ctx.endpoint, ctx.namespace);
    // The set's parent exists (as after a worker's start), so the first write `multi` is the creation's commit.
    ctx.observer.mkdir(PATH, &common::persistent()).await.expect("mkdir");

    let (a, proxy) = started_and_cut_after_its_commit(&ctx, &["create", "a,b"]).await;
    wait_for("the set to exist", timing(Duration::from_secs(10)), || async {
        let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
        set.read().await.map(drop).map_err(|err| err.to_string())
    })
    .await;
    others_update(&cluster).await;
    let created = healed_and_finished(a, &proxy, "the creation").await;
    assert_eq!(created["created"], true, "{created}");
}

/// A retired name used again is a new item, and its first owner finds no checkpoint of the old one's, even when the
/// retirement's reply was lost and 20 other updates landed before it was resolved. Before, a retirement whose commit
/// landed unseen returned `Ok` with nothing retired, and the checkpoint (deleted after the commit, only when the reply
/// came) stayed: the new item's first owner loaded the old item's progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_whose_reply_is_lost_takes_the_checkpoint_with_it() {
    use common::members::{auto_release, build_member};
    let ctx = Ctx::new().await;
    let item = |name: &str| Item::from(name);
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing([item("s0"), item("s1")]).await.expect("create");
    admin.split("s0", ["s0a"]).await.expect("split");
    let member = build_member(ctx.client().await, "solo", &[], |b| {
        b.shared_set(true).rebalance(zk_partitioner::Rebalance::Incremental)
    })
    .await;
    let _release = auto_release(&member.partitioner);
    let deadline = timing(Duration::from_secs(20));
    member.wait_items(&[item("s0"), item("s1")], deadline).await;
    let writer = member.partitioner.checkpoint_writer(&item("s0")).expect("a writer");
    writer.save(b"the old s0's offset").await.expect("save");
    assert_eq!(member.partitioner.finish_item(&item("s0"), None).await.expect("finish"), [item("s0a")]);
    member.wait_items(&[item("s0a"), item("s1")], deadline).await;
    // Nobody holds s0's lock any more (a retirement waits for that).
    wait_for("s0's lock to be let go", deadline, || async {
        match ctx.observer.list_children(&format!("{PATH}/locks/s0")).await {
            Ok(children) if !children.is_empty() => Err(format!("{children:?}")),
            _ => Ok(()),
        }
    })
    .await;

    // The retirement's commit lands; its reply is lost.
    let proxy = Proxy::start(ctx.addr).await;
    let client = common::connect(&format!("{}{}", proxy.endpoint(), ctx.namespace), Duration::from_secs(30)).await;
    let retirer = SharedSet::new(client, PATH).expect("handle");
    proxy.cut_after(MULTI, 1);
    let retirement = tokio::spawn(async move { retirer.retire(Duration::ZERO).await });
    wait_for("the retirement's commit to reach the server", deadline, || async {
        if proxy.is_cut() { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    // Meanwhile another admin makes 20 acknowledged updates: the retirement's token leaves the header's log.
    let version = admin.read().await.expect("read").version;
    others_update(&format!("{}{}", ctx.endpoint, ctx.namespace)).await;
    assert_eq!(admin.read().await.expect("read").version, version + OTHERS as u64, "the others' updates landed");
    proxy.heal();
    let retired = tokio::time::timeout(deadline, retirement).await.expect("retire returns").expect("no panic");
    assert_eq!(retired.expect("retire"), [item("s0")], "as a received reply says");
    let checkpoint = format!("{PATH}/checkpoints/s0");
    assert_eq!(ctx.observer.check_stat(&checkpoint).await.expect("exists"), None, "the checkpoint went with the name");

    // s0 again, a new, unrelated item: its first owner starts from nothing.
    admin.add(["s0"]).await.expect("a retired name is free");
    member.wait_items(&[item("s0"), item("s0a"), item("s1")], deadline).await;
    assert_eq!(member.partitioner.load_checkpoint(&item("s0")).await.expect("load"), None);
}
