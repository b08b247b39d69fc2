//! Integration-test harness: the crate's test kit ([`zk_partitioner_testing`]: real ZooKeeper servers in Docker,
//! per-test namespaces, a TCP proxy for connection cuts and forced session expiry, condition-based waits, a safety
//! checker), plus what only this crate's tests use: members with their own sessions, fault scenarios and kazoo
//! workers.
//!
//! * Image: `ZOOKEEPER_IMAGE` if set, else the official `zookeeper:3.9` or the locally built
//!   `zk-partitioner/zookeeper:3.8`, whichever is present; when neither is, the kit pulls the first or builds the
//!   second (`docker/zookeeper/build.sh`), once per machine (see [`zk_partitioner_testing::provide_image`]).
//! * [`server()`]: one standalone server shared by every test of a test binary; isolate tests with [`namespace`].
//!   [`OwnedServer`] and [`Ensemble`] belong to one test (stop/start/pause them freely).
//! * Deadlines go through [`timing`], which scales them by `ZK_TEST_TIME_SCALE` for slow machines.
#![allow(dead_code)]

pub mod counting;
pub mod ctx;
pub mod faults;
pub mod kazoo;
pub mod members;

// Each test binary uses a different part of the harness.
#[allow(unused_imports)]
pub use ctx::Ctx;
#[allow(unused_imports)]
pub use zk_partitioner_testing::{
    Cluster, Ensemble, ImageRef, OwnedServer, POLL, Proxy, ServerHandle, check_image, check_image_on, connect,
    ephemeral, ephemeral_sequential, expire, four_letter, namespace, persistent, provide_image, random_u64, server,
    server_mode, session_listed, timing, try_connect, wait_for, wait_session_state, wait_until, with_chroot,
};

/// Installs a `tracing` subscriber that writes through the test harness' capture, filtered by `RUST_LOG` (default
/// `warn,zookeeper_client=error`: the client warns on every failed connection attempt, which cuts, stops and
/// readiness probes cause by design). Idempotent: call it at the start of every test.
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,zookeeper_client=error"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// Creates a kazoo-style lock contender for `item` under the partition path `path` from `client`, a session with no
/// party node: an orphan. Returns its node's path.
pub async fn orphan_contender(
    client: &zk_partitioner::zookeeper_client::Client,
    path: &str,
    item: &str,
    data: &str,
) -> String {
    let dir = format!("{path}/locks/{item}");
    client.mkdir(&dir, &persistent()).await.expect("mkdir the lock directory");
    let prefix = format!("{dir}/{}__lock__", "0123456789abcdef".repeat(2));
    let (_, sequence) =
        client.create(&prefix, data.as_bytes(), &ephemeral_sequential()).await.expect("create the orphan");
    format!("{prefix}{sequence}")
}

/// The `zkp` binary the tool's tests run (`crates/cli/tests`, which include this harness): `$ZKP` if set (CI points it
/// at the binary `cargo install` put on a PATH, to test what an operator installs), else the one cargo built for
/// these tests. The library's own tests do not run it.
pub fn zkp() -> std::path::PathBuf {
    if let Some(installed) = std::env::var_os("ZKP") {
        return installed.into();
    }
    match option_env!("CARGO_BIN_EXE_zkp") {
        Some(built) => built.into(),
        None => panic!("zkp is run only by the tool's tests, under crates/cli/tests"),
    }
}
