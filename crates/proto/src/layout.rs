//! The znode layout, as pure rules: where a partitioner's nodes live and how their names read. kazoo's layout,
//! exactly, so Rust and Python members share one party. Used by the decision core, the driver, `describe`, the
//! checkpoints, the `testing` kit and the tests alike: each rule exists here once.
//!
//! ```text
//! <path>/party/<32 hex>-<identifier>-<10-digit seq>   a member (ephemeral sequential); its name: after the first `-`
//! <path>/party/<32 hex>-<identifier>                  a static member, or a kazoo one (ephemeral)
//! <path>/locks/<item>/<32 hex>__lock__<10-digit seq>  a contender for the item's lock; the lowest sequence holds it
//! <path>/placement                                    the placement record (a sticky function's; see `placement`)
//! ```

// ---- Lock contenders ------------------------------------------------------------------------------------------

/// The marker kazoo's exclusive lock puts before the sequence.
pub const LOCK_MARK: &str = "__lock__";

/// A contender's name before its sequence, `<32 hex>__lock__`, from 128 random bits: ours alone, so that a create
/// whose reply was lost can be found again.
pub fn contender_prefix(bits: u128) -> String {
    format!("{bits:032x}{LOCK_MARK}")
}

/// The sequence text of a contender node, kazoo's `(?:__lock__)(-?\d{10})$`; `None` for other children.
pub fn sequence(child: &str) -> Option<&str> {
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

/// The contenders among `children`, in the order they hold the lock (the first holds it): by sequence text, exactly
/// as kazoo compares them (as strings, not numbers, so both sides agree even after ZooKeeper's 32-bit sequence wraps;
/// kazoo issues #606/#730). Other children are left out.
pub fn contenders_in_order(children: &[String]) -> Vec<&str> {
    let mut contenders: Vec<(&str, &str)> =
        children.iter().filter_map(|c| sequence(c).map(|seq| (seq, c.as_str()))).collect();
    contenders.sort_unstable();
    contenders.into_iter().map(|(_, child)| child).collect()
}

/// Where our contender stands among the children of its lock directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Position<'a> {
    /// No contender comes before ours: we hold the lock.
    Held,
    /// We wait for this contender (the one just before ours) to go.
    Behind(&'a str),
    /// Our node is not among the children (someone deleted it).
    Missing,
}

/// Finds our node's position, comparing sequence texts as [`contenders_in_order`] does.
pub fn position<'a>(children: &'a [String], own: &str) -> Position<'a> {
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

// ---- Party members --------------------------------------------------------------------------------------------

/// The member name of a child of `<path>/party`, or `None` for a child that is not a member node.
///
/// Both kazoo's (`<hex32>-<identifier>`) and this crate's (`<hex32>-<identifier>-<seq>`) nodes start with 32 lowercase
/// hex digits and a dash. Anything else was put there by someone else; kazoo would count it as a member that never
/// takes its share, leaving items unowned, so this crate ignores it (and logs it).
pub fn member_name(child: &str) -> Option<&str> {
    let (hex, name) = child.split_at_checked(32)?;
    let name = name.strip_prefix('-')?;
    let is_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (is_hex && !name.is_empty()).then_some(name)
}

/// The name of the member whose node is `node`, one of ours: the text after its first `-` (kazoo's rule).
pub fn name_of_own_node(node: &str) -> &str {
    node.split_once('-').map_or(node, |(_, name)| name)
}

/// The sorted member names among `children`, and the children that are not member nodes.
pub fn members(children: &[String]) -> (Vec<String>, Vec<&str>) {
    let mut names = Vec::with_capacity(children.len());
    let mut foreign = Vec::new();
    for child in children {
        match member_name(child) {
            Some(name) => names.push(name.to_owned()),
            None => foreign.push(child.as_str()),
        }
    }
    names.sort_unstable();
    (names, foreign)
}

/// Whether a member name is a dynamic member's, `<identifier>-<10-digit seq>`: one join's alone, never taken again. A
/// static member's (or a kazoo member's) name is its identifier, which a restarted process takes again; builds refuse a
/// static identifier that would read as a dynamic name.
pub fn is_dynamic_member(name: &str) -> bool {
    name.len() > 11
        && name.is_char_boundary(name.len() - 11)
        && name[name.len() - 11..].starts_with('-')
        && name[name.len() - 10..].bytes().all(|b| b.is_ascii_digit())
}

/// The start of a new member node's name, `<32 hex>-<identifier>-`: ours alone (the hex is random).
pub fn node_prefix(hex: &str, identifier: &str) -> String {
    format!("{hex}-{identifier}-")
}

/// A static member's node name, `<32 hex>-<identifier>` (kazoo's `ShallowParty` node): ours alone.
pub fn static_node(hex: &str, identifier: &str) -> String {
    format!("{hex}-{identifier}")
}

/// The prefix a dynamic member's node was created with (`<32 hex>-<identifier>-`, see [`node_prefix`]): every child
/// starting with it is a join of that member. `None` for a static member's node, whose name cannot be created twice.
pub fn own_node_prefix(node: &str) -> Option<&str> {
    let dynamic = is_dynamic_member(node);
    dynamic.then(|| &node[..node.len() - 10])
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
        assert_eq!(contender_prefix(0xab), format!("{}ab__lock__", "0".repeat(30)));
    }

    #[test]
    fn lowest_sequence_holds() {
        let children = names(&["b__lock__0000000002", "a__lock__0000000001", "junk", "c__lock__0000000003"]);
        assert_eq!(position(&children, "a__lock__0000000001"), Position::Held);
        assert_eq!(position(&children, "b__lock__0000000002"), Position::Behind("a__lock__0000000001"));
        assert_eq!(position(&children, "c__lock__0000000003"), Position::Behind("b__lock__0000000002"));
        assert_eq!(position(&children, "d__lock__0000000004"), Position::Missing);
        assert_eq!(
            contenders_in_order(&children),
            ["a__lock__0000000001", "b__lock__0000000002", "c__lock__0000000003"]
        );
    }

    #[test]
    fn sequences_compare_as_text_like_kazoo() {
        // After the wrap, "-2147483647" < "-2147483648" as text; both sides must agree, so we copy kazoo.
        let children = names(&["a__lock__-2147483648", "b__lock__-2147483647"]);
        assert_eq!(position(&children, "b__lock__-2147483647"), Position::Held);
        assert_eq!(contenders_in_order(&children), ["b__lock__-2147483647", "a__lock__-2147483648"]);
    }

    #[test]
    fn member_names_follow_kazoo() {
        let hex = "0123456789abcdef0123456789abcdef";
        assert_eq!(member_name(&format!("{hex}-w-1")), Some("w-1"));
        assert_eq!(member_name(&format!("{hex}-host-42-0000000003")), Some("host-42-0000000003"));
        assert_eq!(member_name("foreign"), None);
        assert_eq!(member_name(&format!("{}-x", hex.to_uppercase())), None);
        assert_eq!(member_name(&format!("{hex}-")), None);
        assert_eq!(member_name(&format!("{hex}x")), None);
        assert_eq!(member_name("é"), None);
        assert_eq!(name_of_own_node(&format!("{hex}-a-b-0000000007")), "a-b-0000000007");
    }

    #[test]
    fn members_sorted_and_foreign_listed() {
        let hex = "0123456789abcdef0123456789abcdef";
        let children = vec![format!("{hex}-w2"), "junk".to_string(), format!("{hex}-w-1")];
        let (names, foreign) = members(&children);
        assert_eq!(names, ["w-1", "w2"]);
        assert_eq!(foreign, ["junk"]);
    }

    #[test]
    fn static_and_dynamic_nodes() {
        let hex = "0123456789abcdef0123456789abcdef";
        let node = static_node(hex, "worker-3");
        assert_eq!(member_name(&node), Some("worker-3"));
        assert_eq!(own_node_prefix(&node), None);
        let dynamic = format!("{}0000000012", node_prefix(hex, "worker-3"));
        assert_eq!(own_node_prefix(&dynamic), Some(node_prefix(hex, "worker-3").as_str()));
    }
}
