//! The header's record of its latest versions' changes (what each added to and removed from the base set).
//!
//! Each update that commits in one `multi` (a small update, a lineage change, a finish, a weight change, a retire)
//! writes into the header what it added to and removed from the base set: `delta=<version>:+<name>,-<name>,...`, one
//! word per version (an empty list for a version that changed no item). The header keeps the newest of them within
//! [`BUDGET`] bytes; a version whose change is larger than [`MAX_BYTES`] (and any staged update's) records none.
//! Members use them to read a change from the header alone ([`cache`](super::cache)).

/// The largest change one version records, in bytes of its word: a larger one is not recorded (readers list).
pub const MAX_BYTES: usize = 1024;
/// The header keeps the newest recorded changes within this many bytes of words.
pub const BUDGET: usize = 4096;

/// What one version added to and removed from the base set (node names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    pub version: u64,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Delta {
    /// `delta=<version>:<ops>`.
    pub fn render(&self) -> String {
        let ops = self.added.iter().map(|n| ('+', n)).chain(self.removed.iter().map(|n| ('-', n)));
        let ops: Vec<String> = ops.map(|(sign, name)| format!("{sign}{}", escape(name))).collect();
        format!("delta={}:{}", self.version, ops.join(","))
    }

    /// The value of a `delta=` word; `None` if malformed.
    pub fn parse(value: &str) -> Option<Delta> {
        let (version, ops) = value.split_once(':')?;
        let version = version.parse().ok()?;
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        for op in ops.split(',').filter(|op| !op.is_empty()) {
            if let Some(name) = op.strip_prefix('+') {
                added.push(unescape(name)?);
            } else {
                removed.push(unescape(op.strip_prefix('-')?)?);
            }
        }
        Some(Delta { version, added, removed })
    }
}

/// Adds `delta` as the newest record of `deltas` (oldest first), if it is small enough, and drops the oldest beyond
/// [`BUDGET`].
pub fn record(deltas: &mut Vec<Delta>, delta: Delta) {
    if delta.render().len() > MAX_BYTES {
        return;
    }
    deltas.push(delta);
    let mut total = 0;
    let keep = deltas.iter().rev().take_while(|d| {
        total += d.render().len() + 1;
        total <= BUDGET
    });
    let excess = deltas.len() - keep.count();
    deltas.drain(..excess);
}

/// Percent-escapes what would break a header word: `%`, `,`, whitespace and anything outside printable ASCII.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        match byte {
            b'%' | b',' => out.push_str(&format!("%{byte:02X}")),
            0x21..=0x7e => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn unescape(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn changes_round_trip_with_any_znode_name() {
        let odd = names(&["a b", "x,y", "100%", "+plus", "-minus", "k:v", "ünï", "tab\there", "=eq"]);
        let delta = Delta { version: 7, added: odd.clone(), removed: names(&["gone"]) };
        let word = delta.render();
        assert!(!word.contains(char::is_whitespace), "{word}");
        assert_eq!(Delta::parse(word.strip_prefix("delta=").unwrap()), Some(delta));
        let empty = Delta { version: 8, added: Vec::new(), removed: Vec::new() };
        assert_eq!(empty.render(), "delta=8:");
        assert_eq!(Delta::parse("8:"), Some(empty));
        for garbage in ["", "x:+a", "8", "8:a", "8:+", "8:+%4", "8:+%zz", "8:-%FF"] {
            assert_eq!(Delta::parse(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn the_newest_changes_are_kept_within_the_budget() {
        let mut deltas = Vec::new();
        for version in 1..=200u64 {
            record(&mut deltas, Delta { version, added: vec![format!("item-{version:04}")], removed: Vec::new() });
        }
        let kept: Vec<u64> = deltas.iter().map(|d| d.version).collect();
        assert_eq!(kept.last(), Some(&200));
        assert!(kept.windows(2).all(|w| w[1] == w[0] + 1), "contiguous: {kept:?}");
        let words: usize = deltas.iter().map(|d| d.render().len() + 1).sum();
        assert!(words <= BUDGET && words + 20 > BUDGET, "{words} bytes kept");
        // A change too large to record is left out: the versions before it can no longer be bridged past it.
        let big: Vec<String> = (0..200).map(|i| format!("big-{i:04}")).collect();
        record(&mut deltas, Delta { version: 201, added: big, removed: Vec::new() });
        assert_eq!(deltas.last().map(|d| d.version), Some(200));
    }
}
