//! The departure fast path: under Incremental, with a function whose departures move only the departed member's
//! items, a party change that is only departures of dynamic members is handed over at the read; everything else
//! (a join, a static member's departure, Eager, kazoo's stride) still waits the quiet period.

use super::*;
use crate::Rendezvous;

const A: &str = "a-0000000000";
const B: &str = "b-0000000001";
const C: &str = "c-0000000002";
const D: &str = "d-0000000003";

/// Item `i` goes to member `i mod n` of a fixed table: with `[a, b, c]` a holds 0 and 3; with `[a, b]` a holds 0,
/// 2 and 4, losing 3 to b (a survivor's item moved, as a load bound may) and gaining c's 2 and b's 4.
struct Table;

impl crate::PartitionFn for Table {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        let Some(at) = members.iter().position(|m| m == me) else { return Vec::new() };
        items.iter().enumerate().filter(|(i, _)| i % members.len() == at).map(|(_, item)| item.clone()).collect()
    }

    fn departures_move_only_theirs(&self) -> bool {
        true
    }
}

fn config_with(items: usize, rebalance: Rebalance, function: Box<dyn crate::PartitionFn>) -> CoreConfig {
    let mut cfg = config(items, rebalance, SessionPolicy::Standard, None);
    cfg.agreement = Agreement::new(Some(&cfg.items), None, &function, None);
    cfg.kazoo_compatible = false;
    cfg.partition_fn = function;
    cfg
}

impl Script {
    /// `a` holding its share in the party `members`.
    fn acquired_among(cfg: CoreConfig, members: &[&str]) -> Script {
        let mut s = Script::new(cfg);
        s.party(members);
        s.answer_announcements();
        s.wait(SETTLED);
        s.grant_locks();
        assert_eq!(s.last_state(), PartitionState::Acquired);
        s
    }

    /// Answers a read of the other members' announcements, if one is asked: each says what we say.
    fn answer_announcements(&mut self) {
        if self.seen.iter().any(|a| matches!(a, Action::Request(_, Op::ReadAnnouncements(_)))) {
            self.announcements_agree();
        }
    }

    /// The items of the lock creates asked for since the last look.
    fn created_items(&self) -> BTreeSet<usize> {
        let mut items = BTreeSet::new();
        for action in &self.seen {
            if let Action::Request(_, Op::Create { contenders, .. }) = action {
                items.extend(contenders.iter().map(|(item, _)| *item));
            }
        }
        items
    }
}

/// `me`'s share under `members` as item indexes (the items are the integers from 0).
fn share(function: &dyn crate::PartitionFn, me: &str, members: &[&str], items: usize) -> BTreeSet<usize> {
    let all: Vec<Item> = (0..items as i64).map(Item::from).collect();
    let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    function.partition(me, &members, &all).iter().map(|item| all.binary_search(item).unwrap()).collect()
}

#[test]
fn a_departure_is_handed_over_at_the_read_and_nothing_kept_stops() {
    let cfg = config_with(60, Rebalance::Incremental, Box::new(Rendezvous::default()));
    let mut s = Script::acquired_among(cfg, &[A, B, C]);
    let before = s.core.listed().clone();
    let orphans = share(&Rendezvous::default(), C, &[A, B, C], 60);
    let after = share(&Rendezvous::default(), A, &[A, B], 60);
    let gained: BTreeSet<usize> = after.intersection(&orphans).copied().collect();
    assert!(!gained.is_empty() && before.is_subset(&after), "the case: a gains c's items and loses none");
    s.published();
    // when: c's session ends (its node goes), and the read shows it
    s.send(Event::PartyChanged);
    assert!(s.published().is_empty(), "nothing stops at the notification");
    s.party(&[A, B]);
    // then: c's items that a gains are contended for at once, with no wait for the quiet period
    assert_eq!(s.created_items(), gained);
    let taking = s.published().pop().expect("the gains published");
    assert_eq!((taking.state, listed(&taking)), (PartitionState::Allocating, before.clone()), "kept listed");
    s.grant_locks();
    let acquired = s.published().pop().expect("Acquired");
    let now_held: BTreeSet<usize> = before.union(&gained).copied().collect();
    assert_eq!((acquired.state, listed(&acquired)), (PartitionState::Acquired, now_held.clone()));
    assert!(acquired.revoked.is_empty());
    assert_eq!(s.core.hand_overs(), 1);
    // and what else the change moves (b's items a load bound now gives a) waits for the quiet period
    s.wait(TB / 2);
    assert!(s.published().is_empty() && s.created_items().is_empty(), "{:?}", s.seen);
    s.wait(SETTLED);
    let rest: BTreeSet<usize> = after.difference(&now_held).copied().collect();
    assert_eq!(s.created_items(), rest);
}

#[test]
fn what_the_change_moves_between_survivors_waits_for_the_quiet_period() {
    let mut s = Script::acquired_among(config_with(6, Rebalance::Incremental, Box::new(Table)), &[A, B, C]);
    assert_eq!(s.core.listed(), &BTreeSet::from([0, 3]));
    s.published();
    s.send(Event::PartyChanged);
    s.party(&[A, B]);
    // c's item 2 at once; b's item 4 waits, and so does a's item 3, which goes to b
    assert_eq!(s.created_items(), BTreeSet::from([2]));
    s.grant_locks();
    let acquired = s.published().pop().expect("Acquired");
    assert_eq!((acquired.state, listed(&acquired)), (PartitionState::Acquired, BTreeSet::from([0, 2, 3])));
    s.wait(TB / 2);
    assert!(s.published().is_empty(), "item 3 moved before the quiet period ended");
    s.wait(SETTLED);
    let release = s.published().pop().expect("Release");
    let expected = (PartitionState::Release, BTreeSet::from([0, 2]), vec![3]);
    assert_eq!((release.state, listed(&release), release.revoked.clone()), expected);
}

#[test]
fn a_second_departure_within_the_quiet_period_is_handed_over_too() {
    // Table over 8 items: with [a, b, c, d] a holds 0 and 4; without c, a gains c's 6 (and 3 would come from d a
    // quiet period later); without d too, a gains d's 2 at once.
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    assert_eq!(s.core.listed(), &BTreeSet::from([0, 4]));
    s.send(Event::PartyChanged);
    s.party(&[A, B, D]);
    assert_eq!(s.created_items(), BTreeSet::from([6]));
    s.grant_locks();
    s.wait(TB / 4);
    s.send(Event::PartyChanged);
    s.party(&[A, B]);
    assert_eq!(s.created_items(), BTreeSet::from([2]), "the second departure waited");
    s.grant_locks();
    let acquired = s.published().pop().expect("Acquired");
    assert_eq!((acquired.state, listed(&acquired)), (PartitionState::Acquired, BTreeSet::from([0, 2, 4, 6])));
    assert_eq!(s.core.hand_overs(), 2);
}

#[test]
fn a_departed_member_still_holding_an_item_a_hand_over_moved_away_hands_it_over_too() {
    // Table over 8 items, members z (sorting first), a, c, d: a holds 1 and 5. Without c, a gains nothing of c's,
    // and d's 7 would come to a a quiet period later (deferred: d keeps it). Without d too, a's share is 1, 3, 5
    // and 7: d held 3 and 7 (its share when the quiet period last decided), and they are handed over at once.
    const Z: &str = "0-0000000009";
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[Z, A, C, D]);
    assert_eq!(s.core.listed(), &BTreeSet::from([1, 5]));
    s.send(Event::PartyChanged);
    s.party(&[Z, A, D]);
    assert!(s.created_items().is_empty(), "a gains none of c's items");
    s.wait(TB / 4);
    s.send(Event::PartyChanged);
    s.party(&[Z, A]);
    assert_eq!(s.created_items(), BTreeSet::from([3, 7]), "what d held, though no longer its share");
    s.grant_locks();
    let acquired = s.published().pop().expect("Acquired");
    assert_eq!((acquired.state, listed(&acquired)), (PartitionState::Acquired, BTreeSet::from([1, 3, 5, 7])));
    assert_eq!(s.core.hand_overs(), 2);
}

#[test]
fn two_departures_read_one_by_one_or_at_once_hand_over_the_same_items() {
    // Table over 8 items, members a, b, c, d: a holds 0 and 4. c goes, then b. Without c, c's 2 goes to d and its 6
    // to a; without b too, a's share is 0, 2, 4 and 6. Item 2 is c's by the decided party: a takes it at once
    // whether it read the two departures one by one or together, and so does any survivor (d, that read them
    // together, gives 2 to a: were a to wait for d to hand it over, nobody would take it).
    let held = |s: &Script| -> BTreeSet<usize> { s.core.target().cloned().unwrap_or_default() };
    // One by one.
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    assert_eq!(s.core.listed(), &BTreeSet::from([0, 4]));
    s.send(Event::PartyChanged);
    s.party(&[A, B, D]);
    assert_eq!(s.created_items(), BTreeSet::from([6]));
    s.grant_locks();
    s.wait(TB / 4);
    s.seen.clear();
    s.send(Event::PartyChanged);
    s.party(&[A, D]);
    assert_eq!(s.created_items(), BTreeSet::from([2]), "c's item 2, which d never had, is taken at once");
    s.grant_locks();
    let one_by_one = held(&s);
    // At once.
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    s.send(Event::PartyChanged);
    s.party(&[A, D]);
    assert_eq!(s.created_items(), BTreeSet::from([2, 6]));
    s.grant_locks();
    assert_eq!(held(&s), one_by_one);
    assert_eq!(one_by_one, BTreeSet::from([0, 2, 4, 6]));
}

#[test]
fn an_orphan_an_earlier_hand_over_gave_us_goes_at_once_to_the_survivor_the_next_one_gives_it() {
    // Table over 8 items, members a, b, c, d: a holds 0 and 4, d holds 3 and 7. d goes: a takes d's 3 at once.
    // Then b goes: under [a, c], 3 is c's, and c takes it at once (it was d's when the quiet period last decided).
    // a lets it go at once too, rather than when its quiet period ends: kept, it would hold c waiting behind a's
    // lock node, Allocating, all that time (bench/handover.sh's two-departure outliers).
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    assert_eq!(s.core.listed(), &BTreeSet::from([0, 4]));
    s.send(Event::PartyChanged);
    s.party(&[A, B, C]);
    assert_eq!(s.created_items(), BTreeSet::from([3]));
    s.grant_locks();
    let acquired = s.published().pop().expect("Acquired");
    assert_eq!((acquired.state, listed(&acquired)), (PartitionState::Acquired, BTreeSet::from([0, 3, 4])));
    s.wait(TB / 4);
    s.send(Event::PartyChanged);
    s.party(&[A, C]);
    let release = s.published().pop().expect("3 released at the second hand-over");
    let expected = (PartitionState::Release, BTreeSet::from([0, 4]), vec![3]);
    assert_eq!((release.state, listed(&release), release.revoked.clone()), expected);
    assert_eq!(s.core.target(), Some(&BTreeSet::from([0, 4])));
    assert_eq!(s.core.hand_overs(), 2);
    // The same target as a survivor that read both departures at once.
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    s.send(Event::PartyChanged);
    s.party(&[A, C]);
    assert_eq!(s.core.target(), Some(&BTreeSet::from([0, 4])));
}

#[test]
fn the_sabotage_keeps_an_earlier_hand_overs_orphan_until_the_quiet_period_ends() {
    crate::sabotage::set(Sabotage::HandOverKeepsEarlierOrphans);
    let mut s = Script::acquired_among(config_with(8, Rebalance::Incremental, Box::new(Table)), &[A, B, C, D]);
    s.send(Event::PartyChanged);
    s.party(&[A, B, C]);
    s.grant_locks();
    s.published();
    s.wait(TB / 4);
    s.send(Event::PartyChanged);
    s.party(&[A, C]);
    let kept = s.core.target().cloned();
    crate::sabotage::set(Sabotage::None);
    assert_eq!(kept, Some(BTreeSet::from([0, 3, 4])));
}

/// A case: its name, the mode, the function, the party before and the party as read after.
type Case = (&'static str, Rebalance, Box<dyn crate::PartitionFn>, &'static [&'static str], &'static [&'static str]);

#[test]
fn a_join_a_static_departure_eager_and_kazoos_stride_wait_the_quiet_period() {
    let cases: [Case; 4] = [
        ("a join", Rebalance::Incremental, Box::new(Rendezvous::default()), &[A, B, C], &[A, B, C, D]),
        ("a join and a departure", Rebalance::Incremental, Box::new(Rendezvous::default()), &[A, B, C], &[A, B, D]),
        (
            "a static member's departure",
            Rebalance::Incremental,
            Box::new(Rendezvous::default()),
            &[A, B, "s7"],
            &[A, B],
        ),
        ("kazoo's stride", Rebalance::Incremental, Box::new(KazooStride), &[A, B, C], &[A, B]),
    ];
    for (case, rebalance, function, before, after) in cases {
        let mut s = Script::acquired_among(config_with(60, rebalance, function), before);
        s.published();
        s.send(Event::PartyChanged);
        s.party(after);
        s.answer_announcements();
        s.wait(TB / 2);
        assert!(s.created_items().is_empty(), "{case}: contended before the quiet period ended");
        assert!(s.published().iter().all(|p| p.revoked.is_empty()), "{case}: revoked before the quiet period ended");
        s.wait(SETTLED);
        assert!(!s.created_items().is_empty() || !s.published().is_empty(), "{case}: nothing after the quiet period");
        assert_eq!(s.core.hand_overs(), 0, "{case}");
    }
    // Eager keeps kazoo's rule: everything stops at the notification.
    let mut s = Script::acquired_among(config_with(60, Rebalance::Eager, Box::new(Rendezvous::default())), &[A, B, C]);
    s.published();
    s.send(Event::PartyChanged);
    assert_eq!(s.last_state(), PartitionState::Release, "eager");
}

#[test]
fn a_departure_while_the_party_settles_waits_like_any_change() {
    let mut s = Script::new(config_with(60, Rebalance::Incremental, Box::new(Rendezvous::default())));
    s.party(&[A, B, C]);
    s.wait(TB / 2);
    s.send(Event::PartyChanged);
    s.party(&[A, B]);
    s.wait(TB / 2 + TB / 4);
    assert!(s.created_items().is_empty(), "the departure did not restart the quiet period");
    s.wait(SETTLED);
    assert_eq!(s.created_items(), share(&Rendezvous::default(), A, &[A, B], 60));
    assert_eq!(s.core.hand_overs(), 0);
}

#[test]
fn the_sabotage_hands_over_a_join_too() {
    crate::sabotage::set(Sabotage::HandOverJoins);
    let mut s =
        Script::acquired_among(config_with(60, Rebalance::Incremental, Box::new(Rendezvous::default())), &[A, B]);
    s.send(Event::PartyChanged);
    s.party(&[A, B, C]);
    crate::sabotage::set(Sabotage::None);
    assert_eq!(s.core.hand_overs(), 1, "the switch breaks the rule it names");
}
