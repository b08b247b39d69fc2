//! How checkpoints are stored: a checkpoint node's data (a header naming its writer, then the user's bytes) and which
//! generation of checkpoint nodes is in force ([`generation`]). Below both the checkpoint writer
//! ([`checkpoint`](crate::checkpoint)) and the shared set's export and import of progress, which read and write the
//! same nodes.

pub(crate) mod generation;

/// The largest checkpoint accepted by a save, in bytes (512 KiB): ZooKeeper keeps every node in memory and sends it
/// whole, and refuses packets over `jute.maxbuffer` (1 MiB by default), so checkpoints are meant to be small (an
/// offset, a cursor, a token), not data.
pub const MAX_CHECKPOINT_SIZE: usize = 512 * 1024;

/// The header's first word and format version.
const MAGIC: &str = "zkp-checkpoint 1";

/// A checkpoint node's data: the header line (the writer's token and name), then the user's bytes.
pub(crate) fn blob(token: i64, writer: &str, data: &[u8]) -> Vec<u8> {
    let mut blob = format!("{MAGIC} {token} {writer}\n").into_bytes();
    blob.extend_from_slice(data);
    blob
}

/// A checkpoint node's data, parsed: the writer's token and name, and the user's bytes.
pub(crate) fn parse_blob(blob: &[u8]) -> Result<(i64, String, &[u8]), &'static str> {
    let newline = blob.iter().position(|&b| b == b'\n').ok_or("no header line")?;
    let header = std::str::from_utf8(&blob[..newline]).map_err(|_| "the header is not UTF-8")?;
    let rest = header.strip_prefix(MAGIC).and_then(|rest| rest.strip_prefix(' ')).ok_or(
        "the header does not start with \"zkp-checkpoint 1\" (not written by this crate, or by a newer version)",
    )?;
    let (token, writer) = rest.split_once(' ').ok_or("the header has no writer")?;
    let token: i64 = token.parse().map_err(|_| "the header's token is not a number")?;
    Ok((token, writer.to_owned(), &blob[newline + 1..]))
}
