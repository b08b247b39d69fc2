//! Sizing requests: how many creates and deletes fit one `multi` under ZooKeeper's limits, and the splitting of a
//! large update's paths into such `multi`s.

use proto::set_layout::SetPaths;

/// Operations per `multi` (each a create or a delete of one item) ...
pub(crate) const CHUNK_OPS: usize = 1000;
/// ... and bytes of paths per `multi`, far below ZooKeeper's 1 MB packet limit (`jute.maxbuffer`).
const CHUNK_BYTES: usize = 512 * 1024;

/// `<dir>/<name>` for each name.
pub(super) fn paths_of(dir: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|name| format!("{dir}/{name}")).collect()
}

/// Whether an update's creates and deletes, with the header's write, fit one request of `chunk` operations.
pub(super) fn fits_one_request(paths: &SetPaths, chunk: usize, adds: &[String], removes: &[String]) -> bool {
    let ops = adds.len() + removes.len() + 1;
    let bytes: usize = adds.iter().chain(removes).map(|name| paths.node.len() + name.len() + 17).sum();
    ops <= chunk && bytes <= CHUNK_BYTES
}

/// Splits paths into `multi`s of at most `chunk` operations and [`CHUNK_BYTES`] (leaving room for one more operation
/// each); at least one (possibly empty) chunk.
pub(super) fn chunks(paths: &[String], chunk: usize) -> Vec<&[String]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, path) in paths.iter().enumerate() {
        if index > start && (index - start >= chunk - 1 || bytes + path.len() > CHUNK_BYTES) {
            chunks.push(&paths[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += path.len() + 16;
    }
    chunks.push(&paths[start..]);
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_both_limits() {
        let paths: Vec<String> = (0..2500).map(|i| format!("/p/items/{i}")).collect();
        let sizes: Vec<usize> = chunks(&paths, CHUNK_OPS).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [999, 999, 502]);
        let long: Vec<String> = (0..3).map(|_| "x".repeat(300 * 1024)).collect();
        assert_eq!(chunks(&long, CHUNK_OPS).len(), 3);
        assert_eq!(chunks(&[], CHUNK_OPS).len(), 1);
        assert_eq!(chunks(&paths[..5], 3).iter().map(|c| c.len()).collect::<Vec<_>>(), [2, 2, 1]);
        let set = SetPaths::new("/p");
        assert!(fits_one_request(&set, CHUNK_OPS, &paths[..999], &[]));
        assert!(!fits_one_request(&set, CHUNK_OPS, &paths[..999], &paths[..1]));
    }
}
