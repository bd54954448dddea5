//! Synthetic traces resembling the paper's micro-benchmarks (for tests, sanity runs and
//! calibration before real traces exist). Each core works on its own data region, as the
//! paper's one-instance-per-thread setup does; values are tracked so every store carries its
//! true old bytes (traces are value-consistent, which crash checks rely on).

use crate::util::SplitMix64;
use serde::{Deserialize, Serialize};
use trace::{Encoder, Event, Trace, TraceMeta};

/// Which synthetic workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SynthKind {
    /// Swap two random 64 B elements word by word (key word differs, the 7 payload words are
    /// mostly equal across elements, so most word stores are silent, like the paper's Array).
    ArraySwap,
    /// Hash-table-like update: read a bucket header and a short chain, rewrite one 64 B node
    /// (8 words) and update the header's count and a per-bucket version word.
    HashUpdate,
}

/// Parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SynthSpec {
    /// Workload.
    pub kind: SynthKind,
    /// Streams (one per core).
    pub cores: usize,
    /// Transactions per core.
    pub tx_per_core: u64,
    /// 64 B elements per core.
    pub elements: u64,
    /// Non-memory instructions before each transaction and between its reads and writes.
    pub compute: u32,
    /// Seed.
    pub seed: u64,
}

/// One core's memory image, for producing true old values.
struct Region {
    base: u64,
    words: Vec<u64>,
}

impl Region {
    fn addr(&self, index: usize) -> u64 {
        self.base + 8 * index as u64
    }

    fn store(&mut self, out: &mut Encoder, index: usize, value: u64) {
        out.push(&Event::Store {
            addr: self.addr(index),
            size: 8,
            old: self.words[index],
            new: value,
        });
        self.words[index] = value;
    }
}

/// Builds the trace.
pub fn synth_trace(spec: &SynthSpec) -> Trace {
    let mut trace = Trace::new(TraceMeta {
        workload: format!("synthetic-{}", kind_name(spec.kind)),
        params: serde_json::to_value(spec).expect("spec serialises"),
    });
    for core in 0..spec.cores {
        let mut rng =
            SplitMix64::new(spec.seed ^ (core as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
        let mut out = Encoder::default();
        match spec.kind {
            SynthKind::ArraySwap => array_swap(spec, core, &mut rng, &mut out),
            SynthKind::HashUpdate => hash_update(spec, core, &mut rng, &mut out),
        }
        trace.add_stream(core as u32, out);
    }
    trace
}

fn kind_name(kind: SynthKind) -> &'static str {
    match kind {
        SynthKind::ArraySwap => "array-swap",
        SynthKind::HashUpdate => "hash-update",
    }
}

fn region(core: usize, words: usize) -> Region {
    Region {
        base: (core as u64 + 1) << 34,
        words: vec![0; words],
    }
}

fn array_swap(spec: &SynthSpec, core: usize, rng: &mut SplitMix64, out: &mut Encoder) {
    let n = spec.elements.max(2);
    let mut mem = region(core, n as usize * 8);
    for e in 0..n as usize {
        mem.words[e * 8] = e as u64 + 1;
        for w in 1..8 {
            // Payloads repeat across elements: swapping rewrites them with equal values.
            mem.words[e * 8 + w] = if rng.chance(0.05) {
                rng.next_u64()
            } else {
                w as u64
            };
        }
    }
    for _ in 0..spec.tx_per_core {
        let i = rng.below(n) as usize;
        let j = (i + 1 + rng.below(n - 1) as usize) % n as usize;
        out.push(&Event::Compute {
            instructions: spec.compute,
        });
        out.push(&Event::TxBegin);
        for e in [i, j] {
            out.push(&Event::Load {
                addr: mem.addr(e * 8),
                size: 64,
            });
        }
        out.push(&Event::Compute {
            instructions: spec.compute / 4,
        });
        for w in 0..8 {
            let (a, b) = (mem.words[i * 8 + w], mem.words[j * 8 + w]);
            mem.store(out, i * 8 + w, b);
            mem.store(out, j * 8 + w, a);
        }
        out.push(&Event::TxEnd);
    }
}

fn hash_update(spec: &SynthSpec, core: usize, rng: &mut SplitMix64, out: &mut Encoder) {
    let nodes = spec.elements.max(4) as usize;
    let buckets = (nodes / 4).max(1);
    // Node words first, then per bucket a header word (count) and a version word, 4 buckets
    // per 64 B line of headers.
    let mut mem = region(core, nodes * 8 + buckets * 2);
    let header = |b: usize| nodes * 8 + b * 2;
    for w in mem.words.iter_mut() {
        *w = rng.next_u64() >> 8;
    }
    for _ in 0..spec.tx_per_core {
        let b = rng.below(buckets as u64) as usize;
        let chain = 1 + rng.below(3) as usize;
        out.push(&Event::Compute {
            instructions: spec.compute,
        });
        out.push(&Event::TxBegin);
        out.push(&Event::Load {
            addr: mem.addr(header(b)),
            size: 16,
        });
        let mut node = 0;
        for _ in 0..chain {
            node = rng.below(nodes as u64) as usize;
            out.push(&Event::Load {
                addr: mem.addr(node * 8),
                size: 64,
            });
        }
        out.push(&Event::Compute {
            instructions: spec.compute / 4,
        });
        for w in 0..8 {
            let v = rng.next_u64();
            mem.store(out, node * 8 + w, v);
        }
        let count = mem.words[header(b)].wrapping_add(1);
        mem.store(out, header(b), count);
        let version = mem.words[header(b) + 1].wrapping_add(1);
        mem.store(out, header(b) + 1, version);
        out.push(&Event::TxEnd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_value_consistent() {
        for kind in [SynthKind::ArraySwap, SynthKind::HashUpdate] {
            let t = synth_trace(&SynthSpec {
                kind,
                cores: 2,
                tx_per_core: 200,
                elements: 64,
                compute: 10,
                seed: 7,
            });
            for s in 0..2 {
                let mut last = std::collections::HashMap::new();
                for e in t.events(s) {
                    if let Event::Store { addr, old, new, .. } = e
                        && let Some(prev) = last.insert(addr, new)
                    {
                        assert_eq!(prev, old, "old bytes are the previous new bytes");
                    }
                }
            }
        }
    }
}
