//! The ACL of the nodes a partitioner creates: kazoo's open ACL by default, or the user's
//! ([`Builder::acls`](crate::Builder::acls)).

use std::sync::Arc;

use zookeeper_client::{Acl, Acls, CreateMode, CreateOptions};

/// One ACL for every node a partitioner creates: base path, party, lock directories and contenders, the shared set,
/// checkpoints. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeAcls(Arc<[Acl]>);

impl Default for NodeAcls {
    /// kazoo's: `world:anyone` with every permission.
    fn default() -> Self {
        NodeAcls::new(&Acls::anyone_all())
    }
}

impl NodeAcls {
    pub fn new(acls: &[Acl]) -> Self {
        NodeAcls(acls.into())
    }

    pub fn persistent(&self) -> CreateOptions<'_> {
        CreateMode::Persistent.with_acls(Acls::new(&self.0))
    }

    pub fn ephemeral(&self) -> CreateOptions<'_> {
        CreateMode::Ephemeral.with_acls(Acls::new(&self.0))
    }

    pub fn ephemeral_sequential(&self) -> CreateOptions<'_> {
        CreateMode::EphemeralSequential.with_acls(Acls::new(&self.0))
    }
}
