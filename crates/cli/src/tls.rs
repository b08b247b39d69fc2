//! `--tls-ca`, `--tls-cert` and `--tls-key`, shared by every subcommand that opens a session.

use std::path::PathBuf;

use zk_partitioner::zookeeper_client::Connector;

/// The TLS flags.
#[derive(Debug, clap::Args)]
pub struct TlsArgs {
    /// Connect over TLS, trusting the CA certificates in this PEM file to authenticate the servers; the servers of
    /// --connect written without a scheme are then reached over TLS (as tcp+tls://HOST:PORT, the servers'
    /// secureClientPort). Needs zkp built with its default `tls` feature
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls-ca and --tls-key: the client certificate (PEM) to present, for servers that require one
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// With --tls-ca and --tls-cert: the client certificate's private key (PEM, unencrypted)
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// `connector` with the TLS options, and `cluster` with `tcp+tls://` before each server that has no scheme;
    /// both unchanged without --tls-ca.
    #[cfg(feature = "tls")]
    pub fn apply(&self, connector: Connector, cluster: &str) -> Result<(Connector, String), String> {
        let Some(ca) = &self.tls_ca else {
            return Ok((connector, cluster.to_string()));
        };
        let options = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => zk_partitioner::connection::tls_options_with_identity(ca, cert, key),
            _ => zk_partitioner::connection::tls_options(ca),
        }
        .map_err(|err| err.to_string())?;
        let cluster = cluster
            .split(',')
            .map(|server| if server.contains("://") { server.to_string() } else { format!("tcp+tls://{server}") })
            .collect::<Vec<_>>()
            .join(",");
        Ok((connector.with_tls(options), cluster))
    }

    /// Without the `tls` feature: an error if a TLS flag was given, instead of connecting in plain text.
    #[cfg(not(feature = "tls"))]
    pub fn apply(&self, connector: Connector, cluster: &str) -> Result<(Connector, String), String> {
        if self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some() {
            return Err("--tls-ca/--tls-cert/--tls-key need TLS support, which this build lacks: install zkp \
                        with its default features"
                .to_string());
        }
        Ok((connector, cluster.to_string()))
    }
}
