//! Out-of-line values for any [`PersistentMap`]: the inner map holds, per key, the pointer
//! to a separately allocated value object, as PMDK's tree maps (`btree_map`, `rbtree_map`)
//! hold a `PMEMoid` per item and a program allocates the value it inserts.
//!
//! Persistent layout (little-endian, byte offsets):
//!
//! ```text
//! header (24 B)                       value object (value_size B)
//!   0  magic      u64 "FROOLMP1"        0  value  [u8; value_size]
//!   8  value_size u64
//!  16  map        ptr (inner map, 8-byte values: the value objects' pointers)
//! ```
//!
//! An upsert looks the key up: an existing key's value object is overwritten in place; a
//! new key gets a new value object, written whole, and the inner map its pointer. A remove
//! frees the value object. Invariants (checked by `check`): the inner map's invariants, and
//! every value pointer is a distinct live object.

use crate::btree::BTree;
use crate::dist::KeyDist;
use crate::map::{MapWorkload, UpdateStyle};
use crate::{Params, PersistentMap};
use std::collections::{BTreeMap, HashSet};
use std::marker::PhantomData;
use tx::{PPtr, Tx, TxError, TxResult};

/// Map `M` with its values out of line (a marker type; a map is identified by its header).
#[derive(Debug)]
pub struct OutOfLine<M: PersistentMap>(PhantomData<M>);

/// Silo's B+tree benchmark (uniform keys, upserts) with values out of the leaves, as
/// PMDK's `btree_map` keeps them: a leaf entry is a key and a pointer.
pub fn silo_btree_out_of_line(params: Params) -> MapWorkload<OutOfLine<BTree>> {
    MapWorkload::new(params, UpdateStyle::Upsert, KeyDist::Uniform)
}

const MAGIC: u64 = u64::from_le_bytes(*b"FROOLMP1");
const H_MAGIC: u64 = 0;
const H_VALUE_SIZE: u64 = 8;
const H_MAP: u64 = 16;
const HEADER_SIZE: usize = 24;
/// Largest value size accepted (guards allocations sized from PM content).
const MAX_VALUE_SIZE: u64 = 1 << 20;

enum Header {}
enum ValueObj {}

fn corrupt(what: impl std::fmt::Display) -> TxError {
    TxError::Corrupted(format!("out-of-line map: {what}"))
}

/// The header's fields, read with one access.
struct Table {
    value_size: usize,
    map: PPtr,
}

impl Table {
    fn open<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<Table> {
        let header = map.cast::<Header>();
        let mut buf = [0u8; HEADER_SIZE];
        tx.read(header, 0, &mut buf)?;
        let word = |at: u64| {
            let at = at as usize;
            u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
        };
        if word(H_MAGIC) != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let value_size = word(H_VALUE_SIZE);
        if value_size > MAX_VALUE_SIZE {
            return Err(corrupt(format_args!("value size {value_size}")));
        }
        let map = PPtr::from_word(word(H_MAP));
        tx.check(map)?;
        Ok(Table {
            value_size: value_size as usize,
            map,
        })
    }

    fn check_len(&self, len: usize) -> TxResult<()> {
        if len == self.value_size {
            Ok(())
        } else {
            Err(TxError::abort(format_args!(
                "out-of-line map: value of {len} bytes for {}-byte values",
                self.value_size
            )))
        }
    }

    /// The value object of `key`, if the key is present.
    fn lookup<M: PersistentMap, T: Tx>(
        &self,
        tx: &mut T,
        key: u64,
    ) -> TxResult<Option<PPtr<ValueObj>>> {
        let mut word = [0u8; 8];
        if !M::get(tx, self.map, key, &mut word)? {
            return Ok(None);
        }
        let object = PPtr::from_word(u64::from_le_bytes(word));
        tx.check(object)?;
        Ok(Some(object))
    }
}

impl<M: PersistentMap> PersistentMap for OutOfLine<M> {
    const NAME: &'static str = M::NAME;
    const ORDERED: bool = M::ORDERED;

    fn create<T: Tx>(tx: &mut T, capacity: u64, value_size: u32) -> TxResult<PPtr> {
        if u64::from(value_size) > MAX_VALUE_SIZE {
            return Err(TxError::abort(format_args!(
                "out-of-line map: value size {value_size}"
            )));
        }
        let map = M::create(tx, capacity, 8)?;
        let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
        let mut buf = [0u8; HEADER_SIZE];
        buf[..8].copy_from_slice(&MAGIC.to_le_bytes());
        buf[8..16].copy_from_slice(&u64::from(value_size).to_le_bytes());
        buf[16..].copy_from_slice(&map.word().to_le_bytes());
        tx.write(header, 0, &buf)?;
        Ok(header.cast())
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        table.check_len(value.len())?;
        match table.lookup::<M, T>(tx, key)? {
            Some(object) => {
                tx.read(object, 0, value)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        table.check_len(value.len())?;
        if let Some(object) = table.lookup::<M, T>(tx, key)? {
            tx.write(object, 0, value)?;
            return Ok(false);
        }
        let object: PPtr<ValueObj> = tx.alloc(value.len() as u64)?;
        tx.write(object, 0, value)?;
        M::put(tx, table.map, key, &object.word().to_le_bytes())?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        let Some(object) = table.lookup::<M, T>(tx, key)? else {
            return Ok(false);
        };
        M::remove(tx, table.map, key)?;
        tx.free(object)?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        let table = Table::open(tx, map)?;
        let pointers = M::scan(tx, table.map, start, count)?;
        let mut out = Vec::with_capacity(pointers.len());
        for (key, word) in pointers {
            let word: [u8; 8] = word
                .as_slice()
                .try_into()
                .map_err(|_| corrupt("inner value is not a pointer"))?;
            let object: PPtr<ValueObj> = PPtr::from_word(u64::from_le_bytes(word));
            tx.check(object)?;
            let mut value = vec![0u8; table.value_size];
            tx.read(object, 0, &mut value)?;
            out.push((key, value));
        }
        Ok(out)
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        let table = Table::open(tx, map)?;
        M::len(tx, table.map)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        let table = Table::open(tx, map).map_err(|e| e.to_string())?;
        let pointers = M::check(tx, table.map)?;
        let mut seen = HashSet::new();
        let mut content = BTreeMap::new();
        for (key, word) in pointers {
            let word: [u8; 8] = word
                .as_slice()
                .try_into()
                .map_err(|_| format!("out-of-line map: key {key} holds no pointer"))?;
            let object: PPtr<ValueObj> = PPtr::from_word(u64::from_le_bytes(word));
            tx.check(object).map_err(|e| e.to_string())?;
            if !seen.insert(object.word()) {
                return Err(format!(
                    "out-of-line map: key {key} shares its value object"
                ));
            }
            let mut value = vec![0u8; table.value_size];
            tx.read(object, 0, &mut value).map_err(|e| e.to_string())?;
            content.insert(key, value);
        }
        Ok(content)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Workload;
    use tx::{Engine, MemEngine};

    fn workload() -> MapWorkload<OutOfLine<BTree>> {
        silo_btree_out_of_line(Params {
            keys: 300,
            value_size: 64,
            update_percent: 100,
            threads: 1,
            seed: 7,
            locks_at_one_thread: false,
        })
    }

    #[test]
    fn upserts_match_the_model_and_keep_values_out_of_the_leaves() {
        let engine = MemEngine::new(16 << 20);
        let w = workload();
        w.setup(&engine).expect("setup");
        let mut model = w.initial_model();
        for index in 0..2_000 {
            w.run_op(&engine, 0, index).expect("op");
            w.apply_to_model(&mut model, 0, index);
        }
        assert_eq!(w.check(&engine).expect("consistent"), model);
        // The inner tree holds 8-byte pointers, each to a 64-byte object with the value.
        engine
            .read_only(|tx| {
                let root = crate::root_link(tx)?;
                let table = Table::open(tx, root)?;
                let pointers = BTree::check(tx, table.map).map_err(TxError::Corrupted)?;
                assert!(pointers.values().all(|p| p.len() == 8));
                let (key, _) = pointers.iter().next().expect("not empty");
                let object = table.lookup::<BTree, _>(tx, *key)?.expect("present");
                let mut value = vec![0u8; 64];
                tx.read(object, 0, &mut value)?;
                assert_eq!(Some(&value), model.get(key));
                Ok::<_, TxError>(())
            })
            .expect("read");
    }

    #[test]
    fn removes_free_the_value_and_bad_headers_are_corruption() {
        let engine = MemEngine::new(4 << 20);
        let map = engine
            .transaction(|tx| {
                let map = OutOfLine::<BTree>::create(tx, 16, 64)?;
                OutOfLine::<BTree>::put(tx, map, 5, &[1u8; 64])?;
                Ok::<_, TxError>(map)
            })
            .expect("create");
        engine
            .transaction(|tx| {
                assert!(OutOfLine::<BTree>::remove(tx, map, 5)?);
                assert!(!OutOfLine::<BTree>::remove(tx, map, 5)?);
                assert_eq!(OutOfLine::<BTree>::len(tx, map)?, 0);
                tx.write_u64(map, H_MAGIC, 0)?;
                assert!(matches!(
                    OutOfLine::<BTree>::len(tx, map),
                    Err(TxError::Corrupted(_))
                ));
                Ok::<_, TxError>(())
            })
            .expect("remove");
    }
}
