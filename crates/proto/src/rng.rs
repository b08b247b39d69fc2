//! A seeded random sequence for reproducible fault schedules: the simulation's, and the `testing` kit's
//! (`zk_partitioner_testing::SplitMix64`).

use crate::hash::{GOLDEN_GAMMA, finish};

/// SplitMix64 (Steele, Lea and Flood; the generator `java.util.SplittableRandom` uses): a small seeded random
/// sequence, the same on every machine, for tests that draw their faults from a seed and must replay them exactly.
/// Not for anything that needs unpredictability.
///
/// # Examples
/// SplitMix64's published first outputs for seed 0:
/// ```
/// use zk_partitioner_testing::SplitMix64;
///
/// let mut rng = SplitMix64::new(0);
/// assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
/// assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A sequence starting from `seed`: the same seed draws the same sequence.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next value of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        finish(self.0)
    }

    /// The next value reduced to `[0, n)` (by remainder: a bias of at most `n / 2^64`), e.g. an index into a slice
    /// of length `n`.
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// The next value as a float uniform in `[0, 1)` (its top 53 bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn draws_the_published_sequence() {
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn below_and_unit_are_in_range() {
        let mut rng = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!(rng.below(7) < 7);
            let unit = rng.unit();
            assert!((0.0..1.0).contains(&unit));
        }
    }
}
