//! The optimistic update loop, the one every write to the set runs: read the set, decide, write conditionally on the
//! version read, and start over when another writer got there first, up to [`MAX_ATTEMPTS`] attempts with a random
//! back-off between them. A caller loops over [`SetStore::settled`] (or [`Attempts::another`], for a read or a
//! creation), deciding and writing in the loop's body: `continue` is "the set moved, read again".

use std::time::Duration;

use super::SetStore;
use crate::Error;
use crate::zookeeper::ZooKeeper;
use proto::set_layout::Committed;

/// Attempts of one update against concurrent writers before giving up (with the backoff below, about 10 s of
/// contention).
pub(super) const MAX_ATTEMPTS: u32 = 100;
/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// The attempts of one update (or one consistent read): how many were made.
#[derive(Default)]
pub(super) struct Attempts {
    made: u32,
}

impl Attempts {
    /// Starts another attempt, after a random pause from the second on: up to 2^n ms before the n-th, at most
    /// [`MAX_BACKOFF`], so writers that collided do not collide again in lockstep. `false` once [`MAX_ATTEMPTS`] were
    /// made.
    pub(super) async fn another<Z: ZooKeeper>(&mut self, zk: &Z) -> bool {
        if self.made == MAX_ATTEMPTS {
            return false;
        }
        if self.made > 0 {
            let ceiling = Duration::from_millis(1 << self.made.min(16)).min(MAX_BACKOFF);
            let fraction = (zk.random() & 0xffff) as u32;
            zk.sleep(ceiling.mul_f64(f64::from(fraction) / 65536.0)).await;
        }
        self.made += 1;
        true
    }
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// Starts another of `attempts` on a whole read of the committed set that has no unfinished staged change (one
    /// found is settled first: finished if committed, else undone; `own` are the change tags of this update's staged
    /// attempts, see `create_if_missing`), and returns the set read. A torn read or a settled change takes an attempt.
    ///
    /// # Errors
    /// [`Error::SharedSetConflict`] once the attempts are spent; a missing or unreadable set at once.
    pub(super) async fn settled(&self, zk: &Z, attempts: &mut Attempts, own: &[String]) -> Result<Committed, Error> {
        while attempts.another(zk).await {
            let Some(current) = self.committed(zk).await? else { continue };
            if let Some(unfinished) = &current.unfinished {
                self.settle(zk, unfinished, own).await?;
                continue;
            }
            return Ok(current);
        }
        Err(self.too_busy())
    }

    pub(super) fn too_busy(&self) -> Error {
        Error::SharedSetConflict {
            path: self.paths.node.clone(),
            reason: format!("other writers changed the set {MAX_ATTEMPTS} times during this update; try again"),
        }
    }
}
