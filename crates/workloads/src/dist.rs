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

    /// Chi-square statistic of `draws` rank samples against `P(rank i) = (i+1)^-theta / H`,
    /// the Zipfian law YCSB's generator follows (ranks from 0, rank 0 the most popular).
    fn chi_square_against_the_formula(n: u64, theta: f64, draws: u32, seed: u64) -> f64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            counts[zipf_rank(&mut rng, n, theta) as usize] += 1;
        }
        let weights: Vec<f64> = (1..=n).map(|i| (i as f64).powf(-theta)).collect();
        let total: f64 = weights.iter().sum();
        counts
            .iter()
            .zip(&weights)
            .map(|(&count, &weight)| {
                let expected = f64::from(draws) * weight / total;
                (f64::from(count) - expected).powi(2) / expected
            })
            .sum()
    }

    /// The rank generator follows the Zipfian formula for the theta it is given, not some
    /// other skew: on 20 ranks (19 degrees of freedom, whose chi-square 99.9th percentile is
    /// 43.8) the statistic against its own theta stays below 45, and rank 0's share is the
    /// formula's `1/H` for each theta (a generator that ignored theta would fail one).
    #[test]
    fn zipf_ranks_follow_the_formula_for_their_theta() {
        let (n, draws) = (20, 200_000);
        for (seed, theta) in [(3, YCSB_ZIPF_THETA), (4, 0.5)] {
            let own = chi_square_against_the_formula(n, theta, draws, seed);
            assert!(own < 45.0, "theta {theta}: chi-square {own}");
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut rank0 = [0u32; 2];
        for _ in 0..draws {
            rank0[0] += u32::from(zipf_rank(&mut rng, n, YCSB_ZIPF_THETA) == 0);
            rank0[1] += u32::from(zipf_rank(&mut rng, n, 0.5) == 0);
        }
        // P(rank 0) is 1/H: 0.2745 at theta 0.99 and 0.1317 at 0.5 over 20 ranks.
        let share = |count: u32| f64::from(count) / f64::from(draws);
        assert!(
            (share(rank0[0]) - 0.2745).abs() < 0.005,
            "{}",
            share(rank0[0])
        );
        assert!(
            (share(rank0[1]) - 0.1317).abs() < 0.005,
            "{}",
            share(rank0[1])
        );
    }

    /// Scrambling spreads the popular ranks over the key space (the hottest key is not key 0
    /// or its neighbours, as an unscrambled Zipfian would make it) while keeping the skew:
    /// the hottest key of 1000 gets rank 0's share or more (collisions can only add).
    #[test]
    fn scrambled_zipfian_keeps_the_skew_and_moves_the_hot_keys() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let n = 1000;
        let draws = 100_000;
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            counts[KeyDist::ZIPFIAN.sample(&mut rng, n) as usize] += 1;
        }
        let (hottest, &top) = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, count)| **count)
            .expect("keys");
        assert_eq!(
            hottest as u64,
            fnv1a(0) % n,
            "rank 0 lands where FNV puts it"
        );
        assert!(hottest > 10, "hottest key {hottest} not scattered");
        let h: f64 = (1..=n).map(|i| (i as f64).powf(-YCSB_ZIPF_THETA)).sum();
        let rank0 = f64::from(draws) / h;
        assert!(f64::from(top) > 0.95 * rank0, "{top} vs {rank0}");
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
