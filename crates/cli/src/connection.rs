//! The session flags `zkp worker`, `zkp inspect` and `zkp items` share (beside `tls.rs`): `--connect`, required by all
//! three (there is no default server: a tool that quietly reached 127.0.0.1:2181 could read or change the wrong
//! cluster), `--connect-timeout`, `--fail-fast`, `--auth` and the TLS flags, checked while the arguments are parsed,
//! and one connect error: the library's, which says what went wrong with each server. A connect that takes more than a
//! second says on stderr how long it will wait.
//!
//! Sessions are printed in decimal by all three, as ZooKeeper's clients return them (`Client::session_id().0`, kazoo's
//! `client_id[0]`); zkCli and the server's log print the same number in hex (`printf '%#x\n' <session>` converts).

use std::time::Duration;

use zk_partitioner::connection::ConnectOptions;
use zk_partitioner::zookeeper_client::Client;

use crate::tls::TlsArgs;

/// How long a connect may take before the tool says what it is waiting for.
const NOTICE_AFTER: Duration = Duration::from_secs(1);

/// The session flags (flattened into each tool's arguments).
#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    /// ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/chroot], or $ZOOKEEPER_CONNECT as ZooKeeper's own tools
    /// read it (required: no server is assumed)
    #[arg(long, value_name = "HOST:PORT[,...]", env = "ZOOKEEPER_CONNECT")]
    pub connect: String,
    /// Seconds to keep trying to open a session before exiting with the reason for each server (refused,
    /// unreachable, cannot be resolved, not ZooKeeper)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    pub connect_timeout: Duration,
    /// Give up at once, instead of waiting out --connect-timeout, when no server can be reached at all: every host
    /// name fails to resolve, or every server refuses the connection or does not answer within 1 s
    #[arg(long)]
    pub fail_fast: bool,
    /// Authenticate the session: SCHEME:CREDENTIALS, e.g. digest:USER:PASSWORD (to read or change nodes whose ACL
    /// grants that identity alone; `zkp worker` and `zkp items` then create their nodes creator-all, for that identity
    /// only)
    #[arg(long, value_name = "SCHEME:CREDENTIALS", value_parser = auth)]
    pub auth: Option<(String, String)>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl SessionArgs {
    /// Opens a session with `session_timeout` through `zk_partitioner::connection::connect_with_options`: the error is the
    /// library's, as is (`cannot connect to ZooKeeper at <connect string>: ...` with a reason per server, or the
    /// missing chroot).
    pub async fn open(&self, session_timeout: Duration) -> Result<Client, String> {
        let mut connector = Client::connector().with_session_timeout(session_timeout);
        if let Some((scheme, credentials)) = &self.auth {
            connector = connector.with_auth(scheme, credentials.as_bytes());
        }
        let (connector, cluster) = self.tls.apply(connector, &self.connect)?;
        let options = ConnectOptions::new().connect_timeout(self.connect_timeout).fail_fast(self.fail_fast);
        let connecting = zk_partitioner::connection::connect_with_options(connector, &cluster, options);
        tokio::pin!(connecting);
        // Say what the wait is once it is noticeable: a server that is still starting is waited for.
        tokio::select! {
            connected = &mut connecting => return connected.map_err(|err| err.to_string()),
            () = tokio::time::sleep(NOTICE_AFTER) => {}
        }
        let fail_fast =
            if self.fail_fast { "" } else { "; --fail-fast gives up at once when no server can be reached" };
        eprintln!(
            "connecting to {}: no session yet, waiting up to {:?} in all (--connect-timeout){fail_fast}",
            self.connect, self.connect_timeout
        );
        connecting.await.map_err(|err| err.to_string())
    }
}

/// A number of seconds, `0 < SECS <= 86400` (the library's bounds for its durations).
pub fn seconds(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 86400.0 => Ok(Duration::from_secs_f64(secs)),
        _ => Err("must be a number of seconds greater than 0 and at most 86400 (24 hours)".to_string()),
    }
}

/// `SCHEME:CREDENTIALS`, split at the first colon.
fn auth(value: &str) -> Result<(String, String), String> {
    match value.split_once(':') {
        Some((scheme, credentials)) if !scheme.is_empty() => Ok((scheme.to_string(), credentials.to_string())),
        _ => Err("must be SCHEME:CREDENTIALS, e.g. digest:USER:PASSWORD".to_string()),
    }
}
