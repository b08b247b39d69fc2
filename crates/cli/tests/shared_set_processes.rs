//! `zkp worker` as users run it. The shared set: `zkp worker --shared-set` members in separate processes, changed with
//! the `zkp items` admin command, under both rebalance modes; and the rolling deploy (`--items a,b,c` beside
//! `--items b,c`), which both members report at once in their JSON. And `--checkpoints`: a worker resumes from the
//! fenced checkpoint its predecessor wrote.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Ctx, timing, wait_for, zkp};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const PATH: &str = "/partitioner";

/// A worker process and the last JSON line it printed.
struct Worker {
    child: Child,
    last: Arc<Mutex<Value>>,
    /// When it printed its first line (it has joined the party by then).
    joined: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl Worker {
    async fn start(ctx: &Ctx, identifier: &str, extra: &[&str]) -> Worker {
        // Every worker here is given --time-boundary by its test.
        let mut child = Command::new(zkp())
            .arg("worker")
            .args(["--connect", &format!("{}{}", ctx.endpoint, ctx.namespace), "--path", PATH])
            .args(["--identifier", identifier, "--session-timeout", "6", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn zkp worker");
        let last = Arc::new(Mutex::new(Value::Null));
        let joined = Arc::new(Mutex::new(None));
        let (sink, first) = (last.clone(), joined.clone());
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    first.lock().unwrap().get_or_insert_with(tokio::time::Instant::now);
                    *sink.lock().unwrap() = value;
                }
            }
        });
        Worker { child, last, joined }
    }

    /// Waits until the worker has joined (printed its first line); returns when it did.
    async fn wait_joined(&self) -> tokio::time::Instant {
        wait_for("the worker to join", timing(Duration::from_secs(30)), || async {
            self.joined.lock().unwrap().ok_or_else(|| "no line yet".to_string())
        })
        .await
    }

    /// SIGTERM: the worker calls `finish()` and exits 0.
    async fn stop(mut self) {
        let pid = self.child.id().expect("running");
        std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
        let status = tokio::time::timeout(timing(Duration::from_secs(15)), self.child.wait()).await;
        assert!(matches!(status, Ok(Ok(s)) if s.success()), "the worker did not exit cleanly: {status:?}");
    }

    fn last(&self) -> Value {
        self.last.lock().unwrap().clone()
    }
}

/// Runs the admin command; returns its stdout (it must succeed).
async fn admin(ctx: &Ctx, args: &[&str]) -> String {
    let output = Command::new(zkp())
        .arg("items")
        .args(["--connect", &format!("{}{}", ctx.endpoint, ctx.namespace), "--path", PATH, "--int-items"])
        .args(args)
        .output()
        .await
        .expect("run zkp items");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "shared_set {args:?}: {}{stdout}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// Waits until every worker printed ACQUIRED at `version` and their items are a disjoint cover of `expected`.
async fn wait_cover(workers: &[&Worker], version: u64, expected: &[i64]) {
    let expected: BTreeSet<i64> = expected.iter().copied().collect();
    wait_for("every worker ACQUIRED over the new set", timing(Duration::from_secs(30)), || async {
        let mut covered = BTreeSet::new();
        for worker in workers {
            let line = worker.last();
            if line["state"] != "ACQUIRED" || line["set_version"] != version {
                return Err(format!("a worker printed {line}"));
            }
            for item in line["items"].as_array().cloned().unwrap_or_default() {
                if !covered.insert(item.as_i64().unwrap_or(-1)) {
                    return Err(format!("{item} listed twice"));
                }
            }
        }
        if covered == expected { Ok(()) } else { Err(format!("covered {covered:?}")) }
    })
    .await;
}

fn version_of(admin_output: &str) -> u64 {
    let json: Value = serde_json::from_str(admin_output.trim()).expect("shared_set --json prints one JSON object");
    json["version"].as_u64().expect("a version")
}

async fn processes_follow_the_set(rebalance: &str) {
    let ctx = Ctx::new().await;
    let shared = [
        "--shared-set",
        "--int-items",
        "--partition",
        "rendezvous",
        "--rebalance",
        rebalance,
        "--time-boundary",
        "0.5",
    ];
    let seed = [&shared[..], &["--items", "0,1,2,3,4,5"]].concat();
    // The first worker seeds the set; the others start from it.
    let a = Worker::start(&ctx, "a", &seed).await;
    a.wait_joined().await;
    let b = Worker::start(&ctx, "b", &shared).await;
    let c = Worker::start(&ctx, "c", &shared).await;
    let workers = [&a, &b, &c];
    let version = version_of(&admin(&ctx, &["--json", "show"]).await);
    wait_cover(&workers, version, &[0, 1, 2, 3, 4, 5]).await;

    let version = version_of(&admin(&ctx, &["--json", "add", "6,7"]).await);
    wait_cover(&workers, version, &[0, 1, 2, 3, 4, 5, 6, 7]).await;
    for worker in workers {
        assert_eq!(worker.last()["added"], serde_json::json!([6, 7]), "{}", worker.last());
    }

    let version = version_of(&admin(&ctx, &["--json", "remove", "0,7"]).await);
    wait_cover(&workers, version, &[1, 2, 3, 4, 5, 6]).await;
    for worker in workers {
        assert_eq!(worker.last()["removed"], serde_json::json!([0, 7]), "{}", worker.last());
    }
    // The text form, as an operator reads it.
    let shown = admin(&ctx, &["show"]).await;
    assert!(shown.contains("6 items: 1,2,3,4,5,6"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_processes_follow_the_shared_set_incrementally() {
    processes_follow_the_set("incremental").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_processes_follow_the_shared_set_eagerly() {
    processes_follow_the_set("eager").await;
}

/// The reproduction: a `zkp items add` of 3,000 items killed with SIGKILL part-way (here: stopped by its
/// proxy right after its first staging request, or right after its commit, then killed). The worker that is first
/// in the party finds the admin's lease gone once its session expires (the admin's default 6 s) and undoes or
/// finishes the update: the set is whole (the old one or the new one), `ready` again, and the workers follow it.
/// (Before, the set stayed `updating` for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_killed_part_way_leaves_no_update_unfinished() {
    let ctx = Ctx::new().await;
    let shared = ["--shared-set", "--int-items", "--time-boundary", "0.3"];
    let a = Worker::start(&ctx, "a", &[&shared[..], &["--items", "0,1,2,3"]].concat()).await;
    a.wait_joined().await;
    let b = Worker::start(&ctx, "b", &shared).await;
    let version = version_of(&admin(&ctx, &["--json", "show"]).await);
    wait_cover(&[&a, &b], version, &[0, 1, 2, 3]).await;
    let header = || async {
        let (data, _) = ctx.observer.get_data(&format!("{PATH}/items")).await.expect("the header");
        String::from_utf8_lossy(&data).into_owned()
    };
    let mut expected: Vec<i64> = vec![0, 1, 2, 3];
    for (round, request, state) in [(0i64, &b"/add/"[..], "staging"), (1, &b"state=applying"[..], "applying")] {
        let more: Vec<i64> = (1000 + round * 10_000..4000 + round * 10_000).collect();
        let list = more.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let proxy = zk_partitioner_testing::Proxy::start(ctx.addr).await;
        proxy.cut_after_containing(14, request);
        let mut child = Command::new(zkp())
            .arg("items")
            .args(["--connect", &format!("{}{}", proxy.endpoint(), ctx.namespace), "--path", PATH, "--int-items"])
            .args(["add", &list])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn shared_set");
        common::wait_until("the admin to be stopped part-way", timing(Duration::from_secs(20)), || async {
            proxy.is_cut() && header().await.contains(&format!("state={state}"))
        })
        .await;
        child.start_kill().expect("SIGKILL");
        let _ = child.wait().await;
        let killed = tokio::time::Instant::now();
        // The admin's session timeout (6 s), then a round trip or two of the first worker.
        common::wait_until("the update to be undone or finished", timing(Duration::from_secs(10)), || async {
            header().await.contains("state=ready")
        })
        .await;
        eprintln!("{state}: recovered {:.2?} after the SIGKILL", killed.elapsed());
        if state == "applying" {
            expected.extend(&more);
        }
        let shown: Value = serde_json::from_str(admin(&ctx, &["--json", "show"]).await.trim()).expect("JSON");
        let items: Vec<i64> = shown["items"].as_array().expect("items").iter().filter_map(Value::as_i64).collect();
        assert_eq!(items, expected, "{state}: the whole old set, or the whole new one");
        wait_cover(&[&a, &b], shown["version"].as_u64().expect("version"), &expected).await;
    }
}

/// The rolling deploy, run as a user would: two workers with different `--items`. Both print the
/// disagreement within time_boundary + 1 s, naming the other member.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_with_different_items_print_the_disagreement() {
    let ctx = Ctx::new().await;
    let old = Worker::start(&ctx, "old", &["--items", "a,b,c", "--time-boundary", "1"]).await;
    old.wait_joined().await;
    let new = Worker::start(&ctx, "new", &["--items", "b,c", "--time-boundary", "1"]).await;
    // From the moment the second member is in the party: within time_boundary (1 s) + 1 s.
    let started = new.wait_joined().await;
    for (worker, other) in [(&new, "old"), (&old, "new")] {
        wait_for("the disagreement in the worker's JSON", timing(Duration::from_secs(2)), || async {
            let line = worker.last();
            let reported = line["disagreements"].as_array().cloned().unwrap_or_default();
            match reported.iter().find(|d| d.as_str().is_some_and(|d| d.contains(other))) {
                Some(d) if d.as_str().is_some_and(|d| d.contains("different set of items")) => Ok(()),
                _ => Err(format!("last line {line}")),
            }
        })
        .await;
    }
    assert!(started.elapsed() <= timing(Duration::from_secs(2)), "reported after {:?}", started.elapsed());
}

/// Bad input through the admin command: a clear message and exit 1, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_command_refuses_bad_changes() {
    let ctx = Ctx::new().await;
    admin(&ctx, &["create", "1,2"]).await;
    let run = |args: Vec<&'static str>| {
        let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
        async move {
            Command::new(zkp())
                .arg("items")
                .args(["--connect", &connect, "--path", PATH, "--int-items"])
                .args(args)
                .output()
                .await
                .expect("run shared_set")
        }
    };
    for (args, message) in [
        (vec!["remove", "3"], "is not in the shared set"),
        (vec!["remove", "1,2"], "refusing to leave the shared set"),
        (vec!["replace", "5", "--if-version", "99"], "changed meanwhile"),
    ] {
        let output = run(args.clone()).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    // Not an integer under --int-items: a bad argument (exit 2, checked before connecting).
    let output = run(vec!["add", "x"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"x\" is not an integer"), "{stderr}");
    assert!(admin(&ctx, &["show"]).await.contains("2 items: 1,2"));
}

/// `--checkpoints`: each new owner reads the count its predecessor saved and saves one more, with fenced writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_resumes_from_its_predecessors_checkpoint() {
    let ctx = Ctx::new().await;
    let args = ["--items", "0,1", "--int-items", "--checkpoints", "--time-boundary", "0.3"];
    let counts = |worker: &Worker, expected: u64| {
        let line = worker.last();
        let ok =
            line["state"] == "ACQUIRED" && line["checkpoints"]["0"] == expected && line["checkpoints"]["1"] == expected;
        if ok { Ok(()) } else { Err(format!("last line {line}")) }
    };
    let first = Worker::start(&ctx, "first", &args).await;
    wait_for("the first owner's checkpoints", timing(Duration::from_secs(20)), || async { counts(&first, 1) }).await;
    first.stop().await;
    let second = Worker::start(&ctx, "second", &args).await;
    wait_for("the second owner resuming", timing(Duration::from_secs(20)), || async { counts(&second, 2) }).await;
}
