//! The shared set's nodes, and what a read of them means: pure rules, shared by the members' decision core and
//! by the writers (`zk-partitioner`'s `SetStore`).
//!
//! ```text
//! <path>/items                      persistent, data = the header (below)
//! <path>/items/<item>               persistent, empty: the base set, one child per item (its lock node name)
//! <path>/item-changes/<tag>/add/<item>     a staged change's additions       (large updates only)
//! <path>/item-changes/<tag>/remove/<item>  its removals
//! <path>/item-writers/<tag>         ephemeral: the lease of the writer of change <tag>
//! <path>/item-weights/<tag>        persistent, data = a weight table's index: the names of its chunks
//! <path>/item-weights/<tag>-<k>    persistent, data = `<item>\t<weight>\n`...: a chunk, first written by table <tag>
//! <path>/item-lineage/<item>        persistent: an item's parents, children, closed, finished (see `lineage`)
//! <path>/item-outcomes/<token>      ephemeral: the marker of a writer's update, created by the update's commit
//! ```
//!
//! The header is one line: `zk-partitioner item set v2 kind=<int|str> version=<n> state=<state> [change=<tag>]
//! [log=<token>,...] [weights=<tag>] [lineage=on] [delta=<version>:<+added|-removed>,...]...`. `version` is
//! the committed version: it counts the updates in force. Each `delta` records what a recent version added to and
//! removed from the base set, for members that read the versions before it (see [`delta`]).
//! `weights` names the weight table in force: the items it lists weigh what it says, the others 1 (no `weights`: all
//! weigh 1). `lineage=on` says that some item has a lineage node (written by the first lineage change, kept after).
//! A table is written under a fresh tag before a header write names it (its new chunks, then its index, which may also
//! name chunks of the table it replaces: see `zk-partitioner`'s `shared_set::table`), and its index and the chunks the next table
//! does not name are deleted only once the header names another, so a reader that finds a table's index or a chunk
//! missing read a header that has since moved on (torn).
//! The set in force is:
//!
//! | state | the set in force | what is under way |
//! |---|---|---|
//! | `ready` | the base set | nothing |
//! | `staging` | the base set | the writer of `change` stages a large update out of sight, under `item-changes` |
//! | `applying` | the base set plus the change's additions, minus its removals | anyone applies the change to the base set |
//! | `creating` | none yet (readers see no set) | the writer of `change` writes the first base set |
//! | `deleting` | none (readers see no set) | an abandoned creation is being deleted, by anyone |
//! | `absent` | none (readers see no set) | nothing: an abandoned creation was deleted; the next one starts here |
//!
//! The header's node is never deleted once written (an undone creation leaves it `absent`), so its data version only
//! grows, and every conditional request of the protocol (a write of the header at the version read, a `check` of it
//! in each chunk) is fenced against anything that happened since: a late chunk of an undo can never land in the
//! set created after it.
//!
//! So every reader (a member, `build()`, an admin) sees a set a writer committed, never a mix: an update that fits
//! one `multi` commits in it (the header's new version with the children's creates and deletes); a larger one
//! commits with one conditional write of the header, from `staging` to `applying`. A writer that stops part-way (a
//! crash, an expired session) leaves its lease gone: a `staging` or `creating` change is then undone, an `applying`
//! one finished, by the next writer or by the party's first member. `log` lists the tokens of the latest updates in
//! force (at most [`LOG`]): a record of who wrote the latest versions. A writer whose reply was lost with the
//! connection does not look there (16 other versions may have landed before it reads again): its commit also created
//! its outcome marker ([`SetPaths::outcome`]), an ephemeral node of its session, which it looks for instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use self::delta::Delta;
use crate::chunked::{self, is_tag};
use crate::error::shown;
use crate::{Item, Weight};

/// The first words of the header.
pub const MAGIC: &str = "zk-partitioner item set v2";
/// How many update tokens the header keeps.
pub const LOG: usize = 16;

/// The kind of every item of a shared set: its children parse back into items of this kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    Str,
}

impl Kind {
    pub fn of(items: &[Item]) -> Kind {
        match items.first() {
            Some(Item::Int(_)) => Kind::Int,
            _ => Kind::Str,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Str => "str",
        }
    }
}

/// Where the set's latest update stands (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Ready,
    Staging(String),
    Applying(String),
    Creating(String),
    Deleting(String),
    /// No set: an abandoned creation was deleted (the node stays, so that its version keeps growing).
    Absent,
}

impl State {
    /// The change under way, if any.
    pub fn change(&self) -> Option<&str> {
        match self {
            State::Ready | State::Absent => None,
            State::Staging(tag) | State::Applying(tag) | State::Creating(tag) | State::Deleting(tag) => Some(tag),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Staging(_) => "staging",
            State::Applying(_) => "applying",
            State::Creating(_) => "creating",
            State::Deleting(_) => "deleting",
            State::Absent => "absent",
        }
    }
}

/// The set node's data, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// The committed version.
    pub version: u64,
    pub state: State,
    /// Tokens of the latest updates in force, oldest first.
    pub log: Vec<String>,
    /// The weight table in force, if any.
    pub weights: Option<TableRef>,
    /// Some item has lineage (`item-lineage` has nodes): plain updates must check what they add and remove.
    pub lineage: bool,
    /// What the latest versions added and removed, oldest first, where recorded (see [`delta`]).
    pub deltas: Vec<Delta>,
}

/// A weight table, by the tag of its index node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRef {
    pub tag: String,
}

/// The first line of a weight table's index; one chunk name per line follows.
pub const INDEX_MAGIC: &str = "zk-partitioner weight table v1";

/// One chunk of a weight table as read: its node's name and data (shared, not copied, between a member's reads), and
/// its lines once parsed: a chunk never changes, and a member keeps it for as long as its tables share it, so a
/// new table costs a member the parsing of its new chunks only.
#[derive(Clone)]
pub struct Chunk {
    pub name: String,
    pub data: Arc<[u8]>,
    /// The lines as items of a kind (the set's: a set's kind never changes).
    parsed: Arc<OnceLock<ParsedAs>>,
}

/// A chunk's lines as parsed, and the kind they were parsed as.
type ParsedAs = (Kind, Result<Arc<Lines>, String>);

/// A chunk's lines: the items of the set's kind with their weights, in the chunk's order.
#[derive(Debug)]
struct Lines {
    entries: Vec<(Item, Weight)>,
    /// Some line names no item of the kind.
    others: bool,
}

impl Chunk {
    pub fn new(name: String, data: Arc<[u8]>) -> Chunk {
        Chunk { name, data, parsed: Arc::default() }
    }

    /// Its lines as items of `kind`, parsed at the first call.
    fn lines(&self, kind: Kind) -> Result<Arc<Lines>, String> {
        match self.parsed.get() {
            Some((parsed_as, lines)) if *parsed_as == kind => lines.clone(),
            // Parsed as another kind (never, but for a set deleted and created again as the other kind under a
            // reused name): parse again, not remembered.
            Some(_) => parse_chunk(&self.name, &self.data, kind),
            None => self.parsed.get_or_init(|| (kind, parse_chunk(&self.name, &self.data, kind))).1.clone(),
        }
    }
}

/// A chunk is its name and data; what was parsed of it follows from them.
impl PartialEq for Chunk {
    fn eq(&self, other: &Chunk) -> bool {
        self.name == other.name && self.data == other.data
    }
}

impl Eq for Chunk {}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk").field("name", &self.name).field("bytes", &self.data.len()).finish_non_exhaustive()
    }
}

/// The lines of chunk `k`: `<item>\t<weight>` each.
fn parse_chunk(k: &str, data: &[u8], kind: Kind) -> Result<Arc<Lines>, String> {
    let text = std::str::from_utf8(data).map_err(|_| format!("chunk {k} is not UTF-8"))?;
    let mut lines = Lines { entries: Vec::new(), others: false };
    for line in text.lines() {
        let (name, weight) =
            line.split_once('\t').ok_or_else(|| format!("chunk {k} has a line without a tab: {}", shown(line)))?;
        let weight: Weight = weight.parse().map_err(|err| format!("chunk {k}: {err}"))?;
        match parse_name(kind, name) {
            Some(item) => lines.entries.push((item, weight)),
            None => lines.others = true,
        }
    }
    Ok(Arc::new(lines))
}

/// A weight table as read: its chunks in the index's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub chunks: Vec<Chunk>,
}

impl Header {
    pub fn parse(data: &[u8]) -> Result<Header, String> {
        let text = std::str::from_utf8(data).map_err(|_| "its data is not UTF-8".to_owned())?;
        let Some(rest) = text.trim().strip_prefix(MAGIC) else {
            if text.starts_with("zk-partitioner item set v1") {
                return Err("it was written by an earlier version of this crate (v1): recreate the set".into());
            }
            return Err(format!("its data {} does not start with {MAGIC:?} (not written by this crate?)", shown(text)));
        };
        let (mut kind, mut version, mut state, mut change, mut log) = (None, None, None, None, Vec::new());
        let (mut weights, mut lineage, mut deltas) = (None, false, Vec::new());
        for word in rest.split_whitespace() {
            match word.split_once('=') {
                Some(("kind", "int")) => kind = Some(Kind::Int),
                Some(("kind", "str")) => kind = Some(Kind::Str),
                Some(("version", n)) => version = n.parse::<u64>().ok(),
                Some(("state", name)) => state = Some(name),
                Some(("change", tag)) if is_tag(tag) => change = Some(tag.to_owned()),
                Some(("log", tokens)) if tokens.split(',').all(is_tag) => {
                    log = tokens.split(',').map(str::to_owned).collect();
                }
                Some(("weights", tag)) if is_tag(tag) => weights = Some(TableRef { tag: tag.to_owned() }),
                Some(("weights", old)) if old.split_once('.').is_some_and(|(tag, _)| is_tag(tag)) => {
                    return Err("its weight table is in the layout of an earlier development version of this crate \
                                (weights=<tag>.<chunks>): recreate the set"
                        .into());
                }
                Some(("lineage", "on")) => lineage = true,
                Some(("delta", value)) if Delta::parse(value).is_some() => deltas.extend(Delta::parse(value)),
                _ => return Err(format!("its data has an unknown or malformed field {}", shown(word))),
            }
        }
        let (Some(kind), Some(version), Some(state)) = (kind, version, state) else {
            return Err(format!("its data {} lacks kind=, version= or state=", shown(text)));
        };
        let state = match (state, change) {
            ("ready", None) => State::Ready,
            ("staging", Some(tag)) => State::Staging(tag),
            ("applying", Some(tag)) => State::Applying(tag),
            ("creating", Some(tag)) => State::Creating(tag),
            ("deleting", Some(tag)) => State::Deleting(tag),
            ("absent", None) => State::Absent,
            (state, change) => return Err(format!("its state {} with change {change:?} is not one", shown(state))),
        };
        Ok(Header { kind, version, state, log, weights, lineage, deltas })
    }

    pub fn render(&self) -> String {
        let mut text =
            format!("{MAGIC} kind={} version={} state={}", self.kind.name(), self.version, self.state.name());
        if let Some(tag) = self.state.change() {
            text.push_str(&format!(" change={tag}"));
        }
        if !self.log.is_empty() {
            text.push_str(&format!(" log={}", self.log.join(",")));
        }
        if let Some(table) = &self.weights {
            text.push_str(&format!(" weights={}", table.tag));
        }
        if self.lineage {
            text.push_str(" lineage=on");
        }
        for delta in &self.deltas {
            text.push(' ');
            text.push_str(&delta.render());
        }
        text
    }

    /// The header of a set being created by the change `tag` (version 0: readers see no set yet).
    pub fn creating(kind: Kind, tag: &str) -> Header {
        Header {
            kind,
            version: 0,
            state: State::Creating(tag.to_owned()),
            log: Vec::new(),
            weights: None,
            lineage: false,
            deltas: Vec::new(),
        }
    }

    /// The header of the next version, in `state`, recording `token` (the oldest tokens make room).
    pub fn next(&self, kind: Kind, state: State, token: &str) -> Header {
        let mut log = self.log.clone();
        log.push(token.to_owned());
        let excess = log.len().saturating_sub(LOG);
        log.drain(..excess);
        let (weights, lineage, deltas) = (self.weights.clone(), self.lineage, self.deltas.clone());
        Header { kind, version: self.version + 1, state, log, weights, lineage, deltas }
    }

    /// Records that this version added `added` and removed `removed` (node names), if small enough (see
    /// [`delta`]): the commit's `multi` must do exactly that.
    pub fn recording(mut self, added: &[String], removed: &[String]) -> Header {
        let delta = Delta { version: self.version, added: added.to_vec(), removed: removed.to_vec() };
        delta::record(&mut self.deltas, delta);
        self
    }

    /// The same version in another state (the log unchanged).
    pub fn with_state(&self, state: State) -> Header {
        Header { state, ..self.clone() }
    }

    /// Whether the update that wrote `token` is among the latest in force (tests read the log as a record).
    #[cfg(any(test, feature = "sim"))]
    pub fn landed(&self, token: &str) -> bool {
        self.log.iter().any(|t| t == token)
    }
}

/// A weight table's index: its chunks' names, in order (one or more, each `<tag>-<k>`, no two alike).
pub fn parse_index(data: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(data).map_err(|_| "its index is not UTF-8".to_owned())?;
    let mut lines = text.lines();
    if lines.next() != Some(INDEX_MAGIC) {
        return Err(format!("its index {} does not start with {INDEX_MAGIC:?}", shown(text)));
    }
    let names: Vec<String> = lines.map(str::to_owned).collect();
    chunked::check_names(&names, 1)?;
    Ok(names)
}

/// A weight table's index rendered from its chunks' names.
pub fn render_index<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = INDEX_MAGIC.to_owned();
    for name in names {
        text.push('\n');
        text.push_str(name);
    }
    text
}

/// A fresh token from 64 random bits.
pub fn token(random: u64) -> String {
    format!("{random:016x}")
}

/// The set's nodes under one partition path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetPaths {
    /// The partition path.
    pub base: String,
    /// `<path>/items`: the header's node, parent of the base set.
    pub node: String,
    /// `<path>/item-changes`.
    pub changes: String,
    /// `<path>/item-writers`.
    pub writers: String,
    /// `<path>/item-weights`: the weight tables.
    pub weights: String,
    /// `<path>/item-lineage`: the lineage nodes.
    pub lineage: String,
    /// `<path>/item-outcomes`: the writers' outcome markers (see [`SetPaths::outcome`]).
    pub outcomes: String,
}

impl SetPaths {
    pub fn new(base: &str) -> Self {
        SetPaths {
            base: base.to_owned(),
            node: format!("{base}/items"),
            changes: format!("{base}/item-changes"),
            writers: format!("{base}/item-writers"),
            weights: format!("{base}/item-weights"),
            lineage: format!("{base}/item-lineage"),
            outcomes: format!("{base}/item-outcomes"),
        }
    }

    /// The outcome marker of the update whose token is `token`: an ephemeral node its writer creates in the very
    /// `multi` that commits the update, so that a writer whose reply was lost knows exactly whether it landed (the
    /// node exists) or not, however many other versions landed meanwhile. The writer deletes it once it knows; one
    /// left behind goes with the writer's session.
    pub fn outcome(&self, token: &str) -> String {
        format!("{}/{token}", self.outcomes)
    }

    /// An item's lock directory (`<path>/locks/<name>`, see `crate::layout`).
    pub fn lock_dir(&self, name: &str) -> String {
        format!("{}/locks/{name}", self.base)
    }

    /// A weight table's index node.
    pub fn table(&self, tag: &str) -> String {
        format!("{}/{tag}", self.weights)
    }

    /// A weight table chunk's node, by its name.
    pub fn table_chunk(&self, name: &str) -> String {
        format!("{}/{name}", self.weights)
    }

    /// An item's lineage node.
    pub fn lineage_node(&self, name: &str) -> String {
        format!("{}/{name}", self.lineage)
    }

    /// The base set's child for an item name.
    pub fn item(&self, name: &str) -> String {
        format!("{}/{name}", self.node)
    }

    pub fn change(&self, tag: &str) -> String {
        format!("{}/{tag}", self.changes)
    }

    pub fn additions(&self, tag: &str) -> String {
        format!("{}/{tag}/add", self.changes)
    }

    pub fn removals(&self, tag: &str) -> String {
        format!("{}/{tag}/remove", self.changes)
    }

    pub fn lease(&self, tag: &str) -> String {
        format!("{}/{tag}", self.writers)
    }
}

/// One consistent read of the set's nodes (a read `multi`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRead {
    /// The header's data and znode data version; `None` if `<path>/items` does not exist.
    pub header: Option<(Vec<u8>, i32)>,
    /// The base set's children (empty when `listed` has them).
    pub children: Vec<String>,
    /// The base set's children already parsed, as a member keeps them between reads ([`SetCache`]): for a `ready`
    /// header, of its kind, in place of `children`.
    ///
    /// [`SetCache`]: cache::SetCache
    pub listed: Option<Arc<Listed>>,
    /// For an `applying` header: the change's additions and removals, if they were read along.
    pub change: Option<(Vec<String>, Vec<String>)>,
    /// For a header with a change under way: whether its writer's lease exists, if it was read along.
    pub lease: Option<bool>,
    /// For a header that names a weight table: its chunks, if its index and they were all read (after the rest), or
    /// why its index is not one.
    pub weights: Option<Result<Table, String>>,
}

/// A set's children as items of its kind: what [`parse_names`] makes of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub kind: Kind,
    /// Sorted, without duplicates.
    pub items: Vec<Item>,
    /// The children that are not items of the kind, sorted.
    pub skipped: Vec<String>,
}

impl Listed {
    pub fn parse(kind: Kind, children: impl IntoIterator<Item = String>) -> Listed {
        let mut names: Vec<String> = children.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        let (items, skipped) = parse_names(kind, names);
        Listed { kind, items, skipped }
    }

    /// Applies a change that removed the children `removed` and then created `added` (node names), as its `multi`
    /// did; `false` (and nothing changed) unless each removed one was there and each added one then was not.
    pub fn apply(&mut self, removed: &[String], added: &[String]) -> bool {
        let (gone, mut gone_skipped) = parse_names(self.kind, removed.iter().cloned());
        let (new, mut new_skipped) = parse_names(self.kind, added.iter().cloned());
        gone_skipped.sort_unstable();
        new_skipped.sort_unstable();
        let applies = distinct(&gone)
            && distinct(&new)
            && distinct(&gone_skipped)
            && distinct(&new_skipped)
            && gone.iter().all(|i| self.items.binary_search(i).is_ok())
            && gone_skipped.iter().all(|n| self.skipped.binary_search(n).is_ok())
            && new.iter().all(|i| self.items.binary_search(i).is_err() || gone.binary_search(i).is_ok())
            && new_skipped
                .iter()
                .all(|n| self.skipped.binary_search(n).is_err() || gone_skipped.binary_search(n).is_ok());
        if applies {
            self.items.retain(|i| gone.binary_search(i).is_err());
            self.skipped.retain(|n| gone_skipped.binary_search(n).is_err());
            merge_sorted(&mut self.items, new);
            merge_sorted(&mut self.skipped, new_skipped);
        }
        applies
    }
}

/// Whether a sorted list has no element twice.
fn distinct<T: Ord>(sorted: &[T]) -> bool {
    sorted.windows(2).all(|pair| pair[0] < pair[1])
}

/// Merges `more` (sorted, none in `into`) into `into` (sorted): one pass, not an insert each.
fn merge_sorted<T: Ord>(into: &mut Vec<T>, more: Vec<T>) {
    if more.is_empty() {
        return;
    }
    let old = std::mem::take(into);
    into.reserve(old.len() + more.len());
    let (mut old, mut more) = (old.into_iter().peekable(), more.into_iter().peekable());
    loop {
        let next = match (old.peek(), more.peek()) {
            (Some(a), Some(b)) if a < b => old.next(),
            (Some(_), Some(_)) | (None, Some(_)) => more.next(),
            (Some(_), None) => old.next(),
            (None, None) => break,
        };
        into.extend(next);
    }
}

/// What a read says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetView {
    /// No set: `<path>/items` does not exist, or is being created or deleted.
    Missing { unfinished: Option<Unfinished> },
    /// The header cannot be read (written by something else).
    Unreadable(String),
    /// The read does not hold what the header asks for (an update landed between the reads): read again.
    Torn,
    /// The set in force (boxed: its header can hold a few kilobytes of recorded changes).
    Committed(Box<Committed>),
}

/// The set in force, as a read found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Sorted, without duplicates.
    pub items: Vec<Item>,
    pub version: u64,
    /// Children of the base set that are not items of the set's kind (written by hand): not in the set.
    pub skipped: Vec<String>,
    pub header: Header,
    /// The header's znode data version (what a conditional write of the header expects).
    pub header_version: i32,
    pub unfinished: Option<Unfinished>,
    /// The weights of the items that have one (the others weigh 1), of items in the set only.
    pub weights: BTreeMap<Item, Weight>,
    /// The weight table in force also weighs items that are not in the set: finished ones (a finish leaves the table
    /// alone). The next plain update or lineage change prunes them, so that a name used again weighs 1.
    pub stale_weights: bool,
    /// The weight table in force as read (what the next table can share).
    pub table: Option<Table>,
}

impl Committed {
    /// Whether the item whose node name is `name` is in the set: parsed by the set's kind and searched, not by
    /// rendering every item.
    pub fn holds(&self, name: &str) -> bool {
        parse_names(self.header.kind, [name.to_owned()])
            .0
            .first()
            .is_some_and(|item| self.items.binary_search(item).is_ok())
    }
}

/// An update under way, or abandoned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfinished {
    pub state: State,
    /// Whether its writer's lease exists (`None`: not read).
    pub lease: Option<bool>,
}

impl Unfinished {
    /// Whether its writer is gone: a `staging` or `creating` change is then to be undone, an `applying` one (or a
    /// `deleting` set) to be finished, by anyone.
    pub fn abandoned(&self) -> bool {
        self.lease == Some(false) || matches!(self.state, State::Deleting(_))
    }

    /// What a writer that found this update under way does: recover it at once when its writer is gone, or when it
    /// is one of our own changes (`own`: our tags), found after the reply to its intent was lost; else wait for its
    /// writer (while the writer's lease lives).
    pub fn settle(&self, own: &[String]) -> Settle {
        let own = self.state.change().is_some_and(|tag| own.iter().any(|t| t == tag));
        if own || self.abandoned() { Settle::Recover } else { Settle::WaitForWriter }
    }

    /// What recovering it means, with the header as read now (in `state`): only the change found is recovered;
    /// anything else is a newer state, for whoever reads it next.
    pub fn recovery(&self, state: &State) -> Recovery {
        if *state != self.state {
            return Recovery::Nothing;
        }
        match state {
            State::Ready | State::Absent => Recovery::Nothing,
            State::Staging(tag) => Recovery::Undo(tag.clone()),
            State::Applying(tag) => Recovery::Finish(tag.clone()),
            State::Creating(tag) => Recovery::UndoCreation { tag: tag.clone(), say_deleting: true },
            State::Deleting(tag) => Recovery::UndoCreation { tag: tag.clone(), say_deleting: false },
        }
    }
}

/// What a writer does about an update found under way ([`Unfinished::settle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Wait until the header changes or the writer's lease goes.
    WaitForWriter,
    /// Recover it now ([`Unfinished::recovery`]).
    Recover,
}

/// How an update whose writer is gone is recovered ([`Unfinished::recovery`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The header moved on (or nothing is under way): nothing to do.
    Nothing,
    /// A change being staged: back to `ready` at the same version (the writer's staging requests check the
    /// header's version, so none lands after it), then its staging is cleared.
    Undo(String),
    /// A change being applied: finish applying it.
    Finish(String),
    /// A creation: say `deleting` first (`say_deleting`; that fences the writer's requests), delete the children,
    /// then say `absent`.
    UndoCreation { tag: String, say_deleting: bool },
}

impl fmt::Display for Unfinished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = self.state.change().unwrap_or_default();
        match self.lease {
            Some(false) => write!(f, "{} change {tag}, whose writer is gone", self.state.name()),
            _ => write!(f, "{} change {tag}", self.state.name()),
        }
    }
}

/// What the reads needed to interpret a header: the change's lists (for `applying`), the lease (for a change under
/// way).
pub fn wants(header: &Header) -> (Option<&str>, Option<&str>) {
    let lists = match &header.state {
        State::Applying(tag) => Some(tag.as_str()),
        _ => None,
    };
    (lists, header.state.change())
}

/// Interprets a read.
pub fn interpret(read: RawRead) -> SetView {
    let Some((data, header_version)) = read.header else { return SetView::Missing { unfinished: None } };
    let header = match Header::parse(&data) {
        Ok(header) => header,
        Err(reason) => return SetView::Unreadable(reason),
    };
    let (lists, lease) = wants(&header);
    if lists.is_some() && read.change.is_none()
        || lease.is_some() && read.lease.is_none()
        || header.weights.is_some() && read.weights.is_none()
    {
        return SetView::Torn;
    }
    let unfinished = header.state.change().map(|_| Unfinished { state: header.state.clone(), lease: read.lease });
    let creating_read = crate::sabotage::breaks(crate::sabotage::Sabotage::CreatingReadAsCommitted);
    if header.state == State::Absent
        || matches!(header.state, State::Creating(_) | State::Deleting(_)) && !creating_read
    {
        return SetView::Missing { unfinished };
    }
    let (items, skipped) = match read.listed {
        // Parsed already (a member's bridged read).
        Some(listed) if header.state == State::Ready && listed.kind == header.kind => {
            (listed.items.clone(), listed.skipped.clone())
        }
        _ => parse_children(&header, read.children, read.change),
    };
    let table = match read.weights.filter(|_| header.weights.is_some()) {
        None => None,
        Some(Ok(table)) => Some(table),
        Some(Err(reason)) => return SetView::Unreadable(format!("its weight table: {reason}")),
    };
    let (weights, stale_weights) = match table.as_ref().map(|table| parse_table(table, header.kind, &items)) {
        None => (BTreeMap::new(), false),
        Some(Ok(parsed)) => parsed,
        Some(Err(reason)) => return SetView::Unreadable(format!("its weight table: {reason}")),
    };
    SetView::Committed(Box::new(Committed {
        items,
        version: header.version,
        skipped,
        header,
        header_version,
        unfinished,
        weights,
        stale_weights,
        table,
    }))
}

/// The base set's `children` as items of the header's kind, with an `applying` change's lists applied.
fn parse_children(
    header: &Header,
    children: Vec<String>,
    change: Option<(Vec<String>, Vec<String>)>,
) -> (Vec<Item>, Vec<String>) {
    let mut names: BTreeSet<String> = children.into_iter().collect();
    let change = if crate::sabotage::breaks(crate::sabotage::Sabotage::ApplyingReadAsBase) { None } else { change };
    if let (State::Applying(_), Some((adds, removes))) = (&header.state, change) {
        names.extend(adds);
        for name in &removes {
            names.remove(name);
        }
    }
    parse_names(header.kind, names)
}

/// The weights a table's chunks give the items of `items` (sorted), and whether it has lines of other items (skipped).
/// A line naming an item twice: the later one counts.
pub fn parse_table(table: &Table, kind: Kind, items: &[Item]) -> Result<(BTreeMap<Item, Weight>, bool), String> {
    let mut others = false;
    let mut chunks = Vec::with_capacity(table.chunks.len());
    for chunk in &table.chunks {
        let lines = chunk.lines(kind)?;
        others |= lines.others;
        chunks.push(lines);
    }
    let lines = || chunks.iter().flat_map(|lines| &lines.entries);
    if lines().is_sorted_by(|a, b| a.0 < b.0) && items.is_sorted() {
        // A table this crate wrote (each item once, in order): one walk along the set, and a map built from sorted
        // keys in one pass.
        let mut weights = Vec::with_capacity(chunks.iter().map(|lines| lines.entries.len()).sum());
        let mut set = items.iter().peekable();
        for (item, weight) in lines() {
            while set.next_if(|&i| i < item).is_some() {}
            match set.peek() {
                Some(&i) if i == item => weights.push((item.clone(), weight.clone())),
                _ => others = true,
            }
        }
        return Ok((weights.into_iter().collect(), others));
    }
    let mut weights = BTreeMap::new();
    for (item, weight) in lines() {
        match items.binary_search(item) {
            // A line naming an item again replaces the earlier one.
            Ok(_) => _ = weights.insert(item.clone(), weight.clone()),
            Err(_) => others = true,
        }
    }
    Ok((weights, others))
}

/// Item names as items of `kind`, sorted; names that are not such items come back apart.
pub fn parse_names(kind: Kind, names: impl IntoIterator<Item = String>) -> (Vec<Item>, Vec<String>) {
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for name in names {
        match kind {
            Kind::Str => items.push(Item::Str(name)),
            Kind::Int => match parse_name(kind, &name) {
                Some(item) => items.push(item),
                None => skipped.push(name),
            },
        }
    }
    items.sort_unstable();
    (items, skipped)
}

/// The item of `kind` named `name`, if it is one. Only the canonical rendering of an integer (`7`, `-7`, `0`; not
/// `07`, `+7` or `-0`) names one.
pub fn parse_name(kind: Kind, name: &str) -> Option<Item> {
    match kind {
        Kind::Str => Some(Item::Str(name.to_owned())),
        Kind::Int => {
            let digits = name.strip_prefix('-').unwrap_or(name);
            let canonical = digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" && digits.len() == name.len() || !digits.is_empty() && !digits.starts_with('0'));
            canonical.then(|| name.parse().ok().map(Item::Int)).flatten()
        }
    }
}

pub mod cache;
pub mod delta;
#[cfg(test)]
mod tests;
