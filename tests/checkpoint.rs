//! Fenced checkpoints on a real ZooKeeper: a save is one request; a paused old owner (a real process, stopped with
//! SIGSTOP past its session timeout) cannot overwrite the new owner's checkpoint; nor can worker code still running
//! after its member released the item (same live session, lock node gone).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::counting::{CountingProxy, op};
use common::faults::{Opts, member_at};
use common::members::{auto_release, ints};
use common::{Ctx, timing, wait_for};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use zk_partitioner::zookeeper_client::{SessionId, SessionState};
use zk_partitioner::{Error, FencingToken, Item, PartitionState, SetPartitioner, checkpoint::MAX_CHECKPOINT_SIZE};

const PATH: &str = "/partitioner";

#[tokio::test]
async fn a_save_is_one_request_and_loads_back_with_its_writer() {
    // given: a member holding items 0 and 1, connected through a proxy that counts its requests
    let ctx = Ctx::new().await;
    let proxy = CountingProxy::start(ctx.addr).await;
    let items = ints(2);
    let member = member_at(&format!("{}{}", proxy.endpoint(), ctx.namespace), "saver", &items, &Opts::default()).await;
    member.wait_items(&items, timing(Duration::from_secs(10))).await;
    let zero = Item::from(0);
    assert_eq!(member.partitioner.load_checkpoint(&zero).await, Ok(None));

    // when: the first save (it creates the node), then a second one
    save_checkpoint(&member.partitioner, &zero, b"offset=1").await.expect("first save");
    proxy.take();
    save_checkpoint(&member.partitioner, &zero, b"offset=2").await.expect("second save");
    // then: the second save was exactly one request, a multi
    assert_eq!(proxy.take(), [op::MULTI], "a save is one multi (check + setData)");

    // and it loads back with the writer's token and name
    let checkpoint = member.partitioner.load_checkpoint(&zero).await.unwrap().expect("a checkpoint");
    assert_eq!(checkpoint.data, b"offset=2");
    assert_eq!(Some(checkpoint.token), member.partitioner.snapshot().token(&zero));
    assert_eq!(checkpoint.writer, *member.partitioner.snapshot().member);
    assert_eq!(checkpoint.version, 1);
    assert_eq!(proxy.take(), [op::GET_DATA], "a load is one getData");
    // and the node is <path>/checkpoints/<item>, next to the locks
    let (raw, _) = ctx.observer.get_data(&format!("{PATH}/checkpoints/0")).await.unwrap();
    assert!(raw.ends_with(b"\noffset=2"));

    // when: too large, or an item the member does not hold
    let big = vec![0u8; MAX_CHECKPOINT_SIZE + 1];
    let too_large = save_checkpoint(&member.partitioner, &zero, &big).await;
    assert_eq!(
        too_large,
        Err(Error::CheckpointTooLarge { item: "0".into(), size: MAX_CHECKPOINT_SIZE + 1, limit: MAX_CHECKPOINT_SIZE })
    );
    let not_held = save_checkpoint(&member.partitioner, &Item::from(7), b"x").await;
    assert_eq!(not_held, Err(Error::NotHeld { item: "7".into(), path: PATH.into() }));
    // then: clear errors, and nothing was sent
    assert_eq!(proxy.take(), Vec::<i32>::new());
    // while a checkpoint of exactly the limit is fine
    save_checkpoint(&member.partitioner, &zero, &big[1..]).await.expect("a checkpoint at the size limit");
    let loaded = member.partitioner.load_checkpoint(&zero).await.unwrap().unwrap();
    assert_eq!(loaded.data.len(), MAX_CHECKPOINT_SIZE);
}

#[tokio::test]
async fn concurrent_first_saves_create_the_node_once() {
    // given: a member holding item 1, which has no checkpoint node yet
    let ctx = Ctx::new().await;
    let items = ints(2);
    let member = ctx.member("racer", items.clone()).await;
    member.wait_items(&items, timing(Duration::from_secs(10))).await;
    let one = Item::from(1);
    // when: eight saves race to create it
    let saves = (0..8u8).map(|i| {
        let partitioner = member.partitioner.clone();
        let one = one.clone();
        async move { save_checkpoint(&partitioner, &one, &[i]).await }
    });
    let results = futures::future::join_all(saves).await;
    // then: every save succeeded (the losers of the create updated the node), and one of them is there
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let checkpoint = member.partitioner.load_checkpoint(&one).await.unwrap().unwrap();
    assert!(checkpoint.data.len() == 1 && checkpoint.data[0] < 8);
    assert_eq!(checkpoint.version, 7, "one create and seven updates");
}

#[tokio::test]
async fn a_foreign_checkpoint_node_is_a_clear_error() {
    let ctx = Ctx::new().await;
    let items = ints(1);
    let member = ctx.member("reader", items.clone()).await;
    ctx.observer.mkdir(&format!("{PATH}/checkpoints"), &common::persistent()).await.unwrap();
    ctx.observer.create(&format!("{PATH}/checkpoints/0"), b"42", &common::persistent()).await.unwrap();
    let result = member.partitioner.load_checkpoint(&Item::from(0)).await;
    assert!(
        matches!(&result, Err(Error::CheckpointCorrupt { item, path, .. }) if item == "0" && path == "/partitioner/checkpoints/0"),
        "{result:?}"
    );
}

#[tokio::test]
async fn worker_code_running_after_its_member_released_the_item_cannot_save() {
    // given: member A holds both items; a worker task of A's keeps a writer for each
    let ctx = Ctx::new().await;
    let proxy = CountingProxy::start(ctx.addr).await;
    let items = ints(2);
    let a = member_at(&format!("{}{}", proxy.endpoint(), ctx.namespace), "a", &items, &Opts::default()).await;
    a.wait_items(&items, timing(Duration::from_secs(10))).await;
    let writers: Vec<_> = items.iter().map(|item| a.partitioner.checkpoint_writer(item).unwrap()).collect();
    for writer in &writers {
        writer.save(b"from a").await.expect("A holds the item");
    }
    let a_tokens: Vec<FencingToken> = writers.iter().map(|w| w.token()).collect();

    // when: B joins; A releases everything (eager) and the items are divided again
    let _a_worker = auto_release(&a.partitioner);
    let b = ctx.member("b", items.clone()).await;
    let _b_worker = auto_release(&b.partitioner);
    let both = [a, b];
    common::members::settle(&both, timing(Duration::from_secs(20))).await;
    let [a, b] = both;
    let moved = b.partitioner.items();
    assert_eq!(moved.len(), 1);
    let moved = &moved[0];
    save_checkpoint(&b.partitioner, moved, b"from b").await.expect("B holds the moved item");

    // then: A's session is alive and well, but A's old writers are refused by ZooKeeper, in one request each: the
    // lock nodes they check are gone (even for the item A took again: that is a new lock node)
    assert_eq!(a.client.state(), SessionState::SyncConnected);
    proxy.take();
    for writer in &writers {
        let result = writer.save(b"late write from a").await;
        match &result {
            Err(Error::CheckpointFenced { item, lock_node, reason }) => {
                assert_eq!(item, &writer.item().to_string());
                assert_eq!(lock_node, writer.lock_node());
                assert!(reason.contains("lock node is gone"), "{reason}");
            }
            other => panic!("a late save was not fenced: {other:?}"),
        }
    }
    assert_eq!(proxy.take(), [op::MULTI, op::MULTI], "each refused save was one request");
    // and B's checkpoint survives, with B's larger token
    let checkpoint = b.partitioner.load_checkpoint(moved).await.unwrap().unwrap();
    assert_eq!(
        (checkpoint.data.as_slice(), checkpoint.writer.as_str()),
        (&b"from b"[..], &*b.partitioner.snapshot().member)
    );
    let moved_index = items.iter().position(|item| item == moved).unwrap();
    assert!(checkpoint.token > a_tokens[moved_index]);
    // and the handle refuses at once what A no longer lists
    let result = save_checkpoint(&a.partitioner, moved, b"x").await;
    assert!(matches!(result, Err(Error::NotHeld { .. })), "{result:?}");
    // while A's new writer for the item it kept works
    let kept = a.partitioner.items();
    a.partitioner.checkpoint_writer(&kept[0]).unwrap().save(b"a again").await.expect("A holds it again");
}

/// Environment of the child process in `a_paused_owner_cannot_overwrite_the_new_owner`.
const CHILD_CONNECT: &str = "ZKP_CHECKPOINT_CHILD_CONNECT";

/// The old owner, in a process of its own (this test binary, run again for this test only): holds item 0, saves a
/// checkpoint, says so on stdout, and saves again when told to on stdin. A no-op unless run as that child.
#[tokio::test]
#[ignore = "the child process of a_paused_owner_cannot_overwrite_the_new_owner"]
async fn paused_owner_child() {
    let Ok(connect) = std::env::var(CHILD_CONNECT) else { return };
    let client = common::connect(&connect, Duration::from_secs(2)).await;
    let partitioner = SetPartitioner::builder(client.clone(), PATH, ints(1))
        .identifier("old-owner")
        .time_boundary(Duration::from_millis(200))
        .build()
        .await
        .expect("build the old owner");
    let acquired = partitioner.wait_for_acquire(Duration::from_secs(30)).await;
    assert_eq!(acquired, PartitionState::Acquired);
    let item = Item::from(0);
    // The worker's writer: made while the item is held, used later by code that never looks at the partitioner.
    let writer = partitioner.checkpoint_writer(&item).expect("held");
    writer.save(b"old owner, before the pause").await.expect("first save");
    println!("CHILD READY {} {}", client.session_id().0, writer.token().get());
    let mut line = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line).map(|_| line))
        .await
        .unwrap()
        .expect("read the parent's order");
    let result = writer.save(b"old owner, after the pause").await;
    println!("CHILD RESULT {result:?}");
}

#[tokio::test]
async fn a_paused_owner_cannot_overwrite_the_new_owner() {
    // given: the old owner, a separate process with a 2 s session, holds item 0 and has saved a checkpoint
    let ctx = Ctx::new().await;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["paused_owner_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_CONNECT, format!("{}{}", ctx.endpoint, ctx.namespace))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the old owner's process");
    let pid = child.id().expect("running").to_string();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut child_line = async |prefix: &str| -> Vec<String> {
        let deadline = timing(Duration::from_secs(30));
        loop {
            let line = tokio::time::timeout(deadline, lines.next_line()).await.expect("the child answers in time");
            let line = line.unwrap().unwrap_or_else(|| panic!("the child exited before printing {prefix}"));
            // The harness prints "test paused_owner_child ... " without a newline first.
            if let Some((_, rest)) = line.split_once(prefix) {
                return rest.split_whitespace().map(str::to_owned).collect();
            }
        }
    };
    let ready = child_line("CHILD READY ").await;
    let (old_session, old_token): (i64, i64) = (ready[0].parse().unwrap(), ready[1].parse().unwrap());
    let item = Item::from(0);

    // when: the old owner is paused (SIGSTOP) until ZooKeeper has expired its session
    let signal = |name: &str| {
        let status = std::process::Command::new("kill").args([name, &pid]).status().expect("kill");
        assert!(status.success(), "kill {name} {pid}");
    };
    signal("-STOP");
    let addr = ctx.addr;
    wait_for("the server to expire the paused owner's session", timing(Duration::from_secs(15)), || async move {
        match common::session_listed(addr, SessionId(old_session)).await {
            Ok(false) => Ok(()),
            Ok(true) => Err("still listed".to_string()),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
    // and a new owner takes the item over and saves its own checkpoint
    let new = ctx.member("new-owner", ints(1)).await;
    let _worker = auto_release(&new.partitioner);
    new.wait_items(&ints(1), timing(Duration::from_secs(20))).await;
    let before = new.partitioner.load_checkpoint(&item).await.unwrap().unwrap();
    assert_eq!((before.data.as_slice(), before.token.get()), (&b"old owner, before the pause"[..], old_token));
    save_checkpoint(&new.partitioner, &item, b"new owner").await.expect("the new owner saves");
    // and the old owner resumes (SIGCONT) and its worker saves at once, with the writer it had before the pause
    signal("-CONT");
    stdin.write_all(b"SAVE\n").await.unwrap();
    let result = child_line("CHILD RESULT ").await.join(" ");

    println!("the old owner's save after SIGCONT: {result}");
    // then: ZooKeeper refused the old owner's write, with a clear error
    assert!(result.starts_with("Err(CheckpointFenced {"), "the paused owner's save was not refused: {result}");
    assert!(result.contains("item: \"0\""), "{result}");
    // and the new owner's checkpoint survives, with its larger token
    let after = new.partitioner.load_checkpoint(&item).await.unwrap().unwrap();
    assert_eq!(after.data, b"new owner");
    assert_eq!(after.writer, *new.partitioner.snapshot().member);
    assert!(after.token.get() > old_token);
    assert_eq!(Some(after.token), new.partitioner.snapshot().token(&item));
    let status = tokio::time::timeout(timing(Duration::from_secs(15)), child.wait()).await;
    assert!(matches!(status, Ok(Ok(s)) if s.success()), "the old owner's process did not exit cleanly: {status:?}");
}

/// Items added to a shared set at run time that sort before the others are held, fenced and checkpointed like any
/// other (they once were not: the snapshot listed them out of order, so `fencing_token` returned `None` and every save
/// failed with `NotHeld` for items the member listed).
#[tokio::test]
async fn items_added_to_a_shared_set_that_sort_first_can_be_checkpointed() {
    // given: one member of a shared set of strings i00..i09
    let ctx = Ctx::new().await;
    let seed: Vec<Item> = (0..10).map(|i| Item::from(format!("i{i:02}"))).collect();
    let member = ctx.member_with("saver", seed.clone(), |b| b.shared_set(true)).await;
    member.wait_items(&seed, timing(Duration::from_secs(10))).await;
    let _worker = auto_release(&member.partitioner);

    // when: an admin adds a00..a09, which sort before every item the member had
    let added: Vec<Item> = (0..10).map(|i| Item::from(format!("a{i:02}"))).collect();
    let set = zk_partitioner::SharedSet::new(ctx.client().await, PATH).expect("a set handle");
    let after = set.add(added.clone()).await.expect("add");
    let mut all = after.items.clone();
    all.sort();
    member.wait_items(&all, timing(Duration::from_secs(10))).await;

    // then: every listed item has its token, and a save for each succeeds and loads back with that token
    let snapshot = member.partitioner.snapshot();
    assert!(snapshot.items.is_sorted(), "the snapshot lists its items sorted: {:?}", snapshot.items);
    for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
        assert_eq!(member.partitioner.snapshot().token(item), Some(*token), "{item}");
        save_checkpoint(&member.partitioner, item, item.to_string().as_bytes()).await.expect("save");
        let loaded = member.partitioner.load_checkpoint(item).await.expect("load").expect("a checkpoint");
        assert_eq!((loaded.data, loaded.token), (item.to_string().into_bytes(), *token), "{item}");
    }
}

/// A checkpoint belongs to the item's name: a plain removal from the shared set keeps it, so the item added back
/// resumes from it (the simulation's checker holds the same rule: only a finish and retirement make a new item).
#[tokio::test]
async fn an_item_removed_and_added_back_resumes_from_its_checkpoint() {
    // given: one member of a shared set, which saved a checkpoint for item 1
    let ctx = Ctx::new().await;
    let member = ctx.member_with("keeper", ints(3), |b| b.shared_set(true)).await;
    member.wait_items(&ints(3), timing(Duration::from_secs(10))).await;
    let _worker = auto_release(&member.partitioner);
    let one = Item::from(1);
    save_checkpoint(&member.partitioner, &one, b"offset 41").await.expect("save");

    // when: an admin removes item 1, and the member lets it go; then adds it back
    let set = zk_partitioner::SharedSet::new(ctx.client().await, PATH).expect("a set handle");
    set.remove([one.clone()]).await.expect("remove");
    member.wait_items(&[Item::from(0), Item::from(2)], timing(Duration::from_secs(10))).await;
    set.add([one.clone()]).await.expect("add back");
    member.wait_items(&ints(3), timing(Duration::from_secs(10))).await;

    // then: its checkpoint is the one saved before the removal, and the new ownership can save over it
    let loaded = member.partitioner.load_checkpoint(&one).await.expect("load").expect("the checkpoint survives");
    assert_eq!(loaded.data, b"offset 41");
    save_checkpoint(&member.partitioner, &one, b"offset 42").await.expect("the new owner saves");
}

/// Saves `data` as `item`'s checkpoint: the writer for the item (which fails if the member does not hold it), then
/// its fenced save.
async fn save_checkpoint(partitioner: &SetPartitioner, item: &Item, data: &[u8]) -> Result<(), Error> {
    partitioner.checkpoint_writer(item)?.save(data).await
}
