//! Tests of the test kit itself (`zk_partitioner_testing`, through `tests/common`): the shared server and namespaces,
//! the proxy (a short cut, a forced expiry, with and without the client), the 3-server ensemble, a server owned by one
//! test, and the image check.
//!
//! `ZOOKEEPER_IMAGE=zk-partitioner/zookeeper:3.8 cargo test --test harness -- --nocapture` prints the timings.

mod common;

use std::time::{Duration, Instant};

use common::{
    Ensemble, ImageRef, OwnedServer, Proxy, check_image, check_image_on, connect, ephemeral, ephemeral_sequential,
    expire, four_letter, init_tracing, namespace, persistent, provide_image, server, server_mode, session_listed,
    timing, wait_for, wait_session_state, wait_until, with_chroot,
};
use testcontainers::bollard::Docker;
use testcontainers::bollard::errors::Error::DockerResponseServerError;
use zookeeper_client::{Error, SessionState};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn shared_server_serves_two_sessions_in_a_namespace() {
    init_tracing();
    let started = Instant::now();
    let server = server().await;
    eprintln!("[harness] server() returned after {:.2?}", started.elapsed());
    let conf = four_letter(server.addr(), "conf").await.unwrap();
    for setting in ["tickTime=200", "maxSessionTimeout=60000", "maxClientCnxns=0"] {
        assert!(conf.lines().any(|line| line == setting), "{setting} missing from `conf`:\n{conf}");
    }
    let ns = namespace(server).await;
    assert!(ns.starts_with("/t-") && ns.len() == 3 + 16, "{ns}");
    // when
    let writer = connect(&with_chroot(server, &ns), 4 * SECOND).await;
    let reader = connect(&with_chroot(server, &ns), 4 * SECOND).await;
    writer.create("/node", b"hello", &persistent()).await.unwrap();
    // then
    assert_ne!(writer.session_id(), reader.session_id());
    assert_eq!(reader.get_data("/node").await.unwrap().0, b"hello");
    // the namespace is a chroot: from the root the node is under it, and another namespace is empty
    let root = connect(server.endpoint(), 4 * SECOND).await;
    assert_eq!(root.get_data(&format!("{ns}/node")).await.unwrap().0, b"hello");
    let other = namespace(&server).await;
    assert_ne!(other, ns);
    assert_eq!(root.list_children(&other).await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn expire_through_a_proxy_ends_the_session_and_its_ephemerals() {
    init_tracing();
    // given: a victim behind a proxy, with a 1 s session and an ephemeral sequential node
    let server = server().await;
    let ns = namespace(server).await;
    let proxy = Proxy::start(server.addr()).await;
    let victim = connect(&with_chroot(&proxy, &ns), SECOND).await;
    assert_eq!(victim.session_timeout(), SECOND, "negotiated session timeout");
    let observer = connect(&with_chroot(server, &ns), 4 * SECOND).await;
    let (_, sequence) = victim.create("/member-", b"", &ephemeral_sequential()).await.unwrap();
    let node = format!("/member-{sequence}");
    let owner = observer.check_stat(&node).await.unwrap().expect("the victim's node").ephemeral_owner;
    assert_eq!(owner, victim.session_id().0);
    let mut states = victim.state_watcher();
    // when
    let took = expire(&victim, &proxy).await;
    eprintln!("[harness] expire() of a {:?} session took {took:.2?}", victim.session_timeout());
    // then: the victim knows, the server forgot it, and its node is gone for everyone
    assert_eq!(states.state(), SessionState::Expired);
    assert_eq!(victim.check_stat("/").await, Err(Error::SessionExpired));
    assert!(!session_listed(server.addr(), victim.session_id()).await.unwrap());
    assert!(observer.check_stat(&node).await.unwrap().is_none(), "{node} survived its session");
    // and the proxy is healed: a new session through it works
    assert!(!proxy.is_cut());
    let again = connect(&with_chroot(&proxy, &ns), SECOND).await;
    assert_eq!(again.list_children("/").await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn expire_session_needs_only_the_session_id() {
    init_tracing();
    // given: a lock node of a victim behind a proxy, found from outside by its session (as for code under test)
    let server = server().await;
    let ns = namespace(server).await;
    let proxy = Proxy::start(server.addr()).await;
    let victim = connect(&with_chroot(&proxy, &ns), SECOND).await;
    let observer = connect(&with_chroot(server, &ns), 4 * SECOND).await;
    let items = [zk_partitioner::Item::from(7)];
    victim.mkdir("/p/locks/7", &persistent()).await.unwrap();
    victim.create("/p/locks/7/x__lock__", b"", &ephemeral_sequential()).await.unwrap();
    let session = zk_partitioner_testing::sole_holder(&observer, "/p", &items).await.unwrap();
    assert_eq!(session, victim.session_id().0);
    let mut states = victim.state_watcher();
    // when
    let took = proxy.expire_session(session, timing(10 * SECOND)).await;
    eprintln!("[harness] expire_session() of a 1 s session took {took:.2?}");
    // then: the server forgot it, its lock is free, and the client learns it on reconnecting
    assert!(!session_listed(server.addr(), victim.session_id()).await.unwrap());
    let holders = zk_partitioner_testing::read_holders(&observer, "/p", &items).await.unwrap();
    assert_eq!(holders["7"], zk_partitioner_testing::Holder::Free);
    assert!(zk_partitioner_testing::sole_holder(&observer, "/p", &items).await.is_err());
    wait_session_state(&mut states, SessionState::Expired, timing(5 * SECOND), "after expire_session").await;
    assert!(!proxy.is_cut());
}

#[tokio::test]
async fn a_short_cut_keeps_the_session_and_its_ephemerals() {
    init_tracing();
    // given: a client behind a proxy with a 2 s session and an ephemeral node
    let server = server().await;
    let ns = namespace(server).await;
    let proxy = Proxy::start(server.addr()).await;
    let client = connect(&with_chroot(&proxy, &ns), 2 * SECOND).await;
    let observer = connect(&with_chroot(server, &ns), 4 * SECOND).await;
    let session = client.session_id();
    let (_, sequence) = client.create("/member-", b"", &ephemeral_sequential()).await.unwrap();
    let node = format!("/member-{sequence}");
    assert_eq!(proxy.live_connections(), 1);
    let mut states = client.state_watcher();
    // when: a 600 ms outage
    let started = Instant::now();
    let observe = async {
        wait_session_state(&mut states, SessionState::Disconnected, timing(SECOND), "during the cut").await;
        let disconnected = started.elapsed();
        wait_session_state(&mut states, SessionState::SyncConnected, timing(5 * SECOND), "after the cut").await;
        (disconnected, started.elapsed())
    };
    let ((), (disconnected, reconnected)) = tokio::join!(proxy.cut_for(Duration::from_millis(600)), observe);
    eprintln!("[harness] 600 ms cut: Disconnected after {disconnected:.2?}, SyncConnected after {reconnected:.2?}");
    // then: same session, node still there and still its
    assert_eq!(client.session_id(), session);
    assert_eq!(client.state(), SessionState::SyncConnected);
    assert!(client.check_stat(&node).await.unwrap().is_some());
    let stat = observer.check_stat(&node).await.unwrap().expect("the ephemeral survived the cut");
    assert_eq!(stat.ephemeral_owner, session.0);
    assert!(session_listed(server.addr(), session).await.unwrap());
    assert_eq!(proxy.live_connections(), 1);
}

#[tokio::test]
async fn ensemble_survives_the_loss_of_its_leader() {
    init_tracing();
    // given
    let started = Instant::now();
    let ensemble = Ensemble::launch().await;
    eprintln!("[harness] ensemble serving after {:.2?} ({})", started.elapsed(), ensemble.connect_string());
    let network = ensemble.network().to_string();
    let containers: Vec<String> = ensemble.ids().map(|id| ensemble.container_name(id).to_string()).collect();
    let ns = namespace(&ensemble).await;
    let client = connect(&with_chroot(&ensemble, &ns), 6 * SECOND).await;
    let session = client.session_id();
    client.create("/before", b"1", &persistent()).await.unwrap();
    let leader = ensemble.leader().await;
    // when
    let stopped_at = Instant::now();
    ensemble.stop(leader).await;
    let stop_took = stopped_at.elapsed();
    // then: the survivors elect a new leader and the client keeps working, in the same session
    let new_leader = ensemble.leader().await;
    let elected_after = stopped_at.elapsed();
    assert_ne!(new_leader, leader);
    wait_for("a write after the leader's loss", timing(20 * SECOND), || async {
        match client.create("/after", b"2", &persistent()).await {
            Ok(_) | Err(Error::NodeExists) => Ok(()),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
    let writable_after = stopped_at.elapsed();
    assert_eq!(client.get_data("/before").await.unwrap().0, b"1");
    assert_eq!(client.session_id(), session);
    // when: the old leader comes back
    let restarted_at = Instant::now();
    ensemble.start(leader).await;
    let rejoined_after = restarted_at.elapsed();
    eprintln!(
        "[harness] ensemble: stop took {stop_took:.2?}; new leader {new_leader} (was {leader}) after \
         {elected_after:.2?}; writable after {writable_after:.2?}; restarted server serving after {rejoined_after:.2?}"
    );
    // then: it follows and has caught up
    assert_eq!(ensemble.mode(leader).await.as_deref(), Ok("follower"));
    assert_eq!(ensemble.leader().await, new_leader);
    let direct = connect(&with_chroot(&ensemble.endpoint(leader), &ns), 4 * SECOND).await;
    direct.sync("/").await.unwrap();
    assert_eq!(direct.get_data("/after").await.unwrap().0, b"2");
    // when dropped, its containers and its network are removed
    drop((direct, client));
    let dropped_at = Instant::now();
    drop(ensemble);
    eprintln!("[harness] ensemble drop took {:.2?}", dropped_at.elapsed());
    let docker = Docker::connect_with_defaults().unwrap();
    for name in &containers {
        let inspect = docker.inspect_container(name, None).await;
        assert!(
            matches!(inspect, Err(DockerResponseServerError { status_code: 404, .. })),
            "container {name} survived the drop: {inspect:?}"
        );
    }
    let inspect = docker.inspect_network(&network, None).await;
    assert!(
        matches!(inspect, Err(DockerResponseServerError { status_code: 404, .. })),
        "network {network} survived the drop: {inspect:?}"
    );
}

#[tokio::test]
async fn owned_server_restarts_with_its_data_and_sessions() {
    init_tracing();
    // given
    let started = Instant::now();
    let server = OwnedServer::launch().await;
    eprintln!("[harness] owned server serving after {:.2?}", started.elapsed());
    let client = connect(&server.endpoint(), 10 * SECOND).await;
    assert_eq!(client.session_timeout(), 10 * SECOND, "negotiated above 20 ticks: maxSessionTimeout works");
    let session = client.session_id();
    client.create("/kept", b"data", &persistent()).await.unwrap();
    client.create("/mine", b"", &ephemeral()).await.unwrap();
    let mut states = client.state_watcher();
    // when: stopped and started again
    let stopped_at = Instant::now();
    server.stop().await;
    wait_session_state(&mut states, SessionState::Disconnected, timing(5 * SECOND), "server stopped").await;
    let stop_took = stopped_at.elapsed();
    server.start().await;
    let serving_after = stopped_at.elapsed();
    wait_session_state(&mut states, SessionState::SyncConnected, timing(15 * SECOND), "server restarted").await;
    eprintln!(
        "[harness] owned server: stopped in {stop_took:.2?}, serving again after {serving_after:.2?}, client \
         reconnected after {:.2?}",
        stopped_at.elapsed()
    );
    // then: same endpoint, same session, data and ephemeral kept
    assert_eq!(client.session_id(), session);
    assert_eq!(client.get_data("/kept").await.unwrap().0, b"data");
    assert_eq!(client.check_stat("/mine").await.unwrap().expect("ephemeral kept").ephemeral_owner, session.0);
    // when paused, it answers nothing; unpaused, it serves again
    server.pause().await;
    assert!(server_mode(server.addr()).await.is_err());
    server.unpause().await;
    wait_until("the unpaused server to serve", timing(10 * SECOND), || async {
        server_mode(server.addr()).await.is_ok()
    })
    .await;
    assert_eq!(client.get_data("/kept").await.unwrap().0, b"data");
}

#[tokio::test]
async fn a_missing_image_is_named() {
    let image = ImageRef::parse("zk-partitioner/no-such-image:0");
    let started = Instant::now();
    let err = check_image(&image).await.unwrap_err();
    assert!(started.elapsed() < 5 * SECOND, "took {:?}", started.elapsed());
    eprintln!("[harness] missing image: {err}");
    assert!(err.contains("zk-partitioner/no-such-image:0"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    // the image the kit chose for this process passes
    let chosen = zk_partitioner_testing::ensure_image().await.unwrap();
    check_image(&chosen).await.unwrap();
}

#[tokio::test]
async fn an_image_that_can_be_neither_pulled_nor_built_fails_fast_with_the_fix() {
    // given: an image in a registry that cannot exist (`.invalid` never resolves), not one the build script makes
    let image = ImageRef::parse("registry.invalid/zookeeper:0");
    assert!(!image.is_buildable());
    // when
    let started = Instant::now();
    let err = provide_image(Some(image)).await.unwrap_err();
    // then: at once, naming the image, the pull's failure and the way out
    assert!(started.elapsed() < 35 * SECOND, "took {:?}", started.elapsed());
    eprintln!("[harness] unpullable image: {err}");
    assert!(err.contains("registry.invalid/zookeeper:0"), "{err}");
    assert!(err.contains("cannot be pulled"), "{err}");
    assert!(err.contains("unset ZOOKEEPER_IMAGE"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[tokio::test]
async fn an_unreachable_docker_engine_is_named() {
    let err = check_image_on("unix:///nonexistent/docker.sock", &ImageRef::parse(ImageRef::DEFAULT)).await.unwrap_err();
    eprintln!("[harness] no engine: {err}");
    assert!(err.starts_with("no Docker engine answers at unix:///nonexistent/docker.sock"), "{err}");
    assert!(err.contains("start dockerd"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[tokio::test]
#[should_panic(expected = "timed out after")]
async fn wait_until_names_what_it_waited_for() {
    wait_until("something that never happens", Duration::from_millis(100), || async { false }).await;
}
