//! Key distributions of the YCSB family: uniform, scrambled Zipfian, latest.

use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// Zipfian constant of YCSB's default request distribution.
pub const YCSB_ZIPF_THETA: f64 = 0.99;

/// How keys are drawn from `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipfian with exponent `theta`, popular items scattered over the key space by hashing
    /// (YCSB's "scrambled Zipfian").
    Zipfian {
        /// Skew (0.99 in YCSB).
        theta: f64,
    },
    /// Recently inserted keys most likely (YCSB's "latest"): `n - 1 - zipf`.
    Latest {
        /// Skew.
        theta: f64,
    },
}

impl KeyDist {
    /// YCSB's default Zipfian.
    pub const ZIPFIAN: KeyDist = KeyDist::Zipfian {
        theta: YCSB_ZIPF_THETA,
    };
    /// YCSB's "latest".
    pub const LATEST: KeyDist = KeyDist::Latest {
        theta: YCSB_ZIPF_THETA,
    };

    /// Draws a key in `0..n` (`n > 0`).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R, n: u64) -> u64 {
        debug_assert!(n > 0);
        match *self {
            KeyDist::Uniform => rng.random_range(0..n),
            KeyDist::Zipfian { theta } => fnv1a(zipf_rank(rng, n, theta)) % n,
            KeyDist::Latest { theta } => n - 1 - zipf_rank(rng, n, theta).min(n - 1),
        }
    }
}

/// A Zipf rank in `0..n` (0 the most popular).
fn zipf_rank<R: Rng + ?Sized>(rng: &mut R, n: u64, theta: f64) -> u64 {
    match Zipf::new(n as f64, theta) {
        Ok(zipf) => (zipf.sample(rng) as u64).saturating_sub(1).min(n - 1),
        Err(_) => 0,
    }
}

/// 64-bit FNV-1a of the key's bytes (YCSB scrambles Zipfian ranks with FNV).
pub fn fnv1a(value: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for byte in value.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn samples_stay_in_range_and_zipfian_is_skewed() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let n = 1000;
        let mut counts = vec![0u32; n as usize];
        for _ in 0..100_000 {
            for dist in [KeyDist::Uniform, KeyDist::LATEST] {
                assert!(dist.sample(&mut rng, n) < n);
            }
            counts[KeyDist::ZIPFIAN.sample(&mut rng, n) as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top_ten: u32 = sorted[..10].iter().sum();
        assert!(
            top_ten > 25_000,
            "top 1% of keys got only {top_ten} of 100000 draws"
        );
    }

    #[test]
    fn latest_favours_the_newest_keys() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let newest = (0..10_000)
            .filter(|_| KeyDist::LATEST.sample(&mut rng, 1000) >= 990)
            .count();
        assert!(newest > 3_000, "{newest}");
    }
}
