//! The party and its assignment: reading `<path>/party`, the members' announcements (and the disagreements they
//! reveal), stray nodes of our own, the quiet period's early work ([`PartitionFn::prepare`](crate::PartitionFn))
//! and the share the partition function gives us.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::timers::Timer;
use super::{Cause, Core, Op, PartyRead, Pending, Reason, ReqError, ReqId};
use crate::announcement::Agreement;
use crate::layout;
use crate::partition_fn::guarded;
use crate::placement::record::Record;
use crate::sabotage::{Sabotage, breaks};
use crate::{Disagreement, Load, Weighted};

/// The party as this member follows it: the latest read, the quiet period, our own node, and what the others
/// announce.
pub(super) struct PartyView {
    /// This member's name in the party.
    me: Arc<str>,
    read: Option<ReqId>,
    /// The latest party read is newer than the last change notification.
    fresh: bool,
    latest: Vec<String>,
    /// The quiet period (by its start) for which the partition function last worked ahead.
    prepared: Option<Instant>,
    /// Our own party node was in the latest read.
    in_party: bool,
    debounce: super::debounce::Debounce,
    joining: Option<ReqId>,
    /// The members the assignment in force was computed from.
    members: Arc<[String]>,
    /// The party of the assignment the quiet period last decided, with its capacities: what the departure fast path
    /// computes the departed members' items from.
    decided_party: Option<DecidedParty>,
    /// The departed members' items the latest hand-over took, if the latest assignment adopted was one (the
    /// checker's log).
    #[cfg(any(test, feature = "sim"))]
    last_orphans: Option<BTreeSet<usize>>,
    /// What the other members announce, and the disagreements it shows.
    announcements: Announcements,
    /// How many departures were handed over at once (the checker's count of the fast path).
    hand_overs: u64,
    /// How many assignments the quiet period decided (the checker's count: a hand-over is not one).
    #[cfg(any(test, feature = "sim"))]
    decided: u64,
}

impl PartyView {
    /// Not read yet, our node `me` in it (the join happened before the core was built).
    pub(super) fn new(me: Arc<str>, debounce: super::debounce::Debounce, now: Instant) -> Self {
        PartyView {
            me,
            read: None,
            fresh: false,
            latest: Vec::new(),
            prepared: None,
            in_party: true,
            debounce,
            joining: None,
            members: Arc::from([]),
            decided_party: None,
            #[cfg(any(test, feature = "sim"))]
            last_orphans: None,
            announcements: Announcements::new(now),
            hand_overs: 0,
            #[cfg(any(test, feature = "sim"))]
            decided: 0,
        }
    }

    /// This member's name in the party.
    pub(super) fn me(&self) -> &Arc<str> {
        &self.me
    }

    /// Whether we are the party's first member (who sees to the shared set's updates whose writer is gone).
    pub(super) fn first(&self) -> bool {
        self.latest.first().is_some_and(|first| **first == *self.me)
    }

    /// The party's member names as last read, sorted.
    pub(super) fn latest(&self) -> &[String] {
        &self.latest
    }

    /// The members the assignment in force was computed from.
    pub(super) fn members(&self) -> &Arc<[String]> {
        &self.members
    }

    /// How many departures were handed over at once, without the quiet period.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn hand_overs(&self) -> u64 {
        self.hand_overs
    }

    /// How many assignments the quiet period decided.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn decided(&self) -> u64 {
        self.decided
    }

    /// The orphans of the latest hand-over, if the latest assignment adopted was one (the checker's log).
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn last_orphans(&self) -> Option<&BTreeSet<usize>> {
        self.last_orphans.as_ref()
    }

    /// The party of the assignment the quiet period last decided (the checker's).
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn decided_members(&self) -> Option<&[String]> {
        self.decided_party.as_ref().map(|decided| &*decided.members)
    }

    /// Whether the latest party read is newer than the last change notification.
    pub(super) fn fresh(&self) -> bool {
        self.fresh
    }

    /// Whether our own party node was in the latest read.
    pub(super) fn in_party(&self) -> bool {
        self.in_party
    }

    /// The party changed: read it again.
    pub(super) fn mark_stale(&mut self) {
        self.fresh = false;
    }

    /// Whether the party has been quiet for `time_boundary` (with our jitter).
    pub(super) fn quiet(&self, now: Instant) -> bool {
        self.debounce.ready(now)
    }

    /// When the quiet period ends, as it stands.
    pub(super) fn quiet_at(&self) -> Instant {
        self.debounce.ready_at()
    }

    /// The quiet period starts again now (a party change, or everything given up).
    pub(super) fn restart_quiet_period(&mut self, now: Instant) {
        self.debounce.changed(now, self.latest.len());
    }

    /// The set changed under a stable party (incremental): a shorter quiet period batches the stream of versions.
    pub(super) fn set_changed_quiet_period(&mut self, now: Instant) {
        self.debounce.set_changed(now);
    }

    /// Members announcing another set or function, as last found.
    pub(super) fn disagreements(&self) -> &Arc<[Disagreement]> {
        self.announcements.disagreements()
    }

    /// Our own announcement changed at `now`.
    pub(super) fn announcement_changed(&mut self, now: Instant) {
        self.announcements.ours_changed(now);
    }
}

/// The party of an assignment the quiet period decided, and their capacities (a departed member's announcement is
/// gone once it has left, so they are kept with it).
pub(super) struct DecidedParty {
    members: Arc<[String]>,
    capacities: Arc<[u32]>,
}

/// A member's announcement as read: what it says, the zxid of the write that said it, and when we read it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Announcement {
    /// `None`: nothing this crate understands (a kazoo member).
    agreement: Option<Agreement>,
    written: i64,
    read_at: Instant,
}

/// What the other members announce, and what we make of it. Its state is this module's: other concerns ask for the
/// disagreements, and say when our own announcement changed.
pub(super) struct Announcements {
    /// The children of `<path>/party` as last read (member nodes and others).
    nodes: Vec<String>,
    /// What each party node announces, by node name, once read (`None`: nothing this crate understands, e.g. a
    /// kazoo member), and when it was read. A node's data changes only when its member follows another version of
    /// the shared set, or (a sticky function) takes another assignment.
    by_node: BTreeMap<String, Announcement>,
    /// Members announcing a difference a member has while it follows a change (another version of the shared set,
    /// another assignment): by node, the write that announced it (its zxid), and since when we have seen it differ
    /// from ours. Reported once a read made `catch_up` after that still shows it.
    catching_up: BTreeMap<String, (i64, Instant)>,
    /// When our own announcement last changed: a read of another's from before it compared theirs with a line we no
    /// longer announce, so it reports nothing until read again.
    announced_at: Instant,
    /// An announcement read in flight.
    read: Option<ReqId>,
    /// Members announcing another set or function (as of the latest party read).
    disagreements: Arc<[Disagreement]>,
}

impl Announcements {
    pub fn new(now: Instant) -> Self {
        Announcements {
            nodes: Vec::new(),
            by_node: BTreeMap::new(),
            catching_up: BTreeMap::new(),
            announced_at: now,
            read: None,
            disagreements: Arc::from([]),
        }
    }

    /// Members announcing another set or function, as last found.
    pub fn disagreements(&self) -> &Arc<[Disagreement]> {
        &self.disagreements
    }

    /// Our own announcement changed at `now`.
    pub fn ours_changed(&mut self, now: Instant) {
        self.announced_at = now;
    }
}

/// A whole assignment, as a function that keeps the placement computed it.
type Placed = Arc<Record>;

impl Core {
    /// Someone (an operator, or a bug elsewhere) removed our party node: join again, which changes the party.
    pub(super) fn rejoin(&mut self) {
        if self.party.joining.is_none() && self.may_send() {
            let data = self.cfg.agreement.node_data(&self.cfg.identifier);
            self.party.joining = Some(self.request(Op::Join(data), Pending::Join));
        }
    }

    /// The reply to our join: our node's name is our member name from now on.
    pub(super) fn on_joined(&mut self, result: Result<String, ReqError>) {
        self.party.joining = None;
        match result {
            Ok(node) => {
                self.party.me = layout::member_name(&node).unwrap_or(&node).into();
                self.cfg.party_node = node;
                self.party.fresh = false;
                self.party.restart_quiet_period(self.now);
            }
            Err(ReqError::Fatal(cause)) => self.fail(cause),
            Err(_) => self.back_off(),
        }
    }

    /// Reads the party again after a change notification (unless a read or our join is in flight).
    pub(super) fn read_party_if_stale(&mut self) {
        if self.may_send() && self.party.read.is_none() && !self.party.fresh && self.party.joining.is_none() {
            self.party.read = Some(self.request(Op::ReadParty, Pending::Party));
        }
    }

    /// Lets the partition function work ahead, once per quiet period, a quarter of `time_boundary` into it.
    pub(super) fn prepare_if_due(&mut self) {
        if self.prepare_due().is_some_and(|at| self.now >= at) && !self.party.debounce.ready(self.now) {
            self.party.prepared = Some(self.party.debounce.last_change());
            self.prepare();
        }
    }

    /// The quiet period has lasted `time_boundary`: our share under the party as it stands becomes the target.
    pub(super) fn take_assignment(&mut self) -> Result<(), Cause> {
        let (target, load, placement) = self.assignment(&self.party.latest)?;
        self.adopt(load, placement, None, |share| share.set(target));
        Ok(())
    }

    /// Makes our share under the party as it stands the assignment in force (`set` writes the target); `orphans`:
    /// the departed members' items a hand-over handed over, `None` for an assignment the quiet period decided.
    fn adopt(
        &mut self,
        load: Load,
        placement: Option<Placed>,
        orphans: Option<BTreeSet<usize>>,
        set: impl FnOnce(&mut super::rebalance::Share),
    ) {
        self.note_placement(placement);
        self.share.set_load(load);
        self.party.members = self.party.latest.clone().into();
        if orphans.is_none() {
            let capacities = self.capacities().unwrap_or_else(|| vec![1; self.party.latest.len()]).into();
            self.party.decided_party = Some(DecidedParty { members: self.party.members.clone(), capacities });
            #[cfg(any(test, feature = "sim"))]
            {
                self.party.decided += 1;
            }
        }
        #[cfg(any(test, feature = "sim"))]
        {
            self.party.last_orphans = orphans;
        }
        set(&mut self.share);
        self.locks.set_want_is_target(false);
        self.note_set_in_force();
        self.announce();
    }

    /// The departure fast path: a party read after a change notification, with the assignment in force, judged
    /// here rather than at the notification ([`hands_over_departures`](Core::hands_over_departures)). A change that
    /// is only departures of dynamic members is handed over at once; anything else (a join, a static member's
    /// departure, which may be a restart, a change while the set changes too) starts a new episode, as at the
    /// notification without the fast path. The quiet period was restarted at the notification already.
    fn judge_party_change(&mut self) {
        if self.ending.is_some() || self.share.target().is_none() || self.party.latest == *self.party.members {
            // Settling (the quiet period governs), or nothing changed for the assignment in force.
            return;
        }
        let ready = !self.share.outdated()
            && self.session.connected()
            && self.set.fresh()
            && self.capacities_known()
            && self.placement.ready();
        let departures_only = self.departures_only();
        if ready && departures_only {
            if let Err(cause) = self.hand_over() {
                self.fail(cause);
            }
            return;
        }
        if departures_only {
            // Why a departure waits the quiet period after all: what an operator reads when failover was slow.
            tracing::debug!(
                set_changing = self.share.outdated(),
                connected = self.session.connected(),
                set_fresh = self.set.fresh(),
                capacities_known = self.capacities_known(),
                placement_ready = self.placement.ready(),
                "a departure waits the quiet period"
            );
        }
        self.on_inputs_changed(Reason::PartyChanged);
    }

    /// Whether the party as last read is the party in force less some dynamic members (one join's names, never
    /// taken again; a static member's departure may be a restart within `time_boundary`), ourselves still in it.
    fn departures_only(&self) -> bool {
        let (latest, in_force) = (&self.party.latest, &self.party.members);
        let only_departures = latest.len() < in_force.len()
            && latest.iter().all(|member| in_force.binary_search(member).is_ok())
            && in_force.iter().filter(|m| latest.binary_search(m).is_err()).all(|gone| layout::is_dynamic_member(gone));
        let me_in_it = self.party.in_party && latest.binary_search_by(|m| (**m).cmp(&*self.party.me)).is_ok();
        me_in_it && (only_departures || breaks(Sabotage::HandOverJoins))
    }

    /// Our share under the party without the departed members, at once: the departed members' items that we gain
    /// are taken now (each as soon as its holder's lock node is gone, which the lock decides), and every item we hold
    /// is kept. What else the change would move (a load bound's shifts between survivors: one we would lose, one we
    /// would gain from a survivor) waits for the quiet period, restarted at the change: the target is deferred until
    /// then, and the assignment then computed moves it. Another departure meanwhile is handed over too: two crashes a
    /// second apart are two hand-overs ([`orphans`](Core::orphans) says which items each takes).
    fn hand_over(&mut self) -> Result<(), Cause> {
        // The departed members' items (computed first: a function that remembers its latest party, as Rendezvous
        // does, then follows the change from the decided party to the latest).
        let (orphans, departed) = self.orphans()?;
        let (target, load, placement) = self.assignment(&self.party.latest)?;
        tracing::info!(departed, their_items = orphans.len(), "departure handed over at once");
        self.party.hand_overs += 1;
        self.adopt(load, placement, Some(orphans.clone()), |share| share.hand_over(target, &orphans));
        self.on_new_episode(Reason::PartyChanged);
        Ok(())
    }

    /// The items a hand-over may take at once, and how many members they come from: what the assignment the quiet
    /// period last decided gave to each member gone since, not only to those gone since the latest hand-over. Every
    /// survivor computes the same set whichever departures it saw one at a time and which together (a server's
    /// pause ends several sessions at once, and one survivor reads them gone in one read, another in two): the
    /// items an earlier hand-over gave to a member that is gone too are in the decided shares of members gone
    /// (an orphan, recursively), so the union is the same either way. An item an earlier hand-over gave to a
    /// survivor that now goes to another leaves the first one's target at once and is the other's
    /// ([`Share::hand_over`](super::rebalance::Share::hand_over)). (Counting a departed member's holdings hand-over by
    /// hand-over, as the core once did, is not the same for two survivors that saw the departures differently: one
    /// thought an item its neighbour's, which the neighbour never took, and it waited the quiet period.)
    fn orphans(&self) -> Result<(BTreeSet<usize>, usize), Cause> {
        let Some(decided) = &self.party.decided_party else { return Ok((BTreeSet::new(), 0)) };
        let latest = &self.party.latest;
        // (Sabotage: only the members gone since the party in force, as if each hand-over stood alone.)
        let counted = |gone: &&String| {
            !breaks(Sabotage::OrphansOfTheLatestChangeOnly) || self.party.members.binary_search(gone).is_ok()
        };
        let (mut orphans, mut departed) = (BTreeSet::new(), 0);
        for gone in decided.members.iter().filter(|member| latest.binary_search(member).is_err()).filter(counted) {
            orphans.extend(self.assignment_of(gone, &decided.members, &decided.capacities)?.0);
            departed += 1;
        }
        Ok((orphans, departed))
    }

    /// The party or the set changed: the assignment in force is no longer right.
    pub(super) fn on_inputs_changed(&mut self, reason: Reason) {
        if self.ending.is_some() {
            return;
        }
        // A party change restarts the quiet period, as in kazoo. A set change starts one only when none is under
        // way: every finish or split is a version of its own, and a stream of them (one per shard a stream closes)
        // must not postpone every member's allocation until it ends. The set read when the period ends is the one
        // used, so a change waits one period after the first one at most: `time_boundary` under Eager (everyone
        // releases), a quarter of it under Incremental (a shorter wait there also leaves less time for members to
        // decide on different versions, whose answers differ for items near a load bound).
        let set_change = reason == Reason::SharedSetChanged;
        if !set_change {
            self.party.restart_quiet_period(self.now);
        } else if self.share.target().is_some() && !self.share.outdated() {
            self.debounce_set_change();
        }
        self.locks.set_want_is_target(false);
        if set_change && self.keeps_target_through_set_changes() && self.share.target().is_some() {
            return self.outdate_target();
        }
        if !self.share.clear() {
            return;
        }
        self.on_new_episode(reason);
    }

    /// Incremental, the set changed under a stable party: the target stays in force, less the items that left the
    /// set, until the quiet period ends and the new one replaces it. Gains under way are not given up (a stream of
    /// versions closer together than a lock's round trip would otherwise keep a member from ever completing them),
    /// and listed items that left the set are revoked at once.
    fn outdate_target(&mut self) {
        let catalogue = self.set.catalogue();
        if self.share.outdate(|item| catalogue.contains(item)) {
            self.on_new_episode(Reason::SharedSetChanged);
        }
    }

    pub(super) fn on_party(&mut self, result: Result<PartyRead, ReqError>) {
        self.party.read = None;
        match result {
            Ok(PartyRead { children }) => {
                // Our node's name, not our member name: under static membership another process may carry it.
                self.party.in_party = children.contains(&self.cfg.party_node);
                let members = layout::members(&children).0;
                if members != self.party.latest {
                    self.party.debounce.changed(self.now, members.len());
                }
                self.party.latest = members;
                self.party.fresh = true;
                self.delete_stray_nodes(&children);
                self.party.announcements.nodes = children;
                self.party.announcements.by_node.retain(|node, _| self.party.announcements.nodes.contains(node));
                self.note_agreements();
                self.read_announcements(false);
                // We may be the first member now: the set's unfinished update is ours to see to.
                if let Some(unfinished) = self.set.unfinished().cloned() {
                    self.watch_unfinished(&unfinished);
                }
                if self.hands_over_departures() {
                    self.judge_party_change();
                }
            }
            Err(ReqError::Transient) => self.back_off(),
            Err(ReqError::NoNode) => {
                // `<path>/party` itself was deleted, and our node with it: an empty party, so we join again.
                self.party.latest.clear();
                self.party.announcements.nodes.clear();
                self.party.in_party = false;
                self.party.fresh = true;
                self.party.restart_quiet_period(self.now);
                if self.hands_over_departures() {
                    self.on_inputs_changed(Reason::PartyChanged);
                }
            }
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// A dynamic member's node is `<32 hex>-<identifier>-<sequence>`, and the hex is this join's alone: another child
    /// with the same beginning is a join of ours that landed late (its reply was lost, and the retry created the node
    /// we track). It would count as a member that takes nothing: deleted. (A static member's name cannot be created
    /// twice.)
    pub(super) fn delete_stray_nodes(&mut self, children: &[String]) {
        let own = &self.cfg.party_node;
        let Some(prefix) = layout::own_node_prefix(own) else { return };
        let strays: Vec<String> =
            children.iter().filter(|child| *child != own && child.starts_with(prefix)).cloned().collect();
        let strays = if breaks(Sabotage::OwnStraysKept) { Vec::new() } else { strays };
        if !strays.is_empty() && !self.out.requests.values().any(|p| matches!(p, Pending::Strays)) {
            self.request(Op::DeleteStrayNodes(strays), Pending::Strays);
        }
    }

    /// Reads the announcements of the other members' nodes: those not read yet, or (`all`) every one.
    pub(super) fn read_announcements(&mut self, all: bool) {
        if self.party.announcements.read.is_some() || self.ending.is_some() {
            return;
        }
        let nodes: Vec<String> = self
            .party
            .announcements
            .nodes
            .iter()
            .filter(|node| **node != self.cfg.party_node && layout::member_name(node).is_some())
            .filter(|node| all || !self.party.announcements.by_node.contains_key(*node))
            .cloned()
            .collect();
        if !nodes.is_empty() {
            let op = Op::ReadAnnouncements(nodes.clone());
            self.party.announcements.read = Some(self.request(op, Pending::Announcements(nodes)));
        }
    }

    /// Reads every other member's announcement again once due (and none is being read: then after that read).
    pub(super) fn read_announcements_if_due(&mut self) {
        if self.timers.is_due(Timer::Announcements, self.now) && self.party.announcements.read.is_none() {
            self.timers.clear(Timer::Announcements);
            self.read_announcements(true);
        }
    }

    pub(super) fn on_announcements(
        &mut self,
        nodes: Vec<String>,
        result: Result<Vec<Option<super::protocol::NodeData>>, ReqError>,
    ) {
        self.party.announcements.read = None;
        self.read_announcements_if_due();
        match result {
            Ok(data) => {
                for (node, data) in nodes.into_iter().zip(data) {
                    match data {
                        Some((data, written)) if self.party.announcements.nodes.contains(&node) => {
                            let read = Announcement {
                                agreement: Agreement::from_node_data(&data),
                                written,
                                read_at: self.now,
                            };
                            self.party.announcements.by_node.insert(node, read);
                        }
                        _ => {
                            self.party.announcements.by_node.remove(&node);
                        }
                    }
                }
                self.note_agreements();
            }
            // Read again at the next party change, or when due; while a member is reported catching up, due again
            // a `time_boundary` from now, so that a lost read does not leave the report standing after it caught up.
            Err(ReqError::Transient | ReqError::NoNode) => {
                if !self.party.announcements.catching_up.is_empty() && !self.timers.is_armed(Timer::Announcements) {
                    self.timers.set(Timer::Announcements, Some(self.now + self.delays().announcements_reread()));
                }
            }
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// How long a member may announce another version of the shared set, or another assignment, before that is a
    /// disagreement ([`Delays::catch_up`](super::timers::Delays::catch_up)). Shorter, and every routine change would
    /// be reported; it is a report, not a decision.
    pub(super) fn catch_up(&self) -> Duration {
        self.delays().catch_up()
    }

    /// Compares every member's announcement with ours, and publishes at once when the disagreements change (they
    /// explain an allocation that would otherwise stall silently). A difference a member has while it follows a
    /// change (another version of the shared set, another assignment) is reported only once an announcement read
    /// [`catch_up`](Core::catch_up) after we first saw it, and after our own announcement last changed, still shows
    /// it; meanwhile the announcements are read again when that time comes (at once for a read older than our own
    /// change, and every `time_boundary` while a report stands), so that a report ends once the member catches up.
    pub(super) fn note_agreements(&mut self) {
        let ours = self.cfg.agreement;
        let (now, catch_up) = (self.now, self.catch_up());
        let mut catching_up = BTreeMap::new();
        let mut found = Vec::new();
        for (node, Announcement { agreement: theirs, written, read_at }) in &self.party.announcements.by_node {
            let Some(member) = layout::member_name(node) else { continue };
            if *member == *self.party.me {
                continue;
            }
            // A member that announces nothing computes kazoo's function (a kazoo member) or says nothing about its
            // own (an older build): it agrees only if ours answers as kazoo's does.
            let (kind, theirs) = match theirs {
                Some(theirs) => match ours.compare(theirs) {
                    Some(kind) => (kind, theirs.to_string()),
                    None => continue,
                },
                None if self.set.lineage() => {
                    (crate::DisagreementKind::Lineage, "nothing (a kazoo member? it knows no lineage)".to_owned())
                }
                None if self.cfg.kazoo_compatible => continue,
                None => (crate::DisagreementKind::Unannounced, "nothing (a kazoo member?)".to_owned()),
            };
            if kind.catching_up() && !breaks(Sabotage::CatchingUpReported) {
                // Since we first saw this very write of theirs differ from ours (a node written again, even back to
                // an earlier line, is another difference).
                let since = match self.party.announcements.catching_up.get(node) {
                    Some((seen, since)) if seen == written => *since,
                    _ => now,
                };
                catching_up.insert(node.clone(), (*written, since));
                // Read before our own announcement changed: they may have moved as we did (read again first).
                if *read_at < since + catch_up || *read_at < self.party.announcements.announced_at {
                    continue;
                }
            }
            let disagreement = Disagreement { member: member.to_owned(), kind, ours: ours.to_string(), theirs };
            found.push(disagreement);
        }
        self.party.announcements.catching_up = catching_up;
        // The next read: once the earliest difference has lasted `catch_up` (read then, it is reported if it still
        // shows), or a `time_boundary` from now while one is reported (so that the report ends once it catches up).
        let reported = found.iter().any(|d| d.kind.catching_up());
        let due = self
            .party
            .announcements
            .catching_up
            .values()
            .map(|(_, since)| (*since + catch_up).max(now))
            .filter(|&at| {
                at > now
                    || self
                        .party
                        .announcements
                        .by_node
                        .values()
                        .any(|read| read.read_at < self.party.announcements.announced_at)
            })
            .min()
            .or(reported.then(|| now + self.delays().announcements_reread()));
        if let Some(at) = due
            && self.timers.get(Timer::Announcements).is_none_or(|armed| armed > at)
        {
            self.timers.set(Timer::Announcements, Some(at));
        }
        let found: Arc<[Disagreement]> = found.into();
        if found != self.party.announcements.disagreements {
            self.party.announcements.disagreements = found;
            self.republish(Reason::Disagreement);
        }
    }

    /// When the partition function may work ahead for this quiet period ([`PartitionFn::prepare`]): a quarter of
    /// `time_boundary` into it, while the assignment is still to be decided, once per period.
    pub(super) fn prepare_due(&self) -> Option<Instant> {
        let settling = self.target_due()
            && self.party.fresh
            && self.set.fresh()
            && self.session.connected()
            && self.party.in_party;
        (settling && self.party.prepared != Some(self.party.debounce.last_change()))
            .then(|| self.party.debounce.prepare_at())
    }

    /// Lets the partition function work ahead on the party as it stands. Its result is not used: a panic is left for
    /// the deciding call, which reports it as a `Failure` if it panics too.
    pub(super) fn prepare(&self) {
        let (items, weights) = (self.set.catalogue().sorted(), self.set.catalogue().weights());
        // Capacities not all read yet: the deciding call waits for them; the work ahead assumes 1.
        let capacities = self.capacities().unwrap_or_else(|| vec![1; self.party.latest.len()]);
        let input = Weighted::new(&self.party.me, &self.party.latest, &capacities, items, weights);
        let _ = guarded(|| self.cfg.partition_fn.prepare_weighted(&input));
    }

    /// Whether [`capacities`](Core::capacities) is known, without building it (asked after every event).
    pub(super) fn capacities_known(&self) -> bool {
        self.cfg.partition_fn.load_bound().is_none() || self.capacities().is_some()
    }

    /// Every member's capacity, in the order of the party, once known: always for a function that ignores them (all
    /// 1), else once every member's announcement was read (a member that announces none counts as 1).
    pub(super) fn capacities(&self) -> Option<Vec<u32>> {
        if self.cfg.partition_fn.load_bound().is_none() {
            return Some(vec![1; self.party.latest.len()]);
        }
        let nodes: HashMap<&str, &String> =
            self.party.announcements.nodes.iter().filter_map(|node| Some((layout::member_name(node)?, node))).collect();
        self.party
            .latest
            .iter()
            .map(|member| {
                if **member == *self.party.me {
                    return Some(self.cfg.agreement.capacity);
                }
                let node = nodes.get(member.as_str())?;
                Some(self.party.announcements.by_node.get(*node)?.agreement.map_or(1, |theirs| theirs.capacity))
            })
            .collect()
    }

    /// Our share under the partition function, as indexes into the sorted item list, our load under it, and (for a
    /// function that keeps the placement) the whole assignment.
    pub(super) fn assignment(&self, members: &[String]) -> Result<(BTreeSet<usize>, Load, Option<Placed>), Cause> {
        let capacities = self.capacities().unwrap_or_else(|| vec![1; members.len()]);
        self.assignment_of(&self.party.me, members, &capacities)
    }

    /// The share of `me` among `members` (with their `capacities`), as [`assignment`](Core::assignment) computes
    /// ours: the departure fast path asks it of a departed member, under the party it left.
    fn assignment_of(
        &self,
        me: &str,
        members: &[String],
        capacities: &[u32],
    ) -> Result<(BTreeSet<usize>, Load, Option<Placed>), Cause> {
        let (items, weights) = (self.set.catalogue().sorted(), self.set.catalogue().weights());
        let input = Weighted::new(me, members, capacities, items, weights);
        let (mine, placed) = if self.placement.on() {
            self.placed_share(&input)?
        } else {
            // User code: a panic must become a Failure with its cause, not a dead task behind a stale snapshot.
            let call = || self.cfg.partition_fn.partition_weighted(&input);
            (guarded(call).map_err(Cause::PartitionFn)?, None)
        };
        let positions: Vec<usize> = mine.iter().filter_map(|item| items.binary_search(item).ok()).collect();
        let ours = members.iter().position(|m| **m == *me).map_or(1, |at| capacities[at]);
        let total: u64 = capacities.iter().map(|&c| u64::from(c)).sum();
        let load = Load::of(positions, weights, ours, total, self.cfg.partition_fn.load_bound());
        let mut assigned = BTreeSet::new();
        for item in mine {
            let index = self.set.catalogue().index_in_set(&item).ok_or_else(|| {
                Cause::PartitionFn(format!(
                    "returned {}, which is not in the set",
                    crate::error::shown(&item.to_string())
                ))
            })?;
            if !assigned.insert(index) {
                return Err(Cause::PartitionFn("returned an item more than once".into()));
            }
        }
        Ok((assigned, load, placed))
    }
}
