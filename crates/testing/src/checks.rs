//! What a [`SafetyChecker`](super::SafetyChecker) counts: a [`Tally`] of the samples and claims it checked, of the
//! whole run and of its fault windows, and the violations it found, together in [`Checks`].

/// Counts of what a [`SafetyChecker`](super::SafetyChecker) checked: of the whole run ([`Checks::total`]), inside
/// fault windows ([`Checks::during_faults`]), or in one window ([`FaultWindow::close`](super::FaultWindow::close)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// Lock samples whose read of the lock holders succeeded.
    pub samples: u64,
    /// Lock samples whose read failed (server down, connection lost): their claims are not checked against the
    /// locks (they still are against each other, in the exclusive samples).
    pub unreadable: u64,
    /// Claims (member, item) checked against a lock holder read while the member's generation did not change.
    pub claims_checked: u64,
    /// Of those, claims of members watched through [`SafetyChecker::watch_claims`](super::SafetyChecker::watch_claims).
    pub external_claims_checked: u64,
    /// Samples checking that no item is held by two members, from their claims alone: taken whether or not
    /// ZooKeeper answers.
    pub exclusive_samples: u64,
    /// Claims checked against each other in those samples.
    pub exclusive_claims: u64,
}

impl Tally {
    pub(super) fn add(&mut self, other: &Tally) {
        self.samples += other.samples;
        self.unreadable += other.unreadable;
        self.claims_checked += other.claims_checked;
        self.external_claims_checked += other.external_claims_checked;
        self.exclusive_samples += other.exclusive_samples;
        self.exclusive_claims += other.exclusive_claims;
    }

    pub(super) fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            samples: self.samples - earlier.samples,
            unreadable: self.unreadable - earlier.unreadable,
            claims_checked: self.claims_checked - earlier.claims_checked,
            external_claims_checked: self.external_claims_checked - earlier.external_claims_checked,
            exclusive_samples: self.exclusive_samples - earlier.exclusive_samples,
            exclusive_claims: self.exclusive_claims - earlier.exclusive_claims,
        }
    }
}

/// What a [`SafetyChecker`](super::SafetyChecker) saw.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Checks {
    /// The counts of the whole run.
    pub total: Tally,
    /// How many fault windows were opened ([`SafetyChecker::fault`](super::SafetyChecker::fault)).
    pub fault_windows: u64,
    /// The same counts, of the samples taken while a fault window was open (at the sample's start or end).
    pub during_faults: Tally,
    /// Each violation: when (since the checker started), and what.
    pub violations: Vec<String>,
}

impl Checks {
    pub(super) fn count(&mut self, tally: &Tally, in_fault: bool) {
        self.total.add(tally);
        if in_fault {
            self.during_faults.add(tally);
        }
    }
}
