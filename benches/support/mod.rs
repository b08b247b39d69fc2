//! What the ZooKeeper-backed benchmarks share: the server's own counters (`mntr`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

/// The server's `mntr` counters, over a 4-letter-word connection of its own (no session, no request counted but the
/// command's own packet).
pub fn mntr(endpoint: &str) -> Result<HashMap<String, String>, String> {
    let mut stream = std::net::TcpStream::connect(endpoint).map_err(|e| format!("mntr: cannot connect: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream.write_all(b"mntr").map_err(|e| format!("mntr: {e}"))?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(|e| format!("mntr: {e}"))?;
    let counters: HashMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    if !counters.contains_key("zk_packets_received") {
        return Err(format!("mntr: unexpected answer (is `mntr` whitelisted?): {text:?}"));
    }
    Ok(counters)
}

pub fn counter_delta(before: &HashMap<String, String>, after: &HashMap<String, String>, key: &str) -> i64 {
    let value = |counters: &HashMap<String, String>| counters.get(key).and_then(|v| v.parse::<i64>().ok());
    match (value(before), value(after)) {
        (Some(before), Some(after)) => after - before,
        _ => -1,
    }
}
