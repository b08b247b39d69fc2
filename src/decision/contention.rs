//! Who holds an item's lock, from the children of its directory: kazoo's `Lock` recipe on the wire. Contenders are
//! ephemeral sequential nodes `<path>/locks/<item>/<32 hex>__lock__<10-digit sequence>`, ordered by the sequence
//! text; the lowest holds the lock. Pure rules, shared by the decision core and the test checkers.

/// The marker kazoo's exclusive lock puts before the sequence.
pub(crate) const LOCK_MARK: &str = "__lock__";

/// The sequence text of a contender node, kazoo's `(?:__lock__)(-?\d{10})$`; `None` for other children.
pub(crate) fn sequence(child: &str) -> Option<&str> {
    let digits_at = child.len().checked_sub(10)?;
    if !child.is_char_boundary(digits_at) || !child[digits_at..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let head = &child[..digits_at];
    let (head, start) = match head.strip_suffix('-') {
        Some(h) if h.ends_with(LOCK_MARK) => (h, digits_at - 1),
        _ => (head, digits_at),
    };
    head.ends_with(LOCK_MARK).then(|| &child[start..])
}

/// Where our contender stands among the children of its lock directory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Position<'a> {
    /// No contender comes before ours: we hold the lock.
    Held,
    /// We wait for this contender (the one just before ours) to go.
    Behind(&'a str),
    /// Our node is not among the children (someone deleted it).
    Missing,
}

/// Finds our node's position, comparing sequence texts exactly as kazoo does (as strings, not numbers, so both
/// sides agree even after ZooKeeper's 32-bit sequence wraps; kazoo issues #606/#730).
pub(crate) fn position<'a>(children: &'a [String], own: &str) -> Position<'a> {
    let Some(own_seq) = children.iter().find(|c| c.as_str() == own).and_then(|c| sequence(c)) else {
        return Position::Missing;
    };
    let predecessor = children
        .iter()
        .filter_map(|c| sequence(c).map(|seq| (seq, c.as_str())))
        .filter(|(seq, _)| *seq < own_seq)
        .max_by(|a, b| a.0.cmp(b.0));
    match predecessor {
        Some((_, name)) => Position::Behind(name),
        None => Position::Held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn contender_names_follow_kazoo_regex() {
        assert_eq!(sequence("3e93aa__lock__0000000000"), Some("0000000000"));
        assert_eq!(sequence("__lock__0000000042"), Some("0000000042"));
        assert_eq!(sequence("x__lock__-0000000001"), Some("-0000000001"));
        // Go's and Curator's names, read locks, short or long sequences are not contenders.
        assert_eq!(sequence("_c_1234-lock-0000000031"), None);
        assert_eq!(sequence("x__rlock__0000000001"), None);
        assert_eq!(sequence("x__lock__000000001"), None);
        assert_eq!(sequence("x__lock__00000000001"), None);
        assert_eq!(sequence("x__lock__-000000001"), None);
        assert_eq!(sequence("é__lock__000000000"), None);
        assert_eq!(sequence("000000000é"), None);
    }

    #[test]
    fn lowest_sequence_holds() {
        let children = names(&["b__lock__0000000002", "a__lock__0000000001", "junk", "c__lock__0000000003"]);
        assert_eq!(position(&children, "a__lock__0000000001"), Position::Held);
        assert_eq!(position(&children, "b__lock__0000000002"), Position::Behind("a__lock__0000000001"));
        assert_eq!(position(&children, "c__lock__0000000003"), Position::Behind("b__lock__0000000002"));
        assert_eq!(position(&children, "d__lock__0000000004"), Position::Missing);
    }

    #[test]
    fn sequences_compare_as_text_like_kazoo() {
        // After the wrap, "-2147483647" < "-2147483648" as text; both sides must agree, so we copy kazoo.
        let children = names(&["a__lock__-2147483648", "b__lock__-2147483647"]);
        assert_eq!(position(&children, "b__lock__-2147483647"), Position::Held);
    }
}
