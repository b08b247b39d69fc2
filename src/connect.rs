//! Opening a ZooKeeper session with a bounded wait and an error that says what is wrong.

use std::time::{Duration, Instant};

use zookeeper_client::{Client, Connector};

use crate::Error;

/// How long [`connect`] tries to open a session before failing with [`Error::Connect`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the diagnosis of a failed connect waits for each server to answer a TCP connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens a ZooKeeper session to `cluster` (`host:port[,host:port...][/chroot]`) with the given session timeout,
/// trying for at most [`DEFAULT_CONNECT_TIMEOUT`] (10 s), and checks that the chroot, if any, exists.
///
/// `zookeeper_client`'s own `connect` keeps trying for the whole session timeout and then reports a bare `timeout`;
/// this one retries every 200 ms within its connect timeout (so a server that is still starting is waited for),
/// then fails with the address and the reason for each server: the host name does not resolve, the connection was
/// refused (nothing listens on that port), it is unreachable (no answer), or it accepted the connection but opened
/// no session (not a ZooKeeper server, or an ensemble member without a quorum).
///
/// Give each partitioner its own session: a member's locks live and die with it.
///
/// # Errors
/// - [`Error::Connect`] if no session is opened within the connect timeout, or the connect string is malformed;
/// - [`Error::ChrootMissing`] if the connect string's chroot does not exist on the server;
/// - [`Error::ZooKeeper`] if checking the chroot fails.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the session being opened, if any, which closes it.
///
/// # Examples
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use std::time::Duration;
///
/// let client = zk_partitioner::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
/// println!("session {} open", client.session_id());
/// # Ok(())
/// # }
/// ```
pub async fn connect(cluster: &str, session_timeout: Duration) -> Result<Client, Error> {
    connect_with(Client::connector().with_session_timeout(session_timeout), cluster, DEFAULT_CONNECT_TIMEOUT).await
}

/// [`connect`] with a connector of your own (authentication, TLS, read-only sessions...) and a connect timeout of
/// your choice.
///
/// The connector is used with `with_fail_eagerly()` (one pass over the servers per attempt), and attempts repeat
/// until `connect_timeout` has passed.
///
/// # Errors
/// As [`connect`]; an authentication failure is returned at once as [`Error::Connect`].
///
/// # Cancel safety
/// Cancel safe, as [`connect`].
///
/// # Examples
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use std::time::Duration;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let connector = Client::connector()
///     .with_session_timeout(Duration::from_secs(10))
///     .with_auth("digest", b"user:password");
/// let client = zk_partitioner::connect_with(connector, "zk1:2181,zk2:2181/apps", Duration::from_secs(5)).await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub async fn connect_with(connector: Connector, cluster: &str, connect_timeout: Duration) -> Result<Client, Error> {
    let started = Instant::now();
    let connector = connector.with_fail_eagerly();
    let fail = |reason: String| Error::Connect { cluster: cluster.to_string(), reason };
    let mut last = None;
    loop {
        let left = connect_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, connector.clone().connect(cluster)).await {
            Ok(Ok(client)) => return check_chroot(client).await,
            Ok(Err(zookeeper_client::Error::BadArguments(what))) => {
                return Err(fail(format!(
                    "invalid connect string ({what}); expected host:port[,host:port...][/chroot]"
                )));
            }
            Ok(Err(zookeeper_client::Error::AuthFailed)) => {
                return Err(fail("the server rejected the authentication".to_string()));
            }
            Ok(Err(err)) => last = Some(err),
            Err(_) => {}
        }
        let left = connect_timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(Duration::from_millis(200))).await;
    }
    let servers = servers(cluster);
    let diagnoses = futures::future::join_all(servers.iter().map(|(host, port)| diagnose(host, *port))).await;
    let last = last.map_or_else(|| "none".to_string(), |err| err.to_string());
    // The client does not say why a TLS handshake failed (its error is "no available hosts"): name the usual causes.
    let tls_hint = if cluster.contains("tcp+tls://") {
        "; over TLS, check that the port is the server's secureClientPort, that the CA given issued the server's \
         certificate and that the certificate names the host as written, and the client certificate if the server \
         requires one"
    } else {
        ""
    };
    let reasons: Vec<String> = servers
        .iter()
        .zip(diagnoses)
        .map(|((host, port), diagnosis)| match diagnosis {
            Some(diagnosis) => format!("{host}:{port} {diagnosis}"),
            None => format!("{host}:{port} accepts connections but opened no session (last error: {last}){tls_hint}"),
        })
        .collect();
    Err(fail(format!("no session within {connect_timeout:?}: {}", reasons.join("; "))))
}

/// Fails with [`Error::ChrootMissing`] if `client`'s chroot does not exist.
async fn check_chroot(client: Client) -> Result<Client, Error> {
    let chroot = client.path().to_string();
    if chroot == "/" {
        return Ok(client);
    }
    match client.check_stat("/").await {
        Ok(Some(_)) => Ok(client),
        Ok(None) => Err(Error::ChrootMissing { chroot }),
        Err(err) => Err(Error::zk("exists", chroot, err)),
    }
}

/// The servers of a connect string, as `(host, port)`: `tcp://` and `tcp+tls://` prefixes and the chroot removed,
/// the port 2181 by default, IPv6 addresses in brackets.
fn servers(cluster: &str) -> Vec<(String, u16)> {
    cluster
        .split(',')
        .map(|server| {
            let server = server.trim();
            let server = server.strip_prefix("tcp://").or_else(|| server.strip_prefix("tcp+tls://")).unwrap_or(server);
            let server = server.split('/').next().unwrap_or_default();
            let (host, port) = match server.rsplit_once(':') {
                Some((host, port)) if !port.contains(']') => (host, port.parse().unwrap_or(2181)),
                _ => (server, 2181),
            };
            (host.trim_start_matches('[').trim_end_matches(']').to_string(), port)
        })
        .filter(|(host, _)| !host.is_empty())
        .collect()
}

/// Why a TCP connection to `host:port` fails, or `None` if it succeeds.
async fn diagnose(host: &str, port: u16) -> Option<String> {
    let addresses = match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addresses)) => addresses.collect::<Vec<_>>(),
        Ok(Err(err)) => return Some(format!("cannot be resolved ({err})")),
        Err(_) => return Some(format!("cannot be resolved (no answer within {PROBE_TIMEOUT:?})")),
    };
    let Some(address) = addresses.first() else {
        return Some("cannot be resolved (no address)".to_string());
    };
    match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(_)) => None,
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
            Some("refused the connection (nothing listens on that port)".to_string())
        }
        Ok(Err(err)) => Some(format!("is unreachable ({err})")),
        Err(_) => Some(format!("is unreachable (no answer within {PROBE_TIMEOUT:?})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_are_split_into_servers() {
        let pair = |host: &str, port: u16| (host.to_string(), port);
        assert_eq!(servers("127.0.0.1:2181"), [pair("127.0.0.1", 2181)]);
        assert_eq!(servers("zk1:2182,zk2/chroot/x"), [pair("zk1", 2182), pair("zk2", 2181)]);
        assert_eq!(servers("tcp://[::1]:2183,tcp+tls://h:1/c"), [pair("::1", 2183), pair("h", 1)]);
        assert_eq!(servers("[::1]"), [pair("::1", 2181)]);
    }

    #[tokio::test]
    async fn a_refused_connection_is_named_with_its_address() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let started = Instant::now();
        let connector = Client::connector().with_session_timeout(Duration::from_secs(30));
        let err = connect_with(connector, &format!("127.0.0.1:{port}"), Duration::from_millis(500)).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("cannot connect to ZooKeeper at 127.0.0.1:{port}: no session within 500ms")),
            "{message}"
        );
        assert!(message.contains(&format!("127.0.0.1:{port} refused the connection")), "{message}");
    }

    #[tokio::test]
    async fn an_unresolvable_host_is_named() {
        let err = connect_with(Client::connector(), "no-such-host.invalid:2181", Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid:2181 cannot be resolved"), "{err}");
    }

    #[tokio::test]
    async fn a_malformed_connect_string_fails_at_once() {
        let err = connect_with(Client::connector(), "", Duration::from_secs(5)).await.unwrap_err();
        assert!(err.to_string().contains("invalid connect string"), "{err}");
    }
}
