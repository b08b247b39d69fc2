//! Rust and kazoo (Python, PyPI `kazoo` 2.11) workers in one party: they must agree on the assignment and reach a
//! disjoint cover, checked by reading the lock nodes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::members::{Member, auto_release, ints, lock_holders};
use common::{Ctx, timing, wait_for};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zk_partitioner::{Item, KazooStride, PartitionFn, PartitionState};

const PATH: &str = "/partitioner";

/// The latest line a kazoo worker printed.
#[derive(Clone, Debug, Default)]
struct KazooView {
    state: String,
    items: Vec<String>,
    session: i64,
}

struct KazooWorker {
    identifier: String,
    child: Child,
    view: Arc<Mutex<KazooView>>,
}

fn require_kazoo() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kazoo is not installed for python3: run `python3 -m pip install kazoo==2.11.0` (CI does)");
}

impl KazooWorker {
    async fn start(ctx: &Ctx, identifier: &str, items: &[Item]) -> KazooWorker {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kazoo/kazoo_worker.py");
        let items: Vec<String> = items.iter().map(Item::to_string).collect();
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--connect", &format!("{}{}", ctx.endpoint, ctx.namespace), "--path", PATH])
            .args(["--items", &items.join(","), "--int-items", "--identifier", identifier])
            .args(["--time-boundary", "0.2", "--session-timeout", "6"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start python3 tests/kazoo/kazoo_worker.py");
        let view = Arc::new(Mutex::new(KazooView::default()));
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let sink = view.clone();
        let name = identifier.to_string();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(worker = %name, %line, "kazoo");
                *sink.lock().unwrap() = parse_line(&line);
            }
        });
        KazooWorker { identifier: identifier.to_string(), child, view }
    }

    fn view(&self) -> KazooView {
        self.view.lock().unwrap().clone()
    }

    /// SIGTERM: the script calls `finish()` and exits 0.
    async fn stop(mut self) {
        let pid = self.child.id().expect("running");
        std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
        let status = tokio::time::timeout(timing(Duration::from_secs(15)), self.child.wait()).await;
        assert!(matches!(status, Ok(Ok(s)) if s.success()), "kazoo worker {} did not exit cleanly", self.identifier);
    }
}

/// Picks the fields we need out of the script's JSON line (flat, written by json.dumps).
fn parse_line(line: &str) -> KazooView {
    let field = |name: &str| -> &str {
        let key = format!("\"{name}\": ");
        line.find(&key).map_or("", |at| {
            let rest = &line[at + key.len()..];
            let end = if rest.starts_with('[') {
                rest.find(']').map_or(rest.len(), |e| e + 1)
            } else {
                rest.find([',', '}']).unwrap_or(rest.len())
            };
            &rest[..end]
        })
    };
    let items = field("items").trim_matches(['[', ']']);
    KazooView {
        state: field("state").trim_matches('"').to_string(),
        items: items.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect(),
        session: field("session").parse().unwrap_or(0),
    }
}

/// Waits until every worker, Rust or kazoo, is ACQUIRED with the share the default function gives it over the
/// current party, every claim is backed by a lock node of the claimant's session, and the claims cover every item
/// exactly once.
async fn wait_for_mixed_cover(ctx: &Ctx, rust: &[&Member], kazoo: &[&KazooWorker], items: &[Item]) {
    let expected_members = rust.len() + kazoo.len();
    wait_for("a disjoint cover agreed by Rust and kazoo workers", timing(Duration::from_secs(30)), || async {
        let holders = lock_holders(&ctx.observer, PATH, items).await;
        let mut claims: BTreeMap<String, i64> = BTreeMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut problems = Vec::new();
        for member in rust {
            let snapshot = member.partitioner.snapshot();
            if snapshot.state != PartitionState::Acquired || snapshot.members.len() != expected_members {
                problems.push(format!(
                    "{} is {} with {} members",
                    snapshot.member,
                    snapshot.state,
                    snapshot.members.len()
                ));
            }
            names.push(snapshot.member.to_string());
            for item in snapshot.items.iter() {
                if claims.insert(item.to_string(), member.session()).is_some() {
                    problems.push(format!("{item} claimed twice"));
                }
            }
        }
        for worker in kazoo {
            let view = worker.view();
            if view.state != "ACQUIRED" {
                problems.push(format!("{} is {}", worker.identifier, view.state));
            }
            names.push(worker.identifier.clone());
            for item in view.items {
                if claims.insert(item.clone(), view.session).is_some() {
                    problems.push(format!("{item} claimed twice"));
                }
            }
        }
        if claims != holders {
            problems.push(format!("claims {claims:?} differ from lock holders {holders:?}"));
        }
        let covered: BTreeSet<&String> = claims.keys().collect();
        if covered.len() != items.len() {
            problems.push(format!("{} of {} items claimed", covered.len(), items.len()));
        }
        // Both sides computed kazoo's stride over the same sorted names.
        for member in rust {
            let snapshot = member.partitioner.snapshot();
            let expected = KazooStride.partition(&snapshot.member, &names, items);
            if snapshot.state == PartitionState::Acquired && *snapshot.items != *expected {
                problems.push(format!("{} holds {:?}, stride says {expected:?}", snapshot.member, snapshot.items));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    })
    .await;
}

#[tokio::test]
async fn rust_and_kazoo_workers_share_a_party() {
    require_kazoo();
    // given: 12 integer items (sorted numerically by both sides: 2 < 10), two Rust and two kazoo workers
    let ctx = Ctx::new().await;
    let items = ints(12);
    let rust_a = ctx.member("rs-a", items.clone()).await;
    let kazoo_1 = KazooWorker::start(&ctx, "kz-1", &items).await;
    let rust_b = ctx.member("rs-b", items.clone()).await;
    let kazoo_2 = KazooWorker::start(&ctx, "kz-2", &items).await;
    let _loops = [auto_release(&rust_a.partitioner), auto_release(&rust_b.partitioner)];
    // then
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1, &kazoo_2], &items).await;

    // when a kazoo worker leaves, the other three re-divide its items
    kazoo_2.stop().await;
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1], &items).await;

    // and when a Rust worker leaves too
    rust_b.partitioner.finish().await;
    wait_for_mixed_cover(&ctx, &[&rust_a], &[&kazoo_1], &items).await;
    kazoo_1.stop().await;
}

/// Incremental Rust members (keeping unmoved items) in a party with eager kazoo workers: exclusion comes from the
/// locks, and every member computes kazoo's stride, so the mix converges like any other party.
#[tokio::test]
async fn incremental_rust_workers_mix_with_kazoo() {
    require_kazoo();
    let ctx = Ctx::new().await;
    let items = ints(12);
    let incremental = |b: zk_partitioner::Builder| b.rebalance(zk_partitioner::Rebalance::Incremental);
    let rust_a = ctx.member_with("rs-a", items.clone(), incremental).await;
    let kazoo_1 = KazooWorker::start(&ctx, "kz-1", &items).await;
    let rust_b = ctx.member_with("rs-b", items.clone(), incremental).await;
    let kazoo_2 = KazooWorker::start(&ctx, "kz-2", &items).await;
    let _loops = [auto_release(&rust_a.partitioner), auto_release(&rust_b.partitioner)];
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1, &kazoo_2], &items).await;

    kazoo_2.stop().await;
    wait_for_mixed_cover(&ctx, &[&rust_a, &rust_b], &[&kazoo_1], &items).await;
    rust_b.partitioner.finish().await;
    wait_for_mixed_cover(&ctx, &[&rust_a], &[&kazoo_1], &items).await;
    kazoo_1.stop().await;
}
