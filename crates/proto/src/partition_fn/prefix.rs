//! One item's best-ranked live members, best first, as the rendezvous rankings remember them
//! ([`Ranking`](super::ranking) for `Rendezvous`, `weighted`'s memory for `WeightedRendezvous`): the remembered list
//! is always a *prefix* of the item's true ranking, so a party change costs work in proportion to the change.

/// A member id as a [`Prefix`] stores it: 16 bits, so that a list of 4 takes 40 bytes, not 56 (the first ranking of
/// 100,000 items touches 1.6 MB less fresh memory, and every member's first call touches it at the same moment).
pub(super) type Id = u16;
/// An empty slot of a list.
pub(super) const NONE: Id = Id::MAX;
/// The largest party a ranking is kept for; larger parties are placed without memory. Ids fit in [`Id`]: a build
/// numbers the members from 0, and `follow` rebuilds before the table passes 2 × the party + 16 (60,016 here).
pub(super) const MAX_MEMBERS: usize = 30_000;

/// Up to `KEPT` entries `(key, member id)`, best first, in the order the ranking defines (a weight, higher first, or a
/// score, lower first); [`NONE`] ids mark the empty slots, all at the end.
#[derive(Clone, Copy)]
pub(super) struct Prefix<const KEPT: usize> {
    pub(super) keys: [u64; KEPT],
    pub(super) ids: [Id; KEPT],
}

impl<const KEPT: usize> Prefix<KEPT> {
    pub(super) const EMPTY: Self = Prefix { keys: [0; KEPT], ids: [NONE; KEPT] };

    pub(super) fn len(&self) -> usize {
        self.ids.iter().take_while(|&&id| id != NONE).count()
    }

    pub(super) fn entries(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.keys
            .iter()
            .copied()
            .zip(self.ids.iter().copied())
            .take_while(|&(_, id)| id != NONE)
            .map(|(key, id)| (key, u32::from(id)))
    }

    /// Puts `entry` at position `at`, shifting the rest down; the last entry of a full list falls off.
    pub(super) fn insert(&mut self, at: usize, entry: (u64, u32)) {
        let len = self.len();
        if at >= KEPT || at > len {
            return;
        }
        let Some(id) = Id::try_from(entry.1).ok().filter(|&id| id != NONE) else {
            // Cannot happen (see MAX_MEMBERS); if it did, ending the list here keeps it a prefix of the ranking.
            self.ids[at..].fill(NONE);
            return;
        };
        let end = len.min(KEPT - 1);
        self.keys.copy_within(at..end, at + 1);
        self.ids.copy_within(at..end, at + 1);
        self.keys[at] = entry.0;
        self.ids[at] = id;
    }
}
