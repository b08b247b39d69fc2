//! Reconnection after a server restart (RELIABILITY.md, "Reconnection after a server restart"): how long sessions
//! that survive a restart take to be connected again, and their members `ACQUIRED` again, after the server accepts
//! connections again, with zookeeper-client's own reconnection (the crate's `connect` adds nothing to it).
//!
//! ```text
//! cargo bench --bench reconnect -- --server container|process|ensemble [--outages 1,2,4,6] [--runs 3]
//!     [--session 20] [--time-boundary 0.5]
//! ```
//!
//! Each run has two sessions on the same server, both with a partitioner of its own path (6 items,
//! `time_boundary` as given): `direct`, a bare zookeeper-client session (`Client::connector().connect(..)`: the
//! minimal reproduction of the client's back-off), and `connect`, through [`zk_partitioner::connection::connect_with_options`], as
//! a worker opens its session. The server is stopped, kept down for the outage, and started again (`container`: the test kit's
//! container, `docker stop`/`start`; `process`: ZooKeeper as a plain Java process from Debian's libzookeeper-java,
//! SIGKILL and a new process on the same port and data; `ensemble`: the test kit's 3-server ensemble, each server in
//! turn, a rolling restart). The server's return is the first `srvr` that answers as serving, polled every 5 ms;
//! in the ensemble, the first moment after the connection loss at which some server that the session can use serves.
//! For each session: the time from that moment to `SyncConnected` (the back-off's cost, and the handshake), and to
//! its member's `ACQUIRED` (plus the member's own reaction: the debounce and the locks).
//!
//! One JSON line per session and restart on stdout. Not a criterion benchmark (`harness = false`): a bare
//! `cargo bench` does nothing here.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_partitioner::zookeeper_client::{Client, SessionState};
use zk_partitioner::{Item, PartitionState, SetPartitioner, connection::ConnectOptions};
use zk_partitioner_testing::{Ensemble, OwnedServer, server_mode};

struct Args {
    server: String,
    outages: Vec<f64>,
    runs: usize,
    session: Duration,
    time_boundary: Duration,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench" && a != "--test").peekable();
    if args.peek().is_none() {
        return Ok(None);
    }
    let mut parsed = Args {
        server: "container".into(),
        outages: vec![1.0, 2.0, 4.0, 6.0],
        runs: 3,
        session: Duration::from_secs(20),
        time_boundary: Duration::from_millis(500),
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|_| format!("{flag}: {v:?} is not a number"));
        match flag.as_str() {
            "--server" => parsed.server = value,
            "--outages" => parsed.outages = value.split(',').map(number).collect::<Result<_, _>>()?,
            "--runs" => parsed.runs = number(&value)? as usize,
            "--session" => parsed.session = Duration::from_secs_f64(number(&value)?),
            "--time-boundary" => parsed.time_boundary = Duration::from_secs_f64(number(&value)?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if !["container", "process", "ensemble"].contains(&parsed.server.as_str()) {
        return Err(format!("--server {}: container, process or ensemble", parsed.server));
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("reconnect bench: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("reconnect bench: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("reconnect bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The server under test, whichever way it runs.
enum Server {
    Container(Box<OwnedServer>),
    Process(JavaServer),
    Ensemble(Ensemble),
}

impl Server {
    fn connect_string(&self) -> String {
        match self {
            Server::Container(server) => server.connect_string(),
            Server::Process(server) => server.addr.to_string(),
            Server::Ensemble(ensemble) => ensemble.connect_string(),
        }
    }

    /// The servers to restart in one round: one, or each of the ensemble's in turn.
    fn ids(&self) -> Vec<usize> {
        match self {
            Server::Ensemble(ensemble) => ensemble.ids().collect(),
            _ => vec![1],
        }
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        match self {
            Server::Container(server) => vec![server.addr()],
            Server::Process(server) => vec![server.addr],
            Server::Ensemble(ensemble) => ensemble.ids().map(|id| ensemble.addr(id)).collect(),
        }
    }

    async fn stop(&mut self, id: usize) -> Result<(), String> {
        match self {
            Server::Container(server) => server.stop().await,
            Server::Process(server) => server.kill()?,
            Server::Ensemble(ensemble) => ensemble.stop(id).await,
        }
        Ok(())
    }

    /// Starts server `id` again, without waiting for it to serve (the caller watches for that).
    async fn start(&mut self, id: usize) -> Result<(), String> {
        match self {
            Server::Container(server) => server.start().await,
            Server::Process(server) => server.spawn()?,
            Server::Ensemble(ensemble) => ensemble.start(id).await,
        }
        Ok(())
    }
}

/// ZooKeeper as a plain Java process (Debian's libzookeeper-java), restarted on the same port and data.
struct JavaServer {
    addr: SocketAddr,
    config: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl JavaServer {
    fn launch(session: Duration) -> Result<JavaServer, String> {
        let jar = "/usr/share/java/zookeeper.jar";
        if !std::path::Path::new(jar).exists() {
            return Err(format!("--server process needs {jar} (apt-get install libzookeeper-java)"));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("zkp-reconnect-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = dir.join("zoo.cfg");
        let max_session = (session.as_millis() * 2).max(60_000);
        let text = format!(
            "dataDir={}\ntickTime=200\nmaxSessionTimeout={max_session}\nmaxClientCnxns=0\nadmin.enableServer=false\n\
             4lw.commands.whitelist=*\nclientPort={port}\nclientPortAddress=127.0.0.1\n",
            dir.join("data").display()
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let mut server = JavaServer { addr: SocketAddr::from(([127, 0, 0, 1], port)), config, child: None };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = std::process::Command::new("java")
            .args(["-Xmx256m", "-cp", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&self.config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start java: {e}"))?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            child.kill().map_err(|e| format!("cannot kill ZooKeeper: {e}"))?;
            let _ = child.wait();
        }
        Ok(())
    }
}

impl Drop for JavaServer {
    fn drop(&mut self) {
        let _ = self.kill();
        if let Some(dir) = self.config.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One session and its member.
struct Session {
    mode: &'static str,
    client: Client,
    partitioner: SetPartitioner,
}

async fn run(args: Args) -> Result<(), String> {
    let mut server = match args.server.as_str() {
        "container" => Server::Container(Box::new(OwnedServer::launch().await)),
        "process" => Server::Process(JavaServer::launch(args.session)?),
        _ => Server::Ensemble(Ensemble::launch().await),
    };
    wait_any_serving(&server.addrs(), Duration::from_secs(60)).await.ok_or("the server did not start")?;
    let cluster = server.connect_string();
    let connector = || Client::connector().with_session_timeout(args.session);
    let direct = connector().connect(&cluster).await.map_err(|e| format!("direct session: {e}"))?;
    let connected = zk_partitioner::connection::connect_with_options(connector(), &cluster, ConnectOptions::new())
        .await
        .map_err(|e| format!("connect session: {e}"))?;
    let items: Vec<Item> = (0..6).map(Item::from).collect();
    let mut sessions = Vec::new();
    for (mode, client) in [("direct", direct), ("connect", connected)] {
        let path = format!("/bench/reconnect/{}/{mode}", std::process::id());
        let partitioner = SetPartitioner::builder(client.clone(), path, items.clone())
            .time_boundary(args.time_boundary)
            .build()
            .await
            .map_err(|e| format!("{mode} member: {e}"))?;
        release_when_told(&partitioner);
        let state = partitioner.wait_for_acquire(Duration::from_secs(30)).await;
        if state != PartitionState::Acquired {
            return Err(format!("{mode} member not ACQUIRED: {state:?}"));
        }
        sessions.push(Arc::new(Session { mode, client, partitioner }));
    }
    let started = Instant::now();
    for run in 0..args.runs {
        for &outage in &args.outages {
            for id in server.ids() {
                restart(&mut server, id, run, outage, &sessions, &args).await?;
            }
        }
    }
    eprintln!("reconnect bench: done in {:.0?}", started.elapsed());
    for session in &sessions {
        let _ = session.partitioner.finish().await;
    }
    Ok(())
}

/// Restarts server `id` once and prints a line per session.
async fn restart(
    server: &mut Server,
    id: usize,
    run: usize,
    outage: f64,
    sessions: &[Arc<Session>],
    args: &Args,
) -> Result<(), String> {
    let generations: Vec<u64> = sessions.iter().map(|s| s.partitioner.snapshot().generation).collect();
    let watchers: Vec<_> = sessions
        .iter()
        .map(|session| {
            let session = session.clone();
            let deadline = args.session * 3;
            tokio::spawn(async move { follow(&session, deadline).await })
        })
        .collect();
    let addrs = server.addrs();
    let others: Vec<SocketAddr> = addrs.iter().enumerate().filter(|(i, _)| i + 1 != id).map(|(_, a)| *a).collect();
    let restarted = addrs[id - 1];
    let stopped_at = Instant::now();
    server.stop(id).await?;
    // In the ensemble, the first moment after the stop at which another server serves (at once after a follower's
    // stop, after the election after the leader's).
    let others_serving = {
        let others = others.clone();
        tokio::spawn(async move {
            if others.is_empty() { None } else { wait_any_serving(&others, Duration::from_secs(60)).await }
        })
    };
    tokio::time::sleep(Duration::from_secs_f64(outage)).await;
    let serving = tokio::spawn(async move { wait_any_serving(&[restarted], Duration::from_secs(60)).await });
    let started_at = Instant::now();
    server.start(id).await?;
    let serving_at = serving.await.map_err(|e| e.to_string())?.ok_or("the server did not serve again")?;
    let others_serving_at = others_serving.await.map_err(|e| e.to_string())?;
    for ((session, watcher), generation) in sessions.iter().zip(watchers).zip(generations) {
        let timeline = watcher.await.map_err(|e| e.to_string())?;
        let Some(lost_at) = timeline.lost else {
            // The session was on another server of the ensemble: nothing to measure.
            continue;
        };
        // In the ensemble, a session that lost its server may use any other that serves: its "server back" is the
        // first moment after the loss at which one did (the others all along, unless the leader was stopped).
        let back_at = match others_serving_at {
            Some(at) => at.max(lost_at).min(serving_at),
            None => serving_at,
        };
        let ms = |at: Option<Instant>| at.map(|at| at.saturating_duration_since(back_at).as_secs_f64() * 1000.0);
        let snapshot = session.partitioner.snapshot();
        println!(
            "{{\"server\":\"{}\",\"restarted\":{id},\"run\":{run},\"outage_s\":{outage},\"mode\":\"{}\",\
             \"session_timeout_s\":{},\"time_boundary_s\":{},\"down_ms\":{:.0},\"starting_ms\":{:.0},\
             \"lost_after_stop_ms\":{:.0},\"connected_after_back_ms\":{},\"acquired_after_back_ms\":{},\
             \"session_kept\":{},\"generation_moved\":{}}}",
            args.server,
            session.mode,
            args.session.as_secs_f64(),
            args.time_boundary.as_secs_f64(),
            serving_at.duration_since(stopped_at).as_secs_f64() * 1000.0,
            serving_at.saturating_duration_since(started_at).as_secs_f64() * 1000.0,
            lost_at.duration_since(stopped_at).as_secs_f64() * 1000.0,
            json_ms(ms(timeline.connected)),
            json_ms(ms(timeline.acquired)),
            session.client.state() == SessionState::SyncConnected,
            snapshot.generation != generation,
        );
    }
    // Settle before the next restart: every member ACQUIRED.
    for session in sessions {
        let state = session.partitioner.wait_for_acquire(args.session * 2).await;
        if state != PartitionState::Acquired {
            return Err(format!("{} member not ACQUIRED again: {state:?}", session.mode));
        }
    }
    Ok(())
}

fn json_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "null".to_string(), |ms| format!("{ms:.0}"))
}

#[derive(Default)]
struct Timeline {
    lost: Option<Instant>,
    connected: Option<Instant>,
    acquired: Option<Instant>,
}

/// The worker's side of `RELEASE`: gives the items up when told, as a worker loop does.
fn release_when_told(partitioner: &SetPartitioner) {
    let mut changes = partitioner.subscribe();
    let partitioner = partitioner.clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let release = changes.borrow_and_update().state == PartitionState::Release;
            if release {
                let _ = partitioner.release_set().await;
            }
        }
    });
}

/// Follows one session through a restart: when its connection was lost, when it was connected again, and when its
/// member was `ACQUIRED` after that; gives up after `deadline` (a session on a server that was not restarted is
/// never lost).
async fn follow(session: &Session, deadline: Duration) -> Timeline {
    let mut timeline = Timeline::default();
    let mut states = session.client.state_watcher();
    let mut changes = session.partitioner.subscribe();
    let give_up = tokio::time::sleep(deadline);
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            () = &mut give_up => return timeline,
            state = states.changed() => match state {
                SessionState::Disconnected if timeline.lost.is_none() => timeline.lost = Some(Instant::now()),
                SessionState::SyncConnected if timeline.lost.is_some() && timeline.connected.is_none() => {
                    timeline.connected = Some(Instant::now());
                }
                state if state.is_terminated() => return timeline,
                _ => {}
            },
            changed = changes.changed() => {
                if changed.is_err() {
                    return timeline;
                }
                let acquired = changes.borrow_and_update().state == PartitionState::Acquired;
                if acquired && timeline.connected.is_some() {
                    timeline.acquired = Some(Instant::now());
                    return timeline;
                }
            }
        }
    }
}

/// The first moment at which one of `addrs` answers `srvr` as serving, polled every 5 ms.
async fn wait_any_serving(addrs: &[SocketAddr], deadline: Duration) -> Option<Instant> {
    let started = Instant::now();
    while started.elapsed() < deadline {
        for &addr in addrs {
            if let Ok(mode) = server_mode(addr).await
                && ["standalone", "leader", "follower"].contains(&mode.as_str())
            {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}
