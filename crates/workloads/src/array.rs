//! Silo's Array micro-benchmark: swaps of two random elements of a large persistent array.
//!
//! Persistent layout (little-endian, byte offsets):
//!
//! ```text
//! header (32 B)                         data (len * element_size B, one allocation)
//!   0  magic        u64 "FRARRAY1"        i * element_size  element i  [u8; element_size]
//!   8  element_size u64
//!  16  len          u64
//!  24  data         ptr
//! ```
//!
//! Each operation swaps two distinct elements chosen uniformly: it reads both and writes both
//! in one transaction. Under external isolation it write-locks the stripes of the two indexes
//! (not the whole array; nothing at one thread). The header is validated at the first
//! operation on an engine, not in every transaction. Invariant: the header matches the parameters, and the elements are a
//! permutation of the initial ones (element `i` starts as [`ElementFill::element`]`(i)`), which
//! a torn swap would break.
//!
//! Element contents come from an [`ElementFill`]: random bytes by default, or (for the Silo
//! traces) [`ElementFill::Sparse`], where element `i` holds `i` in its first word and zeros
//! after it, so a swap rewrites mostly identical words (Silo's Array is ~90 % silent stores).

use crate::locks::StripedLocks;
use crate::validated::ValidatedOnce;
use crate::{OpKind, Params, Workload, op_rng, root_link, set_root_link, value_for};
use rand::Rng;
use std::fmt;
use tx::{Engine, PPtr, Tx, TxError, TxResult};

const MAGIC: u64 = u64::from_le_bytes(*b"FRARRAY1");

const H_MAGIC: usize = 0;
const H_ELEMENT_SIZE: usize = 8;
const H_LEN: usize = 16;
const H_DATA: usize = 24;
const HEADER_SIZE: usize = 32;

/// Bytes of the header block, for sizing a pool before setup (`bench::space`).
pub const HEADER_BYTES: u64 = HEADER_SIZE as u64;

/// Bytes written per setup transaction (keeps each transaction's log within small lanes).
const SETUP_TX_BYTES: usize = 4 << 10;
/// Bytes read per access by the checker.
const CHECK_READ_BYTES: usize = 1 << 20;

enum Header {}
enum Data {}

fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// What the elements initially hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ElementFill {
    /// Element `i` is `value_for(i, 0, element_size)`: random bytes (the default).
    #[default]
    Random,
    /// Element `i` holds `i` (little-endian) in its first 8 bytes and zeros after them:
    /// mostly constant words, as in Silo's Array benchmark.
    Sparse,
}

impl ElementFill {
    /// The initial bytes of element `index` (`size` bytes).
    pub fn element(self, index: u64, size: u32) -> Vec<u8> {
        match self {
            ElementFill::Random => value_for(index, 0, size),
            ElementFill::Sparse => {
                let mut bytes = vec![0u8; size as usize];
                let head = bytes.len().min(8);
                bytes[..head].copy_from_slice(&index.to_le_bytes()[..head]);
                bytes
            }
        }
    }
}

/// The two distinct indexes operation `index` of `thread` swaps in an array of `params.keys`
/// elements (none with fewer than 2), chosen uniformly.
pub fn swap_pair(params: &Params, thread: usize, index: u64) -> Option<(u64, u64)> {
    let len = params.keys;
    if len < 2 {
        return None;
    }
    let mut rng = op_rng(params.seed, thread, index);
    let a = rng.random_range(0..len);
    let b = rng.random_range(0..len - 1);
    Some((a, if b >= a { b + 1 } else { b }))
}

/// The array-swap workload (`params.keys` elements of `params.value_size` bytes).
#[derive(Debug)]
pub struct ArrayWorkload {
    params: Params,
    fill: ElementFill,
    locks: StripedLocks,
    /// The data pointer, from the header validated once per engine.
    data: ValidatedOnce<1>,
}

/// Elements up to this size are swapped through stack buffers (larger ones through the heap).
const STACK_ELEMENT: usize = 128;

/// The array's content: `len` elements of `element_size` bytes, stored flat.
#[derive(Clone, PartialEq, Eq)]
pub struct ArrayModel {
    element_size: usize,
    bytes: Vec<u8>,
}

impl ArrayModel {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len().checked_div(self.element_size).unwrap_or(0)
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Element `i`.
    pub fn element(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.element_size..(i + 1) * self.element_size]
    }

    fn swap(&mut self, a: usize, b: usize) {
        let size = self.element_size;
        let (low, high) = (a.min(b), a.max(b));
        let (head, tail) = self.bytes.split_at_mut(high * size);
        head[low * size..(low + 1) * size].swap_with_slice(&mut tail[..size]);
    }
}

impl fmt::Debug for ArrayModel {
    /// A fingerprint rather than megabytes of elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fingerprint = self.bytes.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        });
        f.debug_struct("ArrayModel")
            .field("elements", &self.len())
            .field("element_size", &self.element_size)
            .field("fnv1a", &format_args!("{fingerprint:#018x}"))
            .finish()
    }
}

/// The header fields, read with one access and checked against the parameters.
struct Array {
    element_size: u64,
    len: u64,
    data: PPtr<Data>,
}

impl Array {
    fn open<T: Tx>(tx: &mut T, params: &Params) -> TxResult<Array> {
        let header = root_link(tx)?.cast::<Header>();
        let mut buf = [0u8; HEADER_SIZE];
        tx.read(header, 0, &mut buf)?;
        let array = Array {
            element_size: word(&buf, H_ELEMENT_SIZE),
            len: word(&buf, H_LEN),
            data: PPtr::from_word(word(&buf, H_DATA)),
        };
        if word(&buf, H_MAGIC) != MAGIC {
            return Err(TxError::Corrupted("array: bad magic".into()));
        }
        if array.element_size != u64::from(params.value_size) || array.len != params.keys {
            return Err(TxError::Corrupted(format!(
                "array: header says {} elements of {} bytes, expected {} of {}",
                array.len, array.element_size, params.keys, params.value_size
            )));
        }
        tx.check(array.data)?;
        Ok(array)
    }

    fn at(&self, index: u64) -> u64 {
        index * self.element_size
    }
}

impl ArrayWorkload {
    /// The workload over `params.keys` elements of `params.value_size` bytes, filled with
    /// random bytes ([`ElementFill::Random`]).
    pub fn new(params: Params) -> Self {
        Self::with_fill(params, ElementFill::Random)
    }

    /// The workload with elements initially filled as `fill` says.
    pub fn with_fill(params: Params, fill: ElementFill) -> Self {
        let stripes = (params.threads.max(1) * 64).min(4096);
        ArrayWorkload {
            locks: StripedLocks::for_workload(&params, stripes),
            params,
            fill,
            data: ValidatedOnce::default(),
        }
    }

    /// How the elements are initially filled.
    pub fn fill(&self) -> ElementFill {
        self.fill
    }

    /// The two distinct indexes operation `index` of `thread` swaps (none with < 2 elements).
    fn pair(&self, thread: usize, index: u64) -> Option<(u64, u64)> {
        swap_pair(&self.params, thread, index)
    }

    fn size(&self) -> usize {
        self.params.value_size as usize
    }

    /// The array's data, from the header validated at the first operation on this engine.
    fn data<T: Tx>(&self, tx: &mut T) -> TxResult<PPtr<Data>> {
        let engine = tx.engine_id();
        if let Some([word]) = self.data.get(engine) {
            return Ok(PPtr::from_word(word));
        }
        let array = Array::open(tx, &self.params)?;
        self.data.set(engine, [array.data.word()]);
        Ok(array.data)
    }

    fn at(&self, index: u64) -> u64 {
        index * u64::from(self.params.value_size)
    }

    /// The elements are a permutation of the initial ones.
    fn check_permutation(&self, model: &ArrayModel) -> Result<(), String> {
        let size = self.size();
        if size == 0 {
            return Ok(());
        }
        let initial = self.initial_model();
        let mut expected: Vec<&[u8]> = initial.bytes.chunks_exact(size).collect();
        let mut found: Vec<&[u8]> = model.bytes.chunks_exact(size).collect();
        expected.sort_unstable();
        found.sort_unstable();
        if expected != found {
            return Err("array: the elements are not a permutation of the initial ones".into());
        }
        Ok(())
    }
}

impl Workload for ArrayWorkload {
    type Model = ArrayModel;

    fn name(&self) -> String {
        "array".into()
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        self.data.forget();
        let (size, len) = (u64::from(self.params.value_size), self.params.keys);
        let bytes = size
            .checked_mul(len)
            .ok_or_else(|| TxError::abort("array: size overflows"))?;
        engine.transaction(|tx| {
            let data: PPtr<Data> = tx.alloc(bytes)?;
            let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
            let mut buf = [0u8; HEADER_SIZE];
            for (at, value) in [
                (H_MAGIC, MAGIC),
                (H_ELEMENT_SIZE, size),
                (H_LEN, len),
                (H_DATA, data.word()),
            ] {
                buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
            tx.write(header, 0, &buf)?;
            set_root_link(tx, header.cast())
        })?;
        let per_tx = (SETUP_TX_BYTES / self.size().max(1)).max(1) as u64;
        let mut first = 0;
        while first < len {
            let end = (first + per_tx).min(len);
            let elements: Vec<u8> = (first..end)
                .flat_map(|i| self.fill.element(i, self.params.value_size))
                .collect();
            engine.transaction(|tx| {
                let array = Array::open(tx, &self.params)?;
                tx.write(array.data, array.at(first), &elements)
            })?;
            first = end;
        }
        Ok(())
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        let Some((a, b)) = self.pair(thread, index) else {
            engine.read_only(|tx| Array::open(tx, &self.params).map(drop))?;
            return Ok(OpKind::Read);
        };
        debug_assert!(
            thread < self.params.threads.max(1),
            "thread {thread} not prepared for"
        );
        let _held = self.locks.write_pair(engine.isolation(), a, b);
        let size = self.size();
        let mut stack = [0u8; 2 * STACK_ELEMENT];
        let mut heap = Vec::new();
        let buffers = if size <= STACK_ELEMENT {
            &mut stack[..2 * size]
        } else {
            heap.resize(2 * size, 0);
            &mut heap[..]
        };
        let (first, second) = buffers.split_at_mut(size);
        engine.transaction(|tx| {
            let data = self.data(tx)?;
            tx.read(data, self.at(a), first)?;
            tx.read(data, self.at(b), second)?;
            tx.write(data, self.at(a), second)?;
            tx.write(data, self.at(b), first)
        })?;
        Ok(OpKind::ReadModifyWrite)
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<ArrayModel, String> {
        let mut bytes = vec![0u8; self.size() * self.params.keys as usize];
        engine
            .read_only(|tx| {
                let array = Array::open(tx, &self.params)?;
                for (i, chunk) in bytes.chunks_mut(CHECK_READ_BYTES).enumerate() {
                    tx.read(array.data, (i * CHECK_READ_BYTES) as u64, chunk)?;
                }
                Ok::<_, TxError>(())
            })
            .map_err(|e| e.to_string())?;
        let model = ArrayModel {
            element_size: self.size(),
            bytes,
        };
        self.check_permutation(&model)?;
        Ok(model)
    }

    fn initial_model(&self) -> ArrayModel {
        ArrayModel {
            element_size: self.size(),
            bytes: (0..self.params.keys)
                .flat_map(|i| self.fill.element(i, self.params.value_size))
                .collect(),
        }
    }

    fn apply_to_model(&self, model: &mut ArrayModel, thread: usize, index: u64) {
        if let Some((a, b)) = self.pair(thread, index) {
            model.swap(a as usize, b as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::MemEngine;

    #[test]
    fn checker_catches_a_torn_swap_and_a_bad_header() {
        let params = Params {
            keys: 100,
            value_size: 16,
            ..Params::default()
        };
        let workload = ArrayWorkload::new(params.clone());
        let engine = MemEngine::new(1 << 20);
        workload.setup(&engine).expect("setup");
        assert_eq!(workload.check(&engine), Ok(workload.initial_model()));
        // Element 1 overwritten by element 0: half a swap.
        engine
            .transaction(|tx| {
                let array = Array::open(tx, &params)?;
                let mut first = vec![0u8; 16];
                tx.read(array.data, array.at(0), &mut first)?;
                tx.write(array.data, array.at(1), &first)
            })
            .expect("corrupt");
        assert!(workload.check(&engine).is_err());
        engine
            .transaction(|tx| {
                let header = root_link(tx)?;
                tx.write_u64(header, H_LEN as u64, 1 << 40)
            })
            .expect("corrupt");
        assert!(workload.check(&engine).is_err());
    }

    #[test]
    fn sparse_fill_keeps_the_checker_and_model_exact() {
        let params = Params {
            keys: 64,
            value_size: 64,
            ..Params::default()
        };
        assert_eq!(
            ArrayWorkload::new(params.clone()).fill(),
            ElementFill::Random
        );
        assert_eq!(ElementFill::Random.element(3, 16), value_for(3, 0, 16));
        let sparse = ElementFill::Sparse.element(0x0102, 64);
        assert_eq!(&sparse[..8], &0x0102u64.to_le_bytes());
        assert!(sparse[8..].iter().all(|&b| b == 0));
        assert_eq!(ElementFill::Sparse.element(0x0102, 1), vec![0x02]);

        let workload = ArrayWorkload::with_fill(params.clone(), ElementFill::Sparse);
        let engine = MemEngine::new(1 << 20);
        workload.setup(&engine).expect("setup");
        let mut model = workload.initial_model();
        assert_eq!(
            model.element(5),
            ElementFill::Sparse.element(5, 64).as_slice()
        );
        for index in 0..50 {
            workload.run_op(&engine, 0, index).expect("swap");
            workload.apply_to_model(&mut model, 0, index);
        }
        assert_eq!(workload.check(&engine), Ok(model));
        // Half a swap: element 1 overwritten by element 0.
        engine
            .transaction(|tx| {
                let array = Array::open(tx, &params)?;
                let mut first = vec![0u8; 64];
                tx.read(array.data, array.at(0), &mut first)?;
                tx.write(array.data, array.at(1), &first)
            })
            .expect("corrupt");
        assert!(workload.check(&engine).is_err());
    }
}
