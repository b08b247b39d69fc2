//! Seeded, reproducible chaos: members (in-process sessions behind proxies, plus one worker process) under a random
//! mix of faults, with a checker sampling every claim throughout, the worker process's included (read from the state
//! lines it prints), and the recovery after each fault held to the liveness bound.
//!
//! ```text
//! cargo test -p zk-partitioner-cli --test chaos                   # the short run CI does: 20 faults
//! CHAOS_FAULTS=1000 CHAOS_SEED=7 \
//!     cargo test --release -p zk-partitioner-cli --test chaos -- --nocapture   # the long run behind RELIABILITY.md
//! ```
//!
//! Every recovery, from the end of its fault to full convergence, must be within the liveness bound RELIABILITY.md
//! promises: session timeout + `time_boundary` + 2 s (4.2 s). A server restart's own bound is the same, counted from
//! the server serving again (the end of that fault): a session the outage outlasted is restored by the restarted
//! server with a full timeout, so its lock nodes live a session timeout past the restart. When members failed (their
//! clients learn it after zookeeper-client's reconnection back-off, or at their own deadline of 7/5 of the session
//! timeout), the bound counts from their last replacement's join, or from the failed sessions' expiry (a session
//! timeout after the server serves) if that is later; when sessions survived, from the end of zookeeper-client's
//! reconnection back-off (at most as long after the server serves as the server was down). A member (or the worker
//! process) that fails after a fault it should survive (any but a restart; the expired member and the killed process
//! are the faults' own victims) fails the run. A server pause lasts until every client has given the silent
//! connection up and every member that listed items has stopped listing them, at least half the session timeout, and
//! fails the run if that has not happened within 1.3 s: zookeeper-client suspends a session only after 2/5 of its
//! timeout (0.8 s) without a byte, so a shorter pause would test nothing, and every session must survive the pause.
//! Each fault's window in the checker (from its start to its recovery) must have compared the claims against each
//! other, and, for an expiry, a killed process or a cut (ZooKeeper up, members listing), checked them against the
//! locks; the pause's own window must have compared them while ZooKeeper did not answer; and over the run at least
//! 10 claims per fault must have been checked against the locks inside the windows, the worker process's among them.
//!
//! `CHAOS_JSON=<file>` also writes one JSON line per fault (its kind and recovery time) to that file, for the plot
//! `bench/chaos.sh` draws with `bench/plot.py`.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::faults::{Monitor, Opts, Reactions, SafetyChecker, read_holders};
use common::members::{AbortOnDrop, Member, TIME_BOUNDARY, auto_release, build_member, ints};
use common::{OwnedServer, Proxy, timing};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Item, PartitionState};
use zk_partitioner_testing::{Claim, SplitMix64, check_claims};

/// Every member's session timeout, the worker process's too. zookeeper-client gives a silent connection up after 2/5
/// of it (0.8 s), checking every 1/20 (100 ms), and pings after 300 ms without sending: the pause below is sized
/// against these.
const SESSION: Duration = Duration::from_secs(2);
const MEMBERS: usize = 4;
const ITEMS: i64 = 60;
/// A server pause lasts at least this long.
const PAUSE_MIN: Duration = Duration::from_secs(1);
/// A pause that has not suspended every client this long after it took hold fails the run (past it, the sessions,
/// last heard from up to 0.4 s before the pause, might not survive it).
const PAUSE_DEADLINE: Duration = Duration::from_millis(1300);
/// How long the test waits for a recovery at most, to report how long it took even when that is over the bound.
const RECOVERY_CAP: Duration = Duration::from_secs(60);

/// The liveness bound RELIABILITY.md promises once faults stop: session timeout + `time_boundary` + 2 s. A restart's
/// recovery is held to it too, counted from the server serving again.
fn liveness_bound() -> Duration {
    SESSION + TIME_BOUNDARY + Duration::from_secs(2)
}

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
    /// ZooKeeper is paused until every client has suspended (half the session timeout at least).
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
    monitor: Monitor,
    _loop: AbortOnDrop,
}

/// What the test reads of the worker process's JSON lines.
#[derive(Clone, Debug, Default)]
struct View {
    member: String,
    state: String,
    items: Vec<String>,
    session: i64,
    /// Lines read so far: the generation of the claim the checker reads.
    lines: u64,
    /// Lines that list nothing after one that listed items.
    stopped_listing: u64,
    /// Killed by the test (SIGKILL, waited for): it processes nothing any more, whatever its last line said.
    killed: bool,
}

impl View {
    fn state(&self) -> Option<PartitionState> {
        [PartitionState::Allocating, PartitionState::Acquired, PartitionState::Release, PartitionState::Failure]
            .into_iter()
            .find(|state| state.to_string() == self.state)
    }

    /// What the process claims now, for the safety checker: `None` before its first line and once killed.
    fn claim(&self) -> Option<(u64, Claim)> {
        if self.killed || self.lines == 0 {
            return None;
        }
        let claim = Claim {
            member: self.member.clone(),
            state: self.state()?,
            suspended: false,
            party: None,
            items: self.items.clone(),
            session: self.session,
        };
        Some((self.lines, claim))
    }
}

/// `zkp worker` as a separate process, seen through its JSON lines.
struct Process {
    child: Child,
    /// Its connection's proxy: kept so the route stays up while the process lives.
    _proxy: Proxy,
    view: Arc<Mutex<View>>,
}

impl Process {
    fn view(&self) -> View {
        self.view.lock().unwrap().clone()
    }

    /// Whether it exited, or printed FAILURE.
    fn dead(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some() || self.view().state == "FAILURE"
    }
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

impl World {
    async fn member(&mut self) -> InProcess {
        self.next_id += 1;
        let proxy = Proxy::start(self.server.addr()).await;
        let client = common::connect(&format!("{}{}", proxy.endpoint(), self.namespace), SESSION).await;
        let opts = Opts::session(SESSION);
        let member = build_member(client, &format!("m{}", self.next_id), &self.items, |b| opts.apply(b)).await;
        self.checker.watch(&member);
        let monitor = Monitor::start(&member);
        let worker_loop = auto_release(&member.partitioner);
        InProcess { member, proxy, monitor, _loop: worker_loop }
    }

    async fn spawn_process(&mut self) -> Process {
        self.next_id += 1;
        let proxy = Proxy::start(self.server.addr()).await;
        let items: Vec<String> = self.items.iter().map(Item::to_string).collect();
        let mut child = Command::new(common::zkp())
            .arg("worker")
            .args(["--connect", &format!("{}{}", proxy.endpoint(), self.namespace), "--path", common::faults::PATH])
            .args(["--items", &items.join(","), "--int-items", "--identifier", &format!("p{}", self.next_id)])
            .args(["--time-boundary", &format!("{}", TIME_BOUNDARY.as_secs_f64())])
            .args(["--session-timeout", &format!("{}", SESSION.as_secs_f64()), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn zkp worker");
        let view = Arc::new(Mutex::new(View::default()));
        let sink = view.clone();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // The worker prints each state before it acts on it (a RELEASE before its release_set()), and this task takes
        // the lines as they come: the checker reads no claim after the worker has let the item go.
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
                let Some(state) = field("state") else { continue };
                let items: Vec<String> = field("items")
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|item| item.trim_matches('"').to_string())
                    .collect();
                let mut view = sink.lock().unwrap();
                if !view.items.is_empty() && items.is_empty() {
                    view.stopped_listing += 1;
                }
                view.state = state.to_string();
                view.items = items;
                view.member = field("member").unwrap_or_default().to_string();
                view.session = field("session").and_then(|s| s.parse().ok()).unwrap_or(0);
                view.lines += 1;
            }
        });
        let source = view.clone();
        self.checker.watch_claims(move || source.lock().unwrap().claim());
        Process { child, _proxy: proxy, view }
    }

    /// Replaces failed members and a dead process, as an orchestrator restarting crashed workers would; returns how
    /// many it replaced. After a fault everyone should survive (any but a restart; `None`: the start), a member in
    /// FAILURE or a dead process is an error instead. (The faults remove their own victims: the expired member, the
    /// killed process.)
    async fn replace_the_dead(&mut self, after: Option<Fault>) -> Result<usize, String> {
        let may_fail = after == Some(Fault::RestartServer);
        let after_text = || after.map_or_else(|| "the start".to_string(), |fault| format!("a {fault:?}"));
        if !may_fail
            && let Some(failed) = self.members.iter().find(|m| m.member.partitioner.state() == PartitionState::Failure)
        {
            let snapshot = failed.member.partitioner.snapshot();
            let cause = snapshot.cause.map_or_else(|| "no cause".to_string(), |cause| cause.to_string());
            return Err(format!(
                "{} went to FAILURE ({cause}) after {}, which it should survive",
                snapshot.member,
                after_text()
            ));
        }
        let mut replaced = 0;
        let mut kept = Vec::new();
        for m in std::mem::take(&mut self.members) {
            if m.member.partitioner.state() == PartitionState::Failure {
                m.member.partitioner.finish().await;
                replaced += 1;
            } else {
                kept.push(m);
            }
        }
        self.members = kept;
        while self.members.len() < MEMBERS {
            let member = self.member().await;
            self.members.push(member);
        }
        if let Some(p) = &mut self.process
            && p.dead()
        {
            if !may_fail {
                return Err(format!(
                    "the worker process died ({:?}) after {}, which it should survive",
                    p.view(),
                    after_text()
                ));
            }
            p.view.lock().unwrap().killed = true;
            self.process = None;
            replaced += 1;
        }
        if self.process.is_none() {
            self.process = Some(self.spawn_process().await);
        }
        Ok(replaced)
    }

    /// Everyone ACQUIRED over a party of everyone, claims disjoint, covering every item, each backed by a lock node of
    /// the claimant's session (the kit's [`check_claims`], the worker process claiming what its JSON lines say).
    async fn converged(&self, observer: &Client) -> Result<(), String> {
        let expected = self.members.len() + 1;
        let mut claims = Vec::new();
        for m in &self.members {
            let s = m.member.partitioner.snapshot();
            if s.state != PartitionState::Acquired || s.members.len() != expected {
                return Err(format!("{} is {} with {} members", s.member, s.state, s.members.len()));
            }
            claims.push(Claim { party: None, ..Claim::of(&s, m.member.session()) });
        }
        let view = self.process.as_ref().map(Process::view).unwrap_or_default();
        match view.claim() {
            Some((_, claim)) if claim.state == PartitionState::Acquired => claims.push(claim),
            _ => return Err(format!("the worker process is {:?}", view.state)),
        }
        let holders = read_holders(observer, &self.items).await.map_err(|e| e.to_string())?;
        check_claims(&claims, Some(&holders), &self.items)
    }

    /// Waits until the world has converged, replacing what may fail after `after` meanwhile (a session can run out
    /// some time after a restart, e.g. while the restarted server replays it); `Err` with the last observation after
    /// [`RECOVERY_CAP`]. Returns how long it took, for the caller to hold against the bound.
    /// Replaces the dead and waits for convergence; returns how long it took, and how long after the start the last
    /// replacement had joined, if one was needed.
    async fn recover(
        &mut self,
        observer: &Client,
        after: Option<Fault>,
    ) -> Result<(Duration, Option<Duration>), String> {
        let started = Instant::now();
        let mut replaced_by = None;
        loop {
            if self.replace_the_dead(after).await? > 0 {
                replaced_by = Some(started.elapsed());
            }
            match self.converged(observer).await {
                Ok(()) => return Ok((started.elapsed(), replaced_by)),
                Err(last) if started.elapsed() > timing(RECOVERY_CAP) => {
                    return Err(format!("no recovery within {RECOVERY_CAP:?}; last observation: {last}"));
                }
                Err(_) => tokio::time::sleep(common::POLL).await,
            }
        }
    }

    /// Pauses ZooKeeper until every member's client has suspended and every member that listed items (the worker
    /// process included) has stopped listing them, for [`PAUSE_MIN`] at least; `Err` if that did not happen within
    /// [`PAUSE_DEADLINE`]. Returns what it saw.
    async fn pause(&mut self) -> Result<String, String> {
        let reactions =
            |members: &[InProcess]| -> Vec<Reactions> { members.iter().map(|m| m.monitor.reactions()).collect() };
        let listing: Vec<bool> =
            self.members.iter().map(|m| !m.member.partitioner.snapshot().items.is_empty()).collect();
        let process_before = self.process.as_ref().map(Process::view).unwrap_or_default();
        let before = reactions(&self.members);
        let reacted = |now: &[Reactions], process: &View| {
            let members = before.iter().zip(now).zip(&listing).all(|((b, n), listing)| {
                n.session_changes > b.session_changes && (!*listing || n.stopped_listing > b.stopped_listing)
            });
            members && (process_before.items.is_empty() || process.stopped_listing > process_before.stopped_listing)
        };
        let window = self.checker.fault();
        let mut attempt = 1;
        while let Err(err) = self.server.try_pause().await {
            // On a loaded machine the cgroup freezer can time out: Docker's failure, not the fault under test.
            assert!(attempt < 3, "{err} (attempt {attempt})");
            let _ = self.server.try_unpause().await;
            tokio::time::sleep(Duration::from_millis(200)).await; // before the next attempt
            attempt += 1;
        }
        let paused = Instant::now();
        let process_view = || self.process.as_ref().map(Process::view).unwrap_or_default();
        while !reacted(&reactions(&self.members), &process_view()) && paused.elapsed() < PAUSE_DEADLINE {
            tokio::time::sleep(common::POLL).await; // polling the members' counters
        }
        if let Some(rest) = PAUSE_MIN.checked_sub(paused.elapsed()) {
            tokio::time::sleep(rest).await; // the pause lasts this long at least
        }
        let (now, process_now, lasted) = (reactions(&self.members), process_view(), paused.elapsed());
        self.server.unpause().await;
        let checked = window.close();
        let suspended = before.iter().zip(&now).filter(|(b, n)| n.session_changes > b.session_changes).count();
        let stopped = before
            .iter()
            .zip(&now)
            .zip(&listing)
            .filter(|((b, n), listing)| **listing && n.stopped_listing > b.stopped_listing)
            .count();
        let process_stopped = process_now.stopped_listing > process_before.stopped_listing;
        let text = format!(
            "paused {lasted:.2?}: {suspended}/{} clients suspended, {stopped}/{} listing members and the process ({}) \
             stopped listing, {} claims checked against each other meanwhile",
            self.members.len(),
            listing.iter().filter(|l| **l).count(),
            if process_stopped { "it did" } else { "it did not" },
            checked.exclusive_claims
        );
        if !reacted(&now, &process_now) {
            return Err(format!(
                "{text}: a pause must suspend every client within {PAUSE_DEADLINE:?}, else it tests nothing"
            ));
        }
        if checked.exclusive_claims == 0 {
            return Err(format!(
                "{text}: the safety checker compared no claims while ZooKeeper was paused: {checked:?}"
            ));
        }
        Ok(text)
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
    let bound = timing(liveness_bound());
    world.recover(&observer, None).await.unwrap_or_else(|failure| panic!("the start: {failure}"));

    // CHAOS_JSON=<file>: a JSON line per fault, written as each recovers (a run that stops keeps what it measured).
    let mut json = std::env::var_os("CHAOS_JSON").map(std::path::PathBuf::from).map(|path| {
        let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("CHAOS_JSON {}: {e}", path.display()));
        (path, file)
    });
    let mut recoveries: BTreeMap<Fault, Vec<Duration>> = BTreeMap::new();
    for round in 0..faults {
        let fault = FAULTS[rng.below(FAULTS.len())];
        let victim = rng.below(MEMBERS);
        let failed = |what: String| {
            format!("round {round} ({fault:?}): {what}\nrerun with CHAOS_SEED={seed} CHAOS_FAULTS={faults}")
        };
        // The checker's fault window: from the fault's start to the party's recovery.
        let fault_started = Instant::now();
        let window = world.checker.fault();
        let mut what = String::new();
        match fault {
            Fault::KillProcess => {
                if let Some(mut p) = world.process.take() {
                    let _ = p.child.start_kill();
                    let _ = p.child.wait().await;
                    p.view.lock().unwrap().killed = true;
                }
            }
            Fault::Expire => {
                let m = world.members.remove(victim);
                common::expire(&m.member.client, &m.proxy).await;
                m.member.partitioner.finish().await;
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
            Fault::PauseServer => what = world.pause().await.unwrap_or_else(|failure| panic!("{}", failed(failure))),
            Fault::Churn => {
                for _ in 0..3 {
                    let extra = world.member().await;
                    tokio::time::sleep(TIME_BOUNDARY / 2).await; // the churn period itself
                    extra.member.partitioner.finish().await;
                }
            }
        }
        let down = fault_started.elapsed();
        let recovery = world.recover(&observer, Some(fault)).await;
        let checked = window.close();
        let (took, replaced_by) = recovery.unwrap_or_else(|failure| panic!("{}", failed(failure)));
        // After a restart that sessions did not survive, the bound counts from the last replacement's join, or from
        // the failed sessions' expiry (the restarted server restores them with a full timeout) if later: a member
        // cannot converge before it exists, and a client learns that its session is gone only after
        // zookeeper-client's reconnection back-off, or at its own deadline (7/5 of the session timeout).
        let bounded = match replaced_by {
            Some(replaced_by) if fault == Fault::RestartServer => took.saturating_sub(replaced_by.max(SESSION)),
            // Sessions that survived reconnect after zookeeper-client's back-off, which doubles while the server is
            // down: its next attempt comes at most as long after the server serves as the server was down.
            None if fault == Fault::RestartServer => took.saturating_sub(down),
            _ => took,
        };
        let checks = world.checker.checks();
        eprintln!(
            "round {round:4}: {fault:?}{}{what} recovered in {took:.2?} (so far: {} claims checked, {} of the worker \
             process's; {} violations)",
            if what.is_empty() { "" } else { ": " },
            checks.total.claims_checked,
            checks.total.external_claims_checked,
            checks.violations.len()
        );
        assert!(checks.violations.is_empty(), "{}", failed(format!("safety violations: {:#?}", checks.violations)));
        if let Some((path, file)) = &mut json {
            let line = serde_json::json!({
                "seed": seed,
                "faults": faults,
                "round": round,
                "fault": format!("{fault:?}"),
                "recovery_s": (took.as_secs_f64() * 1e6).round() / 1e6,
                "bound_s": liveness_bound().as_secs_f64(),
            });
            writeln!(file, "{line}").unwrap_or_else(|e| panic!("CHAOS_JSON {}: {e}", path.display()));
        }
        recoveries.entry(fault).or_default().push(took);
        assert!(
            bounded <= bound,
            "{}",
            failed(format!(
                "recovered in {bounded:.2?}, over the liveness bound {bound:.2?} (session timeout + time_boundary + 2 \
                 s{})",
                match (fault, replaced_by) {
                    (Fault::RestartServer, Some(_)) => {
                        ", counted from the last failed member's replacement and the failed sessions' expiry"
                    }
                    (Fault::RestartServer, None) =>
                        ", counted from the server serving again plus the client's back-off",
                    _ => "",
                }
            ))
        );
        // The checker compared claims while the fault was under way, and checked them against the locks where
        // ZooKeeper answers for a while with members listing (a session expiring, a process's session lingering, a
        // cut). During a pause or a restart nothing can be read, and once ZooKeeper answers again the members list
        // nothing until they have recovered, when the window closes: there the comparison is the check.
        let against_locks = matches!(fault, Fault::Expire | Fault::KillProcess | Fault::ShortCut);
        assert!(
            checked.exclusive_claims > 0 && (!against_locks || checked.claims_checked > 0),
            "{}",
            failed(format!(
                "between the fault's start and its recovery the safety checker compared {} claims against each other \
                 and checked {} against the locks: {checked:?}",
                checked.exclusive_claims, checked.claims_checked
            ))
        );
    }

    let checks = world.checker.assert_safe_during_faults(10 * faults as u64).await;
    eprintln!(
        "\nchaos summary: seed {seed}, {faults} faults, liveness bound {:.1?} (session + time_boundary + 2 s)",
        liveness_bound()
    );
    eprintln!("| fault | count | median recovery | worst recovery | over the bound |");
    eprintln!("|---|---:|---:|---:|---:|");
    let mut all = Vec::new();
    for (fault, mut times) in recoveries {
        times.sort();
        let over = times.iter().filter(|t| **t > bound).count();
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
            all.iter().filter(|t| **t > bound).count()
        );
    }
    eprintln!(
        "safety: {} samples, {} claims checked against the locks ({} during faults, {} of them the worker process's), \
         {} checked against each other ({} during faults), {} unreadable samples, {} violations",
        checks.total.samples,
        checks.total.claims_checked,
        checks.during_faults.claims_checked,
        checks.during_faults.external_claims_checked,
        checks.total.exclusive_claims,
        checks.during_faults.exclusive_claims,
        checks.total.unreadable,
        checks.violations.len()
    );
    assert!(
        checks.during_faults.external_claims_checked > 0,
        "the worker process's claims were never checked during the faults: {checks:?}"
    );
}
