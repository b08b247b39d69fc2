//! Supervision of the driver: a panic inside the task becomes a published `Failure` and a clean-up of the member's
//! nodes, and however the task ends, the handles' hold on the member's session is released.

use futures::FutureExt;
use zookeeper_client::Client;

use super::Driver;
use super::publish::Publisher;
use crate::paths::Paths;
use crate::retry::retry_transient;
use crate::session::SessionRelease;
use crate::zookeeper::ZooKeeper;

/// Runs the driver, and turns a panic into a published `Failure` plus a clean-up: every node of our session under
/// the partition path (our lock contenders and party node) is deleted, found with `GetEphemerals`, each request sent
/// again while it is lost with the connection (so until it succeeds or the session ends). However the task ends, it
/// then releases the handles' hold on the member's session: with no clone left, the session closes, and any node that
/// could not be deleted goes with it; a member that processes nothing never lingers in the party.
pub(crate) async fn supervise(driver: Driver, release: SessionRelease<Client>) {
    let (client, paths) = (driver.step.client().clone(), driver.step.paths().clone());
    let sender = driver.step.publisher().sender().clone();
    if let Err(panic) = std::panic::AssertUnwindSafe(driver.run()).catch_unwind().await {
        let reason = format!("the background task panicked: {}", proto::error::panic_message(&*panic));
        tracing::error!(%reason, "partitioner failed");
        Publisher::panicked(&sender, reason);
        crate::metrics::DriverMetrics::panicked(&paths);
        delete_our_nodes(&client, &paths).await;
    }
    release.release();
}

/// Deletes every ephemeral node of our session under the partition path (after a panic, when no bookkeeping is left
/// to trust). One session serves one member of a partition path, so these are all ours. Requests lost with the
/// connection are sent again; the client fails them for good once the session ends, which ends this too.
pub(crate) async fn delete_our_nodes<Z: ZooKeeper>(client: &Z, paths: &Paths) {
    #[cfg(test)]
    if proto::sabotage::breaks(proto::sabotage::Sabotage::CleanupOnce) {
        for base in [&paths.locks, &paths.party] {
            let Ok(nodes) = client.list_ephemerals(base).await else { continue };
            for node in nodes.iter().filter(|node| node.strip_prefix(base.as_str()).is_some_and(|r| r.starts_with('/')))
            {
                let _ = client.delete(node, None).await;
            }
        }
        return;
    }
    for base in [&paths.locks, &paths.party] {
        let nodes = match retry_transient(client, || client.list_ephemerals(base)).await {
            Ok(nodes) => nodes,
            Err(err) => {
                tracing::warn!(%err, base, "could not list our nodes after a panic; the session closes with them");
                continue;
            }
        };
        for node in nodes.iter().filter(|node| node.strip_prefix(base.as_str()).is_some_and(|r| r.starts_with('/'))) {
            match retry_transient(client, || client.delete(node, None)).await {
                Ok(()) | Err(crate::zookeeper::ZkError::NoNode) => {}
                Err(err) => tracing::warn!(%err, node, "could not delete a node after a panic"),
            }
        }
    }
}
