//! TLS options read from PEM files (feature `tls`).

use std::path::Path;

use zookeeper_client::TlsOptions;

use crate::Error;

/// TLS options for [`Connector::with_tls`](zookeeper_client::Connector::with_tls) that trust the CA certificates in
/// the PEM file `ca_file` (and the revocation lists it holds, if any) to authenticate the server.
///
/// TLS is used for the servers of the connect string written `tcp+tls://host:port`, the server's
/// `secureClientPort`; a server without a scheme is reached in plain text. The server's certificate must name the
/// host as written in the connect string (a DNS name, or an IP address in its subject alternative names).
///
/// Call this before connecting: if no process-wide rustls `CryptoProvider` is installed yet, it installs
/// aws-lc-rs's, the one `zookeeper_client`'s rustls is built with, so that connecting cannot panic when the
/// program's dependencies enable more than one rustls provider. To use another provider, install it first.
///
/// # Errors
/// [`Error::Tls`] if the file cannot be read, or holds no PEM certificate.
///
/// # Examples
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use std::time::Duration;
/// use zk_partitioner::connection::ConnectOptions;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let tls = zk_partitioner::connection::tls_options("/etc/zookeeper/ca.pem")?;
/// let connector = Client::connector().with_session_timeout(Duration::from_secs(10)).with_tls(tls);
/// let options = ConnectOptions::new().connect_timeout(Duration::from_secs(10));
/// let client = zk_partitioner::connection::connect_with_options(connector, "tcp+tls://zk1:2281", options).await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub fn tls_options(ca_file: impl AsRef<Path>) -> Result<TlsOptions, Error> {
    let ca_file = ca_file.as_ref();
    let ca = read("CA certificate", ca_file)?;
    install_crypto_provider();
    TlsOptions::new().with_pem_ca(&ca).map_err(|err| invalid("CA certificate", ca_file, &err))
}

/// [`tls_options`] plus a client certificate and its private key, for a server that authenticates its clients
/// (`ssl.clientAuth=need`): `cert_file` holds the certificate chain (PEM), `key_file` the certificate's private key
/// (PEM: PKCS #8, PKCS #1 or SEC1, unencrypted).
///
/// # Errors
/// [`Error::Tls`] if a file cannot be read, or does not hold what it should. A key that does not belong to the
/// certificate is detected when connecting (the server rejects the handshake).
///
/// # Examples
/// ```no_run
/// # fn dox() -> Result<(), zk_partitioner::Error> {
/// let tls = zk_partitioner::connection::tls_options_with_identity("ca.pem", "client.pem", "client-key.pem")?;
/// let connector = zk_partitioner::zookeeper_client::Client::connector().with_tls(tls);
/// # drop(connector);
/// # Ok(())
/// # }
/// ```
pub fn tls_options_with_identity(
    ca_file: impl AsRef<Path>,
    cert_file: impl AsRef<Path>,
    key_file: impl AsRef<Path>,
) -> Result<TlsOptions, Error> {
    let (cert_file, key_file) = (cert_file.as_ref(), key_file.as_ref());
    let options = tls_options(ca_file)?;
    let cert = read("client certificate", cert_file)?;
    let key = read("client private key", key_file)?;
    // `with_pem_identity` reports an unreadable certificate and a missing key alike: tell which file is at fault.
    if !cert.contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::Tls {
            what: "client certificate",
            file: cert_file.display().to_string(),
            reason: "no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)".to_string(),
        });
    }
    options.with_pem_identity(&cert, &key).map_err(|err| invalid("client private key", key_file, &err))
}

/// The contents of a PEM file.
fn read(what: &'static str, file: &Path) -> Result<String, Error> {
    std::fs::read_to_string(file).map_err(|err| Error::Tls {
        what,
        file: file.display().to_string(),
        reason: format!("cannot be read ({err})"),
    })
}

/// A PEM file that `zookeeper_client` refused.
fn invalid(what: &'static str, file: &Path, err: &zookeeper_client::Error) -> Error {
    Error::Tls { what, file: file.display().to_string(), reason: format!("not usable: {err}") }
}

/// Installs aws-lc-rs as the process's rustls provider unless one is installed already.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed a provider meanwhile: there is one either way.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (its key was thrown away): something `with_pem_ca` accepts.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBozCCAUmgAwIBAgIUY2M8oU+G6AiIghqVE3o+EYohp6AwCgYIKoZIzj0EAwIw
JjEkMCIGA1UEAwwbemstcGFydGl0aW9uZXItdW5pdC10ZXN0LWNhMCAXDTI2MTEy
MzE4NDUyNVoYDzIxMjYxMDMwMTg0NTI1WjAmMSQwIgYDVQQDDBt6ay1wYXJ0aXRp
b25lci11bml0LXRlc3QtY2EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQGw//y
QOqMzsuH8+MejJkXrXNofMVwSgDZlmNsYTk8ONZHDtlB4QA8+Eln3IEhLmI7GJNN
dnhWKtAKGmEb6DlQo1MwUTAdBgNVHQ4EFgQUtE3G/qrO+QieXZwd4eJHSo96zjww
HwYDVR0jBBgwFoAUtE3G/qrO+QieXZwd4eJHSo96zjwwDwYDVR0TAQH/BAUwAwEB
/zAKBggqhkjOPQQDAgNIADBFAiEAkCbaXVSOc9uyhLtoc3U2nrh3wmEOqKi7zuhM
I7EDIRsCIDmrcOYZLTL3xWGBUNk75DVWSoxTvvhWDUlY+k1gApEF
-----END CERTIFICATE-----
";

    /// A file of this test process's own in the temporary directory.
    fn file(name: &str, contents: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("zkp-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn a_pem_ca_certificate_is_accepted() {
        tls_options(file("ca.pem", CA)).unwrap();
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let message = tls_options("/no/such/ca.pem").unwrap_err().to_string();
        assert!(message.starts_with("TLS CA certificate /no/such/ca.pem: cannot be read ("), "{message}");
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_named() {
        let path = file("garbled-ca.pem", "not a certificate\n");
        let message = tls_options(&path).unwrap_err().to_string();
        assert!(message.starts_with(&format!("TLS CA certificate {}: not usable: ", path.display())), "{message}");
    }

    #[test]
    fn a_client_certificate_file_without_a_certificate_is_named() {
        let (ca, garbled) = (file("ca-2.pem", CA), file("garbled-cert.pem", "garbage\n"));
        let message = tls_options_with_identity(&ca, &garbled, &garbled).unwrap_err().to_string();
        assert!(message.starts_with(&format!("TLS client certificate {}: no PEM", garbled.display())), "{message}");
    }

    #[test]
    fn a_client_key_file_without_a_key_is_named() {
        // The CA certificate stands in for the client's: what matters is that the key file holds no key.
        let (ca, no_key) = (file("ca-3.pem", CA), file("no-key.pem", CA));
        let message = tls_options_with_identity(&ca, &ca, &no_key).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("TLS client private key {}: not usable: ", no_key.display())),
            "{message}"
        );
    }

    #[test]
    fn a_missing_client_key_file_is_named() {
        let ca = file("ca-4.pem", CA);
        let message = tls_options_with_identity(&ca, &ca, "/no/such/key.pem").unwrap_err().to_string();
        assert!(message.starts_with("TLS client private key /no/such/key.pem: cannot be read ("), "{message}");
    }
}
