//! `Ctx`: one test's view of ZooKeeper: an isolated namespace on the shared server, an observer session, and
//! members with sessions of their own.

use std::time::Duration;

use zk_partitioner::Item;
use zk_partitioner::zookeeper_client::Client;
use zk_partitioner_testing::lock_contenders;

use super::members::{Member, build_member};
use super::{Proxy, timing, wait_for};

/// The session timeout members get unless a test asks otherwise.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

pub struct Ctx {
    /// `host:port` of the shared server.
    pub endpoint: String,
    /// The same, as a socket address (what a proxy forwards to).
    pub addr: std::net::SocketAddr,
    /// This test's chroot on it.
    pub namespace: String,
    /// A session that only looks: reads lock nodes and party children.
    pub observer: Client,
}

/// Lock nodes a test holds by hand, kazoo-style, to block members.
pub struct HeldLocks(Vec<String>);

impl Ctx {
    pub async fn new() -> Ctx {
        super::init_tracing();
        let server = super::server().await;
        let endpoint = server.endpoint().to_string();
        let namespace = super::namespace(&endpoint).await;
        let observer = super::connect(&format!("{endpoint}{namespace}"), SESSION_TIMEOUT).await;
        Ctx { endpoint, addr: server.addr(), namespace, observer }
    }

    /// A new session in this test's namespace.
    pub async fn client(&self) -> Client {
        super::connect(&format!("{}{}", self.endpoint, self.namespace), SESSION_TIMEOUT).await
    }

    /// A member of the party at `/partitioner` with its own session.
    pub async fn member(&self, identifier: &str, items: Vec<Item>) -> Member {
        let client = self.client().await;
        Self::start_member(client, identifier, items).await
    }

    /// A member whose session goes through a proxy the test can cut.
    pub async fn member_via_proxy(&self, identifier: &str, items: Vec<Item>, session: Duration) -> (Member, Proxy) {
        let proxy = Proxy::start(self.addr).await;
        let client = super::connect(&format!("{}{}", proxy.endpoint(), self.namespace), session).await;
        (Self::start_member(client, identifier, items).await, proxy)
    }

    /// A member whose builder `configure` adjusts (partition function, limits...).
    pub async fn member_with(
        &self,
        identifier: &str,
        items: Vec<Item>,
        configure: impl FnOnce(zk_partitioner::Builder) -> zk_partitioner::Builder,
    ) -> Member {
        let client = self.client().await;
        build_member(client, identifier, &items, configure).await
    }

    async fn start_member(client: Client, identifier: &str, items: Vec<Item>) -> Member {
        build_member(client, identifier, &items, |builder| builder).await
    }

    /// Takes the locks of `items` by hand with `client`, as a kazoo worker would (one contender each, created
    /// before any member's, so it holds them).
    pub async fn hold_locks(&self, client: &Client, path: &str, items: &[Item]) -> HeldLocks {
        let options = super::ephemeral_sequential();
        let mut nodes = Vec::new();
        for item in items {
            let dir = format!("{path}/locks/{item}");
            client.mkdir(&dir, &super::persistent()).await.expect("mkdir lock dir");
            let prefix = format!("{dir}/{}__lock__", "b".repeat(32));
            let (_, sequence) = client.create(&prefix, b"", &options).await.expect("create blocker lock");
            nodes.push(format!("{prefix}{sequence}"));
        }
        HeldLocks(nodes)
    }

    pub async fn release_locks(&self, client: &Client, held: HeldLocks) {
        for node in held.0 {
            client.delete(&node, None).await.expect("delete blocker lock");
        }
    }

    /// Waits until the contenders for `item`, in sequence order, belong to exactly these sessions.
    pub async fn wait_lock_queue(&self, path: &str, item: i64, sessions: &[i64]) {
        let dir = format!("{path}/locks/{item}");
        let observer = &self.observer;
        wait_for(&format!("lock queue of {dir} = {sessions:x?}"), timing(Duration::from_secs(10)), || async {
            let children = match observer.list_children(&dir).await {
                Ok(children) => children,
                Err(err) => return Err(format!("listing failed: {err}")),
            };
            let mut owners = Vec::new();
            for child in lock_contenders(&children) {
                if let Ok(Some(stat)) = observer.check_stat(&format!("{dir}/{child}")).await {
                    owners.push(stat.ephemeral_owner);
                }
            }
            if owners == sessions { Ok(()) } else { Err(format!("owners {owners:x?}")) }
        })
        .await;
    }
}
