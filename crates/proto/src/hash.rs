//! The two hashes the crate's digests, chunk cuts and placements are built from: FNV-1a (64-bit) and SplitMix64's
//! finalizer. Members on different machines and versions compare what they compute from them, so neither may ever
//! change.

/// FNV-1a's starting state.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's multiplier.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// SplitMix64's increment (2^64 / φ, odd).
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// FNV-1a continued from the state `hash` over `bytes` (from [`FNV_OFFSET`]: the hash of `bytes`). Inlined: the
/// partition functions call it in their inner loops, from other modules.
#[inline]
pub fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// SplitMix64's finalizer: every bit of the result depends on every bit of `z` (FNV alone mixes its last bytes
/// poorly).
#[inline]
pub fn finish(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_values() {
        // FNV-1a 64 of "a" (the reference implementation's test vector) and SplitMix64's first output for seed 0.
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b""), FNV_OFFSET);
        assert_eq!(finish(GOLDEN_GAMMA), 0xe220_a839_7b1d_cdaf);
    }
}
