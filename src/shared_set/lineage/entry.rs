//! One item's lineage node, `<path>/item-lineage/<item>`: persistent, its data a header line and one line per fact
//! (names are lock node names, which never hold a control character, so a tab separates fields):
//!
//! ```text
//! zkp-lineage 1
//! parent\t<name>         one line per parent, in the order given
//! child\t<name>          one line per child, in the order added
//! closed                 the source produces nothing new for the item
//! finished\t<token>\t<member>   finished by the owner holding fencing token <token>
//! ```

use proto::error::shown;

/// The first line of a lineage node.
pub(crate) const MAGIC: &str = "zkp-lineage 1";

/// A lineage node's data, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    pub parents: Vec<String>,
    pub children: Vec<String>,
    pub closed: bool,
    pub finished: Option<Finished>,
}

/// Who finished an item, under which ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finished {
    /// The finishing owner's fencing token for the item.
    pub token: i64,
    pub member: String,
}

impl Entry {
    pub fn render(&self) -> String {
        let mut text = format!("{MAGIC}\n");
        for parent in &self.parents {
            text.push_str(&format!("parent\t{parent}\n"));
        }
        for child in &self.children {
            text.push_str(&format!("child\t{child}\n"));
        }
        if self.closed {
            text.push_str("closed\n");
        }
        if let Some(finished) = &self.finished {
            text.push_str(&format!("finished\t{}\t{}\n", finished.token, finished.member));
        }
        text
    }

    pub fn parse(data: &[u8]) -> Result<Entry, String> {
        let text = std::str::from_utf8(data).map_err(|_| "its data is not UTF-8".to_owned())?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("its data {} does not start with {MAGIC:?}", shown(text)));
        }
        let mut entry = Entry::default();
        for line in lines {
            match line.split('\t').collect::<Vec<_>>()[..] {
                ["parent", name] if !name.is_empty() => entry.parents.push(name.to_owned()),
                ["child", name] if !name.is_empty() => entry.children.push(name.to_owned()),
                ["closed"] => entry.closed = true,
                ["finished", token, member] => {
                    let token =
                        token.parse().map_err(|_| format!("its finish token {} is not a number", shown(token)))?;
                    entry.finished = Some(Finished { token, member: member.to_owned() });
                }
                _ => return Err(format!("it has an unknown or malformed line {}", shown(line))),
            }
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_garbage_is_refused() {
        let entry = Entry {
            parents: vec!["a".into(), "b c".into()],
            children: vec!["d".into()],
            closed: true,
            finished: Some(Finished { token: 42, member: "worker-1".into() }),
        };
        assert_eq!(Entry::parse(entry.render().as_bytes()), Ok(entry));
        assert_eq!(Entry::parse(Entry::default().render().as_bytes()), Ok(Entry::default()));
        for garbage in [
            &b""[..],
            b"zkp-lineage 2\n",
            b"zkp-lineage 1\nparent\n",
            b"zkp-lineage 1\nparent\t\n",
            b"zkp-lineage 1\nfinished\tx\tm\n",
            b"zkp-lineage 1\nsibling\ta\n",
            b"\xff",
        ] {
            assert!(Entry::parse(garbage).is_err(), "{garbage:?}");
        }
    }
}
