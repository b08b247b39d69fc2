//! Seeded, reproducible chaos: members (in-process sessions behind proxies, plus one worker process) under a random
//! mix of faults, with a checker sampling every claim against the lock nodes throughout, and the recovery time after
//! each fault measured.
//!
//! ```text
//! cargo test --test chaos                                        # the short run CI does: 20 faults
//! cargo build --release --example worker && CHAOS_FAULTS=1000 CHAOS_SEED=7 \
//!     cargo test --release --test chaos -- --nocapture              # the long run behind RELIABILITY.md
//! ```
//!
//! `CHAOS_JSON=<file>` also writes one JSON line per fault (its kind and recovery time) to that file, for the plot
//! `bench/chaos.sh` draws with `bench/plot.py`.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::faults::{Opts, SafetyChecker, read_holders};
use common::members::{AbortOnDrop, Member, auto_release, build_member, ints};
use common::{OwnedServer, Proxy, timing};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zk_partitioner::testing::{Claim, SplitMix64, check_claims};
use zk_partitioner::{Item, PartitionState};

const SESSION: Duration = Duration::from_millis(1500);
const MEMBERS: usize = 4;
const ITEMS: i64 = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// The worker process is killed (SIGKILL: no finish, its session lingers until it expires), then restarted.
    KillProcess,
    /// A member's connection is cut until its session expires; it fails and a new member replaces it.
    Expire,
    /// A member's connection is cut for a third of the session timeout.
    ShortCut,
    /// A member leaves with finish() and a new one joins.
    Leave,
    /// ZooKeeper is stopped and started again (data kept).
    RestartServer,
    /// ZooKeeper is paused for half the session timeout.
    PauseServer,
    /// Three members join and leave in quick succession.
    Churn,
}

const FAULTS: [Fault; 7] = [
    Fault::KillProcess,
    Fault::Expire,
    Fault::ShortCut,
    Fault::Leave,
    Fault::RestartServer,
    Fault::PauseServer,
    Fault::Churn,
];

struct InProcess {
    member: Member,
    proxy: Proxy,
    _loop: AbortOnDrop,
}

/// The worker example as a separate process, seen through its JSON lines.
struct Process {
    child: Child,
    /// Its connection's proxy: kept so the route stays up while the process lives.
    _proxy: Proxy,
    view: Arc<Mutex<(String, Vec<String>, i64)>>,
}

struct World {
    server: OwnedServer,
    namespace: String,
    items: Vec<Item>,
    members: Vec<InProcess>,
    process: Option<Process>,
    checker: SafetyChecker,
    next_id: usize,
}

fn worker_binary() -> std::path::PathBuf {
    // target/<profile>/deps/chaos-<hash> → target/<profile>/examples/worker
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe.parent().and_then(|deps| deps.parent()).map(|p| p.join("examples/worker")).expect("target dir");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --example worker` (plain `cargo test` does)",
        path.display()
    );
    path
}

impl World {
    async fn member(&mut self) -> InProcess {
        self.next_id += 1;
        let proxy = Proxy::start(self.server.addr()).await;
        let client = common::connect(&format!("{}{}", proxy.endpoint(), self.namespace), SESSION).await;
        let opts = Opts::session(SESSION);
        let member = build_member(client, &format!("m{}", self.next_id), &self.items, |b| opts.apply(b)).await;
        self.checker.watch(&member);
        let worker_loop = auto_release(&member.partitioner);
        InProcess { member, proxy, _loop: worker_loop }
    }

    async fn spawn_process(&mut self) -> Process {
        self.next_id += 1;
        let proxy = Proxy::start(self.server.addr()).await;
        let items: Vec<String> = self.items.iter().map(Item::to_string).collect();
        let mut child = Command::new(worker_binary())
            .args(["--connect", &format!("{}{}", proxy.endpoint(), self.namespace), "--path", common::faults::PATH])
            .args(["--items", &items.join(","), "--int-items", "--identifier", &format!("p{}", self.next_id)])
            .args(["--time-boundary", "0.2", "--session-timeout", &format!("{}", SESSION.as_secs_f64()), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the worker example");
        let view = Arc::new(Mutex::new((String::new(), Vec::new(), 0)));
        let sink = view.clone();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let field = |key: &str| {
                    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
                    let rest = &line[at..];
                    Some(if let Some(list) = rest.strip_prefix('[') {
                        &list[..list.find(']')?]
                    } else if let Some(text) = rest.strip_prefix('"') {
                        &text[..text.find('"')?]
                    } else {
                        &rest[..rest.find([',', '}'])?]
                    })
                };
                let state = field("state").unwrap_or_default().to_string();
                let items = field("items")
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                let session = field("session").and_then(|s| s.parse().ok()).unwrap_or(0);
                *sink.lock().unwrap() = (state, items, session);
            }
        });
        Process { child, _proxy: proxy, view }
    }

    /// Replaces failed members and a dead process, as an orchestrator restarting crashed workers would.
    async fn replace_the_dead(&mut self) {
        let mut kept = Vec::new();
        for m in std::mem::take(&mut self.members) {
            if m.member.partitioner.state() == PartitionState::Failure {
                m.member.partitioner.finish().await;
            } else {
                kept.push(m);
            }
        }
        self.members = kept;
        while self.members.len() < MEMBERS {
            let member = self.member().await;
            self.members.push(member);
        }
        let dead = match &mut self.process {
            Some(p) => p.child.try_wait().ok().flatten().is_some() || p.view.lock().unwrap().0 == "FAILURE",
            None => true,
        };
        if dead {
            self.process = None;
            self.process = Some(self.spawn_process().await);
        }
    }

    /// Everyone ACQUIRED over a party of everyone, claims disjoint, covering every item, each backed by a lock node of
    /// the claimant's session (the kit's [`check_claims`], the worker process claiming what its JSON lines say).
    async fn converged(&self, observer: &zk_partitioner::zookeeper_client::Client) -> Result<(), String> {
        let expected = self.members.len() + 1;
        let mut claims = Vec::new();
        for m in &self.members {
            let s = m.member.partitioner.snapshot();
            if s.state != PartitionState::Acquired || s.members.len() != expected {
                return Err(format!("{} is {} with {} members", s.member, s.state, s.members.len()));
            }
            claims.push(Claim { party: None, ..Claim::of(&s, m.member.session()) });
        }
        let (state, items, session) = self.process.as_ref().map(|p| p.view.lock().unwrap().clone()).unwrap_or_default();
        if state != "ACQUIRED" {
            return Err(format!("the worker process is {state:?}"));
        }
        claims.push(Claim {
            member: "the worker process".to_string(),
            state: PartitionState::Acquired,
            suspended: false,
            party: None,
            items,
            session,
        });
        let holders = read_holders(observer, &self.items).await.map_err(|e| e.to_string())?;
        check_claims(&claims, Some(&holders), &self.items)
    }
}

/// Waits until the world has converged, replacing members that fail meanwhile (a session can run out some time after
/// the fault, e.g. while a restarted server replays it); panics after a minute with the last observation.
async fn recover(world: &mut World, observer: &zk_partitioner::zookeeper_client::Client, what: String) -> Duration {
    let started = Instant::now();
    loop {
        world.replace_the_dead().await;
        match world.converged(observer).await {
            Ok(()) => return started.elapsed(),
            Err(last) if started.elapsed() > timing(Duration::from_secs(60)) => {
                panic!("no recovery within 60 s after {what}; last observation: {last}")
            }
            Err(_) => tokio::time::sleep(common::POLL).await,
        }
    }
}

#[tokio::test]
async fn chaos() {
    common::init_tracing();
    let seed: u64 = std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261121);
    let faults: usize = std::env::var("CHAOS_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!("chaos: seed {seed}, {faults} faults (rerun with CHAOS_SEED={seed} CHAOS_FAULTS={faults})");
    let mut rng = SplitMix64::new(seed);

    let server = OwnedServer::launch().await;
    let namespace = common::namespace(&server).await;
    let observer = common::connect(&format!("{}{namespace}", server.endpoint()), Duration::from_secs(20)).await;
    let items = ints(ITEMS);
    let checker = SafetyChecker::start(observer.clone(), &items, &[]);
    let mut world = World { server, namespace, items, members: Vec::new(), process: None, checker, next_id: 0 };
    world.replace_the_dead().await;
    let liveness_bound = SESSION + common::members::TIME_BOUNDARY + Duration::from_secs(2);
    recover(&mut world, &observer, "the start".into()).await;

    // CHAOS_JSON=<file>: a JSON line per fault, written as each recovers (a run that stops keeps what it measured).
    let mut json = std::env::var_os("CHAOS_JSON").map(std::path::PathBuf::from).map(|path| {
        let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("CHAOS_JSON {}: {e}", path.display()));
        (path, file)
    });
    let mut recoveries: BTreeMap<Fault, Vec<Duration>> = BTreeMap::new();
    for round in 0..faults {
        let fault = FAULTS[rng.below(FAULTS.len())];
        let victim = rng.below(MEMBERS);
        match fault {
            Fault::KillProcess => {
                if let Some(p) = &mut world.process {
                    let _ = p.child.start_kill();
                    let _ = p.child.wait().await;
                }
            }
            Fault::Expire => {
                let m = &world.members[victim];
                common::expire(&m.member.client, &m.proxy).await;
            }
            Fault::ShortCut => world.members[victim].proxy.cut_for(SESSION / 3).await,
            Fault::Leave => {
                let m = world.members.remove(victim);
                m.member.partitioner.finish().await;
            }
            Fault::RestartServer => {
                world.server.stop().await;
                world.server.start().await;
            }
            Fault::PauseServer => {
                world.server.pause().await;
                tokio::time::sleep(SESSION / 2).await; // the fault itself lasts this long
                world.server.unpause().await;
            }
            Fault::Churn => {
                for _ in 0..3 {
                    let extra = world.member().await;
                    tokio::time::sleep(common::members::TIME_BOUNDARY / 2).await; // the churn period itself
                    extra.member.partitioner.finish().await;
                }
            }
        }
        let fault_over = Instant::now();
        world.replace_the_dead().await;
        recover(&mut world, &observer, format!("round {round}: {fault:?}")).await;
        let took = fault_over.elapsed();
        let checks = world.checker.checks();
        eprintln!(
            "round {round:4}: {fault:?} recovered in {took:.2?} (so far: {} claims checked, {} violations)",
            checks.claims_checked,
            checks.violations.len()
        );
        if let Some((path, file)) = &mut json {
            let line = serde_json::json!({
                "seed": seed,
                "faults": faults,
                "round": round,
                "fault": format!("{fault:?}"),
                "recovery_s": (took.as_secs_f64() * 1e6).round() / 1e6,
                "bound_s": liveness_bound.as_secs_f64(),
            });
            writeln!(file, "{line}").unwrap_or_else(|e| panic!("CHAOS_JSON {}: {e}", path.display()));
        }
        recoveries.entry(fault).or_default().push(took);
    }

    let checks = world.checker.assert_safe(1).await;
    eprintln!(
        "\nchaos summary: seed {seed}, {faults} faults, liveness bound {liveness_bound:.1?} (session + time_boundary + 2 s)"
    );
    eprintln!("| fault | count | median recovery | worst recovery | over the bound |");
    eprintln!("|---|---:|---:|---:|---:|");
    let mut all = Vec::new();
    for (fault, mut times) in recoveries {
        times.sort();
        let over = times.iter().filter(|t| **t > liveness_bound).count();
        eprintln!(
            "| {fault:?} | {} | {:.2?} | {:.2?} | {over} |",
            times.len(),
            times[times.len() / 2],
            times[times.len() - 1]
        );
        all.extend(times);
    }
    all.sort();
    if !all.is_empty() {
        eprintln!(
            "| all | {} | {:.2?} | {:.2?} | {} |",
            all.len(),
            all[all.len() / 2],
            all[all.len() - 1],
            all.iter().filter(|t| **t > liveness_bound).count()
        );
    }
    eprintln!(
        "safety samples {}, claims checked {}, unreadable samples {}, violations {}",
        checks.samples,
        checks.claims_checked,
        checks.unreadable,
        checks.violations.len()
    );
    assert!(checks.violations.is_empty(), "safety violations: {:#?}", checks.violations);
}
