//! What a failed request means: lost with the connection (send it again, after checking what the server did), or
//! the session's end; and the loop that sends a request again until it is answered or the session ends.

use std::future::Future;
use std::time::Duration;

use proto::decision::Code;
use zookeeper_client::SessionState;

use crate::zookeeper::{ZkError, ZooKeeper};

/// The session state a client error implies, when the error means the session is over.
pub(crate) fn session_end(err: &zookeeper_client::Error) -> Option<SessionState> {
    use zookeeper_client::Error as E;
    match err {
        E::SessionExpired | E::SessionMoved => Some(SessionState::Expired),
        E::ClientClosed => Some(SessionState::Closed),
        E::AuthFailed => Some(SessionState::AuthFailed),
        _ => None,
    }
}

/// Whether a failed request may have been lost with the connection, so that retrying (after checking what the server
/// did) is the right reaction: the core's rule ([`Code::is_transient`]), for the client's error.
pub(crate) fn is_transient(err: &zookeeper_client::Error) -> bool {
    code_of(err).is_transient()
}

/// The client's error, as the core's code.
pub(crate) fn code_of(err: &ZkError) -> Code {
    match err {
        ZkError::NoNode => Code::NoNode,
        ZkError::NodeExists => Code::NodeExists,
        ZkError::BadVersion => Code::BadVersion,
        ZkError::NotEmpty => Code::NotEmpty,
        ZkError::NoAuth => Code::NoAuth,
        ZkError::ConnectionLoss => Code::ConnectionLoss,
        // The client's I/O errors and connection timeouts.
        ZkError::Custom(_) => Code::Io,
        ZkError::Throttled => Code::Throttled,
        ZkError::Timeout => Code::Timeout,
        ZkError::NoHosts => Code::NoHosts,
        ZkError::SessionExpired => Code::SessionExpired,
        ZkError::SessionMoved => Code::SessionMoved,
        ZkError::ClientClosed => Code::ClientClosed,
        ZkError::AuthFailed => Code::AuthFailed,
        ZkError::Unimplemented => Code::Unimplemented,
        _ => Code::Other,
    }
}

/// Runs a request until it gives an answer that is not a lost connection. The client queues requests while it
/// reconnects and fails them for good once the session ends, so this loop ends with the session at the latest.
pub(crate) async fn retry_transient<Z, T, F, Fut>(zk: &Z, mut request: F) -> Result<T, ZkError>
where
    Z: ZooKeeper,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ZkError>>,
{
    let mut delay = Duration::from_millis(10);
    loop {
        match request().await {
            Err(err) if is_transient(&err) => {
                tracing::warn!(error = %err, ?delay, "retrying a request lost with the connection");
                zk.sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}
