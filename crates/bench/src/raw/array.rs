//! Silo's Array swap on the raw reference: element `i` is at `data + i * element_size`;
//! a swap logs both new elements in one record (see [`super::log`]).

use super::log::{RawLog, record_len};
use super::{Durability, Geometry, Structure};
use pmem::{Persist, Pool, Region, WriteClass};
use tx::TxResult;
use workloads::array::{ElementFill, swap_pair};
use workloads::{OpKind, Params};

/// Elements up to this size are swapped through stack buffers.
const STACK_ELEMENT: usize = 128;
/// Bytes written per store while loading the elements.
const LOAD_CHUNK: usize = 64 << 10;

/// The raw Array: `params.keys` elements of `params.value_size` bytes, initially as the
/// Array workload fills them ([`ElementFill::Random`]).
#[derive(Debug)]
pub struct RawArray<P: Persist> {
    pool: Pool<P>,
    params: Params,
    geometry: Geometry,
    log: RawLog,
    durability: Durability,
}

/// Where an array of `params` goes in `arena`, with about `log_bytes` of log.
pub(crate) fn plan(arena: Region, params: &Params, log_bytes: u64) -> TxResult<Geometry> {
    let size = params.value_size as usize;
    let record = record_len([size, size]);
    Geometry::plan(arena, (params.keys, size as u64), record, log_bytes)
}

impl<P: Persist> RawArray<P> {
    fn plan(pool: &Pool<P>, params: &Params, log_bytes: u64) -> TxResult<Geometry> {
        plan(pool.arena(), params, log_bytes)
    }

    /// Lays the array out in `pool`'s arena and loads its elements, durably.
    pub fn format(
        pool: Pool<P>,
        params: &Params,
        durability: Durability,
        log_bytes: u64,
    ) -> TxResult<Self> {
        let geometry = Self::plan(&pool, params, log_bytes)?;
        let pm = pool.pm();
        geometry.format(pm, Structure::Array);
        let (size, mut chunk) = (params.value_size, Vec::with_capacity(LOAD_CHUNK));
        let mut at = geometry.data.offset;
        for i in 0..params.keys {
            chunk.extend_from_slice(&ElementFill::Random.element(i, size));
            if chunk.len() >= LOAD_CHUNK || i + 1 == params.keys {
                pm.write(at, &chunk, WriteClass::User);
                at += chunk.len() as u64;
                chunk.clear();
            }
        }
        pm.persist(geometry.data.offset, geometry.data.len);
        Self::open(pool, params, durability, log_bytes)
    }

    /// Opens the array of `pool` (recovery: replays the newest intact record).
    pub fn open(
        pool: Pool<P>,
        params: &Params,
        durability: Durability,
        log_bytes: u64,
    ) -> TxResult<Self> {
        let geometry = Self::plan(&pool, params, log_bytes)?;
        geometry.verify(pool.pm(), Structure::Array)?;
        let log = RawLog::recover(
            pool.pm(),
            geometry.log.offset,
            geometry.slot_len,
            geometry.slots(),
            geometry.data,
        )?;
        Ok(RawArray {
            pool,
            params: params.clone(),
            geometry,
            log,
            durability,
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// Whether operations are made durable.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn at(&self, element: u64) -> u64 {
        self.geometry.data.offset + element * self.geometry.item_len
    }

    /// Operation `index`: swaps the two elements the Array workload's operation `index` of
    /// thread 0 swaps.
    pub fn swap(&self, index: u64) -> OpKind {
        let Some((a, b)) = swap_pair(&self.params, 0, index) else {
            return OpKind::Read;
        };
        let size = self.geometry.item_len as usize;
        let mut stack = [0u8; 2 * STACK_ELEMENT];
        let mut heap = Vec::new();
        let buffers = if size <= STACK_ELEMENT {
            &mut stack[..2 * size]
        } else {
            heap.resize(2 * size, 0);
            &mut heap[..]
        };
        let (first, second) = buffers.split_at_mut(size);
        let pm = self.pool.pm();
        let (at_a, at_b) = (self.at(a), self.at(b));
        pm.read(at_a, first);
        pm.read(at_b, second);
        self.log
            .commit(pm, self.durability, &[(at_a, second), (at_b, first)]);
        OpKind::ReadModifyWrite
    }

    /// The elements, in order.
    pub fn content(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.geometry.data.len as usize];
        self.pool.pm().read(self.geometry.data.offset, &mut bytes);
        bytes
    }

    /// Checks that the elements are exactly the initial ones with the swaps of operations
    /// `0..indexes` applied, as the Array workload's model has them (a permutation alone
    /// would also be the content of a run whose swaps were lost).
    pub fn check_after(&self, indexes: u64) -> Result<(), String> {
        let size = self.params.value_size as usize;
        let mut expected: Vec<u8> = (0..self.params.keys)
            .flat_map(|i| ElementFill::Random.element(i, self.params.value_size))
            .collect();
        if size > 0 {
            for index in 0..indexes {
                if let Some((a, b)) = swap_pair(&self.params, 0, index) {
                    let (low, high) = (a.min(b) as usize * size, a.max(b) as usize * size);
                    let (head, tail) = expected.split_at_mut(high);
                    head[low..low + size].swap_with_slice(&mut tail[..size]);
                }
            }
        }
        if self.content() != expected {
            return Err(format!(
                "raw array: the elements differ from the model of the {indexes} swaps run"
            ));
        }
        Ok(())
    }

    /// Checks that the elements are a permutation of the initial ones (what recovery from a
    /// crash at an unknown operation can promise).
    pub fn check(&self) -> Result<(), String> {
        let size = self.params.value_size as usize;
        if size == 0 {
            return Ok(());
        }
        let content = self.content();
        let mut found: Vec<&[u8]> = content.chunks_exact(size).collect();
        let initial: Vec<Vec<u8>> = (0..self.params.keys)
            .map(|i| ElementFill::Random.element(i, self.params.value_size))
            .collect();
        let mut expected: Vec<&[u8]> = initial.iter().map(Vec::as_slice).collect();
        found.sort_unstable();
        expected.sort_unstable();
        if found != expected {
            return Err("raw array: the elements are not a permutation of the initial ones".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::LAYOUT;
    use crashsim::{Config, Scenario, SimMode, SimPm, check};
    use pmem::CreateOptions;

    /// The persistent raw array under the crash simulator.
    struct Swaps {
        params: Params,
        ops: usize,
    }

    const POOL: u64 = 64 << 10;
    /// A small log keeps crash images small (every image is a copy of the pool).
    const LOG: u64 = 1 << 10;

    impl Scenario for Swaps {
        type Model = Vec<u8>;
        type Live = RawArray<SimPm>;

        fn name(&self) -> String {
            "raw array".into()
        }

        fn pool_size(&self) -> u64 {
            POOL
        }

        fn op_count(&self) -> usize {
            self.ops
        }

        fn initial_model(&self) -> Vec<u8> {
            (0..self.params.keys)
                .flat_map(|i| ElementFill::Random.element(i, self.params.value_size))
                .collect()
        }

        fn apply_to_model(&self, model: &mut Vec<u8>, op: usize) {
            let size = self.params.value_size as usize;
            if let Some((a, b)) = swap_pair(&self.params, 0, op as u64) {
                let (a, b) = (a as usize * size, b as usize * size);
                for i in 0..size {
                    model.swap(a + i, b + i);
                }
            }
        }

        fn setup(&self, pm: SimPm) -> RawArray<SimPm> {
            let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, POOL)).expect("format");
            RawArray::format(pool, &self.params, Durability::Persistent, LOG).expect("raw array")
        }

        fn run_op(&self, live: &mut RawArray<SimPm>, op: usize) {
            live.swap(op as u64);
        }

        fn recover(&self, pm: SimPm) -> Result<Vec<u8>, String> {
            let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
            let array = RawArray::open(pool, &self.params, Durability::Persistent, LOG)
                .map_err(|e| e.to_string())?;
            array.check()?;
            Ok(array.content())
        }
    }

    fn params(keys: u64, value_size: u32) -> Params {
        Params {
            keys,
            value_size,
            ..Params::default()
        }
    }

    /// The check after a run holds the content to the swaps that ran: one swap too few or
    /// too many is a well-formed permutation the plain check accepts, and it is rejected.
    #[test]
    fn the_check_after_a_run_sees_a_lost_swap() {
        let params = params(16, 24);
        let pool = Pool::format(
            SimPm::new(POOL, Default::default()),
            &CreateOptions::new(LAYOUT, POOL),
        )
        .expect("format");
        let array =
            RawArray::format(pool, &params, Durability::Persistent, LOG).expect("raw array");
        for index in 0..10 {
            array.swap(index);
        }
        array.check_after(10).expect("the swaps that ran");
        array.check().expect("a permutation");
        assert!(array.check_after(9).is_err(), "one swap lost");
        assert!(array.check_after(11).is_err(), "one swap invented");
        assert!(array.check_after(0).is_err(), "no swap applied");
    }

    #[test]
    fn swaps_survive_a_crash_at_every_fence() {
        for (value_size, mode) in [(8, SimMode::Adr), (64, SimMode::Adr), (24, SimMode::Eadr)] {
            let scenario = Swaps {
                params: params(16, value_size),
                ops: 24,
            };
            let report = check(&scenario, &Config::thorough(mode, 7));
            assert!(
                report.passed(),
                "{value_size} B, {mode:?}: {report}\n{:#?}",
                report.failures.first()
            );
            assert!(report.crash_points >= 24, "{report}");
        }
    }

    #[test]
    fn a_pool_of_another_structure_or_version_is_refused() {
        let scenario = Swaps {
            params: params(16, 8),
            ops: 0,
        };
        let array = scenario.setup(SimPm::new(POOL, Default::default()));
        let pm = array.pool().pm().clone();
        let header = array.geometry.log.offset - super::super::HEADER_LEN;
        drop(array);
        let reopen = |pm: &SimPm, params: &Params| {
            let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
            RawArray::open(pool, params, Durability::Persistent, LOG).map(|_| ())
        };
        assert!(reopen(&pm, &params(16, 8)).is_ok());
        assert!(reopen(&pm, &params(16, 16)).is_err(), "another geometry");
        pm.write_u64(header + 8, 2, WriteClass::Meta);
        let error = reopen(&pm, &params(16, 8)).expect_err("version 2");
        assert!(error.to_string().contains("version 2"), "{error}");
    }
}
