//! Optional PM latency emulation: extra delay per cache line written back and per fence, as
//! the seeds' DRAM-based PM emulators did (e.g. a few hundred nanoseconds per flushed line).

use crate::cpu::rdtsc;
use serde::Serialize;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Extra nanoseconds charged by the native backend. Zero (the default) disables emulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencyModel {
    /// Added for every cache line written back (flushed, or written non-temporally).
    pub line_writeback_ns: u64,
    /// Added for every fence.
    pub fence_ns: u64,
}

impl LatencyModel {
    /// No added latency.
    pub const NONE: LatencyModel = LatencyModel {
        line_writeback_ns: 0,
        fence_ns: 0,
    };

    /// Whether any delay is configured.
    pub fn is_enabled(&self) -> bool {
        self.line_writeback_ns > 0 || self.fence_ns > 0
    }
}

/// TSC ticks per microsecond, measured once against the monotonic clock.
fn ticks_per_us() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        let window = Duration::from_millis(5);
        let (t0, c0) = (Instant::now(), rdtsc());
        while t0.elapsed() < window {
            std::hint::spin_loop();
        }
        let (elapsed, ticks) = (t0.elapsed(), rdtsc().wrapping_sub(c0));
        let micros = elapsed.as_micros().max(1) as u64;
        (ticks / micros).max(1)
    })
}

/// Busy-waits for about `ns` nanoseconds (the invariant TSC keeps this cheap and precise).
#[inline]
pub fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    let ticks = ns.saturating_mul(ticks_per_us()) / 1000;
    let start = rdtsc();
    while rdtsc().wrapping_sub(start) < ticks {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_waits_at_least_roughly_the_requested_time() {
        let start = Instant::now();
        spin_ns(2_000_000);
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_micros(1_500),
            "waited only {waited:?}"
        );
    }
}
