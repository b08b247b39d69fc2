//! Container start-up, and the watchdog that removes this process' containers and networks once it exits.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use testcontainers::bollard::Docker;
use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::bollard::query_parameters::RemoveContainerOptionsBuilder;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::image::{ImageRef, docker_host, ensure_image};
use super::{random_u64, timing};

/// The label carrying this process' [`token`] on every container the kit starts.
pub(crate) const LABEL: &str = "zk-partitioner.harness";

/// This process' harness token, `<pid>-<8 hex digits>`: in every container's [`LABEL`] and every container and
/// network name (`zkp-<token>-...`).
pub(crate) fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("{}-{:08x}", std::process::id(), random_u64() as u32))
}

/// The Docker name of the harness object `role` (container or network) of this process.
pub(crate) fn docker_name(role: &str) -> String {
    format!("zkp-{}-{role}", token())
}

/// Starts (once per process) a detached `sh` that waits for this process to exit, however it exits, then removes
/// every container labelled with our token and every network named `zkp-<token>-...`.
pub(crate) fn ensure_watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let has_cli = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("docker").is_file()));
        if !has_cli {
            eprintln!(
                "[harness] no `docker` CLI on PATH, so no watchdog: if this test process is killed, remove its \
                 containers with `docker rm -f $(docker ps -aq --filter label={LABEL}={})`",
                token()
            );
            return;
        }
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             ids=$(docker ps -aq --filter label={LABEL}={token}); \
             [ -z \"$ids\" ] || docker rm -f -v $ids >/dev/null 2>&1; \
             nets=$(docker network ls -q --filter name=zkp-{token}-); \
             [ -z \"$nets\" ] || docker network rm $nets >/dev/null 2>&1; true",
            pid = std::process::id(),
            token = token(),
        );
        let spawned = {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0) // not killed with the test process by a Ctrl-C to its process group
                .spawn()
        };
        if let Err(err) = spawned {
            eprintln!(
                "[harness] cannot start the container watchdog ({err}); a killed test process may leave containers"
            );
        }
    });
}

/// Where a container's client port 2181 goes on the host (always on 127.0.0.1).
#[derive(Clone, Copy, Debug)]
pub(crate) enum HostPort {
    /// Any port Docker picks; it changes if the container is stopped and started again.
    Random,
    /// A free port picked now and kept for the container's life, so a restarted server is at the same endpoint.
    Fixed,
}

/// What to start: the ZooKeeper image with `env`, named [`docker_name`]`(role)`.
pub(crate) struct Spec<'a> {
    pub role: String,
    pub env: Vec<(&'static str, String)>,
    pub host_port: HostPort,
    pub network: Option<&'a str>,
    pub hostname: Option<&'a str>,
    /// A TLS client port ([`TLS_PORT`]) besides 2181, with these certificates.
    pub tls: Option<&'a ServerTls>,
}

/// A started ZooKeeper container (not necessarily serving yet) and its host ports for 2181 and, with TLS, 2281.
pub(crate) struct Started {
    pub container: ContainerAsync<GenericImage>,
    pub name: String,
    pub port: u16,
    pub tls_port: Option<u16>,
}

/// The container's TLS client port (`secureClientPort`).
pub(crate) const TLS_PORT: u16 = 2281;

/// The certificates of a test server with a TLS client port: see
/// [`OwnedServer::launch_tls`](super::OwnedServer::launch_tls).
#[derive(Clone, Debug)]
pub struct ServerTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    client_auth: bool,
}

impl ServerTls {
    /// The CA certificates (PEM) the server trusts for client certificates, the server's certificate chain (PEM)
    /// and its unencrypted private key (PEM, PKCS #8 `BEGIN PRIVATE KEY`, which ZooKeeper 3.8 reads). Clients connect to `127.0.0.1`: the certificate must
    /// name that address (`subjectAltName=IP:127.0.0.1`) for a client that verifies host names.
    pub fn new(ca_pem: impl Into<String>, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> ServerTls {
        ServerTls { ca_pem: ca_pem.into(), cert_pem: cert_pem.into(), key_pem: key_pem.into(), client_auth: false }
    }

    /// Require a client certificate signed by the CA (`ssl.clientAuth=need`); by default none is asked for.
    pub fn require_client_certificate(mut self) -> ServerTls {
        self.client_auth = true;
        self
    }

    /// The server settings for a TLS client port on [`TLS_PORT`] with the files copied to `/tls` (the files are
    /// PEM stores, supported since ZooKeeper 3.6), appended to `env`'s `ZOO_CFG_EXTRA`.
    fn configure(&self, env: &mut Vec<(&'static str, String)>) {
        let client_auth = if self.client_auth { "need" } else { "none" };
        let settings = format!(
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory secureClientPort={TLS_PORT} \
             ssl.keyStore.location=/tls/server.pem ssl.keyStore.type=PEM ssl.trustStore.location=/tls/ca.pem \
             ssl.trustStore.type=PEM ssl.clientAuth={client_auth}"
        );
        match env.iter_mut().find(|(key, _)| *key == "ZOO_CFG_EXTRA") {
            Some((_, extra)) => *extra = format!("{extra} {settings}"),
            None => env.push(("ZOO_CFG_EXTRA", settings)),
        }
        // Debian's zookeeper.jar names only some of the Netty jars that TLS needs in its manifest's Class-Path (not
        // netty-codec), and the local image's entrypoint puts only zookeeper.jar on the class path: put them all on
        // the boot class path, where they are found together. The official image has them in its lib/ already; a
        // boot class path entry that does not exist is ignored.
        let netty = ["common", "buffer", "resolver", "transport", "codec", "handler", "transport-native-unix-common"]
            .map(|jar| format!("/usr/share/java/netty-{jar}.jar"))
            .join(":");
        env.push(("SERVER_JVMFLAGS", format!("-Xbootclasspath/a:{netty}")));
    }
}

/// Starts a container from the checked image. With [`HostPort::Fixed`] a port taken between picking and binding is
/// retried twice with another one. A container that fails to start is removed.
pub(crate) async fn start_container(spec: Spec<'_>) -> Result<Started, String> {
    let image = ensure_image().await?;
    ensure_watchdog();
    let name = docker_name(&spec.role);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let fixed = match spec.host_port {
            HostPort::Random => None,
            HostPort::Fixed => Some(free_ports(if spec.tls.is_some() { 2 } else { 1 })?),
        };
        match try_start(&image, &name, &spec, fixed.as_deref()).await {
            Ok(container) => {
                let host_port = |index: usize, port: u16| {
                    let container = &container;
                    let fixed = fixed.as_ref().and_then(|ports| ports.get(index).copied());
                    let name = &name;
                    async move {
                        match fixed {
                            Some(port) => Ok(port),
                            None => container
                                .get_host_port_ipv4(port.tcp())
                                .await
                                .map_err(|err| format!("container {name}: no host port for {port}: {err}")),
                        }
                    }
                };
                let port = host_port(0, 2181).await?;
                let tls_port = match spec.tls {
                    Some(_) => Some(host_port(1, TLS_PORT).await?),
                    None => None,
                };
                return Ok(Started { container, name, port, tls_port });
            }
            Err(err) => {
                remove_container(&name).await;
                let port_taken = err.contains("port is already allocated") || err.contains("address already in use");
                if fixed.is_some() && port_taken && attempt < 3 {
                    tracing::warn!("host port {fixed:?} for {name} was taken meanwhile; retrying with another one");
                    continue;
                }
                return Err(format!("cannot start container {name} from {image}: {err}"));
            }
        }
    }
}

async fn try_start(
    image: &ImageRef,
    name: &str,
    spec: &Spec<'_>,
    host_ports: Option<&[u16]>,
) -> Result<ContainerAsync<GenericImage>, String> {
    let binding = |index: usize| PortBinding {
        host_ip: Some("127.0.0.1".to_string()),
        host_port: Some(host_ports.and_then(|ports| ports.get(index)).map(|port| port.to_string()).unwrap_or_default()),
    };
    let mut bindings = HashMap::from([("2181/tcp".to_string(), Some(vec![binding(0)]))]);
    if spec.tls.is_some() {
        bindings.insert(format!("{TLS_PORT}/tcp"), Some(vec![binding(1)]));
    }
    let mut image_request = GenericImage::new(image.name.clone(), image.tag.clone()).with_exposed_port(2181.tcp());
    if spec.tls.is_some() {
        image_request = image_request.with_exposed_port(TLS_PORT.tcp());
    }
    let mut request = image_request
        // Readiness is a client-side probe by the caller, not a log line.
        .with_wait_for(WaitFor::Nothing)
        .with_container_name(name)
        .with_label(LABEL, token())
        .with_startup_timeout(timing(Duration::from_secs(60)))
        // Only 2181 (and the TLS port), only on loopback (testcontainers would publish every EXPOSEd port on all
        // interfaces).
        .with_host_config_modifier(move |config: &mut HostConfig| {
            config.publish_all_ports = Some(false);
            config.port_bindings = Some(bindings.clone());
        });
    let mut env = spec.env.clone();
    if let Some(tls) = spec.tls {
        tls.configure(&mut env);
        let server_pem = format!("{}\n{}", tls.key_pem.trim_end(), tls.cert_pem);
        request = request
            .with_copy_to("/tls/ca.pem", tls.ca_pem.clone().into_bytes())
            .with_copy_to("/tls/server.pem", server_pem.into_bytes());
    }
    for (key, value) in &env {
        request = request.with_env_var(*key, value.clone());
    }
    if let Some(network) = spec.network {
        request = request.with_network(network);
    }
    if let Some(hostname) = spec.hostname {
        request = request.with_hostname(hostname);
    }
    request.start().await.map_err(|err| err.to_string())
}

/// `n` distinct ports that were free on 127.0.0.1 a moment ago. They are picked below the kernel's ephemeral range
/// when it leaves room, so that neither outgoing connections nor Docker's random host ports (allocated upward from
/// 32768) take one while its server is stopped.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.min(32768).saturating_sub(1));
    let mut listeners = Vec::new();
    let mut tries = 0;
    while listeners.len() < n && high > low + 1000 && tries < 200 {
        tries += 1;
        let port = low + (random_u64() % u64::from(high - low)) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    while listeners.len() < n {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|err| format!("cannot find a free port on 127.0.0.1: {err}"))?;
        listeners.push(listener);
    }
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<Result<_, _>>()
        .map_err(|err| err.to_string())
}

/// Force-removes a container (and its anonymous volumes) by name or id; a missing container is fine.
pub(crate) async fn remove_container(name: &str) {
    if let Ok(docker) = Docker::connect_with_host(&docker_host()) {
        let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
        let _ = docker.remove_container(name, Some(options)).await;
    }
}

/// The last `lines` lines of a container's output (ZooKeeper logs to stderr), for failure messages.
pub(crate) async fn log_tail(container: &ContainerAsync<GenericImage>, lines: usize) -> String {
    let mut output = container.stdout_to_vec().await.unwrap_or_default();
    output.extend(container.stderr_to_vec().await.unwrap_or_default());
    let text = String::from_utf8_lossy(&output);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The server settings every harness server gets (single servers and ensemble members).
pub(crate) fn base_env() -> Vec<(&'static str, String)> {
    vec![
        // Session timeouts are negotiated into [2, 20] ticks: 400 ms .. 60 s with the maximum below.
        ("ZOO_TICK_TIME", "200".to_string()),
        ("ZOO_MAX_SESSION_TIMEOUT", "60000".to_string()),
        // The official image ignores ZOO_MAX_SESSION_TIMEOUT (only the local one reads it): say it again as extra
        // config, which both append (the same value twice; the last one wins). `forceSync=no`: the transaction log
        // is written but not fsynced before a write is answered. A test server's data need not survive the host's
        // power loss (a container restart keeps it: the writes are in the host's page cache), and an fsync stuck
        // behind the writeback of a freshly linked target directory stalled the server for seconds, long enough
        // that a stopped member's session outlived a test's deadline.
        ("ZOO_CFG_EXTRA", "maxSessionTimeout=60000 forceSync=no".to_string()),
        // Every host connection comes from the Docker gateway's IP: the default limit of 60 would bite.
        ("ZOO_MAX_CLIENT_CNXNS", "0".to_string()),
        ("ZOO_4LW_COMMANDS_WHITELIST", "*".to_string()),
    ]
}
