//! Recovery after a ZooKeeper server restart that the sessions survive, with zookeeper-client's own reconnection
//! (`zk_partitioner::connect` adds nothing to it). The client retries a lost connection after 0.1 s and then waits
//! twice as long each time, so while no server serves, its next attempt drifts up to as far after a server's return
//! as the servers were away from it. The bound is that back-off plus 1 s: through a rolling restart of a 3-server
//! ensemble (each server in turn; after the leader's stop the others serve nobody until they have elected a new one),
//! and on a single server stopped for 2 s and for 4 s. RELIABILITY.md ("Reconnection after a server restart") has the
//! figures.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::faults::{Opts, SafetyChecker, member_at, sessions_on, wait_converged};
use common::members::{AbortOnDrop, Member, auto_release, ints};
use common::{Ensemble, OwnedServer, connect, namespace, timing};
use zk_partitioner::zookeeper_client::{Client, SessionState};
use zk_partitioner::{Item, PartitionState};
use zk_partitioner_testing::server_mode;

/// The bound: from a server accepting connections again to every member `ACQUIRED` again, beyond the client's
/// back-off (as long as the servers were away from the member's connection).
const BOUND: Duration = Duration::from_secs(1);

/// The members' session timeout: long enough to outlive every outage here.
const SESSION: Duration = Duration::from_secs(20);

/// The configuration: members debounce party changes for 0.5 s.
const TIME_BOUNDARY: Duration = Duration::from_millis(500);

fn opts() -> Opts {
    Opts { session: SESSION, time_boundary: TIME_BOUNDARY, ..Opts::default() }
}

#[tokio::test]
async fn members_keep_their_sessions_through_a_single_server_restart_and_are_back_within_the_back_off() {
    // given: a server of our own and three members over 30 items, settled
    common::init_tracing();
    let server = OwnedServer::launch().await;
    let ns = namespace(&server).await;
    let party = Party::settle(&format!("{}{ns}", server.endpoint()), &["a", "b", "c"], 30).await;
    let members = party.members();

    for outage in [Duration::from_secs(2), Duration::from_secs(4)] {
        // when: the server stops, stays down for the outage, and starts again
        let watch = Losses::watch(&members);
        server.stop().await;
        watch.wait_lost(&[true, true, true], timing(Duration::from_secs(10))).await;
        tokio::time::sleep(outage).await;
        let deadline = timing(Duration::from_secs(30));
        let (back, (), recovered) =
            tokio::join!(serving_at(vec![server.addr()]), server.start(), watch.wait_recovered(&members, deadline));

        // then: every member is ACQUIRED again, on the session it had, within the client's back-off plus the bound.
        // zookeeper-client retries a lost connection after 0.1 s, then waits twice as long each time, so its first
        // attempt after the server's return comes at most as long after it as the server was away from the session.
        let took = recovered.saturating_duration_since(back);
        let away = back.saturating_duration_since(watch.first_loss().expect("every member lost its connection"));
        eprintln!(
            "[restart] down {outage:?}: every member ACQUIRED again {took:.2?} after the server served again \
             ({away:.2?} after the connection was lost)"
        );
        assert!(
            took <= away + timing(BOUND),
            "down {outage:?}: every member ACQUIRED again only {took:?} after the server, away {away:?}"
        );
        party.converged_on_the_same_sessions().await;
    }
    party.checker.assert_safe(30).await;
}

#[tokio::test]
async fn a_rolling_restart_of_an_ensemble_keeps_recovery_within_the_back_off() {
    // given: a 3-server ensemble and three members on its full connect string, settled
    common::init_tracing();
    let ensemble = Ensemble::launch().await;
    let ns = namespace(&ensemble).await;
    let party = Party::settle(&format!("{}{ns}", ensemble.connect_string()), &["a", "b", "c"], 30).await;
    let addrs: Vec<SocketAddr> = ensemble.ids().map(|id| ensemble.addr(id)).collect();

    let mut leader_stopped = false;
    for id in ensemble.ids() {
        // when: server `id` stops
        let leader = ensemble.leader().await == id;
        let restart = stop_and_measure(&party, &addrs, id, leader, ensemble.stop(id)).await;

        // then: every member that lost its connection is ACQUIRED again, on another server, within the client's
        // back-off plus the bound of the other servers serving (at once after a follower's stop, after the election
        // after the leader's: the back-off has grown meanwhile)
        eprintln!(
            "[restart] ensemble server {id} ({}) stopped: {} member(s) lost their connection; every member \
             ACQUIRED {:.2?} after the other servers served ({:.2?} after the connection was lost)",
            restart.role(),
            restart.lost,
            restart.took,
            restart.away
        );
        assert!(restart.within_bound(), "server {id}: every member ACQUIRED again only {restart:?}");
        // A follower's stop moves no leadership, so the leader is stopped once in the round, and every member must
        // then have lost its connection: the bound was measured on a real recovery at least there.
        if leader {
            assert_eq!(restart.lost, party.members.len(), "the leader's stop cost every member its connection");
            leader_stopped = true;
        }

        // and: the server comes back after 2 s; nothing moves, and the party has converged
        tokio::time::sleep(Duration::from_secs(2)).await;
        ensemble.start(id).await;
        party.converged_on_the_same_sessions().await;
    }
    assert!(leader_stopped, "the round stopped the leader");
    party.checker.assert_safe(30).await;
}

/// The rolling restart of the compose ensemble (`docker compose --profile ensemble`, servers zk1-zk3 on
/// 127.0.0.1:2191-2193), each server stopped for 2 s and started again in turn, `ROLLING_ROUNDS` rounds (3), with
/// five members and the safety checker throughout: RELIABILITY.md's figures ("Rolling restart of the compose
/// ensemble"). `bash bench/rolling.sh` brings the ensemble up, runs this and takes it down; `ROLLING_COMPOSE` is the
/// compose command it uses (e.g. `docker compose -p zkp-rolling --profile ensemble`), `ROLLING_JSON` a file for one
/// JSON line per restart.
#[tokio::test]
#[ignore = "needs the compose ensemble: bash bench/rolling.sh"]
async fn rolling_restart_of_the_compose_ensemble() {
    common::init_tracing();
    let compose = std::env::var("ROLLING_COMPOSE").expect("ROLLING_COMPOSE: run this through bash bench/rolling.sh");
    let rounds: usize = std::env::var("ROLLING_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let addrs: Vec<SocketAddr> = (1..=3).map(|id| SocketAddr::from(([127, 0, 0, 1], 2190 + id))).collect();
    let cluster = addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let ns = namespace(&cluster).await;
    let party = Party::settle(&format!("{cluster}{ns}"), &["a", "b", "c", "d", "e"], 60).await;
    let mut json = std::env::var_os("ROLLING_JSON").map(|path| std::fs::File::create(path).expect("ROLLING_JSON"));
    let mut recoveries = Vec::new();
    for round in 0..rounds {
        for id in 1..=3 {
            let addr = addrs[id - 1];
            let leader = server_mode(addr).await.is_ok_and(|mode| mode == "leader");
            let restart = stop_and_measure(&party, &addrs, id, leader, compose_run(&compose, "stop", id)).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            compose_run(&compose, "start", id).await;
            let started = Instant::now();
            serving_at(vec![addr]).await;
            party.converged_on_the_same_sessions().await;
            let converged = started.elapsed();
            let role = restart.role();
            let checks = party.checker.checks();
            eprintln!(
                "[rolling] round {round}, zk{id} ({role}): {} member(s) lost their connection, every member ACQUIRED \
                 {:.2?} after another server served; converged {:.2?} after zk{id} started ({} claims checked, \
                 {} violations)",
                restart.lost,
                restart.took,
                converged,
                checks.total.claims_checked,
                checks.violations.len()
            );
            if let Some(file) = &mut json {
                use std::io::Write;
                let line = format!(
                    "{{\"round\":{round},\"server\":\"zk{id}\",\"role\":\"{role}\",\"lost\":{},\"members\":{},\
                     \"recovery_s\":{:.3},\"away_s\":{:.3},\"bound_s\":{:.3}}}",
                    restart.lost,
                    party.members.len(),
                    restart.took.as_secs_f64(),
                    restart.away.as_secs_f64(),
                    (restart.away + BOUND).as_secs_f64()
                );
                writeln!(file, "{line}").expect("ROLLING_JSON");
            }
            recoveries.push(restart);
        }
    }
    let checks = party.checker.assert_safe(60).await;
    let mut times: Vec<Duration> = recoveries.iter().map(|restart| restart.took).collect();
    times.sort();
    eprintln!(
        "[rolling] {} restarts ({} of the leader): median recovery {:.2?}, worst {:.2?}, over {BOUND:?}: {}; safety \
         samples {}, claims checked {}, unreadable samples {}, violations {}",
        times.len(),
        recoveries.iter().filter(|restart| restart.leader).count(),
        times[times.len() / 2],
        times[times.len() - 1],
        times.iter().filter(|took| **took > BOUND).count(),
        checks.total.samples,
        checks.total.claims_checked,
        checks.total.unreadable,
        checks.violations.len()
    );
    assert!(
        recoveries.iter().all(Restart::within_bound),
        "recoveries over the back-off plus {BOUND:?}: {recoveries:?}"
    );
}

/// Runs `<compose> <verb> zk<id>` (the compose command is split on spaces).
async fn compose_run(compose: &str, verb: &str, id: usize) {
    let mut words = compose.split_whitespace();
    let program = words.next().expect("ROLLING_COMPOSE is empty");
    let status = tokio::process::Command::new(program)
        .args(words)
        .args([verb, &format!("zk{id}")])
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .unwrap_or_else(|err| panic!("{compose} {verb} zk{id}: {err}"));
    assert!(status.success(), "{compose} {verb} zk{id}: {status}");
}

/// Members on one connect string, each with its worker loop, an observer session and the safety checker.
struct Party {
    members: Vec<Member>,
    _workers: Vec<AbortOnDrop>,
    items: Vec<Item>,
    sessions: Vec<i64>,
    observer: Client,
    checker: SafetyChecker,
}

impl Party {
    /// Members named `names` on `connect_string` over `items` items, settled (every one `ACQUIRED`, a disjoint cover).
    async fn settle(connect_string: &str, names: &[&str], items: i64) -> Party {
        let items = ints(items);
        let mut members = Vec::new();
        for name in names {
            members.push(member_at(connect_string, name, &items, &opts()).await);
        }
        let workers = members.iter().map(|m| auto_release(&m.partitioner)).collect();
        let observer = connect(connect_string, SESSION).await;
        let checker = SafetyChecker::start(observer.clone(), &items, &members.iter().collect::<Vec<_>>());
        let sessions = members.iter().map(Member::session).collect();
        let party = Party { members, _workers: workers, items, sessions, observer, checker };
        party.converged_on_the_same_sessions().await;
        party
    }

    fn members(&self) -> Vec<&Member> {
        self.members.iter().collect()
    }

    /// Waits until the party has converged, and checks that every member kept its session.
    async fn converged_on_the_same_sessions(&self) {
        let deadline = timing(Duration::from_secs(30));
        wait_converged("the party", &self.observer, &self.members(), &self.items, deadline).await;
        let sessions: Vec<i64> = self.members.iter().map(Member::session).collect();
        assert_eq!(sessions, self.sessions, "the sessions survived");
    }
}

/// One server of an ensemble stopped: its role, how many members lost their connection, how long after the later of
/// the first loss and the other servers serving every member was `ACQUIRED` again (zero if none lost it), and how
/// long the other servers were away from the first loss (zero when they served throughout).
#[derive(Debug)]
struct Restart {
    leader: bool,
    lost: usize,
    took: Duration,
    away: Duration,
}

impl Restart {
    /// Within the client's back-off (as long as the servers were away) plus the bound.
    fn within_bound(&self) -> bool {
        self.took <= self.away + timing(BOUND)
    }

    fn role(&self) -> &'static str {
        if self.leader { "leader" } else { "follower" }
    }
}

/// Stops server `id` of the ensemble at `addrs` with `stop`, and measures the party's recovery. The members on it
/// lose their connection, and so do all of them if it is the `leader` (its followers drop their clients until they
/// have elected a new one).
async fn stop_and_measure(party: &Party, addrs: &[SocketAddr], id: usize, leader: bool, stop: impl Future) -> Restart {
    let members = party.members();
    let on_it = sessions_on(addrs[id - 1]).await.expect("cons");
    let expect_lost: Vec<bool> = members.iter().map(|m| leader || on_it.contains(&m.session())).collect();
    let others: Vec<SocketAddr> = addrs.iter().copied().filter(|&other| other != addrs[id - 1]).collect();
    let serving = Serving::track(others);
    let watch = Losses::watch(&members);
    stop.await;
    watch.wait_lost(&expect_lost, timing(Duration::from_secs(10))).await;
    let recovered = watch.wait_recovered(&members, timing(Duration::from_secs(30))).await;
    let back = serving.since().await;
    let (took, away) = watch.first_loss().map_or((Duration::ZERO, Duration::ZERO), |lost| {
        (recovered.saturating_duration_since(back.max(lost)), back.saturating_duration_since(lost))
    });
    Restart { leader, lost: watch.lost(), took, away }
}

/// The first moment at which one of `addrs` answers `srvr` as serving (polled every 5 ms, so that the bound is
/// measured from the server's return, not from a coarse poll).
async fn serving_at(addrs: Vec<SocketAddr>) -> Instant {
    let deadline = Instant::now() + timing(Duration::from_secs(60));
    loop {
        for &addr in &addrs {
            if let Ok(mode) = server_mode(addr).await
                && ["standalone", "leader", "follower"].contains(&mode.as_str())
            {
                return Instant::now();
            }
        }
        assert!(Instant::now() < deadline, "no server of {addrs:?} served within 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Which members lost their connection since [`watch`](Self::watch), as their clients report it, and the generation
/// of each one's snapshot at that moment.
struct Losses {
    lost: Vec<tokio::sync::watch::Receiver<Option<(u64, Instant)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Losses {
    fn watch(members: &[&Member]) -> Losses {
        let (lost, tasks) = members
            .iter()
            .map(|member| {
                let (tx, rx) = tokio::sync::watch::channel(None);
                let mut states = member.client.state_watcher();
                let partitioner = member.partitioner.clone();
                let task = tokio::spawn(async move {
                    while states.changed().await == SessionState::SyncConnected {}
                    let _ = tx.send(Some((partitioner.snapshot().generation, Instant::now())));
                });
                (rx, task)
            })
            .unzip();
        Losses { lost, tasks }
    }

    fn lost(&self) -> usize {
        self.lost.iter().filter(|lost| lost.borrow().is_some()).count()
    }

    /// When the first member lost its connection, if one did.
    fn first_loss(&self) -> Option<Instant> {
        self.lost.iter().filter_map(|lost| lost.borrow().map(|(_, at)| at)).min()
    }

    /// Waits until every member marked in `expected` has lost its connection.
    async fn wait_lost(&self, expected: &[bool], deadline: Duration) {
        let started = Instant::now();
        while !self.lost.iter().zip(expected).all(|(lost, &expected)| !expected || lost.borrow().is_some()) {
            assert!(started.elapsed() < deadline, "only {} member(s) saw the server stop", self.lost());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until every member is connected and `ACQUIRED`, those that lost their connection in a snapshot
    /// published after the loss; returns when.
    async fn wait_recovered(&self, members: &[&Member], deadline: Duration) -> Instant {
        let started = Instant::now();
        loop {
            let recovered = members.iter().zip(&self.lost).all(|(member, lost)| {
                let snapshot = member.partitioner.snapshot();
                let connected = member.client.state() == SessionState::SyncConnected;
                let after_loss = lost.borrow().is_none_or(|(at_loss, _)| snapshot.generation > at_loss);
                connected && snapshot.state == PartitionState::Acquired && after_loss
            });
            if recovered {
                return Instant::now();
            }
            assert!(
                started.elapsed() < deadline,
                "not every member ACQUIRED again within {deadline:?}: {:?}",
                members.iter().map(|m| m.partitioner.snapshot()).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// When some server of a set last started serving: polled every 5 ms from [`track`](Self::track) on, the end of
/// the last gap in which none served (or the start, if one served all along).
struct Serving {
    since: tokio::sync::watch::Receiver<Option<Instant>>,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    fn track(addrs: Vec<SocketAddr>) -> Serving {
        let (tx, since) = tokio::sync::watch::channel(None);
        let task = tokio::spawn(async move {
            let mut was_serving = false;
            loop {
                let mut serving = false;
                for &addr in &addrs {
                    if let Ok(mode) = server_mode(addr).await
                        && ["standalone", "leader", "follower"].contains(&mode.as_str())
                    {
                        serving = true;
                        break;
                    }
                }
                if serving && !was_serving {
                    let _ = tx.send(Some(Instant::now()));
                }
                was_serving = serving;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Serving { since, task }
    }

    /// The end of the last gap so far, waiting for one if no server serves yet.
    async fn since(mut self) -> Instant {
        let since = self.since.wait_for(Option::is_some).await.expect("the serving tracker stopped");
        (*since).expect("checked by wait_for")
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Drop for Losses {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}
