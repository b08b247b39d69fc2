//! A 3-server ZooKeeper ensemble owned by one test.

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use testcontainers::{ContainerAsync, GenericImage};

use super::docker::{HostPort, Spec, base_env, docker_name, log_tail, start_container};
use super::image::ensure_image;
use super::standalone::probe_session;
use super::{Cluster, server_mode, timing, wait_for};

/// How long the ensemble may take to serve after its containers started, and a restarted server to rejoin.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// Three servers (ids 1, 2, 3; hostnames `zk1`..`zk3`) on their own Docker network, each client port on a fixed
/// host port of 127.0.0.1 so a stopped and restarted server is back at the same endpoint. Servers are addressed by
/// their ZooKeeper id, `1..=3`. Dropping the ensemble removes its containers and then its network.
///
/// Methods taking a server id panic if it is not in `1..=3`; the others panic, naming the server, when Docker
/// refuses (as test set-up should).
pub struct Ensemble {
    network: String,
    nodes: Vec<Node>,
}

struct Node {
    container: ContainerAsync<GenericImage>,
    name: String,
    addr: SocketAddr,
}

impl std::fmt::Debug for Ensemble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ensemble")
            .field("network", &self.network)
            .field("servers", &self.nodes.iter().map(|node| (&node.name, node.addr)).collect::<Vec<_>>())
            .finish()
    }
}

impl Ensemble {
    /// The number of servers.
    pub const SIZE: usize = 3;

    /// Starts the three servers and waits until each reports `Mode: leader` or `Mode: follower` and a session works
    /// through [`connect_string`](Self::connect_string).
    ///
    /// # Panics
    /// With the cause and the servers' last log lines if the ensemble does not serve within 60 s.
    pub async fn launch() -> Ensemble {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        if let Err(err) = ensure_image().await {
            panic!("{err}");
        }
        let started_at = Instant::now();
        let role = format!("ens{}", COUNT.fetch_add(1, Ordering::Relaxed));
        let network = docker_name(&role);
        let names: Vec<String> = Self::all_ids().map(|id| docker_name(&format!("{role}-zk{id}"))).collect();
        // The official image's format. Peers are addressed by container name, which Docker's DNS always resolves
        // on a user-defined network (a bare hostname only on some engine versions).
        let servers = Self::all_ids()
            .map(|id| format!("server.{id}={}:2888:3888;2181", names[id - 1]))
            .collect::<Vec<_>>()
            .join(" ");
        let starts = Self::all_ids().map(|id| {
            let mut env = base_env();
            env.extend([
                ("ZOO_MY_ID", id.to_string()),
                ("ZOO_SERVERS", servers.clone()),
                // In ticks of 200 ms: 5 s for a follower to sync with a new leader, 1 s of silence before a
                // follower gives up on its leader (a paused leader is noticed after about that).
                ("ZOO_INIT_LIMIT", "25".to_string()),
                ("ZOO_SYNC_LIMIT", "5".to_string()),
                // Re-resolve peers at once when a restarted container comes back (the JVM caches lookups 30 s).
                ("SERVER_JVMFLAGS", "-Dsun.net.inetaddr.ttl=1 -Dsun.net.inetaddr.negative.ttl=0".to_string()),
            ]);
            let hostname = format!("zk{id}");
            let network = network.clone();
            let node_role = format!("{role}-zk{id}");
            async move {
                let spec = Spec {
                    role: node_role,
                    env,
                    host_port: HostPort::Fixed,
                    network: Some(&network),
                    hostname: Some(&hostname),
                    tls: None,
                };
                start_container(spec).await
            }
        });
        let mut nodes = Vec::new();
        let mut errors = Vec::new();
        for result in futures::future::join_all(starts).await {
            match result {
                Ok(started) => nodes.push(Node {
                    container: started.container,
                    name: started.name,
                    addr: SocketAddr::from((Ipv4Addr::LOCALHOST, started.port)),
                }),
                Err(err) => errors.push(err),
            }
        }
        if !errors.is_empty() {
            panic!("cannot start the ensemble: {}", errors.join("; "));
        }
        let ensemble = Ensemble { network, nodes };
        let containers_in = started_at.elapsed();
        ensemble.wait_all_serving().await;
        let serving_in = started_at.elapsed();
        if let Err(err) = probe_session(&ensemble.connect_string(), timing(READY_DEADLINE)).await {
            panic!("the ensemble serves but a session through {} fails: {err}", ensemble.connect_string());
        }
        tracing::info!(
            "ensemble {} serving: containers started in {containers_in:.2?}, all serving after {serving_in:.2?}, \
             session works after {:.2?}",
            ensemble.network,
            started_at.elapsed()
        );
        ensemble
    }

    fn all_ids() -> RangeInclusive<usize> {
        1..=Self::SIZE
    }

    /// The server ids, `1..=3`.
    pub fn ids(&self) -> RangeInclusive<usize> {
        Self::all_ids()
    }

    fn node(&self, id: usize) -> &Node {
        assert!(Self::all_ids().contains(&id), "no ZooKeeper server {id} in a 3-server ensemble (ids are 1..=3)");
        &self.nodes[id - 1]
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn connect_string(&self) -> String {
        self.nodes.iter().map(|node| node.addr.to_string()).collect::<Vec<_>>().join(",")
    }

    /// Server `id`'s client endpoint `127.0.0.1:PORT`, the same for the ensemble's whole life.
    pub fn endpoint(&self, id: usize) -> String {
        self.node(id).addr.to_string()
    }

    /// The same as a socket address.
    pub fn addr(&self, id: usize) -> SocketAddr {
        self.node(id).addr
    }

    /// Server `id`'s container name, for `docker logs`.
    pub fn container_name(&self, id: usize) -> &str {
        &self.node(id).name
    }

    /// The ensemble's Docker network.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// What server `id` says it is (`leader` or `follower`), or why it is not serving.
    pub async fn mode(&self, id: usize) -> Result<String, String> {
        server_mode(self.node(id).addr).await
    }

    /// The id of the server that reports `Mode: leader`, waiting (up to 30 s, scaled) for an election to finish.
    pub async fn leader(&self) -> usize {
        wait_for("the ensemble to have a leader", timing(Duration::from_secs(30)), || async {
            let modes = futures::future::join_all(self.ids().map(|id| self.mode(id))).await;
            match modes.iter().position(|mode| mode.as_deref() == Ok("leader")) {
                Some(index) => Ok(index + 1),
                None => Err(summarize(&modes)),
            }
        })
        .await
    }

    /// Stops server `id` (SIGTERM, SIGKILL after 5 s).
    pub async fn stop(&self, id: usize) {
        let node = self.node(id);
        node.container
            .stop_with_timeout(Some(5))
            .await
            .unwrap_or_else(|err| panic!("cannot stop ZooKeeper server {id} ({}): {err}", node.name));
    }

    /// Starts the stopped server `id` again (same container and data, same endpoint) and waits until it serves.
    pub async fn start(&self, id: usize) {
        let node = self.node(id);
        node.container.start().await.unwrap_or_else(|err| {
            panic!("cannot restart ZooKeeper server {id} ({}; was host port {} taken?): {err}", node.name, node.addr)
        });
        self.wait_serving(id).await;
    }

    /// Freezes server `id`: its connections stay open but it answers nothing (peers notice after about 1 s).
    pub async fn pause(&self, id: usize) {
        let node = self.node(id);
        node.container.pause().await.unwrap_or_else(|err| panic!("cannot pause {}: {err}", node.name));
    }

    /// Resumes a paused server (it may need an election round before it serves again: see
    /// [`wait_serving`](Self::wait_serving)).
    pub async fn unpause(&self, id: usize) {
        let node = self.node(id);
        node.container.unpause().await.unwrap_or_else(|err| panic!("cannot unpause {}: {err}", node.name));
    }

    /// Waits (up to 60 s, scaled) until server `id` reports `Mode: leader` or `Mode: follower`.
    pub async fn wait_serving(&self, id: usize) {
        let node = self.node(id);
        let what = format!("ZooKeeper server {id} ({}) to serve", node.name);
        wait_for(&what, timing(READY_DEADLINE), || async {
            match server_mode(node.addr).await?.as_str() {
                "leader" | "follower" => Ok(()),
                other => Err(format!("mode {other}")),
            }
        })
        .await;
    }

    async fn wait_all_serving(&self) {
        let deadline = timing(READY_DEADLINE);
        let started = Instant::now();
        let mut last = Vec::new();
        while started.elapsed() < deadline {
            last = futures::future::join_all(self.ids().map(|id| self.mode(id))).await;
            if last.iter().all(|mode| matches!(mode.as_deref(), Ok("leader" | "follower"))) {
                return;
            }
            tokio::time::sleep(super::POLL).await;
        }
        let mut logs = String::new();
        for (node, mode) in self.nodes.iter().zip(&last) {
            if mode.is_err() {
                logs += &format!("\n--- last lines of {}:\n{}", node.name, log_tail(&node.container, 15).await);
            }
        }
        panic!(
            "the ensemble on network {} did not serve within {deadline:?}: {}; see `docker logs <container>` \
             (removed with the ensemble; last lines below){logs}",
            self.network,
            summarize(&last)
        );
    }
}

impl Cluster for Ensemble {
    fn connect_string(&self) -> String {
        Ensemble::connect_string(self)
    }
}

fn summarize(modes: &[Result<String, String>]) -> String {
    modes
        .iter()
        .enumerate()
        .map(|(index, mode)| match mode {
            Ok(mode) => format!("server {} is {mode}", index + 1),
            Err(err) => format!("server {}: {err}", index + 1),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
