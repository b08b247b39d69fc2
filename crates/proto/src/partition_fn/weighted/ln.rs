//! `-ln(h / 2^64)` in integer arithmetic: the exponential variate of a 64-bit hash, the same on every machine.
//!
//! A platform's `f64::ln` may differ from another's in the last bit, and two members that rank an item differently
//! disagree on its owner; so the logarithm is computed here with integers only. The method is the usual one for a
//! table-driven logarithm: normalise the hash to a mantissa `m` in [1, 2), multiply it by a tabulated `r ≈ 1/a` for
//! the interval `a` its top 8 bits select (so `m·r = 1 + z` with `|z| ≤ 2^-9`), and add the tabulated `-ln r` to a
//! four-term series for `ln(1 + z)`. The tables are computed at compile time, also in integers. The absolute error is
//! below 2^-40, which matters only near `h = 2^64` (the best scores), and there it is below one part in 2^30.

/// ln 2 in Q0.64 (0.b17217f7d1cf79ab…), rounded down.
const LN2: u64 = 0xb172_17f7_d1cf_79ab;
/// Bits of the mantissa that select a table entry.
const BITS: u32 = 8;
const ENTRIES: usize = 1 << BITS;

/// Per interval `j` (mantissas `1 + j/256 ..= 1 + (j+1)/256`): `r ≈ 1 / (1 + (j + ½)/256)` in Q0.64 and `-ln r`
/// in Q0.64 (the logarithm of the stored `r`, so that rounding `r` costs no accuracy).
const TABLE: [(u64, u64); ENTRIES] = table();

const fn table() -> [(u64, u64); ENTRIES] {
    let mut out = [(0, 0); ENTRIES];
    let mut j = 0;
    while j < ENTRIES {
        // r = 2^64 × 512 / (512 + 2j + 1): in (2^63, 2^64), so it fits.
        let r = ((1u128 << 64) * 512 / (512 + 2 * j as u128 + 1)) as u64;
        // -ln(r / 2^64) = ln 2 × (1 - log2(2r / 2^64)), and 2r / 2^64 is in [1, 2): r >> 1 is it in Q1.62.
        let log2 = log2_q64((r >> 1) as u128);
        let neg_ln = ((((1u128 << 64) - log2 as u128) * LN2 as u128) >> 64) as u64;
        out[j] = (r, neg_ln);
        j += 1;
    }
    out
}

/// log2 of `x` in Q1.62 (a value in [1, 2)), in Q0.64, bit by bit: squaring doubles the logarithm, and a square of
/// 2 or more means the next bit is 1. 62 bits, the last few inexact from truncation.
const fn log2_q64(mut x: u128) -> u64 {
    let mut result = 0u64;
    let mut bit = 0;
    while bit < 62 {
        x = (x * x) >> 62;
        if x >= 1 << 63 {
            result |= 1 << (63 - bit);
            x >>= 1;
        }
        bit += 1;
    }
    result
}

/// The largest value [`neg_ln`] returns: `64 ln 2` in Q6.58, for a hash of 0.
pub(super) const MAX: u64 = ((64 * LN2 as u128) >> 6) as u64;

/// `-ln(h / 2^64)` in fixed point Q6.58 (at most [`MAX`], about 44.36 × 2^58): an exponential variate when `h` is
/// uniform, decreasing in `h`.
pub(super) fn neg_ln(h: u64) -> u64 {
    if h == 0 {
        return MAX;
    }
    let shift = h.leading_zeros();
    // h = m × 2^(63 - shift), m = mantissa / 2^63 in [1, 2).
    let mantissa = h << shift;
    let (r, neg_ln_r) = TABLE[((mantissa >> (63 - BITS)) as usize) & (ENTRIES - 1)];
    // z = m·r - 1 in Q.64: m·r is within 2^-9 of 1.
    let z = ((u128::from(mantissa) * u128::from(r)) >> 63) as i128 - (1i128 << 64);
    // ln(1 + z) to the fourth power; the next term is below 2^-45. Arithmetic shifts round toward -∞ alike
    // everywhere.
    let z2 = (z * z) >> 64;
    let z3 = (z2 * z) >> 64;
    let z4 = (z3 * z) >> 64;
    let ln_m = i128::from(neg_ln_r) + z - z2 / 2 + z3 / 3 - z4 / 4;
    // -ln(h / 2^64) = 64 ln 2 - ln h = (1 + shift) ln 2 - ln m; never negative beyond rounding, clamped.
    let e = i128::from(1 + shift) * i128::from(LN2) - ln_m;
    (e.max(0) >> 6) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_f64(e: u64) -> f64 {
        e as f64 / (1u64 << 58) as f64
    }

    #[test]
    fn agrees_with_the_float_logarithm() {
        let mut rng = crate::rng::SplitMix64::new(3);
        let mut cases: Vec<u64> = (0..20_000).map(|_| rng.next_u64()).collect();
        // Small hashes (large variates), hashes near 2^64 (the best scores), and the table's interval edges.
        cases.extend((0..64).map(|s| 1u64 << s));
        cases.extend((1..2000).map(|d| u64::MAX - d * 0x1_0000_0001));
        cases.extend((0..ENTRIES as u64).map(|j| (1 << 63) | (j << 55)));
        cases.extend([1, 2, 3, u64::MAX, u64::MAX - 1]);
        for h in cases {
            let exact = -(h as f64 / 2f64.powi(64)).ln();
            let got = as_f64(neg_ln(h));
            // f64 itself carries about 2^-52 relative; the integer result is better than that near 0.
            let tolerance = 1e-11 + exact * 1e-12;
            assert!((got - exact).abs() <= tolerance, "h = {h:#x}: {got} vs {exact}");
        }
        assert_eq!(neg_ln(0), MAX);
        assert!((as_f64(MAX) - 64.0 * std::f64::consts::LN_2).abs() < 1e-12);
    }

    #[test]
    fn the_constants_are_right() {
        assert_eq!(LN2 & !0x7ff, (std::f64::consts::LN_2 * 2f64.powi(64)) as u64, "up to f64's precision");
        // Fixed values: a change to the tables or the series changes every ranking.
        assert!(neg_ln(1 << 63).abs_diff(LN2 >> 6) < 1 << 13, "ln 2 within 2^-45");
        assert_eq!(neg_ln(0x1234_5678_9abc_def0), NEG_LN_GOLDEN);
    }

    /// `neg_ln(0x123456789abcdef0)`, recorded once.
    const NEG_LN_GOLDEN: u64 = 761_940_365_877_651_288;
}
