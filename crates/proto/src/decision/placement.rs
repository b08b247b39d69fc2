//! The placement record, for a partition function that keeps the placement ([`PartitionFn::keeps_placement`]): the
//! record in force is read before every assignment and followed, each assignment is computed from it, and the party's
//! first member writes the assignment once every member agrees and it holds its share (`docs/sticky-placement.md`).
//!
//! A record written for the inputs in force is the assignment every member computed from the record before it, so
//! a member whose own assignment has the record's digest only takes note. A record that says something else (written
//! while this member decided on other inputs, or deleted by hand) is an input change: the assignment is computed
//! again from it, as after a change of the shared set, so that every member ends up computing from the same one.
//!
//! [`PartitionFn::keeps_placement`]: crate::PartitionFn::keeps_placement

use std::sync::Arc;

use super::{Cause, Core, Op, Pending, Reason, ReqError};
use crate::partition_fn::guarded;
use crate::placement::record::{Found, Read, Write};
use crate::placement::record::{Record, inputs_digest};
use crate::sabotage::{Sabotage, breaks};
use crate::set_layout::Kind;
use crate::{Item, PartitionState, Weighted};

/// The core's view of the record.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// The function keeps the placement: the record is followed and written.
    on: bool,
    read: Option<super::ReqId>,
    /// The assignment the read in flight expects to find (our latest when it was sent).
    expected: Option<Arc<Record>>,
    /// The latest read is newer than the last change notification.
    fresh: bool,
    /// The index node's version as last read (`None`: no node).
    version: Option<i32>,
    /// The record in force as last read: what the next assignment is computed from (`None`: none, or unreadable).
    in_force: Option<Arc<Record>>,
    /// Our latest assignment, and the record it was computed from.
    computed: Option<(Arc<Record>, Option<Identity>)>,
    writing: Option<super::ReqId>,
    /// The assignment last written, or found unrecordable: not written again.
    written: Option<Identity>,
}

/// What identifies an assignment: the digests of its inputs and of its owners.
type Identity = (u64, u64);

impl Placement {
    pub fn new(on: bool) -> Self {
        Placement { on, fresh: !on, ..Placement::default() }
    }

    /// Whether an assignment may be computed: the record in force has been read since it last changed.
    pub fn ready(&self) -> bool {
        !self.on || self.fresh
    }

    /// Whether the function keeps the placement (the record is followed and written).
    pub fn on(&self) -> bool {
        self.on
    }

    /// The record changed: read it again.
    pub fn mark_stale(&mut self) {
        self.fresh = false;
    }
}

fn identity(record: &Record) -> Identity {
    (record.inputs, record.digest)
}

impl Core {
    /// Reads the record again after a change notification (and at the start).
    pub(super) fn read_placement_if_stale(&mut self) {
        let p = &self.placement;
        if p.on && !p.fresh && p.read.is_none() && self.may_send() {
            let expected = p.computed.as_ref().map(|(computed, _)| computed.clone());
            let expect = expected.as_ref().map(|computed| computed.digest);
            let kind = Kind::of(self.set.catalogue().sorted());
            self.placement.expected = expected;
            self.placement.read = Some(self.request(Op::ReadPlacement { expect, kind }, Pending::ReadPlacement));
        }
    }

    pub(super) fn on_placement(&mut self, result: Result<Read, ReqError>) {
        self.placement.read = None;
        let expected = self.placement.expected.take();
        let read = match result {
            Ok(read) => read,
            Err(ReqError::Transient | ReqError::NoNode) => return self.back_off(),
            Err(ReqError::Fatal(cause)) => return self.fail(cause),
        };
        if read.found == Found::Torn {
            // The record moved on under the read: read it again (its watch fires too) before deciding anything.
            return self.back_off();
        }
        self.placement.fresh = true;
        self.placement.version = read.version;
        let computed = self.placement.computed.clone();
        let in_force = match read.found {
            Found::Nothing | Found::Torn => None,
            Found::Unreadable(reason) => {
                tracing::warn!(%reason, "the placement record cannot be read; placing as if there were none");
                None
            }
            // The assignment we expected, as recorded (for these inputs: the digest says the same owners).
            Found::Expected { inputs } => expected.map(|own| match own.inputs == inputs {
                true => own,
                false => Arc::new(Record { inputs, ..(*own).clone() }),
            }),
            Found::Record(record) => Some(record),
        };
        let now = in_force.as_deref().map(identity);
        self.placement.in_force = in_force;
        // A write is not repeated while the record says it (or it could not be recorded); a record that says
        // something else (deleted by hand, say) is written again.
        if self.placement.written != now {
            self.placement.written = None;
        }
        // The assignment in force came from another record than this one: every member computes from this one, so
        // must we, unless it gives what we hold. A record of our very assignment (the usual case: the first member
        // wrote what we all computed) gives it; any other is compared by computing, not by digest: the same owners
        // under other inputs may still give another assignment for ours (the rule is not idempotent at every size).
        if let Some((own, from)) = &computed
            && *from != now
            && now != Some(identity(own))
            && self.share.target().is_some()
            && !breaks(Sabotage::PlacementChangeIgnored)
            && self.placed_again().is_none_or(|again| again.owners != own.owners)
        {
            self.on_inputs_changed(Reason::SharedSetChanged);
        }
    }

    /// The whole assignment the record in force gives for the inputs our assignment was computed for; `None` if the
    /// function fails or says nothing (then computed again, by the decision that reports it).
    fn placed_again(&self) -> Option<Arc<Record>> {
        let (items, weights) = (self.set.catalogue().sorted(), self.set.catalogue().weights());
        // Capacities are the latest party's: only comparable while it is the assignment's (else a decision is due).
        let capacities = self.capacities().filter(|_| **self.party.members() == *self.party.latest())?;
        let input = Weighted::new(self.party.me(), self.party.members(), &capacities, items, weights);
        self.placed_share(&input).ok()?.1
    }

    /// Our share of `input` under a function that keeps the placement, computed from the record in force, and the
    /// whole assignment (`None` when the function does not say it: then computed as any other function's).
    pub(super) fn placed_share(&self, input: &Weighted<'_>) -> Result<(Vec<Item>, Option<Arc<Record>>), Cause> {
        let inputs = self.inputs_digest(input);
        let in_force = self.placement.in_force.as_deref();
        let previous = in_force.map(|record| record.previous_for(input.members, input.items));
        // A record for these very inputs is the assignment: handed out as it is, never computed again (every member
        // that computes from it would get it back only if the function is idempotent; this way, none needs to).
        if let (Some(record), Some(previous)) = (in_force, &previous)
            && record.inputs == inputs
            && !breaks(Sabotage::PlacementRecomputed)
            && let Some(owners) = previous.iter().copied().collect::<Option<Vec<usize>>>()
        {
            let placed = Record::computed(inputs, input.members, self.set.catalogue().sorted_shared(), &owners);
            if let Some(placed) = placed.filter(|placed| placed.digest == record.digest) {
                let me = input.members.iter().position(|member| member == input.me);
                let mine = input.items.iter().zip(&owners).filter(|&(_, &owner)| Some(owner) == me);
                return Ok((mine.map(|(item, _)| item.clone()).collect(), Some(Arc::new(placed))));
            }
        }
        let with_previous = match &previous {
            Some(previous) => input.with_previous(previous),
            None => *input,
        };
        // User code: a panic becomes a Failure with its cause.
        let owners = guarded(|| self.cfg.partition_fn.placement(&with_previous)).map_err(Cause::PartitionFn)?;
        let Some(owners) = owners else {
            let mine = guarded(|| self.cfg.partition_fn.partition_weighted(input)).map_err(Cause::PartitionFn)?;
            return Ok((mine, None));
        };
        let record = Record::computed(inputs, input.members, self.set.catalogue().sorted_shared(), &owners)
            .ok_or_else(|| {
                Cause::PartitionFn("returned a placement that does not match the items and members".into())
            })?;
        let me = input.members.iter().position(|member| member == input.me);
        let mine =
            input.items.iter().zip(&owners).filter(|&(_, &owner)| Some(owner) == me).map(|(item, _)| item.clone());
        Ok((mine.collect(), Some(Arc::new(record))))
    }

    /// Remembers the assignment just taken (and the record it came from).
    pub(super) fn note_placement(&mut self, computed: Option<Arc<Record>>) {
        let from = self.placement.in_force.as_deref().map(identity);
        self.placement.computed = computed.map(|record| (record, from));
    }

    /// The digest of our latest assignment, for the announcement (`None` unless the function keeps the placement).
    pub(super) fn placement_digest(&self) -> Option<u64> {
        self.placement.computed.as_ref().map(|(computed, _)| computed.digest)
    }

    /// Our latest assignment's owners.
    #[cfg(test)]
    pub(super) fn placement_owners(&self) -> Option<Vec<u32>> {
        self.placement.computed.as_ref().map(|(computed, _)| computed.owners.clone())
    }

    /// The inputs our latest assignment was computed from.
    #[cfg(test)]
    pub(super) fn placement_inputs(&self) -> Option<u64> {
        self.placement.computed.as_ref().map(|(computed, _)| computed.inputs)
    }

    /// What an assignment was computed from ([`inputs_digest`]): the set by its content (the catalogue's items and
    /// weights), not by the shared set's version, so that members holding the same items and weights under different
    /// versions name the same inputs.
    fn inputs_digest(&self, input: &Weighted<'_>) -> u64 {
        let content = match breaks(Sabotage::PlacementInputsByVersion) {
            // The old identity: the set named by its version, which a change that moves nothing relabels.
            true => self.set.catalogue().content() ^ self.set.catalogue().version().unwrap_or_default(),
            false => self.set.catalogue().content(),
        };
        inputs_digest(content, self.cfg.agreement.function, input.members, input.capacities)
    }

    /// The party's first member writes its assignment as the record once it holds its share, every member agrees
    /// with it, and the record says something else (or nothing).
    pub(super) fn write_placement_if_due(&mut self) {
        let p = &self.placement;
        let Some((own, _)) = &p.computed else { return };
        let first = self.party.first();
        let due = p.on
            && p.fresh
            && p.read.is_none()
            && p.writing.is_none()
            && first
            && self.may_send()
            && self.published.shown().state() == PartitionState::Acquired
            && !self.target_due()
            && **self.party.members() == *self.party.latest()
            && self.party.disagreements().is_empty()
            && p.in_force.as_deref().map(identity) != Some(identity(own))
            && p.written != Some(identity(own));
        if !due {
            return;
        }
        let write =
            Write { version: p.version, assignment: own.clone(), kind: Kind::of(self.set.catalogue().sorted()) };
        self.placement.written = Some(identity(own));
        self.placement.writing = Some(self.request(Op::WritePlacement(Box::new(write)), Pending::WritePlacement));
    }

    pub(super) fn on_placement_written(&mut self, result: Result<bool, ReqError>) {
        self.placement.writing = None;
        match result {
            // Written: its watch brings it. Moved on meanwhile: read it again.
            Ok(true) => {}
            Ok(false) => {
                self.placement.written = None;
                self.placement.fresh = false;
            }
            Err(ReqError::Fatal(Cause::SessionEnded(end))) => self.fail(Cause::SessionEnded(end)),
            // Refused (an ACL, say): the members place without a record, and the writer tries again at the next
            // assignment.
            Err(ReqError::Fatal(cause)) => tracing::warn!(?cause, "could not write the placement record"),
            Err(_) => {
                self.placement.written = None;
                self.back_off();
            }
        }
    }
}
