//! Opening a ZooKeeper session with a bounded wait and an error that says what is wrong ([`connect`], re-exported
//! at the crate root, and [`connect_with_options`]), and, with the `tls` feature, the TLS options of a session.
//!
//! The session is zookeeper-client's own, on the connect string as given: this crate opens no port and runs no
//! service of its own in the user's process. (An earlier version relayed the session through a loopback port to
//! shorten the client's reconnection back-off; it was removed, since on a ZooKeeper ensemble the client alone is
//! back within a second, RELIABILITY.md, "Reconnection after a server restart".)

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use crate::tls::{tls_options, tls_options_with_identity};

use std::time::{Duration, Instant};

use zookeeper_client::{Client, Connector};

use crate::Error;

/// How long [`connect`] tries to open a session before failing with [`Error::Connect`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the diagnosis of a failed connect waits for each server to answer a TCP connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How [`connect_with_options`] opens a session: the connect timeout, and whether to fail fast when no server can be
/// reached.
///
/// A connect timeout is always set by name, [`connect_timeout`](ConnectOptions::connect_timeout): a bare `Duration`
/// given to this crate's connect functions is the session timeout ([`connect`]).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use zk_partitioner::connection::ConnectOptions;
///
/// let options = ConnectOptions::new().connect_timeout(Duration::from_secs(30)).fail_fast(true);
/// assert_eq!(options.get_connect_timeout(), Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    connect_timeout: Duration,
    fail_fast: bool,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions { connect_timeout: DEFAULT_CONNECT_TIMEOUT, fail_fast: false }
    }
}

impl ConnectOptions {
    /// The defaults: a connect timeout of [`DEFAULT_CONNECT_TIMEOUT`] (10 s), no fail-fast.
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// How long to try to open a session before failing with [`Error::Connect`] (default 10 s). Within it, a server
    /// that is still starting (refusing connections, or accepting them without opening sessions yet) is waited for
    /// and tried again every 200 ms. This is not the session timeout, which the connector sets
    /// (`Connector::with_session_timeout`).
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> ConnectOptions {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Fail at once, instead of waiting out the connect timeout, when no server of the connect string can be reached
    /// at all: every host name fails to resolve, or every server refuses the connection or does not answer it within
    /// 1 s. Off by default, so that a worker started beside its ZooKeeper (`docker compose up`) waits for it; turn it
    /// on in tools run by hand, where a typo should be reported now. A server that accepts connections but opens no
    /// session is still waited for.
    pub fn fail_fast(mut self, fail_fast: bool) -> ConnectOptions {
        self.fail_fast = fail_fast;
        self
    }

    /// The connect timeout.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Whether [`fail_fast`](Self::fail_fast) is on.
    pub fn get_fail_fast(&self) -> bool {
        self.fail_fast
    }
}

/// Opens a ZooKeeper session to `cluster` (`host:port[,host:port...][/chroot]`) with the given **session timeout**,
/// trying for at most [`DEFAULT_CONNECT_TIMEOUT`] (10 s), and checks that the chroot, if any, exists.
///
/// `zookeeper_client`'s own `connect` keeps trying for the whole session timeout and then reports a bare `timeout`;
/// this one retries every 200 ms within its connect timeout (so a server that is still starting is waited for),
/// then fails with the address and the reason for each server: the host name does not resolve, the connection was
/// refused (nothing listens on that port), it is unreachable (no answer), or it accepted the connection but opened
/// no session (not a ZooKeeper server, or an ensemble member without a quorum). Once open, the session reconnects
/// as zookeeper-client does, to the servers of the connect string as given.
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
/// // A 10 s session timeout; connect itself waits at most DEFAULT_CONNECT_TIMEOUT (10 s) for the server.
/// let client = zk_partitioner::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
/// println!("session {} open", client.session_id());
/// # Ok(())
/// # }
/// ```
pub async fn connect(cluster: &str, session_timeout: Duration) -> Result<Client, Error> {
    let connector = Client::connector().with_session_timeout(session_timeout);
    connect_with_options(connector, cluster, ConnectOptions::new()).await
}

/// [`connect`] with a connector of your own (session timeout, authentication, TLS...) and [`ConnectOptions`] of your
/// choice.
///
/// The connector is used with `with_fail_eagerly()` (one pass over the servers per attempt), and attempts repeat
/// until the connect timeout has passed, or until the first pass in which no server could be reached with
/// [`ConnectOptions::fail_fast`].
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
/// use zk_partitioner::connection::ConnectOptions;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let connector = Client::connector()
///     .with_session_timeout(Duration::from_secs(10))
///     .with_auth("digest", b"user:password");
/// let options = ConnectOptions::new().connect_timeout(Duration::from_secs(5)).fail_fast(true);
/// let client = zk_partitioner::connection::connect_with_options(connector, "zk1:2181,zk2:2181/apps", options).await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub async fn connect_with_options(
    connector: Connector,
    cluster: &str,
    options: ConnectOptions,
) -> Result<Client, Error> {
    let fail = |reason: String| Error::Connect { cluster: cluster.to_string(), reason };
    let (servers, _chroot) = parse(cluster)
        .map_err(|what| fail(format!("invalid connect string ({what}); expected host:port[,host:port...][/chroot]")))?;
    tracing::debug!(cluster, timeout = ?options.connect_timeout, "connecting");
    let client = open(connector, cluster, &servers, &options).await.map_err(fail)?;
    check_chroot(client).await
}

/// Opens a session to `target` (the connect string) within the connect timeout, or says why not, per server of the
/// connect string.
async fn open(
    connector: Connector,
    target: &str,
    servers: &[(String, u16)],
    options: &ConnectOptions,
) -> Result<Client, String> {
    let started = Instant::now();
    let connect_timeout = options.connect_timeout;
    let connector = connector.with_fail_eagerly();
    let mut last = None;
    // With fail-fast, the servers are diagnosed beside the first attempt: when none can be reached, that is the
    // answer, whatever the client is still trying.
    let unreachable = async {
        if !options.fail_fast {
            return std::future::pending().await;
        }
        let diagnoses = diagnose_all(servers).await;
        if diagnoses.iter().all(Option::is_some) {
            return explain_failure(servers, diagnoses, None, "");
        }
        std::future::pending().await
    };
    let mut unreachable = std::pin::pin!(unreachable);
    loop {
        let left = connect_timeout.saturating_sub(started.elapsed());
        let attempt = tokio::time::timeout(left, connector.clone().connect(target));
        tokio::select! {
            reason = &mut unreachable => {
                return Err(format!("fail-fast: no server can be reached: {reason}"));
            }
            attempt = attempt => match attempt {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(zookeeper_client::Error::BadArguments(what))) => {
                    return Err(format!(
                        "invalid connect string ({what}); expected host:port[,host:port...][/chroot]"
                    ));
                }
                Ok(Err(zookeeper_client::Error::AuthFailed)) => {
                    return Err("the server rejected the authentication".to_string());
                }
                Ok(Err(err)) => last = Some(err),
                Err(_) => {}
            },
        }
        let left = connect_timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::select! {
            reason = &mut unreachable => {
                return Err(format!("fail-fast: no server can be reached: {reason}"));
            }
            () = tokio::time::sleep(left.min(Duration::from_millis(200))) => {}
        }
    }
    let diagnoses = diagnose_all(servers).await;
    // The client does not say why a TLS handshake failed (its error is "no available hosts"): name the usual causes.
    let tls_hint = if target.contains("tcp+tls://") {
        "; over TLS, check that the port is the server's secureClientPort, that the CA given issued the server's \
         certificate and that the certificate names the host as written, and the client certificate if the server \
         requires one"
    } else {
        ""
    };
    let last = last.map_or_else(|| "none".to_string(), |err| err.to_string());
    Err(format!(
        "no session within {connect_timeout:?}: {}",
        explain_failure(servers, diagnoses, Some(&last), tls_hint)
    ))
}

async fn diagnose_all(servers: &[(String, u16)]) -> Vec<Option<String>> {
    futures::future::join_all(servers.iter().map(|(host, port)| diagnose(host, *port))).await
}

/// One clause per server: what is wrong with it, or that it accepts connections but opened no session.
fn explain_failure(
    servers: &[(String, u16)],
    diagnoses: Vec<Option<String>>,
    last: Option<&str>,
    tls_hint: &str,
) -> String {
    let last = last.unwrap_or("none");
    servers
        .iter()
        .zip(diagnoses)
        .map(|((host, port), diagnosis)| match diagnosis {
            Some(diagnosis) => format!("{host}:{port} {diagnosis}"),
            None => format!("{host}:{port} accepts connections but opened no session (last error: {last}){tls_hint}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
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

/// A server of a connect string: host and port.
type Server = (String, u16);

/// The servers of a connect string, as `(host, port)`, and its chroot (`""` if none), by zookeeper-client's rules:
/// `tcp://` and `tcp+tls://` prefixes, the chroot after the last server, the port 2181 by default, IPv6 addresses
/// in brackets: the servers are diagnosed one by one when no session opens.
fn parse(cluster: &str) -> Result<(Vec<Server>, &str), &'static str> {
    let mut chroot = None;
    let mut servers = Vec::new();
    for server in cluster.rsplit(',') {
        let mut server = match server.strip_prefix("tcp://").or_else(|| server.strip_prefix("tcp+tls://")) {
            Some(server) => server,
            None if server.is_empty() && chroot.is_none() => return Err("empty connect string"),
            None if server.is_empty() => return Err("empty server address"),
            None => server,
        };
        if chroot.is_none() {
            let slash = server.find('/').unwrap_or(server.len());
            chroot = Some(&server[slash..]);
            server = &server[..slash];
        }
        let (host, port) = match server.strip_prefix('[') {
            Some(bracketed) => match bracketed.split_once(']') {
                Some((host, "")) => (host, ""),
                Some((host, rest)) => (host, rest.strip_prefix(':').ok_or("invalid address")?),
                None => return Err("invalid address"),
            },
            None => server.rsplit_once(':').unwrap_or((server, "")),
        };
        if host.is_empty() {
            return Err("empty host");
        }
        let port = match port {
            "" => 2181,
            port => match port.parse::<u16>() {
                Ok(0) => return Err("invalid port number"),
                Ok(port) => port,
                Err(_) => return Err("invalid port"),
            },
        };
        servers.push((host.to_string(), port));
    }
    servers.reverse();
    Ok((servers, chroot.unwrap_or("")))
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
    fn connect_strings_are_split_into_servers_and_chroot() {
        let pair = |host: &str, port: u16| (host.to_string(), port);
        assert_eq!(parse("127.0.0.1:2181"), Ok((vec![pair("127.0.0.1", 2181)], "")));
        assert_eq!(parse("zk1:2182,zk2/chroot/x"), Ok((vec![pair("zk1", 2182), pair("zk2", 2181)], "/chroot/x")));
        assert_eq!(parse("tcp://[::1]:2183,tcp+tls://h:1/c"), Ok((vec![pair("::1", 2183), pair("h", 1)], "/c")));
        assert_eq!(parse("[::1]"), Ok((vec![pair("::1", 2181)], "")));
        assert_eq!(parse(""), Err("empty connect string"));
        assert_eq!(parse("a,,b"), Err("empty server address"));
        assert_eq!(parse("a:0"), Err("invalid port number"));
        assert_eq!(parse("a:x"), Err("invalid port"));
        assert_eq!(parse(":2181"), Err("empty host"));
        assert_eq!(parse("[::1"), Err("invalid address"));
    }

    #[tokio::test]
    async fn a_refused_connection_is_named_with_its_address() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let started = Instant::now();
        let connector = Client::connector().with_session_timeout(Duration::from_secs(30));
        let err = connect_with_options(
            connector,
            &format!("127.0.0.1:{port}"),
            ConnectOptions::new().connect_timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("cannot connect to ZooKeeper at 127.0.0.1:{port}: no session within 500ms")),
            "{message}"
        );
        assert!(message.contains(&format!("127.0.0.1:{port} refused the connection")), "{message}");
    }

    #[tokio::test]
    async fn fail_fast_gives_up_at_once_when_no_server_can_be_reached() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let cluster = format!("127.0.0.1:{port},no-such-host.invalid:2181");
        let options = ConnectOptions::new().connect_timeout(Duration::from_secs(60)).fail_fast(true);
        let started = Instant::now();
        let err = connect_with_options(Client::connector(), &cluster, options).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        let message = err.to_string();
        assert!(message.contains("fail-fast: no server can be reached"), "{message}");
        assert!(message.contains(&format!("127.0.0.1:{port} refused the connection")), "{message}");
        assert!(message.contains("no-such-host.invalid:2181 cannot be resolved"), "{message}");
    }

    #[tokio::test]
    async fn an_unresolvable_host_is_named() {
        let err = connect_within("no-such-host.invalid:2181", Duration::from_millis(300)).await;
        assert!(err.to_string().contains("no-such-host.invalid:2181 cannot be resolved"), "{err}");
    }

    #[tokio::test]
    async fn a_malformed_connect_string_fails_at_once() {
        let err = connect_within("", Duration::from_secs(5)).await;
        assert!(err.to_string().contains("invalid connect string"), "{err}");
    }

    /// The error of a connection to `cluster` that gives up after `connect_timeout`.
    async fn connect_within(cluster: &str, connect_timeout: Duration) -> Error {
        let options = ConnectOptions::new().connect_timeout(connect_timeout);
        connect_with_options(Client::connector(), cluster, options).await.unwrap_err()
    }
}
