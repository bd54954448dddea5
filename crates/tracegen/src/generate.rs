//! Trace generation: one independent workload instance per simulated core, run unchanged on
//! a [`Recorder`], the cores spread over the host's cores.

use crate::recorder::{CORE_SHIFT, Recorder};
use crate::spec::{
    SiloWorkload, StoreDiscipline, TPCC_CUSTOMERS, TPCC_LINES, TPCC_ORDER_CAPACITY, TraceSpec,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use trace::{Encoder, Event, Trace, TraceMeta};
use tx::{MemEngine, TxError};
use workloads::array::ArrayWorkload;
use workloads::btree::{BTree, PmdkBTree};
use workloads::dist::KeyDist;
use workloads::hash::silo_hash;
use workloads::map::{MapWorkload, UpdateStyle};
use workloads::outofline::{OutOfLine, silo_btree_out_of_line};
use workloads::queue::QueueWorkload;
use workloads::rbtree::{silo_rbtree, silo_rbtree_in_place};
use workloads::tpcc::{TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload};

/// Format of the generator's metadata (`params.generator` in the trace).
pub const GENERATOR: &str = "ferrite-tracegen/2";

/// Operations run per requested transaction before giving up (a workload that never
/// commits would otherwise loop forever); TPC-C rolls back about 1 %.
const MAX_OPS_PER_TRANSACTION: u64 = 4;

/// Why a trace could not be generated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenError {
    /// A parameter is out of range.
    #[error("invalid trace spec: {0}")]
    InvalidSpec(String),
    /// The workload failed on a core.
    #[error("{workload} on core {core}: {error}")]
    Workload {
        /// Workload name.
        workload: &'static str,
        /// Simulated core.
        core: u32,
        /// The error.
        error: TxError,
    },
    /// The host refused the memory of a core's workload instance.
    #[error("core {core}: the host cannot reserve {bytes} bytes for the workload instance")]
    OutOfMemory {
        /// Simulated core.
        core: u32,
        /// Bytes asked for.
        bytes: u64,
    },
    /// The workload kept aborting.
    #[error("{workload} on core {core}: only {committed} of {wanted} transactions committed")]
    Stalled {
        /// Workload name.
        workload: &'static str,
        /// Simulated core.
        core: u32,
        /// Committed transactions.
        committed: u64,
        /// Requested transactions.
        wanted: u64,
    },
}

/// Generates the trace of `spec`, using every host core — as many of them as the host's
/// available memory holds instances of `spec` at once (each thread builds one core's
/// instance: two Array instances of 2^24 keys took 2.0 GB resident together, so two at the
/// 16 GiB limit would need about 32 GiB, more than the 23 GiB of the host it was found on).
pub fn generate(spec: &TraceSpec) -> Result<Trace, GenError> {
    let host = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = threads_within_memory(host, spec.memory_bytes(), available_memory());
    generate_with_threads(spec, threads)
}

/// `host` threads, fewer if `available` bytes (when known) do not hold that many instances
/// of `per_instance` bytes at once; at least one.
pub fn threads_within_memory(host: usize, per_instance: u64, available: Option<u64>) -> usize {
    let fit = match available {
        Some(bytes) if per_instance > 0 => {
            usize::try_from(bytes / per_instance).unwrap_or(usize::MAX)
        }
        _ => usize::MAX,
    };
    host.min(fit).max(1)
}

/// The host's available memory (`MemAvailable` of `/proc/meminfo`), if it can be read.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Generates the trace of `spec` on `threads` host threads (the result does not depend on
/// `threads`: each core's stream is a function of the spec and the core alone).
pub fn generate_with_threads(spec: &TraceSpec, threads: usize) -> Result<Trace, GenError> {
    spec.validate().map_err(GenError::InvalidSpec)?;
    let streams = record_all(spec, threads.clamp(1, spec.cores as usize))?;
    let data_bytes: Vec<u64> = streams.iter().map(|s| s.data_bytes).collect();
    let mut trace = Trace::new(metadata(spec, &data_bytes));
    for (core, stream) in streams.into_iter().enumerate() {
        trace.add_stream(core as u32, stream.encoder);
    }
    Ok(trace)
}

/// One core's recording.
#[derive(Debug)]
pub struct CoreStream {
    /// The events.
    pub encoder: Encoder,
    /// Bytes the workload instance had allocated when setup ended (its data set).
    pub data_bytes: u64,
}

/// Records every core, `threads` at a time; the streams in core order.
fn record_all(spec: &TraceSpec, threads: usize) -> Result<Vec<CoreStream>, GenError> {
    let next = AtomicU32::new(0);
    let results: Mutex<Vec<Option<Result<CoreStream, GenError>>>> =
        Mutex::new((0..spec.cores).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let core = next.fetch_add(1, Ordering::Relaxed);
                    if core >= spec.cores {
                        break;
                    }
                    let stream = record_core(spec, core);
                    results.lock()[core as usize] = Some(stream);
                }
            });
        }
    });
    results
        .into_inner()
        .into_iter()
        .map(|result| result.expect("every core was recorded"))
        .collect()
}

/// Records core `core`: untraced setup, then `spec.transactions` committed transactions.
pub fn record_core(spec: &TraceSpec, core: u32) -> Result<CoreStream, GenError> {
    spec.validate().map_err(GenError::InvalidSpec)?;
    let bytes = spec.memory_bytes();
    let engine = MemEngine::try_new(bytes).map_err(|_| GenError::OutOfMemory { core, bytes })?;
    let recorder = Recorder::new(engine, core, spec.compute).with_discipline(spec.discipline);
    with_workload(spec, core, Runner { spec, recorder })
}

/// Builds the workload of `spec` for `core` and hands it to `runner`.
fn with_workload(spec: &TraceSpec, core: u32, runner: Runner<'_>) -> Result<CoreStream, GenError> {
    let params = Params {
        keys: spec.keys,
        value_size: spec.value_size,
        update_percent: spec.update_percent,
        threads: 1,
        seed: spec.core_seed(core),
        locks_at_one_thread: false,
    };
    // The PMDK discipline runs the variants that store as libpmemobj programs do.
    let in_place = spec.discipline == StoreDiscipline::Pmdk;
    match spec.workload {
        SiloWorkload::Array => runner.run(ArrayWorkload::with_fill(params, spec.fill)),
        SiloWorkload::Btree if in_place => runner.run(MapWorkload::<OutOfLine<PmdkBTree>>::new(
            params,
            UpdateStyle::Upsert,
            KeyDist::Uniform,
        )),
        SiloWorkload::Btree => runner.run(silo_btree_out_of_line(params)),
        SiloWorkload::Hash => runner.run(silo_hash(params)),
        SiloWorkload::Queue => runner.run(QueueWorkload::new(params)),
        SiloWorkload::Rbtree if in_place => runner.run(silo_rbtree_in_place(params)),
        SiloWorkload::Rbtree => runner.run(silo_rbtree(params)),
        SiloWorkload::Ycsb if in_place => {
            runner.run(Ycsb::<OutOfLine<PmdkBTree>>::new(params, YcsbMix::Silo))
        }
        SiloWorkload::Ycsb => runner.run(Ycsb::<OutOfLine<BTree>>::new(params, YcsbMix::Silo)),
        SiloWorkload::Tpcc => {
            let workload = TpccNewOrder::new(tpcc_config(spec, core))
                .and_then(|w| w.with_lines(TPCC_LINES))
                .map_err(GenError::InvalidSpec)?;
            runner.run(workload)
        }
    }
}

/// TPC-C at `spec.keys` items: one warehouse, 10 districts, 3000 customers each.
fn tpcc_config(spec: &TraceSpec, core: u32) -> TpccConfig {
    TpccConfig {
        warehouses: 1,
        districts: 10,
        customers: TPCC_CUSTOMERS,
        items: u32::try_from(spec.keys).unwrap_or(u32::MAX),
        order_capacity: TPCC_ORDER_CAPACITY,
        seed: spec.core_seed(core),
    }
}

/// Runs one core's workload on its recorder.
struct Runner<'a> {
    spec: &'a TraceSpec,
    recorder: Recorder,
}

impl Runner<'_> {
    fn run<W: Workload>(self, workload: W) -> Result<CoreStream, GenError> {
        let (spec, recorder) = (self.spec, self.recorder);
        let core = recorder.core();
        let name = spec.workload.name();
        let failed = |error| GenError::Workload {
            workload: name,
            core,
            error,
        };
        recorder.set_recording(false);
        workload.setup(&recorder).map_err(failed)?;
        let data_bytes = recorder.inner().allocated_bytes();
        recorder.set_recording(true);
        let operations = spec.operations();
        let budget = operations.saturating_mul(MAX_OPS_PER_TRANSACTION);
        let mut index = 0;
        while recorder.transactions() < operations && index < budget {
            workload.run_op(&recorder, 0, index).map_err(failed)?;
            index += 1;
        }
        let committed = recorder.transactions();
        if committed < operations {
            return Err(GenError::Stalled {
                workload: name,
                core,
                committed,
                wanted: operations,
            });
        }
        let encoder = recorder.into_encoder();
        Ok(CoreStream {
            encoder: match spec.ops_per_transaction {
                0 | 1 => encoder,
                k => group_stream(encoder.decode(), k, u64::MAX),
            },
            data_bytes,
        })
    }
}

/// Groups every `ops` consecutive transactions of each stream into one (the inner `TxEnd`,
/// `TxBegin` pairs are dropped: one transaction's write set becomes the union of `ops`
/// operations' stores, as if the operations ran in one transaction) and keeps the first
/// `max_transactions` grouped transactions of each stream. Other metadata is kept; the
/// grouping is recorded in `params.ops_per_transaction`.
///
/// This is how Silo's large-transaction experiment (Fig. 14: write sets of 1× to 16× the
/// log buffer) is built from the ordinary workload traces without generating them again.
pub fn group_transactions(trace: &Trace, ops: u32, max_transactions: u64) -> Trace {
    let mut meta = trace.meta.clone();
    if let serde_json::Value::Object(params) = &mut meta.params {
        params.insert("ops_per_transaction".into(), serde_json::json!(ops));
    }
    let mut out = Trace::new(meta);
    for i in 0..trace.cores() {
        out.add_stream(
            trace.stream_core(i),
            group_stream(trace.events(i), ops, max_transactions),
        );
    }
    out
}

/// One stream with every `ops` transactions grouped (see [`group_transactions`]); a
/// trailing incomplete group is dropped.
fn group_stream(events: impl Iterator<Item = Event>, ops: u32, max_transactions: u64) -> Encoder {
    let ops = ops.max(1);
    let mut out = Encoder::default();
    let mut pending: Vec<Event> = Vec::new();
    let (mut in_group, mut groups) = (0u32, 0u64);
    for event in events {
        if groups >= max_transactions {
            break;
        }
        match event {
            Event::TxBegin if in_group > 0 => {}
            Event::TxEnd => {
                in_group += 1;
                if in_group == ops {
                    pending.push(Event::TxEnd);
                    pending.drain(..).for_each(|e| out.push(&e));
                    in_group = 0;
                    groups += 1;
                }
            }
            other => pending.push(other),
        }
    }
    out
}

/// The trace metadata: the spec, each core's data-set size after setup, and the recorder's
/// rules.
pub fn metadata(spec: &TraceSpec, data_bytes: &[u64]) -> TraceMeta {
    let params = serde_json::json!({
        "generator": GENERATOR,
        "spec": spec,
        "data_bytes_per_core": data_bytes,
        "core_seeds": "seed + core",
        "address_space": format!("core << {CORE_SHIFT} | MemEngine offset (cores never share data)"),
        "traced": "committed transactions after setup: Compute(per_transaction), TxBegin, \
                   per read_raw: Compute(per_access) + one Load per 64 B line, \
                   per write_raw: Compute(per_access) + 8 B-word store pieces with old and new \
                   bytes, TxEnd",
        "not_traced": match spec.discipline {
            StoreDiscipline::WriteMinimal => {
                "setup, aborted transactions, allocation and free (volatile allocator), the \
                 recorder's own read of old bytes"
            }
            StoreDiscipline::Pmdk => {
                "setup, aborted transactions, the recorder's own read of old bytes \
                 (allocation and free store libpmemobj's header and bitmap words)"
            }
        },
        "compute_model": "assumed, not measured: per_access instructions before every access \
                          call, per_transaction instructions before every TxBegin",
    });
    TraceMeta {
        workload: spec.workload.name().to_string(),
        params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_threads_fit_the_available_memory() {
        const GIB: u64 = 1 << 30;
        // Two 16 GiB instances do not fit 23 GiB: one thread at a time.
        assert_eq!(threads_within_memory(2, 16 * GIB, Some(23 * GIB)), 1);
        assert_eq!(threads_within_memory(8, 4 * GIB, Some(23 * GIB)), 5);
        assert_eq!(threads_within_memory(2, 64 << 20, Some(23 * GIB)), 2);
        // Never fewer than one; unknown memory does not limit.
        assert_eq!(threads_within_memory(2, 32 * GIB, Some(GIB)), 1);
        assert_eq!(threads_within_memory(4, 16 * GIB, None), 4);
        assert_eq!(threads_within_memory(0, GIB, None), 1);
    }

    #[test]
    fn the_threads_do_not_change_the_trace() {
        let spec = TraceSpec::new(crate::SiloWorkload::Hash)
            .with_cores(3)
            .with_transactions(20)
            .with_keys(64);
        let one = generate_with_threads(&spec, 1).expect("generates");
        let all = generate(&spec).expect("generates");
        assert_eq!(one.to_bytes(), all.to_bytes());
    }
}
