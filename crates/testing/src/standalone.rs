//! Standalone servers: the one shared by all tests of a test binary, and servers owned by one test.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use testcontainers::{ContainerAsync, GenericImage};
use zookeeper_client::Client;

use super::docker::{HostPort, ServerTls, Spec, Started, base_env, log_tail, start_container};
use super::{Cluster, server_mode, timing, wait_for};

/// How long a server may take from `docker start` to accepting a session.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// The standalone server shared by every test of this test binary (see [`server()`]).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    endpoint: String,
    container: String,
}

impl ServerHandle {
    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The same as a socket address (for [`Proxy::start`](super::Proxy::start) and four-letter words).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connect string: the endpoint, as a `String`.
    pub fn connect_string(&self) -> String {
        self.endpoint.clone()
    }

    /// The container's name, for `docker logs`.
    pub fn container_name(&self) -> &str {
        &self.container
    }
}

impl Cluster for ServerHandle {
    fn connect_string(&self) -> String {
        ServerHandle::connect_string(self)
    }
}

/// The standalone ZooKeeper shared by every test of this test binary (every caller in the process gets the same
/// one), started on first use (about 3 s once the image is there; see [`ensure_image`](super::ensure_image) for how
/// the image is found) and removed after the process exits. Do not stop it; isolate tests with
/// [`namespace`](super::namespace).
///
/// # Panics
/// With one line naming the cause and the fix when there is no Docker engine or no image, in every test that calls
/// it.
pub async fn server() -> &'static ServerHandle {
    static SHARED: OnceLock<Result<ServerHandle, String>> = OnceLock::new();
    if SHARED.get().is_none() {
        // Blocks a pool thread, not this test's runtime, while the first caller starts the server.
        let started = tokio::task::spawn_blocking(|| {
            SHARED.get_or_init(start_shared);
        })
        .await;
        if let Err(err) = started {
            panic!("starting the shared ZooKeeper server: {err}");
        }
    }
    match SHARED.get() {
        Some(Ok(server)) => server,
        Some(Err(err)) => panic!("{err}"),
        None => panic!("the shared ZooKeeper server was not started"),
    }
}

/// Starts the shared server on a dedicated thread with its own runtime, which keeps the container alive until the
/// process exits: each `#[tokio::test]` has its own runtime, and a container must live and drop in one that lasts.
fn start_shared() -> Result<ServerHandle, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new().name("zk-shared-server".to_string()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(err) => {
                let _ = sender.send(Err(format!("cannot build a runtime for the shared server: {err}")));
                return;
            }
        };
        runtime.block_on(async move {
            match launch_standalone("shared", HostPort::Random, None).await {
                Ok((started, ready_in)) => {
                    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, started.port));
                    eprintln!("[harness] shared ZooKeeper {} serving at {addr} after {ready_in:.2?}", started.name);
                    let handle = ServerHandle { addr, endpoint: addr.to_string(), container: started.name.clone() };
                    let _ = sender.send(Ok(handle));
                    // Keep the container (and this runtime) for the life of the process; the watchdog removes it.
                    let _keep = started.container;
                    std::future::pending::<()>().await
                }
                Err(err) => {
                    let _ = sender.send(Err(err));
                }
            }
        })
    });
    if let Err(err) = thread {
        return Err(format!("cannot spawn the shared server's thread: {err}"));
    }
    receiver.recv().unwrap_or_else(|_| Err("the shared ZooKeeper server's thread died while starting".to_string()))
}

/// Starts a standalone server and waits until it accepts a session; returns it and the time from start to ready.
async fn launch_standalone(
    role: &str,
    host_port: HostPort,
    tls: Option<&ServerTls>,
) -> Result<(Started, Duration), String> {
    let started_at = Instant::now();
    let spec = Spec { role: role.to_string(), env: base_env(), host_port, network: None, hostname: None, tls };
    let started = start_container(spec).await?;
    let endpoint = format!("127.0.0.1:{}", started.port);
    if let Err(err) = probe_session(&endpoint, timing(READY_DEADLINE)).await {
        let logs = log_tail(&started.container, 20).await;
        return Err(format!(
            "ZooKeeper in container {} did not accept a session within {:?}; last error: {err}; see `docker logs {}` \
             (removed with the container; its last lines:)\n{logs}",
            started.name,
            timing(READY_DEADLINE),
            started.name
        ));
    }
    Ok((started, started_at.elapsed()))
}

/// Tries to open (and then closes) a session at `endpoint` until one works: a readiness probe.
///
/// # Errors
/// The last attempt's error, once `deadline` has passed.
pub async fn probe_session(endpoint: &str, deadline: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let attempt =
            Client::connector().with_fail_eagerly().with_session_timeout(Duration::from_secs(2)).connect(endpoint);
        let last = match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(client)) => {
                drop(client);
                return Ok(());
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => "connect did not finish within 5 s".to_string(),
        };
        if started.elapsed() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A standalone server owned by one test, on a fixed host port so that it comes back at the same endpoint after
/// [`stop`](Self::stop) and [`start`](Self::start) (same container: data and sessions are kept). Removed on drop.
pub struct OwnedServer {
    container: ContainerAsync<GenericImage>,
    name: String,
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for OwnedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedServer").field("name", &self.name).field("addr", &self.addr).finish()
    }
}

impl OwnedServer {
    /// Starts a server and waits until it accepts a session.
    ///
    /// # Panics
    /// With the cause (no Docker engine, no image, the server did not start) if it does not serve within 60 s.
    pub async fn launch() -> OwnedServer {
        OwnedServer::launch_with(None).await
    }

    /// [`launch`](Self::launch) a server that also has a TLS client port (`secureClientPort`) with the given
    /// certificates: [`tls_connect_string`](Self::tls_connect_string). Its plain port stays open (the readiness
    /// probe uses it). The server runs ZooKeeper's Netty connection factory, which TLS needs.
    ///
    /// # Panics
    /// As [`launch`](Self::launch); a certificate the server cannot load shows in the container log in the message.
    pub async fn launch_tls(tls: ServerTls) -> OwnedServer {
        OwnedServer::launch_with(Some(&tls)).await
    }

    async fn launch_with(tls: Option<&ServerTls>) -> OwnedServer {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let role = format!("owned{}", COUNT.fetch_add(1, Ordering::Relaxed));
        let (started, ready_in) =
            launch_standalone(&role, HostPort::Fixed, tls).await.unwrap_or_else(|err| panic!("{err}"));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, started.port));
        let tls_addr = started.tls_port.map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        tracing::info!("ZooKeeper {} serving at {addr} (TLS: {tls_addr:?}) after {ready_in:.2?}", started.name);
        OwnedServer { container: started.container, name: started.name, addr, tls_addr }
    }

    /// `tcp+tls://127.0.0.1:PORT`, the TLS client port of a server started with [`launch_tls`](Self::launch_tls)
    /// (the same for the server's whole life); `None` for the others.
    pub fn tls_connect_string(&self) -> Option<String> {
        self.tls_addr.map(|addr| format!("tcp+tls://{addr}"))
    }

    /// `127.0.0.1:PORT`, the same for the server's whole life.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The same as a socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connect string: the endpoint.
    pub fn connect_string(&self) -> String {
        self.endpoint()
    }

    /// The container's name, for `docker logs`.
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// Stops the server (SIGTERM, SIGKILL after 5 s): its clients lose their connection at once.
    ///
    /// # Panics
    /// If Docker cannot stop it.
    pub async fn stop(&self) {
        self.container
            .stop_with_timeout(Some(5))
            .await
            .unwrap_or_else(|err| panic!("cannot stop ZooKeeper container {}: {err}", self.name));
    }

    /// Starts the stopped server again and waits until it serves (`srvr` says `Mode: standalone`).
    ///
    /// # Panics
    /// If Docker cannot start it, or it does not serve within 60 s.
    pub async fn start(&self) {
        self.container.start().await.unwrap_or_else(|err| {
            panic!("cannot restart ZooKeeper container {} (was its host port {} taken?): {err}", self.name, self.addr)
        });
        let what = format!("restarted ZooKeeper {} to serve", self.name);
        wait_for(&what, timing(READY_DEADLINE), || async {
            server_mode(self.addr).await.and_then(|mode| match mode.as_str() {
                "standalone" => Ok(()),
                other => Err(format!("mode {other}")),
            })
        })
        .await;
    }

    /// Freezes the server's processes: connections stay open but nothing answers.
    ///
    /// # Panics
    /// If Docker cannot pause it (see [`try_pause`](Self::try_pause)).
    pub async fn pause(&self) {
        self.container.pause().await.unwrap_or_else(|err| panic!("cannot pause {}: {err}", self.name));
    }

    /// [`pause`](Self::pause), returning Docker's error instead of panicking: on a loaded machine the cgroup freezer
    /// can time out ("OCI runtime pause failed: unable to freeze"), and the caller may want to retry.
    ///
    /// # Errors
    /// Docker's error.
    pub async fn try_pause(&self) -> Result<(), String> {
        self.container.pause().await.map_err(|err| format!("cannot pause {}: {err}", self.name))
    }

    /// [`unpause`](Self::unpause), returning Docker's error instead of panicking (e.g. when the server is not paused).
    ///
    /// # Errors
    /// Docker's error.
    pub async fn try_unpause(&self) -> Result<(), String> {
        self.container.unpause().await.map_err(|err| format!("cannot unpause {}: {err}", self.name))
    }

    /// Resumes a paused server.
    ///
    /// # Panics
    /// If Docker cannot unpause it.
    pub async fn unpause(&self) {
        self.container.unpause().await.unwrap_or_else(|err| panic!("cannot unpause {}: {err}", self.name));
    }
}

impl Cluster for OwnedServer {
    fn connect_string(&self) -> String {
        self.endpoint()
    }
}
