//! The README's worker loop, run as written (with a shared set, as the user ran it): three members and a
//! routine `add` never hold two work tasks for one item, no member publishes the same state again as a new episode,
//! and no disagreement is reported (issue 44). The loop below is the README's, from `let mut changes` to the end of
//! `run_worker` (`the_loop_is_the_readmes` checks it word for word); only `process` counts its tasks.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Ctx, timing, wait_for};
use tokio::task::JoinHandle;
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{
    Error, Item, PartitionState, Rebalance, SetPartitioner, SharedSet, Snapshot, partition::Rendezvous,
};

const PATH: &str = "/work_queues";

/// Work tasks running per item, and the most that ever ran at once.
#[derive(Default)]
struct Tasks {
    running: BTreeMap<Item, usize>,
    most: BTreeMap<Item, usize>,
}

static TASKS: Mutex<Option<Tasks>> = Mutex::new(None);

/// A work task's presence: counted while it lives (an aborted task drops it).
struct Running(Item);

impl Running {
    fn start(item: Item) -> Running {
        let mut tasks = TASKS.lock().unwrap();
        let tasks = tasks.get_or_insert_with(Tasks::default);
        let running = tasks.running.entry(item.clone()).or_default();
        *running += 1;
        let now = *running;
        let most = tasks.most.entry(item.clone()).or_default();
        *most = (*most).max(now);
        Running(item)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tasks) = TASKS.lock().unwrap().as_mut() {
            *tasks.running.entry(self.0.clone()).or_default() -= 1;
        }
    }
}

async fn process(item: Item) {
    let _running = Running::start(item);
    std::future::pending::<()>().await;
}

/// The README's `run_worker`, with the shared set (and the rebalance mode) configured.
pub async fn run_worker(
    client: Client,
    rebalance: Rebalance,
    seen: Arc<Mutex<Vec<Snapshot>>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let builder = SetPartitioner::builder(client, PATH, Vec::<Item>::new()).shared_set(true).rebalance(rebalance);
    let builder = match rebalance {
        Rebalance::Incremental => builder.partition_func(Rendezvous::default()),
        _ => builder,
    };
    let partitioner = builder.time_boundary(Duration::from_millis(500)).build().await?;
    let recorder = partitioner.clone();
    let _record = common::members::AbortOnDrop(tokio::spawn(async move {
        let mut changes = recorder.subscribe();
        loop {
            seen.lock().unwrap().push(changes.borrow_and_update().clone());
            if changes.changed().await.is_err() {
                return;
            }
        }
    }));
    // --- the README's loop, word for word, from here ---
    let mut changes = partitioner.subscribe();
    // One task per item being worked on: started when the item is listed, stopped when it no longer is.
    let mut work: HashMap<Item, JoinHandle<()>> = HashMap::new();
    tokio::pin!(shutdown);
    let result = loop {
        let snapshot = changes.borrow_and_update().clone();
        // Stop what is no longer ours, and wait until it has stopped: the lock may pass to another member next.
        let gone: Vec<Item> = work.keys().filter(|item| snapshot.items.binary_search(item).is_err()).cloned().collect();
        for item in gone {
            if let Some(task) = work.remove(&item) {
                task.abort();
                let _ = task.await;
            }
        }
        // Start what is newly ours (an item already worked on keeps its task).
        for item in snapshot.items.iter() {
            work.entry(item.clone()).or_insert_with(|| tokio::spawn(process(item.clone())));
        }
        match snapshot.state {
            PartitionState::Release => partitioner.release_set().await?, // what it revokes is stopped above
            PartitionState::Acquired | PartitionState::Allocating => {}
            // Session lost, or an error that cannot be retried.
            PartitionState::Failure => break Err(snapshot.cause.unwrap_or(Error::Stopped)),
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break Err(partitioner.snapshot().cause.unwrap_or(Error::Stopped));
                }
            }
            () = &mut shutdown => break Ok(()),
        }
    };
    for (_, task) in work {
        task.abort(); // never keep working on items that may no longer be ours
        let _ = task.await;
    }
    partitioner.finish().await; // releases the locks and leaves the party now, not a session timeout later
    result
}

/// The loop above is the README's (its text, from `let mut changes` to the end of `run_worker`).
#[test]
fn the_loop_is_the_readmes() {
    let body = |text: &str| -> String {
        let start = text.find("    let mut changes = partitioner.subscribe();").expect("the loop's start");
        let end = start + text[start..].find("\n    result\n}").expect("the loop's end");
        text[start..end].to_owned()
    };
    let ours = body(include_str!("readme_loop.rs"));
    let readme = body(include_str!("../README.md"));
    assert_eq!(ours, readme, "tests/readme_loop.rs runs another loop than the README shows");
}

async fn three_members_and_an_add(rebalance: Rebalance) {
    *TASKS.lock().unwrap() = Some(Tasks::default());
    let ctx = Ctx::new().await;
    let set = SharedSet::new(ctx.client().await, PATH).expect("handle");
    set.create_if_missing(["a", "b", "c", "d", "e", "f"].map(Item::from)).await.expect("create");
    let mut workers = Vec::new();
    let mut stops = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let snapshots = Arc::new(Mutex::new(Vec::new()));
        seen.push(snapshots.clone());
        workers.push(tokio::spawn(run_worker(ctx.client().await, rebalance, snapshots, shutdown)));
        stops.push(stop);
    }
    let running = |items: &[&str]| {
        let tasks = TASKS.lock().unwrap();
        let running = &tasks.as_ref().expect("tasks").running;
        items.iter().all(|item| running.get(&Item::from(*item)) == Some(&1))
            && running.values().sum::<usize>() == items.len()
    };
    let deadline = timing(Duration::from_secs(30));
    wait_for("a task per item", deadline, || async {
        if running(&["a", "b", "c", "d", "e", "f"]) { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    // Settled: every member ACQUIRED over the three.
    wait_for("every member ACQUIRED", deadline, || async {
        let acquired = seen.iter().all(|s| {
            s.lock().unwrap().last().is_some_and(|s| s.state == PartitionState::Acquired && s.members.len() == 3)
        });
        if acquired { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    let before: Vec<usize> = seen.iter().map(|s| s.lock().unwrap().len()).collect();

    set.add(["g"]).await.expect("an ordinary add");
    wait_for("a task for g too", deadline, || async {
        if running(&["a", "b", "c", "d", "e", "f", "g"]) { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    // Nothing to wait for: the check is that nothing is reported. A member behind on the add would be reported once
    // that lasted 2 × time_boundary + 2 s (3 s here); watch a second longer than that.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let most = TASKS.lock().unwrap().as_ref().expect("tasks").most.clone();
    assert!(most.values().all(|&n| n == 1), "two work tasks for one item at once: {most:?}");
    for (k, snapshots) in seen.iter().enumerate() {
        let snapshots = snapshots.lock().unwrap();
        for pair in snapshots[before[k].saturating_sub(1)..].windows(2) {
            let (was, is) = (&pair[0], &pair[1]);
            assert!(is.disagreements.is_empty(), "member {k} reports {:?}", is.disagreements);
            if is.generation != was.generation {
                let same = (is.state, &is.items, &is.tokens, &is.revoked)
                    == (was.state, &was.items, &was.tokens, &was.revoked);
                assert!(!same, "member {k} published {} again as a new episode: {is:?}", is.state);
            }
        }
    }
    for stop in stops {
        let _ = stop.send(());
    }
    for worker in workers {
        let ended = tokio::time::timeout(deadline, worker).await.expect("run_worker returns").expect("no panic");
        assert!(ended.is_ok(), "{ended:?}");
    }
}

/// Both modes, one after the other (the task counts are the test binary's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_loop_holds_one_task_per_item_through_an_add() {
    three_members_and_an_add(Rebalance::Eager).await;
    three_members_and_an_add(Rebalance::Incremental).await;
}
