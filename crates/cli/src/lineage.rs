//! The lineage trees, as `zkp items lineage` and `zkp inspect --shared-set` print them: text, one tree per root, a
//! child under each of its parents; or JSON.

use std::collections::BTreeSet;

use serde_json::json;
use zk_partitioner::{
    Item,
    shared_set::{ItemLineage, Lineage, LineageStatus},
};

/// One line per item, indented under its parent: `shard-2  ready, closed`.
pub fn trees(lineage: &Lineage) -> String {
    let mut text = String::new();
    let mut shown = BTreeSet::new();
    for root in lineage.roots() {
        branch(lineage, root, 0, &mut shown, &mut text);
    }
    text
}

fn branch(lineage: &Lineage, item: &Item, depth: usize, shown: &mut BTreeSet<Item>, text: &mut String) {
    let Some(place) = lineage.get(item) else { return };
    let again = !shown.insert(item.clone());
    let merge = if place.parents.len() > 1 { format!(" (merge of {})", names(&place.parents)) } else { String::new() };
    text.push_str(&format!("{}{item}  {}{merge}\n", "  ".repeat(depth), status(place)));
    // A merge's child is printed under each parent; its subtree only once.
    if again {
        return;
    }
    for child in &place.children {
        branch(lineage, child, depth + 1, shown, text);
    }
}

/// `ready`, `ready, closed`, `waiting on a, b`, `finished by m1 (token 42)`.
pub fn status(place: &ItemLineage) -> String {
    let closed = if place.closed { ", closed" } else { "" };
    match &place.status {
        LineageStatus::Ready => format!("ready{closed}"),
        LineageStatus::Waiting { on } => format!("waiting on {}{closed}", names(on)),
        LineageStatus::Finished { by, token } => format!("finished by {by} (token {token})"),
        other => format!("{other:?}"),
    }
}

fn names(items: &[Item]) -> String {
    items.iter().map(Item::to_string).collect::<Vec<_>>().join(", ")
}

/// `{"version": 7, "roots": [...], "items": {"shard-2": {"parents": [...], "children": [...], "closed": true,
/// "status": "ready" | "waiting" | "finished", "waiting_on": [...], "finished_by": "m1", "token": 42}}}`.
pub fn to_json(lineage: &Lineage) -> serde_json::Value {
    let strings = |items: &[Item]| items.iter().map(Item::to_string).collect::<Vec<_>>();
    let items: serde_json::Map<String, serde_json::Value> = lineage
        .items
        .iter()
        .map(|(item, place)| {
            let mut entry = json!({
                "parents": strings(&place.parents),
                "children": strings(&place.children),
                "closed": place.closed,
            });
            let fields = match &place.status {
                LineageStatus::Ready => json!({"status": "ready"}),
                LineageStatus::Waiting { on } => json!({"status": "waiting", "waiting_on": strings(on)}),
                LineageStatus::Finished { by, token } => {
                    json!({"status": "finished", "finished_by": by, "token": token.get()})
                }
                other => json!({"status": format!("{other:?}")}),
            };
            if let (Some(entry), serde_json::Value::Object(fields)) = (entry.as_object_mut(), fields) {
                entry.extend(fields);
            }
            (item.to_string(), entry)
        })
        .collect();
    let roots: Vec<String> = lineage.roots().map(Item::to_string).collect();
    json!({"version": lineage.version, "roots": roots, "items": items})
}
