//! TLS on a real ZooKeeper: members connect to the server's TLS client port (`secureClientPort`, ZooKeeper's Netty
//! connection factory, PEM key and trust stores) with `tls_options_with_identity`, verify its certificate (issued for
//! 127.0.0.1 by a CA made for the test) and reach `ACQUIRED`; a client without a client certificate, one that trusts
//! another CA, and a plain-text client are refused. The certificates are made at test time with the `openssl`
//! command-line tool.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::members::{auto_release, ints};
use common::{OwnedServer, timing, wait_for};
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner::{Error, PartitionState, SetPartitioner, connection::ConnectOptions};
use zk_partitioner_testing::ServerTls;

/// Runs `openssl` with `args` in `dir`, panicking with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl").args(args).current_dir(dir).output().unwrap_or_else(|err| {
        panic!("tests/tls.rs makes its certificates with the openssl command-line tool, which cannot be run ({err})")
    });
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// A CA named `name` in `dir` (`<name>.pem`, `<name>.key`).
fn make_ca(dir: &Path, name: &str) {
    let (cert, key, subject) =
        (format!("{name}.pem"), format!("{name}.key"), format!("/CN=zk-partitioner test {name}"));
    openssl(dir, &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.ec")]);
    openssl(dir, &["pkcs8", "-topk8", "-nocrypt", "-in", &format!("{name}.ec"), "-out", &key]);
    openssl(dir, &["req", "-x509", "-new", "-key", &key, "-out", &cert, "-days", "2", "-subj", &subject]);
}

/// A certificate `<name>.pem` with its key `<name>.key` (PKCS #8, as ZooKeeper 3.8 wants it), issued by the CA
/// `ca` for 127.0.0.1 and localhost, usable by a server and a client.
fn make_certificate(dir: &Path, ca: &str, name: &str) {
    let key = format!("{name}.key");
    std::fs::write(
        dir.join(format!("{name}.ext")),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(dir, &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.ec")]);
    openssl(dir, &["pkcs8", "-topk8", "-nocrypt", "-in", &format!("{name}.ec"), "-out", &key]);
    openssl(dir, &["req", "-new", "-key", &key, "-out", &format!("{name}.csr"), "-subj", &format!("/CN={name}")]);
    #[rustfmt::skip]
    openssl(dir, &[
        "x509", "-req", "-in", &format!("{name}.csr"), "-CA", &format!("{ca}.pem"), "-CAkey", &format!("{ca}.key"),
        "-CAcreateserial", "-out", &format!("{name}.pem"), "-days", "2", "-extfile", &format!("{name}.ext"),
    ]);
}

/// A fresh directory with the CA `ca`, the server's and a client's certificates, and another CA `other-ca`.
fn certificates() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    make_ca(&dir, "ca");
    make_ca(&dir, "other-ca");
    make_certificate(&dir, "ca", "server");
    make_certificate(&dir, "ca", "client");
    dir
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_connect_over_tls_and_acquire() {
    common::init_tracing();
    let dir = certificates();
    let tls = ServerTls::new(read(&dir, "ca.pem"), read(&dir, "server.pem"), read(&dir, "server.key"));
    let server = OwnedServer::launch_tls(tls.require_client_certificate()).await;
    let cluster = server.tls_connect_string().expect("a TLS client port");
    let connector = |options| Client::connector().with_session_timeout(Duration::from_secs(6)).with_tls(options);
    let identity = || {
        zk_partitioner::connection::tls_options_with_identity(
            dir.join("ca.pem"),
            dir.join("client.pem"),
            dir.join("client.key"),
        )
        .expect("TLS options from the test's PEM files")
    };

    // Two members over TLS divide the items and reach ACQUIRED.
    let items = ints(6);
    let mut members = Vec::new();
    for name in ["a", "b"] {
        let client = zk_partitioner::connection::connect_with_options(
            connector(identity()),
            &cluster,
            ConnectOptions::new().connect_timeout(timing(Duration::from_secs(20))),
        )
        .await
        .unwrap_or_else(|err| panic!("member {name} over TLS at {cluster}: {err}"));
        let partitioner = SetPartitioner::builder(client, "/tls", items.clone())
            .identifier(name)
            .time_boundary(Duration::from_millis(500))
            .build()
            .await
            .expect("build a member over TLS");
        let worker = auto_release(&partitioner);
        members.push((partitioner, worker));
    }
    wait_for("both TLS members ACQUIRED, every item held once", timing(Duration::from_secs(20)), || async {
        let snapshots: Vec<_> = members.iter().map(|(partitioner, _)| partitioner.snapshot()).collect();
        let mut held: Vec<_> = snapshots.iter().flat_map(|snapshot| snapshot.items.to_vec()).collect();
        held.sort();
        let all_acquired = snapshots.iter().all(|s| s.state == PartitionState::Acquired && s.members.len() == 2);
        if all_acquired && held == items { Ok(()) } else { Err(format!("{snapshots:?}")) }
    })
    .await;

    // Refused: no client certificate, a CA that did not issue the server's certificate, plain text on the TLS port.
    let short = Duration::from_secs(2);
    let ca_only = zk_partitioner::connection::tls_options(dir.join("ca.pem")).expect("TLS options from ca.pem");
    let other_ca = zk_partitioner::connection::tls_options_with_identity(
        dir.join("other-ca.pem"),
        dir.join("client.pem"),
        dir.join("client.key"),
    )
    .expect("TLS options from other-ca.pem");
    let plain = cluster.replace("tcp+tls://", "");
    for (what, connector, cluster) in [
        ("no client certificate", connector(ca_only), &cluster),
        ("a CA that did not issue the server's certificate", connector(other_ca), &cluster),
        ("plain text to the TLS port", Client::connector(), &plain),
    ] {
        let over_tls = cluster.starts_with("tcp+tls://");
        match zk_partitioner::connection::connect_with_options(
            connector,
            cluster,
            ConnectOptions::new().connect_timeout(short),
        )
        .await
        {
            Err(Error::Connect { reason, .. }) => {
                assert!(reason.contains("opened no session"), "{what}: {reason}");
                assert_eq!(reason.contains("over TLS, check"), over_tls, "{what}: {reason}");
            }
            other => panic!("{what}: expected Error::Connect, got {other:?}"),
        }
    }

    for (partitioner, _) in &members {
        partitioner.finish().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
